"""Lite VACUUM keeps Delta's ``_delta_log/_last_vacuum_info`` (issue 20, item 14).

Delta's lite VACUUM reads the ``remove`` (and ``cdc``) actions of the commits after the
last vacuum's ``latestCommitVersionOutsideOfRetentionWindow`` up to the last commit outside
the retention, and records that version afterwards. So a file it deleted is never planned
again, and ours and Delta's can take turns on one table. When log cleanup has deleted
commits it needs, it refuses (Delta's ``DELTA_CANNOT_VACUUM_LITE``) and a full VACUUM is
the way out.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable, VacuumLiteNotPossibleError
from tests.oracles import read_with_deltars, read_with_kernel

DAY_MS = 86_400_000
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def _rows(ids: range, p: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "p": [p] * len(ids)}, schema=SCHEMA)


def _history(path: str) -> DeltaTable:
    """Two appends, two DV deletes on one file (its DV superseded), a whole-partition delete."""
    table = DeltaTable.create(path, SCHEMA, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    table.append(pa.concat_tables([_rows(range(0, 5), "a"), _rows(range(5, 10), "b")]))
    table.append(_rows(range(10, 15), "a"))
    table.delete("id = 1")
    table.delete("id = 2")
    table.delete("p = 'b'")
    return table


def _info(root: str) -> dict:
    return json.loads(Path(root, "_delta_log", "_last_vacuum_info").read_text())


def _later() -> int:
    return int(time.time() * 1000) + 30 * DAY_MS


def test_a_file_lite_vacuum_deleted_is_never_planned_again(tmp_path: Path) -> None:
    table = _history(str(tmp_path / "t"))
    latest = table.version()
    before = read_with_deltars(table.root)
    now = _later()
    first = table.vacuum(mode="lite", now=now)
    assert first.num_deleted_files == first.num_files_to_delete == 2  # the p=b file, the superseded DV file
    # Delta's file and field: every commit up to the latest is outside the retention.
    assert _info(table.root) == {"latestCommitVersionOutsideOfRetentionWindow": latest}
    again = table.vacuum(mode="lite", dry_run=True, now=now)
    assert again.num_files_to_delete == 0 and again.size_of_data_to_delete == 0
    assert table.vacuum(mode="lite", now=now).num_deleted_files == 0
    assert table.vacuum(dry_run=True, now=now).num_files_to_delete == 0  # full agrees: nothing is left
    assert read_with_deltars(table.root) == read_with_kernel(table.root) == before


def test_later_removes_are_found_after_an_earlier_vacuum(tmp_path: Path) -> None:
    table = _history(str(tmp_path / "t"))
    now = _later()
    table.vacuum(mode="lite", now=now)
    table.delete("id >= 10")  # removes the second file of p=a
    plan = table.vacuum(mode="lite", dry_run=True, now=now)
    assert plan.num_files_to_delete == 1 and plan.sample_paths[0].startswith("p=a/")
    table.vacuum(mode="lite", now=now)
    assert _info(table.root)["latestCommitVersionOutsideOfRetentionWindow"] == table.version() - 2  # before START/END


def test_a_full_vacuum_records_where_lite_starts(tmp_path: Path) -> None:
    table = _history(str(tmp_path / "t"))
    now = _later()
    assert table.vacuum(now=now).num_deleted_files == 2
    assert _info(table.root) == {"latestCommitVersionOutsideOfRetentionWindow": 5}
    assert table.vacuum(mode="lite", dry_run=True, now=now).num_files_to_delete == 0


def test_lite_starts_after_the_version_delta_recorded(tmp_path: Path) -> None:
    table = _history(str(tmp_path / "t"))
    log = Path(table.root, "_delta_log")
    # As Delta writes it after a vacuum whose retention ended at version 4: the p=b remove (5) is new.
    (log / "_last_vacuum_info").write_text('{"latestCommitVersionOutsideOfRetentionWindow":4}')
    plan = table.vacuum(mode="lite", dry_run=True, now=_later())
    assert plan.num_files_to_delete == 1 and plan.sample_paths[0].startswith("p=b/")
    # Delta writes {} after a full vacuum (no version): lite then reads every commit.
    (log / "_last_vacuum_info").write_text("{}")
    assert table.vacuum(mode="lite", dry_run=True, now=_later()).num_files_to_delete == 2


def test_nothing_outside_the_retention_plans_nothing_and_records_nothing(tmp_path: Path) -> None:
    table = _history(str(tmp_path / "t"))
    result = table.vacuum(mode="lite")  # every commit is seconds old: inside the 7 days
    assert result.num_files_to_delete == 0
    assert not Path(table.root, "_delta_log", "_last_vacuum_info").exists()


def test_lite_refuses_when_log_cleanup_deleted_commits_it_needs(tmp_path: Path) -> None:
    table = _history(str(tmp_path / "t"))
    table.checkpoint()
    for version in range(2):  # as log cleanup would: the checkpoint keeps the table readable
        Path(table.root, "_delta_log", f"{version:020d}.json").unlink()
    now = _later()
    with pytest.raises(VacuumLiteNotPossibleError, match="mode='full'") as raised:
        table.vacuum(mode="lite", dry_run=True, now=now)
    assert raised.value.retryable is False
    assert (raised.value.first_needed, raised.value.earliest_commit) == (0, 2)
    table.vacuum(now=now)  # full: lists the table, records the boundary
    assert table.vacuum(mode="lite", dry_run=True, now=now).num_files_to_delete == 0


def test_lite_deletes_change_data_files_of_commits_outside_the_retention(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA, partition_by=["p"], properties={"delta.enableChangeDataFeed": "true"})
    table.append(pa.table({"id": list(range(10)), "p": ["a", "b"] * 5}, schema=SCHEMA))
    table.delete("id < 4")
    change_files = sorted(Path(path, "_change_data").rglob("*.parquet"))
    assert len(change_files) == 2
    result = table.vacuum(mode="lite", now=_later())
    assert result.num_deleted_files == 4  # the two rewritten data files and their change data
    assert not list(Path(path, "_change_data").rglob("*.parquet"))
    assert read_with_deltars(path) == [{"id": i, "p": "ab"[i % 2]} for i in range(4, 10)]


def test_a_recorded_latest_version_is_not_read_again(tmp_path: Path) -> None:
    # A table vacuumed without VACUUM START / END commits (one this engine may vacuum but not
    # write) records its latest version; with no commit since, there is nothing new to read.
    table = _history(str(tmp_path / "t"))
    Path(table.root, "_delta_log", "_last_vacuum_info").write_text(
        json.dumps({"latestCommitVersionOutsideOfRetentionWindow": table.version()})
    )
    assert table.vacuum(mode="lite", dry_run=True, now=_later()).num_files_to_delete == 0
