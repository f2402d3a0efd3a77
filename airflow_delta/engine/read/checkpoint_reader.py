"""Reading checkpoints (classic, multi-part, V2 with sidecars) into Arrow.

Only the columns replay needs are read from parquet, and separately: the small
non-file actions (:func:`read_checkpoint_actions`, for the metadata pass), then the
file-action fields of ``add`` or of ``remove`` (:func:`read_checkpoint_file_actions`;
never ``stats_parsed`` / ``partitionValues_parsed`` unless JSON stats are missing).
Files are read in batches through a small read buffer, each batch converted to rows of
``FILE_ACTIONS_SCHEMA`` before the next is decoded. Non-file actions become
:class:`LogAction` dicts.

A checkpoint is already reconciled: its ``add`` rows are the live files and its
``remove`` rows are tombstones kept for VACUUM, never a removal of one of its own adds.
To make that so in replay, tombstones get lower sequence numbers than adds.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.errors import CorruptCheckpointError, CorruptCommitError
from airflow_delta.engine.model.actions import FILE_ACTIONS_SCHEMA, action_body_error
from airflow_delta.engine.model.arrow_numpy import (
    bool_array,
    bool_scalar,
    combined,
    int64_array,
    mask_to_numpy,
    string_array,
    string_scalar,
)
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.read.commit_reader import (
    EMPTY_FILE_ACTIONS,
    ActionRowError,
    LogAction,
    file_actions_from_structs,
    parse_log_bytes,
)
from airflow_delta.engine.read.listing import SIDECAR_DIR, log_dir
from airflow_delta.engine.storage.fileio import FileInfo, FileIO
from airflow_delta.engine.storage.paths import decode_log_path, resolve_in_table

_ADD_FIELDS = (
    "path", "partitionValues", "size", "modificationTime", "dataChange", "stats", "tags",
    "deletionVector", "baseRowId", "defaultRowCommitVersion", "clusteringProvider",
)
_REMOVE_FIELDS = (
    "path", "deletionTimestamp", "dataChange", "extendedFileMetadata", "partitionValues", "size",
    "stats", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion",
)
# Rows per decoded batch: the non-file columns are read in small batches (nearly all null,
# little is kept); file actions in larger ones (each batch is converted, then dropped).
_SMALL_BATCH = 8192
_FILE_BATCH = 32768
_READ_BUFFER = 1 << 20
# Non-file action columns, each with a required field that tells a real row from a null.
_NON_FILE_KEYS = {
    "protocol": "minReaderVersion",
    "metaData": "id",
    "txn": "appId",
    "domainMetadata": "domain",
    "checkpointMetadata": "version",
    "sidecar": "path",
}


@dataclass(frozen=True, slots=True)
class CheckpointData:
    """A checkpoint's content: file actions (``seq`` 0..n-1, tombstones first) and other actions."""

    version: int
    file_actions: pa.Table
    actions: tuple[LogAction, ...]


@dataclass(frozen=True, slots=True)
class CheckpointActions:
    """The non-file actions of a checkpoint and the sidecar files it references (V2)."""

    version: int
    actions: tuple[LogAction, ...]  # protocol, metaData, txn, domainMetadata
    sidecars: tuple[str, ...]  # absolute sidecar paths, resolved in the table


def read_checkpoint_actions(io: FileIO, root: str, version: int, files: Sequence[FileInfo]) -> CheckpointActions:
    """The non-file actions of one checkpoint; only those columns are read (cheap)."""
    actions: list[LogAction] = []
    for info in files:
        if info.name.endswith(".json"):
            _, found = _read_json_checkpoint(io, info, version, (), False)
        else:
            found = _read_parquet_actions(io, info.path, version)
        actions.extend(found)
    sidecars = tuple(_sidecar_path(root, str(a.body["path"])) for a in actions if a.key == "sidecar")
    others = tuple(a for a in actions if a.key not in ("sidecar", "checkpointMetadata"))
    return CheckpointActions(version, others, sidecars)


def read_checkpoint_file_actions(
    io: FileIO,
    version: int,
    files: Sequence[FileInfo],
    sidecars: Sequence[str],
    *,
    key: str,
    partition_keys: Iterable[str] = (),
) -> pa.Table:
    """The ``add`` (``key="add"``) or ``remove`` rows of a checkpoint and its sidecars.

    Rows are FILE_ACTIONS_SCHEMA in file order, ``seq`` 0..n-1 (callers place them).
    Parquet is read batch by batch, only the leaf columns replay needs, each batch
    converted before the next is decoded, so the nested form is never held whole.
    """
    keys = tuple(partition_keys)
    tables: list[pa.Table] = []
    for info in files:
        if info.name.endswith(".json"):
            t, _ = _read_json_checkpoint(io, info, version, keys, True)
            tables.append(t.filter(pc.equal(t.column("is_add"), bool_scalar(key == "add"))))
        else:
            tables.append(_read_parquet_file_actions(io, info.path, version, key))
    for path in sidecars:
        tables.append(_read_parquet_file_actions(io, path, version, key))
    tables = [t for t in tables if t.num_rows] or [EMPTY_FILE_ACTIONS]
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return table.set_column(1, FILE_ACTIONS_SCHEMA.field("seq"), int64_array(np.arange(table.num_rows, dtype=np.int64)))


def read_checkpoint(
    io: FileIO,
    root: str,
    version: int,
    files: Sequence[FileInfo],
    *,
    partition_keys: Iterable[str] = (),
    file_actions: bool = True,
) -> CheckpointData:
    """Read one complete checkpoint (all parts, and the sidecars it references)."""
    found = read_checkpoint_actions(io, root, version, files)
    if not file_actions:
        return CheckpointData(version, EMPTY_FILE_ACTIONS, found.actions)
    # Tombstones first, then live files; seq is the position in that order.
    removes = read_checkpoint_file_actions(io, version, files, found.sidecars, key="remove", partition_keys=partition_keys)
    adds = read_checkpoint_file_actions(io, version, files, found.sidecars, key="add", partition_keys=partition_keys)
    table = pa.concat_tables([removes, adds])
    table = table.set_column(1, FILE_ACTIONS_SCHEMA.field("seq"), int64_array(np.arange(table.num_rows, dtype=np.int64)))
    return CheckpointData(version, table, found.actions)


def verify_checkpoint(io: FileIO, root: str, version: int, files: Sequence[FileInfo]) -> int:
    """Read one checkpoint in full and return its number of actions (rows, sidecars included).

    For callers that act on a checkpoint being sound (log cleanup deletes what it
    supersedes): the reader's own passes (non-file actions, sidecar paths resolved in the
    table, ``add`` and ``remove`` rows) must succeed, protocol and metadata must be
    there, and every page of every column of every part and sidecar must decode (page
    checksums verified where written), since other readers read columns ours skips.
    Raises :class:`CorruptCheckpointError` naming the file at fault.
    """
    found = read_checkpoint_actions(io, root, version, files)
    kinds = {a.key for a in found.actions}
    for key in ("protocol", "metaData"):
        if key not in kinds:
            raise CorruptCheckpointError(files[0].path, f"it holds no {key} action, so no reader can start from it")
    for key in ("remove", "add"):
        read_checkpoint_file_actions(io, version, files, found.sidecars, key=key)
    rows = 0
    for info in files:
        if info.name.endswith(".json"):
            rows += sum(1 for line in io.read_bytes(info.path).splitlines() if line.strip())
        else:
            rows += _decode_every_page(io, info.path)
    for sidecar in found.sidecars:
        rows += _decode_every_page(io, sidecar)
    return rows


def _decode_every_page(io: FileIO, path: str) -> int:
    """Decode every column of a parquet file batch by batch (bounded memory); its row count."""
    try:
        pf = pq.ParquetFile(io.open_input_file(path), buffer_size=_READ_BUFFER, pre_buffer=False,
                            page_checksum_verification=True)
        rows = 0
        for batch in pf.iter_batches(batch_size=_SMALL_BATCH, use_threads=False):
            rows += batch.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise CorruptCheckpointError(path, f"cannot decode it in full ({exc})") from None
    if rows != pf.metadata.num_rows:
        raise CorruptCheckpointError(path, f"its footer counts {pf.metadata.num_rows} rows, its pages {rows}")
    return rows


def _sidecar_path(root: str, path: str) -> str:
    decoded = decode_log_path(path)
    if "/" not in decoded and ":" not in decoded:
        return f"{log_dir(root)}/{SIDECAR_DIR}/{decoded}"
    if "://" not in decoded and not decoded.startswith("/"):
        return resolve_in_table(root, posixpath.join("_delta_log", SIDECAR_DIR, path))
    return resolve_in_table(root, path)


def _read_json_checkpoint(
    io: FileIO, info: FileInfo, version: int, partition_keys: Sequence[str], file_actions: bool
) -> tuple[pa.Table, list[LogAction]]:
    try:
        parsed = parse_log_bytes([io.read_bytes(info.path)], [info.path], [version],
                                 partition_keys=partition_keys, file_actions=file_actions)
    except CorruptCommitError as exc:
        raise CorruptCheckpointError(info.path, str(exc)) from None
    except OSError as exc:
        raise CorruptCheckpointError(info.path, f"cannot read it ({exc})") from None
    actions = [LogAction(version, 0, a.key, a.body, info.path) for a in parsed.actions]
    return parsed.file_actions, actions


def _open_parquet(io: FileIO, path: str) -> pq.ParquetFile:
    """Open a checkpoint file for streaming reads.

    ``buffer_size`` makes column chunks stream through a 1 MB buffer instead of being
    read whole (a checkpoint is often one row group, its ``add.stats`` chunk alone tens
    of MB): peak memory drops by about the size of the chunks read.
    """
    try:
        return pq.ParquetFile(io.open_input_file(path), buffer_size=_READ_BUFFER, pre_buffer=False)
    except (OSError, pa.ArrowException) as exc:
        raise CorruptCheckpointError(path, f"cannot read it as parquet ({exc})") from None


def _read_parquet_actions(io: FileIO, path: str, version: int) -> list[LogAction]:
    """The non-file actions of one checkpoint parquet file (only their columns are read).

    Read in small batches: the columns are nearly all null (one row per action among
    as many rows as files), so only the few real rows of each batch are kept.
    """
    pf = _open_parquet(io, path)
    schema = pf.schema_arrow
    columns = [k for k in _NON_FILE_KEYS if schema.get_field_index(k) >= 0]
    if not columns:
        return []
    found: dict[str, list[pa.Array]] = {k: [] for k in columns}
    try:
        for batch in pf.iter_batches(batch_size=_SMALL_BATCH, columns=columns, use_threads=False):
            for key in columns:
                col = batch.column(key)
                required = _NON_FILE_KEYS[key]
                if pa.types.is_null(col.type):
                    continue  # an all-null column written without a type: no such actions
                if not isinstance(col, pa.StructArray) or col.type.get_field_index(required) < 0:
                    raise CorruptCheckpointError(
                        path, f"its {key!r} column has type {col.type}: the protocol's {key} is a struct with "
                        f"a {required!r} field"
                    )
                present = pc.is_valid(pc.struct_field(col, required))
                if present.true_count:
                    found[key].append(col.filter(present))
    except (OSError, pa.ArrowException) as exc:
        raise CorruptCheckpointError(path, f"cannot read it as parquet ({exc})") from None
    actions: list[LogAction] = []
    for key in _NON_FILE_KEYS:  # a fixed order of kinds (reconciliation only looks within a kind)
        for chunk in found.get(key, ()):
            for body in chunk.to_pylist(maps_as_pydicts="lossy"):
                body = _drop_nulls(body)
                reason = action_body_error(key, body)  # e.g. a column written with the wrong type
                if reason is not None:
                    raise CorruptCheckpointError(path, f"invalid {key} action: {reason}")
                actions.append(LogAction(version, 0, key, body, path))
    return actions


def _file_columns(schema: pa.Schema, key: str, path: str) -> list[str]:
    """The leaf columns of ``add`` / ``remove`` replay needs (never ``stats_parsed`` etc.).

    A checkpoint without the column holds no such actions; one whose column is not a
    struct with a ``path`` is corrupt (reading it as "no files" would empty the table).
    """
    idx = schema.get_field_index(key)
    if idx < 0 or pa.types.is_null(schema.field(idx).type):
        return []
    column_type = schema.field(idx).type
    if not pa.types.is_struct(column_type) or column_type.get_field_index("path") < 0:
        raise CorruptCheckpointError(
            path, f"its {key!r} column has type {column_type}: the protocol's {key} is a struct with a 'path' field"
        )
    present = {f.name for f in column_type}
    return [f"{key}.{f}" for f in (_ADD_FIELDS if key == "add" else _REMOVE_FIELDS) if f in present]


def _read_parquet_file_actions(io: FileIO, path: str, version: int, key: str) -> pa.Table:
    """The ``key`` rows of one checkpoint parquet file (part or sidecar) as FILE_ACTIONS rows."""
    pf = _open_parquet(io, path)
    columns = _file_columns(pf.schema_arrow, key, path)
    if not columns:
        return EMPTY_FILE_ACTIONS
    parts: list[pa.Table] = []
    masks: list[np.ndarray] = []
    first_row = 0  # of the current batch, in the file
    try:
        for batch in pf.iter_batches(batch_size=_FILE_BATCH, columns=columns, use_threads=False):
            col = batch.column(0)
            live = pc.is_valid(pc.struct_field(col, "path"))
            live_np = mask_to_numpy(live)
            masks.append(live_np)
            if live.true_count:
                body = _select(col, live)
                n = len(body)
                try:
                    parts.append(file_actions_from_structs(
                        body, is_add=key == "add",
                        versions=np.full(n, version, dtype=np.int64), seqs=np.zeros(n, dtype=np.int64),
                    ))
                except ActionRowError as exc:
                    row = first_row + int(np.flatnonzero(live_np)[exc.row])
                    raise CorruptCheckpointError(
                        path, f"the {key} action in row {row} does not match the protocol's schema: {exc.reason}"
                    ) from None
                del body
            first_row += len(col)
            del batch, col
    except (OSError, pa.ArrowException) as exc:
        raise CorruptCheckpointError(path, f"cannot read it as parquet ({exc})") from None
    if not parts:
        return EMPTY_FILE_ACTIONS
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    if key == "add":
        live_all = bool_array(np.concatenate(masks) if masks else np.zeros(0, dtype=bool))
        table = _stats_from_parsed(pf, pf.schema_arrow, table, live_all)
    return table


def _select(col: pa.Array, mask: pa.BooleanArray) -> pa.Array:
    """``col.filter(mask)``, zero-copy when the selected rows are one contiguous run (the usual
    layout: the few non-file rows come first or last)."""
    idx = np.flatnonzero(mask_to_numpy(mask))
    if idx.size and idx[-1] - idx[0] + 1 == idx.size:
        return col.slice(int(idx[0]), int(idx.size))
    return col.filter(mask)


def _stats_from_parsed(pf: pq.ParquetFile, schema: pa.Schema, adds: pa.Table, live: pa.Array) -> pa.Table:
    """Fill ``stats`` from ``add.stats_parsed`` where a checkpoint kept only the struct form.

    Written with ``delta.checkpoint.writeStatsAsJson=false``, a checkpoint has no JSON
    stats; the struct column is then read (only then) and turned back into JSON for the
    files that lack it, so statistics survive into ``files()`` and later checkpoints.
    """
    missing = combined(pc.is_null(adds.column("stats")))
    if not pc.any(missing).as_py():
        return adds
    add_type = schema.field("add").type
    if add_type.get_field_index("stats_parsed") < 0:
        return adds
    parsed = combined(pf.read(columns=["add.stats_parsed"]).column("add"))
    parsed = pc.struct_field(_select(parsed, live), "stats_parsed")
    stats = combined(adds.column("stats")).to_pylist()
    rows = _timestamps_as_text(parsed.filter(missing)).to_pylist()
    for i, row in zip(np.flatnonzero(mask_to_numpy(missing)).tolist(), rows, strict=True):
        if row is not None:
            stats[i] = _stats_json(row)
    index = adds.schema.get_field_index("stats")
    return adds.set_column(index, adds.schema.field(index), string_array(stats))


def _timestamps_as_text(array: pa.Array) -> pa.Array:
    """``array`` with every timestamp (at any struct depth) as the text Delta's JSON stats hold
    (UTC, milliseconds; ``Z`` when zoned). Done in Arrow: ``as_py`` of a timestamp imports pandas."""
    t = array.type
    if pa.types.is_struct(t):
        children = [_timestamps_as_text(array.field(i)) for i in range(t.num_fields)]
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, names=[f.name for f in t], mask=mask)
    if pa.types.is_timestamp(t):
        millis = array.cast(pa.timestamp("ms", "UTC" if t.tz else None), safe=False)
        text = pc.strftime(millis, format="%Y-%m-%dT%H:%M:%S")  # %S has the milliseconds
        return pc.binary_join_element_wise(text, string_scalar("Z" if t.tz else ""), string_scalar(""))
    return array


def _stats_json(value: Any) -> str:
    """Compact JSON of one statistics struct. Decimals are written as exact JSON numbers, as
    Delta writes them: through a float their last digits would change, and a rounded bound
    (a maximum rounded down) would make data skipping drop files that hold matching rows."""
    if isinstance(value, dict):
        items = (f"{json_text(k)}:{_stats_json(v)}" for k, v in value.items() if v is not None)
        return "{" + ",".join(items) + "}"
    if isinstance(value, Decimal) and value.is_finite():
        return format(value, "f")
    return json_text(_jsonable(value))


def _jsonable(value: Any) -> Any:
    """Stats values as Delta writes them in JSON (timestamps in UTC with milliseconds)."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items() if v is not None}
    if isinstance(value, datetime):
        if value.tzinfo is None:  # timestamp_ntz: a wall-clock time, written without a zone
            return value.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _drop_nulls(body: dict) -> dict:
    """Parquet gives absent optional fields as null; JSON would not have them at all."""
    return {k: v for k, v in body.items() if v is not None}
