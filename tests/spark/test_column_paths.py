"""Column paths of SET targets, read without Spark: parsing, quoting and Delta's conflicting SETs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_delta.engine import InvalidArgumentError
from airflow_delta.spark.column_paths import conflicting_paths, format_column_path, parse_column_path, set_target_paths


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("id", ("id",)),
        ("address.city", ("address", "city")),
        ("a.b.c.d", ("a", "b", "c", "d")),
        ("`a.b`.c", ("a.b", "c")),
        ("a.`odd``name`", ("a", "odd`name")),
        (" a . b ", ("a", "b")),
        ("`  spaced `.x", ("  spaced ", "x")),
    ],
)
def test_parse_reads_dots_and_backticks(text: str, names: tuple[str, ...]) -> None:
    assert parse_column_path(text, argument="set") == names


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a..b", "no empty name"),
        (".a", "no empty name"),
        ("a.", "no empty name"),
        ("``", "no empty name"),
        ("`a.b", "closed"),
        ("x`a`", "whole"),
        ("`a`x", "whole"),
    ],
)
def test_parse_refuses_malformed_paths_naming_the_argument(text: str, says: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        set_target_paths("UpdateSpec.set", {text: "1"})
    assert caught.value.argument == f"UpdateSpec.set[{text!r}]"
    assert says in str(caught.value)


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8).filter(
    lambda name: name.strip() == name and name.strip()
)


@given(st.lists(names, min_size=1, max_size=4))
def test_format_then_parse_gives_the_names_back(path: list[str]) -> None:
    assert parse_column_path(format_column_path(path), argument="set") == tuple(path)


@pytest.mark.parametrize(
    ("paths", "conflict"),
    [
        ([("a",), ("b",)], None),
        ([("a", "b"), ("a", "c"), ("a", "d", "e")], None),  # fields of one struct combine
        ([("a",), ("a", "b")], ["a", "a.b"]),
        ([("a", "b", "c"), ("A", "B")], ["a.b.c", "A.B"]),  # names compared ignoring case, as Spark
        ([("x",), ("a", "b"), ("a", "B")], ["a.b", "a.B"]),
    ],
)
def test_conflicts_are_a_path_and_one_inside_it(paths: list[tuple[str, ...]], conflict: list[str] | None) -> None:
    assert conflicting_paths(paths) == conflict


def test_set_target_paths_names_the_conflict_and_what_to_do() -> None:
    assert set_target_paths("set", {"a.b": "1", "a.c": "2"}) == {"a.b": ("a", "b"), "a.c": ("a", "c")}
    with pytest.raises(InvalidArgumentError) as caught:
        set_target_paths("MergeClause.assignments", {"address": "s.address", "address.city": "'Oslo'"})
    assert caught.value.argument == "MergeClause.assignments"
    assert "'address' and 'address.city' conflict" in str(caught.value)
