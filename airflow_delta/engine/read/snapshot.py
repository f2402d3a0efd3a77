"""``Snapshot``: one immutable version of a table, and :func:`load_snapshot`.

Loading lists the log once, replays the non-file actions of the segment
(:func:`.log.replay.replay_metadata`) and checks the reader feature gate. The file state
(``add_actions``, ``tombstones``) is reconciled on first use from the commit bytes read
during loading, plus the checkpoint's ``add`` (and, for tombstones, ``remove``) columns.
File actions stay Arrow (``FILE_ACTIONS_SCHEMA``); statistics stay JSON strings until
:meth:`Snapshot.files` or a filter needs them. So a snapshot loaded for its metadata
never parses file actions.

A checkpoint that cannot be read (truncated, a missing part or sidecar) is skipped as
Delta does: the load is retried with the newest checkpoint strictly older than the bad
one, or with the commits from version 0, and fails with :class:`CorruptCheckpointError`
naming the file only when no complete alternative exists. This holds for the metadata
pass and for the (later) file-action pass alike; ``log_segment`` is the segment the
metadata came from.

Reading follows pyiceberg's shape: :meth:`Snapshot.plan_files` prunes the live files
with a filter (partition values, then statistics), :meth:`Snapshot.to_arrow` reads the
planned files (deletion vectors applied) and filters their rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from typing import Protocol as Protocol_

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import (
    CorruptCheckpointError,
    DeltaError,
    InvalidArgumentError,
    InvalidTablePropertyError,
    LogNotContiguousError,
    LogTooLargeError,
    VersionNotFoundError,
)
from airflow_delta.engine.model.actions import DomainMetadata, Metadata, Protocol, SetTransaction
from airflow_delta.engine.model.arguments import check_bool, check_instance, check_int, check_str, check_str_sequence
from airflow_delta.engine.model.arrow_numpy import (
    bool_array,
    combined,
    int64_array,
    mask_to_numpy,
    offsets_to_numpy,
    string_array,
    string_scalar,
)
from airflow_delta.engine.model.column_mapping import ColumnMapping
from airflow_delta.engine.model.partition_values import parse_partition_values
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.model.schema import schema_to_arrow
from airflow_delta.engine.model.stats_parse import parse_num_records, parse_stats
from airflow_delta.engine.read.commit_reader import ParsedLog
from airflow_delta.engine.read.history import commit_timestamp, extract_commit_info, version_at_timestamp
from airflow_delta.engine.read.listing import (
    LogListing,
    LogSegment,
    list_log,
    list_log_and_segment,
    segment_from_listing,
)
from airflow_delta.engine.read.replay import FileActions, LogState, replay_metadata, restrict_map_keys
from airflow_delta.engine.read.scan import read_data
from airflow_delta.engine.storage.fileio import FileIO
from airflow_delta.engine.storage.paths import (
    NEEDS_FULL_CHECK,
    URI_SCHEME,
    decode_log_path,
    encode_log_path,
    relative_to_table,
    resolve_in_table,
)

if TYPE_CHECKING:
    from airflow_delta.engine.read.history import TimestampLike

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class Snapshot:
    """The state of a table at one version. Immutable; derived values are computed once.

    Protocol, metadata, properties, transactions, domains and the timestamp are decided
    when the snapshot is loaded. The file state (``add_actions``, ``tombstones``) is
    reconciled on first use (:class:`~.log.replay.FileActions`), so a snapshot loaded
    for its metadata never parses file actions. Errors in file actions (a corrupt
    ``add`` line) therefore surface on first use of the file state.
    """

    table_root: str
    io: FileIO
    version: int
    protocol: Protocol
    metadata: Metadata
    properties: TableProperties
    timestamp: int  # ms since the epoch: commit (or in-commit) timestamp of ``version``
    log_segment: LogSegment
    transactions: Mapping[str, SetTransaction]
    domain_metadata: Mapping[str, DomainMetadata]  # live domains (tombstones excluded)
    file_state: FileStateLoader = field(repr=False)
    commit_info: Mapping[str, Any] | None = None  # commitInfo of ``version``, if its JSON exists
    # commitInfo of each JSON commit replayed on top of the checkpoint (the log tail), by version:
    # what maintenance ran lately, without reading the log a second time.
    tail_commit_infos: Mapping[int, Mapping[str, Any]] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"Snapshot({self.table_root!r}, version={self.version})"

    @cached_property
    def add_actions(self) -> pa.Table:
        """FILE_ACTIONS_SCHEMA: the live files, URI-encoded paths (reconciled on first use).

        ``partition_values`` holds exactly the table's (physical) partition columns: the
        log parser declares every key any metadata in the segment used, so a key the
        file's action did not carry would otherwise appear as a null entry, and be
        written back that way by checkpoints and removes.
        """

        adds = self.file_state.adds()
        mapping = ColumnMapping.from_metadata(self.metadata, self.protocol)
        keys = [mapping.physical_name(c) for c in self.metadata.partition_columns]
        column = adds.column("partition_values")
        index = adds.schema.get_field_index("partition_values")
        return adds.set_column(index, adds.schema.field(index), restrict_map_keys(column, keys))

    @cached_property
    def tombstones(self) -> pa.Table:
        """FILE_ACTIONS_SCHEMA: removes that are still tombstones (read on first use)."""
        return self.file_state.tombstones()

    # ------------------------------------------------------------------ metadata
    def file_state_of_names(self, names: pa.Array) -> tuple[pa.Table, pa.Table]:
        """(live adds, tombstones), exact for the files whose name (last path component) is in
        ``names`` and complete for files with a deletion vector; other rows may be missing.
        Cheaper than :attr:`add_actions` when the log holds many adds of other files (see
        :meth:`FileActions.state_of_files_named`); the whole state when it is loaded already."""
        check_instance("names", names, pa.Array)
        if not (pa.types.is_string(names.type) or pa.types.is_large_string(names.type)):
            raise InvalidArgumentError("names", names, "pass a pyarrow array of strings (file names)")
        if "add_actions" in self.__dict__:
            return self.add_actions, self.tombstones
        return self.file_state.state_of_files_named(names)

    def removes_of_versions(self, start: int, end: int) -> ParsedLog | None:
        """The ``remove`` actions and non-file actions of commits ``start..end`` from the commit
        lines this snapshot read (no second read; the ``remove`` lines parsed once, shared with
        :meth:`file_state_of_names`), or None when it no longer holds them all (read the commits then)."""
        check_int("start", start, minimum=0)
        check_int("end", end, minimum=start)
        return self.file_state.removes_of_versions(start, end)

    @cached_property
    def schema(self) -> pa.Schema:
        """The table schema as Arrow, with logical column names."""

        return schema_to_arrow(self.metadata.schema_string)

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.metadata.partition_columns

    @property
    def num_files(self) -> int:
        return self.add_actions.num_rows

    def transaction_version(self, app_id: str) -> int | None:
        """The last ``txn`` version committed by ``app_id``, if any."""
        check_str("app_id", app_id)
        txn = self.transactions.get(app_id)
        return txn.version if txn is not None else None

    # ------------------------------------------------------------------ files
    @cached_property
    def _partition_values(self) -> pa.StructArray:

        return parse_partition_values(self.add_actions.column("partition_values"), self.metadata, self.protocol)

    @cached_property
    def _stats(self) -> pa.StructArray:

        return parse_stats(combined(self.add_actions.column("stats")), self.metadata)

    def _predicate(self, filter: str) -> Any:
        from airflow_delta.engine.expressions import parse_predicate

        return parse_predicate(filter, self.schema)

    def _file_mask(self, filter: str) -> pa.BooleanArray:
        from airflow_delta.engine.expressions import prune_files, references_only

        predicate = self._predicate(filter)
        stats = None if references_only(predicate, self.partition_columns) else self._stats
        return prune_files(predicate, self._partition_values, stats, self.partition_columns)

    def plan_files(self, filter: str | None = None) -> pa.Table:
        """The live file actions (``FILE_ACTIONS_SCHEMA``) that :meth:`to_arrow` would read."""
        check_str("filter", filter, optional=True)
        if filter is None or self.add_actions.num_rows == 0:
            return self.add_actions
        return self.add_actions.filter(self._file_mask(filter))

    def files(self, filter: str | None = None, *, stats: bool = False) -> pa.Table:
        """One row per live file (after pruning by ``filter``), in user-facing form.

        Columns: ``path`` (decoded, relative to the root), ``partition_values`` (typed
        struct, logical names), ``size``, ``modification_time``, ``num_records``,
        ``deletion_vector``, ``tags``; with ``stats=True`` also ``stats`` (typed struct:
        ``numRecords``, ``minValues``, ``maxValues``, ``nullCount``, ``tightBounds``).
        Parsing every file's statistics is most of the cost of listing a large table, so
        it is done only when asked for (or when ``filter`` needs the statistics to prune).
        """
        check_str("filter", filter, optional=True)
        check_bool("stats", stats)
        actions, pv = self.add_actions, None
        if filter is not None and actions.num_rows:
            mask = self._file_mask(filter)
            actions, pv = actions.filter(mask), self._partition_values.filter(mask)
            parsed = self._stats.filter(mask) if "_stats" in self.__dict__ else None  # pruning parsed them: reuse
        else:
            pv, parsed = self._partition_values, self.__dict__.get("_stats")
        if stats and parsed is None:
            parsed = parse_stats(combined(actions.column("stats")), self.metadata)
        if parsed is not None:
            num_records = pc.struct_field(parsed, "numRecords")
        else:
            num_records = parse_num_records(combined(actions.column("stats")))
        columns = {
            "path": relative_paths(self.table_root, actions.column("path")),
            "partition_values": pv,
            "size": actions.column("size"),
            "modification_time": actions.column("modification_time"),
            "num_records": num_records,
        }
        if stats:
            columns["stats"] = parsed
        columns["deletion_vector"] = actions.column("deletion_vector")
        columns["tags"] = actions.column("tags")
        return pa.table(columns)

    def data_file_path(self, path: str) -> str:
        """The FileIO path of a data file named as :meth:`files` names it (decoded, relative to the root).

        Raises :class:`~airflow_delta.engine.errors.PathOutsideTableError` for a path
        that would leave the table root.
        """
        check_str("path", path, non_empty=True)
        return resolve_in_table(self.table_root, encode_log_path(path))

    def file_uris(self, filter: str | None = None) -> list[str]:
        """Full URIs of the live data files, as delta-rs's ``file_uris()``: local paths on local
        storage, ``s3://bucket/...`` (``az://``, ``abfss://``, ``gs://``) on object stores.

        ``filter`` prunes them as :meth:`plan_files` does.
        """
        check_str("filter", filter, optional=True)
        paths = self.plan_files(filter).column("path") if filter is not None else self.add_actions.column("path")
        relative = relative_paths(self.table_root, paths)
        # Scalars built from buffers: a Python ``str`` argument would make pyarrow import
        # pandas, which this path avoids.
        prefix, empty = string_scalar(f"{self.io.uri(self.table_root)}/"), string_scalar("")
        return pc.binary_join_element_wise(prefix, relative, empty).to_pylist()

    def to_arrow(self, columns: Sequence[str] | None = None, filter: str | None = None) -> pa.Table:
        """The table's rows (deletion vectors applied), optionally projected and filtered."""
        columns = check_str_sequence("columns", columns, optional=True)
        check_str("filter", filter, optional=True)
        files = self.plan_files(filter)
        if filter is None:
            return read_data(self, files, columns=columns)
        predicate = self._predicate(filter)
        return read_data(self, files, columns=columns, row_filter=predicate.to_arrow(), row_filter_columns=predicate.columns)


def decode_paths(paths: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Percent-decode log paths (``urllib.parse.unquote``), vectorised; paths whose escapes
    are malformed or decode to bytes that are not UTF-8 go through the path rule
    (:func:`decode_log_path`), which refuses them with :class:`InvalidPathError`."""
    paths = combined(paths)
    if len(paths) == 0 or not pa.types.is_string(paths.type):
        return paths if len(paths) == 0 else string_array([decode_log_path(p) for p in paths.to_pylist()])
    if not _has_byte(_string_bytes(paths)[0], "%"):  # one pass over the bytes: most logs have no escapes
        return paths
    has_escape = pc.match_substring(paths, "%")
    idx = np.flatnonzero(mask_to_numpy(has_escape))
    if idx.size == 0:
        return paths
    escaped = paths if idx.size == len(paths) else paths.take(int64_array(idx))
    try:
        decoded = _percent_decode(escaped)
    except pa.ArrowInvalid:  # a malformed escape, or bytes that are not UTF-8: the strict rule raises
        decoded = string_array([decode_log_path(p) for p in escaped.to_pylist()])
    if idx.size == len(paths):
        return decoded
    mask = np.zeros(len(paths), dtype=bool)
    mask[idx] = True
    return pc.replace_with_mask(paths, bool_array(mask), decoded.cast(paths.type))


def _percent_decode(paths: pa.StringArray) -> pa.StringArray:
    """``urllib.parse.unquote`` of every string, on the bytes with numpy, or ``ArrowInvalid``
    where a ``%`` does not start a two-hex-digit escape or the decoded bytes are not UTF-8
    (the caller then applies the strict path rule, which names the bad path).

    An escape is a ``%`` followed by two hex digits inside the same string; escapes never
    overlap (a ``%`` is not a hex digit), so each is found independently: its byte takes
    the ``%``'s place and the two digits are dropped.
    """
    if paths.null_count:
        raise pa.ArrowInvalid("null paths")
    offsets = offsets_to_numpy(paths)
    start, end = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(paths.buffers()[2], dtype=np.uint8, count=end - start, offset=start)
    offsets = offsets - start
    percent = np.flatnonzero(data[: max(len(data) - 2, 0)] == ord("%"))
    value_hi, value_lo = _HEX_VALUE[data[percent + 1]], _HEX_VALUE[data[percent + 2]]
    string_of = np.searchsorted(offsets, percent, side="right") - 1
    escape = (value_hi >= 0) & (value_lo >= 0) & (percent + 2 < offsets[string_of + 1])
    if int(np.count_nonzero(escape)) != int(np.count_nonzero(data == ord("%"))):
        raise pa.ArrowInvalid("a '%' that does not start a two-hex-digit escape")
    percent, string_of = percent[escape], string_of[escape]
    decoded = data.copy()
    decoded[percent] = (value_hi[escape] * 16 + value_lo[escape]).astype(np.uint8)
    keep = np.ones(len(data), dtype=bool)
    keep[percent + 1] = False
    keep[percent + 2] = False
    removed = np.zeros(len(paths) + 1, dtype=np.int64)
    np.cumsum(np.bincount(string_of, minlength=len(paths)) * 2, out=removed[1:])
    new_offsets = (offsets - removed).astype(np.int32)
    out = pa.Array.from_buffers(pa.string(), len(paths), [None, pa.py_buffer(new_offsets), pa.py_buffer(decoded[keep])])
    out.validate(full=True)  # ArrowInvalid when the bytes are not UTF-8
    return out


# Value of each byte as a hex digit, -1 for bytes that are not one.
_HEX_VALUE = np.full(256, -1, dtype=np.int16)
for _i, _c in enumerate("0123456789abcdef"):
    _HEX_VALUE[ord(_c)] = _HEX_VALUE[ord(_c.upper())] = _i


def _replace_at(values: pa.Array, idx: np.ndarray, replacements: list[str]) -> pa.Array:
    """``values`` with the strings at the (sorted) positions ``idx`` replaced, vectorised."""
    mask = np.zeros(len(values), dtype=bool)
    mask[idx] = True
    return pc.replace_with_mask(values, bool_array(mask), string_array(replacements).cast(values.type))


def _string_bytes(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The character bytes of a string array (uint8, zero-copy) and its offsets into them (rebased to 0)."""
    offsets = offsets_to_numpy(strings)
    start, end = int(offsets[0]), int(offsets[-1])
    data = strings.buffers()[2]
    if data is None or end == start:
        return np.zeros(0, dtype=np.uint8), offsets - start
    return np.frombuffer(data, dtype=np.uint8, count=end - start, offset=start), offsets - start


def _has_byte(raw: np.ndarray, byte: str) -> bool:
    return bool(np.any(raw == ord(byte)))


def _may_need_full_check(paths: pa.Array) -> bool:
    """False only when no path can match ``NEEDS_FULL_CHECK``: none is empty, starts with
    ``/`` or ``.``, ends with ``/``, holds a backslash or a control character, or has a ``/``
    followed by ``.`` (every ``.``/``..`` segment starts the path or follows a ``/``).
    Vectorised passes over the bytes, several times cheaper than the regex."""
    raw, offsets = _string_bytes(paths)
    if paths.null_count or not np.diff(offsets).all():
        return True
    if int(raw.min()) < 0x20 or _has_byte(raw, "\x7f") or _has_byte(raw, "\\"):
        return True
    slashes = np.flatnonzero(raw[:-1] == ord("/"))
    if bool(np.any(raw[slashes + 1] == ord("."))):
        return True
    first, last = raw[offsets[:-1]], raw[offsets[1:] - 1]
    return bool(np.any((first == ord("/")) | (first == ord(".")) | (last == ord("/"))))


def relative_paths(table_root: str, paths: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Decoded paths relative to the root; the (rare) absolute URIs in a log are made relative."""
    decoded = decode_paths(paths)
    if len(decoded) == 0:
        return decoded
    encoded = combined(paths)
    # An absolute URI has a scheme: ``s3://...``, ``file:///...`` and also Hadoop's
    # ``file:/...`` as Spark writes it. Tested on the encoded form, where a colon in a
    # relative name is still ``%3A`` (and a partition directory has ``=`` before it).
    # Also flagged, to go through resolve_in_table's full rule: what is not a plain path
    # below the root once decoded (empty, a ``..`` segment, a NUL, a backslash, a trailing
    # ``/``). Decoding has refused malformed escapes already.
    if not _may_need_full_check(decoded) and not _has_byte(_string_bytes(encoded)[0], ":"):
        return decoded  # no path can match either pattern (checked on the bytes, far cheaper than the regexes)
    absolute = pc.or_(pc.match_substring_regex(decoded, NEEDS_FULL_CHECK), pc.match_substring_regex(encoded, URI_SCHEME))
    idx = np.flatnonzero(mask_to_numpy(absolute))
    if idx.size == 0:
        return decoded
    relative = [relative_to_table(table_root, resolve_in_table(table_root, p))
                for p in encoded.take(int64_array(idx)).to_pylist()]
    return _replace_at(decoded, idx, relative)


class FileStateLoader(Protocol_):
    """Where a snapshot's file state comes from: ``adds()`` and ``tombstones()`` (cached)."""

    def adds(self) -> pa.Table: ...

    def tombstones(self) -> pa.Table: ...

    def state_of_files_named(self, names: pa.Array) -> tuple[pa.Table, pa.Table]: ...

    def removes_of_versions(self, start: int, end: int) -> ParsedLog | None: ...


class _FallbackFiles:
    """A replay's :class:`FileActions` that, should the checkpoint turn out unreadable when
    its file actions are read, rebuilds the file state from an older checkpoint (or the
    commits from version 0), as :func:`load_snapshot` does for the metadata pass."""

    def __init__(self, io: FileIO, listing: LogListing, files: FileActions) -> None:
        self._io, self._listing, self._files = io, listing, files
        self._replacement: FileActions | None = None
        self._lock = threading.Lock()

    def _source(self) -> FileActions:
        return self._replacement if self._replacement is not None else self._files

    def _retry(self, exc: CorruptCheckpointError) -> FileActions:
        with self._lock:
            if self._replacement is None:
                segment = self._files.segment
                if any(self._io.info(f.path) is None for f in segment.checkpoint_files):
                    # Not corrupt but gone: a concurrent log cleanup moved the start of the log
                    # past it since the listing. The version is rebuilt from a fresh listing
                    # (from the newer checkpoint, when it is not newer than the version).
                    listing, segment = list_log_and_segment(self._io, segment.table_root, segment.version)
                    _, state = _replay_falling_back(self._io, listing, segment, need_files=True)
                else:
                    _, state = _replay_falling_back(self._io, self._listing, segment, exc, need_files=True)
                self._replacement = state.files
            return self._replacement

    def adds(self) -> pa.Table:
        try:
            try:
                return self._source().adds()
            except CorruptCheckpointError as exc:
                if self._source() is not self._files:
                    raise
                return self._retry(exc).adds()
        except MemoryError:  # numpy's, or pyarrow's ArrowMemoryError
            raise LogTooLargeError(self._listing.table_root, "reading the add actions") from None

    def state_of_files_named(self, names: pa.Array) -> tuple[pa.Table, pa.Table]:
        source = self._source()
        if source.segment.checkpoint_version is None:  # no checkpoint to fall back from
            return source.state_of_files_named(names)
        return self.adds(), self.tombstones()

    def removes_of_versions(self, start: int, end: int) -> ParsedLog | None:
        # The commits' bytes are the same whichever checkpoint the state falls back to.
        return self._source().removes_of_versions(start, end)

    def tombstones(self) -> pa.Table:
        try:
            try:
                return self._source().tombstones()
            except CorruptCheckpointError as exc:
                if self._source() is not self._files:
                    raise
                return self._retry(exc).tombstones()
        except MemoryError:
            raise LogTooLargeError(self._listing.table_root, "reading the remove actions") from None


def _replay_falling_back(
    io: FileIO,
    listing: LogListing,
    segment: LogSegment,
    failure: CorruptCheckpointError | None = None,
    *,
    need_files: bool = False,
) -> tuple[LogSegment, LogState]:
    """Replay ``segment``; while its checkpoint cannot be read, retry with the newest
    checkpoint strictly older than the bad one (or none: the commits from version 0), as
    Delta does. With ``need_files`` the file actions are read too (so that a checkpoint
    whose file columns are damaged is skipped as well).

    Raises :class:`CorruptCheckpointError` naming the bad checkpoint file(s) when no
    complete alternative exists.
    """
    failures: list[CorruptCheckpointError] = [failure] if failure is not None else []
    if failure is not None:
        listing = _whole(io, listing)
        segment = _older_segment(listing, segment, failures)
    while True:
        try:
            state = replay_metadata(io, segment)
            if need_files:
                state.files.adds()
            return segment, state
        except CorruptCheckpointError as exc:
            if segment.checkpoint_version is None:
                raise
            failures.append(exc)
            listing = _whole(io, listing)
            segment = _older_segment(listing, segment, failures)


def _whole(io: FileIO, listing: LogListing) -> LogListing:
    """``listing``, or the whole log when it started at ``_last_checkpoint``: the search for an
    older checkpoint (or the commits from version 0) needs the files before it."""
    return list_log(io, listing.table_root) if listing.is_partial else listing


def _older_segment(listing: LogListing, segment: LogSegment, failures: Sequence[CorruptCheckpointError]) -> LogSegment:
    """The segment of the same version with a checkpoint older than ``segment``'s, or the
    error that says which checkpoint is corrupt and that the version cannot be rebuilt."""
    assert segment.checkpoint_version is not None
    try:
        return segment_from_listing(listing, segment.version, checkpoint_below=segment.checkpoint_version)
    except (LogNotContiguousError, VersionNotFoundError) as exc:
        first = failures[0]
        others = "".join(f"; older checkpoint also unreadable: {f}" for f in failures[1:])
        raise CorruptCheckpointError(
            first.file,
            f"{str(first).split(': ', 1)[-1]}{others}; version {segment.version} cannot be reconstructed "
            f"without it (no older checkpoint, or the commits from version 0, can take its place: {exc}). "
            "Restore the checkpoint file from a backup or copy of the log",
        ) from None


def _load_state(io: FileIO, root: str, version: int | None, attempts: int = 3) -> tuple[LogListing, LogSegment, LogState]:
    """List and replay the metadata, falling back past unreadable checkpoints, and listing
    again if a listed log file vanished meanwhile (concurrent log cleanup removes commits
    once a newer checkpoint covers them; a fresh listing finds that checkpoint)."""
    for attempt in range(attempts):
        listing, segment = list_log_and_segment(io, root, version)
        try:
            used, state = _replay_falling_back(io, listing, segment)
            return listing, used, state
        except (FileNotFoundError, CorruptCheckpointError):
            files = [*segment.checkpoint_files, *segment.commit_files]
            vanished = any(io.info(f.path) is None for f in files)
            if not vanished or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def load_snapshot(
    io: FileIO,
    root: str,
    version: int | None = None,
    timestamp: TimestampLike | None = None,
) -> Snapshot:
    """The table at ``root`` as of the latest version, a ``version``, or a ``timestamp``."""

    if version is not None and timestamp is not None:
        raise DeltaError("pass either version or timestamp, not both")
    if timestamp is not None:
        version = version_at_timestamp(io, root, timestamp, listing=list_log(io, root))
    try:
        listing, segment, state = _load_state(io, root, version)
    except MemoryError:  # numpy's, or pyarrow's ArrowMemoryError: a typed error, not a crash
        raise LogTooLargeError(root, "replaying the log's metadata") from None
    properties = TableProperties.for_reading(state.metadata.configuration)
    commit_info = state.commit_infos.get(segment.version)
    if commit_info is None and segment.latest_commit_file is not None and segment.version == segment.checkpoint_version:
        # Replay started from this version's checkpoint, which keeps no commitInfo.
        info = segment.latest_commit_file
        commit_info = extract_commit_info(io.read_bytes(info.path), info.path)
    if segment.latest_commit_file is not None:
        mtime = segment.latest_commit_file.modification_time
    else:  # only the checkpoint of this version is left
        mtime = segment.checkpoint_files[0].modification_time
    return Snapshot(
        table_root=root,
        io=io,
        version=segment.version,
        protocol=state.protocol,
        metadata=state.metadata,
        properties=properties,
        timestamp=commit_timestamp(segment.version, mtime, commit_info, properties),
        log_segment=segment,
        transactions=_unexpired_transactions(state.transactions, properties),
        domain_metadata=state.domain_metadata,
        file_state=_FallbackFiles(io, listing, state.files),
        commit_info=commit_info,
        tail_commit_infos=state.commit_infos,
    )


def _unexpired_transactions(
    transactions: Mapping[str, SetTransaction], properties: TableProperties
) -> Mapping[str, SetTransaction]:
    """``txn`` identifiers that ``delta.setTransactionRetentionDuration`` has not expired.

    As the property defines: a snapshot ignores an identifier whose ``lastUpdated`` is at
    or before now minus the retention (identifiers without ``lastUpdated`` never expire).
    """
    try:
        retention = properties.set_transaction_retention
    except InvalidTablePropertyError as exc:  # a read never fails on a property: no identifier expires
        log.warning("keeping every txn identifier: %s", exc)
        return transactions
    if retention is None:
        return transactions
    cutoff = time.time_ns() // 1_000_000 - int(retention.total_seconds() * 1000)
    kept = {app: t for app, t in transactions.items() if t.last_updated is None or t.last_updated > cutoff}
    return transactions if len(kept) == len(transactions) else MappingProxyType(kept)
