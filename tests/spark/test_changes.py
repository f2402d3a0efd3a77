"""The shared driver machinery: staging row changes (DVs or rewrites), retries on conflicts, exactly-once.

What a table holds afterwards is decided by delta-rs and delta-kernel-rs, never by our reader.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F  # noqa: N812

from airflow_delta.engine import (
    ConcurrentAppendException,
    ConstraintViolationError,
    DeltaTable,
    Snapshot,
    TableContext,
    Transaction,
)
from airflow_delta.spark.changes import StagedOperation, backoff_seconds, run_with_retries, stage_row_changes
from airflow_delta.spark.file_tasks import target_dataframe
from airflow_delta.spark.specs import DeleteSpec, ExecutionOptions, TableRef, TaskIdentity
from tests.oracles import assert_oracles_read, read_with_deltars

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.int64())])


def _make_table(path: str, *, dvs: bool, partitioned: bool = False, properties: dict | None = None) -> DeltaTable:
    props = {"delta.enableDeletionVectors": "true"} if dvs else {}
    table = DeltaTable.create(path, SCHEMA, ["part"] if partitioned else [], props | (properties or {}))
    for chunk in range(3):  # three appends: several files, in both partitions
        ids = list(range(chunk * 10, chunk * 10 + 10))
        table.append(pa.table({"id": ids, "part": ["a" if i % 2 else "b" for i in ids], "value": ids}, schema=SCHEMA))
    return table


def _rows(path: str) -> list[dict]:
    return read_with_deltars(path)


def _spec(path: str, *, max_attempts: int = 3, task: str = "t") -> DeleteSpec:
    return DeleteSpec(
        TableRef(path),
        "unused by these tests",
        TaskIdentity("dag", task, "run"),
        ExecutionOptions(max_attempts=max_attempts, backoff_initial_seconds=0.0, backoff_max_seconds=0.0),
    )


def _update_attempt(spark, condition: str, *, use_dvs: bool, read_filter: str | None = None, set_value: str = "value + 100"):
    """An UPDATE-like attempt: rows matching ``condition`` leave their files, their updated version is written."""

    def attempt(txn: Transaction, snapshot: Snapshot, context: TableContext) -> StagedOperation:
        files = txn.read_files(read_filter)
        target = target_dataframe(spark, context, files)
        matched = target.filter(f"({condition}) IS TRUE")
        updated = matched.withColumn("value", F.expr(set_value).cast("bigint"))
        metrics = stage_row_changes(txn, context, files, matched, updated, use_dvs)
        return StagedOperation("UPDATE", {"predicate": json.dumps(condition)}, {**metrics, "numUpdatedRows": metrics.removed_rows})

    return attempt


def _data_files_on_disk(path: str) -> set[str]:
    return {str(p.relative_to(path)) for p in Path(path).rglob("*.parquet") if "_delta_log" not in p.parts}


def _data_files_ever_added(path: str) -> set[str]:
    from urllib.parse import unquote

    added = set()
    for commit in sorted((Path(path) / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                added.add(unquote(action["add"]["path"]))
    return added


@pytest.mark.parametrize("use_dvs", [True, False])
@pytest.mark.parametrize("partitioned", [False, True])
def test_row_changes_read_back_by_both_oracles(spark, table_path: str, use_dvs: bool, partitioned: bool) -> None:
    _make_table(table_path, dvs=use_dvs, partitioned=partitioned)
    before = _rows(table_path)
    result = run_with_retries(_spec(table_path), _update_attempt(spark, "id % 7 = 3", use_dvs=use_dvs))

    expected = [row | {"value": row["value"] + 100} if row["id"] % 7 == 3 else row for row in before]
    assert_oracles_read(table_path, expected)
    assert result.version == 4 and result.read_version == 3 and result.attempts == 1
    updated = sum(1 for row in before if row["id"] % 7 == 3)
    assert result.metrics["numUpdatedRows"] == updated
    touched_files = result.metrics["numDeletionVectorsAdded"] if use_dvs else result.metrics["numRemovedFiles"]
    assert touched_files >= 3  # ids 3, 10, 17, 24 span the three appends
    if use_dvs:
        # Only the updated rows are written; the old ones are marked in DVs, nothing is copied.
        assert result.metrics["numCopiedRows"] == 0
        assert result.metrics["numRemovedFiles"] == 0
    else:
        # Every touched file rewritten: its other live rows copied.
        touched_rows = result.metrics["numCopiedRows"] + updated
        assert touched_rows % 5 == 0 and result.metrics["numCopiedRows"] > 0
        assert result.metrics["numDeletionVectorsAdded"] == 0
    assert result.metrics["numAddedFiles"] >= 1 and result.metrics["numAddedBytes"] > 0


def test_existing_deletion_vectors_are_merged(spark, table_path: str) -> None:
    table = _make_table(table_path, dvs=True)
    table.delete("id = 4")  # a DV in the first file
    before = _rows(table_path)
    result = run_with_retries(_spec(table_path), _update_attempt(spark, "id < 10", use_dvs=True))
    expected = [row | {"value": row["value"] + 100} if row["id"] < 10 else row for row in before]
    assert_oracles_read(table_path, expected)
    assert len(expected) == 29
    assert result.metrics["numUpdatedRows"] == 9
    # The first file lost every live row: removed whole, with its DV, no new DV for it.
    assert result.metrics["numRemovedFiles"] == 1 and result.metrics["numDeletionVectorsRemoved"] == 1


def test_the_same_task_commits_once(spark, table_path: str) -> None:
    _make_table(table_path, dvs=True)
    before = _rows(table_path)
    attempt = _update_attempt(spark, "id = 5", use_dvs=True)
    first = run_with_retries(_spec(table_path), attempt)
    again = run_with_retries(_spec(table_path), attempt)
    assert again == first
    assert DeltaTable(table_path).version() == first.version
    assert_oracles_read(table_path, [row | {"value": 105} if row["id"] == 5 else row for row in before])
    commit = DeltaTable(table_path).history(limit=1)[0]
    assert commit["tags"]["airflowDelta.appId"] == _spec(table_path).identity.app_id
    assert commit["tags"]["airflowDelta.taskId"] == "t" and commit["tags"]["airflowDelta.mapIndex"] == "-1"
    txn = DeltaTable(table_path).snapshot().transaction_version(_spec(table_path).identity.app_id)
    assert txn == 1


def test_a_concurrent_delete_of_a_read_file_makes_the_job_plan_again(spark, table_path: str) -> None:
    _make_table(table_path, dvs=False)
    other = DeltaTable(table_path)

    def concurrent_delete(attempt: int) -> None:
        if attempt == 1:  # between this attempt's plan and its commit
            other.delete("id = 1")

    result = run_with_retries(
        _spec(table_path), _update_attempt(spark, "id = 2", use_dvs=False), before_commit=concurrent_delete
    )
    assert result.attempts == 2
    assert result.read_version == 4  # planned again on the snapshot holding the concurrent delete
    history = DeltaTable(table_path).history(limit=1)[0]
    assert history["tags"]["airflowDelta.attempts"] == "2"
    expected = [{"id": i, "part": "a" if i % 2 else "b", "value": i + 100 if i == 2 else i} for i in range(30) if i != 1]
    assert_oracles_read(table_path, expected)
    # The first attempt's rewritten file was removed when its commit failed.
    assert _data_files_on_disk(table_path) == _data_files_ever_added(table_path)


def test_conflicts_past_max_attempts_raise_the_typed_error(spark, table_path: str) -> None:
    _make_table(table_path, dvs=False)
    other = DeltaTable(table_path)
    deleted = iter(range(30))

    def concurrent_delete(attempt: int) -> None:
        other.delete(f"id = {next(deleted)}")

    # The concurrent delete rewrites the file this job read: its new file lands where the job
    # read the whole table, which Delta checks first (ConcurrentAppendException).
    with pytest.raises(ConcurrentAppendException) as info:
        run_with_retries(
            _spec(table_path, max_attempts=2),
            _update_attempt(spark, "id = 25", use_dvs=False),
            before_commit=concurrent_delete,
        )
    assert info.value.retryable
    assert DeltaTable(table_path).version() == 5  # the two concurrent deletes, nothing of ours
    assert _data_files_on_disk(table_path) == _data_files_ever_added(table_path)


def test_an_append_into_another_partition_does_not_conflict(spark, table_path: str) -> None:
    _make_table(table_path, dvs=True, partitioned=True)
    other = DeltaTable(table_path)

    def append_elsewhere(attempt: int) -> None:
        other.append(pa.table({"id": [100], "part": ["b"], "value": [100]}, schema=SCHEMA))

    result = run_with_retries(
        _spec(table_path),
        _update_attempt(spark, "part = 'a' AND id < 10", use_dvs=True, read_filter="part = 'a'"),
        before_commit=append_elsewhere,
    )
    assert result.attempts == 1 and result.version == 5 and result.read_version == 3
    rows = _rows(table_path)
    assert {"id": 100, "part": "b", "value": 100} in rows
    assert [r["value"] for r in rows if r["part"] == "a" and r["id"] < 10] == [101, 103, 105, 107, 109]


def test_new_rows_breaking_a_constraint_fail_typed_and_leave_nothing(spark, table_path: str) -> None:
    _make_table(table_path, dvs=False, properties={"delta.constraints.nonnegative": "value >= 0"})
    before = _rows(table_path)
    with pytest.raises(ConstraintViolationError, match="nonnegative"):
        run_with_retries(_spec(table_path), _update_attempt(spark, "id = 3", use_dvs=False, set_value="-1"))
    assert DeltaTable(table_path).version() == 3
    assert_oracles_read(table_path, before)
    # Every file the failed write made is gone: those of tasks that finished, and those of
    # tasks Spark killed when the failing one aborted the job (swept by the write's file-name
    # token once the tasks ended), without a VACUUM.
    assert _data_files_on_disk(table_path) - _data_files_ever_added(table_path) == set()


def test_nothing_to_change_commits_nothing(spark, table_path: str) -> None:
    _make_table(table_path, dvs=True)

    def attempt(txn: Transaction, snapshot: Snapshot, context: TableContext) -> StagedOperation:
        txn.read_files("id > 1000")
        return StagedOperation("DELETE", {"predicate": "[]"}, {"numDeletedRows": 0}, commit=False)

    result = run_with_retries(_spec(table_path), attempt)
    assert result.version is None and result.read_version == 3 and result.metrics == {"numDeletedRows": 0}
    assert DeltaTable(table_path).version() == 3


def test_backoff_grows_to_its_ceiling() -> None:
    options = ExecutionOptions(backoff_initial_seconds=1, backoff_multiplier=3, backoff_max_seconds=5)
    assert [backoff_seconds(options, n) for n in (1, 2, 3)] == [1, 3, 5]


def test_a_try_that_commits_first_wins_and_the_late_one_returns_its_commit(spark, table_path: str) -> None:
    _make_table(table_path, dvs=True)
    before = _rows(table_path)
    spec = _spec(table_path)
    results = []

    def other_try_commits(attempt: int) -> None:
        # Another try of the same task instance plans, runs and commits while this one waits to commit.
        results.append(run_with_retries(spec, _update_attempt(spark, "id = 7", use_dvs=True)))

    late = run_with_retries(spec, _update_attempt(spark, "id = 8", use_dvs=True), before_commit=other_try_commits)
    assert late == results[0] and late.version == 4
    assert DeltaTable(table_path).version() == 4  # the late try committed nothing
    assert_oracles_read(table_path, [row | {"value": 107} if row["id"] == 7 else row for row in before])
    assert _data_files_on_disk(table_path) == _data_files_ever_added(table_path)
