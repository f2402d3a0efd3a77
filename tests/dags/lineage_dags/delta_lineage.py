"""The DAG of tests/operators/test_lineage.py: three DELETEs on one table, each a way an asset event is made.

``LINEAGE_TABLE`` (read when the DAG is parsed) is the table: a static URI, so the first
and last tasks have the table's asset as their default outlet. The middle task takes the
table from ``dag_run.conf["table"]`` (a template), so its default outlet is an alias that
resolves to the same asset at run time.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_delta.operators.dml import DeltaDeleteOperator

TABLE = os.environ.get("LINEAGE_TABLE", "/tmp/airflow-delta-lineage-table")

with DAG(dag_id="delta_lineage", schedule=None, start_date=datetime(2025, 1, 1, tzinfo=UTC), catchup=False):
    in_worker = DeltaDeleteOperator(task_id="delete_partition", table=TABLE, predicate="part = 'a'")
    nothing = DeltaDeleteOperator(
        task_id="delete_nothing", table="{{ dag_run.conf['table'] }}", predicate="id > 1000", execution="worker"
    )
    on_spark = DeltaDeleteOperator(
        task_id="delete_on_spark",
        table=TABLE,
        predicate="id = 3",
        execution="spark",
        conf={"spark.openlineage.columnLineage.datasetLineageEnabled": "true"},
    )
    in_worker >> nothing >> on_spark
