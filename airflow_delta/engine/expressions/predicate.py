"""``Predicate``: a SQL filter bound to a table schema, and questions about the columns it uses."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow.compute as pc

from airflow_delta.engine.errors import InvalidFilterError
from airflow_delta.engine.expressions.arrow import _to_arrow
from airflow_delta.engine.expressions.arrow_values import FALSE
from airflow_delta.engine.expressions.limits import MAX_FILTER_DEPTH
from airflow_delta.engine.expressions.tree import Node, _column_refs


@dataclass(frozen=True)
class Predicate:
    """A SQL filter bound to a table schema; build it with :func:`parse_predicate`."""

    sql: str
    root: Node

    # The answers below are computed once per predicate (it is immutable, and parse_predicate
    # hands the same object to a read, its plan and a DELETE's conflict check): for a filter
    # of thousands of terms each walk or conversion costs a noticeable part of a second.
    # cached_property stores in the instance __dict__, which a frozen dataclass allows.

    @functools.cached_property
    def columns(self) -> tuple[str, ...]:
        """Top-level logical column names referenced, in order of first appearance."""
        return tuple(dict.fromkeys(path[0] for path in self.column_paths))

    @functools.cached_property
    def column_paths(self) -> tuple[tuple[str, ...], ...]:
        """Full paths of the referenced columns (nested fields included)."""
        seen: dict[tuple[str, ...], None] = {}
        for ref in _column_refs(self.root):
            seen.setdefault(ref.path, None)
        return tuple(seen)

    def to_arrow(self, *, nulls_as_false: bool = False) -> pc.Expression:
        """The row filter over logical column names.

        With SQL semantics the expression is NULL where the predicate is unknown;
        ``Table.filter`` and dataset scans drop those rows. ``nulls_as_false=True`` gives
        a two-valued expression instead, so that its negation selects exactly the rows
        the predicate does not accept (what a DELETE keeps).
        """
        if nulls_as_false:
            return self._two_valued_expression
        return self._expression

    @functools.cached_property
    def _expression(self) -> pc.Expression:
        try:
            return _to_arrow(self.root)
        except RecursionError:
            # Bound filters are at most MAX_FILTER_DEPTH deep; a tree built by hand may not be.
            raise InvalidFilterError(self.sql, f"it nests operators too deeply (at most {MAX_FILTER_DEPTH} levels)") from None

    @functools.cached_property
    def _two_valued_expression(self) -> pc.Expression:
        return pc.coalesce(self._expression, pc.scalar(FALSE))

    def __str__(self) -> str:
        return self.sql


def references_only(predicate: Predicate, columns: Iterable[str]) -> bool:
    """True if every column ``predicate`` references is one of ``columns`` (case-insensitive).

    E.g. ``references_only(p, partition_columns)`` tells whether ``p`` is a partition-only
    predicate, which can be decided from the log alone.
    """
    allowed = {c.casefold() for c in columns}
    return all(name.casefold() in allowed for name in predicate.columns)
