"""What a data file's parquet footer says about its rows: row counts and per-row-group statistics.

Decisions that drop data (remove a whole file, "every row deleted", DELETE row metrics,
the range of a deletion vector) take the row count from the file itself, never from the
``numRecords`` statistic of the log, which a writer may have got wrong:
:func:`physical_row_counts` reads only footers.

:func:`row_groups_may_match` prunes a file's row groups with the parquet statistics of the
predicate's columns, through the same conservative pruner as file skipping
(:func:`~airflow_delta.engine.expressions.prune_files`). Footer statistics are trusted only
where they cannot mislead: a statistic that is absent, of a type whose order parquet and
Spark do not share (INT96, unsigned integers, float16, intervals), a NaN bound, or a
self-contradicting one (min above max, more nulls than rows, "all null" with bounds)
is unknown, and the row group is read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, overload

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.errors import CorruptDataFileError, DataFileNotFoundError
from airflow_delta.engine.model.arrow_numpy import bool_scalar, int64_scalar, null_scalar
from airflow_delta.engine.storage.fileio import FileIO

if TYPE_CHECKING:
    from airflow_delta.engine.expressions import Predicate

__all__ = ["RowGroupColumn", "physical_row_count", "physical_row_counts", "row_groups_may_match"]

_MAX_FOOTER_READERS = min(32, (os.cpu_count() or 4) * 2)


def physical_row_count(io: FileIO, path: str) -> int:
    """The number of rows physically stored in the parquet file at ``path`` (absolute, FileIO form): its footer's."""
    try:
        with io.open_input_file(path) as source:
            return int(pq.ParquetFile(source).metadata.num_rows)
    except FileNotFoundError as exc:
        raise DataFileNotFoundError(
            f"data file {path} referenced by the log does not exist; it may have been removed by VACUUM "
            "or deleted outside Delta"
        ) from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptDataFileError(path, f"its parquet footer cannot be read ({exc})") from exc


@overload
def physical_row_counts(io: FileIO, paths: Sequence[str]) -> list[int]: ...
@overload
def physical_row_counts(io: FileIO, paths: Sequence[str], *, missing_ok: Literal[True]) -> list[int | None]: ...


def physical_row_counts(io: FileIO, paths: Sequence[str], *, missing_ok: bool = False) -> list[int] | list[int | None]:
    """:func:`physical_row_count` of each path (footers only), read in parallel.

    ``missing_ok``: a file that does not exist counts as None instead of raising.
    """

    def count(path: str) -> int | None:
        try:
            return physical_row_count(io, path)
        except DataFileNotFoundError:
            if missing_ok:
                return None
            raise

    if len(paths) <= 1:
        return [count(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(len(paths), _MAX_FOOTER_READERS), thread_name_prefix="delta-footer") as pool:
        return list(pool.map(count, paths))


@dataclass(frozen=True, slots=True)
class RowGroupColumn:
    """A table column as one parquet leaf column of a file: where its statistics are, and their type."""

    leaf_index: int  # index of the column chunk in each row group
    file_type: pa.DataType  # the Arrow type the file stores it as
    table_type: pa.DataType  # the table's (logical) type, which the predicate compares in


def row_groups_may_match(
    predicate: Predicate, metadata: pq.FileMetaData, columns: Mapping[str, RowGroupColumn]
) -> list[int]:
    """Indexes of the row groups of a file that may hold a row matching ``predicate`` (never a false negative).

    ``columns`` maps the predicate's top-level logical column names to their leaf in the
    file; a column left out (nested, partition, missing from the file) has no statistics,
    and a predicate on it alone keeps every row group.
    """
    # Imported here: the expression engine pulls in sqlglot and pyarrow.dataset, which plain scans do not need.
    from airflow_delta.engine.expressions import prune_files

    n = metadata.num_row_groups
    if n == 0:
        return []
    stats = _row_group_stats(metadata, columns)
    keep = prune_files(predicate, None, stats)
    return [int(i) for i in pc.indices_nonzero(keep.fill_null(bool_scalar(True))).to_pylist()]


def _row_group_stats(metadata: pq.FileMetaData, columns: Mapping[str, RowGroupColumn]) -> pa.StructArray:
    """One row per row group, in the layout of parsed Delta statistics (numRecords, minValues, maxValues, nullCount)."""
    # Not at module level: importing the expressions package imports sqlglot, which reads without a filter skip.
    from airflow_delta.engine.expressions.arrow_values import arrow_array

    n = metadata.num_row_groups
    groups = [metadata.row_group(i) for i in range(n)]
    num_records = arrow_array([g.num_rows for g in groups], pa.int64())
    mins: list[pa.Array] = []
    maxs: list[pa.Array] = []
    nulls: list[pa.Array] = []
    names: list[str] = []
    for name, column in columns.items():
        lo, hi, null_count = _column_stats([g.column(column.leaf_index) for g in groups], column, num_records)
        names.append(name)
        mins.append(lo)
        maxs.append(hi)
        nulls.append(null_count)

    def struct(arrays: list[pa.Array]) -> pa.StructArray:
        if not arrays:
            return pa.array([{}] * n, pa.struct([]))
        return pa.StructArray.from_arrays(arrays, names=names)

    return pa.StructArray.from_arrays(
        [num_records, struct(mins), struct(maxs), struct(nulls)],
        names=["numRecords", "minValues", "maxValues", "nullCount"],
    )


def _column_stats(
    chunks: Sequence[pq.ColumnChunkMetaData], column: RowGroupColumn, num_records: pa.Array
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(min, max, nullCount) of one column over the row groups, unknown (null) where the footer cannot be trusted."""
    from airflow_delta.engine.expressions.arrow_values import arrow_array

    n = len(chunks)
    unknown = pa.nulls(n, column.table_type), pa.nulls(n, column.table_type), pa.nulls(n, pa.int64())
    if not _orderable(chunks[0] if chunks else None, column.file_type):
        return unknown
    lows: list[object] = []
    highs: list[object] = []
    counts: list[int | None] = []
    raw = pa.types.is_timestamp(column.file_type)
    for chunk in chunks:
        s = chunk.statistics
        if s is None:
            lows.append(None)
            highs.append(None)
            counts.append(None)
            continue
        counts.append(int(s.null_count) if s.has_null_count else None)
        if not s.has_min_max:
            lows.append(None)
            highs.append(None)
            continue
        try:
            # Timestamps as their stored integers: the Python conversion of nanoseconds needs pandas.
            lows.append(s.min_raw if raw else s.min)
            highs.append(s.max_raw if raw else s.max)
        except (ValueError, TypeError, UnicodeDecodeError, OverflowError):
            lows.append(None)
            highs.append(None)
    try:
        value_type = column.file_type.value_type if pa.types.is_dictionary(column.file_type) else column.file_type
        build_type = pa.int64() if raw else value_type
        lo = arrow_array(lows, build_type)
        hi = arrow_array(highs, build_type)
        if build_type != value_type:
            lo, hi = lo.cast(value_type), hi.cast(value_type)
        lo = _as_table_type(lo, column.table_type)
        hi = _as_table_type(hi, column.table_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return unknown[0], unknown[1], _trusted_null_counts(arrow_array(counts, pa.int64()), num_records, None)
    if pa.types.is_floating(lo.type):
        # A NaN bound says nothing usable (writers disagree on whether NaN counts).
        nan = pc.or_kleene(pc.is_nan(lo), pc.is_nan(hi)).fill_null(bool_scalar(False))
        lo = pc.if_else(nan, null_scalar(lo.type), lo)
        hi = pc.if_else(nan, null_scalar(hi.type), hi)
    # min above max: the footer lies; neither bound is usable.
    inverted = pc.greater(lo, hi).fill_null(bool_scalar(False))
    lo = pc.if_else(inverted, null_scalar(lo.type), lo)
    hi = pc.if_else(inverted, null_scalar(hi.type), hi)
    return lo, hi, _trusted_null_counts(arrow_array(counts, pa.int64()), num_records, lo)


def _trusted_null_counts(counts: pa.Array, num_records: pa.Array, lo: pa.Array | None) -> pa.Array:
    """Null counts, unknown where they contradict the row count or the bounds (a bound means a non-null value)."""
    bad = pc.or_kleene(pc.less(counts, int64_scalar(0)), pc.greater(counts, num_records))
    if lo is not None:
        bad = pc.or_kleene(bad, pc.and_kleene(pc.is_valid(lo), pc.equal(counts, num_records)))
    return pc.if_else(bad.fill_null(bool_scalar(False)), null_scalar(pa.int64()), counts)


def _as_table_type(array: pa.Array, table_type: pa.DataType) -> pa.Array:
    if array.type == table_type:
        return array
    if pa.types.is_timestamp(array.type) and pa.types.is_timestamp(table_type):
        # The scan truncates finer units the same way, so the bounds stay bounds of what it reads.
        return array.cast(table_type, safe=False)
    return array.cast(table_type)


def _orderable(chunk: pq.ColumnChunkMetaData | None, file_type: pa.DataType) -> bool:
    """Whether parquet orders this column's statistics as Spark compares its values."""
    if chunk is None:
        return False
    if chunk.physical_type == "INT96":  # no defined sort order
        return False
    value_type = file_type.value_type if pa.types.is_dictionary(file_type) else file_type
    if pa.types.is_unsigned_integer(value_type) or pa.types.is_float16(value_type):
        return False
    return (
        pa.types.is_integer(value_type)
        or pa.types.is_floating(value_type)
        or pa.types.is_decimal(value_type)
        or pa.types.is_boolean(value_type)
        or pa.types.is_date(value_type)
        or pa.types.is_timestamp(value_type)
        or pa.types.is_string(value_type)
        or pa.types.is_large_string(value_type)
        or pa.types.is_binary(value_type)
        or pa.types.is_large_binary(value_type)
    )
