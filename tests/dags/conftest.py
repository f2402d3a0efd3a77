"""Fixtures of the DAG tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from scripts.airflow_cli import EXAMPLE_DAGS


@pytest.fixture
def isolated_airflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process Airflow (``DagBag``) on the example DAGs, in a temporary home; no bytecode beside the DAG files."""
    for key in [key for key in os.environ if key.startswith("AIRFLOW")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow_home"))
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(EXAMPLE_DAGS))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
