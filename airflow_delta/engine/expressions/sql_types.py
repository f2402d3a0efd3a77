"""Spark SQL's type rules over Arrow types: names for messages, common types, decimal results."""

from __future__ import annotations

import pyarrow as pa

from airflow_delta.engine.expressions.tree import Literal, Node


def _type_name(t: pa.DataType) -> str:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_int8(t):
        return "byte"
    if pa.types.is_int16(t):
        return "short"
    if pa.types.is_int32(t):
        return "integer"
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_null(t):
        return "NULL"
    return str(t)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}


def _as_decimal(t: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal(t):
        return t
    return pa.decimal128(_INT_DIGITS[t.bit_width] + (1 if pa.types.is_unsigned_integer(t) else 0), 0)


def _numeric_common(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if pa.types.is_floating(a) or pa.types.is_floating(b):
        if pa.types.is_float32(a) and pa.types.is_float32(b):
            return pa.float32()
        return pa.float64()
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return a if a.bit_width >= b.bit_width else b
    da, db = _as_decimal(a), _as_decimal(b)
    scale = max(da.scale, db.scale)
    integer_digits = max(da.precision - da.scale, db.precision - db.scale)
    return pa.decimal128(min(38, integer_digits + scale), scale)


def _common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type two operands are compared (or combined) in, or None if they do not mix."""
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if _is_numeric(a) and _is_numeric(b):
        return _numeric_common(a, b)
    if _is_string(a) and _is_string(b):
        return pa.string()
    if _is_binary(a) and _is_binary(b):
        return pa.binary()
    if pa.types.is_boolean(a) and pa.types.is_boolean(b):
        return a
    if pa.types.is_date(a) and pa.types.is_date(b):
        return pa.date32()
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        if a.tz == b.tz:
            return a if a.unit == b.unit else pa.timestamp("us", a.tz) if "ns" not in (a.unit, b.unit) else pa.timestamp("ns", a.tz)
        return pa.timestamp("us", "UTC")
    if pa.types.is_date(a) and pa.types.is_timestamp(b):
        return b
    if pa.types.is_timestamp(a) and pa.types.is_date(b):
        return a
    return None


# Spark's decimal type for an integer operand of decimal arithmetic (DecimalType.forType).
_SPARK_INTEGER_DECIMAL_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}


def _spark_operand_decimal(node: Node) -> pa.Decimal128Type | None:
    t = node.type
    if pa.types.is_decimal(t):
        return t if t.precision <= 38 else None
    if not pa.types.is_integer(t) or pa.types.is_unsigned_integer(t):
        return None
    if isinstance(node, Literal) and isinstance(node.value, int):
        # An integer literal takes the fewest digits that hold it (DecimalType.fromLiteral).
        return pa.decimal128(max(1, len(str(abs(node.value)))), 0)
    return pa.decimal128(_SPARK_INTEGER_DECIMAL_DIGITS[t.bit_width], 0)


def _spark_decimal_arith(op: str, left: Node, right: Node) -> tuple[pa.DataType, pa.DataType, pa.DataType] | None:
    """Operand and result types of Spark's exact decimal ``left op right``, or None to use double.

    Spark's result types: ``+``/``-``: scale max(s1, s2), precision max(p1-s1, p2-s2) +
    scale + 1; ``*``: (p1 + p2 + 1, s1 + s2); ``/``: scale max(6, s1 + p2 + 1), precision
    p1 - s1 + s2 + scale. When that precision exceeds 38 Spark cuts the scale and rounds
    (with an intermediate rounding to 38 significant digits); that case is left to double
    arithmetic rather than imitated approximately.
    """
    lt, rt = _spark_operand_decimal(left), _spark_operand_decimal(right)
    if lt is None or rt is None:
        return None
    p1, s1, p2, s2 = lt.precision, lt.scale, rt.precision, rt.scale
    if op in ("+", "-"):
        scale = max(s1, s2)
        precision = max(p1 - s1, p2 - s2) + scale + 1
    elif op == "*":
        precision, scale = p1 + p2 + 1, s1 + s2
    elif op == "/":
        scale = max(6, s1 + p2 + 1)
        precision = p1 - s1 + s2 + scale
    else:
        return None
    if precision > 38:
        return None
    return lt, rt, pa.decimal128(precision, scale)
