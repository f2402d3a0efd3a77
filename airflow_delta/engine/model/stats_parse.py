"""Reading per-file statistics: the ``stats`` JSON of add actions, parsed into Arrow.

:func:`stats_type` is the Arrow type of parsed statistics (logical names, the column types for
min/max, int64 counts); :func:`parse_stats` parses N JSON strings at once with one
``pyarrow.json`` read. A statistic whose JSON value does not fit the column type becomes null
(unknown) instead of failing the read. Variant bounds exist only with variant shredding
(Z85-encoded variants, protocol "Statistics for Variant Columns"), which we do not read: they
are ignored. Computing statistics for files we write lives in
:mod:`~airflow_delta.engine.model.stats_compute`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from airflow_delta.engine.model.actions import Metadata
from airflow_delta.engine.model.arrow_numpy import (
    bool_scalar,
    combined,
    int64_scalar,
    null_scalar,
    string_array,
    string_scalar,
)
from airflow_delta.engine.model.partition_values import quantize_decimal
from airflow_delta.engine.model.stats_columns import StatsField, data_fields

__all__ = [
    "parse_num_records",
    "parse_stats",
    "stats_type",
]


# =========================================================================== the parsed stats type


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
    return _stats_struct(data_fields(metadata), physical=False)


# =========================================================================== parsing

_PARSE_CHUNK_ROWS = 4096


def parse_stats(stats: pa.Array | pa.ChunkedArray | Sequence[str | None], metadata: Metadata) -> pa.StructArray:
    """Parse N ``stats`` JSON strings into a StructArray of :func:`stats_type` (vectorised).

    A null or empty string gives a null row. A value whose JSON type does not fit the
    column (say ``"NaN"`` for a double maximum, or a decimal with too many digits)
    becomes null - an unknown statistic - rather than failing; so does a NaN bound.
    Timestamps are read from ISO strings with ``Z`` or an offset; dates from ``YYYY-MM-DD``.
    """
    fields = data_fields(metadata)
    logical_type = _stats_struct(fields, physical=False)
    physical_type = _stats_struct(fields, physical=True)
    raw, missing = _read_documents(stats, _raw_read_type(physical_type))
    if raw is None:
        return pa.nulls(0, logical_type)
    # Rows without statistics (or with a document that is not a JSON object) are null rows.
    any_missing = missing.true_count > 0
    raw_children = [
        pc.if_else(missing, null_scalar(raw.type.field(i).type), pc.struct_field(raw, [i]))
        if any_missing else pc.struct_field(raw, [i])
        for i in range(raw.type.num_fields)
    ]
    children = [
        _finish(raw_child, field.type, is_min_max=field.name in ("minValues", "maxValues"))
        for raw_child, field in zip(raw_children, logical_type, strict=True)
    ]
    children = _forget_unparsable_dates(raw_children, children, logical_type)
    return pa.StructArray.from_arrays(children, fields=list(logical_type), mask=missing)


_NUM_RECORDS_ONLY = pa.struct([pa.field("numRecords", pa.int64())])


def parse_num_records(stats: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> pa.Array:
    """``numRecords`` of N ``stats`` JSON strings (int64), exactly as :func:`parse_stats` reads it.

    The same read with only ``numRecords`` declared: the documents are still parsed (so a
    document that is no valid JSON gives null, as in the full parse), but no min/max
    values are built, which is most of the full parse's cost.
    """
    raw, missing = _read_documents(stats, _NUM_RECORDS_ONLY)
    if raw is None:
        return pa.nulls(0, pa.int64())
    counts = pc.struct_field(raw, [0])
    return pc.if_else(missing, null_scalar(pa.int64()), counts) if missing.true_count else counts


def _read_documents(stats: pa.Array | pa.ChunkedArray | Sequence[str | None], read_type: pa.StructType
                    ) -> tuple[pa.StructArray | None, pa.BooleanArray]:
    """Read N ``stats`` documents as ``read_type`` (None for no documents), and which rows have none."""
    array = _as_string_array(stats)
    if len(array) == 0:
        return None, pa.nulls(0, pa.bool_())
    # Blank documents (empty or only whitespace) have no statistics. Surrounding whitespace
    # is left alone (the JSON reader skips it): no copy of the (large) strings is made
    # unless some document needs changing.
    blank = pc.or_(pc.equal(pc.binary_length(array), int64_scalar(0).cast(pa.int32())), pc.utf8_is_space(array))
    # A document that is no JSON object has no statistics either; it never reaches the JSON
    # reader, which crashes (SIGSEGV, pyarrow 26) on a top-level ``null`` under an explicit schema.
    is_object = pc.match_substring_regex(array, r"^\s*\{")
    present = pc.and_(pc.and_(pc.is_valid(array), pc.invert(blank)), is_object).fill_null(bool_scalar(False))
    lines = array
    # Raw newlines can only be whitespace between JSON tokens: flatten each document
    # onto one line so the batch can be read as newline-delimited JSON.
    has_breaks = _may_have_line_breaks(lines) and bool(
        pc.any(pc.or_(pc.match_substring(lines, "\n"), pc.match_substring(lines, "\r"))).as_py()
    )
    if has_breaks:
        lines = pc.replace_substring_regex(lines, r"[\r\n]+", " ")
    all_present = present.false_count == 0
    if not all_present:
        lines = pc.if_else(present, lines, string_scalar("{}"))
    raw = _read_lines(lines, read_type)
    missing = raw.is_null() if all_present else pc.or_(pc.invert(present), raw.is_null())
    return raw, missing


def _may_have_line_breaks(array: pa.StringArray) -> bool:
    """False when no byte of the strings is a line break: one vectorised pass over the
    character data (a byte <= 13, ``\r`` or below, is rare in JSON), far cheaper than
    searching each string for ``\n`` and ``\r``."""
    data = array.buffers()[2]
    if data is None or len(array) == 0:
        return False
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)
    start, end = int(offsets[array.offset]), int(offsets[array.offset + len(array)])
    return bool((np.frombuffer(data, dtype=np.uint8, count=end - start, offset=start) <= 13).any())


_FAMILIES = ("minValues", "maxValues", "nullCount")


def _forget_unparsable_dates(raw: list[pa.Array], finished: list[pa.Array], logical: pa.StructType) -> list[pa.Array]:
    """A date bound that is not a date makes that column's statistics unknown in the file.

    Dates are read as strings and converted afterwards, so only here can a bound that
    does not parse be told from a missing one; the other types are checked as they are
    read (:func:`_coerce_document`).
    """
    index = {logical.field(i).name: i for i in range(logical.num_fields)}
    min_max_type = logical.field("minValues").type
    for path in _leaf_paths(min_max_type, pa.types.is_date):
        # The raw documents carry physical names under column mapping, in the same order
        # as the logical fields: the raw leaf is found by its position.
        positions = _leaf_positions(min_max_type, path)
        failed: pa.Array | None = None
        for family in ("minValues", "maxValues"):
            before = _leaf_at(raw[index[family]], positions)
            after = _leaf(finished[index[family]], path)
            bad = pc.and_(pc.is_valid(before), pc.is_null(after))
            failed = bad if failed is None else pc.or_(failed, bad)
        assert failed is not None
        if pc.any(failed).as_py():
            for family in _FAMILIES:
                finished[index[family]] = _null_leaf(finished[index[family]], path, failed)
    return finished


def _leaf_paths(t: pa.StructType, wanted: Callable[[pa.DataType], bool], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    for f in t:
        if pa.types.is_struct(f.type):
            paths.extend(_leaf_paths(f.type, wanted, (*prefix, f.name)))
        elif wanted(f.type):
            paths.append((*prefix, f.name))
    return paths


def _leaf_positions(t: pa.StructType, path: Sequence[str]) -> list[int]:
    positions = []
    for name in path:
        position = t.get_field_index(name)
        positions.append(position)
        t = t.field(position).type
    return positions


def _leaf_at(array: pa.Array, positions: Sequence[int]) -> pa.Array:
    for position in positions:
        array = pc.struct_field(array, [position])
    return array


def _leaf(array: pa.Array, path: Sequence[str]) -> pa.Array:
    for name in path:
        array = pc.struct_field(array, [array.type.get_field_index(name)])
    return array


def _null_leaf(array: pa.Array, path: Sequence[str], mask: pa.Array) -> pa.Array:
    """``array`` (a struct) with the leaf at ``path`` set to null where ``mask`` is True."""
    if not path or not pa.types.is_struct(array.type):
        return array
    position = array.type.get_field_index(path[0])
    if position < 0:
        return array
    children = [array.field(i) for i in range(array.type.num_fields)]
    child = children[position]
    if len(path) == 1:
        children[position] = pc.if_else(mask, null_scalar(child.type), child)
    else:
        children[position] = _null_leaf(child, path[1:], mask)
    fields = [array.type.field(i) for i in range(array.type.num_fields)]
    return pa.StructArray.from_arrays(children, fields=fields, mask=array.is_null() if array.null_count else None)


def _as_string_array(stats: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> pa.Array:
    if isinstance(stats, pa.ChunkedArray):
        stats = combined(stats)
    if not isinstance(stats, pa.Array):
        stats = string_array(list(stats))
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
    return pa.StructArray.from_arrays([combined(c) for c in table.columns], fields=list(read_type))


def _read_slow(lines: pa.Array, read_type: pa.StructType) -> pa.StructArray:
    """Row by row: each value that does not fit its type becomes null."""
    return pa.array([_coerce_document(text, read_type) for text in lines.to_pylist()], read_type)


def _newline_joined(lines: pa.Array) -> pa.Buffer:
    """One buffer with every string followed by a newline, without a Python loop."""
    with_newline = pc.binary_join_element_wise(lines, string_scalar("\n"), string_scalar(""))
    offsets = with_newline.buffers()[1]
    data = with_newline.buffers()[2]
    start = pa.Array.from_buffers(pa.int32(), 1, [None, offsets], offset=with_newline.offset)[0].as_py()
    end = pa.Array.from_buffers(pa.int32(), 1, [None, offsets], offset=with_newline.offset + len(with_newline))[0].as_py()
    return data.slice(start, end - start) if data is not None else pa.py_buffer(b"")


def _coerce_document(text: str | None, read_type: pa.StructType) -> dict[str, Any] | None:
    try:
        document = json.loads(text or "{}", parse_float=Decimal, parse_constant=lambda c: Decimal(c))
    except (ValueError, RecursionError):  # unreadable (or hostilely nested) statistics are unknown ones
        return None
    if not isinstance(document, dict):
        return None
    coerced = _coerce_struct(document, read_type)
    assert coerced is not None
    _forget_unparsable(document, coerced)
    return coerced


def _forget_unparsable(document: dict[str, Any], coerced: dict[str, Any]) -> None:
    """Make a column's statistics unknown (in every family) when one of them did not parse.

    A bound or count that does not fit the column type says the statistics were not
    written for this schema (or not honestly): none of that column's is then trusted.
    A ``numRecords`` that does not parse leaves every null count unknown.
    """
    if document.get("numRecords") is not None and coerced.get("numRecords") is None:
        coerced["nullCount"] = None
    failed: set[tuple[str, ...]] = set()
    for family in _FAMILIES:
        _collect_failures(document.get(family), coerced.get(family), (), failed)
    for path in failed:
        for family in _FAMILIES:
            _set_none(coerced.get(family), path)


def _collect_failures(raw: Any, coerced: Any, path: tuple[str, ...], failed: set[tuple[str, ...]]) -> None:
    if not isinstance(coerced, dict):
        return
    for name, value in coerced.items():
        raw_value = raw.get(name) if isinstance(raw, dict) else None
        if isinstance(value, dict):
            _collect_failures(raw_value, value, (*path, name), failed)
        elif value is None and raw_value is not None:
            failed.add((*path, name))


def _set_none(struct: Any, path: tuple[str, ...]) -> None:
    for name in path[:-1]:
        if not isinstance(struct, dict):
            return
        struct = struct.get(name)
    if isinstance(struct, dict) and path[-1] in struct:
        struct[path[-1]] = None


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
            quantized = quantize_decimal(number, t.scale)
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
        exact = pc.equal(pc.strftime(parsed, format="%Y-%m-%d"), raw).fill_null(bool_scalar(False))
        return pc.if_else(exact, parsed.cast(pa.date32()), null_scalar(pa.date32()))
    if is_min_max and pa.types.is_floating(logical):
        # A NaN bound says nothing usable about the other values: unknown.
        return pc.if_else(pc.is_nan(raw), null_scalar(logical), raw)
    return raw
