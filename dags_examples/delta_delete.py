"""Delete rows from a Delta table with ``DeltaDeleteOperator``.

Trigger with the table and a predicate (Spark SQL), e.g.::

    airflow dags test delta_delete -c '{"table_uri": "/data/events", "predicate": "dt < \\"2024-01-01\\""}'

A predicate on partition columns only is decided from the log and runs in the Airflow
worker (no Spark job); so does a DELETE whose candidate files are small
(``worker_threshold_bytes``). Larger deletes run on Spark through the ``delta_default``
connection's Spark connection. The task returns ``{version, read_version, operation,
metrics, attempts}`` as its XCom. Conflicts with concurrent writers are retried by the
shipped ``DELTA_RETRY_POLICY``; errors no retry fixes (an unknown column, say) fail at once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_delta.operators.dml import DeltaDeleteOperator
from airflow_delta.operators.retry import DELTA_RETRY_POLICY

with DAG(
    dag_id="delta_delete",
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    tags=["delta", "dml"],
    doc_md=__doc__,
    params={
        "table_uri": Param(type="string", minLength=1, title="Table URI"),
        "predicate": Param(
            type="string", minLength=1, title="Predicate", description="Spark SQL; rows where it is NULL stay."
        ),
    },
):
    DeltaDeleteOperator(
        task_id="delete_rows",
        table="{{ params.table_uri }}",
        predicate="{{ params.predicate }}",
        retries=3,
        retry_delay=timedelta(seconds=30),
        retry_policy=DELTA_RETRY_POLICY,
    )
