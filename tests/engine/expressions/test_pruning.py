"""File pruning over partition values and statistics, and its soundness (hypothesis)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.expressions import parse_predicate, prune_files
from airflow_delta.engine.model.actions import Metadata
from airflow_delta.engine.model.schema import schema_to_arrow
from airflow_delta.engine.model.stats_compute import compute_stats
from airflow_delta.engine.model.stats_parse import parse_stats

UTC = dt.UTC
NAN = math.nan
INF = math.inf


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
    _assert_pruning_is_sound(rows, cuts, sql, (float_stats,))


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
    _assert_pruning_is_sound(rows, cuts, sql, ("ours", "spark", "footer"))


def _assert_pruning_is_sound(rows: list[dict], cuts: list[int], sql: str, float_stats: tuple[str, ...]) -> None:
    """The files ``rows`` split into at ``cuts`` (and by partition), each way of recording float bounds in turn:
    every file holding a row ``sql`` matches is kept. The files and which of them match are the same for every
    way, so they are built (and the predicate evaluated, over all files at once) once."""
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
    # Which files hold a matching row: one filter over every file's rows, each row tagged with its file.
    file_of_row = pa.array([i for i, f in enumerate(files) for _ in range(f.num_rows)], pa.int64())
    tagged = pa.concat_tables(files).append_column("file_of_row", file_of_row)
    matching_files = sorted(set(tagged.filter(predicate.to_arrow()).column("file_of_row").to_pylist()))
    pv = pa.array([{"part": v} for v in part_values], pa.struct([("part", pa.int32())]))
    file_stats = [compute_stats(f.select(PROP_DATA_SCHEMA.names), PROP_META) for f in files]
    for style in float_stats:
        stats = parse_stats([_with_float_bounds(s, f, style) for s, f in zip(file_stats, files, strict=True)], PROP_META)
        keep = prune_files(predicate, pv, stats, ("part",)).to_pylist()
        for i in matching_files:
            assert keep[i], f"{sql!r} ({style} float bounds): file {i} ({files[i].to_pylist()}) matches but was pruned"


# --------------------------------------------------------------------------- Spark's NaN semantics
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
