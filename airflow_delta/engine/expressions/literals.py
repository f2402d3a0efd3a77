"""Literal values: Spark's typing of numbers, and quoted strings read as dates, timestamps, numbers."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from airflow_delta.engine.expressions.arrow_values import arrow_scalar, python_value
from airflow_delta.engine.expressions.sql_types import _is_binary, _is_numeric, _is_string, _numeric_common, _type_name
from airflow_delta.engine.expressions.tree import Literal

_TIMESTAMP_RE = re.compile(
    r"^\s*(\d{4,})-(\d{1,2})-(\d{1,2})"
    r"(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|UTC|[+-]\d{2}(?::?\d{2})?)?\s*$",
    re.IGNORECASE,
)


def _parse_timestamp(text: str, tz: str | None) -> dt.datetime:
    match = _TIMESTAMP_RE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a timestamp; write 'YYYY-MM-DD HH:MM:SS[.ffffff][Z|+HH:MM]'")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    value = dt.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0), micros)
    if zone is not None:
        if tz is None:
            raise ValueError(f"{text!r} has a time zone, but the column is a timestamp_ntz (without time zone)")
        if zone.upper() in ("Z", "UTC"):
            offset = dt.timedelta(0)
        else:
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            offset = sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        value = (value - offset).replace(tzinfo=dt.UTC)
    elif tz is not None:
        value = value.replace(tzinfo=dt.UTC)
    return value


# The strings Spark casts to a special double, in any letter case.
_SPECIAL_DOUBLES = frozenset({"nan", "inf", "+inf", "infinity", "+infinity", "-inf", "-infinity"})


def _number_literal(text: str) -> Literal:
    """A numeric literal typed as Spark types it: integers by size, 1.5 as decimal, 1e3 as double."""
    clean = text.strip()
    if re.search(r"[eE]", clean) or clean.lower() in _SPECIAL_DOUBLES:
        return Literal(float(clean), pa.float64())
    if "." not in clean:
        value = int(clean)
        for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64()):
            bound = 1 << (t.bit_width - 1)
            if -bound <= value < bound:
                return Literal(value, t)
        if len(str(abs(value))) <= 38:
            return Literal(Decimal(value), pa.decimal128(38, 0))
        return Literal(float(value), pa.float64())
    number = Decimal(clean)
    sign_digits_exp = number.as_tuple()
    exponent = int(sign_digits_exp.exponent)
    scale = max(0, -exponent)
    precision = max(len(sign_digits_exp.digits) + max(0, exponent), scale, 1)
    if precision > 38:
        return Literal(float(number), pa.float64())
    return Literal(number, pa.decimal128(precision, scale))


def _literal_as(lit: Literal, target: pa.DataType) -> Any:
    """``lit``'s value as a value of ``target`` (raises ValueError if it does not convert)."""
    if lit.value is None:
        return None
    if lit.untyped_string:
        return _string_as(lit.value, target)
    if lit.type.equals(target):
        return lit.value
    if _widens_integer(lit, target):
        return lit.value
    try:
        scalar = arrow_scalar(lit.value, lit.type).cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"{lit.value!r} does not fit {_type_name(target)}: {exc}") from None
    return python_value(scalar)


def _widens_integer(lit: Literal, target: pa.DataType) -> bool:
    """An integer literal going to a signed integer type at least as wide: the value is unchanged.

    (What the cast would give, without a compute call per literal: a filter of 10,000
    comparisons binds 10,000 of them.)
    """
    return (
        pa.types.is_signed_integer(lit.type)
        and pa.types.is_signed_integer(target)
        and target.bit_width >= lit.type.bit_width
        and type(lit.value) is int
        and -(1 << (lit.type.bit_width - 1)) <= lit.value < 1 << (lit.type.bit_width - 1)
    )


def _string_as(text: str, target: pa.DataType) -> Any:
    if _is_string(target):
        return text
    if pa.types.is_date(target):
        try:
            return dt.date.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not a date; write 'YYYY-MM-DD'") from None
    if pa.types.is_timestamp(target):
        return _parse_timestamp(text, target.tz)
    if _is_numeric(target):
        try:
            number = _number_literal(text)
        except (ValueError, InvalidOperation):
            raise ValueError(f"{text!r} is not a number") from None
        return _literal_as(number, target)
    if pa.types.is_boolean(target):
        lowered = text.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise ValueError(f"{text!r} is not a boolean; write true or false")
    if _is_binary(target):
        return text.encode()
    raise ValueError(f"a string cannot be read as {_type_name(target)}")


def _string_literal_type(lit: Literal, other: pa.DataType) -> pa.DataType:
    """The type a quoted literal takes when it meets ``other``."""
    if _is_numeric(other):
        number = _number_literal(lit.value)
        return _numeric_common(other, number.type)
    return other
