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

If the fast path fails for any reason (invalid JSON, a field of an unexpected type),
the slow path parses every line with :mod:`json`; it either produces the same rows or
raises :class:`CorruptCommitError` naming the file and line at fault.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.json as pajson

from airflow_delta.engine.errors import CorruptCommitError
from airflow_delta.engine.model.actions import DELETION_VECTOR_TYPE, FILE_ACTIONS_SCHEMA, STRING_MAP_TYPE
from airflow_delta.engine.model.arrow_numpy import (
    bool_array,
    int32_array,
    int64_array,
    mask_to_numpy,
    string_array,
    string_scalar,
)
from airflow_delta.engine.read.listing import commit_path
from airflow_delta.engine.storage.fileio import FileInfo, FileIO

FILE_ACTION_KEYS = ("add", "remove")


# No rows, one (empty) chunk per column; ``Schema.empty_table()`` would import pandas.
EMPTY_FILE_ACTIONS: pa.Table = pa.table([pa.nulls(0, f.type) for f in FILE_ACTIONS_SCHEMA], schema=FILE_ACTIONS_SCHEMA)


@dataclass(frozen=True, slots=True)
class LogAction:
    """A non-file action found in the log: its commit version, global order, key and body."""

    version: int
    seq: int
    key: str  # "protocol", "metaData", "txn", "domainMetadata", "commitInfo", ...
    body: Mapping[str, Any]
    source: str = ""  # the log file it was read from (for error messages)


@dataclass(frozen=True, slots=True)
class ParsedLog:
    """The actions of a run of JSON files: file actions as Arrow, everything else as dicts."""

    file_actions: pa.Table  # FILE_ACTIONS_SCHEMA, ``seq`` from ``seq_start`` in line order
    actions: tuple[LogAction, ...]  # non-file actions in line order
    num_lines: int  # lines consumed, i.e. the seq range used is [seq_start, seq_start + num_lines)


# ------------------------------------------------------------------ one commit


def parse_commit_bytes(data: bytes, file: str) -> list[dict[str, Any]]:
    """Parse newline-delimited JSON actions; blank lines are skipped."""
    out: list[dict[str, Any]] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptCommitError(file, number, f"invalid JSON ({exc})") from None
        if not isinstance(action, dict):
            raise CorruptCommitError(file, number, f"expected a JSON object, found {type(action).__name__}")
        out.append(action)
    return out


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
_MAP_FIELDS = ("partitionValues", "tags")


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


@dataclass(frozen=True, slots=True)
class JoinedFiles:
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


@dataclass(frozen=True, slots=True)
class LogLines:
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
    return LogLines(
        data=data,
        lines=lines,
        is_file_line=is_file_line,
        file_of_line=np.searchsorted(file_starts, line_starts, side="right") - 1,
        first_line_of_file=np.searchsorted(line_starts, file_starts, side="left"),
        versions=np.asarray(versions, dtype=np.int64),
        names=tuple(names),
    )


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
            obj = json.loads(text)
        except ValueError as exc:
            file, number = log.where(i)
            raise CorruptCommitError(file, number, f"invalid JSON ({exc})") from None
        if not isinstance(obj, dict):
            file, number = log.where(i)
            raise CorruptCommitError(file, number, f"expected a JSON object, found {type(obj).__name__}")
        version = int(log.versions[log.file_of_line[i]])
        source = log.names[int(log.file_of_line[i])]
        for key, body in obj.items():
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

    ``stray`` (from :func:`parse_non_file_actions`, parsed with the same ``seq_start``
    of 0) are shifted by ``seq_start`` too.
    """
    if stray and seq_start:
        stray = [(v, s + seq_start, k, body) for v, s, k, body in stray]
    is_file_np = mask_to_numpy(log.is_file_line)
    file_idx = np.flatnonzero(is_file_np)
    if len(file_idx) == 0 and not stray:
        return EMPTY_FILE_ACTIONS
    try:
        # One parse of the whole buffer, in place: every line becomes a row (non-file
        # actions are ignored fields), so no bytes are copied to gather the file lines.
        # Stray add/remove lines are rows of this parse too, so ``stray`` is not needed here.
        return _parse_all_lines_chunked(log, seq_start, partition_keys)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError):
        pass  # a corrupt or unusual line: the line-by-line paths below find it
    tables: list[pa.Table] = []
    if len(file_idx):
        selected = log.lines.filter(log.is_file_line)
        try:
            tables.append(_parse_file_lines_fast(selected, file_idx, log.file_of_line, log.versions, seq_start,
                                                 partition_keys))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError):
            tables.append(_parse_file_lines_slow(selected, file_idx, log.versions[log.file_of_line[file_idx]],
                                                 seq_start, log.where))
    if stray:
        tables.append(file_actions_from_dicts(stray))
    if not tables:
        return EMPTY_FILE_ACTIONS
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables).sort_by("seq")


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
        fields = json.loads(metadata.get("schemaString") or "{}").get("fields", [])
    except (ValueError, AttributeError):
        return keys
    for field in fields:
        if isinstance(field, dict) and field.get("name") in keys:
            physical = (field.get("metadata") or {}).get("delta.columnMapping.physicalName")
            if isinstance(physical, str):
                keys.add(physical)
    return keys


def _contiguous_bytes(selected: pa.LargeStringArray) -> pa.Buffer:
    """The bytes of a (freshly filtered, hence contiguous) string array: its lines, joined."""
    offs = np.frombuffer(selected.buffers()[1], dtype=np.int64)
    start = int(offs[selected.offset])
    end = int(offs[selected.offset + len(selected)])
    return selected.buffers()[2].slice(start, end - start)


def _read_json(buffer: pa.Buffer, partition_keys: Sequence[str], tag_keys: Sequence[str] | None) -> pa.Table:
    """One ``read_json`` of add/remove lines.

    With ``tag_keys=None`` every field not declared is ignored (fast: nothing is
    inferred); tags then come out as empty structs and are filled in by the caller.
    With a list of tag keys, undeclared fields are inferred (used on few lines only).
    """
    def body(fields: list[tuple[str, pa.DataType]]) -> pa.DataType:
        return pa.struct([
            *fields,
            ("partitionValues", pa.struct([(k, pa.string()) for k in partition_keys])),
            ("tags", pa.struct([(k, pa.string()) for k in (tag_keys or ())])),
        ])

    schema = pa.schema([("add", body(_ADD_FIELDS)), ("remove", body(_REMOVE_FIELDS))])
    parse_options = pajson.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="ignore" if tag_keys is None else "infer"
    )
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


def _parse_all_lines_chunked(log: LogLines, seq_start: int, partition_keys: Iterable[str],
                             chunk_bytes: int = 1 << 23) -> pa.Table:
    """:func:`_parse_all_lines_fast` over runs of whole lines of about ``chunk_bytes``.

    Each run's nested parse result is converted to FILE_ACTIONS rows and dropped before
    the next run is parsed, so peak memory follows the chunk size, not the log size.
    """
    lines = log.lines
    n = len(lines)
    pkeys = sorted(set(partition_keys) | _sampled_partition_keys(lines, np.flatnonzero(mask_to_numpy(log.is_file_line))))
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset:lines.offset + n + 1]
    parts: list[pa.Table] = []
    a = 0
    while a < n:
        b = int(np.searchsorted(offsets, offsets[a] + chunk_bytes, side="right")) - 1
        b = min(max(b, a + 1), n)
        start, end = int(offsets[a]), int(offsets[b])
        part = _parse_all_lines_fast(
            log.data.slice(start, end - start), lines.slice(a, b - a), log.is_file_line.slice(a, b - a),
            log.file_of_line[a:b], log.versions, seq_start + a, pkeys,
        )
        if part.num_rows:
            parts.append(part)
        if b < n:
            pa.default_memory_pool().release_unused()  # the nested parse of this run is garbage now
        a = b
    if not parts:
        return EMPTY_FILE_ACTIONS
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def _parse_all_lines_fast(
    data: pa.Buffer,
    lines: pa.LargeStringArray,
    is_file_line: pa.BooleanArray,
    file_of_line: np.ndarray,
    version_arr: np.ndarray,
    seq_start: int,
    pkeys: Sequence[str],
) -> pa.Table:
    """Parse every line of ``data`` (the bytes of ``lines``) in one ``read_json``; the
    add/remove rows become FILE_ACTIONS rows with ``seq`` = ``seq_start`` + line index."""
    row_line = np.flatnonzero(~_blank_lines(lines))  # pyarrow skips blank lines: row i is line row_line[i]
    if row_line.size == 0:
        return EMPTY_FILE_ACTIONS
    table = _read_json(data, pkeys, None)
    if table.num_rows != len(row_line):
        raise ValueError("line count mismatch")
    tags = _tags_patch(lines.take(int64_array(row_line)), table, pkeys)
    versions = version_arr[file_of_line[row_line]]
    seqs = row_line.astype(np.int64) + seq_start
    return file_actions_from_json_table(table, versions, seqs, tags)


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


def _tags_patch(row_lines: pa.LargeStringArray, table: pa.Table, pkeys: Sequence[str]) -> dict[str, pa.Array] | None:
    """Tags of every row, for the few rows whose lines carry non-empty tags (None: no such rows)."""
    tag_lines = pc.match_substring_regex(row_lines, r'"tags"\s*:\s*\{\s*"')
    # Only file-action rows (commitInfo may carry tags of its own; they are not ours to parse).
    is_file_row = pc.or_(table.column("add").is_valid(), table.column("remove").is_valid())
    tag_lines = pc.and_(tag_lines, is_file_row)
    tagged = np.flatnonzero(mask_to_numpy(tag_lines))
    if not tagged.size:
        return None
    sub_buffer = _contiguous_bytes(row_lines.take(int64_array(tagged)))
    keys = sorted(set(_all_keys(_read_json(sub_buffer, pkeys, []), "tags")))
    sub = _read_json(sub_buffer, pkeys, keys)
    if any(_non_string_keys(sub)):
        raise ValueError("non-string tag values")
    tags = {}
    for key in FILE_ACTION_KEYS:
        main = _map_field(table.column(key).combine_chunks(), "tags", keep_null_values=False)
        patch = _map_field(sub.column(key).combine_chunks(), "tags", keep_null_values=False)
        index = np.arange(len(main), dtype=np.int64)
        index[tagged] = len(main) + np.arange(tagged.size, dtype=np.int64)
        tags[key] = pa.concat_arrays([main, patch]).take(int64_array(index))
    return tags


def _parse_file_lines_fast(
    selected: pa.LargeStringArray,
    file_idx: np.ndarray,
    file_of_line: np.ndarray,
    version_arr: np.ndarray,
    seq_start: int,
    partition_keys: Iterable[str],
) -> pa.Table:
    """Parse add/remove lines with explicit types only.

    Partition value keys are the partition columns of every ``metaData`` in play
    (``partition_keys``), the only keys the protocol puts there. Tags have free-form
    keys: the few lines that carry non-empty tags are parsed a second time with
    inference to find them (declared as strings, since pyarrow infers date-like
    strings as timestamps).
    """
    pkeys = sorted(set(partition_keys) | _sampled_partition_keys(selected, np.arange(len(selected))))
    table = _read_json(_contiguous_bytes(selected), pkeys, None)
    if table.num_rows != len(file_idx):
        raise ValueError("line count mismatch")
    tags = _tags_patch(selected, table, pkeys)
    versions = version_arr[file_of_line[file_idx]]
    seqs = file_idx.astype(np.int64) + seq_start
    return file_actions_from_json_table(table, versions, seqs, tags)


def _sampled_partition_keys(lines: pa.LargeStringArray, candidates: np.ndarray, samples: int = 64) -> set[str]:
    """Partition value keys seen in a spread of the ``candidates`` lines: a guard for keys no
    ``metaData`` announced (which an explicit-schema parse would otherwise drop)."""
    n = len(candidates)
    if n == 0:
        return set()
    # Sorted distinct positions (not np.unique: it imports numpy.ma, ~30 ms).
    positions = np.linspace(0, n - 1, min(n, samples)).astype(np.int64)
    idx = candidates[positions[np.r_[True, positions[1:] != positions[:-1]]]]
    keys: set[str] = set()
    for text in lines.take(int64_array(idx)).to_pylist():
        try:
            obj = json.loads(text)
        except ValueError:
            continue  # the full parse will fail and report it
        for key in FILE_ACTION_KEYS:
            body = obj.get(key) if isinstance(obj, dict) else None
            pv = body.get("partitionValues") if isinstance(body, dict) else None
            if isinstance(pv, dict):
                keys.update(k for k in pv if isinstance(k, str))
    return keys


def _all_keys(table: pa.Table, field: str) -> list[str]:
    keys: list[str] = []
    for col in ("add", "remove"):
        t = table.schema.field(col).type
        idx = t.get_field_index(field)
        if idx >= 0:
            keys.extend(f.name for f in t.field(idx).type)
    return keys


def _non_string_keys(table: pa.Table) -> tuple[list[str], list[str]]:
    out: tuple[list[str], list[str]] = ([], [])
    for col in ("add", "remove"):
        t = table.schema.field(col).type
        for slot, field in enumerate(_MAP_FIELDS):
            idx = t.get_field_index(field)
            if idx < 0:
                continue
            ft = t.field(idx).type
            if not pa.types.is_struct(ft):
                out[slot].append(field)
                continue
            out[slot].extend(f.name for f in ft if not (pa.types.is_string(f.type) or pa.types.is_null(f.type)))
    return out


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


def normalize_dv(dv: pa.Array) -> pa.Array:
    """Project a DV struct of any superset layout onto ``DELETION_VECTOR_TYPE``."""
    n = len(dv)
    children = []
    for name, typ in _DV_FIELDS:
        idx = dv.type.get_field_index(name)
        children.append(pc.struct_field(dv, name).cast(typ) if idx >= 0 else pa.nulls(n, typ))
    # A struct without a storage type is no DV (some writers emit all-null structs).
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
    struct: pa.Array, *, is_add: bool, versions: np.ndarray | pa.Array, seqs: np.ndarray | pa.Array
) -> pa.Table:
    """Rows of ``FILE_ACTIONS_SCHEMA`` from a struct array of ``add`` or ``remove`` bodies (all valid)."""
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
        "partition_values": _map_field(struct, "partitionValues", keep_null_values=True),
        "size": _field(struct, "size", pa.int64()),
        "modification_time": _field(struct, "modificationTime", pa.int64()),
        "data_change": _field(struct, "dataChange", pa.bool_()),
        "stats": _field(struct, "stats", pa.string()),
        "tags": _map_field(struct, "tags", keep_null_values=False),
        "deletion_vector": dv,
        "base_row_id": _field(struct, "baseRowId", pa.int64()),
        "default_row_commit_version": _field(struct, "defaultRowCommitVersion", pa.int64()),
        "clustering_provider": _field(struct, "clusteringProvider", pa.string()),
        "deletion_timestamp": _field(struct, "deletionTimestamp", pa.int64()),
        "extended_file_metadata": _field(struct, "extendedFileMetadata", pa.bool_()),
    }
    return pa.Table.from_arrays([cols[f.name] for f in FILE_ACTIONS_SCHEMA], schema=FILE_ACTIONS_SCHEMA)


def file_actions_from_json_table(
    table: pa.Table, versions: np.ndarray, seqs: np.ndarray, tags: Mapping[str, pa.Array] | None = None
) -> pa.Table:
    """Split a parsed ``{add|remove}`` table into FILE_ACTIONS rows (adds and removes, seq order).

    ``tags`` (per action key, one map per row of ``table``) replaces the parsed tags.
    """
    parts: list[pa.Table] = []
    for key in FILE_ACTION_KEYS:
        col = table.column(key).combine_chunks()
        valid = col.is_valid()
        valid_np = mask_to_numpy(valid)
        if not valid_np.any():
            continue
        body = col.filter(valid)
        if body.null_count or pc.any(pc.is_null(pc.struct_field(body, "path"))).as_py():
            raise ValueError(f"{key} action without a path")
        part = file_actions_from_structs(body, is_add=key == "add", versions=versions[valid_np], seqs=seqs[valid_np])
        if tags is not None:
            part = part.set_column(part.schema.get_field_index("tags"), FILE_ACTIONS_SCHEMA.field("tags"),
                                   tags[key].filter(valid))
        parts.append(part)
    if not parts:
        return EMPTY_FILE_ACTIONS
    out = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    return out.sort_by("seq") if len(parts) > 1 else out


def _parse_file_lines_slow(
    selected: pa.LargeStringArray,
    file_idx: np.ndarray,
    versions: np.ndarray,
    seq_start: int,
    where: Any,
) -> pa.Table:
    """Per-line parse: locates the corrupt line, or reads what pyarrow's typed parse refused."""
    rows: list[tuple[int, int, str, Mapping[str, Any]]] = []
    for i, version, text in zip(file_idx.tolist(), versions.tolist(), selected.to_pylist(), strict=True):
        try:
            obj = json.loads(text)
        except ValueError as exc:
            file, number = where(i)
            raise CorruptCommitError(file, number, f"invalid JSON ({exc})") from None
        if not isinstance(obj, dict):
            file, number = where(i)
            raise CorruptCommitError(file, number, "expected a JSON object")
        for key in FILE_ACTION_KEYS:
            body = obj.get(key)
            if isinstance(body, dict):
                if not isinstance(body.get("path"), str):
                    file, number = where(i)
                    raise CorruptCommitError(file, number, f"{key} action without a string 'path'")
                rows.append((version, seq_start + i, key, body))
    try:
        return file_actions_from_dicts(rows)
    except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        # Valid JSON, but a field has a type the protocol does not allow; find the line.
        for version, seq, key, body in rows:
            try:
                file_actions_from_dicts([(version, seq, key, body)])
            except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError) as one:
                file, number = where(seq - seq_start)
                raise CorruptCommitError(file, number, f"invalid {key} action ({one})") from None
        raise CorruptCommitError(", ".join(sorted({where(i)[0] for i in file_idx.tolist()})), None, str(exc)) from None


def _str_map(value: Any, *, keep_null_values: bool) -> list[tuple[str, str | None]] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object of strings, found {value!r}")
    return [
        (str(k), None if v is None else (v if isinstance(v, str) else json.dumps(v)))
        for k, v in value.items()
        if keep_null_values or v is not None
    ]


def file_actions_from_dicts(rows: Sequence[tuple[int, int, str, Mapping[str, Any]]]) -> pa.Table:
    """FILE_ACTIONS rows from ``(version, seq, "add"|"remove", body)`` tuples (small inputs only)."""
    records = []
    for version, seq, key, body in rows:
        dv = body.get("deletionVector")
        dv_row = None
        dv_id = None
        if isinstance(dv, dict):
            dv_row = {name: dv.get(name) for name, _ in _DV_FIELDS}
            dv_id = f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}"
            if dv.get("offset") is not None:
                dv_id += f"@{dv.get('offset')}"
        records.append({
            "version": version,
            "seq": seq,
            "is_add": key == "add",
            "path": body["path"],
            "dv_id": dv_id,
            "partition_values": _str_map(body.get("partitionValues"), keep_null_values=True),
            "size": body.get("size"),
            "modification_time": body.get("modificationTime"),
            "data_change": body.get("dataChange"),
            "stats": body.get("stats") if body.get("stats") is None or isinstance(body.get("stats"), str) else json.dumps(body["stats"]),
            "tags": _str_map(body.get("tags"), keep_null_values=False),
            "deletion_vector": dv_row,
            "base_row_id": body.get("baseRowId"),
            "default_row_commit_version": body.get("defaultRowCommitVersion"),
            "clustering_provider": body.get("clusteringProvider"),
            "deletion_timestamp": body.get("deletionTimestamp"),
            "extended_file_metadata": body.get("extendedFileMetadata"),
        })
    return pa.Table.from_pylist(records, schema=FILE_ACTIONS_SCHEMA)
