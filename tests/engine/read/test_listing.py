"""Log segment discovery: commits, checkpoints of every kind, hints, junk, gaps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_delta.engine.errors import (
    CorruptCommitError,
    LogNotContiguousError,
    StorageUnavailableError,
    TableNotFoundError,
    VersionNotFoundError,
)
from airflow_delta.engine.read.listing import (
    commit_frontier,
    commit_path,
    commit_version,
    latest_version,
    list_log,
    list_log_and_segment,
    list_log_segment,
    segment_from_listing,
)
from airflow_delta.engine.storage.fileio import LocalFileIO
from tests.engine.read import log_builders as b

IO = LocalFileIO()


def _table(root: str, versions: range | list[int]) -> None:
    for v in versions:
        actions = [b.protocol(), b.metadata()] if v == 0 else []
        b.write_commit(root, v, [b.commit_info(), *actions, b.add(f"f{v}.parquet")])


def _state_actions() -> list[dict]:
    return [b.protocol(), b.metadata(), b.add("a.parquet")]


def test_commit_names() -> None:
    assert commit_path("/t", 42).endswith("/t/_delta_log/00000000000000000042.json")
    assert commit_version("00000000000000000042.json") == 42
    assert commit_version("00000000000000000042.crc") is None
    assert commit_version("42.json") is None


def test_json_only_segment(table_path: str) -> None:
    _table(table_path, range(4))
    seg = list_log_segment(IO, table_path)
    assert seg.version == 3
    assert seg.checkpoint_version is None and seg.checkpoint_files == ()
    assert [Path(f.path).name for f in seg.commit_files] == [f"{v:020d}.json" for v in range(4)]
    assert seg.commit_versions == [0, 1, 2, 3]
    assert seg.latest_commit_file is not None and seg.latest_commit_file.name == f"{3:020d}.json"
    assert latest_version(IO, table_path) == 3


def test_time_travel_segment_stops_at_version(table_path: str) -> None:
    _table(table_path, range(5))
    b.write_classic_checkpoint(table_path, 3, _state_actions())
    assert list_log_segment(IO, table_path, 2).checkpoint_version is None  # never a newer checkpoint
    seg = list_log_segment(IO, table_path, 3)
    assert (seg.checkpoint_version, seg.commit_files) == (3, ())
    seg = list_log_segment(IO, table_path, 4)
    assert seg.checkpoint_version == 3 and [f.name for f in seg.commit_files] == [f"{4:020d}.json"]


def test_gap_after_checkpoint_is_not_contiguous(table_path: str) -> None:
    _table(table_path, [0, 1, 2, 4, 5])
    with pytest.raises(LogNotContiguousError) as err:
        list_log_segment(IO, table_path)
    assert err.value.missing == [3]
    assert "3" in str(err.value)
    # Versions before the gap are still readable.
    assert list_log_segment(IO, table_path, 2).version == 2


def test_checkpoint_bridges_a_gap(table_path: str) -> None:
    _table(table_path, [0, 1, 3, 4])
    b.write_classic_checkpoint(table_path, 3, _state_actions())
    seg = list_log_segment(IO, table_path)
    assert seg.checkpoint_version == 3 and seg.commit_versions == [4]
    with pytest.raises(LogNotContiguousError):
        list_log_segment(IO, table_path, 2)


def test_missing_start_without_checkpoint(table_path: str) -> None:
    _table(table_path, [3, 4])
    with pytest.raises(LogNotContiguousError) as err:
        list_log_segment(IO, table_path)
    assert err.value.missing == [0, 1, 2]


def test_no_table(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError):
        list_log_segment(IO, str(tmp_path))
    (tmp_path / "_delta_log").mkdir()
    (tmp_path / "_delta_log" / "_last_checkpoint").write_text('{"version": 3, "size": 1}')
    with pytest.raises(TableNotFoundError):
        latest_version(IO, str(tmp_path))


def test_version_out_of_range(table_path: str) -> None:
    _table(table_path, range(3))
    with pytest.raises(VersionNotFoundError) as err:
        list_log_segment(IO, table_path, 7)
    assert (err.value.earliest, err.value.latest) == (0, 2)
    with pytest.raises(VersionNotFoundError):
        list_log_segment(IO, table_path, -1)


def test_cleaned_up_history(table_path: str) -> None:
    _table(table_path, range(6))
    b.write_classic_checkpoint(table_path, 3, _state_actions())
    for v in range(3):
        os.remove(b.commit_file(table_path, v))
    seg = list_log_segment(IO, table_path)
    assert seg.checkpoint_version == 3 and seg.commit_versions == [4, 5]
    with pytest.raises(VersionNotFoundError) as err:
        list_log_segment(IO, table_path, 1)
    assert (err.value.earliest, err.value.latest) == (3, 5)
    assert "3..5" in str(err.value)


def test_checkpoint_only_with_json_deleted(table_path: str) -> None:
    b.write_classic_checkpoint(table_path, 7, _state_actions())
    seg = list_log_segment(IO, table_path)
    assert seg.version == 7 and seg.checkpoint_version == 7
    assert seg.commit_files == () and seg.latest_commit_file is None
    assert latest_version(IO, table_path) == 7


def test_incomplete_multipart_falls_back(table_path: str) -> None:
    _table(table_path, range(6))
    b.write_classic_checkpoint(table_path, 2, _state_actions())
    parts = b.write_classic_checkpoint(table_path, 4, _state_actions(), parts=3)
    os.remove(parts[1])
    seg = list_log_segment(IO, table_path)
    assert seg.checkpoint_version == 2 and seg.commit_versions == [3, 4, 5]


def test_complete_multipart(table_path: str) -> None:
    _table(table_path, range(6))
    parts = b.write_classic_checkpoint(table_path, 4, _state_actions(), parts=3)
    seg = list_log_segment(IO, table_path)
    assert seg.checkpoint_kind == "multipart"
    assert [f.path for f in seg.checkpoint_files] == parts


def test_multipart_part_out_of_range_is_ignored(table_path: str) -> None:
    _table(table_path, range(3))
    b.write_raw(table_path, f"{2:020d}.checkpoint.{3:010d}.{2:010d}.parquet", b"junk")
    b.write_raw(table_path, f"{2:020d}.checkpoint.{1:010d}.{2:010d}.parquet", b"junk")
    assert list_log_segment(IO, table_path).checkpoint_version is None


def test_v2_checkpoint_with_sidecars(table_path: str) -> None:
    _table(table_path, range(4))
    path = b.write_v2_checkpoint(table_path, 2, [b.protocol(), b.metadata()], [b.add("a.parquet")])
    seg = list_log_segment(IO, table_path)
    assert seg.checkpoint_kind == "v2" and seg.checkpoint_files[0].path == path
    # Sidecar files are never mistaken for checkpoints of the log itself.
    assert [cp.version for cp in list_log(IO, table_path).checkpoints] == [2]


def test_same_version_prefers_single_file_and_hint(table_path: str) -> None:
    _table(table_path, range(3))
    b.write_classic_checkpoint(table_path, 2, _state_actions(), parts=2)
    classic = b.write_classic_checkpoint(table_path, 2, _state_actions())
    assert list_log_segment(IO, table_path).checkpoint_files[0].path == classic[0]
    b.write_raw(table_path, "_last_checkpoint", '{"version": 2, "size": 3, "parts": 2}')
    assert list_log_segment(IO, table_path).checkpoint_kind == "multipart"


@pytest.mark.parametrize(
    "hint",
    [
        None,  # missing
        "{not json",  # corrupt
        '{"size": 3}',  # no version
        '{"version": 1, "size": 3}',  # stale: older than the newest checkpoint
        '{"version": 9, "size": 3}',  # points past the log
        '{"version": 4, "size": 3, "parts": 5}',  # names a checkpoint that does not exist
        '{"version": 1000000000, "size": 3}',  # far beyond every commit and checkpoint
        '{"version": 3, "size": 3}',  # a commit that was never checkpointed
        '{"version": 2, "size": 3, "parts": 2}',  # an incomplete multi-part set (part 2 missing)
    ],
)
def test_last_checkpoint_is_only_a_hint(table_path: str, hint: str | None) -> None:
    _table(table_path, range(6))
    b.write_classic_checkpoint(table_path, 1, _state_actions())
    b.write_classic_checkpoint(table_path, 4, _state_actions())
    b.write_raw(table_path, f"{2:020d}.checkpoint.{1:010d}.{2:010d}.parquet", b"part 1 of 2")
    if hint is not None:
        b.write_raw(table_path, "_last_checkpoint", hint)
    seg = list_log_segment(IO, table_path)
    assert (seg.version, seg.checkpoint_version, seg.commit_versions) == (5, 4, [5])
    # Only a hint naming a complete, listed checkpoint is evidence of one.
    hint_checkpoint = list_log(IO, table_path).hint_checkpoint
    named = hint is not None and ('"version": 1,' in hint or '"version": 4,' in hint)
    assert (hint_checkpoint is not None) == named


def test_junk_files_never_break_a_read(table_path: str) -> None:
    _table(table_path, range(4))
    b.write_raw(table_path, f"{1:020d}.{3:020d}.compacted.json", b"{corrupt")
    b.write_raw(table_path, f"{2:020d}.crc", b"{corrupt")
    b.write_raw(table_path, f".{4:020d}.json.0123abcd.tmp", b'{"add":')
    b.write_raw(table_path, f"{5:020d}.json.tmp", b"x")
    b.write_raw(table_path, "notes.txt", b"hello")
    b.write_raw(table_path, f"{9:020d}.checkpoint.parquet.crc", b"x")
    os.makedirs(os.path.join(b.log_dir(table_path), f"{8:020d}.json"))  # a directory, not a file
    seg = list_log_segment(IO, table_path)
    assert seg.version == 3 and seg.commit_versions == [0, 1, 2, 3]


def test_versions_beyond_32_bits(table_path: str) -> None:
    big = 2**33 + 5  # a long-lived streaming table; versions are Longs in the protocol
    b.write_classic_checkpoint(table_path, big, _state_actions())
    b.write_commit(table_path, big + 1, [b.add("b.parquet")])
    seg = list_log_segment(IO, table_path)
    assert (seg.checkpoint_version, seg.version, seg.commit_versions) == (big, big + 1, [big + 1])
    assert list_log_segment(IO, table_path, big).commit_files == ()


# ------------------------------------------------------------------ shared tables


def test_failed_last_checkpoint_update(shared_tables: Path) -> None:
    # _last_checkpoint still says version 1 although the checkpoint of 3 exists.
    seg = list_log_segment(IO, str(shared_tables / "table_failed_last_checkpoint_update"))
    assert (seg.version, seg.checkpoint_version, seg.commit_versions) == (3, 3, [])


def test_checkpoint_without_last_checkpoint(shared_tables: Path) -> None:
    seg = list_log_segment(IO, str(shared_tables / "with_checkpoint_no_last_checkpoint"))
    assert (seg.version, seg.checkpoint_version, seg.commit_versions) == (3, 2, [3])


def test_latest_not_checkpointed(shared_tables: Path) -> None:
    seg = list_log_segment(IO, str(shared_tables / "latest_not_checkpointed"))
    assert (seg.version, seg.checkpoint_version, seg.commit_versions) == (3, 2, [3])


def test_checkpoints_vacuumed(shared_tables: Path) -> None:
    root = str(shared_tables / "checkpoints_vacuumed")
    seg = list_log_segment(IO, root)
    assert (seg.version, seg.checkpoint_version, seg.commit_versions) == (12, 10, [11, 12])
    assert list_log_segment(IO, root, 7).checkpoint_version == 5
    with pytest.raises(VersionNotFoundError) as err:
        list_log_segment(IO, root, 4)
    assert (err.value.earliest, err.value.latest) == (5, 12)


def test_shared_v2_checkpoint_table(shared_tables: Path) -> None:
    seg = list_log_segment(IO, str(shared_tables / "checkpoint-v2-table"))
    assert (seg.version, seg.checkpoint_version, seg.checkpoint_kind, seg.commit_versions) == (9, 8, "v2", [9])
    assert seg.checkpoint_files[0].name.startswith(f"{8:020d}.checkpoint.e5ac4dc4")


def test_shared_checkpoint_only_table(shared_tables: Path) -> None:
    seg = list_log_segment(IO, str(shared_tables / "table-with-domain-metadata"))
    assert (seg.version, seg.checkpoint_version, seg.commit_files) == (108, 108, ())


def test_shared_checkpoint_at_version_zero(shared_tables: Path) -> None:
    seg = list_log_segment(IO, str(shared_tables / "python-0.25.5-checkpoint"))
    assert (seg.version, seg.checkpoint_version, seg.commit_versions) == (1, 0, [1])


class _RacyIO(LocalFileIO):
    """A listing that misses one commit once, as readdir can while that commit is being created."""

    def __init__(self, hide: str) -> None:
        super().__init__()
        self.hide = hide

    def list_dir(self, path: str, **kwargs):  # type: ignore[no-untyped-def]
        infos = super().list_dir(path, **kwargs)
        if self.hide:
            infos = [i for i in infos if i.name != self.hide]
            self.hide = ""
        return infos


def test_listing_race_is_retried(table_path: str) -> None:
    _table(table_path, range(4))
    seg = list_log_segment(_RacyIO(f"{2:020d}.json"), table_path)
    assert seg.commit_versions == [0, 1, 2, 3]


# ------------------------------------------------- listing from _last_checkpoint


class _CountingIO(LocalFileIO):
    """Records which listings a read made: whole (``list_dir``) or from a name on (``list_dir_after``)."""

    def __init__(self) -> None:
        super().__init__()
        self.listings: list[str] = []

    def list_dir(self, path: str, **kwargs):  # type: ignore[no-untyped-def]
        self.listings.append("whole")
        return super().list_dir(path, **kwargs)

    def list_dir_after(self, path: str, start_after: str, **kwargs):  # type: ignore[no-untyped-def]
        self.listings.append(f"after {start_after.lstrip('0') or '0'}")
        return [f for f in LocalFileIO.list_dir(self, path, **kwargs) if f.name > start_after]


def _segment_key(seg):  # type: ignore[no-untyped-def]
    return (seg.version, seg.checkpoint_version, seg.checkpoint_kind, [f.path for f in seg.checkpoint_files],
            [f.path for f in seg.commit_files])


@pytest.mark.parametrize(
    ("hint", "version", "listings"),
    [
        ('{"version": 4, "size": 3}', None, ["after 4"]),  # the usual case: the tail only
        ('{"version": 4, "size": 3}', 5, ["after 4"]),
        ('{"version": 4, "size": 3}', 4, ["after 4"]),
        ('{"version": 3, "size": 3}', None, ["after 3"]),  # names no checkpoint; a newer one is listed
        ('{"version": 1, "size": 3}', None, ["after 1"]),  # stale: the newer checkpoint is in the tail
        ('{"version": 4, "size": 3}', 3, ["whole"]),  # time travel before the hint: the older files
        ('{"version": 4, "size": 3}', 0, ["whole"]),
        (None, None, ["whole"]),
        ("{not json", None, ["whole"]),
        ('{"version": 9, "size": 3}', None, ["after 9", "whole"]),  # past the log: nothing listed
        ('{"version": 1000000000, "size": 3}', None, ["after 1000000000", "whole"]),
        ('{"version": 5, "size": 3}', None, ["after 5", "whole"]),  # a commit, no checkpoint in the tail
    ],
)
def test_reads_list_from_the_last_checkpoint_and_fall_back_to_the_whole_log(
    table_path: str, hint: str | None, version: int | None, listings: list[str]
) -> None:
    _table(table_path, range(6))
    b.write_classic_checkpoint(table_path, 1, _state_actions())
    b.write_classic_checkpoint(table_path, 4, _state_actions())
    if hint is not None:
        b.write_raw(table_path, "_last_checkpoint", hint)
    io = _CountingIO()
    listing, seg = list_log_and_segment(io, table_path, version)
    assert io.listings == listings
    # Whichever listing served it, the segment is the one the whole log gives.
    assert _segment_key(seg) == _segment_key(segment_from_listing(list_log(IO, table_path), version))
    assert listing.is_partial == (io.listings[-1] != "whole")


@pytest.mark.parametrize(
    ("hint", "listings"),
    [
        ('{"version": 4, "size": 3}', ["after 4"]),
        ('{"version": 5, "size": 3}', ["after 5"]),  # the tail holds the newest commit: enough for the version
        ('{"version": 1000000000, "size": 3}', ["after 1000000000", "whole"]),
        (None, ["whole"]),
    ],
)
def test_the_latest_version_comes_from_the_tail_when_it_holds_any(
    table_path: str, hint: str | None, listings: list[str]
) -> None:
    _table(table_path, range(6))
    b.write_classic_checkpoint(table_path, 4, _state_actions())
    if hint is not None:
        b.write_raw(table_path, "_last_checkpoint", hint)
    io = _CountingIO()
    assert latest_version(io, table_path) == 5
    assert io.listings == listings


class _UnreachableHintIO(LocalFileIO):
    def read_bytes(self, path: str) -> bytes:
        if path.endswith("_last_checkpoint"):
            raise StorageUnavailableError("S3", path, "503 Slow Down after 6 retries")
        return super().read_bytes(path)


def test_a_store_that_cannot_be_reached_for_the_hint_is_an_error_not_a_missing_hint(table_path: str) -> None:
    _table(table_path, range(3))
    b.write_raw(table_path, "_last_checkpoint", '{"version": 1, "size": 3}')
    with pytest.raises(StorageUnavailableError):
        list_log_segment(_UnreachableHintIO(), table_path)


def test_a_gap_in_the_tail_is_judged_on_the_whole_log(table_path: str) -> None:
    _table(table_path, [0, 1, 2, 3, 5])
    b.write_classic_checkpoint(table_path, 2, _state_actions())
    b.write_raw(table_path, "_last_checkpoint", '{"version": 2, "size": 3}')
    io = _CountingIO()
    with pytest.raises(LogNotContiguousError) as err:
        list_log_and_segment(io, table_path)
    assert err.value.missing == [4] and io.listings[-1] == "whole"


def test_an_unreadable_checkpoint_named_by_the_hint_falls_back_to_an_older_one(table_path: str) -> None:
    from airflow_delta.engine.read.snapshot import load_snapshot

    _table(table_path, range(6))
    b.write_classic_checkpoint(table_path, 1, [b.protocol(), b.metadata(), b.add("f0.parquet"), b.add("f1.parquet")])
    b.write_raw(table_path, f"{4:020d}.checkpoint.parquet", b"not parquet at all")
    b.write_raw(table_path, "_last_checkpoint", '{"version": 4, "size": 3}')
    io = _CountingIO()
    snapshot = load_snapshot(io, table_path)
    assert io.listings[:2] == ["after 4", "whole"]
    assert (snapshot.version, snapshot.log_segment.checkpoint_version) == (5, 1)
    assert sorted(snapshot.add_actions.column("path").to_pylist()) == [f"f{v}.parquet" for v in range(6)]


# ------------------------------------------------------------- the commit frontier

# (commits on disk, classic checkpoints, _last_checkpoint version, version to commit,
#  what the frontier says: None when the attempt may go ahead, else a word of the reason)
FRONTIER_CASES = [
    ([0, 1, 2], [], None, 3, None),  # the next version
    ([0, 1, 2], [], None, 2, None),  # taken: the attempt conflicts and catches up
    ([0, 1, 2], [], None, 0, None),
    ([2, 3], [2], None, 3, None),  # cleaned up to checkpoint 2; 3 is taken, readable
    ([2, 3], [2], None, 4, None),
    ([2], [2], 2, 3, None),  # the read version survives only as its checkpoint's commit
    ([3, 4], [3], 3, 2, "checkpoint of version 3"),  # v2 was cleaned up behind checkpoint 3
    ([3, 4], [3], 3, 3, None),  # v3 is there to catch up with
    ([0, 1, 3], [], None, 2, "commit 3"),  # a hole below the newest commit
    ([0, 1], [], 5, 2, None),  # a hint naming a checkpoint that is not there is ignored
    ([0, 1], [], 10**9, 2, None),  # however far ahead it points
    ([0, 1, 2], [], 10**9, 2, None),  # taken: the attempt conflicts and catches up
    ([0, 1], [1], 10**9, 2, None),  # a real checkpoint behind a far-future hint
    ([3, 4], [3], 7, 2, "checkpoint of version 3"),  # the listed checkpoint still counts
    ([4, 5], [4], 4, 6, None),  # a hint naming a present checkpoint, commit after the newest

    ([3, 4], [], None, 3, None),
    ([4, 5], [4], None, 5, None),
    ([5], [4], None, 5, None),  # v4's checkpoint is the predecessor of 5
    ([], [4], 4, 5, None),  # nothing but a checkpoint: it is the predecessor
    ([1, 2], [1], None, 1, None),
    ([2, 3], [], None, 2, None),
    ([3], [], None, 3, None),  # taken
    ([3], [], None, 2, "commit 3"),
    ([0, 1, 2], [], None, 4, "version 3"),  # its predecessor never made it to the log
    ([], [], None, 0, None),  # a new table
    ([1], [1], None, 0, "checkpoint of version 1"),  # creating over a cleaned-up table
    ([], [], 3, 0, None),  # a _last_checkpoint left over from a deleted table: creating is fine
]


@pytest.mark.parametrize(("commits", "checkpoints", "hint", "version", "reason"), FRONTIER_CASES)
def test_commit_frontier(
    table_path: str, commits: list[int], checkpoints: list[int], hint: int | None, version: int, reason: str | None
) -> None:
    log_dir = Path(table_path, "_delta_log")
    log_dir.mkdir(parents=True, exist_ok=True)
    for v in commits:
        (log_dir / f"{v:020d}.json").write_text("{}\n")
    for v in checkpoints:
        b.write_classic_checkpoint(table_path, v, _state_actions())
    if hint is not None:
        (log_dir / "_last_checkpoint").write_text(f'{{"version":{hint},"size":3}}')
    frontier = commit_frontier(list_log(IO, table_path), version)
    assert frontier.target_listed == (version in commits)
    if reason is None:
        assert frontier.moved_past is None
    else:
        assert frontier.moved_past is not None and reason in frontier.moved_past
    previous = version - 1
    if previous in commits:
        assert frontier.predecessor == str(log_dir / f"{previous:020d}.json")
    elif previous in checkpoints:
        assert frontier.predecessor == str(log_dir / f"{previous:020d}.checkpoint.parquet")
    else:
        assert frontier.predecessor is None


@pytest.mark.parametrize("kind", ["directory", "dangling-link", "self-loop", "two-link-loop"])
def test_a_commit_that_is_no_readable_file_is_a_corrupt_commit_not_the_end_of_the_log(
    table_path: str, kind: str
) -> None:
    """Commit 2 replaced by something that is not a file: readers must not stop at version 1 without a word."""
    _table(table_path, range(4))
    commit = Path(commit_path(table_path, 2))
    commit.unlink()
    if kind == "directory":
        commit.mkdir()
    elif kind == "dangling-link":
        os.symlink("nowhere.json", commit)
    elif kind == "self-loop":
        os.symlink(commit.name, commit)
    else:
        os.symlink("other", commit)
        os.symlink(commit.name, commit.parent / "other")
    with pytest.raises(CorruptCommitError, match=f"{commit.name}.*names commit 2 but is not a readable file"):
        list_log_segment(IO, table_path)
    with pytest.raises(CorruptCommitError):
        latest_version(IO, table_path)


def test_a_commit_that_is_no_file_below_the_newest_checkpoint_is_not_needed(table_path: str) -> None:
    _table(table_path, range(4))
    b.write_classic_checkpoint(table_path, 2, [b.protocol(), b.metadata(), b.add("f0.parquet")])
    commit = Path(commit_path(table_path, 1))
    commit.unlink()
    os.symlink("nowhere.json", commit)
    assert list_log_segment(IO, table_path).version == 3
