"""Log replay: the spec's Action Reconciliation over a log segment.

* the latest ``protocol`` and ``metaData`` win;
* ``txn``: the latest action per ``appId`` wins;
* ``domainMetadata``: the latest action per ``domain`` wins, and one with
  ``removed=true`` is a tombstone that hides the domain;
* file actions: a logical file is ``(path, deletionVector.uniqueId)``; the newest
  action per logical file wins (adds are live files, removes are tombstones). Order is
  the ``seq`` column: checkpoint rows first (tombstones before adds), then commit lines
  in version and line order. The live set is then unique by ``path``: should a
  (non-compliant) log add one path under two DVs, the newer add wins.

Replay runs in two passes: :func:`replay_metadata` (non-file actions; the checkpoint's
non-file columns and the commit bytes, which it keeps) and :class:`FileActions`, which
reconciles file actions on first use. :func:`replay` runs both eagerly.

File actions are reconciled by hashing their keys (``dictionary_encode``) and keeping
the last row per key, vectorised (no Python loop over files).
Paths are compared exactly as written in the log (URI-encoded), which is how the spec
defines the key and how JSON commits and checkpoints both store it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import InvalidLogError, MissingMetadataError, MissingProtocolError
from airflow_delta.engine.model.actions import FILE_ACTIONS_SCHEMA, DomainMetadata, Metadata, Protocol, SetTransaction
from airflow_delta.engine.model.arrow_numpy import (
    bool_array,
    combined,
    int32_array,
    int64_array,
    int64_to_numpy,
    mask_to_numpy,
    offsets_to_numpy,
    string_array,
    string_scalar,
)
from airflow_delta.engine.model.table_features import check_readable
from airflow_delta.engine.read.commit_reader import (
    EMPTY_FILE_ACTIONS,
    LogAction,
    LogLines,
    ParsedLog,
    StrayFileAction,
    only_lines,
    parse_file_actions,
    parse_non_file_actions,
    partition_keys_of,
    read_files_joined,
    split_log_lines,
)
from airflow_delta.engine.read.listing import LogSegment, commit_version
from airflow_delta.engine.storage.fileio import FileIO

if TYPE_CHECKING:
    from airflow_delta.engine.read.checkpoint_reader import CheckpointActions


@dataclass(frozen=True)
class ReplayResult:
    """The reconciled state of a log segment."""

    version: int
    protocol: Protocol
    metadata: Metadata
    transactions: Mapping[str, SetTransaction]
    domain_metadata: Mapping[str, DomainMetadata]  # live domains only
    add_actions: pa.Table  # FILE_ACTIONS_SCHEMA, live files, ascending seq
    tombstones: pa.Table  # FILE_ACTIONS_SCHEMA, removes that won, ascending seq
    commit_infos: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # commitInfo per JSON commit read


class FileActions:
    """The file-action half of a replay, computed on first use and then kept.

    The metadata pass (:func:`replay_metadata`) already read the commits; their lines are
    kept here so that file actions parse the same bytes (no second read, and no race with
    log cleanup). The checkpoint is read at first use, its ``add`` rows for
    :meth:`adds` and its ``remove`` rows only for :meth:`tombstones`: checkpoint
    tombstones can never hide a file (a checkpoint is reconciled and precedes every
    commit of the segment), so live files never need them.

    Sequence numbers: checkpoint adds 0..a-1, commit lines a + line index, checkpoint
    tombstones negative (before everything). Thread-safe; results are immutable tables.
    """

    def __init__(
        self,
        io: FileIO,
        segment: LogSegment,
        commits: LogLines | None,
        stray: Sequence[StrayFileAction],
        partition_keys: frozenset[str],
        sidecars: Sequence[str] = (),
    ) -> None:
        self.io = io
        self.segment = segment
        self._commits = commits
        self._stray = tuple(stray)
        self._partition_keys = partition_keys
        self._sidecars = tuple(sidecars)
        self._lock = threading.RLock()
        self._adds: pa.Table | None = None
        self._commit_tombstones: pa.Table | None = None  # tombstones decided by the commits
        self._checkpoint_adds = 0  # rows of the checkpoint's adds: seq below this
        self._tombstones: pa.Table | None = None
        self._removes: pa.Table | None = None  # the commits' remove lines parsed, for questions about a few files

    @property
    def loaded(self) -> bool:
        return self._adds is not None

    def adds(self) -> pa.Table:
        """The live files (FILE_ACTIONS_SCHEMA, ascending seq)."""
        with self._lock:
            if self._adds is None:
                self._reconcile_adds()
            assert self._adds is not None
            return self._adds

    def tombstones(self) -> pa.Table:
        """Removes that are still tombstones (FILE_ACTIONS_SCHEMA, ascending seq)."""
        with self._lock:
            if self._tombstones is None:
                adds = self.adds()
                assert self._commit_tombstones is not None
                checkpoint = self._checkpoint_rows("remove")
                if checkpoint.num_rows:
                    # A checkpoint tombstone stays one unless a commit acted on the same file;
                    # the newest action on such a file is a commit row of the adds or tombstones.
                    from_commits = adds.filter(pc.greater_equal(adds.column("seq"), int64_array(np.array([self._checkpoint_adds]))[0]))
                    touched = pa.concat_arrays([_file_keys(from_commits, comparable=True),
                                                _file_keys(self._commit_tombstones, comparable=True)])
                    known = pc.is_in(_file_keys(checkpoint, comparable=True), value_set=touched)
                    checkpoint = checkpoint.filter(pc.invert(known))
                    seq = np.arange(checkpoint.num_rows, dtype=np.int64) - checkpoint.num_rows
                    checkpoint = checkpoint.set_column(1, FILE_ACTIONS_SCHEMA.field("seq"), int64_array(seq))
                    self._tombstones = pa.concat_tables([checkpoint, self._commit_tombstones])
                else:
                    self._tombstones = self._commit_tombstones
            return self._tombstones

    def state_of_files_named(self, names: pa.Array) -> tuple[pa.Table, pa.Table]:
        """(live adds, tombstones) exact for every file whose name (last path component,
        decoded) is in ``names``, and holding every live add and tombstone that carries a
        deletion vector; other files may be missing or (as tombstones) out of date.

        For a question about a few files (lite VACUUM: are the removed files live again?)
        without parsing every ``add`` of the log: ``add`` lines whose path is plain (no
        ``%``, no escape) and names another file, and carries no DV, are not parsed. Every
        ``remove`` line is parsed, once (shared with :meth:`removes_of_versions`). When
        the state is already loaded, or the segment starts at a checkpoint, it is the
        whole state (:meth:`adds`, :meth:`tombstones`).
        """
        with self._lock:
            commits = self._commits
            if self._adds is not None or commits is None or self.segment.checkpoint_version is not None:
                return self.adds(), self.tombstones()
            removes = self._parsed_removes(commits)
        lines = commits.lines
        plain = pc.extract_regex(lines, _PLAIN_ADD_PATH)  # null where the line is no plain add
        file_names = _last_components(pc.struct_field(plain, "path"))
        named = mask_to_numpy(pc.is_in(file_names, value_set=names))  # null: False
        skip = mask_to_numpy(pc.is_valid(plain)) & ~named & ~mask_to_numpy(pc.match_substring_regex(lines, _DV_VALUE))
        keep = mask_to_numpy(commits.is_file_line) & ~skip
        keep[[seq for _, seq, _, _ in self._stray]] = True  # add/remove lines with unusual spacing
        keep &= ~self._remove_lines(commits)  # parsed already
        parsed = _parse_lines_of(commits, keep, self._partition_keys)
        if removes.num_rows:
            parsed = pa.concat_tables([removes, parsed]) if parsed.num_rows else removes
        return reconcile_files(parsed) if parsed.num_rows else (EMPTY_FILE_ACTIONS, EMPTY_FILE_ACTIONS)

    def removes_of_versions(self, start: int, end: int) -> ParsedLog | None:
        """The ``remove`` actions (``file_actions``) and the non-file actions of commits
        ``start..end``, from the commit lines the metadata pass kept: no second read of the
        log and one parse of its ``remove`` lines, shared with :meth:`state_of_files_named`.

        None when those lines are not kept (the file state is loaded, or the segment does
        not hold every one of those commits): read them from storage then.
        """
        with self._lock:
            commits = self._commits
            if commits is None or not set(range(start, end + 1)) <= set(commits.versions.tolist()):
                return None
            removes = self._parsed_removes(commits)
        versions = int64_to_numpy(removes.column("version"))
        in_range = (versions >= start) & (versions <= end)
        if not in_range.all():
            removes = removes.filter(bool_array(in_range))
        actions, _ = parse_non_file_actions(commits)
        return ParsedLog(removes, tuple(a for a in actions if start <= a.version <= end), commits.num_lines)

    def _remove_lines(self, commits: LogLines) -> np.ndarray:
        """Which lines of ``commits`` are ``remove`` actions (written plainly, or with unusual spacing)."""
        is_remove = mask_to_numpy(pc.starts_with(commits.lines, '{"remove":'))
        is_remove[[seq for _, seq, key, _ in self._stray if key == "remove"]] = True
        return is_remove

    def _parsed_removes(self, commits: LogLines) -> pa.Table:
        """Every ``remove`` line of ``commits`` parsed (``seq`` = line index); parsed once, then kept."""
        if self._removes is None:
            self._removes = _parse_lines_of(commits, self._remove_lines(commits), self._partition_keys)
        return self._removes

    def _checkpoint_rows(self, key: str) -> pa.Table:
        seg = self.segment
        if seg.checkpoint_version is None:
            return EMPTY_FILE_ACTIONS
        from airflow_delta.engine.read.checkpoint_reader import read_checkpoint_file_actions  # see replay_metadata

        return read_checkpoint_file_actions(self.io, seg.checkpoint_version, seg.checkpoint_files, self._sidecars,
                                            key=key, partition_keys=self._partition_keys)

    def _reconcile_adds(self) -> None:
        checkpoint_adds = self._checkpoint_rows("add")
        if self._commits is not None:
            commits = parse_file_actions(self._commits, self._stray, seq_start=checkpoint_adds.num_rows,
                                         partition_keys=self._partition_keys)
        else:
            commits = EMPTY_FILE_ACTIONS
        self._commits = None  # the bytes are no longer needed
        self._removes = None
        if commits.num_rows == 0:
            adds, commit_tombstones = checkpoint_adds, EMPTY_FILE_ACTIONS
        else:
            combined = pa.concat_tables([checkpoint_adds, commits]) if checkpoint_adds.num_rows else commits
            adds, commit_tombstones = reconcile_files(combined)
        self._checkpoint_adds = checkpoint_adds.num_rows
        self._commit_tombstones = commit_tombstones
        self._adds = adds
        # The parse left large freed blocks behind; hand them back (mimalloc keeps them).
        pa.default_memory_pool().release_unused()


def _parse_lines_of(commits: LogLines, keep: np.ndarray, partition_keys: frozenset[str]) -> pa.Table:
    """The file actions of the lines of ``commits`` where ``keep`` is true, ``seq`` = their line index in ``commits``."""
    rows = np.flatnonzero(keep)
    if not len(rows):
        return EMPTY_FILE_ACTIONS
    parsed = parse_file_actions(only_lines(commits, keep), partition_keys=partition_keys)
    seq = rows[int64_to_numpy(parsed.column("seq"))]
    return parsed.set_column(parsed.schema.get_field_index("seq"), FILE_ACTIONS_SCHEMA.field("seq"), int64_array(seq))


def _last_components(paths: pa.Array) -> pa.Array:
    """The last ``/``-separated component of each path, null where the path is: one split from
    the right and a take (a third of the CPU of replacing ``^.*/`` with a regex, per line of a
    large commit)."""
    parts = pc.split_pattern(paths, "/", max_splits=1, reverse=True)
    names = pc.list_flatten(parts)
    if len(names) == 0:
        return pa.nulls(len(paths), paths.type)
    offsets = offsets_to_numpy(parts)
    valid = mask_to_numpy(pc.is_valid(parts))
    # A null index takes a null: no null scalar (pyarrow would import pandas to convert one).
    return names.take(int32_array(np.where(valid, offsets[1:] - offsets[0] - 1, 0), valid=valid))


# An add line as writers put it: the path first, plain (no escape, no percent-encoding).
_PLAIN_ADD_PATH = r'^\{"add":\s*\{\s*"path"\s*:\s*"(?P<path>[^"\\%]*)"'
# A deletion vector that may not be null, whatever the spacing.
_DV_VALUE = r'deletionVector"\s*:\s*[^n\s]'


def _file_keys(actions: pa.Table, *, comparable: bool = False) -> pa.Array:
    """One string per logical file: ``path`` NUL ``dv_id`` (empty without a DV).

    Within one table, when no row has a DV the path alone is the key (no copy); keys
    of different tables compared with each other need ``comparable=True``.
    """
    if actions.num_rows == 0:
        return pa.nulls(0, pa.string())
    dv_id = actions.column("dv_id")
    if not comparable and dv_id.null_count == len(dv_id):
        return combined(actions.column("path"))
    dv = pc.fill_null(dv_id, string_scalar(""))
    return combined(pc.binary_join_element_wise(actions.column("path"), dv, string_scalar("\x00")))


# LogState and ActionState are named tuples, not frozen dataclasses: as immutable, a quarter of the
# cost to create at import (a frozen dataclass compiles six methods, ~1 ms), which every
# process that opens a table pays; nothing compares them to other types or copies them.
class LogState(NamedTuple):
    """The result of the metadata pass: everything but the file actions, which are lazy."""

    version: int
    protocol: Protocol
    metadata: Metadata
    transactions: Mapping[str, SetTransaction]
    domain_metadata: Mapping[str, DomainMetadata]
    commit_infos: Mapping[int, Mapping[str, Any]]
    files: FileActions


def replay_metadata(io: FileIO, segment: LogSegment, *, check_protocol: bool = True) -> LogState:
    """Reconcile the non-file actions of ``segment``; file actions are left to ``state.files``.

    Reads the checkpoint's non-file columns and every commit's bytes (once; the bytes are
    kept in ``state.files`` for the file-action pass).
    """
    checkpoint: CheckpointActions | None = None
    if segment.checkpoint_version is not None:
        # Loaded with the first checkpoint read, not with the module: a log without a
        # checkpoint (a young table, the OPTIMIZE benchmark's) never creates its classes.
        from airflow_delta.engine.read.checkpoint_reader import read_checkpoint_actions

        checkpoint = read_checkpoint_actions(io, segment.table_root, segment.checkpoint_version,
                                             segment.checkpoint_files)
    versions = [commit_version(f.name) for f in segment.commit_files]
    commits = split_log_lines(read_files_joined(io, segment.commit_files) if segment.commit_files else [],
                              [f.path for f in segment.commit_files], [v if v is not None else -1 for v in versions])
    commit_actions, stray = parse_non_file_actions(commits) if commits is not None else ((), ())
    actions: list[LogAction] = list(checkpoint.actions) if checkpoint is not None else []
    actions.extend(commit_actions)
    state = reconcile_actions(actions)
    where = _describe(segment)
    if state.protocol is None:
        raise MissingProtocolError(f"no protocol action found in {where}; the log is incomplete or damaged")
    if state.metadata is None:
        raise MissingMetadataError(f"no metaData action found in {where}; the log is incomplete or damaged")
    if check_protocol:
        check_readable(state.protocol)
    keys: set[str] = set()
    for action in actions:
        if action.key == "metaData":
            keys |= partition_keys_of(action.body)
    files = FileActions(io, segment, commits, stray, frozenset(keys), checkpoint.sidecars if checkpoint else ())
    return LogState(
        version=segment.version,
        protocol=state.protocol,
        metadata=state.metadata,
        transactions=state.transactions,
        domain_metadata=state.domain_metadata,
        commit_infos=state.commit_infos,
        files=files,
    )


def replay(io: FileIO, segment: LogSegment, *, file_actions: bool = True, check_protocol: bool = True) -> ReplayResult:
    """Replay ``segment`` eagerly. With ``file_actions=False`` only protocol/metadata/txn/domains are built."""
    state = replay_metadata(io, segment, check_protocol=check_protocol)
    if file_actions:
        adds, tombstones = state.files.adds(), state.files.tombstones()
    else:
        adds = tombstones = EMPTY_FILE_ACTIONS
    return ReplayResult(
        version=segment.version,
        protocol=state.protocol,
        metadata=state.metadata,
        transactions=state.transactions,
        domain_metadata=state.domain_metadata,
        add_actions=adds,
        tombstones=tombstones,
        commit_infos=state.commit_infos,
    )


def _describe(segment: LogSegment) -> str:
    parts = []
    if segment.checkpoint_version is not None:
        parts.append(f"the checkpoint of version {segment.checkpoint_version}")
    if segment.commit_files:
        parts.append(f"commits {segment.commit_versions[0]}..{segment.version}")
    return f"{segment.log_dir} ({' and '.join(parts) or 'no files'})"


class ActionState(NamedTuple):
    protocol: Protocol | None
    metadata: Metadata | None
    transactions: Mapping[str, SetTransaction]
    domain_metadata: Mapping[str, DomainMetadata]
    commit_infos: Mapping[int, Mapping[str, Any]]


def reconcile_actions(actions: Sequence[LogAction]) -> ActionState:
    """Reconcile the non-file actions, given in log order (checkpoint first)."""
    protocol_action: LogAction | None = None
    metadata_action: LogAction | None = None
    txns: dict[str, SetTransaction] = {}
    domains: dict[str, DomainMetadata] = {}
    commit_infos: dict[int, Mapping[str, Any]] = {}
    for action in actions:
        key, body = action.key, action.body
        try:
            if key == "protocol":
                protocol_action = action
            elif key == "metaData":
                metadata_action = action
            elif key == "txn":
                txn = SetTransaction.from_json(body)
                txns[txn.app_id] = txn
            elif key == "domainMetadata":
                dm = DomainMetadata.from_json(body)
                domains[dm.domain] = dm
            elif key == "commitInfo":
                commit_infos.setdefault(action.version, body)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidLogError(f"invalid {key} action in {_where(action)}: {exc!r}") from None
    # Only the winners are turned into objects (a long log may hold many metaData actions).
    protocol = _decode(protocol_action, Protocol.from_json)
    metadata = _decode(metadata_action, Metadata.from_json)
    live_domains = {name: dm for name, dm in domains.items() if not dm.removed}
    return ActionState(
        protocol, metadata, MappingProxyType(txns), MappingProxyType(live_domains), MappingProxyType(commit_infos)
    )


def _where(action: LogAction) -> str:
    return action.source or f"version {action.version}"


def _decode(action: LogAction | None, from_json: Any) -> Any:
    if action is None:
        return None
    try:
        return from_json(action.body)
    except InvalidLogError as exc:
        raise InvalidLogError(f"{exc} (in {_where(action)}); the log is damaged at that file") from None


def reconcile_files(file_actions: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Live adds and tombstones of a table of file actions (any order, unique ``seq``)."""
    n = file_actions.num_rows
    empty = EMPTY_FILE_ACTIONS
    if n == 0:
        return empty, empty
    seq = int64_to_numpy(file_actions.column("seq"))
    if n > 1 and not bool(np.all(seq[1:] > seq[:-1])):
        file_actions = file_actions.take(int64_array(np.argsort(seq, kind="stable")))
    newest = _last_row_per_key(_file_keys(file_actions))
    # When every action is the only one for its file (e.g. append-only), no copy.
    winners = file_actions if newest.size == n else file_actions.take(int64_array(newest))
    is_add = winners.column("is_add")
    num_adds = pc.sum(is_add.cast(pa.int64())).as_py() or 0
    if num_adds == winners.num_rows:
        adds, tombstones = winners, empty
    else:
        adds = winners.filter(is_add)
        tombstones = winners.filter(pc.invert(is_add))
    # Without DVs the key is the path, so the winners are already unique by path.
    has_dv = file_actions.column("dv_id").null_count < n
    if has_dv and adds.num_rows > 1 and len(pc.unique(adds.column("path"))) < adds.num_rows:
        adds = _newest_per_path(adds)
    return adds, tombstones


def _newest_per_path(adds: pa.Table) -> pa.Table:
    return adds.take(int64_array(_last_row_per_key(adds.column("path"))))


def _last_row_per_key(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Ascending row indexes of the last row of each distinct key (hash-based, vectorised).

    ``dictionary_encode`` numbers the keys; the last row of each number is its first
    occurrence in reversed order. (No ``Table.group_by``: it loads Acero, whose import
    pulls in pyarrow.dataset and pandas.)
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = combined(keys)
    codes = pc.dictionary_encode(keys).indices
    codes_np = np.frombuffer(codes.buffers()[1], dtype=np.int32)[codes.offset:codes.offset + len(codes)]
    n = len(codes_np)
    _, first_in_reversed = np.unique(codes_np[::-1], return_index=True)
    return np.sort(n - 1 - first_in_reversed).astype(np.int64)


def restrict_map_keys(column: pa.ChunkedArray | pa.Array, keys: Sequence[str]) -> pa.Array:
    """``column`` (a map<string, string> array) with only the entries whose key is in ``keys``.

    Vectorised: entries are masked, and each map's new end offset is the running count of
    kept entries at its old end offset. Maps that are null stay null.
    """
    maps = combined(column)
    # MapArray.keys/.items ignore a slice's offset: cut them to this array's entries.
    start, end = maps.offsets[0].as_py(), maps.offsets[-1].as_py()
    map_keys, map_items = maps.keys.slice(start, end - start), maps.items.slice(start, end - start)
    keep = pc.is_in(map_keys, value_set=string_array(list(keys)))
    if pc.all(keep).as_py() is not False:
        return maps
    kept_before = pc.cumulative_sum(pc.cast(keep, pa.int32()))
    starts_at_zero = pa.concat_arrays([int32_array(np.zeros(1, dtype=np.int32)), kept_before])
    relative_offsets = pc.subtract(maps.offsets, maps.offsets[0])
    offsets = pc.take(starts_at_zero, relative_offsets)
    return pa.MapArray.from_arrays(
        offsets,
        pc.filter(map_keys, keep),
        pc.filter(map_items, keep),
        type=maps.type,
        mask=maps.is_null() if maps.null_count else None,
    )
