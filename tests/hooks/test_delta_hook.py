"""``DeltaHook``: the ``delta`` connection, commits found in the log, and spark-submit of a DML program.

The submit tests run the real ``SparkSubmitHook`` and ``spark-submit``: in local mode and
against the session's standalone master and worker (client mode). The program is
``dml_stand_in.py``, which speaks the DML job's contract (spec file or JSON, result and
error lines, commit with the task's appId) and finds rows on the executors through the
engine shipped as py_files. Tables are checked with delta-rs and delta-kernel-rs.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import (
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    DeltaError,
    DeltaTable,
    InvalidArgumentError,
    InvalidFilterError,
    stage_delete,
)
from airflow_delta.hooks.delta import (
    DeltaHook,
    DeltaSparkJobError,
    _path_with_spark_submit,
    error_from_line,
)
from airflow_delta.spark.job_result import JobResult
from airflow_delta.spark.specs import DeleteSpec, ExecutionOptions, TableRef, TaskIdentity
from tests.airflow_layer import SCHEMA, STAND_IN, make_table, set_connection, tiny_job_driver_conf
from tests.oracles import assert_oracles_read
from tests.standalone_cluster import STANDALONE_JAVA_OPTIONS

pytestmark = pytest.mark.usefixtures("airflow_home")

IDENTITY = TaskIdentity("dag", "delete_rows", "manual__2026-01-01", -1)


def _spec(path: str, predicate: str | None, identity: TaskIdentity = IDENTITY, **options: object) -> DeleteSpec:
    return DeleteSpec(
        table=TableRef(uri=path), predicate=predicate, identity=identity, options=ExecutionOptions(**options)
    )


# The jobs of these tests run without the driver's web UI: nobody opens it, and starting it
# costs about as much as a small job's own work (the operators' tests' `local_spark` does the same).
NO_UI = {"spark.ui.enabled": "false"}


def _local_connections(monkeypatch: pytest.MonkeyPatch, spark_conf: dict[str, str] | None = None) -> None:
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "local[2]"})
    extra: dict[str, object] = {"spark_conn_id": "spark_local", "spark_conf": json.dumps(spark_conf or {})}
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": extra})


def _local_job_connections(monkeypatch: pytest.MonkeyPatch, spark_conf: dict[str, str] | None = None) -> None:
    """The connections of the tests' real local-mode jobs: as :func:`_local_connections`, without the web UI,
    the driver JVM tuned for a tiny job (:func:`tests.airflow_layer.tiny_job_driver_conf`)."""
    _local_connections(monkeypatch, {**NO_UI, **tiny_job_driver_conf(), **(spark_conf or {})})


# --------------------------------------------------------------------------- connection


def test_connection_extra_gives_storage_options_spark_connection_conf_and_deploy_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_connection(
        monkeypatch,
        "lake",
        {
            "conn_type": "delta",
            "extra": {
                "storage_options": '{"AWS_REGION": "eu-west-1"}',
                "spark_conn_id": "spark_yarn",
                "spark_conf": {"spark.executor.memory": "4g"},
                "deploy_mode": "cluster",
            },
        },
    )
    settings = DeltaHook("lake").settings

    assert settings.storage_options == {"AWS_REGION": "eu-west-1"}
    assert settings.spark_conn_id == "spark_yarn"
    assert settings.spark_conf == {"spark.executor.memory": "4g"}
    assert settings.deploy_mode == "cluster"
    assert DeltaHook("lake", deploy_mode="client", spark_conn_id="other").settings.deploy_mode == "client"


def test_a_missing_default_connection_means_defaults_and_a_missing_named_one_fails() -> None:
    settings = DeltaHook().settings
    assert (settings.storage_options, settings.spark_conn_id, settings.deploy_mode) == ({}, "spark_default", None)

    with pytest.raises(InvalidArgumentError, match="no connection 'nowhere' exists"):
        _ = DeltaHook("nowhere").settings


@pytest.mark.parametrize(
    ("extra", "argument"),
    [
        ({"storage_options": "{not json"}, "connection 'bad' extra storage_options"),
        ({"spark_conf": '["a list"]'}, "connection 'bad' extra spark_conf"),
        ({"deploy_mode": "remote"}, "connection 'bad' extra deploy_mode"),
    ],
)
def test_a_bad_connection_field_is_named(monkeypatch: pytest.MonkeyPatch, extra: dict, argument: str) -> None:
    set_connection(monkeypatch, "bad", {"conn_type": "delta", "extra": extra})

    with pytest.raises(InvalidArgumentError) as raised:
        _ = DeltaHook("bad").settings

    assert raised.value.argument == argument


def test_table_opens_the_uri_with_the_connection_storage_options(
    monkeypatch: pytest.MonkeyPatch, table_path: str
) -> None:
    make_table(table_path)
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"storage_options": "{}"}})

    table = DeltaHook().table(table_path)

    assert table.version() == 2
    assert table.snapshot().to_arrow().num_rows == 20


# --------------------------------------------------------------------------- spark-submit arguments


def test_cluster_mode_on_a_standalone_master_is_refused_before_spark_submit_runs(
    monkeypatch: pytest.MonkeyPatch, table_path: str
) -> None:
    set_connection(monkeypatch, "spark_standalone", {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077})
    set_connection(
        monkeypatch,
        "delta_default",
        {"conn_type": "delta", "extra": {"spark_conn_id": "spark_standalone", "deploy_mode": "cluster"}},
    )

    with pytest.raises(InvalidArgumentError, match="refuses cluster deploy mode for Python applications") as raised:
        DeltaHook().submit(_spec(table_path, "id = 1"))

    assert raised.value.argument == "deploy_mode"
    assert "set deploy_mode to client" in str(raised.value)


def test_the_submit_hook_runs_the_installed_program_with_the_engine_zip_and_the_worker_python(
    monkeypatch: pytest.MonkeyPatch, table_path: str
) -> None:
    import sys

    _local_connections(monkeypatch, {"spark.sql.shuffle.partitions": "2"})
    hook = DeltaHook().spark_submit_hook(_spec(table_path, "id = 1"), conf={"spark.sql.shuffle.partitions": "3"})
    command = hook._build_spark_submit_command(str(DeltaHook.DML_APPLICATION))

    assert command[:3] == ["spark-submit", "--master", "local[2]"]
    assert command[-1] == str(DeltaHook.DML_APPLICATION)
    assert DeltaHook.DML_APPLICATION.parts[-3:] == ("spark", "jobs", "dml.py")
    confs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    assert "spark.sql.shuffle.partitions=3" in confs  # the operator's conf wins over the connection's
    assert f"spark.pyspark.python={sys.executable}" in confs
    py_files = command[command.index("--py-files") + 1]
    assert Path(py_files).name.startswith("airflow_delta-py-files-") and Path(py_files).is_file()


def test_a_small_job_runs_its_driver_jvm_with_c1_only_and_no_ui_unless_the_conf_says_otherwise(
    monkeypatch: pytest.MonkeyPatch, table_path: str
) -> None:
    from airflow_delta.hooks.delta import SMALL_JOB_DRIVER_JAVA_OPTIONS

    def confs(**kwargs: object) -> dict[str, str]:
        hook = DeltaHook().spark_submit_hook(_spec(table_path, "id = 1"), **kwargs)  # type: ignore[arg-type]
        command = hook._build_spark_submit_command(str(DeltaHook.DML_APPLICATION))
        given = [command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf"]
        return {key: value for key, value in given}

    def java_options(**kwargs: object) -> list[str]:
        return confs(**kwargs).get("spark.driver.extraJavaOptions", "").split()

    _local_connections(monkeypatch, {})
    # (The class archive's options follow: tests/hooks/test_driver_jvm.py.)
    assert java_options(small_job=True)[0] == SMALL_JOB_DRIVER_JAVA_OPTIONS
    assert SMALL_JOB_DRIVER_JAVA_OPTIONS not in java_options()
    own = {"spark.driver.extraJavaOptions": "-Xss4m"}
    assert java_options(small_job=True, conf=own) == ["-Xss4m"]
    # No web UI for a small job, unless the operator's or the connection's conf asks for one.
    assert confs(small_job=True)["spark.ui.enabled"] == "false"
    assert "spark.ui.enabled" not in confs()
    assert confs(small_job=True, conf={"spark.ui.enabled": "true"})["spark.ui.enabled"] == "true"
    _local_connections(monkeypatch, {"spark.ui.enabled": "true"})
    assert confs(small_job=True)["spark.ui.enabled"] == "true"


def test_spark_submit_is_found_next_to_the_worker_interpreter_when_not_on_path() -> None:
    import sys

    bin_dir = str(Path(sys.executable).parent)

    assert _path_with_spark_submit("/nonexistent") == f"/nonexistent:{bin_dir}"
    assert _path_with_spark_submit(bin_dir) == bin_dir


# --------------------------------------------------------------------------- errors


def test_an_error_line_becomes_the_engine_error_class_with_the_job_message() -> None:
    line = (
        'AIRFLOW_DELTA_ERROR {"class": "ConcurrentAppendException", "message": "files were added", "retryable": true}'
    )

    error = error_from_line(line)

    assert type(error) is ConcurrentAppendException
    assert str(error) == "files were added"
    assert error.retryable


def test_log_text_that_lands_after_an_error_line_is_ignored() -> None:
    # spark-submit relays the driver's stdout in chunks beside its own stderr log, so a log
    # line can be glued to the end of ours before its newline (seen in CI).
    line = (
        'AIRFLOW_DELTA_ERROR {"class": "ConcurrentAppendException", "message": "files were added", "retryable": true}'
        "26/11/25 18:36:57 INFO SparkContext: Successfully stopped SparkContext"
    )

    error = error_from_line(line)

    assert type(error) is ConcurrentAppendException and str(error) == "files were added"


def test_an_unknown_or_unreadable_error_line_becomes_a_plain_delta_error() -> None:
    unknown = error_from_line('AIRFLOW_DELTA_ERROR {"class": "os.system", "message": "m", "retryable": false}')
    unreadable = error_from_line("AIRFLOW_DELTA_ERROR {oops")

    assert type(unknown) is DeltaError and str(unknown) == "m"
    assert type(unreadable) is DeltaError and "{oops" in str(unreadable)


# --------------------------------------------------------------------------- find_commit


def _tagged_delete(table: DeltaTable, predicate: str, identity: TaskIdentity, attempts: int) -> dict[str, int]:
    """A DELETE committed as a job commits it: txn appId, and the contract's commitInfo tags."""
    with table.transaction() as txn:
        txn.set_app_transaction(identity.app_id, 1)
        metrics = stage_delete(txn, predicate)
        tags = {
            "airflowDelta.appId": identity.app_id,
            "airflowDelta.attempts": str(attempts),
            "airflowDelta.dagId": identity.dag_id,
            "airflowDelta.taskId": identity.task_id,
            "airflowDelta.runId": identity.run_id,
            "airflowDelta.mapIndex": str(identity.map_index),
        }
        txn.commit("DELETE", {"predicate": [predicate]}, metrics, tags=tags)
    return metrics


def test_find_commit_rebuilds_the_result_from_the_log(table_path: str) -> None:
    make_table(table_path)
    table = DeltaTable(table_path)
    deleted = _tagged_delete(table, "id < 3", IDENTITY, attempts=2)
    # Later commits by others: the search goes past them.
    for i in range(40):
        table.append(pa.table({"id": [100 + i], "part": ["a"], "value": ["x"]}, schema=SCHEMA))

    found = DeltaHook().find_commit(table, IDENTITY.app_id)

    assert found is not None
    assert (found.version, found.read_version, found.operation, found.attempts) == (3, 2, "DELETE", 2)
    assert found.metrics["numDeletedRows"] == deleted["numDeletedRows"] == 3
    assert found.metrics == deleted


def test_find_commit_is_none_when_the_app_id_never_committed(table_path: str) -> None:
    make_table(table_path)
    table = DeltaTable(table_path)
    _tagged_delete(table, "id < 3", TaskIdentity("dag", "another_task", IDENTITY.run_id), attempts=1)

    assert DeltaHook().find_commit(table, IDENTITY.app_id) is None


# --------------------------------------------------------------------------- spark-submit, for real


@pytest.mark.slow
def test_submit_in_local_mode_commits_once_with_the_task_app_id(
    monkeypatch: pytest.MonkeyPatch, table_path: str
) -> None:
    rows = make_table(table_path, dvs=True)
    _local_job_connections(monkeypatch)
    hook = DeltaHook()

    # A few small files: the operator submits it as a small job (tests/operators, is_small_job).
    printed = hook.submit(_spec(table_path, "value = 'v3' OR id > 17"), application=STAND_IN, small_job=True)

    table = DeltaTable(table_path)
    found = hook.find_commit(table, IDENTITY.app_id)
    assert found is not None and printed is not None
    assert (found.version, found.read_version, found.operation) == (3, 2, "DELETE")
    assert found.metrics["numDeletedRows"] == printed.metrics["numDeletedRows"] == 3
    assert found.metrics["numDeletionVectorsAdded"] >= 1
    assert_oracles_read(table_path, [r for r in rows if not (r["value"] == "v3" or r["id"] > 17)])


@pytest.mark.slow
def test_submit_to_a_standalone_cluster_in_client_mode(
    monkeypatch: pytest.MonkeyPatch, table_path: str, standalone_cluster: object, capfd: pytest.CaptureFixture[str]
) -> None:
    rows = make_table(table_path)
    host, port = standalone_cluster.master_url.rsplit(":", 1)  # type: ignore[attr-defined]
    set_connection(monkeypatch, "spark_standalone", {"conn_type": "spark", "host": host, "port": int(port)})
    executor_conf = {
        **NO_UI,
        **tiny_job_driver_conf(),  # the driver runs here, in client mode
        "spark.airflowDeltaTest.reportExecutorEngine": "true",
        # The executor JVM lives for one small job: C1 only, the serial GC (as the cluster's daemons).
        "spark.executor.extraJavaOptions": STANDALONE_JAVA_OPTIONS,
    }
    set_connection(
        monkeypatch,
        "delta_default",
        {
            "conn_type": "delta",
            "extra": {"spark_conn_id": "spark_standalone", "deploy_mode": "client", "spark_conf": executor_conf},
        },
    )
    hook = DeltaHook()

    hook.submit(_spec(table_path, "id IN (1, 2, 3)"), application=STAND_IN, small_job=True)

    # The executor imported the engine from the job's py_files zip, not from an installation.
    logged = capfd.readouterr()
    planned = next(line for line in (logged.out + logged.err).splitlines() if "AIRFLOW_DELTA_STAND_IN planned" in line)
    assert ".zip/airflow_delta/engine/__init__.py" in planned and "airflow_delta-py-files-" in planned, planned

    found = hook.find_commit(DeltaTable(table_path), IDENTITY.app_id)
    assert found is not None and found.metrics["numDeletedRows"] == 3
    assert_oracles_read(table_path, [r for r in rows if r["id"] not in (1, 2, 3)])
    # The executor ran on the worker, in the worker's own directory.
    app_dirs = list((standalone_cluster.worker_dir / "work").glob("app-*"))  # type: ignore[attr-defined]
    assert app_dirs, standalone_cluster.logs()  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_bad_predicate_fails_with_the_engine_error_and_the_driver_log_tail(
    monkeypatch: pytest.MonkeyPatch, table_path: str, capfd: pytest.CaptureFixture[str]
) -> None:
    rows = make_table(table_path)
    # Not a small job: the operator cannot plan a predicate on a column that does not exist.
    _local_job_connections(monkeypatch)

    with pytest.raises(InvalidFilterError, match="no_such_column") as raised:
        DeltaHook().submit(_spec(table_path, "no_such_column = 1"), application=STAND_IN)

    assert not raised.value.retryable
    logged = capfd.readouterr()
    tail = (logged.out + logged.err).split("The Spark job failed; the last", 1)[1]
    assert "AIRFLOW_DELTA_ERROR" in tail and "no_such_column" in tail
    assert DeltaTable(table_path).version() == 2
    assert_oracles_read(table_path, rows)


@pytest.mark.slow
def test_a_conflict_with_a_concurrent_delete_raises_the_retryable_engine_error(
    monkeypatch: pytest.MonkeyPatch, table_path: str
) -> None:
    rows = make_table(table_path)
    # Between the job's planning and its commit, another writer deletes partition a,
    # removing the files the job read to find id 2.
    _local_job_connections(monkeypatch, {"spark.airflowDeltaTest.deleteBeforeCommit": "part = 'a'"})

    with pytest.raises(ConcurrentDeleteReadException) as raised:
        DeltaHook().submit(_spec(table_path, "id = 2", max_attempts=1), application=STAND_IN, small_job=True)

    assert raised.value.retryable
    assert DeltaTable(table_path).version() == 3  # the other writer's commit only
    assert_oracles_read(table_path, [r for r in rows if r["part"] != "a"])


def _wait_for_staged(marker: Path, timeout: float = 300) -> int:
    """Wait until the stand-in's driver staged its work (its marker file); the driver's process id."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert time.monotonic() < deadline, "the job never reached its commit"
        time.sleep(0.1)
    return int(marker.read_text(encoding="utf-8"))


def _wait_until_dead(pid: int, timeout: float = 60) -> None:
    """Wait until process ``pid`` has exited (gone, or a zombie: it runs no code any more)."""
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + timeout
    while True:
        try:
            # The state follows the command name in parentheses, which may itself hold spaces.
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("Z", "X"):
            return
        assert time.monotonic() < deadline, f"the killed driver (process {pid}) is still running ({state})"
        time.sleep(0.1)


@pytest.mark.slow
def test_on_kill_during_a_running_job_leaves_no_commit_and_a_readable_table(
    monkeypatch: pytest.MonkeyPatch, table_path: str
) -> None:
    rows = make_table(table_path)
    staged = Path(table_path).parent / "staged"
    _local_job_connections(
        monkeypatch,
        {"spark.airflowDeltaTest.sleepBeforeCommit": "10", "spark.airflowDeltaTest.stagedMarker": str(staged)},
    )
    hook = DeltaHook()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            hook.submit(_spec(table_path, "id = 4"), application=STAND_IN, small_job=True)
        except BaseException as exc:
            failure.append(exc)

    submitting = threading.Thread(target=run)
    submitting.start()
    # Kill once the driver is in its sleeping stage (it planned, and would commit after).
    driver = _wait_for_staged(staged)
    hook.on_kill()
    submitting.join(timeout=120)

    assert not submitting.is_alive()
    assert failure and isinstance(failure[0], DeltaSparkJobError)
    # The driver process that would have committed is gone: nothing can commit any more.
    _wait_until_dead(driver)
    assert DeltaTable(table_path).version() == 2
    assert DeltaHook().find_commit(DeltaTable(table_path), IDENTITY.app_id) is None
    assert_oracles_read(table_path, rows)


@pytest.mark.slow
def test_a_late_commit_of_an_earlier_try_fails_the_conflict_check_and_reports_the_retry_commit(
    monkeypatch: pytest.MonkeyPatch, table_path: str
) -> None:
    rows = make_table(table_path)
    staged = Path(table_path).parent / "staged"
    commit_now = Path(table_path).parent / "commit-now"
    _local_job_connections(
        monkeypatch,
        {"spark.airflowDeltaTest.commitAfterFile": str(commit_now), "spark.airflowDeltaTest.stagedMarker": str(staged)},
    )
    hook = DeltaHook()
    printed: list[JobResult | None] = []
    failure: list[BaseException] = []

    def earlier_try() -> None:
        try:
            printed.append(hook.submit(_spec(table_path, "id = 5"), application=STAND_IN, small_job=True))
        except BaseException as exc:
            failure.append(exc)

    late = threading.Thread(target=earlier_try)
    late.start()
    _wait_for_staged(staged)
    # While the earlier try's driver waits to commit, the retry commits with the same appId;
    # then the earlier try's driver goes on to its commit.
    try:
        retry = _tagged_delete(DeltaTable(table_path), "id = 5", IDENTITY, attempts=1)
    finally:
        commit_now.touch()
    late.join(timeout=300)

    assert not failure, failure
    # The late commit lost the conflict check on the appId; the job reports the retry's commit.
    assert printed[0] is not None and printed[0].version == 3
    assert printed[0].metrics["numDeletedRows"] == retry["numDeletedRows"] == 1
    assert DeltaTable(table_path).version() == 3
    assert_oracles_read(table_path, [r for r in rows if r["id"] != 5])


def test_files_summary_counts_files_bytes_and_partitions_as_delta_rs_lists_them(tmp_path: Path) -> None:
    import deltalake

    from airflow_delta.hooks.delta import files_summary

    make_table(tmp_path / "t")  # partitions a and b, two appends
    DeltaTable(str(tmp_path / "t")).append(pa.Table.from_pylist([{"id": 99, "part": None, "value": "x"}], schema=SCHEMA))
    actions = pa.table(deltalake.DeltaTable(str(tmp_path / "t")).get_add_actions(flatten=True)).to_pydict()
    partitions = set(actions["partition.part"])  # a, b and null
    expected = f"{len(actions['path'])} file(s), {sum(actions['size_bytes'])} bytes in {len(partitions)} partition(s)"

    assert files_summary(DeltaTable(str(tmp_path / "t")).snapshot().files()) == expected
    assert len(partitions) == 3
    unpartitioned = DeltaTable.create(str(tmp_path / "u"), SCHEMA)
    assert files_summary(unpartitioned.snapshot().files()) == "0 file(s), 0 bytes in 0 partition(s)"
