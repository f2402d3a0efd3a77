"""The bound tree as a ``pyarrow.compute`` expression, with Spark SQL's semantics.

Three-valued logic, NaN ordered above every number and equal to itself, non-ANSI casts
(NaN -> 0, saturating integers, NULL for decimals that do not fit) and exact decimal
arithmetic in Spark's result types; division by zero is NULL.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.expressions.arrow_values import TRUE, arrow_array, arrow_scalar
from airflow_delta.engine.expressions.sql_types import _is_numeric, _is_string
from airflow_delta.engine.expressions.tree import (
    _BOOL,
    _FLIPPED,
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
    _is_nan_literal,
)

_NULL_BOOL = arrow_scalar(None, _BOOL)
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
            return pc.scalar(arrow_scalar(None, _BOOL))
        return pc.scalar(arrow_scalar(node.value, node.type))
    if isinstance(node, Compare):
        left, right = _to_arrow(node.left), _to_arrow(node.right)
        if node.op == "<=>":
            both_null = pc.and_kleene(pc.is_null(left), pc.is_null(right))
            return pc.coalesce(_compare_to_arrow("=", node.left, node.right, left, right), both_null)
        return _compare_to_arrow(node.op, node.left, node.right, left, right)
    if isinstance(node, And):
        return _balanced(pc.and_kleene, [_to_arrow(term) for term in node.terms])
    if isinstance(node, Or):
        return _balanced(pc.or_kleene, [_to_arrow(term) for term in node.terms])
    if isinstance(node, Not):
        return pc.invert(_to_arrow(node.term))
    if isinstance(node, IsNull):
        return pc.is_null(_to_arrow(node.operand))
    if isinstance(node, InList):
        operand = _to_arrow(node.operand)
        # is_in matches NaN with NaN, as Spark's IN does (NaN = NaN is true in Spark).
        found = pc.is_in(operand, value_set=arrow_array(list(node.values), node.operand.type))
        if node.has_null:
            # x IN (..., NULL) is true on a match and NULL otherwise, never false.
            found = pc.if_else(found, pc.scalar(TRUE), pc.scalar(_NULL_BOOL))
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


# Terms of one associative chain that pyarrow may flatten together (see _balanced).
_CHAIN_GROUP = 64


def _balanced(combine: Callable[[pc.Expression, pc.Expression], pc.Expression], terms: list[pc.Expression]) -> pc.Expression:
    """``t1 op t2 op ...`` as a balanced tree, log2(n) deep, in groups pyarrow keeps apart.

    A left-deep chain of 10,000 terms overflows the C stack when pyarrow walks it
    (SIGSEGV); Kleene AND and OR are associative, so the grouping does not matter. A
    balanced tree alone is not enough: binding an expression for execution canonicalizes
    it, which flattens nested calls of one associative function back into a left-deep
    chain of every term. So every group of at most :data:`_CHAIN_GROUP` terms is closed by
    a cast to its own type (boolean to boolean: the values, NULLs included, are unchanged),
    which canonicalization does not look through: no chain pyarrow builds is longer than
    the group, whatever the number of terms.
    """
    while len(terms) > _CHAIN_GROUP:
        terms = [
            _pairwise(combine, terms[i : i + _CHAIN_GROUP]).cast(pa.bool_())
            for i in range(0, len(terms), _CHAIN_GROUP)
        ]
    return _pairwise(combine, terms)


def _pairwise(combine: Callable[[pc.Expression, pc.Expression], pc.Expression], terms: list[pc.Expression]) -> pc.Expression:
    while len(terms) > 1:
        paired = [combine(terms[i], terms[i + 1]) for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            paired.append(terms[-1])
        terms = paired
    return terms[0]


def _or_strict(a: pc.Expression, b: pc.Expression) -> pc.Expression:
    """OR that is NULL when either side is NULL (not Kleene), for use as an if_else condition."""
    return pc.Expression._call("or", [a, b])


def _and_strict(a: pc.Expression, b: pc.Expression) -> pc.Expression:
    return pc.Expression._call("and", [a, b])


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
    limit = pc.scalar(arrow_scalar(Decimal(10) ** integer_digits, wide))
    fits = pc.less(pc.abs(value), limit)
    safe = pc.if_else(fits, value, pc.scalar(arrow_scalar(0, wide)))
    return pc.if_else(fits, safe.cast(target), pc.scalar(arrow_scalar(None, target)))


def _cast_float_to_arrow(operand: pc.Expression, target: pa.DataType) -> pc.Expression:
    """An explicit CAST of a float or double, with Spark's (non-ANSI) results for NaN and infinities.

    Spark casts NaN to 0 and an infinity to the integer type's limit, gives NULL for a
    decimal it cannot represent (NaN, infinities), and writes "NaN" / "Infinity" /
    "-Infinity" as strings.
    """
    if pa.types.is_integer(target):
        low, high = _INTEGER_LIMITS[target.bit_width]
        finite = pc.if_else(pc.is_nan(operand), pc.scalar(arrow_scalar(0.0, pa.float64())), operand)
        # Saturate in double first (Java's narrowing conversion); NULL stays NULL.
        upper = pc.min_element_wise(finite, pc.scalar(arrow_scalar(float(high), pa.float64())), skip_nulls=False)
        clamped = pc.max_element_wise(upper, pc.scalar(arrow_scalar(float(low), pa.float64())), skip_nulls=False)
        as_int = pc.trunc(clamped).cast(target, safe=False)
        if target.bit_width < 64:
            return as_int
        # 2**63 as a double does not fit a long: map the clamped top to the exact limit.
        return pc.if_else(pc.greater_equal(finite, pc.scalar(arrow_scalar(float(high), pa.float64()))), pc.scalar(arrow_scalar(high, target)), as_int)
    if pa.types.is_decimal(target):
        # NULL where Spark gives NULL: NaN, infinities and values beyond the precision.
        limit = 10.0 ** (target.precision - target.scale) - 0.5 * 10.0**-target.scale
        representable = pc.and_kleene(pc.is_finite(operand), pc.less(pc.abs(operand), pc.scalar(arrow_scalar(limit, pa.float64()))))
        safe = pc.if_else(representable, operand, pc.scalar(arrow_scalar(0.0, pa.float64())))
        return pc.if_else(representable, safe.cast(target), pc.scalar(arrow_scalar(None, target)))
    if _is_string(target):
        text = operand.cast(target)
        text = pc.if_else(pc.is_nan(operand), pc.scalar(arrow_scalar("NaN", target)), text)
        text = pc.if_else(pc.equal(operand, pc.scalar(arrow_scalar(float("inf"), pa.float64()))), pc.scalar(arrow_scalar("Infinity", target)), text)
        return pc.if_else(pc.equal(operand, pc.scalar(arrow_scalar(float("-inf"), pa.float64()))), pc.scalar(arrow_scalar("-Infinity", target)), text)
    return operand.cast(target, safe=False)


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
    zero = pc.scalar(arrow_scalar(0, divisor))
    right_wide = right.cast(divisor)
    unit = pc.scalar(arrow_scalar(Decimal(1).scaleb(-divisor.scale), divisor))  # any non-zero value
    safe_right = pc.if_else(pc.equal(right_wide, zero), unit, right_wide)
    quotient = pc.divide(left.cast(dividend), safe_right)
    rounded = pc.round(quotient, ndigits=result.scale, round_mode="half_towards_infinity").cast(result)
    # Spark (without ANSI mode) gives NULL for a division by zero.
    return pc.if_else(pc.equal(right_wide, zero), pc.scalar(arrow_scalar(None, result)), rounded)


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
    null = pc.scalar(arrow_scalar(None, node.type))
    zero = pc.scalar(arrow_scalar(0, node.type))
    # Spark (without ANSI mode) gives NULL for a division or remainder by zero.
    safe_right = pc.if_else(pc.equal(right, zero), pc.scalar(arrow_scalar(1, node.type)), right)
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
