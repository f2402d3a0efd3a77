"""Nightly Delta table care: a health report, OPTIMIZE where it gains something, VACUUM, CHECKPOINT.

Trigger with a ``table_uri``, e.g.::

    airflow dags test delta_nightly_maintenance -c '{"table_uri": "/data/events"}'

Tasks, in order:

1. ``health_report``: the engine's health report of the latest version (files, small
   files, deletion vectors, tombstones, log, protocol, recommendations), as one XCom;
2. ``optimize``: compacts small files and purges files whose deletion vectors delete
   more than 5 % of their rows; skipped when the report says nothing would improve. Small
   work runs in the worker, large work on Spark (the ``delta_default`` connection's);
3. ``vacuum``: deletes the files no version within ``delta.deletedFileRetentionDuration``
   needs, from the log (``lite``); skipped when there are none. The list goes to the task log;
4. ``checkpoint``: checkpoints the latest version and cleans up the expired log; skipped
   when that version already has the latest checkpoint.

A skipped step does not stop the next one (``none_failed``). Delta errors fail the task
with the engine's message; a conflict with a concurrent writer retries.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task

from airflow_delta.engine import DeltaTable
from airflow_delta.operators.maintenance import CheckpointOperator, OptimizeOperator, VacuumOperator
from airflow_delta.operators.retry import DELTA_RETRY_POLICY

TABLE = "{{ params.table_uri }}"
# A plain name: Airflow imports DAG files under a generated module name.
log = logging.getLogger("delta_nightly_maintenance")


@dag(
    dag_id="delta_nightly_maintenance",
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["delta", "maintenance"],
    doc_md=__doc__,
    params={
        "table_uri": Param(
            type="string",
            minLength=1,
            title="Table URI",
            description="The Delta table: a local path, file:// URI or a URI pyarrow.fs understands.",
        ),
    },
    default_args={"retries": 2, "retry_policy": DELTA_RETRY_POLICY},
)
def delta_nightly_maintenance() -> None:
    # multiple_outputs=False: a returned dict is one XCom, not one per key.
    @task(multiple_outputs=False)
    def health_report() -> dict[str, Any]:
        """The table's health report (JSON-ready); its recommendations go to the task log."""
        report = DeltaTable(get_current_context()["params"]["table_uri"]).health()
        for recommendation in report.recommendations:
            log.info("recommendation: %s", recommendation)
        return report.to_dict()

    optimize = OptimizeOperator(task_id="optimize", table=TABLE, only_if_needed=True)
    vacuum = VacuumOperator(task_id="vacuum", table=TABLE, mode="lite", only_if_needed=True, trigger_rule="none_failed")
    checkpoint = CheckpointOperator(task_id="checkpoint", table=TABLE, only_if_needed=True, trigger_rule="none_failed")

    health_report() >> optimize >> vacuum >> checkpoint


delta_nightly_maintenance()
