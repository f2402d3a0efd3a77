"""The Delta sensors against real tables, with real commits landing while they poke.

Poke mode is driven through ``BaseSensorOperator.execute`` (Airflow's own poke loop,
timeout and soft_fail handling); deferrable mode through ``execute`` raising Airflow's
``TaskDeferred``, the trigger run by asyncio, and ``execute_complete`` with its event.
Reschedule mode runs under ``airflow dags test`` in ``tests/dags/test_delta_sensors_dag.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)

from airflow_delta.engine import DeltaTable, InvalidArgumentError, InvalidFilterError, TableNotFoundError
from airflow_delta.operators.retry import DeltaNonRetryableError, DeltaRetryableError
from airflow_delta.sensors.delta import DeltaCommitConflictSensor, DeltaPartitionSensor
from airflow_delta.triggers.delta import DeltaCommitConflictTrigger
from tests.airflow_layer import set_connection
from tests.commit_watch_helpers import SCHEMA, events_table, rows
from tests.object_store_helpers import ObjectStoreServer


@pytest.fixture
def table(tmp_path: Path) -> DeltaTable:
    return events_table(tmp_path)


def conflict_sensor(table: DeltaTable, **kwargs: Any) -> DeltaCommitConflictSensor:
    options: dict[str, Any] = {"task_id": "wait", "table_uri": table.table_uri, "poke_interval": 0.05, "timeout": 30}
    options.update(kwargs)
    return DeltaCommitConflictSensor(**options)


def in_background(*writes: Any, pause: float = 0.0) -> threading.Thread:
    def run() -> None:
        for write in writes:
            time.sleep(pause)
            write()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_harmless_commits_do_not_make_it_wait(table: DeltaTable) -> None:
    read_version = table.version()
    table.append(rows("a", 10))  # blind appends into the partition read: WriteSerializable ignores them
    writer = in_background(*(lambda i=i: table.append(rows("a", 100 + i)) for i in range(10)), pause=0.02)
    sensor = conflict_sensor(table, predicate="p = 'a'", read_version=read_version, quiet_period=3600)
    began = time.monotonic()
    result = sensor.execute({})
    writer.join()
    assert time.monotonic() - began < 30
    assert result["num_waited_out"] == 0 and result["waited_out"] == []
    assert result["read_version"] == read_version and result["safe_version"] > read_version


def test_it_waits_through_conflicting_commits_until_they_are_quiet(table: DeltaTable) -> None:
    read_version = table.version()
    first = table.delete("p = 'a' AND id = 0").version  # conflicts with work reading p = 'a' at read_version
    writer = in_background(
        lambda: table.append(rows("a", 100)),  # harmless
        lambda: table.append(rows("b", 200)),  # elsewhere
        lambda: table.delete("p = 'a' AND id = 100"),  # conflicts again (its rewrite adds where the work reads)
        pause=0.3,
    )
    # The quiet period leaves a loaded machine seconds for the writes in between.
    sensor = conflict_sensor(table, predicate="p = 'a'", read_version=str(read_version), quiet_period=4.0)
    result = sensor.execute({})
    finished = time.time()
    writer.join()
    latest = table.version()
    last_conflict = table.commits_since(latest - 1)[0]
    assert last_conflict.operation == "DELETE"
    assert finished - last_conflict.timestamp / 1000 >= 4.0
    assert [c["version"] for c in result["waited_out"]] == [first, latest]
    # Without deletion vectors a DELETE rewrites the rest of its file into the partition read.
    assert [c["error"] for c in result["waited_out"]] == ["ConcurrentAppendException"] * 2
    assert result["safe_version"] == latest


def test_whole_table_work_and_isolation_levels(table: DeltaTable) -> None:
    read_version = table.version()
    table.append(rows("b", 10))  # a blind append
    waiting = {"read_version": read_version, "quiet_period": 3600, "timeout": 0.3}
    serializable = conflict_sensor(table, isolation_level="Serializable", **waiting)
    with pytest.raises(AirflowSensorTimeout):  # Serializable counts every added file
        serializable.execute({})
    assert conflict_sensor(table, **waiting).execute({})["num_waited_out"] == 0
    table.delete("p = 'b'")
    optimize_like = conflict_sensor(table, changes_data=False, **waiting)
    with pytest.raises(AirflowSensorTimeout):  # it removed files a whole-table read depends on
        optimize_like.execute({})


def test_timeout_fails_and_soft_fail_skips(table: DeltaTable) -> None:
    read_version = table.version()
    with table.transaction() as txn:
        txn.set_properties({"airflow_delta.test": "1"})
        txn.commit("SET TBLPROPERTIES")
    waiting = {"read_version": read_version, "predicate": "p = 'b'", "quiet_period": 3600, "timeout": 0.3}
    with pytest.raises(AirflowSensorTimeout):
        conflict_sensor(table, **waiting).execute({})
    with pytest.raises(AirflowSkipException):
        conflict_sensor(table, soft_fail=True, **waiting).execute({})


def test_fail_on_conflict_fails_at_once_and_soft_fail_skips(table: DeltaTable) -> None:
    read_version = table.version()
    table.delete("p = 'b'")
    strict = {"read_version": read_version, "predicate": "p = 'b'", "quiet_period": 3600, "fail_on_conflict": True}
    began = time.monotonic()
    with pytest.raises(AirflowFailException, match="ConcurrentDeleteReadException"):
        conflict_sensor(table, **strict).execute({})
    assert time.monotonic() - began < 10  # no waiting for the timeout
    with pytest.raises(AirflowSkipException):
        conflict_sensor(table, soft_fail=True, **strict).execute({})
    with pytest.raises(AirflowSkipException):
        conflict_sensor(table, soft_fail=True, deferrable=True, **strict).execute({})


def backdate_log(table: DeltaTable, seconds: float) -> None:
    """Make the commits so far look ``seconds`` old."""
    then = time.time() - seconds
    for f in Path(table.table_uri, "_delta_log").iterdir():
        os.utime(f, (then, then))


def test_without_a_read_version_it_judges_the_quiet_window(table: DeltaTable) -> None:
    backdate_log(table, 3600)
    deleted = table.delete("p = 'a' AND id = 0").version  # just now: inside the window of a sensor started now
    assert deleted is not None
    # 2.5 s: the sensor's first poke must come before the commit is that old (a loaded machine).
    sensor = conflict_sensor(table, predicate="p = 'a'", quiet_period=2.5)
    result = sensor.execute({})
    assert time.time() - table.commits_since(deleted - 1)[0].timestamp / 1000 >= 2.5  # it waited for it to age
    assert result["read_version"] == deleted - 1
    assert [c["operation"] for c in result["waited_out"]] == ["DELETE"]
    # Long after: the same commit is outside the window, nothing to wait for.
    again = conflict_sensor(table, predicate="p = 'a'", quiet_period=0.2).execute({})
    assert again["read_version"] == table.version() and again["num_waited_out"] == 0


def test_deferrable_defers_to_the_trigger_and_resumes_with_its_result(table: DeltaTable) -> None:
    read_version = table.version()
    table.delete("p = 'a' AND id = 0")
    sensor = conflict_sensor(
        table, predicate="p = 'a'", read_version=read_version, quiet_period=2.0, deferrable=True, timeout=120
    )  # 2 s: the conflict is still inside the quiet period when execute looks (so it defers)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeltaCommitConflictTrigger)
    assert (trigger.read_version, trigger.predicate, trigger.quiet_period) == (read_version, "p = 'a'", 2.0)
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout is not None and deferred.value.timeout.total_seconds() == 120

    async def fire() -> dict[str, Any]:
        return (await asyncio.wait_for(anext(trigger.run()), 20)).payload

    result = sensor.execute_complete({}, asyncio.run(fire()))
    assert result["safe_version"] == read_version + 1
    assert [c["version"] for c in result["waited_out"]] == [read_version + 1]


def test_deferrable_does_not_defer_when_already_quiet(table: DeltaTable) -> None:
    read_version = table.version()
    table.append(rows("a", 10))
    sensor = conflict_sensor(table, predicate="p = 'a'", read_version=read_version, deferrable=True)
    assert sensor.execute({})["safe_version"] == read_version + 1


def test_deferrable_resume_raises_what_the_trigger_reported(table: DeltaTable) -> None:
    sensor = conflict_sensor(table, deferrable=True)
    error = {"status": "error", "error": "TableNotFoundError", "message": "no Delta table at 'x'"}
    with pytest.raises(DeltaNonRetryableError, match="no Delta table") as raised:  # fails at once, as operators do
        sensor.execute_complete({}, error)
    assert isinstance(raised.value.__cause__, TableNotFoundError)
    bad_predicate = {"status": "error", "error": "InvalidFilterError", "message": "invalid filter 'nope = 1'"}
    with pytest.raises(DeltaNonRetryableError, match="InvalidFilterError"):
        sensor.execute_complete({}, bad_predicate)
    unavailable = {"status": "error", "error": "StorageUnavailableError", "message": "s3 did not complete"}
    with pytest.raises(DeltaRetryableError, match="StorageUnavailableError"):
        sensor.execute_complete({}, unavailable)
    conflict = {"status": "conflict", "read_version": 1, "safe_version": 3,
                "waited_out": [{"version": 2, "operation": "DELETE", "error": "ConcurrentDeleteReadException"}]}
    with pytest.raises(AirflowFailException, match=r"version 2 \(DELETE\)"):
        sensor.execute_complete({}, conflict)


def test_bad_arguments_are_named(table: DeltaTable) -> None:
    with pytest.raises(DeltaNonRetryableError, match="read_version") as raised:
        conflict_sensor(table, read_version="yesterday").execute({})
    assert isinstance(raised.value.__cause__, InvalidArgumentError)
    with pytest.raises(InvalidArgumentError, match="quiet_period"):
        conflict_sensor(table, quiet_period=-1)
    with pytest.raises(InvalidArgumentError, match="after_version"):
        DeltaPartitionSensor(task_id="p", table_uri=table.table_uri, partition="p = 'a'")


@pytest.mark.parametrize("deferrable", [False, True])
def test_a_predicate_typo_fails_the_sensor_at_once_whatever_its_retries(table: DeltaTable, deferrable: bool) -> None:
    sensor = conflict_sensor(table, read_version=0, predicate="nope = 1", deferrable=deferrable, retries=3)
    with pytest.raises(DeltaNonRetryableError) as raised:
        sensor.execute({})
    assert isinstance(raised.value, AirflowFailException)  # Airflow does not retry it
    assert isinstance(raised.value.__cause__, InvalidFilterError) and "nope" in str(raised.value)
    partition = DeltaPartitionSensor(task_id="p", table_uri=table.table_uri, partition="nope = 'a'", after_version=0)
    with pytest.raises(DeltaNonRetryableError, match="InvalidFilterError"):
        partition.poke({})
    # With soft_fail, the failure skips the task, as every other failure of a sensor does.
    with pytest.raises(AirflowSkipException):
        conflict_sensor(table, read_version=0, predicate="nope = 1", deferrable=deferrable, soft_fail=True).execute({})


def test_a_relative_table_path_is_refused_by_the_sensors(table: DeltaTable, monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(table.root)
    monkeypatch.chdir(root.parent)
    with pytest.raises(DeltaNonRetryableError, match="relative path"):
        DeltaCommitConflictSensor(task_id="w", table_uri=root.name, read_version=0, timeout=5).execute({})
    with pytest.raises(DeltaNonRetryableError, match="relative path"):
        DeltaPartitionSensor(task_id="p", table_uri=root.name, partition="p = 'a'", after_version=0).poke({})


def test_templated_fields_and_ui_color() -> None:
    assert set(DeltaCommitConflictSensor.template_fields) >= {"table_uri", "predicate", "read_version", "delta_conn_id"}
    assert set(DeltaPartitionSensor.template_fields) >= {
        "table_uri", "partition", "after_version", "after_time", "delta_conn_id"
    }
    assert DeltaCommitConflictSensor.ui_color == DeltaPartitionSensor.ui_color


# --------------------------------------------------------------------------- DeltaPartitionSensor


def partition_sensor(uri: str, **kwargs: Any) -> DeltaPartitionSensor:
    return DeltaPartitionSensor(task_id="partition", table_uri=uri, **kwargs)


def test_partition_sensor_is_false_until_data_lands_in_the_partition(table: DeltaTable) -> None:
    start = table.version()
    sensor = partition_sensor(table.table_uri, partition="p = 'c'", after_version=start)
    assert sensor.poke({}) is False  # nothing after the version yet
    table.append(rows("a", 10))
    assert sensor.poke({}) is False  # another partition
    table.append(rows("c", 20))
    done = sensor.poke({})
    assert done and done.xcom_value == {"version": start + 2, "versions": [start + 2], "latest_version": start + 2}


def test_partition_sensor_counts_new_data_only(table: DeltaTable) -> None:
    start = table.version()
    table.delete("p = 'a'")  # removes data in the partition: nothing new there
    sensor = partition_sensor(table.table_uri, partition={"p": "a"}, after_version=start)
    assert sensor.poke({}) is False
    table.append(rows("a", 30))
    assert sensor.poke({}).xcom_value["version"] == start + 2  # type: ignore[union-attr]


def test_partition_sensor_by_time_and_for_a_table_not_there_yet(tmp_path: Path) -> None:
    uri = str(tmp_path / "later")
    began = int(time.time() * 1000) - 1000
    sensor = partition_sensor(uri, partition="p = 'b'", after_time=began, poke_interval=0.05, timeout=20)
    assert sensor.poke({}) is False  # no table: not yet, never an error
    writer = in_background(
        lambda: DeltaTable.create(uri, SCHEMA, partition_by=["p"]),
        lambda: DeltaTable(uri).append(rows("a")),
        lambda: DeltaTable(uri).append(rows("b")),
        pause=0.2,
    )
    result = sensor.execute({})  # Airflow's poke loop, while the table appears and fills
    writer.join()
    assert result["version"] == 2


def test_partition_sensor_after_time_excludes_older_commits(table: DeltaTable) -> None:
    table.append(rows("c", 5))
    later = int(time.time() * 1000) + 2000
    sensor = partition_sensor(table.table_uri, partition="p = 'c'", after_time=later)
    assert sensor.poke({}) is False


# --------------------------------------------------------------------------- the delta connection


@pytest.fixture
def s3_table(s3_server: ObjectStoreServer, monkeypatch: pytest.MonkeyPatch) -> DeltaTable:
    """A table on moto's S3 whose credentials and endpoint only the ``delta_s3`` connection holds."""
    options = s3_server.storage_options
    set_connection(monkeypatch, "delta_s3", {"conn_type": "delta", "extra": {"storage_options": options}})
    t = DeltaTable.create(s3_server.uri(), SCHEMA, partition_by=["p"], storage_options=options)
    t.append(rows("a"))
    return t


@pytest.mark.slow
def test_both_sensors_read_the_table_with_the_delta_connections_storage_options(s3_table: DeltaTable) -> None:
    read_version = s3_table.version()
    s3_table.append(rows("c", 10))
    # The connection id is templated, as for the operators.
    context = {"params": {"conn": "delta_s3"}}
    conflict = conflict_sensor(s3_table, predicate="p = 'a'", read_version=read_version, delta_conn_id="{{ params.conn }}")
    conflict.render_template_fields(context)
    assert conflict.delta_conn_id == "delta_s3"
    assert conflict.execute({})["safe_version"] == read_version + 1

    partition = partition_sensor(s3_table.table_uri, partition={"p": "c"}, after_version=read_version,
                                 delta_conn_id="delta_s3", poke_interval=0.05, timeout=30)
    assert partition.execute({})["version"] == read_version + 1

    # A connection id that names no connection fails at once, naming it, not with a guess at the options.
    with pytest.raises(DeltaNonRetryableError, match="no connection 'delta_nowhere' exists"):
        conflict_sensor(s3_table, read_version=0, delta_conn_id="delta_nowhere").execute({})


@pytest.mark.slow
def test_a_deferred_sensor_hands_the_connection_id_to_the_trigger_not_the_credentials(s3_table: DeltaTable) -> None:
    read_version = s3_table.version()
    s3_table.delete("p = 'a' AND id = 0")
    sensor = conflict_sensor(
        s3_table, predicate="p = 'a'", read_version=read_version, quiet_period=2.0, deferrable=True,
        delta_conn_id="delta_s3",
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeltaCommitConflictTrigger)
    assert trigger.delta_conn_id == "delta_s3" and trigger.storage_options is None
    assert "secret" not in json.dumps(trigger.serialize()).lower()

    async def fire() -> dict[str, Any]:
        return (await asyncio.wait_for(anext(trigger.run()), 30)).payload

    result = sensor.execute_complete({}, asyncio.run(fire()))
    assert [c["version"] for c in result["waited_out"]] == [read_version + 1]
