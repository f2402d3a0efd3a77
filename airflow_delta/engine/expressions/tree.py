"""The bound expression tree: immutable nodes that a filter is bound to.

Every node knows its Arrow result type. Predicates (comparisons, AND/OR/NOT, IS NULL,
IN, LIKE) have type bool. Binding (:mod:`.binding`) builds the tree, :mod:`.arrow`
turns it into a row filter and :mod:`.pruning` evaluates it over file statistics.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

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
    """The column references under ``node``, left to right (walked without recursion)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ColumnRef):
            yield current
        stack.extend(reversed(_children(current)))


def _is_nan_literal(node: Node) -> bool:
    return isinstance(node, Literal) and isinstance(node.value, float) and node.value != node.value
