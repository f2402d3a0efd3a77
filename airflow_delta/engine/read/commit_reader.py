"""Parsing JSON commits (and JSON V2 checkpoints) into Arrow.

Two readers live here:

* :func:`read_commit_actions` parses one commit into Python dicts. Commits are small;
  conflict checks and history use it.
* :func:`read_commits` is the bulk reader of log replay. It never turns an ``add`` or
  ``remove`` into a Python object: all files' bytes are split into lines with numpy,
  lines that start with ``{"add"`` / ``{"remove"`` are gathered (an Arrow ``filter``,
  no Python loop) and parsed by ONE ``pyarrow.json.read_json`` call with an explicit
  schema. Each row's commit version and sequence number come from the position of its
  line. The other actions (protocol, metaData, txn, domainMetadata, commitInfo, ...) are
  a handful per commit and are parsed with :mod:`json`.

Every action is checked against the protocol's schema, never skipped or read around:
the typed parse refuses fields of the wrong JSON kind (the refused line is found by
bisection with the same parse), and :func:`check_file_action_structs` checks the parsed
columns (required fields, sizes, complete deletion vector descriptors) for commits and
checkpoints alike. Non-file action bodies are checked by
:func:`~airflow_delta.engine.model.actions.action_body_error`. A fault is a
:class:`CorruptCommitError` naming the file and line. Free-form maps (``tags``, and
``partitionValues`` with keys no ``metaData`` announced) are read as
``map<string,string>`` with explicit schemas, so memory follows the input.
"""

from __future__ import annotations

import codecs
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.json as pajson

from airflow_delta.engine.errors import CorruptCommitError
from airflow_delta.engine.model import log_json
from airflow_delta.engine.model.actions import (
    DELETION_VECTOR_TYPE,
    FILE_ACTIONS_SCHEMA,
    LOG_ACTION_KEYS,
    STRING_MAP_TYPE,
    action_body_error,
)
from airflow_delta.engine.model.arrow_numpy import (
    bool_array,
    bool_scalar,
    int32_array,
    int64_array,
    int64_to_numpy,
    mask_to_numpy,
    string_array,
    string_scalar,
)
from airflow_delta.engine.read.listing import commit_path
from airflow_delta.engine.storage.fileio import FileInfo, FileIO

FILE_ACTION_KEYS = ("add", "remove")


# No rows, one (empty) chunk per column; ``Schema.empty_table()`` would import pandas.
EMPTY_FILE_ACTIONS: pa.Table = pa.table([pa.nulls(0, f.type) for f in FILE_ACTIONS_SCHEMA], schema=FILE_ACTIONS_SCHEMA)


# The reader's records (LogAction, ParsedLog, JoinedFiles, LogLines) are named tuples, not frozen dataclasses: as immutable, a quarter of the
# cost to create at import (a frozen dataclass compiles six methods, ~1 ms), which every
# process that opens a table pays; nothing compares them to other types or copies them.
class LogAction(NamedTuple):
    """A non-file action found in the log: its commit version, global order, key and body."""

    version: int
    seq: int
    key: str  # "protocol", "metaData", "txn", "domainMetadata", "commitInfo", ...
    body: Mapping[str, Any]
    source: str = ""  # the log file it was read from (for error messages)


class ParsedLog(NamedTuple):
    """The actions of a run of JSON files: file actions as Arrow, everything else as dicts."""

    file_actions: pa.Table  # FILE_ACTIONS_SCHEMA, ``seq`` from ``seq_start`` in line order
    actions: tuple[LogAction, ...]  # non-file actions in line order
    num_lines: int  # lines consumed, i.e. the seq range used is [seq_start, seq_start + num_lines)


# ------------------------------------------------------------------ one commit


def parse_commit_bytes(data: bytes, file: str) -> list[dict[str, Any]]:
    """Parse newline-delimited JSON actions; blank lines are skipped.

    Every action is checked against the protocol's schema, as in the bulk reader (whose
    vectorised parse checks the add/remove lines): a broken one is a CorruptCommitError
    naming the line, so conflict checks and history never act on a misread action.
    """
    out: list[dict[str, Any]] = []
    has_file_actions = False
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            action = log_json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptCommitError(file, number, f"invalid JSON ({exc})") from None
        if not isinstance(action, dict):
            raise CorruptCommitError(file, number, f"expected a JSON object, found {type(action).__name__}")
        _check_one_action(action, file, number)
        for key, body in action.items():
            if key in FILE_ACTION_KEYS:
                has_file_actions = True
                continue
            reason = action_body_error(key, body)
            if reason is not None:
                raise CorruptCommitError(file, number, f"invalid {key} action: {reason}")
        out.append(action)
    if has_file_actions:
        parse_log_bytes([data], [file], [0])  # raises CorruptCommitError for a broken add/remove
    return out


def _check_one_action(line: Mapping[str, Any], file: str, number: int) -> None:
    """A line of the log holds one action (the protocol's rule; readers that take the
    first of several would disagree with readers that take all)."""
    known = [key for key in line if key in LOG_ACTION_KEYS]
    if len(known) > 1:
        raise CorruptCommitError(file, number, f"the line holds {len(known)} actions ({', '.join(known)}); "
                                 "a line of the log holds exactly one")


def read_commit_actions(io: FileIO, root: str, version: int) -> list[dict[str, Any]]:
    """The parsed JSON lines of one commit, e.g. ``[{"commitInfo": {...}}, {"add": {...}}]``."""
    path = commit_path(root, version)
    return parse_commit_bytes(io.read_bytes(path), path)


# ------------------------------------------------------------------ bulk reader

_DV_FIELDS = [(f.name, f.type) for f in DELETION_VECTOR_TYPE]
_ADD_FIELDS: list[tuple[str, pa.DataType]] = [
    ("path", pa.string()),
    ("size", pa.int64()),
    ("modificationTime", pa.int64()),
    ("dataChange", pa.bool_()),
    ("stats", pa.string()),
    ("deletionVector", DELETION_VECTOR_TYPE),
    ("baseRowId", pa.int64()),
    ("defaultRowCommitVersion", pa.int64()),
    ("clusteringProvider", pa.string()),
]
_REMOVE_FIELDS: list[tuple[str, pa.DataType]] = [
    ("path", pa.string()),
    ("deletionTimestamp", pa.int64()),
    ("dataChange", pa.bool_()),
    ("extendedFileMetadata", pa.bool_()),
    ("size", pa.int64()),
    ("stats", pa.string()),
    ("deletionVector", DELETION_VECTOR_TYPE),
    ("baseRowId", pa.int64()),
    ("defaultRowCommitVersion", pa.int64()),
]


def _is_local(io: FileIO) -> bool:
    # Local reads are CPU-bound syscalls: threads only add contention. Remote reads are
    # latency-bound: overlap them.
    return isinstance(io.filesystem, pafs.LocalFileSystem)


def read_files_bytes(io: FileIO, paths: Sequence[str]) -> list[bytes]:
    """Read several log files; in parallel when there are many on remote storage."""
    if len(paths) <= 8 or _is_local(io):
        return [io.read_bytes(p) for p in paths]
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(io.read_bytes, paths))


def read_commits(
    io: FileIO,
    files: Sequence[FileInfo],
    versions: Sequence[int],
    *,
    seq_start: int = 0,
    partition_keys: Iterable[str] = (),
    file_actions: bool = True,
) -> ParsedLog:
    """Parse JSON log files (commits, or a JSON V2 checkpoint) into a :class:`ParsedLog`.

    ``versions[i]`` is the version of ``files[i]``. ``partition_keys`` are the partition
    value keys to expect (physical partition column names); declaring them keeps pyarrow
    from inferring ``2024-01-01`` as a timestamp. Unknown keys are handled too, only
    slower. With ``file_actions=False`` add/remove lines are skipped (metadata-only reads).
    """
    contents = read_files_joined(io, files)
    return parse_log_bytes(contents, [f.path for f in files], versions, seq_start=seq_start,
                           partition_keys=partition_keys, file_actions=file_actions)


def read_commit_removes(
    io: FileIO, files: Sequence[FileInfo], versions: Sequence[int], *, partition_keys: Iterable[str] = ()
) -> ParsedLog:
    """:func:`read_commits` for a reader of ``remove`` actions only (lite VACUUM): the non-file
    actions and the removes are parsed, with the same checks; ``add`` lines are split off
    unparsed, so a commit of 100,000 adds costs its read and one line scan."""
    contents = read_files_joined(io, files)
    log = split_log_lines(contents, [f.path for f in files], versions)
    if log is None:
        return ParsedLog(EMPTY_FILE_ACTIONS, (), 0)
    actions, stray = parse_non_file_actions(log)
    keys = set(partition_keys)
    for action in actions:
        if action.key == "metaData":
            keys |= partition_keys_of(action.body)
    is_remove = mask_to_numpy(pc.starts_with(log.lines, '{"remove":'))
    is_remove[[seq for _, seq, key, _ in stray if key == "remove"]] = True  # unusual spacing
    return ParsedLog(parse_file_actions(only_lines(log, is_remove), partition_keys=keys), actions, log.num_lines)


def only_lines(log: LogLines, keep: np.ndarray) -> LogLines:
    """The lines of ``log`` where ``keep`` is true, as a log of their own (errors name their files)."""
    rows = np.flatnonzero(keep)
    lines = log.lines.take(int64_array(rows))  # a fresh, contiguous buffer
    file_of_line = log.file_of_line[rows]
    return LogLines(
        data=lines.buffers()[2] if len(lines) else pa.py_buffer(b""),
        lines=lines,
        is_file_line=bool_array(np.ones(len(rows), dtype=bool)),
        file_of_line=file_of_line,
        first_line_of_file=np.searchsorted(file_of_line, np.arange(len(log.names)), side="left"),
        versions=log.versions,
        names=log.names,
    )


class JoinedFiles(NamedTuple):
    """Several files' bytes in one buffer, each followed by a newline; ``starts[i]`` is file i's offset."""

    data: np.ndarray  # uint8
    starts: np.ndarray  # int64


def read_files_joined(io: FileIO, files: Sequence[FileInfo]) -> JoinedFiles | list[bytes]:
    """Read files straight into one preallocated buffer (no per-file copies, no join).

    Commit files are immutable, so the listed sizes are exact; if a read disagrees (a
    storage that reports no sizes), fall back to reading them one by one.
    """
    sizes = np.fromiter((f.size for f in files), dtype=np.int64, count=len(files))
    if len(files) == 0 or (sizes <= 0).any():
        return read_files_bytes(io, [f.path for f in files])
    starts = np.concatenate([[0], np.cumsum(sizes + 1)[:-1]]).astype(np.int64)
    data = np.empty(int(sizes.sum()) + len(files), dtype=np.uint8)
    view = memoryview(data)

    def read_one(i: int) -> bool:
        start, size = int(starts[i]), int(sizes[i])
        with io.open_input_file(files[i].path) as f:
            got = f.readinto(view[start:start + size])
            extra = f.read(1)
        data[start + size] = 10
        return got == size and not extra

    if len(files) <= 8 or _is_local(io):
        ok = all(read_one(i) for i in range(len(files)))
    else:
        with ThreadPoolExecutor(max_workers=16) as pool:
            ok = all(pool.map(read_one, range(len(files))))
    if not ok:
        return read_files_bytes(io, [f.path for f in files])
    return JoinedFiles(data, starts)


class LogLines(NamedTuple):
    """JSON log files split into lines over one buffer (zero-copy), and which lines are add/remove.

    This is what the metadata pass of replay keeps so that the (lazy) file-action pass
    parses the same bytes instead of reading the commits again.
    """

    data: pa.Buffer
    lines: pa.LargeStringArray
    is_file_line: pa.BooleanArray
    file_of_line: np.ndarray  # int64, the file index of each line
    first_line_of_file: np.ndarray  # int64
    versions: np.ndarray  # int64, the version of each file
    names: tuple[str, ...]  # file paths, for error messages

    @property
    def num_lines(self) -> int:
        return len(self.lines)

    def where(self, line_index: int) -> tuple[str, int]:
        """(file, 1-based line number) of a line."""
        f = int(self.file_of_line[line_index])
        return self.names[f], int(line_index - self.first_line_of_file[f]) + 1


# An add/remove written with unusual spacing or key order: (version, seq, key, body).
StrayFileAction = tuple[int, int, str, Mapping[str, Any]]


def split_log_lines(contents: Sequence[bytes] | JoinedFiles, names: Sequence[str], versions: Sequence[int]) -> LogLines | None:
    """Split files' bytes into lines (None when there are no bytes at all)."""
    if isinstance(contents, JoinedFiles):
        raw, file_starts = contents.data, contents.starts
    else:
        if not contents:
            return None
        # Every file ends with a newline so that lines never span two files.
        chunks = [c if c.endswith(b"\n") else c + b"\n" for c in contents]
        sizes = np.fromiter((len(c) for c in chunks), dtype=np.int64, count=len(chunks))
        file_starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        raw = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    if raw.size == 0:
        return None
    data = pa.py_buffer(raw)
    line_ends = _newline_positions(raw) + 1  # exclusive, newline included
    line_starts = np.concatenate([[0], line_ends[:-1]]).astype(np.int64)
    num_lines = len(line_ends)
    offsets = np.concatenate([[0], line_ends]).astype(np.int64)
    lines = pa.LargeStringArray.from_buffers(num_lines, pa.py_buffer(offsets), data)
    is_file_line = pc.or_(pc.starts_with(lines, '{"add":'), pc.starts_with(lines, '{"remove":'))  # no nulls
    log = LogLines(
        data=data,
        lines=lines,
        is_file_line=is_file_line,
        file_of_line=np.searchsorted(file_starts, line_starts, side="right") - 1,
        first_line_of_file=np.searchsorted(line_starts, file_starts, side="left"),
        versions=np.asarray(versions, dtype=np.int64),
        names=tuple(names),
    )
    _check_utf8(log, raw, line_ends)
    return log


def _check_utf8(log: LogLines, raw: np.ndarray, line_ends: np.ndarray) -> None:
    """Refuse bytes that are not UTF-8 (the protocol's encoding of the log), naming the line.

    One vectorised validation of the whole buffer; only when it fails is the first bad
    byte located (by a decoder that reports its offset).
    """
    try:
        log.lines.validate(full=True)
        return
    except pa.ArrowInvalid:
        pass
    try:
        codecs.utf_8_decode(memoryview(raw), "strict", True)
    except UnicodeDecodeError as exc:
        line = int(np.searchsorted(line_ends, exc.start, side="right"))
        file, number = log.where(line)
        raise CorruptCommitError(file, number, f"invalid UTF-8 at byte {exc.start - (int(line_ends[line - 1]) if line else 0)} "
                                 f"of the line ({exc.reason}); the log is UTF-8 JSON") from None


def _newline_positions(raw: np.ndarray, chunk: int = 1 << 22) -> np.ndarray:
    """Positions of ``\\n`` in ``raw``; searched in chunks so that the temporary boolean
    array stays small (a whole-buffer ``raw == 10`` is as large as the log itself)."""
    if raw.size <= chunk:
        return np.flatnonzero(raw == 10)
    parts = [np.flatnonzero(raw[i:i + chunk] == 10) + i for i in range(0, raw.size, chunk)]
    return np.concatenate(parts)


def parse_non_file_actions(log: LogLines, seq_start: int = 0) -> tuple[tuple[LogAction, ...], tuple[StrayFileAction, ...]]:
    """The non-file actions (few; parsed one by one with :mod:`json`), and any add/remove
    lines the fast classification missed (left for :func:`parse_file_actions`)."""
    is_file_np = mask_to_numpy(log.is_file_line)
    other_idx = np.flatnonzero(~is_file_np)
    actions: list[LogAction] = []
    stray: list[StrayFileAction] = []
    if not len(other_idx):
        return (), ()
    for i, text in zip(other_idx.tolist(), log.lines.take(int64_array(other_idx)).to_pylist(), strict=True):
        if not text.strip():
            continue
        try:
            obj = log_json.loads(text)
        except ValueError as exc:
            file, number = log.where(i)
            raise CorruptCommitError(file, number, f"invalid JSON ({exc})") from None
        if not isinstance(obj, dict):
            file, number = log.where(i)
            raise CorruptCommitError(file, number, f"expected a JSON object, found {type(obj).__name__}")
        version = int(log.versions[log.file_of_line[i]])
        source = log.names[int(log.file_of_line[i])]
        _check_one_action(obj, *log.where(i))
        for key, body in obj.items():
            if key not in FILE_ACTION_KEYS:
                reason = action_body_error(key, body)
                if reason is not None:
                    file, number = log.where(i)
                    raise CorruptCommitError(file, number, f"invalid {key} action: {reason}")
            elif not isinstance(body, dict):
                file, number = log.where(i)
                raise CorruptCommitError(file, number, f"invalid {key} action: expected a JSON object, found {body!r:.80}")
            if not isinstance(body, dict):
                continue  # not an action we know; unknown actions are ignored
            if key in FILE_ACTION_KEYS:
                stray.append((version, seq_start + i, key, body))
            else:
                actions.append(LogAction(version, seq_start + i, key, body, source))
    return tuple(actions), tuple(stray)


def parse_file_actions(
    log: LogLines,
    stray: Sequence[StrayFileAction] = (),
    *,
    seq_start: int = 0,
    partition_keys: Iterable[str] = (),
) -> pa.Table:
    """The add/remove actions of ``log`` as FILE_ACTIONS rows; ``seq`` is ``seq_start`` + line index.

    One typed parse of the whole buffer, in place: every line becomes a row (non-file
    actions are ignored fields), so no bytes are copied to gather the file lines, and
    ``stray`` add/remove lines (unusual spacing) are rows of this parse too. A line that
    breaks the protocol's schema of add/remove raises :class:`CorruptCommitError` naming
    its file and line; nothing is skipped or read around.
    """
    del stray  # parsed with every other line
    if not log.num_lines:
        return EMPTY_FILE_ACTIONS
    return _parse_all_lines_chunked(log, seq_start, partition_keys)


def parse_log_bytes(
    contents: Sequence[bytes] | JoinedFiles,
    names: Sequence[str],
    versions: Sequence[int],
    *,
    seq_start: int = 0,
    partition_keys: Iterable[str] = (),
    file_actions: bool = True,
) -> ParsedLog:
    """:func:`read_commits` on bytes already read (``names`` are used in error messages)."""
    log = split_log_lines(contents, names, versions)
    if log is None:
        return ParsedLog(EMPTY_FILE_ACTIONS, (), 0)
    actions, stray = parse_non_file_actions(log, seq_start)
    if not file_actions:
        return ParsedLog(EMPTY_FILE_ACTIONS, actions, log.num_lines)
    keys = set(partition_keys)
    for action in actions:
        if action.key == "metaData":
            keys |= partition_keys_of(action.body)
    stray = tuple((v, s - seq_start, k, body) for v, s, k, body in stray)
    table = parse_file_actions(log, stray, seq_start=seq_start, partition_keys=keys)
    return ParsedLog(table, actions, log.num_lines)


def partition_keys_of(metadata: Mapping[str, Any]) -> set[str]:
    """Keys ``partitionValues`` uses under a ``metaData`` body: partition columns, physical names too."""
    columns = [c for c in (metadata.get("partitionColumns") or []) if isinstance(c, str)]
    keys = set(columns)
    if not columns:
        return keys
    try:
        fields = log_json.loads(metadata.get("schemaString") or "{}").get("fields", [])
    except (ValueError, AttributeError):
        return keys
    if not isinstance(fields, list):
        return keys  # a broken schema is reported where the snapshot's metaData is decoded
    for field in fields:
        if isinstance(field, dict) and field.get("name") in keys and isinstance(field.get("metadata"), dict):
            physical = field["metadata"].get("delta.columnMapping.physicalName")
            if isinstance(physical, str):
                keys.add(physical)
    return keys


def _contiguous_bytes(selected: pa.LargeStringArray) -> pa.Buffer:
    """The bytes of a (freshly filtered, hence contiguous) string array: its lines, joined."""
    offs = np.frombuffer(selected.buffers()[1], dtype=np.int64)
    start = int(offs[selected.offset])
    end = int(offs[selected.offset + len(selected)])
    return selected.buffers()[2].slice(start, end - start)


def _file_actions_json_schema(partition_keys: Sequence[str], only: str | None = None) -> pa.Schema:
    """The explicit schema add/remove lines are parsed with (``only``: just that one field of each)."""
    def body(fields: list[tuple[str, pa.DataType]]) -> pa.DataType:
        fields = [
            *fields,
            ("partitionValues", pa.struct([(k, pa.string()) for k in partition_keys])),
            ("tags", pa.struct([])),
        ]
        return pa.struct([f for f in fields if only is None or f[0] == only])

    return pa.schema([("add", body(_ADD_FIELDS)), ("remove", body(_REMOVE_FIELDS))])


def _read_json(buffer: pa.Buffer, partition_keys: Sequence[str], schema: pa.Schema | None = None) -> pa.Table:
    """One ``read_json`` of log lines with the explicit schema of add/remove.

    Nothing is inferred: fields not declared are ignored (other actions, unknown fields),
    so the cost follows the bytes, never the number of distinct keys. Free-form maps are
    declared, not inferred: ``partitionValues`` with the partition columns' keys, and
    ``tags`` as an (empty) object whose entries :func:`_object_maps` reads.
    """
    schema = schema or _file_actions_json_schema(partition_keys)
    parse_options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    # Blocks of 1 MB are parsed in parallel; a line longer than a block (a huge schema or
    # stats) cannot be split, so then the buffer is parsed as one block.
    try:
        return pajson.read_json(pa.BufferReader(buffer), read_options=pajson.ReadOptions(block_size=_JSON_BLOCK),
                                parse_options=parse_options)
    except pa.ArrowInvalid as exc:
        if "straddl" not in str(exc) or buffer.size <= _JSON_BLOCK:
            raise
    block = min(max(buffer.size + 1, _JSON_BLOCK), (1 << 31) - 1)
    return pajson.read_json(pa.BufferReader(buffer), read_options=pajson.ReadOptions(block_size=block),
                            parse_options=parse_options)


_JSON_BLOCK = 1 << 20
_PARSE_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


def _parse_all_lines_chunked(log: LogLines, seq_start: int, partition_keys: Iterable[str],
                             chunk_bytes: int = 1 << 23) -> pa.Table:
    """:func:`_parse_all_lines_fast` over runs of whole lines of about ``chunk_bytes``.

    Each run's nested parse result is converted to FILE_ACTIONS rows and dropped before
    the next run is parsed, so peak memory follows the chunk size, not the log size.
    """
    lines = log.lines
    n = len(lines)
    pkeys = sorted(set(partition_keys))
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset:lines.offset + n + 1]
    parts: list[pa.Table] = []
    a = 0
    while a < n:
        b = int(np.searchsorted(offsets, offsets[a] + chunk_bytes, side="right")) - 1
        b = min(max(b, a + 1), n)
        part = _parse_all_lines_fast(log, a, b, seq_start, pkeys)
        if part.num_rows:
            parts.append(part)
        if b < n:
            pa.default_memory_pool().release_unused()  # the nested parse of this run is garbage now
        a = b
    if not parts:
        return EMPTY_FILE_ACTIONS
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def _line_bytes(log: LogLines, a: int, b: int) -> pa.Buffer:
    """The bytes of lines ``[a, b)`` of ``log`` (a zero-copy slice of its buffer)."""
    offsets = np.frombuffer(log.lines.buffers()[1], dtype=np.int64)
    start, end = int(offsets[log.lines.offset + a]), int(offsets[log.lines.offset + b])
    return log.data.slice(start, end - start)


def _parse_all_lines_fast(log: LogLines, a: int, b: int, seq_start: int, pkeys: Sequence[str]) -> pa.Table:
    """Parse lines ``[a, b)`` of ``log`` in one ``read_json``; the add/remove rows become
    FILE_ACTIONS rows with ``seq`` = ``seq_start`` + line index.

    ``partitionValues`` is parsed as a struct of the announced keys ``pkeys``, which drops
    any other key unseen; so every line is also matched against
    :func:`_partition_values_deviation`, and when one line of the run has a key not
    announced or a value that is no string, the run's maps are read exactly (and checked)
    by :func:`_object_maps`.
    """
    lines = log.lines.slice(a, b - a)
    row_line = np.flatnonzero(~_blank_lines(lines)) + a  # pyarrow skips blank lines: row i is line row_line[i]
    if row_line.size == 0:
        return EMPTY_FILE_ACTIONS
    try:
        table = _read_json(_line_bytes(log, a, b), pkeys)
    except _PARSE_ERRORS:
        _raise_first_bad_line(log, row_line, pkeys)
        raise  # the bisection found every line valid alone: report the parser's own error
    if table.num_rows != len(row_line):
        raise CorruptCommitError(", ".join(sorted(set(log.names))), None,
                                 f"{table.num_rows} JSON objects were parsed from {len(row_line)} lines")
    try:
        _check_one_action_per_line(table, log.is_file_line.take(int64_array(row_line)))
        # The lines themselves are taken only where a map is read exactly (no copy of every line).
        maps = {"tags": _object_maps(log.lines, row_line, table, "tags", keep_null_values=False)}
        if _partition_values_deviate(log.lines.slice(a, b - a), pkeys):  # blank lines never match
            maps["partition_values"] = _object_maps(log.lines, row_line, table, "partitionValues", keep_null_values=True)
        versions = log.versions[log.file_of_line[row_line]]
        seqs = row_line.astype(np.int64) + seq_start
        return file_actions_from_json_table(table, versions, seqs, maps)
    except ActionRowError as exc:
        file, number = log.where(int(row_line[exc.row]))
        raise CorruptCommitError(file, number, f"invalid {exc.key} action: {exc.reason}" if exc.key else exc.reason) from None


def _raise_first_bad_line(log: LogLines, row_line: np.ndarray, pkeys: Sequence[str]) -> None:
    """Find the first line the typed parse refuses (by bisection: O(log n) typed parses of
    shrinking runs, the same rules as the bulk parse) and raise its CorruptCommitError."""
    lo, hi = 0, len(row_line)  # the first bad row is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            _read_json(_line_bytes(log, int(row_line[lo]), int(row_line[mid - 1]) + 1), pkeys)
            lo = mid
        except _PARSE_ERRORS:
            hi = mid
    line = _line_bytes(log, int(row_line[lo]), int(row_line[lo]) + 1)
    try:
        _read_json(line, pkeys)
        return
    except _PARSE_ERRORS as exc:
        message = re.sub(r"\s+in row \d+$", "", str(exc).removeprefix("JSON parse error: "))
    names_a_field = "Column(" in message
    # pyarrow says "Column(/add/size) changed from number to string": the schema's kind, then the line's.
    message = re.sub(r"Column\(/([^)]*)\) changed from (\w+) to (\w+)",
                     lambda m: f"{m[1].replace('/', '.')} is a JSON {m[3]} where the protocol has a JSON {m[2]}", message)
    if lo:  # the lines before it parse, but the rules checked after the parse may refuse one of them first
        _parse_all_lines_fast(log, int(row_line[0]), int(row_line[lo - 1]) + 1, 0, pkeys)
    file, number = log.where(int(row_line[lo]))
    if not names_a_field:
        try:  # with no field declared, only the JSON text itself can fail (e.g. a lone surrogate escape)
            _read_json(line, pkeys, _file_actions_json_schema(pkeys, only=""))
        except _PARSE_ERRORS:
            raise CorruptCommitError(file, number, f"the line is not valid JSON text ({message})") from None
        for name, _ in [*_ADD_FIELDS, *_REMOVE_FIELDS, ("partitionValues", None), ("tags", None)]:
            try:  # e.g. a number out of range: name the field it is in
                _read_json(line, pkeys, _file_actions_json_schema(pkeys, only=name))
            except _PARSE_ERRORS:
                message = f"field {name!r}: {message}"
                break
    raise CorruptCommitError(file, number, f"the add/remove action does not match the protocol's schema ({message})")


def _check_one_action_per_line(table: pa.Table, is_file_line: pa.BooleanArray) -> None:
    """A line holds one action: an add/remove line whose action is null, or with both, is corrupt.

    Other actions on a line are found by :func:`parse_non_file_actions` (lines that do not
    start with an add/remove); on an add/remove line they are ignored, as Spark's reader
    takes the add/remove of such a line (declaring them here costs every parse ~8%).
    """
    add_valid = mask_to_numpy(table.column("add").is_valid())
    remove_valid = mask_to_numpy(table.column("remove").is_valid())
    actions = np.zeros(table.num_rows, dtype=np.int64)
    for column in table.column_names:
        actions += mask_to_numpy(table.column(column).is_valid())
    several = actions > 1
    if several.any():
        row = int(np.flatnonzero(several)[0])
        keys = [c for c in table.column_names if table.column(c)[row].is_valid]
        raise ActionRowError(row, "",
                             f"the line holds {len(keys)} actions ({', '.join(keys)}); a line of the log holds exactly one")
    empty = mask_to_numpy(is_file_line) & ~add_valid & ~remove_valid
    if empty.any():
        raise ActionRowError(int(np.flatnonzero(empty)[0]), "add/remove", "the action is null, not a JSON object")


def _blank_lines(lines: pa.LargeStringArray) -> np.ndarray:
    """Which lines are whitespace only. Only lines that start with whitespace can be, so
    the regex runs on those few (every line ends with its newline, so none is empty)."""
    n = len(lines)
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset:lines.offset + n]
    raw = np.frombuffer(lines.buffers()[2], dtype=np.uint8)
    first = raw[offsets]
    candidates = np.flatnonzero((first == 32) | (first == 9) | (first == 10) | (first == 13))
    blank = np.zeros(n, dtype=bool)
    if candidates.size:
        blank[candidates] = mask_to_numpy(pc.match_substring_regex(lines.take(int64_array(candidates)), r"^\s*$"))
    return blank


# ------------------------------------------------------------------ free-form maps as map<string,string>
#
# pyarrow's JSON reader cannot parse an object into a map, and inferring ``tags`` as a
# struct makes one column per distinct key: 10,000 adds with a key each became a
# 10,000 x 10,000 struct (4.4 GB). Instead the object of each line is cut out with a
# regular expression (RE2: linear time), rewritten into a JSON array of
# ``{"k": key, "v": value}`` objects, and parsed with an explicit ``list<struct>``
# schema, which becomes the map. Memory follows the bytes of the maps. ``tags`` are read
# so always; ``partitionValues`` only in runs of lines where one line's object has a key
# no ``metaData`` announced or a value that is no string (otherwise its announced keys
# are an explicit struct, which is faster). Which lines those are is one RE2 match over
# every line (:func:`_partition_values_deviation`), never a sample: a line skipped by a
# sample would have its broken map dropped unseen.

_JSON_STRING = r'"(?:[^"\\]|\\.)*"'
_MAP_PAIR = _JSON_STRING + r"\s*:\s*(?:" + _JSON_STRING + r"|null)"
_MAP_OBJECT = r"\{\s*(?:" + _MAP_PAIR + r"\s*(?:,\s*" + _MAP_PAIR + r"\s*)*)?\}"
_MAP_ENTRIES_SCHEMA = pa.schema([("t", pa.list_(pa.struct([("k", pa.string()), ("v", pa.string())])))])

# A JSON string's content (as in _JSON_STRING), and an RE2 escape any character can take.
_JSON_CHAR = r'(?:[^"\\]|\\.)'
_DEVIATION_REGEX_MAX = 1 << 16  # characters; announced keys beyond this read every map exactly


def _regex_char(ch: str) -> str:
    return ch if ch.isascii() and ch.isalnum() else f"\\x{{{ord(ch):x}}}"


def _other_key_regex(keys: Sequence[str]) -> str:
    """RE2 for a JSON object key (written without escapes) that is none of ``keys``: for each
    prefix of a key, that prefix followed by a character no key continues with (then any
    content), or the prefix ending there when it is no key itself."""
    prefixes = {key[:i] for key in keys for i in range(len(key) + 1)}
    alternatives = []
    for prefix in sorted(prefixes):
        literal = "".join(_regex_char(c) for c in prefix)
        nexts = sorted({key[len(prefix)] for key in keys if len(key) > len(prefix) and key.startswith(prefix)})
        excluded = "".join(_regex_char(c) for c in ['"', "\\", *nexts])
        alternatives.append(literal + r"(?:[^" + excluded + r"]|\\.)" + _JSON_CHAR + "*")
        if prefix not in keys:
            alternatives.append(literal)
    return '"(?:' + "|".join(alternatives) + ')"'


@functools.lru_cache(maxsize=16)
def _partition_values_deviation(keys: tuple[str, ...]) -> str | None:
    """RE2 matching a line where some ``"partitionValues"`` object is not an object of
    ``keys`` (written plainly) to strings or nulls: the value is no object, or a key is
    another, or a value is neither a string nor null. Lines are valid JSON (parsed
    already), so a deviation shows at the first character that leaves that grammar; nested
    occurrences (an unknown field) match too, which only sends their lines to the exact
    reading. None: every line is to be read exactly (keys that need JSON escapes)."""
    if any(not k.isprintable() or '"' in k or "\\" in k for k in keys):
        return None
    key = '"(?:' + "|".join("".join(_regex_char(c) for c in k) for k in keys) + ')"' if keys else None
    head = r'"partitionValues"\s*:\s*(?:[^\s{]|\{\s*'
    if key is None:
        return head + '")'  # an object with any key at all
    pair = key + r'\s*:\s*(?:"' + _JSON_CHAR + r'*"|null)'
    regex = head + r"(?:" + pair + r"\s*,\s*)*(?:" + _other_key_regex(keys) + "|" + key + r'\s*:\s*[^\s"n]))'
    return regex if len(regex) <= _DEVIATION_REGEX_MAX else None


def _partition_values_deviate(lines: pa.LargeStringArray, keys: Sequence[str]) -> bool:
    """Whether a line's ``partitionValues`` may hold more than the struct of ``keys`` parsed."""
    regex = _partition_values_deviation(tuple(keys))
    if regex is None:
        return True
    return pc.any(pc.match_substring_regex(lines, regex)).as_py() is True


def _object_maps(lines: pa.LargeStringArray, line_of_row: np.ndarray, table: pa.Table, field: str, *,
                 keep_null_values: bool) -> dict[str, pa.Array] | None:
    """The ``field`` objects of every add/remove row of ``table`` (row i parsed from
    ``lines[line_of_row[i]]``) as ``map<string,string>`` (None: no row has a non-empty one,
    so the parsed empty objects already say all)."""
    key_regex = f'"{field}"' + r"\s*:"
    present_by_key = {}
    for key in FILE_ACTION_KEYS:
        col = table.column(key).combine_chunks()
        present_by_key[key] = mask_to_numpy(pc.and_(col.is_valid(), pc.struct_field(col, field).is_valid()))
    present = present_by_key["add"] | present_by_key["remove"]
    if not present.any():
        return None
    candidates = np.flatnonzero(present)
    cand_lines = lines.take(int64_array(line_of_row[candidates]))
    non_empty = mask_to_numpy(pc.match_substring_regex(cand_lines, key_regex + r'\s*\{\s*"'))
    candidates, cand_lines = candidates[non_empty], cand_lines.filter(bool_array(non_empty))
    if not candidates.size:
        return None
    # A line where the key occurs once (the usual case) is cut vectorised; a line where it
    # also names a field nested elsewhere (an unknown field, a partition column) is parsed alone.
    single = int64_to_numpy(pc.count_substring_regex(cand_lines, key_regex)) == 1
    maps = [_object_maps_cut(cand_lines.filter(bool_array(single)), candidates[single], present_by_key, field,
                             keep_null_values)]
    if not single.all():
        maps.append(_object_maps_parsed(cand_lines.filter(bool_array(~single)), candidates[~single], present_by_key,
                                        field, keep_null_values))
    order = np.concatenate([candidates[single], candidates[~single]])
    patch = pa.concat_arrays(maps) if len(maps) > 1 else maps[0]
    out = {}
    for key in FILE_ACTION_KEYS:
        main = _map_field(table.column(key).combine_chunks(), field, keep_null_values=keep_null_values)
        index = np.arange(len(main), dtype=np.int64)
        mine = present_by_key[key][order]
        index[order[mine]] = len(main) + np.flatnonzero(mine)
        out[key] = pa.concat_arrays([main, patch]).take(int64_array(index))
    return out


def _object_maps_cut(lines: pa.LargeStringArray, rows: np.ndarray, present_by_key: Mapping[str, np.ndarray],
                     field: str, keep_null_values: bool) -> pa.Array:
    """Maps of lines where ``field`` occurs once: cut out, rewritten as a JSON array, parsed typed."""
    if not len(lines):
        return pa.nulls(0, STRING_MAP_TYPE)
    found = pc.struct_field(pc.extract_regex(lines, f'"{field}"' + r"\s*:\s*(?P<m>" + _MAP_OBJECT + ")"), "m")
    if found.null_count:
        bad = int(rows[np.flatnonzero(mask_to_numpy(found.is_null()))[0]])
        raise ActionRowError(bad, _row_key(bad, present_by_key), f"{field!r} must be a JSON object whose values are strings")
    entries = pc.replace_substring_regex(found, "(" + _JSON_STRING + r")\s*:\s*(" + _JSON_STRING + "|null)",
                                         r'{"k":\1,"v":\2}')
    entries = pc.replace_substring_regex(pc.replace_substring_regex(entries, r"^\{", '{"t":['), r"\}$", "]}\n")
    entries = entries.cast(pa.large_string())
    parsed = pajson.read_json(pa.BufferReader(_contiguous_bytes(entries)),
                              parse_options=pajson.ParseOptions(explicit_schema=_MAP_ENTRIES_SCHEMA),
                              read_options=pajson.ReadOptions(block_size=max(_JSON_BLOCK, entries.nbytes + 1)))
    lists = parsed.column("t").combine_chunks()
    pairs = lists.flatten()
    keys, values = pc.struct_field(pairs, "k"), pc.struct_field(pairs, "v")
    parents = int64_to_numpy(pc.list_parent_indices(lists))
    # A key given twice in one object: JSON readers disagree on which value wins, so it is corrupt.
    # (Sorted numpy codes of (row, key): Table.group_by would import pandas through pyarrow.dataset.)
    encoded = keys.dictionary_encode()
    distinct = max(len(encoded.dictionary), 1)
    pair_codes = np.sort(parents * distinct + int64_to_numpy(encoded.indices.cast(pa.int64())))
    repeated = pair_codes[1:][pair_codes[1:] == pair_codes[:-1]]
    if repeated.size:
        bad = int(rows[int(repeated.min() // distinct)])
        raise ActionRowError(bad, _row_key(bad, present_by_key), f"{field!r} gives the same key twice")
    keep = np.ones(len(values), dtype=bool) if keep_null_values else mask_to_numpy(values.is_valid())
    counts = np.bincount(parents[keep], minlength=len(lists))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    mask = bool_array(keep)
    return pa.MapArray.from_arrays(int32_array(offsets), keys.filter(mask), values.filter(mask)).cast(STRING_MAP_TYPE)


def _object_maps_parsed(lines: pa.LargeStringArray, rows: np.ndarray, present_by_key: Mapping[str, np.ndarray],
                        field: str, keep_null_values: bool) -> pa.Array:
    """Maps of the rare lines where ``field`` occurs more than once, one JSON parse each."""
    out: list[list[tuple[str, str | None]]] = []
    for row, text in zip(rows.tolist(), lines.to_pylist(), strict=True):
        key = _row_key(row, present_by_key)
        try:
            value = log_json.loads(text)[key][field]
        except ValueError as exc:
            raise ActionRowError(row, key, str(exc)) from None
        if not isinstance(value, dict) or not all(v is None or isinstance(v, str) for v in value.values()):
            raise ActionRowError(row, key, f"{field!r} must be a JSON object whose values are strings")
        out.append([(k, v) for k, v in value.items() if keep_null_values or v is not None])
    return pa.array(out, STRING_MAP_TYPE)


def _row_key(row: int, present_by_key: Mapping[str, np.ndarray]) -> str:
    return "add" if present_by_key["add"][row] else "remove"


def struct_to_map(arr: pa.Array, *, keep_null_values: bool) -> pa.Array:
    """A struct array (JSON object with dynamic keys) as ``map<string,string>``, vectorised.

    Partition values keep null entries (a null partition value is meaningful); tags drop them.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    n = len(arr)
    names = [f.name for f in arr.type]
    k = len(names)
    row_valid = mask_to_numpy(arr.is_valid())
    mask = bool_array(~row_valid)
    if k == 0 or n == 0:
        offsets = int32_array(np.zeros(n + 1, dtype=np.int32))
        return pa.MapArray.from_arrays(offsets, pa.nulls(0, pa.string()), pa.nulls(0, pa.string()), mask=mask).cast(STRING_MAP_TYPE)
    children = [c.cast(pa.string()) for c in arr.flatten()]  # parent nulls pushed down
    # Row-major (row i, field j) -> position j*n + i in the concatenated children.
    order = (np.arange(k, dtype=np.int64)[None, :] * n + np.arange(n, dtype=np.int64)[:, None]).ravel()
    values = pa.concat_arrays(children).take(int64_array(order))
    keys = string_array(names).take(int64_array(np.tile(np.arange(k, dtype=np.int64), n)))
    present = np.repeat(row_valid, k) if keep_null_values else mask_to_numpy(values.is_valid())
    counts = present.reshape(n, k).sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    keep = bool_array(present)
    return pa.MapArray.from_arrays(int32_array(offsets), keys.filter(keep), values.filter(keep), mask=mask).cast(STRING_MAP_TYPE)


def dv_unique_ids(dv: pa.Array) -> pa.Array:
    """``DeletionVectorDescriptor.unique_id`` for a struct array of DVs (null without a DV)."""
    if dv.null_count == len(dv):
        return pa.nulls(len(dv), pa.string())
    empty = string_scalar("")
    st = pc.struct_field(dv, "storageType")
    path = pc.struct_field(dv, "pathOrInlineDv")
    offset = pc.struct_field(dv, "offset")
    suffix = pc.if_else(pc.is_null(offset), empty,
                        pc.binary_join_element_wise(string_scalar("@"), offset.cast(pa.string()), empty))
    out = pc.binary_join_element_wise(st, path, suffix, empty)
    return pc.if_else(dv.is_valid(), out, string_scalar(None))


# ------------------------------------------------------------------ the schema of add/remove rows
#
# One set of rules for every source of add/remove rows (JSON commits, JSON and parquet
# checkpoints, sidecars), checked column-wise on the struct array of action bodies. A row
# that breaks them is corrupt: read around, a DV object without a storage type would
# read as "no DV" and bring deleted rows back.


class ActionRowError(ValueError):
    """Row ``row`` of a batch of add/remove bodies breaks the protocol's schema (callers
    turn it into CorruptCommitError / CorruptCheckpointError with the file and line)."""

    def __init__(self, row: int, key: str, reason: str) -> None:
        self.row, self.key, self.reason = row, key, reason
        super().__init__(f"row {row}: {reason}")


_STORAGE_TYPES = ("u", "i", "p")
# Scalars built from numpy: a Python int would go through pyarrow's object conversion, which imports pandas.
_ZERO = int64_array(np.zeros(1, dtype=np.int64))[0]
_INT32_MAX = int64_array(np.array([(1 << 31) - 1], dtype=np.int64))[0]
# Required fields per action (the protocol's "required" column); the rest may be absent.
_REQUIRED = {
    "add": ("path", "partitionValues", "size", "modificationTime", "dataChange"),
    "remove": ("path", "dataChange"),
}
_DV_REQUIRED = ("storageType", "pathOrInlineDv", "sizeInBytes", "cardinality")


def _type_fits(actual: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether a column read as ``actual`` holds values of the protocol's ``wanted`` type."""
    if pa.types.is_null(actual):
        return True
    if pa.types.is_string(wanted):
        return pa.types.is_string(actual) or pa.types.is_large_string(actual) or pa.types.is_string_view(actual)
    if pa.types.is_integer(wanted):
        return pa.types.is_integer(actual)
    if pa.types.is_boolean(wanted):
        return pa.types.is_boolean(actual)
    if pa.types.is_map(wanted):  # a map of strings, or (from JSON) an object of string fields
        if pa.types.is_map(actual):
            return _type_fits(actual.key_type, pa.string()) and _type_fits(actual.item_type, pa.string())
        return pa.types.is_struct(actual) and all(_type_fits(f.type, pa.string()) for f in actual)
    if pa.types.is_struct(wanted):
        return pa.types.is_struct(actual) and all(
            actual.get_field_index(f.name) < 0 or _type_fits(actual.field(f.name).type, f.type) for f in wanted
        )
    return actual == wanted


_FIELD_TYPES: dict[str, pa.DataType] = {
    "path": pa.string(), "partitionValues": STRING_MAP_TYPE, "size": pa.int64(), "modificationTime": pa.int64(),
    "dataChange": pa.bool_(), "stats": pa.string(), "tags": STRING_MAP_TYPE, "deletionVector": DELETION_VECTOR_TYPE,
    "baseRowId": pa.int64(), "defaultRowCommitVersion": pa.int64(), "clusteringProvider": pa.string(),
    "deletionTimestamp": pa.int64(), "extendedFileMetadata": pa.bool_(),
}


def _first(mask: pa.Array | np.ndarray) -> int | None:
    if isinstance(mask, pa.BooleanArray) and mask.true_count == 0:
        return None  # the common case (nothing wrong), without converting the mask
    m = mask if isinstance(mask, np.ndarray) else mask_to_numpy(pc.fill_null(mask, bool_scalar(False)))
    hits = np.flatnonzero(m)
    return int(hits[0]) if hits.size else None


def check_file_action_structs(struct: pa.Array, key: str, *, empty_dv_is_none: bool) -> None:
    """Raise :class:`ActionRowError` for the first row of ``struct`` (``add`` or ``remove``
    bodies, all valid) that breaks the protocol's schema: a field of the wrong type, a
    required field missing, a negative size, a deletion vector that is not a complete
    descriptor. ``empty_dv_is_none``: a DV struct with every field null means no DV
    (parquet checkpoints write absent DVs so); in JSON, ``{}`` is a broken descriptor.
    """
    found: list[tuple[int, str]] = []
    present = {f.name for f in struct.type}
    for name in sorted(present & _FIELD_TYPES.keys()):
        child = pc.struct_field(struct, name)
        if not _type_fits(child.type, _FIELD_TYPES[name]):
            row = _first(child.is_valid())
            found.append((0 if row is None else row, f"field {name!r} has type {child.type}, not the protocol's {_FIELD_TYPES[name]}"))
    if found:
        row, reason = min(found, key=lambda fault: fault[0])
        raise ActionRowError(row, key, reason)
    for name in _REQUIRED[key]:
        if name not in present:
            found.append((0, f"field {name!r} is missing (required by the protocol)"))
            continue
        child = pc.struct_field(struct, name)
        row = _first(child.is_null()) if child.null_count else None
        if row is not None:
            found.append((row, f"field {name!r} is missing (required by the protocol)"))
    if "size" in present and len(struct):
        sizes = pc.struct_field(struct, "size")
        lowest = pc.min(sizes) if pa.types.is_integer(sizes.type) else None
        row = _first(pc.less(sizes, _ZERO)) if lowest is not None and lowest.is_valid and lowest.as_py() < 0 else None
        if row is not None:
            found.append((row, "field 'size' is negative"))
    if "deletionVector" in present:
        found.extend(_dv_faults(pc.struct_field(struct, "deletionVector"), empty_dv_is_none))
    if found:
        row, reason = min(found, key=lambda fault: fault[0])  # the first row; for it, the first rule broken
        raise ActionRowError(row, key, reason)


def _dv_faults(dv: pa.Array, empty_dv_is_none: bool) -> list[tuple[int, str]]:
    if pa.types.is_null(dv.type) or dv.null_count == len(dv):
        return []
    fields = [f.name for f in dv.type]
    given_np = mask_to_numpy(dv.is_valid())
    if empty_dv_is_none:
        some_field = np.zeros(len(dv), dtype=bool)
        for name in fields:
            some_field |= mask_to_numpy(pc.struct_field(dv, name).is_valid())
        given_np = given_np & some_field
    given = bool_array(given_np)
    faults: list[tuple[int, str]] = []
    for name in _DV_REQUIRED:
        if name not in fields:
            row = _first(given)
            if row is not None:
                faults.append((row, f"the deletionVector has no {name!r} (a descriptor needs {', '.join(_DV_REQUIRED)})"))
            continue
        row = _first(pc.and_(given, pc.struct_field(dv, name).is_null()))
        if row is not None:
            faults.append((row, f"the deletionVector has no {name!r} (a descriptor needs {', '.join(_DV_REQUIRED)})"))
    if "storageType" in fields:
        storage = pc.struct_field(dv, "storageType")
        row = _first(pc.and_(given, pc.invert(pc.is_in(storage, value_set=string_array(list(_STORAGE_TYPES))))))
        if row is not None:
            faults.append((row, f"the deletionVector's storageType is {storage[row].as_py()!r}, not one of u, i, p"))
    for name, high in (("sizeInBytes", _INT32_MAX), ("offset", _INT32_MAX), ("cardinality", None)):
        if name not in fields:
            continue
        values = pc.struct_field(dv, name)
        out_of_range = pc.less(values, _ZERO) if high is None else pc.or_(pc.less(values, _ZERO), pc.greater(values, high))
        row = _first(pc.and_(given, out_of_range))
        if row is not None:
            faults.append((row, f"the deletionVector's {name} is {values[row].as_py()}, out of its range"))
    return faults


def normalize_dv(dv: pa.Array) -> pa.Array:
    """Project a DV struct of any superset layout onto ``DELETION_VECTOR_TYPE`` (checked
    already: a valid struct either is a complete descriptor or, in a checkpoint, all null)."""
    n = len(dv)
    children = []
    for name, typ in _DV_FIELDS:
        idx = dv.type.get_field_index(name)
        children.append(pc.struct_field(dv, name).cast(typ) if idx >= 0 else pa.nulls(n, typ))
    # A checkpoint's all-null struct is no DV.
    present = pc.and_(dv.is_valid(), pc.is_valid(children[0]))
    return pa.StructArray.from_arrays(children, fields=list(DELETION_VECTOR_TYPE), mask=pc.invert(present))


def _field(struct: pa.Array, name: str, typ: pa.DataType) -> pa.Array:
    if struct.type.get_field_index(name) < 0:
        return pa.nulls(len(struct), typ)
    return pc.struct_field(struct, name).cast(typ)


def _map_field(struct: pa.Array, name: str, *, keep_null_values: bool) -> pa.Array:
    idx = struct.type.get_field_index(name)
    if idx < 0:
        return pa.nulls(len(struct), STRING_MAP_TYPE)
    child = pc.struct_field(struct, name)
    if pa.types.is_map(child.type):
        return child.cast(STRING_MAP_TYPE)
    if pa.types.is_null(child.type):
        return pa.nulls(len(struct), STRING_MAP_TYPE)
    return struct_to_map(child, keep_null_values=keep_null_values)


def file_actions_from_structs(
    struct: pa.Array, *, is_add: bool, versions: np.ndarray | pa.Array, seqs: np.ndarray | pa.Array,
    empty_dv_is_none: bool = True, replaced: Mapping[str, pa.Array] | None = None,
) -> pa.Table:
    """Rows of ``FILE_ACTIONS_SCHEMA`` from a struct array of ``add`` or ``remove`` bodies (all valid).

    The bodies are checked first (:func:`check_file_action_structs`): a row that breaks
    the protocol's schema raises :class:`ActionRowError` naming it. ``replaced``: map
    columns (``tags``, ``partition_values``) the caller read exactly, used instead of
    converting the struct's own.
    """
    replaced = replaced or {}
    check_file_action_structs(struct, "add" if is_add else "remove", empty_dv_is_none=empty_dv_is_none)
    n = len(struct)
    dv_idx = struct.type.get_field_index("deletionVector")
    dv_child = pc.struct_field(struct, "deletionVector") if dv_idx >= 0 else None
    if dv_child is None or not pa.types.is_struct(dv_child.type):
        dv = pa.nulls(n, DELETION_VECTOR_TYPE)
    else:
        dv = normalize_dv(dv_child)
    cols = {
        "version": versions.cast(pa.int64()) if isinstance(versions, pa.Array) else int64_array(versions),
        "seq": seqs.cast(pa.int64()) if isinstance(seqs, pa.Array) else int64_array(seqs),
        "is_add": bool_array(np.full(n, is_add)),
        "path": _field(struct, "path", pa.string()),
        "dv_id": dv_unique_ids(dv),
        "partition_values": (replaced["partition_values"] if "partition_values" in replaced
                             else _map_field(struct, "partitionValues", keep_null_values=True)),
        "size": _field(struct, "size", pa.int64()),
        "modification_time": _field(struct, "modificationTime", pa.int64()),
        "data_change": _field(struct, "dataChange", pa.bool_()),
        "stats": _field(struct, "stats", pa.string()),
        "tags": replaced["tags"] if "tags" in replaced else _map_field(struct, "tags", keep_null_values=False),
        "deletion_vector": dv,
        "base_row_id": _field(struct, "baseRowId", pa.int64()),
        "default_row_commit_version": _field(struct, "defaultRowCommitVersion", pa.int64()),
        "clustering_provider": _field(struct, "clusteringProvider", pa.string()),
        "deletion_timestamp": _field(struct, "deletionTimestamp", pa.int64()),
        "extended_file_metadata": _field(struct, "extendedFileMetadata", pa.bool_()),
    }
    return pa.Table.from_arrays([cols[f.name] for f in FILE_ACTIONS_SCHEMA], schema=FILE_ACTIONS_SCHEMA)


def file_actions_from_json_table(
    table: pa.Table, versions: np.ndarray, seqs: np.ndarray,
    maps: Mapping[str, Mapping[str, pa.Array] | None] | None = None,
) -> pa.Table:
    """Split a parsed ``{add|remove}`` table into FILE_ACTIONS rows (adds and removes, seq order).

    ``maps`` (FILE_ACTIONS column -> per action key, one map per row of ``table``) replace
    the maps read from the parse (``tags``, and ``partition_values`` when read exactly). An
    :class:`ActionRowError` names the row of ``table``.
    """
    parts: list[pa.Table] = []
    for key in FILE_ACTION_KEYS:
        col = table.column(key).combine_chunks()
        valid = col.is_valid()
        valid_np = mask_to_numpy(valid)
        if not valid_np.any():
            continue
        body = col.filter(valid)
        replaced = {column: by_key[key].filter(valid) for column, by_key in (maps or {}).items() if by_key is not None}
        try:
            part = file_actions_from_structs(body, is_add=key == "add", versions=versions[valid_np], seqs=seqs[valid_np],
                                             empty_dv_is_none=False, replaced=replaced)
        except ActionRowError as exc:
            raise ActionRowError(int(np.flatnonzero(valid_np)[exc.row]), exc.key, exc.reason) from None
        parts.append(part)
    if not parts:
        return EMPTY_FILE_ACTIONS
    out = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    return out.sort_by("seq") if len(parts) > 1 else out
