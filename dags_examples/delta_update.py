"""Update rows of a Delta table with ``DeltaUpdateOperator`` (a Spark job).

Trigger with the table, the assignments (column -> Spark SQL expression) and a
predicate, e.g.::

    airflow dags test delta_update -c '{"table_uri": "/data/orders",
        "set": {"status": "upper(status)"}, "predicate": "region = \\"eu\\""}'

With deletion vectors the old rows are marked deleted and only updated rows are written;
otherwise the touched files are rewritten. The value is cast to the column's type by
Spark's store-assignment rules; CHECK constraints and NOT NULL are enforced. The task
returns ``{version, read_version, operation, metrics, attempts}`` as its XCom.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_delta.operators.dml import DeltaUpdateOperator
from airflow_delta.operators.retry import DELTA_RETRY_POLICY

with DAG(
    dag_id="delta_update",
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    tags=["delta", "dml"],
    doc_md=__doc__,
    render_template_as_native_obj=True,
    params={
        "table_uri": Param(type="string", minLength=1, title="Table URI"),
        "set": Param(
            type="object",
            minProperties=1,
            title="Assignments",
            description='Column name -> Spark SQL expression, e.g. {"status": "\'closed\'"}.',
        ),
        "predicate": Param(type="string", minLength=1, title="Predicate", description="Spark SQL; NULL rows stay."),
    },
):
    DeltaUpdateOperator(
        task_id="update_rows",
        table="{{ params.table_uri }}",
        set="{{ params.set }}",  # a dict: the DAG renders templates as native objects
        predicate="{{ params.predicate }}",
        conf={"spark.sql.shuffle.partitions": "4"},
        retries=3,
        retry_delay=timedelta(seconds=30),
        retry_policy=DELTA_RETRY_POLICY,
    )
