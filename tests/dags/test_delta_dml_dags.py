"""The DML example DAGs (``delta_delete``, ``delta_update``, ``delta_merge``) under the real Airflow CLI.

``airflow db migrate`` and ``airflow dags test`` run as subprocesses with an
``AIRFLOW_HOME`` and SQLite database in a temporary directory; connections come from
``AIRFLOW_CONN_<ID>`` JSON environment variables (a ``delta`` connection pointing at a
``local[2]`` Spark connection). Tables are checked with delta-rs and delta-kernel-rs,
MERGE against DuckDB's ``MERGE INTO`` on the same data; the task's XCom is read from the
metadata database.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.hooks.delta import DeltaHook
from scripts.airflow_cli import EXAMPLE_DAGS, SPARK_LOCAL_CONNECTIONS, AirflowCli, output_tail
from tests.airflow_layer import migrated_airflow
from tests.oracles import assert_oracles_read

DAGS_FOLDER = EXAMPLE_DAGS
DML_DAGS = ["delta_delete", "delta_merge", "delta_update"]
EVENTS = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.string())])
CUSTOMERS = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.int64())])

needs_dml_program = pytest.mark.skipif(
    not DeltaHook.DML_APPLICATION.is_file(), reason="the DML program (airflow_delta/spark/jobs/dml.py) has not landed"
)


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> AirflowCli:
    return migrated_airflow(tmp_path_factory, DAGS_FOLDER, SPARK_LOCAL_CONNECTIONS)


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
def test_delta_delete_dag_deletes_a_partition_in_the_worker(airflow: AirflowCli, tmp_path: Path) -> None:
    path = tmp_path / "events"
    table = DeltaTable.create(str(path), EVENTS, partition_by=["part"])
    rows = [{"id": i, "part": "abc"[i % 3], "value": f"v{i}"} for i in range(30)]
    table.append(pa.Table.from_pylist(rows, schema=EVENTS))

    result, run = airflow.test_dag("delta_delete", {"table_uri": str(path), "predicate": "part = 'b'"})

    assert result.returncode == 0, output_tail(result)
    assert run["state"] == "success" and run["tasks"] == {"delete_rows": "success"}
    xcom = run["xcoms"]["delete_rows"]
    assert (xcom["version"], xcom["read_version"], xcom["operation"], xcom["attempts"]) == (2, 1, "DELETE", 1)
    assert xcom["metrics"]["numDeletedRows"] == 10
    assert_oracles_read(path, [r for r in rows if r["part"] != "b"])


@pytest.mark.slow
def test_delta_delete_dag_fails_at_once_on_an_unknown_column(airflow: AirflowCli, tmp_path: Path) -> None:
    path = tmp_path / "events"
    table = DeltaTable.create(str(path), EVENTS, partition_by=["part"])
    table.append(pa.Table.from_pylist([{"id": 1, "part": "a", "value": "v1"}], schema=EVENTS))

    result, run = airflow.test_dag("delta_delete", {"table_uri": str(path), "predicate": "colour = 'red'"})

    assert result.returncode != 0
    assert run["tasks"] == {"delete_rows": "failed"}  # not up_for_retry, although the task has retries
    assert "colour" in result.stdout + result.stderr
    assert DeltaTable(str(path)).version() == 1


@pytest.mark.slow
@needs_dml_program
def test_delta_update_dag_updates_rows_on_spark(airflow: AirflowCli, tmp_path: Path) -> None:
    path = tmp_path / "events"
    table = DeltaTable.create(str(path), EVENTS, properties={"delta.enableDeletionVectors": "true"})
    rows = [{"id": i, "part": "ab"[i % 2], "value": f"v{i}"} for i in range(20)]
    table.append(pa.Table.from_pylist(rows, schema=EVENTS))

    conf = {"table_uri": str(path), "set": {"value": "upper(value)"}, "predicate": "id % 5 = 0"}
    result, run = airflow.test_dag("delta_update", conf)

    assert result.returncode == 0, output_tail(result)
    xcom = run["xcoms"]["update_rows"]
    assert (xcom["version"], xcom["operation"]) == (2, "UPDATE")
    assert xcom["metrics"]["numUpdatedRows"] == 4
    expected = [{**r, "value": r["value"].upper()} if r["id"] % 5 == 0 else r for r in rows]
    assert_oracles_read(path, expected)


@pytest.mark.slow
@needs_dml_program
def test_delta_merge_dag_upserts_a_batch_of_changes_as_duckdb_does(airflow: AirflowCli, tmp_path: Path) -> None:
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

    result, run = airflow.test_dag("delta_merge", {"table_uri": str(path), "changes_uri": str(changes_dir)})

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
