"""Writing checkpoints: classic, multi-part and V2 (UUID-named with sidecars), and ``_last_checkpoint``.

A checkpoint is the reconciled state of one table version written as parquet, one
action per row, each action type in its own struct column (see the protocol's
"Checkpoints" and "Checkpoint Schema" sections). It is built from a
:class:`~airflow_delta.engine.snapshot.Snapshot`: the non-file actions (protocol,
metadata, txn, domain metadata) come from its objects, the file actions from its
Arrow tables ``add_actions`` and ``tombstones`` (rows of ``FILE_ACTIONS_SCHEMA``).
File actions are streamed into a ``ParquetWriter`` one record batch at a time; each
batch's ``add`` struct is assembled from the snapshot's own column buffers, so the
state is never copied as a whole.

Order of writes, so that no reader ever takes an incomplete checkpoint as complete:

1. every parquet file (parts, sidecars) is written to a hidden temporary name and
   renamed into place (local storage), or uploaded in one request (object stores);
2. for V2, the top-level UUID-named file is written only after all its sidecars;
3. ``_last_checkpoint`` is rewritten last, and never moved back to an older version.

``post_commit`` is what a transaction calls after each successful commit: it writes
the version's ``.crc`` file, a checkpoint every ``delta.checkpointInterval`` versions,
and then runs metadata cleanup. It never raises: the commit has already succeeded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import posixpath
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.actions import (
    DELETION_VECTOR_TYPE,
    STRING_MAP_TYPE,
    DomainMetadata,
    Metadata,
    Protocol,
    SetTransaction,
)
from airflow_delta.engine.errors import DeltaError, InvalidLogError
from airflow_delta.engine.fs import FileIO, LocalFileIO
from airflow_delta.engine.table_properties import TableProperties

if TYPE_CHECKING:
    from airflow_delta.engine.snapshot import Snapshot
    from airflow_delta.engine.table import DeltaTable

log = logging.getLogger(__name__)

LAST_CHECKPOINT_NAME = "_last_checkpoint"
SIDECAR_DIR_NAME = "_sidecars"

# Actions per part of a multi-part (V1) checkpoint; Spark's default part size.
DEFAULT_PART_SIZE = 5_000_000
# File actions per sidecar of a V2 checkpoint; Spark's default for V2.
DEFAULT_SIDECAR_SIZE = 50_000
# Rows per record batch (and parquet row group) streamed to the writer.
WRITE_BATCH_ROWS = 128 * 1024
# checkpointSchema is left out of _last_checkpoint above this many JSON characters
# (the file is read on every table load, so it should stay small).
CHECKPOINT_SCHEMA_MAX_CHARS = 20_000
# nonFileActions / sidecarFiles are left out of _last_checkpoint above these counts.
LAST_CHECKPOINT_MAX_NON_FILE_ACTIONS = 1_000
LAST_CHECKPOINT_MAX_SIDECARS = 1_000

# Spark's HashPartitioning seed; multi-part checkpoints are clustered with it.
_SPARK_HASH_SEED = 42


# --------------------------------------------------------------------------- schema

_STR = pa.string()
_I64 = pa.int64()

TXN_TYPE = pa.struct([("appId", _STR), ("version", _I64), ("lastUpdated", _I64)])
FORMAT_TYPE = pa.struct([("provider", _STR), ("options", STRING_MAP_TYPE)])
METADATA_TYPE = pa.struct(
    [
        ("id", _STR),
        ("name", _STR),
        ("description", _STR),
        ("format", FORMAT_TYPE),
        ("schemaString", _STR),
        ("partitionColumns", pa.list_(_STR)),
        ("configuration", STRING_MAP_TYPE),
        ("createdTime", _I64),
    ]
)
PROTOCOL_TYPE = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(_STR)),
        ("writerFeatures", pa.list_(_STR)),
    ]
)
DOMAIN_METADATA_TYPE = pa.struct([("domain", _STR), ("configuration", _STR), ("removed", pa.bool_())])
CHECKPOINT_METADATA_TYPE = pa.struct([("version", _I64), ("tags", STRING_MAP_TYPE)])
# Spark's descriptor carries an optional ``maxRowIndex`` (not in the protocol's table);
# its checkpoints always have the column, so ours do too (null: we never know it).
CHECKPOINT_DV_TYPE = pa.struct([*DELETION_VECTOR_TYPE, pa.field("maxRowIndex", _I64)])
SIDECAR_TYPE = pa.struct(
    [("path", _STR), ("sizeInBytes", _I64), ("modificationTime", _I64), ("tags", STRING_MAP_TYPE)]
)
# Tombstones in checkpoints carry neither stats nor tags (they only serve VACUUM).
REMOVE_TYPE = pa.struct(
    [
        ("path", _STR),
        ("deletionTimestamp", _I64),
        ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()),
        ("partitionValues", STRING_MAP_TYPE),
        ("size", _I64),
        ("deletionVector", CHECKPOINT_DV_TYPE),
        ("baseRowId", _I64),
        ("defaultRowCommitVersion", _I64),
    ]
)


def add_type(
    *,
    stats_as_json: bool = True,
    partition_values_parsed: pa.StructType | None = None,
    stats_parsed: pa.StructType | None = None,
) -> pa.StructType:
    """The checkpoint's ``add`` struct for a table's stats settings."""
    fields: list[tuple[str, pa.DataType]] = [
        ("path", _STR),
        ("partitionValues", STRING_MAP_TYPE),
        ("size", _I64),
        ("modificationTime", _I64),
        ("dataChange", pa.bool_()),
        ("tags", STRING_MAP_TYPE),
        ("deletionVector", CHECKPOINT_DV_TYPE),
        ("baseRowId", _I64),
        ("defaultRowCommitVersion", _I64),
        ("clusteringProvider", _STR),
    ]
    if stats_as_json:
        fields.append(("stats", _STR))
    if partition_values_parsed is not None:
        fields.append(("partitionValues_parsed", partition_values_parsed))
    if stats_parsed is not None:
        fields.append(("stats_parsed", stats_parsed))
    return pa.struct(fields)


def checkpoint_schema(
    add: pa.StructType,
    *,
    v2: bool = False,
    file_actions: bool = True,
    non_file_actions: bool = True,
) -> pa.Schema:
    """Top-level checkpoint columns, in the order Spark writes them."""
    columns: list[tuple[str, pa.DataType]] = []
    if non_file_actions:
        columns.append(("txn", TXN_TYPE))
    if file_actions:
        columns += [("add", add), ("remove", REMOVE_TYPE)]
    if non_file_actions:
        columns += [("metaData", METADATA_TYPE), ("protocol", PROTOCOL_TYPE), ("domainMetadata", DOMAIN_METADATA_TYPE)]
        if v2:
            columns += [("checkpointMetadata", CHECKPOINT_METADATA_TYPE), ("sidecar", SIDECAR_TYPE)]
    return pa.schema(columns)


# ------------------------------------------------------------------------ file names


def checkpoint_file_name(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


def multipart_checkpoint_file_name(version: int, part: int, num_parts: int) -> str:
    """Part ``part`` (1-based) of ``num_parts``."""
    return f"{version:020d}.checkpoint.{part:010d}.{num_parts:010d}.parquet"


def v2_checkpoint_file_name(version: int, unique: str, file_format: str) -> str:
    return f"{version:020d}.checkpoint.{unique}.{file_format}"


def sidecar_file_name(version: int, part: int, num_parts: int, unique: str) -> str:
    # Any unique name is valid; Spark's convention makes the checkpoint version visible.
    return f"{version:020d}.checkpoint.{part:010d}.{num_parts:010d}.{unique}.parquet"


# ------------------------------------------------------------------ JSON checksum


def _url_encode(text: str) -> str:
    # The spec's strict form: every octet except A-Z a-z 0-9 - . _ ~ is %XX (uppercase).
    return quote(text.encode("utf-8"), safe="-._~")


def _canonical_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return f'"{_url_encode(value)}"'
    if isinstance(value, (int, float)):
        return json.dumps(value)
    raise TypeError(f"not a JSON value: {value!r}")


def _canonical_pairs(value: Any, path: str, out: list[tuple[bytes, str]]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            segment = f'"{_url_encode(str(key))}"'
            _canonical_pairs(item, f"{path}+{segment}" if path else segment, out)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _canonical_pairs(item, f"{path}+{index}" if path else str(index), out)
    else:
        out.append((path.encode("utf-8"), _canonical_scalar(value)))


def canonicalize_json(document: Mapping[str, Any]) -> str:
    """The protocol's canonical form of a ``_last_checkpoint`` object (top-level ``checksum`` ignored)."""
    pairs: list[tuple[bytes, str]] = []
    _canonical_pairs({k: v for k, v in document.items() if k != "checksum"}, "", pairs)
    pairs.sort(key=lambda pair: pair[0])
    return ",".join(f"{path.decode('utf-8')}={value}" for path, value in pairs)


def json_checksum(document: Mapping[str, Any]) -> str:
    """MD5 (hex) of :func:`canonicalize_json`: the ``checksum`` field of ``_last_checkpoint``."""
    return hashlib.md5(canonicalize_json(document).encode("utf-8")).hexdigest()


# --------------------------------------------------------------- _last_checkpoint


def last_checkpoint_path(root: str) -> str:
    return f"{root}/_delta_log/{LAST_CHECKPOINT_NAME}"


def read_last_checkpoint(io: FileIO, root: str) -> dict[str, Any] | None:
    """The parsed ``_last_checkpoint``, or None when it is missing, unparsable or fails its checksum.

    It is only a hint (readers must work without it), so a bad one is ignored, not raised.
    """
    path = last_checkpoint_path(root)
    try:
        raw = io.read_bytes(path)
    except (FileNotFoundError, OSError):
        return None
    try:
        document = json.loads(raw)
    except ValueError:
        log.warning("ignoring unparsable %s", path)
        return None
    if not isinstance(document, dict) or not isinstance(document.get("version"), int):
        return None
    stored = document.get("checksum")
    if stored is not None and stored != json_checksum(document):
        log.warning("ignoring %s: its checksum does not match its content", path)
        return None
    return document


def write_last_checkpoint(
    io: FileIO, root: str, document: Mapping[str, Any], *, allow_older: bool = False
) -> dict[str, Any]:
    """Write ``_last_checkpoint`` (with its checksum) unless it already points at a newer version.

    Returns the document as written (or the newer one that was kept). ``allow_older``
    is for repairing a hint whose checkpoint no longer exists.
    """
    current = read_last_checkpoint(io, root)
    if not allow_older and current is not None and current["version"] > document["version"]:
        return current
    body = {k: v for k, v in document.items() if k != "checksum" and v is not None}
    body["checksum"] = json_checksum(body)
    io.write_bytes(last_checkpoint_path(root), json.dumps(body, separators=(",", ":")).encode("utf-8"))
    return body


# -------------------------------------------------------------- Arrow -> Delta schema


def _delta_type(dtype: pa.DataType) -> Any:
    if pa.types.is_struct(dtype):
        return {"type": "struct", "fields": [_delta_field(dtype.field(i)) for i in range(dtype.num_fields)]}
    if pa.types.is_map(dtype):
        return {
            "type": "map",
            "keyType": _delta_type(dtype.key_type),
            "valueType": _delta_type(dtype.item_type),
            "valueContainsNull": True,
        }
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return {"type": "array", "elementType": _delta_type(dtype.value_type), "containsNull": True}
    if pa.types.is_decimal(dtype):
        return f"decimal({dtype.precision},{dtype.scale})"
    if pa.types.is_timestamp(dtype):
        return "timestamp" if dtype.tz is not None else "timestamp_ntz"
    simple = {
        pa.string(): "string",
        pa.large_string(): "string",
        pa.int64(): "long",
        pa.int32(): "integer",
        pa.int16(): "short",
        pa.int8(): "byte",
        pa.bool_(): "boolean",
        pa.float64(): "double",
        pa.float32(): "float",
        pa.date32(): "date",
        pa.binary(): "binary",
        pa.large_binary(): "binary",
    }
    if dtype in simple:
        return simple[dtype]
    raise TypeError(f"no Delta type for {dtype}")


def _delta_field(arrow_field: pa.Field) -> dict[str, Any]:
    return {"name": arrow_field.name, "type": _delta_type(arrow_field.type), "nullable": True, "metadata": {}}


def delta_schema_of(schema: pa.Schema) -> dict[str, Any] | None:
    """The checkpoint's parquet schema as Delta schema JSON (``checkpointSchema``), or None if too large."""
    try:
        document = {"type": "struct", "fields": [_delta_field(f) for f in schema]}
    except TypeError:
        return None
    if len(json.dumps(document, separators=(",", ":"))) > CHECKPOINT_SCHEMA_MAX_CHARS:
        return None
    return document


# ---------------------------------------------------------- Spark's Murmur3 hashing

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    return _rotl(k1 * _C1, 15) * _C2


def _mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    h1 = _rotl(h1 ^ k1, 13)
    return h1 * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: np.ndarray, length: np.ndarray) -> np.ndarray:
    h1 = h1 ^ length.astype(np.uint32)
    h1 ^= h1 >> np.uint32(16)
    h1 *= np.uint32(0x85EBCA6B)
    h1 ^= h1 >> np.uint32(13)
    h1 *= np.uint32(0xC2B2AE35)
    h1 ^= h1 >> np.uint32(16)
    return h1


def spark_murmur3_strings(values: pa.Array | pa.ChunkedArray, seeds: np.ndarray | int = _SPARK_HASH_SEED) -> np.ndarray:
    """Spark SQL's ``hash()`` of UTF-8 strings (Murmur3_x86_32, Spark's tail handling), vectorised.

    ``seeds`` chains the hash as Spark does for several columns; nulls keep their seed.
    Returns int32 hashes.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    values = values.cast(pa.large_string()) if not pa.types.is_large_string(values.type) else values
    n = len(values)
    seed_arr = np.full(n, seeds, dtype=np.int64) if np.isscalar(seeds) else np.asarray(seeds, dtype=np.int64)
    seed_u32 = (seed_arr & 0xFFFFFFFF).astype(np.uint32)
    if n == 0:
        return seed_u32.view(np.int32)
    _, offsets_buf, data_buf = values.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64, count=values.offset + n + 1)[values.offset :]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    valid = np.asarray(values.is_valid()) if values.null_count else np.ones(n, dtype=bool)
    h1 = seed_u32.copy()
    aligned = lengths - lengths % 4
    for block in range(0, int(aligned.max(initial=0)), 4):
        rows = np.nonzero(aligned > block)[0]
        pos = starts[rows] + block
        word = (
            data[pos].astype(np.uint32)
            | (data[pos + 1].astype(np.uint32) << np.uint32(8))
            | (data[pos + 2].astype(np.uint32) << np.uint32(16))
            | (data[pos + 3].astype(np.uint32) << np.uint32(24))
        )
        h1[rows] = _mix_h1(h1[rows], _mix_k1(word))
    for tail in range(3):
        rows = np.nonzero(lengths - aligned > tail)[0]
        # Spark feeds each trailing byte as a sign-extended int.
        byte = data[starts[rows] + aligned[rows] + tail].astype(np.int8).astype(np.int32).view(np.uint32)
        h1[rows] = _mix_h1(h1[rows], _mix_k1(byte))
    hashed = _fmix(h1, lengths)
    return np.where(valid, hashed, seed_u32).view(np.int32)


def _spark_partition_ids(paths: pa.ChunkedArray | pa.Array, dv_ids: pa.ChunkedArray | pa.Array | None, num_parts: int) -> np.ndarray:
    hashed = spark_murmur3_strings(paths)
    if dv_ids is not None:
        hashed = spark_murmur3_strings(dv_ids, hashed.astype(np.int64))
    return np.mod(hashed.astype(np.int64), num_parts)


# ------------------------------------------------------------------- atomic output


@contextmanager
def _atomic_file(io: FileIO, path: str) -> Iterator[Any]:
    """A writable file that appears at ``path`` only once complete.

    Local storage: a hidden ``.<name>.<uuid>.tmp`` beside the target, fsynced and renamed
    (readers ignore the hidden name, so a crash leaves nothing they would pick up).
    Other storage: buffered in memory and uploaded in one request on success, because a
    stream closed after a failure would publish a truncated object.
    """
    if isinstance(io, LocalFileIO):
        directory, name = posixpath.split(path)
        os.makedirs(directory, exist_ok=True)
        tmp = posixpath.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as out:
                yield out
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
    else:
        sink = pa.BufferOutputStream()
        yield sink
        io.write_bytes(path, sink.getvalue().to_pybytes())


@dataclass
class _WrittenFile:
    path: str
    size: int
    modification_time: int
    rows: int


def _write_parquet(io: FileIO, path: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> _WrittenFile:
    rows = 0
    # An empty part still gets a valid file: the writer writes schema and footer on close.
    with _atomic_file(io, path) as out, pq.ParquetWriter(
        out, schema, compression="snappy", write_statistics=False
    ) as writer:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            writer.write_batch(batch, row_group_size=WRITE_BATCH_ROWS)
            rows += batch.num_rows
    info = io.info(path)
    size = info.size if info is not None else 0
    mtime = info.modification_time if info is not None else int(time.time() * 1000)
    return _WrittenFile(path, size, mtime, rows)


# ----------------------------------------------------------------- row assembly


def _empty_map_for_nulls(values: pa.Array) -> pa.Array:
    """``partitionValues`` is required: null maps become empty ones."""
    if values.null_count == 0:
        return values
    # A null entry spans no items (equal offsets), so the same buffers read as empty maps.
    return pa.MapArray.from_arrays(values.offsets, values.keys, values.items, type=values.type)


class _NullCache:
    """All-null arrays for the unused action columns of a batch, reused across batches."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], pa.Array] = {}

    def get(self, n: int, dtype: pa.DataType) -> pa.Array:
        key = (n, str(dtype))
        arr = self._cache.get(key)
        if arr is None:
            arr = pa.nulls(n, dtype)
            self._cache[key] = arr
        return arr


@dataclass
class _Layout:
    """What the checkpoint's ``add`` column holds for this table, and how to fill it."""

    add: pa.StructType
    stats_as_json: bool
    parse_partitions: Callable[[pa.Array], pa.Array] | None = None
    parse_stats: Callable[[pa.Array], pa.Array] | None = None


def _false(n: int) -> pa.Array:
    return pa.array(np.zeros(n, dtype=bool), type=pa.bool_())


def _checkpoint_dv(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The descriptor struct plus a null ``maxRowIndex``, keeping the row validity."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    n = len(values)
    children = [values.field(i) for i in range(values.type.num_fields)] + [pa.nulls(n, _I64)]
    return pa.StructArray.from_arrays(
        children, fields=list(CHECKPOINT_DV_TYPE), mask=values.is_null() if values.null_count else None
    )


def _add_struct(batch: pa.RecordBatch, layout: _Layout) -> pa.StructArray:
    n = batch.num_rows
    children: dict[str, pa.Array] = {
        "path": batch.column("path"),
        "partitionValues": _empty_map_for_nulls(batch.column("partition_values")),
        "size": batch.column("size"),
        "modificationTime": batch.column("modification_time"),
        # A checkpoint restates the state; it is not itself a change (as Spark writes it).
        "dataChange": _false(n),
        "tags": batch.column("tags"),
        "deletionVector": _checkpoint_dv(batch.column("deletion_vector")),
        "baseRowId": batch.column("base_row_id"),
        "defaultRowCommitVersion": batch.column("default_row_commit_version"),
        "clusteringProvider": batch.column("clustering_provider"),
    }
    if layout.stats_as_json:
        children["stats"] = batch.column("stats")
    if layout.parse_partitions is not None:
        children["partitionValues_parsed"] = layout.parse_partitions(batch.column("partition_values"))
    if layout.parse_stats is not None:
        children["stats_parsed"] = layout.parse_stats(batch.column("stats"))
    fields = [layout.add.field(i) for i in range(layout.add.num_fields)]
    return pa.StructArray.from_arrays([children[f.name] for f in fields], fields=fields)


def _remove_struct(batch: pa.RecordBatch) -> pa.StructArray:
    n = batch.num_rows
    children = [
        batch.column("path"),
        batch.column("deletion_timestamp"),
        _false(n),
        batch.column("extended_file_metadata"),
        batch.column("partition_values"),
        batch.column("size"),
        _checkpoint_dv(batch.column("deletion_vector")),
        batch.column("base_row_id"),
        batch.column("default_row_commit_version"),
    ]
    return pa.StructArray.from_arrays(children, fields=list(REMOVE_TYPE))


def _file_action_batches(
    schema: pa.Schema, layout: _Layout, adds: pa.Table, removes: pa.Table, nulls: _NullCache
) -> Iterator[pa.RecordBatch]:
    for batch in adds.to_batches(max_chunksize=WRITE_BATCH_ROWS):
        if batch.num_rows:
            yield _batch_with(schema, batch.num_rows, {"add": _add_struct(batch, layout)}, nulls)
    for batch in removes.to_batches(max_chunksize=WRITE_BATCH_ROWS):
        if batch.num_rows:
            yield _batch_with(schema, batch.num_rows, {"remove": _remove_struct(batch)}, nulls)


def _batch_with(schema: pa.Schema, n: int, columns: Mapping[str, pa.Array], nulls: _NullCache) -> pa.RecordBatch:
    arrays = [columns[f.name] if f.name in columns else nulls.get(n, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _map_items(mapping: Mapping[str, Any] | None) -> list[tuple[str, Any]] | None:
    return list(mapping.items()) if mapping is not None else None


def _features(features: frozenset[str] | None, required: bool) -> list[str] | None:
    # Reader v3 / writer v7 tables must have non-null feature lists in checkpoints;
    # older protocols have none (null).
    if features is None:
        return [] if required else None
    return sorted(features)


def _non_file_rows(
    protocol: Protocol,
    metadata: Metadata,
    transactions: Sequence[SetTransaction],
    domains: Sequence[DomainMetadata],
    checkpoint_metadata: Mapping[str, Any] | None = None,
    sidecars: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Non-file actions as rows keyed by their checkpoint column (nested maps as item lists)."""
    rows: list[dict[str, Any]] = []
    if checkpoint_metadata is not None:
        rows.append(
            {"checkpointMetadata": {"version": checkpoint_metadata["version"], "tags": _map_items(checkpoint_metadata.get("tags"))}}
        )
    rows.append(
        {
            "protocol": {
                "minReaderVersion": protocol.min_reader_version,
                "minWriterVersion": protocol.min_writer_version,
                "readerFeatures": _features(protocol.reader_features, protocol.min_reader_version >= 3),
                "writerFeatures": _features(protocol.writer_features, protocol.min_writer_version >= 7),
            }
        }
    )
    rows.append(
        {
            "metaData": {
                "id": metadata.id,
                "name": metadata.name,
                "description": metadata.description,
                "format": {"provider": metadata.format.provider, "options": _map_items(metadata.format.options) or []},
                "schemaString": metadata.schema_string,
                "partitionColumns": list(metadata.partition_columns),
                "configuration": _map_items(metadata.configuration) or [],
                "createdTime": metadata.created_time,
            }
        }
    )
    for txn in transactions:
        rows.append({"txn": {"appId": txn.app_id, "version": txn.version, "lastUpdated": txn.last_updated}})
    for domain in domains:
        rows.append({"domainMetadata": {"domain": domain.domain, "configuration": domain.configuration, "removed": False}})
    for sidecar in sidecars:
        rows.append({"sidecar": {**sidecar, "tags": _map_items(sidecar.get("tags"))}})
    return rows


def _non_file_json_actions(
    protocol: Protocol,
    metadata: Metadata,
    transactions: Sequence[SetTransaction],
    domains: Sequence[DomainMetadata],
    checkpoint_metadata: Mapping[str, Any] | None = None,
    sidecars: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    actions: list[dict[str, Any]] = []
    if checkpoint_metadata is not None:
        actions.append({"checkpointMetadata": dict(checkpoint_metadata)})
    actions.append({"protocol": protocol.to_json()})
    actions.append({"metaData": metadata.to_json()})
    actions += [{"txn": t.to_json()} for t in transactions]
    actions += [{"domainMetadata": {"domain": d.domain, "configuration": d.configuration, "removed": False}} for d in domains]
    actions += [{"sidecar": dict(s)} for s in sidecars]
    return actions


# ------------------------------------------------------- stats_parsed / partitionValues_parsed


def _physical_name_map(schema_json: Mapping[str, Any]) -> dict[str, Any]:
    """logical name -> (physical name, nested map) for struct fields, from column-mapping metadata."""
    out: dict[str, Any] = {}
    for f in schema_json.get("fields", []):
        physical = (f.get("metadata") or {}).get("delta.columnMapping.physicalName", f["name"])
        nested = f.get("type")
        out[f["name"]] = (physical, _physical_name_map(nested) if isinstance(nested, dict) and nested.get("type") == "struct" else {})
    return out


def _rename_struct(arr: pa.Array, names: Mapping[str, Any]) -> pa.Array:
    if not pa.types.is_struct(arr.type) or not names:
        return arr
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    children = []
    fields = []
    for i in range(arr.type.num_fields):
        f = arr.type.field(i)
        physical, nested = names.get(f.name, (f.name, {}))
        child = _rename_struct(arr.field(i), nested)
        children.append(child)
        fields.append(pa.field(physical, child.type, f.nullable))
    return pa.StructArray.from_arrays(children, fields=fields, mask=arr.is_null() if arr.null_count else None)


def _stats_layout(metadata: Metadata, props: TableProperties) -> tuple[pa.StructType | None, Callable | None, pa.StructType | None, Callable | None]:
    """Types and parsers for ``partitionValues_parsed`` and ``stats_parsed`` (physical names).

    Uses the schema and stats modules; if either cannot handle this table, the struct
    columns are left out (and the JSON stats kept), which readers accept.
    """
    if not props.checkpoint_write_stats_as_struct:
        return None, None, None, None
    names = _physical_name_map(metadata.schema_json)
    pv_type = pv_parse = st_type = st_parse = None
    try:
        from airflow_delta.engine import stats as stats_module

        def parse_stats(values: pa.Array) -> pa.Array:
            parsed = stats_module.parse_stats(values, metadata)
            return _rename_stats(parsed, names)

        probe = parse_stats(pa.array([None], type=pa.string()))
        st_type, st_parse = probe.type, parse_stats
    except Exception as exc:
        log.warning("checkpoint: not writing stats_parsed (%s)", exc)
    if metadata.partition_columns:
        try:
            from airflow_delta.engine import schema as schema_module

            def parse_partitions(values: pa.Array) -> pa.Array:
                parsed = schema_module.parse_partition_values(values, metadata)
                return _rename_struct(parsed, {k: (v[0], {}) for k, v in names.items()})

            probe = parse_partitions(pa.array([[]], type=STRING_MAP_TYPE))
            pv_type, pv_parse = probe.type, parse_partitions
        except Exception as exc:
            log.warning("checkpoint: not writing partitionValues_parsed (%s)", exc)
            return None, None, None, None  # required together when partitioned: write neither
    return pv_type, pv_parse, st_type, st_parse


def _rename_stats(parsed: pa.Array, names: Mapping[str, Any]) -> pa.Array:
    if isinstance(parsed, pa.ChunkedArray):
        parsed = parsed.combine_chunks()
    children, fields = [], []
    for i in range(parsed.type.num_fields):
        f = parsed.type.field(i)
        child = parsed.field(i)
        if f.name in ("minValues", "maxValues", "nullCount"):
            child = _rename_struct(child, names)
        children.append(child)
        fields.append(pa.field(f.name, child.type, f.nullable))
    return pa.StructArray.from_arrays(children, fields=fields, mask=parsed.is_null() if parsed.null_count else None)


# ----------------------------------------------------------------- the writer


@dataclass(frozen=True)
class CheckpointResult:
    """What one checkpoint write produced; ``last_checkpoint`` is the ``_last_checkpoint`` body."""

    version: int
    kind: str  # "classic", "multi-part" or "v2"
    files: tuple[str, ...]
    sidecars: tuple[str, ...] = ()
    last_checkpoint: Mapping[str, Any] = field(default_factory=dict)


def live_tombstones(tombstones: pa.Table, retention_ms: int, now_ms: int) -> pa.Table:
    """Tombstones that have not expired: ``deletionTimestamp`` later than now minus the retention.

    A remove without a timestamp counts as removed at epoch 0 (long expired).
    """
    if tombstones.num_rows == 0:
        return tombstones
    ts = pc.fill_null(tombstones.column("deletion_timestamp"), 0)
    return tombstones.filter(pc.greater(ts, pa.scalar(now_ms - retention_ms, _I64)))


def _sorted_transactions(snapshot: Snapshot) -> list[SetTransaction]:
    return [snapshot.transactions[k] for k in sorted(snapshot.transactions)]


def _sorted_domains(snapshot: Snapshot) -> list[DomainMetadata]:
    return [d for k, d in sorted(snapshot.domain_metadata.items()) if not d.removed]


def _uses_v2(snapshot: Snapshot) -> bool:
    props: TableProperties = snapshot.properties
    if props.checkpoint_policy != "v2":
        return False
    if not (snapshot.protocol.has_reader_feature("v2Checkpoint") and snapshot.protocol.has_writer_feature("v2Checkpoint")):
        log.warning(
            "delta.checkpointPolicy=v2 but the protocol lacks the v2Checkpoint feature; writing a classic checkpoint"
        )
        return False
    return True


def _require_commit_written(snapshot: Snapshot) -> None:
    """A checkpoint may only follow its version's commit (protocol, "Checkpoints").

    The commit must exist now, or the version must already be checkpointed (its commit
    was then written and later cleaned up, as in tables Spark has trimmed).
    """
    version = snapshot.version
    if snapshot.log_segment.checkpoint_version == version:
        return
    commit = f"{snapshot.table_root}/_delta_log/{version:020d}.json"
    if snapshot.io.info(commit) is None:
        raise InvalidLogError(
            f"no commit file {commit}: refusing to checkpoint version {version}, whose commit is not "
            "(or no longer) in the log; load a fresh snapshot of the table and checkpoint that"
        )


def write_checkpoint(
    snapshot: Snapshot,
    *,
    part_size: int | None = DEFAULT_PART_SIZE,
    sidecar_size: int = DEFAULT_SIDECAR_SIZE,
    v2_format: str = "parquet",
    v2_classic_compat: bool = True,
    now_ms: int | None = None,
    update_last_checkpoint: bool = True,
) -> CheckpointResult:
    """Write a checkpoint of ``snapshot`` and then ``_last_checkpoint``.

    * ``delta.checkpointPolicy=v2`` (with the ``v2Checkpoint`` feature): a UUID-named
      top-level file (``v2_format`` ``parquet`` or ``json``) whose file actions live in
      ``_delta_log/_sidecars`` parquet files of at most ``sidecar_size`` actions; with
      ``v2_classic_compat`` also a classic-named V2 checkpoint referencing the same
      sidecars, so that clients without V2 support find the protocol and fail cleanly.
    * otherwise a classic checkpoint, or a multi-part one when the state holds more
      than ``part_size`` actions (parts clustered by Spark's hash of the file key, as
      the protocol requires, so part sizes are about, not exactly, ``part_size``).
    """
    if v2_format not in ("parquet", "json"):
        raise DeltaError(f"v2_format must be 'parquet' or 'json', not {v2_format!r}")
    io: FileIO = snapshot.io
    root: str = snapshot.table_root
    version: int = snapshot.version
    props: TableProperties = snapshot.properties
    now = int(time.time() * 1000) if now_ms is None else now_ms
    log_dir = f"{root}/_delta_log"
    _require_commit_written(snapshot)

    adds: pa.Table = snapshot.add_actions
    removes = live_tombstones(snapshot.tombstones, int(props.deleted_file_retention.total_seconds() * 1000), now)
    pv_type, pv_parse, st_type, st_parse = _stats_layout(snapshot.metadata, props)
    # Never drop the JSON stats unless the struct form carries them.
    stats_as_json = props.checkpoint_write_stats_as_json or st_parse is None
    layout = _Layout(
        add_type(stats_as_json=stats_as_json, partition_values_parsed=pv_type, stats_parsed=st_type),
        stats_as_json,
        pv_parse,
        st_parse,
    )
    txns = _sorted_transactions(snapshot)
    domains = _sorted_domains(snapshot)
    nulls = _NullCache()

    if _uses_v2(snapshot):
        result = _write_v2(
            snapshot, layout, adds, removes, txns, domains, nulls,
            sidecar_size=sidecar_size, file_format=v2_format, classic_compat=v2_classic_compat,
        )
    else:
        # Spark's rule: file actions (live files and kept tombstones) per part; the
        # handful of non-file actions do not count.
        file_actions = adds.num_rows + removes.num_rows
        num_parts = max(1, math.ceil(file_actions / part_size)) if part_size else 1
        if snapshot.protocol.has_writer_feature("v2Checkpoint"):
            num_parts = 1  # multi-part checkpoints are forbidden once v2Checkpoint is supported
        schema = checkpoint_schema(layout.add)
        non_file = pa.Table.from_pylist(_non_file_rows(snapshot.protocol, snapshot.metadata, txns, domains), schema=schema)
        if num_parts == 1:
            path = f"{log_dir}/{checkpoint_file_name(version)}"
            batches = _chain(non_file.to_batches(), _file_action_batches(schema, layout, adds, removes, nulls))
            written = [_write_parquet(io, path, schema, batches)]
            kind = "classic"
        else:
            written = _write_multipart(io, log_dir, version, num_parts, schema, layout, non_file, adds, removes, nulls, snapshot)
            kind = "multi-part"
        document: dict[str, Any] = {
            "version": version,
            "size": sum(w.rows for w in written),
            "parts": num_parts if num_parts > 1 else None,
            "sizeInBytes": sum(w.size for w in written),
            "numOfAddFiles": adds.num_rows,
            "checkpointSchema": delta_schema_of(schema),
        }
        result = CheckpointResult(version, kind, tuple(w.path for w in written), (), document)

    if update_last_checkpoint:
        written_doc = write_last_checkpoint(io, root, result.last_checkpoint)
        result = CheckpointResult(result.version, result.kind, result.files, result.sidecars, written_doc)
    return result


def _chain(*iterables: Any) -> Iterator[pa.RecordBatch]:
    for iterable in iterables:
        yield from iterable


def _write_multipart(
    io: FileIO,
    log_dir: str,
    version: int,
    num_parts: int,
    schema: pa.Schema,
    layout: _Layout,
    non_file: pa.Table,
    adds: pa.Table,
    removes: pa.Table,
    nulls: _NullCache,
    snapshot: Snapshot,
) -> list[_WrittenFile]:
    # The protocol requires Spark-style hash clustering by the file key so that racing
    # writers produce identical parts: (path, dvId) when the table supports DVs, else path.
    with_dv = snapshot.protocol.has_reader_feature("deletionVectors") or snapshot.protocol.has_writer_feature(
        "deletionVectors"
    )
    add_ids = _spark_partition_ids(adds.column("path"), adds.column("dv_id") if with_dv else None, num_parts)
    rm_ids = _spark_partition_ids(removes.column("path"), removes.column("dv_id") if with_dv else None, num_parts)
    # Non-file actions have a null key: Spark hashes null to the seed.
    non_file_part = _SPARK_HASH_SEED % num_parts
    written = []
    for part in range(num_parts):
        part_adds = adds.filter(pa.array(add_ids == part))
        part_removes = removes.filter(pa.array(rm_ids == part))
        head = non_file.to_batches() if part == non_file_part else []
        path = f"{log_dir}/{multipart_checkpoint_file_name(version, part + 1, num_parts)}"
        written.append(
            _write_parquet(io, path, schema, _chain(head, _file_action_batches(schema, layout, part_adds, part_removes, nulls)))
        )
        del part_adds, part_removes
    return written


def _write_v2(
    snapshot: Snapshot,
    layout: _Layout,
    adds: pa.Table,
    removes: pa.Table,
    txns: list[SetTransaction],
    domains: list[DomainMetadata],
    nulls: _NullCache,
    *,
    sidecar_size: int,
    file_format: str,
    classic_compat: bool,
) -> CheckpointResult:
    io: FileIO = snapshot.io
    version = snapshot.version
    log_dir = f"{snapshot.table_root}/_delta_log"
    sidecar_dir = f"{log_dir}/{SIDECAR_DIR_NAME}"
    side_schema = checkpoint_schema(layout.add, file_actions=True, non_file_actions=False)

    # 1. sidecars: all file actions, in slices of at most sidecar_size rows.
    total_files = adds.num_rows + removes.num_rows
    num_sidecars = math.ceil(total_files / sidecar_size) if total_files else 0
    sidecars: list[_WrittenFile] = []
    for index in range(num_sidecars):
        start, stop = index * sidecar_size, min((index + 1) * sidecar_size, total_files)
        part_adds = adds.slice(start, max(0, min(stop, adds.num_rows) - start)) if start < adds.num_rows else adds.slice(0, 0)
        rm_start = max(0, start - adds.num_rows)
        rm_stop = max(0, stop - adds.num_rows)
        part_removes = removes.slice(rm_start, rm_stop - rm_start)
        name = sidecar_file_name(version, index + 1, num_sidecars, str(uuid.uuid4()))
        sidecars.append(
            _write_parquet(io, f"{sidecar_dir}/{name}", side_schema, _file_action_batches(side_schema, layout, part_adds, part_removes, nulls))
        )
    sidecar_actions = [
        {"path": posixpath.basename(s.path), "sizeInBytes": s.size, "modificationTime": s.modification_time}
        for s in sidecars
    ]
    tags = {
        "sidecarNumActions": str(sum(s.rows for s in sidecars)),
        "sidecarSizeInBytes": str(sum(s.size for s in sidecars)),
        "numOfAddFiles": str(adds.num_rows),
    }
    # Spark records the sidecars' schema too (left out when too large, as Spark does).
    sidecar_schema_doc = delta_schema_of(side_schema)
    if sidecar_schema_doc is not None:
        tags["sidecarFileSchema"] = json.dumps(sidecar_schema_doc, separators=(",", ":"))
    checkpoint_metadata = {"version": version, "tags": tags}
    protocol, metadata = snapshot.protocol, snapshot.metadata

    # 2. the top-level file, only once every sidecar it names exists.
    top_schema = checkpoint_schema(layout.add, v2=True)
    top_rows = _non_file_rows(protocol, metadata, txns, domains, checkpoint_metadata, sidecar_actions)
    unique = str(uuid.uuid4())
    top_path = f"{log_dir}/{v2_checkpoint_file_name(version, unique, file_format)}"
    if file_format == "json":
        lines = _non_file_json_actions(protocol, metadata, txns, domains, checkpoint_metadata, sidecar_actions)
        payload = ("\n".join(json.dumps(a, separators=(",", ":")) for a in lines) + "\n").encode("utf-8")
        with _atomic_file(io, top_path) as out:
            out.write(payload)
        info = io.info(top_path)
        top = _WrittenFile(top_path, info.size if info else len(payload), info.modification_time if info else 0, len(lines))
        checkpoint_schema_doc = None
    else:
        table = pa.Table.from_pylist(top_rows, schema=top_schema)
        top = _write_parquet(io, top_path, top_schema, iter(table.to_batches()))
        checkpoint_schema_doc = delta_schema_of(top_schema)
    files = [top_path]

    # 3. a classic-named V2 checkpoint with the same content, for clients that only
    # look for classic names (they find the protocol and fail with a clear error).
    if classic_compat:
        compat_path = f"{log_dir}/{checkpoint_file_name(version)}"
        table = pa.Table.from_pylist(top_rows, schema=top_schema)
        _write_parquet(io, compat_path, top_schema, iter(table.to_batches()))
        files.append(compat_path)

    non_file_actions = _non_file_json_actions(protocol, metadata, txns, domains, None)
    non_file_actions.append({"checkpointMetadata": checkpoint_metadata})
    v2_info: dict[str, Any] = {
        "path": posixpath.basename(top_path),
        "sizeInBytes": top.size,
        "modificationTime": top.modification_time,
    }
    if len(non_file_actions) <= LAST_CHECKPOINT_MAX_NON_FILE_ACTIONS:
        v2_info["nonFileActions"] = non_file_actions
    if len(sidecar_actions) <= LAST_CHECKPOINT_MAX_SIDECARS:
        v2_info["sidecarFiles"] = sidecar_actions
    document = {
        "version": version,
        "size": top.rows + sum(s.rows for s in sidecars),
        "sizeInBytes": top.size + sum(s.size for s in sidecars),
        "numOfAddFiles": adds.num_rows,
        "v2Checkpoint": v2_info,
        "checkpointSchema": checkpoint_schema_doc,
    }
    return CheckpointResult(version, "v2", tuple(files), tuple(s.path for s in sidecars), document)


# --------------------------------------------------------------- table-level API


# Writer features whose tables we may checkpoint and clean up: they constrain data
# writes, or they are carried in actions and fields a checkpoint copies (baseRowId,
# defaultRowCommitVersion, clusteringProvider, domainMetadata, deletionVector). Any
# other writer feature (checkpointProtection, catalogManaged, one added after this
# was written) may change what a checkpoint must hold or what cleanup may delete.
LOG_MAINTENANCE_WRITER_FEATURES: frozenset[str] = frozenset(
    {
        "appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
        "columnMapping", "identityColumns", "deletionVectors", "rowTracking", "timestampNtz",
        "domainMetadata", "v2Checkpoint", "icebergCompatV1", "icebergCompatV2", "clustering",
        "liquid", "vacuumProtocolCheck", "typeWidening", "typeWidening-preview", "inCommitTimestamp",
        "allowColumnDefaults", "variantType", "variantType-preview", "variantShredding",
        "variantShredding-preview",
    }
)


def check_log_maintenance_supported(protocol: Protocol) -> None:
    """Refuse to checkpoint or clean up a table we cannot read, or with a writer feature that may govern either."""
    from airflow_delta.engine.errors import UnsupportedFeatureError
    from airflow_delta.engine.protocol import check_readable, writer_features

    check_readable(protocol)
    unknown = writer_features(protocol) - LOG_MAINTENANCE_WRITER_FEATURES
    if unknown:
        raise UnsupportedFeatureError(
            sorted(unknown), access="write", detail="checkpoints and log cleanup are refused for these features"
        )


def create_checkpoint(table: DeltaTable, version: int | None = None, **options: Any) -> int:
    """Checkpoint ``version`` (default: the latest) of ``table``; returns the version checkpointed."""
    snapshot = table.snapshot(version)
    check_log_maintenance_supported(snapshot.protocol)
    write_checkpoint(snapshot, **options)
    return snapshot.version


def should_checkpoint(version: int, properties: TableProperties) -> bool:
    """Automatic checkpoints: every ``delta.checkpointInterval`` versions, never at version 0."""
    return version > 0 and version % properties.checkpoint_interval == 0


def post_commit(
    table: DeltaTable,
    version_or_snapshot: int | Snapshot,
    *,
    actions: Sequence[Mapping[str, Any]] | None = None,
    now_ms: int | None = None,
) -> None:
    """Hooks after a successful commit: ``.crc`` file, automatic checkpoint, log cleanup.

    ``version_or_snapshot`` is the committed version, or the snapshot at it when the
    caller already has one (then nothing is re-read). ``actions`` are the commit's
    actions as JSON objects, if the caller has them. Failures are logged, never raised:
    the commit itself has already succeeded.
    """
    from airflow_delta.engine import crc

    snapshot = None if isinstance(version_or_snapshot, int) else version_or_snapshot
    version = version_or_snapshot if isinstance(version_or_snapshot, int) else version_or_snapshot.version
    try:
        crc.write_checksum_after_commit(table.io, table.root, version, actions=actions, snapshot=snapshot)
    except Exception:
        log.warning("post-commit: could not write the .crc file of version %d", version, exc_info=True)
    try:
        properties = snapshot.properties if snapshot is not None else _properties_at(table, version, actions)
        if properties is None or not should_checkpoint(version, properties):
            return
        if snapshot is None:
            snapshot = table.snapshot(version)
            try:  # the state is loaded now: seed the .crc chain if it was not derivable
                crc.write_checksum_after_commit(table.io, table.root, version, actions=actions, snapshot=snapshot)
            except Exception:
                log.warning("post-commit: could not write the .crc file of version %d", version, exc_info=True)
        check_log_maintenance_supported(snapshot.protocol)
        write_checkpoint(snapshot, now_ms=now_ms)
    except Exception:
        log.warning("post-commit: could not checkpoint version %d", version, exc_info=True)
        return
    if snapshot.properties.enable_expired_log_cleanup:
        try:
            from airflow_delta.engine.log_cleanup import cleanup_log

            cleanup_log(table, now=now_ms, snapshot=snapshot)
        except Exception:
            log.warning("post-commit: log cleanup after checkpoint %d failed", version, exc_info=True)


def _properties_at(table: DeltaTable, version: int, actions: Sequence[Mapping[str, Any]] | None) -> TableProperties | None:
    """Table properties at ``version`` without a full replay when cheaply known.

    The commit's own metaData, else the version's ``.crc``, else a replay of the
    non-file actions only; None if the log cannot be replayed.
    """
    from airflow_delta.engine import crc

    for action in actions or ():
        if "metaData" in action:
            return TableProperties.from_configuration(Metadata.from_json(action["metaData"]).configuration)
    checksum = crc.read_version_checksum(table.io, table.root, version)
    if checksum is not None and isinstance(checksum.get("metadata"), Mapping):
        return TableProperties.from_configuration(Metadata.from_json(checksum["metadata"]).configuration)
    # Protocol and metadata only: replay without file actions.
    from airflow_delta.engine.log.listing import list_log_segment
    from airflow_delta.engine.log.replay import replay

    try:
        state = replay(table.io, list_log_segment(table.io, table.root, version), file_actions=False)
    except InvalidLogError:
        return None
    return TableProperties.from_configuration(state.metadata.configuration)


__all__ = [
    "LOG_MAINTENANCE_WRITER_FEATURES",
    "CheckpointResult",
    "canonicalize_json",
    "check_log_maintenance_supported",
    "checkpoint_schema",
    "create_checkpoint",
    "json_checksum",
    "live_tombstones",
    "post_commit",
    "read_last_checkpoint",
    "spark_murmur3_strings",
    "write_checkpoint",
    "write_last_checkpoint",
]
