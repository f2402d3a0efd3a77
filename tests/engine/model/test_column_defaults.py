"""Identity, generated and default column metadata: Delta's high-water-mark arithmetic."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_delta.engine.errors import InvalidLogError
from airflow_delta.engine.model.actions import Metadata
from airflow_delta.engine.model.column_defaults import (
    IDENTITY_HIGH_WATER_MARK_KEY,
    IdentityColumn,
    column_default_expressions,
    generated_columns,
    identity_columns,
    is_identity_only_update,
    round_to_next,
    with_identity_high_water_marks,
    with_merged_high_water_marks,
)


def _identity_field(name: str, start: int, step: int, mark: int | None = None, explicit: bool = False) -> dict:
    meta: dict = {"delta.identity.start": start, "delta.identity.step": step, "delta.identity.allowExplicitInsert": explicit}
    if mark is not None:
        meta[IDENTITY_HIGH_WATER_MARK_KEY] = mark
    return {"name": name, "type": "long", "nullable": True, "metadata": meta}


def _metadata(*fields: dict) -> Metadata:
    return Metadata(id="t", schema_string=json.dumps({"type": "struct", "fields": list(fields)}))


def _column(start: int, step: int, mark: int | None = None) -> IdentityColumn:
    return IdentityColumn("id", "id", start, step, mark, False)


@pytest.mark.parametrize(
    ("start", "step", "value", "expected"),
    [
        (1, 1, 5, 5),  # on the sequence
        (1, 3, 5, 7),  # 1, 4, 7: up to the next one
        (10, 3, 9, 10),  # before start: not past start (Delta does not add one then)
        (0, -3, -4, -6),  # 0, -3, -6
        (0, -3, 2, 0),  # before start of a negative sequence
        (5, -3, -1, -1),  # 5, 2, -1
    ],
)
def test_round_to_next(start: int, step: int, value: int, expected: int) -> None:
    assert round_to_next(start, step, value) == expected


@given(st.integers(-1000, 1000), st.integers(-50, 50).filter(bool), st.integers(-10_000, 10_000))
def test_round_to_next_is_on_the_sequence_and_not_behind(start: int, step: int, value: int) -> None:
    rounded = round_to_next(start, step, value)
    assert (rounded - start) % step == 0
    # never behind the value in the step's direction, and less than one step ahead
    ahead = (rounded - value) if step > 0 else (value - rounded)
    assert 0 <= ahead < abs(step)


def test_first_values_and_high_water_marks() -> None:
    fresh = _column(1, 1)
    assert fresh.first_value == 1 and fresh.value(4) == 5
    assert fresh.next_high_water_mark(5) == 5
    negative = _column(0, -3, -6)
    assert negative.first_value == -9 and negative.value(1) == -12
    assert negative.next_high_water_mark(-12) == -12
    assert negative.next_high_water_mark(-3) is None  # behind the mark: the mark never moves back
    assert _column(10, 3).next_high_water_mark(9) is None  # before start: nothing recorded
    assert _column(10, 3, 4).next_high_water_mark(9) == 10  # a mark before start is repaired


def test_long_overflow_is_an_error() -> None:
    with pytest.raises(InvalidLogError, match="overflow"):
        _column(2**63 - 2, 1, 2**63 - 1).value(0)


def test_columns_from_metadata() -> None:
    schema = {
        "type": "struct",
        "fields": [
            _identity_field("id", 1, -3, -5, explicit=True),
            {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
            {"name": "d", "type": "date", "nullable": True, "metadata": {"delta.generationExpression": "CAST(ts AS DATE)"}},
            {"name": "n", "type": "integer", "nullable": True, "metadata": {"CURRENT_DEFAULT": "42", "EXISTS_DEFAULT": "42"}},
        ],
    }
    (identity,) = identity_columns(schema)
    assert (identity.start, identity.step, identity.high_water_mark, identity.generated_always) == (1, -3, -5, False)
    assert generated_columns(schema) == {"d": "CAST(ts AS DATE)"}
    assert column_default_expressions(schema) == {"n": "42"}


def test_half_identity_metadata_is_invalid() -> None:
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {"delta.identity.start": 1}}]}
    with pytest.raises(InvalidLogError, match="lacks"):
        identity_columns(schema)


def test_high_water_mark_update_is_identity_only() -> None:
    before = _metadata(_identity_field("id", 1, 1, 10), {"name": "x", "type": "string", "nullable": True, "metadata": {}})
    after = with_identity_high_water_marks(before, {"id": 15})
    assert identity_columns(after.schema_string)[0].high_water_mark == 15
    assert is_identity_only_update(before, after)
    assert with_identity_high_water_marks(before, {"id": 3}) is before  # behind the mark: unchanged
    other = Metadata(id="t", schema_string=after.schema_string, configuration={"delta.appendOnly": "true"})
    assert not is_identity_only_update(before, other)


def test_restore_keeps_the_further_mark() -> None:
    old = _metadata(_identity_field("id", 1, 1, 10))
    latest = _metadata(_identity_field("id", 1, 1, 40))
    assert identity_columns(with_merged_high_water_marks(old, latest).schema_string)[0].high_water_mark == 40
    assert with_merged_high_water_marks(latest, old) is latest
