"""Checkpoint writing: classic, multi-part, V2, ``_last_checkpoint`` and crash safety.

Cross-checked against delta-rs (``deltalake``), which must read the tables we
checkpoint exactly as before, also after the JSON commits the checkpoint covers are
deleted, and against our own snapshot reader.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable as RsTable
from deltalake import write_deltalake

from airflow_delta.engine.checkpoint import writer as checkpoints
from airflow_delta.engine.checkpoint.writer import (
    json_checksum,
    read_last_checkpoint,
    spark_murmur3_strings,
    write_checkpoint,
)
from airflow_delta.engine.errors import DeltaError
from airflow_delta.engine.read.snapshot import Snapshot
from airflow_delta.engine.table import DeltaTable
from tests.engine.checkpoint.table_helpers import (
    IO,
    as_of_last_removal,
    copy_shared,
    delete_commits_before,
    log_names,
    make_partitioned_table,
    our_view,
    remove_checkpoints,
    rs_view,
    snapshot_of,
)

DAY_MS = 86_400_000


def test_classic_checkpoint_reads_identically_in_delta_rs_and_alone(table_path: str) -> None:
    make_partitioned_table(table_path)
    before = rs_view(table_path)
    ours_before = our_view(table_path)

    result = write_checkpoint(snapshot_of(table_path))

    assert result.kind == "classic"
    assert result.files == (f"{table_path}/_delta_log/{6:020d}.checkpoint.parquet",)
    delete_commits_before(table_path, 6)
    assert f"{5:020d}.json" not in log_names(table_path)
    assert rs_view(table_path)[0] == before[0]
    assert rs_view(table_path)[1] == before[1]
    assert rs_view(table_path)[2] == before[2]
    assert our_view(table_path) == ours_before


def test_classic_checkpoint_schema_and_rows(table_path: str) -> None:
    make_partitioned_table(table_path)
    snap = snapshot_of(table_path)
    write_checkpoint(snap)
    table = pq.read_table(f"{table_path}/_delta_log/{6:020d}.checkpoint.parquet")

    assert table.column_names == ["txn", "add", "remove", "metaData", "protocol", "domainMetadata"]
    add_fields = [f.name for f in table.schema.field("add").type]
    assert add_fields[:3] == ["path", "partitionValues", "size"] and "stats" in add_fields
    assert table.schema.field("add").type.field("partitionValues").type == pa.map_(pa.string(), pa.string())
    # Tombstones in checkpoints carry neither stats nor tags.
    remove_fields = {f.name for f in table.schema.field("remove").type}
    assert "stats" not in remove_fields and "tags" not in remove_fields
    rows = table.to_pylist()
    adds = [r["add"] for r in rows if r["add"] is not None]
    removes = [r["remove"] for r in rows if r["remove"] is not None]
    assert sorted(a["path"] for a in adds) == sorted(snap.add_actions.column("path").to_pylist())
    assert len(removes) == snap.tombstones.num_rows == 1
    assert sum(r["protocol"] is not None for r in rows) == 1
    assert sum(r["metaData"] is not None for r in rows) == 1
    assert all(dict(a["partitionValues"])["part"] in ("x", "y") for a in adds)
    # Each row holds exactly one action.
    assert all(sum(v is not None for v in r.values()) == 1 for r in rows)
    # Paths stay as they are in the log (URI-encoded).
    assert {a["path"] for a in adds} == set(snap.add_actions.column("path").to_pylist())


def test_last_checkpoint_describes_the_checkpoint(table_path: str) -> None:
    make_partitioned_table(table_path)
    result = write_checkpoint(snapshot_of(table_path))
    document = json.loads(Path(f"{table_path}/_delta_log/_last_checkpoint").read_text())
    parquet = pq.ParquetFile(result.files[0])
    assert document["version"] == 6
    assert document["size"] == parquet.metadata.num_rows
    assert document["sizeInBytes"] == os.path.getsize(result.files[0])
    assert document["numOfAddFiles"] == snapshot_of(table_path).add_actions.num_rows
    assert "parts" not in document
    assert document["checksum"] == json_checksum(document)
    assert [f["name"] for f in document["checkpointSchema"]["fields"]] == parquet.schema_arrow.names


def test_older_checkpoint_does_not_move_last_checkpoint_back(table_path: str) -> None:
    make_partitioned_table(table_path)
    write_checkpoint(snapshot_of(table_path))
    write_checkpoint(snapshot_of(table_path, 3))
    assert f"{3:020d}.checkpoint.parquet" in log_names(table_path)
    assert read_last_checkpoint(IO, table_path)["version"] == 6


def test_expired_tombstones_are_left_out(table_path: str) -> None:
    make_partitioned_table(table_path)
    snap = snapshot_of(table_path)
    deleted_at = snap.tombstones.column("deletion_timestamp")[0].as_py()
    retention = snap.properties.deleted_file_retention.total_seconds() * 1000

    kept = write_checkpoint(snap, now_ms=int(deleted_at + retention - 1))
    rows = pq.read_table(kept.files[0], columns=["remove"]).column("remove").drop_null()
    assert len(rows) == 1

    expired = write_checkpoint(snap, now_ms=int(deleted_at + retention + 1))
    rows = pq.read_table(expired.files[0], columns=["remove"]).column("remove").drop_null()
    assert len(rows) == 0


def test_write_stats_as_json_false_stores_stats_only_as_a_struct(table_path: str) -> None:
    data = pa.table({"a": [1, 2, 3], "part": ["x", "y", "x"], "ts": pa.array([1, 2, 3], pa.timestamp("us", "UTC"))})
    config = {"delta.checkpoint.writeStatsAsStruct": "true", "delta.checkpoint.writeStatsAsJson": "false"}
    write_deltalake(table_path, data, partition_by=["part"], configuration=config)
    write_deltalake(table_path, data, partition_by=["part"], mode="append")
    before = rs_view(table_path)
    result = write_checkpoint(snapshot_of(table_path))
    add_type = pq.read_schema(result.files[0]).field("add").type
    names = {f.name for f in add_type}
    assert "stats" not in names and {"stats_parsed", "partitionValues_parsed"} <= names
    assert add_type.field("stats_parsed").type.field("minValues").type.field("ts").type == pa.timestamp("us", "UTC")
    delete_commits_before(table_path, 1)
    # delta-rs rebuilds the statistics from the struct form.
    assert rs_view(table_path) == before


def test_writing_stats_as_json_false_without_struct_stats_keeps_the_json(table_path: str) -> None:
    write_deltalake(table_path, pa.table({"a": [1]}), configuration={"delta.checkpoint.writeStatsAsJson": "false"})
    snap = snapshot_of(table_path)
    assert not snap.properties.checkpoint_write_stats_as_struct
    result = write_checkpoint(snap)
    assert "stats" in {f.name for f in pq.read_schema(result.files[0]).field("add").type}


def test_parsed_columns_use_physical_names_under_column_mapping(shared_tables: Path, tmp_path: Path) -> None:
    path = copy_shared(shared_tables, "table_with_column_mapping", str(tmp_path))
    snap = snapshot_of(path)
    assert snap.properties.column_mapping_mode == "name"
    forced = dataclasses.replace(
        snap, properties=dataclasses.replace(snap.properties, checkpoint_write_stats_as_struct=True)
    )
    result = write_checkpoint(forced)
    add = pq.read_table(result.files[0]).column("add").drop_null().to_pylist()
    fields = {f["name"]: f for f in snap.metadata.schema_json["fields"]}
    physical = {name: f["metadata"]["delta.columnMapping.physicalName"] for name, f in fields.items()}
    part_column = snap.metadata.partition_columns[0]
    assert all(list(row["partitionValues_parsed"]) == [physical[part_column]] for row in add)
    for row in add:
        assert set(row["stats_parsed"]["minValues"]) <= set(physical.values())
        assert row["stats_parsed"]["numRecords"] == json.loads(row["stats"])["numRecords"]


def test_stats_as_struct_writes_parsed_columns_readable_by_delta_rs(table_path: str) -> None:
    data = pa.table({"a": [1, 2, 3], "part": ["x", "y", "x"]})
    write_deltalake(
        table_path, data, partition_by=["part"], configuration={"delta.checkpoint.writeStatsAsStruct": "true"}
    )
    write_deltalake(table_path, data, partition_by=["part"], mode="append")
    before = rs_view(table_path)
    result = write_checkpoint(snapshot_of(table_path))
    add_type = pq.read_schema(result.files[0]).field("add").type
    names = {f.name for f in add_type}
    if "stats_parsed" in names:
        parsed = pq.read_table(result.files[0], columns=["add"]).column("add").drop_null()
        stats = [r["stats_parsed"] for r in parsed.to_pylist()]
        assert all(s["numRecords"] in (1, 2) for s in stats)
        assert "partitionValues_parsed" in names
        pv = [r["partitionValues_parsed"]["part"] for r in parsed.to_pylist()]
        assert sorted(pv) == ["x", "x", "y", "y"]
    delete_commits_before(table_path, 1)
    after = rs_view(table_path)
    assert after[1] == before[1] and after[2] == before[2]


def test_checkpoint_of_deletion_vector_table_reads_identically(shared_tables: Path, tmp_path: Path) -> None:
    path = copy_shared(shared_tables, "table-with-dv-small", str(tmp_path))
    ours_before = our_view(path)
    before = rs_view(path)
    snap = snapshot_of(path)
    assert snap.add_actions.column("deletion_vector").null_count < snap.add_actions.num_rows
    write_checkpoint(snap, now_ms=as_of_last_removal(snap))
    delete_commits_before(path, snap.version)
    assert our_view(path) == ours_before
    after = rs_view(path)
    assert after[1] == before[1] and after[2] == before[2]


@pytest.mark.parametrize(
    "name",
    ["table-with-domain-metadata", "table_with_column_mapping", "table_with_deletion_logs", "cdf-table-with-cdc-and-dvs"],
)
def test_checkpoints_of_shared_tables_rebuild_the_same_state(shared_tables: Path, tmp_path: Path, name: str) -> None:
    path = copy_shared(shared_tables, name, str(tmp_path))
    snap = snapshot_of(path)
    expected = our_view(path)
    write_checkpoint(snap, now_ms=as_of_last_removal(snap))
    for entry in log_names(path):  # keep only our checkpoint and the commit of its version
        if ".checkpoint." in entry and not entry.startswith(f"{snap.version:020d}.checkpoint.parquet"):
            os.remove(f"{path}/_delta_log/{entry}")
    delete_commits_before(path, snap.version)
    rebuilt = snapshot_of(path)
    assert rebuilt.log_segment.checkpoint_version == snap.version
    assert our_view(path) == expected
    assert rebuilt.transactions == snap.transactions
    assert dict(rebuilt.domain_metadata) == dict(snap.domain_metadata)
    assert rebuilt.metadata == snap.metadata and rebuilt.protocol == snap.protocol


def test_create_checkpoint_through_the_table_facade(table_path: str) -> None:
    make_partitioned_table(table_path, commits=3)
    assert DeltaTable(table_path).checkpoint().version == 3
    assert DeltaTable(table_path).checkpoint(version=1).version == 1
    assert {f"{1:020d}.checkpoint.parquet", f"{3:020d}.checkpoint.parquet"} <= set(log_names(table_path))


# -------------------------------------------------------------- multi-part


def test_multi_part_checkpoint_is_hash_clustered_and_read_by_delta_rs(table_path: str) -> None:
    make_partitioned_table(table_path)
    before = rs_view(table_path)
    ours_before = our_view(table_path)
    snap = snapshot_of(table_path)

    result = write_checkpoint(snap, part_size=3)

    total = snap.add_actions.num_rows + snap.tombstones.num_rows + 2
    parts = -(-total // 3)
    assert result.kind == "multi-part"
    assert [os.path.basename(f) for f in result.files] == [
        f"{6:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)
    ]
    document = read_last_checkpoint(IO, table_path)
    assert document["parts"] == parts
    assert document["size"] == total == sum(pq.read_metadata(f).num_rows for f in result.files)
    # Every file action sits in the part Spark's hash partitioning assigns to its path.
    for index, file in enumerate(result.files):
        table = pq.read_table(file)
        for column in ("add", "remove"):
            paths = [r["path"] for r in table.column(column).drop_null().to_pylist()]
            if paths:
                expected = np.mod(spark_murmur3_strings(pa.array(paths)).astype(np.int64), parts)
                assert (expected == index).all()
        has_protocol = table.column("protocol").null_count < table.num_rows
        assert has_protocol == (index == 42 % parts)

    delete_commits_before(table_path, 6)
    after = rs_view(table_path)
    assert after[1] == before[1] and after[2] == before[2]
    assert our_view(table_path) == ours_before


def test_incomplete_multi_part_checkpoint_is_ignored_by_readers(table_path: str) -> None:
    """A writer killed between parts: the set is incomplete and _last_checkpoint still old."""
    make_partitioned_table(table_path)
    write_checkpoint(snapshot_of(table_path, 3))
    write_deltalake(table_path, pa.table({"a": [7], "part": ["x"], "s": ["z"]}), partition_by=["part"], mode="append")
    before = rs_view(table_path)
    ours_before = our_view(table_path)
    result = write_checkpoint(snapshot_of(table_path), part_size=3, update_last_checkpoint=False)
    os.remove(result.files[1])
    assert read_last_checkpoint(IO, table_path)["version"] == 3

    assert our_view(table_path) == ours_before
    assert snapshot_of(table_path).log_segment.checkpoint_version == 3
    after = rs_view(table_path)
    assert after[1] == before[1] and after[2] == before[2]


# ---------------------------------------------------------------------- V2


@pytest.mark.parametrize("file_format", ["parquet", "json"])
@pytest.mark.parametrize("classic_compat", [True, False])
def test_v2_checkpoint_with_sidecars(shared_tables: Path, tmp_path: Path, file_format: str, classic_compat: bool) -> None:
    path = copy_shared(shared_tables, "checkpoint-v2-table", str(tmp_path))
    before = rs_view(path)
    ours_before = our_view(path)
    remove_checkpoints(path)
    snap = snapshot_of(path)
    assert snap.properties.checkpoint_policy == "v2"

    result = write_checkpoint(snap, v2_format=file_format, v2_classic_compat=classic_compat, sidecar_size=3)

    assert result.kind == "v2"
    top = os.path.basename(result.files[0])
    assert top.startswith(f"{9:020d}.checkpoint.") and top.endswith(f".{file_format}")
    assert (f"{9:020d}.checkpoint.parquet" in log_names(path)) == classic_compat
    n_files = snap.add_actions.num_rows + snap.tombstones.num_rows
    assert len(result.sidecars) == -(-n_files // 3)
    assert all(os.path.dirname(s).endswith("_delta_log/_sidecars") for s in result.sidecars)
    sidecar_rows = sum(pq.read_metadata(s).num_rows for s in result.sidecars)
    assert sidecar_rows == n_files
    document = read_last_checkpoint(IO, path)
    assert document["v2Checkpoint"]["path"] == top
    assert [s["path"] for s in document["v2Checkpoint"]["sidecarFiles"]] == [os.path.basename(s) for s in result.sidecars]
    assert any("checkpointMetadata" in a for a in document["v2Checkpoint"]["nonFileActions"])
    assert document["sizeInBytes"] == os.path.getsize(result.files[0]) + sum(os.path.getsize(s) for s in result.sidecars)

    delete_commits_before(path, 9)
    assert our_view(path) == ours_before
    after = rs_view(path)
    assert after[0] == before[0] and after[1] == before[1] and after[2] == before[2]


def test_v2_policy_without_the_feature_writes_a_classic_checkpoint(table_path: str) -> None:
    write_deltalake(table_path, pa.table({"a": [1]}), configuration={"delta.checkpointPolicy": "v2"})
    result = write_checkpoint(snapshot_of(table_path))
    assert result.kind == "classic"


# ------------------------------------------------------------ crash safety


def test_leftover_temp_file_of_a_crashed_writer_is_invisible(table_path: str) -> None:
    make_partitioned_table(table_path)
    before = rs_view(table_path)
    ours_before = our_view(table_path)
    # What a writer killed mid-write leaves: a truncated hidden temp file.
    full = write_checkpoint(snapshot_of(table_path), update_last_checkpoint=False).files[0]
    data = Path(full).read_bytes()
    os.remove(full)
    Path(f"{table_path}/_delta_log/.{os.path.basename(full)}.0123.tmp").write_bytes(data[: len(data) // 2])
    assert our_view(table_path) == ours_before
    after = rs_view(table_path)
    assert after[1] == before[1] and after[2] == before[2]


def test_last_checkpoint_pointing_at_a_missing_checkpoint_is_survived_by_our_reader(table_path: str) -> None:
    # delta-rs (its kernel) refuses such a table ("Had a _last_checkpoint hint but didn't
    # find any checkpoints"), which is why the writer only ever updates the hint after
    # the checkpoint exists and log cleanup repoints it before deleting what it names.
    make_partitioned_table(table_path)
    write_checkpoint(snapshot_of(table_path, 3))
    ours_before = our_view(table_path)
    checkpoints.write_last_checkpoint(IO, table_path, {"version": 6, "size": 10})
    assert our_view(table_path) == ours_before
    assert snapshot_of(table_path).log_segment.checkpoint_version == 3


_KILL_SCRIPT = textwrap.dedent(
    """
    import sys
    from airflow_delta.engine.storage.fileio import LocalFileIO
    from airflow_delta.engine.read.snapshot import load_snapshot
    from airflow_delta.engine.checkpoint import writer as checkpoints
    checkpoints.WRITE_BATCH_ROWS = 2  # many tiny row groups: a long write to interrupt
    snap = load_snapshot(LocalFileIO(), sys.argv[1])
    print("loaded", flush=True)
    checkpoints.write_checkpoint(snap)
    """
)


def synthetic_log(path: str, num_files: int, commits: int = 1, start_ms: int | None = None) -> None:
    """A table log with ``num_files`` add actions and no data files (checkpointing only reads the log)."""
    log_dir = f"{path}/_delta_log"
    os.makedirs(log_dir, exist_ok=True)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    now = start_ms or int(time.time() * 1000)
    header = [
        {"commitInfo": {"timestamp": now, "operation": "CREATE TABLE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": "00000000-0000-0000-0000-000000000001", "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {},
                      "createdTime": now}},
    ]
    per_commit = max(1, num_files // commits)
    for version in range(commits):
        lines = header if version == 0 else [{"commitInfo": {"timestamp": now, "operation": "WRITE"}}]
        body = "\n".join(json.dumps(a) for a in lines) + "\n"
        start = version * per_commit
        stop = num_files if version == commits - 1 else start + per_commit
        body += "".join(
            json.dumps(
                {"add": {"path": f"part-{i:08d}-c000.snappy.parquet", "partitionValues": {}, "size": 1000 + i,
                         "modificationTime": now, "dataChange": True,
                         "stats": json.dumps({"numRecords": 10, "minValues": {"id": i}, "maxValues": {"id": i + 9},
                                              "nullCount": {"id": 0}})}}
            ) + "\n"
            for i in range(start, stop)
        )
        Path(f"{log_dir}/{version:020d}.json").write_text(body)


def test_writer_killed_mid_checkpoint_leaves_a_readable_table(table_path: str) -> None:
    synthetic_log(table_path, 5_000)
    ours_before = our_view(table_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_SCRIPT, table_path],
        stdout=subprocess.PIPE,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    log_dir = f"{table_path}/_delta_log"
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"loaded"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(n.endswith(".tmp") for n in os.listdir(log_dir)):
            if proc.poll() is not None:
                break
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    names = os.listdir(log_dir)
    checkpoint_files = [n for n in names if ".checkpoint." in n and not n.startswith(".")]
    assert checkpoint_files or any(n.endswith(".tmp") for n in names)
    # Either the kill came before the rename (only a hidden temp file) or after it
    # (a complete checkpoint); never a visible partial checkpoint.
    for name in checkpoint_files:
        assert pq.read_metadata(f"{log_dir}/{name}").num_rows == 5_002
    assert our_view(table_path) == ours_before
    assert len(RsTable(table_path).file_uris()) == 5_000


@pytest.fixture
def big_synthetic(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "big")
    synthetic_log(path, 5_000, commits=5)
    yield path


def test_synthetic_log_checkpoint_round_trip(big_synthetic: str) -> None:
    ours_before = our_view(big_synthetic)
    result = write_checkpoint(snapshot_of(big_synthetic), part_size=1_500)
    assert result.kind == "multi-part"
    delete_commits_before(big_synthetic, 4)
    assert our_view(big_synthetic) == ours_before
    assert len(RsTable(big_synthetic).file_uris()) == 5_000


def test_create_checkpoint_refuses_writer_features_that_govern_checkpoints(table_path: str) -> None:
    from airflow_delta.engine.errors import UnsupportedFeatureError

    synthetic_log(table_path, 3)
    log0 = Path(f"{table_path}/_delta_log/{0:020d}.json")
    log0.write_text(log0.read_text().replace(
        '"minWriterVersion": 2}', '"minWriterVersion": 7, "writerFeatures": ["someFutureFeature"]}'
    ))
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        DeltaTable(table_path).checkpoint()
    assert not any(".checkpoint." in n for n in log_names(table_path))


def test_create_checkpoint_of_a_table_with_identity_columns(shared_tables: Path, tmp_path: Path) -> None:
    # identityColumns constrains data writes only; checkpointing such a table is fine.
    path = copy_shared(shared_tables, "checkpoint-v2-table", str(tmp_path))
    assert DeltaTable(path).checkpoint().version == 9
    assert read_last_checkpoint(IO, path)["version"] == 9


def test_no_multi_part_checkpoint_once_v2_checkpoints_are_supported(shared_tables: Path, tmp_path: Path) -> None:
    path = copy_shared(shared_tables, "checkpoint-v2-table", str(tmp_path))
    snap = snapshot_of(path)
    classic = dataclasses.replace(snap, properties=dataclasses.replace(snap.properties, checkpoint_policy="classic"))
    result = write_checkpoint(classic, part_size=2)
    assert result.kind == "classic" and len(result.files) == 1


# ------------------------------------------- compatibility with Spark-written checkpoints


def parquet_columns(path: str) -> list[tuple[str, str, str, int, int]]:
    """Every leaf column of a parquet file: dotted path, physical type, logical type, def and rep levels.

    The levels encode nullability and list/map nesting, so equal tuples mean Spark's
    parquet reader resolves the column the same way in both files.
    """
    schema = pq.ParquetFile(path).schema
    out = []
    for i in range(len(schema)):
        col = schema.column(i)
        out.append((col.path, col.physical_type, str(col.logical_type), col.max_definition_level, col.max_repetition_level))
    return out


PARSED = ("add.partitionValues_parsed.", "add.stats_parsed.")
# Older Spark kept these (always-null cdc/commitInfo columns too); the protocol, and Spark
# since, leave them out of checkpoints.
DROPPED_FROM_CHECKPOINTS = ("remove.tags.", "remove.stats", "cdc.", "commitInfo.")


def assert_spark_compatible(ours_path: str, spark_path: str) -> None:
    ours = {c[0]: c for c in parquet_columns(ours_path)}
    spark = parquet_columns(spark_path)
    for path, physical, logical, def_level, rep_level in spark:
        if path.startswith(PARSED) and path not in ours:
            continue  # the parsed columns depend on table settings; when present they must match
        if path.startswith(DROPPED_FROM_CHECKPOINTS):
            continue
        assert path in ours, f"Spark writes {path}, we do not"
        mine = ours[path]
        if physical == "INT96":  # Spark's legacy timestamps; INT64 micros is the protocol's other form
            assert mine[1:3] == ("INT64", mine[2]) and "Timestamp(isAdjustedToUTC=true, timeUnit=microseconds" in mine[2], path
        else:
            assert (mine[1], mine[2]) == (physical, logical), path
        assert (mine[3], mine[4]) == (def_level, rep_level), path
    # Same relative order for the columns both files have.
    common = [c[0] for c in spark if c[0] in ours]
    assert [p for p in ours if p in set(common)] == common


def with_struct_stats(snap: Snapshot) -> Snapshot:
    # Spark's default for delta.checkpoint.writeStatsAsStruct is true; ours is the protocol's (false).
    return dataclasses.replace(snap, properties=dataclasses.replace(snap.properties, checkpoint_write_stats_as_struct=True))


@pytest.mark.parametrize(
    ("name", "spark_checkpoint"),
    [
        ("checkpoint-cdf-table", f"{3:020d}.checkpoint.parquet"),
        ("table-with-domain-metadata", f"{108:020d}.checkpoint.parquet"),
        ("simple_table_with_checkpoint", f"{10:020d}.checkpoint.parquet"),
    ],
)
def test_classic_checkpoint_schema_matches_sparks(shared_tables: Path, tmp_path: Path, name: str, spark_checkpoint: str) -> None:
    path = copy_shared(shared_tables, name, str(tmp_path))
    spark_copy = str(tmp_path / spark_checkpoint)
    shutil.copy(f"{path}/_delta_log/{spark_checkpoint}", spark_copy)
    snap = snapshot_of(path)
    for variant in (snap, with_struct_stats(snap)):
        result = write_checkpoint(variant, update_last_checkpoint=False)
        assert_spark_compatible(result.files[0], spark_copy)


def test_v2_sidecar_schema_matches_sparks(shared_tables: Path, tmp_path: Path) -> None:
    path = copy_shared(shared_tables, "checkpoint-v2-table", str(tmp_path))
    spark_sidecars = sorted(Path(f"{path}/_delta_log/_sidecars").iterdir())
    spark_copy = str(tmp_path / "spark_sidecar.parquet")
    shutil.copy(spark_sidecars[-1], spark_copy)
    result = write_checkpoint(snapshot_of(path), update_last_checkpoint=False)
    assert_spark_compatible(result.sidecars[0], spark_copy)


def test_v2_checkpoint_metadata_tags_name_the_sidecar_schema_as_spark_does(shared_tables: Path, tmp_path: Path) -> None:
    path = copy_shared(shared_tables, "checkpoint-v2-table", str(tmp_path))
    result = write_checkpoint(snapshot_of(path), v2_format="json", update_last_checkpoint=False)
    lines = [json.loads(line) for line in Path(result.files[0]).read_text().splitlines()]
    tags = next(a["checkpointMetadata"]["tags"] for a in lines if "checkpointMetadata" in a)
    assert set(tags) == {"sidecarNumActions", "sidecarSizeInBytes", "numOfAddFiles", "sidecarFileSchema"}
    sidecar_schema = json.loads(tags["sidecarFileSchema"])
    assert [f["name"] for f in sidecar_schema["fields"]] == pq.read_schema(result.sidecars[0]).names == ["add", "remove"]
    spark_top = next(Path(f"{path}/_delta_log").glob(f"{8:020d}.checkpoint.*.json"))
    spark_tags = next(
        json.loads(line)["checkpointMetadata"]["tags"] for line in spark_top.read_text().splitlines() if "checkpointMetadata" in line
    )
    spark_add = {f["name"]: f["type"] for f in json.loads(spark_tags["sidecarFileSchema"])["fields"]}["add"]
    our_add = {f["name"]: f["type"] for f in sidecar_schema["fields"]}["add"]
    common = [f["name"] for f in spark_add["fields"] if f["name"] != "stats_parsed"]
    assert [f for f in our_add["fields"] if f["name"] in common] == [f for f in spark_add["fields"] if f["name"] in common]


def test_multi_part_count_follows_sparks_rule_of_file_actions_per_part(table_path: str) -> None:
    # Spark: parts = ceil((live files + tombstones) / partSize); non-file actions do not count.
    make_partitioned_table(table_path)
    snap = snapshot_of(table_path)
    file_actions = snap.add_actions.num_rows + snap.tombstones.num_rows
    result = write_checkpoint(snap, part_size=file_actions, now_ms=as_of_last_removal(snap), update_last_checkpoint=False)
    assert result.kind == "classic"
    result = write_checkpoint(snap, part_size=file_actions - 1, now_ms=as_of_last_removal(snap), update_last_checkpoint=False)
    assert result.kind == "multi-part" and len(result.files) == 2


def test_no_checkpoint_for_a_version_whose_commit_is_gone(table_path: str) -> None:
    # "Checkpoints for a given version must only be created after the associated delta file
    # has been successfully written": a snapshot whose commit vanished must not be checkpointed.
    make_partitioned_table(table_path, commits=3)
    snap = snapshot_of(table_path)
    os.remove(f"{table_path}/_delta_log/{snap.version:020d}.json")
    with pytest.raises(DeltaError, match="no commit"):
        write_checkpoint(snap)
    assert not any(".checkpoint." in n for n in log_names(table_path))


def test_a_version_already_checkpointed_without_its_commit_can_be_checkpointed_again(shared_tables: Path, tmp_path: Path) -> None:
    # table-with-domain-metadata holds only Spark's checkpoint 108 (its commits were cleaned up).
    path = copy_shared(shared_tables, "table-with-domain-metadata", str(tmp_path))
    result = write_checkpoint(snapshot_of(path))
    assert result.version == 108


def test_last_checkpoint_matches_the_one_spark_wrote(shared_tables: Path, tmp_path: Path) -> None:
    path = copy_shared(shared_tables, "checkpoint-cdf-table", str(tmp_path))
    spark = json.loads(Path(f"{path}/_delta_log/_last_checkpoint").read_text())
    snap = with_struct_stats(snapshot_of(path, 3))
    write_checkpoint(snap)
    ours = json.loads(Path(f"{path}/_delta_log/_last_checkpoint").read_text())
    assert set(ours) == set(spark)  # version, size, sizeInBytes, numOfAddFiles, checkpointSchema, checksum
    assert (ours["version"], ours["size"], ours["numOfAddFiles"]) == (spark["version"], spark["size"], spark["numOfAddFiles"])
    assert ours["checksum"] == json_checksum(ours)
    spark_fields = {f["name"]: f for f in spark["checkpointSchema"]["fields"]}
    our_fields = {f["name"]: f for f in ours["checkpointSchema"]["fields"]}
    assert list(our_fields) == list(spark_fields)
    for name, field in spark_fields.items():
        if name == "add":  # Spark 3.2 wrote no stats_parsed; everything else is identical
            ours_add = [f for f in our_fields["add"]["type"]["fields"] if f["name"] != "stats_parsed"]
            assert ours_add == field["type"]["fields"]
        else:
            assert our_fields[name] == field, name


