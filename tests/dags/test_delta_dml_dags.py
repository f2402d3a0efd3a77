"""The DML example DAGs (``delta_delete``, ``delta_update``, ``delta_merge``) under the real Airflow CLI.

``airflow dags test`` runs with an ``AIRFLOW_HOME`` and SQLite database (a copy of the
session's one ``airflow db migrate``) in a temporary directory; connections come from
``AIRFLOW_CONN_<ID>`` JSON environment variables (a ``delta`` connection pointing at a
``local[2]`` Spark connection). The four runs (one per test) are made once for the module,
one after the other in one Airflow CLI process (``AirflowCli.test_dags``: the first is a
fresh ``airflow dags test``, the others skip the process start); each test asserts its
own run. Tables are checked with delta-rs and delta-kernel-rs, MERGE against DuckDB's
``MERGE INTO`` on the same data; the task's XCom is read from the metadata database.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.hooks.delta import DeltaHook
from scripts.airflow_cli import EXAMPLE_DAGS, SPARK_LOCAL_CONNECTIONS, AirflowCli, output_tail
from tests.airflow_layer import migrated_airflow, tiny_job_driver_conf
from tests.oracles import assert_oracles_read

DAGS_FOLDER = EXAMPLE_DAGS
DML_DAGS = ["delta_delete", "delta_merge", "delta_update"]
EVENTS = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.string())])
CUSTOMERS = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.int64())])

needs_dml_program = pytest.mark.skipif(
    not DeltaHook.DML_APPLICATION.is_file(), reason="the DML program (airflow_delta/spark/jobs/dml.py) has not landed"
)


MERGE_TARGET = [{"id": i, "name": f"c{i}", "score": i} for i in range(10)]
MERGE_CHANGES = pa.table(
    {
        "id": [2, 3, 11, 12],
        "name": ["c2-new", "c3", "c11", "c12"],
        "score": [20, 30, 110, 120],
        "deleted": [False, True, False, True],
    }
)


@dataclass(frozen=True)
class Case:
    """One test's table, the rows written to it, and its run."""

    path: Path
    rows: list[dict[str, Any]]
    result: subprocess.CompletedProcess[str]
    run: dict[str, Any]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    """The tables of the four tests, each run through its DAG once (one process for the four runs)."""
    # The demo's local-mode connections, the driver JVM tuned for a tiny job (tiny_job_driver_conf).
    delta_default = json.loads(SPARK_LOCAL_CONNECTIONS["AIRFLOW_CONN_DELTA_DEFAULT"])
    delta_default["extra"]["spark_conf"].update(tiny_job_driver_conf())
    connections = {**SPARK_LOCAL_CONNECTIONS, "AIRFLOW_CONN_DELTA_DEFAULT": json.dumps(delta_default)}
    airflow: AirflowCli = migrated_airflow(tmp_path_factory, DAGS_FOLDER, connections)
    root = tmp_path_factory.mktemp("dml")
    tables: dict[str, tuple[Path, list[dict[str, Any]], str, dict[str, Any]]] = {}

    path = root / "delete"
    rows = [{"id": i, "part": "abc"[i % 3], "value": f"v{i}"} for i in range(30)]
    DeltaTable.create(str(path), EVENTS, partition_by=["part"]).append(pa.Table.from_pylist(rows, schema=EVENTS))
    tables["delete"] = (path, rows, "delta_delete", {"table_uri": str(path), "predicate": "part = 'b'"})

    path = root / "delete_unknown_column"
    rows = [{"id": 1, "part": "a", "value": "v1"}]
    DeltaTable.create(str(path), EVENTS, partition_by=["part"]).append(pa.Table.from_pylist(rows, schema=EVENTS))
    tables["delete_unknown_column"] = (
        path,
        rows,
        "delta_delete",
        {"table_uri": str(path), "predicate": "colour = 'red'"},
    )

    if DeltaHook.DML_APPLICATION.is_file():
        path = root / "update"
        rows = [{"id": i, "part": "ab"[i % 2], "value": f"v{i}"} for i in range(20)]
        table = DeltaTable.create(str(path), EVENTS, properties={"delta.enableDeletionVectors": "true"})
        table.append(pa.Table.from_pylist(rows, schema=EVENTS))
        conf = {"table_uri": str(path), "set": {"value": "upper(value)"}, "predicate": "id % 5 = 0"}
        tables["update"] = (path, rows, "delta_update", conf)

        path = root / "merge"
        DeltaTable.create(str(path), CUSTOMERS).append(pa.Table.from_pylist(MERGE_TARGET, schema=CUSTOMERS))
        changes_dir = root / "changes"
        changes_dir.mkdir()
        pq.write_table(MERGE_CHANGES, changes_dir / "part-0.parquet")
        tables["merge"] = (path, MERGE_TARGET, "delta_merge", {"table_uri": str(path), "changes_uri": str(changes_dir)})

    outcomes = airflow.test_dags([(dag_id, conf) for _, _, dag_id, conf in tables.values()])
    return {
        name: Case(path, rows, *outcome)
        for (name, (path, rows, _, _)), outcome in zip(tables.items(), outcomes, strict=True)
    }


@pytest.mark.usefixtures("isolated_airflow")
def test_the_dml_dags_parse() -> None:
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
def test_delta_delete_dag_deletes_a_partition_in_the_worker(cases: dict[str, Case]) -> None:
    path, rows, result, run = (case := cases["delete"]).path, case.rows, case.result, case.run

    assert result.returncode == 0, output_tail(result)
    assert run["state"] == "success" and run["tasks"] == {"delete_rows": "success"}
    xcom = run["xcoms"]["delete_rows"]
    assert (xcom["version"], xcom["read_version"], xcom["operation"], xcom["attempts"]) == (2, 1, "DELETE", 1)
    assert xcom["metrics"]["numDeletedRows"] == 10
    assert_oracles_read(path, [r for r in rows if r["part"] != "b"])


@pytest.mark.slow
def test_delta_delete_dag_fails_at_once_on_an_unknown_column(cases: dict[str, Case]) -> None:
    path, result, run = (case := cases["delete_unknown_column"]).path, case.result, case.run

    assert result.returncode != 0
    assert run["tasks"] == {"delete_rows": "failed"}  # not up_for_retry, although the task has retries
    assert "colour" in result.stdout + result.stderr
    assert DeltaTable(str(path)).version() == 1


@pytest.mark.slow
@needs_dml_program
def test_delta_update_dag_updates_rows_on_spark(cases: dict[str, Case]) -> None:
    path, rows, result, run = (case := cases["update"]).path, case.rows, case.result, case.run

    assert result.returncode == 0, output_tail(result)
    xcom = run["xcoms"]["update_rows"]
    assert (xcom["version"], xcom["operation"]) == (2, "UPDATE")
    assert xcom["metrics"]["numUpdatedRows"] == 4
    expected = [{**r, "value": r["value"].upper()} if r["id"] % 5 == 0 else r for r in rows]
    assert_oracles_read(path, expected)


@pytest.mark.slow
@needs_dml_program
def test_delta_merge_dag_upserts_a_batch_of_changes_as_duckdb_does(cases: dict[str, Case]) -> None:
    import duckdb

    path, target, result, run = (case := cases["merge"]).path, case.rows, case.result, case.run
    changes = MERGE_CHANGES

    assert result.returncode == 0, output_tail(result)
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
