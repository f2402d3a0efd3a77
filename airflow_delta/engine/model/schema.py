"""Delta schemas as Arrow, column mapping, and partition value (de)serialisation.

Three things live here, all driven by the table's ``metaData``:

* **Schema conversion.** The log records the schema as Spark-style JSON (protocol appendix
  "Schema Serialization Format"). :func:`schema_to_arrow` turns it into a ``pa.Schema``
  with logical names (or physical names, for writing data files), and
  :func:`arrow_to_delta_schema` goes back. Each field's Delta metadata travels in the
  Arrow field metadata so that column mapping, invariants, generated columns and
  identity columns survive a round trip.
* **Column mapping** (protocol "Column Mapping"). :class:`ColumnMapping` knows the mode
  (``none``, ``name``, ``id``) and, for every column at every nesting level, its logical
  name, physical name and field id.
* **Partition values** (protocol appendix "Partition Value Serialization"). The log stores
  them as strings keyed by physical column name; :func:`parse_partition_values` turns a
  whole column of such maps into typed Arrow in one vectorised pass, and
  :func:`serialize_partition_value` writes one value the way Spark and delta-rs read it.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import (
    InvalidLogError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)

if TYPE_CHECKING:
    from airflow_delta.engine.model.actions import Metadata, Protocol

# Keys of the column metadata that carry column mapping.
PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
FIELD_ID_KEY = "delta.columnMapping.id"
# Where pyarrow.parquet reads and writes a column's parquet field_id.
PARQUET_FIELD_ID_KEY = "PARQUET:field_id"
COLUMN_MAPPING_MODE_KEY = "delta.columnMapping.mode"
COLUMN_MAPPING_MODES = ("none", "name", "id")

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
    parsed = _parse_schema_json(schema_json)
    return pa.schema([_arrow_field(f, physical) for f in parsed.get("fields", [])])


def _parse_schema_json(schema_json: Mapping[str, Any] | str) -> Mapping[str, Any]:
    if isinstance(schema_json, str):
        try:
            parsed = json.loads(schema_json)
        except ValueError as exc:
            raise InvalidLogError(f"the table's schemaString is not valid JSON: {exc}") from exc
    else:
        parsed = schema_json
    if not isinstance(parsed, Mapping) or parsed.get("type") != "struct":
        raise InvalidLogError("the table's schemaString must be a JSON struct type with 'fields'")
    return parsed


def encode_field_metadata(metadata: Mapping[str, Any]) -> dict[str, str]:
    """Delta column metadata as Arrow field metadata: strings as is, anything else as JSON."""
    out: dict[str, str] = {}
    for key, value in metadata.items():
        out[str(key)] = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
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
            decoded = json.loads(value)
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


# ============================================================================ column mapping


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """One column at any nesting level: its logical and physical name and field id."""

    logical_name: str
    physical_name: str
    field_id: int | None


@dataclass(frozen=True)
class ColumnMapping:
    """The table's column mapping: mode and every column's physical name and field id.

    Paths are tuples of struct field names from the top level down; arrays and maps are
    crossed transparently (the path to ``d`` in ``e: array<struct<d>>`` is ``("e", "d")``).
    In mode ``none`` every physical name is the logical name.
    """

    mode: str
    logical_schema: pa.Schema
    physical_schema: pa.Schema
    _by_logical: Mapping[tuple[str, ...], ColumnInfo] = field(repr=False)
    _by_physical: Mapping[tuple[str, ...], tuple[str, ...]] = field(repr=False)

    @classmethod
    def from_metadata(cls, metadata: Metadata, protocol: Protocol | None = None) -> ColumnMapping:
        """The mapping of ``metadata``; with ``protocol``, the mode is honoured only if the
        protocol supports column mapping (reader version 2, or the ``columnMapping`` feature)."""
        mode = column_mapping_mode(metadata, protocol)
        return _cached_mapping(metadata.schema_string, mode)

    @classmethod
    def from_schema(cls, schema_json: Mapping[str, Any] | str, mode: str) -> ColumnMapping:
        if mode not in COLUMN_MAPPING_MODES:
            raise InvalidLogError(f"unknown column mapping mode {mode!r}: expected one of none, name, id")
        if isinstance(schema_json, str):
            return _cached_mapping(schema_json, mode)
        return _build_mapping(_parse_schema_json(schema_json), mode)

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    def column(self, path: str | Sequence[str]) -> ColumnInfo:
        key = (path,) if isinstance(path, str) else tuple(path)
        try:
            return self._by_logical[key]
        except KeyError:
            raise SchemaMismatchError(f"no column {'.'.join(key)!r} in the table schema") from None

    def physical_name(self, logical: str | Sequence[str]) -> str:
        """The physical name of a top-level column (or of the last element of a path)."""
        return self.column(logical).physical_name

    def physical_path(self, logical_path: Sequence[str]) -> tuple[str, ...]:
        path = tuple(logical_path)
        return tuple(self.column(path[: i + 1]).physical_name for i in range(len(path)))

    def field_id(self, logical: str | Sequence[str]) -> int | None:
        return self.column(logical).field_id

    def logical_path(self, physical_path: Sequence[str]) -> tuple[str, ...]:
        key = tuple(physical_path)
        try:
            return self._by_physical[key]
        except KeyError:
            raise SchemaMismatchError(f"no column with physical name {'.'.join(key)!r} in the table schema") from None

    def logical_name(self, physical: str) -> str:
        return self.logical_path((physical,))[-1]

    def to_physical(self, data: pa.Table) -> pa.Table:
        """``data`` (logical names, table column order) renamed to physical names, nested too.

        Zero-copy when the columns already have the table's types (only names and parquet
        field ids change); other types are cast to the table's first.
        """
        fields = []
        columns = []
        for name, column in zip(data.column_names, data.columns, strict=True):
            index = self.logical_schema.get_field_index(name)
            if index < 0:
                raise SchemaMismatchError(f"column {name!r} is not in the table schema")
            logical_type = self.logical_schema.field(index).type
            target = self.physical_schema.field(index)
            if column.type != logical_type:
                try:
                    column = column.cast(logical_type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                    raise SchemaMismatchError(f"column {name!r} ({column.type}) cannot be stored as {logical_type}: {exc}") from exc
            fields.append(target)
            columns.append(pa.chunked_array([chunk.view(target.type) for chunk in column.chunks], type=target.type))
        return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def column_mapping_mode(metadata: Metadata, protocol: Protocol | None = None) -> str:
    """``delta.columnMapping.mode`` of the table (``none`` when unset or not supported by ``protocol``)."""
    raw = metadata.configuration.get(COLUMN_MAPPING_MODE_KEY)
    mode = raw.strip().lower() if raw else "none"
    if mode not in COLUMN_MAPPING_MODES:
        raise InvalidLogError(f"table property {COLUMN_MAPPING_MODE_KEY}={raw!r} is invalid: expected none, name or id")
    if protocol is not None and mode != "none":
        supported = protocol.min_reader_version == 2 or (
            protocol.min_reader_version >= 3 and protocol.has_reader_feature("columnMapping")
        )
        if not supported:
            return "none"
    return mode


@functools.lru_cache(maxsize=64)
def _cached_mapping(schema_string: str, mode: str) -> ColumnMapping:
    return _build_mapping(_parse_schema_json(schema_string), mode)


def _build_mapping(schema_json: Mapping[str, Any], mode: str) -> ColumnMapping:
    logical = schema_to_arrow(schema_json)
    physical = schema_to_arrow(schema_json, physical=True) if mode != "none" else logical
    by_logical: dict[tuple[str, ...], ColumnInfo] = {}
    by_physical: dict[tuple[str, ...], tuple[str, ...]] = {}

    def walk(fields: Sequence[Mapping[str, Any]], lpath: tuple[str, ...], ppath: tuple[str, ...]) -> None:
        for f in fields:
            meta = f.get("metadata") or {}
            lname = str(f["name"])
            pname = str(meta.get(PHYSICAL_NAME_KEY) or lname) if mode != "none" else lname
            fid = meta.get(FIELD_ID_KEY)
            info = ColumnInfo(lname, pname, int(fid) if fid is not None else None)
            lp, pp = (*lpath, lname), (*ppath, pname)
            by_logical[lp] = info
            by_physical[pp] = lp
            for nested in _struct_fields_within(f["type"]):
                walk(nested, lp, pp)

    walk(schema_json.get("fields", []), (), ())
    return ColumnMapping(mode, logical, physical, MappingProxyType(by_logical), MappingProxyType(by_physical))


def _struct_fields_within(t: Any) -> list[Sequence[Mapping[str, Any]]]:
    """Field lists of the structs directly inside ``t`` (through arrays and maps)."""
    if not isinstance(t, Mapping):
        return []
    kind = t.get("type")
    if kind == "struct":
        return [t.get("fields", [])]
    if kind == "array":
        return _struct_fields_within(t.get("elementType"))
    if kind == "map":
        return _struct_fields_within(t.get("keyType")) + _struct_fields_within(t.get("valueType"))
    return []


# ============================================================================ partition values


def partition_schema(metadata: Metadata) -> pa.Schema:
    """The partition columns as an Arrow schema: logical names, table types, partition order."""
    logical = _cached_mapping(metadata.schema_string, "none").logical_schema
    fields = []
    for name in metadata.partition_columns:
        index = logical.get_field_index(name)
        if index < 0:
            raise InvalidLogError(f"partition column {name!r} is not in the table schema")
        fields.append(logical.field(index))
    return pa.schema(fields)


def parse_partition_values(
    pv: pa.Array | pa.ChunkedArray, metadata: Metadata, protocol: Protocol | None = None
) -> pa.StructArray:
    """Typed partition values of many files at once.

    ``pv`` is the ``partitionValues`` column of file actions (``map<string, string>``
    keyed by physical column names). The result has one struct field per partition
    column (logical names, table types); a missing key, a JSON null and an empty string
    are all null, as the protocol says. With ``protocol``, a column mapping mode the
    protocol does not support is ignored (keys are then the logical names).
    """
    schema = partition_schema(metadata)
    mapping = ColumnMapping.from_metadata(metadata, protocol)
    if isinstance(pv, pa.ChunkedArray):
        pv = pv.combine_chunks() if pv.num_chunks != 1 else pv.chunk(0)
    if not pa.types.is_map(pv.type):
        raise TypeError(f"partition values must be a map<string, string> array, got {pv.type}")
    arrays = []
    lookup = _MapLookup(pv) if len(schema) else None
    for f in schema:
        assert lookup is not None
        raw = lookup.values_of(mapping.physical_name(f.name))
        arrays.append(parse_partition_strings(raw, f.type, column=f.name))
    if not arrays:
        # A struct without fields still has one (empty, valid) entry per file.
        return pa.StructArray.from_buffers(pa.struct([]), len(pv), [None])
    return pa.StructArray.from_arrays(arrays, fields=list(schema))


class _MapLookup:
    """Value of one key in every map of a ``map<string, string>`` array (null when absent).

    Works on the flattened entries with one comparison per key, which is far faster
    than ``pc.map_lookup`` on many small maps; the first entry wins on duplicate keys.
    Values come back dictionary-encoded (partition values repeat across files), with a
    dictionary of just that key's distinct values.
    """

    def __init__(self, maps: pa.MapArray) -> None:
        self.offsets = maps.offsets.to_numpy()
        start, end = int(self.offsets[0]), int(self.offsets[-1])
        self.length = len(maps)
        self.keys = maps.keys.slice(start, end - start)
        items = maps.items.slice(start, end - start)
        if not pa.types.is_string(items.type):
            items = items.cast(pa.string())
        encoded = items.dictionary_encode()
        self.dictionary = encoded.dictionary
        # Dictionary code of each entry's value; -1 for a JSON null.
        self.codes = pc.fill_null(encoded.indices, -1).to_numpy().astype(np.int64)

    def values_of(self, key: str) -> pa.DictionaryArray:
        matches = pc.fill_null(pc.equal(self.keys, pa.scalar(key, pa.string())), False)
        hits = np.flatnonzero(matches.to_numpy(zero_copy_only=False))
        # The map (row) each matching entry belongs to; null maps have no entries.
        parents = np.searchsorted(self.offsets[1:] - self.offsets[0], hits, side="right")
        codes = np.full(self.length, -1, dtype=np.int64)
        # Assign in reverse so that, for a duplicated key, the first entry is the one that stays.
        codes[parents[::-1]] = self.codes[hits[::-1]]
        valid = codes >= 0
        if not valid.any():
            return pa.DictionaryArray.from_arrays(pa.nulls(self.length, pa.int32()), pa.array([], pa.string()))
        used = np.unique(codes[valid])
        remap = np.zeros(len(self.dictionary), dtype=np.int64)
        remap[used] = np.arange(len(used))
        indices = pa.array(np.where(valid, remap[np.maximum(codes, 0)], 0).astype(np.int32), mask=~valid)
        return pa.DictionaryArray.from_arrays(indices, self.dictionary.take(pa.array(used, pa.int64())))


# A time of day followed by a zone designator ("...T10:00:00.5Z", "... 10:00:00+02:00").
_ZONE_SUFFIX = r"[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d*)?)?(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$"
_ESCAPED_BINARY = re.compile(r"^(?:\\u[0-9A-Fa-f]{4})+$")


def parse_partition_strings(values: pa.Array, arrow_type: pa.DataType, column: str = "?") -> pa.Array:
    """Serialised partition values (strings, possibly null) to ``arrow_type``, vectorised.

    Files far outnumber distinct partition values, so long inputs are dictionary-encoded
    and only the distinct strings are parsed.
    """
    if pa.types.is_dictionary(values.type):
        return _parse_strings(values.dictionary.cast(pa.string()), arrow_type, column).take(values.indices)
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        values = values.cast(pa.string())
    if len(values) > _DICTIONARY_THRESHOLD:
        encoded = values.dictionary_encode()
        if len(encoded.dictionary) * 2 < len(values):
            return _parse_strings(encoded.dictionary, arrow_type, column).take(encoded.indices)
    return _parse_strings(values, arrow_type, column)


_DICTIONARY_THRESHOLD = 256


def _parse_strings(values: pa.Array, arrow_type: pa.DataType, column: str) -> pa.Array:
    # Empty string means null for every type.
    values = pc.if_else(pc.equal(values, pa.scalar("", values.type)), pa.scalar(None, values.type), values)
    try:
        if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
            return values.cast(arrow_type)
        if pa.types.is_timestamp(arrow_type):
            return _parse_timestamps(values, arrow_type)
        if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
            return _parse_binary(values).cast(arrow_type)
        if pa.types.is_null(arrow_type):
            return pa.nulls(len(values))
        if pa.types.is_boolean(arrow_type):
            # Only the protocol's spelling; Arrow would also take "1"/"0".
            lowered = pc.utf8_lower(values)
            bad = pc.and_(pc.is_valid(lowered), pc.invert(pc.is_in(lowered, pa.array(["true", "false"]))))
            if pc.any(bad).as_py():
                raise pa.ArrowInvalid("boolean partition values must be 'true' or 'false'")
            return pc.equal(lowered, pa.scalar("true"))
        if (
            pa.types.is_integer(arrow_type)
            or pa.types.is_floating(arrow_type)
            or pa.types.is_decimal(arrow_type)
            or pa.types.is_date(arrow_type)
        ):
            return values.cast(arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidLogError(
            f"partition values of column {column!r} cannot be read as {arrow_type}: {exc}"
        ) from exc
    raise InvalidLogError(f"partition column {column!r} has type {arrow_type}, which cannot be a partition column")


def _parse_timestamps(values: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    # Arrow's parser takes "YYYY-MM-DD HH:MM:SS[.f{1,6}]" with " " or "T"; cut finer fractions.
    values = pc.replace_substring_regex(values, r"(\.\d{6})\d+", r"\1")
    naive_type = pa.timestamp("us")
    zoned = pc.fill_null(pc.match_substring_regex(values, _ZONE_SUFFIX), False)
    if not pc.any(zoned).as_py():
        parsed = values.cast(naive_type)
    else:
        # "...Z" / "...+01:00": parse as instants (converted to UTC), the rest as UTC wall clock.
        null = pa.scalar(None, values.type)
        with_zone = pc.if_else(zoned, values, null).cast(pa.timestamp("us", tz="UTC"))
        without_zone = pc.if_else(zoned, null, values).cast(naive_type)
        parsed = pc.coalesce(with_zone.cast(naive_type), without_zone)
    # Naive strings in a ``timestamp`` column are read as UTC: the writer's time zone is
    # not recorded, and Spark and delta-rs both write (and read) UTC.
    return parsed.cast(arrow_type)


def _parse_binary(values: pa.Array) -> pa.Array:
    # The partition value is the bytes as text (Spark: the bytes decoded as UTF-8, which
    # the JSON log escapes as \u0001 for control characters). delta-rs instead writes
    # literal "\u00XX" escapes per byte; recognise that form too. Distinct values are few,
    # so decode the dictionary, not every row.
    encoded = values.dictionary_encode()
    dictionary = encoded.dictionary.to_pylist()
    decoded = [_binary_from_text(s) for s in dictionary]
    return pc.take(pa.array(decoded, type=pa.binary()), encoded.indices)


def _binary_from_text(text: str) -> bytes:
    if _ESCAPED_BINARY.match(text):
        codes = [int(text[i + 2 : i + 6], 16) for i in range(0, len(text), 6)]
        if all(c <= 0xFF for c in codes):
            return bytes(codes)
    return text.encode("utf-8")


# ---------------------------------------------------------------- serialisation (write path)


def serialize_partition_value(value: Any, arrow_type: pa.DataType) -> str | None:
    """The string a partition value is stored as in the log (``None`` for a null value).

    Formats follow the protocol and what Spark writes: integers in decimal, floats as
    Java prints them (``1.0``, ``1.0E10``, ``NaN``, ``Infinity``), decimals in plain
    notation with exactly ``scale`` digits, dates ``YYYY-MM-DD``, timestamps adjusted to
    UTC in ISO 8601 (``1970-01-01T00:00:00.000000Z``, the protocol's recommendation),
    timestamp_ntz ``1970-01-01 00:00:00.000000``, booleans ``true``/``false``, binary as
    its UTF-8 text (``\\u00XX`` escapes per byte when it is not valid UTF-8). An empty
    string is null: the protocol reads an empty partition value as null.
    """
    if isinstance(value, pa.Scalar):
        value = value.as_py()
    if value is None:
        return None
    t = arrow_type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        text = str(value)
        return text or None
    if pa.types.is_boolean(t):
        return "true" if value else "false"
    if pa.types.is_integer(t):
        return str(int(value))
    if pa.types.is_floating(t):
        return java_float_string(float(value), single=not pa.types.is_float64(t))
    if pa.types.is_decimal(t):
        return _decimal_string(Decimal(value), t.scale)
    if pa.types.is_date(t):
        if isinstance(value, dt.datetime):
            value = value.date()
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if pa.types.is_timestamp(t):
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            value = dt.datetime(value.year, value.month, value.day)
        if t.tz is not None:
            if value.tzinfo is not None:
                value = value.astimezone(dt.UTC)
            return _timestamp_text(value, "T") + "Z"
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return _timestamp_text(value, " ")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t):
        data = bytes(value)
        if not data:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "".join(f"\\u{b:04X}" for b in data)
    raise SchemaMismatchError(f"a column of type {arrow_type} cannot be a partition column")


def _timestamp_text(value: dt.datetime, separator: str) -> str:
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}{separator}"
        f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}"
    )


def _decimal_string(value: Decimal, scale: int) -> str:
    if scale >= 0:
        quantized = value.quantize(Decimal(1).scaleb(-scale))
        return format(quantized, "f")
    return format(value.to_integral_value(), "f")


def java_float_string(x: float, single: bool = False) -> str:
    """``x`` as Java's ``Double.toString`` (or ``Float.toString`` when ``single``) prints it."""
    if single:
        x = _to_float32(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    digits, exponent = _shortest_digits(x, single)
    sign = "-" if x < 0 else ""
    if 1e-3 <= abs(x) < 1e7:
        if exponent >= 0:
            integer = digits[: exponent + 1].ljust(exponent + 1, "0")
            fraction = digits[exponent + 1 :] or "0"
        else:
            integer = "0"
            fraction = "0" * (-exponent - 1) + digits
        return f"{sign}{integer}.{fraction}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


_FLOAT32_MAX = 3.4028234663852886e38


def _to_float32(x: float) -> float:
    if math.isfinite(x) and abs(x) > _FLOAT32_MAX:
        # Beyond float32 range: round-to-nearest may still land on the max; compare halfway.
        if abs(x) >= 3.4028235677973366e38:
            return math.copysign(math.inf, x)
        return math.copysign(_FLOAT32_MAX, x)
    return float(struct.unpack("f", struct.pack("f", x))[0])


def _shortest_digits(x: float, single: bool) -> tuple[str, int]:
    """Shortest round-tripping significant digits of ``|x|`` and its decimal exponent (d.ddd times 10^e)."""
    x = abs(x)
    text = repr(x)
    if single:
        # The fewest digits that read back to the same float32.
        for precision in range(1, 10):
            candidate = f"{x:.{precision - 1}e}"
            if _to_float32(float(candidate)) == x:
                text = candidate
                break
    _sign, digit_tuple, exp = Decimal(text).normalize().as_tuple()
    digits = "".join(str(d) for d in digit_tuple)
    return digits, int(exp) + len(digits) - 1
