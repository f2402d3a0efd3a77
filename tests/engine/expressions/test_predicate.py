"""Predicate: immutable, the columns it references, references_only."""

from __future__ import annotations

import pytest

from airflow_delta.engine.expressions import Predicate, parse_predicate, references_only
from tests.engine.expressions.sample_table_helpers import SCHEMA


def test_predicate_is_immutable_and_reports_columns() -> None:
    p = parse_predicate("S.b = 'x' AND id > 1 AND s.a = 1 AND `my col` = 2", SCHEMA)
    assert p.columns == ("s", "id", "My Col")
    assert p.column_paths == (("s", "b"), ("id",), ("s", "a"), ("My Col",))
    assert p.sql == "S.b = 'x' AND id > 1 AND s.a = 1 AND `my col` = 2"
    with pytest.raises(AttributeError):
        p.sql = "other"  # type: ignore[misc]
    assert parse_predicate(p, SCHEMA) is p
    assert str(p) == p.sql


def test_references_only() -> None:
    p = parse_predicate("dt = 'x' AND D > '2020-01-01'", SCHEMA)
    assert references_only(p, ["dt", "d"])
    assert references_only(p, ["DT", "D", "id"])
    assert not references_only(p, ["dt"])
    assert references_only(parse_predicate("true", SCHEMA), [])


def test_predicate_type_is_exported() -> None:
    assert isinstance(parse_predicate("id = 1", SCHEMA), Predicate)
