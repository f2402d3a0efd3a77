"""The driver loop of a DML job, without Spark: :func:`run_with_retries` and what an attempt returns.

Split from :mod:`airflow_delta.spark.changes` so that the worker's DELETE, UPDATE and MERGE
(which run the same loop in the Airflow worker) do not import PySpark. See
:mod:`~airflow_delta.spark.changes` for the loop's behaviour.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from airflow_delta.engine import (
    CommitOptions,
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    DeletionVectorsNotEnabledError,
    DeltaTable,
    InvalidArgumentError,
    Metadata,
    MetadataChangedException,
    Snapshot,
    TableContext,
    Transaction,
    TransactionAlreadyCommittedError,
)
from airflow_delta.spark.job_result import JobResult, find_job_commit, job_tags
from airflow_delta.spark.specs import DeleteSpec, ExecutionOptions, MergeSpec, Spec, TableRef, UpdateSpec

__all__ = [
    "LOGICAL_CONFLICTS",
    "AttemptFn",
    "StagedOperation",
    "backoff_seconds",
    "metadata_change_replannable",
    "open_target",
    "run_with_retries",
    "uses_deletion_vectors",
]

log = logging.getLogger("airflow_delta.spark.changes")  # the loop's messages keep their logger


# The conflicts that planning again on a newer snapshot can resolve (Delta's own advice
# for them): another writer added files where the job read, or removed files it read or
# removes. A metadata change is planned again only when it left the table's identity,
# schema and partitioning alone (`metadata_change_replannable`); protocol changes and
# other metadata changes fail the job with the engine's error.
LOGICAL_CONFLICTS: tuple[type[Exception], ...] = (
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException,
)


def metadata_change_replannable(read: Metadata, latest: Metadata) -> bool:
    """Whether a job that read ``read`` may plan again on a snapshot whose metadata is ``latest``.

    Delta raises ``MetadataChangedException`` for any concurrent metadata update (outside
    its allow-list) and advises to retry. A change of table properties, name or
    description leaves what the job planned against (columns, types, partitioning) as it
    was, and the next attempt plans with the new properties (deletion vectors, constraints,
    change data feed) from the new snapshot. A new schema (columns, types, identity
    high-water marks, column mapping), new partitioning or a replaced table is not
    planned again: what the job was asked to do may no longer mean the same.
    """
    return (
        read.id == latest.id
        and read.schema_string == latest.schema_string
        and list(read.partition_columns) == list(latest.partition_columns)
        and read.format == latest.format
    )

_OPERATION_OF_SPEC = {DeleteSpec: "DELETE", UpdateSpec: "UPDATE", MergeSpec: "MERGE"}


class StagedOperation(NamedTuple):
    """What one attempt staged: Delta's operation name, its ``operationParameters`` and ``operationMetrics``.

    ``commit=False`` says the attempt found nothing to change (no row matched): the job
    commits nothing and reports these metrics with version None.
    """

    operation: str
    parameters: Mapping[str, Any]
    metrics: Mapping[str, int]
    commit: bool = True


AttemptFn = Callable[[Transaction, Snapshot, TableContext], "StagedOperation | None"]
"""One attempt of an operation: stage its actions in the open transaction (planned on the
snapshot, per-file work through the context) and say what it staged; None commits nothing."""


def open_target(ref: TableRef) -> DeltaTable:
    """The table a DML job changes: always its latest version, so ``ref.version`` must be None."""
    if ref.version is not None:
        raise InvalidArgumentError(
            "spec.table.version", ref.version, "None: DELETE, UPDATE and MERGE change the latest version of a table"
        )
    return DeltaTable(ref.uri, ref.storage_options or None)


def backoff_seconds(options: ExecutionOptions, failed_attempts: int) -> float:
    """The wait before the attempt after ``failed_attempts`` failed ones (see :class:`ExecutionOptions`)."""
    wait = options.backoff_initial_seconds * options.backoff_multiplier ** max(failed_attempts - 1, 0)
    return float(min(wait, options.backoff_max_seconds))


def uses_deletion_vectors(context: TableContext, options: ExecutionOptions) -> bool:
    """Whether the job removes rows through DVs: the table's ``delta.enableDeletionVectors``
    unless ``options.use_deletion_vectors`` says otherwise; True on a table without DVs fails."""
    enabled = bool(context.properties.enable_deletion_vectors)
    if options.use_deletion_vectors is None:
        return enabled
    if options.use_deletion_vectors and not enabled:
        raise DeletionVectorsNotEnabledError(context.uri)
    return options.use_deletion_vectors


def _target_ref(spec: Spec) -> TableRef:
    return spec.target if isinstance(spec, MergeSpec) else spec.table


def _earlier_result(table: DeltaTable, app_id: str, cause: Exception | None = None) -> JobResult:
    found = find_job_commit(table, app_id)
    if found is not None:
        return found
    if cause is not None and table.snapshot().transaction_version(app_id) is None:
        raise cause  # the conflict was not our task's commit after all
    # The txn says the task committed, but its commit is gone from the log (log
    # cleanup): the change is in the table, only its metrics cannot be shown.
    raise TransactionAlreadyCommittedError(app_id, 1, 1) from cause


def run_with_retries(
    spec: Spec,
    attempt_fn: AttemptFn,
    *,
    before_commit: Callable[[int], None] | None = None,
) -> JobResult:
    """Run ``attempt_fn`` until its commit lands, a non-retryable error, or ``max_attempts``; see the module docstring.

    ``before_commit(attempt)`` runs after an attempt staged its actions and before it
    commits (tests use it to let another writer commit in between). ``executionTimeMs``
    is filled in (time of the attempt that committed) unless the attempt set it.
    """
    table = open_target(_target_ref(spec))
    app_id = spec.identity.app_id
    options = spec.options
    default_operation = _OPERATION_OF_SPEC[type(spec)]
    # The table's delta.isolationLevel: WriteSerializable unless the table asks for Serializable.
    commit_options = CommitOptions()
    attempt = 0
    while True:
        attempt += 1
        started = time.monotonic()
        snapshot = table.snapshot()
        if snapshot.transaction_version(app_id) is not None:
            return _earlier_result(table, app_id)
        context = table.context(snapshot)
        try:
            # The block aborts the transaction on any error: files it wrote are removed.
            with table.transaction(commit_options, snapshot=snapshot) as txn:
                txn.set_app_transaction(app_id, 1)
                staged = attempt_fn(txn, snapshot, context)
                if staged is None or not staged.commit:
                    txn.abort()
                    operation = default_operation if staged is None else staged.operation
                    metrics = {} if staged is None else dict(staged.metrics)
                    return JobResult(None, snapshot.version, operation, metrics, attempt)
                metrics = dict(staged.metrics)
                metrics.setdefault("executionTimeMs", int((time.monotonic() - started) * 1000))
                if before_commit is not None:
                    before_commit(attempt)
                version = txn.commit(staged.operation, dict(staged.parameters), metrics, tags=job_tags(spec.identity, attempt))
                return JobResult(version, snapshot.version, staged.operation, metrics, attempt)
        except (TransactionAlreadyCommittedError, ConcurrentTransactionException) as error:
            # Another try of this task instance committed first: its commit is the result.
            return _earlier_result(table, app_id, error)
        except (*LOGICAL_CONFLICTS, MetadataChangedException) as error:
            if attempt >= options.max_attempts or (
                isinstance(error, MetadataChangedException)
                and not metadata_change_replannable(snapshot.metadata, table.snapshot().metadata)
            ):
                raise
            wait = backoff_seconds(options, attempt)
            log.warning(
                "attempt %d of %d of %s on %s conflicted (%s); planning again in %.1f s",
                attempt, options.max_attempts, default_operation, table.table_uri, error, wait,
            )
            if wait > 0:
                time.sleep(wait)
