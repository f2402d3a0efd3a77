"""Which Spark application a task's job ran as: the task log, and the task's "Spark application" link.

The jobs are the real DML program under the real ``SparkSubmitHook`` in local mode. A job
that builds its SparkSession registers an application (its id, its live UI's URL) and the
link points at it (or at the history server the connection names); a DV delete whose rows
the engine finds in the driver registers none, and the task log says so.
"""

from __future__ import annotations

import re
import urllib.request

import pytest

from airflow_delta.hooks.delta import DeltaHook, SparkApplication
from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaMergeOperator, DeltaUpdateOperator
from airflow_delta.operators.links import SparkApplicationLink
from airflow_delta.operators.maintenance import OptimizeOperator, VacuumOperator
from airflow_delta.provider import get_provider_info
from tests.airflow_layer import context, make_table, set_connection
from tests.oracles import assert_oracles_read

pytestmark = pytest.mark.usefixtures("airflow_home")

LINK = SparkApplicationLink()
NO_APPLICATION = "registered no Spark application"


def _local_spark(monkeypatch: pytest.MonkeyPatch, **extra: object) -> None:
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "local[2]"})
    set_connection(
        monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local", **extra}}
    )


def test_every_operator_that_submits_a_spark_job_has_the_link_and_the_provider_registers_it() -> None:
    for operator in (DeltaDeleteOperator, DeltaUpdateOperator, DeltaMergeOperator, OptimizeOperator, VacuumOperator):
        assert any(isinstance(link, SparkApplicationLink) for link in operator.operator_extra_links), operator
    assert get_provider_info()["extra-links"] == ["airflow_delta.operators.links.SparkApplicationLink"]


def test_the_link_prefers_the_history_server_and_is_empty_without_an_application() -> None:
    app = SparkApplication("app-20260101-0001", "http://driver:4040", "spark://m:7077")

    assert app.url(None) == "http://driver:4040"
    assert app.url("http://history:18080/") == "http://history:18080/history/app-20260101-0001/jobs/"
    assert SparkApplication("local-1", None, "local[2]").url(None) is None
    assert SparkApplication.from_line('AIRFLOW_DELTA_SPARK_APP {"app_id": "local-1", "ui_url": null}') == (
        SparkApplication("local-1", None, None)
    )
    assert SparkApplication.from_line("AIRFLOW_DELTA_SPARK_APP {broken") is None
    # An operator that never ran (or ran no job) has no link.
    assert LINK.get_link(DeltaDeleteOperator(task_id="d", table="/t"), ti_key=None) == ""  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_dv_delete_done_in_the_driver_says_in_the_task_log_that_no_application_ran(
    table_path: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    _local_spark(monkeypatch)
    rows = make_table(table_path, dvs=True)
    operator = DeltaDeleteOperator(task_id="d", table=table_path, predicate="id = 7 OR id = 8", execution="spark")

    result = operator.execute(context())

    assert result["metrics"]["numDeletedRows"] == 2 and result["metrics"]["numDeletionVectorsAdded"] >= 1
    assert_oracles_read(table_path, [r for r in rows if r["id"] not in (7, 8)])
    logged = capfd.readouterr()
    said = [line for line in (logged.out + logged.err).splitlines() if NO_APPLICATION in line]
    assert len(said) == 1, logged.out[-3000:]
    assert "The DELETE job registered no Spark application on local[2]" in said[0] and "driver process" in said[0]
    assert operator._hook is not None and operator._hook.spark_applications == []
    assert LINK.get_link(operator, ti_key=None) == ""  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_job_that_ran_on_spark_links_its_live_ui_and_logs_its_application(
    table_path: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    _local_spark(monkeypatch)
    make_table(table_path)
    operator = DeltaUpdateOperator(
        task_id="u", table=table_path, set={"value": "'x'"}, predicate="id < 3", conf={"spark.ui.enabled": "true"},
            execution="spark",
    )

    operator.execute(context())

    assert operator._hook is not None
    (application,) = operator._hook.spark_applications
    assert re.fullmatch(r"local-\d+", application.app_id) and application.master == "local[2]"
    assert application.ui_url is not None and re.fullmatch(r"http://[^/]+:\d+", application.ui_url)
    assert LINK.get_link(operator, ti_key=None) == application.ui_url  # type: ignore[arg-type]
    logged = capfd.readouterr()
    assert NO_APPLICATION not in logged.out + logged.err
    assert f"Spark application {application.app_id} registered on local[2], its UI at {application.ui_url}" in (
        logged.out + logged.err
    )
    # The UI lived only as long as the job: nothing answers there any more.
    with pytest.raises(OSError):
        urllib.request.urlopen(application.ui_url, timeout=5)


@pytest.mark.slow
def test_with_a_history_server_configured_the_link_opens_the_application_there(
    table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _local_spark(monkeypatch, spark_history_url="http://127.0.0.1:18080")
    make_table(table_path)
    operator = DeltaUpdateOperator(
        task_id="u", table=table_path, set={"value": "'y'"}, predicate="id < 3", execution="spark"
    )

    operator.execute(context())

    assert operator._hook is not None
    (application,) = operator._hook.spark_applications
    assert application.ui_url is None  # a small job runs without the UI
    assert LINK.get_link(operator, ti_key=None) == (  # type: ignore[arg-type]
        f"http://127.0.0.1:18080/history/{application.app_id}/jobs/"
    )


def test_a_history_url_that_is_not_http_is_refused_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_delta.engine import InvalidArgumentError

    _local_spark(monkeypatch, spark_history_url="history:18080")

    with pytest.raises(InvalidArgumentError, match="spark_history_url"):
        _ = DeltaHook().settings
