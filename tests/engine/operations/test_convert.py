"""CONVERT TO DELTA of real parquet directories written with pyarrow.

The converted tables are read by delta-rs and delta-kernel-rs (never by our own reader
alone) and compared with the rows pyarrow wrote plus the partition values of the
directories; delta-rs's own ``convert_to_deltalake`` of a copy of the same directory is the
reference for the log: the same files, partition values and statistics.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import (
    ConvertSourceError,
    DeltaTable,
    InvalidArgumentError,
    TableAlreadyExistsError,
    TableNotFoundError,
    parse_partition_schema,
)
from tests.oracles import assert_oracles_read, read_with_deltars

REPO_ROOT = Path(__file__).resolve().parents[3]


def _hive(value: Any) -> str:
    """A partition directory value as Hive/Spark write it (``%XX`` escapes, null as the default partition)."""
    if value is None:
        return "__HIVE_DEFAULT_PARTITION__"
    special = set('"#%\'*/:=?\\\x7f{[]^ ') | {chr(c) for c in range(0x20)}
    return "".join(f"%{ord(c):02X}" if c in special and c != " " else c for c in str(value))


def write_hive_dir(root: Path, partitions: list[dict[str, Any]], rows_per_file: int = 3) -> list[dict[str, Any]]:
    """One parquet file per partition below ``root``; returns every row with its partition values."""
    expected: list[dict[str, Any]] = []
    for n, values in enumerate(partitions):
        directory = root.joinpath(*[f"{k}={_hive(v)}" for k, v in values.items()])
        directory.mkdir(parents=True, exist_ok=True)
        ids = [n * 100 + i for i in range(rows_per_file)]
        data = pa.table({
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"n{i}" if i % 3 else None for i in ids], pa.string()),
            "score": pa.array([i / 4 for i in ids], pa.float64()),
        })
        pq.write_table(data, directory / f"part-{n:05d}.parquet")
        expected += [{**row, **values} for row in data.to_pylist()]
    return expected


PARTITIONS = [
    {"day": dt.date(2024, 1, 1), "region": "eu", "bucket": 1},
    {"day": dt.date(2024, 1, 1), "region": "a b/c%d=e", "bucket": 2},
    {"day": dt.date(2024, 2, 29), "region": None, "bucket": 3},
    {"day": dt.date(2024, 2, 29), "region": "eu", "bucket": None},
]
PARTITION_SCHEMA = "day DATE, region STRING, bucket INT"


def _commit_zero(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (path / "_delta_log" / "00000000000000000000.json").read_text().splitlines()]


def test_a_hive_partitioned_directory_converts_and_both_oracles_read_its_rows(tmp_path: Path) -> None:
    expected = write_hive_dir(tmp_path, PARTITIONS)
    (tmp_path / "_SUCCESS").write_text("")  # hidden: skipped, as Delta skips it
    (tmp_path / ".part-00000.parquet.crc").write_bytes(b"crc")

    result = DeltaTable.convert_to_delta(str(tmp_path), PARTITION_SCHEMA)

    assert (result.version, result.num_files, result.partition_columns) == (0, 4, ("day", "region", "bucket"))
    assert_oracles_read(tmp_path, expected)
    actions = _commit_zero(tmp_path)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "CONVERT"
    assert info["operationParameters"] == {
        "numFiles": 4, "partitionedBy": '["day","region","bucket"]', "collectStats": True, "sourceFormat": "parquet",
    }
    assert info["operationMetrics"] == {"numConvertedFiles": "4"}
    adds = {a["add"]["path"]: a["add"] for a in actions if "add" in a}
    escaped = next(a for a in adds.values() if a["partitionValues"]["region"] == "a b/c%d=e")
    assert escaped["partitionValues"] == {"day": "2024-01-01", "region": "a b/c%d=e", "bucket": "2"}
    nulls = [a["partitionValues"] for a in adds.values() if None in a["partitionValues"].values()]
    assert sorted(nulls, key=str) == sorted(
        [{"day": "2024-02-29", "region": None, "bucket": "3"}, {"day": "2024-02-29", "region": "eu", "bucket": None}],
        key=str,
    )


def test_the_log_matches_what_delta_rs_convert_writes_for_the_same_directory(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    # Without the escaped value: delta-rs 1.6.6 logs ``region=a%20b/c%25d=e`` for the directory
    # ``region=a b%2Fc%25d%3De`` (unescaped once too often), a file that does not exist, so its
    # table cannot be read; our path for it is checked in the test above.
    write_hive_dir(ours, [p for p in PARTITIONS if p["region"] != "a b/c%d=e"], rows_per_file=5)
    shutil.copytree(ours, theirs)
    DeltaTable.convert_to_delta(str(ours), PARTITION_SCHEMA)
    deltalake.convert_to_deltalake(
        str(theirs), partition_by=deltalake.Schema.from_arrow(parse_partition_schema(PARTITION_SCHEMA)), partition_strategy="hive"
    )

    def adds(path: Path) -> dict[str, tuple[Any, ...]]:
        """Per file (decoded path): size, partition values and statistics, as the log of version 0 says."""
        return {
            unquote(a["path"]): (a["size"], a["partitionValues"], json.loads(a["stats"]))
            for a in (action["add"] for action in _commit_zero(path) if "add" in action)
        }

    mine, reference = adds(ours), adds(theirs)
    assert {k: v[:2] for k, v in mine.items()} == {k: v[:2] for k, v in reference.items()}
    for path, (_, _, stats) in mine.items():
        expected = reference[path][2]
        assert stats["numRecords"] == expected["numRecords"]
        assert stats["nullCount"] == expected["nullCount"]
        assert stats["minValues"] == expected["minValues"]
        # Float maxima are left out on purpose (footers skip NaN, which Spark ranks above every
        # number); every other maximum is delta-rs's.
        assert stats["maxValues"] == {k: v for k, v in expected["maxValues"].items() if k != "score"}
    assert read_with_deltars(ours) == read_with_deltars(theirs)
    assert deltalake.DeltaTable(str(ours)).schema() == deltalake.DeltaTable(str(theirs)).schema()


def test_files_with_different_column_sets_merge_by_name_and_read_nulls_where_a_column_is_missing(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": [1, 2], "a": ["x", "y"]}), tmp_path / "one.parquet")
    (tmp_path / "nested").mkdir()
    pq.write_table(pa.table({"id": [3], "b": [Decimal("1.50")]}), tmp_path / "nested" / "two.parquet")

    result = DeltaTable.convert_to_delta(str(tmp_path))

    assert result.schema.names == ["id", "b", "a"]  # merged in path order: nested/two.parquet, one.parquet
    assert_oracles_read(tmp_path, [
        {"id": 1, "a": "x", "b": None}, {"id": 2, "a": "y", "b": None}, {"id": 3, "a": None, "b": Decimal("1.50")},
    ])


def test_no_statistics_writes_adds_without_stats(tmp_path: Path) -> None:
    expected = write_hive_dir(tmp_path, PARTITIONS[:2])
    DeltaTable.convert_to_delta(str(tmp_path), PARTITION_SCHEMA, collect_stats=False)
    adds = [a["add"] for a in _commit_zero(tmp_path) if "add" in a]
    assert len(adds) == 2 and all("stats" not in a for a in adds)
    assert _commit_zero(tmp_path)[0]["commitInfo"]["operationParameters"]["collectStats"] is False
    assert_oracles_read(tmp_path, expected)


def test_a_partition_column_whose_name_starts_with_an_underscore_is_not_hidden(tmp_path: Path) -> None:
    (tmp_path / "_p=1").mkdir()
    pq.write_table(pa.table({"id": [1, 2]}), tmp_path / "_p=1" / "f.parquet")
    (tmp_path / "_tmp").mkdir()
    (tmp_path / "_tmp" / "junk.txt").write_text("not parquet, and hidden")
    DeltaTable.convert_to_delta(str(tmp_path), {"_p": "int"})
    assert_oracles_read(tmp_path, [{"id": 1, "_p": 1}, {"id": 2, "_p": 1}])


# ------------------------------------------------------------------ refusals: nothing written


def _assert_no_log(path: Path) -> None:
    assert not (path / "_delta_log").exists()
    assert not [p for p in path.iterdir() if p.name.startswith(".airflow-delta-convert-")]


def test_a_delta_table_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    write_hive_dir(tmp_path, PARTITIONS[:1])
    DeltaTable.convert_to_delta(str(tmp_path), PARTITION_SCHEMA)
    before = (tmp_path / "_delta_log" / "00000000000000000000.json").read_bytes()

    with pytest.raises(TableAlreadyExistsError):
        DeltaTable.convert_to_delta(str(tmp_path), PARTITION_SCHEMA)

    assert sorted(p.name for p in (tmp_path / "_delta_log").iterdir() if p.suffix == ".json") == [
        "00000000000000000000.json"
    ]
    assert (tmp_path / "_delta_log" / "00000000000000000000.json").read_bytes() == before


def test_a_file_that_is_not_parquet_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    write_hive_dir(tmp_path, PARTITIONS[:1])
    stray = tmp_path / "day=2024-01-01" / "region=eu" / "bucket=1" / "notes.csv"
    stray.write_text("a,b\n1,2\n")
    with pytest.raises(ConvertSourceError, match=r"notes\.csv.*not a parquet file") as info:
        DeltaTable.convert_to_delta(str(tmp_path), PARTITION_SCHEMA)
    assert not info.value.retryable
    _assert_no_log(tmp_path)


def test_files_whose_column_types_differ_are_refused_naming_the_column_and_both_files(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": pa.array(["1"], pa.string())}), tmp_path / "b.parquet")
    with pytest.raises(ConvertSourceError, match=r"column 'id' is int64 in 'a.parquet' but string in 'b.parquet'"):
        DeltaTable.convert_to_delta(str(tmp_path))
    _assert_no_log(tmp_path)


@pytest.mark.parametrize(
    ("layout", "schema", "message"),
    [
        ("year=2024/f.parquet", None, "no partition schema was given"),
        ("year=2024/f.parquet", "year INT, region STRING", "expected 2 partition directories"),
        ("region=eu/year=2024/f.parquet", "year INT, region STRING", "is not partition column 'year'"),
        ("f.parquet", "year INT", "expected 1 partition directory"),
        ("year=20x4/f.parquet", "year INT", r"cannot be read as int32|not all of type int32"),
        ("year=2024/plain/f.parquet", "year INT", "expected 1 partition directory"),
    ],
)
def test_partition_directories_that_do_not_match_the_schema_are_refused(
    tmp_path: Path, layout: str, schema: str | None, message: str
) -> None:
    target = tmp_path / layout
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [1]}), target)
    with pytest.raises(ConvertSourceError, match=message):
        DeltaTable.convert_to_delta(str(tmp_path), schema)
    _assert_no_log(tmp_path)


def test_a_partition_column_that_is_also_in_the_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "id=1").mkdir()
    pq.write_table(pa.table({"id": [1]}), tmp_path / "id=1" / "f.parquet")
    with pytest.raises(ConvertSourceError, match="also columns inside the data files"):
        DeltaTable.convert_to_delta(str(tmp_path), "id INT")
    _assert_no_log(tmp_path)


def test_an_empty_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "_SUCCESS").write_text("")
    with pytest.raises(ConvertSourceError, match="no parquet files"):
        DeltaTable.convert_to_delta(str(tmp_path))
    _assert_no_log(tmp_path)


def test_a_file_instead_of_a_directory_is_refused(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": [1]}), tmp_path / "f.parquet")
    with pytest.raises(ConvertSourceError, match="not a directory"):
        DeltaTable.convert_to_delta(str(tmp_path / "f.parquet"))
    _assert_no_log(tmp_path)


@pytest.mark.parametrize("spec", ["year", "year INTERVAL", "year INT region STRING", 42])
def test_a_bad_partition_schema_is_an_argument_error(tmp_path: Path, spec: Any) -> None:
    pq.write_table(pa.table({"id": [1]}), tmp_path / "f.parquet")
    with pytest.raises(InvalidArgumentError, match="partition_schema"):
        DeltaTable.convert_to_delta(str(tmp_path), spec)
    _assert_no_log(tmp_path)


def test_partition_schema_spellings() -> None:
    assert parse_partition_schema("year INT, `region` STRING, amount DECIMAL(10, 2), ts TIMESTAMP") == pa.schema(
        [("year", pa.int32()), ("region", pa.string()), ("amount", pa.decimal128(10, 2)),
         ("ts", pa.timestamp("us", tz="UTC"))]
    )
    assert parse_partition_schema({"d": "date", "b": "bigint"}) == pa.schema([("d", pa.date32()), ("b", pa.int64())])


# ------------------------------------------------------------------ a conversion killed in the middle

_KILLED_CONVERSION = textwrap.dedent(
    """
    import os, sys, time
    from airflow_delta.engine import DeltaTable, ThreadPoolFooterReader
    from airflow_delta.engine.operations import convert

    path, where, marker = sys.argv[1], sys.argv[2], sys.argv[3]

    def stop_here():
        open(marker, "w").close()  # the test kills us once this exists
        time.sleep(600)

    class HalfwayReader(ThreadPoolFooterReader):
        def add_files(self, plan, metadata):
            adds = super().add_files(plan, metadata)
            stop_here()  # every footer read, version 0 not yet written
            return adds

    if where == "publish":
        real_rename = os.rename
        def rename_after_signal(src, dst):
            stop_here()  # version 0 written into the staging directory, not yet renamed
            real_rename(src, dst)
        convert.os.rename = rename_after_signal
    DeltaTable.convert_to_delta(path, "day DATE, region STRING, bucket INT", reader=HalfwayReader(2))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["footers", "publish"])
def test_a_conversion_killed_in_the_middle_leaves_no_delta_log_and_can_be_run_again(tmp_path: Path, where: str) -> None:
    table = tmp_path / "table"
    expected = write_hive_dir(table, PARTITIONS)
    marker = tmp_path / "stopped"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", _KILLED_CONVERSION, str(table), where, str(marker)], env=env)
    try:
        while not marker.exists():
            assert child.poll() is None, "the conversion ended before reaching the point where it is killed"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()

    assert not (table / "_delta_log").exists()
    with pytest.raises(TableNotFoundError):
        DeltaTable(str(table)).snapshot()
    result = DeltaTable.convert_to_delta(str(table), PARTITION_SCHEMA)
    assert result.num_files == len(PARTITIONS)
    assert_oracles_read(table, expected)


@pytest.mark.parametrize(
    "properties",
    [{"delta.columnMapping.mode": "name"}, {"delta.constraints.positive": "id > 0"}],
)
def test_properties_that_would_make_version_0_lie_about_the_files_are_refused(
    tmp_path: Path, properties: dict[str, str]
) -> None:
    pq.write_table(pa.table({"id": [-1]}), tmp_path / "f.parquet")
    with pytest.raises(InvalidArgumentError, match="properties"):
        DeltaTable.convert_to_delta(str(tmp_path), properties=properties)
    _assert_no_log(tmp_path)


def test_convert_on_s3_then_manifests_with_s3_uris(s3_server: Any) -> None:
    import obstore

    uri = s3_server.uri()
    prefix = s3_server.key_of(uri)
    store = s3_server.raw_store()
    expected = []
    for part in ("a", "b c"):
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"id": [1, 2]}), sink)
        obstore.put(store, f"{prefix}/p={part.replace(' ', '%20')}/f.parquet", sink.getvalue().to_pybytes())
        expected += [{"id": 1, "p": part}, {"id": 2, "p": part}]

    DeltaTable.convert_to_delta(
        uri, "p STRING", storage_options=s3_server.storage_options,
        properties={"delta.compatibility.symlinkFormatManifest.enabled": "true"},
    )

    assert sorted(read_with_deltars(uri, storage_options=s3_server.storage_options), key=str) == sorted(
        expected, key=str
    )
    manifests = [k for k in s3_server.keys(prefix) if "/_symlink_format_manifest/" in k]
    assert sorted(manifests) == [f"{prefix}/_symlink_format_manifest/p=a/manifest",
                                 f"{prefix}/_symlink_format_manifest/p=b c/manifest"]
    assert s3_server.read(manifests[0]).decode() == f"{uri}/p=a/f.parquet\n"
    assert not [k for k in s3_server.keys(prefix) if k.startswith(f"{prefix}/.airflow-delta-convert")]
