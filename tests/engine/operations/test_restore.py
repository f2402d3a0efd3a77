"""RESTORE against real tables: after it, delta-rs and delta-kernel-rs read what delta-rs read at the target.

The expected rows of every target version are taken from delta-rs before the restore,
never from our engine.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable, RestoreFilesMissingError
from tests.engine.checkpoint.table_helpers import copy_shared
from tests.oracles import read_with_deltars, read_with_kernel

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def _rows(ids: range, p: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "p": [p] * len(ids)}, schema=SCHEMA)


@pytest.fixture
def table(table_path: str) -> DeltaTable:
    """v1, v2 appends; v3 a DV delete; v4 a second DV on the same file; v5 a copy-on-write delete; v6 an append."""
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    table.append(pa.concat_tables([_rows(range(0, 5), "a"), _rows(range(5, 10), "b")]))
    table.append(_rows(range(10, 15), "a"))
    table.delete("id = 1")
    table.delete("id = 2")
    table.delete("p = 'b' AND id > 7", use_deletion_vectors=False)
    table.append(_rows(range(20, 23), "c"))
    return table


def _live_keys(path: str) -> set[tuple[str, str | None]]:
    snapshot = DeltaTable(path).snapshot()
    return set(zip(snapshot.add_actions.column("path").to_pylist(), snapshot.add_actions.column("dv_id").to_pylist(), strict=True))


@pytest.mark.parametrize("target", [1, 2, 3, 4, 5])
def test_restore_reads_like_the_target_version(table: DeltaTable, target: int) -> None:
    expected = read_with_deltars(table.root, version=target)
    target_keys = _live_keys_at(table, target)
    current_keys = _live_keys(table.root)
    result = table.restore(version=target)
    assert result.version == 7 and result.restored_version == target and result.read_version == 6
    assert read_with_deltars(table.root) == expected
    assert read_with_kernel(table.root) == expected
    assert _live_keys(table.root) == target_keys
    metrics = result.metrics
    assert metrics["numRestoredFiles"] == len(target_keys - current_keys)
    assert metrics["numRemovedFiles"] == len(current_keys - target_keys)
    assert metrics["numOfFilesAfterRestore"] == len(target_keys)
    sizes = table.snapshot(version=target).add_actions.column("size").to_pylist()
    assert metrics["tableSizeAfterRestore"] == sum(sizes)
    commit = table.history(limit=1)[0]
    assert commit["operation"] == "RESTORE" and commit["operationParameters"] == {"version": target}
    assert commit["operationMetrics"] == {k: str(v) for k, v in metrics.items()}


def _live_keys_at(table: DeltaTable, version: int) -> set[tuple[str, str | None]]:
    snapshot = table.snapshot(version=version)
    return set(zip(snapshot.add_actions.column("path").to_pylist(), snapshot.add_actions.column("dv_id").to_pylist(), strict=True))


def test_a_file_with_another_dv_in_the_target_is_swapped(table: DeltaTable) -> None:
    result = table.restore(version=3)  # the 'a' file of v1 carries v3's DV (id 1), not v4's (ids 1, 2)
    added = [a for a in _commit_actions(table, result.version) if "add" in a]
    removed = [a for a in _commit_actions(table, result.version) if "remove" in a]
    swapped = {a["add"]["path"] for a in added} & {r["remove"]["path"] for r in removed}
    assert len(swapped) == 1
    (add,) = [a["add"] for a in added if a["add"]["path"] in swapped]
    assert add["dataChange"] is True and add["deletionVector"]["cardinality"] == 1
    assert sorted(r["id"] for r in read_with_kernel(table.root)) == [0, 2, 3, 4, *range(5, 15)]


def _commit_actions(table: DeltaTable, version: int) -> list[dict]:
    import json

    return [json.loads(line) for line in Path(table.log_dir, f"{version:020d}.json").read_text().splitlines() if line]


def test_restore_by_timestamp(table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    table.append(_rows(range(0, 3), "a"))
    time.sleep(0.05)  # commit timestamps (file times) 50 ms apart
    table.append(_rows(range(3, 6), "a"))
    times = {c["version"]: c["timestamp"] for c in table.history()}
    assert times[2] > times[1]
    expected = read_with_deltars(table_path, version=1)
    at = datetime.fromtimestamp((times[1] + 10) / 1000, tz=UTC)  # after version 1, before version 2
    result = table.restore(timestamp=at)
    assert result.restored_version == 1 and result.version == 3
    assert read_with_deltars(table_path) == expected == read_with_kernel(table_path)
    assert table.history(limit=1)[0]["operationParameters"] == {"timestamp": str(at)}


def test_restoring_the_current_state_commits_nothing(table: DeltaTable) -> None:
    result = table.restore(version=6)
    assert result.version is None and table.version() == 6
    assert result.metrics["numRestoredFiles"] == result.metrics["numRemovedFiles"] == 0


def test_a_vacuumed_target_is_refused_before_committing(table: DeltaTable) -> None:
    table.vacuum(retention=timedelta(0), enforce_retention_duration=False, now=int(time.time() * 1000) + 60_000)
    version = table.version()
    current = read_with_deltars(table.root)
    with pytest.raises(RestoreFilesMissingError, match="cannot restore version 1") as caught:
        table.restore(version=1)
    assert not caught.value.retryable and caught.value.total >= 1
    assert table.version() == version and read_with_deltars(table.root) == current


def test_a_missing_deletion_vector_file_is_refused(table: DeltaTable) -> None:
    target = table.snapshot(version=3)
    dv = target.add_actions.filter(target.add_actions.column("dv_id").is_valid()).column("deletion_vector")[0].as_py()
    from airflow_delta.engine import DeletionVectorDescriptor
    from airflow_delta.engine.model.deletion_vector_files import dv_absolute_path

    Path(dv_absolute_path(table.root, DeletionVectorDescriptor.from_json(dv))).unlink()
    with pytest.raises(RestoreFilesMissingError, match="deletion_vector_"):
        table.restore(version=3)
    assert table.version() == 6


def test_metadata_is_restored_and_the_protocol_never_downgraded(table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    table.append(_rows(range(0, 3), "a"))
    with table.transaction() as txn:
        txn.set_properties({"delta.enableDeletionVectors": "true", "owner": "team-x"})
        txn.commit("SET TBLPROPERTIES")
    table.delete("id = 0")
    upgraded = table.snapshot().protocol
    assert "deletionVectors" in upgraded.writer_features
    result = table.restore(version=1)
    snapshot = table.snapshot()
    assert snapshot.protocol == upgraded  # not back to (1, 2)
    assert "owner" not in snapshot.metadata.configuration and "delta.enableDeletionVectors" not in snapshot.metadata.configuration
    assert result.metrics["numOfFilesAfterRestore"] == 1
    assert read_with_deltars(table_path) == read_with_deltars(table_path, version=1) == read_with_kernel(table_path)


@pytest.mark.parametrize("target", [1, 7, 13, 19])
def test_restore_a_spark_written_table_with_deletion_vectors(shared_tables: Path, tmp_path: Path, target: int) -> None:
    path = copy_shared(shared_tables, "table_with_deletion_logs", str(tmp_path))
    expected = read_with_deltars(path, version=target)
    result = DeltaTable(path).restore(version=target)
    # Later commits that did not change the files leave nothing to restore: no commit then.
    assert result.version == (21 if result.metrics["numRestoredFiles"] + result.metrics["numRemovedFiles"] else None)
    assert read_with_deltars(path) == expected
    assert read_with_kernel(path) == expected
