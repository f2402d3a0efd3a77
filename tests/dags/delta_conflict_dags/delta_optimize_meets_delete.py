"""An OPTIMIZE that meets a concurrent DELETE on its partition, for ``tests/dags/test_delta_conflict_dag.py``.

1. ``wait_until_safe``: ``DeltaCommitConflictSensor`` waits until the commits after the
   run's ``read_version`` no longer conflict with work on the partition, and returns the
   version it judged safe;
2. ``concurrent_delete``: another writer's DELETE lands in that partition right after the
   judgement (a task, so that it lands there on every run, not by timing);
3. ``optimize_partition``: compacts the partition. Its first try plans on the version the
   sensor judged safe, so its commit meets the DELETE: the engine refuses it
   (``ConcurrentDeleteReadException``, retryable), the task fails with
   ``DeltaRetryableError`` and ``DELTA_RETRY_POLICY``'s rule retries it; the retry plans
   on the newest snapshot and commits.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, ExceptionRetryPolicy, get_current_context, task

from airflow_delta.engine import DeltaError, DeltaTable, OptimizeOptions
from airflow_delta.operators.retry import DELTA_RETRY_POLICY, task_error
from airflow_delta.sensors.delta import DeltaCommitConflictSensor

TABLE = "{{ params.table_uri }}"
PARTITION = "{{ params.partition }}"
# DELTA_RETRY_POLICY's rules with a one-second delay instead of 30 s: a test run should not idle.
QUICK_DELTA_RETRY_POLICY = ExceptionRetryPolicy(
    rules=[dataclasses.replace(rule, retry_delay=timedelta(seconds=1)) for rule in DELTA_RETRY_POLICY.rules],
    default=DELTA_RETRY_POLICY.default,
)
log = logging.getLogger("delta_optimize_meets_delete")

with DAG(
    dag_id="delta_optimize_meets_delete",
    schedule=None,
    params={"table_uri": "", "read_version": 0, "partition": "a", "delete": "id % 3 = 0"},
    tags=["delta", "test"],
) as dag:
    wait_until_safe = DeltaCommitConflictSensor(
        task_id="wait_until_safe",
        table_uri=TABLE,
        predicate=f"part = '{PARTITION}'",
        read_version="{{ params.read_version }}",
        quiet_period=1.0,
        mode="poke",
        poke_interval=0.5,
        timeout=120,
    )

    @task
    def concurrent_delete(table_uri: str, partition: str, predicate: str) -> dict[str, Any]:
        result = DeltaTable(table_uri).delete(f"part = '{partition}' AND ({predicate})")
        log.info("concurrent DELETE committed version %s", result.version)
        return {"version": result.version, "deleted": result.num_deleted_rows}

    @task(retries=2, retry_policy=QUICK_DELTA_RETRY_POLICY)
    def optimize_partition(table_uri: str, partition: str, judged: dict[str, Any]) -> dict[str, Any]:
        try_number = get_current_context()["ti"].try_number
        table = DeltaTable(table_uri)
        # The first try compacts what the sensor judged; a retry plans again on the newest snapshot.
        snapshot = table.snapshot(judged["safe_version"]) if try_number == 1 else table.snapshot()
        log.info("try %d plans OPTIMIZE of partition %s on version %d", try_number, partition, snapshot.version)
        try:
            result = table.optimize(OptimizeOptions(where=f"part = '{partition}'"), snapshot=snapshot)
        except DeltaError as error:
            raise task_error(error) from error
        return {"versions": list(result.versions), "read_version": result.read_version, "try_number": try_number}

    deleted = concurrent_delete(TABLE, PARTITION, "{{ params.delete }}")
    optimized = optimize_partition(TABLE, PARTITION, wait_until_safe.output)
    wait_until_safe >> deleted >> optimized
