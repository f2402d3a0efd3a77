"""OPTIMIZE: bin-packing, Z-order and deletion-vector purge, committed with ``dataChange=false``.

The reference is Delta's ``OptimizeTableCommand`` / ``OptimizeExecutor`` and its
``MultiDimClustering`` / ``ZOrderClustering``:

1. **Plan** (:func:`plan_optimize`, from the log alone). The candidate files are the live
   files that ``where`` (partition columns only, as Delta requires) selects. Without
   Z-order a file is rewritten when it is smaller than ``min_file_size`` or when its
   deletion vector deletes more than ``max_deleted_rows_ratio`` of its rows (always when
   it has a DV and no ``numRecords`` statistic); with Z-order every candidate is. Per
   partition the files, smallest first, are packed greedily into bins of at most
   ``max_file_size`` bytes (Z-order: one bin per partition). A bin of one file without a
   DV would be rewritten into itself and is skipped. Bins are then cut to the run's
   budget (``max_files``, ``max_bytes``) and grouped into batches of ``batch_size``
   bytes.
2. **Rewrite** (:func:`rewrite_bin`): a bin's live rows are read through the engine (DVs
   applied) and written back as one file, or, for Z-order, sorted by the Z-value of the
   per-column range ids and cut into ``max(1, bytes // max_file_size)`` files of
   consecutive Z-values (Delta's ``repartitionByRange`` on that value). The same function
   runs in the worker and on Spark executors.
3. **Commit** each batch in its own transaction: ``remove`` of the bin's files and ``add``
   of the new ones, all ``dataChange=false``, operation ``OPTIMIZE``. Such a commit is
   checked at SnapshotIsolation, so blind appends never conflict with it; a concurrent
   commit that removed one of its files does (``ConcurrentDeleteReadException``). A batch
   that fails loses only itself: earlier batches are committed, its own files are removed.
4. **Resume** (with an ``app_id``): a try that finds batches of the same application in
   the log plans only what they left and returns the result of all of them
   (``optimize_progress``).
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import InvalidArgumentError, TableNotFoundError
from airflow_delta.engine.model import clustering as clustering_model
from airflow_delta.engine.model.actions import AddFile
from airflow_delta.engine.model.arrow_numpy import group_row_indices, int64_array, mask_to_numpy
from airflow_delta.engine.model.column_mapping import ColumnMapping
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.model.stats_columns import indexed_columns
from airflow_delta.engine.model.stats_parse import parse_stats
from airflow_delta.engine.operations.optimize_result import OptimizeResult, PartitionOptimizePlan
from airflow_delta.engine.read.scan import read_data
from airflow_delta.engine.storage.written_files import WrittenFiles
from airflow_delta.engine.write.data_files import write_data_files
from airflow_delta.engine.write.options import CommitOptions, OptimizeOptions
from airflow_delta.engine.write.transaction import PostCommitHook, Transaction

if TYPE_CHECKING:
    from airflow_delta.engine.operations.optimize_progress import EarlierBatches
    from airflow_delta.engine.read.snapshot import Snapshot
    from airflow_delta.engine.read.table_context import TableContext
    from airflow_delta.engine.storage.location import TableLocation

__all__ = [
    "ZORDER_NUM_RANGES",
    "BinRewriter",
    "OptimizeBin",
    "OptimizePlan",
    "curve_key",
    "interleave_bits",
    "optimize",
    "plan_optimize",
    "range_bounds",
    "range_ids_from_bounds",
    "range_partition_ids",
    "rewrite_bin",
    "zorder_permutation",
]

# Delta's spark.databricks.delta.optimize.zorder.numRanges: range ids per Z-order column.
ZORDER_NUM_RANGES = 1000
# Rows whose Z-values are computed at once: the bit matrix takes 32 bytes per row and column.
_ZORDER_CHUNK_ROWS = 1 << 20
# Bins rewritten at once in the worker (by two processes or two threads).
_PARALLEL_BINS = 2
# What a bin's rewrite imports on first use (deletion vectors, new file names, the table context).
_IMPORTED_BY_A_REWRITE = (
    "airflow_delta.engine.model.deletion_vector_files",
    "airflow_delta.engine.read.table_context",
    "secrets",
)
# Input files from which a second process pays for its fork: 10-15 ms for a task of 120 MB,
# against about 0.3 ms of reading per small file, half of it moved to the second core.
_FORK_MIN_FILES = 256
# write_data_files cuts files by an in-memory size estimate; OPTIMIZE decides the cut itself.
_ONE_FILE = 1 << 62


log = logging.getLogger(__name__)


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class OptimizeBin:
    """Files of one partition rewritten together. ``files``: ``FILE_ACTIONS_SCHEMA`` rows."""

    partition_values: Mapping[str, str | None]  # logical column name -> value as the log writes it
    files: pa.Table
    size: int  # bytes of the files
    deleted_rows: int  # rows their deletion vectors delete (the descriptors' cardinality)
    live_fraction: float  # estimated share of the bytes that survives the purge

    @property
    def num_files(self) -> int:
        return self.files.num_rows


@dataclass(frozen=True)
class OptimizePlan:
    """What an OPTIMIZE of snapshot ``read_version`` rewrites; see the module docstring."""

    read_version: int
    where: str | None
    zorder_by: tuple[str, ...]
    min_file_size: int
    max_file_size: int
    max_deleted_rows_ratio: float
    bins: tuple[OptimizeBin, ...]
    batches: tuple[tuple[int, ...], ...]  # indexes into ``bins``, one tuple per commit
    considered_files: int  # live files ``where`` selects
    bins_over_budget: int  # bins left for a later run by max_files / max_bytes
    # A clustered table: ``zorder_by`` holds its clustering columns, ordered along ``curve``
    # (Hilbert for several, Z-order for one), and each bin's files become one tagged ZCube.
    clustering: bool = False
    curve: str = clustering_model.ZORDER
    full: bool = False

    def output_files(self, bin: OptimizeBin) -> int:
        """How many files a bin is written as (estimated from bytes for Z-order)."""
        if not self.zorder_by:
            return 1
        return max(1, bin.size // self.max_file_size)

    def partitions(self) -> tuple[PartitionOptimizePlan, ...]:
        """The estimated plan per partition (what a dry run reports)."""
        rows: dict[tuple[tuple[str, str | None], ...], list[OptimizeBin]] = {}
        for bin in self.bins:
            rows.setdefault(tuple(bin.partition_values.items()), []).append(bin)
        return tuple(
            PartitionOptimizePlan(
                partition_values=MappingProxyType(dict(key)),
                num_bins=len(bins),
                files_in=sum(b.num_files for b in bins),
                bytes_in=sum(b.size for b in bins),
                files_out=sum(self.output_files(b) for b in bins if b.live_fraction > 0),
                bytes_out=int(sum(b.size * b.live_fraction for b in bins)),
            )
            for key, bins in rows.items()
        )


def plan_optimize(snapshot: Snapshot, options: OptimizeOptions, *, earlier: EarlierBatches | None = None) -> OptimizePlan:
    """The bins and batches an OPTIMIZE of ``snapshot`` with ``options`` rewrites (no data is read).

    ``earlier``: batches earlier tries of the same application committed; the plan is what
    is left of theirs: the files they wrote are not candidates again, and with Z-order the
    partitions they rewrote are done.

    Raises :class:`InvalidArgumentError` for a ``where`` that references non-partition
    columns, and for Z-order columns that are unknown, partition columns or without
    statistics.
    """
    min_size, max_size = options.file_sizes(snapshot.properties.target_file_size)
    clustered_by = _clustering_columns(snapshot, options)
    if clustered_by:
        return _plan_clustering(snapshot, options, clustered_by, min_size, max_size, earlier)
    zorder_by = _checked_zorder_columns(snapshot, options.zorder_by)
    files = _candidate_files(snapshot, options.where)
    mapping = ColumnMapping.from_metadata(snapshot.metadata, snapshot.protocol)
    done_partitions: set[tuple[tuple[str, str | None], ...]] = set()
    if earlier is not None:
        files = files.filter(pc.invert(pc.is_in(files.column("path"), value_set=earlier.added_paths)))
        if zorder_by:
            done_partitions = _partition_keys(snapshot, earlier.removed, mapping)
    sizes = _int64(files.column("size"))
    deleted = _int64(pc.struct_field(files.column("deletion_vector").combine_chunks(), "cardinality"))
    has_dv = ~mask_to_numpy(pc.is_null(files.column("deletion_vector")))
    records = _num_records(snapshot, files, has_dv)  # NaN where the statistic is missing
    with np.errstate(invalid="ignore", divide="ignore"):
        deleted_ratio = np.where(has_dv, deleted / records, 0.0)
    if zorder_by:
        selected = np.ones(files.num_rows, dtype=bool)
    else:
        # Delta compacts a DV file without numRecords too: its ratio cannot be known, and the new file has stats.
        too_many_deleted = has_dv & (np.isnan(records) | (deleted_ratio > options.max_deleted_rows_ratio))
        selected = (sizes < min_size) | too_many_deleted
    live = np.where(has_dv & ~np.isnan(records) & (records > 0), 1.0 - np.nan_to_num(deleted_ratio), 1.0)

    bins: list[OptimizeBin] = []
    for partition, rows in _partitions(snapshot, files, np.flatnonzero(selected), mapping):
        if tuple(partition.items()) in done_partitions:
            continue  # an earlier try Z-ordered this partition
        # Smallest first, as Delta packs them (a stable sort keeps the log's order among equal sizes).
        rows = rows[np.argsort(sizes[rows], kind="stable")]
        for members in _pack(sizes[rows], max_size, one_bin=bool(zorder_by)):
            chosen = rows[members]
            if len(chosen) == 1 and not has_dv[chosen[0]] and not zorder_by:
                continue  # rewriting one file without deleted rows gains nothing
            bins.append(_bin(partition, files, chosen, sizes, deleted, has_dv, live))
    kept, over_budget = _within_budget(bins, options.max_files, options.max_bytes)
    return OptimizePlan(
        read_version=snapshot.version,
        where=options.where,
        zorder_by=zorder_by,
        min_file_size=min_size,
        max_file_size=max_size,
        max_deleted_rows_ratio=float(options.max_deleted_rows_ratio),
        bins=tuple(kept),
        batches=_batches(kept, options.batch_size),
        considered_files=files.num_rows,
        bins_over_budget=over_budget,
    )


def _clustering_columns(snapshot: Snapshot, options: OptimizeOptions) -> tuple[str, ...]:
    """The clustering columns OPTIMIZE clusters by (empty for a table that is not clustered); Delta's refusals."""
    columns = (
        clustering_model.clustering_columns(snapshot.protocol, snapshot.metadata, snapshot.domain_metadata)
        if clustering_model.is_clustered(snapshot.protocol)
        else ()
    )
    if not columns:
        if options.full:
            raise InvalidArgumentError(
                "full", True, "full=False: a full OPTIMIZE reclusters a clustered table, and this table has no "
                "clustering columns (Delta refuses OPTIMIZE FULL here too)",
            )
        return ()
    if options.zorder_by:
        raise InvalidArgumentError(
            "zorder_by", list(options.zorder_by),
            f"no Z-order columns: the table is clustered by {list(columns)} and OPTIMIZE clusters it by them; "
            "Delta refuses ZORDER BY on a clustered table too (change the clustering columns instead)",
        )
    if options.where:
        raise InvalidArgumentError(
            "where", options.where,
            "no predicate: a clustered table has no partitions to select, and Delta refuses one here too",
        )
    nested = [c for c in columns if "." in c and c not in snapshot.schema.names]
    if nested:
        raise InvalidArgumentError(
            "table", snapshot.version,
            f"a table clustered by top-level columns: clustering by nested columns ({nested}) is not implemented; "
            "run OPTIMIZE with Delta Lake",
        )
    return tuple(columns)


def _plan_clustering(
    snapshot: Snapshot,
    options: OptimizeOptions,
    columns: tuple[str, ...],
    min_size: int,
    max_size: int,
    earlier: EarlierBatches | None,
) -> OptimizePlan:
    """Delta's ClusteringStrategy: which files join one new ZCube (one bin), incrementally.

    Files clustered by another provider or by other columns are left alone, and so are
    ZCubes of at least :data:`~.clustering.MIN_CUBE_SIZE`; the rest (unclustered files and
    small ZCubes) is reclustered together, unless it is one ZCube alone, which is as
    clustered as it gets. ``full`` reclusters every file.
    """
    files = snapshot.add_actions
    if earlier is not None:
        files = files.filter(pc.invert(pc.is_in(files.column("path"), value_set=earlier.added_paths)))
    selected = np.ones(files.num_rows, dtype=bool)
    if not options.full and files.num_rows:
        provider = files.column("clustering_provider")
        own_provider = mask_to_numpy(pc.fill_null(pc.equal(provider, clustering_model.CLUSTERING_PROVIDER), True))
        cube = pc.map_lookup(files.column("tags"), clustering_model.ZCUBE_ID_TAG, "first")
        cube_columns = pc.map_lookup(files.column("tags"), clustering_model.ZCUBE_ZORDER_BY_TAG, "first")
        in_cube = ~mask_to_numpy(pc.is_null(cube)) & ~mask_to_numpy(pc.is_null(cube_columns))
        same_columns = mask_to_numpy(pc.fill_null(pc.equal(cube_columns, json_text(list(columns))), False))
        selected = own_provider & (~in_cube | same_columns)
        sizes = _int64(files.column("size"))
        cube_ids = np.asarray(cube.to_pylist(), dtype=object)  # one entry per file, for the grouping below
        cubes = {c for c in cube_ids[selected & in_cube]}
        for cube_id in cubes:
            members = selected & in_cube & (cube_ids == cube_id)
            if int(sizes[members].sum()) >= clustering_model.MIN_CUBE_SIZE:
                selected &= ~members
        small_cubes = {c for c in cube_ids[selected & in_cube]}
        if not (selected & ~in_cube).any() and len(small_cubes) <= 1:
            selected[:] = False  # one ZCube alone (or nothing): already clustered
    chosen = np.flatnonzero(selected)
    bins: list[OptimizeBin] = []
    if chosen.size:
        sizes = _int64(files.column("size"))
        deleted = _int64(pc.struct_field(files.column("deletion_vector").combine_chunks(), "cardinality"))
        has_dv = ~mask_to_numpy(pc.is_null(files.column("deletion_vector")))
        records = _num_records(snapshot, files, has_dv)
        live = np.where(has_dv & ~np.isnan(records) & (records > 0), 1.0 - np.nan_to_num(deleted / records), 1.0)
        bins.append(_bin({}, files, chosen, sizes, deleted, has_dv, live))
    kept, over_budget = _within_budget(bins, options.max_files, options.max_bytes)
    return OptimizePlan(
        read_version=snapshot.version,
        where=None,
        zorder_by=columns,
        min_file_size=min_size,
        max_file_size=max_size,
        max_deleted_rows_ratio=float(options.max_deleted_rows_ratio),
        bins=tuple(kept),
        batches=_batches(kept, options.batch_size),
        considered_files=files.num_rows,
        bins_over_budget=over_budget,
        clustering=True,
        curve=clustering_model.curve(columns),
        full=options.full,
    )


def _int64(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An int64 column as numpy, nulls as 0 (from the buffers: ``fill_null(column, 0)`` would import pandas)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(array) == 0:
        return np.zeros(0, dtype=np.int64)
    values = np.frombuffer(array.buffers()[1], dtype=np.int64, count=len(array), offset=array.offset * 8).copy()
    if array.null_count:
        values[mask_to_numpy(pc.is_null(array))] = 0
    return values


def _num_records(snapshot: Snapshot, files: pa.Table, has_dv: np.ndarray) -> np.ndarray:
    """Each file's ``numRecords`` statistic as float, NaN where it is missing. Only files with a
    deletion vector use it (their deleted share), so without any the statistics are not parsed."""
    if files.num_rows == 0 or not has_dv.any():
        return np.full(files.num_rows, np.nan, dtype=np.float64)
    counts = pc.struct_field(parse_stats(files.column("stats"), snapshot.metadata), "numRecords")
    missing = mask_to_numpy(pc.is_null(counts))
    values = _int64(counts).astype(np.float64)
    values[missing] = np.nan
    return values


def _candidate_files(snapshot: Snapshot, where: str | None) -> pa.Table:
    files = snapshot.add_actions
    if where is None:
        return files
    # Loaded only for a WHERE: the SQL parser costs about a second of imports.
    from airflow_delta.engine.expressions import parse_predicate, references_only
    from airflow_delta.engine.operations.partition_filter import partition_predicate_mask

    predicate = parse_predicate(where, snapshot.schema)
    if not references_only(predicate, snapshot.partition_columns):
        others = sorted(c for c in predicate.columns if c.casefold() not in {p.casefold() for p in snapshot.partition_columns})
        raise InvalidArgumentError(
            "where",
            where,
            f"a predicate on partition columns only ({list(snapshot.partition_columns)}); it references "
            f"{others}, and OPTIMIZE rewrites whole files, so it cannot select rows by them (Delta refuses this too)",
        )
    return files.filter(partition_predicate_mask(snapshot, files, predicate))


def _checked_zorder_columns(snapshot: Snapshot, columns: Sequence[str]) -> tuple[str, ...]:
    if not columns:
        return ()
    by_name = {name.casefold(): name for name in snapshot.schema.names}
    partitions = {c.casefold() for c in snapshot.partition_columns}
    with_stats = {f.logical.casefold() for f in indexed_columns(snapshot.metadata) if f.has_min_max}
    resolved = []
    for column in columns:
        name = by_name.get(column.casefold())
        if name is None:
            raise InvalidArgumentError(
                "zorder_by", list(columns), f"top-level columns of the table; {column!r} is not one of {snapshot.schema.names}"
            )
        if column.casefold() in partitions:
            raise InvalidArgumentError(
                "zorder_by",
                list(columns),
                f"data columns: {name!r} is a partition column, whose value is the same in every file of a "
                "partition, so Z-ordering by it clusters nothing",
            )
        if column.casefold() not in with_stats:
            raise InvalidArgumentError(
                "zorder_by",
                list(columns),
                f"columns with min/max statistics: the table collects none for {name!r} "
                "(delta.dataSkippingNumIndexedCols / delta.dataSkippingStatsColumns), so no reader could skip "
                "files by it; add it to the statistics columns first",
            )
        resolved.append(name)
    return tuple(resolved)


def _partitions(
    snapshot: Snapshot, files: pa.Table, rows: np.ndarray, mapping: ColumnMapping
) -> list[tuple[Mapping[str, str | None], np.ndarray]]:
    """The selected ``rows`` of ``files`` per partition, partitions in the order of their values."""
    if rows.size == 0:
        return []
    if not snapshot.partition_columns:
        return [(MappingProxyType({}), rows)]
    from airflow_delta.engine.model.partition_values import parse_partition_values

    selected = files.take(int64_array(rows))
    typed = parse_partition_values(selected.column("partition_values"), snapshot.metadata, snapshot.protocol)
    keys = list(snapshot.partition_columns)
    groups = group_row_indices(pa.Table.from_struct_array(typed), keys)
    groups = groups.sort_by([(k, "ascending") for k in keys])
    raw = selected.column("partition_values")
    out = []
    for members in groups.column("__row_list").to_pylist():  # one entry per partition, not per row
        members_array = np.asarray(members, dtype=np.int64)
        first = dict(raw[int(members_array[0])].as_py() or [])
        values = {c: first.get(mapping.physical_name(c)) or None for c in keys}
        out.append((MappingProxyType(values), rows[members_array]))
    return out


def _partition_keys(
    snapshot: Snapshot, files: pa.Table, mapping: ColumnMapping
) -> set[tuple[tuple[str, str | None], ...]]:
    """The distinct partitions of ``files``, keyed as :func:`_partitions` keys them."""
    return {tuple(values.items()) for values, _ in _partitions(snapshot, files, np.arange(files.num_rows), mapping)}


def _pack(sizes: np.ndarray, max_size: int, *, one_bin: bool) -> list[np.ndarray]:
    """Delta's greedy bins over ``sizes`` (ascending): a bin closes when the next file would pass ``max_size``.

    A loop over files, not rows: the greedy reset has no closed vectorised form, and a
    partition's files are few next to its rows.
    """
    if one_bin or sizes.size == 0:
        return [np.arange(sizes.size)] if sizes.size else []
    bins: list[np.ndarray] = []
    start, total = 0, 0
    for i, size in enumerate(sizes.tolist()):
        if total + size > max_size and i > start:
            bins.append(np.arange(start, i))
            start, total = i, 0
        total += size
    bins.append(np.arange(start, sizes.size))
    return bins



def _bin(
    partition: Mapping[str, str | None],
    files: pa.Table,
    chosen: np.ndarray,
    sizes: np.ndarray,
    deleted: np.ndarray,
    has_dv: np.ndarray,
    live: np.ndarray,
) -> OptimizeBin:
    """The bin of the ``chosen`` rows of ``files``: their bytes, DV-deleted rows and live share of bytes."""
    size = int(sizes[chosen].sum())
    return OptimizeBin(
        partition_values=partition,
        files=files.take(int64_array(chosen)),
        size=size,
        deleted_rows=int(deleted[chosen][has_dv[chosen]].sum()),
        live_fraction=float((sizes[chosen] * live[chosen]).sum() / size) if size else 1.0,
    )

def _within_budget(bins: list[OptimizeBin], max_files: int | None, max_bytes: int | None) -> tuple[list[OptimizeBin], int]:
    """The bins, in plan order, that fit the run's budget; a bin that does not fit ends the run."""
    files = size = 0
    for i, bin in enumerate(bins):
        files += bin.num_files
        size += bin.size
        if (max_files is not None and files > max_files) or (max_bytes is not None and size > max_bytes):
            return bins[:i], len(bins) - i
    return bins, 0


def _batches(bins: Sequence[OptimizeBin], batch_size: int | None) -> tuple[tuple[int, ...], ...]:
    if not bins:
        return ()
    if batch_size is None:
        return (tuple(range(len(bins))),)
    batches: list[tuple[int, ...]] = []
    current: list[int] = []
    total = 0
    for i, bin in enumerate(bins):
        if current and total + bin.size > batch_size:
            batches.append(tuple(current))
            current, total = [], 0
        current.append(i)
        total += bin.size
    batches.append(tuple(current))
    return tuple(batches)


# ------------------------------------------------------------------ Z-order


def range_partition_ids(values: pa.Array | pa.ChunkedArray, num_ranges: int = ZORDER_NUM_RANGES) -> np.ndarray:
    """Delta's ``range_partition_id(col, num_ranges)``: each value's range among ``num_ranges`` equal-count ranges.

    An approximate rank scaled to ``[0, num_ranges)``: Delta samples the boundaries,
    here they are exact (the rank of the value's first occurrence). Equal values share an
    id; nulls sort first, so they get the lowest ids (Delta's ascending, nulls-first range
    order).
    """
    array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    n = len(array)
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    rank = _min_ranks(array)
    return ((rank - 1) * num_ranges // n).astype(np.uint32)


def range_bounds(sample: pa.Array | pa.ChunkedArray, num_ranges: int = ZORDER_NUM_RANGES) -> pa.Array:
    """The ``num_ranges - 1`` upper bounds of equal-count ranges of ``sample`` (nulls left out), ascending.

    What Spark's ``RangePartitioner`` derives from its sample for Delta's
    ``range_partition_id``; with :func:`range_ids_from_bounds` the ids of rows spread
    over many tasks agree, where :func:`range_partition_ids` needs every row at once.
    """
    array = sample.combine_chunks() if isinstance(sample, pa.ChunkedArray) else sample
    values = array.drop_null()
    ordered = values.take(pc.sort_indices(values))
    if len(ordered) == 0:
        return ordered
    positions = (np.arange(1, num_ranges, dtype=np.int64) * len(ordered)) // num_ranges
    return ordered.take(int64_array(positions))


def range_ids_from_bounds(values: pa.Array | pa.ChunkedArray, bounds: pa.Array) -> np.ndarray:
    """Per value, how many ``bounds`` are strictly below it (nulls: 0), as Spark's RangePartitioner assigns ids.

    Type-generic without a per-row loop: a value's min-rank among bounds and values
    together, minus its min-rank among the values alone, counts the bounds before it.
    """
    array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    n = len(array)
    if n == 0 or len(bounds) == 0:
        return np.zeros(n, dtype=np.uint32)
    combined = pa.concat_arrays([bounds.cast(array.type), array])
    together = _min_ranks(combined)[len(bounds):]
    alone = _min_ranks(array)
    return (together - alone).astype(np.uint32)


def _min_ranks(array: pa.Array) -> np.ndarray:
    ranks = pc.rank(array, sort_keys=[("", "ascending", "at_start")], tiebreaker="min")
    return np.frombuffer(ranks.buffers()[1], dtype=np.uint64, count=len(array), offset=ranks.offset * 8).astype(np.int64)


def interleave_bits(ids: Sequence[np.ndarray]) -> np.ndarray:
    """Delta's ``interleave_bits``: the 32-bit ints of each row interleaved, most significant bit first.

    Returns a ``(rows, 4 * len(ids))`` uint8 matrix: bit 31 of every column (first column
    first), then bit 30, and so on, packed into bytes; the bytes compare like Delta's
    binary Z-values.
    """
    if not ids:
        raise ValueError("interleave_bits needs at least one column")
    rows = len(ids[0])
    big_endian = np.ascontiguousarray(np.stack([np.asarray(i, dtype=np.uint32) for i in ids], axis=1), dtype=">u4")
    bits = np.unpackbits(big_endian.view(np.uint8).reshape(rows, len(ids), 4), axis=2)  # (rows, n, 32)
    return np.packbits(bits.transpose(0, 2, 1).reshape(rows, 32 * len(ids)), axis=1)


def hilbert_transpose(ids: Sequence[np.ndarray], num_bits: int) -> list[np.ndarray]:
    """The Hilbert index of points (one coordinate array per column, values below ``2**num_bits``), transposed.

    Skilling's AxestoTranspose ("Programming the Hilbert curve", 2004), vectorised over the
    rows: the index's bits are, most significant first, bit ``num_bits - 1`` of each
    returned array in column order, then the next bit, and so on, so that
    :func:`interleave_bits` of the arrays (shifted to the top of 32 bits) orders rows along
    the curve, as Delta's ``hilbert_index`` does for several clustering columns.
    """
    x = [np.asarray(i, dtype=np.uint32).copy() for i in ids]
    n = len(x)
    top = np.uint32(1 << (num_bits - 1))
    q = top
    while q > 1:  # inverse undo of the excess work
        p = np.uint32(q - 1)
        for i in range(n):
            high = (x[i] & q) != 0
            x[0] = np.where(high, x[0] ^ p, x[0])
            t = np.where(high, np.uint32(0), (x[0] ^ x[i]) & p)
            x[0] = x[0] ^ t
            x[i] = x[i] ^ t
        q = np.uint32(q >> 1)
    for i in range(1, n):  # Gray encode
        x[i] = x[i] ^ x[i - 1]
    t = np.zeros_like(x[0])
    q = top
    while q > 1:
        t = np.where((x[n - 1] & q) != 0, t ^ np.uint32(q - 1), t)
        q = np.uint32(q >> 1)
    return [xi ^ t for xi in x]


# Delta's HilbertClustering: bits per range id, floor(log2(numRanges)) + 1.
HILBERT_NUM_BITS = ZORDER_NUM_RANGES.bit_length()


def curve_key(ids: Sequence[np.ndarray], curve: str = "zorder") -> np.ndarray:
    """The clustering key of rows from their per-column range ids, as bytes that compare along ``curve``.

    ``"zorder"``: Delta's ``interleave_bits`` (Z-order, and a single clustering column);
    ``"hilbert"``: Delta's ``hilbert_index`` over :data:`HILBERT_NUM_BITS`-bit ids.
    A ``(rows, 4 * len(ids))`` uint8 matrix.
    """
    if curve == "hilbert" and len(ids) > 1:
        shift = np.uint32(32 - HILBERT_NUM_BITS)
        return interleave_bits([t << shift for t in hilbert_transpose(ids, HILBERT_NUM_BITS)])
    return interleave_bits(ids)


def zorder_permutation(
    data: pa.Table, columns: Sequence[str], num_ranges: int = ZORDER_NUM_RANGES, *, curve: str = "zorder"
) -> np.ndarray:
    """Row order of ``data`` by the Z-value (or Hilbert index, ``curve="hilbert"``) of ``columns``, stable;
    ``curve="linear"``: by the values of the one column, nulls first."""
    if curve == clustering_model.LINEAR:
        order = pc.sort_indices(data.select(list(columns)), sort_keys=[(c, "ascending", "at_start") for c in columns])
        return np.asarray(order.to_numpy(zero_copy_only=False), dtype=np.int64)
    ids = [range_partition_ids(data.column(c), num_ranges) for c in columns]
    words = np.empty((data.num_rows, len(columns)), dtype=np.uint32)
    for start in range(0, data.num_rows, _ZORDER_CHUNK_ROWS):
        stop = min(data.num_rows, start + _ZORDER_CHUNK_ROWS)
        packed = curve_key([i[start:stop] for i in ids], curve)
        # Each 4 bytes of the Z-value as one big-endian word: the words compare like the bytes.
        words[start:stop] = packed.view(">u4").astype(np.uint32)
    # lexsort: the last key is the primary one.
    return np.lexsort([words[:, k] for k in range(len(columns) - 1, -1, -1)])


# ------------------------------------------------------------------ rewriting one bin


def rewrite_bin(
    source: Snapshot | TableContext,
    files: pa.Table,
    *,
    zorder_by: Sequence[str] = (),
    max_file_size: int,
    written: WrittenFiles | None = None,
    curve: str = "zorder",
    read_workers: int | None = None,
) -> list[AddFile]:
    """Read the live rows of ``files`` (one bin) and write them back; the ``add`` actions, ``dataChange=false``.

    Compaction writes one file. Z-order sorts the rows by Z-value and writes
    ``max(1, bytes // max_file_size)`` files of consecutive Z-values. Memory holds one
    bin. On failure the files this call wrote are removed (``written`` records them for
    the caller's transaction too). ``read_workers``: threads that read the bin's files
    (default: the scan's own bound).
    """
    # DVs applied: purged rows are not rewritten. Row-tracking tables: the rows keep their
    # stable row IDs and commit versions (materialized in the new files).
    data = read_data(source, files, row_tracking=True, max_workers=read_workers)
    if data.num_rows == 0:
        return []
    # Many small files arrive as as many chunks: one contiguous copy makes the writer's
    # validation, size estimate and parquet encoding work on whole columns.
    slices = [data] if zorder_by else [data.combine_chunks()]
    if zorder_by:
        data = data.take(int64_array(zorder_permutation(data, zorder_by, curve=curve)))
        size = int(pc.sum(files.column("size")).as_py() or 0)
        num_files = min(data.num_rows, max(1, size // max_file_size))
        bounds = np.linspace(0, data.num_rows, num_files + 1).astype(np.int64)
        slices = [data.slice(int(a), int(b - a)) for a, b in itertools.pairwise(bounds)]
    own = written if written is not None else WrittenFiles(source.io)
    adds: list[AddFile] = []
    with own.removed_on_failure():
        for rows in slices:
            adds.extend(write_data_files(source, rows, target_file_size=_ONE_FILE, written=own))
    return [dataclasses.replace(add, data_change=False) for add in adds]


# ------------------------------------------------------------------ running it

BinRewriter = Callable[[OptimizePlan, Sequence[OptimizeBin]], Sequence[Sequence[AddFile]]]
"""Rewrites the bins of one batch elsewhere (a Spark job): for each bin, the ``add`` actions
(``dataChange=false``) of the files written for it, which the commit removes again if it fails."""


def optimize(
    location: TableLocation,
    snapshot: Snapshot | None,
    options: OptimizeOptions,
    *,
    commit: CommitOptions | None = None,
    post_commit: PostCommitHook | None = None,
    rewriter: BinRewriter | None = None,
    tags: Mapping[str, str] | None = None,
    app_id: str | None = None,
) -> OptimizeResult:
    """Plan and run an OPTIMIZE of ``snapshot``, one commit per batch; see the module docstring.

    ``rewriter`` rewrites a batch's bins elsewhere (default: :func:`rewrite_bin` here);
    ``tags`` go into every batch's ``commitInfo.tags`` (a job's identity).

    ``app_id`` makes the OPTIMIZE resumable and exactly-once across tries of one task:
    batch ``k`` commits with the tags ``airflowDelta.appId`` and ``airflowDelta.optimizeBatch``
    ``"k/n"``, the first batch with ``txn(app_id, 1)`` too (see ``optimize_progress``). A try that finds batches of ``app_id`` in the log plans only what is left
    (their output files are not rewritten again, Z-ordered partitions are done, their
    input counts against ``max_files`` / ``max_bytes``), continues the batch numbers, and
    returns the metrics of all batches together; when the last batch of a plan is
    there, it rewrites nothing and returns that result.
    """
    started_ms = _now_ms()
    if snapshot is None:
        raise TableNotFoundError(location.uri, "OPTIMIZE needs an existing table")
    earlier: EarlierBatches | None = None
    if app_id is not None:
        # Loaded only for a resumable OPTIMIZE (an appId): a plain one never looks for earlier batches.
        from airflow_delta.engine.operations.optimize_progress import (
            OPTIMIZE_APP_ID_TAG,
            OPTIMIZE_BATCH_TAG,
            batch_tag,
            find_earlier_batches,
        )

        earlier = find_earlier_batches(location, snapshot, app_id)
    remaining = _remaining_budget(options, earlier)
    if earlier is not None and not options.dry_run:
        mapping = ColumnMapping.from_metadata(snapshot.metadata, snapshot.protocol)
        done = frozenset(_partition_keys(snapshot, earlier.removed, mapping))
    else:
        done = frozenset()
    if (earlier is not None and earlier.complete) or remaining is None:
        plan = _empty_plan(snapshot, options)  # nothing is left of this application's OPTIMIZE
    else:
        plan = plan_optimize(snapshot, remaining, earlier=earlier)
    if options.dry_run or not plan.bins:
        # A dry run shows what is left to do; a run with nothing left, what earlier tries did.
        shown = None if options.dry_run else earlier
        return OptimizeResult(
            versions=() if shown is None else shown.versions,
            read_version=snapshot.version,
            metrics=MappingProxyType(
                _metrics(
                    plan, None if options.dry_run else [], plan.bins, started_ms, _now_ms(),
                    earlier=shown, earlier_partitions=done,
                )
            ),
            plan=plan.partitions(),
            dry_run=options.dry_run,
        )
    first_batch = (earlier.last_batch if earlier is not None else 0) + 1
    last_batch = first_batch + len(plan.batches) - 1
    versions: list[int] = []
    adds_per_bin: list[list[AddFile]] = []
    for number, batch in enumerate(plan.batches, start=first_batch):
        bins = [plan.bins[i] for i in batch]
        batch_tags = dict(tags or {})
        with Transaction(location, snapshot=snapshot, options=commit, post_commit=post_commit) as txn:
            if app_id is not None:
                if number == 1:
                    # Marks the application as started, and makes a late first batch of another try conflict.
                    txn.set_app_transaction(app_id, 1)
                batch_tags[OPTIMIZE_APP_ID_TAG] = app_id
                batch_tags[OPTIMIZE_BATCH_TAG] = batch_tag(number, last_batch)
            removed = pa.concat_tables([b.files for b in bins])
            # The files rewritten are what this commit depends on: a concurrent commit removing one conflicts.
            txn.mark_files_read(removed)
            if rewriter is None:
                written = _rewrite_here(snapshot, plan, bins, txn.written_files)
            else:
                written = [list(adds) for adds in rewriter(plan, bins)]
                if len(written) != len(bins):
                    raise InvalidArgumentError(
                        "rewriter", rewriter, f"a rewriter returning one list of adds per bin ({len(bins)}), not {len(written)}"
                    )
            if plan.clustering:
                written = [_as_zcube(adds, plan.zorder_by) for adds in written]
            # Files another process wrote are removed with the transaction's own if the commit fails.
            txn.add_files([a for adds in written for a in adds], written_for_this_commit=rewriter is not None)
            # Delta's OptimizeExecutor stamps every remove with the operation's start time. Staged after
            # the rewrite, not beside it: on 2 cores the main thread's staging slowed the readers more
            # than it saved (benchmarks/README.md, comp21b).
            txn.remove_files(removed, data_change=False, deletion_timestamp=started_ms)
            version = txn.commit(
                "OPTIMIZE",
                _operation_parameters(options, plan),
                _commit_metrics(bins, [a for adds in written for a in adds]),
                tags=batch_tags or None,
            )
        versions.append(version)
        adds_per_bin.extend(written)
    metrics = _metrics(
        plan, adds_per_bin, plan.bins, started_ms, _now_ms(),
        num_batches=len(versions), earlier=earlier, earlier_partitions=done,
    )
    return OptimizeResult(
        versions=(earlier.versions if earlier is not None else ()) + tuple(versions),
        read_version=snapshot.version,
        metrics=MappingProxyType(metrics),
        plan=_actual_partitions(plan, adds_per_bin),
        dry_run=False,
    )


def _operation_parameters(options: OptimizeOptions, plan: OptimizePlan) -> dict[str, Any]:
    """Delta's OPTIMIZE operationParameters; a clustered table's list its clusterBy and isFull, zOrderBy empty."""
    if plan.clustering:
        return {"predicate": [], "zOrderBy": [], "clusterBy": list(plan.zorder_by), "auto": False, "isFull": plan.full}
    return {"predicate": [options.where] if options.where else [], "zOrderBy": list(plan.zorder_by), "auto": False}


def _as_zcube(adds: Sequence[AddFile], columns: Sequence[str]) -> list[AddFile]:
    """The files of one clustered bin as one new ZCube: its tags and ``clusteringProvider``, as Delta's
    ClusteringStrategy writes them, so that Delta's own OPTIMIZE sees them as clustered."""
    tags = clustering_model.zcube_tags(str(uuid.uuid4()), columns)
    return [
        dataclasses.replace(
            add, tags={**dict(add.tags or {}), **tags}, clustering_provider=clustering_model.CLUSTERING_PROVIDER
        )
        for add in adds
    ]


def _remaining_budget(options: OptimizeOptions, earlier: EarlierBatches | None) -> OptimizeOptions | None:
    """``options`` with the input the earlier batches took off its budget; None when they used all of it."""
    if earlier is None or (options.max_files is None and options.max_bytes is None):
        return options
    max_files = None if options.max_files is None else options.max_files - earlier.removed.num_rows
    max_bytes = None if options.max_bytes is None else options.max_bytes - earlier.removed_bytes
    if (max_files is not None and max_files < 1) or (max_bytes is not None and max_bytes < 1):
        return None
    return dataclasses.replace(options, max_files=max_files, max_bytes=max_bytes)


def _empty_plan(snapshot: Snapshot, options: OptimizeOptions) -> OptimizePlan:
    min_size, max_size = options.file_sizes(snapshot.properties.target_file_size)
    return OptimizePlan(
        read_version=snapshot.version,
        where=options.where,
        zorder_by=tuple(options.zorder_by),
        min_file_size=min_size,
        max_file_size=max_size,
        max_deleted_rows_ratio=float(options.max_deleted_rows_ratio),
        bins=(),
        batches=(),
        considered_files=0,
        bins_over_budget=0,
    )


def _rewrite_here(snapshot: Snapshot, plan: OptimizePlan, bins: Sequence[OptimizeBin], written: WrittenFiles) -> list[list[AddFile]]:
    """The bins rewritten by this task, two at a time: in a process forked beside this one where
    that is safe (:mod:`forked_lanes`), else in two threads, where one bin's parquet encoding
    (which releases the GIL) overlaps another's reads. Memory holds at most two bins."""
    if len(bins) == 1 or plan.zorder_by:  # a Z-order bin is a whole partition: one at a time
        return [
            rewrite_bin(
                snapshot, b.files, zorder_by=plan.zorder_by, max_file_size=plan.max_file_size, written=written,
                curve=plan.curve,
            )
            for b in bins
        ]
    cores = _cores()
    # One reader thread per core in all: a small file's read holds the GIL for part of it,
    # and more threads than cores only hand the GIL back and forth.
    read_workers = max(1, cores // _PARALLEL_BINS)
    num_files = sum(b.num_files for b in bins)
    if cores > 1 and num_files >= _FORK_MIN_FILES:
        from airflow_delta.engine.operations import forked_lanes

        if forked_lanes.lanes_possible(snapshot.io):
            for module in _IMPORTED_BY_A_REWRITE:  # before the fork: the children import nothing
                importlib.import_module(module)

            def rewrite_as_json(i: int, files: WrittenFiles) -> list[dict[str, Any]]:
                adds = rewrite_bin(
                    snapshot, bins[i].files, max_file_size=plan.max_file_size, written=files, read_workers=read_workers
                )
                return [add.to_json() for add in adds]  # a child's adds cross as their log JSON

            adds_per_bin = forked_lanes.run_in_lanes(
                len(bins), rewrite_as_json, snapshot.io, written, lanes=_PARALLEL_BINS
            )
            log.info(
                "rewrote %d bins of %d files in %d processes (this one and %d forked from it)",
                len(bins), num_files, _PARALLEL_BINS, _PARALLEL_BINS - 1,
            )
            return [[AddFile.from_json(add) for add in adds] for adds in adds_per_bin]
    # Each bin records its files apart (a failing bin removes only its own while others write);
    # when any fails, the pool waits for the others and every bin's files are removed.
    per_bin = [WrittenFiles(snapshot.io) for _ in bins]

    def one(i: int) -> list[AddFile]:
        return rewrite_bin(
            snapshot, bins[i].files, max_file_size=plan.max_file_size, written=per_bin[i], read_workers=read_workers
        )

    try:
        with ThreadPoolExecutor(max_workers=_PARALLEL_BINS, thread_name_prefix="delta-optimize") as pool:
            results = list(pool.map(one, range(len(bins))))
    except BaseException:
        for files in per_bin:
            files.remove_all()
        raise
    for files in per_bin:
        for path in files.paths:
            written.record(path)  # the transaction's now: removed if its commit fails
    return results


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _actual_partitions(plan: OptimizePlan, adds_per_bin: Sequence[Sequence[AddFile]]) -> tuple[PartitionOptimizePlan, ...]:
    estimated = plan.partitions()
    out: dict[tuple[tuple[str, str | None], ...], list[int]] = {}
    for bin, adds in zip(plan.bins, adds_per_bin, strict=True):
        counts = out.setdefault(tuple(bin.partition_values.items()), [0, 0])
        counts[0] += len(adds)
        counts[1] += sum(a.size for a in adds)
    return tuple(
        dataclasses.replace(p, files_out=out[tuple(p.partition_values.items())][0], bytes_out=out[tuple(p.partition_values.items())][1])
        for p in estimated
    )


def _file_sizes(sizes: Sequence[int] | np.ndarray) -> dict[str, Any]:
    """Delta's FileSizeMetrics: min, max, avg, totalFiles, totalSize."""
    values = np.asarray(sizes, dtype=np.int64)
    if not values.size:
        return {"min": None, "max": None, "avg": 0.0, "totalFiles": 0, "totalSize": 0}
    total = int(values.sum())
    return {
        "min": int(values.min()), "max": int(values.max()), "avg": total / values.size, "totalFiles": int(values.size),
        "totalSize": total,
    }


def _metrics(
    plan: OptimizePlan,
    adds_per_bin: Sequence[Sequence[AddFile]] | None,
    bins: Sequence[OptimizeBin],
    started_ms: int,
    ended_ms: int,
    *,
    num_batches: int | None = None,
    earlier: EarlierBatches | None = None,
    earlier_partitions: frozenset[tuple[tuple[str, str | None], ...]] = frozenset(),
) -> dict[str, Any]:
    """Delta's ``OptimizeMetrics`` (the result of OPTIMIZE in Spark) under its names.

    ``adds_per_bin`` None (a dry run): what the plan would remove, and the files it would
    add estimated from the bins' sizes (see :meth:`OptimizePlan.partitions`). ``earlier``:
    batches of earlier tries (rewriting ``earlier_partitions``), counted in as if this run
    had committed them.
    """
    removed = _removed_sizes(bins)
    if adds_per_bin is None:
        added = [
            int(b.size * b.live_fraction / plan.output_files(b))
            for b in bins
            if b.live_fraction > 0
            for _ in range(plan.output_files(b))
        ]
        num_batches = len(plan.batches)
    else:
        added = [a.size for adds in adds_per_bin for a in adds]
    num_dvs = sum(b.num_files - b.files.column("deletion_vector").null_count for b in bins)
    dv_rows = sum(b.deleted_rows for b in bins)
    partitions = {tuple(b.partition_values.items()) for b in bins}
    considered = plan.considered_files
    num_batches = num_batches or 0
    if earlier is not None:
        removed = np.concatenate([removed, _int64(earlier.removed.column("size"))])
        added += _sizes(earlier.added)
        num_dvs += earlier.deletion_vectors_removed
        dv_rows += earlier.deletion_vector_rows_removed
        considered += earlier.removed.num_rows  # the files they rewrote were candidates of their plan
        num_batches += len(earlier.versions)
        partitions |= earlier_partitions
    metrics: dict[str, Any] = {
        "numFilesAdded": len(added),
        "numFilesRemoved": int(removed.size),
        "filesAdded": _file_sizes(added),
        "filesRemoved": _file_sizes(removed),
        "partitionsOptimized": len(partitions),
        "zOrderStats": None,
        "numBatches": num_batches,
        "totalConsideredFiles": considered,
        "totalFilesSkipped": considered - int(removed.size),
        "preserveInsertionOrder": False,
        "numDeletionVectorsRemoved": num_dvs,
        "deletionVectorStats": {"numDeletionVectorsRemoved": num_dvs, "numDeletionVectorRowsRemoved": dv_rows},
        "numTableColumns": None,
        "numTableColumnsWithStats": None,
        "startTimeMs": started_ms,
        "endTimeMs": ended_ms,
    }
    if plan.zorder_by:
        # Delta's ZOrderStats for its "all" strategy: every file of a partition is one input,
        # and each partition becomes one Z-cube.
        inputs = {"num": int(removed.size), "size": int(removed.sum())}
        metrics["zOrderStats"] = {
            "strategyName": "all",
            "inputCubeFiles": {"num": 0, "size": 0},
            "inputOtherFiles": inputs,
            "inputNumCubes": 0,
            "mergedFiles": inputs,
            "numOutputCubes": metrics["partitionsOptimized"],
        }
    return metrics


def _sizes(files: pa.Table) -> list[int]:
    return _int64(files.column("size")).tolist()


def _removed_sizes(bins: Sequence[OptimizeBin]) -> np.ndarray:
    """The sizes of the files the bins rewrite, as one int64 array (no int object per file)."""
    return np.concatenate([_int64(b.files.column("size")) for b in bins]) if bins else np.zeros(0, dtype=np.int64)


def _commit_metrics(bins: Sequence[OptimizeBin], adds: Sequence[AddFile]) -> dict[str, int]:
    """The ``operationMetrics`` Delta writes into an OPTIMIZE commit, for one batch."""
    removed = _removed_sizes(bins)
    added = np.array(sorted(a.size for a in adds), dtype=np.int64)
    quantile = (lambda q: int(np.percentile(added, q, method="lower"))) if added.size else (lambda q: 0)
    return {
        "numRemovedFiles": int(removed.size),
        "numRemovedBytes": int(removed.sum()),
        "p25FileSize": quantile(25),
        "numDeletionVectorsRemoved": sum(b.num_files - b.files.column("deletion_vector").null_count for b in bins),
        "minFileSize": int(added.min()) if added.size else 0,
        "numAddedFiles": int(added.size),
        "maxFileSize": int(added.max()) if added.size else 0,
        "p75FileSize": quantile(75),
        "p50FileSize": quantile(50),
        "numAddedBytes": int(added.sum()),
    }


def _now_ms() -> int:
    return int(time.time() * 1000)

