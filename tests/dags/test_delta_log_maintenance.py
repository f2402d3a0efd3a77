"""The ``delta_log_maintenance`` example DAG: it parses, and it does its job under the real Airflow CLI.

The end-to-end tests run ``airflow dags test`` with an ``AIRFLOW_HOME`` and SQLite
database (a copy of the session's one ``airflow db migrate``) in a temporary directory, on
tables the module creates with the engine. The three runs (one per test) are made once for
the module, one after the other in one Airflow CLI process (``AirflowCli.test_dags``: the
first is a fresh ``airflow dags test``, the others skip the process start); each test
asserts its own run. Run states, task states and XComs are read from that SQLite database
(the CLI prints them only as log lines).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_delta.engine.table import DeltaTable
from scripts.airflow_cli import EXAMPLE_DAGS, AirflowCli, output_tail
from tests.airflow_layer import migrated_airflow

DAGS_FOLDER = EXAMPLE_DAGS
DAG_ID = "delta_log_maintenance"
TASK_IDS = ["inspect_table", "checkpoint_if_due", "cleanup_expired_log", "report"]
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
APPENDS = 12


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> AirflowCli:
    """A migrated Airflow metadata database in a temporary AIRFLOW_HOME, shared by this module's runs."""
    return migrated_airflow(tmp_path_factory, DAGS_FOLDER)


@dataclass(frozen=True)
class Case:
    """One test's table, what it held before the run, and the run."""

    path: Path
    rows: pa.Table
    log_before: set[str]
    result: subprocess.CompletedProcess[str]
    run: dict[str, Any]


@pytest.fixture(scope="module")
def cases(airflow: AirflowCli, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    """The three tests' tables, each run through the DAG once (one process for the three runs)."""
    root = tmp_path_factory.mktemp("log_maintenance")
    # Written three days ago and never checkpointed: with a one-day retention every
    # commit before the new checkpoint has expired.
    expired = root / "expired"
    _make_table(expired)
    _backdate_log(expired, days=3)
    # A checkpoint is due (13 commits), but the retention given is not an interval.
    bad_retention = root / "bad_retention"
    _make_table(bad_retention)
    # 3 commits since the checkpoint, under the default threshold of 10; nothing has expired.
    recent = root / "recent"
    _make_table(recent)
    table = DeltaTable(str(recent))
    assert table.checkpoint().version == APPENDS
    for i in range(3):
        table.append(pa.table({"id": [200 + i], "name": [f"row {200 + i}"]}, schema=SCHEMA))
    confs = {
        "expired": {"table_uri": str(expired), "log_retention": "interval 1 day"},
        "bad_retention": {"table_uri": str(bad_retention), "log_retention": "thirty days"},
        "recent": {"table_uri": str(recent)},
    }
    paths = {"expired": expired, "bad_retention": bad_retention, "recent": recent}
    before = {name: (_sorted_rows(DeltaTable(str(path))), _log_names(path)) for name, path in paths.items()}
    outcomes = airflow.test_dags([(DAG_ID, conf) for conf in confs.values()])
    return {name: Case(paths[name], *before[name], *outcome) for name, outcome in zip(confs, outcomes, strict=True)}


def _make_table(path: Path) -> pa.Table:
    """A table with 13 commits and no checkpoint; returns its rows, sorted."""
    # A checkpoint interval above the number of commits keeps the engine's automatic
    # checkpoints out of the way: the checkpoint is the DAG's to write.
    table = DeltaTable.create(str(path), SCHEMA, properties={"delta.checkpointInterval": "1000"})
    for i in range(APPENDS):
        table.append(pa.table({"id": [i, 100 + i], "name": [f"row {i}", f"row {100 + i}"]}, schema=SCHEMA))
    return _sorted_rows(table)


def _sorted_rows(table: DeltaTable) -> pa.Table:
    return table.snapshot().to_arrow().sort_by("id")


def _log_names(path: Path) -> set[str]:
    return {p.name for p in (path / "_delta_log").iterdir() if p.is_file()}


def _backdate_log(path: Path, days: int) -> None:
    """Make every log file look ``days`` old, as for a table last written that long ago."""
    old = time.time() - days * 86_400
    for file in (path / "_delta_log").iterdir():
        os.utime(file, (old, old))


# --------------------------------------------------------------------------- parsing


@pytest.mark.usefixtures("isolated_airflow")
def test_dag_file_parses_with_the_expected_tasks_and_params() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_FOLDER))

    assert bag.import_errors == {}
    assert DAG_ID in bag.dag_ids  # beside the DML example DAGs of the same folder
    dag = bag.dags[DAG_ID]
    assert dag.task_ids == TASK_IDS
    upstream = {task.task_id: task.upstream_task_ids for task in dag.tasks}
    assert upstream == {
        "inspect_table": set(),
        "checkpoint_if_due": {"inspect_table"},
        "cleanup_expired_log": {"checkpoint_if_due"},
        "report": {"inspect_table", "checkpoint_if_due", "cleanup_expired_log"},
    }
    assert dag.schedule is None
    # table_uri has no default: a run must name its table.
    assert not dag.params.get_param("table_uri").has_value
    assert dag.params["log_retention"] is None
    assert dag.params["checkpoint_threshold"] == 10


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_dags_test_checkpoints_the_table_and_cleans_up_its_expired_log(cases: dict[str, Case]) -> None:
    case = cases["expired"]
    path, rows, result, run = case.path, case.rows, case.result, case.run
    assert not any(".checkpoint." in name for name in case.log_before)

    assert result.returncode == 0, output_tail(result)
    assert run["state"] == "success"
    assert run["tasks"] == dict.fromkeys(TASK_IDS, "success")

    names = _log_names(path)
    assert f"{APPENDS:020d}.checkpoint.parquet" in names
    assert json.loads((path / "_delta_log" / "_last_checkpoint").read_text())["version"] == APPENDS
    # Cleanup anchored on the new checkpoint: everything before it went, it and its commit stayed.
    assert f"{APPENDS:020d}.json" in names
    expired = {f"{v:020d}.{ext}" for v in range(APPENDS) for ext in ("json", "crc")}
    assert not expired & names

    table = DeltaTable(str(path))
    snapshot = table.snapshot()
    assert snapshot.version == APPENDS
    assert snapshot.log_segment.checkpoint_version == APPENDS
    assert snapshot.log_segment.commit_files == ()
    assert _sorted_rows(table).equals(rows)
    # delta-rs reads the table from our checkpoint alone, too.
    import deltalake

    other = deltalake.DeltaTable(str(path))
    assert other.version() == APPENDS
    assert other.to_pyarrow_table().sort_by("id").equals(rows)

    inspected = run["xcoms"]["inspect_table"]
    assert inspected["version"] == APPENDS
    assert inspected["num_files"] == APPENDS
    assert inspected["size_bytes"] == sum(f.stat().st_size for f in path.glob("*.parquet"))
    assert inspected["last_checkpoint_version"] is None
    assert inspected["commits_since_checkpoint"] == APPENDS + 1
    assert inspected["log_retention_seconds"] == 86_400
    assert (inspected["min_reader_version"], inspected["min_writer_version"]) == (
        snapshot.protocol.min_reader_version,
        snapshot.protocol.min_writer_version,
    )
    assert run["xcoms"]["checkpoint_if_due"] == APPENDS
    assert sorted(run["xcoms"]["cleanup_expired_log"]) == sorted(expired)
    report = run["xcoms"]["report"]
    assert report["checkpoint_written"] == APPENDS
    assert report["log_files_deleted"] == len(expired)


@pytest.mark.slow
def test_dags_test_fails_on_a_bad_retention_before_writing_anything(cases: dict[str, Case]) -> None:
    case = cases["bad_retention"]
    path, rows, before, result, run = case.path, case.rows, case.log_before, case.result, case.run

    assert result.returncode != 0
    assert run["state"] == "failed"
    assert run["tasks"] == {
        "inspect_table": "failed",
        "checkpoint_if_due": "upstream_failed",
        "cleanup_expired_log": "upstream_failed",
        "report": "upstream_failed",
    }
    output = result.stdout + result.stderr
    assert "InvalidTablePropertyError" in output
    assert "thirty days" in output
    # A checkpoint was due (13 commits), but the run stopped before writing one.
    assert _log_names(path) == before
    assert _sorted_rows(DeltaTable(str(path))).equals(rows)


@pytest.mark.slow
def test_dags_test_leaves_a_recently_checkpointed_table_alone(cases: dict[str, Case]) -> None:
    case = cases["recent"]
    path, before, result, run = case.path, case.log_before, case.result, case.run

    assert result.returncode == 0, output_tail(result)
    assert run["state"] == "success"
    assert run["tasks"] == dict.fromkeys(TASK_IDS, "success")
    inspected = run["xcoms"]["inspect_table"]
    assert (inspected["version"], inspected["last_checkpoint_version"]) == (APPENDS + 3, APPENDS)
    assert inspected["commits_since_checkpoint"] == 3
    assert inspected["log_retention_seconds"] == 30 * 86_400  # the table's default delta.logRetentionDuration
    assert run["xcoms"].get("checkpoint_if_due") is None  # Airflow 3 stores no XCom for a None return
    assert run["xcoms"]["cleanup_expired_log"] == []
    assert run["xcoms"]["report"]["checkpoint_written"] is None
    assert _log_names(path) == before
    assert _sorted_rows(DeltaTable(str(path))).equals(case.rows)  # the 13 commits' rows and the 3 appended
