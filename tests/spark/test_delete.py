"""DELETE on Spark: what delta-rs and delta-kernel-rs read afterwards, the log it leaves, and the Spark work it does.

The expected rows come from a plain Python model of the statement (SQL three-valued
logic: a row whose predicate is NULL stays), never from our reader.
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

from airflow_delta.engine import (
    DeletionVectorsNotEnabledError,
    DeltaTable,
    InvalidArgumentError,
    InvalidFilterError,
)
from airflow_delta.spark.delete import DELETE_METRICS, run_delete
from airflow_delta.spark.session import LazySession
from airflow_delta.spark.specs import DeleteSpec, ExecutionOptions, TableRef, TaskIdentity
from tests.conftest import shared_tables_dir
from tests.oracles import assert_oracles_read, read_with_deltars, read_with_kernel

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("score", pa.int64())])
_task_numbers = itertools.count()


def _spec(path: str, predicate: str | None, **options: Any) -> DeleteSpec:
    # A new task instance each time: the same one would commit only once.
    return DeleteSpec(
        TableRef(path),
        predicate,
        TaskIdentity("dag", f"delete-{next(_task_numbers)}", "run"),
        ExecutionOptions(backoff_initial_seconds=0.0, backoff_max_seconds=0.0, **options),
    )


def _row(i: int) -> dict[str, Any]:
    return {"id": i, "part": None if i % 7 == 6 else "ab"[i % 2], "score": None if i % 5 == 4 else i % 3}


def _create(path: str, *, dvs: bool, partitioned: bool, column_mapping: bool = False, n: int = 24) -> DeltaTable:
    props = {}
    if dvs:
        props["delta.enableDeletionVectors"] = "true"
    if column_mapping:
        props["delta.columnMapping.mode"] = "name"
    table = DeltaTable.create(path, SCHEMA, ["part"] if partitioned else [], props)
    for start in range(0, n, n // 3):  # three appends: several files
        table.append(pa.Table.from_pylist([_row(i) for i in range(start, start + n // 3)], schema=SCHEMA))
    return table


def _commit_info(path: str, version: int) -> dict[str, Any]:
    text = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text()
    return next(json.loads(line)["commitInfo"] for line in text.splitlines() if "commitInfo" in line)


def _spark_jobs_during(spark, fn):
    """``fn()``'s result and the number of Spark jobs it ran (by job group)."""
    context = spark.sparkContext
    group = f"probe-{next(_task_numbers)}"
    context.setJobGroup(group, "counting jobs")
    try:
        result = fn()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    # The status tracker learns of jobs through the listener bus, asynchronously: under
    # load a job that ran may not be counted yet.
    context._jsc.sc().listenerBus().waitUntilEmpty(60_000)
    return result, len(context.statusTracker().getJobIdsForGroup(group))


# Predicates and their Python model (None where SQL gives NULL).
PREDICATES: dict[str, Any] = {
    "id % 4 = 1": lambda r: r["id"] % 4 == 1,
    "score = 2": lambda r: None if r["score"] is None else r["score"] == 2,
    "score > 0 AND id < 12": lambda r: (r["id"] < 12) and (None if r["score"] is None else r["score"] > 0),
    "part = 'a' OR score IS NULL": lambda r: (r["score"] is None) or (None if r["part"] is None else r["part"] == "a"),
    "NOT (score = 1)": lambda r: None if r["score"] is None else r["score"] != 1,
    "part = 'b'": lambda r: None if r["part"] is None else r["part"] == "b",
    "part IS NULL": lambda r: r["part"] is None,
    "CASE WHEN id > 20 THEN score ELSE NULL END = 0": lambda r: (
        None if r["id"] <= 20 or r["score"] is None else r["score"] == 0
    ),
    "id > 1000": lambda r: False,
}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    predicate=st.sampled_from(sorted(PREDICATES)),
    dvs=st.booleans(),
    partitioned=st.booleans(),
    column_mapping=st.booleans(),
    in_driver=st.booleans(),
)
def test_deleted_rows_are_the_ones_sql_matches(
    spark, tmp_path_factory, predicate, dvs, partitioned, column_mapping, in_driver
) -> None:
    # in_driver: the candidate files (a few KiB) are read and written in the driver, or in Spark tasks.
    options = {} if in_driver else {"driver_max_bytes": 0}
    path = str(tmp_path_factory.mktemp("delete") / "t")
    _create(path, dvs=dvs, partitioned=partitioned, column_mapping=column_mapping)
    rows = [_row(i) for i in range(24)]
    result = run_delete(spark, _spec(path, predicate, **options))
    keep = [r for r in rows if PREDICATES[predicate](r) is not True]
    assert_oracles_read(path, keep)
    assert result.metrics["numDeletedRows"] == len(rows) - len(keep)
    assert list(result.metrics) == list(DELETE_METRICS)
    if len(keep) == len(rows):
        assert result.version is None and DeltaTable(path).version() == 3
        return
    assert result.version == 4
    info = _commit_info(path, 4)
    assert info["operation"] == "DELETE"
    assert json.loads(info["operationParameters"]["predicate"]) == [predicate]
    assert info["isBlindAppend"] is False
    assert {k: int(v) for k, v in info["operationMetrics"].items()} == result.metrics
    if not dvs:
        assert result.metrics["numDeletionVectorsAdded"] == 0


def test_a_partition_predicate_deletes_from_the_log_without_a_spark_job(spark, table_path: str) -> None:
    _create(table_path, dvs=True, partitioned=True)
    result, jobs = _spark_jobs_during(spark, lambda: run_delete(spark, _spec(table_path, "part = 'a'")))
    assert jobs == 0
    assert result.metrics["numDeletedRows"] == sum(1 for i in range(24) if _row(i)["part"] == "a")
    assert result.metrics["numRemovedFiles"] == 3 and result.metrics["numDeletionVectorsAdded"] == 0
    assert_oracles_read(table_path, [_row(i) for i in range(24) if _row(i)["part"] != "a"])
    # The same without a predicate: every file goes, still no job.
    result, jobs = _spark_jobs_during(spark, lambda: run_delete(spark, _spec(table_path, None)))
    assert jobs == 0 and result.version == 5
    assert json.loads(_commit_info(table_path, 5)["operationParameters"]["predicate"]) == []
    assert_oracles_read(table_path, [])


def test_a_metadata_only_delete_builds_no_session(spark, table_path: str) -> None:
    _create(table_path, dvs=True, partitioned=True)
    lazy = LazySession("never built")
    result = run_delete(lazy, _spec(table_path, "part = 'a'"))
    assert result.version == 4 and not lazy.started
    result = run_delete(lazy, _spec(table_path, None))
    assert result.version == 5 and not lazy.started
    assert_oracles_read(table_path, [])


def test_a_data_delete_builds_the_lazy_session(spark, table_path: str) -> None:
    # The counterpart: a data predicate that Spark evaluates asks for the session
    # (getOrCreate returns the test session, which stays up). The driver's own search of
    # a DV delete is off here (tests/spark/test_engine_rows.py covers it).
    _create(table_path, dvs=True, partitioned=True)
    lazy = LazySession("built on demand")
    result = run_delete(lazy, _spec(table_path, "part = 'a' AND id = 2", driver_scan_max_bytes=0))
    assert lazy.started and result.metrics["numDeletedRows"] == 1
    assert_oracles_read(table_path, [_row(i) for i in range(24) if i != 2])


def test_a_data_predicate_runs_spark_jobs(spark, table_path: str) -> None:
    # The counterpart of the test above: the probe does count the jobs of a data delete.
    _create(table_path, dvs=True, partitioned=True)
    spec = _spec(table_path, "part = 'a' AND id = 1", driver_scan_max_bytes=0)
    _, jobs = _spark_jobs_during(spark, lambda: run_delete(spark, spec))
    assert jobs >= 1


def test_bad_predicates_fail_typed_before_any_spark_job(spark, table_path: str) -> None:
    _create(table_path, dvs=True, partitioned=False)
    for predicate in ("nope = 1", "id +", "id + 1"):
        with pytest.raises(InvalidFilterError) as info:
            _spark_jobs_during(spark, lambda p=predicate: run_delete(spark, _spec(table_path, p)))
        assert predicate in str(info.value) and not info.value.retryable

    def refused() -> None:
        with pytest.raises(InvalidFilterError):
            run_delete(spark, _spec(table_path, "nope = 1"))

    _, jobs = _spark_jobs_during(spark, refused)
    assert jobs == 0
    assert DeltaTable(table_path).version() == 3


def test_deletion_vectors_forced_on_a_table_without_them_fail(spark, table_path: str) -> None:
    _create(table_path, dvs=False, partitioned=False)
    with pytest.raises(DeletionVectorsNotEnabledError):
        run_delete(spark, _spec(table_path, "id = 1", use_deletion_vectors=True))


def test_deletion_vectors_turned_off_rewrite_files(spark, table_path: str) -> None:
    _create(table_path, dvs=True, partitioned=False)
    result = run_delete(spark, _spec(table_path, "id = 1", use_deletion_vectors=False))
    assert result.metrics["numDeletionVectorsAdded"] == 0 and result.metrics["numRemovedFiles"] == 1
    assert result.metrics["numCopiedRows"] == 7 and result.metrics["numAddedFiles"] == 1
    assert_oracles_read(table_path, [_row(i) for i in range(24) if i != 1])


def test_a_versioned_target_is_refused(spark, table_path: str) -> None:
    _create(table_path, dvs=True, partitioned=False)
    spec = DeleteSpec(TableRef(table_path, version=1), "id = 1", TaskIdentity("d", "t", "r"))
    with pytest.raises(InvalidArgumentError, match="latest version"):
        run_delete(spark, spec)


def test_an_append_into_another_partition_does_not_conflict(spark, table_path: str) -> None:
    _create(table_path, dvs=True, partitioned=True)
    other = DeltaTable(table_path)
    appended = {"id": 100, "part": "b", "score": 1}

    def append_elsewhere(attempt: int) -> None:
        other.append(pa.Table.from_pylist([appended], schema=SCHEMA))

    result = run_delete(spark, _spec(table_path, "part = 'a' AND score = 1"), before_commit=append_elsewhere)
    assert result.attempts == 1 and result.version == 5
    expected = [_row(i) for i in range(24) if not (_row(i)["part"] == "a" and _row(i)["score"] == 1)] + [appended]
    assert_oracles_read(table_path, expected)


def test_a_concurrent_delete_of_a_read_file_forces_a_new_plan(spark, table_path: str) -> None:
    _create(table_path, dvs=True, partitioned=False)
    other = DeltaTable(table_path)

    def delete_first(attempt: int) -> None:
        if attempt == 1:
            other.delete("id < 8")  # removes the whole first file, which the job read

    result = run_delete(spark, _spec(table_path, "score = 0"), before_commit=delete_first)
    assert result.attempts == 2 and result.read_version == 4
    assert result.metrics["numDeletedRows"] == sum(1 for i in range(8, 24) if _row(i)["score"] == 0)
    assert_oracles_read(table_path, [_row(i) for i in range(8, 24) if _row(i)["score"] != 0])


def test_the_same_task_deletes_once(spark, table_path: str) -> None:
    _create(table_path, dvs=True, partitioned=False)
    spec = _spec(table_path, "id = 3")
    first = run_delete(spark, spec)
    DeltaTable(table_path).append(pa.Table.from_pylist([_row(3)], schema=SCHEMA))  # the row comes back
    again = run_delete(spark, spec)  # a retry of the same task instance
    assert again == first
    assert DeltaTable(table_path).version() == first.version + 1
    assert _row(3) in read_with_deltars(table_path)


SHARED = {
    # name: (predicate, Python model over the rows the oracles read)
    "table-with-dv-small": ("value % 3 = 0", lambda r: r["value"] % 3 == 0),
    "table_with_column_mapping": (
        "`Company Very Short` = 'BMS'",
        lambda r: r["Company Very Short"] == "BMS",
    ),
    "delta-0.8.0-partitioned": ("value = '4'", lambda r: r["value"] == "4"),
    "simple_table": ("id > 5", lambda r: r["id"] > 5),
}


@pytest.mark.parametrize("name", sorted(SHARED))
def test_tables_written_by_others(spark, tmp_path: Path, name: str) -> None:
    path = str(tmp_path / name)
    shutil.copytree(shared_tables_dir() / name, path, symlinks=True)
    before = read_with_kernel(path)
    predicate, model = SHARED[name]
    result = run_delete(spark, _spec(path, predicate))
    keep = [r for r in before if not model(r)]
    assert result.metrics["numDeletedRows"] == len(before) - len(keep) > 0
    assert_oracles_read(path, keep)
