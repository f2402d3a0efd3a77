"""Fixtures of the Airflow layer's tests (shared with tests/hooks)."""

from pathlib import Path

import pytest

from tests.airflow_layer import airflow_home, set_connection, tiny_job_driver_conf  # noqa: F401  (airflow_home: the fixture)


@pytest.fixture
def no_spark(airflow_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A delta connection whose Spark cannot be reached: a submit would fail the test."""
    set_connection(monkeypatch, "spark_unreachable", {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 1})
    set_connection(
        monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"spark_conn_id": "spark_unreachable"}}
    )


@pytest.fixture
def local_spark(airflow_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A delta connection submitting to Spark local mode, without the driver's web UI, its driver JVM tuned
    for a tiny job (:func:`tests.airflow_layer.tiny_job_driver_conf`).

    Nobody opens the UI of a test's job, and starting it costs about as much as a small
    job's own work (tests/operators/test_spark_application.py turns it on to link it).
    """
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "local[2]"})
    spark_conf = {"spark.ui.enabled": "false", **tiny_job_driver_conf()}
    set_connection(
        monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local", "spark_conf": spark_conf}}
    )
