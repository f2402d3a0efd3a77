"""UPDATE on Spark: what delta-rs and delta-kernel-rs read afterwards, constraints, store assignment, the log it leaves.

The expected rows come from a plain Python model of the statement (SQL three-valued
logic: a row whose predicate is NULL is left alone), never from our reader.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import ConstraintViolationError, DeltaTable, InvalidArgumentError, InvalidFilterError
from airflow_delta.spark.specs import ExecutionOptions, TableRef, TaskIdentity, UpdateSpec
from airflow_delta.spark.update import UPDATE_METRICS, run_update
from tests.conftest import shared_tables_dir
from tests.oracles import assert_oracles_read, read_with_kernel

pytestmark = pytest.mark.slow

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("part", pa.string()),
        ("score", pa.int32()),
        ("label", pa.string()),
    ]
)
_task_numbers = itertools.count()


def _spec(path: str, assignments: dict[str, str], predicate: str | None, **options: Any) -> UpdateSpec:
    return UpdateSpec(
        TableRef(path),
        assignments,
        predicate,
        TaskIdentity("dag", f"update-{next(_task_numbers)}", "run"),
        ExecutionOptions(backoff_initial_seconds=0.0, backoff_max_seconds=0.0, **options),
    )


def _row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "part": None if i % 7 == 6 else "ab"[i % 2],
        "score": None if i % 5 == 4 else i % 3,
        "label": f"r{i}",
    }


def _create(path: str, *, dvs: bool, partitioned: bool, column_mapping: bool = False, properties: dict | None = None) -> None:
    props = dict(properties or {})
    if dvs:
        props["delta.enableDeletionVectors"] = "true"
    if column_mapping:
        props["delta.columnMapping.mode"] = "name"
    table = DeltaTable.create(path, SCHEMA, ["part"] if partitioned else [], props)
    for start in (0, 8, 16):
        table.append(pa.Table.from_pylist([_row(i) for i in range(start, start + 8)], schema=SCHEMA))


def _commit_info(path: str, version: int) -> dict[str, Any]:
    text = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text()
    return next(json.loads(line)["commitInfo"] for line in text.splitlines() if "commitInfo" in line)


def _null_if(value: Any, fn) -> Any:
    return None if value is None else fn(value)


# (SET, predicate) and the Python model: (row -> updated row, row -> predicate value or None).
STATEMENTS: list[tuple[dict[str, str], str | None, Any, Any]] = [
    ({"score": "score + 10"}, "id % 4 = 1", lambda r: r | {"score": _null_if(r["score"], lambda s: s + 10)}, lambda r: r["id"] % 4 == 1),
    ({"label": "concat(label, '!')", "score": "0"}, "score = 2", lambda r: r | {"label": r["label"] + "!", "score": 0},
     lambda r: _null_if(r["score"], lambda s: s == 2)),
    ({"part": "'c'"}, "part = 'a'", lambda r: r | {"part": "c"}, lambda r: _null_if(r["part"], lambda p: p == "a")),
    ({"score": "CASE WHEN id > 10 THEN NULL ELSE id END"}, None,
     lambda r: r | {"score": None if r["id"] > 10 else r["id"]}, lambda r: True),
    ({"SCORE": "id", "label": "upper(label)"}, "NOT (score = 1) OR part IS NULL",
     lambda r: r | {"score": r["id"], "label": r["label"].upper()},
     lambda r: True if r["part"] is None else _null_if(r["score"], lambda s: s != 1)),
    ({"label": "'x'"}, "id > 1000", lambda r: r | {"label": "x"}, lambda r: False),
]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    statement=st.sampled_from(range(len(STATEMENTS))),
    dvs=st.booleans(),
    partitioned=st.booleans(),
    column_mapping=st.booleans(),
    in_driver=st.booleans(),
)
def test_updated_rows_are_the_ones_sql_computes(
    spark, tmp_path_factory, statement, dvs, partitioned, column_mapping, in_driver
) -> None:
    # in_driver: the candidate files (a few KiB) are read and written in the driver, or in Spark tasks.
    options = {} if in_driver else {"driver_max_bytes": 0}
    assignments, predicate, update, matches = STATEMENTS[statement]
    path = str(tmp_path_factory.mktemp("update") / "t")
    _create(path, dvs=dvs, partitioned=partitioned, column_mapping=column_mapping)
    rows = [_row(i) for i in range(24)]
    result = run_update(spark, _spec(path, assignments, predicate, **options))
    expected = [update(r) if matches(r) is True else r for r in rows]
    assert_oracles_read(path, expected)
    updated = sum(1 for r in rows if matches(r) is True)
    assert result.metrics["numUpdatedRows"] == updated
    assert list(result.metrics) == list(UPDATE_METRICS)
    if updated == 0:
        assert result.version is None and DeltaTable(path).version() == 3
        return
    info = _commit_info(path, 4)
    assert info["operation"] == "UPDATE" and info["isBlindAppend"] is False
    assert json.loads(info["operationParameters"]["predicate"]) == ([predicate] if predicate else [])
    assert {k: int(v) for k, v in info["operationMetrics"].items()} == result.metrics
    if dvs:
        assert result.metrics["numCopiedRows"] == 0
    else:
        # Touched files rewritten: their other rows copied, never more than the rows not updated.
        assert result.metrics["numDeletionVectorsAdded"] == 0 and result.metrics["numRemovedFiles"] > 0
        assert 0 <= result.metrics["numCopiedRows"] <= 24 - updated


def test_store_assignment_refuses_a_string_into_a_number_before_any_job(spark, table_path: str) -> None:
    _create(table_path, dvs=True, partitioned=False)
    with pytest.raises(InvalidArgumentError) as info:
        run_update(spark, _spec(table_path, {"score": "label"}, "id = 1"))
    assert info.value.argument == "UpdateSpec.set['score']" and "INT" in str(info.value)
    assert DeltaTable(table_path).version() == 3


def test_store_assignment_casts_numbers_and_fails_on_overflow(spark, table_path: str) -> None:
    _create(table_path, dvs=False, partitioned=False)
    run_update(spark, _spec(table_path, {"score": "2.7", "label": "id * 2"}, "id = 1"))  # double into int, long into string
    expected = [_row(i) | ({"score": 2, "label": "2"} if i == 1 else {}) for i in range(24)]
    assert_oracles_read(table_path, expected)
    with pytest.raises(InvalidArgumentError, match="CAST_OVERFLOW"):
        run_update(spark, _spec(table_path, {"score": "id + 3000000000"}, "id = 2"))
    assert DeltaTable(table_path).version() == 4
    assert_oracles_read(table_path, expected)


@pytest.mark.parametrize(
    ("assignments", "predicate", "error"),
    [
        ({"nope": "1"}, None, InvalidArgumentError),
        ({"score": "nope + 1"}, None, InvalidArgumentError),
        ({"score": "1"}, "nope = 1", InvalidFilterError),
        ({"score": "1"}, "id", InvalidFilterError),
    ],
)
def test_unknown_columns_fail_typed(spark, table_path: str, assignments, predicate, error) -> None:
    _create(table_path, dvs=True, partitioned=False)
    with pytest.raises(error):
        run_update(spark, _spec(table_path, assignments, predicate))
    assert DeltaTable(table_path).version() == 3


@pytest.mark.parametrize("dvs", [True, False])
def test_updated_rows_must_satisfy_constraints(spark, table_path: str, dvs: bool) -> None:
    _create(table_path, dvs=dvs, partitioned=False, properties={"delta.constraints.labelled": "label IS NOT NULL"})
    with pytest.raises(ConstraintViolationError, match="labelled"):
        run_update(spark, _spec(table_path, {"label": "CASE WHEN id = 5 THEN NULL ELSE label END"}, "id < 8"))
    with pytest.raises(ConstraintViolationError):
        run_update(spark, _spec(table_path, {"id": "CAST(NULL AS BIGINT)"}, "id = 9"))  # id is NOT NULL
    assert DeltaTable(table_path).version() == 3
    assert_oracles_read(table_path, [_row(i) for i in range(24)])
    data_files = {p.name for p in Path(table_path).rglob("*.parquet")}
    assert len(data_files) == 3, "the failed updates left files behind"


def test_a_concurrent_delete_of_a_read_file_forces_a_new_plan(spark, table_path: str) -> None:
    _create(table_path, dvs=True, partitioned=False)
    other = DeltaTable(table_path)

    def delete_row(attempt: int) -> None:
        if attempt == 1:
            other.delete("id = 9")  # a DV on a file the job read and changes

    result = run_update(spark, _spec(table_path, {"label": "'u'"}, "id >= 8 AND id < 12"), before_commit=delete_row)
    assert result.attempts == 2 and result.metrics["numUpdatedRows"] == 3
    assert_oracles_read(table_path, [_row(i) | ({"label": "u"} if 8 <= i < 12 else {}) for i in range(24) if i != 9])


SHARED = {
    "table_with_column_mapping": (
        {"Super Name": "upper(`Super Name`)"},
        "`Company Very Short` = 'BMS'",
        lambda r: r["Company Very Short"] == "BMS",
        lambda r: r | {"Super Name": r["Super Name"].upper()},
    ),
    "table-with-dv-small": ({"value": "value * 10"}, "value > 5", lambda r: r["value"] > 5, lambda r: {"value": r["value"] * 10}),
    "delta-0.8.0-partitioned": ({"value": "concat(value, year)"}, "month = '2'", lambda r: r["month"] == "2",
                                lambda r: r | {"value": r["value"] + r["year"]}),
}


@pytest.mark.parametrize("name", sorted(SHARED))
def test_tables_written_by_others(spark, tmp_path: Path, name: str) -> None:
    path = str(tmp_path / name)
    shutil.copytree(shared_tables_dir() / name, path, symlinks=True)
    before = read_with_kernel(path)
    assignments, predicate, matches, update = SHARED[name]
    result = run_update(spark, _spec(path, assignments, predicate))
    assert result.metrics["numUpdatedRows"] == sum(1 for r in before if matches(r)) > 0
    assert_oracles_read(path, [update(r) if matches(r) else r for r in before])
