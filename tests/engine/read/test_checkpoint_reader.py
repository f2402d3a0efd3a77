"""Reading classic, multi-part and V2 checkpoints (with sidecars)."""

from __future__ import annotations

import json
import os
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine.errors import CorruptCheckpointError
from airflow_delta.engine.read.checkpoint_reader import read_checkpoint
from airflow_delta.engine.read.listing import list_log_segment
from airflow_delta.engine.storage.fileio import LocalFileIO
from tests.engine.read import log_builders as b

IO = LocalFileIO()

NON_FILE = [b.protocol(3, 7, ["deletionVectors"], ["deletionVectors"]), b.metadata(["part"]),
            b.txn("app", 4), b.domain("d", "{}")]
FILES = [
    b.add("part=a/f1.parquet", size=1, partition_values={"part": "a"}, stats='{"numRecords":1}', tags={"t": "1"}),
    b.add("part=a/f2.parquet", size=2, partition_values={"part": "a"}, deletion_vector=b.dv("xyz", offset=1)),
    b.remove("part=b/gone.parquet", size=3, partition_values={"part": "b"}),
]


def _read(root: str):
    seg = list_log_segment(IO, root)
    return read_checkpoint(IO, root, seg.checkpoint_version, seg.checkpoint_files)


def _check(data) -> None:
    rows = data.file_actions.to_pylist()
    # Tombstones first, adds after: a checkpoint's removes never cancel its own adds.
    assert [(r["seq"], r["is_add"], r["path"]) for r in rows] == [
        (0, False, "part=b/gone.parquet"), (1, True, "part=a/f1.parquet"), (2, True, "part=a/f2.parquet")]
    assert {r["version"] for r in rows} == {5}
    assert rows[1]["partition_values"] == [("part", "a")] and rows[1]["tags"] == [("t", "1")]
    assert rows[1]["stats"] == '{"numRecords":1}'
    assert rows[2]["dv_id"] == "uxyz@1"
    keys = sorted(a.key for a in data.actions)
    assert keys == ["domainMetadata", "metaData", "protocol", "txn"]
    meta = next(a.body for a in data.actions if a.key == "metaData")
    assert meta["partitionColumns"] == ["part"] and meta["format"]["provider"] == "parquet"
    assert meta["configuration"] == {}


def test_classic(table_path: str) -> None:
    b.write_classic_checkpoint(table_path, 5, NON_FILE + FILES)
    _check(_read(table_path))


def test_multipart(table_path: str) -> None:
    b.write_classic_checkpoint(table_path, 5, NON_FILE + FILES, parts=3)
    _check(_read(table_path))


@pytest.mark.parametrize("fmt", ["json", "parquet"])
@pytest.mark.parametrize("sidecars", [0, 1, 2])
def test_v2_uuid_named(table_path: str, fmt: str, sidecars: int) -> None:
    if sidecars:
        b.write_v2_checkpoint(table_path, 5, NON_FILE, FILES, sidecars=sidecars, fmt=fmt)
    else:  # file actions inline in the top-level file
        b.write_v2_checkpoint(table_path, 5, NON_FILE + FILES, [], fmt=fmt)
    _check(_read(table_path))


def test_metadata_only(table_path: str) -> None:
    b.write_v2_checkpoint(table_path, 5, NON_FILE, FILES)
    seg = list_log_segment(IO, table_path)
    data = read_checkpoint(IO, table_path, 5, seg.checkpoint_files, file_actions=False)
    assert data.file_actions.num_rows == 0 and len(data.actions) == 4


def test_missing_sidecar(table_path: str) -> None:
    b.write_v2_checkpoint(table_path, 5, NON_FILE, FILES, sidecars=1)
    sidecar_dir = Path(b.log_dir(table_path)) / "_sidecars"
    for f in sidecar_dir.iterdir():
        f.unlink()
    with pytest.raises(CorruptCheckpointError):
        _read(table_path)


def test_garbage_parquet(table_path: str) -> None:
    b.write_raw(table_path, f"{5:020d}.checkpoint.parquet", b"this is not parquet")
    with pytest.raises(CorruptCheckpointError) as err:
        _read(table_path)
    assert err.value.file.endswith(".checkpoint.parquet")


def test_checkpoint_without_optional_columns(table_path: str) -> None:
    # A minimal V1 checkpoint: add has no tags/DV/row tracking columns, no remove column at all.
    add_type = pa.struct([("path", pa.string()), ("partitionValues", pa.map_(pa.string(), pa.string())),
                          ("size", pa.int64()), ("modificationTime", pa.int64()), ("dataChange", pa.bool_())])
    full = b.checkpoint_table(NON_FILE[:2])
    add = pa.array([None, None, {"path": "x", "partitionValues": [], "size": 4, "modificationTime": 1, "dataChange": True}], add_type)
    table = pa.table({"add": add, "metaData": pa.concat_arrays([full["metaData"].combine_chunks(), pa.nulls(1, full["metaData"].type)]),
                      "protocol": pa.concat_arrays([full["protocol"].combine_chunks(), pa.nulls(1, full["protocol"].type)])})
    os.makedirs(b.log_dir(table_path))
    pq.write_table(table, os.path.join(b.log_dir(table_path), f"{5:020d}.checkpoint.parquet"))
    rows = _read(table_path).file_actions.to_pylist()
    assert [(r["path"], r["size"], r["tags"], r["deletion_vector"], r["dv_id"]) for r in rows] == [("x", 4, None, None, None)]


def test_shared_v2_parquet_sidecars(shared_tables: Path) -> None:
    root = str(shared_tables / "checkpoint-v2-table")
    seg = list_log_segment(IO, root)
    data = read_checkpoint(IO, root, seg.checkpoint_version, seg.checkpoint_files)
    assert data.file_actions.num_rows == 7 and all(data.file_actions.column("is_add").to_pylist())
    assert {a.key for a in data.actions} == {"protocol", "metaData"}


def test_shared_classic_with_domains(shared_tables: Path) -> None:
    root = str(shared_tables / "table-with-domain-metadata")
    seg = list_log_segment(IO, root)
    data = read_checkpoint(IO, root, seg.checkpoint_version, seg.checkpoint_files)
    domains = sorted(a.body["domain"] for a in data.actions if a.key == "domainMetadata")
    assert domains == ["com.databricks.liquid", "delta.clustering", "delta.rowTracking"]


def test_struct_only_stats_become_json(table_path: str) -> None:
    # delta.checkpoint.writeStatsAsJson=false: only add.stats_parsed carries the statistics.
    stats_type = pa.struct([("numRecords", pa.int64()),
                            ("minValues", pa.struct([("ts", pa.timestamp("us", "UTC")), ("d", pa.date32())]))])
    add_type = pa.struct([("path", pa.string()), ("partitionValues", pa.map_(pa.string(), pa.string())),
                          ("size", pa.int64()), ("modificationTime", pa.int64()), ("dataChange", pa.bool_()),
                          ("stats_parsed", stats_type)])
    adds = pa.array([
        {"path": "a", "partitionValues": [], "size": 1, "modificationTime": 1, "dataChange": True,
         "stats_parsed": {"numRecords": 7, "minValues": {"ts": 1_666_652_372_846_000, "d": 19289}}},
        {"path": "b", "partitionValues": [], "size": 1, "modificationTime": 1, "dataChange": True, "stats_parsed": None},
    ], add_type)
    os.makedirs(b.log_dir(table_path))
    pq.write_table(pa.table({"add": adds}), os.path.join(b.log_dir(table_path), f"{5:020d}.checkpoint.parquet"))
    rows = _read(table_path).file_actions.to_pylist()
    assert [r["stats"] for r in rows] == [
        '{"numRecords":7,"minValues":{"ts":"2022-10-24T22:59:32.846Z","d":"2022-10-24"}}', None]


def test_struct_only_decimal_stats_keep_every_digit(table_path: str) -> None:
    # Through a float, 1234567890.1234567891 would become ...4567 (a maximum rounded down:
    # data skipping would then prune files holding matching rows). JSON numbers, exact.
    # A timestamp_ntz bound is a wall-clock time: no zone designator.
    dec = pa.decimal128(20, 10)
    stats_type = pa.struct([("numRecords", pa.int64()), ("minValues", pa.struct([("d", dec), ("n", pa.timestamp("us"))])),
                            ("maxValues", pa.struct([("d", dec)]))])
    add_type = pa.struct([("path", pa.string()), ("partitionValues", pa.map_(pa.string(), pa.string())),
                          ("size", pa.int64()), ("modificationTime", pa.int64()), ("dataChange", pa.bool_()),
                          ("stats_parsed", stats_type)])
    adds = pa.array([
        {"path": "a", "partitionValues": [], "size": 1, "modificationTime": 1, "dataChange": True,
         "stats_parsed": {"numRecords": 2, "minValues": {"d": Decimal("-0.0000000001"),
                                                           "n": datetime(2021, 1, 1, 10, 0, 0, 123456)},
                          "maxValues": {"d": Decimal("1234567890.1234567891")}}},
    ], add_type)
    os.makedirs(b.log_dir(table_path))
    pq.write_table(pa.table({"add": adds}), os.path.join(b.log_dir(table_path), f"{5:020d}.checkpoint.parquet"))
    stats = _read(table_path).file_actions.column("stats").to_pylist()
    assert stats == ['{"numRecords":2,"minValues":{"d":-0.0000000001,"n":"2021-01-01T10:00:00.123"},'
                     '"maxValues":{"d":1234567890.1234567891}}']
    parsed = json.loads(stats[0], parse_float=Decimal)
    assert parsed["maxValues"]["d"] == Decimal("1234567890.1234567891")
