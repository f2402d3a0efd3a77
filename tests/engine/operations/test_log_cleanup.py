"""Metadata cleanup: expired log files go, every retained version stays loadable.

Each known way other implementations lost data has a test here:

* delta-rs #2016 / #2174: the newest checkpoint was deleted along with the commits it
  covers, leaving a table with no readable version;
* delta-rs #3692 (and delta #606): only the latest checkpoint was considered, so
  commits that retained versions still need were deleted (or cleanup crashed with no
  checkpoint at all);
* file modification times that go backwards (copied or touched logs) moving the cutoff;
* an incomplete multi-part or unreadable checkpoint used as the new start of the log.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RsTable
from deltalake import write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.checkpoint.writer import read_last_checkpoint, write_checkpoint
from airflow_delta.engine.errors import CorruptCommitError, DeltaError
from airflow_delta.engine.operations.log_cleanup import cleanup_log
from airflow_delta.engine.read.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.storage.fileio import LocalFileIO
from airflow_delta.engine.table import DeltaTable
from tests.engine.checkpoint.table_helpers import copy_shared, our_view, rs_view

IO = LocalFileIO()
DAY = 86_400_000
HOUR = 3_600_000
DAY0 = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp() * 1000)  # a UTC midnight


def commit_time(version: int) -> int:
    """Synthetic commits are one day apart, at noon UTC."""
    return DAY0 + version * DAY + 12 * HOUR


def now_for_cutoff(cutoff_version: int, retention: timedelta = timedelta(days=1)) -> int:
    """A clock at which commits 0..cutoff_version (and no later one) are older than the cutoff."""
    return DAY0 + (cutoff_version + 1) * DAY + int(retention.total_seconds() * 1000) + HOUR


def set_mtime(path: str, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def log_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(f"{path}/_delta_log") if not n.startswith("_") or n == "_last_checkpoint")


def _metadata(config: dict[str, str] | None = None) -> dict[str, Any]:
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    return {"id": "cleanup-test", "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema),
            "partitionColumns": [], "configuration": config or {}, "createdTime": DAY0}


def build_log(
    path: str,
    num_commits: int,
    checkpoints: tuple[int, ...] = (),
    *,
    config: dict[str, str] | None = None,
    protocol: dict[str, Any] | None = None,
    ict: bool = False,
) -> None:
    """A synthetic log: one add per commit, a remove of an older file every third commit."""
    log_dir = f"{path}/_delta_log"
    os.makedirs(log_dir, exist_ok=True)
    for version in range(num_commits):
        info: dict[str, Any] = {"timestamp": commit_time(version), "operation": "WRITE"}
        if ict:
            info["inCommitTimestamp"] = commit_time(version)
        actions: list[dict[str, Any]] = [{"commitInfo": info}]
        if version == 0:
            actions.append({"protocol": protocol or {"minReaderVersion": 1, "minWriterVersion": 2}})
            actions.append({"metaData": _metadata(config)})
        actions.append({"add": {"path": f"f{version}.parquet", "partitionValues": {}, "size": 100 + version,
                                "modificationTime": commit_time(version), "dataChange": True}})
        if version % 3 == 2:
            actions.append({"remove": {"path": f"f{version - 2}.parquet", "deletionTimestamp": commit_time(version),
                                       "dataChange": True, "size": 98 + version}})
        file = f"{log_dir}/{version:020d}.json"
        Path(file).write_text("".join(json.dumps(a) + "\n" for a in actions))
        set_mtime(file, commit_time(version))
    for version in checkpoints:
        add_checkpoint(path, version)


def add_checkpoint(path: str, version: int, **options: Any) -> list[str]:
    result = write_checkpoint(load_snapshot(IO, path, version), now_ms=commit_time(version), **options)
    for file in result.files + result.sidecars:
        set_mtime(file, commit_time(version) + 1000)
    return list(result.files + result.sidecars)


def views(path: str, versions: range) -> dict[int, Any]:
    return {v: our_view(path, v) for v in versions}


def cleanup(path: str, cutoff_version: int, snapshot: Snapshot | None = None, dry_run: bool = False) -> list[str]:
    """Log cleanup with a one-day retention at a clock that puts the cutoff at ``cutoff_version``.

    ``snapshot`` stands for the latest snapshot (one loaded before the log was damaged).
    """
    table = DeltaTable(path)
    latest = snapshot if snapshot is not None else table.snapshot()
    deleted = cleanup_log(
        table.location, latest, retention=timedelta(days=1), now=now_for_cutoff(cutoff_version), dry_run=dry_run
    )
    return [os.path.basename(p) for p in deleted]


def name(version: int, suffix: str = "json") -> str:
    return f"{version:020d}.{suffix}"


# ------------------------------------------------------------ the basic rule


def test_deletes_everything_before_the_newest_checkpoint_at_or_before_the_cutoff(table_path: str) -> None:
    build_log(table_path, 14, checkpoints=(4, 8, 12))
    expected = views(table_path, range(8, 14))

    deleted = cleanup(table_path, cutoff_version=10)

    assert deleted == [name(v) for v in range(8)][:4] + [name(4, "checkpoint.parquet")] + [name(v) for v in range(4, 8)]
    remaining = log_files(table_path)
    assert name(8) in remaining and name(8, "checkpoint.parquet") in remaining
    assert name(4) not in remaining
    assert views(table_path, range(8, 14)) == expected


def test_deletion_order_is_oldest_version_first(table_path: str) -> None:
    build_log(table_path, 9, checkpoints=(3, 6))
    deleted = cleanup(table_path, cutoff_version=8)
    versions = [int(n[:20]) for n in deleted]
    assert versions == sorted(versions)


def test_dry_run_deletes_nothing_and_lists_the_same(table_path: str) -> None:
    build_log(table_path, 9, checkpoints=(3, 6))
    before = log_files(table_path)
    planned = cleanup(table_path, cutoff_version=8, dry_run=True)
    assert planned and log_files(table_path) == before
    assert cleanup(table_path, cutoff_version=8) == planned


def test_retention_comes_from_the_table_property(table_path: str) -> None:
    build_log(table_path, 9, checkpoints=(3, 6), config={"delta.logRetentionDuration": "interval 2 days"})
    now = now_for_cutoff(7, retention=timedelta(days=2))
    deleted = DeltaTable(table_path).cleanup_log(now=now)
    assert os.path.basename(deleted[-1]) == name(5)  # anchor: checkpoint 6 <= cutoff commit 7
    assert [os.path.basename(p) for p in deleted if "checkpoint" in p] == [name(3, "checkpoint.parquet")]


def test_cutoff_is_midnight_utc(table_path: str) -> None:
    build_log(table_path, 6, checkpoints=(2, 4))
    # Commit 4 is at noon of day 4; at 13:00 on day 5 with 1 day retention the raw cutoff is
    # 13:00 on day 4 (after commit 4), but the protocol truncates it to midnight: only up to 3.
    now = DAY0 + 5 * DAY + 13 * HOUR
    deleted = DeltaTable(table_path).cleanup_log(retention=timedelta(days=1), now=now)
    assert name(2, "checkpoint.parquet") in log_files(table_path)
    assert [os.path.basename(p) for p in deleted] == [name(0), name(1)]


# ------------------------------------------------- failure modes seen elsewhere


def test_newest_checkpoint_and_its_commit_survive_when_everything_expired(tmp_path: Path) -> None:
    """delta-rs #2016 / #2174: deleting the latest checkpoint with all commits corrupted the table."""
    path = str(tmp_path / "t")
    for i in range(5):
        write_deltalake(path, pa.table({"a": [i]}), mode="append")
    RsTable(path).create_checkpoint()  # delta-rs' own checkpoint at the latest version
    for entry in os.listdir(f"{path}/_delta_log"):
        set_mtime(f"{path}/_delta_log/{entry}", DAY0)
    before = rs_view(path)
    ours_before = our_view(path)

    deleted = DeltaTable(path).cleanup_log(retention=timedelta(0), now=DAY0 + 10 * DAY)

    assert sorted(os.path.basename(p) for p in deleted) == [name(v) for v in range(4)]
    assert {name(4), name(4, "checkpoint.parquet")} <= set(log_files(path))
    assert rs_view(path) == before
    assert our_view(path) == ours_before


def test_no_checkpoint_at_or_before_the_cutoff_deletes_nothing(table_path: str) -> None:
    """delta-rs #3692: with only a later checkpoint, commits retained versions need were deleted."""
    build_log(table_path, 10, checkpoints=(9,))
    expected = views(table_path, range(10))
    assert cleanup(table_path, cutoff_version=5) == []
    assert views(table_path, range(10)) == expected


def test_a_table_without_any_checkpoint_is_left_alone(table_path: str) -> None:
    build_log(table_path, 6)
    assert cleanup(table_path, cutoff_version=5) == []
    assert len(log_files(table_path)) == 6


def test_versions_between_cutoff_and_next_checkpoint_stay_loadable(table_path: str) -> None:
    """delta #606: keep the checkpoint before the cutoff, not the first one after it."""
    build_log(table_path, 13, checkpoints=(5, 10))
    expected = views(table_path, range(5, 13))
    deleted = cleanup(table_path, cutoff_version=8)
    assert max(int(n[:20]) for n in deleted) == 4
    assert views(table_path, range(5, 13)) == expected


def test_modification_times_going_backwards_do_not_move_the_cutoff(table_path: str) -> None:
    build_log(table_path, 13, checkpoints=(5, 10))
    expected = views(table_path, range(5, 13))
    # Commit 11 looks ancient (touched/copied); a naive cutoff would pick it and anchor
    # on checkpoint 10, deleting versions 5..9 that are still within retention.
    set_mtime(f"{table_path}/_delta_log/{name(11)}", DAY0 - 100 * DAY)
    deleted = cleanup(table_path, cutoff_version=7)
    assert max(int(n[:20]) for n in deleted) == 4
    assert views(table_path, range(5, 13)) == expected


def test_in_commit_timestamps_decide_commit_age(table_path: str) -> None:
    protocol = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["inCommitTimestamp"]}
    build_log(table_path, 9, checkpoints=(3, 6), config={"delta.enableInCommitTimestamps": "true"},
              protocol=protocol, ict=True)
    # File times say "all brand new"; the in-commit timestamps say days apart.
    for entry in os.listdir(f"{table_path}/_delta_log"):
        set_mtime(f"{table_path}/_delta_log/{entry}", DAY0 + 1000 * DAY)
    deleted = cleanup(table_path, cutoff_version=7)
    assert [n for n in deleted if "checkpoint" in n] == [name(3, "checkpoint.parquet")]
    assert max(int(n[:20]) for n in deleted) == 5


@pytest.mark.parametrize(
    "first_line",
    [b'{"commitInfo": ' * 5000 + b"{}" + b"}" * 5000, b'{"commitInfo": {"operation": "\xff\xfe"}}', b"[1, 2]", b"{not json"],
    ids=["deep-nesting", "invalid-utf8", "not-an-object", "not-json"],
)
def test_a_corrupt_commit_read_for_its_timestamp_is_a_typed_error_and_nothing_is_deleted(
    table_path: str, first_line: bytes
) -> None:
    protocol = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["inCommitTimestamp"]}
    build_log(table_path, 9, checkpoints=(3, 6), config={"delta.enableInCommitTimestamps": "true"},
              protocol=protocol, ict=True)
    damaged = f"{table_path}/_delta_log/{name(4)}"  # before checkpoint 6: only cleanup reads it
    rest = Path(damaged).read_bytes().split(b"\n", 1)[1]
    Path(damaged).write_bytes(first_line + b"\n" + rest)
    before = sorted(os.listdir(f"{table_path}/_delta_log"))
    with pytest.raises(CorruptCommitError, match=rf"{name(4)}.*line 1"):
        cleanup(table_path, cutoff_version=7)
    assert sorted(os.listdir(f"{table_path}/_delta_log")) == before


def test_incomplete_multi_part_checkpoint_is_not_an_anchor(table_path: str) -> None:
    build_log(table_path, 10, checkpoints=(3,))
    parts = add_checkpoint(table_path, 6, part_size=3)
    assert len(parts) > 1
    os.remove(parts[0])  # a writer died before finishing the set
    expected = views(table_path, range(3, 10))
    deleted = cleanup(table_path, cutoff_version=8)
    assert max(int(n[:20]) for n in deleted) == 2
    assert views(table_path, range(3, 10)) == expected


def test_unreadable_checkpoint_is_not_an_anchor(table_path: str) -> None:
    build_log(table_path, 10, checkpoints=(3, 6))
    latest = load_snapshot(IO, table_path)  # taken before the damage (our reader does not skip it)
    broken = f"{table_path}/_delta_log/{name(6, 'checkpoint.parquet')}"
    Path(broken).write_bytes(Path(broken).read_bytes()[:100])  # truncated by a non-atomic store
    set_mtime(broken, commit_time(6))
    deleted = cleanup(table_path, cutoff_version=8, snapshot=latest)
    assert max(int(n[:20]) for n in deleted) == 2
    assert name(3, "checkpoint.parquet") in log_files(table_path)


def _corrupt_pages(path: str, columns: str) -> None:
    """Overwrite the data pages of some column chunks with garbage, leaving the footer valid."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    data = bytearray(Path(path).read_bytes())
    for rg in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            chunk = meta.row_group(rg).column(c)
            if columns == "all" or chunk.path_in_schema.startswith(columns):
                start = chunk.data_page_offset
                for k in range(start, start + chunk.total_compressed_size):
                    data[k] ^= 0x5A
    Path(path).write_bytes(bytes(data))
    assert pq.read_metadata(path).num_rows == meta.num_rows  # the footer still reads


def _damage_classic_pages(path: str, columns: str) -> None:
    _corrupt_pages(f"{path}/_delta_log/{name(6, 'checkpoint.parquet')}", columns)


def _multipart(path: str) -> list[str]:
    os.remove(f"{path}/_delta_log/{name(6, 'checkpoint.parquet')}")
    parts = sorted(add_checkpoint(path, 6, part_size=3, update_last_checkpoint=False))
    assert len(parts) == 3, parts
    return parts


def _part_one_missing_and_stray_four_of_three(path: str) -> None:
    parts = _multipart(path)
    shutil.copy(parts[1], parts[1].replace(".0000000002.0000000003.", ".0000000004.0000000003."))
    os.remove(parts[0])


def _stray_four_of_three(path: str) -> None:
    parts = _multipart(path)
    shutil.copy(parts[1], parts[1].replace(".0000000002.0000000003.", ".0000000004.0000000003."))


def _hint(path: str, **body: Any) -> None:
    from airflow_delta.engine.checkpoint.writer import write_last_checkpoint

    write_last_checkpoint(IO, path, {"version": 6, **body}, allow_older=True)


def _hint_claims_parts(path: str) -> None:
    _hint(path, size=read_last_checkpoint(IO, path)["size"], parts=3)  # type: ignore[index]


def _hint_claims_size(path: str) -> None:
    _hint(path, size=read_last_checkpoint(IO, path)["size"] + 5)  # type: ignore[index]


def _multipart_hint_claims_other_parts(path: str) -> None:
    _multipart(path)
    _hint(path, size=read_last_checkpoint(IO, path)["size"], parts=4)  # type: ignore[index]


def _no_metadata(path: str) -> None:
    import pyarrow.parquet as pq

    file = f"{path}/_delta_log/{name(6, 'checkpoint.parquet')}"
    table = pq.read_table(file)
    pq.write_table(table.drop_columns(["metaData"]), file)


# Ways checkpoint 6 can be unfit to start the log from, though its footer (or our
# reader) may accept it: cleanup must anchor on checkpoint 3 instead.
DOUBTFUL_CHECKPOINTS = {
    "pages of every column corrupt, footer valid": lambda p: _damage_classic_pages(p, "all"),
    "pages of add.stats corrupt (a column other readers read)": lambda p: _damage_classic_pages(p, "add.stats"),
    "pages of metaData corrupt": lambda p: _damage_classic_pages(p, "metaData"),
    "multi-part: part 1 missing and a stray part 4 of 3": _part_one_missing_and_stray_four_of_three,
    "multi-part: complete, plus a stray part 4 of 3": _stray_four_of_three,
    "_last_checkpoint claims 3 parts of a classic checkpoint": _hint_claims_parts,
    "_last_checkpoint claims a wrong size": _hint_claims_size,
    "_last_checkpoint claims 4 parts of a 3-part set": _multipart_hint_claims_other_parts,
    "no metaData action": _no_metadata,
}


@pytest.mark.parametrize("hint_parts", [None, 3])
def test_a_sound_multi_part_checkpoint_is_an_anchor(table_path: str, hint_parts: int | None) -> None:
    build_log(table_path, 10, checkpoints=(3, 6))
    size = read_last_checkpoint(IO, table_path)["size"]  # type: ignore[index]
    _multipart(table_path)
    if hint_parts is None:
        os.remove(f"{table_path}/_delta_log/_last_checkpoint")  # it named the classic checkpoint 6, now gone
    else:
        _hint(table_path, size=size, parts=hint_parts)
    expected = views(table_path, range(6, 10))
    deleted = cleanup(table_path, cutoff_version=8)
    assert max(int(n[:20]) for n in deleted) == 5
    assert views(table_path, range(6, 10)) == expected


@pytest.mark.parametrize("damage", sorted(DOUBTFUL_CHECKPOINTS))
def test_cleanup_never_anchors_on_a_checkpoint_readers_may_not_read_in_full(table_path: str, damage: str) -> None:
    build_log(table_path, 10, checkpoints=(3, 6))
    latest = load_snapshot(IO, table_path)  # taken before the damage
    expected = views(table_path, range(3, 10))
    DOUBTFUL_CHECKPOINTS[damage](table_path)
    try:
        readable = views(table_path, range(3, 10)) == expected
    except DeltaError:
        readable = False  # our reader does not fall back past this damage: cleanup must not make it worse
    deleted = cleanup(table_path, cutoff_version=8, snapshot=latest)
    assert max(int(n[:20]) for n in deleted) == 2, deleted
    assert name(3, "checkpoint.parquet") in log_files(table_path)
    assert all(name(v) in log_files(table_path) for v in range(3, 10))
    if readable:
        assert views(table_path, range(3, 10)) == expected


@pytest.mark.parametrize("damage", ["missing", "truncated", "pages corrupt"])
def test_v2_checkpoint_with_a_bad_sidecar_is_not_an_anchor(shared_tables: Path, tmp_path: Path, damage: str) -> None:
    path = copy_shared(shared_tables, "checkpoint-v2-table", str(tmp_path))
    log_dir = f"{path}/_delta_log"
    for entry in os.listdir(log_dir):
        if entry[:20].isdigit():
            set_mtime(f"{log_dir}/{entry}", commit_time(int(entry[:20])))
    sidecars = sorted(f"{log_dir}/_sidecars/{s}" for s in os.listdir(f"{log_dir}/_sidecars") if s.startswith(f"{8:020d}"))
    assert sidecars
    if damage == "missing":
        os.remove(sidecars[0])
    elif damage == "truncated":
        Path(sidecars[0]).write_bytes(Path(sidecars[0]).read_bytes()[:-20])
    else:
        _corrupt_pages(sidecars[0], "all")
    commits_before = {n for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit() and "." not in n[:-5]}
    deleted = [os.path.basename(p) for p in DeltaTable(path).cleanup_log(retention=timedelta(days=1),
                                                                         now=now_for_cutoff(8))]
    # Checkpoint 8 is no anchor: the commits after the older one survive.
    assert all(int(n[:20]) < 6 for n in deleted), deleted
    assert {n for n in commits_before if int(n[:20]) >= 6} <= set(os.listdir(log_dir))


def test_a_cleanup_with_nothing_to_delete_reads_no_checkpoint(table_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Cleanup runs after every automatic checkpoint; reading the anchor in full each time
    # would cost a full checkpoint read per checkpoint interval for nothing.
    from airflow_delta.engine.operations import log_cleanup

    build_log(table_path, 6, checkpoints=(3,))
    assert max(int(n[:20]) for n in cleanup(table_path, cutoff_version=5)) == 2
    reads: list[object] = []
    monkeypatch.setattr(log_cleanup, "verify_checkpoint", lambda *args: reads.append(args) or 0)
    assert cleanup(table_path, cutoff_version=5) == []
    assert reads == []


# ----------------------------------------------------------- what gets deleted


def test_crc_and_compaction_files_follow_their_versions(table_path: str) -> None:
    build_log(table_path, 9, checkpoints=(3, 6))
    log_dir = f"{table_path}/_delta_log"
    for v in range(9):
        Path(f"{log_dir}/{name(v, 'crc')}").write_text("{}")
    for start, end in ((1, 2), (5, 7), (7, 8)):
        Path(f"{log_dir}/{start:020d}.{end:020d}.compacted.json").write_text("")
    deleted = cleanup(table_path, cutoff_version=8)
    assert {name(v, "crc") for v in range(6)} <= set(deleted)
    assert name(6, "crc") not in deleted
    # Compactions starting at or before the anchor version go, later ones stay.
    assert f"{1:020d}.{2:020d}.compacted.json" in deleted and f"{5:020d}.{7:020d}.compacted.json" in deleted
    assert f"{7:020d}.{8:020d}.compacted.json" in log_files(table_path)


def test_temporary_files_are_never_deleted_whatever_their_age(table_path: str) -> None:
    # Hidden temporaries may belong to live writers (a checkpoint being written, a commit
    # being linked): no clock tells a slow writer from a dead one, so cleanup leaves them.
    build_log(table_path, 9, checkpoints=(3, 6))
    log_dir = f"{table_path}/_delta_log"
    temps = [f"{log_dir}/.{name(2, 'checkpoint.parquet')}.abc.tmp", f"{log_dir}/.{name(4)}.def.tmp",
             f"{log_dir}/._last_checkpoint.0a1b.tmp"]
    for file in temps:
        Path(file).write_bytes(b"partial")
        set_mtime(file, commit_time(0) - 365 * DAY)
    deleted = cleanup(table_path, cutoff_version=8)
    assert max(int(n[:20]) for n in deleted) == 5
    assert all(os.path.exists(t) for t in temps)


def test_nothing_outside_the_log_and_no_unknown_file_is_touched(table_path: str) -> None:
    build_log(table_path, 9, checkpoints=(3, 6))
    others = [
        f"{table_path}/{name(0)}",  # a data-looking file named like a commit, outside the log
        f"{table_path}/_change_data/{name(1)}",
        f"{table_path}/_delta_log/_autostats/{name(1)}",
        f"{table_path}/_delta_log/notes.txt",
    ]
    for file in others:
        os.makedirs(os.path.dirname(file), exist_ok=True)
        Path(file).write_text("keep me")
        set_mtime(file, DAY0)
    cleanup(table_path, cutoff_version=8)
    assert all(os.path.exists(f) for f in others)


def test_last_checkpoint_is_repointed_before_its_checkpoint_goes(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    build_log(path, 10, checkpoints=(3, 6))
    # The hint names checkpoint 3 (e.g. a writer that never updated it).
    from airflow_delta.engine.checkpoint.writer import write_last_checkpoint

    write_last_checkpoint(IO, path, {"version": 3, "size": 5}, allow_older=True)
    cleanup(path, cutoff_version=8)
    hint = read_last_checkpoint(IO, path)
    assert hint is not None and hint["version"] == 6
    assert len(RsTable(path).file_uris()) == our_view(path).adds.num_rows


# ----------------------------------------------------------------- V2 sidecars


def test_v2_sidecars_no_checkpoint_references_are_removed(shared_tables: Path, tmp_path: Path) -> None:
    path = copy_shared(shared_tables, "checkpoint-v2-table", str(tmp_path))
    log_dir = f"{path}/_delta_log"
    for entry in os.listdir(log_dir):
        if entry[:20].isdigit():
            set_mtime(f"{log_dir}/{entry}", commit_time(int(entry[:20])))
    for sidecar in os.listdir(f"{log_dir}/_sidecars"):
        set_mtime(f"{log_dir}/_sidecars/{sidecar}", commit_time(int(sidecar[:20])))
    orphan_old = f"{log_dir}/_sidecars/orphan-old.parquet"
    orphan_new = f"{log_dir}/_sidecars/orphan-new.parquet"
    for file in (orphan_old, orphan_new):
        Path(file).write_bytes(b"x")
    set_mtime(orphan_old, commit_time(1))
    now = now_for_cutoff(8)
    set_mtime(orphan_new, now - HOUR)  # an in-progress checkpoint's sidecar: too young to judge
    expected = our_view(path)
    before = rs_view(path)

    deleted = [os.path.basename(p) for p in DeltaTable(path).cleanup_log(retention=timedelta(days=1), now=now)]

    sidecars_left = os.listdir(f"{log_dir}/_sidecars")
    assert "orphan-old.parquet" in deleted and "orphan-new.parquet" in sidecars_left
    # The sidecar of the deleted checkpoint 6 goes; the one checkpoint 8 references stays.
    assert not any(s.startswith(name(6, "checkpoint")[:20]) for s in sidecars_left)
    assert any(s.startswith(f"{8:020d}") for s in sidecars_left)
    assert our_view(path) == expected
    assert rs_view(path) == before


def test_sidecars_of_a_checkpoint_still_being_written_survive_a_clock_far_ahead(
    shared_tables: Path, tmp_path: Path
) -> None:
    # A V2 checkpoint writes its sidecars first and its top-level file last: until then
    # nothing references them. With the clock in 2100 every file is "old", so age alone
    # cannot protect them; their version (at or after the anchor) does.
    path = copy_shared(shared_tables, "checkpoint-v2-table", str(tmp_path))
    log_dir = f"{path}/_delta_log"
    in_flight = f"{log_dir}/_sidecars/{9:020d}.checkpoint.0000000001.0000000001.0a1b2c3d-0000-4000-8000-000000000000.parquet"
    stale = f"{log_dir}/_sidecars/{2:020d}.checkpoint.0000000001.0000000001.0a1b2c3d-0000-4000-8000-000000000001.parquet"
    being_written = f"{log_dir}/_sidecars/.{2:020d}.checkpoint.0000000001.0000000001.x.parquet.0a1b2c.tmp"
    for file in (in_flight, stale, being_written):
        Path(file).write_bytes(b"PAR1")
        set_mtime(file, DAY0)
    deleted = DeltaTable(path).cleanup_log(retention="interval 0 seconds", now=4_102_444_800_000)
    assert os.path.exists(in_flight) and os.path.exists(being_written)
    assert stale in deleted and not os.path.exists(stale)


def test_repointed_hint_to_a_v2_checkpoint_counts_its_sidecars_as_spark_does(shared_tables: Path, tmp_path: Path) -> None:
    path = copy_shared(shared_tables, "checkpoint-v2-table", str(tmp_path))
    log_dir = f"{path}/_delta_log"
    spark_hint = read_last_checkpoint(IO, path)
    assert spark_hint is not None and spark_hint["version"] == 8
    for entry in os.listdir(log_dir):
        if entry[:20].isdigit():
            set_mtime(f"{log_dir}/{entry}", commit_time(int(entry[:20])))
    from airflow_delta.engine.checkpoint.writer import write_last_checkpoint

    write_last_checkpoint(IO, path, {"version": 6, "size": 1}, allow_older=True)  # a stale hint
    DeltaTable(path).cleanup_log(retention=timedelta(days=1), now=now_for_cutoff(8))
    hint = read_last_checkpoint(IO, path)
    assert hint is not None and hint["version"] == 8
    # size and sizeInBytes cover the top-level file and its sidecars, as in Spark's hint.
    assert (hint["size"], hint["sizeInBytes"]) == (spark_hint["size"], spark_hint["sizeInBytes"])
    assert hint["v2Checkpoint"]["path"] == spark_hint["v2Checkpoint"]["path"]


def test_sidecars_are_kept_when_a_checkpoint_cannot_be_read(table_path: str) -> None:
    build_log(table_path, 4, checkpoints=(1,))
    latest = load_snapshot(IO, table_path)
    orphan = f"{table_path}/_delta_log/_sidecars/orphan.parquet"
    os.makedirs(os.path.dirname(orphan))
    Path(orphan).write_bytes(b"x")
    set_mtime(orphan, DAY0)
    later = f"{table_path}/_delta_log/{name(3, 'checkpoint.parquet')}"
    Path(later).write_bytes(b"garbage")
    set_mtime(later, commit_time(3))
    cleanup(table_path, cutoff_version=3, snapshot=latest)
    assert os.path.exists(orphan)


# ------------------------------------------------------------ the property


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    num_commits=st.integers(2, 10),
    checkpoint_marks=st.sets(st.integers(0, 9), max_size=4),
    cutoff=st.integers(-1, 12),
)
def test_every_retained_version_loads_as_before(
    tmp_path_factory: pytest.TempPathFactory, num_commits: int, checkpoint_marks: set[int], cutoff: int
) -> None:
    path = str(tmp_path_factory.mktemp("prop") / "t")
    marks = tuple(sorted(v for v in checkpoint_marks if v < num_commits))
    build_log(path, num_commits, checkpoints=marks)
    before = views(path, range(num_commits))

    DeltaTable(path).cleanup_log(retention=timedelta(days=1), now=now_for_cutoff(cutoff))

    commits = sorted(int(n[:20]) for n in log_files(path) if n.endswith(".json") and len(n) == 25)
    assert commits == list(range(commits[0], num_commits))  # contiguous up to the latest
    # The log now starts exactly at the newest checkpoint not newer than the cutoff commit.
    cutoff_commit = min(cutoff, num_commits - 1)
    anchors = [m for m in marks if m <= cutoff_commit]
    oldest = max(anchors) if anchors else 0
    assert commits[0] == oldest
    if anchors:
        assert f"{oldest:020d}.checkpoint.parquet" in log_files(path)
    for version in range(oldest, num_commits):
        assert our_view(path, version) == before[version], version


def test_post_commit_cleans_up_after_an_automatic_checkpoint(table_path: str) -> None:
    from airflow_delta.engine.operations.post_commit import run_post_commit

    build_log(table_path, 11, checkpoints=(5,), config={"delta.checkpointInterval": "10",
                                                        "delta.logRetentionDuration": "interval 1 days"})
    run_post_commit(DeltaTable(table_path).location, 10, now_ms=now_for_cutoff(10))
    remaining = log_files(table_path)
    assert name(10, "checkpoint.parquet") in remaining
    assert name(0) not in remaining and name(10) in remaining
    assert our_view(table_path).adds.num_rows == 8


def test_cleanup_of_a_shared_table_keeps_it_readable(shared_tables: Path, tmp_path: Path) -> None:
    path = copy_shared(shared_tables, "table_with_deletion_logs", str(tmp_path))
    before = our_view(path)
    latest = before.version
    deleted = DeltaTable(path).cleanup_log(retention=timedelta(0), now=datetime.now(UTC) + timedelta(days=2))
    assert deleted
    assert our_view(path) == before
    assert RsTable(path).version() == latest
    shutil.rmtree(path)


def test_tables_with_unknown_writer_features_are_refused(table_path: str) -> None:
    from airflow_delta.engine.errors import UnsupportedFeatureError

    protocol = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["someFutureFeature"]}
    build_log(table_path, 6, checkpoints=(3,), protocol=protocol)
    with pytest.raises(UnsupportedFeatureError):
        cleanup(table_path, cutoff_version=5)
    assert len([n for n in log_files(table_path) if n.endswith(".json")]) == 6


@pytest.mark.parametrize(("protected_before", "expected_anchor"), [(0, 6), (4, 6), (6, 6), (7, None), (9, None)])
def test_checkpoint_protection_truncates_history_before_the_protected_version_in_one_go_or_not_at_all(
    table_path: str, protected_before: int, expected_anchor: int | None
) -> None:
    # Delta's CheckpointProtectionTableFeature: history before
    # delta.requireCheckpointProtectionBeforeVersion goes only up to at least that version.
    protocol = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["checkpointProtection"]}
    build_log(
        table_path, 9, checkpoints=(3, 6), protocol=protocol,
        config={"delta.requireCheckpointProtectionBeforeVersion": str(protected_before)},
    )
    deleted = cleanup(table_path, cutoff_version=8)
    remaining = sorted(int(n.split(".")[0]) for n in log_files(table_path) if n.endswith(".json"))
    if expected_anchor is None:
        assert deleted == [] and remaining == list(range(9))
    else:
        assert remaining == list(range(expected_anchor, 9))
    assert RsTable(table_path).version() == 8


def test_checkpoint_protection_without_the_feature_is_only_a_property(table_path: str) -> None:
    build_log(table_path, 9, checkpoints=(3, 6), config={"delta.requireCheckpointProtectionBeforeVersion": "9"})
    cleanup(table_path, cutoff_version=8)
    assert sorted(int(n.split(".")[0]) for n in log_files(table_path) if n.endswith(".json")) == list(range(6, 9))


def test_retention_can_be_given_as_an_interval_string(table_path: str) -> None:
    build_log(table_path, 9, checkpoints=(3, 6))
    as_string = DeltaTable(table_path).cleanup_log(retention="interval 1 days", now=now_for_cutoff(8), dry_run=True)
    as_delta = DeltaTable(table_path).cleanup_log(retention=timedelta(days=1), now=now_for_cutoff(8), dry_run=True)
    assert as_string == as_delta and as_string
