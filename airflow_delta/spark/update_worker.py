"""UPDATE in the Airflow worker, with the engine and pyarrow: no Spark job, no JVM.

The UPDATE counterpart of :mod:`airflow_delta.spark.merge_worker`, under the same rules:
it runs here only when the predicate is in the subset the engine evaluates exactly as
Spark (:func:`~airflow_delta.spark.engine_rows.condition_evaluates_as_spark`) and every
SET value is a column, NULL or a plain literal that Spark's store assignment stores
unchanged or widens exactly; no SET of a struct field. :func:`update_refusal` says why
not otherwise, and the UPDATE goes to Spark (:mod:`airflow_delta.spark.update`).

As the Spark job: the candidate files are pruned by the predicate and recorded as read;
the rows where ``(predicate) IS TRUE`` get the new values; the old rows leave their files
through deletion vectors (where the table uses them) or the touched files are rewritten;
change data (``update_preimage`` / ``update_postimage``) on CDF tables; Delta's UPDATE
metrics and ``operationParameters``; the job's retries, tags and exactly-once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from airflow_delta.engine import (
    InvalidArgumentError,
    InvalidFilterError,
    Snapshot,
    TableContext,
    Transaction,
    condition_mask,
    mask_to_numpy,
)
from airflow_delta.spark.job_result import JobResult
from airflow_delta.spark.merge_worker import (
    _FILE,
    _Binder,
    _Clause,
    _LeftToSparkError,
    _Names,
    _read_target,
    _stage_change_data,
    _stage_row_changes,
    _Value,
    _view,
    _written,
    table_refusal,
)
from airflow_delta.spark.specs import UpdateSpec

__all__ = ["UPDATE_METRICS", "candidate_files", "run_update_in_worker", "update_refusal"]

# UPDATE's operationMetrics, as Delta names them (DeltaOperationMetrics.UPDATE).
UPDATE_METRICS = (
    "numRemovedFiles",
    "numRemovedBytes",
    "numCopiedRows",
    "numDeletionVectorsAdded",
    "numDeletionVectorsRemoved",
    "numAddedChangeFiles",
    "executionTimeMs",
    "numDeletionVectorsUpdated",
    "numUpdatedRows",
    "scanTimeMs",
    "numAddedFiles",
    "numAddedBytes",
    "rewriteTimeMs",
)

# No alias names the table in an UPDATE: every column is unqualified.
_NO_ALIAS = "\x00"


def _bind(spec: UpdateSpec, schema: pa.Schema) -> tuple[_Names, str | None, _Clause]:
    binder = _Binder(_NO_ALIAS, _NO_ALIAS, schema, pa.schema([]))
    condition = binder.condition(spec.predicate, ("target",)) if spec.predicate is not None else None
    by_key = {name.casefold(): name for name in schema.names}
    assigned: dict[str, str] = {}
    for key, text in spec.set.items():
        if "." in key or "`" in key:
            raise _LeftToSparkError(f"SET {key!r} names a struct field")
        if key.casefold() not in by_key:
            raise _LeftToSparkError(f"SET {key!r} names no column of the table (Spark reports it)")
        assigned[key.casefold()] = text
    values = []
    for column in schema:
        text = assigned.get(column.name.casefold())
        values.append(_Value("target", column.name) if text is None else binder.value(text, ("target",), column.type, column.name))
    names = _Names(schema, dict(binder.used_target), {})
    return names, condition, _Clause(0, "matched_update", condition, tuple(values))


def update_refusal(spec: UpdateSpec, schema: pa.Schema) -> str | None:
    """Why this UPDATE must run on Spark, or None when the worker runs it exactly as Spark would."""
    try:
        _bind(spec, schema)
    except _LeftToSparkError as reason:
        return str(reason)
    return None


def candidate_files(snapshot: Snapshot, spec: UpdateSpec) -> pa.Table:
    """The files the UPDATE reads on ``snapshot`` (for deciding where it runs)."""
    if spec.predicate is None:
        return snapshot.add_actions
    try:
        return snapshot.plan_files(spec.predicate)
    except InvalidFilterError:
        return snapshot.add_actions


def run_update_in_worker(spec: UpdateSpec, *, before_commit: Callable[[int], None] | None = None) -> JobResult:
    """Run ``spec`` in this process with the Spark job's driver loop (attempts, tags, exactly-once).

    An UPDATE the worker cannot run exactly as Spark fails with
    :class:`~airflow_delta.engine.InvalidArgumentError` before anything is written.
    """
    from airflow_delta.spark.commit_loop import StagedOperation, run_with_retries, uses_deletion_vectors

    def attempt(txn: Transaction, snapshot: Snapshot, context: TableContext) -> StagedOperation:
        started = time.monotonic()
        refusal = table_refusal(snapshot)
        if refusal is not None:
            raise InvalidArgumentError(
                "execution", "worker", f"an UPDATE the worker writes as Spark does; here {refusal}: run it on Spark"
            )
        try:
            names, condition, clause = _bind(spec, snapshot.schema)
        except _LeftToSparkError as reason:
            raise InvalidArgumentError(
                "execution", "worker", f"an UPDATE the worker evaluates exactly as Spark does; here {reason}: run it on Spark"
            ) from None
        use_dvs = uses_deletion_vectors(context, spec.options)
        files = txn.read_files(spec.predicate)
        # A rewritten file needs all its rows: row groups are skipped only with DVs.
        target = _read_target(context, files, spec.predicate if use_dvs else None)
        if condition is None:
            matched = np.arange(target.num_rows, dtype=np.int64)
        else:
            mask = condition_mask(_view(names, target, target, None, np.arange(target.num_rows)), condition)
            matched = np.flatnonzero(mask_to_numpy(mask)).astype(np.int64)  # NULL is not TRUE; no pandas
        located = time.monotonic()
        metrics: dict[str, int] = {"numUpdatedRows": len(matched)}
        if len(matched):
            new_rows = _written(names, clause, target, target, None, matched)
            changes = _stage_row_changes(txn, context, files, target, matched, new_rows, use_dvs)
            if use_dvs:  # Delta's UPDATE counts every file it marks in a DV as removed (its DELETE does not)
                changes["numRemovedFiles"] = len(np.unique(target.column(_FILE).take(pa.array(matched)).to_numpy()))
            if context.properties.enable_change_data_feed:
                preimage = np.full(len(matched), "update_preimage", dtype=object)
                _stage_change_data(txn, context, target, matched, preimage, [new_rows], ["update_postimage"], changes)
            metrics.update(changes)
        metrics["scanTimeMs"] = int((located - started) * 1000)
        metrics["rewriteTimeMs"] = int((time.monotonic() - located) * 1000)
        metrics["executionTimeMs"] = int((time.monotonic() - started) * 1000)
        ordered = {key: int(metrics.get(key, 0)) for key in UPDATE_METRICS}
        parameters = {"predicate": [spec.predicate] if spec.predicate is not None else []}
        return StagedOperation("UPDATE", parameters, ordered, commit=len(matched) > 0)

    return run_with_retries(spec, attempt, before_commit=before_commit)

