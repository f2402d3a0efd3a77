"""Per-file statistics: the ``stats`` JSON of add actions, parsed into Arrow and computed.

The protocol ("Per-file Statistics") stores, per data file, ``numRecords``, optional
``tightBounds`` and per-column ``minValues`` / ``maxValues`` / ``nullCount`` that mirror
the table schema (nested structs included), keyed by *physical* column names under
column mapping. This module

* builds the Arrow type of parsed statistics from the table schema
  (:func:`stats_type`, logical names, the column types for min/max);
* parses N JSON strings at once (:func:`parse_stats`) with one ``pyarrow.json`` read;
  a statistic whose JSON value does not fit the column type becomes null (unknown)
  instead of failing the read;
* computes the JSON for a file we write (:func:`compute_stats`) as Delta does, and
  derives it from a parquet footer for files written elsewhere
  (:func:`stats_from_parquet_metadata`), leaving out what a footer cannot vouch for.

What Delta collects (and what we write): min/max for byte, short, integer, long, float,
double, decimal, date, timestamp, timestamp_ntz and string columns; no min/max for
boolean, binary, arrays, maps or variants; ``nullCount`` for every indexed leaf (an
array, map or variant counts as one leaf). Variant bounds exist only with variant
shredding (Z85-encoded variants, protocol "Statistics for Variant Columns"), which we
do not read: they are ignored. Strings are cut to a 32-character prefix for the
minimum and to a prefix plus a tie-breaker (U+FFFD) for the maximum, so the maximum
stays an upper bound. Timestamps are written truncated to milliseconds.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from airflow_delta.engine.errors import UnsupportedFeatureError
from airflow_delta.engine.model.actions import Metadata
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.model.schema import ColumnMapping, delta_type_to_arrow, java_float_string

__all__ = [
    "STRING_PREFIX_LENGTH",
    "compute_stats",
    "indexed_columns",
    "parse_stats",
    "stats_from_parquet_metadata",
    "stats_type",
]

# Delta's default ``spark.databricks.delta.stats.truncateLength`` ... the prefix length
# Delta keeps of string min/max values (DATA_SKIPPING_STRING_PREFIX_LENGTH).
STRING_PREFIX_LENGTH = 32
_TIE_BREAKER = "\ufffd"

_MIN_MAX_PRIMITIVES = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "date", "timestamp", "timestamp_ntz", "string"}
)


def _has_min_max(delta_type: Any) -> bool:
    return isinstance(delta_type, str) and (delta_type in _MIN_MAX_PRIMITIVES or delta_type.startswith("decimal"))


# =========================================================================== the stats schema


@dataclass(frozen=True)
class StatsField:
    """One column in the statistics: a struct (with children) or a leaf."""

    logical: str
    physical: str
    delta_type: Any  # the Delta type: a name, or a struct/array/map definition
    arrow_type: pa.DataType | None  # None for leaves of a type this engine does not know
    children: tuple[StatsField, ...] | None = None  # set for structs

    @property
    def is_struct(self) -> bool:
        return self.children is not None

    @property
    def has_min_max(self) -> bool:
        return self.children is None and _has_min_max(self.delta_type) and self.arrow_type is not None


def _fields_of(schema_fields: Sequence[Mapping[str, Any]], mapping_enabled: bool) -> tuple[StatsField, ...]:
    out = []
    for f in schema_fields:
        name = str(f["name"])
        meta = f.get("metadata") or {}
        physical = str(meta.get("delta.columnMapping.physicalName") or name) if mapping_enabled else name
        t = f["type"]
        if isinstance(t, Mapping) and t.get("type") == "struct":
            children = _fields_of(t.get("fields", []), mapping_enabled)
            out.append(StatsField(name, physical, t, None, children))
            continue
        try:
            arrow_type: pa.DataType | None = delta_type_to_arrow(t)
        except UnsupportedFeatureError:
            arrow_type = None  # an unknown type: only its nullCount is meaningful here
        out.append(StatsField(name, physical, t, arrow_type))
    return tuple(out)


def _data_fields(metadata: Metadata) -> tuple[StatsField, ...]:
    """The table's columns without partition columns (those are not in data files)."""
    mapping = ColumnMapping.from_metadata(metadata)
    fields = _fields_of(metadata.schema_json.get("fields", []), mapping.enabled)
    partitions = {c.casefold() for c in metadata.partition_columns}
    return tuple(f for f in fields if f.logical.casefold() not in partitions)


def indexed_columns(
    metadata: Metadata,
    *,
    num_indexed_cols: int | None = None,
    stats_columns: Sequence[str] | None = None,
) -> tuple[StatsField, ...]:
    """The columns statistics are collected on, per the table properties (or the overrides).

    ``delta.dataSkippingStatsColumns`` (explicit column names, nested ``a.b`` allowed) wins
    over ``delta.dataSkippingNumIndexedCols`` (the first N leaf columns; -1 = all).
    Partition columns are never indexed.
    """
    properties = TableProperties.from_configuration(metadata.configuration)
    fields = _data_fields(metadata)
    if stats_columns is None and num_indexed_cols is None:
        stats_columns = properties.data_skipping_stats_columns
        num_indexed_cols = properties.data_skipping_num_indexed_cols
    if stats_columns is not None:
        paths = [tuple(p.casefold() for p in _split_column_path(c)) for c in stats_columns]
        return _filter_fields(fields, paths)
    assert num_indexed_cols is not None
    if num_indexed_cols < 0:
        return fields
    return _first_leaves(fields, num_indexed_cols)[0]


def _split_column_path(text: str) -> list[str]:
    """``a.b`` -> [a, b]; backticks quote names containing dots (`` `a.b`.c ``)."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    text = text.strip()
    while i < len(text):
        ch = text[i]
        if ch == "`":
            if quoted and i + 1 < len(text) and text[i + 1] == "`":
                current.append("`")
                i += 2
                continue
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _filter_fields(fields: Sequence[StatsField], paths: Sequence[tuple[str, ...]]) -> tuple[StatsField, ...]:
    out = []
    for f in fields:
        mine = [p[1:] for p in paths if p and p[0] == f.logical.casefold()]
        if not mine:
            continue
        if any(not rest for rest in mine) or not f.is_struct:
            if all(rest for rest in mine) and not f.is_struct:
                continue  # a nested path into a non-struct matches nothing
            out.append(f)
            continue
        assert f.children is not None
        children = _filter_fields(f.children, [r for r in mine if r])
        if children:
            out.append(StatsField(f.logical, f.physical, f.delta_type, f.arrow_type, children))
    return tuple(out)


def _first_leaves(fields: Sequence[StatsField], budget: int) -> tuple[tuple[StatsField, ...], int]:
    out: list[StatsField] = []
    used = 0
    for f in fields:
        if used >= budget:
            break
        if f.is_struct:
            assert f.children is not None
            children, n = _first_leaves(f.children, budget - used)
            used += n
            out.append(StatsField(f.logical, f.physical, f.delta_type, f.arrow_type, children))
        else:
            used += 1
            out.append(f)
    return tuple(out), used


def _nested_stats_type(
    fields: Sequence[StatsField], physical: bool, leaf_type: Callable[[StatsField], pa.DataType | None]
) -> pa.StructType:
    """The struct of one stats family over ``fields``: ``leaf_type`` gives a leaf's type, or None to leave it out.

    Structs nest as the schema does; a struct left with no fields is left out.
    """
    out = []
    for f in fields:
        name = f.physical if physical else f.logical
        if f.is_struct:
            assert f.children is not None
            child = _nested_stats_type(f.children, physical, leaf_type)
            if child.num_fields:
                out.append(pa.field(name, child))
        else:
            t = leaf_type(f)
            if t is not None:
                out.append(pa.field(name, t))
    return pa.struct(out)


def _min_max_type(fields: Sequence[StatsField], physical: bool) -> pa.StructType:
    return _nested_stats_type(fields, physical, lambda f: f.arrow_type if f.has_min_max else None)


def _null_count_type(fields: Sequence[StatsField], physical: bool) -> pa.StructType:
    return _nested_stats_type(fields, physical, lambda f: pa.int64())


def _stats_struct(fields: Sequence[StatsField], physical: bool) -> pa.StructType:
    min_max = _min_max_type(fields, physical)
    return pa.struct(
        [
            pa.field("numRecords", pa.int64()),
            pa.field("minValues", min_max),
            pa.field("maxValues", min_max),
            pa.field("nullCount", _null_count_type(fields, physical)),
            pa.field("tightBounds", pa.bool_()),
        ]
    )


def stats_type(metadata: Metadata) -> pa.StructType:
    """Arrow type of parsed statistics: logical names, column types for min/max, int64 counts.

    Covers every data column (not only the currently indexed ones): files written under
    other settings may carry statistics for any column.
    """
    return _stats_struct(_data_fields(metadata), physical=False)


# =========================================================================== parsing

_PARSE_CHUNK_ROWS = 4096


def parse_stats(stats: pa.Array | pa.ChunkedArray | Sequence[str | None], metadata: Metadata) -> pa.StructArray:
    """Parse N ``stats`` JSON strings into a StructArray of :func:`stats_type` (vectorised).

    A null or empty string gives a null row. A value whose JSON type does not fit the
    column (say ``"NaN"`` for a double maximum, or a decimal with too many digits)
    becomes null - an unknown statistic - rather than failing; so does a NaN bound.
    Timestamps are read from ISO strings with ``Z`` or an offset; dates from ``YYYY-MM-DD``.
    """
    fields = _data_fields(metadata)
    logical_type = _stats_struct(fields, physical=False)
    physical_type = _stats_struct(fields, physical=True)
    array = _as_string_array(stats)
    n = len(array)
    if n == 0:
        return pa.array([], logical_type)
    trimmed = pc.utf8_trim_whitespace(array)
    present = pc.and_(pc.is_valid(trimmed), pc.not_equal(trimmed, "")).fill_null(False)
    # Raw newlines can only be whitespace between JSON tokens: flatten each document
    # onto one line so the batch can be read as newline-delimited JSON.
    has_breaks = pc.any(pc.or_(pc.match_substring(trimmed, "\n"), pc.match_substring(trimmed, "\r"))).as_py()
    if has_breaks:
        trimmed = pc.replace_substring_regex(trimmed, r"[\r\n]+", " ")
    lines = pc.if_else(present, trimmed, "{}")
    read_type = _raw_read_type(physical_type)
    raw = _read_lines(lines, read_type)
    # Rows without statistics (or with a document that is not a JSON object) are null rows.
    missing = pc.or_(pc.invert(present), raw.is_null())
    children = [
        _finish(pc.if_else(missing, pa.scalar(None, raw.type.field(i).type), pc.struct_field(raw, [i])), field.type,
                is_min_max=field.name in ("minValues", "maxValues"))
        for i, field in enumerate(logical_type)
    ]
    return pa.StructArray.from_arrays(children, fields=list(logical_type), mask=missing)


def _as_string_array(stats: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> pa.Array:
    if isinstance(stats, pa.ChunkedArray):
        stats = stats.combine_chunks() if stats.num_chunks else pa.array([], pa.string())
    if not isinstance(stats, pa.Array):
        stats = pa.array(list(stats), pa.string())
    if pa.types.is_null(stats.type):
        stats = stats.cast(pa.string())
    if not pa.types.is_string(stats.type):
        stats = stats.cast(pa.string())
    return stats


def _raw_read_type(t: pa.DataType) -> pa.DataType:
    """The type pyarrow.json reads: dates arrive as strings and are converted afterwards."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _raw_read_type(f.type)) for f in t])
    if pa.types.is_date(t):
        return pa.string()
    return t


def _read_lines(lines: pa.Array, read_type: pa.StructType) -> pa.StructArray:
    """Read one JSON document per element; on a bad document retry in chunks, so that
    only the chunks holding one are parsed row by row."""
    fast = _read_fast(lines, read_type)
    if fast is not None:
        return fast
    if len(lines) <= _PARSE_CHUNK_ROWS:
        return _read_slow(lines, read_type)
    pieces = []
    for start in range(0, len(lines), _PARSE_CHUNK_ROWS):
        chunk = lines.slice(start, _PARSE_CHUNK_ROWS)
        piece = _read_fast(chunk, read_type)
        pieces.append(piece if piece is not None else _read_slow(chunk, read_type))
    return pa.concat_arrays(pieces)


def _read_fast(lines: pa.Array, read_type: pa.StructType) -> pa.StructArray | None:
    buffer = _newline_joined(lines)
    longest = int(pc.max(pc.binary_length(lines)).as_py() or 0)
    try:
        table = pj.read_json(
            pa.BufferReader(buffer),
            read_options=pj.ReadOptions(block_size=max(1 << 22, 2 * longest + 2), use_threads=True),
            parse_options=pj.ParseOptions(explicit_schema=pa.schema(list(read_type)), unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if table.num_rows != len(lines):
        return None
    return pa.StructArray.from_arrays([c.combine_chunks() for c in table.columns], fields=list(read_type))


def _read_slow(lines: pa.Array, read_type: pa.StructType) -> pa.StructArray:
    """Row by row: each value that does not fit its type becomes null."""
    return pa.array([_coerce_document(text, read_type) for text in lines.to_pylist()], read_type)


def _newline_joined(lines: pa.Array) -> pa.Buffer:
    """One buffer with every string followed by a newline, without a Python loop."""
    with_newline = pc.binary_join_element_wise(lines, "\n", "")
    offsets = with_newline.buffers()[1]
    data = with_newline.buffers()[2]
    start = pa.Array.from_buffers(pa.int32(), 1, [None, offsets], offset=with_newline.offset)[0].as_py()
    end = pa.Array.from_buffers(pa.int32(), 1, [None, offsets], offset=with_newline.offset + len(with_newline))[0].as_py()
    return data.slice(start, end - start) if data is not None else pa.py_buffer(b"")


def _coerce_document(text: str | None, read_type: pa.StructType) -> dict[str, Any] | None:
    try:
        document = json.loads(text or "{}", parse_float=Decimal, parse_constant=lambda c: Decimal(c))
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    return _coerce_struct(document, read_type)


def _coerce_struct(value: Any, t: pa.StructType) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    return {f.name: _coerce_value(value.get(f.name), f.type) for f in t}


def _coerce_value(value: Any, t: pa.DataType) -> Any:
    """``value`` (parsed JSON) as a value of ``t``, or None if it does not fit."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        return _coerce_struct(value, t)
    if isinstance(value, bool):
        return value if pa.types.is_boolean(t) else None
    try:
        if pa.types.is_integer(t):
            if isinstance(value, int):
                number = value
            elif isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
                number = int(value)
            else:
                return None
            bound = 1 << (t.bit_width - 1)
            return number if -bound <= number < bound else None
        if pa.types.is_floating(t):
            if isinstance(value, int | Decimal):
                return float(value)
            if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
                return float(value.replace("Infinity", "inf"))
            return None
        if pa.types.is_decimal(t):
            if not isinstance(value, int | Decimal):
                return None
            number = Decimal(value)
            quantized = number.quantize(Decimal(1).scaleb(-t.scale))
            if quantized != number or len(quantized.as_tuple().digits) > t.precision:
                return None
            return quantized
        if pa.types.is_string(t):
            return value if isinstance(value, str) else None
        if pa.types.is_timestamp(t):
            return _parse_stats_timestamp(value, t) if isinstance(value, str) else None
        if pa.types.is_boolean(t):
            return None
    except (ValueError, InvalidOperation, OverflowError, ArithmeticError):
        return None
    return None


def _parse_stats_timestamp(text: str, t: pa.TimestampType) -> dt.datetime | None:
    try:
        value = dt.datetime.fromisoformat(text.strip().replace(" ", "T"))
    except ValueError:
        return None
    if t.tz is not None:
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)
    return value.replace(tzinfo=None) if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)


def _finish(raw: pa.Array, logical: pa.DataType, is_min_max: bool) -> pa.Array:
    """Convert raw-read values to their final types, with logical field names."""
    if pa.types.is_struct(logical):
        # struct_field carries the parent's nulls down, so no child shows a value under a null row.
        children = [_finish(pc.struct_field(raw, [i]), field.type, is_min_max) for i, field in enumerate(logical)]
        return pa.StructArray.from_arrays(children, fields=list(logical), mask=raw.is_null() if raw.null_count else None)
    if pa.types.is_date(logical):
        try:
            return raw.cast(pa.date32())  # strict ISO dates: the common, fast case
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        parsed = pc.strptime(raw, format="%Y-%m-%d", unit="s", error_is_null=True)
        # strptime rolls impossible dates over (2024-02-30 -> 03-01): refuse those.
        exact = pc.equal(pc.strftime(parsed, format="%Y-%m-%d"), raw).fill_null(False)
        return pc.if_else(exact, parsed.cast(pa.date32()), pa.scalar(None, pa.date32()))
    if is_min_max and pa.types.is_floating(logical):
        # A NaN bound says nothing usable about the other values: unknown.
        return pc.if_else(pc.is_nan(raw), pa.scalar(None, logical), raw)
    return raw


# =========================================================================== computing

_NUM_RECORDS = "numRecords"


@dataclass(frozen=True)
class _Raw:
    """A JSON fragment already rendered (numbers keep their exact text, e.g. ``1.50``)."""

    text: str


def _render(value: Any) -> str:
    if isinstance(value, _Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def truncate_min_string(value: str, length: int = STRING_PREFIX_LENGTH) -> str:
    """A lower bound of ``value``: its first ``length`` characters."""
    return value[:length]


def truncate_max_string(value: str, length: int = STRING_PREFIX_LENGTH) -> str:
    """An upper bound of ``value`` no much longer than ``length`` characters.

    As Delta: keep the prefix, then every following character that is not below the
    tie-breaker U+FFFD, then append U+FFFD. Characters compare by code point, which is
    the UTF-8 byte order Spark compares strings in.
    """
    if len(value) <= length:
        return value
    end = length
    while end < len(value) and value[end] >= _TIE_BREAKER:
        end += 1
    return value[:end] + _TIE_BREAKER


def _format_timestamp(micros: int, with_zone: bool) -> str | None:
    millis = micros // 1000  # floor: truncate toward the past, also before 1970
    try:
        value = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=millis)
    except OverflowError:
        return None
    text = f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond // 1000:03d}"
    return text + "Z" if with_zone else text


def _render_bound(value: Any, field: StatsField, is_max: bool) -> Any | None:
    """A min/max value as it goes into the JSON, or None to leave the bound out."""
    t = field.arrow_type
    assert t is not None
    if value is None:
        return None
    if pa.types.is_integer(t):
        return _Raw(str(int(value)))
    if pa.types.is_floating(t):
        number = float(value)
        if not math.isfinite(number):
            return None
        return _Raw(java_float_string(number, single=pa.types.is_float32(t)))
    if pa.types.is_decimal(t):
        return _Raw(format(Decimal(value).quantize(Decimal(1).scaleb(-t.scale)), "f"))
    if pa.types.is_string(t):
        return truncate_max_string(value) if is_max else truncate_min_string(value)
    if pa.types.is_date(t):
        return value.isoformat()
    if pa.types.is_timestamp(t):
        return _format_timestamp(int(value), with_zone=t.tz is not None)
    return None


def compute_stats(
    data: pa.Table,
    metadata: Metadata,
    *,
    num_indexed_cols: int | None = None,
    stats_columns: Sequence[str] | None = None,
    tight_bounds: bool | None = None,
) -> str:
    """The ``stats`` JSON Delta writes for a data file holding ``data`` (logical names).

    Indexed columns follow ``delta.dataSkippingStatsColumns`` /
    ``delta.dataSkippingNumIndexedCols`` unless overridden. Keys are physical names
    under column mapping. ``tight_bounds`` adds the ``tightBounds`` flag (writers of
    tables with deletion vectors set it to true for new files).
    """
    fields = indexed_columns(metadata, num_indexed_cols=num_indexed_cols, stats_columns=stats_columns)
    num_records = data.num_rows
    out: dict[str, Any] = {_NUM_RECORDS: num_records}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    _collect(fields, _columns_of(data), num_records, mins, maxs, nulls)
    if mins:
        out["minValues"] = mins
    if maxs:
        out["maxValues"] = maxs
    if nulls:
        out["nullCount"] = nulls
    if tight_bounds is not None:
        out["tightBounds"] = bool(tight_bounds)
    return _render(out)


def _columns_of(data: pa.Table) -> dict[str, pa.ChunkedArray]:
    return {name: data.column(i) for i, name in enumerate(data.column_names)}


def _lookup(columns: Mapping[str, pa.ChunkedArray], name: str) -> pa.ChunkedArray | None:
    if name in columns:
        return columns[name]
    folded = [v for k, v in columns.items() if k.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None


def _struct_children(column: pa.ChunkedArray) -> dict[str, pa.ChunkedArray]:
    t = column.type
    out = {}
    for i in range(t.num_fields):
        # struct_field carries the parent's nulls into the child, as Spark's a.b does.
        chunks = [pc.struct_field(chunk, [i]) for chunk in column.chunks]
        out[t.field(i).name] = pa.chunked_array(chunks, type=t.field(i).type)
    return out


def _put_nested(
    name: str, parents: tuple[dict[str, Any], ...], children: tuple[dict[str, Any], ...]
) -> None:
    """Attach a struct column's min/max/nullCount dicts to its parents', leaving out empty ones."""
    for parent, child in zip(parents, children, strict=True):
        if child:
            parent[name] = child


def _collect(
    fields: Sequence[StatsField],
    columns: Mapping[str, pa.ChunkedArray] | None,
    num_records: int,
    mins: dict[str, Any],
    maxs: dict[str, Any],
    nulls: dict[str, Any],
) -> None:
    for f in fields:
        column = _lookup(columns, f.logical) if columns is not None else None
        if f.is_struct:
            assert f.children is not None
            children = _struct_children(column) if column is not None and pa.types.is_struct(column.type) else None
            cmin: dict[str, Any] = {}
            cmax: dict[str, Any] = {}
            cnull: dict[str, Any] = {}
            _collect(f.children, children, num_records, cmin, cmax, cnull)
            _put_nested(f.physical, (mins, maxs, nulls), (cmin, cmax, cnull))
            continue
        if column is None:
            # A column missing from the data is all null in this file.
            nulls[f.physical] = num_records
            continue
        nulls[f.physical] = column.null_count
        if not f.has_min_max or column.null_count == len(column):
            continue
        low, high = _min_max(column, f)
        if low is not None:
            mins[f.physical] = low
        if high is not None:
            maxs[f.physical] = high


def _min_max(column: pa.ChunkedArray, f: StatsField) -> tuple[Any, Any]:
    t = f.arrow_type
    assert t is not None
    values = column
    if not column.type.equals(t):
        try:
            values = column.cast(t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None, None
    has_nan = False
    if pa.types.is_floating(t):
        has_nan = bool(pc.any(pc.is_nan(values)).as_py())
    result = pc.min_max(values)
    low, high = result["min"], result["max"]
    if pa.types.is_timestamp(t):
        low_value = low.cast(pa.int64()).as_py() if low.is_valid else None
        high_value = high.cast(pa.int64()).as_py() if high.is_valid else None
        # Normalise to microseconds before truncating to milliseconds.
        factor = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": None}[t.unit]
        if factor is None:
            low_value = None if low_value is None else low_value // 1000
            high_value = None if high_value is None else high_value // 1000
        else:
            low_value = None if low_value is None else low_value * factor
            high_value = None if high_value is None else high_value * factor
    else:
        low_value, high_value = low.as_py(), high.as_py()
        if pa.types.is_floating(t) and low_value is not None and math.isnan(low_value):
            low_value = high_value = None  # every value is NaN
    rendered_low = _render_bound(low_value, f, is_max=False)
    # NaN is the largest value for Spark: a maximum computed without it would let a
    # reader skip a file whose NaN rows match "x > v". Leave the maximum out instead.
    rendered_high = None if has_nan else _render_bound(high_value, f, is_max=True)
    return rendered_low, rendered_high


# =========================================================================== parquet footers


def stats_from_parquet_metadata(
    parquet_metadata: pq.FileMetaData,
    metadata: Metadata,
    *,
    num_indexed_cols: int | None = None,
    stats_columns: Sequence[str] | None = None,
) -> str:
    """Statistics for a data file written elsewhere (e.g. by Spark executors), from its footer.

    ``numRecords`` is exact. Per column, a statistic is written only when every row group
    vouches for it: a row group without statistics makes the column's min/max (or null
    count) unknown and it is left out. Left out on purpose: INT96 timestamps (their
    footer order is undefined), float/double maxima (footers ignore NaN, which Spark
    ranks above every number), and null counts of arrays and maps (footers count leaf
    values, not rows).
    """
    fields = indexed_columns(metadata, num_indexed_cols=num_indexed_cols, stats_columns=stats_columns)
    num_records = int(parquet_metadata.num_rows)
    by_path: dict[tuple[str, ...], int] = {}
    if parquet_metadata.num_row_groups:
        first = parquet_metadata.row_group(0)
        for i in range(first.num_columns):
            by_path[tuple(first.column(i).path_in_schema.split("."))] = i
    out: dict[str, Any] = {_NUM_RECORDS: num_records}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    _footer_collect(fields, (), (), parquet_metadata, by_path, mins, maxs, nulls)
    if mins:
        out["minValues"] = mins
    if maxs:
        out["maxValues"] = maxs
    if nulls:
        out["nullCount"] = nulls
    return _render(out)


def _footer_collect(
    fields: Sequence[StatsField],
    physical_prefix: tuple[str, ...],
    logical_prefix: tuple[str, ...],
    md: pq.FileMetaData,
    by_path: Mapping[tuple[str, ...], int],
    mins: dict[str, Any],
    maxs: dict[str, Any],
    nulls: dict[str, Any],
) -> None:
    for f in fields:
        ppath, lpath = (*physical_prefix, f.physical), (*logical_prefix, f.logical)
        if f.is_struct:
            assert f.children is not None
            cmin: dict[str, Any] = {}
            cmax: dict[str, Any] = {}
            cnull: dict[str, Any] = {}
            _footer_collect(f.children, ppath, lpath, md, by_path, cmin, cmax, cnull)
            _put_nested(f.physical, (mins, maxs, nulls), (cmin, cmax, cnull))
            continue
        index = by_path.get(ppath, by_path.get(lpath))
        if index is None:
            if md.num_row_groups == 0 or not any(p[: len(ppath)] == ppath or p[: len(lpath)] == lpath for p in by_path):
                # Not in the file at all: every row is null in this column.
                nulls[f.physical] = int(md.num_rows)
            continue
        null_count, low, high = _footer_column(md, index, f)
        if null_count is not None:
            nulls[f.physical] = null_count
        if low is not None:
            mins[f.physical] = low
        if high is not None:
            maxs[f.physical] = high


def _footer_column(md: pq.FileMetaData, index: int, f: StatsField) -> tuple[int | None, Any, Any]:
    null_total: int | None = 0
    lows: list[Any] = []
    highs: list[Any] = []
    bounds_known = f.has_min_max
    for g in range(md.num_row_groups):
        chunk = md.row_group(g).column(index)
        if chunk.physical_type == "INT96":
            bounds_known = False
        stats = chunk.statistics if chunk.is_stats_set else None
        if stats is None:
            null_total = None
            bounds_known = False
            continue
        if null_total is not None:
            null_total = null_total + stats.null_count if stats.has_null_count else None
        rows = md.row_group(g).num_rows
        if stats.has_min_max:
            lows.append(stats.min)
            highs.append(stats.max)
        elif not (stats.has_null_count and stats.null_count >= rows):
            bounds_known = False  # values present but no bounds recorded
    if not bounds_known or not lows:
        return null_total, None, None
    try:
        low = _footer_bound(min(lows), f, is_max=False)
        high = None if pa.types.is_floating(f.arrow_type) else _footer_bound(max(highs), f, is_max=True)
    except (TypeError, ValueError, InvalidOperation, OverflowError):
        return null_total, None, None
    return null_total, low, high


def _footer_bound(value: Any, f: StatsField, is_max: bool) -> Any:
    t = f.arrow_type
    assert t is not None
    if isinstance(value, bytes):
        if not pa.types.is_string(t):
            return None
        value = value.decode("utf-8")
    if pa.types.is_timestamp(t):
        if not isinstance(value, dt.datetime):
            return None
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        micros = (value - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
        return _render_bound(micros, f, is_max)
    if pa.types.is_date(t) and not isinstance(value, dt.date):
        return None
    if pa.types.is_floating(t) and isinstance(value, float) and math.isnan(value):
        return None
    return _render_bound(value, f, is_max)


def leaf_paths(fields: Iterable[StatsField], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Logical paths of the leaves in ``fields`` (handy for callers and tests)."""
    out: list[tuple[str, ...]] = []
    for f in fields:
        if f.is_struct:
            assert f.children is not None
            out.extend(leaf_paths(f.children, (*prefix, f.logical)))
        else:
            out.append((*prefix, f.logical))
    return out
