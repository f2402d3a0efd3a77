"""The ``delta_nightly_maintenance`` example DAG under the real Airflow CLI (``airflow dags test``).

As in test_delta_log_maintenance: an ``AIRFLOW_HOME`` and SQLite database in a temporary
directory, the ``delta`` connection from ``AIRFLOW_CONN_DELTA_DEFAULT``, task states and
XComs read from that database. No Spark starts: the OPTIMIZE is small enough for the worker.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from tests.oracles import assert_oracles_read

REPO_ROOT = Path(__file__).resolve().parents[2]
DAGS_FOLDER = REPO_ROOT / "dags_examples"
AIRFLOW = Path(sys.executable).parent / "airflow"
DAG_ID = "delta_nightly_maintenance"
TASK_IDS = ["health_report", "optimize", "vacuum", "checkpoint"]
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])


def _airflow_env(home: Path) -> dict[str, str]:
    """An isolated Airflow; its ``delta`` connection names a Spark nothing listens on, so a submit would fail."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS_FOLDER),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        AIRFLOW__LOGGING__LOGGING_LEVEL="WARNING",
        AIRFLOW_CONN_SPARK_UNREACHABLE=json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": 1}),
        AIRFLOW_CONN_DELTA_DEFAULT=json.dumps({"conn_type": "delta", "extra": {"spark_conn_id": "spark_unreachable"}}),
        PYTHONDONTWRITEBYTECODE="1",
        # The checkout under test, not whichever airflow_delta the venv installed.
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    )
    return env


def _airflow(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AIRFLOW), *args],
        env=_airflow_env(home),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _output_tail(result: subprocess.CompletedProcess[str], lines: int = 60) -> str:
    return "\n".join((result.stdout + result.stderr).splitlines()[-lines:])


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("airflow_home")
    result = _airflow(home, "db", "migrate")
    assert result.returncode == 0, f"airflow db migrate failed:\n{_output_tail(result)}"
    return home


def _run(home: Path, path: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``airflow dags test`` for the table; the newest run's state, task states and return-value XComs."""
    conf = {"table_uri": str(path)}
    result = _airflow(home, "dags", "test", DAG_ID, "--conf", json.dumps(conf))
    with sqlite3.connect(home / "airflow.db") as db:
        run_id, state, run_conf = db.execute(
            "SELECT run_id, state, conf FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (DAG_ID,)
        ).fetchone()
        tasks = dict(
            db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", (DAG_ID, run_id))
        )
        xcoms = {
            task_id: json.loads(value) if isinstance(value, str) else value
            for task_id, value in db.execute(
                "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
                (DAG_ID, run_id),
            )
        }
    assert json.loads(run_conf) == conf, "the newest DAG run is not the one this test started"
    return result, {"state": state, "tasks": tasks, "xcoms": xcoms}


def _make_table(path: Path) -> list[dict[str, Any]]:
    """Four small files in two partitions, one deleted partition; tombstones expire at once."""
    table = DeltaTable.create(
        str(path),
        SCHEMA,
        partition_by=["part"],
        properties={"delta.deletedFileRetentionDuration": "interval 0 hours", "delta.checkpointInterval": "1000"},
    )
    rows = [{"id": i, "part": "abc"[i % 3]} for i in range(30)]
    table.append(pa.Table.from_pylist(rows[:15], schema=SCHEMA))
    table.append(pa.Table.from_pylist(rows[15:], schema=SCHEMA))
    table.delete("part = 'c'")
    return [r for r in rows if r["part"] != "c"]


def _data_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}


@pytest.fixture
def isolated_airflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process Airflow configured to a temporary home; no bytecode written beside the DAG file."""
    for key in [key for key in os.environ if key.startswith("AIRFLOW")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow_home"))
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(DAGS_FOLDER))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


@pytest.mark.usefixtures("isolated_airflow")
def test_dag_file_parses_into_a_chain_where_a_skip_does_not_stop_the_next_step() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_FOLDER))

    assert bag.import_errors == {}
    dag = bag.dags[DAG_ID]
    upstream = {task.task_id: task.upstream_task_ids for task in dag.tasks}
    assert upstream == {
        "health_report": set(),
        "optimize": {"health_report"},
        "vacuum": {"optimize"},
        "checkpoint": {"vacuum"},
    }
    assert {t.task_id: t.trigger_rule for t in dag.tasks if t.task_id in ("vacuum", "checkpoint")} == {
        "vacuum": "none_failed",
        "checkpoint": "none_failed",
    }
    assert all(t.only_if_needed for t in dag.tasks if t.task_id != "health_report")
    assert not dag.params.get_param("table_uri").has_value


@pytest.mark.slow
def test_the_nightly_run_optimizes_vacuums_and_checkpoints_then_skips_what_is_not_needed(
    airflow_home: Path, tmp_path: Path
) -> None:
    path = tmp_path / "events"
    rows = _make_table(path)

    result, run = _run(airflow_home, path)

    assert result.returncode == 0, _output_tail(result)
    assert run["state"] == "success"
    assert run["tasks"] == dict.fromkeys(TASK_IDS, "success")
    health = run["xcoms"]["health_report"]
    assert (health["version"], health["num_files"], health["tombstones"]) == (3, 4, 2)
    optimized = run["xcoms"]["optimize"]
    assert (optimized["metrics"]["numFilesRemoved"], optimized["metrics"]["numFilesAdded"]) == (4, 2)
    vacuumed = run["xcoms"]["vacuum"]
    # The deleted partition's two files and the four OPTIMIZE replaced.
    assert vacuumed["metrics"]["numDeletedFiles"] == 6
    checkpointed = run["xcoms"]["checkpoint"]
    assert checkpointed["version"] == DeltaTable(str(path)).version() == vacuumed["end_version"]
    live = {Path(uri).relative_to(path).as_posix() for uri in deltalake.DeltaTable(str(path)).file_uris()}
    assert _data_files(path) == live and len(live) == 2
    assert_oracles_read(path, rows)

    # The next night there is nothing to gain: every maintenance task skips, the run succeeds.
    version = DeltaTable(str(path)).version()
    result, run = _run(airflow_home, path)
    assert result.returncode == 0, _output_tail(result)
    assert run["state"] == "success"
    assert run["tasks"] == {
        "health_report": "success",
        "optimize": "skipped",
        "vacuum": "skipped",
        "checkpoint": "skipped",
    }
    assert DeltaTable(str(path)).version() == version
    assert_oracles_read(path, rows)
