"""The DELETE job behind the DML program's contract, with hooks for tests.

Like ``airflow_delta/spark/jobs/dml.py`` it takes ``--spec-file PATH`` or ``--spec JSON``,
runs the spec (``airflow_delta.spark.delete.run_delete``, the real DELETE job), prints
``AIRFLOW_DELTA_RESULT <json>`` on success and ``AIRFLOW_DELTA_ERROR <json>`` with exit
status 3 on a Delta error. Asked to (``spark.airflowDeltaTest.reportExecutorEngine``), it prints before the
work where an executor imported the engine from (``AIRFLOW_DELTA_STAND_IN planned;
executor engine from <path>``), which shows whether the py_files zip reached the
executors; otherwise the line says nothing of executors (a Python worker started for it
costs a local-mode job seconds of CPU: it compiles the engine from the zip).

Test hooks, as Spark conf (the real program has none), run between staging and commit
through ``run_delete``'s ``before_commit``:

- ``spark.airflowDeltaTest.sleepBeforeCommit``: seconds to wait (a job to kill, or one
  that commits late);
- ``spark.airflowDeltaTest.deleteBeforeCommit``: a predicate another writer deletes (a
  real conflict when it removes a file the job read);
- ``spark.airflowDeltaTest.stagedMarker``: a file created when the work is staged, holding
  the driver's process id, so a test knows the driver is about to commit, and which
  process would commit;
- ``spark.airflowDeltaTest.commitAfterFile``: a file to wait for before committing (a
  job that commits late, exactly when the test says so);
- ``spark.airflowDeltaTest.reportExecutorEngine``: ``true`` to report where an executor
  imported the engine from (see above).

No Airflow imports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

from airflow_delta.engine import DeltaError, DeltaTable
from airflow_delta.spark.delete import run_delete
from airflow_delta.spark.specs import DeleteSpec, spec_from_json


def _executor_engine(spark: SparkSession) -> str:
    def where(partition: object) -> list[str]:
        import airflow_delta.engine as shipped

        return [shipped.__file__]

    return spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()[0]


def main() -> int:
    parser = argparse.ArgumentParser()
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--spec")
    given.add_argument("--spec-file")
    args = parser.parse_args()
    text = args.spec if args.spec is not None else Path(args.spec_file).read_text(encoding="utf-8")
    spark = SparkSession.builder.appName("airflow-delta stand-in").getOrCreate()
    conf = spark.sparkContext.getConf()
    sleep = float(conf.get("spark.airflowDeltaTest.sleepBeforeCommit", "0"))
    concurrent = conf.get("spark.airflowDeltaTest.deleteBeforeCommit", "")
    marker = conf.get("spark.airflowDeltaTest.stagedMarker", "")
    commit_after = conf.get("spark.airflowDeltaTest.commitAfterFile", "")
    report_executor = conf.get("spark.airflowDeltaTest.reportExecutorEngine", "false") == "true"
    try:
        spec = spec_from_json(text)
        assert isinstance(spec, DeleteSpec), "the stand-in runs DELETE specs only"
        executor = f"; executor engine from {_executor_engine(spark)}" if report_executor else ""
        print(f"AIRFLOW_DELTA_STAND_IN planned{executor}", flush=True)

        def before_commit(attempt: int) -> None:
            print(f"AIRFLOW_DELTA_STAND_IN staged attempt {attempt}", flush=True)
            if marker:
                written = Path(f"{marker}.tmp")
                written.write_text(str(os.getpid()), encoding="utf-8")
                written.rename(marker)  # whole: the test reads the process id as soon as the marker exists
            if sleep:
                time.sleep(sleep)
            if commit_after:
                deadline = time.monotonic() + 600
                while not Path(commit_after).exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            if concurrent:
                DeltaTable(spec.table.uri).delete(concurrent)

        result = run_delete(spark, spec, before_commit=before_commit)
        print("AIRFLOW_DELTA_RESULT " + result.to_json(), flush=True)
        return 0
    except DeltaError as error:
        report = {"class": type(error).__name__, "message": str(error), "retryable": error.retryable}
        print("AIRFLOW_DELTA_ERROR " + json.dumps(report), flush=True)
        return 3
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
