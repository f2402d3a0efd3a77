"""The Arrow row filter: SQL's three-valued logic, Spark's NaN semantics, exact decimal arithmetic."""

from __future__ import annotations

import math
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.expressions import parse_predicate
from tests.engine.expressions.sample_table_helpers import ROWS, SCHEMA


def matching(sql: str) -> list[int]:
    """``My Col`` of the rows ``sql`` selects."""
    return ROWS.filter(parse_predicate(sql, SCHEMA).to_arrow()).column("My Col").to_pylist()


# --------------------------------------------------------------------------- row filters


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("dt = '2024-01-01' AND id >= 1", [1]),
        ("id > 1", [2, 4]),
        ("id <> 1", [2, 4]),
        ("id != 1", [2, 4]),
        ("id == 1", [1]),
        ("1 < id", [2, 4]),
        ("id IN (1, 40)", [1, 4]),
        ("id IN (1, NULL)", [1]),
        ("id NOT IN (1, NULL)", []),
        ("id NOT IN (1, 2)", [4]),
        ("d = '2024-01-01'", [1]),
        ("d >= DATE '2024-01-01'", [1, 3]),
        ("ts = TIMESTAMP '2024-01-01 00:00:00'", [1]),
        ("ts > '2024-01-01T06:00:00+02:00'", [2]),
        ("ts >= DATE '2024-01-01'", [1, 2]),
        ("amt > 1.5", [2]),
        ("amt = 1.5", [1]),
        ("amt = '2'", [2]),
        ("amt < 0", [4]),
        ("x > 1", [2, 4]),  # NaN is greater than every number (Spark)
        ("x = 1e0", [1]),
        ("x <=> NULL", [3]),
        ("id <=> 2", [2]),
        ("id IS DISTINCT FROM 2", [1, 3, 4]),
        ("s.a > 1", [4]),
        ("S.B LIKE 'a%'", [4]),
        ("s.b NOT LIKE 'a%'", [1, 3]),
        ("dt LIKE '2024-01-0_'", [1, 2]),
        ("dt NOT LIKE '2024%'", [4]),
        ("flag", [1, 4]),
        ("NOT flag", [2]),
        ("flag IS TRUE", [1, 4]),
        ("flag IS NOT TRUE", [2, 3]),
        ("flag = false", [2]),
        ("id BETWEEN 1 AND 2", [1, 2]),
        ("id NOT BETWEEN 1 AND 2", [4]),
        ("`My Col` = 3", [3]),
        ("`my col` = 3", [3]),
        ("id + 1 = 3", [2]),
        ("id * 2 >= 80", [4]),
        ("id - 1 = 0", [1]),
        ("-id < -1", [2, 4]),
        ("id / 0 IS NULL", [1, 2, 3, 4]),
        ("id / 4 = 0.5", [2]),
        ("id % 3 = 1", [1, 4]),
        ("lower(dt) = 'x'", [4]),
        ("upper(dt) = 'X'", [4]),
        ("length(dt) = 1", [4]),
        ("trim(dt) = 'x'", [4]),
        ("coalesce(id, 0) = 0", [3]),
        ("abs(amt) > 3", [4]),
        ("year(d) = 2024", [1, 3]),
        ("month(d) = 2", [3]),
        ("hour(ts) = 12", [2]),
        ("id = '40'", [4]),
        ("CAST(id AS string) = '40'", [4]),
        ("CAST(amt AS int) = 2", [2]),
        ("id > 1 + 1", [4]),
        ("small = 300", []),
        ("small < 300", [1, 2, 3, 4]),
        ("id = NULL", []),
        ("NOT (id = NULL)", []),
        ("NULL", []),
        ("true", [1, 2, 3, 4]),
        ("false OR id = 1", [1]),
        ("id = 1 OR id IS NULL", [1, 3]),
        ("NOT (id = 1 OR id IS NULL)", [2, 4]),
        ("NOT (id > 1 AND dt = 'x')", [1, 2]),
        ("(id = 1)", [1]),
        ("id IN (small, 40)", [1, 2, 4]),
    ],
)
def test_row_filter(sql: str, expected: list[int]) -> None:
    assert matching(sql) == expected


def test_three_valued_logic_drops_unknown_rows_and_negation_is_exact() -> None:
    predicate = parse_predicate("id > 1", SCHEMA)
    # SQL semantics: NULL for the NULL id.
    values = ROWS.select(["id"]).to_pydict()["id"]
    assert values[2] is None
    unknown = pc.invert(predicate.to_arrow())
    assert ROWS.filter(unknown).column("My Col").to_pylist() == [1]
    # Two-valued: the complement keeps the NULL row (what a DELETE must keep).
    complement = pc.invert(predicate.to_arrow(nulls_as_false=True))
    assert ROWS.filter(complement).column("My Col").to_pylist() == [1, 3]


# --------------------------------------------------------------------------- Spark's NaN semantics
# Spark SQL reference, "NaN Semantics": NaN = NaN is true, and NaN is larger than any other
# numeric value (so above +Infinity); NaN is not NULL. The expected rows below follow those
# rules by hand; IEEE (Arrow's own kernels) would give different answers for most of them.

NAN = math.nan
INF = math.inf
FLOAT_SCHEMA = pa.schema([("id", pa.int32()), ("f", pa.float64()), ("g", pa.float32())])
FLOAT_ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5, 6], pa.int32()),
        "f": [1.0, NAN, None, INF, -INF, 2.5],
        "g": pa.array([1.0, NAN, None, INF, -INF, 2.5], pa.float32()),
    },
    schema=FLOAT_SCHEMA,
)


def float_matching(sql: str) -> list[int]:
    return FLOAT_ROWS.filter(parse_predicate(sql, FLOAT_SCHEMA).to_arrow()).column("id").to_pylist()


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        # equality: NaN equals NaN, and nothing else
        ("f = CAST('NaN' AS DOUBLE)", [2]),
        ("f = 'NaN'", [2]),
        ("f = CAST('nan' AS DOUBLE)", [2]),
        ("f == f", [1, 2, 4, 5, 6]),
        ("f = 1.0", [1]),
        ("f != CAST('NaN' AS DOUBLE)", [1, 4, 5, 6]),
        ("f <> 1.0", [2, 4, 5, 6]),
        ("f != f", []),
        # ordering: NaN above every number, +Infinity included
        ("f > 1.0", [2, 4, 6]),
        ("f >= 2.5", [2, 4, 6]),
        ("f < 2.5", [1, 5]),
        ("f <= 2.5", [1, 5, 6]),
        ("f > CAST('Infinity' AS DOUBLE)", [2]),
        ("f >= CAST('+inf' AS DOUBLE)", [2, 4]),
        ("f < CAST('NaN' AS DOUBLE)", [1, 4, 5, 6]),
        ("f <= CAST('NaN' AS DOUBLE)", [1, 2, 4, 5, 6]),
        ("f > CAST('NaN' AS DOUBLE)", []),
        ("f >= CAST('NaN' AS DOUBLE)", [2]),
        ("1.0 < f", [2, 4, 6]),
        ("CAST('NaN' AS DOUBLE) > f", [1, 4, 5, 6]),
        ("CAST('-Infinity' AS DOUBLE) = f", [5]),
        # negation is exact: the non-null values are totally ordered
        ("NOT (f > 1.0)", [1, 5]),
        ("NOT (f < 1.0)", [1, 2, 4, 6]),
        ("NOT (f = CAST('NaN' AS DOUBLE))", [1, 4, 5, 6]),
        # null-safe equality
        ("f <=> CAST('NaN' AS DOUBLE)", [2]),
        ("f <=> f", [1, 2, 3, 4, 5, 6]),
        ("NOT (f <=> CAST('NaN' AS DOUBLE))", [1, 3, 4, 5, 6]),
        ("f IS DISTINCT FROM CAST('NaN' AS DOUBLE)", [1, 3, 4, 5, 6]),
        ("f <=> NULL", [3]),
        # NaN is a value, not NULL
        ("f IS NULL", [3]),
        ("f IS NOT NULL", [1, 2, 4, 5, 6]),
        ("coalesce(f, 0) > 2", [2, 4, 6]),
        # IN / NOT IN / BETWEEN
        ("f IN (CAST('NaN' AS DOUBLE), 1.0)", [1, 2]),
        ("f IN ('NaN')", [2]),
        ("f NOT IN (CAST('NaN' AS DOUBLE))", [1, 4, 5, 6]),
        ("f NOT IN (1.0, 2.5)", [2, 4, 5]),
        ("f IN (f, 7.0)", [1, 2, 4, 5, 6]),
        ("f BETWEEN 2 AND CAST('NaN' AS DOUBLE)", [2, 4, 6]),
        ("f BETWEEN CAST('-Infinity' AS DOUBLE) AND CAST('Infinity' AS DOUBLE)", [1, 4, 5, 6]),
        ("f NOT BETWEEN 0 AND 3", [2, 4, 5]),
        # float (real) columns are widened to double, NaN included
        ("g > 1.0", [2, 4, 6]),
        ("g = f", [1, 2, 4, 5, 6]),
        ("g >= f", [1, 2, 4, 5, 6]),
        ("g > f", []),
        ("g = CAST('NaN' AS FLOAT)", [2]),
        # arithmetic produces NaN (inf - inf, inf * 0), which then compares as NaN
        ("f - f > 0", [2, 4, 5]),
        ("f * 0 = 0", [1, 6]),
        ("abs(f) > 1e300", [2, 4, 5]),
        # explicit casts (Spark without ANSI mode): NaN -> 0, infinities saturate
        ("CAST(f AS INT) = 0", [2]),
        ("CAST(f AS INT) = 2", [6]),
        ("CAST(f AS INT) = 2147483647", [4]),
        ("CAST(f AS INT) = -2147483648", [5]),
        ("CAST(f AS BIGINT) = 9223372036854775807", [4]),
        ("CAST(f AS BIGINT) = -9223372036854775808", [5]),
        ("CAST(f AS DECIMAL(10, 2)) IS NULL", [2, 3, 4, 5]),
        ("CAST(f AS STRING) = 'NaN'", [2]),
        ("CAST(f AS STRING) IN ('Infinity', '-Infinity')", [4, 5]),
        # constants fold with the same rules
        ("CAST('NaN' AS DOUBLE) = CAST('NaN' AS DOUBLE)", [1, 2, 3, 4, 5, 6]),
        ("CAST('NaN' AS DOUBLE) > 1e308", [1, 2, 3, 4, 5, 6]),
        ("CAST('NaN' AS DOUBLE) < CAST('Infinity' AS DOUBLE)", []),
    ],
)
def test_nan_follows_spark_semantics(sql: str, expected: list[int]) -> None:
    assert float_matching(sql) == expected


def test_nan_rules_hold_with_nulls_as_false_too() -> None:
    # DELETE keeps NOT(coalesce(p, false)): a NaN row matching "f > 1" must be deleted.
    predicate = parse_predicate("f > 1.0", FLOAT_SCHEMA)
    kept = FLOAT_ROWS.filter(pc.invert(predicate.to_arrow(nulls_as_false=True)))
    assert kept.column("id").to_pylist() == [1, 3, 5]


def _spark_compare(a: float | None, b: float | None, op: str) -> bool | None:
    """Reference model: Spark compares doubles by this total order (NaN last, NaN = NaN)."""
    if a is None or b is None:
        return None
    ka, kb = ((1, 0.0) if math.isnan(a) else (0, a)), ((1, 0.0) if math.isnan(b) else (0, b))
    return {"=": ka == kb, "!=": ka != kb, "<": ka < kb, "<=": ka <= kb, ">": ka > kb, ">=": ka >= kb}[op]


special_floats = st.none() | st.sampled_from([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.5])


def _double_literal(value: float) -> str:
    return f"CAST('{value}' AS DOUBLE)" if not math.isfinite(value) else repr(value)


@settings(max_examples=150, deadline=None)
@given(
    pairs=st.lists(st.tuples(special_floats, special_floats), min_size=1, max_size=10),
    op=st.sampled_from(["=", "!=", "<", "<=", ">", ">="]),
    literal=st.sampled_from([NAN, INF, -INF, 0.0, 1.0, 2.5]),
    negate=st.booleans(),
)
def test_float_comparisons_match_the_spark_model(pairs: list[tuple[float | None, float | None]], op: str, literal: float, negate: bool) -> None:
    schema = pa.schema([("a", pa.float64()), ("b", pa.float64())])
    table = pa.table({"a": [p[0] for p in pairs], "b": [p[1] for p in pairs]}, schema=schema)
    for sql, operands in (
        (f"a {op} b", pairs),
        (f"a {op} {_double_literal(literal)}", [(a, literal) for a, _ in pairs]),
        (f"{_double_literal(literal)} {op} b", [(literal, b) for _, b in pairs]),
    ):
        expected = [_spark_compare(a, b, op) for a, b in operands]
        if negate:
            sql, expected = f"NOT ({sql})", [None if e is None else not e for e in expected]
        expression = parse_predicate(sql, schema).to_arrow()
        actual = ds.dataset(table).to_table(columns={"r": expression}).column("r").to_pylist()
        assert actual == expected, sql


# --------------------------------------------------------------------------- exact decimal arithmetic
# Spark computes decimal + - * / exactly, in a result type given by its precision rules, and
# rounds a quotient half away from zero to the result scale. Double arithmetic would get
# each of these boundary cases wrong (9.10 * 1.1 = 10.010000000000002 in double).

DEC_SCHEMA = pa.schema([("id", pa.int32()), ("price", pa.decimal128(10, 2)), ("qty", pa.int32()), ("big", pa.decimal128(38, 18))])
DEC_ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5, 6], pa.int32()),
        "price": pa.array([Decimal(v) if v else None for v in ("9.10", "10.00", "9.09", "-1.00", None, "1.00")], pa.decimal128(10, 2)),
        "qty": pa.array([3, 0, 7, 2, 1, 128], pa.int32()),
        "big": pa.array([Decimal("1.5")] * 6, pa.decimal128(38, 18)),
    },
    schema=DEC_SCHEMA,
)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("price * 1.1 > 10", [1, 2]),
        ("price * 1.1 = 10.01", [1]),
        ("price * 3 = 27.3", [1]),
        ("price * qty = 27.30", [1]),
        ("price + 0.1 = 9.2", [1]),
        ("price - 0.1 = 9", [1]),
        ("price + qty = 12.10", [1]),
        ("-price * 1.1 = -10.01", [1]),
        # price / 3 is decimal(14, 6): 3.0333333... rounds to 3.033333
        ("price / 3 = 3.033333", [1]),
        ("price / 6 = 1.516667", [1]),
        ("price / 0.3 = 30.333333", [1]),
        # 1.00 / 128 = 0.0078125: a tie at the 6th decimal, rounded away from zero
        ("price / 128 = 0.007813", [6]),
        ("price / 128 = -0.007813", [4]),
        ("price / qty = 0.0078125", [6]),  # qty is decimal(10, 0) here: 13 decimals, no rounding
        # the divisor's precision widens the scale: price / qty (int -> decimal(10, 0)) has 13 decimals
        ("price / qty = 3.0333333333333", [1]),
        ("price / qty IS NULL", [2, 5]),  # division by zero is NULL (Spark without ANSI mode)
        ("price / 0 IS NULL", [1, 2, 3, 4, 5, 6]),
        ("price / 3 * 3 = 9.099999", [1]),
        # constants fold exactly too
        ("price >= 9.1 * 1.1 - 0.91", [1, 2]),
        ("0.1 + 0.2 = 0.3", [1, 2, 3, 4, 5, 6]),
        # CAST to a decimal with fewer digits rounds half away from zero, NULL if it overflows
        ("CAST(price AS DECIMAL(3, 1)) = 9.1", [1, 3]),
        ("CAST(price AS DECIMAL(2, 0)) = 9", [1, 3]),
        ("CAST(price AS DECIMAL(2, 0)) = -1", [4]),
        ("CAST(price AS DECIMAL(2, 1)) IS NULL", [2, 5]),  # 10.00 does not fit
        # 9.09 * 1.1 = 9.999 rounds up to 10, which needs two digits
        ("CAST(price * 1.1 AS DECIMAL(1, 0)) IS NULL", [1, 2, 3, 5]),
        # casts of literals follow the same rules as casts of columns
        ("qty = CAST(2.5 AS INT)", [4]),
        ("price = CAST(9.095 AS DECIMAL(3, 2))", [1]),
        ("qty = CAST(CAST('NaN' AS DOUBLE) AS INT)", [2]),
        # beyond precision 38 Spark rounds; this engine falls back to double (documented)
        ("big * 1.1 > 1.6", [1, 2, 3, 4, 5, 6]),
    ],
)
def test_decimal_arithmetic_is_exact(sql: str, expected: list[int]) -> None:
    assert DEC_ROWS.filter(parse_predicate(sql, DEC_SCHEMA).to_arrow()).column("id").to_pylist() == expected


@settings(max_examples=100, deadline=None)
@given(
    prices=st.lists(st.integers(-10**8, 10**8).map(lambda c: Decimal(c).scaleb(-2)), min_size=1, max_size=10),
    divisor=st.sampled_from(["3", "7", "128", "0.3", "1.25", "-9", "0.07", "12345"]),
)
def test_decimal_division_matches_exact_half_up_rounding(prices: list[Decimal], divisor: str) -> None:
    import decimal as pydecimal

    schema = pa.schema([("price", pa.decimal128(10, 2))])
    table = pa.table({"price": pa.array(prices, pa.decimal128(10, 2))}, schema=schema)
    d = Decimal(divisor)
    digits = len(d.as_tuple().digits)
    scale_d = max(0, -int(d.as_tuple().exponent))
    precision_d = max(digits, scale_d)
    scale = max(6, 2 + precision_d + 1)  # Spark: max(6, s1 + p2 + 1)
    context = pydecimal.Context(prec=100)
    for price in prices:
        expected = context.divide(price, d).quantize(Decimal(1).scaleb(-scale), rounding=pydecimal.ROUND_HALF_UP)
        sql = f"price = {price} AND price / {divisor} = {expected}"
        assert table.filter(parse_predicate(sql, schema).to_arrow()).num_rows >= 1, sql


@pytest.mark.parametrize(
    ("expression", "result_type"),
    [
        ("price + 2", pa.decimal128(11, 2)),  # the literal 2 is decimal(1, 0)
        ("price + qty", pa.decimal128(13, 2)),  # an int column is decimal(10, 0)
        ("price * 1.1", pa.decimal128(13, 3)),
        ("price / 3", pa.decimal128(14, 6)),
        ("price / qty", pa.decimal128(21, 13)),
        ("price / 0.3", pa.decimal128(15, 6)),
        ("big * 1.1", pa.float64()),  # decimal(41, 19) would exceed 38 digits: double
        ("price % 3", pa.float64()),
    ],
)
def test_decimal_arithmetic_result_types_are_sparks(expression: str, result_type: pa.DataType) -> None:
    root = parse_predicate(f"{expression} IS NULL", DEC_SCHEMA).root
    assert root.operand.type == result_type
