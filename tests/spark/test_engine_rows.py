"""A DV DELETE whose rows the engine finds in the driver: the same table as Spark SQL's search, and when it is used.

The reference is the same DELETE with the driver's search turned off
(``driver_scan_max_bytes=0``), where Spark SQL evaluates ``(predicate) IS TRUE``; both
tables are read by delta-rs and delta-kernel-rs. Whether Spark ran is told by a
:class:`LazySession`: the engine's search never asks for the session.
"""

from __future__ import annotations

import datetime
import itertools
import math
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaTable, predicate_read_bytes
from airflow_delta.spark.delete import run_delete
from airflow_delta.spark.engine_rows import evaluates_as_spark
from airflow_delta.spark.session import LazySession
from airflow_delta.spark.specs import DeleteSpec, ExecutionOptions, TableRef, TaskIdentity
from tests.oracles import assert_oracles_read, read_with_deltars, read_with_kernel

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("x", pa.float64()),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("d", pa.date32()),
        ("m", pa.decimal128(10, 2)),
        ("part", pa.string()),
    ]
)
_task_numbers = itertools.count()


def _spec(path: str, predicate: str, **options: Any) -> DeleteSpec:
    return DeleteSpec(
        TableRef(path),
        predicate,
        TaskIdentity("dag", f"engine-rows-{next(_task_numbers)}", "run"),
        ExecutionOptions(backoff_initial_seconds=0.0, backoff_max_seconds=0.0, **options),
    )


def _comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # NaN != NaN in Python: compare it as a marker.
    return [{k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()} for row in rows]


def _oracle_rows(path: str) -> list[dict[str, Any]]:
    """The rows both oracles read (they must agree)."""
    kernel = _comparable(read_with_kernel(path))
    assert _comparable(read_with_deltars(path)) == kernel, "delta-rs and delta-kernel-rs read different rows"
    return kernel


def _create(path: str, rows: list[dict[str, Any]], *, partitioned: bool, column_mapping: bool) -> DeltaTable:
    props = {"delta.enableDeletionVectors": "true"}
    if column_mapping:
        props["delta.columnMapping.mode"] = "name"
    table = DeltaTable.create(path, SCHEMA, ["part"] if partitioned else [], props)
    step = max(1, math.ceil(len(rows) / 3))
    for start in range(0, len(rows), step):  # several files
        table.append(pa.Table.from_pylist(rows[start : start + step], schema=SCHEMA))
    return table


# ----------------------------------------------------------------- generated tables and predicates

_INTS = st.one_of(st.none(), st.integers(-3, 5))
_FLOATS = st.one_of(st.none(), st.sampled_from([-1.5, 0.0, -0.0, 0.5, 2.0, math.inf, -math.inf, math.nan]))
_STRINGS = st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "B"]))
_DATES = st.one_of(st.none(), st.sampled_from([datetime.date(2024, 1, 1), datetime.date(1999, 12, 31)]))
_DECIMALS = st.one_of(st.none(), st.sampled_from([Decimal("-3.10"), Decimal("0.00"), Decimal("1.25"), Decimal("2.00")]))
ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "i": _INTS,
            "x": _FLOATS,
            "s": _STRINGS,
            "b": st.one_of(st.none(), st.booleans()),
            "d": _DATES,
            "m": _DECIMALS,
            "part": st.one_of(st.none(), st.sampled_from(["p", "q"])),
        }
    ),
    min_size=1,
    max_size=24,
)

_LITERALS = {
    "i": ["-3", "0", "2", "5", "0.5", "2.0", ".5"],
    "x": ["-1.5", "0", "0.5", "2", "-0.0", "1.25"],
    "s": ["''", "'a'", "'b'", "'ab'", "'B'"],
    "m": ["1.25", "0", "-3.1", "2", "0.5"],
    "part": ["'p'", "'q'"],
}
_OPS = ["=", "!=", "<>", "<", "<=", ">", ">=", "<=>"]


@st.composite
def _atom(draw: st.DrawFn) -> str:
    shape = draw(st.sampled_from(["compare", "columns", "null", "in", "between", "boolean"]))
    column = draw(st.sampled_from(sorted(_LITERALS)))
    literal = st.sampled_from(_LITERALS[column])
    if shape == "compare":
        return f"{column} {draw(st.sampled_from(_OPS))} {draw(literal)}"
    if shape == "columns":
        left, right = draw(st.sampled_from([("i", "x"), ("i", "m"), ("x", "m"), ("d", "d"), ("s", "part")]))
        return f"{left} {draw(st.sampled_from(_OPS))} {right}"
    if shape == "null":
        return f"{draw(st.sampled_from(['i', 'x', 's', 'b', 'd', 'm']))} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if shape == "in":
        values = draw(st.lists(literal, min_size=1, max_size=3)) + draw(st.sampled_from([[], ["NULL"]]))
        return f"{column} {draw(st.sampled_from(['', 'NOT ']))}IN ({', '.join(values)})"
    if shape == "between":
        return f"{column} BETWEEN {draw(literal)} AND {draw(literal)}"
    return draw(st.sampled_from(["b", "NOT b", "b = true", "b <=> false", "b != NULL"]))


PREDICATES = st.recursive(
    _atom(),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
        inner.map(lambda p: f"NOT ({p})"),
    ),
    max_leaves=3,
)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    rows=ROWS,
    predicate=PREDICATES,
    earlier=st.sampled_from([None, "i = 2", "s = 'a' OR x > 0"]),
    partitioned=st.booleans(),
    column_mapping=st.booleans(),
)
def test_the_engines_search_deletes_what_spark_sqls_does(
    spark, tmp_path_factory, rows, predicate, earlier, partitioned, column_mapping
) -> None:
    base = tmp_path_factory.mktemp("engine-rows")
    by_engine, by_spark = str(base / "engine"), str(base / "spark")
    table = _create(by_engine, rows, partitioned=partitioned, column_mapping=column_mapping)
    assert evaluates_as_spark(predicate, table.context())
    if earlier is not None:
        table.delete(earlier)  # DVs already there: the new rows are merged with them
    shutil.copytree(by_engine, by_spark)

    lazy = LazySession("never built")
    engine = run_delete(lazy, _spec(by_engine, predicate))
    reference = run_delete(spark, _spec(by_spark, predicate, driver_scan_max_bytes=0))

    assert not lazy.started, "the engine's search asked for a SparkSession"
    assert _oracle_rows(by_engine) == _oracle_rows(by_spark)
    assert (engine.version is None) == (reference.version is None)
    compared = ("numDeletedRows", "numRemovedFiles", "numDeletionVectorsAdded", "numDeletionVectorsUpdated",
                "numDeletionVectorsRemoved", "numAddedFiles", "numCopiedRows")
    assert {k: engine.metrics[k] for k in compared} == {k: reference.metrics[k] for k in compared}


# ----------------------------------------------------------------- NULLs, DVs, the threshold, the way back to Spark

def _row(n: int) -> dict[str, Any]:
    return {
        "i": None if n % 4 == 3 else n,
        "x": float(n) / 2,
        "s": "ab"[n % 2],
        "b": n % 3 == 0,
        "d": datetime.date(2024, 1, 1 + n % 28),
        "m": Decimal(n) / 4,
        "part": "pq"[n % 2],
    }


@pytest.mark.slow
def test_rows_whose_predicate_is_null_stay_and_dvs_merge(table_path: str) -> None:
    rows = [_row(n) for n in range(30)]
    _create(table_path, rows, partitioned=True, column_mapping=True)
    lazy = LazySession("never built")
    first = run_delete(lazy, _spec(table_path, "NOT (i < 20)"))
    # i NULL: NOT (NULL < 20) is NULL, so those rows stay.
    kept = [r for r in rows if r["i"] is None or r["i"] < 20]
    assert first.metrics["numDeletedRows"] == len(rows) - len(kept)
    assert first.metrics["numDeletionVectorsAdded"] >= 1
    assert_oracles_read(table_path, kept)
    # Row 27 (i NULL, x 13.5) is in a file the first delete gave a DV.
    second = run_delete(lazy, _spec(table_path, "i IN (1, 2, NULL) OR x = 13.5"))
    after = [r for r in kept if not (r["i"] in (1, 2) or r["x"] == 13.5)]
    assert second.metrics["numDeletedRows"] == len(kept) - len(after)
    assert second.metrics["numDeletionVectorsUpdated"] >= 1  # merged with the DVs of the first delete
    assert_oracles_read(table_path, after)
    assert not lazy.started


def _large_file_table(path: str) -> DeltaTable:
    # One file of four row groups, most of its bytes in a column the predicate does not read.
    data = pa.table({"id": pa.array(range(4000), pa.int64()), "text": [f"text of row {n} " * 8 for n in range(4000)]})
    deltalake.write_deltalake(
        path,
        data,
        configuration={"delta.enableDeletionVectors": "true"},
        writer_properties=deltalake.WriterProperties(max_row_group_size=1000),
    )
    return DeltaTable(path)


@pytest.mark.slow
def test_the_threshold_is_the_predicates_bytes_after_row_group_pruning(spark, tmp_path: Path) -> None:
    predicate = "id = 2500"
    at, above = str(tmp_path / "at"), str(tmp_path / "above")
    table = _large_file_table(at)
    snapshot = table.snapshot()
    needed = predicate_read_bytes(table.context(), snapshot.plan_files(predicate), predicate)
    assert 0 < needed < int(snapshot.add_actions.column("size")[0].as_py()) // 4
    shutil.copytree(at, above)

    lazy = LazySession("never built")
    result = run_delete(lazy, _spec(at, predicate, driver_scan_max_bytes=needed))
    assert not lazy.started and result.metrics["numDeletedRows"] == 1

    lazy = LazySession("built on demand")  # getOrCreate: the test session
    result = run_delete(lazy, _spec(above, predicate, driver_scan_max_bytes=needed - 1))
    assert lazy.started and result.metrics["numDeletedRows"] == 1
    expected = [{"id": n, "text": f"text of row {n} " * 8} for n in range(4000) if n != 2500]
    assert_oracles_read(at, expected)
    assert_oracles_read(above, expected)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("predicate", "model"),
    [
        ("i + 0 = 2", lambda r: r["i"] == 2),  # arithmetic: ANSI overflow rules are Spark's
        ("abs(i) = 2", lambda r: r["i"] == 2),  # a function
        ("CAST(i AS STRING) = '2'", lambda r: r["i"] == 2),  # a cast
        ("s LIKE 'a%'", lambda r: r["s"] == "a"),
        ("i = '2'", lambda r: r["i"] == 2),  # a string compared with a number: Spark casts it
        ("d = '2024-01-03'", lambda r: r["d"] == datetime.date(2024, 1, 3)),
        ("I = 2", lambda r: r["i"] == 2),  # spelt otherwise than the schema: spark.sql.caseSensitive decides
    ],
)
def test_a_predicate_the_engine_may_evaluate_otherwise_goes_to_spark(spark, table_path: str, predicate, model) -> None:
    rows = [_row(n) for n in range(12)]
    _create(table_path, rows, partitioned=False, column_mapping=False)
    assert not evaluates_as_spark(predicate, DeltaTable(table_path).context())
    lazy = LazySession("built on demand")
    result = run_delete(lazy, _spec(table_path, predicate))
    assert lazy.started
    kept = [r for r in rows if not model(r)]
    assert result.metrics["numDeletedRows"] == len(rows) - len(kept) > 0
    assert_oracles_read(table_path, kept)


@pytest.mark.slow
def test_a_rewrite_is_left_to_spark(spark, table_path: str) -> None:
    rows = [_row(n) for n in range(12)]
    _create(table_path, rows, partitioned=False, column_mapping=False)
    lazy = LazySession("built on demand")
    result = run_delete(lazy, _spec(table_path, "i = 2", use_deletion_vectors=False))
    assert lazy.started and result.metrics["numDeletionVectorsAdded"] == 0 and result.metrics["numAddedFiles"] == 1
    assert_oracles_read(table_path, [r for r in rows if r["i"] != 2])


# ----------------------------------------------------------------- the subset, from the text alone

_EXACT = [
    "i = 2", "2 = i", "i <=> NULL", "x != -1.5", "s = 'a'", "s < part", "b", "NOT b", "b = true",
    "m BETWEEN 0 AND 1.25", "i IN (1, 2, NULL)", "s NOT IN ('a', 'b')", "d IS NULL", "d < d",
    "(i > 1 AND s = 'b') OR NOT (x <= 0.5)", "i = .5", 's = "a"',
]
_LEFT_TO_SPARK = [
    "i + 1 = 2", "-i = 2", "abs(i) = 2", "CAST(i AS STRING) = '2'", "s LIKE 'a%'", "i = '2'", "s = 2",
    "d = '2024-01-01'", "d = DATE '2024-01-01'", "b = 'true'", "I = 2", "t.i = 2", "s = 'a\\\\b'",
    "i IN (SELECT 1)", "b IS TRUE", "i", "i = 2 AND", "nope = 1", "coalesce(b, false)", "i = x + 1",
    "i = 1e0", "x = 1e400", "i = 99999999999999999999", "i = 10L", "m = 1.5BD", "s = 'it''s'", "i = 0x10",
]


@pytest.mark.parametrize("predicate", _EXACT)
def test_predicates_the_engine_evaluates_as_spark(tmp_path: Path, predicate: str) -> None:
    assert evaluates_as_spark(predicate, DeltaTable.create(str(tmp_path / "t"), SCHEMA).context())


@pytest.mark.parametrize("predicate", _LEFT_TO_SPARK)
def test_predicates_left_to_spark(tmp_path: Path, predicate: str) -> None:
    assert not evaluates_as_spark(predicate, DeltaTable.create(str(tmp_path / "t"), SCHEMA).context())
