"""Helpers of the Airflow layer's tests: connections from environment variables, tables, contexts, the CLI."""

from __future__ import annotations

import json
import os
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


def migrated_airflow(
    tmp_path_factory: pytest.TempPathFactory,
    dags_folder: Path = EXAMPLE_DAGS,
    env_vars: Mapping[str, str] | None = None,
    logging_level: str = "WARNING",
) -> AirflowCli:
    """An isolated Airflow CLI (``scripts/airflow_cli.py``) with a migrated database, for a module's runs."""
    airflow = AirflowCli(
        tmp_path_factory.mktemp("airflow_home"), dags_folder, dict(env_vars or {}), logging_level=logging_level
    )
    airflow.migrate()
    return airflow
