"""Delta schemas as Arrow: the log's schema JSON to a ``pa.Schema`` and back.

The log records the schema as Spark-style JSON (protocol appendix "Schema Serialization
Format"). :func:`schema_to_arrow` turns it into a ``pa.Schema`` with logical names (or physical
names and parquet field ids, for writing data files), and :func:`arrow_to_delta_schema` goes
back. Each field's Delta metadata travels in the Arrow field metadata so that column mapping,
invariants, generated columns and identity columns survive a round trip. The column mapping
itself (modes, physical names, field ids per column) is
:mod:`~airflow_delta.engine.model.column_mapping`; partition values are
:mod:`~airflow_delta.engine.model.partition_values`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from airflow_delta.engine.errors import (
    InvalidLogError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from airflow_delta.engine.model import log_json
from airflow_delta.engine.model.json_text import json_text

# Keys of the column metadata that carry column mapping.
PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
FIELD_ID_KEY = "delta.columnMapping.id"
# Where pyarrow.parquet reads and writes a column's parquet field_id.
PARQUET_FIELD_ID_KEY = "PARQUET:field_id"

# Name of the list element / map entry children in the Arrow types we build; these are
# the names the parquet LIST and MAP logical types use.
LIST_ELEMENT_NAME = "element"
MAP_KEY_NAME = "key"
MAP_VALUE_NAME = "value"

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
TIMESTAMP_NTZ_TYPE = pa.timestamp("us")

# A Delta ``variant`` as Arrow: the unshredded parquet layout (protocol "Variant data in
# Parquet"), exposed raw as the protocol's "Alternate" allows. Field order and
# nullability are delta-rs's (Spark writes ``value`` first; the scan reorders).
VARIANT_METADATA_NAME = "metadata"
VARIANT_VALUE_NAME = "value"
VARIANT_TYPE = pa.struct(
    [
        pa.field(VARIANT_METADATA_NAME, pa.binary(), nullable=False),
        pa.field(VARIANT_VALUE_NAME, pa.binary(), nullable=False),
    ]
)

_PRIMITIVES: Mapping[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": TIMESTAMP_TYPE,
    "timestamp_ntz": TIMESTAMP_NTZ_TYPE,
    # The protocol leaves ``void`` undefined; old tables may hold it. Spark drops such
    # columns on read; we keep them as an all-null column so that no column vanishes.
    "void": pa.null(),
}
_DECIMAL_RE = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")
_MAX_DECIMAL_PRECISION = 38

# Column metadata whose values are strings by definition. Their Arrow metadata value is
# the string itself and is never JSON-decoded on the way back (an invariant such as
# ``{"expression": ...}`` or a default such as ``1`` must stay a string).
_STRING_METADATA_KEYS = frozenset(
    {
        PHYSICAL_NAME_KEY,
        "comment",
        "delta.invariants",
        "delta.generationExpression",
        "CURRENT_DEFAULT",
        "EXISTS_DEFAULT",
        "__CHAR_VARCHAR_TYPE_STRING",
    }
)
# Arrow/parquet bookkeeping keys that are not Delta column metadata.
_NON_DELTA_METADATA_PREFIXES = ("PARQUET:", "ARROW:")


# ============================================================================ schema JSON -> Arrow


def delta_type_to_arrow(t: str | Mapping[str, Any], physical: bool = False) -> pa.DataType:
    """The Arrow type of a Delta type (a primitive name or a struct/array/map definition).

    With ``physical=True`` nested struct fields carry their physical names (column
    mapping) and ``PARQUET:field_id`` metadata, as data files are written.
    """
    if isinstance(t, str):
        primitive = _PRIMITIVES.get(t)
        if primitive is not None:
            return primitive
        match = _DECIMAL_RE.match(t)
        if match:
            precision, scale = int(match.group(1)), int(match.group(2))
            if not 0 < precision <= _MAX_DECIMAL_PRECISION or scale > precision:
                raise InvalidLogError(f"invalid decimal type {t!r} in the table schema: precision must be 1..38 and scale <= precision")
            return pa.decimal128(precision, scale)
        if t == "decimal":  # Spark's default precision and scale
            return pa.decimal128(10, 0)
        if t == "variant":
            return VARIANT_TYPE
        if t.startswith("interval"):
            raise UnsupportedFeatureError([f"type {t!r}"], access="read", detail="interval types are not implemented")
        raise UnsupportedFeatureError([f"type {t!r}"], access="read", detail="the schema uses a data type this engine does not know")
    if not isinstance(t, Mapping):
        raise InvalidLogError(f"invalid type {t!r} in the table schema: expected a type name or an object")
    kind = t.get("type")
    if kind == "struct":
        return pa.struct([_arrow_field(f, physical) for f in t.get("fields", [])])
    if kind == "array":
        element = delta_type_to_arrow(t["elementType"], physical)
        return pa.list_(pa.field(LIST_ELEMENT_NAME, element, nullable=bool(t.get("containsNull", True))))
    if kind == "map":
        key = delta_type_to_arrow(t["keyType"], physical)
        value = delta_type_to_arrow(t["valueType"], physical)
        return pa.map_(
            pa.field(MAP_KEY_NAME, key, nullable=False),
            pa.field(MAP_VALUE_NAME, value, nullable=bool(t.get("valueContainsNull", True))),
        )
    if isinstance(kind, str):
        # e.g. {"type": "variant"}: the protocol's own example writes variant this way.
        return delta_type_to_arrow(kind, physical)
    raise InvalidLogError(f"invalid type {dict(t)!r} in the table schema")


def _arrow_field(f: Mapping[str, Any], physical: bool) -> pa.Field:
    try:
        name = f["name"]
        delta_type = f["type"]
    except (KeyError, TypeError) as exc:
        raise InvalidLogError(f"invalid field {f!r} in the table schema: {exc}") from exc
    metadata: Mapping[str, Any] = f.get("metadata") or {}
    arrow_meta = encode_field_metadata(metadata)
    if physical:
        name = metadata.get(PHYSICAL_NAME_KEY) or name
        if metadata.get(FIELD_ID_KEY) is not None:
            arrow_meta[PARQUET_FIELD_ID_KEY] = str(int(metadata[FIELD_ID_KEY]))
    return pa.field(
        str(name),
        delta_type_to_arrow(delta_type, physical),
        nullable=bool(f.get("nullable", True)),
        metadata=arrow_meta or None,
    )


def schema_to_arrow(schema_json: Mapping[str, Any] | str, physical: bool = False) -> pa.Schema:
    """The Arrow schema of a Delta schema (the parsed or raw ``schemaString``).

    Logical names by default; ``physical=True`` gives the names and parquet field ids
    data files are written with under column mapping (without partition pruning: the
    caller drops partition columns). Field metadata holds the Delta column metadata.
    """
    parsed = parse_schema_json(schema_json)
    return pa.schema([_arrow_field(f, physical) for f in parsed.get("fields", [])])


def parse_schema_json(schema_json: Mapping[str, Any] | str) -> Mapping[str, Any]:
    if isinstance(schema_json, str):
        try:
            parsed = log_json.loads(schema_json)
        except ValueError as exc:
            raise InvalidLogError(f"the table's schemaString is not valid JSON: {exc}") from exc
    else:
        parsed = schema_json
    if not isinstance(parsed, Mapping) or parsed.get("type") != "struct":
        raise InvalidLogError("the table's schemaString must be a JSON struct type with 'fields'")
    _check_type_shape(parsed, "schemaString")
    return parsed


# Deeper nesting than this is refused (Spark's own parsers stop far earlier); it keeps
# every recursive walk of a schema (here, column mapping, statistics) within Python's stack.
MAX_SCHEMA_DEPTH = 200


def _check_type_shape(t: Any, where: str, depth: int = 0) -> None:
    """Refuse a schema whose JSON shape breaks the protocol's schema serialisation.

    Every walk of a schema (Arrow conversion, column mapping, statistics columns) relies
    on this shape: ``fields`` a list of objects with a string ``name`` and a ``type``,
    ``metadata`` an object, ``elementType`` / ``keyType`` / ``valueType`` present.
    Iterative over the nesting is not needed: :data:`MAX_SCHEMA_DEPTH` bounds it.
    """
    if depth > MAX_SCHEMA_DEPTH:
        raise InvalidLogError(f"the table's schemaString nests types deeper than {MAX_SCHEMA_DEPTH} levels (at {where})")
    if isinstance(t, str):
        return
    if not isinstance(t, Mapping):
        raise InvalidLogError(f"invalid type {t!r} at {where} in the table's schemaString: expected a type name or an object")
    kind = t.get("type")
    if kind == "struct":
        fields = t.get("fields")
        if not isinstance(fields, list):
            raise InvalidLogError(
                f"invalid struct at {where} in the table's schemaString: 'fields' must be a JSON array of fields, "
                f"found {fields!r}"
            )
        for index, f in enumerate(fields):
            here = f"{where}.fields[{index}]"
            if not isinstance(f, Mapping) or not isinstance(f.get("name"), str) or "type" not in f:
                raise InvalidLogError(
                    f"invalid field {f!r} at {here} in the table's schemaString: expected an object with a string "
                    "'name' and a 'type'"
                )
            metadata = f.get("metadata")
            if metadata is not None and not isinstance(metadata, Mapping):
                raise InvalidLogError(f"invalid metadata {metadata!r} of field {f['name']!r} at {here}: expected an object")
            if not isinstance(f.get("nullable", True), bool):
                raise InvalidLogError(f"invalid 'nullable' {f.get('nullable')!r} of field {f['name']!r} at {here}: expected a boolean")
            _check_type_shape(f["type"], f"{here}.type", depth + 1)
    elif kind == "array":
        if "elementType" not in t:
            raise InvalidLogError(f"invalid array type at {where} in the table's schemaString: 'elementType' is missing")
        _check_type_shape(t["elementType"], f"{where}.elementType", depth + 1)
    elif kind == "map":
        for part in ("keyType", "valueType"):
            if part not in t:
                raise InvalidLogError(f"invalid map type at {where} in the table's schemaString: '{part}' is missing")
            _check_type_shape(t[part], f"{where}.{part}", depth + 1)
    elif not isinstance(kind, str):
        raise InvalidLogError(f"invalid type {dict(t)!r} at {where} in the table's schemaString: 'type' must be a string")


def encode_field_metadata(metadata: Mapping[str, Any]) -> dict[str, str]:
    """Delta column metadata as Arrow field metadata: strings as is, anything else as JSON."""
    out: dict[str, str] = {}
    for key, value in metadata.items():
        out[str(key)] = value if isinstance(value, str) else json_text(value)
    return out


def decode_field_metadata(metadata: Mapping[bytes | str, bytes | str] | None) -> dict[str, Any]:
    """Arrow field metadata back to Delta column metadata (inverse of :func:`encode_field_metadata`).

    Parquet/Arrow bookkeeping keys (``PARQUET:field_id``, ``ARROW:*``) are dropped.
    Values are JSON-decoded unless the key is known to hold a string, or the decoded
    value would itself be a string.
    """
    out: dict[str, Any] = {}
    for raw_key, raw_value in (metadata or {}).items():
        key = raw_key.decode() if isinstance(raw_key, bytes) else raw_key
        value = raw_value.decode() if isinstance(raw_value, bytes) else raw_value
        if key.startswith(_NON_DELTA_METADATA_PREFIXES):
            continue
        if key in _STRING_METADATA_KEYS:
            out[key] = value
            continue
        try:
            decoded = log_json.loads(value)
        except ValueError:
            decoded = value
        out[key] = value if isinstance(decoded, str) else decoded
    return out


# ============================================================================ Arrow -> schema JSON


def arrow_to_delta_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Delta schema (as a JSON-ready dict) of an Arrow schema.

    Widths map to Delta's: ``uint8/16/32`` widen to ``short/integer/long``; string and
    binary variants (large, view) map to ``string``/``binary``; dictionary types to their
    values; tz-aware timestamps to ``timestamp`` and naive ones to ``timestamp_ntz``.
    Types Delta cannot store raise :class:`SchemaMismatchError`.

    An Arrow struct of two binaries ``metadata`` and ``value`` stays a ``struct``: Arrow
    cannot tell a variant read by :func:`schema_to_arrow` from a user's struct of that
    shape, and a struct is the reading that never changes what the user wrote.
    """
    return {"type": "struct", "fields": [_delta_field(f, (f.name,)) for f in schema]}


def _delta_field(f: pa.Field, path: tuple[str, ...]) -> dict[str, Any]:
    return {
        "name": f.name,
        "type": _delta_type(f.type, path),
        "nullable": bool(f.nullable),
        "metadata": decode_field_metadata(f.metadata),
    }


def _delta_type(t: pa.DataType, path: tuple[str, ...]) -> str | dict[str, Any]:
    where = ".".join(path)
    if pa.types.is_dictionary(t):
        return _delta_type(t.value_type, path)
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t):
        return "byte"
    if pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "short"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "long"
    if pa.types.is_uint64(t):
        raise SchemaMismatchError(
            f"column {where!r} is uint64, which Delta cannot store without loss; cast it to int64 or decimal(20,0)"
        )
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_decimal(t):
        if t.precision > _MAX_DECIMAL_PRECISION:
            raise SchemaMismatchError(f"column {where!r} is {t}; Delta decimals have at most 38 digits of precision")
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return "binary"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_delta_field(t.field(i), (*path, t.field(i).name)) for i in range(t.num_fields)]}
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": _delta_type(t.key_type, (*path, "key")),
            "valueType": _delta_type(t.item_type, (*path, "value")),
            "valueContainsNull": bool(t.item_field.nullable),
        }
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return {
            "type": "array",
            "elementType": _delta_type(t.value_type, (*path, "element")),
            "containsNull": bool(t.value_field.nullable),
        }
    raise SchemaMismatchError(f"column {where!r} has Arrow type {t}, which Delta cannot store")
