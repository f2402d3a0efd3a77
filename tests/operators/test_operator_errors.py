"""Errors no retry can fix fail the task at once, typed, with a message that says what to fix.

Through the real operators: Spark's own refusals (a missing source path, an unknown column)
come back from a real ``spark-submit`` as non-retryable errors with Spark's whole message;
text Spark is sure to refuse, connections that do not exist and relative table paths are
refused in the worker before any job starts (the ``no_spark`` connection would fail any
submit with a different, retryable error).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_delta.engine import DeltaTable, InvalidArgumentError, InvalidFilterError
from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaMergeOperator, DeltaUpdateOperator
from airflow_delta.operators.maintenance import VacuumOperator
from airflow_delta.operators.retry import DeltaNonRetryableError
from tests.airflow_layer import SCHEMA, context, make_table, set_connection
from tests.oracles import assert_oracles_read

pytestmark = pytest.mark.usefixtures("airflow_home")


def _merge(table: str, **kwargs: Any) -> DeltaMergeOperator:
    options: dict[str, Any] = {
        "task_id": "m",
        "table": table,
        "source": {"parquet": "/nonexistent"},
        "on": "t.id = s.id",
        "source_alias": "s",
        "target_alias": "t",
        "clauses": [{"kind": "matched_update", "assignments": {"value": "s.value"}}],
    }
    options.update(kwargs)
    return DeltaMergeOperator(**options)


# --------------------------------------------------------------------------- Spark's refusals


@pytest.mark.slow
@pytest.mark.usefixtures("local_spark")
def test_a_merge_source_path_that_does_not_exist_fails_at_once_with_sparks_error_class(
    table_path: str, tmp_path: Path
) -> None:
    from airflow_delta.engine import SparkAnalysisError

    rows = make_table(table_path)
    missing = str(tmp_path / "no_such_source")

    with pytest.raises(DeltaNonRetryableError) as raised:
        _merge(table_path, source={"parquet": missing}).execute(context())

    assert isinstance(raised.value, AirflowFailException)  # no retry, whatever the task's retries
    assert raised.value.error_class == "SparkAnalysisError"
    error = raised.value.__cause__
    assert isinstance(error, SparkAnalysisError) and not error.retryable
    assert error.spark_error_class == "PATH_NOT_FOUND"
    assert "no_such_source" in str(error)
    assert_oracles_read(table_path, rows)


@pytest.mark.slow
@pytest.mark.usefixtures("local_spark")
def test_an_unknown_column_in_merge_on_shows_sparks_whole_message_without_internal_columns(
    table_path: str, tmp_path: Path
) -> None:
    rows = make_table(table_path)
    source = str(tmp_path / "source.parquet")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"id": 1, "part": "b", "value": "x"}], schema=SCHEMA), source)

    with pytest.raises(DeltaNonRetryableError) as raised:
        _merge(table_path, source={"parquet": source}, on="t.idd = s.id").execute(context())

    assert raised.value.error_class == "InvalidFilterError"  # the class docs/operators.md documents
    message = str(raised.value.__cause__)
    assert "UNRESOLVED_COLUMN" in message and "`t`.`idd`" in message
    assert "Did you mean one of the following?" in message and "`t`.`id`" in message  # Spark's suggestion, whole
    assert "SQLSTATE" in message and not message.endswith("...")
    assert "_delta_file" not in message and "_delta_row" not in message and "__airflow_delta" not in message
    assert_oracles_read(table_path, rows)


# --------------------------------------------------------------------------- text Spark refuses, in the worker

UNBALANCED = "name = 'x"
TWO_STATEMENTS = "id = 1; DROP TABLE t"


@pytest.mark.usefixtures("no_spark")
@pytest.mark.parametrize(
    ("build", "where", "kind"),
    [
        (lambda t, bad: DeltaDeleteOperator(task_id="d", table=t, predicate=bad, execution="auto"), "predicate",
         InvalidFilterError),
        (lambda t, bad: DeltaDeleteOperator(task_id="d", table=t, predicate=bad, execution="worker"), "predicate",
         InvalidFilterError),
        (lambda t, bad: DeltaDeleteOperator(task_id="d", table=t, predicate=bad, execution="spark"), "predicate",
         InvalidFilterError),
        (lambda t, bad: DeltaUpdateOperator(task_id="u", table=t, set={"value": "'v'"}, predicate=bad), "predicate",
         InvalidFilterError),
        (lambda t, bad: DeltaUpdateOperator(task_id="u", table=t, set={"value": bad}), "UpdateSpec.set['value']",
         InvalidArgumentError),
        (lambda t, bad: _merge(t, on=bad), "on", InvalidFilterError),
        (lambda t, bad: _merge(t, clauses=[{"kind": "matched_delete", "condition": bad}]), "clauses[0].condition",
         InvalidFilterError),
        (lambda t, bad: _merge(t, clauses=[{"kind": "matched_update", "assignments": {"value": bad}}]),
         "clauses[0].assignments['value']", InvalidArgumentError),
        (lambda t, bad: _merge(t, clauses=[{"kind": "not_matched_insert", "assignments": {"id": "s.id", "value": bad}}]),
         "clauses[0].assignments['value']", InvalidArgumentError),
    ],
)
@pytest.mark.parametrize("bad", [UNBALANCED, TWO_STATEMENTS])
def test_text_spark_is_sure_to_refuse_fails_in_the_worker_before_any_job(
    table_path: str, build: Any, where: str, kind: type, bad: str
) -> None:
    rows = make_table(table_path)

    with pytest.raises(DeltaNonRetryableError) as raised:
        build(table_path, bad).execute(context())

    assert isinstance(raised.value.__cause__, kind)
    assert where in str(raised.value)
    assert ("not closed" if bad == UNBALANCED else "';' ends a statement") in str(raised.value)
    assert_oracles_read(table_path, rows)


# --------------------------------------------------------------------------- connections


def _delete(table: str, **kwargs: Any) -> DeltaDeleteOperator:
    return DeltaDeleteOperator(task_id="d", table=table, predicate="id = 1", execution="spark", **kwargs)


def test_a_spark_connection_named_in_the_delta_connection_must_exist(
    table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_table(table_path)
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"spark_conn_id": "spark_typo"}})

    with pytest.raises(DeltaNonRetryableError) as raised:
        _delete(table_path).execute(context())

    assert raised.value.error_class == "InvalidArgumentError"
    assert "spark_conn_id='spark_typo'" in str(raised.value) and "no connection 'spark_typo' exists" in str(
        raised.value
    )
    assert "yarn" not in str(raised.value)


@pytest.mark.parametrize(
    "delta_connection",
    [None, {"conn_type": "delta", "extra": {"storage_options": {}}}],
    ids=["no-delta-connection", "delta-connection-without-spark_conn_id"],
)
def test_a_missing_default_spark_connection_fails_at_once_naming_it(
    table_path: str, monkeypatch: pytest.MonkeyPatch, delta_connection: dict[str, Any] | None
) -> None:
    """No spark_conn_id anywhere and no ``spark_default``: an error before spark-submit, not ``--master yarn``."""
    rows = make_table(table_path)
    if delta_connection is not None:
        set_connection(monkeypatch, "delta_default", delta_connection)

    with pytest.raises(DeltaNonRetryableError) as raised:
        _delete(table_path).execute(context())

    message = str(raised.value)
    assert raised.value.error_class == "InvalidArgumentError"
    assert "spark_conn_id='spark_default'" in message and "no connection 'spark_default' exists" in message
    assert "AIRFLOW_CONN_SPARK_DEFAULT" in message and "set spark_conn_id in the delta connection's extra" in message
    assert "yarn" not in message and "HADOOP_CONF_DIR" not in message
    assert_oracles_read(table_path, rows)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [({"delta_conn_id": "delta_typo"}, "delta_conn_id='delta_typo'"),
     ({"storage_conn_id": "s3_typo"}, "storage_conn_id='s3_typo'")],
)
def test_a_named_delta_or_storage_connection_that_does_not_exist_fails_at_once(
    table_path: str, kwargs: dict[str, str], argument: str
) -> None:
    make_table(table_path)

    with pytest.raises(DeltaNonRetryableError) as raised:
        _delete(table_path, **kwargs).execute(context())

    assert argument in str(raised.value) and "exists" in str(raised.value)


# --------------------------------------------------------------------------- table URIs


@pytest.mark.usefixtures("no_spark")
@pytest.mark.parametrize(
    "build",
    [
        lambda t: DeltaDeleteOperator(task_id="d", table=t, predicate="id = 1"),
        lambda t: DeltaUpdateOperator(task_id="u", table=t, set={"value": "'v'"}),
        lambda t: _merge(t),
        lambda t: VacuumOperator(task_id="v", table=t),
    ],
)
def test_a_relative_table_path_is_refused_by_every_operator(
    table_path: str, monkeypatch: pytest.MonkeyPatch, build: Any
) -> None:
    make_table(table_path)
    monkeypatch.chdir(Path(table_path).parent)  # the relative path names a real table from here

    with pytest.raises(DeltaNonRetryableError) as raised:
        build(Path(table_path).name).execute(context())

    assert raised.value.error_class == "InvalidArgumentError"
    assert "table=" in str(raised.value) and "relative path" in str(raised.value)


@pytest.mark.usefixtures("no_spark")
def test_a_file_uri_with_one_slash_names_the_local_table(table_path: str) -> None:
    rows = make_table(table_path)

    result = DeltaDeleteOperator(task_id="d", table=f"file:{table_path}", predicate="part = 'a'").execute(context())

    assert result["version"] == 3
    assert_oracles_read(table_path, [r for r in rows if r["part"] != "a"])
    assert DeltaTable(f"file:{table_path}").root == DeltaTable(table_path).root == DeltaTable(f"file://{table_path}").root
