"""Reads from an S3 server: obstore (the engine's ``ObjectStoreFileIO``) against ``pyarrow.fs.S3FileSystem``.

The FileIO could read through either client; this measures which is faster per kind of
read on the same moto server (started on loopback, see ``object_store_load``), so the
choice is documented by numbers. "ours" is the engine's FileIO over obstore, "theirs"
(the harness's delta-rs column) is pyarrow's S3 filesystem; every read runs on 16
threads, as the engine's log reads do:

* listing a directory of 2,000 objects;
* parquet footers (``pq.read_metadata``) of 40 files of 0.8 MB and of 40 of 5 MB;
* whole objects: 400 commit-sized (2 KB) objects, and 40 whole 5 MB parquet files.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks._harness import Case
from benchmarks.object_store_load import KEY_ID, REGION, SECRET, _start_moto, storage_options

BUCKET = "reads-bench"
SMALL_OBJECTS = 2_000
THREADS = 16


def _parquet(rows: int) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"a": pa.array(range(rows)), "b": pa.array([str(i) for i in range(rows)])})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=50_000)
    return out.getvalue()


def cases() -> list[Case]:
    import boto3
    import obstore
    from obstore.store import S3Store

    endpoint = _start_moto()
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET,
                 region_name=REGION).create_bucket(Bucket=BUCKET)
    store = S3Store(BUCKET, config={"aws_endpoint": endpoint, "aws_access_key_id": KEY_ID,
                                    "aws_secret_access_key": SECRET, "aws_region": REGION},
                    client_options={"allow_http": True})
    uploads = [(f"log/{i:020d}.json", b"x" * 2048) for i in range(SMALL_OBJECTS)]
    for name, rows in (("small", 60_000), ("large", 400_000)):
        data = _parquet(rows)
        uploads += [(f"{name}/{i:03d}.parquet", data) for i in range(40)]
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda item: obstore.put(store, *item), uploads))
    args = (endpoint,)
    return [
        Case("list_2000_objects", "ours_list", "pyarrow_list", args, repeat=5),
        Case("footers_40x0.8MB", "ours_footers_small", "pyarrow_footers_small", args, repeat=5),
        Case("footers_40x5MB", "ours_footers_large", "pyarrow_footers_large", args, repeat=5),
        Case("whole_400x2KB", "ours_whole_small", "pyarrow_whole_small", args, repeat=5),
        Case("whole_40x5MB", "ours_whole_large", "pyarrow_whole_large", args, repeat=3),
    ]


def _ours(endpoint: str) -> Any:
    from airflow_delta.engine import TableLocation

    return TableLocation.from_uri(f"s3://{BUCKET}/", storage_options(endpoint)).io


def _pyarrow(endpoint: str) -> Any:
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(access_key=KEY_ID, secret_key=SECRET, region=REGION,
                             endpoint_override=endpoint.split("://", 1)[1], scheme="http")


def _parallel(function: Any, items: list[str]) -> list[Any]:
    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(function, items))


def _names(prefix: str, count: int, suffix: str) -> list[str]:
    width = 20 if suffix == ".json" else 3
    return [f"{BUCKET}/{prefix}/{i:0{width}d}{suffix}" for i in range(count)]


def ours_list(endpoint: str) -> int:
    listed = _ours(endpoint).list_dir(f"{BUCKET}/log")
    assert len(listed) == SMALL_OBJECTS
    return len(listed)


def pyarrow_list(endpoint: str) -> int:
    import pyarrow.fs as pafs

    listed = _pyarrow(endpoint).get_file_info(pafs.FileSelector(f"{BUCKET}/log"))
    assert len(listed) == SMALL_OBJECTS
    return len(listed)


def _footers(open_file: Any, prefix: str) -> int:
    import pyarrow.parquet as pq

    rows = sum(_parallel(lambda p: pq.read_metadata(open_file(p)).num_rows, _names(prefix, 40, ".parquet")))
    assert rows > 0
    return rows


def ours_footers_small(endpoint: str) -> int:
    return _footers(_ours(endpoint).open_input_file, "small")


def pyarrow_footers_small(endpoint: str) -> int:
    return _footers(_pyarrow(endpoint).open_input_file, "small")


def ours_footers_large(endpoint: str) -> int:
    return _footers(_ours(endpoint).open_input_file, "large")


def pyarrow_footers_large(endpoint: str) -> int:
    return _footers(_pyarrow(endpoint).open_input_file, "large")


def ours_whole_small(endpoint: str) -> int:
    return sum(map(len, _parallel(_ours(endpoint).read_bytes, _names("log", 400, ".json"))))


def pyarrow_whole_small(endpoint: str) -> int:
    fs = _pyarrow(endpoint)
    return sum(map(len, _parallel(lambda p: fs.open_input_stream(p).read(), _names("log", 400, ".json"))))


def ours_whole_large(endpoint: str) -> int:
    return sum(map(len, _parallel(_ours(endpoint).read_bytes, _names("large", 40, ".parquet"))))


def pyarrow_whole_large(endpoint: str) -> int:
    fs = _pyarrow(endpoint)
    return sum(map(len, _parallel(lambda p: fs.open_input_stream(p).read(), _names("large", 40, ".parquet"))))
