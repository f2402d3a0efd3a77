"""The health report counts what VACUUM would delete, as its dry run does (issue 20, item 16).

Most ``remove`` actions of a table with deletion vectors name files that are still live
with a new DV; the report used to count them all (the demo's table of 10 MiB reported
510 removed files, 23 MB, past the retention, where VACUUM deletes one DV file). Here the
report is checked against VACUUM's dry runs, and the data files against delta-rs's full
VACUUM dry run (delta-rs also lists DV files that live files still need, so DV files are
left out of that comparison).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaTable
from scripts.demo import SMALL, build_table
from tests.engine.operations.test_vacuum_properties import HOUR_MS, History
from tests.engine.operations.test_vacuum_properties import step as history_step

DAY_MS = 86_400_000


def _delta_rs_full_dry_run(root: str) -> set[str]:
    listed = deltalake.DeltaTable(root).vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True)
    return {os.path.relpath(p, root) if os.path.isabs(p) else p for p in listed}


def test_the_demo_table_reports_what_vacuum_deletes(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    build_table(root, SMALL)  # DV deletes on small files; delta.deletedFileRetentionDuration = 0 hours
    table = DeltaTable(str(root))
    table.delete("day = '2026-01-04'")  # and whole files removed: data files for VACUUM too
    now = int(time.time() * 1000) + 60_000
    report = table.health(now=now)
    lite = table.vacuum(mode="lite", dry_run=True, now=now, file_list_path=str(tmp_path / "lite.txt"))
    full = table.vacuum(dry_run=True, now=now, file_list_path=str(tmp_path / "full.txt"))
    assert report.tombstones > 4 * report.vacuumable_tombstones  # the DV updates are not counted
    assert report.vacuumable_tombstones == lite.num_files_to_delete == full.num_files_to_delete > 0
    assert report.vacuumable_bytes == lite.size_of_data_to_delete == full.size_of_data_to_delete > 0
    planned = set((tmp_path / "full.txt").read_text().split())
    assert planned == set((tmp_path / "lite.txt").read_text().split())
    assert {p for p in planned if not p.startswith("deletion_vector_")} == {
        p for p in _delta_rs_full_dry_run(str(root)) if not p.startswith("deletion_vector_")
    }
    assert any(r.startswith(f"VACUUM: {lite.num_files_to_delete} removed files") for r in report.recommendations)


def test_optimize_recommended_right_after_one_says_how_many_files_came_since(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    build_table(root, SMALL)
    table = DeltaTable(str(root))
    optimized = table.optimize()
    assert table.health().last_optimize_version is None  # nothing to recommend: no reason to give
    day = pa.table({"id": pa.array([10**9, 10**9 + 1], pa.int64()), "day": ["2026-01-01"] * 2,
                    "country": ["DE"] * 2, "amount": [1.0, 2.0]})
    table.append(day.slice(0, 1))
    table.append(day.slice(1, 1))
    report = table.health()
    assert (report.last_optimize_version, report.small_files_since_optimize) == (optimized.version, 2)
    assert report.recommendations[0].startswith("OPTIMIZE:")
    assert f"2 of them added since the last OPTIMIZE, version {optimized.version}" in report.recommendations[0]


no_log_cleanup = history_step.filter(lambda s: s[0] != "cleanup_log")


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(no_log_cleanup, min_size=3, max_size=10), days_later=st.sampled_from([0, 8]))
def test_the_report_agrees_with_vacuum_dry_runs_over_random_histories(steps: list[tuple], days_later: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = f"{directory}/table"
        Path(path).mkdir()
        history = History(path, base_ms=int(time.time() * 1000) + 24 * HOUR_MS)
        history.run(("append", "a", 3))
        for action in steps:
            history.run(action)
        now = history.now() + days_later * DAY_MS  # the table's retention: 7 days
        report = history.table.health(now=now)
        lite = history.table.vacuum(mode="lite", dry_run=True, now=now)
        full = history.table.vacuum(dry_run=True, now=now, file_list_path=f"{directory}/full.txt")
        orphans = set(history.orphans) & set(Path(f"{directory}/full.txt").read_text().split())
        orphan_bytes = sum(Path(path, o).stat().st_size for o in orphans)
        assert report.vacuumable_tombstones == lite.num_files_to_delete == full.num_files_to_delete - len(orphans)
        assert report.vacuumable_bytes == lite.size_of_data_to_delete == full.size_of_data_to_delete - orphan_bytes
        if days_later == 0:
            assert report.vacuumable_tombstones == 0


@pytest.mark.slow  # 13 s at load average 32 on 2 cores (two commits, a VACUUM, a checkpoint)
def test_tombstones_a_vacuum_deleted_are_not_counted_before_or_after_a_checkpoint(tmp_path: Path) -> None:
    """The state keeps a tombstone until a checkpoint drops it past the retention, also after
    VACUUM deleted its file; the report counts only removed files still on storage (the
    oracle: the files themselves), in the log tail and in a checkpoint written after the VACUUM."""
    from tests.engine.fleet.helpers import rows, vacuum_table

    table = vacuum_table(str(tmp_path / "t"))  # 4 appends compacted: 4 tombstones
    later = int(time.time() * 1000) + 8 * DAY_MS  # past the 7-day retention

    def still_on_storage() -> tuple[int, int]:
        paths = table.snapshot().tombstones.column("path").to_pylist()
        sizes = [(tmp_path / "t" / p).stat().st_size for p in paths if (tmp_path / "t" / p).exists()]
        return len(sizes), sum(sizes)

    before = table.health(now=later)
    assert (before.tombstones, before.tombstone_bytes) == still_on_storage() and before.tombstones == 4
    assert table.vacuum(mode="lite", now=later).num_deleted_files == 4
    assert len(table.snapshot().tombstones) == 4  # still in the state ...
    after = table.health(now=later)
    assert (after.tombstones, after.tombstone_bytes, after.vacuumable_tombstones) == (0, 0, 0)  # ... not counted
    # New removes after the VACUUM, then a checkpoint (at today's clock it keeps every tombstone).
    table.append(rows(range(3), "2024-01-02"))
    table.delete("day = '2024-01-02'")  # the whole file: one remove
    table.checkpoint()
    snapshot = table.snapshot()
    assert snapshot.log_segment.checkpoint_version == snapshot.version and len(snapshot.tombstones) == 5
    report = table.health(now=later)
    assert (report.tombstones, report.tombstone_bytes) == still_on_storage() and report.tombstones == 1
    assert report.vacuumable_tombstones == table.vacuum(mode="lite", now=later, dry_run=True).num_files_to_delete == 1
