"""Literals built from buffers equal pyarrow's own conversion, value for value and error for error."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_delta.engine.expressions.arrow_values import (
    arrow_array,
    arrow_scalar,
    evaluate,
    python_value,
    table_from_rows,
)

_TIMESTAMP = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30))

# (arrow type, strategy of Python values pyarrow converts to it)
CASES: list[tuple[pa.DataType, st.SearchStrategy[Any]]] = [
    (pa.bool_(), st.booleans()),
    (pa.int8(), st.integers(-(2**7), 2**7 - 1)),
    (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.float32(), st.floats(width=32)),
    (pa.float64(), st.floats() | st.integers(-(2**53), 2**53)),
    (pa.string(), st.text()),
    (pa.large_string(), st.text()),
    (pa.binary(), st.binary()),
    (pa.decimal128(10, 2), st.decimals(min_value=-(10**8) + 1, max_value=10**8 - 1, places=2)),
    (pa.decimal128(38, 0), st.integers(-(10**38) + 1, 10**38 - 1)),
    (pa.date32(), st.dates()),
    (pa.timestamp("us"), _TIMESTAMP),
    (pa.timestamp("us", tz="UTC"), _TIMESTAMP | _TIMESTAMP.map(lambda d: d.replace(tzinfo=dt.UTC))),
    (pa.timestamp("ms", tz="UTC"), _TIMESTAMP.map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))),
    (pa.duration("us"), st.timedeltas(min_value=dt.timedelta(days=-10**6), max_value=dt.timedelta(days=10**6))),
]

# Nested types (checkpoint rows: protocol, metaData, txn, domainMetadata), children nullable.
_TEXT = st.none() | st.text(max_size=4)
_STRING_MAP = pa.map_(pa.string(), pa.string())
_MAP_VALUE = st.dictionaries(st.text(max_size=3), _TEXT, max_size=3) | st.lists(st.tuples(st.text(max_size=3), _TEXT), max_size=3)
_PROTOCOL_LIKE = pa.struct([("minReaderVersion", pa.int32()), ("features", pa.list_(pa.string()))])
_METADATA_LIKE = pa.struct([
    ("id", pa.string()), ("format", pa.struct([("provider", pa.string()), ("options", _STRING_MAP)])),
    ("configuration", _STRING_MAP), ("createdTime", pa.int64()),
])
NESTED_CASES: list[tuple[pa.DataType, st.SearchStrategy[Any]]] = [
    (pa.list_(pa.int64()), st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=4)),
    (pa.large_list(pa.string()), st.lists(_TEXT, max_size=4) | st.lists(_TEXT, max_size=4).map(tuple)),
    (_STRING_MAP, _MAP_VALUE),
    (_PROTOCOL_LIKE, st.fixed_dictionaries(
        {}, optional={"minReaderVersion": st.none() | st.integers(1, 3), "features": st.none() | st.lists(_TEXT, max_size=3)})),
    (_METADATA_LIKE, st.fixed_dictionaries({"id": _TEXT}, optional={
        "format": st.none() | st.fixed_dictionaries({"provider": _TEXT, "options": st.none() | _MAP_VALUE}),
        "configuration": st.none() | _MAP_VALUE, "createdTime": st.none() | st.integers(0, 2**62),
    })),
]
CASES += NESTED_CASES


@pytest.mark.parametrize(("arrow_type", "values"), CASES, ids=[str(t) for t, _ in CASES])
@given(data=st.data())
def test_arrays_equal_pyarrows_conversion(arrow_type: pa.DataType, values: st.SearchStrategy[Any], data: Any) -> None:
    items = data.draw(st.lists(st.none() | values, max_size=8))
    expected = pa.array(items, arrow_type)
    got = arrow_array(items, arrow_type)
    assert got.type == arrow_type
    assert _same(got.to_pylist(), expected.to_pylist()), (items, got, expected)
    for value in items:
        scalar = arrow_scalar(value, arrow_type)
        assert scalar.type == arrow_type
        assert _same([python_value(scalar)], [pa.scalar(value, arrow_type).as_py()])


def _same(got: list[Any], expected: list[Any]) -> bool:
    """Equal lists, NaN equal to NaN (with the same sign bit)."""
    def key(v: Any) -> Any:
        return ("nan", math.copysign(1.0, v)) if isinstance(v, float) and math.isnan(v) else v
    return [key(v) for v in got] == [key(v) for v in expected]


@pytest.mark.parametrize(("value", "arrow_type"), [
    (128, pa.int8()),  # out of range
    (2**70, pa.int64()),
    (Decimal("1.234"), pa.decimal128(10, 2)),  # would need rounding
    (Decimal("123456789"), pa.decimal128(5, 0)),  # too many digits
    ("x", pa.int64()),  # wrong Python type: pyarrow's own conversion decides
])
def test_values_pyarrow_refuses_are_refused(value: Any, arrow_type: pa.DataType) -> None:
    refusals = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError)
    with pytest.raises(refusals):
        pa.scalar(value, arrow_type)
    with pytest.raises(refusals):
        arrow_scalar(value, arrow_type)


def test_evaluate_projects_an_expression_over_every_row() -> None:
    table = pa.table({"a": pa.array([1, None, 3], pa.int64()), "b": pa.array(["x", "y", None])})
    result = evaluate(table, pc.and_kleene(pc.greater(pc.field("a"), pc.scalar(arrow_scalar(1, pa.int64()))),
                                           pc.is_valid(pc.field("b"))))
    assert result.to_pylist() == [False, None, False]
    empty = evaluate(table.slice(0, 0), pc.is_null(pc.field("a")))
    assert len(empty) == 0 and empty.type == pa.bool_()


def test_a_lone_surrogate_is_refused_as_pyarrow_refuses_it() -> None:
    with pytest.raises((pa.ArrowException, UnicodeEncodeError)):
        pa.scalar("a\ud800", pa.string())
    with pytest.raises((pa.ArrowException, UnicodeEncodeError)):
        arrow_scalar("a\ud800", pa.string())


@given(rows=st.lists(st.fixed_dictionaries({}, optional={"protocol": NESTED_CASES[3][1], "metaData": NESTED_CASES[4][1]}), max_size=5))
def test_table_from_rows_equals_from_pylist(rows: list[dict[str, Any]]) -> None:
    schema = pa.schema([("protocol", _PROTOCOL_LIKE), ("metaData", _METADATA_LIKE)])
    assert table_from_rows(rows, schema).equals(pa.Table.from_pylist(rows, schema=schema))
