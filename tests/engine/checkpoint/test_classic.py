"""Classic checkpoints written directly: one file, or hash-clustered parts past the part size."""

from __future__ import annotations

import os

import pyarrow.parquet as pq

from airflow_delta.engine.checkpoint.classic import write_classic
from airflow_delta.engine.checkpoint.file_names import checkpoint_file_name, multipart_checkpoint_file_name
from airflow_delta.engine.checkpoint.rows import AddColumnLayout, NullCache
from airflow_delta.engine.checkpoint.schema import add_type
from tests.engine.checkpoint.table_helpers import make_partitioned_table, snapshot_of

LAYOUT = AddColumnLayout(add_type(), stats_as_json=True)


def test_write_classic_writes_one_file_and_describes_it(table_path: str) -> None:
    make_partitioned_table(table_path)
    snap = snapshot_of(table_path)
    result = write_classic(
        snap, LAYOUT, snap.add_actions, snap.tombstones, [], [], NullCache(), part_size=None, batch_rows=2
    )
    path = f"{table_path}/_delta_log/{checkpoint_file_name(snap.version)}"
    assert (result.version, result.kind, result.files, result.sidecars) == (snap.version, "classic", (path,), ())
    rows = pq.read_table(path)
    doc = result.last_checkpoint
    # protocol + metaData + every live file and tombstone.
    assert doc["size"] == rows.num_rows == 2 + snap.add_actions.num_rows + snap.tombstones.num_rows
    assert (doc["parts"], doc["numOfAddFiles"], doc["sizeInBytes"]) == (None, snap.add_actions.num_rows, os.path.getsize(path))
    assert [f["name"] for f in doc["checkpointSchema"]["fields"]] == rows.schema.names
    assert not os.path.exists(f"{table_path}/_delta_log/_last_checkpoint")  # the caller writes the hint


def test_write_classic_splits_into_parts_past_the_part_size(table_path: str) -> None:
    make_partitioned_table(table_path)
    snap = snapshot_of(table_path)
    file_actions = snap.add_actions.num_rows + snap.tombstones.num_rows
    result = write_classic(
        snap, LAYOUT, snap.add_actions, snap.tombstones, [], [], NullCache(), part_size=3, batch_rows=10
    )
    parts = -(-file_actions // 3)
    assert result.kind == "multi-part" and result.last_checkpoint["parts"] == parts
    assert result.files == tuple(
        f"{table_path}/_delta_log/{multipart_checkpoint_file_name(snap.version, i, parts)}" for i in range(1, parts + 1)
    )
    tables = [pq.read_table(f) for f in result.files]
    assert sum(t.column("add").drop_null().length() for t in tables) == snap.add_actions.num_rows
    assert sum(t.column("protocol").drop_null().length() for t in tables) == 1  # non-file actions in one part
    assert result.last_checkpoint["size"] == sum(t.num_rows for t in tables)
