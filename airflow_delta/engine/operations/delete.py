"""Row-level DML in the embedded engine: ``DELETE FROM table WHERE predicate``.

:func:`delete` runs a complete DELETE the way Delta's ``DeleteCommand`` does:

1. open a transaction and record the read: ``txn.read_files(predicate)`` returns the
   live files the predicate may match (pruned on partition values and statistics) and
   makes a concurrent commit that adds a matching file, or removes one of them, conflict;
2. a predicate on partition columns only is decided per file from the log: matching
   files are removed whole without reading any data (a metadata-only delete);
3. otherwise each candidate file is read (:func:`~.scan.read_data` semantics: partition
   columns materialised, column mapping resolved) and the predicate evaluated on its rows
   (SQL semantics: a row where the predicate is NULL is kept). Finding rows for a DV
   reads only the predicate's columns of the row groups whose parquet statistics may
   match (:func:`~.scan.read_with_row_positions`), positions from row-group offsets;
4. with ``delta.enableDeletionVectors=true`` the matching row positions go through
   :meth:`.Transaction.delete_rows` (DVs merged with the rows already deleted; files
   that lose every row, counted by their parquet footer and never by the ``numRecords``
   statistic, are removed outright); without DVs each touched file is
   rewritten without the deleted rows (:func:`~.writer.write_data_files`) and removed;
   on a table with ``delta.enableChangeDataFeed=true`` the deleted rows are also written
   as change data (``_change_type`` ``delete``, :func:`~.data_files.write_change_data_files`)
   and staged as ``cdc`` actions, for the DV and the rewrite path alike (files removed
   whole need none: readers take their rows as deleted);
5. commit ``DELETE`` with ``operationParameters.predicate`` as Spark writes it (a JSON
   list holding the condition, ``[]`` for an unconditional delete) and Spark's
   ``operationMetrics``.

A DELETE that matches no row commits nothing, as in Delta.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import (
    CorruptDeletionVectorError,
    DeletionVectorsNotEnabledError,
    TableNotFoundError,
)
from airflow_delta.engine.expressions import Predicate, parse_predicate, references_only
from airflow_delta.engine.expressions.arrow_values import evaluate
from airflow_delta.engine.model.arrow_numpy import bool_array, int64_array, mask_to_numpy, string_array
from airflow_delta.engine.model.deletion_vector_files import dv_descriptors_from_arrow, read_deletion_vectors
from airflow_delta.engine.model.stats_parse import parse_stats
from airflow_delta.engine.operations.partition_filter import partition_predicate_mask
from airflow_delta.engine.operations.results import DELETE_METRIC_NAMES, DeleteResult
from airflow_delta.engine.read.row_groups import physical_row_counts
from airflow_delta.engine.read.scan import read_data, read_with_row_positions
from airflow_delta.engine.storage.paths import resolve_in_table
from airflow_delta.engine.write.data_files import CHANGE_TYPE_COLUMN, write_change_data_files, write_data_files
from airflow_delta.engine.write.row_deletion import live_files_by_path

if TYPE_CHECKING:
    from airflow_delta.engine.read.snapshot import Snapshot
    from airflow_delta.engine.write.options import WriterOptions
    from airflow_delta.engine.write.transaction import Transaction

__all__ = ["DeleteResult", "delete", "delete_operation_parameters", "matching_row_indexes", "matching_rows", "stage_delete"]

# ------------------------------------------------------------------ finding rows


def matching_rows(
    snapshot: Snapshot,
    files: pa.Table,
    predicate: str | Predicate,
    *,
    apply_deletion_vectors: bool = False,
    max_workers: int | None = None,
) -> list[np.ndarray]:
    """Per file of ``files`` (``FILE_ACTIONS_SCHEMA`` rows of ``snapshot``), the rows ``predicate`` matches.

    By default the result is the sorted *physical* row indexes (positions in the data
    file, what a deletion vector stores) of matching rows, rows the file's DV already
    deletes included; ``apply_deletion_vectors=True`` gives positions among the file's
    live rows instead (what :func:`~.scan.read_data` returns for it). A row where the
    predicate is NULL does not match, as in SQL. Files are read in parallel, only the
    columns the predicate references; for physical indexes only the row groups whose
    parquet statistics may match, too (:func:`~.scan.read_with_row_positions`).
    """
    bound = parse_predicate(predicate, snapshot.schema)
    if files.num_rows == 0:
        return []
    expression = bound.to_arrow(nulls_as_false=True)
    columns = list(bound.columns)

    # A few files also decode their row groups in parallel; many files keep every core busy one file each.
    column_threads = files.num_rows < (os.cpu_count() or 4)

    def physical(i: int) -> np.ndarray:
        # Only the row groups the predicate may match, only its columns; positions from the row-group offsets.
        read = read_with_row_positions(snapshot, files.slice(i, 1), columns, bound, use_threads=column_threads)
        return read.positions(_positions(read.rows, expression))

    def live(i: int) -> np.ndarray:
        data = read_data(snapshot, files.slice(i, 1), columns=columns, max_workers=1)
        return _positions(data, expression)

    one = live if apply_deletion_vectors else physical

    workers = max(1, min(files.num_rows, max_workers or min(32, (os.cpu_count() or 4) * 2)))
    if workers == 1:
        return [one(i) for i in range(files.num_rows)]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="delta-dml") as pool:
        return list(pool.map(one, range(files.num_rows)))


def matching_row_indexes(snapshot: Snapshot, file: Mapping[str, Any] | pa.Table, predicate: str | Predicate) -> np.ndarray:
    """Physical row indexes of one live file whose rows match ``predicate`` (see :func:`matching_rows`).

    ``file`` is one ``FILE_ACTIONS_SCHEMA`` row (a one-row table, or a dict as
    ``to_pylist()`` gives it) or the file's path (decoded, relative to the root).
    """
    if isinstance(file, str):
        table = _file_by_path(snapshot, file)
    elif isinstance(file, pa.Table):
        table = file
    else:
        table = pa.Table.from_pylist([dict(file)], schema=snapshot.add_actions.schema)
    if table.num_rows != 1:
        raise ValueError(f"expected exactly one file, got {table.num_rows}")
    return matching_rows(snapshot, table, predicate)[0]


def _file_by_path(snapshot: Snapshot, path: str) -> pa.Table:

    return live_files_by_path(snapshot, [path]).drop_columns(["key"])


def _positions(data: pa.Table, expression: pc.Expression) -> np.ndarray:
    """Sorted positions of the rows of ``data`` for which ``expression`` is true (NULL counts as false).

    Evaluated through :func:`evaluate`: ``Table.filter(expression)`` would import
    ``pyarrow.dataset`` and with it pandas (~0.2 s of a one-row delete's process).
    """
    return np.flatnonzero(mask_to_numpy(evaluate(data, expression))).astype(np.int64, copy=False)


# ------------------------------------------------------------------ DELETE


def delete(
    txn: Transaction,
    predicate: str | None = None,
    *,
    use_deletion_vectors: bool | None = None,
    writer: WriterOptions | None = None,
) -> DeleteResult:
    """``DELETE FROM table [WHERE predicate]`` in the open transaction ``txn``; see the module docstring.

    ``predicate`` is a SQL condition over the table's columns (None deletes every row).
    ``use_deletion_vectors`` defaults to the table's ``delta.enableDeletionVectors``;
    ``True`` on a table without it raises
    :class:`~airflow_delta.engine.errors.DeletionVectorsNotEnabledError`, ``False``
    rewrites files even where DVs could be used. ``writer`` shapes rewritten files. A
    logical conflict with a concurrent commit raises a
    :class:`~airflow_delta.engine.errors.ConcurrentModificationError` subclass; nothing
    is committed then (DV or data files already written stay orphaned for VACUUM).
    When no row matches, nothing is committed and the transaction is aborted.
    """
    snapshot = txn.snapshot
    metrics = stage_delete(txn, predicate, use_deletion_vectors=use_deletion_vectors, writer=writer)
    if not txn.has_staged_actions:
        txn.abort()
        return DeleteResult(None, snapshot.version if snapshot is not None else -1, MappingProxyType(metrics))
    assert snapshot is not None  # stage_delete raised otherwise
    version = txn.commit("DELETE", delete_operation_parameters(predicate), metrics)
    return DeleteResult(version, snapshot.version, MappingProxyType(metrics))


def delete_operation_parameters(predicate: str | None) -> dict[str, Any]:
    """DELETE's ``operationParameters`` as Delta writes them: the condition in a JSON list, ``[]`` for none."""
    return {"predicate": [predicate] if predicate is not None else []}


def stage_delete(
    txn: Transaction,
    predicate: str | None = None,
    *,
    use_deletion_vectors: bool | None = None,
    writer: WriterOptions | None = None,
) -> dict[str, int]:
    """Stage ``DELETE FROM table [WHERE predicate]`` in ``txn`` without committing; Delta's DELETE metrics.

    The same work as :func:`delete` (arguments and errors alike), for a caller that
    commits itself (with its own ``txn`` appId, tags or retries). When no row matches,
    nothing is staged and the metrics say so (``numDeletedRows`` 0, no file removed);
    whether to commit is the caller's call. The metrics come in the order Spark writes them.
    """
    started = time.monotonic()
    snapshot = txn.snapshot
    if snapshot is None:
        raise TableNotFoundError(txn.location.uri, "DELETE needs an existing table")
    if use_deletion_vectors is None:
        use_deletion_vectors = snapshot.properties.enable_deletion_vectors
    elif use_deletion_vectors and not snapshot.properties.enable_deletion_vectors:
        raise DeletionVectorsNotEnabledError(txn.location.uri)  # before reading any data
    target_file_size = writer.target_file_size if writer is not None else None
    plan = _plan(txn, snapshot, predicate)
    scan_ms = _elapsed_ms(started)
    rewrite_started = time.monotonic()
    metrics = _execute(txn, snapshot, plan, bool(use_deletion_vectors), target_file_size)
    metrics["scanTimeMs"] = scan_ms
    metrics["rewriteTimeMs"] = _elapsed_ms(rewrite_started)
    metrics["executionTimeMs"] = _elapsed_ms(started)
    return _ordered_metrics(metrics)


@dataclass(frozen=True)
class _Plan:
    """Which files a DELETE touches: ``whole`` lose every live row; ``partial`` rows per file."""

    whole: pa.Table  # FILE_ACTIONS_SCHEMA
    partial: pa.Table  # FILE_ACTIONS_SCHEMA, candidates whose rows must be read
    predicate: Predicate | None


def _plan(txn: Transaction, snapshot: Snapshot, predicate: str | None) -> _Plan:
    if predicate is None:
        files = txn.read_files()  # depends on (and deletes) the whole table
        return _Plan(files, files.slice(0, 0), None)
    bound = parse_predicate(predicate, snapshot.schema)
    candidates = txn.read_files(predicate)
    if references_only(bound, snapshot.partition_columns):
        # Every row of a file has the same partition values: the log decides, no data is read.
        mask = partition_predicate_mask(snapshot, candidates, bound)
        return _Plan(candidates.filter(mask), candidates.slice(0, 0), bound)
    return _Plan(candidates.slice(0, 0), candidates, bound)


def _execute(
    txn: Transaction,
    snapshot: Snapshot,
    plan: _Plan,
    use_deletion_vectors: bool,
    target_file_size: int | None,
) -> dict[str, int]:
    metrics: dict[str, int] = {
        "numRemovedFiles": 0,
        "numRemovedBytes": 0,
        "numCopiedRows": 0,
        "numDeletionVectorsAdded": 0,
        "numDeletionVectorsRemoved": 0,
        "numDeletionVectorsUpdated": 0,
        "numAddedChangeFiles": 0,
        "numDeletedRows": 0,
        "numAddedFiles": 0,
        "numAddedBytes": 0,
    }
    if plan.whole.num_rows:
        txn.remove_files(plan.whole)
        metrics["numRemovedFiles"] += plan.whole.num_rows
        metrics["numRemovedBytes"] += int(pc.sum(plan.whole.column("size")).as_py() or 0)
        metrics["numDeletedRows"] += _live_rows(snapshot, plan.whole)
        metrics["numDeletionVectorsRemoved"] += plan.whole.num_rows - plan.whole.column("deletion_vector").null_count
    if plan.partial.num_rows == 0 or plan.predicate is None:
        return metrics
    if use_deletion_vectors:
        _delete_with_deletion_vectors(txn, snapshot, plan.partial, plan.predicate, metrics)
    else:
        _delete_by_rewriting(txn, snapshot, plan.partial, plan.predicate, metrics, target_file_size)
    return metrics


def _delete_with_deletion_vectors(
    txn: Transaction, snapshot: Snapshot, files: pa.Table, predicate: Predicate, metrics: dict[str, int]
) -> None:
    if snapshot.properties.enable_change_data_feed:
        positions, deleted_rows = _matching_rows_and_change_data(snapshot, files, predicate)
    else:
        positions, deleted_rows = matching_rows(snapshot, files, predicate), []
    paths = files.column("path").to_pylist()
    deletes = {path: rows for path, rows in zip(paths, positions, strict=True) if rows.size}
    if not deletes:
        return
    _stage_change_data(txn, snapshot, deleted_rows, metrics)
    summary = txn.delete_rows(deletes)  # log paths: the transaction finds the live files by them
    metrics["numDeletedRows"] += summary.num_deleted_rows
    metrics["numRemovedFiles"] += summary.num_removed_files
    metrics["numRemovedBytes"] += summary.num_removed_bytes
    metrics["numDeletionVectorsAdded"] += summary.num_deletion_vectors_added
    metrics["numDeletionVectorsUpdated"] += summary.num_deletion_vectors_updated
    metrics["numDeletionVectorsRemoved"] += summary.num_deletion_vectors_removed


def _delete_by_rewriting(
    txn: Transaction,
    snapshot: Snapshot,
    files: pa.Table,
    predicate: Predicate,
    metrics: dict[str, int],
    target_file_size: int | None,
) -> None:
    # First the cheap read (the predicate's columns of the row groups it may match): a file
    # none of whose stored rows matches is not read in full.
    physical_hits = matching_rows(snapshot, files, predicate)
    files = files.filter(bool_array(np.array([hits.size > 0 for hits in physical_hits], dtype=bool)))
    expression = predicate.to_arrow(nulls_as_false=True)

    change_data_feed = snapshot.properties.enable_change_data_feed

    def one(i: int) -> tuple[int, pa.Table | None, pa.Table | None]:
        # Live rows, DVs applied; on a row-tracking table with their stable row IDs and
        # commit versions, which the copies keep.
        data = read_data(snapshot, files.slice(i, 1), max_workers=1, row_tracking=True)
        hits = _positions(data, expression)
        if hits.size == 0:
            return 0, None, None
        keep = np.ones(data.num_rows, dtype=bool)
        keep[hits] = False
        deleted = data.select(snapshot.schema.names).take(int64_array(hits)) if change_data_feed else None
        return int(hits.size), data.filter(bool_array(keep)), deleted

    workers = max(1, min(files.num_rows, (os.cpu_count() or 4) * 2))
    results = _map(one, range(files.num_rows), workers)
    touched = [i for i, (deleted, _, _) in enumerate(results) if deleted]
    if not touched:
        return
    if change_data_feed:
        _stage_change_data(txn, snapshot, [results[i][2] for i in touched], metrics)
    survivors = [results[i][1] for i in touched]
    kept = [t for t in survivors if t is not None and t.num_rows]
    adds = (
        write_data_files(snapshot, pa.concat_tables(kept), target_file_size=target_file_size, written=txn.written_files)
        if kept
        else []
    )
    removed = files.take(int64_array(np.array(touched, dtype=np.int64)))
    txn.remove_files(removed)
    txn.add_files(adds)
    metrics["numDeletedRows"] += sum(results[i][0] for i in touched)
    metrics["numCopiedRows"] += sum(t.num_rows for t in kept)
    metrics["numRemovedFiles"] += removed.num_rows
    metrics["numRemovedBytes"] += int(pc.sum(removed.column("size")).as_py() or 0)
    metrics["numDeletionVectorsRemoved"] += removed.num_rows - removed.column("deletion_vector").null_count
    metrics["numAddedFiles"] += len(adds)
    metrics["numAddedBytes"] += sum(a.size for a in adds)


def _map(fn: Callable[[int], Any], items: Sequence[int] | range, workers: int) -> list[Any]:
    if workers <= 1 or len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="delta-dml") as pool:
        return list(pool.map(fn, items))


def _live_rows(snapshot: Snapshot, files: pa.Table) -> int:
    """Rows still live in ``files``: the rows each file stores (its parquet footer, never the ``numRecords``
    statistic, which may lie) minus the rows its deletion vector deletes.

    A file that no longer exists has no footer to count; removing it from the log loses
    nothing, and only its share of the metric falls back to its statistics.
    """

    if files.num_rows == 0:
        return 0
    paths = [resolve_in_table(snapshot.table_root, p) for p in files.column("path").to_pylist()]
    counts = physical_row_counts(snapshot.io, paths, missing_ok=True)
    total = sum(c for c in counts if c is not None)
    missing = [i for i, c in enumerate(counts) if c is None]
    if missing:
        stats = parse_stats(files.column("stats").combine_chunks().take(missing), snapshot.metadata)
        total += int(pc.sum(pc.struct_field(stats, "numRecords")).as_py() or 0)
    dv = files.column("deletion_vector")
    if dv.null_count < len(dv):
        # The rows each DV really deletes, not its descriptor's ``cardinality`` (a claim of the log,
        # like numRecords): reading checks the bitmap against its descriptor and the file's footer.
        bitmaps = read_deletion_vectors(snapshot.io, snapshot.table_root, dv_descriptors_from_arrow(dv))
        for path, bitmap, stored in zip(paths, bitmaps, counts, strict=True):
            if bitmap is None:
                continue
            if stored is not None and bitmap and bitmap.max >= stored:  # type: ignore[operator]
                raise CorruptDeletionVectorError(
                    f"the deletion vector of {path!r}",
                    f"deletes row {bitmap.max}, but the data file stores only {stored} rows; the log is corrupt",
                )
            total -= bitmap.cardinality
    return total


def _matching_rows_and_change_data(
    snapshot: Snapshot, files: pa.Table, predicate: Predicate
) -> tuple[list[np.ndarray], list[pa.Table]]:
    """:func:`matching_rows` (physical positions) of ``files``, and their deleted rows as change data.

    Change data needs every column of the deleted rows, so on a Change Data Feed table the
    row groups the predicate may match are read whole, once, for both. Rows the file's
    existing DV already deletes are matched (as :func:`matching_rows` matches them) but
    are no change.
    """
    expression = predicate.to_arrow(nulls_as_false=True)
    columns = list(snapshot.schema.names)
    deleted_before = read_deletion_vectors(
        snapshot.io, snapshot.table_root, dv_descriptors_from_arrow(files.column("deletion_vector"))
    )

    def one(i: int) -> tuple[np.ndarray, pa.Table]:
        read = read_with_row_positions(snapshot, files.slice(i, 1), columns, predicate, use_threads=files.num_rows == 1)
        hits = _positions(read.rows, expression)
        positions = read.positions(hits)
        bitmap = deleted_before[i]
        if bitmap is not None and hits.size:
            hits = hits[~np.isin(positions, bitmap.to_numpy())]
        return positions, read.rows.take(int64_array(hits))

    workers = max(1, min(files.num_rows, (os.cpu_count() or 4) * 2))
    found = _map(one, range(files.num_rows), workers)
    return [positions for positions, _ in found], [rows for _, rows in found]


def _stage_change_data(
    txn: Transaction, snapshot: Snapshot, deleted: Sequence[pa.Table | None], metrics: dict[str, int]
) -> None:
    """Write ``deleted`` rows (logical columns) as ``delete`` change data and stage their ``cdc`` actions."""
    parts = [t for t in deleted if t is not None and t.num_rows]
    if not parts:
        return
    rows = pa.concat_tables(parts)
    change_type = string_array(["delete"]).take(int64_array(np.zeros(rows.num_rows, dtype=np.int64)))
    rows = rows.append_column(CHANGE_TYPE_COLUMN, change_type)
    cdc_files = write_change_data_files(snapshot, rows, written=txn.written_files)
    for cdc in cdc_files:
        txn.add_cdc(cdc)
    metrics["numAddedChangeFiles"] += len(cdc_files)




def _ordered_metrics(metrics: Mapping[str, int]) -> dict[str, int]:
    return {key: metrics[key] for key in DELETE_METRIC_NAMES if key in metrics} | {
        k: v for k, v in metrics.items() if k not in DELETE_METRIC_NAMES
    }


def _elapsed_ms(since: float) -> int:
    return int((time.monotonic() - since) * 1000)
