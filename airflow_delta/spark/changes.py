"""The driver-side machinery that DELETE, UPDATE and MERGE share.

- :func:`run_with_retries`: one job's life on the driver. It opens the target table,
  returns the earlier commit's result when the task's ``txn`` appId is already in the
  table (exactly-once across Airflow retries), and otherwise runs attempts: a fresh
  snapshot, a transaction at WriteSerializable carrying ``txn(appId, 1)``, the
  operation's own work (``attempt_fn``) staging actions, and a commit tagged with the
  task's identity. A logical conflict (another writer added rows where the job read,
  or removed a file it read or removes), or a concurrent change of table properties
  only (``metadata_change_replannable``), makes the job plan again from the new snapshot,
  inside the same Spark application, after a backoff; when the attempts run out the
  engine's typed conflict error propagates.
- :func:`stage_row_changes`: how a row-level change reaches the log. Rows leave their
  files either through deletion vectors (positions collected on the driver and merged
  with the DVs there) or by rewriting each touched file with its surviving rows; new rows
  (updated or inserted) are written as new files on the executors. On a table with
  ``delta.enableChangeDataFeed=true`` it also writes the change as Delta does: the
  removed rows (read again whole from their files) and the new rows, each with its
  ``_change_type``, as ``cdc`` files below ``_change_data/``. It returns the file-level
  metrics under Delta's names.

Nothing here evaluates SQL: the operations build the DataFrames (``target_dataframe``
filtered by their predicate, joined with a source) and hand them over.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F  # noqa: N812

from airflow_delta.engine import (
    CHANGE_TYPE_COLUMN,
    TableContext,
    Transaction,
    write_data_files,
)
from airflow_delta.spark.commit_loop import (
    LOGICAL_CONFLICTS,
    AttemptFn,
    StagedOperation,
    backoff_seconds,
    open_target,
    run_with_retries,
    uses_deletion_vectors,
)
from airflow_delta.spark.file_tasks import (
    FILE_COLUMN,
    ROW_COLUMN,
    ROW_TRACKING_COLUMNS,
    collect_arrow,
    engine_errors_from_executors,
    read_rows_in_driver,
    spark_schema,
    target_dataframe,
    tracks_rows,
    write_change_dataframe,
    write_dataframe,
)

__all__ = [
    "CHANGE_TYPE_COLUMN",
    "LOGICAL_CONFLICTS",
    "AttemptFn",
    "ChangeMetrics",
    "StagedOperation",
    "backoff_seconds",
    "open_target",
    "run_with_retries",
    "stage_row_changes",
    "uses_deletion_vectors",
]

log = logging.getLogger(__name__)

class ChangeMetrics(dict[str, int]):
    """The file-level metrics of :func:`stage_row_changes` under Delta's names, plus
    ``removed_rows``: how many target rows left their files (deleted, or replaced by their
    updated version). It is an attribute, not a key, so that the dict can go into
    ``operationMetrics`` as it is. ``touched_files``: how many files held a removed row."""

    removed_rows: int = 0
    touched_files: int = 0



def _zero_metrics() -> ChangeMetrics:
    metrics = ChangeMetrics()
    for key in (
        "numRemovedFiles",
        "numRemovedBytes",
        "numAddedFiles",
        "numAddedBytes",
        "numCopiedRows",
        "numDeletionVectorsAdded",
        "numDeletionVectorsRemoved",
        "numDeletionVectorsUpdated",
        "numAddedChangeFiles",
        "scanTimeMs",
        "rewriteTimeMs",
    ):
        metrics[key] = 0
    return metrics


def _positions_by_file(removed: pa.Table) -> dict[str, np.ndarray]:
    """``{log path: sorted distinct physical positions}`` from (file, row) pairs, grouped in Arrow."""
    if removed.num_rows == 0:
        return {}
    grouped = removed.group_by(FILE_COLUMN).aggregate([(ROW_COLUMN, "distinct")])
    paths = grouped.column(FILE_COLUMN).to_pylist()
    lists = grouped.column(f"{ROW_COLUMN}_distinct").combine_chunks()
    # One slice per file (not per row): the positions stay in numpy.
    offsets = lists.offsets.to_numpy()
    values = lists.flatten().to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return {path: np.sort(values[offsets[i] : offsets[i + 1]]) for i, path in enumerate(paths)}


def stage_row_changes(
    txn: Transaction,
    context: TableContext,
    files: pa.Table,
    removed_rows: DataFrame,
    new_rows: DataFrame | None,
    use_deletion_vectors: bool,
    *,
    in_driver: bool = False,
    reader: str = "auto",
    removed_change_type: str = "delete",
    new_change_type: str = "insert",
) -> ChangeMetrics:
    """Stage in ``txn`` the removal of ``removed_rows`` and the addition of ``new_rows``; Delta's file metrics.

    The metrics: numRemovedFiles, numRemovedBytes, numAddedFiles, numAddedBytes,
    numCopiedRows, numDeletionVectorsAdded/Removed/Updated, numAddedChangeFiles,
    scanTimeMs (finding the removed rows) and rewriteTimeMs (DVs and files written);
    ``removed_rows`` (an attribute) counts the target rows that left their files.

    ``files`` are the file actions the rows were read from (``txn.read_files``; the
    caller recorded the read). ``removed_rows`` has :data:`FILE_COLUMN` and
    :data:`ROW_COLUMN` (from ``target_dataframe``): each pair a live target row that
    leaves the table (a deleted row, or the old version of an updated one).
    ``new_rows`` has the table's logical columns: updated and inserted rows.

    With ``use_deletion_vectors`` the positions are collected on the driver and
    marked in DVs (merged with the DVs already there; a file that loses every live row
    is removed whole), and ``new_rows`` are written as new files. Without, every file
    with a removed row is rewritten on the executors with its surviving rows, together
    with ``new_rows``, and removed. Every Spark action runs under
    :func:`engine_errors_from_executors`, so a constraint violation in a new row fails
    with the engine's :class:`ConstraintViolationError`. Nothing is committed.
    ``in_driver`` (few small files, see :func:`~airflow_delta.spark.file_tasks.fits_in_driver`)
    reads the touched files and writes the new ones in this process: no Python worker starts.
    ``reader`` reads a rewrite's surviving rows (``target_dataframe``'s, from
    :attr:`~airflow_delta.spark.specs.ExecutionOptions.reader`).

    Change Data Feed: on a table with ``delta.enableChangeDataFeed=true`` each row's
    ``_change_type`` is the frame's :data:`CHANGE_TYPE_COLUMN` where it has one (MERGE:
    per clause), else ``removed_change_type`` for removed rows (``delete``; UPDATE:
    ``update_preimage``) and ``new_change_type`` for new ones (``insert``; UPDATE:
    ``update_postimage``). The removed rows are
    read again, every column, from the touched files (their state before this change)
    and written with the new rows as ``cdc`` files (``numAddedChangeFiles``). ``new_rows``
    is then kept (persisted) for the call, so that the data files and the change data
    hold the same values even for non-deterministic expressions.
    """
    started = time.monotonic()
    metrics = _zero_metrics()
    change_data_feed = bool(context.properties.enable_change_data_feed)
    if change_data_feed:
        removed_rows = _with_change_type(removed_rows, removed_change_type)
        if new_rows is not None:
            new_rows = _with_change_type(new_rows, new_change_type)
            new_rows = new_rows.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        removed = removed_rows.select(FILE_COLUMN, ROW_COLUMN)
        new_data = None if new_rows is None else _new_data(context, new_rows)
        copied: Observation | None = None
        with engine_errors_from_executors():
            if use_deletion_vectors:
                touched_paths = _mark_in_deletion_vectors(txn, context, removed, metrics)
                located = time.monotonic()
                to_write = new_data
            elif in_driver:
                located, touched_paths = _rewrite_in_driver(txn, context, files, removed, new_data, metrics)
                to_write = None
            else:
                # Kept for the anti-join of the rewrite, so the candidate files are not read and filtered twice.
                removed = removed.persist()
                try:
                    counts = removed.groupBy(FILE_COLUMN).count().toArrow()
                    located = time.monotonic()
                    metrics.removed_rows = int(pc.sum(counts.column("count")).as_py() or 0)
                    touched_paths = counts.column(FILE_COLUMN).combine_chunks()
                    touched = _remove_touched(txn, context, files, counts.column(FILE_COLUMN), metrics)
                    to_write = new_data
                    if touched.num_rows:
                        survivors = target_dataframe(removed_rows.sparkSession, context, touched, reader=reader).join(
                            removed, [FILE_COLUMN, ROW_COLUMN], "left_anti"
                        )
                        copied = Observation()
                        survivors = survivors.observe(copied, F.count(F.lit(1)).alias("rows")).drop(FILE_COLUMN, ROW_COLUMN)
                        to_write = survivors if new_data is None else survivors.unionByName(new_data)
                    _write_new_files(txn, context, to_write, metrics)
                finally:
                    removed.unpersist()
                to_write = None
            _write_new_files(txn, context, to_write, metrics, in_driver=in_driver)
            if copied is not None:
                metrics["numCopiedRows"] += int(copied.get.get("rows", 0))
            metrics.touched_files = len(touched_paths)
            if change_data_feed:
                _stage_change_data(txn, context, files, touched_paths, removed_rows, new_rows, metrics, in_driver=in_driver)
    finally:
        if change_data_feed and new_rows is not None:
            new_rows.unpersist()
    # Delta's split: finding the rows that change, then writing DVs and files.
    metrics["scanTimeMs"] = int((located - started) * 1000)
    metrics["rewriteTimeMs"] = int((time.monotonic() - located) * 1000)
    return metrics


def _new_data(context: TableContext, new_rows: DataFrame) -> DataFrame:
    """``new_rows`` in the table's columns; on a row-tracking table with the stable row ID and
    commit version they carry (NULL where they have none: an inserted row, an updated row's version)."""
    names = spark_schema(context).names
    if not tracks_rows(context):
        return new_rows.select(*names)
    tracking = [
        F.col(name) if name in new_rows.columns else F.lit(None).cast("long").alias(name) for name in ROW_TRACKING_COLUMNS
    ]
    return new_rows.select(*names, *tracking)


def _with_change_type(rows: DataFrame, change_type: str) -> DataFrame:
    if CHANGE_TYPE_COLUMN in rows.columns:
        return rows
    return rows.withColumn(CHANGE_TYPE_COLUMN, F.lit(change_type))


def _stage_change_data(
    txn: Transaction,
    context: TableContext,
    files: pa.Table,
    touched_paths: pa.Array,
    removed_rows: DataFrame,
    new_rows: DataFrame | None,
    metrics: ChangeMetrics,
    *,
    in_driver: bool,
) -> None:
    """Write the change of :func:`stage_row_changes` as ``cdc`` files and stage them (Delta's CDF layout).

    The removed rows are read again from the files they left, every column, with the DVs
    of the snapshot the change was planned on, and matched by (file, position): what the
    table held before. Files removed whole by a DELETE get here too, since their rows
    were located one by one; Delta writes change data for them alike.
    """
    spark = removed_rows.sparkSession
    names = spark_schema(context).names
    parts: list[DataFrame] = []
    touched = files.filter(pc.is_in(files.column("path"), value_set=touched_paths))
    if touched.num_rows:
        # Distinct: a MERGE whose only MATCHED clause is an unconditional DELETE may delete a row once per match.
        removed_types = removed_rows.select(FILE_COLUMN, ROW_COLUMN, CHANGE_TYPE_COLUMN).distinct()
        before = target_dataframe(spark, context, touched, in_driver=in_driver)
        parts.append(before.join(removed_types, [FILE_COLUMN, ROW_COLUMN], "inner").select(*names, CHANGE_TYPE_COLUMN))
    if new_rows is not None:
        parts.append(new_rows.select(*names, CHANGE_TYPE_COLUMN))
    if not parts:
        return
    change = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    for cdc in write_change_dataframe(context, change, in_driver=in_driver):
        txn.add_cdc(cdc, written_for_this_commit=True)
        metrics["numAddedChangeFiles"] += 1


def _mark_in_deletion_vectors(
    txn: Transaction, context: TableContext, removed: DataFrame, metrics: ChangeMetrics
) -> pa.Array:
    """Stage DVs for the ``removed`` (file, row) pairs; the paths of the files they touch."""
    deletes = _positions_by_file(removed.toArrow())
    if not deletes:
        return pa.array([], pa.string())
    summary = txn.delete_rows(deletes)  # log paths: the transaction finds the live files by them
    metrics.removed_rows = summary.num_deleted_rows
    metrics["numRemovedFiles"] += summary.num_removed_files
    metrics["numRemovedBytes"] += summary.num_removed_bytes
    metrics["numDeletionVectorsAdded"] += summary.num_deletion_vectors_added
    metrics["numDeletionVectorsUpdated"] += summary.num_deletion_vectors_updated
    metrics["numDeletionVectorsRemoved"] += summary.num_deletion_vectors_removed
    return pa.array(list(deletes), pa.string())


def _remove_touched(
    txn: Transaction, context: TableContext, files: pa.Table, touched_paths: pa.ChunkedArray, metrics: ChangeMetrics
) -> pa.Table:
    """Stage the removal of the ``files`` whose path is in ``touched_paths`` (they are rewritten); those files."""
    touched = files.filter(pc.is_in(files.column("path"), value_set=touched_paths.combine_chunks()))
    if touched.num_rows:
        txn.remove_files(touched)
        metrics["numRemovedFiles"] += touched.num_rows
        metrics["numRemovedBytes"] += int(pc.sum(touched.column("size")).as_py() or 0)
        metrics["numDeletionVectorsRemoved"] += touched.num_rows - touched.column("deletion_vector").null_count
    return touched


_ROW_INDEX = "__airflow_delta_row_index"


def _rewrite_in_driver(
    txn: Transaction,
    context: TableContext,
    files: pa.Table,
    removed: DataFrame,
    new_data: DataFrame | None,
    metrics: ChangeMetrics,
) -> tuple[float, pa.Array]:
    """The rewrite of :func:`stage_row_changes` for a few small files, in this process; when the rows
    were located, and the paths of the touched files.

    One Spark job collects the removed (file, row) pairs; the touched files are read, the
    pairs anti-joined away and the survivors written by the engine here, in Arrow: no
    shuffle, no Python worker.
    """
    pairs = removed.toArrow()
    located = time.monotonic()
    metrics.removed_rows = pairs.num_rows
    touched_paths = pc.unique(pairs.column(FILE_COLUMN))
    touched = _remove_touched(txn, context, files, pa.chunked_array([touched_paths]), metrics)
    parts = []
    if touched.num_rows:
        rows = read_rows_in_driver(removed.sparkSession, context, touched)
        keys = pairs.select([FILE_COLUMN, ROW_COLUMN]).cast(rows.select([FILE_COLUMN, ROW_COLUMN]).schema)
        # Acero joins carry no struct, list or map columns: join the keys and each row's index only.
        indexed = rows.select([FILE_COLUMN, ROW_COLUMN]).append_column(_ROW_INDEX, pa.array(np.arange(rows.num_rows)))
        kept = indexed.join(keys, [FILE_COLUMN, ROW_COLUMN], join_type="left anti").column(_ROW_INDEX)
        survivors = rows.filter(pc.is_in(indexed.column(_ROW_INDEX), value_set=kept.combine_chunks())).drop_columns(
            [FILE_COLUMN, ROW_COLUMN]
        )
        # Nullable at every level, so that new rows with a NULL in a NOT NULL column reach the writer's
        # constraint check, and a NULL variant in a list (null children, as Spark sends it) casts.
        survivors = survivors.cast(pa.schema([_nullable_field(f) for f in survivors.schema]))
        metrics["numCopiedRows"] += survivors.num_rows
        parts.append(survivors)
    if new_data is not None:
        new_rows = collect_arrow(new_data)
        parts.append(new_rows if not parts else new_rows.cast(parts[0].schema))
    data = pa.concat_tables(parts) if parts else None
    if data is not None and data.num_rows:
        adds = write_data_files(context, data)
        txn.add_files(adds, written_for_this_commit=True)
        metrics["numAddedFiles"] += len(adds)
        metrics["numAddedBytes"] += sum(add.size for add in adds)
    return located, touched_paths


def _nullable_field(field: pa.Field) -> pa.Field:
    return field.with_type(_nullable_type(field.type)).with_nullable(True)


def _nullable_type(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(data_type):
        return pa.struct([_nullable_field(data_type.field(i)) for i in range(data_type.num_fields)])
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        element = _nullable_field(data_type.value_field)
        return pa.list_(element) if pa.types.is_list(data_type) else pa.large_list(element)
    if pa.types.is_map(data_type):
        return pa.map_(_nullable_field(data_type.key_field).with_nullable(False), _nullable_field(data_type.item_field))
    return data_type


def _write_new_files(
    txn: Transaction, context: TableContext, data: DataFrame | None, metrics: ChangeMetrics, *, in_driver: bool = False
) -> None:
    if data is None:
        return
    adds = write_dataframe(context, data, in_driver=in_driver)
    txn.add_files(adds, written_for_this_commit=True)
    metrics["numAddedFiles"] += len(adds)
    metrics["numAddedBytes"] += sum(add.size for add in adds)
