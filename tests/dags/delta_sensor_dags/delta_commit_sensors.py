"""The sensors in a DAG, for ``tests/dags/test_delta_sensors_dag.py`` (run with ``airflow dags test``).

``wait_poke``, then ``wait_reschedule``, wait until the commits after the read version no
longer conflict with a DELETE in partition ``a``; ``wait_reschedule`` judges them at
Serializable, so blind appends into ``a`` conflict for it and not for ``wait_poke``
(WriteSerializable): the test keeps it waiting with them while ``wait_poke`` finishes.
``partition_has_data`` waits for new data in partition ``c``; ``delete_at_safe_version``
then deletes from the version the sensor judged safe, committing through the engine's
conflict checks. Each sensor try leaves a file in ``params.marks_dir`` as it starts (its
pokes follow), for the test's writer: Airflow's database does not always show a running
poke-mode task while it runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_delta.engine import CommitOptions, DeltaTable, RetryPolicy
from airflow_delta.sensors.delta import DeltaCommitConflictSensor, DeltaPartitionSensor

TABLE = "{{ params.table_uri }}"


def _mark_try(context: Any) -> None:
    """A file per try of a task, named after it, in the test's ``marks_dir``: the try is executing."""
    marks_dir = context["params"].get("marks_dir")
    if marks_dir:
        Path(marks_dir, f"{context['ti'].task_id}.{time.time_ns()}").touch()


READ_VERSION = "{{ params.read_version }}"

with DAG(
    dag_id="delta_commit_sensors",
    schedule=None,
    params={"table_uri": "", "read_version": 0, "delete": "p = 'a' AND id = 1", "marks_dir": ""},
    tags=["delta", "test"],
) as dag:
    wait_poke = DeltaCommitConflictSensor(
        task_id="wait_poke",
        table_uri=TABLE,
        predicate="p = 'a'",
        read_version=READ_VERSION,
        quiet_period=2.0,
        mode="poke",
        poke_interval=0.2,
        pre_execute=_mark_try,
        timeout=600,
    )
    wait_reschedule = DeltaCommitConflictSensor(
        task_id="wait_reschedule",
        table_uri=TABLE,
        predicate="p = 'a'",
        read_version=READ_VERSION,
        quiet_period=4.0,
        isolation_level="Serializable",
        mode="reschedule",
        poke_interval=1,
        timeout=600,
        pre_execute=_mark_try,
    )
    partition_has_data = DeltaPartitionSensor(
        task_id="partition_has_data",
        table_uri=TABLE,
        partition={"p": "c"},
        after_version=READ_VERSION,
        mode="reschedule",
        poke_interval=1,
        timeout=600,
    )

    @task
    def delete_at_safe_version(table_uri: str, predicate: str, judged: dict[str, Any]) -> dict[str, Any]:
        table = DeltaTable(table_uri)
        result = table.delete(
            predicate,
            snapshot=table.snapshot(judged["safe_version"]),
            commit=CommitOptions(retry=RetryPolicy(max_attempts=20)),
        )
        return {"version": result.version, "read_version": result.read_version, "deleted": result.num_deleted_rows}

    deleted = delete_at_safe_version(TABLE, "{{ params.delete }}", wait_reschedule.output)
    wait_poke >> wait_reschedule >> partition_has_data >> deleted
