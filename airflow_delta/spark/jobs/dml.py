"""The DELETE / UPDATE / MERGE program that ``spark-submit`` runs (no Airflow imports).

    spark-submit --py-files <engine_py_files() zip> airflow_delta/spark/jobs/dml.py --spec-file PATH
    spark-submit ... airflow_delta/spark/jobs/dml.py --spec JSON

It reads the spec (:func:`~airflow_delta.spark.specs.spec_from_json`), runs the
operation with the job's SparkSession (built when first needed: a metadata-only DELETE
builds none) and prints, when it builds the session,
``AIRFLOW_DELTA_SPARK_APP {"app_id": ..., "ui_url": ..., "master": ...}`` (the application
it registered: the task's link to Spark's UI), and at its end one line on stdout:

- ``AIRFLOW_DELTA_RESULT <JobResult JSON>`` on success (exit status 0);
- ``AIRFLOW_DELTA_ERROR {"class": ..., "message": ..., "retryable": ...}`` when an engine
  error (a :class:`~airflow_delta.engine.DeltaError`) ends it (exit status 3), so the
  operator re-raises the same class;
- Spark's refusal of the input (its analysis errors: a missing path, an unknown column,
  SQL that does not parse; errors of SQLSTATE class 42 or 22) is reported the same way,
  as a :class:`~airflow_delta.engine.SparkAnalysisError` (not retryable);
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

from airflow_delta.spark.jobs import (
    ERROR_LINE_PREFIX,
    EXIT_DELTA_ERROR,
    RESULT_LINE_PREFIX,
    SPARK_APP_LINE_PREFIX,
    prefer_installed_pyspark,
)

# Before the first pyspark import: the installed PySpark's cached bytecode, not the zip's sources.
prefer_installed_pyspark()

from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from airflow_delta.engine import DeltaError, InvalidArgumentError  # noqa: E402
from airflow_delta.spark.delete import run_delete  # noqa: E402
from airflow_delta.spark.installation import check_session  # noqa: E402
from airflow_delta.spark.job_result import JobResult  # noqa: E402
from airflow_delta.spark.session import LazySession, session_of  # noqa: E402
from airflow_delta.spark.spark_errors import input_error  # noqa: E402
from airflow_delta.spark.specs import (  # noqa: E402
    ConvertSpec,
    DeleteSpec,
    MergeSpec,
    OptimizeSpec,
    Spec,
    UpdateSpec,
    VacuumSpec,
    spec_from_json,
)

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


def run_spec(spark: SparkSession | LazySession, spec: Spec) -> JobResult:
    """Run ``spec`` on ``spark`` with the operation's program.

    Given a :class:`LazySession`, a DELETE that the log alone decides builds no session.
    """
    if isinstance(spec, DeleteSpec):
        return run_delete(spark, spec)
    # The other programs are imported when used: a DELETE's driver does not load them.
    if isinstance(spec, UpdateSpec):
        from airflow_delta.spark.update import run_update

        updated: JobResult = run_update(session_of(spark), spec)
        return updated
    if isinstance(spec, MergeSpec):
        # Imported here: MERGE's module (and its SQL parsing) is not needed by the others.
        from airflow_delta.spark.merge import run_merge

        result: JobResult = run_merge(session_of(spark), spec)
        return result
    if isinstance(spec, OptimizeSpec):
        from airflow_delta.spark.optimize import run_optimize

        optimized: JobResult = run_optimize(session_of(spark), spec)
        return optimized
    if isinstance(spec, (VacuumSpec, ConvertSpec)):  # table care: VACUUM's listing, CONVERT's footers
        from airflow_delta.spark.convert import run_convert_spec
        from airflow_delta.spark.vacuum import run_vacuum

        session = session_of(spark)
        return run_vacuum(session, spec) if isinstance(spec, VacuumSpec) else run_convert_spec(session, spec)
    raise InvalidArgumentError("spec", spec, "a DeleteSpec, UpdateSpec, MergeSpec, OptimizeSpec, VacuumSpec or ConvertSpec")


def _app_name(spec: Spec) -> str:
    identity = spec.identity
    return f"airflow-delta {spec.OPERATION} {identity.dag_id}.{identity.task_id}"


def _report(error: DeltaError) -> int:
    report = {"class": type(error).__name__, "message": str(error), "retryable": error.retryable}
    print(f"{ERROR_LINE_PREFIX} {json.dumps(report)}", flush=True)
    return EXIT_DELTA_ERROR


def report_application(session: SparkSession) -> None:
    """Print the Spark application the job registered (its id, its UI's URL when the UI runs, the master).

    First, the session's PySpark must be its JVM's release (a mixed installation fails
    later with errors that name neither): :class:`~airflow_delta.engine.MixedPySparkError`.
    """
    check_session(session)
    context = session.sparkContext
    report = {"app_id": context.applicationId, "ui_url": context.uiWebUrl, "master": context.master}
    print(f"{SPARK_APP_LINE_PREFIX} {json.dumps(report)}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the program; its exit status (0, or 3 after an engine error)."""
    args = _parser().parse_args(argv)
    try:
        spec = _read_spec(args)
        # The master, deploy mode and conf come from spark-submit's own arguments. The
        # session is built when the operation first needs it (a metadata-only DELETE never does).
        spark = LazySession(_app_name(spec), on_start=report_application)
        try:
            result = run_spec(spark, spec)
        finally:
            spark.stop(process_exits=True)
    except DeltaError as error:
        return _report(error)
    except PySparkException as error:
        # Spark's refusal of the input (a missing path, an unknown column, SQL that does
        # not parse) fails every retry the same way: reported as a typed, non-retryable error.
        typed = input_error(error)
        if typed is None:
            raise
        return _report(typed)
    print(f"{RESULT_LINE_PREFIX} {result.to_json()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
