"""A small PySpark program that speaks the DML job's contract, for testing the submit path.

It takes ``--spec-file PATH`` or ``--spec JSON`` like ``airflow_delta/spark/jobs/dml.py``,
runs a DELETE spec for real, and prints the same ``AIRFLOW_DELTA_RESULT`` /
``AIRFLOW_DELTA_ERROR`` lines (exit status 3 on a Delta error). The rows to delete are
found on the executors: each task opens the table through the engine shipped as
``py_files``, so a run proves that the zip reaches executors that share no files with
the driver. The driver commits through the engine with the task's appId and tags.

Test hooks, as Spark conf (never used by the real job):

- ``spark.airflowDeltaTest.sleepBeforeCommit``: seconds the driver waits, inside a Spark
  stage, after planning and before committing (a job to kill, or one that commits late);
- ``spark.airflowDeltaTest.deleteBeforeCommit``: a predicate the driver deletes between
  planning and committing, as a concurrent writer would (a real conflict when it removes
  a file the job read).

No Airflow imports.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

from airflow_delta.engine import AppTransaction, DeltaError, DeltaTable
from airflow_delta.spark.specs import DeleteSpec, spec_from_json


def _matching_rows_on_executors(spark: SparkSession, spec: DeleteSpec) -> tuple[int, str]:
    """Rows the predicate matches, counted on an executor; and where the executor's engine came from."""
    uri, predicate = spec.table.uri, spec.predicate

    def count(partition: object) -> list[tuple[int, str]]:
        # Runs on an executor: the engine comes from the py_files zip.
        import airflow_delta.engine as shipped

        table = shipped.DeltaTable(uri)
        rows = (
            table.snapshot().to_arrow(filter=predicate).num_rows if predicate else table.snapshot().to_arrow().num_rows
        )
        return [(rows, shipped.__file__)]

    return spark.sparkContext.parallelize([0], 1).mapPartitions(count).collect()[0]


def _sleep_in_a_stage(spark: SparkSession, seconds: float) -> None:
    def sleep(partition: object) -> list[int]:
        time.sleep(seconds)
        return [1]

    spark.sparkContext.parallelize([0], 1).mapPartitions(sleep).collect()


def main() -> int:
    parser = argparse.ArgumentParser()
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--spec")
    given.add_argument("--spec-file")
    args = parser.parse_args()
    text = args.spec if args.spec is not None else Path(args.spec_file).read_text(encoding="utf-8")
    spec = spec_from_json(text)
    assert isinstance(spec, DeleteSpec), "the stand-in runs DELETE specs only"
    spark = SparkSession.builder.appName("airflow-delta stand-in").getOrCreate()
    conf = spark.sparkContext.getConf()
    try:
        table = DeltaTable(spec.table.uri, spec.table.storage_options or None)
        snapshot = table.snapshot()
        snapshot.plan_files(spec.predicate)  # a predicate the engine refuses fails here, in the driver
        matched, executor_engine = _matching_rows_on_executors(spark, spec)
        print(f"AIRFLOW_DELTA_STAND_IN planned; executor engine from {executor_engine}", flush=True)
        sleep = float(conf.get("spark.airflowDeltaTest.sleepBeforeCommit", "0"))
        if sleep:
            _sleep_in_a_stage(spark, sleep)
        concurrent = conf.get("spark.airflowDeltaTest.deleteBeforeCommit", "")
        if concurrent:
            DeltaTable(spec.table.uri).delete(concurrent)
        identity = spec.identity
        tags = {
            "airflowDelta.appId": identity.app_id,
            "airflowDelta.attempts": "1",
            "airflowDelta.dagId": identity.dag_id,
            "airflowDelta.taskId": identity.task_id,
            "airflowDelta.runId": identity.run_id,
            "airflowDelta.mapIndex": str(identity.map_index),
        }
        result = table.delete(
            spec.predicate,
            snapshot=snapshot,
            app_transaction=AppTransaction(identity.app_id, 1),
            tags=tags,
            use_deletion_vectors=spec.options.use_deletion_vectors,
        )
        metrics = dict(result.metrics)
        assert result.version is None or metrics["numDeletedRows"] == matched, (metrics, matched)
        print(
            "AIRFLOW_DELTA_RESULT "
            + json.dumps(
                {
                    "version": result.version,
                    "readVersion": result.read_version,
                    "operation": "DELETE",
                    "metrics": metrics,
                    "attempts": 1,
                }
            ),
            flush=True,
        )
        return 0
    except DeltaError as error:
        report = {"class": type(error).__name__, "message": str(error), "retryable": error.retryable}
        print("AIRFLOW_DELTA_ERROR " + json.dumps(report), flush=True)
        return 3
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
