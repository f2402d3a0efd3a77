"""Metadata cleanup: deleting expired files from ``_delta_log`` without losing a readable version.

Follows the protocol's "Metadata Cleanup" steps:

1. ``cutOffTimestamp`` is midnight UTC of the day ``now - delta.logRetentionDuration``
   falls in; the ``cutoffCommit`` is the newest commit not newer than it.
2. The ``cutOffCheckpoint`` is the newest checkpoint at or before the ``cutoffCommit``
   that every reader can start from: the one our reader picks at that version, read
   in full by the reader's own code (every page of every part and sidecar), no stray
   multi-part files beside it, and no ``_last_checkpoint`` that lies about it. Without
   one, nothing is deleted.
3. Commits, checkpoints and ``.crc`` files of versions before the ``cutOffCheckpoint``
   are deleted, and log compactions starting at or before it. The checkpoint itself,
   its commit and everything after it stay, so every retained version remains
   reconstructable (the checkpoint plus the commits after it).
4./5. Sidecars in ``_delta_log/_sidecars`` that no remaining checkpoint references and
   that are older than a day (as of midnight UTC) are deleted, by a cleanup that
   moves the start of the log (only then is its anchor read in full).

Commit timestamps are file modification times, made monotonic (a commit is never
treated as older than the one before it, which copied or touched logs can show), or
``inCommitTimestamp`` for versions where in-commit timestamps are enabled.

Failure modes seen elsewhere and guarded against here (see the tests): deleting the
newest checkpoint together with the commits it covers (delta-rs #2016, #2174);
deleting commits that the retained versions need because only the latest checkpoint
was considered (delta-rs #3692, delta #606); anchoring on an incomplete multi-part or
unreadable checkpoint. Files are deleted oldest version first, so an interrupted
cleanup still leaves a contiguous, readable log, and so that a writer can tell that
cleanup moved past the version it commits (``Transaction`` checks the file of the
version before its own). Nothing outside ``_delta_log`` is ever deleted, and neither
are hidden temporary files: they may belong to live writers.
"""

from __future__ import annotations

import logging
import posixpath
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.parquet as pq

from airflow_delta.engine.checkpoint.writer import (
    check_log_maintenance_supported,
    names_present_checkpoint,
    read_last_checkpoint,
    write_last_checkpoint,
)
from airflow_delta.engine.errors import CorruptCommitError, DeltaError
from airflow_delta.engine.model import log_json
from airflow_delta.engine.model.properties import TableProperties, parse_interval
from airflow_delta.engine.model.table_features import writer_features
from airflow_delta.engine.read.checkpoint_reader import verify_checkpoint
from airflow_delta.engine.read.listing import Checkpoint, LastCheckpointHint, list_log
from airflow_delta.engine.storage.fileio import FileInfo, FileIO
from airflow_delta.engine.storage.location import TableLocation
from airflow_delta.engine.storage.paths import relative_to_table

if TYPE_CHECKING:
    from airflow_delta.engine.read.snapshot import Snapshot

log = logging.getLogger(__name__)

_DAY_MS = 86_400_000

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CRC = re.compile(r"^(\d{20})\.crc$")
_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_UUID_CHECKPOINT = re.compile(
    r"^(\d{20})\.checkpoint\.[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\.(json|parquet)$"
)
# Sidecars as Spark and we name them: "<version>.checkpoint.<part>.<parts>.<uuid>.parquet".
_SIDECAR_VERSION = re.compile(r"^(\d{20})\.checkpoint\.")
_COMPACTION = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")


@dataclass
class _Checkpoint:
    """All checkpoint files of one version and kind (a classic file, a multi-part set or a UUID file)."""

    version: int
    kind: str
    files: list[FileInfo] = field(default_factory=list)
    expected_parts: int = 1

    @property
    def part_numbers(self) -> list[int]:
        return sorted(int(_MULTIPART.match(f.name).group(2)) for f in self.files)  # type: ignore[union-attr]

    @property
    def has_strays(self) -> bool:
        """A multi-part set with a part outside ``1..n`` ("4 of 3", "0 of 3"): Spark counts it as
        incomplete, our reader ignores the stray. Readers disagree, so it is no anchor."""
        return self.kind == "multi-part" and any(not 1 <= p <= self.expected_parts for p in self.part_numbers)


@dataclass
class _LogListing:
    commits: dict[int, FileInfo] = field(default_factory=dict)
    crcs: dict[int, FileInfo] = field(default_factory=dict)
    checkpoints: dict[tuple[int, str], _Checkpoint] = field(default_factory=dict)
    compactions: list[tuple[int, int, FileInfo]] = field(default_factory=list)


def _list_log(io: FileIO, log_dir: str) -> _LogListing:
    listing = _LogListing()
    for info in io.list_dir(log_dir):
        name = info.name
        if m := _COMMIT.match(name):
            listing.commits[int(m.group(1))] = info
        elif m := _CRC.match(name):
            listing.crcs[int(m.group(1))] = info
        elif m := _CLASSIC.match(name):
            v = int(m.group(1))
            listing.checkpoints[(v, name)] = _Checkpoint(v, "classic", [info])
        elif m := _MULTIPART.match(name):
            v, total = int(m.group(1)), int(m.group(3))
            key = (v, f"multi-part-{total}")
            cp = listing.checkpoints.setdefault(key, _Checkpoint(v, "multi-part", [], total))
            cp.files.append(info)
        elif m := _UUID_CHECKPOINT.match(name):
            v = int(m.group(1))
            listing.checkpoints[(v, name)] = _Checkpoint(v, "v2", [info])
        elif m := _COMPACTION.match(name):
            listing.compactions.append((int(m.group(1)), int(m.group(2)), info))
    return listing


def _midnight_utc(ms: int) -> int:
    return ms - ms % _DAY_MS


def _to_ms(now: datetime | int | float | None) -> int:
    if now is None:
        return int(time.time() * 1000)
    if isinstance(now, datetime):
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        return int(now.timestamp() * 1000)
    return int(now)


def _properties(snapshot: Snapshot) -> TableProperties:
    # Deleting log files is a write: some writer features govern it (checkpointProtection,
    # catalog-managed staged commits), so tables with those (or unknown ones) are refused.
    check_log_maintenance_supported(snapshot.protocol)
    return snapshot.properties


CHECKPOINT_PROTECTION_PROPERTY = "delta.requireCheckpointProtectionBeforeVersion"


def checkpoint_protection_version(snapshot: Snapshot) -> int:
    """The version before which history is protected (0: none), as Delta's CheckpointProtectionTableFeature reads it."""
    if "checkpointProtection" not in writer_features(snapshot.protocol):
        return 0
    raw = snapshot.metadata.configuration.get(CHECKPOINT_PROTECTION_PROPERTY)
    try:
        return max(int(raw), 0) if raw is not None else 0
    except ValueError:
        raise DeltaError(
            f"{CHECKPOINT_PROTECTION_PROPERTY}={raw!r} is not a version number; log cleanup stops rather than "
            "delete protected history"
        ) from None


def _commit_info(io: FileIO, path: str) -> Mapping[str, Any]:
    # commitInfo is the first action whenever in-commit timestamps are enabled.
    for number, line in enumerate(io.read_bytes(path).split(b"\n"), start=1):
        if line.strip():
            try:
                first = log_json.loads(line)
            except ValueError as exc:  # invalid JSON or UTF-8, hostile nesting
                raise CorruptCommitError(path, number, f"invalid JSON ({exc})") from None
            if not isinstance(first, dict):
                raise CorruptCommitError(path, number, "expected a JSON object")
            info = first.get("commitInfo")
            return info if isinstance(info, dict) else {}
    return {}


def _cutoff_commit(
    io: FileIO, listing: _LogListing, cutoff_ms: int, properties: TableProperties
) -> int | None:
    """Newest commit version whose (monotonic) commit timestamp is at or before ``cutoff_ms``."""
    if not listing.commits:
        return None
    latest = max(listing.commits)
    # Only the contiguous run of commits that ends at the latest one is meaningful.
    first = latest
    while first - 1 in listing.commits:
        first -= 1
    versions = np.arange(first, latest + 1)
    mtimes = np.array([listing.commits[int(v)].modification_time for v in versions], dtype=np.int64)
    # Monotonic: each commit at least 1 ms after the one before it (Spark does the same).
    adjusted = np.maximum.accumulate(mtimes - np.arange(len(mtimes))) + np.arange(len(mtimes))

    ict_from: int | None = None
    if properties.enable_in_commit_timestamps:
        ict_from = max(first, properties.in_commit_timestamp_enablement_version or 0)
    if ict_from is None or ict_from > latest:
        index = int(np.searchsorted(adjusted, cutoff_ms, side="right")) - 1
        return int(versions[index]) if index >= 0 else None

    def ict(version: int) -> int:
        value = _commit_info(io, listing.commits[version].path).get("inCommitTimestamp")
        if value is None:
            raise DeltaError(
                f"commit {version} has no inCommitTimestamp although in-commit timestamps are enabled; "
                "log cleanup stops rather than guess the commit's age"
            )
        return int(value)

    if ict(ict_from) > cutoff_ms:
        pre = adjusted[: ict_from - first]
        index = int(np.searchsorted(pre, cutoff_ms, side="right")) - 1
        return int(versions[index]) if index >= 0 else None
    # In-commit timestamps increase strictly: binary search for the last one <= cutoff.
    lo, hi = ict_from, latest
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ict(mid) <= cutoff_ms:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _choose_anchor(io: FileIO, root: str, listing: _LogListing, cutoff_commit: int) -> _Checkpoint | None:
    """The newest checkpoint at or before ``cutoff_commit`` that every reader can start from; None if none.

    Readers pick the checkpoint of a version from the listing (:mod:`.read.listing`), so
    a version qualifies only when that holds for whichever checkpoint they pick: every
    checkpoint the reader takes as complete at that version must read in full, no
    multi-part set there may carry stray parts, and a ``_last_checkpoint`` naming the
    version must tell the truth about it (parts, size, V2 file name). When in doubt,
    an older version is tried: the log only ever loses what lies before the anchor.
    """
    reader_view = list_log(io, root)
    by_version: dict[int, list[_Checkpoint]] = {}
    for cp in listing.checkpoints.values():
        by_version.setdefault(cp.version, []).append(cp)
    chosen = {cp.version: cp for cp in reader_view.checkpoints}
    oldest = _oldest_log_version(listing)
    for version in sorted((v for v in chosen if v <= cutoff_commit), reverse=True):
        if oldest is None or oldest >= version:
            # Nothing lies before this checkpoint (nor before any older one): nothing to
            # delete, so no checkpoint is read in full (cleanup runs after every automatic
            # checkpoint, and the log usually starts at the anchor of the last cleanup).
            return None
        if _sound_version(io, root, chosen[version], by_version.get(version, []), reader_view.hint):
            return _as_cleanup_checkpoint(chosen[version])
    return None


def _oldest_log_version(listing: _LogListing) -> int | None:
    """The oldest version any deletable log file belongs to (compactions count from their start)."""
    versions = [*listing.commits, *listing.crcs, *(cp.version for cp in listing.checkpoints.values())]
    versions += [start - 1 for start, _end, _info in listing.compactions]  # deleted up to the anchor itself
    return min(versions, default=None)


def _sound_version(
    io: FileIO, root: str, chosen: Checkpoint, raw: list[_Checkpoint], hint: LastCheckpointHint | None
) -> bool:
    version = chosen.version
    if any(cp.has_strays for cp in raw):
        log.warning("log cleanup: a multi-part checkpoint of version %d has stray parts; not using it", version)
        return False
    complete = [cp for cp in raw if cp.kind != "multi-part" or cp.part_numbers == list(range(1, cp.expected_parts + 1))]
    sizes: dict[frozenset[str], int] = {}  # actions per checkpoint, by its set of file names
    for cp in complete:
        try:
            sizes[_names(cp.files)] = verify_checkpoint(io, root, version, sorted(cp.files, key=_part))
        except DeltaError as exc:
            log.warning("log cleanup: checkpoint %s cannot be read in full (%s); not using it", cp.files[0].path, exc)
            return False
    if _names(chosen.files) not in sizes:
        return False  # appeared after this listing: not read, so not trusted
    if hint is None or hint.version != version:
        return True
    # A hint that lies about the checkpoint it names sends readers that trust it (delta-rs,
    # kernels) into an error, and they would fall back to the commits cleanup deletes.
    named = [cp for cp in complete if _named_by_hint(cp, hint)]
    size = hint.raw.get("size")
    if not named or (size is not None and all(sizes[_names(cp.files)] != size for cp in named)):
        log.warning("log cleanup: _last_checkpoint does not describe checkpoint %d truthfully (%s); not using it",
                    version, dict(hint.raw))
        return False
    return True


def _names(files: Sequence[FileInfo]) -> frozenset[str]:
    return frozenset(f.name for f in files)


def _part(info: FileInfo) -> int:
    m = _MULTIPART.match(info.name)
    return int(m.group(2)) if m else 0


def _named_by_hint(cp: _Checkpoint, hint: LastCheckpointHint) -> bool:
    if hint.v2_path is not None:
        return cp.kind == "v2" and cp.files[0].name == posixpath.basename(str(hint.v2_path))
    if hint.parts is not None:
        return cp.kind == "multi-part" and cp.expected_parts == hint.parts
    return cp.kind in ("classic", "v2")


def _as_cleanup_checkpoint(cp: Checkpoint) -> _Checkpoint:
    kind = "multi-part" if cp.kind == "multipart" else cp.kind
    return _Checkpoint(cp.version, kind, list(cp.files), len(cp.files) if kind == "multi-part" else 1)


def _sidecar_path(log_dir: str, sidecar: str) -> str:
    return f"{log_dir}/_sidecars/{posixpath.basename(sidecar)}"


def _referenced_sidecars(io: FileIO, log_dir: str, checkpoints: list[_Checkpoint]) -> set[str] | None:
    """Names of sidecars the given checkpoints reference; None if any cannot be read."""
    referenced: set[str] = set()
    for cp in checkpoints:
        for info in cp.files:
            try:
                if info.name.endswith(".json"):
                    for line in io.read_bytes(info.path).splitlines():
                        if line.strip() and "sidecar" in (action := log_json.loads(line)):
                            referenced.add(posixpath.basename(action["sidecar"]["path"]))
                else:
                    with io.open_input_file(info.path) as f:
                        parquet = pq.ParquetFile(f)
                        if "sidecar" in parquet.schema_arrow.names:
                            col = parquet.read(columns=["sidecar"]).column("sidecar")
                            referenced.update(posixpath.basename(s["path"]) for s in col.to_pylist() if s)
            except Exception as exc:
                log.warning("log cleanup: cannot read %s (%s); keeping all sidecars", info.path, exc)
                return None
    return referenced


@dataclass(frozen=True)
class CleanupPlan:
    """What cleanup would delete (oldest version first) and the checkpoint it keeps as the new start."""

    paths: tuple[str, ...] = ()
    anchor: _Checkpoint | None = None


def plan_cleanup(
    io: FileIO,
    root: str,
    properties: TableProperties,
    *,
    retention: timedelta | str | None = None,
    now: datetime | int | None = None,
    protected_before: int = 0,
) -> CleanupPlan:
    """Decide what metadata cleanup deletes (nothing is deleted here).

    ``protected_before`` (``delta.requireCheckpointProtectionBeforeVersion`` of a table with
    the ``checkpointProtection`` feature): history before that version is truncated in one
    go or not at all, so a cleanup whose anchor is older deletes nothing.
    """
    log_dir = f"{root}/_delta_log"
    now_ms = _to_ms(now)
    if isinstance(retention, str):
        retention = parse_interval("retention", retention)
    keep = properties.log_retention if retention is None else retention
    cutoff_ms = _midnight_utc(now_ms - int(keep.total_seconds() * 1000))
    listing = _list_log(io, log_dir)
    cutoff_commit = _cutoff_commit(io, listing, cutoff_ms, properties)
    if cutoff_commit is None:
        return CleanupPlan()
    anchor = _choose_anchor(io, root, listing, cutoff_commit)
    if anchor is None:
        return CleanupPlan()
    anchor_version = anchor.version
    if anchor_version < protected_before:
        log.info(
            "log cleanup: the newest usable checkpoint (%d) is before the protected version %d "
            "(checkpointProtection); nothing is deleted until history can be truncated past it",
            anchor_version, protected_before,
        )
        return CleanupPlan()

    doomed: list[tuple[int, str]] = []
    doomed += [(v, f.path) for v, f in listing.commits.items() if v < anchor_version]
    doomed += [(v, f.path) for v, f in listing.crcs.items() if v < anchor_version]
    for cp in listing.checkpoints.values():
        if cp.version < anchor_version:
            doomed += [(cp.version, f.path) for f in cp.files]
    doomed += [(start, f.path) for start, _end, f in listing.compactions if start <= anchor_version]
    # Hidden temporary files (".<name>.<uuid>.tmp") are never deleted: they may belong to
    # a live writer (a checkpoint being written, a commit being linked into place), and
    # no clock tells a slow writer from a dead one. Delta's cleanup leaves them too.

    # Sidecars: keep those any remaining checkpoint references, and recent ones. A sidecar
    # named for a version at or after the anchor may belong to a checkpoint still being
    # written (its top-level file comes last): kept whatever the clock says.
    remaining = [cp for cp in listing.checkpoints.values() if cp.version >= anchor_version]
    referenced = _referenced_sidecars(io, log_dir, remaining)
    if referenced is not None:
        sidecar_cutoff = _midnight_utc(now_ms) - _DAY_MS
        for info in io.list_dir(f"{log_dir}/_sidecars"):
            if info.name.startswith("."):
                continue  # a sidecar still being written (hidden temporary name)
            named_version = _SIDECAR_VERSION.match(info.name)
            if named_version is not None and int(named_version.group(1)) >= anchor_version:
                continue
            if info.name not in referenced and info.modification_time < sidecar_cutoff:
                doomed.append((anchor_version, info.path))
    doomed.sort()
    return CleanupPlan(tuple(path for _v, path in doomed), anchor)


def cleanup_log(
    location: TableLocation,
    snapshot: Snapshot,
    *,
    retention: timedelta | str | None = None,
    now: datetime | int | None = None,
    dry_run: bool = False,
) -> list[str]:
    """Delete expired log files of the table at ``location``; returns the deleted (or, with ``dry_run``, deletable) paths.

    ``snapshot`` is the latest snapshot: its properties decide retention and in-commit
    timestamps. ``retention`` (a timedelta or ``"interval 7 days"``) overrides
    ``delta.logRetentionDuration``; ``now`` (datetime or epoch ms) is the clock.
    """
    properties = _properties(snapshot)
    plan = plan_cleanup(
        location.io, location.root, properties, retention=retention, now=now,
        protected_before=checkpoint_protection_version(snapshot),
    )
    log_dir = location.log_dir
    for path in plan.paths:
        # Belt and braces: only ever delete inside this table's _delta_log.
        relative_to_table(log_dir, path)
    if dry_run or not plan.paths:
        return list(plan.paths)
    assert plan.anchor is not None
    # Repoint _last_checkpoint first if it names a checkpoint about to go: some readers
    # (delta-rs) fail on a hint whose checkpoint is missing, even for a moment.
    _repoint_last_checkpoint(location.io, location.root, plan.anchor)
    deleted = []
    for path in plan.paths:
        try:
            location.io.delete(path)
            deleted.append(path)
        except FileNotFoundError:
            continue  # a concurrent cleanup got there first
    return deleted


def _describe(io: FileIO, cp: _Checkpoint) -> dict[str, Any]:
    """A ``_last_checkpoint`` body for an existing checkpoint, from its files."""
    size = 0
    for info in cp.files:
        if info.name.endswith(".parquet"):
            with io.open_input_file(info.path) as f:
                size += pq.read_metadata(f).num_rows
        else:
            size += sum(1 for line in io.read_bytes(info.path).splitlines() if line.strip())
    size_in_bytes = sum(f.size for f in cp.files)
    top_size = size_in_bytes
    if cp.kind == "v2":
        # As Spark counts it: the top-level file plus every sidecar it references.
        log_dir = posixpath.dirname(cp.files[0].path)
        for sidecar in sorted(_referenced_sidecars(io, log_dir, [cp]) or ()):
            path = _sidecar_path(log_dir, sidecar)
            sidecar_info = io.info(path)
            if sidecar_info is None:
                continue
            with io.open_input_file(path) as f:
                size += pq.read_metadata(f).num_rows
            size_in_bytes += sidecar_info.size
    document: dict[str, Any] = {"version": cp.version, "size": size, "sizeInBytes": size_in_bytes}
    if cp.kind == "multi-part":
        document["parts"] = cp.expected_parts
    if cp.kind == "v2":
        info = cp.files[0]
        document["v2Checkpoint"] = {"path": info.name, "sizeInBytes": top_size, "modificationTime": info.modification_time}
    return document


def _repoint_last_checkpoint(io: FileIO, root: str, anchor: _Checkpoint) -> None:
    """Point ``_last_checkpoint`` at ``anchor`` if it names an older checkpoint (one cleanup deletes) or a missing one."""

    current = read_last_checkpoint(io, root)
    # A hint naming a newer checkpoint that is not there (a far-future version, one
    # deleted by hand) is repointed at the checkpoint cleanup keeps, too.
    if (
        current is not None
        and current["version"] >= anchor.version
        and names_present_checkpoint(io, root, current["version"])
    ):
        return
    if current is None and not io.exists(f"{root}/_delta_log/_last_checkpoint"):
        return  # no hint to keep right
    write_last_checkpoint(io, root, _describe(io, anchor), allow_older=True)
