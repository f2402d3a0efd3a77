"""The fleet operators and the history the maintenance operators record, executed for real
(the engine, the connection from ``AIRFLOW_CONN_*``); the whole DAG runs in tests/dags."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowSkipException

from airflow_delta.engine import DeltaTable, InvalidArgumentError, read_history
from airflow_delta.operators.fleet import (
    DeltaFleetHealthOperator,
    DeltaMaintenancePlanOperator,
    PlannedTasksOperator,
)
from airflow_delta.operators.maintenance import CheckpointOperator, OptimizeOperator, RestoreOperator, VacuumOperator
from airflow_delta.operators.retry import DeltaNonRetryableError
from tests.airflow_layer import context, set_connection
from tests.engine.fleet.helpers import deletion_vector_table, small_files_table


@pytest.fixture
def history(airflow_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    uri = str(tmp_path / "history")
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"maintenance_history_uri": uri}})
    return uri


def test_health_then_plan_then_the_planned_runs_are_recorded(history: str, tmp_path: Path) -> None:
    small = small_files_table(str(tmp_path / "lake" / "small"), files=5)
    dv = deletion_vector_table(str(tmp_path / "lake" / "dv"))
    (tmp_path / "lake" / "empty_dir").mkdir()
    health = DeltaFleetHealthOperator(task_id="health", prefix=str(tmp_path / "lake")).execute(context())
    assert sorted(r["table"] for r in health) == sorted([small.root, dv.root])
    assert len(read_history(history, operation="HEALTH")) == 2

    plan_op = DeltaMaintenancePlanOperator(task_id="plan", health=health, max_tasks=1, operations=["OPTIMIZE"])
    plan = plan_op.execute(context())
    assert [t["table"] for t in plan["optimize"]] == [small.root]  # 4 files removed beats one purge
    assert any("max_tasks" in d["reason"] for d in plan["decisions"] if d["table"] == dv.root)
    kwargs = PlannedTasksOperator(task_id="pick", plan=plan, operation="optimize").execute(context())
    assert kwargs == plan["optimize"]

    # What expand_kwargs does with one dict: the operator built from it, run as map index 0.
    result = OptimizeOperator(task_id="optimize", execution="worker", **kwargs[0]).execute(
        context(task_id="optimize", map_index=0))
    assert DeltaTable(small.root).snapshot().num_files == 1
    (row,) = read_history(history, operation="OPTIMIZE")
    assert row["status"] == "success" and row["version"] == result["version"] and row["map_index"] == 0
    assert row["reason"] == kwargs[0]["maintenance_reason"] and row["files_removed"] == 5 and row["files_added"] == 1
    # The next plan cools the table down: the history says it was just compacted.
    health = DeltaFleetHealthOperator(task_id="health", tables=[small.root, dv.root]).execute(context())
    plan = DeltaMaintenancePlanOperator(task_id="plan", health=health, operations=["OPTIMIZE"]).execute(context())
    assert [t["table"] for t in plan["optimize"]] == [dv.root]


def test_skips_and_failures_are_recorded_too(history: str, tmp_path: Path) -> None:
    table = small_files_table(str(tmp_path / "t"), files=1)
    with pytest.raises(AirflowSkipException):
        VacuumOperator(task_id="vacuum", table=table.root, only_if_needed=True, maintenance_reason="test").execute(
            context())
    with pytest.raises(DeltaNonRetryableError):
        CheckpointOperator(task_id="checkpoint", table=str(tmp_path / "missing")).execute(context())
    rows = {r["operation"]: r for r in read_history(history)}
    assert rows["VACUUM"]["status"] == "skipped" and "would delete no file" in rows["VACUUM"]["reason"]
    assert rows["CHECKPOINT"]["status"] == "failed" and "no Delta table" in rows["CHECKPOINT"]["reason"]


def test_a_restore_run_is_recorded(history: str, tmp_path: Path) -> None:
    table = small_files_table(str(tmp_path / "t"), files=2)  # versions 0..2
    restored = RestoreOperator(task_id="restore", table=table.root, version=1, maintenance_reason="bad load").execute(
        context(task_id="restore"))
    (row,) = read_history(history, table_uri=table.root)
    assert row["operation"] == "RESTORE" and row["status"] == "success" and row["reason"] == "bad load"
    assert row["version"] == restored["version"] == 3 and row["task_id"] == "restore"
    assert DeltaTable(table.root).snapshot().num_files == 1  # version 1's one file


def test_without_a_history_nothing_is_recorded(airflow_home: Path, tmp_path: Path) -> None:
    table = small_files_table(str(tmp_path / "t"), files=3)
    CheckpointOperator(task_id="checkpoint", table=table.root).execute(context())
    assert not (tmp_path / "history").exists()


def test_bad_arguments_fail_when_the_dag_is_parsed() -> None:
    with pytest.raises(InvalidArgumentError, match="one way"):
        DeltaFleetHealthOperator(task_id="h", tables=["/a"], prefix="/b")
    with pytest.raises(InvalidArgumentError, match="max_tasks"):
        DeltaMaintenancePlanOperator(task_id="p", health=[], max_tasks=-1)
    with pytest.raises(InvalidArgumentError, match="budget_options"):
        DeltaMaintenancePlanOperator(task_id="p", health=[], budget_options={"no_such_field": 1})
    with pytest.raises(InvalidArgumentError, match="operation"):
        PlannedTasksOperator(task_id="x", plan={}, operation="reorg")
