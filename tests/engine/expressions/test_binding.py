"""Binding SQL filters to a schema: literals, ESCAPE, and errors that say what to fix."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from airflow_delta.engine.errors import InvalidFilterError
from airflow_delta.engine.expressions import parse_predicate
from tests.engine.expressions.sample_table_helpers import SCHEMA


def test_like_with_escape_clause() -> None:
    schema = pa.schema([("s", pa.string())])
    table = pa.table({"s": ["a%b", "axb", "a\\b"]})
    p = parse_predicate("s LIKE 'a!%b' ESCAPE '!'", schema)
    assert table.filter(p.to_arrow()).column("s").to_pylist() == ["a%b"]
    p = parse_predicate("s ILIKE 'A%'", schema)
    assert table.filter(p.to_arrow()).num_rows == 3


def test_timestamp_ntz_literals() -> None:
    schema = pa.schema([("t", pa.timestamp("us"))])
    table = pa.table({"t": pa.array([dt.datetime(2024, 1, 1, 10), dt.datetime(2024, 1, 2)], pa.timestamp("us"))})
    assert table.filter(parse_predicate("t < '2024-01-01 12:00'", schema).to_arrow()).num_rows == 1
    assert table.filter(parse_predicate("t >= TIMESTAMP_NTZ '2024-01-02'", schema).to_arrow()).num_rows == 1
    with pytest.raises(InvalidFilterError, match="timestamp_ntz"):
        parse_predicate("t = '2024-01-01T00:00:00Z'", schema)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("nope = 1", r"column 'nope' does not exist in the table; available columns: id, dt, d"),
        ("s.zz = 1", r"'s.zz' does not exist in struct s; available columns: a, b"),
        ("id.x = 1", "not a struct"),
        ("dt = 5", r"string column but 5 is a number; quote the value: column dt = '5'"),
        ("d = 'yesterday'", "not a date"),
        ("id = 'abc'", "not a number"),
        ("d = 5", "cannot compare"),
        ("ts > current_timestamp()", "not deterministic"),
        ("d = current_date()", "not deterministic"),
        ("rand() > 0.5", "not deterministic"),
        ("foo(id) = 1", r"function foo\(\) is not supported"),
        ("id IN (SELECT 1)", "subquer"),
        ("id = 1 OR", "not valid Spark SQL"),
        ("id = 1; dt = 'x'", "exactly one condition"),
        ("", "empty"),
        ("   ", "empty"),
        ("id", "must be a condition"),
        ("id + 1", "must be a condition"),
        ("id AND flag", "not a condition"),
        ("d + 1 > d", "date/time arithmetic"),
        ("dt + 1 = 2", "numeric"),
        ("s = 1", "cannot compare"),
        ("id LIKE 'a%'", "LIKE needs string"),
        ("dt LIKE dt", "quoted string literal"),
        ("CAST(id AS date) = '2020-01-01'", "cannot CAST"),
        ("id IS 5", "IS must be followed by"),
        ("SELECT 1", "not a statement"),
        ("DELETE FROM t", "not a statement"),
    ],
)
def test_invalid_filters_say_what_to_fix(sql: str, message: str) -> None:
    with pytest.raises(InvalidFilterError, match=message) as info:
        parse_predicate(sql, SCHEMA)
    assert info.value.filter_sql == sql


def test_ambiguous_column_names_need_exact_quoting() -> None:
    schema = pa.schema([("Ab", pa.int32()), ("aB", pa.int32())])
    with pytest.raises(InvalidFilterError, match="ambiguous"):
        parse_predicate("ab = 1", schema)
    assert parse_predicate("`aB` = 1", schema).columns == ("aB",)
