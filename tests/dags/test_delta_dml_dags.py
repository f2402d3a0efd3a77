"""The DML example DAGs (``delta_delete``, ``delta_update``, ``delta_merge``) under the real Airflow CLI.

``airflow db migrate`` and ``airflow dags test`` run as subprocesses with an
``AIRFLOW_HOME`` and SQLite database in a temporary directory; connections come from
``AIRFLOW_CONN_<ID>`` JSON environment variables (a ``delta`` connection pointing at a
``local[2]`` Spark connection). Tables are checked with delta-rs and delta-kernel-rs,
MERGE against DuckDB's ``MERGE INTO`` on the same data; the task's XCom is read from the
metadata database.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.hooks.delta import DeltaHook
from tests.oracles import assert_oracles_read

REPO_ROOT = Path(__file__).resolve().parents[2]
DAGS_FOLDER = REPO_ROOT / "dags_examples"
AIRFLOW = Path(sys.executable).parent / "airflow"
DML_DAGS = ["delta_delete", "delta_merge", "delta_update"]
EVENTS = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.string())])
CUSTOMERS = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.int64())])

needs_dml_program = pytest.mark.skipif(
    not DeltaHook.DML_APPLICATION.is_file(), reason="the DML program (airflow_delta/spark/jobs/dml.py) has not landed"
)


def _airflow_env(home: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS_FOLDER),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        AIRFLOW__LOGGING__LOGGING_LEVEL="WARNING",
        AIRFLOW_CONN_SPARK_LOCAL=json.dumps({"conn_type": "spark", "host": "local[2]"}),
        AIRFLOW_CONN_DELTA_DEFAULT=json.dumps({"conn_type": "delta", "extra": {"spark_conn_id": "spark_local"}}),
        PYTHONDONTWRITEBYTECODE="1",
        # The DAG files import the package from this checkout, whatever the venv installed.
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
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


def _tail(result: subprocess.CompletedProcess[str], lines: int = 80) -> str:
    return "\n".join((result.stdout + result.stderr).splitlines()[-lines:])


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("airflow_home")
    result = _airflow(home, "db", "migrate")
    assert result.returncode == 0, f"airflow db migrate failed:\n{_tail(result)}"
    return home


def _run(home: Path, dag_id: str, conf: dict[str, Any]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    result = _airflow(home, "dags", "test", dag_id, "--conf", json.dumps(conf))
    with sqlite3.connect(home / "airflow.db") as db:
        run_id, state, run_conf = db.execute(
            "SELECT run_id, state, conf FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)
        ).fetchone()
        tasks = dict(
            db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", (dag_id, run_id))
        )
        xcoms = {
            task_id: json.loads(value) if isinstance(value, str) else value
            for task_id, value in db.execute(
                "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
                (dag_id, run_id),
            )
        }
    assert json.loads(run_conf) == conf, "the newest run is not this test's"
    return result, {"state": state, "tasks": tasks, "xcoms": xcoms}


def test_the_dml_dags_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [key for key in os.environ if key.startswith("AIRFLOW")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_FOLDER))

    assert bag.import_errors == {}
    assert set(DML_DAGS) <= set(bag.dag_ids)
    for dag_id, task_id in (
        ("delta_delete", "delete_rows"),
        ("delta_update", "update_rows"),
        ("delta_merge", "upsert_changes"),
    ):
        task = bag.dags[dag_id].get_task(task_id)
        assert task.retry_policy is not None


@pytest.mark.slow
def test_delta_delete_dag_deletes_a_partition_in_the_worker(airflow_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "events"
    table = DeltaTable.create(str(path), EVENTS, partition_by=["part"])
    rows = [{"id": i, "part": "abc"[i % 3], "value": f"v{i}"} for i in range(30)]
    table.append(pa.Table.from_pylist(rows, schema=EVENTS))

    result, run = _run(airflow_home, "delta_delete", {"table_uri": str(path), "predicate": "part = 'b'"})

    assert result.returncode == 0, _tail(result)
    assert run["state"] == "success" and run["tasks"] == {"delete_rows": "success"}
    xcom = run["xcoms"]["delete_rows"]
    assert (xcom["version"], xcom["read_version"], xcom["operation"], xcom["attempts"]) == (2, 1, "DELETE", 1)
    assert xcom["metrics"]["numDeletedRows"] == 10
    assert_oracles_read(path, [r for r in rows if r["part"] != "b"])


@pytest.mark.slow
def test_delta_delete_dag_fails_at_once_on_an_unknown_column(airflow_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "events"
    table = DeltaTable.create(str(path), EVENTS, partition_by=["part"])
    table.append(pa.Table.from_pylist([{"id": 1, "part": "a", "value": "v1"}], schema=EVENTS))

    result, run = _run(airflow_home, "delta_delete", {"table_uri": str(path), "predicate": "colour = 'red'"})

    assert result.returncode != 0
    assert run["tasks"] == {"delete_rows": "failed"}  # not up_for_retry, although the task has retries
    assert "colour" in result.stdout + result.stderr
    assert DeltaTable(str(path)).version() == 1


@pytest.mark.slow
@needs_dml_program
def test_delta_update_dag_updates_rows_on_spark(airflow_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "events"
    table = DeltaTable.create(str(path), EVENTS, properties={"delta.enableDeletionVectors": "true"})
    rows = [{"id": i, "part": "ab"[i % 2], "value": f"v{i}"} for i in range(20)]
    table.append(pa.Table.from_pylist(rows, schema=EVENTS))

    conf = {"table_uri": str(path), "set": {"value": "upper(value)"}, "predicate": "id % 5 = 0"}
    result, run = _run(airflow_home, "delta_update", conf)

    assert result.returncode == 0, _tail(result)
    xcom = run["xcoms"]["update_rows"]
    assert (xcom["version"], xcom["operation"]) == (2, "UPDATE")
    assert xcom["metrics"]["numUpdatedRows"] == 4
    expected = [{**r, "value": r["value"].upper()} if r["id"] % 5 == 0 else r for r in rows]
    assert_oracles_read(path, expected)


@pytest.mark.slow
@needs_dml_program
def test_delta_merge_dag_upserts_a_batch_of_changes_as_duckdb_does(airflow_home: Path, tmp_path: Path) -> None:
    import duckdb

    path = tmp_path / "customers"
    table = DeltaTable.create(str(path), CUSTOMERS)
    target = [{"id": i, "name": f"c{i}", "score": i} for i in range(10)]
    table.append(pa.Table.from_pylist(target, schema=CUSTOMERS))
    changes_dir = tmp_path / "changes"
    changes_dir.mkdir()
    changes = pa.table(
        {
            "id": [2, 3, 11, 12],
            "name": ["c2-new", "c3", "c11", "c12"],
            "score": [20, 30, 110, 120],
            "deleted": [False, True, False, True],
        }
    )
    pq.write_table(changes, changes_dir / "part-0.parquet")

    result, run = _run(airflow_home, "delta_merge", {"table_uri": str(path), "changes_uri": str(changes_dir)})

    assert result.returncode == 0, _tail(result)
    db = duckdb.connect()
    db.execute("CREATE TABLE target (id BIGINT, name VARCHAR, score BIGINT)")
    db.executemany("INSERT INTO target VALUES (?, ?, ?)", [tuple(r.values()) for r in target])
    db.register("changes", changes)
    db.execute(
        """
        MERGE INTO target USING changes ON target.id = changes.id
        WHEN MATCHED AND changes.deleted THEN DELETE
        WHEN MATCHED THEN UPDATE SET name = changes.name, score = changes.score
        WHEN NOT MATCHED AND NOT changes.deleted THEN INSERT (id, name, score) VALUES (changes.id, changes.name, changes.score)
        """
    )
    expected = [
        dict(zip(("id", "name", "score"), row, strict=True)) for row in db.execute("SELECT * FROM target").fetchall()
    ]
    assert_oracles_read(path, expected)
    xcom = run["xcoms"]["upsert_changes"]
    assert (xcom["version"], xcom["operation"]) == (2, "MERGE")
    assert xcom["metrics"]["numTargetRowsUpdated"] == 1
    assert xcom["metrics"]["numTargetRowsDeleted"] == 1
    assert xcom["metrics"]["numTargetRowsInserted"] == 1
