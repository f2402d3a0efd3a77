"""VACUUM against real tables: what it deletes, what it keeps, the commits it records.

Correctness is decided by the independent readers (delta-rs, delta-kernel-rs): every
version inside the retention reads the same rows after a vacuum as before it. File
modification times and the vacuum clock are set explicitly, so "old" and "young" do not
depend on how fast the machine is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import (
    DeltaTable,
    InvalidArgumentError,
    PathOutsideTableError,
    RetentionTooShortError,
    UnsupportedFeatureError,
)
from tests.engine.checkpoint.table_helpers import copy_shared
from tests.oracles import read_with_deltars, read_with_kernel

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def _rows(ids: range, p: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "p": [p] * len(ids)}, schema=SCHEMA)


def _age(path: Path, ms_ago: int, now_ms: int) -> None:
    """Set ``path``'s modification time to ``ms_ago`` before ``now_ms``."""
    seconds = (now_ms - ms_ago) / 1000
    os.utime(path, (seconds, seconds))


def _all_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def _orphan(root: Path, relative: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(_rows(range(1000, 1001), "a"), path)
    return path


@pytest.fixture
def history_table(table_path: str) -> DeltaTable:
    """Five versions: two appends, a DV delete, a second DV delete on the same file, a whole-partition delete."""
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    table.append(pa.concat_tables([_rows(range(0, 5), "a"), _rows(range(5, 10), "b")]))
    table.append(_rows(range(10, 15), "a"))
    table.delete("id = 1")
    table.delete("id = 2")
    table.delete("p = 'b'")
    return table


def _reads_by_version(path: str, versions: range) -> dict[int, list[dict]]:
    return {v: read_with_deltars(path, version=v) for v in versions}


def test_full_vacuum_deletes_expired_tombstones_orphans_and_superseded_dvs(history_table: DeltaTable) -> None:
    root = Path(history_table.root)
    now = int(time.time() * 1000) + 30 * DAY_MS  # every tombstone is 30 days old
    orphans = [_orphan(root, "p=a/part-orphan.parquet"), _orphan(root, "orphan-top.parquet"), _orphan(root, "_change_data/cdc-1.parquet")]
    hidden = [_orphan(root, "_tmp/part-x.parquet"), _orphan(root, "p=a/.part-y.parquet.crc"), _orphan(root, "_SUCCESS")]
    for path in orphans + hidden:
        _age(path, 10 * DAY_MS, now)
    latest = read_with_deltars(history_table.root)
    before = _all_files(root)
    sizes = {p: os.path.getsize(root / p) for p in before}

    result = history_table.vacuum(now=now)

    after = _all_files(root)
    removed = before - after
    live_dvs = {p for p in after if p.startswith("deletion_vector_")}
    # The p=b file, the DV file superseded by the second delete, and the three orphans (not hidden).
    assert {str(p.relative_to(root)) for p in orphans} <= removed
    assert not any(str(p.relative_to(root)) in removed for p in hidden)
    assert not any(p.startswith("_delta_log") for p in removed)
    assert sum(p.startswith("p=b/") for p in removed) == 1
    assert sum(p.startswith("deletion_vector_") for p in removed) == 1 and len(live_dvs) == 1
    assert len(removed) == 5
    assert result.num_deleted_files == result.num_files_to_delete == 5
    assert result.size_of_data_to_delete == sum(sizes[p] for p in removed)
    assert read_with_deltars(history_table.root) == latest == read_with_kernel(history_table.root)

    start, end = history_table.history(limit=2)[::-1]
    assert (start["version"], end["version"]) == (result.start_version, result.end_version) == (6, 7)
    assert start["operation"] == "VACUUM START" and end["operation"] == "VACUUM END"
    assert start["operationParameters"] == {"retentionCheckEnabled": True, "defaultRetentionMillis": 604800000}
    assert start["operationMetrics"] == {"numFilesToDelete": "5", "sizeOfDataToDelete": str(result.size_of_data_to_delete)}
    assert end["operationParameters"] == {"status": "COMPLETED"}
    # Listed: the root, p=a, p=b and _change_data; _delta_log and _tmp are hidden, never entered.
    assert end["operationMetrics"] == {"numDeletedFiles": "5", "numVacuumedDirectories": "4"}


def test_removed_sizes_are_the_bytes_on_disk(history_table: DeltaTable) -> None:
    root = Path(history_table.root)
    now = int(time.time() * 1000) + 30 * DAY_MS
    plan = history_table.vacuum(now=now, dry_run=True, file_list_path=str(root.parent / "plan.txt"))
    listed = (root.parent / "plan.txt").read_text().split()
    assert len(listed) == plan.num_files_to_delete == 2
    assert plan.size_of_data_to_delete == sum(os.path.getsize(root / p) for p in listed)
    assert set(plan.sample_paths) == set(listed)
    assert plan.start_version is None and history_table.version() == 5  # a dry run commits nothing
    assert all((root / p).exists() for p in listed)


def test_files_inside_the_retention_are_kept(history_table: DeltaTable) -> None:
    root = Path(history_table.root)
    now = int(time.time() * 1000)
    young_orphan = _orphan(root, "p=a/part-young.parquet")  # a writer that has not committed yet
    before = _all_files(root)
    # Every tombstone was written seconds ago: inside a one-hour retention.
    result = history_table.vacuum(retention=timedelta(hours=1), enforce_retention_duration=False, now=now + 60_000)
    assert result.num_deleted_files == result.num_files_to_delete == 0
    assert young_orphan.exists()
    assert all((root / p).exists() for p in before)


def test_every_version_inside_the_retention_still_reads_the_same(history_table: DeltaTable) -> None:
    path = history_table.root
    times = [c["timestamp"] for c in sorted(history_table.history(), key=lambda c: c["version"])]
    before = _reads_by_version(path, range(0, 6))
    # Retention reaching back to just after version 3's commit: versions 2.. must stay readable.
    now = int(time.time() * 1000)
    retention_ms = now - times[3] + 1
    history_table.vacuum(retention=timedelta(milliseconds=retention_ms), enforce_retention_duration=False, now=now)
    for version in range(2, 6):
        assert read_with_deltars(path, version=version) == before[version], f"version {version} changed"


def test_retention_shorter_than_the_table_s_is_refused_unless_opted_out(history_table: DeltaTable) -> None:
    with pytest.raises(RetentionTooShortError, match="enforce_retention_duration=False") as caught:
        history_table.vacuum(retention=timedelta(days=6, hours=23))
    assert not caught.value.retryable
    assert history_table.version() == 5
    history_table.vacuum(retention=timedelta(hours=1), enforce_retention_duration=False, dry_run=True)


def test_the_table_s_own_retention_is_the_default_and_the_floor(table_path: str) -> None:
    table = DeltaTable.create(
        table_path, SCHEMA, properties={"delta.deletedFileRetentionDuration": "interval 2 hours"}
    )
    table.append(_rows(range(3), "a"))
    table.delete("id >= 0")
    now = int(time.time() * 1000)
    assert table.vacuum(now=now + HOUR_MS, dry_run=True).num_files_to_delete == 0
    assert table.vacuum(now=now + 3 * HOUR_MS, dry_run=True).num_files_to_delete == 1
    result = table.vacuum(retention=timedelta(hours=2), now=now + 3 * HOUR_MS)
    assert result.num_deleted_files == 1 and result.retention_ms == 2 * HOUR_MS
    with pytest.raises(RetentionTooShortError):
        table.vacuum(retention=timedelta(hours=1))


def test_lite_reads_the_log_only(history_table: DeltaTable) -> None:
    root = Path(history_table.root)
    now = int(time.time() * 1000) + 30 * DAY_MS
    orphan = _orphan(root, "p=a/part-orphan.parquet")
    _age(orphan, 10 * DAY_MS, now)
    latest = read_with_deltars(history_table.root)
    result = history_table.vacuum(mode="lite", now=now)
    assert orphan.exists()  # never committed: only a listing finds it
    assert result.num_deleted_files == 2  # the p=b file and the superseded DV file
    assert result.metrics["numVacuumedDirectories"] == 0
    assert read_with_deltars(history_table.root) == latest == read_with_kernel(history_table.root)
    assert history_table.vacuum(now=now).num_deleted_files == 1  # full finds the orphan


def test_partition_directories_starting_with_an_underscore_are_not_hidden(table_path: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("_p", pa.string())])
    table = DeltaTable.create(table_path, schema, partition_by=["_p"])
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "_p": ["x", "y"]}, schema=schema))
    table.delete("_p = 'x'")
    root = Path(table_path)
    now = int(time.time() * 1000) + 30 * DAY_MS
    orphan = _orphan(root, "_p=y/part-orphan.parquet")
    _age(orphan, 10 * DAY_MS, now)
    result = table.vacuum(now=now)
    assert result.num_deleted_files == 2 and not orphan.exists()
    assert not list((root / "_p=x").glob("*.parquet"))
    assert read_with_deltars(table_path) == [{"id": 2, "_p": "y"}] == read_with_kernel(table_path)


def test_a_log_naming_a_path_outside_the_root_deletes_nothing(history_table: DeltaTable, tmp_path: Path) -> None:
    outside = tmp_path / "outside.parquet"
    outside.write_bytes(b"precious")
    commit = {"remove": {"path": "../outside.parquet", "deletionTimestamp": 1, "dataChange": True}}
    Path(history_table.log_dir, f"{6:020d}.json").write_text(
        json.dumps({"commitInfo": {"timestamp": 1, "operation": "DELETE"}}) + "\n" + json.dumps(commit) + "\n"
    )
    before = _all_files(Path(history_table.root))
    now = int(time.time() * 1000) + 30 * DAY_MS
    # lite deletes what expired tombstones name: the path rule refuses this one before anything is deleted.
    with pytest.raises(PathOutsideTableError, match=r"outside\.parquet"):
        history_table.vacuum(mode="lite", now=now)
    assert _all_files(Path(history_table.root)) == before
    # full deletes only what it lists below the root; the expired tombstone's path is never used.
    result = history_table.vacuum(now=now)
    assert not any("outside" in p for p in result.sample_paths)
    assert outside.read_bytes() == b"precious"


def test_a_symlinked_partition_directory_is_never_followed(history_table: DeltaTable, tmp_path: Path) -> None:
    root = Path(history_table.root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "part-0.parquet"
    victim.write_bytes(b"precious")
    (root / "p=z").symlink_to(elsewhere, target_is_directory=True)
    now = int(time.time() * 1000) + 30 * DAY_MS
    _age(victim, 10 * DAY_MS, now)
    # The log names a file behind the link as an expired tombstone.
    commit = {"remove": {"path": "p=z/part-0.parquet", "deletionTimestamp": 1, "dataChange": True, "size": 8}}
    Path(history_table.log_dir, f"{6:020d}.json").write_text(
        json.dumps({"commitInfo": {"timestamp": 1, "operation": "DELETE"}}) + "\n" + json.dumps(commit) + "\n"
    )
    full = history_table.vacuum(now=now, dry_run=True)
    assert not any(p.startswith("p=z/") for p in full.sample_paths)
    lite = history_table.vacuum(mode="lite", now=now)
    assert lite.skipped_outside_root == 1
    assert victim.read_bytes() == b"precious" and (root / "p=z").is_symlink()
    history_table.vacuum(now=now)
    assert victim.read_bytes() == b"precious"


def test_vacuum_protocol_check_refuses_a_table_with_an_unknown_feature(history_table: DeltaTable) -> None:
    protocol = {
        "protocol": {
            "minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors", "vacuumProtocolCheck"],
            "writerFeatures": ["deletionVectors", "vacuumProtocolCheck", "someFutureFeature"],
        }
    }
    Path(history_table.log_dir, f"{6:020d}.json").write_text(
        json.dumps({"commitInfo": {"timestamp": 1, "operation": "UPGRADE PROTOCOL"}}) + "\n" + json.dumps(protocol) + "\n"
    )
    before = _all_files(Path(history_table.root))
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        history_table.vacuum(now=int(time.time() * 1000) + 30 * DAY_MS)
    assert _all_files(Path(history_table.root)) == before


def test_vacuum_protocol_check_with_known_features_vacuums(table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA, properties={"delta.feature.vacuumProtocolCheck": "supported"})
    assert "vacuumProtocolCheck" in table.snapshot().protocol.reader_features
    table.append(_rows(range(3), "a"))
    table.delete("id >= 0")
    assert table.vacuum(now=int(time.time() * 1000) + 30 * DAY_MS).num_deleted_files == 1


def test_mode_is_checked(history_table: DeltaTable) -> None:
    with pytest.raises(InvalidArgumentError, match="mode"):
        history_table.vacuum(mode="LITE")


# --------------------------------------------------------------- a concurrent writer

_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import pyarrow as pa
    from airflow_delta.engine import DeltaTable, write_data_files

    path, signals, first_id, rounds = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    table = DeltaTable(path)
    for r in range(rounds):
        ids = list(range(first_id + 10 * r, first_id + 10 * r + 10))
        data = pa.table({"id": pa.array(ids, pa.int64()), "p": ["a"] * 10})
        with table.transaction() as txn:
            adds = write_data_files(txn.snapshot, data)
            (signals / f"written-{r}").touch()          # files on disk, not committed yet
            deadline = time.time() + 60
            while not (signals / f"go-{r}").exists() and time.time() < deadline:
                time.sleep(0.01)
            txn.add_files(adds, written_for_this_commit=True)
            txn.commit("WRITE", {"mode": "Append"})
    """
)


@pytest.mark.slow
def test_full_vacuum_during_a_concurrent_append_keeps_the_append_s_files(table_path: str, tmp_path: Path) -> None:
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    table.append(_rows(range(0, 5), "a"))
    root = Path(table_path)
    stale = _orphan(root, "p=a/part-dead-writer.parquet")
    _age(stale, 3 * HOUR_MS, int(time.time() * 1000))
    signals = tmp_path / "signals"
    signals.mkdir()
    rounds = 3
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH", "")])}
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, table_path, str(signals), "100", str(rounds)], env=env, stderr=subprocess.PIPE
    )
    try:
        for r in range(rounds):
            deadline = time.time() + 60
            while not (signals / f"written-{r}").exists():
                assert writer.poll() is None and time.time() < deadline, "the writer died"
                time.sleep(0.01)
            # The append's data files exist but no commit references them yet.
            result = table.vacuum(retention=timedelta(hours=1), enforce_retention_duration=False)
            if r == 0:
                assert result.num_deleted_files == 1 and not stale.exists()
            else:
                assert result.num_deleted_files == 0
            (signals / f"go-{r}").touch()
        assert writer.wait(timeout=60) == 0, writer.stderr.read().decode() if writer.stderr else ""
    finally:
        if writer.poll() is None:
            writer.kill()
    expected = sorted([*range(0, 5), *(100 + i for i in range(10 * rounds))])
    assert sorted(r["id"] for r in read_with_deltars(table_path)) == expected
    assert sorted(r["id"] for r in read_with_kernel(table_path)) == expected


def test_a_spark_table_with_change_data_feed_is_vacuumed(shared_tables: Path, tmp_path: Path) -> None:
    # Old removed data files and the expired _change_data files go, as Delta deletes them;
    # the table is writable, so VACUUM START / END are recorded.
    path = copy_shared(shared_tables, "cdf-table", str(tmp_path))
    version = DeltaTable(path).version()
    expected = read_with_deltars(path)
    result = DeltaTable(path).vacuum(retention=timedelta(0), enforce_retention_duration=False)
    assert (result.start_version, result.end_version) == (version + 1, version + 2)
    assert result.num_deleted_files == result.num_files_to_delete > 0
    assert not list(Path(path, "_change_data").rglob("*.parquet"))
    assert read_with_deltars(path) == expected == read_with_kernel(path)
