"""The checkpoint's parquet schema (protocol, "Checkpoint Schema") and its Delta JSON form.

One struct column per action type, in the order Spark writes them. The Delta JSON form
of the parquet schema is what ``_last_checkpoint`` records as ``checkpointSchema``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from airflow_delta.engine.model.actions import DELETION_VECTOR_TYPE, STRING_MAP_TYPE
from airflow_delta.engine.model.json_text import json_text

# checkpointSchema is left out of _last_checkpoint above this many JSON characters
# (the file is read on every table load, so it should stay small).
CHECKPOINT_SCHEMA_MAX_CHARS = 20_000

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
    if len(json_text(document)) > CHECKPOINT_SCHEMA_MAX_CHARS:
        return None
    return document

