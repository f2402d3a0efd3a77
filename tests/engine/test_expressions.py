"""SQL filters: parsing, binding, the Arrow row filter and file pruning."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
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
        ("x > 1", [4]),
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
        # File 3 holds a NaN, so its maximum was left out: kept.
        ("f > 5.5", [False, True, False, True]),
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
floats = st.sampled_from([-1.5, 0.0, 1.0, 2.5, float("nan")])
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
    if column == "f" and value != value:  # NaN has no SQL literal
        return "1.0"
    if column == "b":
        return "true" if value else "false"
    return str(value)


VALUES = {"i": ints, "s": strings, "d": dates, "ts": stamps, "dec": decimals, "f": floats, "b": st.booleans(), "part": st.integers(0, 2)}


@st.composite
def leaf_predicate(draw: st.DrawFn) -> str:
    column = draw(st.sampled_from(sorted(VALUES)))
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


predicates = st.recursive(
    leaf_predicate(),
    lambda children: st.one_of(
        st.tuples(children, children).map(lambda t: f"({t[0]} AND {t[1]})"),
        st.tuples(children, children).map(lambda t: f"({t[0]} OR {t[1]})"),
        children.map(lambda c: f"NOT ({c})"),
    ),
    max_leaves=4,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(row, min_size=1, max_size=30), cuts=st.lists(st.integers(0, 30), max_size=5), sql=predicates)
def test_pruning_never_drops_a_file_with_a_matching_row(rows: list[dict], cuts: list[int], sql: str) -> None:
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
    stats = parse_stats([compute_stats(f.select(PROP_DATA_SCHEMA.names), PROP_META) for f in files], PROP_META)
    pv = pa.array([{"part": v} for v in part_values], pa.struct([("part", pa.int32())]))
    keep = prune_files(predicate, pv, stats, ("part",)).to_pylist()
    for i, data in enumerate(files):
        if data.filter(predicate.to_arrow()).num_rows:
            assert keep[i], f"{sql!r}: file {i} ({data.to_pylist()}) matches but was pruned"


def test_predicate_type_is_exported() -> None:
    assert isinstance(parse_predicate("id = 1", SCHEMA), Predicate)


def test_negated_float_comparison_keeps_files_that_may_hold_nan() -> None:
    # Found by the pruning-soundness property: NOT (f >= -1.5) is true for a NaN row,
    # and min/max statistics (which leave NaN out) cannot rule that row out.
    import math

    schema = pa.schema([("f", pa.float64())])
    predicate = parse_predicate("NOT (f >= -1.5)", schema)
    rows = pa.table({"f": [0.0, math.nan]})
    assert rows.filter(predicate.to_arrow()).num_rows == 1
    stats = pa.array(
        [{"numRecords": 2, "minValues": {"f": 0.0}, "maxValues": {"f": 0.0}, "nullCount": {"f": 0}, "tightBounds": True}],
        pa.struct(
            [
                ("numRecords", pa.int64()),
                ("minValues", pa.struct([("f", pa.float64())])),
                ("maxValues", pa.struct([("f", pa.float64())])),
                ("nullCount", pa.struct([("f", pa.int64())])),
                ("tightBounds", pa.bool_()),
            ]
        ),
    )
    partitions = pa.array([{}], pa.struct([]))
    assert prune_files(predicate, partitions, stats, ()).to_pylist() == [True]
