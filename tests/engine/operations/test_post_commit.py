"""Post-commit work: the .crc file, automatic checkpoints at the interval, log cleanup; never raising."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_delta.engine.checkpoint.writer import read_last_checkpoint
from airflow_delta.engine.operations.post_commit import run_post_commit
from airflow_delta.engine.table import DeltaTable
from tests.engine.checkpoint.table_helpers import IO, delete_commits_before, log_names, rs_view, snapshot_of


def test_commits_through_our_writer_checkpoint_at_the_interval_and_write_crc(table_path: str) -> None:
    # Our writer and transactions call post_commit after every commit.
    table = DeltaTable.create(table_path, pa.schema([("a", pa.int64())]), properties={"delta.checkpointInterval": "3"})
    for version in range(1, 8):
        assert table.append(pa.table({"a": [version]})).version == version
    names = log_names(table_path)
    assert [n for n in names if n.endswith(".checkpoint.parquet")] == [
        f"{3:020d}.checkpoint.parquet",
        f"{6:020d}.checkpoint.parquet",
    ]
    assert read_last_checkpoint(IO, table_path)["version"] == 6
    assert sorted(int(n[:20]) for n in names if n.endswith(".crc")) == list(range(8))
    crc = json.loads(Path(f"{table_path}/_delta_log/{7:020d}.crc").read_text())
    snap = snapshot_of(table_path)
    assert crc["numFiles"] == snap.add_actions.num_rows == 7
    assert crc["tableSizeBytes"] == sum(snap.add_actions.column("size").to_pylist())
    before = rs_view(table_path)
    delete_commits_before(table_path, 6)
    assert rs_view(table_path) == before


def test_post_commit_never_raises(table_path: str, caplog: pytest.LogCaptureFixture) -> None:
    write_deltalake(table_path, pa.table({"a": [0]}))
    table = DeltaTable(table_path)
    run_post_commit(table.location, 10)  # no such version: everything fails, nothing raises
    assert any("post-commit" in r.getMessage() for r in caplog.records)


def test_post_commit_with_a_snapshot_writes_crc_and_checkpoint(table_path: str) -> None:
    write_deltalake(table_path, pa.table({"a": [0]}), configuration={"delta.checkpointInterval": "1"})
    write_deltalake(table_path, pa.table({"a": [1]}), mode="append")
    snap = snapshot_of(table_path)
    run_post_commit(DeltaTable(table_path).location, snap)
    assert f"{1:020d}.crc" in log_names(table_path)
    assert f"{1:020d}.checkpoint.parquet" in log_names(table_path)


def test_post_commit_without_crc_history_checkpoints_and_seeds_the_crc_chain(table_path: str) -> None:
    # delta-rs writes no .crc files: nothing is derivable until a checkpoint loads the state.
    write_deltalake(table_path, pa.table({"a": [0]}), configuration={"delta.checkpointInterval": "3"})
    table = DeltaTable(table_path)
    for version in range(1, 5):
        write_deltalake(table_path, pa.table({"a": [version]}), mode="append")
        run_post_commit(table.location, version)
    names = log_names(table_path)
    assert not {f"{v:020d}.crc" for v in (1, 2)} & set(names)
    assert {f"{3:020d}.crc", f"{4:020d}.crc", f"{3:020d}.checkpoint.parquet"} <= set(names)
    crc4 = json.loads(Path(f"{table_path}/_delta_log/{4:020d}.crc").read_text())
    assert crc4["numFiles"] == 5 == snapshot_of(table_path).add_actions.num_rows
