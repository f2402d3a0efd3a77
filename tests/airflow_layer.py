"""Helpers of the Airflow layer's tests: connections from environment variables, tables, contexts, the CLI."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from scripts.airflow_cli import EXAMPLE_DAGS, AirflowCli

STAND_IN = Path(__file__).resolve().parent / "hooks" / "dml_stand_in.py"
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.string())])


def tiny_job_driver_conf() -> dict[str, str]:
    """Spark conf for the driver JVM of a test's job: the C1 compiler only, the serial GC, and
    the worker's class archive (``airflow_delta/hooks/driver_jvm.py``) when it is written.

    Every job of the tests reads a few kilobytes, but the hook gives the C1-only option only
    to the jobs it plans as small (a DELETE or UPDATE of a few small files): a MERGE, an
    OPTIMIZE or a job whose predicate it cannot plan runs with C2 and the parallel GC, whose
    compilations and threads cost about as much CPU again as the rest of the job (the MERGE of
    test_small_merge_job: 46 s of the driver JVM's CPU, 22 s with these options). Given in the
    connection's ``spark_conf``, as a user gives JVM options, the hook takes them as they are
    and adds nothing (no archive option, no background archive writer): the archive is named
    here. What the hook itself chooses is tested apart (test_delta_hook's
    ``test_a_small_job_runs_its_driver_jvm_with_c1_only...``, tests/hooks/test_driver_jvm.py).
    """
    from airflow_delta.hooks.driver_jvm import worker_driver_class_archive

    options = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    archive = worker_driver_class_archive()
    if archive is not None and archive.exists:
        options.append(archive.use_option())
    return {"spark.driver.extraJavaOptions": " ".join(options)}


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, conn: dict[str, Any]) -> None:
    """An Airflow connection as Airflow reads it from ``AIRFLOW_CONN_<ID>`` (JSON)."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


@pytest.fixture
def airflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary AIRFLOW_HOME, no other Airflow settings, no connections but the test's."""
    for key in [key for key in os.environ if key.startswith("AIRFLOW")]:
        monkeypatch.delenv(key)
    home = tmp_path / "airflow_home"
    home.mkdir()
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    yield home


def make_table(path: str | Path, *, dvs: bool = False, rows: int = 20) -> list[dict[str, Any]]:
    """A table partitioned by ``part`` (a/b), written in two appends; returns its rows."""
    properties = {"delta.enableDeletionVectors": "true"} if dvs else None
    table = DeltaTable.create(str(path), SCHEMA, partition_by=["part"], properties=properties)
    data = [{"id": i, "part": "ab"[i % 2], "value": f"v{i}"} for i in range(rows)]
    half = rows // 2
    table.append(pa.Table.from_pylist(data[:half], schema=SCHEMA))
    table.append(pa.Table.from_pylist(data[half:], schema=SCHEMA))
    return data


@dataclass
class FakeTaskInstance:
    """The task-instance fields the operators read from the context (dag_id, task_id, map_index)."""

    dag_id: str
    task_id: str
    map_index: int = -1


def context(
    dag_id: str = "dag", task_id: str = "task", run_id: str = "manual__1", map_index: int = -1
) -> dict[str, Any]:
    return {"ti": FakeTaskInstance(dag_id, task_id, map_index), "run_id": run_id}


def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SQLite file of one ``airflow db migrate``, run once per test session.

    ``airflow db migrate`` costs seconds of CPU (Airflow's imports, a hundred migrations)
    and gives the same file every time: nothing in it depends on the home, the DAG folder
    or the connections (all set per run by environment variables). So it runs once, and
    each module's Airflow starts from a copy. Under xdist the workers share the session's
    base directory; a lock makes one of them migrate while the others wait for its file.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    base = tmp_path_factory.getbasetemp()
    root = base.parent if worker else base
    database = root / "airflow-migrated" / "airflow.db"
    with open(root / "airflow-migrated.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not database.is_file():
            airflow = AirflowCli(database.parent / "home")
            airflow.migrate()
            # Renamed into place whole: a file that exists is a finished migration.
            shutil.copyfile(airflow.home / "airflow.db", database.with_suffix(".tmp"))
            database.with_suffix(".tmp").rename(database)
    return database


def migrated_airflow(
    tmp_path_factory: pytest.TempPathFactory,
    dags_folder: Path = EXAMPLE_DAGS,
    env_vars: Mapping[str, str] | None = None,
    logging_level: str = "WARNING",
) -> AirflowCli:
    """An isolated Airflow CLI (``scripts/airflow_cli.py``) with a migrated database of its own, for a module's runs.

    The database is a copy of the session's one migration (:func:`migrated_database`).
    """
    airflow = AirflowCli(
        tmp_path_factory.mktemp("airflow_home"), dags_folder, dict(env_vars or {}), logging_level=logging_level
    )
    shutil.copyfile(migrated_database(tmp_path_factory), airflow.home / "airflow.db")
    return airflow
