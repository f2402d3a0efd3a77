"""Binding: a SQL filter string bound to a table schema (:func:`parse_predicate`).

Columns are resolved case-insensitively, literals coerced to the column types and types
checked, so that mistakes surface as :class:`InvalidFilterError` (with what to fix)
before any data is read; column-free sub-expressions are folded to literals.

Two readers of the text share the binder's rules (:mod:`.binder`): the most common
filters (``col op literal`` combined with AND / OR / NOT, ``IN`` lists of literals,
``IS [NOT] NULL``) are read by :mod:`.simple_filter` without sqlglot, whose import costs
a one-row DELETE about a fifth of its process time; anything else, and every filter with
something to report, goes through sqlglot's Spark dialect (:mod:`.sql_binding`), so the
messages are the same whichever reader saw the filter first. Both give the same bound
tree for the same text (tests/engine/expressions/test_simple_filter.py).
"""

from __future__ import annotations

import functools

import pyarrow as pa

from airflow_delta.engine.errors import InvalidFilterError
from airflow_delta.engine.expressions.limits import (
    MAX_FILTER_NESTING,
    MAX_FILTER_NODES,
    UNPARSEABLE_PARENTHESES,
    parentheses_deeper_than,
    run_with_deep_recursion,
)
from airflow_delta.engine.expressions.predicate import Predicate
from airflow_delta.engine.expressions.sql_types import _type_name
from airflow_delta.engine.expressions.tree import _BOOL, Literal, Node, _children


def parse_predicate(sql: str | Predicate, schema: pa.Schema) -> Predicate:
    """Parse and bind a SQL boolean expression; raise :class:`InvalidFilterError` if it does not fit ``schema``."""
    if isinstance(sql, Predicate):
        return sql
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidFilterError(str(sql), "the filter is empty; write a SQL condition such as \"id > 10\"")
    return _parse_cached(sql, schema)


@functools.lru_cache(maxsize=32)
def _parse_cached(sql: str, schema: pa.Schema) -> Predicate:
    """Bound filters are immutable: a read, its plan and a DELETE's conflict check share one parse."""
    # Parentheses too deep for sqlglot to parse are refused before it tries: it would
    # recurse some 45,000 frames before giving up (a second or more for the same answer).
    if parentheses_deeper_than(sql, UNPARSEABLE_PARENTHESES):
        raise _nested_too_deeply(sql)
    try:
        # sqlglot recurses once per level of nesting: parse where that cannot crash.
        return run_with_deep_recursion(lambda: _parse_and_bind(sql, schema))
    except RecursionError:
        raise _nested_too_deeply(sql) from None


def _nested_too_deeply(sql: str) -> InvalidFilterError:
    return InvalidFilterError(
        sql,
        f"it is nested too deeply to parse (the limit is about {MAX_FILTER_NESTING} levels of parentheses, "
        "NOT and function calls); remove redundant parentheses or split the filter",
    )


def _parse_and_bind(sql: str, schema: pa.Schema) -> Predicate:
    from airflow_delta.engine.expressions.binder import _extract_in_lists
    from airflow_delta.engine.expressions.simple_filter import bind_simple_filter

    extracted = _extract_in_lists(sql)  # long IN lists, read once for either reader
    root = bind_simple_filter(sql, schema, extracted)
    if root is None:  # not a simple shape, or something to report: sqlglot's reader says what
        from airflow_delta.engine.expressions.sql_binding import bind_sql

        root = bind_sql(sql, schema, extracted)
    _check_size(sql, root)
    if not pa.types.is_boolean(root.type) and not pa.types.is_null(root.type):
        raise InvalidFilterError(sql, f"the filter must be a condition (true/false), but it is a {_type_name(root.type)} value")
    if isinstance(root, Literal) and root.type.equals(pa.null()):
        root = Literal(None, _BOOL)
    return Predicate(sql, root)


def _check_size(sql: str, root: Node) -> None:
    """Refuse a bound filter with more than MAX_FILTER_NODES nodes (counted without recursion)."""
    count = 0
    stack = [root]
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_FILTER_NODES:
            raise InvalidFilterError(
                sql,
                f"it has more than {MAX_FILTER_NODES} terms and operators; write long lists of values as "
                "x IN (v1, v2, ...), which counts as one term however many values it holds",
            )
        stack.extend(_children(node))
