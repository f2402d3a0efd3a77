"""Upsert a batch of changes into a Delta table with ``DeltaMergeOperator`` (in the worker when small, else a Spark job).

Trigger with the target table, a parquet directory of changes keyed by ``id`` and a
``deleted`` flag, e.g.::

    airflow dags test delta_merge -c '{"table_uri": "/data/customers", "changes_uri": "/landing/customers"}'

The statement is plain Spark SQL, as in a Databricks notebook: changed rows are updated,
rows flagged ``deleted`` are deleted, new rows inserted. Several changes for one ``id``
fail the task at once with Delta's multiple-match error (deduplicate the batch first). The
task returns ``{version, read_version, operation, metrics, attempts}`` as its XCom.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_delta.operators.dml import DeltaMergeOperator
from airflow_delta.operators.retry import DELTA_RETRY_POLICY

with DAG(
    dag_id="delta_merge",
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    tags=["delta", "dml"],
    doc_md=__doc__,
    params={
        "table_uri": Param(type="string", minLength=1, title="Target table URI"),
        "changes_uri": Param(type="string", minLength=1, title="Changes (parquet directory)"),
    },
):
    DeltaMergeOperator(
        task_id="upsert_changes",
        table="{{ params.table_uri }}",
        merge_sql="""
            MERGE INTO target
            USING changes
            ON target.id = changes.id
            WHEN MATCHED AND changes.deleted THEN DELETE
            WHEN MATCHED THEN UPDATE SET target.name = changes.name, target.score = changes.score
            WHEN NOT MATCHED AND NOT changes.deleted THEN INSERT (id, name, score)
                VALUES (changes.id, changes.name, changes.score)
        """,
        sources={"changes": {"parquet": "{{ params.changes_uri }}"}},
        conf={"spark.sql.shuffle.partitions": "4"},
        retries=3,
        retry_delay=timedelta(seconds=30),
        retry_policy=DELTA_RETRY_POLICY,
    )
