"""The maintenance operators: VACUUM, OPTIMIZE, CHECKPOINT and RESTORE from a task.

Every table is real and every result is checked against delta-rs and delta-kernel-rs.
Runs that must stay in the worker point the ``delta`` connection at a Spark connection
nothing listens on, so any submit would fail the test; the test that must see ``auto``
choose Spark points it at a ``spark-submit`` that is not installed, which fails at once.
VACUUM submits one job to a local Spark; OPTIMIZE's job on Spark is in
tests/operators/test_spark_application.py (it also shows the job's live UI).
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from airflow.sdk.exceptions import AirflowSkipException

from airflow_delta.engine import DeltaTable, InvalidArgumentError
from airflow_delta.operators import maintenance
from airflow_delta.operators.maintenance import (
    CheckpointOperator,
    OptimizeOperator,
    RestoreOperator,
    VacuumOperator,
)
from airflow_delta.operators.retry import DeltaNonRetryableError
from airflow_delta.provider import get_provider_info
from tests.airflow_layer import SCHEMA, context, make_table, set_connection
from tests.oracles import assert_oracles_read, read_with_deltars

pytestmark = pytest.mark.usefixtures("airflow_home")

OPERATORS = (VacuumOperator, OptimizeOperator, CheckpointOperator, RestoreOperator)




def _data_files(path: str) -> set[str]:
    return {str(p.relative_to(path)) for p in Path(path).rglob("*.parquet") if "_delta_log" not in p.parts}


def _delete_partition_a(path: str) -> int:
    """DELETE WHERE part = 'a' through the engine: two tombstones; returns the new version."""
    result = DeltaTable(path).delete("part = 'a'")
    assert result.version is not None
    return result.version


# --------------------------------------------------------------------------- declarations


@pytest.mark.parametrize("operator", OPERATORS)
def test_every_parameter_is_documented(operator: type) -> None:
    documented = set(re.findall(r":param (\w+):", operator.__doc__ or ""))
    parameters = set(inspect.signature(operator.__init__).parameters) - {"self", "kwargs"}
    assert parameters <= documented


def test_one_zorder_column_may_be_a_plain_string() -> None:
    assert OptimizeOperator(task_id="o", table="/t", zorder_by="id").zorder_by == ("id",)
    assert OptimizeOperator(task_id="o", table="/t", zorder_by=["id", "value"]).zorder_by == ("id", "value")


def test_the_provider_lists_the_maintenance_operators() -> None:
    modules = [m for entry in get_provider_info()["operators"] for m in entry["python-modules"]]
    assert "airflow_delta.operators.maintenance" in modules


@pytest.mark.parametrize(
    ("build", "argument"),
    [
        (lambda: VacuumOperator(task_id="v", table="/t", mode="quick"), "mode"),  # type: ignore[arg-type]
        (lambda: VacuumOperator(task_id="v", table="/t", parallelism=0), "parallelism"),
        (lambda: OptimizeOperator(task_id="o", table="/t", execution="cluster"), "execution"),  # type: ignore[arg-type]
        (lambda: OptimizeOperator(task_id="o", table="/t", target_file_size=0), "target_file_size"),
        (lambda: OptimizeOperator(task_id="o", table="/t", max_deleted_rows_ratio=2.0), "max_deleted_rows_ratio"),
        (lambda: CheckpointOperator(task_id="c", table="/t", kind="weekly"), "kind"),
        (lambda: RestoreOperator(task_id="r", table="/t"), "version"),
        (lambda: RestoreOperator(task_id="r", table="/t", version=1, timestamp="2026-01-01"), "version"),
    ],
)
def test_bad_arguments_fail_when_the_dag_is_parsed_naming_the_argument(build: object, argument: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        build()  # type: ignore[operator]
    assert argument in str(raised.value)


# --------------------------------------------------------------------------- VACUUM


@pytest.mark.usefixtures("no_spark")
def test_vacuum_dry_run_reports_counts_and_writes_the_list_to_a_file_not_xcom(table_path: str, tmp_path: Path) -> None:
    rows = make_table(table_path)
    _delete_partition_a(table_path)
    before = _data_files(table_path)
    listing = tmp_path / "vacuum.txt"

    result = VacuumOperator(
        task_id="v",
        table=table_path,
        retention="interval 0 hours",
        enforce_retention_duration=False,
        dry_run=True,
        file_list_path=str(listing),
    ).execute(context())

    removed_a = {f for f in before if f.startswith("part=a")}
    assert result["metrics"]["numFilesToDelete"] == 2
    assert result["metrics"]["sizeOfDataToDelete"] == sum((Path(table_path) / f).stat().st_size for f in removed_a)
    assert result["metrics"]["numDeletedFiles"] == 0
    assert (result["start_version"], result["end_version"]) == (None, None)
    assert "paths" not in str(result) and not any(f in str(result) for f in removed_a)
    assert set(listing.read_text().split()) == removed_a
    assert _data_files(table_path) == before
    assert_oracles_read(table_path, [r for r in rows if r["part"] != "a"])


@pytest.mark.usefixtures("no_spark")
def test_vacuum_deletes_tombstoned_files_commits_start_and_end_and_logs_the_list(
    table_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = make_table(table_path)
    version = _delete_partition_a(table_path)
    removed_a = {f for f in _data_files(table_path) if f.startswith("part=a")}

    result = VacuumOperator(
        task_id="v", table=table_path, mode="full", retention=timedelta(0), enforce_retention_duration=False
    ).execute(context())

    assert result["metrics"]["numDeletedFiles"] == 2
    assert (result["start_version"], result["end_version"]) == (version + 1, version + 2)
    assert not any(f.startswith("part=a") for f in _data_files(table_path))
    task_log = capsys.readouterr().out  # Airflow's task logger writes to stdout here
    assert all(f in task_log for f in removed_a)
    operations = [c["operation"] for c in DeltaTable(table_path).history(limit=2)]
    assert operations == ["VACUUM END", "VACUUM START"]
    assert_oracles_read(table_path, [r for r in rows if r["part"] != "a"])


@pytest.mark.usefixtures("no_spark")
def test_vacuum_refuses_a_retention_shorter_than_the_tables_and_only_if_needed_skips(table_path: str) -> None:
    make_table(table_path)
    _delete_partition_a(table_path)
    before = _data_files(table_path)

    with pytest.raises(DeltaNonRetryableError) as raised:
        VacuumOperator(task_id="v", table=table_path, retention="interval 1 hour").execute(context())
    assert raised.value.error_class == "RetentionTooShortError"
    # The tombstones are minutes old: a default-retention vacuum has nothing to do.
    with pytest.raises(AirflowSkipException, match="would delete no file"):
        VacuumOperator(task_id="v", table=table_path, only_if_needed=True).execute(context())
    assert _data_files(table_path) == before
    assert DeltaTable(table_path).version() == 3


@pytest.mark.usefixtures("no_spark")
def test_lite_vacuum_only_if_needed_skips_once_the_files_are_gone(
    table_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 20 item 14: lite used to re-plan files it had deleted, so it never skipped.
    make_table(table_path)
    _delete_partition_a(table_path)
    lite = {"mode": "lite", "retention": timedelta(0), "enforce_retention_duration": False, "only_if_needed": True}
    first = VacuumOperator(task_id="v", table=table_path, **lite).execute(context())
    assert first["metrics"]["numDeletedFiles"] == 2
    assert "VACUUM planned" in capsys.readouterr().out
    version = DeltaTable(table_path).version()
    with pytest.raises(AirflowSkipException, match="would delete no file"):
        VacuumOperator(task_id="v", table=table_path, **lite).execute(context(run_id="next"))
    assert DeltaTable(table_path).version() == version  # no VACUUM START / END pair for nothing


# --------------------------------------------------------------------------- OPTIMIZE


@pytest.mark.usefixtures("no_spark")
def test_optimize_auto_compacts_small_work_in_the_worker_and_then_skips_when_not_needed(table_path: str) -> None:
    rows = make_table(table_path)  # two appends: two files per partition

    result = OptimizeOperator(task_id="o", table=table_path).execute(context())

    assert result["execution"] == "worker"
    assert result["version"] == 3 and result["versions"] == [3]
    metrics = result["metrics"]
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"], metrics["partitionsOptimized"]) == (4, 2, 2)
    assert sorted(p["files_in"] for p in result["plan"]) == [2, 2]
    assert len(deltalake.DeltaTable(table_path).file_uris()) == 2
    assert DeltaTable(table_path).history(limit=1)[0]["operation"] == "OPTIMIZE"
    assert_oracles_read(table_path, rows)
    with pytest.raises(AirflowSkipException, match="would gain nothing"):
        OptimizeOperator(task_id="o", table=table_path, only_if_needed=True).execute(context(run_id="next"))
    assert DeltaTable(table_path).version() == 3


@pytest.mark.usefixtures("no_spark")
def test_optimize_clusters_a_clustered_table_and_full_reclusters_it(table_path: str) -> None:
    import pyarrow as pa

    table = DeltaTable.create(table_path, pa.schema([("id", pa.int64()), ("x", pa.int64())]))
    for start in (0, 10):
        table.append(pa.table({"id": list(range(start, start + 10)), "x": list(range(10))}))
    table.cluster_by(["x", "id"])
    # only_if_needed does not consult compaction health on a clustered table: the two files get clustered.
    result = OptimizeOperator(task_id="o", table=table_path, only_if_needed=True).execute(context())
    assert result["metrics"]["numFilesRemoved"] == 2
    history = DeltaTable(table_path).history(limit=1)[0]
    assert history["operationParameters"]["clusterBy"] == '["x","id"]'
    # One ZCube alone is clustered: a second run commits nothing.
    again = OptimizeOperator(task_id="o", table=table_path).execute(context(run_id="again"))
    assert again["versions"] == [] and DeltaTable(table_path).version() == 4
    full = OptimizeOperator(task_id="o", table=table_path, full=True).execute(context(run_id="full"))
    assert full["metrics"]["numFilesRemoved"] == 1
    with pytest.raises(DeltaNonRetryableError, match="clustered by"):
        OptimizeOperator(task_id="o", table=table_path, zorder_by="id").execute(context(run_id="zorder"))
    assert_oracles_read(table_path, [{"id": i, "x": i % 10} for i in range(20)])


@pytest.mark.usefixtures("no_spark")
def test_optimize_dry_run_plans_per_partition_and_commits_nothing(table_path: str) -> None:
    rows = make_table(table_path)
    before = _data_files(table_path)

    result = OptimizeOperator(task_id="o", table=table_path, where="part = 'b'", dry_run=True).execute(context())

    assert result["dry_run"] is True and result["version"] is None
    assert [(p["partition_values"], p["files_in"], p["files_out"]) for p in result["plan"]] == [({"part": "b"}, 2, 1)]
    assert _data_files(table_path) == before
    assert DeltaTable(table_path).version() == 2
    assert_oracles_read(table_path, rows)


@pytest.mark.usefixtures("no_spark")
def test_optimize_where_on_a_data_column_fails_at_once(table_path: str) -> None:
    make_table(table_path)
    with pytest.raises(DeltaNonRetryableError, match="partition"):
        OptimizeOperator(task_id="o", table=table_path, where="id > 3").execute(context())
    assert DeltaTable(table_path).version() == 2


@pytest.fixture
def spark_not_installed(airflow_home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A delta connection whose Spark connection runs a ``spark-submit`` binary that is not installed; its name.

    A submit fails the moment it starts the binary, where an unreachable master would
    keep the driver retrying its registration for a minute before giving up.
    """
    binary = "spark3-submit"  # one of the names the apache-spark hook accepts
    if shutil.which(binary):
        pytest.fail(f"{binary} is on PATH: this test needs a spark-submit binary that is not installed")
    set_connection(
        monkeypatch, "spark_missing", {"conn_type": "spark", "host": "local[2]", "extra": {"spark-binary": binary}}
    )
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"spark_conn_id": "spark_missing"}})
    return binary


def test_optimize_auto_goes_to_spark_above_the_threshold(table_path: str, spark_not_installed: str) -> None:
    make_table(table_path)
    operator = OptimizeOperator(task_id="o", table=table_path, worker_threshold_bytes=1)
    # The submit fails as it starts the binary: the operator chose Spark, not the worker.
    with pytest.raises(FileNotFoundError) as raised:
        operator.execute(context())
    assert spark_not_installed in str(raised.value)
    assert DeltaTable(table_path).version() == 2


# OPTIMIZE on Spark (execution="spark": what it commits and returns) is the job of
# tests/operators/test_spark_application.py's live-UI test: one spark-submit proves both.


def _commit_info(path: str, version: int) -> dict[str, Any]:
    lines = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return next(json.loads(line)["commitInfo"] for line in lines if line.startswith('{"commitInfo"'))


@pytest.mark.usefixtures("no_spark")
def test_an_optimize_retry_resumes_after_the_batch_its_first_try_committed(table_path: str) -> None:
    rows = make_table(table_path)
    table = DeltaTable(table_path)
    b_file = Path(table_path) / table.snapshot().files("part = 'b'").column("path").to_pylist()[0]
    saved = b_file.read_bytes()
    b_file.unlink()  # partition b, the second batch, cannot be read on the first try
    operator = OptimizeOperator(task_id="o", table=table_path, batch_size=1, retries=1)

    with pytest.raises(DeltaNonRetryableError):
        operator.execute(context())
    assert table.version() == 3
    a_output = set(table.snapshot().files("part = 'a'").column("path").to_pylist())
    b_file.write_bytes(saved)

    retry = operator.execute(context())  # the same task instance

    assert retry["versions"] == [3, 4] and retry["version"] == 4
    assert (retry["metrics"]["numFilesRemoved"], retry["metrics"]["numFilesAdded"], retry["metrics"]["numBatches"]) == (4, 2, 2)
    assert set(table.snapshot().files("part = 'a'").column("path").to_pylist()) == a_output  # batch 1 not redone
    tags = [_commit_info(table_path, v)["tags"] for v in (3, 4)]
    assert [t["airflowDelta.optimizeBatch"] for t in tags] == ["1/2", "2/2"]
    assert tags[0]["airflowDelta.appId"] == tags[1]["airflowDelta.appId"]
    assert {t["airflowDelta.runId"] for t in tags} == {"manual__1"}
    assert_oracles_read(table_path, rows)


@pytest.mark.usefixtures("no_spark")
def test_an_optimize_retry_after_a_finished_try_returns_its_result_and_does_not_skip(table_path: str) -> None:
    rows = make_table(table_path)
    first = OptimizeOperator(task_id="o", table=table_path).execute(context())
    more = [{"id": 100 + i, "part": "a", "value": "new"} for i in range(2)]
    DeltaTable(table_path).append(pa.Table.from_pylist(more[:1], schema=SCHEMA))
    DeltaTable(table_path).append(pa.Table.from_pylist(more[1:], schema=SCHEMA))  # two new small files

    retry = OptimizeOperator(task_id="o", table=table_path, only_if_needed=True).execute(context())

    assert (retry["versions"], retry["metrics"]) == (first["versions"], first["metrics"])
    assert DeltaTable(table_path).version() == 5  # nothing rewritten: the new files wait for the next run
    assert len(deltalake.DeltaTable(table_path).file_uris()) == 4
    assert_oracles_read(table_path, rows + more)


@pytest.mark.usefixtures("no_spark")
def test_optimize_dry_run_return_value_stays_small_however_many_partitions(table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["part"])
    data = [{"id": i, "part": f"p{i % 60:02d}", "value": "v"} for i in range(120)]
    table.append(pa.Table.from_pylist(data[:60], schema=SCHEMA))
    table.append(pa.Table.from_pylist(data[60:], schema=SCHEMA))

    result = OptimizeOperator(task_id="o", table=table_path, dry_run=True).execute(context())

    assert result["plan_partitions"] == 60 and len(result["plan"]) == maintenance.MAX_LISTED_IN_XCOM
    assert result["metrics"]["numFilesRemoved"] == 120
    assert len(json.dumps(result)) < 8_000
    assert DeltaTable(table_path).version() == 2


# --------------------------------------------------------------------------- CHECKPOINT


@pytest.mark.usefixtures("no_spark")
def test_checkpoint_writes_the_latest_version_and_only_if_needed_skips_after(table_path: str) -> None:
    rows = make_table(table_path)

    result = CheckpointOperator(task_id="c", table=table_path).execute(context())

    assert (result["version"], result["kind"]) == (2, "classic")
    checkpoint = Path(table_path) / "_delta_log" / f"{2:020d}.checkpoint.parquet"
    assert result["files"] == [checkpoint.name] or checkpoint.name in str(result["files"])
    assert result["size_in_bytes"] == checkpoint.stat().st_size
    assert result["cleaned_log_files"] == 0
    assert DeltaTable(table_path).snapshot().log_segment.checkpoint_version == 2
    assert_oracles_read(table_path, rows)
    with pytest.raises(AirflowSkipException, match="already has the latest checkpoint"):
        CheckpointOperator(task_id="c", table=table_path, only_if_needed=True).execute(context(run_id="next"))


@pytest.mark.usefixtures("no_spark")
def test_checkpoint_of_an_earlier_version_in_two_parts(table_path: str) -> None:
    make_table(table_path)
    result = CheckpointOperator(task_id="c", table=table_path, version=1, kind="multi-part").execute(context())
    assert (result["version"], result["kind"], len(result["files"])) == (1, "multi-part", 2)
    assert DeltaTable(table_path).snapshot(version=2).log_segment.checkpoint_version == 1
    assert len(read_with_deltars(table_path)) == 20


@pytest.mark.usefixtures("no_spark")
def test_a_checkpoint_retry_rewrites_the_same_checkpoint_and_reports_it(table_path: str) -> None:
    rows = make_table(table_path)
    first = CheckpointOperator(task_id="c", table=table_path, kind="multi-part").execute(context())
    retry = CheckpointOperator(task_id="c", table=table_path, kind="multi-part").execute(context())
    assert (retry["version"], retry["kind"], retry["num_files"], retry["files"]) == (
        first["version"], first["kind"], first["num_files"], first["files"]
    )
    assert retry["size_in_bytes"] == sum((Path(table_path) / "_delta_log" / f).stat().st_size for f in retry["files"])
    assert DeltaTable(table_path).snapshot().log_segment.checkpoint_version == 2
    assert_oracles_read(table_path, rows)


@pytest.mark.usefixtures("no_spark")
def test_a_vacuum_retry_deletes_nothing_more_and_says_so(table_path: str) -> None:
    rows = make_table(table_path)
    _delete_partition_a(table_path)
    arguments = {"table": table_path, "mode": "full", "retention": timedelta(0), "enforce_retention_duration": False}
    first = VacuumOperator(task_id="v", **arguments).execute(context())
    left = _data_files(table_path)

    retry = VacuumOperator(task_id="v", **arguments).execute(context())

    assert first["metrics"]["numDeletedFiles"] == 2
    assert (retry["metrics"]["numFilesToDelete"], retry["metrics"]["numDeletedFiles"]) == (0, 0)
    assert retry["start_version"] == first["end_version"] + 1
    assert _data_files(table_path) == left
    assert len(json.dumps(retry)) < 2_000
    assert_oracles_read(table_path, [r for r in rows if r["part"] != "a"])


# --------------------------------------------------------------------------- RESTORE


@pytest.mark.usefixtures("no_spark")
def test_restore_brings_back_the_deleted_partition_with_delta_metrics(table_path: str) -> None:
    rows = make_table(table_path)
    version = _delete_partition_a(table_path)

    result = RestoreOperator(task_id="r", table=table_path, version=2).execute(context())

    assert (result["version"], result["read_version"], result["restored_version"]) == (version + 1, version, 2)
    metrics = result["metrics"]
    assert (metrics["numRestoredFiles"], metrics["numRemovedFiles"], metrics["numOfFilesAfterRestore"]) == (2, 0, 4)
    assert metrics["tableSizeAfterRestore"] == sum(
        (Path(table_path) / f).stat().st_size for f in _data_files(table_path)
    )
    assert DeltaTable(table_path).history(limit=1)[0]["operation"] == "RESTORE"
    assert_oracles_read(table_path, rows)


@pytest.mark.usefixtures("no_spark")
def test_restore_fails_before_committing_when_files_were_vacuumed(table_path: str) -> None:
    rows = make_table(table_path)
    _delete_partition_a(table_path)
    DeltaTable(table_path).vacuum(retention=timedelta(0), enforce_retention_duration=False)
    version = DeltaTable(table_path).version()

    with pytest.raises(DeltaNonRetryableError) as raised:
        RestoreOperator(task_id="r", table=table_path, version=2).execute(context())

    assert raised.value.error_class == "RestoreFilesMissingError"
    assert DeltaTable(table_path).version() == version
    assert_oracles_read(table_path, [r for r in rows if r["part"] != "a"])


@pytest.mark.usefixtures("no_spark")
@pytest.mark.parametrize("by", ["version", "timestamp"])
def test_a_restore_retry_after_a_committed_try_returns_it_and_does_not_restore_twice(table_path: str, by: str) -> None:
    rows = make_table(table_path)
    version = _delete_partition_a(table_path)
    target = {"version": 2} if by == "version" else {"timestamp": DeltaTable(table_path).history()[-3]["timestamp"]}
    first = RestoreOperator(task_id="r", table=table_path, **target).execute(context())
    assert first["version"] == version + 1 and first["restored_version"] == 2
    # Partition a is deleted again after the restore: a second RESTORE would bring it back.
    again = _delete_partition_a(table_path)

    retry = RestoreOperator(task_id="r", table=table_path, **target).execute(context())

    assert retry == first
    assert DeltaTable(table_path).version() == again
    info = _commit_info(table_path, first["version"])
    assert info["operation"] == "RESTORE" and info["tags"]["airflowDelta.taskId"] == "task"
    assert_oracles_read(table_path, [r for r in rows if r["part"] != "a"])


@pytest.mark.slow
@pytest.mark.usefixtures("local_spark")
def test_vacuum_auto_above_the_threshold_lists_on_spark_and_deletes_what_the_worker_would(
    table_path: str, tmp_path: Path
) -> None:
    rows = make_table(table_path)
    version = _delete_partition_a(table_path)
    removed_a = {f for f in _data_files(table_path) if f.startswith("part=a")}
    orphan = Path(table_path) / "part=b" / "orphan.parquet"
    orphan.write_bytes((Path(table_path) / sorted(_data_files(table_path))[0]).read_bytes())
    arguments = {"table": table_path, "mode": "full", "retention": timedelta(0), "enforce_retention_duration": False}
    planned = VacuumOperator(
        task_id="v", dry_run=True, execution="worker", file_list_path=str(tmp_path / "worker.txt"), **arguments
    ).execute(context())
    assert planned["execution"] == "worker"

    # Every table has more than zero live files: auto submits the job.
    result = VacuumOperator(
        task_id="v", worker_threshold_files=0, file_list_path=str(tmp_path / "spark.txt"), **arguments
    ).execute(context())

    assert result["execution"] == "spark"
    assert set((tmp_path / "spark.txt").read_text().split()) == set((tmp_path / "worker.txt").read_text().split())
    assert set((tmp_path / "spark.txt").read_text().split()) == removed_a | {"part=b/orphan.parquet"}
    assert result["metrics"]["numDeletedFiles"] == 3 == planned["metrics"]["numFilesToDelete"]
    assert (result["start_version"], result["end_version"]) == (version + 1, version + 2)
    assert not orphan.exists() and not any(f.startswith("part=a") for f in _data_files(table_path))
    assert_oracles_read(table_path, [r for r in rows if r["part"] != "a"])


def test_vacuum_execution_is_checked_when_the_dag_is_parsed() -> None:
    with pytest.raises(InvalidArgumentError, match="execution"):
        VacuumOperator(task_id="v", table="/t", execution="cluster")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="lite"):
        VacuumOperator(task_id="v", table="/t", mode="lite", execution="spark")
    with pytest.raises(InvalidArgumentError, match="worker_threshold_files"):
        VacuumOperator(task_id="v", table="/t", worker_threshold_files=-1)
