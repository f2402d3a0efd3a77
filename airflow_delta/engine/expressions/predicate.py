"""``Predicate``: a SQL filter bound to a table schema, and questions about the columns it uses."""

from __future__ import annotations

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

    @property
    def columns(self) -> tuple[str, ...]:
        """Top-level logical column names referenced, in order of first appearance."""
        seen: dict[str, None] = {}
        for ref in _column_refs(self.root):
            seen.setdefault(ref.path[0], None)
        return tuple(seen)

    @property
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
        try:
            expression = _to_arrow(self.root)
        except RecursionError:
            # Bound filters are at most MAX_FILTER_DEPTH deep; a tree built by hand may not be.
            raise InvalidFilterError(self.sql, f"it nests operators too deeply (at most {MAX_FILTER_DEPTH} levels)") from None
        if nulls_as_false:
            expression = pc.coalesce(expression, pc.scalar(FALSE))
        return expression

    def __str__(self) -> str:
        return self.sql


def references_only(predicate: Predicate, columns: Iterable[str]) -> bool:
    """True if every column ``predicate`` references is one of ``columns`` (case-insensitive).

    E.g. ``references_only(p, partition_columns)`` tells whether ``p`` is a partition-only
    predicate, which can be decided from the log alone.
    """
    allowed = {c.casefold() for c in columns}
    return all(name.casefold() in allowed for name in predicate.columns)
