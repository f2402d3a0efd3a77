"""Delta fleet maintenance: the health of every table under a prefix, a budgeted plan, and one
mapped task per table and operation.

Trigger with the prefix the tables live under (a local path or an object-store URI)::

    airflow dags test delta_fleet_maintenance -c '{"prefix": "s3://lake/"}'

Tasks:

1. ``fleet_health``: discovers the Delta tables under ``prefix`` (``_delta_log`` marks a
   table; three directory levels down) and reads each one's health from its log, in
   parallel, never its data files. A table that cannot be read is reported, not fatal.
2. ``plan``: ranks what the records justify by expected benefit per byte rewritten and
   keeps what fits the budget (at most 1 GiB rewritten and 20 tasks per run; OPTIMIZE at
   most every 12 hours per table, VACUUM every day); every table's decision and its
   reason go to the log.
3. ``plan_optimize``, ``plan_vacuum``, ``plan_checkpoint`` pick each operation's list out of
   the plan (Airflow maps over a task's whole return value only);
4. ``optimize``, ``vacuum``, ``checkpoint``: ``expand_kwargs`` over those lists, so
   each table is its own task instance with its own retries and logs. The checkpoints run
   after the compactions, which add commits.

With a maintenance history configured (the ``delta_default`` connection's
``maintenance_history_uri`` extra, or ``[delta] maintenance_history_uri``), the health of
each table and every maintenance run are appended to it, and the "Delta tables" page of
the Airflow UI shows them (docs/fleet.md).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_delta.operators.fleet import DeltaFleetHealthOperator, DeltaMaintenancePlanOperator, planned_tasks
from airflow_delta.operators.maintenance import CheckpointOperator, OptimizeOperator, VacuumOperator
from airflow_delta.operators.retry import DELTA_RETRY_POLICY

with DAG(
    dag_id="delta_fleet_maintenance",
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["delta", "maintenance", "fleet"],
    doc_md=__doc__,
    default_args={"retries": 2, "retry_policy": DELTA_RETRY_POLICY},
    params={
        "prefix": Param(type="string", minLength=1, title="Prefix",
                        description="Where the Delta tables live: a local path or an s3://, az://, gs:// URI."),
    },
):
    health = DeltaFleetHealthOperator(task_id="fleet_health", prefix="{{ params.prefix }}", max_depth=3, parallelism=4)
    plan = DeltaMaintenancePlanOperator(
        task_id="plan",
        health=health.output,
        max_bytes_rewritten=1 << 30,
        max_tasks=20,
        cooldowns={"OPTIMIZE": timedelta(hours=12), "VACUUM": timedelta(days=1), "CHECKPOINT": timedelta(hours=1)},
        budget_options={"min_commits_since_checkpoint": 10},
        operator_kwargs={"VACUUM": {"mode": "lite"}},
    )
    # One task instance per planned table and operation (planned_tasks picks the list out of the plan).
    optimize = OptimizeOperator.partial(task_id="optimize", execution="worker").expand_kwargs(
        planned_tasks(plan, "optimize")
    )
    vacuum = VacuumOperator.partial(task_id="vacuum").expand_kwargs(planned_tasks(plan, "vacuum"))
    checkpoint = CheckpointOperator.partial(task_id="checkpoint", trigger_rule="none_failed").expand_kwargs(
        planned_tasks(plan, "checkpoint")
    )
    optimize >> checkpoint
