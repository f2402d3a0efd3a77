"""When a DELETE's driver finds the rows with the engine instead of a Spark stage.

A DELETE with deletion vectors only has to find the positions of the matching rows.
For one row among millions, a Spark stage (Python workers started, the engine imported
in them, the rows handed over to the JVM and back) costs seconds where the engine's own
search, the one the in-worker DELETE runs (``airflow_delta.engine.stage_delete``), reads
the predicate's columns of the row groups that may match in a fraction of one. The
driver uses the engine when both hold:

- :func:`evaluates_as_spark`: the engine evaluates the predicate exactly as Spark SQL
  would in any session (ANSI on or off, any time zone), decided from the SQL text alone
  (sqlglot, no JVM): comparisons, ``IN``, ``BETWEEN``, ``IS [NOT] NULL``, ``AND`` /
  ``OR`` / ``NOT`` over top-level columns of number, string, boolean and date types,
  spelt as the schema spells them, compared with literals (plain decimal numbers, without
  exponent or suffix) or columns of the same kind. No casts, functions, arithmetic, ``LIKE``, timestamps (the session time zone) or
  strings with backslashes (Spark's escapes); anything else is Spark's to evaluate.
- :func:`finds_rows_in_driver`: the bytes that search reads (the predicate's column
  chunks in the row groups whose parquet statistics may match,
  ``airflow_delta.engine.predicate_read_bytes``) are at most
  ``ExecutionOptions.driver_scan_max_bytes``.

The rows are then the engine's: a row where the predicate is NULL stays, as in Spark's
``(predicate) IS TRUE``; the DVs are merged with the existing ones by the same
transaction code either way.
"""

from __future__ import annotations

import logging
import re

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from airflow_delta.engine import InvalidFilterError, TableContext, predicate_read_bytes

__all__ = ["MAX_FOOTERS", "condition_evaluates_as_spark", "evaluates_as_spark", "finds_rows_in_driver", "value_kind"]

log = logging.getLogger(__name__)

# More candidate files than this are Spark's: the decision itself (a footer per file) must stay cheap.
MAX_FOOTERS = 64

# Plain decimal numbers only: an exponent, 19 or more digits, or a suffix (10L, 1.5BD) make
# Spark pick a type (double, a wide decimal) or refuse the literal (1e400) by its own rules.
_PLAIN_NUMBER = re.compile(r"(?:\d{1,18}(?:\.\d{0,18})?|\.\d{1,18})")
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ)
_CONNECTIVES = (exp.And, exp.Or, exp.Not, exp.Paren)


def value_kind(data_type: pa.DataType) -> str | None:
    """The kind of values a column holds, as far as comparing them goes; None for types left to Spark."""
    if pa.types.is_integer(data_type) or pa.types.is_floating(data_type) or pa.types.is_decimal(data_type):
        return "number"
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return "string"
    if pa.types.is_boolean(data_type):
        return "boolean"
    if pa.types.is_date32(data_type):
        return "date"
    return None


class _LeftToSparkError(Exception):
    """Raised inside the walk: some part of the predicate is not one the engine evaluates exactly as Spark."""


def _operand_kind(node: exp.Expression, kinds: dict[str, str | None]) -> str | None:
    """The kind of a comparison operand (None for NULL); raises :class:`_LeftToSparkError` for anything else."""
    if isinstance(node, exp.Paren):
        return _operand_kind(node.this, kinds)
    if isinstance(node, exp.Column):
        if node.table or not isinstance(node.this, exp.Identifier):
            raise _LeftToSparkError  # a qualified name or a struct field
        kind = kinds.get(node.name)
        if kind is None:
            raise _LeftToSparkError  # an unknown column, a differently spelt one, or a type left to Spark
        return kind
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return "boolean"
    if isinstance(node, exp.Literal):
        if node.is_string:
            if "\\" in node.this:
                raise _LeftToSparkError
            return "string"
        if not _PLAIN_NUMBER.fullmatch(node.this):
            raise _LeftToSparkError
        return "number"
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return _operand_kind(node.this, kinds)
    raise _LeftToSparkError


def _same_kind(operands: list[exp.Expression], kinds: dict[str, str | None]) -> None:
    found = {_operand_kind(operand, kinds) for operand in operands} - {None}
    if len(found) > 1:
        raise _LeftToSparkError  # Spark would cast one side (a string to a date, say): its rules, not ours


def _check_condition(node: exp.Expression, kinds: dict[str, str | None]) -> None:
    """Raise :class:`_LeftToSparkError` unless ``node`` is a boolean condition of the exact subset."""
    if isinstance(node, exp.And | exp.Or):
        _check_condition(node.left, kinds)
        _check_condition(node.right, kinds)
    elif isinstance(node, exp.Not | exp.Paren):
        _check_condition(node.this, kinds)
    elif isinstance(node, _COMPARISONS):
        _same_kind([node.left, node.right], kinds)
    elif isinstance(node, exp.Is):
        if not isinstance(node.expression, exp.Null):
            raise _LeftToSparkError  # IS TRUE / IS DISTINCT FROM: Spark's
        _operand_kind(node.this, kinds)
    elif isinstance(node, exp.In):
        if not node.expressions or node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise _LeftToSparkError
        _same_kind([node.this, *node.expressions], kinds)
    elif isinstance(node, exp.Between):
        _same_kind([node.this, node.args["low"], node.args["high"]], kinds)
    elif isinstance(node, exp.Column | exp.Boolean):
        if _operand_kind(node, kinds) != "boolean":
            raise _LeftToSparkError
    else:
        raise _LeftToSparkError


def evaluates_as_spark(predicate: str, context: TableContext) -> bool:
    """Whether the engine evaluates ``predicate`` on the table of ``context`` exactly as Spark SQL does, in any session.

    See the module docstring for the subset. False is always safe (Spark evaluates it).
    """
    return condition_evaluates_as_spark(predicate, context.schema)


def condition_evaluates_as_spark(predicate: str, schema: pa.Schema) -> bool:
    """:func:`evaluates_as_spark` over the columns of ``schema`` (the worker's MERGE binds its
    target and source columns to one such schema)."""
    try:
        tree = sqlglot.parse_one(predicate, read="spark")
    except sqlglot.errors.SqlglotError:
        return False
    kinds = {field.name: value_kind(field.type) for field in schema}
    try:
        _check_condition(tree, kinds)
    except (_LeftToSparkError, RecursionError):
        return False
    return True


def finds_rows_in_driver(context: TableContext, files: pa.Table, predicate: str, max_bytes: int) -> bool:
    """Whether the driver finds ``predicate``'s rows in ``files`` (candidate file actions) with the engine.

    True when the engine evaluates the predicate as Spark does (:func:`evaluates_as_spark`),
    there are at most :data:`MAX_FOOTERS` files, and finding the rows reads at most
    ``max_bytes`` compressed bytes (0 turns the driver's search off).
    """
    if max_bytes <= 0 or files.num_rows > MAX_FOOTERS or not evaluates_as_spark(predicate, context):
        return False
    if int(pc.sum(files.column("size")).as_py() or 0) <= max_bytes:
        return True  # the files themselves are small: no footer needs reading
    try:
        scanned = predicate_read_bytes(context, files, predicate)
    except InvalidFilterError as error:
        log.info("Spark finds the rows of %r: the engine cannot parse it (%s)", predicate, error)
        return False
    log.info("finding the rows of %r reads %d bytes (the driver's limit: %d)", predicate, scanned, max_bytes)
    return scanned <= max_bytes
