"""V2 checkpoints written directly: sidecars first, then the top-level file naming them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq

from airflow_delta.engine.checkpoint.file_names import SIDECAR_DIR_NAME, checkpoint_file_name
from airflow_delta.engine.checkpoint.rows import AddColumnLayout, NullCache
from airflow_delta.engine.checkpoint.schema import add_type
from airflow_delta.engine.checkpoint.v2 import write_v2
from tests.engine.checkpoint.table_helpers import make_partitioned_table, snapshot_of

LAYOUT = AddColumnLayout(add_type(), stats_as_json=True)


def test_write_v2_names_every_sidecar_from_its_top_level_file(table_path: str) -> None:
    make_partitioned_table(table_path)
    snap = snapshot_of(table_path)
    file_actions = snap.add_actions.num_rows + snap.tombstones.num_rows
    result = write_v2(
        snap, LAYOUT, snap.add_actions, snap.tombstones, [], [], NullCache(),
        batch_rows=10, sidecar_size=2, file_format="json", classic_compat=False,
    )
    assert result.kind == "v2" and len(result.files) == 1 and len(result.sidecars) == -(-file_actions // 2)
    assert all(os.path.dirname(s) == f"{table_path}/_delta_log/{SIDECAR_DIR_NAME}" for s in result.sidecars)
    sidecar_rows = [pq.read_table(s) for s in result.sidecars]
    assert sum(t.num_rows for t in sidecar_rows) == file_actions
    assert sum(t.column("add").drop_null().length() for t in sidecar_rows) == snap.add_actions.num_rows

    top = [json.loads(line) for line in Path(result.files[0]).read_text().splitlines()]
    named = sorted(a["sidecar"]["path"] for a in top if "sidecar" in a)
    assert named == sorted(os.path.basename(s) for s in result.sidecars)
    tags = next(a["checkpointMetadata"] for a in top if "checkpointMetadata" in a)["tags"]
    assert tags["numOfAddFiles"] == str(snap.add_actions.num_rows) and tags["sidecarNumActions"] == str(file_actions)

    v2_info = result.last_checkpoint["v2Checkpoint"]
    assert v2_info["path"] == os.path.basename(result.files[0])
    assert sorted(s["path"] for s in v2_info["sidecarFiles"]) == named
    assert not os.path.exists(f"{table_path}/_delta_log/{checkpoint_file_name(snap.version)}")


def test_write_v2_adds_a_classic_named_copy_for_older_clients(table_path: str) -> None:
    make_partitioned_table(table_path, commits=2)
    snap = snapshot_of(table_path)
    result = write_v2(
        snap, LAYOUT, snap.add_actions, snap.tombstones, [], [], NullCache(),
        batch_rows=10, sidecar_size=100, file_format="parquet", classic_compat=True,
    )
    top, compat = result.files
    assert compat == f"{table_path}/_delta_log/{checkpoint_file_name(snap.version)}"
    assert pq.read_table(top).to_pylist() == pq.read_table(compat).to_pylist()
    assert pq.read_table(top).column("sidecar").drop_null().length() == len(result.sidecars) == 1
