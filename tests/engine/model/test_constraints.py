"""Tests of write-time constraints: NOT NULL, column invariants, CHECK constraints."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import ConstraintViolationError, InvalidLogError
from airflow_delta.engine.model.actions import Metadata, Protocol
from airflow_delta.engine.model.constraints import (
    Constraint,
    check_constraints_of,
    enforce_constraints,
    enforce_not_null,
    invariants_of,
    table_constraints,
)

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("price", pa.float64()), pa.field("name", pa.string())])


def _check(sql: str, name: str = "c") -> tuple[Constraint, ...]:
    return (Constraint(f"CHECK constraint {name}", sql, "check"),)


def _invariant_field(name: str, sql: str) -> dict:
    return {
        "name": name,
        "type": "long",
        "nullable": True,
        "metadata": {"delta.invariants": json.dumps({"expression": {"expression": sql}})},
    }


def test_check_constraints_from_configuration() -> None:
    config = {"delta.constraints.b_positive": "price > 0", "delta.constraints.a_id": "id > 0", "owner": "x"}
    assert check_constraints_of(config) == (
        Constraint("CHECK constraint a_id", "id > 0", "check"),
        Constraint("CHECK constraint b_positive", "price > 0", "check"),
    )


def test_invariants_from_schema_including_nested_struct_fields() -> None:
    schema = {
        "type": "struct",
        "fields": [
            _invariant_field("x", "x > 3"),
            {"name": "s", "type": {"type": "struct", "fields": [_invariant_field("y", "s.y < 10")]}, "nullable": True,
             "metadata": {}},
        ],
    }
    assert invariants_of(schema) == (
        Constraint("invariant on x", "x > 3", "invariant"),
        Constraint("invariant on s.y", "s.y < 10", "invariant"),
    )


def test_unreadable_invariant_is_reported() -> None:
    schema = {"type": "struct", "fields": [{"name": "x", "type": "long", "metadata": {"delta.invariants": "x > 3"}}]}
    with pytest.raises(InvalidLogError, match=r"delta\.invariants"):
        invariants_of(schema)


def test_table_constraints_follow_the_protocol() -> None:
    schema = {"type": "struct", "fields": [_invariant_field("x", "x > 3")]}
    meta = Metadata("t", json.dumps(schema), configuration={"delta.constraints.c": "x < 9"})
    kinds = lambda p: [c.kind for c in table_constraints(p, meta)]  # noqa: E731
    assert kinds(Protocol(1, 1)) == []
    assert kinds(Protocol(1, 2)) == ["invariant"]
    assert kinds(Protocol(1, 3)) == ["invariant", "check"]
    assert kinds(Protocol(1, 7, None, frozenset({"checkConstraints"}))) == ["check"]


def test_check_passes_when_all_rows_true() -> None:
    data = pa.table({"id": [1, 2], "price": [1.0, 2.5], "name": ["a", "b"]}, schema=SCHEMA)
    enforce_constraints(data, _check("price > 0 AND id < 10"), SCHEMA)


def test_check_violation_names_constraint_count_and_example() -> None:
    data = pa.table({"id": [1, 2, 3], "price": [1.0, -2.0, -3.0], "name": ["a", "b", "c"]}, schema=SCHEMA)
    with pytest.raises(ConstraintViolationError, match="positive") as info:
        enforce_constraints(data, _check("price > 0", "positive"), SCHEMA)
    err = info.value
    assert err.constraint == "CHECK constraint positive"
    assert err.expression == "price > 0"
    assert err.violating_rows == 2
    assert err.example == {"price": -2.0}


def test_check_null_result_is_a_violation() -> None:
    # The protocol: CHECK expressions must return true for every row; NULL is not true.
    # (Delta Spark and delta-rs reject such rows as well.)
    data = pa.table({"id": [1, 2], "price": [1.0, None], "name": ["a", "b"]}, schema=SCHEMA)
    with pytest.raises(ConstraintViolationError) as info:
        enforce_constraints(data, _check("price > 0"), SCHEMA)
    assert info.value.violating_rows == 1 and info.value.example == {"price": None}


def test_invariant_null_result_is_a_violation() -> None:
    data = pa.table({"id": [1], "price": [None], "name": ["a"]}, schema=SCHEMA)
    with pytest.raises(ConstraintViolationError, match="invariant on price"):
        enforce_constraints(data, (Constraint("invariant on price", "price > 0", "invariant"),), SCHEMA)


def test_constraint_that_does_not_bind_is_an_invalid_log() -> None:
    data = pa.table({"id": [1], "price": [1.0], "name": ["a"]}, schema=SCHEMA)
    with pytest.raises(InvalidLogError, match="missing_column"):
        enforce_constraints(data, _check("missing_column > 0"), SCHEMA)


def test_constraint_on_empty_data_passes() -> None:
    enforce_constraints(SCHEMA.empty_table(), _check("price > 0"), SCHEMA)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-100, 100)), max_size=30))
def test_check_counts_exactly_the_rows_not_true(values: list[int | None]) -> None:
    schema = pa.schema([pa.field("x", pa.int64())])
    data = pa.table({"x": values}, schema=schema)
    expected = sum(1 for v in values if v is None or not v >= 0)
    if expected == 0:
        enforce_constraints(data, _check("x >= 0"), schema)
        return
    with pytest.raises(ConstraintViolationError) as info:
        enforce_constraints(data, _check("x >= 0"), schema)
    assert info.value.violating_rows == expected


# ------------------------------------------------------------------------------ NOT NULL


def test_not_null_top_level() -> None:
    data = pa.table({"id": [1, None, None], "price": [None, 1.0, 2.0], "name": ["a", "b", "c"]})
    with pytest.raises(ConstraintViolationError, match="NOT NULL constraint on id") as info:
        enforce_not_null(data, SCHEMA)
    assert info.value.violating_rows == 2
    assert info.value.example == {"id": None}


def test_not_null_ok_with_nullable_arrow_field_without_nulls() -> None:
    enforce_not_null(pa.table({"id": [1, 2], "price": [None, None], "name": [None, "b"]}), SCHEMA)


def test_not_null_nested_struct_field_only_counts_where_parent_is_valid() -> None:
    inner = pa.struct([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.int64())])
    schema = pa.schema([pa.field("s", inner)])
    ok = pa.array([{"a": 1, "b": None}, None], type=pa.struct([("a", pa.int64()), ("b", pa.int64())]))
    enforce_not_null(pa.table({"s": ok}), schema)
    bad = pa.array([{"a": 1, "b": 2}, {"a": None, "b": 3}, None], type=pa.struct([("a", pa.int64()), ("b", pa.int64())]))
    with pytest.raises(ConstraintViolationError, match=r"s\.a") as info:
        enforce_not_null(pa.table({"s": bad}), schema)
    assert info.value.violating_rows == 1
    assert info.value.example == {"s": {"a": None, "b": 3}}


def test_not_null_array_elements_and_map_values() -> None:
    schema = pa.schema([pa.field("l", pa.list_(pa.field("element", pa.int64(), nullable=False)))])
    enforce_not_null(pa.table({"l": [[1, 2], None, []]}), schema)
    with pytest.raises(ConstraintViolationError, match=r"l\[\]"):
        enforce_not_null(pa.table({"l": [[1, None]]}), schema)
    map_type = pa.map_(pa.string(), pa.field("value", pa.int64(), nullable=False))
    schema = pa.schema([pa.field("m", map_type)])
    with pytest.raises(ConstraintViolationError, match=r"m\.value"):
        enforce_not_null(pa.table({"m": pa.array([[("k", None)]], pa.map_(pa.string(), pa.int64()))}), schema)


def test_not_null_deeply_nested_struct_points_at_the_row() -> None:
    inner = pa.struct([pa.field("z", pa.int64(), nullable=False)])
    schema = pa.schema([pa.field("s", pa.struct([pa.field("t", inner)]))])
    raw = pa.struct([("t", pa.struct([("z", pa.int64())]))])
    data = pa.table({"s": pa.array([{"t": {"z": 1}}, {"t": None}, None, {"t": {"z": None}}], raw)})
    with pytest.raises(ConstraintViolationError, match=r"s\.t\.z") as info:
        enforce_not_null(data, schema)
    assert info.value.violating_rows == 1 and info.value.example == {"s": {"t": {"z": None}}}
