"""The general reader of filters: sqlglot's Spark dialect, its tree bound by :class:`~.binder._Binder`'s rules.

Every filter that :mod:`.simple_filter` does not read comes here (functions, CAST,
arithmetic, LIKE, BETWEEN, ...), and so does every filter with something to report: the
messages come from one place. Imported on first use: sqlglot and its Spark dialect cost
about 0.07 s of CPU.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from airflow_delta.engine.errors import InvalidFilterError
from airflow_delta.engine.expressions.binder import (
    _Binder,
    _conjunction,
    _describe,
    _extract_in_lists,
    _fold_equalities_into_in,
    _group_literals,
    _LiteralList,
    _negate,
)
from airflow_delta.engine.expressions.limits import MAX_FILTER_DEPTH
from airflow_delta.engine.expressions.literals import _literal_as, _number_literal
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
    IsNull,
    Like,
    Literal,
    Negate,
    Node,
    Not,
    Or,
)


def bind_sql(sql: str, schema: pa.Schema, extracted: tuple[str, dict[str, _LiteralList]] | None = None) -> Node:
    """``sql`` parsed by sqlglot as the condition of a WHERE clause and bound to ``schema`` (not yet size-checked).

    ``extracted`` is ``_extract_in_lists(sql)`` when the caller has it already.
    """
    text, in_lists = extracted if extracted is not None else _extract_in_lists(sql)
    statement = _parse_condition(sql, text)
    binder = _SqlglotBinder(sql, schema)
    binder.in_lists = in_lists
    return binder.bind(statement)


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
def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _as_written(e: exp.Expression) -> str:
    """How a user wrote ``e``: the operator of a binary expression as SQL spells it (``||``,
    not sqlglot's ``dpipe``), else the expression's own text."""
    text = e.sql(dialect="spark")
    if isinstance(e, exp.Binary) and e.this is not None and e.expression is not None:
        left, right = e.this.sql(dialect="spark"), e.expression.sql(dialect="spark")
        if text.startswith(left) and text.endswith(right) and len(text) > len(left) + len(right):
            operator = text[len(left) : len(text) - len(right)].strip()
            return f"the operator {operator} (in {text!r})"
    return repr(text)


_SUPPORTED_FUNCTIONS = "lower, upper, coalesce, abs, length, trim, ltrim, rtrim, year, month, day, hour"


class _SqlglotBinder(_Binder):
    """Binds sqlglot's tree of a filter: every shape of the filter grammar."""

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
        raise self.error(f"{_as_written(e)} is not supported in a filter the engine evaluates")

    def _predicate(self, e: exp.Expression) -> Node:
        node = self.bind(e)
        if not (pa.types.is_boolean(node.type) or pa.types.is_null(node.type)):
            raise self.error(f"{e.sql(dialect='spark')!r} is a {_type_name(node.type)} value, not a condition; compare it with something")
        if isinstance(node, Literal) and node.value is None:
            return Literal(None, _BOOL)
        return node

    def _column(self, e: exp.Expression) -> ColumnRef:
        parts = _column_parts(e)
        if parts is None:
            raise self.error(f"{e.sql(dialect='spark')!r} is not a column reference this engine understands")
        return self._resolve_column(parts)

    def _compare(self, op: str, left_e: exp.Expression, right_e: exp.Expression) -> Node:
        return self._compare_bound(op, self.bind(left_e), self.bind(right_e))

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
        return self._in_list(operand, listed)

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
