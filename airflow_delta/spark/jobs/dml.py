"""The DELETE / UPDATE / MERGE program that ``spark-submit`` runs (no Airflow imports).

    spark-submit --py-files <engine_py_files() zip> airflow_delta/spark/jobs/dml.py --spec-file PATH
    spark-submit ... airflow_delta/spark/jobs/dml.py --spec JSON

It reads the spec (:func:`~airflow_delta.spark.specs.spec_from_json`), builds the job's
SparkSession, runs the operation and prints one line on stdout:

- ``AIRFLOW_DELTA_RESULT <JobResult JSON>`` on success (exit status 0);
- ``AIRFLOW_DELTA_ERROR {"class": ..., "message": ..., "retryable": ...}`` when an engine
  error (a :class:`~airflow_delta.engine.DeltaError`) ends it (exit status 3), so the
  operator re-raises the same class;
- anything else is a bug or an infrastructure failure: Python's traceback, exit status 1.

The operator reads the job's result from the table's log, not from these lines: they
only carry the error class across the process boundary.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from airflow_delta.engine import DeltaError, InvalidArgumentError
from airflow_delta.spark.delete import run_delete
from airflow_delta.spark.job_result import JobResult
from airflow_delta.spark.jobs import ERROR_LINE_PREFIX, EXIT_DELTA_ERROR, RESULT_LINE_PREFIX
from airflow_delta.spark.session import job_session
from airflow_delta.spark.specs import (
    ConvertSpec,
    DeleteSpec,
    MergeSpec,
    OptimizeSpec,
    Spec,
    UpdateSpec,
    VacuumSpec,
    spec_from_json,
)
from airflow_delta.spark.update import run_update

__all__ = ["main", "run_spec"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dml.py", description="Run one DELETE, UPDATE, MERGE or OPTIMIZE of airflow-delta on Spark."
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--spec", help="the job's specification, as JSON")
    source.add_argument("--spec-file", help="a file holding the job's specification, as JSON")
    return parser


def _read_spec(args: argparse.Namespace) -> Spec:
    if args.spec is not None:
        return spec_from_json(args.spec)
    try:
        text = Path(args.spec_file).read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidArgumentError("--spec-file", args.spec_file, f"a readable file ({error.strerror})") from None
    return spec_from_json(text)


def run_spec(spark: SparkSession, spec: Spec) -> JobResult:
    """Run ``spec`` on ``spark`` with the operation's program."""
    if isinstance(spec, DeleteSpec):
        return run_delete(spark, spec)
    if isinstance(spec, UpdateSpec):
        return run_update(spark, spec)
    if isinstance(spec, MergeSpec):
        # Imported here: MERGE's module (and its SQL parsing) is not needed by the others.
        from airflow_delta.spark.merge import run_merge

        result: JobResult = run_merge(spark, spec)
        return result
    if isinstance(spec, OptimizeSpec):
        from airflow_delta.spark.optimize import run_optimize

        optimized: JobResult = run_optimize(spark, spec)
        return optimized
    if isinstance(spec, (VacuumSpec, ConvertSpec)):  # table care: VACUUM's listing, CONVERT's footers
        from airflow_delta.spark.convert import run_convert_spec
        from airflow_delta.spark.vacuum import run_vacuum

        return run_vacuum(spark, spec) if isinstance(spec, VacuumSpec) else run_convert_spec(spark, spec)
    raise InvalidArgumentError("spec", spec, "a DeleteSpec, UpdateSpec, MergeSpec, OptimizeSpec, VacuumSpec or ConvertSpec")


def _app_name(spec: Spec) -> str:
    identity = spec.identity
    return f"airflow-delta {spec.OPERATION} {identity.dag_id}.{identity.task_id}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the program; its exit status (0, or 3 after an engine error)."""
    args = _parser().parse_args(argv)
    try:
        spec = _read_spec(args)
        # The master, deploy mode and conf come from spark-submit's own arguments.
        spark = job_session(_app_name(spec))
        try:
            result = run_spec(spark, spec)
        finally:
            spark.stop()
    except DeltaError as error:
        report = {"class": type(error).__name__, "message": str(error), "retryable": error.retryable}
        print(f"{ERROR_LINE_PREFIX} {json.dumps(report)}", flush=True)
        return EXIT_DELTA_ERROR
    print(f"{RESULT_LINE_PREFIX} {result.to_json()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
