"""SQL filters: parsing, binding, the Arrow row filter and file pruning."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.actions import Metadata
from airflow_delta.engine.errors import InvalidFilterError
from airflow_delta.engine.expressions import Predicate, parse_predicate, prune_files, references_only
from airflow_delta.engine.schema import schema_to_arrow
from airflow_delta.engine.stats import compute_stats, parse_stats

UTC = dt.UTC

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("dt", pa.string()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", "UTC")),
        ("amt", pa.decimal128(8, 2)),
        ("x", pa.float64()),
        ("s", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("flag", pa.bool_()),
        ("My Col", pa.int32()),
        ("small", pa.int8()),
    ]
)

ROWS = pa.table(
    {
        "id": [1, 2, None, 40],
        "dt": ["2024-01-01", "2024-01-02", None, "x"],
        "d": [dt.date(2024, 1, 1), None, dt.date(2024, 2, 1), dt.date(2023, 1, 1)],
        "ts": pa.array(
            [dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 1, 12, tzinfo=UTC), None, dt.datetime(2023, 6, 1, tzinfo=UTC)],
            pa.timestamp("us", "UTC"),
        ),
        "amt": pa.array([Decimal("1.50"), Decimal("2.00"), None, Decimal("-3.25")], pa.decimal128(8, 2)),
        "x": [1.0, float("nan"), None, 2.5],
        "s": [{"a": 1, "b": "q"}, None, {"a": None, "b": "r"}, {"a": 4, "b": "abc"}],
        "flag": [True, False, None, True],
        "My Col": pa.array([1, 2, 3, 4], pa.int32()),
        "small": pa.array([1, 2, 3, 4], pa.int8()),
    },
    schema=SCHEMA,
)


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


def test_predicate_is_immutable_and_reports_columns() -> None:
    p = parse_predicate("S.b = 'x' AND id > 1 AND s.a = 1 AND `my col` = 2", SCHEMA)
    assert p.columns == ("s", "id", "My Col")
    assert p.column_paths == (("s", "b"), ("id",), ("s", "a"), ("My Col",))
    assert p.sql == "S.b = 'x' AND id > 1 AND s.a = 1 AND `my col` = 2"
    with pytest.raises(AttributeError):
        p.sql = "other"  # type: ignore[misc]
    assert parse_predicate(p, SCHEMA) is p
    assert str(p) == p.sql


def test_references_only() -> None:
    p = parse_predicate("dt = 'x' AND D > '2020-01-01'", SCHEMA)
    assert references_only(p, ["dt", "d"])
    assert references_only(p, ["DT", "D", "id"])
    assert not references_only(p, ["dt"])
    assert references_only(parse_predicate("true", SCHEMA), [])


def test_like_with_escape_clause() -> None:
    schema = pa.schema([("s", pa.string())])
    table = pa.table({"s": ["a%b", "axb", "a\\b"]})
    p = parse_predicate("s LIKE 'a!%b' ESCAPE '!'", schema)
    assert table.filter(p.to_arrow()).column("s").to_pylist() == ["a%b"]
    p = parse_predicate("s ILIKE 'A%'", schema)
    assert table.filter(p.to_arrow()).num_rows == 3


def test_timestamp_ntz_literals() -> None:
    schema = pa.schema([("t", pa.timestamp("us"))])
    table = pa.table({"t": pa.array([dt.datetime(2024, 1, 1, 10), dt.datetime(2024, 1, 2)], pa.timestamp("us"))})
    assert table.filter(parse_predicate("t < '2024-01-01 12:00'", schema).to_arrow()).num_rows == 1
    assert table.filter(parse_predicate("t >= TIMESTAMP_NTZ '2024-01-02'", schema).to_arrow()).num_rows == 1
    with pytest.raises(InvalidFilterError, match="timestamp_ntz"):
        parse_predicate("t = '2024-01-01T00:00:00Z'", schema)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("nope = 1", r"column 'nope' does not exist in the table; available columns: id, dt, d"),
        ("s.zz = 1", r"'s.zz' does not exist in struct s; available columns: a, b"),
        ("id.x = 1", "not a struct"),
        ("dt = 5", r"string column but 5 is a number; quote the value: column dt = '5'"),
        ("d = 'yesterday'", "not a date"),
        ("id = 'abc'", "not a number"),
        ("d = 5", "cannot compare"),
        ("ts > current_timestamp()", "not deterministic"),
        ("d = current_date()", "not deterministic"),
        ("rand() > 0.5", "not deterministic"),
        ("foo(id) = 1", r"function foo\(\) is not supported"),
        ("id IN (SELECT 1)", "subquer"),
        ("id = 1 OR", "not valid Spark SQL"),
        ("id = 1; dt = 'x'", "exactly one condition"),
        ("", "empty"),
        ("   ", "empty"),
        ("id", "must be a condition"),
        ("id + 1", "must be a condition"),
        ("id AND flag", "not a condition"),
        ("d + 1 > d", "date/time arithmetic"),
        ("dt + 1 = 2", "numeric"),
        ("s = 1", "cannot compare"),
        ("id LIKE 'a%'", "LIKE needs string"),
        ("dt LIKE dt", "quoted string literal"),
        ("CAST(id AS date) = '2020-01-01'", "cannot CAST"),
        ("id IS 5", "IS must be followed by"),
        ("SELECT 1", "not a statement"),
        ("DELETE FROM t", "not a statement"),
    ],
)
def test_invalid_filters_say_what_to_fix(sql: str, message: str) -> None:
    with pytest.raises(InvalidFilterError, match=message) as info:
        parse_predicate(sql, SCHEMA)
    assert info.value.filter_sql == sql


def test_ambiguous_column_names_need_exact_quoting() -> None:
    schema = pa.schema([("Ab", pa.int32()), ("aB", pa.int32())])
    with pytest.raises(InvalidFilterError, match="ambiguous"):
        parse_predicate("ab = 1", schema)
    assert parse_predicate("`aB` = 1", schema).columns == ("aB",)


# --------------------------------------------------------------------------- pruning helpers


def _metadata(fields: list[tuple[str, str]], partition_columns: tuple[str, ...] = ()) -> Metadata:
    schema = {
        "type": "struct",
        "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields],
    }
    return Metadata(id="t", schema_string=json.dumps(schema), partition_columns=partition_columns)


def _stats_for(files: list[pa.Table], metadata: Metadata) -> pa.StructArray:
    return parse_stats([compute_stats(f, metadata) for f in files], metadata)


def _keep(sql: str, schema: pa.Schema, pv: pa.StructArray | None, stats: pa.StructArray | None, parts: tuple[str, ...] = ()) -> list[bool]:
    return prune_files(parse_predicate(sql, schema), pv, stats, parts).to_pylist()


INT_META = _metadata([("v", "long"), ("s", "string"), ("t", "timestamp"), ("f", "double"), ("p", "string")], ("p",))
INT_SCHEMA = schema_to_arrow(INT_META.schema_string)
DATA_SCHEMA = pa.schema([f for f in INT_SCHEMA if f.name != "p"])


def _file(v: list[int | None], s: list[str | None], t: list[dt.datetime | None], f: list[float | None]) -> pa.Table:
    return pa.table({"v": v, "s": s, "t": pa.array(t, pa.timestamp("us", "UTC")), "f": f}, schema=DATA_SCHEMA)


T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
FILES = [
    _file([1, 5], ["apple", "banana"], [T0, T0], [1.0, 2.0]),
    _file([10, 20], ["cherry", "date"], [T0 + dt.timedelta(microseconds=500), T0 + dt.timedelta(microseconds=700)], [5.0, 6.0]),
    _file([None, None], [None, None], [None, None], [None, None]),
    _file([7, None], ["x" * 40 + "b", "x" * 40 + "a"], [None, T0], [float("nan"), 3.0]),
]
STATS = _stats_for(FILES, INT_META)
PV = pa.array([{"p": "a"}, {"p": "b"}, {"p": None}, {"p": "a"}], pa.struct([("p", pa.string())]))


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("v = 5", [True, False, False, False]),
        ("v > 5", [False, True, False, True]),
        ("v >= 20", [False, True, False, False]),
        ("v < 2", [True, False, False, False]),
        ("v <= 1", [True, False, False, False]),
        ("v != 7", [True, True, False, False]),
        ("NOT (v = 7)", [True, True, False, False]),
        ("v <=> 7", [False, False, False, True]),
        ("NOT (v <=> 7)", [True, True, True, True]),
        ("v IS NULL", [False, False, True, True]),
        ("v IS NOT NULL", [True, True, False, True]),
        ("v IN (1, 20)", [True, True, False, False]),
        ("v NOT IN (7)", [True, True, False, False]),
        ("v NOT IN (7, NULL)", [False, False, False, False]),
        ("v BETWEEN 6 AND 9", [False, False, False, True]),
        ("v = 5 OR v = 7", [True, False, False, True]),
        ("NOT (v < 10 OR v > 10)", [False, True, False, False]),
        ("v = NULL", [False, False, False, False]),
        ("v + 1 = 6", [True, True, True, True]),  # not a plain column: kept
        ("s = 'banana'", [True, False, False, False]),
        # 'banana' might be a prefix cut from a longer maximum: kept, conservatively.
        ("s > 'banana'", [True, True, False, True]),
        ("s > 'bb'", [False, True, False, True]),
        ("s LIKE 'ch%'", [False, True, False, False]),
        ("s LIKE 'x%'", [False, False, False, True]),
        ("s NOT LIKE 'x%'", [True, True, False, False]),
        ("s = 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxb'", [False, False, False, True]),
        ("s >= 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxa'", [False, False, False, True]),
        ("s < 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxa'", [True, True, False, True]),
        # Maxima are truncated to milliseconds: anything within 1 ms above them is kept.
        ("t > TIMESTAMP '2024-01-01 00:00:00.000600'", [True, True, False, True]),
        ("t >= TIMESTAMP '2024-01-01 00:00:00.001001'", [False, False, False, False]),
        ("t = TIMESTAMP '2024-01-01 00:00:00'", [True, True, False, True]),
        # Any file with a non-null value may hold a NaN, which is above every number.
        ("f > 5.5", [True, True, False, True]),
        ("f < 0.5", [False, False, False, False]),
        ("f != 1.0", [True, True, False, True]),
        ("p = 'a'", [True, False, False, True]),
        ("p <> 'a'", [False, True, False, False]),
        ("p IS NULL", [False, False, True, False]),
        ("NOT (p = 'a')", [False, True, False, False]),
        ("lower(p) = 'b'", [False, True, False, False]),
        ("p = 'a' AND v > 5", [False, False, False, True]),
        ("p = 'b' OR v = 1", [True, True, False, False]),
        # File 2: p and v are NULL, so the condition is NULL there, never true.
        ("NOT (p = 'a' AND v < 100)", [False, True, False, False]),
        ("p = CAST(v AS string)", [True, True, True, True]),
        ("true", [True, True, True, True]),
        ("false", [False, False, False, False]),
    ],
)
def test_prune_files(sql: str, expected: list[bool]) -> None:
    keep = _keep(sql, INT_SCHEMA, PV, STATS, ("p",))
    assert keep == expected
    # Soundness on these hand-made files, too: a file with a matching row is kept.
    predicate = parse_predicate(sql, INT_SCHEMA)
    for i, data in enumerate(FILES):
        rows = data.append_column("p", pa.array([PV[i]["p"].as_py()] * data.num_rows, pa.string()))
        if rows.filter(predicate.to_arrow()).num_rows:
            assert keep[i], f"file {i} has a matching row for {sql!r} but was pruned"


def test_missing_stats_keep_files() -> None:
    stats = parse_stats([None, '{"numRecords": 3}', compute_stats(FILES[0], INT_META)], INT_META)
    pv = pa.array([{"p": "a"}] * 3, pa.struct([("p", pa.string())]))
    assert _keep("v = 100", INT_SCHEMA, pv, stats, ("p",)) == [True, True, False]
    assert _keep("v IS NULL", INT_SCHEMA, pv, stats, ("p",)) == [True, True, False]
    assert _keep("v = 100", INT_SCHEMA, None, stats) == [True, True, False]
    assert _keep("p = 'z'", INT_SCHEMA, pv, None, ("p",)) == [False, False, False]
    assert _keep("v = 1", INT_SCHEMA, pv, None, ("p",)) == [True, True, True]


def test_wide_bounds_null_counts_only_used_at_the_extremes() -> None:
    # tightBounds=false: nullCount 1 of 2 says nothing, 0 and numRecords still do.
    docs = [
        '{"numRecords":2,"tightBounds":false,"minValues":{"v":1},"maxValues":{"v":3},"nullCount":{"v":1}}',
        '{"numRecords":2,"tightBounds":false,"nullCount":{"v":2}}',
        '{"numRecords":2,"tightBounds":false,"minValues":{"v":1},"maxValues":{"v":3},"nullCount":{"v":0}}',
    ]
    stats = parse_stats(docs, INT_META)
    assert _keep("v IS NULL", INT_SCHEMA, None, stats) == [True, True, False]
    assert _keep("v IS NOT NULL", INT_SCHEMA, None, stats) == [True, False, True]
    assert _keep("v = 2", INT_SCHEMA, None, stats) == [True, False, True]


def test_truncated_string_max_from_other_writers_is_treated_as_a_prefix() -> None:
    # A writer that cut the maximum "abcz" to "abc" without a tie-breaker.
    stats = parse_stats(['{"numRecords":2,"minValues":{"s":"ab"},"maxValues":{"s":"abc"},"nullCount":{"s":0}}'], INT_META)
    assert _keep("s = 'abcd'", INT_SCHEMA, None, stats) == [True]
    assert _keep("s > 'abc'", INT_SCHEMA, None, stats) == [True]
    assert _keep("s >= 'abd'", INT_SCHEMA, None, stats) == [False]
    assert _keep("s LIKE 'abcz%'", INT_SCHEMA, None, stats) == [True]
    assert _keep("s LIKE 'b%'", INT_SCHEMA, None, stats) == [False]


def test_timestamp_max_is_widened_by_a_millisecond() -> None:
    stats = parse_stats(['{"numRecords":1,"minValues":{"t":"2024-01-01T00:00:00.000Z"},"maxValues":{"t":"2024-01-01T00:00:00.000Z"},"nullCount":{"t":0}}'], INT_META)
    assert _keep("t = TIMESTAMP '2024-01-01 00:00:00.000999'", INT_SCHEMA, None, stats) == [True]
    assert _keep("t >= TIMESTAMP '2024-01-01 00:00:00.001001'", INT_SCHEMA, None, stats) == [False]
    assert _keep("t < TIMESTAMP '2024-01-01 00:00:00'", INT_SCHEMA, None, stats) == [False]


def test_nested_columns_and_column_mapping_stats() -> None:
    metadata = Metadata(
        id="m",
        schema_string=json.dumps(
            {
                "type": "struct",
                "fields": [
                    {
                        "name": "Outer",
                        "type": {
                            "type": "struct",
                            "fields": [
                                {"name": "inner", "type": "integer", "nullable": True, "metadata": {"delta.columnMapping.physicalName": "col-i", "delta.columnMapping.id": 2}}
                            ],
                        },
                        "nullable": True,
                        "metadata": {"delta.columnMapping.physicalName": "col-o", "delta.columnMapping.id": 1},
                    }
                ],
            }
        ),
        configuration={"delta.columnMapping.mode": "name"},
    )
    schema = schema_to_arrow(metadata.schema_string)
    stats = parse_stats(['{"numRecords":2,"minValues":{"col-o":{"col-i":3}},"maxValues":{"col-o":{"col-i":9}},"nullCount":{"col-o":{"col-i":0}}}'], metadata)
    assert stats.to_pylist()[0]["minValues"] == {"Outer": {"inner": 3}}
    # OUTER is a SQL keyword: quote it.
    assert _keep("`outer`.inner = 5", schema, None, stats) == [True]
    assert _keep("`Outer`.INNER > 9", schema, None, stats) == [False]
    assert _keep("`outer`.inner IS NULL", schema, None, stats) == [False]


def test_prune_files_accepts_chunked_inputs_and_checks_lengths() -> None:
    chunked = pa.chunked_array([STATS.slice(0, 2), STATS.slice(2)])
    assert prune_files(parse_predicate("v = 5", INT_SCHEMA), None, chunked, ()).to_pylist() == [True, False, False, False]
    with pytest.raises(ValueError, match="different numbers"):
        prune_files(parse_predicate("v = 5", INT_SCHEMA), PV.slice(0, 2), STATS, ("p",))


def test_partition_values_on_real_table(shared_tables) -> None:  # type: ignore[no-untyped-def]
    # delta-2.2.0-partitioned-types: c1 int and c2 string partitions, c3 data with stats.
    log = shared_tables / "delta-2.2.0-partitioned-types" / "_delta_log"
    metadata = None
    adds = []
    for path in sorted(log.glob("*.json")):
        for line in path.read_text().splitlines():
            action = json.loads(line)
            if "metaData" in action:
                metadata = Metadata.from_json(action["metaData"])
            if "add" in action:
                adds.append(action["add"])
    assert metadata is not None and adds
    schema = schema_to_arrow(metadata.schema_string)
    pv = pa.array(
        [{"c1": int(a["partitionValues"]["c1"]), "c2": a["partitionValues"]["c2"]} for a in adds],
        pa.struct([("c1", pa.int32()), ("c2", pa.string())]),
    )
    stats = parse_stats([a.get("stats") for a in adds], metadata)
    keep = prune_files(parse_predicate("c1 = 4 AND c3 > 0", schema), pv, stats, metadata.partition_columns).to_pylist()
    expected = [a["partitionValues"]["c1"] == "4" and json.loads(a["stats"])["maxValues"]["c3"] > 0 for a in adds]
    assert keep == expected
    assert any(keep) and not all(keep)


# --------------------------------------------------------------------------- soundness (hypothesis)

ALPHABET = "ab\ufffd\uffff\U0001d11e"
PROP_META = _metadata(
    [("i", "long"), ("s", "string"), ("d", "date"), ("ts", "timestamp"), ("dec", "decimal(6,2)"), ("f", "double"), ("b", "boolean"), ("part", "integer")],
    ("part",),
)
PROP_SCHEMA = schema_to_arrow(PROP_META.schema_string)
PROP_DATA_SCHEMA = pa.schema([f for f in PROP_SCHEMA if f.name != "part"])

ints = st.integers(-5, 5)
strings = st.text(ALPHABET, min_size=0, max_size=36)
dates = st.dates(dt.date(2023, 12, 28), dt.date(2024, 1, 4))
stamps = st.integers(0, 3_000).map(lambda us: dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=us))
decimals = st.integers(-300, 300).map(lambda c: Decimal(c).scaleb(-2))
floats = st.sampled_from([-1.5, -0.0, 0.0, 1.0, 2.5, float("nan"), float("inf"), float("-inf")])
row = st.fixed_dictionaries(
    {
        "i": st.none() | ints,
        "s": st.none() | strings,
        "d": st.none() | dates,
        "ts": st.none() | stamps,
        "dec": st.none() | decimals,
        "f": st.none() | floats,
        "b": st.none() | st.booleans(),
        "part": st.none() | st.integers(0, 2),
    }
)


def _sql_literal(column: str, value: object) -> str:
    if column == "s":
        return "'" + str(value) + "'"
    if column == "d":
        return f"DATE '{value}'"
    if column == "ts":
        assert isinstance(value, dt.datetime)
        return f"TIMESTAMP '{value.strftime('%Y-%m-%d %H:%M:%S.%f')}Z'"
    if column == "f" and isinstance(value, float) and not math.isfinite(value):
        # Spark's way to write NaN and the infinities: a string cast to double.
        return f"CAST('{value}' AS DOUBLE)" if value == value else "'NaN'"
    if column == "b":
        return "true" if value else "false"
    return str(value)


VALUES = {"i": ints, "s": strings, "d": dates, "ts": stamps, "dec": decimals, "f": floats, "b": st.booleans(), "part": st.integers(0, 2)}


@st.composite
def leaf_predicate(draw: st.DrawFn, columns: tuple[str, ...] = tuple(sorted(VALUES))) -> str:
    column = draw(st.sampled_from(columns))
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "null", "in", "between", "like", "nullsafe"]))
    value = draw(VALUES[column])
    if kind == "null":
        return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == "in":
        values = [value, *draw(st.lists(VALUES[column], max_size=3))]
        items = ", ".join(_sql_literal(column, v) for v in values)
        if draw(st.booleans()):
            items += ", NULL"
        return f"{column} {draw(st.sampled_from(['', 'NOT ']))}IN ({items})"
    if kind == "between" and column not in ("b",):
        other = draw(VALUES[column])
        return f"{column} BETWEEN {_sql_literal(column, value)} AND {_sql_literal(column, other)}"
    if kind == "like" and column == "s":
        prefix = str(value)[: draw(st.integers(0, 36))]
        suffix = draw(st.sampled_from(["%", "", "_%", "%b"]))
        return f"s {draw(st.sampled_from(['', 'NOT ']))}LIKE '{prefix}{suffix}'"
    if kind == "nullsafe":
        return f"{draw(st.sampled_from(['', 'NOT ']))}({column} <=> {_sql_literal(column, value)})"
    op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]))
    if column == "b":
        op = draw(st.sampled_from(["=", "!="]))
    return f"{column} {op} {_sql_literal(column, value)}"


def _combined(leaves: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.tuples(children, children).map(lambda t: f"({t[0]} AND {t[1]})"),
            st.tuples(children, children).map(lambda t: f"({t[0]} OR {t[1]})"),
            children.map(lambda c: f"NOT ({c})"),
        ),
        max_leaves=4,
    )


predicates = _combined(leaf_predicate())
float_predicates = _combined(leaf_predicate(("f", "part")))


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value).replace("inf", "Infinity").replace("nan", "NaN")


def _with_float_bounds(stats_json: str, data: pa.Table, style: str) -> str:
    """``stats_json`` with the bounds of column ``f`` as another writer would record them.

    "ours": as compute_stats wrote them (no maximum when the file holds NaN). "spark":
    Spark's min/max aggregates, where NaN is the largest value (a NaN maximum; a NaN
    minimum only when every value is NaN). "footer": parquet footer statistics (delta-rs,
    add_file_from_parquet), which leave NaN out entirely.
    """
    if style == "ours":
        return stats_json
    stats = json.loads(stats_json)
    values = [v for v in data.column("f").to_pylist() if v is not None]
    numbers = [v for v in values if not math.isnan(v)]
    low: float | None = min(numbers) if numbers else None
    high: float | None = max(numbers) if numbers else None
    if style == "spark" and len(numbers) < len(values):
        high = math.nan
        low = math.nan if low is None else low
    for key, bound in (("minValues", low), ("maxValues", high)):
        stats.setdefault(key, {}).pop("f", None)
        if bound is not None:
            stats[key]["f"] = _json_float(bound)
    return json.dumps(stats)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(row, min_size=1, max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=5),
    sql=predicates,
    float_stats=st.sampled_from(["ours", "spark", "footer"]),
)
def test_pruning_never_drops_a_file_with_a_matching_row(rows: list[dict], cuts: list[int], sql: str, float_stats: str) -> None:
    _assert_pruning_is_sound(rows, cuts, sql, float_stats)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(st.tuples(st.none() | st.just(math.nan) | floats, st.integers(0, 1)), min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 12), max_size=3),
    sql=float_predicates,
)
def test_pruning_is_sound_for_nan_and_infinities(values: list[tuple[float | None, int]], cuts: list[int], sql: str) -> None:
    # The general property above rarely builds a float predicate over a file that hides
    # a NaN behind footer-style bounds; this one aims at exactly that, with every writer's
    # way of recording float bounds.
    blank = dict.fromkeys(PROP_SCHEMA.names)
    rows = [{**blank, "f": f, "part": part} for f, part in values]
    for float_stats in ("ours", "spark", "footer"):
        _assert_pruning_is_sound(rows, cuts, sql, float_stats)


def _assert_pruning_is_sound(rows: list[dict], cuts: list[int], sql: str, float_stats: str) -> None:
    table = pa.Table.from_pylist(rows, schema=PROP_SCHEMA)
    # Files: split the rows at the cuts, then by partition value, as a writer would.
    bounds = sorted({0, len(rows), *[min(c, len(rows)) for c in cuts]})
    files: list[pa.Table] = []
    part_values: list[int | None] = []
    for start, end in itertools.pairwise(bounds):
        piece = table.slice(start, end - start)
        for value in dict.fromkeys(piece.column("part").to_pylist()):
            mask = pc.is_null(piece.column("part")) if value is None else pc.equal(piece.column("part"), value)
            files.append(piece.filter(mask.fill_null(False)))
            part_values.append(value)
    predicate = parse_predicate(sql, PROP_SCHEMA)
    stats = parse_stats(
        [_with_float_bounds(compute_stats(f.select(PROP_DATA_SCHEMA.names), PROP_META), f, float_stats) for f in files],
        PROP_META,
    )
    pv = pa.array([{"part": v} for v in part_values], pa.struct([("part", pa.int32())]))
    keep = prune_files(predicate, pv, stats, ("part",)).to_pylist()
    for i, data in enumerate(files):
        if data.filter(predicate.to_arrow()).num_rows:
            assert keep[i], f"{sql!r}: file {i} ({data.to_pylist()}) matches but was pruned"


def test_predicate_type_is_exported() -> None:
    assert isinstance(parse_predicate("id = 1", SCHEMA), Predicate)




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


FLOAT_META = _metadata([("f", "double")])
# One stats row per file, as different writers record float bounds:
NAN_STATS = parse_stats(
    [
        # 0: values 1.0, 2.0 (no NaN - but nothing in the statistics says so)
        '{"numRecords": 2, "minValues": {"f": 1.0}, "maxValues": {"f": 2.0}, "nullCount": {"f": 0}}',
        # 1: NaN and 3.0 from a parquet footer (delta-rs): NaN is simply left out
        '{"numRecords": 2, "minValues": {"f": 3.0}, "maxValues": {"f": 3.0}, "nullCount": {"f": 0}}',
        # 2: NaN and 3.0 from Spark: the maximum is NaN, which reads as unknown
        '{"numRecords": 2, "minValues": {"f": 3.0}, "maxValues": {"f": "NaN"}, "nullCount": {"f": 0}}',
        # 3: only NULLs
        '{"numRecords": 2, "nullCount": {"f": 2}}',
        # 4: only NaN, from Spark
        '{"numRecords": 1, "minValues": {"f": "NaN"}, "maxValues": {"f": "NaN"}, "nullCount": {"f": 0}}',
        # 5: -Infinity .. 0.5
        '{"numRecords": 2, "minValues": {"f": "-Infinity"}, "maxValues": {"f": 0.5}, "nullCount": {"f": 0}}',
    ],
    FLOAT_META,
)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        # NaN matches ">" / ">=" / "!=" and hides from min/max: only all-NULL files go.
        ("f > 5", [True, True, True, False, True, True]),
        ("f >= 5", [True, True, True, False, True, True]),
        ("f != 3", [True, True, True, False, True, True]),
        ("NOT (f <= 5)", [True, True, True, False, True, True]),
        # NaN never matches "=", "<", "<=" with a number: the bounds decide.
        ("f = 2.5", [False, False, False, False, True, False]),
        ("f < 1", [False, False, False, False, True, True]),
        ("f <= 1", [True, False, False, False, True, True]),
        ("NOT (f > 1)", [True, False, False, False, True, True]),
        # Each side is checked on its own: "f >= 2.5" may be a NaN, so only "f <= 2.75" prunes.
        ("f BETWEEN 2.5 AND 2.75", [True, False, False, False, True, True]),
        ("f IN (1.5, 2.5)", [True, False, False, False, True, False]),
        # Comparisons with NaN itself: any file with a non-null value may match.
        ("f = CAST('NaN' AS DOUBLE)", [True, True, True, False, True, True]),
        ("f < 'NaN'", [True, True, True, False, True, True]),
        ("f IN (CAST('NaN' AS DOUBLE))", [True, True, True, False, True, True]),
        ("f <=> CAST('NaN' AS DOUBLE)", [True, True, True, False, True, True]),
        ("f > CAST('Infinity' AS DOUBLE)", [True, True, True, False, True, True]),
        ("f < CAST('-Infinity' AS DOUBLE)", [False, False, False, False, True, False]),
        ("f IS NULL", [False, False, False, True, False, False]),
    ],
)
def test_prune_files_with_nan(sql: str, expected: list[bool]) -> None:
    schema = schema_to_arrow(FLOAT_META.schema_string)
    assert prune_files(parse_predicate(sql, schema), None, NAN_STATS).to_pylist() == expected


def test_nan_partition_values_follow_spark_semantics() -> None:
    schema = pa.schema([("p", pa.float64()), ("v", pa.int32())])
    pv = pa.array([{"p": NAN}, {"p": 1.0}, {"p": None}, {"p": INF}], pa.struct([("p", pa.float64())]))
    keep = lambda sql: prune_files(parse_predicate(sql, schema), pv, None, ("p",)).to_pylist()  # noqa: E731
    assert keep("p > 2") == [True, False, False, True]
    assert keep("p = 'NaN'") == [True, False, False, False]
    assert keep("NOT (p < 2)") == [True, False, False, True]
    assert keep("p IS NOT NULL") == [True, True, False, True]


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
