"""Arrow values of Python literals, and evaluating an expression, without pandas or pyarrow.dataset.

pyarrow imports pandas (when installed: ~0.2 s, ~55 MB) on its first conversion of a
Python object (``pa.scalar(v)``, ``pa.array([...])``, a Python value as a compute
argument), and ``pyarrow.dataset`` imports it at once. Filters are parsed, folded and
pruned on the read path, so their literals are built here from buffers instead, and
expressions are evaluated by Acero's core (``table_source`` then ``project``), which
``pyarrow.dataset`` only wraps. Values this module does not know how to build (nested
types, unusual Python types) fall back to ``pa.scalar`` / ``pa.array``, with the same
result and errors.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow._acero import Declaration, ProjectNodeOptions, TableSourceNodeOptions

__all__ = ["FALSE", "TRUE", "arrow_array", "arrow_scalar", "evaluate", "python_value", "table_from_rows"]

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
# The types values are first built as; a cast to the same type is skipped (a compute call
# per literal is most of the cost of binding a filter of thousands of terms).
_INT64, _FLOAT64, _STRING = pa.int64(), pa.float64(), pa.string()


def arrow_scalar(value: Any, arrow_type: pa.DataType) -> pa.Scalar:
    """``pa.scalar(value, arrow_type)``, built without importing pandas."""
    return arrow_array([value], arrow_type)[0]


def arrow_array(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """``pa.array(values, arrow_type)``, built without importing pandas."""
    values = list(values)
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    present = [v for v in values if v is not None]
    built = _build(present, arrow_type)
    if built is None:
        return pa.array(values, arrow_type)
    if valid.all():
        return built
    # Spread the built values over their positions; the rest are null.
    positions = np.cumsum(valid) - 1
    indices = pa.Array.from_buffers(
        pa.int64(), len(values),
        [pa.py_buffer(np.packbits(valid, bitorder="little")), pa.py_buffer(np.where(valid, positions, 0).astype(np.int64))],
    )
    return built.take(indices)


def _numbers(data: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    return pa.Array.from_buffers(arrow_type, len(data), [None, pa.py_buffer(np.ascontiguousarray(data))])


def _texts(encoded: list[bytes], arrow_type: pa.DataType) -> pa.Array:
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.Array.from_buffers(arrow_type, len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def _build(values: list[Any], t: pa.DataType) -> pa.Array | None:
    """The non-null ``values`` as an array of ``t``, or None where pyarrow's own conversion is needed."""
    if pa.types.is_null(t):
        return pa.nulls(len(values)) if not values else None
    if pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        return _build_nested(values, t)
    if pa.types.is_boolean(t):
        if not all(isinstance(v, bool | np.bool_) for v in values):
            return None
        bits = np.packbits(np.array(values, dtype=bool), bitorder="little")
        return pa.Array.from_buffers(t, len(values), [None, pa.py_buffer(bits)])
    if pa.types.is_integer(t):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return None
        try:
            data = np.array(values, dtype=np.int64)
        except OverflowError:
            return None
        built = _numbers(data, pa.int64())
        return built if t.id == _INT64.id else built.cast(t)  # a safe cast: out of range raises as pa.scalar does
    if pa.types.is_floating(t):
        if not all(isinstance(v, float | int) and not isinstance(v, bool) for v in values):
            return None
        built = _numbers(np.array(values, dtype=np.float64), pa.float64())
        return built if t.id == _FLOAT64.id else built.cast(t, safe=False)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if not all(isinstance(v, str) for v in values):
            return None
        try:
            encoded = [v.encode() for v in values]
        except UnicodeEncodeError:  # a lone surrogate: pyarrow's own conversion reports it
            return None
        built = _texts(encoded, pa.string())
        return built if t.id == _STRING.id else built.cast(t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        if not all(isinstance(v, bytes) for v in values):
            return None
        return _texts(values, pa.binary()).cast(t)
    if pa.types.is_decimal(t):
        if not all(isinstance(v, Decimal | int) and not isinstance(v, bool) for v in values):
            return None
        if not all(Decimal(v).is_finite() for v in values):
            return None
        # Through text: exact, and a value that needs rounding is refused as pa.scalar refuses it.
        return _texts([format(Decimal(v), "f").encode() for v in values], pa.string()).cast(t)
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        if not all(isinstance(v, dt.date) and not isinstance(v, dt.datetime) for v in values):
            return None
        days = np.array([v.toordinal() - _EPOCH.toordinal() for v in values], dtype=np.int32)
        return _numbers(days, pa.date32()).cast(t)
    if pa.types.is_timestamp(t):
        if not all(isinstance(v, dt.datetime) for v in values):
            return None
        return _numbers(np.array([_ticks(v, t.unit, zoned=t.tz is not None) for v in values], dtype=np.int64), t)
    if pa.types.is_duration(t):
        if not all(isinstance(v, dt.timedelta) for v in values):
            return None
        per = _PER_SECOND[t.unit]
        ticks = [(v.days * 86_400 + v.seconds) * per + v.microseconds * per // 1_000_000 for v in values]
        return _numbers(np.array(ticks, dtype=np.int64), t)
    return None


def _build_nested(values: list[Any], t: pa.DataType) -> pa.Array | None:
    """Structs (dicts), lists (lists or tuples) and maps (dicts or lists of pairs), children
    built by :func:`arrow_array`; None for any other shape (pyarrow's conversion decides)."""
    if pa.types.is_struct(t):
        if not all(isinstance(v, dict) for v in values):
            return None
        fields = [t.field(i) for i in range(t.num_fields)]
        children = [arrow_array([v.get(f.name) for v in values], f.type) for f in fields]
        if not fields:
            return None
        return pa.StructArray.from_arrays(children, fields=fields)
    if pa.types.is_map(t):
        pairs: list[list[Any]] = []
        for v in values:
            if isinstance(v, dict):
                pairs.append(list(v.items()))
            elif isinstance(v, list | tuple) and all(isinstance(p, tuple | list) and len(p) == 2 for p in v):
                pairs.append(list(v))
            else:
                return None
        flat = [p for row in pairs for p in row]
        keys = arrow_array([k for k, _ in flat], t.key_type)
        items = arrow_array([i for _, i in flat], t.item_type)
        return pa.MapArray.from_arrays(_offsets([len(row) for row in pairs], np.int32), keys, items, type=t)
    if not all(isinstance(v, list | tuple) for v in values):
        return None
    flat_values = [x for v in values for x in v]
    large = pa.types.is_large_list(t)
    offsets = _offsets([len(v) for v in values], np.int64 if large else np.int32)
    array_type = pa.LargeListArray if large else pa.ListArray
    return array_type.from_arrays(offsets, arrow_array(flat_values, t.value_type), type=t)


def _offsets(lengths: list[int], dtype: type) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=dtype)
    np.cumsum(lengths, out=offsets[1:])
    arrow_type = pa.int64() if dtype is np.int64 else pa.int32()
    return pa.Array.from_buffers(arrow_type, len(offsets), [None, pa.py_buffer(offsets)])


def table_from_rows(rows: Sequence[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """``pa.Table.from_pylist(rows, schema=schema)``, built without importing pandas."""
    return pa.Table.from_arrays([arrow_array([r.get(f.name) for r in rows], f.type) for f in schema], schema=schema)


def _ticks(value: dt.datetime, unit: str, zoned: bool) -> int:
    """``value`` as ticks of ``unit`` since the epoch, as pyarrow converts it: an aware
    datetime as its instant, a naive one as UTC wall-clock time."""
    delta = value - _EPOCH_UTC if value.tzinfo is not None else value - _EPOCH
    per = _PER_SECOND[unit]
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return micros * per // 1_000_000 if per >= 1_000_000 else micros // (1_000_000 // per)


TRUE: pa.BooleanScalar = arrow_scalar(True, pa.bool_())
FALSE: pa.BooleanScalar = arrow_scalar(False, pa.bool_())


def evaluate(table: pa.Table, expression: pc.Expression) -> pa.Array:
    """``expression`` evaluated on every row of ``table``, as one array.

    (``pyarrow.dataset``'s ``to_table(columns={...})`` does the same through this very
    plan, but importing it imports pandas.)
    """
    plan = Declaration.from_sequence([
        Declaration("table_source", TableSourceNodeOptions(table)),
        Declaration("project", ProjectNodeOptions([expression], ["r"])),
    ])
    column = plan.to_table(use_threads=False).column(0)
    if column.num_chunks == 1:
        return column.chunk(0)
    return column.combine_chunks() if column.num_chunks else pa.nulls(0, column.type)


def python_value(scalar: pa.Scalar) -> Any:
    """``scalar.as_py()``; a UTC timestamp is converted without pandas (``as_py`` imports it)."""
    t = scalar.type
    if pa.types.is_timestamp(t) and t.tz in ("UTC", "+00:00", "Z") and t.unit != "ns":
        if not scalar.is_valid:
            return None
        naive = scalar.cast(pa.timestamp(t.unit)).as_py()
        return naive.replace(tzinfo=dt.UTC)
    return scalar.as_py()
