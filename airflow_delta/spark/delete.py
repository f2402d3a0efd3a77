"""``DELETE FROM table [WHERE predicate]`` as a Spark job, committed through the engine.

Three cases, as in Delta's ``DeleteCommand``:

- no predicate: every file is removed, from the log alone;
- a predicate on partition columns only: a metadata-only delete, decided per file from
  the log by the engine (:func:`airflow_delta.engine.stage_delete`); no Spark job runs,
  and given a :class:`~airflow_delta.spark.session.LazySession` no session is built;
- a DELETE with deletion vectors whose predicate the engine evaluates exactly as Spark
  does, over few bytes (:mod:`airflow_delta.spark.engine_rows`): the engine finds the
  rows in the driver and writes the DVs, the same code as the in-worker DELETE
  (:func:`airflow_delta.engine.stage_delete`); no Spark stage runs, and given a
  :class:`~airflow_delta.spark.session.LazySession` no session is built;
- otherwise: the engine prunes the files (and records the read), Spark reads the
  candidate files through the engine on the executors (or, when they total less than
  ``ExecutionOptions.driver_max_bytes``, in the driver) and keeps the rows where
  ``(predicate) IS TRUE`` (a row where it is NULL stays), and
  :func:`~airflow_delta.spark.changes.stage_row_changes` marks them in deletion vectors
  or rewrites the touched files.

A DELETE that matches no row commits nothing (version None). Every commit carries the
task's ``txn`` appId, so a task that runs again commits nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from airflow_delta.engine import (
    DELETE_METRIC_NAMES,
    InvalidFilterError,
    Snapshot,
    TableContext,
    Transaction,
    stage_delete,
)
from airflow_delta.spark.changes import StagedOperation, run_with_retries, stage_row_changes, uses_deletion_vectors
from airflow_delta.spark.engine_rows import finds_rows_in_driver
from airflow_delta.spark.file_tasks import fits_in_driver, target_dataframe
from airflow_delta.spark.job_result import JobResult
from airflow_delta.spark.plan import check_predicate, predicate_columns, read_candidates
from airflow_delta.spark.session import LazySession, session_of
from airflow_delta.spark.specs import DeleteSpec, ExecutionOptions
from airflow_delta.spark.sql_columns import references_only

__all__ = ["DELETE_METRICS", "run_delete"]

# DELETE's operationMetrics, as Delta names them: the engine's in-worker DELETE writes the same.
DELETE_METRICS = DELETE_METRIC_NAMES


def _parameters(predicate: str | None) -> dict[str, Any]:
    # Delta writes the condition as a JSON list of strings: ["(id = 1)"], [] for none.
    return {"predicate": [predicate] if predicate is not None else []}


def _changes_anything(metrics: dict[str, int]) -> bool:
    return bool(
        metrics.get("numDeletedRows")
        or metrics.get("numRemovedFiles")
        or metrics.get("numDeletionVectorsAdded")
        or metrics.get("numDeletionVectorsUpdated")
    )


def _engine_finds_rows(
    snapshot: Snapshot, context: TableContext, predicate: str | None, options: ExecutionOptions, use_dvs: bool
) -> bool:
    """Whether the engine finds the rows in the driver (see :mod:`airflow_delta.spark.engine_rows`)."""
    # Only a DV delete: finding the rows is then all of its data work; a rewrite reads and
    # writes whole files, the executors' work. A Change Data Feed table is the Spark path's:
    # its change data re-reads every column of the touched row groups, which
    # driver_scan_max_bytes (the predicate's columns only) does not bound.
    if not use_dvs or predicate is None or context.properties.enable_change_data_feed:
        return False
    try:
        candidates = snapshot.plan_files(predicate)  # not recorded: stage_delete records its own read
    except InvalidFilterError:
        return False
    return finds_rows_in_driver(context, candidates, predicate, options.driver_scan_max_bytes)


def run_delete(
    spark: SparkSession | LazySession, spec: DeleteSpec, *, before_commit: Callable[[int], None] | None = None
) -> JobResult:
    """Run ``spec`` on ``spark``; the committed version (None if no row matched) and Delta's DELETE metrics.

    A metadata-only DELETE (no predicate, or one the engine parses over partition columns
    only) is decided from the log, and a DV delete the engine finds the rows of in the
    driver (:mod:`airflow_delta.spark.engine_rows`) runs no Spark stage; neither asks a
    :class:`LazySession` for its session: no SparkSession is built. Raises :class:`~airflow_delta.engine.InvalidFilterError` for
    a predicate Spark cannot analyze against the table (before any file is read), the
    engine's conflict error when a logical conflict outlasts ``spec.options.max_attempts``,
    and :class:`~airflow_delta.engine.DeletionVectorsNotEnabledError` when the options
    require DVs on a table without them. ``before_commit`` is for tests (see
    :func:`~airflow_delta.spark.changes.run_with_retries`).
    """
    predicate = spec.predicate

    def attempt(txn: Transaction, snapshot: Snapshot, context: TableContext) -> StagedOperation:
        started = time.monotonic()
        use_dvs = uses_deletion_vectors(context, spec.options)
        metrics = None
        if predicate is None or references_only(predicate, context.partition_columns):
            try:
                metrics = stage_delete(txn, predicate, use_deletion_vectors=use_dvs)
            except InvalidFilterError:
                metrics = None  # Spark SQL the engine cannot parse: Spark checks and evaluates it below
        if metrics is None and _engine_finds_rows(snapshot, context, predicate, spec.options, use_dvs):
            assert predicate is not None
            try:
                metrics = stage_delete(txn, predicate, use_deletion_vectors=True)
            except InvalidFilterError:
                metrics = None  # the engine cannot parse it after all (nothing was staged): Spark's
        if metrics is None:
            assert predicate is not None
            building = time.monotonic()
            session = session_of(spark)
            # executionTimeMs measures the DELETE, not the start of the JVM's SparkContext.
            started += time.monotonic() - building
            check_predicate(session, context, predicate)
            files, engine_filter = read_candidates(txn, predicate)
            planned_ms = int((time.monotonic() - started) * 1000)
            # Only the predicate's columns of the row groups it may match are read to find the
            # rows (a rewrite reads the rest itself). A predicate on no column ("1 = 1") still
            # needs the rows: then every column is read.
            columns = predicate_columns(session, context, predicate) or None
            in_driver = fits_in_driver(files, spec.options.driver_max_bytes)
            target = target_dataframe(
                session,
                context,
                files,
                columns,
                row_group_filter=engine_filter,
                in_driver=in_driver,
                reader=spec.options.reader,
                purpose="find",
            )
            matched = target.filter(f"({predicate}) IS TRUE")
            changes = stage_row_changes(
                txn, context, files, matched, None, use_dvs, in_driver=in_driver, reader=spec.options.reader
            )
            metrics = {**changes, "numDeletedRows": changes.removed_rows}
            metrics["scanTimeMs"] += planned_ms
        metrics["executionTimeMs"] = int((time.monotonic() - started) * 1000)
        ordered = {key: int(metrics.get(key, 0)) for key in DELETE_METRICS}
        return StagedOperation("DELETE", _parameters(predicate), ordered, commit=_changes_anything(ordered))

    return run_with_retries(spec, attempt, before_commit=before_commit)
