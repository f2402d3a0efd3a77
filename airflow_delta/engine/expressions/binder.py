"""The binder's rules, shared by both readers of a filter (:mod:`.simple_filter`, :mod:`.sql_binding`).

:class:`_Binder` resolves columns, coerces literals and operands to common types, binds
``IN`` lists and folds constants; the readers call it node by node in the same order, so
the same text gives the same bound tree whichever reader saw it. Long ``IN`` lists of
literals are read here in one regular-expression pass (:func:`_extract_in_lists`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import InvalidFilterError
from airflow_delta.engine.expressions.arrow import _to_arrow
from airflow_delta.engine.expressions.arrow_values import arrow_array, evaluate, python_value
from airflow_delta.engine.expressions.literals import _literal_as, _number_literal, _string_literal_type
from airflow_delta.engine.expressions.sql_types import (
    _common_type,
    _is_numeric,
    _is_string,
    _type_name,
)
from airflow_delta.engine.expressions.tree import (
    And,
    Cast,
    ColumnRef,
    Compare,
    InList,
    Literal,
    Node,
    Not,
    Or,
    _children,
    _column_refs,
)

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



class _Binder:
    def __init__(self, sql: str, schema: pa.Schema) -> None:
        self.sql = sql
        self.schema = schema
        self.depth = 0  # nesting of bind() calls: operators inside operators
        self.in_lists: dict[str, _LiteralList] = {}  # placeholder name -> the literals of a long IN list
        # Columns resolved so far, by the parts as written: a filter of thousands of terms
        # names the same few columns thousands of times.
        self._resolved: dict[tuple[str, ...], ColumnRef] = {}

    def error(self, reason: str) -> InvalidFilterError:
        return InvalidFilterError(self.sql, reason)

    # -------------------------------------------------------------- dispatch
    def _require(self, node: Node, check: Callable[[pa.DataType], bool], what: str, op: str) -> None:
        if not (check(node.type) or pa.types.is_null(node.type)):
            raise self.error(f"{op} needs {what} operands, but {_describe(node)} is {_type_name(node.type)}")

    # -------------------------------------------------------------- columns
    def _resolve_column(self, parts: Sequence[str]) -> ColumnRef:
        """The column at ``parts`` (top level first; struct fields after), resolved case-insensitively."""
        key = tuple(parts)
        resolved = self._resolved.get(key)
        if resolved is None:
            resolved = self._resolved[key] = self._resolve_column_uncached(parts)
        return resolved

    def _resolve_column_uncached(self, parts: Sequence[str]) -> ColumnRef:
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
    def _compare_bound(self, op: str, left: Node, right: Node) -> Node:
        """``left op right`` of two bound operands: coerced to a common type; structs, lists and maps refused."""
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

    def _in_list(self, operand: Node, listed: _LiteralList) -> Node:
        """``operand IN (literals)``: the list compared in one type, decided from one literal of each kind."""
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


def _resolve_field(fields: Sequence[pa.Field], name: str) -> pa.Field | str | None:
    exact = [f for f in fields if f.name == name]
    if exact:
        return exact[0]
    folded = [f for f in fields if f.name.casefold() == name.casefold()]
    if len(folded) > 1:
        return "ambiguous"
    return folded[0] if folded else None


def _describe(node: Node) -> str:
    if isinstance(node, ColumnRef):
        return f"column {node.display}"
    if isinstance(node, Literal):
        return repr(node.value) if node.value is not None else "NULL"
    if isinstance(node, Cast) and node.implicit:
        return _describe(node.operand)
    refs = list(_column_refs(node))
    return f"an expression on {', '.join(r.display for r in refs)}" if refs else "a constant expression"


