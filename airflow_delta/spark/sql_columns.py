"""Which columns a Spark SQL condition names, decided by sqlglot alone (no pyspark, no JVM).

The operators (in the Airflow worker) and the DELETE program's driver (before it decides
whether it needs a SparkSession at all) both ask whether a predicate reads partition
columns only, which makes a DELETE metadata-only. Neither may pay for Spark's analyzer to
know that, so the answer comes from the SQL text; the engine's own parser then decides
the delete, and anything either of them cannot read goes to Spark, which reports the
error or evaluates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import rename_func
from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType

from airflow_delta.engine import InvalidArgumentError, InvalidFilterError

if TYPE_CHECKING:
    from airflow_delta.spark.specs import Spec

__all__ = ["SparkSqlText", "references_only", "refuse_text_spark_refuses"]


def references_only(predicate: str, columns: Sequence[str]) -> bool:
    """Whether a Spark SQL predicate refers to no column outside ``columns`` (compared ignoring case, as Spark does).

    A predicate sqlglot cannot parse is not decided here (False): Spark will say what is wrong.
    """
    try:
        tree = sqlglot.parse_one(predicate, read="spark")
    except sqlglot.errors.SqlglotError:  # ParseError, and TokenError for an unbalanced quote
        return False
    allowed = {column.casefold() for column in columns}
    # ``t.c`` (an alias) and ``s.f`` (a struct field) both count by whichever part is a column.
    return all(any(part.name.casefold() in allowed for part in column.parts) for column in tree.find_all(exp.Column))


def _text_fault(text: str) -> str | None:
    """Why Spark is sure to refuse ``text`` as one expression, or None when its tokens do not show it.

    Only what the tokens prove: a string, quoted identifier or comment left open, or a ``;``
    outside them (a second statement). Anything subtler is left to Spark's analyzer, which
    reports it from the job (sqlglot's grammar is not Spark's, so a parse error here proves
    nothing).
    """
    try:
        tokens = sqlglot.tokenize(text, read="spark")
    except sqlglot.errors.TokenError:
        return "a quote, backquote or comment is not closed"
    if any(token.token_type == TokenType.SEMICOLON for token in tokens):
        return "';' ends a statement: write one expression (combine conditions with AND / OR)"
    return None


def refuse_text_spark_refuses(spec: Spec) -> None:
    """Raise for SQL text of ``spec`` that Spark is sure to refuse, before any job is submitted.

    A condition (a predicate, an ON condition, a clause condition) is an
    :class:`InvalidFilterError`; a value (a SET or assignment value, a source query) an
    :class:`InvalidArgumentError` naming it. Neither is retryable: the task fails at once,
    in the worker, instead of after a Spark job's start.
    """
    from airflow_delta.spark.specs import sql_texts

    for where, text, condition in sql_texts(spec):
        fault = _text_fault(text)
        if fault is None:
            continue
        if condition:
            raise InvalidFilterError(text, f"{where}: {fault}")
        raise InvalidArgumentError(where, text, f"one Spark SQL expression: {fault}")


class SparkSqlText(Spark):
    """sqlglot's Spark dialect for text that Spark runs again: functions kept as Spark spells them.

    sqlglot's Spark generator writes ``parse_json(x)`` as bare ``x`` and
    ``to_json(parse_json(x))`` as ``x`` (its JSON type is no ``VARIANT``), so a MERGE value
    ``parse_json(s.j)`` would store the JSON text as a variant string instead of the parsed
    value. Rendered with this dialect, ``PARSE_JSON`` and ``TO_JSON`` stay.
    """

    class Generator(Spark.Generator):
        TRANSFORMS = {
            **Spark.Generator.TRANSFORMS,
            exp.ParseJSON: rename_func("PARSE_JSON"),
            exp.JSONFormat: rename_func("TO_JSON"),
        }
