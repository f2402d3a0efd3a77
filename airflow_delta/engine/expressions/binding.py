"""Binding: a SQL filter string parsed with sqlglot (Spark dialect) and bound to a schema.

Columns are resolved case-insensitively, literals coerced to the column types and types
checked, so that mistakes surface as :class:`InvalidFilterError` (with what to fix)
before any data is read; column-free sub-expressions are folded to literals.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from airflow_delta.engine.errors import InvalidFilterError
from airflow_delta.engine.expressions.arrow import _to_arrow
from airflow_delta.engine.expressions.arrow_values import arrow_array, evaluate, python_value
from airflow_delta.engine.expressions.limits import (
    MAX_FILTER_DEPTH,
    MAX_FILTER_NESTING,
    MAX_FILTER_NODES,
    run_with_deep_recursion,
)
from airflow_delta.engine.expressions.literals import _literal_as, _number_literal, _string_literal_type
from airflow_delta.engine.expressions.predicate import Predicate
from airflow_delta.engine.expressions.sql_types import (
    _common_type,
    _is_numeric,
    _is_string,
    _spark_decimal_arith,
    _type_name,
)
from airflow_delta.engine.expressions.tree import (
    _BOOL,
    And,
    Arith,
    Call,
    Cast,
    ColumnRef,
    Compare,
    InList,
    IsNull,
    Like,
    Literal,
    Negate,
    Node,
    Not,
    Or,
    _children,
    _column_refs,
)

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
    try:
        # sqlglot recurses once per level of nesting: parse where that cannot crash.
        return run_with_deep_recursion(lambda: _parse_and_bind(sql, schema))
    except RecursionError:
        raise InvalidFilterError(
            sql,
            f"it is nested too deeply to parse (the limit is about {MAX_FILTER_NESTING} levels of parentheses, "
            "NOT and function calls); remove redundant parentheses or split the filter",
        ) from None


def _parse_and_bind(sql: str, schema: pa.Schema) -> Predicate:
    text, in_lists = _extract_in_lists(sql)
    statement = _parse_condition(sql, text)
    binder = _Binder(sql, schema)
    binder.in_lists = in_lists
    root = binder.bind(statement)
    _check_size(sql, root)
    if not pa.types.is_boolean(root.type) and not pa.types.is_null(root.type):
        raise InvalidFilterError(sql, f"the filter must be a condition (true/false), but it is a {_type_name(root.type)} value")
    if isinstance(root, Literal) and root.type.equals(pa.null()):
        root = Literal(None, _BOOL)
    return Predicate(sql, root)


def _parse_condition(sql: str, text: str | None = None) -> exp.Expression:
    """The sqlglot tree of ``sql`` read as the condition of a WHERE clause.

    Parsing it in a ``WHERE`` position (rather than as a statement) keeps a filter that
    starts with a column named like a command keyword (``comment``, ``show``, ...) a
    condition; anything beyond the condition (``;``, ``ORDER BY``, ``LIMIT``) is refused.
    ``text`` is ``sql`` with long IN lists replaced (:func:`_extract_in_lists`); messages
    quote ``sql``.
    """
    text = sql if text is None else text
    try:
        as_statement = sqlglot.parse(text, read="spark")
    except SqlglotError:
        as_statement = []
    if any(isinstance(s, exp.Query | exp.DDL | exp.DML) for s in as_statement):
        raise InvalidFilterError(sql, "write only the condition of a WHERE clause, not a statement")
    try:
        statements = [s for s in sqlglot.parse(f"SELECT 1 WHERE {text}", read="spark") if s is not None]
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


# Long IN lists of plain literals are read here, in one regular-expression pass, and
# sqlglot sees a placeholder: its recursive-descent parser costs about 0.1 ms per value,
# and every value would then be bound one by one.
_MIN_EXTRACTED_LIST = 32
# No two parts may match the same spaces (as "\s*-?\s*" would): a list that does not
# match must fail in linear time, not try every split of the whitespace.
_NUMBER = r"(?:-\s*)?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_QUOTED = r"'[^'\\]*'"  # Spark reads 'a''b' as two adjacent literals: left to sqlglot
_LIST_ITEM = rf"(?:{_NUMBER}|{_QUOTED}|NULL)(?![\w.'])"
_LIST_ITEM_RE = re.compile(rf"\s*({_NUMBER}|{_QUOTED}|NULL)(?![\w.'])\s*(?:,|\))", re.IGNORECASE)
_LIST_RE = re.compile(rf"\s*{_LIST_ITEM}(?:\s*,\s*{_LIST_ITEM})*+\s*\)", re.IGNORECASE)
# What the scan steps over: quoted text, identifiers and comments (never rewritten), the
# "IN (" of a list, words, and runs of anything else.
_SCAN_RE = re.compile(
    # Possessive runs: a 1 MB quoted literal is one step, not a million backtracking states.
    r"""(?P<skip>'(?:[^'\\]++|\\.|'')*+'|"(?:[^"\\]++|\\.|"")*+"|`(?:[^`]++|``)*+`|--[^\n]*+|/\*.*?\*/)"""
    r"""|(?P<open>\bIN\s*\()|(?P<word>\w+)|(?P<other>[^'"`\w/-]+|.)""",
    re.IGNORECASE | re.DOTALL,
)


_INT8, _INT16, _INT32, _INT64 = pa.int8(), pa.int16(), pa.int32(), pa.int64()
_INTEGER_LIST_RE = re.compile(r"\s*(?:-\s*)?\d{1,18}(?:\s*,\s*(?:-\s*)?\d{1,18})*+\s*\)")


@dataclass(frozen=True)
class _LiteralList:
    """The non-null values of an IN list by kind of literal (type, quoted or not), and whether it held NULL."""

    kinds: dict[tuple[pa.DataType, bool], list[Any]]
    has_null: bool


def _group_literals(literals: Sequence[Literal]) -> _LiteralList:
    kinds: dict[tuple[pa.DataType, bool], list[Any]] = {}
    has_null = False
    for lit in literals:
        if lit.value is None:
            has_null = True
        else:
            kinds.setdefault((lit.type, lit.untyped_string), []).append(lit.value)
    return _LiteralList(kinds, has_null)


def _integer_list(text: str) -> _LiteralList:
    """A list of integers (each at most 18 digits) read at once with Arrow.

    Each is typed by its own digits as sqlglot and :func:`_number_literal` type it (a
    negative number is its positive literal negated): byte, short, int or long.
    """
    numbers = arrow_array(re.findall(r"-?\s*\d+", text), pa.string())
    values = pc.replace_substring_regex(numbers, r"\s+", "").cast(_INT64)
    magnitude = pc.abs(values)
    kinds: dict[tuple[pa.DataType, bool], list[Any]] = {}
    low = 0
    for kind, high in ((_INT8, 128), (_INT16, 32768), (_INT32, 2**31), (_INT64, None)):  # 18 digits fit a long
        in_range = pc.greater_equal(magnitude, low) if high is None else pc.and_(pc.greater_equal(magnitude, low), pc.less(magnitude, high))
        selected = values.filter(in_range)
        if len(selected):
            kinds[(kind, False)] = selected.to_pylist()
        low = high
    return _LiteralList(kinds, has_null=False)


def _extract_in_lists(sql: str) -> tuple[str, dict[str, _LiteralList]]:
    """``sql`` with each long ``IN (literal, ...)`` list replaced by a placeholder column, and the lists' literals.

    Only lists of unsigned or negated numbers, single-quoted strings without quotes or
    backslash escapes inside, and NULL are taken; they are read as sqlglot and the binder read them (a
    negative number is its positive literal negated). Anything else is left to sqlglot.
    """
    if len(sql) < 4 * _MIN_EXTRACTED_LIST:
        return sql, {}
    tag = uuid.uuid4().hex
    pieces: list[str] = []
    lists: dict[str, _LiteralList] = {}
    position = 0
    copied = 0
    while position < len(sql):
        match = _SCAN_RE.match(sql, position)
        assert match is not None
        position = match.end()
        if match.lastgroup != "open":
            continue
        listed = _LIST_RE.match(sql, position)
        if listed is None:
            continue
        body = sql[position : listed.end()]
        if body.count(",") + 1 < _MIN_EXTRACTED_LIST:
            continue
        name = f"__airflow_delta_in_list_{tag}_{len(lists)}"
        if _INTEGER_LIST_RE.fullmatch(body):
            lists[name] = _integer_list(body)
        else:
            lists[name] = _group_literals([_list_literal(m.group(1)) for m in _LIST_ITEM_RE.finditer(body)])
        pieces.append(sql[copied:position])
        pieces.append(f"{name})")
        position = copied = listed.end()
    if not lists:
        return sql, {}
    pieces.append(sql[copied:])
    return "".join(pieces), lists


def _list_literal(text: str) -> Literal:
    if text[0] == "'":
        return Literal(text[1:-1], pa.string(), untyped_string=True)
    if text.upper() == "NULL":
        return Literal(None, pa.null())
    negative = text[0] == "-"
    digits = text[1:].strip() if negative else text
    if digits.isdigit() and len(digits) <= 18:  # the common case, without a regular expression
        value = int(digits)
        # Typed by its own digits as in _number_literal (sqlglot reads -5 as -(5)).
        positive = Literal(value, _INT8 if value < 128 else _INT16 if value < 32768 else _INT32 if value < 2**31 else _INT64)
    else:
        positive = _number_literal(digits)
    return Literal(-positive.value, positive.type) if negative else positive


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_SUPPORTED_FUNCTIONS = "lower, upper, coalesce, abs, length, trim, ltrim, rtrim, year, month, day, hour"


class _Binder:
    def __init__(self, sql: str, schema: pa.Schema) -> None:
        self.sql = sql
        self.schema = schema
        self.depth = 0  # nesting of bind() calls: operators inside operators
        self.in_lists: dict[str, _LiteralList] = {}  # placeholder name -> the literals of a long IN list

    def error(self, reason: str) -> InvalidFilterError:
        return InvalidFilterError(self.sql, reason)

    # -------------------------------------------------------------- dispatch
    def bind(self, e: exp.Expression) -> Node:
        while isinstance(e, exp.Paren):
            e = e.this
        self.depth += 1
        try:
            if self.depth > MAX_FILTER_DEPTH:
                raise self.error(
                    f"it nests operators more than {MAX_FILTER_DEPTH} levels deep (parentheses, NOT NOT and chains of "
                    "AND / OR do not count); flatten it, e.g. write many alternatives as x IN (...)"
                )
            node = self._bind(e)
            return self._fold(node)
        finally:
            self.depth -= 1

    def _bind(self, e: exp.Expression) -> Node:
        if isinstance(e, exp.And):
            return _conjunction(And, [self._predicate(t) for t in _flatten(e, exp.And)])
        if isinstance(e, exp.Or):
            return _conjunction(Or, _fold_equalities_into_in([self._predicate(t) for t in _flatten(e, exp.Or)]))
        if isinstance(e, exp.Not):
            # NOT NOT x is x (also for NULL): a stack of NOTs is one NOT or none.
            negated = False
            while isinstance(e, exp.Not | exp.Paren):
                negated ^= isinstance(e, exp.Not)
                e = e.this
            term = self._predicate(e)
            return _negate(term) if negated else term
        if type(e) in _COMPARE_OPS:
            return self._compare(_COMPARE_OPS[type(e)], e.this, e.expression)
        if isinstance(e, exp.NullSafeNEQ):
            return Not(self._compare("<=>", e.this, e.expression))
        if isinstance(e, exp.Is):
            return self._is(e)
        if isinstance(e, exp.In):
            return self._in(e)
        if isinstance(e, exp.Between):
            low = self._fold(self._compare(">=", e.this, e.args["low"]))
            high = self._fold(self._compare("<=", e.this, e.args["high"]))
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
        expressions = list(e.expressions)
        if len(expressions) == 1 and isinstance(expressions[0], exp.Column) and expressions[0].name in self.in_lists:
            listed = self.in_lists[expressions[0].name]  # a long literal list, read before sqlglot
        else:
            items = [self.bind(item) for item in expressions]
            if not items:
                raise self.error("IN needs at least one value")
            if any(not isinstance(i, Literal) for i in items):
                # Columns or expressions in the list: a plain disjunction of equalities.
                return Or(tuple(self._compare_nodes("=", operand, item) for item in items))
            listed = _group_literals(items)  # type: ignore[arg-type]
        # Literals of one kind (type, quoted or not) coerce alike: decide the type the
        # list is compared in from one of each kind, then convert each kind at once.
        target = operand.type
        for (lit_type, untyped), kind_values in listed.kinds.items():
            # A quoted number against a numeric column is typed by its own digits.
            probes = kind_values if untyped and _is_numeric(operand.type) else kind_values[:1]
            for value in probes:
                probe = self._coerce_pair(operand, Literal(value, lit_type, untyped), "IN")[0].type
                target = _common_type(target, probe) or target
        operand = self._cast_to(operand, target)
        values: list[Any] = []
        for (lit_type, untyped), kind_values in listed.kinds.items():
            if not untyped and _common_type(lit_type, target) is None:
                raise self.error(self._mismatch(operand, Literal(kind_values[0], lit_type), "IN"))
            values.extend(self._in_values(kind_values, lit_type, untyped, target, operand))
        return InList(operand, tuple(dict.fromkeys(values)), listed.has_null)

    def _in_values(self, values: list[Any], lit_type: pa.DataType, untyped: bool, target: pa.DataType, operand: Node) -> list[Any]:
        """Literal values of one kind as values of ``target``, converted in one cast where possible."""
        if (untyped and _is_string(target)) or (not untyped and lit_type.equals(target)):
            return values
        if not untyped:
            try:
                return arrow_array(values, lit_type).cast(target, safe=True).to_pylist()
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                pass  # one value does not fit: the per-value conversion names it
        return [self._literal_to(Literal(value, lit_type, untyped), target, operand).value for value in values]

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
        # Children are folded already: a node is column-free only if they all are literals.
        if isinstance(node, Literal | ColumnRef) or not all(isinstance(c, Literal) for c in _children(node)):
            return node
        try:
            table = pa.Table.from_arrays([pa.nulls(1, pa.int8())], names=["_"])
            result = evaluate(table, _to_arrow(node))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise self.error(f"cannot evaluate {_describe(node)}: {exc}") from None
        return Literal(python_value(result[0]), node.type)


def _flatten(e: exp.Expression, kind: type[exp.Expression]) -> list[exp.Expression]:
    """The terms of a chain of ``kind`` (AND or OR), parentheses around sub-chains included."""
    out: list[exp.Expression] = []
    stack = [e]
    while stack:
        item = stack.pop()
        while isinstance(item, exp.Paren):
            item = item.this
        if isinstance(item, kind):
            stack.append(item.expression)
            stack.append(item.this)
        else:
            out.append(item)
    return out


def _conjunction(kind: type[And] | type[Or], terms: list[Node]) -> Node:
    """AND / OR of ``terms``, nested chains of the same kind merged into one level."""
    flat: list[Node] = []
    for term in terms:
        if isinstance(term, kind):
            flat.extend(term.terms)
        else:
            flat.append(term)
    return flat[0] if len(flat) == 1 else kind(tuple(flat))


def _negate(node: Node) -> Node:
    return node.term if isinstance(node, Not) else Not(node)


def _fold_equalities_into_in(terms: list[Node]) -> list[Node]:
    """``x = 1 OR x = 2 OR ...`` as ``x IN (1, 2, ...)``: one node, whatever the number of values.

    Exact under SQL's three-valued logic: both are NULL when x is NULL, true on a match
    and false otherwise (with Spark's NaN = NaN in both). Terms stay in their order, the
    IN list where the first equality on its operand stood.
    """
    groups: dict[Node, list[Any]] = {}
    for term in terms:
        equality = _equality_with_literal(term)
        if equality is not None:
            groups.setdefault(equality[0], []).append(equality[1])
    if not any(len(values) > 1 for values in groups.values()):
        return terms
    out: list[Node] = []
    placed: set[Node] = set()
    for term in terms:
        equality = _equality_with_literal(term)
        if equality is None or len(groups[equality[0]]) == 1:
            out.append(term)
            continue
        operand = equality[0]
        if operand in placed:
            continue
        placed.add(operand)
        out.append(InList(operand, tuple(dict.fromkeys(groups[operand])), has_null=False))
    return out


def _equality_with_literal(term: Node) -> tuple[Node, Any] | None:
    """(operand, value) if ``term`` is ``operand = value`` with a non-null literal value."""
    if not isinstance(term, Compare) or term.op != "=":
        return None
    left, right = term.left, term.right
    if isinstance(left, Literal) and not isinstance(right, Literal):
        left, right = right, left
    if not isinstance(right, Literal) or isinstance(left, Literal) or right.value is None:
        return None
    if not right.type.equals(left.type):
        return None
    try:
        hash(left)
        hash(right.value)
    except TypeError:
        return None
    return left, right.value


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
