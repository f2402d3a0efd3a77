"""The fast reader of the most common filters, without sqlglot.

A DELETE of one row (``id = 7654321``) in a fresh worker process spent about a fifth of
its time importing sqlglot and its Spark dialect to read five tokens. This module reads
the shapes DAGs write most, and nothing else:

* comparisons ``operand op operand`` with ``=  ==  !=  <>  <  <=  >  >=  <=>``, where an
  operand is a column (``name``, ```quoted```, ``a.b`` for struct fields), a number
  (``12``, ``1.50``, optionally negated), a single-quoted string without quotes or
  backslashes inside, ``TRUE``, ``FALSE`` or ``NULL``;
* ``x IS [NOT] NULL`` and ``x [NOT] IN (literal, ...)``;
* a lone column or literal as a condition (``flag``);
* any of these combined with ``AND``, ``OR``, ``NOT`` and parentheses.

The tree is bound by the same :class:`~.binder._Binder` rules as sqlglot's, in the same
order (coercions, folding of constants, ``x = 1 OR x = 2`` as ``IN``), so both readers give
equal bound trees; the tests prove it against the sqlglot reader with hypothesis. Anything
else (functions, CAST, arithmetic, LIKE, BETWEEN, comments, a keyword used as a column
name, a binding error to report) makes :func:`bind_simple_filter` return None and the
caller falls back to sqlglot, which also words every error message.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pyarrow as pa

from airflow_delta.engine.errors import InvalidFilterError
from airflow_delta.engine.expressions.binder import (
    _Binder,
    _conjunction,
    _extract_in_lists,
    _fold_equalities_into_in,
    _group_literals,
    _LiteralList,
    _negate,
)
from airflow_delta.engine.expressions.limits import MAX_FILTER_DEPTH
from airflow_delta.engine.expressions.literals import _number_literal
from airflow_delta.engine.expressions.sql_types import _is_numeric
from airflow_delta.engine.expressions.tree import _BOOL, And, IsNull, Literal, Negate, Node, Or

__all__ = ["bind_simple_filter"]

# One token per match; a position no alternative matches (comments, double quotes,
# operators such as + or %, non-ASCII letters) makes the whole filter fall back.
_TOKEN_RE = re.compile(
    r"""[ \t\r\n]+"""
    r"""|(?P<number>\d+(?:\.\d+)?)(?![\w.])"""  # 1e3, 1L, 1.: Spark's other number forms fall back
    r"""|(?P<string>'[^'\\]*')(?!')"""  # 'a''b' and backslash escapes fall back
    r"""|(?P<quoted>`[^`]+`)(?!`)"""
    r"""|(?P<word>[A-Za-z_][A-Za-z0-9_]*)(?![\w'"`])"""
    r"""|(?P<op><=>|<=|>=|<>|!=|==|=|<|>)"""
    r"""|(?P<punct>[(),.])"""
    r"""|(?P<minus>-)(?!-)""",  # "--" starts a comment
)
_IDENTIFIER_END = re.compile(r"[A-Za-z0-9_`]")
_IDENTIFIER_START = re.compile(r"[A-Za-z_`]")
_COMPARISONS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "<=>": "<=>"}
_KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE"})
# Unquoted words that sqlglot's Spark dialect may read as something other than a column
# (keywords, functions without parentheses such as CURRENT_DATE): left to sqlglot, so a
# column named like one of them means what it means there. The test checks this list
# against sqlglot's own keyword and no-parenthesis function tables.
_NOT_A_COLUMN = frozenset(
    {
        "ALL", "ALTER", "ANTI", "ANY", "ARRAY", "AS", "ASC", "BETWEEN", "BINARY", "BOTH", "BY", "CACHE",
        "CASE", "CAST", "CHAR", "CHARACTER", "COLLATE", "COLUMN", "COMMENT", "CONNECT_BY_ROOT",
        "CONSTRAINT", "COPY", "CREATE", "CROSS", "CUBE", "CURRENT", "CURRENT_CATALOG", "CURRENT_DATE",
        "CURRENT_DATETIME", "CURRENT_ROLE", "CURRENT_SCHEMA", "CURRENT_TIME", "CURRENT_TIMESTAMP",
        "CURRENT_USER", "DATE", "DATETIME", "DEFAULT", "DELETE", "DESC", "DISTINCT", "DIV", "DROP",
        "ELSE", "END", "ESCAPE", "EXCEPT", "EXISTS", "FETCH", "FILTER", "FIRST", "FOLLOWING", "FOR",
        "FROM", "FULL", "FUNCTION", "GLOB", "GRANT", "GROUP", "HAVING", "IF", "ILIKE", "INNER",
        "INSERT", "INTERSECT", "INTERVAL", "INTO", "JOIN", "LAST", "LATERAL", "LEADING", "LEFT", "LIKE",
        "LIMIT", "LOCALTIME", "LOCALTIMESTAMP", "MAP", "MINUS", "NATURAL", "NOTNULL", "NULLS", "OFFSET",
        "ON", "ORDER", "OUTER", "OVER", "PARTITION", "PARTITIONED_BY", "PIVOT", "PRECEDING", "QUALIFY",
        "RANGE", "RECURSIVE", "REGEXP", "RETURNING", "REVOKE", "RIGHT", "RLIKE", "ROLLBACK", "ROLLUP",
        "ROW", "ROWS", "SELECT", "SEMI", "SERDEPROPERTIES", "SESSION_USER", "SET", "SIMILAR", "SOME",
        "STRUCT", "SYSDATE", "SYSTIMESTAMP", "TABLE", "TABLESAMPLE", "THEN", "TIME", "TIMESTAMP",
        "TIMESTAMPLTZ", "TIMESTAMPNTZ", "TIMESTAMP_LTZ", "TIMESTAMP_NTZ", "TO", "TOP", "TRAILING",
        "UNBOUNDED", "UNCACHE", "UNION", "UNIQUE", "UNKNOWN", "UNNEST", "UNPIVOT", "UPDATE", "USER",
        "USING", "VALUES", "WHEN", "WHERE", "WINDOW", "WITH", "XOR",
    }
)
# Deeper than this, sqlglot's reader (and its limits' messages) takes over.
_MAX_NESTING = MAX_FILTER_DEPTH // 2


class _NotSimpleError(Exception):
    """The filter is not one of this module's shapes: sqlglot reads it."""


# The syntax tree, before binding: one small class per shape.
class _Column:
    __slots__ = ("parts",)

    def __init__(self, parts: list[str]) -> None:
        self.parts = parts


class _Constant:
    __slots__ = ("kind", "text")

    def __init__(self, kind: str, text: str) -> None:
        self.kind = kind  # number | string | TRUE | FALSE | NULL
        self.text = text


class _Negative:
    __slots__ = ("operand",)

    def __init__(self, operand: _Constant) -> None:
        self.operand = operand


class _Comparison:
    __slots__ = ("left", "op", "right")

    def __init__(self, op: str, left: _Operand, right: _Operand) -> None:
        self.op, self.left, self.right = op, left, right


class _IsNull:
    __slots__ = ("operand",)

    def __init__(self, operand: _Operand) -> None:
        self.operand = operand


class _In:
    __slots__ = ("items", "operand")

    def __init__(self, operand: _Operand, items: list[_Operand]) -> None:
        self.operand, self.items = operand, items


class _Chain:
    """AND or OR of two or more terms, parenthesised chains of the same kind spliced in (as sqlglot's reader flattens them)."""

    __slots__ = ("kind", "terms")

    def __init__(self, kind: str, terms: list[_Syntax]) -> None:
        self.kind, self.terms = kind, terms


class _Negation:
    __slots__ = ("term",)

    def __init__(self, term: _Syntax) -> None:
        self.term = term


_Operand = _Column | _Constant | _Negative
_Syntax = _Operand | _Comparison | _IsNull | _In | _Chain | _Negation


def bind_simple_filter(
    sql: str, schema: pa.Schema, extracted: tuple[str, dict[str, _LiteralList]] | None = None
) -> Node | None:
    """The bound tree of ``sql`` when it is one of the simple shapes and binds without error, else None.

    ``extracted`` is ``_extract_in_lists(sql)`` when the caller has it already.
    """
    text, in_lists = extracted if extracted is not None else _extract_in_lists(sql)
    try:
        syntax = _Parser(text).parse()
        binder = _SimpleBinder(sql, schema)
        binder.in_lists = in_lists
        return binder.bind(syntax)
    except (_NotSimpleError, InvalidFilterError):
        return None


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) pairs; keywords as ("keyword", upper-case word)."""
    out: list[tuple[str, str]] = []
    position, end = 0, len(text)
    while position < end:
        match = _TOKEN_RE.match(text, position)
        if match is None:
            raise _NotSimpleError
        position = match.end()
        kind = match.lastgroup
        if kind is None:  # whitespace
            continue
        value = match.group(kind)
        if value == "." and not (_IDENTIFIER_END.match(text, match.start() - 1) and _IDENTIFIER_START.match(text, position)):
            raise _NotSimpleError  # only a.b written tight is a field path here; "a . b" is sqlglot's to read
        if kind == "word":
            upper = value.upper()
            if upper in _KEYWORDS:
                kind, value = "keyword", upper
            elif upper in _NOT_A_COLUMN:
                raise _NotSimpleError
        out.append((kind, value))
    return out


class _Parser:
    """Recursive descent over the tokens, with SQL's precedence: OR < AND < NOT < comparison."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.position = 0
        self.nesting = 0

    def parse(self) -> _Syntax:
        if not self.tokens:
            raise _NotSimpleError
        tree = self._or()
        if self.position != len(self.tokens):
            raise _NotSimpleError
        return tree

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _take(self, kind: str, value: str | None = None) -> str:
        token = self._peek()
        if token is None or token[0] != kind or (value is not None and token[1] != value):
            raise _NotSimpleError
        self.position += 1
        return token[1]

    def _at(self, kind: str, value: str) -> bool:
        return self._peek() == (kind, value)

    def _or(self) -> _Syntax:
        return self._chain("OR", self._and)

    def _and(self) -> _Syntax:
        return self._chain("AND", self._not)

    def _chain(self, keyword: str, parse_term: Callable[[], _Syntax]) -> _Syntax:
        terms = [parse_term()]
        while self._at("keyword", keyword):
            self.position += 1
            terms.append(parse_term())
        if len(terms) == 1:
            return terms[0]
        flat: list[_Syntax] = []
        for item in terms:
            flat.extend(item.terms if isinstance(item, _Chain) and item.kind == keyword else [item])
        return _Chain(keyword, flat)

    def _not(self) -> _Syntax:
        if self._at("keyword", "NOT"):
            self.position += 1
            return _Negation(self._nested(self._not))
        if self._at("punct", "("):
            self.position += 1
            inner = self._nested(self._or)
            self._take("punct", ")")
            return inner
        return self._predicate()

    def _nested(self, parse: Callable[[], _Syntax]) -> _Syntax:
        self.nesting += 1
        if self.nesting > _MAX_NESTING:
            raise _NotSimpleError
        try:
            return parse()
        finally:
            self.nesting -= 1

    def _predicate(self) -> _Syntax:
        operand = self._operand()
        token = self._peek()
        if token is None or token in (("keyword", "AND"), ("keyword", "OR"), ("punct", ")")):
            return operand  # a lone column or literal: binding checks it is a condition
        kind, value = token
        if kind == "op":
            self.position += 1
            return _Comparison(_COMPARISONS[value], operand, self._operand())
        if token == ("keyword", "IS"):
            self.position += 1
            negated = self._at("keyword", "NOT")
            if negated:
                self.position += 1
            self._take("keyword", "NULL")
            return _Negation(_IsNull(operand)) if negated else _IsNull(operand)
        negated = token == ("keyword", "NOT")
        if negated:
            self.position += 1
        self._take("keyword", "IN")
        self._take("punct", "(")
        items = [self._operand()]
        while self._at("punct", ","):
            self.position += 1
            items.append(self._operand())
        self._take("punct", ")")
        return _Negation(_In(operand, items)) if negated else _In(operand, items)

    def _operand(self) -> _Operand:
        token = self._peek()
        if token is None:
            raise _NotSimpleError
        kind, value = token
        self.position += 1
        if kind == "minus":
            return _Negative(_Constant("number", self._take("number")))
        if kind in ("number", "string"):
            return _Constant(kind, value)
        if kind == "keyword" and value in ("TRUE", "FALSE", "NULL"):
            return _Constant(value, value)
        if kind in ("word", "quoted"):
            parts = [_identifier(kind, value)]
            while self._at("punct", "."):
                self.position += 1
                token = self._peek()
                if token is None or token[0] not in ("word", "quoted"):
                    raise _NotSimpleError
                self.position += 1
                parts.append(_identifier(*token))
            return _Column(parts)
        raise _NotSimpleError


def _identifier(kind: str, text: str) -> str:
    return text[1:-1] if kind == "quoted" else text


class _SimpleBinder(_Binder):
    """Binds :class:`_Parser`'s tree node for node as :class:`~.sql_binding._SqlglotBinder` binds sqlglot's."""

    def bind(self, node: _Syntax) -> Node:
        self.depth += 1
        try:
            if self.depth > MAX_FILTER_DEPTH:
                raise _NotSimpleError  # sqlglot's reader words the limit
            return self._fold(self._bind(node))
        finally:
            self.depth -= 1

    def _bind(self, node: _Syntax) -> Node:
        if isinstance(node, _Chain):
            terms = [self._predicate(t) for t in node.terms]
            if node.kind == "AND":
                return _conjunction(And, terms)
            return _conjunction(Or, _fold_equalities_into_in(terms))
        if isinstance(node, _Negation):
            negated = False
            inner: _Syntax = node
            while isinstance(inner, _Negation):
                negated = not negated
                inner = inner.term
            term = self._predicate(inner)
            return _negate(term) if negated else term
        if isinstance(node, _Comparison):
            return self._compare_bound(node.op, self.bind(node.left), self.bind(node.right))
        if isinstance(node, _IsNull):
            return IsNull(self.bind(node.operand))
        if isinstance(node, _In):
            return self._in(node)
        if isinstance(node, _Column):
            return self._resolve_column(node.parts)
        if isinstance(node, _Negative):
            operand = self.bind(node.operand)
            self._require(operand, _is_numeric, "numeric", "-")
            return Negate(operand, operand.type)
        return _constant(node)

    def _predicate(self, node: _Syntax) -> Node:
        bound = self.bind(node)
        if not (pa.types.is_boolean(bound.type) or pa.types.is_null(bound.type)):
            raise _NotSimpleError  # sqlglot's reader words "not a condition"
        if isinstance(bound, Literal) and bound.value is None:
            return Literal(None, _BOOL)
        return bound

    def _in(self, node: _In) -> Node:
        operand = self.bind(node.operand)
        items = node.items
        if len(items) == 1 and isinstance(items[0], _Column) and len(items[0].parts) == 1 and items[0].parts[0] in self.in_lists:
            return self._in_list(operand, self.in_lists[items[0].parts[0]])  # a long literal list, read by regex
        bound = [self.bind(item) for item in items]
        if any(not isinstance(item, Literal) for item in bound):
            return Or(tuple(self._compare_nodes("=", operand, item) for item in bound))
        return self._in_list(operand, _group_literals(bound))  # type: ignore[arg-type]


def _constant(node: _Constant) -> Literal:
    if node.kind == "string":
        return Literal(node.text[1:-1], pa.string(), untyped_string=True)
    if node.kind == "number":
        return _number_literal(node.text)
    if node.kind == "NULL":
        return Literal(None, pa.null())
    return Literal(node.kind == "TRUE", _BOOL)

