"""ObjectStoreFileIO against real servers on loopback: moto's S3 server and Azurite.

Every test runs once per store (the ``object_store`` fixture). What the FileIO wrote is
checked with a client independent of it (boto3 for S3, obstore directly for Azure); the
failures stores really produce (throttling, 5xx, a server without conditional writes)
come from a proxy in front of the server that answers some requests itself.
"""

from __future__ import annotations

import io
import pickle
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import obstore
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import (
    CommitNotSupportedError,
    DeltaTable,
    FileIOCommitter,
    InvalidArgumentError,
    ObjectStoreFileIO,
    RetryableFailure,
    StorageAccessError,
    StorageUnavailableError,
    TableLocation,
)
from airflow_delta.engine.storage import object_store as object_store_module
from tests.object_store_helpers import FaultyProxy, ObjectStoreServer, options_via

pytestmark = pytest.mark.slow


def _location(server: ObjectStoreServer, options: dict[str, str] | None = None) -> TableLocation:
    return TableLocation.from_uri(server.uri(), options if options is not None else server.storage_options)


@pytest.fixture
def proxy(object_store: ObjectStoreServer):  # type: ignore[no-untyped-def]
    proxy = FaultyProxy(object_store.endpoint)
    yield proxy
    proxy.close()


def test_a_table_uri_resolves_to_the_object_store_fileio(object_store: ObjectStoreServer) -> None:
    location = _location(object_store)
    assert isinstance(location.io, ObjectStoreFileIO)
    assert location.root.startswith(object_store.bucket + "/table-")
    assert location.log_dir == location.root + "/_delta_log"


# ------------------------------------------------------------------ create-if-absent


def test_put_if_absent_creates_once_and_never_overwrites(object_store: ObjectStoreServer) -> None:
    location = _location(object_store)
    path = f"{location.log_dir}/00000000000000000000.json"
    assert location.io.put_if_absent(path, b"first") is True
    assert location.io.put_if_absent(path, b"second") is False
    assert object_store.read(path.split("/", 1)[1]) == b"first"


def test_the_same_bytes_again_are_the_writers_own_landed_request(object_store: ObjectStoreServer) -> None:
    # A retried request whose first attempt landed: the store says "exists", the bytes are ours.
    location = _location(object_store)
    path = f"{location.log_dir}/00000000000000000001.json"
    assert location.io.put_if_absent(path, b'{"commitInfo":{"txnId":"a"}}\n')
    assert location.io.put_if_absent(path, b'{"commitInfo":{"txnId":"a"}}\n') is True
    assert location.io.put_if_absent(path, b'{"commitInfo":{"txnId":"b"}}\n') is False


def test_writers_racing_for_a_version_exactly_one_wins(object_store: ObjectStoreServer) -> None:
    location = _location(object_store)
    writers, versions = 8, 4
    for version in range(versions):
        path = f"{location.log_dir}/{version:020d}.json"
        barrier = threading.Barrier(writers)

        def attempt(writer: int, path: str = path, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return location.io.put_if_absent(path, f"writer {writer}".encode())

        with ThreadPoolExecutor(writers) as pool:
            won = list(pool.map(attempt, range(writers)))
        assert won.count(True) == 1, f"version {version}: {won}"
        assert object_store.read(path.split("/", 1)[1]) == f"writer {won.index(True)}".encode()


# ------------------------------------------------------------------ listing, reading, writing


def test_listing_metadata_and_reads(object_store: ObjectStoreServer) -> None:
    location = _location(object_store)
    fio, root = location.io, location.root
    fio.write_bytes(f"{root}/a.json", b"0123456789")
    fio.write_bytes(f"{root}/b.json", b"x")
    fio.write_bytes(f"{root}/sub/c.parquet", b"yy")

    not_files: list[str] = []
    listed = fio.list_dir(root, not_files=not_files)
    assert sorted((f.name, f.size) for f in listed) == [("a.json", 10), ("b.json", 1)]
    assert not_files == ["sub"]
    now_ms = time.time() * 1000
    assert all(abs(f.modification_time - now_ms) < 600_000 for f in listed)
    assert sorted(f.path for f in fio.walk(root)) == [f"{root}/a.json", f"{root}/b.json", f"{root}/sub/c.parquet"]
    assert fio.list_dir(f"{root}/missing") == []
    assert list(fio.walk(f"{root}/missing")) == []

    info = fio.info(f"{root}/a.json")
    assert info is not None and info.size == 10 and info.path == f"{root}/a.json"
    assert fio.info(f"{root}/nope.json") is None
    assert fio.exists(f"{root}/a.json") and fio.exists(f"{root}/sub") and not fio.exists(f"{root}/nope")
    assert fio.is_dir(f"{root}/sub") and not fio.is_dir(f"{root}/a.json")

    assert fio.read_bytes(f"{root}/a.json") == b"0123456789"
    assert fio.read_range(f"{root}/a.json", 3, 4) == b"3456"
    with pytest.raises(FileNotFoundError):
        fio.read_bytes(f"{root}/nope.json")
    with pytest.raises(FileNotFoundError):
        fio.open_input_file(f"{root}/nope.json")


@pytest.mark.parametrize(
    ("table_uri", "expected"),
    [
        ("s3://bkt/t", "s3://bkt/t/p=1/f.parquet"),
        ("s3a://bkt/t", "s3://bkt/t/p=1/f.parquet"),
        ("gs://bkt/t", "gs://bkt/t/p=1/f.parquet"),
        ("az://bkt/t", "az://bkt/t/p=1/f.parquet"),
        ("abfss://bkt@acct.dfs.core.windows.net/t", "abfss://bkt@acct.dfs.core.windows.net/t/p=1/f.parquet"),
    ],
)
def test_a_path_becomes_the_uri_of_its_store(table_uri: str, expected: str) -> None:
    location = TableLocation.from_uri(table_uri)
    assert location.io.uri(f"{location.root}/p=1/f.parquet") == expected
    # The URI opens the same table root again.
    assert TableLocation.from_uri(expected.rsplit("/p=1/", 1)[0]).root == location.root


def test_listing_after_a_name_returns_the_tail_of_a_directory(object_store: ObjectStoreServer) -> None:
    location = _location(object_store)
    fio, log_dir = location.io, location.log_dir
    names = [f"{v:020d}.json" for v in range(6)] + [f"{3:020d}.checkpoint.parquet", "_last_checkpoint"]
    for name in names:
        fio.write_bytes(f"{log_dir}/{name}", name.encode())
    fio.write_bytes(f"{log_dir}/_sidecars/{'a' * 8}.parquet", b"s")
    fio.write_bytes(f"{location.root}/part-0.parquet", b"outside the log directory")

    not_files: list[str] = []
    tail = fio.list_dir_after(log_dir, f"{3:020d}", not_files=not_files)
    expected = sorted(n for n in names if n > f"{3:020d}")
    assert sorted(f.name for f in tail) == expected
    assert [f.size for f in sorted(tail, key=lambda f: f.name)] == [len(n) for n in expected]
    assert not_files == ["_sidecars"]
    # The same answer as the whole listing filtered: the tail is all a reader of the latest version lists.
    assert sorted(f.path for f in tail) == sorted(f.path for f in fio.list_dir(log_dir) if f.name > f"{3:020d}")
    assert fio.list_dir_after(f"{location.root}/missing", "0") == []


@pytest.mark.parametrize("whole_object_limit", [2 << 20, 0], ids=["fetched-whole", "ranged-reads"])
def test_parquet_through_input_and_output_files(
    object_store: ObjectStoreServer, monkeypatch: pytest.MonkeyPatch, whole_object_limit: int
) -> None:
    monkeypatch.setattr(object_store_module, "WHOLE_OBJECT_READ_LIMIT", whole_object_limit)
    location = _location(object_store)
    path = f"{location.root}/part-0.parquet"
    table = pa.table({"id": pa.array(range(50_000), pa.int64()), "s": pa.array([str(i) for i in range(50_000)])})
    with location.io.open_output_stream(path) as out:
        pq.write_table(table, out, row_group_size=10_000)
    stored = object_store.read(path.split("/", 1)[1])
    assert pq.read_table(io.BytesIO(stored)).equals(table)  # what the store holds, read by pyarrow alone

    with location.io.open_input_file(path) as f:
        parquet = pq.ParquetFile(f)
        assert parquet.metadata.num_row_groups == 5
        assert parquet.read_row_group(3, columns=["id"]).column("id").to_pylist() == list(range(30_000, 40_000))
    with location.io.open_input_file(path) as f:
        assert pq.read_table(f).equals(table)


def test_atomic_output_publishes_only_complete_objects(object_store: ObjectStoreServer) -> None:
    location = _location(object_store)
    path = f"{location.root}/_delta_log/_last_checkpoint"
    with location.io.atomic_output(path) as out:
        out.write(b'{"version":3}')
    with pytest.raises(RuntimeError), location.io.atomic_output(f"{location.root}/other") as out:
        out.write(b"partial")
        raise RuntimeError("the writer failed")
    assert object_store.keys(object_store.key_of(location.uri)) == [path.split("/", 1)[1]]


def test_delete_many_removes_more_than_one_batch(object_store: ObjectStoreServer) -> None:
    location = _location(object_store)
    store = object_store.raw_store()
    prefix = object_store.key_of(location.uri)
    keys = [f"{prefix}/data/{i:05d}.parquet" for i in range(1010)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda key: obstore.put(store, key, b"x"), keys))
    assert len(location.io.list_dir(f"{location.root}/data")) == 1010  # more than one listing page on S3
    location.io.delete_many([f"{object_store.bucket}/{key}" for key in keys[:1005]])  # two batches
    assert object_store.keys(prefix) == keys[1005:]
    location.io.delete(f"{object_store.bucket}/{keys[-1]}")
    location.io.delete(f"{object_store.bucket}/{keys[-1]}")  # already gone: not an error on object stores
    assert object_store.keys(prefix) == keys[1005:-1]
    # A batch naming keys already gone removes the others all the same.
    location.io.delete_many([f"{object_store.bucket}/{key}" for key in keys[1000:1008]])
    assert object_store.keys(prefix) == keys[1008:-1]


def test_a_table_at_the_root_of_a_bucket(object_store: ObjectStoreServer) -> None:
    bucket = object_store.new_bucket()
    uri = f"{object_store.scheme}://{bucket}"
    table = DeltaTable.create(uri, pa.schema([("id", pa.int64())]), storage_options=object_store.storage_options)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    assert table.root == bucket
    assert sorted(f.name for f in table.io.walk(bucket) if f.name.endswith(".json")) == [f"{0:020d}.json", f"{1:020d}.json"]
    assert table.io.is_dir(f"{bucket}/_delta_log")
    assert DeltaTable(uri, object_store.storage_options).snapshot().to_arrow().column("id").to_pylist() == [1, 2]


# ------------------------------------------------------------------ errors


def test_wrong_credentials_fail_at_once_with_what_to_fix(object_store: ObjectStoreServer, proxy: FaultyProxy) -> None:
    if object_store.kind == "azure":  # Azurite checks the Shared Key signature
        key = object_store.storage_options["AZURE_STORAGE_ACCOUNT_KEY"]
        options = {**object_store.storage_options, "AZURE_STORAGE_ACCOUNT_KEY": key[:-8] + "AAAAAAA="}
    else:  # moto accepts any signature: the proxy answers as S3 does for an unknown access key
        options = options_via(object_store, proxy.endpoint)
        proxy.fail_next(1000, 403, "InvalidAccessKeyId")
    started = time.monotonic()
    with pytest.raises(StorageAccessError) as caught:
        DeltaTable(object_store.uri(), options).version()
    assert time.monotonic() - started < 5, "a refused credential is not retried"
    if object_store.kind == "s3":
        assert proxy.requests == 1
    assert not caught.value.retryable
    assert "credentials were refused" in str(caught.value) and "storage_options" in str(caught.value)


def test_a_missing_bucket_fails_at_once_naming_it(object_store: ObjectStoreServer) -> None:
    uri = f"{object_store.scheme}://no-such-bucket-{object_store.kind}/table"
    started = time.monotonic()
    with pytest.raises(StorageAccessError) as caught:
        DeltaTable(uri, object_store.storage_options).version()
    assert time.monotonic() - started < 5
    assert not caught.value.retryable
    assert f"no-such-bucket-{object_store.kind}" in str(caught.value) and "does not exist" in str(caught.value)


def test_a_refused_request_is_not_retried(object_store: ObjectStoreServer, proxy: FaultyProxy) -> None:
    location = TableLocation.from_uri(object_store.uri(), options_via(object_store, proxy.endpoint))
    proxy.fail_next(1000, 400, "InvalidRequest")
    with pytest.raises(StorageAccessError, match="the request was refused") as caught:
        location.io.read_bytes(f"{location.root}/x.json")
    assert proxy.requests == 1 and not caught.value.retryable


@pytest.mark.parametrize("status", [503, 500, 429, 0], ids=["503", "500", "429", "connection-reset"])
def test_transient_errors_are_retried_with_backoff(object_store: ObjectStoreServer, proxy: FaultyProxy, status: int) -> None:
    location = _location(object_store)
    location.io.write_bytes(f"{location.root}/x.json", b"payload")
    fio = TableLocation.from_uri(location.uri, options_via(object_store, proxy.endpoint)).io
    proxy.fail_next(3, status)
    before = proxy.requests
    started = time.monotonic()
    assert fio.read_bytes(f"{location.root}/x.json") == b"payload"
    assert proxy.requests - before == 4, "three failed attempts, then the one that succeeded"
    assert time.monotonic() - started >= 0.1, "retries wait (backoff) between attempts"
    # A commit too: the conditional put is retried through the failures and lands once.
    proxy.fail_next(2, status)
    assert fio.put_if_absent(f"{location.root}/_delta_log/{0:020d}.json", b"commit") is True
    assert object_store.read(f"{object_store.key_of(location.uri)}/_delta_log/{0:020d}.json") == b"commit"


def test_errors_that_outlast_the_retries_are_retryable_storage_failures(
    object_store: ObjectStoreServer, proxy: FaultyProxy
) -> None:
    location = TableLocation.from_uri(object_store.uri(), options_via(object_store, proxy.endpoint, max_retries="2"))
    proxy.fail_next(1000, 503)
    before = proxy.requests
    with pytest.raises(StorageUnavailableError) as caught:
        location.io.read_bytes(f"{location.root}/x.json")
    assert proxy.requests - before == 3  # the first attempt and max_retries=2 more
    assert caught.value.retryable and isinstance(caught.value, OSError)
    # The committer reports it as a storage failure whose outcome must be checked, not as a conflict.
    response = FileIOCommitter(location).commit(0, b"commit")
    assert isinstance(response, RetryableFailure) and isinstance(response.error, StorageUnavailableError)


def test_a_store_without_conditional_writes_gets_no_commit(object_store: ObjectStoreServer, proxy: FaultyProxy) -> None:
    # An S3-compatible server (or Azure-compatible gateway) that answers conditional puts with
    # 501 Not Implemented: reading works, committing is refused by name, nothing is left behind.
    location = TableLocation.from_uri(object_store.uri(), options_via(object_store, proxy.endpoint))
    proxy.reject_conditional_puts = True
    with pytest.raises(CommitNotSupportedError) as caught:
        DeltaTable.create(location.uri, pa.schema([("id", pa.int64())]), storage_options=options_via(object_store, proxy.endpoint))
    store_name = "S3" if object_store.kind == "s3" else "Azure Blob Storage"
    assert f"{store_name} bucket {object_store.bucket!r} does not support conditional writes" in str(caught.value)
    assert not caught.value.retryable
    assert object_store.keys(object_store.key_of(location.uri) + "/_delta_log/") == []


def test_conditional_writes_switched_off_in_the_options_refuse_commits(s3_server: ObjectStoreServer) -> None:
    options = {**s3_server.storage_options, "AWS_CONDITIONAL_PUT": "disabled"}
    location = TableLocation.from_uri(s3_server.uri(), options)
    with pytest.raises(CommitNotSupportedError, match="aws_conditional_put=disabled"):
        location.io.put_if_absent(f"{location.log_dir}/{0:020d}.json", b"commit")


def test_options_no_store_knows_are_refused_by_name(object_store: ObjectStoreServer) -> None:
    prefix = "AWS" if object_store.kind == "s3" else "AZURE"
    with pytest.raises(InvalidArgumentError, match=f"{prefix.lower()}_no_such_option"):
        DeltaTable(object_store.uri(), {**object_store.storage_options, f"{prefix}_NO_SUCH_OPTION": "1"}).version()


# ------------------------------------------------------------------ contexts on other processes


def _read_in_fresh_process(payload: bytes) -> list[int]:
    import pickle

    from airflow_delta.engine import read_live_rows

    context, files = pickle.loads(payload)
    return sorted(v for i in range(files.num_rows) for v in read_live_rows(context, files.slice(i, 1))[0].column("id").to_pylist())


def test_a_table_context_reads_the_table_in_another_process(object_store: ObjectStoreServer) -> None:
    import multiprocessing as mp

    uri = object_store.uri()
    table = DeltaTable.create(uri, pa.schema([("id", pa.int64())]), storage_options=object_store.storage_options,
                              properties={"delta.enableDeletionVectors": "true"})
    table.append(pa.table({"id": pa.array(range(10), pa.int64())}))
    table.delete("id % 3 = 0")
    snapshot = table.snapshot()
    payload = pickle.dumps((table.context(snapshot), snapshot.add_actions))
    with mp.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_read_in_fresh_process, (payload,)) == [1, 2, 4, 5, 7, 8]


# --------------------------------------------------------------------------- fork


def _version_in_child(uri: str, options: dict[str, str], table: object, results: object) -> None:
    """In the forked child: the version through the parent's table and through a new one, or the error class."""
    from airflow_delta.engine import DeltaError, DeltaTable

    outcome: list[str] = []
    for opened in (table, DeltaTable(uri, options)):
        if opened is None:  # a spawned child has no parent's table
            outcome.append("-")
            continue
        try:
            outcome.append(str(opened.version()))  # type: ignore[attr-defined]
        except DeltaError as error:
            outcome.append(f"{type(error).__name__}: {error}")
    results.put(outcome)  # type: ignore[attr-defined]


def test_a_forked_child_of_a_process_that_used_the_store_fails_fast_with_a_typed_error(
    s3_server: ObjectStoreServer,
) -> None:
    import multiprocessing

    uri = s3_server.uri()
    table = DeltaTable.create(uri, pa.schema([("id", pa.int64())]), storage_options=s3_server.storage_options)
    table.append(pa.table({"id": pa.array([1], pa.int64())}))
    assert table.version() == 1  # this process's obstore runtime is running

    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_version_in_child, args=(uri, s3_server.storage_options, table, results))
    child.start()
    child.join(timeout=60)
    if child.is_alive():  # the old behaviour: the first request waits forever
        child.kill()
        child.join()
        pytest.fail("the forked child hung on its first object-store request")
    outcome = results.get(timeout=5)
    assert child.exitcode == 0
    for reported in outcome:  # the parent's table and a table opened in the child alike
        assert reported.startswith("ObjectStoreForkError: ") and "'spawn'" in reported
    # The parent is unaffected, and a spawned process (a fresh runtime) reads the table.
    assert table.version() == 1
    spawned = multiprocessing.get_context("spawn")
    results = spawned.Queue()
    child = spawned.Process(target=_version_in_child, args=(uri, s3_server.storage_options, None, results))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0
    assert results.get(timeout=5)[1] == "1"
