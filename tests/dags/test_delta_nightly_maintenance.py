"""The ``delta_nightly_maintenance`` example DAG under the real Airflow CLI (``airflow dags test``).

Through the shared CLI helper (``scripts/airflow_cli.py``): an ``AIRFLOW_HOME`` and SQLite
database in a temporary directory, the ``delta`` connection from ``AIRFLOW_CONN_DELTA_DEFAULT``,
task states and XComs read from that database; the two nights' runs one after the other in one
Airflow CLI process (``AirflowCli.test_dags``). No Spark starts: the OPTIMIZE is small enough for the worker.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable, write_data_files
from scripts.airflow_cli import EXAMPLE_DAGS, AirflowCli, output_tail
from tests.airflow_layer import migrated_airflow
from tests.oracles import assert_oracles_read

DAGS_FOLDER = EXAMPLE_DAGS
DAG_ID = "delta_nightly_maintenance"
TASK_IDS = ["health_report", "optimize", "vacuum", "checkpoint"]
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])
TRICKLE_FILES = 256


# Its ``delta`` connection names a Spark nothing listens on, so a submit would fail.
UNREACHABLE_SPARK = {
    "AIRFLOW_CONN_SPARK_UNREACHABLE": json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": 1}),
    "AIRFLOW_CONN_DELTA_DEFAULT": json.dumps({"conn_type": "delta", "extra": {"spark_conn_id": "spark_unreachable"}}),
}


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> AirflowCli:
    # INFO: the task logs are in the output (the OPTIMIZE says how many processes rewrote it).
    return migrated_airflow(tmp_path_factory, DAGS_FOLDER, UNREACHABLE_SPARK, logging_level="INFO")


def _make_table(path: Path) -> list[dict[str, Any]]:
    """Four small files in two partitions, one deleted partition, then 256 tiny files; tombstones expire at once."""
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
    # A day of trickling writes: one commit of 256 one-row files, enough for the OPTIMIZE to
    # rewrite its second bin in a process forked from the task (docs/optimize.md).
    trickle = [{"id": 100 + i, "part": "ab"[i % 2]} for i in range(TRICKLE_FILES)]
    snapshot = table.snapshot()
    with table.transaction() as txn:
        adds = []
        for row in trickle:
            adds.extend(
                write_data_files(snapshot, pa.Table.from_pylist([row], schema=SCHEMA), written=txn.written_files)
            )
        txn.add_files(adds)
        txn.commit("WRITE", {"mode": "Append", "partitionBy": '["part"]'})
    return [r for r in rows if r["part"] != "c"] + trickle


def _data_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}


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
    airflow: AirflowCli, tmp_path: Path
) -> None:
    path = tmp_path / "events"
    rows = _make_table(path)

    # Two nights in a row, one after the other in one Airflow CLI process (AirflowCli.test_dags).
    (result, run), (next_result, next_run) = airflow.test_dags([(DAG_ID, {"table_uri": str(path)})] * 2)

    assert result.returncode == 0, output_tail(result)
    assert run["state"] == "success"
    assert run["tasks"] == dict.fromkeys(TASK_IDS, "success")
    health = run["xcoms"]["health_report"]
    assert (health["version"], health["num_files"], health["tombstones"]) == (4, 4 + TRICKLE_FILES, 2)
    optimized = run["xcoms"]["optimize"]
    assert (optimized["metrics"]["numFilesRemoved"], optimized["metrics"]["numFilesAdded"]) == (4 + TRICKLE_FILES, 2)
    # The task's second bin was rewritten by a process forked from the Airflow task.
    assert f"rewrote 2 bins of {4 + TRICKLE_FILES} files in 2 processes" in result.stdout + result.stderr
    vacuumed = run["xcoms"]["vacuum"]
    # The deleted partition's two files and the files OPTIMIZE replaced.
    assert vacuumed["metrics"]["numDeletedFiles"] == 2 + 4 + TRICKLE_FILES
    checkpointed = run["xcoms"]["checkpoint"]
    version = DeltaTable(str(path)).version()
    # The first night's commits are the table's last: the second night committed nothing.
    assert checkpointed["version"] == version == vacuumed["end_version"]
    live = {Path(uri).relative_to(path).as_posix() for uri in deltalake.DeltaTable(str(path)).file_uris()}
    assert _data_files(path) == live and len(live) == 2
    assert_oracles_read(path, rows)

    # The next night there is nothing to gain: every maintenance task skips, the run succeeds.
    assert next_result.returncode == 0, output_tail(next_result)
    assert next_run["state"] == "success"
    assert next_run["tasks"] == {
        "health_report": "success",
        "optimize": "skipped",
        "vacuum": "skipped",
        "checkpoint": "skipped",
    }
    assert next_run["xcoms"]["health_report"]["version"] == version
