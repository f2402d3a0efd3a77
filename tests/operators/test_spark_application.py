"""Which Spark application a task's job ran as: the task log, and the task's "Spark application" link.

The jobs are the real DML program under the real ``SparkSubmitHook`` in local mode. A job
that builds its SparkSession registers an application (its id, its live UI's URL) and the
link points at it (or at the history server the connection names); a DV delete whose rows
the engine finds in the driver registers none, and the task log says so. Each job costs a
JVM start, so the DELETE, UPDATE and OPTIMIZE jobs here are also those operators' tests on
Spark: their return value, the commit's tags and metrics, the rows, and a retry.
"""

from __future__ import annotations

import re
import urllib.request

import deltalake
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.hooks.delta import DeltaHook, SparkApplication
from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaMergeOperator, DeltaUpdateOperator
from airflow_delta.operators.links import SparkApplicationLink
from airflow_delta.operators.maintenance import OptimizeOperator, VacuumOperator
from airflow_delta.provider import get_provider_info
from tests.airflow_layer import context, make_table, set_connection, tiny_job_driver_conf
from tests.oracles import assert_oracles_read

pytestmark = pytest.mark.usefixtures("airflow_home")

LINK = SparkApplicationLink()
NO_APPLICATION = "registered no Spark application"


def _local_spark(monkeypatch: pytest.MonkeyPatch, **extra: object) -> None:
    """Spark local mode, the driver JVM tuned for a tiny job (:func:`tests.airflow_layer.tiny_job_driver_conf`);
    the web UI as the hook decides (these tests are about the application it registers)."""
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "local[2]"})
    set_connection(
        monkeypatch,
        "delta_default",
        {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local", "spark_conf": tiny_job_driver_conf(), **extra}},
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
    # Also the DELETE-on-Spark test of the return value and of a retry (was test_dml_operators'
    # test_a_delete_on_spark_returns_the_commit_from_the_log_and_a_retry_submits_nothing): one job.
    _local_spark(monkeypatch)
    rows = make_table(table_path, dvs=True)
    operator = DeltaDeleteOperator(task_id="d", table=table_path, predicate="id = 7 OR id = 8", execution="spark")

    result = operator.execute(context())

    assert set(result) == {"version", "read_version", "operation", "metrics", "attempts"}
    assert (result["version"], result["read_version"], result["operation"]) == (3, 2, "DELETE")
    assert result["metrics"]["numDeletedRows"] == 2 and result["metrics"]["numDeletionVectorsAdded"] >= 1
    assert_oracles_read(table_path, [r for r in rows if r["id"] not in (7, 8)])
    logged = capfd.readouterr()
    said = [line for line in (logged.out + logged.err).splitlines() if NO_APPLICATION in line]
    assert len(said) == 1, logged.out[-3000:]
    assert "The DELETE job registered no Spark application on local[2]" in said[0] and "driver process" in said[0]
    assert operator._hook is not None and operator._hook.spark_applications == []
    assert LINK.get_link(operator, ti_key=None) == ""  # type: ignore[arg-type]
    # The retry finds the commit before building a submit: an unreachable Spark does not matter.
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 1})
    again = DeltaDeleteOperator(task_id="d", table=table_path, predicate="id = 7 OR id = 8", execution="spark")
    assert again.execute(context()) == result
    assert DeltaTable(table_path).version() == 3


@pytest.mark.slow
def test_a_job_that_ran_on_spark_links_its_live_ui_and_logs_its_application(
    table_path: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # The job is OPTIMIZE's on Spark, so this is also its test of what it commits and returns
    # (was test_maintenance's test_optimize_on_spark_compacts_and_returns_delta_metrics): one job.
    _local_spark(monkeypatch)
    rows = make_table(table_path)  # two appends: two files per partition
    operator = OptimizeOperator(task_id="o", table=table_path, execution="spark", conf={"spark.ui.enabled": "true"})

    result = operator.execute(context(task_id="o"))

    assert result["execution"] == "spark"
    assert result["version"] == 3
    assert (result["metrics"]["numFilesRemoved"], result["metrics"]["numFilesAdded"]) == (4, 2)
    assert len(deltalake.DeltaTable(table_path).file_uris()) == 2
    assert_oracles_read(table_path, rows)
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
    # Also the UPDATE-on-Spark test of the return value (was test_dml_operators'
    # test_update_on_spark_returns_delta_metrics_read_from_the_log): one job.
    _local_spark(monkeypatch, spark_history_url="http://127.0.0.1:18080")
    rows = make_table(table_path)
    operator = DeltaUpdateOperator(
        task_id="u", table=table_path, set={"value": "concat(value, '!')"}, predicate="part = 'b' AND id < 10",
        execution="spark",
    )

    result = operator.execute(context(task_id="u"))

    assert (result["version"], result["read_version"], result["operation"], result["attempts"]) == (3, 2, "UPDATE", 1)
    assert result["metrics"]["numUpdatedRows"] == 5
    info = DeltaTable(table_path).history(limit=1)[0]
    assert info["tags"]["airflowDelta.taskId"] == "u"
    assert {k: int(v) for k, v in info["operationMetrics"].items()} == result["metrics"]
    expected = [{**r, "value": r["value"] + "!"} if r["part"] == "b" and r["id"] < 10 else r for r in rows]
    assert_oracles_read(table_path, expected)
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
