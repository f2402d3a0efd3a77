"""The ``delta_fleet_maintenance`` example DAG under the real Airflow CLI (``airflow dags test``):
health of a handful of tables, the plan, one mapped task per table, and the history they leave.

Oracles: delta-rs reads every table's rows before and after (maintenance changes no row),
and the files on disk say what VACUUM deleted."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from airflow_delta.engine import DeltaTable, read_history
from scripts.airflow_cli import AirflowCli, output_tail
from scripts.fleet_tables import build_fleet
from tests.airflow_layer import migrated_airflow
from tests.oracles import assert_oracles_read, read_with_deltars

deltalake = pytest.importorskip("deltalake")
DAG_ID = "delta_fleet_maintenance"


def _rows(path: str) -> list[dict[str, Any]]:
    return read_with_deltars(path)


def _mapped(airflow: AirflowCli, run_id: str) -> dict[str, list[tuple[int, str]]]:
    with sqlite3.connect(airflow.home / "airflow.db") as db:
        rows = db.execute("SELECT task_id, map_index, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
                          (DAG_ID, run_id)).fetchall()
    out: dict[str, list[tuple[int, str]]] = {}
    for task_id, map_index, state in rows:
        out.setdefault(task_id, []).append((map_index, state))
    return out


def test_the_fleet_dag_maintains_each_table_as_it_needs(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("lake")
    history = str(tmp_path_factory.mktemp("history") / "maintenance_history")
    tables = build_fleet(root)
    before = {name: _rows(path) for name, path in tables.items() if name != "broken/orphan"}
    clicks_tombstones = {
        p.name for p in Path(tables["events/clicks"]).rglob("*.parquet")
    } - {Path(u).name for u in deltalake.DeltaTable(tables["events/clicks"]).file_uris()}
    assert len(clicks_tombstones) == 6

    connection = {"conn_type": "delta", "extra": {"maintenance_history_uri": history}}
    airflow = migrated_airflow(tmp_path_factory, env_vars={"AIRFLOW_CONN_DELTA_DEFAULT": json.dumps(connection)})
    result, run = airflow.test_dag(DAG_ID, {"prefix": str(root)})
    assert run["state"] == "success", output_tail(result, 120)

    # The health task reported every table, the broken one with its reason.
    health = {r["table"]: r for r in run["xcoms"]["fleet_health"]}
    assert set(health) == set(tables.values())
    assert health[tables["broken/orphan"]]["status"] == "unreadable" and health[tables["broken/orphan"]]["reason"]

    # One mapped task instance per planned table, each succeeded.
    mapped = _mapped(airflow, run["run_id"])
    plan_rows = {(r["operation"], r["table_uri"]) for r in read_history(history) if r["operation"] != "HEALTH"}
    assert plan_rows == {
        ("OPTIMIZE", tables["sales/orders"]), ("OPTIMIZE", tables["sales/refunds"]), ("OPTIMIZE", tables["events/audit"]),
        ("VACUUM", tables["events/clicks"]), ("CHECKPOINT", tables["events/audit"]),
        ("CHECKPOINT", tables["sales/orders"]),  # 25 commits, no checkpoint
    }
    assert sorted(s for _, s in mapped["optimize"]) == ["success"] * 3
    assert [s for _, s in mapped["vacuum"]] == ["success"] and [s for _, s in mapped["checkpoint"]] == ["success"] * 2

    # What each table needed was done, and no row changed (delta-rs reads them).
    assert DeltaTable(tables["sales/orders"]).snapshot().num_files == 3  # one file per day
    refunds = DeltaTable(tables["sales/refunds"]).snapshot()
    assert refunds.add_actions.column("deletion_vector").null_count == refunds.num_files  # purged
    left = {p.name for p in Path(tables["events/clicks"]).rglob("*.parquet")}
    assert not (clicks_tombstones & left)  # VACUUM deleted the compacted files
    assert DeltaTable(tables["events/audit"]).snapshot().log_segment.checkpoint_version is not None
    for name, rows in before.items():
        assert _rows(tables[name]) == rows, name
        assert_oracles_read(tables[name], rows)  # delta-kernel-rs too

    # The history: a HEALTH row per readable table, and each run with its reason and metrics.
    rows = read_history(history)
    assert sum(r["operation"] == "HEALTH" for r in rows) == 5
    orders = read_history(history, table_uri=tables["sales/orders"], operation="OPTIMIZE")[0]
    assert orders["status"] == "success" and "small files" in orders["reason"]
    assert orders["files_removed"] == 24 and orders["files_added"] == 3 and orders["bytes_rewritten"] > 0
    assert orders["dag_id"] == DAG_ID and orders["task_id"] == "optimize" and orders["map_index"] >= 0
    vacuum = read_history(history, operation="VACUUM")[0]
    assert vacuum["files_removed"] == 6 and vacuum["bytes_freed"] > 0
    # The plan says why each table got what it got, or nothing.
    decisions = run["xcoms"]["plan"]["decisions"]
    countries = [d for d in decisions if d["table"] == tables["ref/countries"]]
    assert countries and not any(d["chosen"] for d in countries)
    assert any(d["table"] == tables["broken/orphan"] and d["reason"].startswith("unreadable") for d in decisions)
