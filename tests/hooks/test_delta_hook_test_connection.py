"""``DeltaHook.test_connection``: what the connection's Test button and ``airflow connections test`` report.

Each check runs for real: the Spark connection is looked up, Spark's own ``spark-submit
--version`` runs (the one the jobs run), and the storage options list ``test_location``
on local disk and on moto's S3 server. Each failure says what failed and what to fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyspark
import pytest

from airflow_delta.hooks.delta import DeltaHook
from scripts.airflow_cli import output_tail
from tests.airflow_layer import make_table, migrated_airflow, set_connection
from tests.spark.test_installation import mixed_pyspark_copy

pytestmark = [pytest.mark.usefixtures("airflow_home"), pytest.mark.slow]

SPARK_LOCAL = {"conn_type": "spark", "host": "local[2]"}


def _delta(monkeypatch: pytest.MonkeyPatch, **extra: object) -> DeltaHook:
    set_connection(monkeypatch, "spark_local", SPARK_LOCAL)
    set_connection(monkeypatch, "delta_test", {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local", **extra}})
    return DeltaHook("delta_test")


def test_a_working_connection_reports_each_check(monkeypatch: pytest.MonkeyPatch, table_path: str) -> None:
    make_table(table_path)
    ok, message = _delta(monkeypatch, test_location=table_path).test_connection()

    assert ok, message
    assert "Spark connection 'spark_local' (spark, local[2])" in message
    assert f"spark-submit {pyspark.__version__} ran" in message
    assert f"under {table_path}" in message and "listed 3 entries" in message  # _delta_log, part=a, part=b


def test_without_a_test_location_the_storage_is_not_claimed_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    ok, message = _delta(monkeypatch).test_connection()

    assert ok, message
    assert "storage not checked (set test_location" in message


def test_a_spark_connection_that_does_not_exist_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    ok, message = _delta(monkeypatch, spark_conn_id="spark_typo").test_connection()

    assert not ok
    assert "The Spark connection 'spark_typo' (spark_conn_id) does not exist" in message


def test_an_invalid_field_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    ok, message = _delta(monkeypatch, deploy_mode="sideways").test_connection()

    assert not ok
    assert "connection 'delta_test' extra deploy_mode" in message and "client, cluster, or empty" in message


def test_a_spark_submit_that_cannot_run_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hook = _delta(monkeypatch)
    set_connection(monkeypatch, "spark_local", {**SPARK_LOCAL, "extra": {"spark-binary": "spark3-submit"}})
    monkeypatch.setenv("PATH", str(tmp_path))  # neither on PATH nor (under that name) next to Python

    ok, message = hook.test_connection()

    assert not ok
    assert "spark3-submit is not on the worker's PATH" in message


def test_a_mixed_pyspark_is_reported_with_the_pip_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hook = _delta(monkeypatch)
    monkeypatch.setenv("SPARK_HOME", str(mixed_pyspark_copy(tmp_path)))

    ok, message = hook.test_connection()

    assert not ok
    assert "is mixed" in message and 'pip install --force-reinstall --no-deps "pyspark==' in message


def test_storage_that_cannot_be_listed_is_reported(monkeypatch: pytest.MonkeyPatch, s3_server: object) -> None:
    options = dict(s3_server.storage_options)  # type: ignore[attr-defined]
    bucket_uri = s3_server.uri("tables")  # type: ignore[attr-defined]
    good = _delta(monkeypatch, storage_options=options, test_location=bucket_uri).test_connection()
    assert good[0], good[1]

    missing_bucket = bucket_uri.replace(s3_server.bucket, "no-such-bucket")  # type: ignore[attr-defined]
    ok, message = _delta(monkeypatch, storage_options=options, test_location=missing_bucket).test_connection()

    assert not ok
    assert f"Listing {missing_bucket} with the storage options failed" in message


def test_the_airflow_cli_runs_the_same_test(tmp_path_factory: pytest.TempPathFactory, table_path: str) -> None:
    make_table(table_path)
    # A copy of the session's one migrated database (`airflow db migrate` costs seconds of CPU).
    airflow = migrated_airflow(
        tmp_path_factory,
        env_vars={
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
            "AIRFLOW_CONN_SPARK_LOCAL": json.dumps(SPARK_LOCAL),
            "AIRFLOW_CONN_DELTA_CLI": json.dumps(
                {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local", "test_location": table_path}}
            ),
            "AIRFLOW_CONN_DELTA_BROKEN": json.dumps({"conn_type": "delta", "extra": {"spark_conn_id": "spark_typo"}}),
        },
    )

    # Both in one Airflow CLI process (AirflowCli.run_many): the first is exactly a fresh
    # `airflow connections test`; the second skips the interpreter's start and Airflow's imports.
    passed, failed = airflow.run_many([("connections", "test", "delta_cli"), ("connections", "test", "delta_broken")])

    assert "Connection success!" in passed.stdout, output_tail(passed)  # (the CLI prints no message on success)
    assert "Connection failed!" in failed.stdout, output_tail(failed)
    assert "'spark_typo' (spark_conn_id) does not exist" in failed.stdout
