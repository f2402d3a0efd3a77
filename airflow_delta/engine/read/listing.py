"""Log segment discovery: which files of ``_delta_log`` make up a table version.

A *log segment* for version ``v`` is the newest complete checkpoint at or before ``v``
(if any) plus the JSON commits after it, up to ``v``, without gaps. This module finds
it from a directory listing, which is the source of truth:

* commits are ``%020d.json``;
* checkpoints are classic (``%020d.checkpoint.parquet``), multi-part
  (``%020d.checkpoint.%010d.%010d.parquet``, used only when every part is present) or
  UUID-named V2 (``%020d.checkpoint.<uuid>.json|parquet``);
* ``_last_checkpoint`` is only a hint: it breaks ties between checkpoints of the same
  version and is never trusted over the listing (it may be missing, stale or corrupt).
  A hint naming a version with no complete checkpoint in the listing (a far-future
  version, a checkpoint that was never written or was deleted) says nothing about the
  log and is ignored, as readers that cannot find the checkpoint it names fall back
  to listing;
* log compaction files, ``.crc`` files, hidden temp files and anything else whose name
  does not parse are ignored.

Reading the latest version (or one at or after the hint) lists only the names from the
hint's version on (:func:`list_log_from_checkpoint`; on object stores a listing that
starts after a key, S3's ``start-after``, so a long log costs a few requests instead of
one per thousand files). That partial listing is used only when it can build the
segment by itself: it holds a complete checkpoint at or after the hint and every commit
after it. Otherwise (no, stale, far-future or corrupt hint, the named checkpoint missing
or incomplete, a version before the hint asked for, a gap) the whole directory is listed
and the rules above apply unchanged; a checkpoint that turns out unreadable when replayed
falls back to older ones from a full listing too.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from airflow_delta.engine.errors import (
    CorruptCommitError,
    LogNotContiguousError,
    StorageAccessError,
    StorageUnavailableError,
    TableNotFoundError,
    VersionNotFoundError,
)
from airflow_delta.engine.model import log_json
from airflow_delta.engine.storage.fileio import FileInfo, FileIO

log = logging.getLogger(__name__)

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_UUID_CHECKPOINT = re.compile(
    r"^(\d{20})\.checkpoint\.([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.(json|parquet)$"
)

LAST_CHECKPOINT_FILE = "_last_checkpoint"
SIDECAR_DIR = "_sidecars"

# When several complete checkpoints exist for one version (racing writers), the order
# in which we prefer them. All are equally valid; a single file is the cheapest to read.
_KIND_PREFERENCE = {"v2": 0, "classic": 1, "multipart": 2}


def log_dir(root: str) -> str:
    return f"{root}/_delta_log"


def commit_path(root: str, version: int) -> str:
    """Absolute path of the JSON commit file of ``version``."""
    return f"{log_dir(root)}/{version:020d}.json"


def commit_version(name: str) -> int | None:
    """The version of a commit file name (``00000000000000000042.json`` -> 42), else None."""
    m = _COMMIT.match(name)
    return int(m.group(1)) if m else None


# The listing's records are named tuples, not frozen dataclasses: as immutable, a quarter of the
# cost to create at import (a frozen dataclass compiles six methods, ~1 ms), which every
# process that opens a table pays; nothing compares them to other types or copies them.
class Checkpoint(NamedTuple):
    """One complete checkpoint: its version, kind (``classic``, ``multipart``, ``v2``) and files."""

    version: int
    kind: str
    files: tuple[FileInfo, ...]

    @property
    def parts(self) -> int:
        return len(self.files)


class LastCheckpointHint(NamedTuple):
    """What ``_last_checkpoint`` says, when it parses. Never trusted over a listing."""

    version: int
    parts: int | None = None
    v2_path: str | None = None
    raw: Mapping[str, Any] = MappingProxyType({})


class LogListing(NamedTuple):
    """Everything of interest in one listing of ``_delta_log``."""

    table_root: str
    commits: Mapping[int, FileInfo]  # version -> commit file
    checkpoints: tuple[Checkpoint, ...]  # complete checkpoints, ascending by version
    hint: LastCheckpointHint | None
    # 0: the whole log was listed; else only the files of versions >= start_version were
    # (a listing from ``_last_checkpoint``: older commits and checkpoints may exist).
    start_version: int = 0

    @property
    def is_partial(self) -> bool:
        return self.start_version > 0

    @property
    def commit_versions(self) -> list[int]:
        return sorted(self.commits)

    @property
    def latest_version(self) -> int | None:
        candidates = list(self.commits)
        if self.checkpoints:
            candidates.append(self.checkpoints[-1].version)
        return max(candidates) if candidates else None

    @property
    def hint_checkpoint(self) -> Checkpoint | None:
        """The complete listed checkpoint ``_last_checkpoint`` names, or None (no hint, or it names none present).

        Only then is the hint evidence of anything: a checkpoint that is not in the
        listing (or is incomplete there) is not one readers can start from.
        """
        if self.hint is None:
            return None
        return next((cp for cp in self.checkpoints if cp.version == self.hint.version), None)

    def best_checkpoint(self, at_most: int, below: int | None = None) -> Checkpoint | None:
        """The newest complete checkpoint with version <= ``at_most`` (and < ``below``, if given)."""
        best: Checkpoint | None = None
        for cp in self.checkpoints:
            if cp.version <= at_most and (below is None or cp.version < below):
                best = cp
        return best

    def earliest_reconstructable(self) -> int | None:
        """The smallest version a snapshot can be built for (a checkpoint, or 0)."""
        starts = [cp.version for cp in self.checkpoints]
        if 0 in self.commits:
            starts.append(0)
        return min(starts) if starts else None


class LogSegment(NamedTuple):
    """The files needed to build the snapshot of ``version``.

    ``commit_files`` are ascending and cover exactly ``checkpoint_version + 1 .. version``
    (``0 .. version`` without a checkpoint). ``checkpoint_files`` are the parts of one
    complete checkpoint, or empty.
    """

    table_root: str
    log_dir: str
    version: int
    checkpoint_version: int | None
    checkpoint_kind: str | None
    checkpoint_files: tuple[FileInfo, ...]
    commit_files: tuple[FileInfo, ...]
    # The commit file of ``version`` itself when it still exists (it may have been
    # cleaned up when ``version`` is a checkpoint); its mtime is the commit timestamp.
    latest_commit_file: FileInfo | None = None
    earliest_version: int | None = None  # smallest reconstructable version in the listing
    latest_available_version: int | None = None  # newest version in the listing

    @property
    def commit_versions(self) -> list[int]:
        start = -1 if self.checkpoint_version is None else self.checkpoint_version
        return list(range(start + 1, self.version + 1))


class CommitFrontier(NamedTuple):
    """Where the log stands for a commit about to be attempted at ``version``.

    ``moved_past`` says why the log has moved past ``version`` (None if it has not): a
    commit written there would sit below what readers replay, so it must not be
    written. ``target_listed``: ``version`` was already committed when listed (the
    attempt will conflict). ``predecessor``: a file of ``version - 1`` the listing
    holds (its commit, else its checkpoint's first file); while it still exists after
    the commit file was written, no cleanup has moved past ``version`` meanwhile,
    because cleanup deletes the oldest versions first and never the checkpoint it
    keeps. ``listing_behind``: the reason is a listing that hides versions the writer
    has seen (a store whose listing lags its writes), not metadata cleanup.
    """

    version: int
    target_listed: bool
    predecessor: str | None
    moved_past: str | None
    listing_behind: bool = False


def _newest(*versions: int | None) -> int:
    """The newest of the versions that are known, -1 when none is."""
    return max((v for v in versions if v is not None), default=-1)


def commit_frontier(listing: LogListing, version: int) -> CommitFrontier:
    """Check ``listing`` against a commit attempt at ``version``; see :class:`CommitFrontier`."""
    listed = version in listing.commits
    previous = version - 1
    predecessor: str | None = None
    if previous in listing.commits:
        predecessor = listing.commits[previous].path
    else:
        at_previous = [cp for cp in listing.checkpoints if cp.version == previous]
        if at_previous:
            predecessor = at_previous[0].files[0].path
    reason: str | None = None
    hidden = False
    if not listed:
        newest_commit = max(listing.commits, default=None)
        newest_checkpoint = listing.checkpoints[-1].version if listing.checkpoints else None
        if listing.hint is not None and listing.hint.version >= version and listing.hint_checkpoint is None:
            # A hint is trusted only when the checkpoint it names is listed (and so
            # complete); then the checkpoint rule below already covers it. One naming
            # a missing checkpoint (10**9, a deleted or never-written one) is ignored:
            # it must not block every commit forever.
            log.warning(
                "ignoring %s/%s: it names version %d, which has no complete checkpoint in the log; "
                "the next checkpoint rewrites it",
                log_dir(listing.table_root), LAST_CHECKPOINT_FILE, listing.hint.version,
            )
        if newest_checkpoint is not None and newest_checkpoint >= version:
            reason = (
                f"the log holds a checkpoint of version {newest_checkpoint}, and commit {version} is not in it "
                "(metadata cleanup cleaned up the commits behind that checkpoint)"
            )
        elif newest_commit is not None and newest_commit > version:
            reason = f"the log holds commit {newest_commit} but not commit {version} (it was cleaned up)"
        elif version > 0 and predecessor is None and _newest(newest_commit, newest_checkpoint) < previous:
            # Cleanup deletes the oldest versions first and keeps the newest: a listing
            # with nothing at or after the version this transaction follows is behind.
            newest = _newest(newest_commit, newest_checkpoint)
            shown = f"version {newest}" if newest >= 0 else "no version"
            reason = (
                f"the listing of the log shows {shown}, older than version {previous} that this commit follows "
                "and that was in the log when the transaction read it: the store's listing is behind, or the "
                "newest log files were deleted"
            )
            hidden = True
        elif version > 0 and predecessor is None:
            reason = (
                f"version {previous}, the one this commit follows, is no longer in the log "
                "(metadata cleanup cleaned it up), so the commits after it cannot be checked for conflicts"
            )
    return CommitFrontier(version, listed, predecessor, reason, listing_behind=hidden)


def _parse_hint(io: FileIO, directory: str) -> LastCheckpointHint | None:
    """Parse ``_last_checkpoint``; any problem with the file (missing, unreadable, malformed) gives None.

    A store that cannot be reached or refuses the credentials is not a problem of the file:
    that error is raised (the listing would meet it next, after waiting out the retries again).
    """
    try:
        raw = log_json.loads(io.read_bytes(f"{directory}/{LAST_CHECKPOINT_FILE}"))
        version = int(raw["version"])
        parts = raw.get("parts")
        v2 = raw.get("v2Checkpoint")
        v2_path = v2.get("path") if isinstance(v2, dict) else None
        return LastCheckpointHint(version, int(parts) if parts is not None else None, v2_path, raw)
    except (StorageAccessError, StorageUnavailableError):
        raise
    except Exception:  # a hint that cannot be read is simply not used
        return None


# ``list_log``'s default: read ``_last_checkpoint`` when the listing shows one.
_READ_HINT: Any = object()


def list_log(io: FileIO, root: str, *, hint: LastCheckpointHint | None = _READ_HINT) -> LogListing:
    """List ``_delta_log`` once, whole, and classify its files (``hint``: ``_last_checkpoint`` already read)."""
    not_files: list[str] = []
    infos = io.list_dir(log_dir(root), not_files=not_files)
    return _classify(io, root, infos, not_files, hint, 0)


def list_log_from_checkpoint(io: FileIO, root: str, at_most: int | None = None) -> LogListing | LastCheckpointHint | None:
    """The files of versions from ``_last_checkpoint``'s on, listed from that name on.

    Returns the partial listing, or, when there is no usable hint or the hint's version is
    after ``at_most`` (time travel to an older version needs the older files), what was
    read of the hint (None, or the hint) for the full listing that the caller makes next.
    """
    directory = log_dir(root)
    hint = _parse_hint(io, directory)
    if hint is None or hint.version <= 0 or (at_most is not None and hint.version > at_most):
        return hint
    not_files: list[str] = []
    # Names after "<version>" are that version's files and every later one (and the
    # "_"-prefixed names, which sort after digits).
    infos = io.list_dir_after(directory, f"{hint.version:020d}", not_files=not_files)
    return _classify(io, root, infos, not_files, hint, hint.version)


def _classify(
    io: FileIO, root: str, infos: Sequence[FileInfo], not_files: list[str], hint: LastCheckpointHint | None,
    start_version: int,
) -> LogListing:
    directory = log_dir(root)
    commits: dict[int, FileInfo] = {}
    classic: dict[int, FileInfo] = {}
    v2: dict[int, list[FileInfo]] = {}
    multipart: dict[tuple[int, int], dict[int, FileInfo]] = {}
    has_last_checkpoint = False
    for info in infos:
        name = info.name
        if name.startswith("."):
            continue  # hidden temp files of an in-flight write
        if m := _COMMIT.match(name):
            commits[int(m.group(1))] = info
        elif m := _CLASSIC_CHECKPOINT.match(name):
            classic[int(m.group(1))] = info
        elif m := _MULTIPART_CHECKPOINT.match(name):
            part, total = int(m.group(2)), int(m.group(3))
            if 1 <= part <= total:
                multipart.setdefault((int(m.group(1)), total), {})[part] = info
        elif m := _UUID_CHECKPOINT.match(name):
            v2.setdefault(int(m.group(1)), []).append(info)
        elif name == LAST_CHECKPOINT_FILE:
            has_last_checkpoint = True
    if hint is _READ_HINT:
        hint = _parse_hint(io, directory) if has_last_checkpoint else None

    by_version: dict[int, list[Checkpoint]] = {}
    for version, info in classic.items():
        by_version.setdefault(version, []).append(Checkpoint(version, "classic", (info,)))
    for version, infos in v2.items():
        for info in sorted(infos, key=lambda i: i.name):
            by_version.setdefault(version, []).append(Checkpoint(version, "v2", (info,)))
    for (version, total), parts in multipart.items():
        if len(parts) == total:  # an incomplete part set is an unfinished (or failed) write
            files = tuple(parts[i] for i in range(1, total + 1))
            by_version.setdefault(version, []).append(Checkpoint(version, "multipart", files))

    chosen = [_choose(cands, hint) for _, cands in sorted(by_version.items())]
    _refuse_unreadable_commits(directory, not_files, chosen[-1].version if chosen else -1, max(commits, default=-1) + 1)
    return LogListing(root, commits, tuple(chosen), hint, start_version)


def _refuse_unreadable_commits(directory: str, not_files: Sequence[str], newest_checkpoint: int, next_commit: int) -> None:
    """A commit name that is no readable file (a directory, a link to nothing or in a loop) is a corrupt commit.

    Left out of the listing, it would silently end the table one version early: readers
    would miss its rows and writers would retry forever on a version that exists. Refused
    are the versions the latest state needs (after the newest checkpoint) up to the one
    a writer would commit next; one further on, past a gap, is junk that no reader reaches.
    """
    for name in not_files:
        if (m := _COMMIT.match(name)) and newest_checkpoint < int(m.group(1)) <= next_commit:
            raise CorruptCommitError(
                f"{directory}/{name}",
                None,
                f"it names commit {int(m.group(1))} but is not a readable file (a directory, or a symbolic link "
                "that leads to no file); restore the commit file, the table cannot be read past it without it",
            )


def _choose(candidates: Sequence[Checkpoint], hint: LastCheckpointHint | None) -> Checkpoint:
    """Pick one of several complete checkpoints of the same version."""

    def rank(cp: Checkpoint) -> tuple[int, int, str]:
        named_by_hint = hint is not None and hint.version == cp.version and (
            (cp.kind == "v2" and bool(hint.v2_path) and cp.files[0].name == str(hint.v2_path).rsplit("/", 1)[-1])
            or (cp.kind == "multipart" and hint.parts == cp.parts)
        )
        return (0 if named_by_hint else 1, _KIND_PREFERENCE[cp.kind], cp.files[0].name)

    return min(candidates, key=rank)


def latest_version(io: FileIO, root: str) -> int:
    """The newest committed version, by listing the log (no replay).

    Listed from ``_last_checkpoint``'s version when that tail holds any version (every
    version at or after the hint's is in it, so its newest is the log's); else the whole log.
    """
    partial = list_log_from_checkpoint(io, root)
    if isinstance(partial, LogListing) and partial.latest_version is not None:
        return partial.latest_version
    listing = list_log(io, root, hint=partial.hint if isinstance(partial, LogListing) else partial)
    latest = listing.latest_version
    if latest is None:
        raise TableNotFoundError(root)
    return latest


def list_log_segment(io: FileIO, root: str, version: int | None = None) -> LogSegment:
    """The log segment for ``version`` (default: the latest version)."""
    return list_log_and_segment(io, root, version)[1]


def list_log_and_segment(
    io: FileIO, root: str, version: int | None = None, attempts: int = 3
) -> tuple[LogListing, LogSegment]:
    """List the log and build the segment, re-listing if a gap turns out to be a listing race.

    A directory listing is not a snapshot: a commit created while the directory is being
    read may be missed while a later one is seen (readdir order is not creation order).
    When a commit reported missing does exist on a direct check, we list again.

    The first listing starts at ``_last_checkpoint``'s version when that can serve
    ``version`` (:func:`list_log_from_checkpoint`); the full listing is the fallback.
    """
    partial = list_log_from_checkpoint(io, root, version)
    if isinstance(partial, LogListing):
        segment = _segment_from_partial(partial, version)
        if segment is not None:
            return partial, segment
        hint: LastCheckpointHint | None = partial.hint
    else:
        hint = partial
    for attempt in range(attempts):
        # The hint read above serves the first full listing; a re-listing reads it again.
        listing = list_log(io, root, hint=hint) if attempt == 0 else list_log(io, root)
        try:
            return listing, segment_from_listing(listing, version)
        except LogNotContiguousError as exc:
            raced = any(io.info(commit_path(root, v)) is not None for v in exc.missing[:10])
            if not raced or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _segment_from_partial(listing: LogListing, version: int | None) -> LogSegment | None:
    """The segment from a listing that starts at the hint, or None when only the whole log can tell:
    no version listed (a hint past the end), no complete checkpoint in it, or a gap."""
    try:
        segment = segment_from_listing(listing, version)
    except (TableNotFoundError, VersionNotFoundError, LogNotContiguousError):
        return None
    return segment if segment.checkpoint_version is not None else None


def segment_from_listing(
    listing: LogListing, version: int | None = None, *, checkpoint_below: int | None = None
) -> LogSegment:
    """The segment for ``version`` (default: latest) from a listing.

    ``checkpoint_below`` restricts the checkpoint to versions strictly below it: the
    retry after a checkpoint turned out to be unreadable (as Delta does, an older
    checkpoint or the commits from version 0 may still rebuild the version).
    """
    root = listing.table_root
    latest = listing.latest_version
    if latest is None:
        raise TableNotFoundError(root)
    earliest = listing.earliest_reconstructable()
    target = latest if version is None else version
    if version is not None and (version < 0 or version > latest):
        raise VersionNotFoundError(version, earliest, latest, "no such version in the log")

    checkpoint = listing.best_checkpoint(target, checkpoint_below)
    start = checkpoint.version + 1 if checkpoint is not None else 0
    missing = [v for v in range(start, target + 1) if v not in listing.commits]
    if missing:
        if checkpoint is None and earliest is not None and target < earliest:
            raise VersionNotFoundError(
                target, earliest, latest,
                "its commits were removed by log cleanup and no checkpoint covers it",
            )
        raise LogNotContiguousError(root, missing)
    commit_files = tuple(listing.commits[v] for v in range(start, target + 1))
    return LogSegment(
        table_root=root,
        log_dir=log_dir(root),
        version=target,
        checkpoint_version=checkpoint.version if checkpoint is not None else None,
        checkpoint_kind=checkpoint.kind if checkpoint is not None else None,
        checkpoint_files=checkpoint.files if checkpoint is not None else (),
        commit_files=commit_files,
        latest_commit_file=listing.commits.get(target),
        earliest_version=earliest,
        latest_available_version=latest,
    )
