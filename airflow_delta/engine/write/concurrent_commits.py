"""The commits after a version, and which of them would conflict with a piece of planned work.

Used by whoever must decide *before* running a job whether the table has moved under it
(the Airflow sensors and triggers): :func:`commits_since` lists the log once and reads
only the commit files after a version, never a checkpoint or the table's file state.

:class:`ConflictWatch` judges those commits against planned work (a read predicate, or
the whole table, at a read version) with the conflict rules a real transaction uses:
it builds the same :class:`~.conflicts.TransactionFootprint` that
``Transaction.read_files(predicate)`` would record and runs
:func:`~.conflicts.check_winning_commit` on each commit, so a commit "conflicts" exactly
when a transaction that read the predicate at that version and then committed would
raise, and with the same exception. The watch keeps its place in the log: each
:meth:`ConflictWatch.poll` reads only the commits it has not seen yet.

How the read is known without replaying the table's files: rule 6
(ConcurrentDeleteRead) needs the paths the predicate read at the read version, but only
those some later commit removes matter. A removed path belonged to the read version's
state exactly when the first action on that path after the read version is a remove
(one that is first added later is a new file); and whether the predicate read it is
decided on that remove's partition values and statistics, which are the file's own
(Delta writes them into ``remove`` as extended file metadata). A remove without
statistics counts as read when its partition values may match (conservative: wait
rather than miss a conflict). Protocol and metadata at the read version come from the
snapshot's metadata pass (checkpoint's non-file columns and the commits after it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import ConcurrentModificationError, TableNotFoundError, VersionNotFoundError
from airflow_delta.engine.model.actions import STRING_MAP_TYPE, Metadata, Protocol
from airflow_delta.engine.model.arguments import check_bool, check_int, check_str
from airflow_delta.engine.model.arrow_numpy import bool_array, bool_scalar, string_array
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.read.commit_reader import parse_commit_bytes, read_files_bytes
from airflow_delta.engine.read.listing import list_log
from airflow_delta.engine.read.snapshot import load_snapshot
from airflow_delta.engine.storage.location import TableLocation
from airflow_delta.engine.storage.paths import decode_log_path
from airflow_delta.engine.write.conflicts import (
    IsolationLevel,
    TransactionFootprint,
    WinningCommit,
    check_winning_commit,
)
from airflow_delta.engine.write.file_matching import files_may_match

# Arrow layout of a commit's removed files, as files_may_match reads them.
_REMOVED_FILES_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("partition_values", STRING_MAP_TYPE),
        pa.field("stats", pa.string()),
    ]
)


@dataclass(frozen=True, slots=True)
class CommitSummary:
    """One commit of the log, as a scheduler needs to see it.

    ``timestamp`` is in milliseconds since the epoch: the in-commit timestamp when the
    commit has one, else the commit file's modification time. ``partitions`` are the
    distinct partition values (as the log spells them, physical column names) of the
    files the commit added or removed. ``changes_data``: some add or remove has
    ``dataChange=true`` (OPTIMIZE-like rewrites have none).
    """

    version: int
    timestamp: int
    operation: str | None
    is_blind_append: bool
    changes_data: bool
    changes_metadata: bool
    changes_protocol: bool
    num_added_files: int
    num_removed_files: int
    partitions: tuple[Mapping[str, str | None], ...]
    commit_info: Mapping[str, Any] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """A small JSON-ready dict (no commitInfo, which may be large): for XCom and trigger events."""
        return {
            "version": self.version,
            "timestamp": self.timestamp,
            "operation": self.operation,
            "is_blind_append": self.is_blind_append,
            "changes_data": self.changes_data,
            "changes_metadata": self.changes_metadata,
            "changes_protocol": self.changes_protocol,
            "num_added_files": self.num_added_files,
            "num_removed_files": self.num_removed_files,
            "partitions": [dict(p) for p in self.partitions],
        }


@dataclass(frozen=True, slots=True)
class CommitConflict:
    """How one commit after the read version bears on the planned work.

    ``conflicts``: a transaction that read what the work reads, at the read version,
    could not commit past this commit; ``error`` is then the exception class it would
    raise (``ConcurrentAppendException``, ``ConcurrentDeleteReadException``,
    ``MetadataChangedException``, ``ProtocolChangedException``, ...) and ``message`` its
    text. ``touches_read``: the commit added or removed files the work's predicate may
    match (every file, for whole-table work), harmless or not; a blind append into the
    partitions read touches them without conflicting at WriteSerializable.
    ``adds_to_read``: it added new data (``dataChange=true`` files) the predicate may match.
    """

    commit: CommitSummary
    conflicts: bool
    touches_read: bool
    adds_to_read: bool
    error: str | None = None
    message: str | None = None

    @property
    def version(self) -> int:
        return self.commit.version

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.commit.to_dict(),
            "conflicts": self.conflicts,
            "touches_read": self.touches_read,
            "adds_to_read": self.adds_to_read,
            "error": self.error,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class _LoggedCommit:
    """A commit read from the log: its summary, what conflict checks need, and its removed files."""

    summary: CommitSummary
    winner: WinningCommit
    removed_files: pa.Table  # _REMOVED_FILES_SCHEMA, paths decoded


def _read_commits(location: TableLocation, after: int | None, since_ms: int | None = None) -> list[_LoggedCommit]:
    """The commits after version ``after``; with ``since_ms``, from the first one whose file was written at or after it.

    One listing (it holds the commit files' modification times); only the selected commit
    files are read. ``after=None`` starts wherever ``since_ms`` selects, so a log whose
    early commits were cleaned up can still be asked what happened lately.
    """
    listing = list_log(location.io, location.root)
    latest = listing.latest_version
    if latest is None:
        raise TableNotFoundError(location.uri)
    if after is not None and after > latest:
        raise VersionNotFoundError(after, listing.earliest_reconstructable(), latest, "it is newer than the table")
    listed = sorted(v for v in listing.commits if after is None or v > after)
    if since_ms is not None:
        recent = [v for v in listed if listing.commits[v].modification_time >= since_ms]
        listed = [v for v in listed if v >= recent[0]] if recent else []
    # Every commit from the first one read to the latest must be there (none skipped unseen).
    start = listed[0] if listed else latest + 1
    if after is not None and since_ms is None:
        start = after + 1
    missing = [v for v in range(start, latest + 1) if v not in listing.commits]
    if missing:
        raise VersionNotFoundError(
            start - 1, listing.earliest_reconstructable(), latest,
            f"commit {missing[0]} after it was removed by log cleanup, so what happened since cannot be told; "
            "start from a newer version",
        )
    files = [listing.commits[v] for v in listed]
    contents = read_files_bytes(location.io, [f.path for f in files])
    return [
        _logged_commit(version, data, info.path, info.modification_time)
        for version, data, info in zip(listed, contents, files, strict=True)
    ]


def _logged_commit(version: int, data: bytes, path: str, modification_time: int) -> _LoggedCommit:
    actions = parse_commit_bytes(data, path)
    winner = WinningCommit.from_actions(version, actions, modification_time)
    removes = [a["remove"] for a in actions if "remove" in a]
    removed = pa.table(
        {
            "path": string_array([decode_log_path(str(r["path"])) for r in removes]),
            "partition_values": pa.array(
                [list(pv.items()) if (pv := r.get("partitionValues")) is not None else None for r in removes],
                STRING_MAP_TYPE,
            ),
            "stats": pa.array([r.get("stats") for r in removes], pa.string()),
        },
        schema=_REMOVED_FILES_SCHEMA,
    )
    file_actions = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    partitions: dict[tuple[tuple[str, str | None], ...], dict[str, str | None]] = {}
    for body in file_actions:
        pv = dict(body.get("partitionValues") or {})
        if pv:
            partitions.setdefault(tuple(sorted(pv.items(), key=lambda kv: kv[0])), pv)
    summary = CommitSummary(
        version=version,
        timestamp=winner.in_commit_timestamp if winner.in_commit_timestamp is not None else modification_time,
        operation=winner.operation,
        is_blind_append=winner.is_blind_append,
        changes_data=any(bool(body.get("dataChange", True)) for body in file_actions),
        changes_metadata=winner.metadata is not None,
        changes_protocol=winner.protocol is not None,
        num_added_files=winner.added_files.num_rows,
        num_removed_files=len(removes),
        partitions=tuple(partitions.values()),
        commit_info=winner.commit_info,
    )
    return _LoggedCommit(summary, winner, removed)


def commits_since(location: TableLocation, version: int | None, *, since_ms: int | None = None) -> list[CommitSummary]:
    """Summaries of the commits after ``version``, oldest first; see :func:`_read_commits`."""
    return [c.summary for c in _read_commits(location, version, since_ms)]


class ConflictWatch:
    """Judges the commits after ``read_version`` against work that reads ``predicate`` (None: the whole table).

    ``isolation_level`` defaults to the table's ``delta.isolationLevel`` at the read
    version. ``changes_data=False`` describes work that only rearranges data
    (``dataChange=false`` rewrites such as OPTIMIZE): a transaction doing it is checked
    at SnapshotIsolation, as ``Transaction`` downgrades it, so no concurrently added file
    concerns it. The work is taken to remove only files it read (DELETE, UPDATE, MERGE,
    OPTIMIZE do), so rule 7 (delete/delete) never fires before rule 6 would.
    ``changes_data=True`` work is taken to commit ``dataChange=true`` file actions, as a
    MERGE inserting rows does even when its predicate read no file. A DELETE or UPDATE
    that reads no file commits nothing, and Delta checks an empty commit at
    SnapshotIsolation even at Serializable (``canDowngradeToSnapshotIsolation``), so a
    verdict of ``ConcurrentAppendException`` for it is cautious: that work would commit.
    """

    def __init__(
        self,
        location: TableLocation,
        read_version: int,
        predicate: str | None = None,
        *,
        isolation_level: str | IsolationLevel | None = None,
        changes_data: bool = True,
    ) -> None:
        check_int("read_version", read_version, minimum=0)
        check_str("predicate", predicate, optional=True)
        check_bool("changes_data", changes_data)
        self.location = location
        self.read_version = read_version
        self.predicate = predicate
        snapshot = load_snapshot(location.io, location.root, version=read_version)  # metadata pass only
        self._metadata: Metadata = snapshot.metadata
        self._protocol: Protocol = snapshot.protocol
        level = IsolationLevel.parse(
            isolation_level if isolation_level is not None
            else TableProperties.from_configuration(snapshot.metadata.configuration).isolation_level
        )
        # Transaction._isolation_level: work whose file actions are all dataChange=false
        # is checked at SnapshotIsolation (it is never a DELETE/UPDATE/MERGE/WRITE then).
        self.isolation_level = level if changes_data else IsolationLevel.SNAPSHOT_ISOLATION
        self._predicates: tuple[Any, ...] = ()
        if predicate is not None:
            from airflow_delta.engine.expressions import parse_predicate

            self._predicates = (parse_predicate(predicate, snapshot.schema),)
        self.last_seen = read_version
        self._new_paths: set[str] = set()  # first seen as added after the read version
        self._read_paths: set[str] = set()  # in the read version's state, and the predicate read them
        self._unread_paths: set[str] = set()  # in the read version's state, not read

    def _matcher(self, predicates: Sequence[Any], files: pa.Table) -> pa.BooleanArray:
        return files_may_match(predicates, files, self._metadata)

    def poll(self) -> list[CommitConflict]:
        """Judge the commits that landed since the last poll (since the read version, the first time)."""
        commits = _read_commits(self.location, self.last_seen)
        verdicts = [self._judge(c) for c in commits]
        if commits:
            self.last_seen = commits[-1].summary.version
        return verdicts

    def _judge(self, commit: _LoggedCommit) -> CommitConflict:
        removed = commit.removed_files
        added = commit.winner.added_files
        if self._predicates:
            removed_read = self._matcher(self._predicates, removed).to_pylist()
            added_read = self._matcher(self._predicates, added)
        else:  # the whole table
            removed_read = [True] * removed.num_rows
            added_read = bool_array(np.ones(added.num_rows, dtype=bool))
        if self._predicates:
            # The first action on a path since the read version is a remove: the file was
            # in the read version's state, and the remove's own partition values and
            # statistics say whether the predicate read it. (A whole-table read depends on
            # every file without recording paths, as in Transaction.read_files(None).)
            for path, was_read in zip(removed.column("path").to_pylist(), removed_read, strict=True):
                if path not in self._new_paths and path not in self._read_paths and path not in self._unread_paths:
                    (self._read_paths if was_read else self._unread_paths).add(path)
        footprint = TransactionFootprint(
            read_version=self.read_version,
            partitioned=bool(self._metadata.partition_columns),
            read_predicates=self._predicates,
            read_whole_table=self.predicate is None,
            read_paths=string_array(sorted(self._read_paths)),
        )
        for path in _added_paths(commit.winner):
            if path not in self._read_paths and path not in self._unread_paths:
                self._new_paths.add(path)
        data_adds = pc.and_(added_read, pc.fill_null(added.column("data_change").combine_chunks(), bool_scalar(True)))
        adds_to_read = bool(pc.any(data_adds).as_py()) if added.num_rows else False
        touches = any(removed_read) or (bool(pc.any(added_read).as_py()) if added.num_rows else False)
        try:
            check_winning_commit(footprint, commit.winner, self.isolation_level, self._matcher, self._protocol)
        except ConcurrentModificationError as exc:
            return CommitConflict(commit.summary, True, touches, adds_to_read, type(exc).__name__, str(exc))
        return CommitConflict(commit.summary, False, touches, adds_to_read)


def _added_paths(winner: WinningCommit) -> list[str]:
    return [decode_log_path(p) for p in winner.added_files.column("path").to_pylist()]


def conflicting_commits(
    location: TableLocation,
    read_version: int,
    predicate: str | None = None,
    *,
    isolation_level: str | IsolationLevel | None = None,
    changes_data: bool = True,
) -> list[CommitConflict]:
    """Every commit after ``read_version`` judged against the planned work; see :class:`ConflictWatch`."""
    watch = ConflictWatch(
        location, read_version, predicate, isolation_level=isolation_level, changes_data=changes_data
    )
    return watch.poll()


__all__ = ["CommitConflict", "CommitSummary", "ConflictWatch", "commits_since", "conflicting_commits"]
