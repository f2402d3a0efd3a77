"""Reading checkpoints (classic, multi-part, V2 with sidecars) into Arrow.

Only the columns replay needs are read from parquet: the file-action fields of ``add``
and ``remove`` (never ``stats_parsed`` / ``partitionValues_parsed``) and the small
non-file actions. File actions become rows of ``FILE_ACTIONS_SCHEMA``; the rest become
:class:`LogAction` dicts.

A checkpoint is already reconciled: its ``add`` rows are the live files and its
``remove`` rows are tombstones kept for VACUUM, never a removal of one of its own adds.
To make that so in replay, tombstones get lower sequence numbers than adds.
"""

from __future__ import annotations

import json
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

from airflow_delta.engine.actions import FILE_ACTIONS_SCHEMA
from airflow_delta.engine.errors import CorruptCheckpointError, CorruptCommitError
from airflow_delta.engine.fs import FileInfo, FileIO
from airflow_delta.engine.log.commit_reader import LogAction, file_actions_from_structs, parse_log_bytes
from airflow_delta.engine.log.listing import SIDECAR_DIR, log_dir
from airflow_delta.engine.paths import decode_log_path, resolve_in_table

_ADD_FIELDS = (
    "path", "partitionValues", "size", "modificationTime", "dataChange", "stats", "tags",
    "deletionVector", "baseRowId", "defaultRowCommitVersion", "clusteringProvider",
)
_REMOVE_FIELDS = (
    "path", "deletionTimestamp", "dataChange", "extendedFileMetadata", "partitionValues", "size",
    "stats", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion",
)
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
    tables: list[pa.Table] = []
    actions: list[LogAction] = []
    keys = tuple(partition_keys)
    for info in files:
        if info.name.endswith(".json"):
            t, a = _read_json_checkpoint(io, info, version, keys, file_actions)
        else:
            t, a = _read_parquet(io, info.path, version, file_actions=file_actions)
        tables.append(t)
        actions.extend(a)
    sidecars = [a for a in actions if a.key == "sidecar"]
    if file_actions:
        for sidecar in sidecars:
            path = _sidecar_path(root, str(sidecar.body["path"]))
            t, _ = _read_parquet(io, path, version, file_actions=True, non_file=False)
            tables.append(t)
    others = tuple(a for a in actions if a.key not in ("sidecar", "checkpointMetadata"))
    if not file_actions:
        return CheckpointData(version, FILE_ACTIONS_SCHEMA.empty_table(), others)
    table = pa.concat_tables(tables) if len(tables) != 1 else tables[0]
    # Tombstones first, then live files; seq is the position in that order.
    is_add = np.asarray(table.column("is_add").to_numpy(), dtype=bool)
    if not (is_add[1:] >= is_add[:-1]).all():  # already in order when parts hold adds or removes only
        table = table.take(pa.array(np.lexsort((np.arange(table.num_rows), is_add))))
    table = table.set_column(1, FILE_ACTIONS_SCHEMA.field("seq"), pa.array(np.arange(table.num_rows, dtype=np.int64)))
    return CheckpointData(version, table, others)


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


def _read_parquet(
    io: FileIO, path: str, version: int, *, file_actions: bool, non_file: bool = True
) -> tuple[pa.Table, list[LogAction]]:
    try:
        pf = pq.ParquetFile(io.open_input_file(path))
        schema = pf.schema_arrow
        columns: list[str] = []
        if file_actions:
            for key, wanted in (("add", _ADD_FIELDS), ("remove", _REMOVE_FIELDS)):
                idx = schema.get_field_index(key)
                if idx >= 0 and pa.types.is_struct(schema.field(idx).type):
                    present = {f.name for f in schema.field(idx).type}
                    columns.extend(f"{key}.{f}" for f in wanted if f in present)
        if non_file:
            columns.extend(k for k in _NON_FILE_KEYS if schema.get_field_index(k) >= 0)
        table = pf.read(columns=columns) if columns else pa.table({})
    except (OSError, pa.ArrowException) as exc:
        raise CorruptCheckpointError(path, f"cannot read it as parquet ({exc})") from None

    parts: list[pa.Table] = []
    if file_actions:
        for key in ("remove", "add"):
            if key not in table.column_names:
                continue
            col = table.column(key).combine_chunks()
            if not isinstance(col, pa.StructArray) or col.type.get_field_index("path") < 0:
                continue
            live = pc.fill_null(pc.is_valid(pc.struct_field(col, "path")), False)
            body = col.filter(live)
            n = len(body)
            if n == 0:
                continue
            part = file_actions_from_structs(
                body, is_add=key == "add",
                versions=np.full(n, version, dtype=np.int64), seqs=np.zeros(n, dtype=np.int64),
            )
            if key == "add":
                part = _stats_from_parsed(pf, schema, part, live)
            parts.append(part)
    actions: list[LogAction] = []
    if non_file:
        for key, required in _NON_FILE_KEYS.items():
            if key not in table.column_names:
                continue
            col = table.column(key).combine_chunks()
            if not isinstance(col, pa.StructArray) or col.type.get_field_index(required) < 0:
                continue
            present = pc.fill_null(pc.is_valid(pc.struct_field(col, required)), False)
            for body in col.filter(present).to_pylist(maps_as_pydicts="lossy"):
                actions.append(LogAction(version, 0, key, _drop_nulls(body), path))
    if not parts:
        return FILE_ACTIONS_SCHEMA.empty_table(), actions
    return (pa.concat_tables(parts) if len(parts) > 1 else parts[0]), actions


def _stats_from_parsed(pf: pq.ParquetFile, schema: pa.Schema, adds: pa.Table, live: pa.Array) -> pa.Table:
    """Fill ``stats`` from ``add.stats_parsed`` where a checkpoint kept only the struct form.

    Written with ``delta.checkpoint.writeStatsAsJson=false``, a checkpoint has no JSON
    stats; the struct column is then read (only then) and turned back into JSON for the
    files that lack it, so statistics survive into ``files()`` and later checkpoints.
    """
    missing = pc.is_null(adds.column("stats")).combine_chunks()
    if not pc.any(missing).as_py():
        return adds
    add_type = schema.field("add").type
    if add_type.get_field_index("stats_parsed") < 0:
        return adds
    parsed = pf.read(columns=["add.stats_parsed"]).column("add").combine_chunks()
    parsed = pc.struct_field(parsed.filter(live), "stats_parsed")
    stats = adds.column("stats").combine_chunks().to_pylist()
    rows = parsed.filter(missing).to_pylist()
    for i, row in zip(np.flatnonzero(missing.to_numpy(zero_copy_only=False)).tolist(), rows, strict=True):
        if row is not None:
            stats[i] = json.dumps(_jsonable(row), separators=(",", ":"))
    index = adds.schema.get_field_index("stats")
    return adds.set_column(index, adds.schema.field(index), pa.array(stats, pa.string()))


def _jsonable(value: Any) -> Any:
    """Stats values as Delta writes them in JSON (timestamps in UTC with milliseconds)."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items() if v is not None}
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
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
