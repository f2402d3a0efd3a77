"""The DML operators: where a DELETE runs, exactly-once across tries, the return value, errors.

Runs in the worker are checked with delta-rs and delta-kernel-rs. "No Spark started" is
shown, not assumed: those tests point the ``delta`` connection at a Spark connection
whose ``spark-submit`` could not run (a master nothing listens on), so any submit would
fail the test.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import RetryAction
from airflow.sdk.exceptions import AirflowFailException

from airflow_delta.engine import (
    ConcurrentDeleteReadException,
    DeltaTable,
    InvalidArgumentError,
    InvalidFilterError,
    UnsupportedFeatureError,
)
from airflow_delta.hooks.delta import DeltaHook
from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaMergeOperator, DeltaUpdateOperator
from airflow_delta.operators.retry import (
    DELTA_RETRY_POLICY,
    DeltaNonRetryableError,
    DeltaRetryableError,
    task_error,
)
from airflow_delta.spark.specs import DeleteSpec, ExecutionOptions, TableRef, TaskIdentity
from tests.airflow_layer import context, make_table
from tests.oracles import assert_oracles_read

pytestmark = pytest.mark.usefixtures("airflow_home")

RESULT_KEYS = {"version", "read_version", "operation", "metrics", "attempts"}




# --------------------------------------------------------------------------- declarations


@pytest.mark.parametrize(
    ("operator", "fields"),
    [
        (DeltaDeleteOperator, {"table", "predicate", "conf"}),
        (DeltaUpdateOperator, {"table", "set", "predicate", "conf"}),
        (DeltaMergeOperator, {"table", "merge_sql", "sources", "source", "on", "clauses", "conf"}),
    ],
)
def test_operators_template_their_sql_and_document_every_parameter(operator: type, fields: set[str]) -> None:
    assert set(operator.template_fields) == fields
    assert operator.ui_color.startswith("#")
    documented = set(re.findall(r":param (\w+):", operator.__doc__ or ""))
    own = {name for name in inspect.signature(operator.__init__).parameters if name not in ("self", "kwargs")}
    shared = {name for name in inspect.signature(DeltaDeleteOperator.__mro__[1].__init__).parameters} - {
        "self",
        "kwargs",
    }
    assert own | shared <= documented


def test_merge_takes_sql_or_structured_arguments_not_both() -> None:
    with pytest.raises(InvalidArgumentError, match="either merge_sql or source/on/clauses"):
        DeltaMergeOperator(task_id="m", table="/t", merge_sql="MERGE INTO t USING s ON t.id = s.id", on="x")
    with pytest.raises(InvalidArgumentError, match="all of source, on and clauses"):
        DeltaMergeOperator(task_id="m", table="/t", on="target.id = source.id")


def test_delete_refuses_an_unknown_execution() -> None:
    with pytest.raises(InvalidArgumentError, match="'auto', 'spark' or 'worker'"):
        DeltaDeleteOperator(task_id="d", table="/t", execution="anywhere")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- DELETE in the worker


@pytest.mark.usefixtures("no_spark")
def test_a_partition_delete_runs_in_the_worker_and_returns_the_commit_from_the_log(table_path: str) -> None:
    rows = make_table(table_path)

    result = DeltaDeleteOperator(task_id="delete_a", table=table_path, predicate="part = 'a'").execute(
        context(task_id="delete_a")
    )

    assert set(result) == RESULT_KEYS
    assert (result["version"], result["read_version"], result["operation"], result["attempts"]) == (3, 2, "DELETE", 1)
    assert result["metrics"]["numDeletedRows"] == 10
    assert result["metrics"]["numRemovedFiles"] == 2  # whole files, from the log
    assert_oracles_read(table_path, [r for r in rows if r["part"] != "a"])
    info = DeltaTable(table_path).history(limit=1)[0]
    app_id = TaskIdentity("dag", "delete_a", "manual__1").app_id
    assert info["tags"]["airflowDelta.appId"] == app_id
    assert DeltaTable(table_path).snapshot().transactions[app_id].version == 1


@pytest.mark.usefixtures("no_spark")
def test_a_small_row_delete_runs_in_the_worker_with_deletion_vectors(table_path: str) -> None:
    rows = make_table(table_path, dvs=True)

    result = DeltaDeleteOperator(task_id="d", table=table_path, predicate="id IN (3, 4) OR value = 'v9'").execute(
        context()
    )

    assert result["version"] == 3
    assert result["metrics"]["numDeletedRows"] == 3
    assert result["metrics"]["numDeletionVectorsAdded"] >= 1
    assert_oracles_read(table_path, [r for r in rows if r["id"] not in (3, 4, 9)])


@pytest.mark.usefixtures("no_spark")
def test_a_delete_matching_nothing_commits_nothing(table_path: str) -> None:
    rows = make_table(table_path)

    result = DeltaDeleteOperator(task_id="d", table=table_path, predicate="id > 1000").execute(context())

    assert (result["version"], result["read_version"], result["metrics"]["numDeletedRows"]) == (None, 2, 0)
    assert DeltaTable(table_path).version() == 2
    assert_oracles_read(table_path, rows)


def test_a_small_job_is_one_the_log_plans_below_driver_max_bytes(table_path: str) -> None:
    make_table(table_path)
    snapshot = DeltaTable(table_path).snapshot()
    identity = TaskIdentity("dag", "d", "r")

    def small(predicate: str | None, driver_max_bytes: int = 16 << 20) -> bool:
        operator = DeltaDeleteOperator(task_id="d", table=table_path, execution="spark")
        options = ExecutionOptions(driver_max_bytes=driver_max_bytes)
        spec = DeleteSpec(table=TableRef(uri=table_path), predicate=predicate, identity=identity, options=options)
        return operator.is_small_job(spec, snapshot)

    assert small("id = 3")
    assert not small("id = 3", driver_max_bytes=0)
    assert small("part = 'a'", driver_max_bytes=0)  # metadata-only: the job reads no file
    assert small(None, driver_max_bytes=0)
    assert not small("regexp_like(value, '^v1.$')")  # the engine cannot plan it: not known to be small
    update = DeltaUpdateOperator(task_id="u", table=table_path, set={"value": "'x'"})
    update_spec = update.build_spec(identity, DeltaHook())
    assert update.is_small_job(update_spec, snapshot)


def test_auto_chooses_spark_above_the_threshold_or_for_a_predicate_the_engine_cannot_evaluate(
    table_path: str,
) -> None:
    make_table(table_path)
    table = DeltaTable(table_path)
    snapshot = table.snapshot()
    identity = TaskIdentity("dag", "d", "r")

    def in_worker(predicate: str | None, threshold: int) -> bool:
        operator = DeltaDeleteOperator(task_id="d", table=table_path, worker_threshold_bytes=threshold)
        spec = DeleteSpec(table=TableRef(uri=table_path), predicate=predicate, identity=identity)
        return operator.run_in_worker(table, spec, snapshot)

    assert in_worker("id = 3", threshold=1 << 30)
    assert not in_worker("id = 3", threshold=0)
    assert in_worker("part = 'a'", threshold=0)  # metadata-only: never Spark
    assert in_worker(None, threshold=0)
    assert not in_worker("regexp_like(value, '^v1.$')", threshold=1 << 30)  # Spark SQL only
    with pytest.raises(InvalidFilterError, match="colour"):  # no such column: fails here, not on Spark
        in_worker("colour = 'red'", threshold=1 << 30)


def test_merge_auto_runs_in_the_worker_only_what_it_evaluates_as_spark(
    table_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    make_table(table_path)
    table = DeltaTable(table_path)
    snapshot = table.snapshot()
    source = tmp_path / "s.parquet"
    pq.write_table(pa.table({"id": [1, 2], "part": ["a", "b"], "value": ["x", "y"]}), source)

    def in_worker(value: str, threshold: int = 1 << 30, execution: str = "auto") -> bool:
        operator = DeltaMergeOperator(
            task_id="m", table=table_path, source={"parquet": str(source)}, on="t.id = s.id",
            clauses=[{"kind": "matched_update", "assignments": {"value": value}}],
            source_alias="s", target_alias="t", worker_threshold_bytes=threshold, execution=execution,
        )
        return operator.run_in_worker(table, operator.build_spec(TaskIdentity("dag", "m", "r"), DeltaHook()), snapshot)

    assert in_worker("s.value")
    assert "running in the worker" in capsys.readouterr().out  # the task log
    assert not in_worker("s.value", threshold=0)  # decided from the source's file sizes, before reading it
    assert "the source's files hold" in capsys.readouterr().out
    assert not in_worker("s.value", threshold=(source.stat().st_size + 1))  # the candidate target files tip it
    assert "running on Spark" in capsys.readouterr().out
    assert not in_worker("concat(s.value, '!')")  # a function: Spark's
    log = capsys.readouterr().out
    assert "the worker does not run it exactly as Spark would" in log
    assert "concat" in log  # the log says which part
    assert not in_worker("s.value", execution="spark")
    with pytest.raises(InvalidArgumentError, match="use 'auto' or 'spark'"):
        in_worker("concat(s.value, '!')", execution="worker")


@pytest.mark.usefixtures("no_spark")
def test_update_auto_runs_in_the_worker_only_what_it_evaluates_as_spark(
    table_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = make_table(table_path)
    table = DeltaTable(table_path)
    snapshot = table.snapshot()

    def operator(value: str, **kwargs: object) -> DeltaUpdateOperator:
        return DeltaUpdateOperator(task_id="u", table=table_path, set={"value": value}, predicate="id < 3", **kwargs)

    def in_worker(value: str, **kwargs: object) -> bool:
        update = operator(value, **kwargs)
        return update.run_in_worker(table, update.build_spec(TaskIdentity("dag", "u", "r"), DeltaHook()), snapshot)

    assert in_worker("'x'")
    assert "running in the worker" in capsys.readouterr().out
    assert not in_worker("'x'", worker_threshold_bytes=0)
    assert not in_worker("concat(value, '!')")
    assert "concat" in capsys.readouterr().out
    with pytest.raises(InvalidArgumentError, match="use 'auto' or 'spark'"):
        in_worker("concat(value, '!')", execution="worker")
    # End to end in the worker (Spark is unreachable): Delta's metrics, read from the log.
    result = operator("'x'").execute(context(task_id="u"))
    assert (result["operation"], result["metrics"]["numUpdatedRows"]) == ("UPDATE", 3)
    assert_oracles_read(table_path, [{**r, "value": "x"} if r["id"] < 3 else r for r in rows])


def test_merge_refuses_an_unknown_execution() -> None:
    with pytest.raises(InvalidArgumentError, match="execution"):
        DeltaMergeOperator(task_id="m", table="/t", merge_sql="MERGE INTO t USING s ON t.id = s.id", execution="gpu")


# --------------------------------------------------------------------------- exactly once


@pytest.mark.usefixtures("no_spark")
def test_a_retry_returns_the_first_try_result_and_applies_nothing_again(table_path: str) -> None:
    rows = make_table(table_path)
    first = DeltaDeleteOperator(task_id="d", table=table_path, predicate="id < 5", execution="worker")
    first_result = first.execute(context(run_id="scheduled__1"))
    version = DeltaTable(table_path).version()

    # The second try would run on (unreachable) Spark: it must not get that far.
    retry = DeltaDeleteOperator(task_id="d", table=table_path, predicate="id < 5", execution="spark")
    assert retry.execute(context(run_id="scheduled__1")) == first_result

    assert DeltaTable(table_path).version() == version
    assert_oracles_read(table_path, [r for r in rows if r["id"] >= 5])
    # Another run of the same task is another task instance: it applies its change.
    other_run = DeltaDeleteOperator(task_id="d", table=table_path, predicate="id < 7", execution="worker")
    assert other_run.execute(context(run_id="scheduled__2"))["version"] == version + 1


# --------------------------------------------------------------------------- errors


@pytest.mark.usefixtures("no_spark")
def test_a_bad_predicate_fails_the_task_at_once_with_the_engine_message(table_path: str) -> None:
    rows = make_table(table_path)
    operator = DeltaDeleteOperator(task_id="d", table=table_path, predicate="no_such_column = 1", execution="worker")

    with pytest.raises(DeltaNonRetryableError) as raised:
        operator.execute(context())

    assert isinstance(raised.value, AirflowFailException)  # no retry, whatever the task's retries
    assert raised.value.error_class == "InvalidFilterError"
    assert isinstance(raised.value.__cause__, InvalidFilterError)
    assert "no_such_column" in str(raised.value) and "does not exist" in str(raised.value)
    assert_oracles_read(table_path, rows)


def test_retryable_engine_errors_retry_under_the_shipped_policy_and_others_fail() -> None:
    conflict = ConcurrentDeleteReadException(
        "a file we read was removed", winning_version=3, winning_operation="DELETE"
    )
    retryable = task_error(conflict)
    fatal = task_error(UnsupportedFeatureError(["columnMapping"], access="write"))

    assert isinstance(retryable, DeltaRetryableError) and retryable.delta_error is conflict
    assert isinstance(fatal, DeltaNonRetryableError) and isinstance(fatal, AirflowFailException)
    assert DELTA_RETRY_POLICY.evaluate(retryable, try_number=1, max_tries=3).action is RetryAction.RETRY
    assert DELTA_RETRY_POLICY.evaluate(ValueError("other"), try_number=1, max_tries=3).action is RetryAction.DEFAULT
    # The policy survives DAG serialization.
    serialized = DELTA_RETRY_POLICY.serialize()
    assert serialized["rules"][0]["exception"] == "airflow_delta.operators.retry.DeltaRetryableError"


# --------------------------------------------------------------------------- on Spark
# Each job on Spark costs a JVM start, so each is run once for all it proves: DELETE and
# UPDATE on Spark (return value, retry, tags and metrics) in
# tests/operators/test_spark_application.py, MERGE from a Delta source on Spark (the rows
# DuckDB gives, the job's size) in tests/operators/test_small_merge_job.py.


STRUCTURED_CLAUSES: list[dict[str, Any]] = [
    {"kind": "matched_delete", "condition": "s.value = 'gone'"},
    {"kind": "matched_update", "assignments": {"value": "s.value"}},
    {"kind": "not_matched_insert", "star": True},
]
"""The clauses of the structured MERGE checked against DuckDB (here in the worker; on Spark in
tests/operators/test_small_merge_job.py): a conditional delete, an update, an insert of every column."""


def duckdb_merge(target_rows: list[dict[str, Any]], source_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows DuckDB's MERGE INTO leaves with :data:`STRUCTURED_CLAUSES` (the oracle of the structured MERGE)."""
    import duckdb
    import pyarrow as pa

    from tests.airflow_layer import SCHEMA

    db = duckdb.connect()
    db.execute("CREATE TABLE t (id BIGINT, part VARCHAR, value VARCHAR)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", [tuple(r.values()) for r in target_rows])
    db.register("s", pa.Table.from_pylist(source_rows, schema=SCHEMA))
    db.execute(
        "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED AND s.value = 'gone' THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET value = s.value WHEN NOT MATCHED THEN INSERT (id, part, value) "
        "VALUES (s.id, s.part, s.value)"
    )
    return [dict(zip(("id", "part", "value"), row, strict=True)) for row in db.execute("SELECT * FROM t").fetchall()]


@pytest.mark.usefixtures("no_spark")
def test_merge_with_structured_clauses_from_a_delta_source_matches_duckdb(
    table_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # execution="auto" runs this MERGE in the worker (Spark is unreachable). The same clauses
    # from a Delta source on Spark: test_small_merge_job (one spark-submit proves both the rows
    # and the job's size there).
    import pyarrow as pa

    from tests.airflow_layer import SCHEMA

    rows = make_table(table_path)
    source_path = str(tmp_path / "source")
    source_rows = [
        {"id": 1, "part": "b", "value": "new1"},
        {"id": 4, "part": "a", "value": "gone"},
        {"id": 100, "part": "a", "value": "v100"},
    ]
    DeltaTable.create(source_path, SCHEMA).append(pa.Table.from_pylist(source_rows, schema=SCHEMA))
    operator = DeltaMergeOperator(
        task_id="m",
        table=table_path,
        source={"delta": {"uri": source_path}},
        on="t.id = s.id",
        source_alias="s",
        target_alias="t",
        clauses=STRUCTURED_CLAUSES,
        execution="auto",
    )

    result = operator.execute(context(task_id="m"))
    assert "running in the worker" in capsys.readouterr().out  # the task log

    assert_oracles_read(table_path, duckdb_merge(rows, source_rows))
    assert (result["version"], result["operation"]) == (3, "MERGE")
    metrics = result["metrics"]
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsDeleted"], metrics["numTargetRowsInserted"]) == (
        1,
        1,
        1,
    )


def test_bad_execution_options_fail_when_the_dag_is_parsed() -> None:
    with pytest.raises(InvalidArgumentError, match="max_attempts"):
        DeltaUpdateOperator(task_id="u", table="/t", set={"a": "1"}, max_attempts=0)
    with pytest.raises(InvalidArgumentError, match="reader"):
        DeltaUpdateOperator(task_id="u", table="/t", set={"a": "1"}, reader="pandas")


def test_the_reader_reaches_the_jobs_execution_options() -> None:
    # The operator's reader is the spec's: the Spark job reads the target with it.
    for reader in ("auto", "engine", "spark"):
        operator = DeltaDeleteOperator(task_id="d", table="/t", predicate="id = 1", reader=reader)
        assert operator._options().reader == reader
