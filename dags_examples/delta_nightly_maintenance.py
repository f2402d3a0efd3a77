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

Where OPTIMIZE runs is a deployment choice, so it comes from the environment of the
process that parses the DAG: ``DELTA_NIGHTLY_OPTIMIZE_EXECUTION`` is ``auto`` (the
default: the worker below 1 GiB of input, Spark above), ``worker`` or ``spark``. The
Spark job goes to the ``delta_default`` connection's ``spark_conn_id``; ``make demo`` sets
``spark`` and a ``local[2]`` Spark connection.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from typing import Any, Literal, cast

from airflow.sdk import Param, dag, get_current_context, task

from airflow_delta.engine import DeltaTable
from airflow_delta.operators.maintenance import CheckpointOperator, OptimizeOperator, VacuumOperator
from airflow_delta.operators.retry import DELTA_RETRY_POLICY

TABLE = "{{ params.table_uri }}"
# Read when the DAG is parsed: the operator checks it there, so a typo fails the DAG import.
OPTIMIZE_EXECUTION = cast(Literal["auto", "worker", "spark"], os.environ.get("DELTA_NIGHTLY_OPTIMIZE_EXECUTION", "auto"))
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

    optimize = OptimizeOperator(task_id="optimize", table=TABLE, only_if_needed=True, execution=OPTIMIZE_EXECUTION)
    vacuum = VacuumOperator(task_id="vacuum", table=TABLE, mode="lite", only_if_needed=True, trigger_rule="none_failed")
    checkpoint = CheckpointOperator(task_id="checkpoint", table=TABLE, only_if_needed=True, trigger_rule="none_failed")

    health_report() >> optimize >> vacuum >> checkpoint


delta_nightly_maintenance()
