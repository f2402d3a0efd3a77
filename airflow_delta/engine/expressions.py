"""SQL filter strings: parsed with sqlglot (Spark dialect), bound to a table schema.

A DAG author writes a filter such as ``"dt = '2024-01-01' AND id > 10"``.
:func:`parse_predicate` parses it with sqlglot, resolves every column against the
table's Arrow schema (case-insensitively, like Spark; backticks and nested ``a.b``),
coerces literals to the column types and checks the types, so that mistakes surface
as :class:`InvalidFilterError` before any data is read. The result, :class:`Predicate`,
is an immutable bound expression tree with two uses:

* :meth:`Predicate.to_arrow` - a ``pyarrow.compute.Expression`` row filter with SQL's
  three-valued logic (a comparison with NULL is NULL, and NULL rows are filtered out);
* :func:`prune_files` - file skipping over N files at once: partition predicates are
  evaluated exactly on the typed partition values, data-column predicates
  conservatively on the ``minValues`` / ``maxValues`` / ``nullCount`` statistics. A file
  is dropped only when no row in it can satisfy the predicate.

Semantics follow Spark SQL (without ANSI mode), so that a DELETE run here and a Spark
job evaluating the same string select the same rows:

* NaN (``float`` / ``double``), as in Spark's "NaN Semantics": ``NaN = NaN`` is true,
  NaN is greater than every other value (``+Infinity`` included), and NaN is a value,
  not NULL. This holds for ``= != <> < <= > >= <=>``, ``IN`` / ``NOT IN`` and
  ``BETWEEN``, also between two columns and in constant expressions; so the non-null
  values are totally ordered and ``NOT (x < v)`` is exactly ``x >= v``. NaN is written
  ``CAST('NaN' AS DOUBLE)`` or ``'NaN'`` next to a float column (also ``'Infinity'``,
  ``'-Inf'``, ..., any letter case). ``CAST`` of a float: NaN -> 0 and infinities
  saturate for integer types, NULL for decimals (as is any value that does not fit),
  ``'NaN'`` / ``'Infinity'`` as strings.
* decimal ``+ - * /`` are exact, in Spark's result types (``price * 1.1`` is
  ``decimal(p + 3, s + 1)``; a quotient is rounded half away from zero to scale
  ``max(6, s1 + p2 + 1)``); integer operands count as ``decimal(3|5|10|20, 0)``, integer
  literals with their own number of digits. Division by zero is NULL. ``CAST`` to a
  decimal with fewer decimals rounds half away from zero, NULL when it does not fit.
  Casts of literals follow the same rules as casts of columns (``CAST(2.5 AS INT)`` is 2).
* :func:`prune_files` is sound for these rules: min/max statistics never include NaN
  (Spark records a NaN maximum, read as unknown; parquet footers and delta-rs leave NaN
  out), so for a float column a file is kept for ``>``, ``>=``, ``!=`` and any
  comparison with NaN whenever it has a non-null value.

Deliberate differences from Spark (documented, not accidental):

* strings without a zone compared with a ``timestamp`` column are read as UTC (Spark
  uses the session time zone; there is no session here); ``timestamp`` vs
  ``timestamp_ntz`` compares wall clocks as UTC;
* a string column compared with a number is an error (Spark would cast the string);
  quote the number;
* decimal arithmetic whose Spark result precision would exceed 38 (where Spark cuts the
  scale and rounds, e.g. ``decimal(38,18) * 1.1``) and decimal ``%`` are computed in
  double;
* ``CAST(double AS DECIMAL(p, s))`` rounds the double's exact binary value (0.15 is
  0.1499..., giving 0.1), where Spark rounds its shortest decimal form (giving 0.2);
* non-deterministic functions (``current_date()``, ``rand()``) are refused: a filter
  used to skip files must mean the same thing every time it is evaluated.

:meth:`Predicate.to_arrow` is meant for data already in memory (``Table.filter``, a
dataset over in-memory tables). Do not pass it as ``filter=`` to a pyarrow scan of
parquet files: pyarrow prunes row groups with footer statistics that leave NaN out, and
would drop NaN rows that the expression accepts.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from airflow_delta.engine.errors import InvalidFilterError

__all__ = ["Predicate", "parse_predicate", "prune_files", "references_only"]

# =========================================================================== bound tree
# Every node is immutable and knows its Arrow result type. Predicates (comparisons,
# AND/OR/NOT, IS NULL, IN, LIKE) have type bool.

_BOOL = pa.bool_()


@dataclass(frozen=True, slots=True)
class ColumnRef:
    path: tuple[str, ...]  # exact names from the schema, top level first
    type: pa.DataType

    @property
    def display(self) -> str:
        return ".".join(f"`{p}`" if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) else p for p in self.path)


@dataclass(frozen=True, slots=True)
class Literal:
    value: Any  # a Python value of ``type``; None is SQL NULL
    type: pa.DataType
    # A quoted string literal still free to be read as another type ('2024-01-01' as a
    # date when compared with a date column), as Spark does.
    untyped_string: bool = False


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # one of = != < <= > >= <=>
    left: Node
    right: Node
    type: pa.DataType = _BOOL


@dataclass(frozen=True, slots=True)
class And:
    terms: tuple[Node, ...]
    type: pa.DataType = _BOOL


@dataclass(frozen=True, slots=True)
class Or:
    terms: tuple[Node, ...]
    type: pa.DataType = _BOOL


@dataclass(frozen=True, slots=True)
class Not:
    term: Node
    type: pa.DataType = _BOOL


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Node
    type: pa.DataType = _BOOL


@dataclass(frozen=True, slots=True)
class InList:
    operand: Node
    values: tuple[Any, ...]  # non-null Python values of the operand's type
    has_null: bool  # the list contained NULL: a non-match is then NULL, not false
    type: pa.DataType = _BOOL


@dataclass(frozen=True, slots=True)
class Like:
    operand: Node
    pattern: str  # SQL LIKE pattern, backslash escapes
    ignore_case: bool = False
    type: pa.DataType = _BOOL


@dataclass(frozen=True, slots=True)
class Arith:
    op: str  # + - * / %
    left: Node
    right: Node
    type: pa.DataType


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node
    type: pa.DataType


@dataclass(frozen=True, slots=True)
class Cast:
    operand: Node
    type: pa.DataType
    # Inserted by type coercion (always a monotonic widening, so statistics stay valid
    # bounds after the same cast); a user's CAST is not implicit.
    implicit: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    args: tuple[Node, ...]
    type: pa.DataType


Node = ColumnRef | Literal | Compare | And | Or | Not | IsNull | InList | Like | Arith | Negate | Cast | Call

_COMPARE_OPS: dict[type[exp.Expression], str] = {
    exp.EQ: "=",
    exp.NEQ: "!=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.NullSafeEQ: "<=>",
}
_ARITH_OPS: dict[type[exp.Expression], str] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
}
_NON_DETERMINISTIC = (
    exp.CurrentDate,
    exp.CurrentTimestamp,
    exp.CurrentTime,
    exp.Rand,
    exp.Randn,
)
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}
_NEGATED = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def _children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Compare | Arith):
        return (node.left, node.right)
    if isinstance(node, And | Or):
        return node.terms
    if isinstance(node, Not):
        return (node.term,)
    if isinstance(node, IsNull | InList | Like | Negate | Cast):
        return (node.operand,)
    if isinstance(node, Call):
        return node.args
    return ()


def _column_refs(node: Node) -> Iterable[ColumnRef]:
    if isinstance(node, ColumnRef):
        yield node
    for child in _children(node):
        yield from _column_refs(child)


# =========================================================================== Predicate


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
        expression = _to_arrow(self.root)
        if nulls_as_false:
            expression = pc.coalesce(expression, pc.scalar(False))
        return expression

    def __str__(self) -> str:
        return self.sql


def parse_predicate(sql: str | Predicate, schema: pa.Schema) -> Predicate:
    """Parse and bind a SQL boolean expression; raise :class:`InvalidFilterError` if it does not fit ``schema``."""
    if isinstance(sql, Predicate):
        return sql
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidFilterError(str(sql), "the filter is empty; write a SQL condition such as \"id > 10\"")
    statement = _parse_condition(sql)
    binder = _Binder(sql, schema)
    root = binder.bind(statement)
    if not pa.types.is_boolean(root.type) and not pa.types.is_null(root.type):
        raise InvalidFilterError(sql, f"the filter must be a condition (true/false), but it is a {_type_name(root.type)} value")
    if isinstance(root, Literal) and root.type.equals(pa.null()):
        root = Literal(None, _BOOL)
    return Predicate(sql, root)


def _parse_condition(sql: str) -> exp.Expression:
    """The sqlglot tree of ``sql`` read as the condition of a WHERE clause.

    Parsing it in a ``WHERE`` position (rather than as a statement) keeps a filter that
    starts with a column named like a command keyword (``comment``, ``show``, ...) a
    condition; anything beyond the condition (``;``, ``ORDER BY``, ``LIMIT``) is refused.
    """
    try:
        as_statement = sqlglot.parse(sql, read="spark")
    except SqlglotError:
        as_statement = []
    if any(isinstance(s, exp.Query | exp.DDL | exp.DML) for s in as_statement):
        raise InvalidFilterError(sql, "write only the condition of a WHERE clause, not a statement")
    try:
        statements = [s for s in sqlglot.parse(f"SELECT 1 WHERE {sql}", read="spark") if s is not None]
    except SqlglotError as exc:
        # Positions in sqlglot's message count the "SELECT 1 WHERE " prefix: drop them.
        reason = re.sub(r"\.? Line \d+, Col: \d+\.?", "", _first_line(exc))
        raise InvalidFilterError(sql, f"it is not valid Spark SQL ({reason})") from None
    if len(statements) != 1:
        raise InvalidFilterError(sql, "write exactly one condition (combine several with AND / OR, not ';')")
    select = statements[0]
    where = select.args.get("where") if isinstance(select, exp.Select) else None
    extra = [key for key, value in select.args.items() if value and key not in ("expressions", "where")]
    if where is None or extra:
        raise InvalidFilterError(sql, "write only the condition of a WHERE clause, not a statement or other clauses")
    return where.this


def references_only(predicate: Predicate, columns: Iterable[str]) -> bool:
    """True if every column ``predicate`` references is one of ``columns`` (case-insensitive).

    E.g. ``references_only(p, partition_columns)`` tells whether ``p`` is a partition-only
    predicate, which can be decided from the log alone.
    """
    allowed = {c.casefold() for c in columns}
    return all(name.casefold() in allowed for name in predicate.columns)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# =========================================================================== types


def _type_name(t: pa.DataType) -> str:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_int8(t):
        return "byte"
    if pa.types.is_int16(t):
        return "short"
    if pa.types.is_int32(t):
        return "integer"
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_null(t):
        return "NULL"
    return str(t)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}


def _as_decimal(t: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal(t):
        return t
    return pa.decimal128(_INT_DIGITS[t.bit_width] + (1 if pa.types.is_unsigned_integer(t) else 0), 0)


def _numeric_common(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if pa.types.is_floating(a) or pa.types.is_floating(b):
        if pa.types.is_float32(a) and pa.types.is_float32(b):
            return pa.float32()
        return pa.float64()
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return a if a.bit_width >= b.bit_width else b
    da, db = _as_decimal(a), _as_decimal(b)
    scale = max(da.scale, db.scale)
    integer_digits = max(da.precision - da.scale, db.precision - db.scale)
    return pa.decimal128(min(38, integer_digits + scale), scale)


def _common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type two operands are compared (or combined) in, or None if they do not mix."""
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if _is_numeric(a) and _is_numeric(b):
        return _numeric_common(a, b)
    if _is_string(a) and _is_string(b):
        return pa.string()
    if _is_binary(a) and _is_binary(b):
        return pa.binary()
    if pa.types.is_boolean(a) and pa.types.is_boolean(b):
        return a
    if pa.types.is_date(a) and pa.types.is_date(b):
        return pa.date32()
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        if a.tz == b.tz:
            return a if a.unit == b.unit else pa.timestamp("us", a.tz) if "ns" not in (a.unit, b.unit) else pa.timestamp("ns", a.tz)
        return pa.timestamp("us", "UTC")
    if pa.types.is_date(a) and pa.types.is_timestamp(b):
        return b
    if pa.types.is_timestamp(a) and pa.types.is_date(b):
        return a
    return None


# =========================================================================== literals

_TIMESTAMP_RE = re.compile(
    r"^\s*(\d{4,})-(\d{1,2})-(\d{1,2})"
    r"(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|UTC|[+-]\d{2}(?::?\d{2})?)?\s*$",
    re.IGNORECASE,
)


def _parse_timestamp(text: str, tz: str | None) -> dt.datetime:
    match = _TIMESTAMP_RE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a timestamp; write 'YYYY-MM-DD HH:MM:SS[.ffffff][Z|+HH:MM]'")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    value = dt.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0), micros)
    if zone is not None:
        if tz is None:
            raise ValueError(f"{text!r} has a time zone, but the column is a timestamp_ntz (without time zone)")
        if zone.upper() in ("Z", "UTC"):
            offset = dt.timedelta(0)
        else:
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            offset = sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        value = (value - offset).replace(tzinfo=dt.UTC)
    elif tz is not None:
        value = value.replace(tzinfo=dt.UTC)
    return value


# The strings Spark casts to a special double, in any letter case.
_SPECIAL_DOUBLES = frozenset({"nan", "inf", "+inf", "infinity", "+infinity", "-inf", "-infinity"})


def _number_literal(text: str) -> Literal:
    """A numeric literal typed as Spark types it: integers by size, 1.5 as decimal, 1e3 as double."""
    clean = text.strip()
    if re.search(r"[eE]", clean) or clean.lower() in _SPECIAL_DOUBLES:
        return Literal(float(clean), pa.float64())
    if "." not in clean:
        value = int(clean)
        for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64()):
            bound = 1 << (t.bit_width - 1)
            if -bound <= value < bound:
                return Literal(value, t)
        if len(str(abs(value))) <= 38:
            return Literal(Decimal(value), pa.decimal128(38, 0))
        return Literal(float(value), pa.float64())
    number = Decimal(clean)
    sign_digits_exp = number.as_tuple()
    exponent = int(sign_digits_exp.exponent)
    scale = max(0, -exponent)
    precision = max(len(sign_digits_exp.digits) + max(0, exponent), scale, 1)
    if precision > 38:
        return Literal(float(number), pa.float64())
    return Literal(number, pa.decimal128(precision, scale))


def _literal_as(lit: Literal, target: pa.DataType) -> Any:
    """``lit``'s value as a value of ``target`` (raises ValueError if it does not convert)."""
    if lit.value is None:
        return None
    if lit.untyped_string:
        return _string_as(lit.value, target)
    if lit.type.equals(target):
        return lit.value
    try:
        scalar = pa.scalar(lit.value, lit.type).cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"{lit.value!r} does not fit {_type_name(target)}: {exc}") from None
    return scalar.as_py()


def _string_as(text: str, target: pa.DataType) -> Any:
    if _is_string(target):
        return text
    if pa.types.is_date(target):
        try:
            return dt.date.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not a date; write 'YYYY-MM-DD'") from None
    if pa.types.is_timestamp(target):
        return _parse_timestamp(text, target.tz)
    if _is_numeric(target):
        try:
            number = _number_literal(text)
        except (ValueError, InvalidOperation):
            raise ValueError(f"{text!r} is not a number") from None
        return _literal_as(number, target)
    if pa.types.is_boolean(target):
        lowered = text.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise ValueError(f"{text!r} is not a boolean; write true or false")
    if _is_binary(target):
        return text.encode()
    raise ValueError(f"a string cannot be read as {_type_name(target)}")


def _string_literal_type(lit: Literal, other: pa.DataType) -> pa.DataType:
    """The type a quoted literal takes when it meets ``other``."""
    if _is_numeric(other):
        number = _number_literal(lit.value)
        return _numeric_common(other, number.type)
    return other


# =========================================================================== binding


_SUPPORTED_FUNCTIONS = "lower, upper, coalesce, abs, length, trim, ltrim, rtrim, year, month, day, hour"


class _Binder:
    def __init__(self, sql: str, schema: pa.Schema) -> None:
        self.sql = sql
        self.schema = schema

    def error(self, reason: str) -> InvalidFilterError:
        return InvalidFilterError(self.sql, reason)

    # -------------------------------------------------------------- dispatch
    def bind(self, e: exp.Expression) -> Node:
        node = self._bind(e)
        return self._fold(node)

    def _bind(self, e: exp.Expression) -> Node:
        if isinstance(e, exp.Paren):
            return self.bind(e.this)
        if isinstance(e, exp.And):
            return And(tuple(self._predicate(t) for t in _flatten(e, exp.And)))
        if isinstance(e, exp.Or):
            return Or(tuple(self._predicate(t) for t in _flatten(e, exp.Or)))
        if isinstance(e, exp.Not):
            return Not(self._predicate(e.this))
        if type(e) in _COMPARE_OPS:
            return self._compare(_COMPARE_OPS[type(e)], e.this, e.expression)
        if isinstance(e, exp.NullSafeNEQ):
            return Not(self._compare("<=>", e.this, e.expression))
        if isinstance(e, exp.Is):
            return self._is(e)
        if isinstance(e, exp.In):
            return self._in(e)
        if isinstance(e, exp.Between):
            low = self._compare(">=", e.this, e.args["low"])
            high = self._compare("<=", e.this, e.args["high"])
            return And((low, high))
        if isinstance(e, exp.Escape):
            return self._like(e.this, escape=e.expression)
        if isinstance(e, exp.Like | exp.ILike):
            return self._like(e)
        if isinstance(e, exp.Column | exp.Dot):
            return self._column(e)
        if isinstance(e, exp.Literal):
            if e.is_string:
                return Literal(e.this, pa.string(), untyped_string=True)
            try:
                return _number_literal(e.this)
            except (ValueError, InvalidOperation):
                raise self.error(f"{e.this!r} is not a number") from None
        if isinstance(e, exp.Boolean):
            return Literal(bool(e.this), _BOOL)
        if isinstance(e, exp.Null):
            return Literal(None, pa.null())
        if isinstance(e, exp.HexString):
            return Literal(bytes.fromhex(e.this), pa.binary())
        if isinstance(e, exp.Neg):
            operand = self.bind(e.this)
            self._require(operand, _is_numeric, "numeric", "-")
            return Negate(operand, operand.type)
        if type(e) in _ARITH_OPS:
            return self._arith(_ARITH_OPS[type(e)], e.this, e.expression)
        if isinstance(e, exp.Cast | exp.TryCast):
            return self._cast(e)
        if isinstance(e, _NON_DETERMINISTIC):
            raise self.error(
                f"{e.sql(dialect='spark')} is not deterministic, so files could not be skipped reliably; "
                "compute the value in the DAG (e.g. with a Jinja template) and write it as a literal"
            )
        if isinstance(e, exp.Func):
            return self._function(e)
        if isinstance(e, exp.Subquery | exp.Query):
            raise self.error("subqueries are not supported; write literal values instead")
        raise self.error(f"{e.sql(dialect='spark')!r} ({e.key}) is not supported in a filter")

    def _predicate(self, e: exp.Expression) -> Node:
        node = self.bind(e)
        if not (pa.types.is_boolean(node.type) or pa.types.is_null(node.type)):
            raise self.error(f"{e.sql(dialect='spark')!r} is a {_type_name(node.type)} value, not a condition; compare it with something")
        if isinstance(node, Literal) and node.value is None:
            return Literal(None, _BOOL)
        return node

    def _require(self, node: Node, check: Callable[[pa.DataType], bool], what: str, op: str) -> None:
        if not (check(node.type) or pa.types.is_null(node.type)):
            raise self.error(f"{op} needs {what} operands, but {_describe(node)} is {_type_name(node.type)}")

    # -------------------------------------------------------------- columns
    def _column(self, e: exp.Expression) -> ColumnRef:
        parts = _column_parts(e)
        if parts is None:
            raise self.error(f"{e.sql(dialect='spark')!r} is not a column reference this engine understands")
        fields: Sequence[pa.Field] = list(self.schema)
        path: list[str] = []
        current: pa.DataType | None = None
        for depth, part in enumerate(parts):
            if depth > 0:
                if current is None or not pa.types.is_struct(current):
                    raise self.error(
                        f"column {'.'.join(path)} is {_type_name(current) if current is not None else '?'}, "
                        f"not a struct, so it has no field {part!r}"
                    )
                fields = [current.field(i) for i in range(current.num_fields)]
            match = _resolve_field(fields, part)
            if match is None:
                names = ", ".join(f.name for f in fields)
                where = "the table" if depth == 0 else f"struct {'.'.join(path)}"
                raise self.error(f"column {'.'.join([*path, part])!r} does not exist in {where}; available columns: {names}")
            if match == "ambiguous":
                raise self.error(f"column name {part!r} is ambiguous (several columns differ only in case); quote the exact name")
            path.append(match.name)
            current = match.type
        assert current is not None
        return ColumnRef(tuple(path), current)

    # -------------------------------------------------------------- comparisons
    def _compare(self, op: str, left_e: exp.Expression, right_e: exp.Expression) -> Node:
        left, right = self.bind(left_e), self.bind(right_e)
        left, right = self._coerce_pair(left, right, f"{op}")
        for side in (left, right):
            if pa.types.is_struct(side.type) or pa.types.is_list(side.type) or pa.types.is_map(side.type):
                raise self.error(f"{_describe(side)} is a {side.type}; compare its fields (e.g. a.b = 1) instead")
        return Compare(op, left, right)

    def _coerce_pair(self, left: Node, right: Node, op: str) -> tuple[Node, Node]:
        lt, rt = left.type, right.type
        # A quoted literal adapts to the other side ('2024-01-01' against a date column).
        if isinstance(right, Literal) and right.untyped_string and not _is_string(lt) and not pa.types.is_null(lt):
            target = self._literal_target(right, lt, left)
            return self._cast_to(left, target), self._literal_to(right, target, left)
        if isinstance(left, Literal) and left.untyped_string and not _is_string(rt) and not pa.types.is_null(rt):
            target = self._literal_target(left, rt, right)
            return self._literal_to(left, target, right), self._cast_to(right, target)
        common = _common_type(lt, rt)
        if common is None:
            raise self.error(self._mismatch(left, right, op))
        return self._cast_to(left, common), self._cast_to(right, common)

    def _literal_target(self, lit: Literal, other_type: pa.DataType, other: Node) -> pa.DataType:
        try:
            return _string_literal_type(lit, other_type)
        except (ValueError, InvalidOperation):
            raise self.error(f"{_describe(other)} is {_type_name(other_type)}, but {lit.value!r} is not a number") from None

    def _mismatch(self, left: Node, right: Node, op: str) -> str:
        lt, rt = left.type, right.type
        for column, literal in ((left, right), (right, left)):
            if isinstance(literal, Literal) and _is_string(column.type) and _is_numeric(literal.type):
                return (
                    f"{_describe(column)} is a string column but {literal.value} is a number; "
                    f"quote the value: {_describe(column)} {op} '{literal.value}'"
                )
        return f"cannot compare {_describe(left)} ({_type_name(lt)}) with {_describe(right)} ({_type_name(rt)})"

    def _cast_to(self, node: Node, target: pa.DataType) -> Node:
        if node.type.equals(target):
            return node
        if isinstance(node, Literal):
            try:
                return Literal(_literal_as(node, target), target)
            except ValueError as exc:
                raise self.error(str(exc)) from None
        return Cast(node, target, implicit=True)

    def _literal_to(self, lit: Literal, target: pa.DataType, other: Node) -> Literal:
        try:
            return Literal(_literal_as(lit, target), target)
        except ValueError as exc:
            raise self.error(f"{_describe(other)} is {_type_name(other.type)}: {exc}") from None

    def _is(self, e: exp.Is) -> Node:
        target = e.expression
        if isinstance(target, exp.Null):
            return IsNull(self.bind(e.this))
        if isinstance(target, exp.Boolean):
            operand = self._predicate(e.this)
            return Compare("<=>", operand, Literal(bool(target.this), _BOOL))
        raise self.error(f"IS must be followed by NULL, NOT NULL, TRUE or FALSE, not {target.sql(dialect='spark')!r}")

    def _in(self, e: exp.In) -> Node:
        if e.args.get("query") is not None or e.args.get("unnest") is not None:
            raise self.error("IN (subquery) is not supported; list the values: x IN (1, 2, 3)")
        operand = self.bind(e.this)
        items = [self.bind(item) for item in e.expressions]
        if not items:
            raise self.error("IN needs at least one value")
        non_literals = [i for i in items if not isinstance(i, Literal)]
        if non_literals:
            # Columns or expressions in the list: a plain disjunction of equalities.
            return Or(tuple(self._compare_nodes("=", operand, item) for item in items))
        target = operand.type
        for item in items:
            assert isinstance(item, Literal)
            if item.value is None:
                continue
            probe = self._coerce_pair(operand, item, "IN")[0].type
            target = _common_type(target, probe) or target
        operand = self._cast_to(operand, target)
        values: list[Any] = []
        has_null = False
        for item in items:
            assert isinstance(item, Literal)
            if item.value is None:
                has_null = True
                continue
            if not item.untyped_string and _common_type(item.type, target) is None:
                raise self.error(self._mismatch(operand, item, "IN"))
            values.append(self._literal_to(item, target, operand).value)
        return InList(operand, tuple(dict.fromkeys(values)), has_null)

    def _compare_nodes(self, op: str, left: Node, right: Node) -> Node:
        left, right = self._coerce_pair(left, right, op)
        return Compare(op, left, right)

    def _like(self, e: exp.Expression, escape: exp.Expression | None = None) -> Node:
        negate = bool(e.args.get("negate"))
        operand = self.bind(e.this)
        self._require(operand, _is_string, "string", "LIKE")
        pattern_e = e.expression
        if not (isinstance(pattern_e, exp.Literal) and pattern_e.is_string):
            raise self.error("the pattern of LIKE must be a quoted string literal")
        pattern = pattern_e.this
        if escape is not None:
            if not (isinstance(escape, exp.Literal) and escape.is_string and len(escape.this) == 1):
                raise self.error("ESCAPE takes a single character in quotes")
            pattern = _reescape(pattern, escape.this)
        node: Node = Like(operand, pattern, ignore_case=isinstance(e, exp.ILike))
        return Not(node) if negate else node

    # -------------------------------------------------------------- arithmetic, casts, functions
    def _arith(self, op: str, left_e: exp.Expression, right_e: exp.Expression) -> Node:
        left, right = self.bind(left_e), self.bind(right_e)
        for side in (left, right):
            if isinstance(side, Literal) and side.untyped_string:
                raise self.error(f"arithmetic on the string {side.value!r}: write a number without quotes")
            if pa.types.is_date(side.type) or pa.types.is_timestamp(side.type):
                raise self.error(
                    f"date/time arithmetic ({_describe(side)} {op} ...) is not supported; write the bound as a literal, "
                    "e.g. ts >= TIMESTAMP '2024-01-01 00:00:00'"
                )
            self._require(side, _is_numeric, "numeric", op)
        common = _common_type(left.type, right.type)
        assert common is not None
        if pa.types.is_null(common):
            common = pa.int32()
        if pa.types.is_decimal(common) and op != "%":
            exact = _spark_decimal_arith(op, left, right)
            if exact is not None:
                left_type, right_type, result_type = exact
                return Arith(op, self._decimal_operand(left, left_type), self._decimal_operand(right, right_type), result_type)
        if op == "/" or pa.types.is_decimal(common):
            common = pa.float64()
        return Arith(op, self._cast_to(left, common), self._cast_to(right, common), common)

    def _decimal_operand(self, node: Node, target: pa.DataType) -> Node:
        if isinstance(node, Literal) and isinstance(node.value, int) and not isinstance(node.value, bool):
            # Arrow refuses int8 -> decimal(1, 0) as unsafe even for 3; the value fits.
            return Literal(Decimal(node.value), target)
        return self._cast_to(node, target)

    def _cast(self, e: exp.Cast) -> Node:
        operand = self.bind(e.this)
        target = _sql_type_to_arrow(e.args["to"])
        if target is None:
            raise self.error(f"CAST to {e.args['to'].sql(dialect='spark')} is not supported")
        if isinstance(operand, Literal) and operand.value is not None and not operand.untyped_string and _is_numeric(operand.type) and _is_numeric(target):
            # Evaluated like a cast of a column (truncation, NaN -> 0, saturation), not refused.
            return self._fold(Cast(operand, target))
        if isinstance(operand, Literal):
            try:
                return Literal(_literal_as(operand, target), target)
            except ValueError as exc:
                raise self.error(f"cannot {e.sql(dialect='spark')}: {exc}") from None
        source = operand.type
        allowed = (
            source.equals(target)
            or (_is_numeric(source) and (_is_numeric(target) or _is_string(target)))
            or ((pa.types.is_date(source) or pa.types.is_timestamp(source)) and (pa.types.is_date(target) or pa.types.is_timestamp(target) or _is_string(target)))
            or (pa.types.is_boolean(source) and (_is_string(target) or _is_numeric(target)))
            or (_is_string(source) and not pa.types.is_nested(target))
        )
        if not allowed:
            raise self.error(f"cannot CAST {_describe(operand)} ({_type_name(source)}) to {_type_name(target)}")
        return Cast(operand, target)

    def _function(self, e: exp.Func) -> Node:
        if isinstance(e, exp.Anonymous):
            name = str(e.this).lower()
            raw_args = list(e.expressions)
        else:
            name = e.sql_name().lower().replace("_", "")
            raw_args = [a for a in (e.args.get("this"), *(e.args.get("expressions") or [])) if isinstance(a, exp.Expression)]
        if isinstance(e, exp.Trim):
            if e.args.get("expression") is not None:
                raise self.error("TRIM with characters is not supported; use trim(x)")
            position = str(e.args.get("position") or "").upper()
            name = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim")
        # year(x) and friends arrive wrapped in an implicit "to date" conversion.
        raw_args = [a.this if isinstance(a, exp.TsOrDsToDate) and not a.args.get("format") else a for a in raw_args]
        args = [self.bind(a) for a in raw_args]
        if name in ("lower", "upper", "trim", "ltrim", "rtrim", "length"):
            if len(args) != 1:
                raise self.error(f"{name}() takes one argument")
            arg = args[0]
            self._require(arg, _is_string, "string", f"{name}()")
            if name == "length":
                return Call("length", (arg,), pa.int32())
            return Call(name, (arg,), pa.string())
        if name == "coalesce":
            if not args:
                raise self.error("coalesce() needs arguments")
            common: pa.DataType = args[0].type
            for arg in args[1:]:
                next_common = _common_type(common, arg.type)
                if next_common is None:
                    raise self.error(f"coalesce() arguments do not share a type: {_type_name(common)} and {_type_name(arg.type)}")
                common = next_common
            return Call("coalesce", tuple(self._cast_to(a, common) for a in args), common)
        if name == "abs":
            if len(args) != 1:
                raise self.error("abs() takes one argument")
            self._require(args[0], _is_numeric, "numeric", "abs()")
            return Call("abs", (args[0],), args[0].type)
        if name in ("year", "month", "day", "dayofmonth", "hour"):
            if len(args) != 1:
                raise self.error(f"{name}() takes one argument")
            arg = args[0]
            if not (pa.types.is_date(arg.type) or pa.types.is_timestamp(arg.type)):
                raise self.error(f"{name}() needs a date or timestamp, but {_describe(arg)} is {_type_name(arg.type)}")
            return Call("day" if name == "dayofmonth" else name, (arg,), pa.int64())
        raise self.error(f"function {name}() is not supported; supported functions: {_SUPPORTED_FUNCTIONS}")

    # -------------------------------------------------------------- constant folding
    def _fold(self, node: Node) -> Node:
        """Evaluate column-free sub-expressions now, so that pruning sees plain literals."""
        if isinstance(node, Literal | ColumnRef) or any(True for _ in _column_refs(node)):
            return node
        try:
            table = pa.table({"_": pa.array([0], pa.int8())})
            result = ds.dataset(table).to_table(columns={"v": _to_arrow(node)}).column("v")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise self.error(f"cannot evaluate {_describe(node)}: {exc}") from None
        return Literal(result[0].as_py(), node.type)


def _flatten(e: exp.Expression, kind: type[exp.Expression]) -> list[exp.Expression]:
    out: list[exp.Expression] = []
    stack = [e]
    while stack:
        item = stack.pop()
        if isinstance(item, kind):
            stack.append(item.expression)
            stack.append(item.this)
        else:
            out.append(item)
    return out


def _column_parts(e: exp.Expression) -> list[str] | None:
    if isinstance(e, exp.Column):
        parts = [p.name for p in e.parts]
        return parts if all(isinstance(p, exp.Identifier) for p in e.parts) else None
    if isinstance(e, exp.Dot):
        left = _column_parts(e.this)
        if left is None or not isinstance(e.expression, exp.Identifier):
            return None
        return [*left, e.expression.name]
    return None


def _resolve_field(fields: Sequence[pa.Field], name: str) -> pa.Field | str | None:
    exact = [f for f in fields if f.name == name]
    if exact:
        return exact[0]
    folded = [f for f in fields if f.name.casefold() == name.casefold()]
    if len(folded) > 1:
        return "ambiguous"
    return folded[0] if folded else None


def _reescape(pattern: str, escape: str) -> str:
    """Rewrite a LIKE pattern with a custom ESCAPE character to backslash escapes."""
    if escape == "\\":
        return pattern
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == escape and i + 1 < len(pattern):
            out.append("\\" + pattern[i + 1])
            i += 2
            continue
        out.append("\\\\" if ch == "\\" else ch)
        i += 1
    return "".join(out)


def _describe(node: Node) -> str:
    if isinstance(node, ColumnRef):
        return f"column {node.display}"
    if isinstance(node, Literal):
        return repr(node.value) if node.value is not None else "NULL"
    if isinstance(node, Cast) and node.implicit:
        return _describe(node.operand)
    refs = list(_column_refs(node))
    return f"an expression on {', '.join(r.display for r in refs)}" if refs else "a constant expression"


_SQL_TYPES: dict[str, pa.DataType] = {
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", "UTC"),
    "TIMESTAMPTZ": pa.timestamp("us", "UTC"),
    "TIMESTAMPLTZ": pa.timestamp("us", "UTC"),
    "TIMESTAMPNTZ": pa.timestamp("us"),
    "DATETIME": pa.timestamp("us"),
    "TEXT": pa.string(),
    "VARCHAR": pa.string(),
    "CHAR": pa.string(),
    "BINARY": pa.binary(),
    "VARBINARY": pa.binary(),
}


def _sql_type_to_arrow(data_type: exp.DataType) -> pa.DataType | None:
    kind = data_type.this.name if hasattr(data_type.this, "name") else str(data_type.this)
    if kind == "DECIMAL":
        params = [int(p.this.this) if isinstance(p.this, exp.Literal) else int(p.name) for p in data_type.expressions]
        precision = params[0] if params else 10
        scale = params[1] if len(params) > 1 else 0
        if not 0 < precision <= 38 or not 0 <= scale <= precision:
            return None
        return pa.decimal128(precision, scale)
    return _SQL_TYPES.get(kind)


# =========================================================================== to Arrow

_NULL_BOOL = pa.scalar(None, _BOOL)
_ARROW_COMPARE = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def _to_arrow(node: Node) -> pc.Expression:
    if isinstance(node, ColumnRef):
        return pc.field(*node.path)
    if isinstance(node, Literal):
        if pa.types.is_null(node.type):
            return pc.scalar(pa.scalar(None, _BOOL))
        return pc.scalar(pa.scalar(node.value, node.type))
    if isinstance(node, Compare):
        left, right = _to_arrow(node.left), _to_arrow(node.right)
        if node.op == "<=>":
            both_null = pc.and_kleene(pc.is_null(left), pc.is_null(right))
            return pc.coalesce(_compare_to_arrow("=", node.left, node.right, left, right), both_null)
        return _compare_to_arrow(node.op, node.left, node.right, left, right)
    if isinstance(node, And):
        result = _to_arrow(node.terms[0])
        for term in node.terms[1:]:
            result = pc.and_kleene(result, _to_arrow(term))
        return result
    if isinstance(node, Or):
        result = _to_arrow(node.terms[0])
        for term in node.terms[1:]:
            result = pc.or_kleene(result, _to_arrow(term))
        return result
    if isinstance(node, Not):
        return pc.invert(_to_arrow(node.term))
    if isinstance(node, IsNull):
        return pc.is_null(_to_arrow(node.operand))
    if isinstance(node, InList):
        operand = _to_arrow(node.operand)
        # is_in matches NaN with NaN, as Spark's IN does (NaN = NaN is true in Spark).
        found = pc.is_in(operand, value_set=pa.array(list(node.values), node.operand.type))
        if node.has_null:
            # x IN (..., NULL) is true on a match and NULL otherwise, never false.
            found = pc.if_else(found, pc.scalar(True), pc.scalar(_NULL_BOOL))
        return pc.if_else(pc.is_valid(operand), found, pc.scalar(_NULL_BOOL))
    if isinstance(node, Like):
        return pc.match_like(_to_arrow(node.operand), node.pattern, ignore_case=node.ignore_case)
    if isinstance(node, Arith):
        return _arith_to_arrow(node)
    if isinstance(node, Negate):
        return pc.negate(_to_arrow(node.operand))
    if isinstance(node, Cast):
        operand = _to_arrow(node.operand)
        if not node.implicit and pa.types.is_floating(node.operand.type) and not pa.types.is_floating(node.type):
            return _cast_float_to_arrow(operand, node.type)
        if not node.implicit and pa.types.is_decimal(node.operand.type) and pa.types.is_decimal(node.type):
            return _cast_decimal_to_arrow(operand, node.operand.type, node.type)
        if not node.implicit and _is_numeric(node.operand.type) and _is_numeric(node.type):
            # Spark truncates toward zero when casting to an integer (1.5 -> 1).
            return operand.cast(node.type, safe=False)
        return operand.cast(node.type)
    if isinstance(node, Call):
        return _call_to_arrow(node)
    raise TypeError(f"unknown node {node!r}")


def _or_strict(a: pc.Expression, b: pc.Expression) -> pc.Expression:
    """OR that is NULL when either side is NULL (not Kleene), for use as an if_else condition."""
    return pc.Expression._call("or", [a, b])


def _and_strict(a: pc.Expression, b: pc.Expression) -> pc.Expression:
    return pc.Expression._call("and", [a, b])


def _is_nan_literal(node: Node) -> bool:
    return isinstance(node, Literal) and isinstance(node.value, float) and node.value != node.value


def _compare_to_arrow(op: str, left_node: Node, right_node: Node, left: pc.Expression, right: pc.Expression) -> pc.Expression:
    """``left op right`` with Spark's NaN semantics for float and double operands.

    Spark orders NaN above every other value (+Infinity included) and makes NaN equal to
    itself, so that the non-null values are totally ordered; Arrow follows IEEE (every
    comparison with NaN is false except ``!=``). A NULL operand still gives NULL.
    """
    compare = _ARROW_COMPARE[op]
    if not (pa.types.is_floating(left_node.type) or pa.types.is_floating(right_node.type)):
        return compare(left, right)
    if isinstance(right_node, Literal) and right_node.value is not None and not _is_nan_literal(right_node):
        # The common case, column op number: only "NaN op number" differs from IEEE.
        if op in (">", ">="):  # NaN is greater than any number
            return _or_strict(compare(left, right), pc.is_nan(left))
        return compare(left, right)  # = < <= are false and != is true for NaN, as in IEEE
    if isinstance(left_node, Literal) and left_node.value is not None and not _is_nan_literal(left_node):
        return _compare_to_arrow(_FLIPPED[op], right_node, left_node, right, left)
    # General case (a NaN literal, or two expressions). The strict OR / AND propagate NULL,
    # so a NULL operand makes the condition of if_else, and so the result, NULL.
    left_nan, right_nan = pc.is_nan(left), pc.is_nan(right)
    any_nan = _or_strict(left_nan, right_nan)
    if op in ("=", "!="):
        when_nan = _and_strict(left_nan, right_nan)
        if op == "!=":
            when_nan = pc.invert(when_nan)
    elif op == "<":
        when_nan = _and_strict(pc.invert(left_nan), right_nan)
    elif op == "<=":
        when_nan = right_nan
    elif op == ">":
        when_nan = _and_strict(left_nan, pc.invert(right_nan))
    else:  # >=
        when_nan = left_nan
    return pc.if_else(any_nan, when_nan, compare(left, right))


_INTEGER_LIMITS = {8: (-(2**7), 2**7 - 1), 16: (-(2**15), 2**15 - 1), 32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}


def _cast_decimal_to_arrow(operand: pc.Expression, source: pa.DataType, target: pa.DataType) -> pc.Expression:
    """Spark's decimal-to-decimal CAST: round half away from zero to the new scale, NULL on overflow."""
    integer_digits = target.precision - target.scale
    # One more digit for the carry of rounding (999.96 -> 1000.0).
    wide = pa.decimal256(source.precision + 1, source.scale)
    value = operand.cast(wide)
    if target.scale < source.scale:
        value = pc.round(value, ndigits=target.scale, round_mode="half_towards_infinity")
    if integer_digits > source.precision - source.scale:
        return value.cast(target)  # even a carried value fits
    limit = pc.scalar(pa.scalar(Decimal(10) ** integer_digits, wide))
    fits = pc.less(pc.abs(value), limit)
    safe = pc.if_else(fits, value, pc.scalar(pa.scalar(0, wide)))
    return pc.if_else(fits, safe.cast(target), pc.scalar(pa.scalar(None, target)))


def _cast_float_to_arrow(operand: pc.Expression, target: pa.DataType) -> pc.Expression:
    """An explicit CAST of a float or double, with Spark's (non-ANSI) results for NaN and infinities.

    Spark casts NaN to 0 and an infinity to the integer type's limit, gives NULL for a
    decimal it cannot represent (NaN, infinities), and writes "NaN" / "Infinity" /
    "-Infinity" as strings.
    """
    if pa.types.is_integer(target):
        low, high = _INTEGER_LIMITS[target.bit_width]
        finite = pc.if_else(pc.is_nan(operand), pc.scalar(0.0), operand)
        # Saturate in double first (Java's narrowing conversion); NULL stays NULL.
        upper = pc.min_element_wise(finite, pc.scalar(float(high)), skip_nulls=False)
        clamped = pc.max_element_wise(upper, pc.scalar(float(low)), skip_nulls=False)
        as_int = pc.trunc(clamped).cast(target, safe=False)
        if target.bit_width < 64:
            return as_int
        # 2**63 as a double does not fit a long: map the clamped top to the exact limit.
        return pc.if_else(pc.greater_equal(finite, pc.scalar(float(high))), pc.scalar(pa.scalar(high, target)), as_int)
    if pa.types.is_decimal(target):
        # NULL where Spark gives NULL: NaN, infinities and values beyond the precision.
        limit = 10.0 ** (target.precision - target.scale) - 0.5 * 10.0**-target.scale
        representable = pc.and_kleene(pc.is_finite(operand), pc.less(pc.abs(operand), pc.scalar(limit)))
        safe = pc.if_else(representable, operand, pc.scalar(0.0))
        return pc.if_else(representable, safe.cast(target), pc.scalar(pa.scalar(None, target)))
    if _is_string(target):
        text = operand.cast(target)
        text = pc.if_else(pc.is_nan(operand), pc.scalar(pa.scalar("NaN", target)), text)
        text = pc.if_else(pc.equal(operand, pc.scalar(float("inf"))), pc.scalar(pa.scalar("Infinity", target)), text)
        return pc.if_else(pc.equal(operand, pc.scalar(float("-inf"))), pc.scalar(pa.scalar("-Infinity", target)), text)
    return operand.cast(target, safe=False)


# Spark's decimal type for an integer operand of decimal arithmetic (DecimalType.forType).
_SPARK_INTEGER_DECIMAL_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}


def _spark_operand_decimal(node: Node) -> pa.Decimal128Type | None:
    t = node.type
    if pa.types.is_decimal(t):
        return t if t.precision <= 38 else None
    if not pa.types.is_integer(t) or pa.types.is_unsigned_integer(t):
        return None
    if isinstance(node, Literal) and isinstance(node.value, int):
        # An integer literal takes the fewest digits that hold it (DecimalType.fromLiteral).
        return pa.decimal128(max(1, len(str(abs(node.value)))), 0)
    return pa.decimal128(_SPARK_INTEGER_DECIMAL_DIGITS[t.bit_width], 0)


def _spark_decimal_arith(op: str, left: Node, right: Node) -> tuple[pa.DataType, pa.DataType, pa.DataType] | None:
    """Operand and result types of Spark's exact decimal ``left op right``, or None to use double.

    Spark's result types: ``+``/``-``: scale max(s1, s2), precision max(p1-s1, p2-s2) +
    scale + 1; ``*``: (p1 + p2 + 1, s1 + s2); ``/``: scale max(6, s1 + p2 + 1), precision
    p1 - s1 + s2 + scale. When that precision exceeds 38 Spark cuts the scale and rounds
    (with an intermediate rounding to 38 significant digits); that case is left to double
    arithmetic rather than imitated approximately.
    """
    lt, rt = _spark_operand_decimal(left), _spark_operand_decimal(right)
    if lt is None or rt is None:
        return None
    p1, s1, p2, s2 = lt.precision, lt.scale, rt.precision, rt.scale
    if op in ("+", "-"):
        scale = max(s1, s2)
        precision = max(p1 - s1, p2 - s2) + scale + 1
    elif op == "*":
        precision, scale = p1 + p2 + 1, s1 + s2
    elif op == "/":
        scale = max(6, s1 + p2 + 1)
        precision = p1 - s1 + s2 + scale
    else:
        return None
    if precision > 38:
        return None
    return lt, rt, pa.decimal128(precision, scale)


def _decimal_divide_to_arrow(left: pc.Expression, right: pc.Expression, lt: pa.DataType, rt: pa.DataType, result: pa.DataType) -> pc.Expression:
    """Spark's decimal ``/``: the quotient rounded half away from zero to the result scale.

    Arrow's decimal division truncates at max(4, s1 + p2 - s2 + 1) digits: widening the
    dividend's scale makes that exactly one digit more than the result keeps, and rounding
    that truncated quotient gives the correctly rounded one (the digit that decides the
    rounding survives truncation).
    """
    extra = max(0, result.scale + rt.scale - lt.scale - rt.precision)
    dividend = pa.decimal256(lt.precision + extra, lt.scale + extra)
    divisor = pa.decimal256(rt.precision, rt.scale)
    zero = pc.scalar(pa.scalar(0, divisor))
    right_wide = right.cast(divisor)
    unit = pc.scalar(pa.scalar(Decimal(1).scaleb(-divisor.scale), divisor))  # any non-zero value
    safe_right = pc.if_else(pc.equal(right_wide, zero), unit, right_wide)
    quotient = pc.divide(left.cast(dividend), safe_right)
    rounded = pc.round(quotient, ndigits=result.scale, round_mode="half_towards_infinity").cast(result)
    # Spark (without ANSI mode) gives NULL for a division by zero.
    return pc.if_else(pc.equal(right_wide, zero), pc.scalar(pa.scalar(None, result)), rounded)


def _arith_to_arrow(node: Arith) -> pc.Expression:
    left, right = _to_arrow(node.left), _to_arrow(node.right)
    if pa.types.is_decimal(node.type):
        # Exact decimal arithmetic; the operand types are Spark's, and for + - * Arrow's
        # result type rules are Spark's, so the value is exact and already of node.type.
        if node.op == "/":
            return _decimal_divide_to_arrow(left, right, node.left.type, node.right.type, node.type)
        fn = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[node.op]
        return fn(left, right).cast(node.type)
    if node.op == "+":
        return pc.add(left, right)
    if node.op == "-":
        return pc.subtract(left, right)
    if node.op == "*":
        return pc.multiply(left, right)
    null = pc.scalar(pa.scalar(None, node.type))
    zero = pc.scalar(pa.scalar(0, node.type))
    # Spark (without ANSI mode) gives NULL for a division or remainder by zero.
    safe_right = pc.if_else(pc.equal(right, zero), pc.scalar(pa.scalar(1, node.type)), right)
    if node.op == "/":
        return pc.if_else(pc.equal(right, zero), null, pc.divide(left, safe_right))
    # %: the remainder takes the sign of the dividend, as in Spark and Java.
    quotient = pc.divide(left, safe_right)
    if pa.types.is_floating(node.type):
        quotient = pc.trunc(quotient)
    return pc.if_else(pc.equal(right, zero), null, pc.subtract(left, pc.multiply(quotient, safe_right)))


def _call_to_arrow(node: Call) -> pc.Expression:
    args = [_to_arrow(a) for a in node.args]
    if node.name == "lower":
        return pc.utf8_lower(args[0])
    if node.name == "upper":
        return pc.utf8_upper(args[0])
    if node.name == "trim":
        return pc.utf8_trim_whitespace(args[0])
    if node.name == "ltrim":
        return pc.utf8_ltrim_whitespace(args[0])
    if node.name == "rtrim":
        return pc.utf8_rtrim_whitespace(args[0])
    if node.name == "length":
        return pc.utf8_length(args[0]).cast(pa.int32())
    if node.name == "coalesce":
        return pc.coalesce(*args)
    if node.name == "abs":
        return pc.abs(args[0])
    if node.name in ("year", "month", "day", "hour"):
        return getattr(pc, node.name)(args[0])
    raise TypeError(f"unknown function {node.name}")


# =========================================================================== file pruning


def prune_files(
    predicate: Predicate,
    partition_values: pa.StructArray | pa.ChunkedArray | None,
    stats: pa.StructArray | pa.ChunkedArray | None,
    partition_columns: Sequence[str] = (),
) -> pa.BooleanArray:
    """Which of N files may hold a row matching ``predicate`` (True = keep; never null).

    ``partition_values``: typed partition values, one struct row per file, logical names.
    ``stats``: parsed statistics (:func:`airflow_delta.engine.stats.parse_stats`), one row
    per file; a missing statistic, or a null row, means "may match". The result is
    conservative: a file is False only if provably none of its rows satisfies the filter.
    """
    pv = _combine(partition_values)
    st = _combine(stats)
    lengths = {len(a) for a in (pv, st) if a is not None}
    if len(lengths) > 1:
        raise ValueError(f"partition_values and stats describe different numbers of files: {sorted(lengths)}")
    if not lengths:
        raise ValueError("prune_files needs partition_values or stats to know the number of files")
    pruner = _Pruner(lengths.pop(), pv, st, partition_columns)
    return pruner.may_match(predicate.root, negated=False)


def _combine(array: pa.Array | pa.ChunkedArray | None) -> pa.StructArray | None:
    if array is None:
        return None
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks else pa.array([], array.type)
    return array


_ONE_MS = pa.scalar(1000, pa.duration("us"))
# Delta appends this character to a truncated string maximum; it is never part of a
# prefix the bound guarantees.
_TIE_BREAKER = "\ufffd"
_MAX_LISTED_VALUES = 64


@dataclass(frozen=True)
class _ColumnStats:
    """Statistics of one data column for N files, cast to the type the predicate compares in."""

    min: pa.Array | None
    max: pa.Array | None
    # Strings: the maximum with Delta's tie-breaker stripped, a prefix of the true max
    # (or more) when the writer truncated it.
    max_prefix: pa.Array | None
    not_all_null: pa.Array  # False where every row of the file is NULL in this column
    null_count: pa.Array | None
    num_records: pa.Array | None
    base_type: pa.DataType


class _Pruner:
    def __init__(
        self,
        n: int,
        partition_values: pa.StructArray | None,
        stats: pa.StructArray | None,
        partition_columns: Sequence[str],
    ) -> None:
        self.n = n
        self.stats = stats
        self.partition_table: pa.Table | None = None
        self.partition_names: dict[str, str] = {}
        if partition_values is not None and pa.types.is_struct(partition_values.type):
            self.partition_table = pa.Table.from_struct_array(partition_values)
            wanted = {c.casefold() for c in partition_columns}
            for name in self.partition_table.column_names:
                if not wanted or name.casefold() in wanted:
                    self.partition_names[name.casefold()] = name

    # -------------------------------------------------------------- helpers
    def _all(self, value: bool) -> pa.BooleanArray:
        return pa.nulls(self.n, _BOOL).fill_null(value)

    def _is_partition_only(self, node: Node) -> bool:
        refs = list(_column_refs(node))
        return bool(refs) and self.partition_table is not None and all(
            len(r.path) == 1 and r.path[0].casefold() in self.partition_names for r in refs
        )

    def _evaluate_on_partitions(self, node: Node) -> pa.Array:
        assert self.partition_table is not None
        table = self.partition_table
        # Columns are looked up by the schema's exact names; rename case variants.
        renames = {}
        for ref in _column_refs(node):
            actual = self.partition_names[ref.path[0].casefold()]
            renames[actual] = ref.path[0]
        table = table.select(list(renames)).rename_columns(list(renames.values()))
        result = ds.dataset(table).to_table(columns={"r": _to_arrow(node)}).column("r")
        return result.combine_chunks() if isinstance(result, pa.ChunkedArray) else result

    # -------------------------------------------------------------- main recursion
    def may_match(self, node: Node, negated: bool) -> pa.BooleanArray:
        if isinstance(node, Literal):
            value = node.value
            if value is None:
                return self._all(False)
            return self._all(bool(value) != negated)
        if self._is_partition_only(node):
            exact = self._evaluate_on_partitions(node)
            if negated:
                exact = pc.invert(exact)
            return exact.fill_null(False)
        if isinstance(node, Not):
            return self.may_match(node.term, not negated)
        if isinstance(node, And | Or):
            conjunction = isinstance(node, And) != negated
            results = [self.may_match(t, negated) for t in node.terms]
            combine = pc.and_ if conjunction else pc.or_
            out = results[0]
            for r in results[1:]:
                out = combine(out, r)
            return out
        if self.stats is None:
            return self._all(True)
        keep = self._leaf(node, negated)
        return keep if keep is not None else self._all(True)

    def _leaf(self, node: Node, negated: bool) -> pa.BooleanArray | None:
        if isinstance(node, Compare):
            return self._compare_leaf(node, negated)
        if isinstance(node, IsNull):
            stats = self._column_stats(node.operand)
            if stats is None:
                return None
            if not negated:
                # IS NULL: impossible only if the file has no null in the column.
                return _keep(pc.greater(stats.null_count, 0)) if stats.null_count is not None else None
            return stats.not_all_null
        if isinstance(node, InList):
            return self._in_leaf(node, negated)
        if isinstance(node, Like):
            return self._like_leaf(node, negated)
        if isinstance(node, ColumnRef | Cast) and pa.types.is_boolean(node.type):
            # A boolean column used as a condition: "flag" is "flag = true".
            return self._compare_leaf(Compare("=", node, Literal(True, _BOOL)), negated)
        return None

    def _column_stats(self, node: Node) -> _ColumnStats | None:
        """Statistics of the column under ``node`` (a column, or a column through implicit casts)."""
        casts: list[pa.DataType] = []
        while isinstance(node, Cast) and node.implicit:
            casts.append(node.type)
            node = node.operand
        if not isinstance(node, ColumnRef):
            return None
        assert self.stats is not None
        raw_min = _stat_field(self.stats, ("minValues", *node.path))
        raw_max = _stat_field(self.stats, ("maxValues", *node.path))
        null_count = _stat_field(self.stats, ("nullCount", *node.path))
        num_records = _stat_field(self.stats, ("numRecords",))
        if null_count is not None and not pa.types.is_integer(null_count.type):
            null_count = None
        base = node.type
        if raw_max is not None and pa.types.is_timestamp(raw_max.type):
            # Timestamps in statistics are truncated to milliseconds: the true maximum may
            # be up to 999 microseconds later.
            raw_max = pc.add(raw_max, _ONE_MS)
        max_prefix = None
        if raw_max is not None and _is_string(raw_max.type):
            max_prefix = pc.utf8_rtrim(raw_max, characters=_TIE_BREAKER)
        if null_count is not None and num_records is not None:
            not_all_null = _keep(pc.not_equal(null_count, num_records))
        else:
            not_all_null = self._all(True)
        try:
            lo, hi = _cast_chain(raw_min, base, casts), _cast_chain(raw_max, base, casts)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            lo = hi = None
        return _ColumnStats(lo, hi, max_prefix, not_all_null, null_count, num_records, base)

    def _compare_leaf(self, node: Compare, negated: bool) -> pa.BooleanArray | None:
        op, left, right = node.op, node.left, node.right
        if isinstance(left, Literal) and not isinstance(right, Literal):
            left, right = right, left
            op = _FLIPPED[op]
        if not isinstance(right, Literal):
            return None
        stats = self._column_stats(left)
        if stats is None:
            return None
        value = right.value
        if op == "<=>":
            if value is None:  # x <=> NULL is x IS NULL
                return self._leaf(IsNull(left), negated)
            if negated:  # NOT (x <=> v): x IS NULL OR x != v
                is_null = _keep(pc.greater(stats.null_count, 0)) if stats.null_count is not None else self._all(True)
                return pc.or_(is_null, self._range_check("!=", stats, right))
            return self._range_check("=", stats, right)
        if value is None:
            return self._all(False)  # comparing with NULL is never true
        if negated:
            # With Spark's NaN semantics the non-null values of every type are totally
            # ordered (NaN above everything, NaN = NaN), so NOT (x < v) is x >= v exactly.
            op = _NEGATED[op]
        return self._range_check(op, stats, right)

    def _range_check(self, op: str, stats: _ColumnStats, lit: Literal) -> pa.BooleanArray:
        keep = stats.not_all_null
        if _is_nan_literal(lit):
            # Bounds never include NaN, so they cannot say whether a file holds one (x = NaN)
            # or anything below it (x < NaN): any file with a non-null value may match.
            return keep
        if pa.types.is_floating(stats.base_type) and op in (">", ">=", "!="):
            # NaN is above every number and unequal to it, and min/max statistics leave
            # NaN out (Spark records a NaN maximum, read as unknown; parquet footers and
            # delta-rs skip NaN): any file with a non-null value may hold a NaN row.
            return keep
        scalar = pa.scalar(lit.value, lit.type)
        lo, hi = stats.min, stats.max
        if op in ("=", "<", "<=") and lo is not None:
            fn = pc.less if op == "<" else pc.less_equal
            keep = pc.and_(keep, _keep(fn(lo, scalar)))
        if op in ("=", ">", ">="):
            keep = pc.and_(keep, self._max_allows(stats, lit, strict=(op == ">")))
        if op == "!=":
            # Only numbers, dates and exact types can prove "every value equals v": string
            # bounds may be truncated prefixes, timestamp bounds are truncated to
            # milliseconds (floats, which may hide NaN, returned above).
            exact = not (_is_string(stats.base_type) or pa.types.is_timestamp(stats.base_type))
            if exact and lo is not None and hi is not None and not pa.types.is_floating(lit.type):
                all_equal = pc.and_(pc.equal(lo, scalar), pc.equal(hi, scalar)).fill_null(False)
                keep = pc.and_(keep, pc.invert(all_equal))
        return keep

    def _max_allows(self, stats: _ColumnStats, lit: Literal, strict: bool) -> pa.BooleanArray:
        """Files whose maximum does not rule out a value >= (or >) ``lit``."""
        if stats.max is None:
            return self._all(True)
        scalar = pa.scalar(lit.value, lit.type)
        fn = pc.greater if strict else pc.greater_equal
        keep = _keep(fn(stats.max, scalar))
        if stats.max_prefix is not None and isinstance(lit.value, str):
            # A truncated maximum p stands for some string starting with p: it can reach
            # lit only if p is a prefix of lit.
            keep = pc.or_(keep, _prefix_of(stats.max_prefix, lit.value))
        return keep

    def _in_leaf(self, node: InList, negated: bool) -> pa.BooleanArray | None:
        stats = self._column_stats(node.operand)
        if stats is None:
            return None
        target = node.operand.type
        if negated:
            if node.has_null:
                return self._all(False)  # x NOT IN (..., NULL) is never true
            keep = stats.not_all_null
            for value in node.values[:_MAX_LISTED_VALUES]:
                keep = pc.and_(keep, self._range_check("!=", stats, Literal(value, target)))
            return keep
        if not node.values:
            return self._all(False)
        if len(node.values) > _MAX_LISTED_VALUES:
            # Many values: test the range they span instead of each one.
            ordered = pc.sort_indices(pa.array(list(node.values), target))
            values = pa.array(list(node.values), target).take(ordered)
            low, high = Literal(values[0].as_py(), target), Literal(values[-1].as_py(), target)
            return pc.and_(self._range_check(">=", stats, low), self._range_check("<=", stats, high))
        keep = self._all(False)
        for value in node.values:
            keep = pc.or_(keep, self._range_check("=", stats, Literal(value, target)))
        return keep

    def _like_leaf(self, node: Like, negated: bool) -> pa.BooleanArray | None:
        if node.ignore_case:
            return None
        stats = self._column_stats(node.operand)
        if stats is None or not _is_string(stats.base_type):
            return None
        prefix, rest = _like_prefix(node.pattern)
        keep = stats.not_all_null
        if negated:
            if prefix and rest == "%" and stats.min is not None and stats.max_prefix is not None:
                # Every value starts with the prefix iff both bounds do.
                both = pc.and_(pc.starts_with(stats.min, prefix), pc.starts_with(stats.max_prefix, prefix)).fill_null(False)
                keep = pc.and_(keep, pc.invert(both))
            return keep
        if not prefix:
            return keep
        lit = Literal(prefix, pa.string())
        keep = pc.and_(keep, self._max_allows(stats, lit, strict=False))
        if stats.min is not None:
            below = pc.or_(pc.less_equal(stats.min, prefix), pc.starts_with(stats.min, prefix))
            keep = pc.and_(keep, _keep(below))
        return keep


def _keep(mask: pa.Array) -> pa.BooleanArray:
    """Unknown (null) comparisons keep the file."""
    return mask.fill_null(True)


def _prefix_of(prefixes: pa.Array, text: str) -> pa.BooleanArray:
    """For each string p in ``prefixes``: is ``text`` starting with p?"""
    candidates = pa.array(sorted({text[:i] for i in range(len(text) + 1)}), pa.string())
    return pc.is_in(prefixes.cast(pa.string()), value_set=candidates).fill_null(False)


def _stat_field(stats: pa.StructArray, path: Sequence[str]) -> pa.Array | None:
    current: pa.Array = stats
    for name in path:
        if not pa.types.is_struct(current.type):
            return None
        index = current.type.get_field_index(name)
        if index < 0:
            folded = [i for i in range(current.type.num_fields) if current.type.field(i).name.casefold() == name.casefold()]
            if len(folded) != 1:
                return None
            index = folded[0]
        # struct_field keeps the parent's nulls: no stats row means no statistic.
        current = pc.struct_field(current, [index])
    return current


def _cast_chain(array: pa.Array | None, base: pa.DataType, casts: Sequence[pa.DataType]) -> pa.Array | None:
    if array is None:
        return None
    if not array.type.equals(base) and not pa.types.is_null(array.type):
        array = array.cast(base)
    for target in reversed(casts):
        array = array.cast(target)
    return array


_LIKE_WILDCARDS = frozenset("%_")


def _like_prefix(pattern: str) -> tuple[str, str]:
    """The literal prefix of a LIKE pattern and the rest of the pattern after it."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
            continue
        if ch in _LIKE_WILDCARDS:
            break
        out.append(ch)
        i += 1
    return "".join(out), pattern[i:]
