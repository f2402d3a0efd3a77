"""``load_snapshot`` / ``Snapshot``: version and timestamp loading, the owned fields, delegation."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.actions import FILE_ACTIONS_SCHEMA
from airflow_delta.engine.errors import DeltaError, UnsupportedFeatureError, VersionNotFoundError
from airflow_delta.engine.fs import LocalFileIO
from airflow_delta.engine.snapshot import decode_paths, load_snapshot, relative_paths
from tests.engine.log import builders as b

IO = LocalFileIO()
T0 = 1_700_000_000_000


def _table(root: str) -> None:
    b.write_commit(root, 0, [b.commit_info(), b.protocol(), b.metadata(["part"]),
                             b.add("part=a/f%201.parquet", size=1, partition_values={"part": "a"}),
                             b.txn("app", 1), b.domain("dom", "cfg")], mtime_ms=T0)
    b.write_commit(root, 1, [b.commit_info("DELETE"), b.remove("part=a/f%201.parquet"),
                             b.add("part=b/f2.parquet", size=2, partition_values={"part": "b"})], mtime_ms=T0 + 1000)
    b.write_commit(root, 2, [b.txn("app", 2), b.domain("dom", "cfg", removed=True)], mtime_ms=T0 + 2000)


def test_latest(table_path: str) -> None:
    _table(table_path)
    snap = load_snapshot(IO, table_path)
    assert snap.version == 2 and snap.table_root == table_path and snap.io is IO
    assert snap.partition_columns == ("part",)
    assert snap.properties.checkpoint_interval == 10
    assert snap.timestamp == T0 + 2000
    assert snap.transactions["app"].version == 2 and snap.transaction_version("none") is None
    assert dict(snap.domain_metadata) == {}
    assert snap.add_actions.schema == FILE_ACTIONS_SCHEMA
    assert snap.add_actions.column("path").to_pylist() == ["part=b/f2.parquet"]
    assert snap.tombstones.column("path").to_pylist() == ["part=a/f%201.parquet"]
    assert snap.log_segment.version == 2 and snap.num_files == 1
    assert snap.commit_info is None  # version 2 has no commitInfo


def test_version_time_travel(table_path: str) -> None:
    _table(table_path)
    snap = load_snapshot(IO, table_path, version=0)
    assert snap.version == 0 and snap.timestamp == T0
    assert snap.add_actions.column("path").to_pylist() == ["part=a/f%201.parquet"]
    assert snap.domain_metadata["dom"].configuration == "cfg"
    assert snap.commit_info is not None and snap.commit_info["operation"] == "WRITE"
    with pytest.raises(VersionNotFoundError):
        load_snapshot(IO, table_path, version=3)


def test_timestamp_time_travel(table_path: str) -> None:
    _table(table_path)
    assert load_snapshot(IO, table_path, timestamp=T0 + 1500).version == 1
    assert load_snapshot(IO, table_path, timestamp="2023-11-14T22:13:21Z").version == 1  # T0 + 1000
    with pytest.raises(DeltaError, match="either version or timestamp"):
        load_snapshot(IO, table_path, version=1, timestamp=T0)


def test_snapshot_is_immutable(table_path: str) -> None:
    _table(table_path)
    snap = load_snapshot(IO, table_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.version = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        snap.transactions["x"] = None  # type: ignore[index]


def test_snapshot_at_checkpoint_version_keeps_commit_info(table_path: str) -> None:
    _table(table_path)
    b.write_classic_checkpoint(table_path, 1, [b.protocol(), b.metadata(["part"]), b.txn("app", 1),
                                               b.add("part=b/f2.parquet", size=2, partition_values={"part": "b"})])
    snap = load_snapshot(IO, table_path, version=1)
    assert snap.log_segment.checkpoint_version == 1
    assert snap.commit_info is not None and snap.commit_info["operation"] == "DELETE"


def test_in_commit_timestamp(table_path: str) -> None:
    config = {"delta.enableInCommitTimestamps": "true"}
    b.write_commit(table_path, 0, [
        {"commitInfo": {"inCommitTimestamp": 42_000, "operation": "CREATE"}},
        b.protocol(1, 7, writer_features=["inCommitTimestamp"]), b.metadata(configuration=config)], mtime_ms=T0)
    assert load_snapshot(IO, table_path).timestamp == 42_000


def test_reader_gate_is_enforced(table_path: str) -> None:
    b.write_commit(table_path, 0, [b.protocol(3, 7, ["unknownReaderFeature"], []), b.metadata()])
    with pytest.raises(UnsupportedFeatureError):
        load_snapshot(IO, table_path)


def test_decode_paths() -> None:
    paths = pa.chunked_array([["a/b.parquet", "x=1%2F2/sp%20ace.parquet", "%25.parquet"]])
    assert decode_paths(paths).to_pylist() == ["a/b.parquet", "x=1/2/sp ace.parquet", "%.parquet"]
    plain = pa.array(["a", "b"])
    assert decode_paths(plain) is plain


def test_delta_table_facade(table_path: str) -> None:
    _table(table_path)
    table = DeltaTable(table_path)
    assert table.version() == 2
    assert table.snapshot(1).version == 1
    assert [h["version"] for h in table.history()] == [2, 1, 0]


def test_schema_delegates_to_schema_module(table_path: str) -> None:
    pytest.importorskip("airflow_delta.engine.schema")
    _table(table_path)
    assert load_snapshot(IO, table_path).schema.names == ["id", "part"]


def test_files_and_plan_files(table_path: str) -> None:
    pytest.importorskip("airflow_delta.engine.stats")
    pytest.importorskip("airflow_delta.engine.expressions")
    _table(table_path)
    snap = load_snapshot(IO, table_path, version=0)
    files = snap.files()
    assert files.column("path").to_pylist() == ["part=a/f 1.parquet"]
    assert files.column("partition_values").to_pylist() == [{"part": "a"}]
    assert snap.plan_files("part = 'zzz'").num_rows == 0
    assert snap.plan_files("part = 'a'").num_rows == 1


@pytest.mark.parametrize("name", ["simple_table", "delta-0.8.0-partitioned", "table-with-dv-small", "checkpoint-v2-table"])
def test_shared_tables_load(shared_tables: Path, name: str) -> None:
    deltalake = pytest.importorskip("deltalake")
    root = str(shared_tables / name)
    snap = DeltaTable(root).snapshot()
    theirs = deltalake.DeltaTable(root)
    assert snap.version == theirs.version()
    uris = sorted(os.path.normpath(u.removeprefix("file://")) for u in theirs.file_uris())
    ours = sorted(os.path.normpath(os.path.join(root, p)) for p in decode_paths(snap.add_actions.column("path")).to_pylist())
    assert ours == uris


def test_shared_domain_metadata_from_checkpoint_only(shared_tables: Path) -> None:
    snap = DeltaTable(str(shared_tables / "table-with-domain-metadata")).snapshot()
    assert snap.version == 108
    assert sorted(snap.domain_metadata) == ["com.databricks.liquid", "delta.clustering", "delta.rowTracking"]
    assert snap.timestamp > 0  # the checkpoint's mtime: no JSON commit is left


def test_relative_paths(tmp_path: Path) -> None:
    root = str(tmp_path)
    paths = pa.array(["a%20b.parquet", f"file://{root}/x=1/c.parquet", f"{root}/d.parquet"])
    assert relative_paths(root, paths).to_pylist() == ["a b.parquet", "x=1/c.parquet", "d.parquet"]
