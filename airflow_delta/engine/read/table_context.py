"""``TableContext``: a table's state as a small picklable value, for work that runs elsewhere.

A Spark executor (or any other process) that reads or writes one data file of a table
needs the table's location, protocol and metadata, never its file list. A
:class:`~.snapshot.Snapshot` holds the whole reconciled log and an open FileIO, and does
not pickle; a context holds only what per-file work needs, pickles in a few kilobytes,
and opens its FileIO on first use in the process that uses it.

It is a :class:`~.scan.ScanSource` (per-file reads: :func:`read_live_rows`) and carries
what the data-file writer lays files out by, so the same engine code reads and writes
files on a driver and on executors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from airflow_delta.engine.model.actions import Metadata, Protocol
from airflow_delta.engine.model.arguments import check_instance, check_int, check_str
from airflow_delta.engine.model.arrow_numpy import bool_array, int64_to_numpy
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.model.schema import schema_to_arrow
from airflow_delta.engine.read.scan import (
    absolute_data_paths,
    deleted_rows_of_file,
    deleted_rows_of_files,
    file_predicate_read_bytes,
    partition_values_of,
    read_with_row_positions,
    row_group_sizes,
    row_tracking_values,
)
from airflow_delta.engine.storage.fileio import FileIO, LocalFileIO
from airflow_delta.engine.storage.location import TableLocation

if TYPE_CHECKING:
    from airflow_delta.engine.read.snapshot import Snapshot

__all__ = [
    "TableContext",
    "deleted_row_positions",
    "local_data_file_paths",
    "predicate_read_bytes",
    "read_live_rows",
    "row_tracking_values",
    "split_by_row_groups",
    "typed_partition_values",
]

@dataclass(frozen=True)
class TableContext:
    """Where a table lives and its protocol and metadata at ``version``.

    ``uri`` and ``storage_options`` are what :class:`~airflow_delta.engine.DeltaTable`
    was opened with: each process resolves them to its own FileIO (a local table's is
    confined to its root there too).
    """

    uri: str
    version: int
    protocol: Protocol
    metadata: Metadata
    storage_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_str("TableContext.uri", self.uri, non_empty=True)
        check_int("TableContext.version", self.version, minimum=0)
        check_instance("TableContext.protocol", self.protocol, Protocol)
        check_instance("TableContext.metadata", self.metadata, Metadata)
        check_instance("TableContext.storage_options", self.storage_options, Mapping)
        object.__setattr__(self, "storage_options", dict(self.storage_options))

    @classmethod
    def of(cls, snapshot: Snapshot, uri: str, storage_options: Mapping[str, Any] | None = None) -> TableContext:
        """The context of ``snapshot``, a snapshot of the table at ``uri``."""
        return cls(uri, snapshot.version, snapshot.protocol, snapshot.metadata, dict(storage_options or {}))

    # The ScanSource interface and what the data-file writer reads.
    @cached_property
    def location(self) -> TableLocation:
        return TableLocation.from_uri(self.uri, self.storage_options or None)

    @cached_property
    def io(self) -> FileIO:
        return self.location.io

    @property
    def table_root(self) -> str:
        return self.location.root

    @cached_property
    def schema(self) -> pa.Schema:
        """The table schema as Arrow, logical column names."""
        return schema_to_arrow(self.metadata.schema_string)

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.metadata.partition_columns

    @cached_property
    def properties(self) -> TableProperties:
        return TableProperties.for_reading(self.metadata.configuration)

    # Pickled as the log's own JSON of the protocol and metadata (their frozen maps do
    # not pickle), without the cached values.
    def __getstate__(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "version": self.version,
            "protocol": self.protocol.to_json(),
            "metadata": self.metadata.to_json(),
            "storage_options": dict(self.storage_options),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(
            uri=state["uri"],
            version=state["version"],
            protocol=Protocol.from_json(state["protocol"]),
            metadata=Metadata.from_json(state["metadata"]),
            storage_options=state["storage_options"],
        )


def read_live_rows(
    source: TableContext,
    file: pa.Table,
    columns: Sequence[str] | None = None,
    *,
    row_group_filter: str | None = None,
    row_groups: range | None = None,
) -> tuple[pa.Table, np.ndarray]:
    """The live rows of one data file and the physical position of each.

    ``row_group_filter`` (a SQL condition over the table's columns) skips the row groups
    whose parquet statistics prove that no row matches it, as the engine's DELETE does:
    the rows returned are a superset of the matching ones, never filtered row by row, so
    the caller still evaluates its condition on them.

    ``row_groups`` (a range of row-group indexes) reads only those row groups, so that
    several tasks can share one large file.

    ``file`` is one row of file actions (``FILE_ACTIONS_SCHEMA``, as
    ``Snapshot.add_actions`` or ``Transaction.read_files()`` give them). The rows have
    the table's logical columns (or ``columns``), partition values filled in and column
    mapping resolved; rows that the file's deletion vector deletes are left out. The
    positions (int64, ascending) are what a deletion vector of this file would store for
    each returned row.
    """
    check_instance("source", source, TableContext)
    check_instance("file", file, pa.Table)
    if file.num_rows != 1:
        raise ValueError(f"expected exactly one file action, got {file.num_rows}")
    check_str("row_group_filter", row_group_filter, optional=True)
    names = list(source.schema.names) if columns is None else list(columns)
    bound = None
    if row_group_filter is not None:
        from airflow_delta.engine.expressions import parse_predicate

        bound = parse_predicate(row_group_filter, source.schema)
    check_instance("row_groups", row_groups, range, optional=True)
    read = read_with_row_positions(source, file, names, bound, row_groups=row_groups)
    positions = read.all_positions()
    deleted = deleted_rows_of_file(source, file)
    if deleted is None or deleted.size == 0:
        return read.rows, positions
    # Both sorted: each deleted row found by a binary search in the positions read (the rows of
    # some row groups only, when ``row_groups`` or the filter leave others out), not a sort of both.
    keep = np.ones(len(positions), dtype=bool)
    if len(positions):
        at = np.searchsorted(positions, deleted)
        inside = at < len(positions)
        at, deleted = at[inside], deleted[inside]
        keep[at[positions[at] == deleted]] = False
    return read.rows.filter(bool_array(keep)), positions[keep]


def split_by_row_groups(source: TableContext, files: pa.Table, target_bytes: int) -> list[tuple[int, range | None]]:
    """How to share large files among tasks: per file, None (read it whole) or ranges of its row groups.

    Files no larger than ``target_bytes`` (their ``size`` in the log) are read whole. A
    larger file's footer is read (in parallel with the others) and its row groups are cut
    into consecutive ranges of about ``target_bytes`` compressed bytes each; a file of one
    row group stays whole. Returns (index in ``files``, range or None) pairs, in file order.
    """
    check_instance("source", source, TableContext)
    check_instance("files", files, pa.Table)
    check_int("target_bytes", target_bytes, minimum=1)
    # Not to_numpy(zero_copy_only=False): that imports pandas (about a second in a fresh process).
    sizes = int64_to_numpy(files.column("size").cast(pa.int64())) if files.num_rows else np.empty(0, np.int64)
    large = [int(i) for i in np.flatnonzero(sizes > target_bytes)]
    if not large:
        return [(i, None) for i in range(files.num_rows)]
    with ThreadPoolExecutor(max_workers=min(8, len(large)), thread_name_prefix="delta-footers") as pool:
        footers = dict(zip(large, pool.map(lambda i: row_group_sizes(source, files.slice(i, 1)), large), strict=True))
    out: list[tuple[int, range | None]] = []
    for i in range(files.num_rows):
        groups = footers.get(i)
        if groups is None or len(groups) <= 1:
            out.append((i, None))
            continue
        start, taken = 0, 0
        for g, size in enumerate(groups):
            taken += int(size)
            if taken >= target_bytes or g == len(groups) - 1:
                out.append((i, range(start, g + 1)))
                start, taken = g + 1, 0
    return out


# For a reader other than the engine's (Spark's own parquet reader on a driver that plans
# with the engine): what it needs to read files exactly as read_live_rows does.


def local_data_file_paths(source: TableContext, files: pa.Table) -> list[str] | None:
    """The absolute local paths of ``files`` (file actions), or None for a table not on the local file system.

    Each path is checked as a read checks it: below the table root, no symbolic link
    leading out (:class:`~airflow_delta.engine.PathOutsideTableError`,
    :class:`~airflow_delta.engine.InvalidPathError` otherwise).
    """
    check_instance("source", source, TableContext)
    check_instance("files", files, pa.Table)
    io = source.io
    if not isinstance(io, LocalFileIO):
        return None
    paths = absolute_data_paths(files, source.table_root)
    io.check_inside(paths)
    return paths


def typed_partition_values(source: TableContext, files: pa.Table) -> pa.StructArray:
    """The partition values of ``files`` (file actions), one struct per file: logical names, table types."""
    check_instance("source", source, TableContext)
    check_instance("files", files, pa.Table)
    return partition_values_of(files, source)


def deleted_row_positions(source: TableContext, files: pa.Table, workers: int = 8) -> list[np.ndarray | None]:
    """Per file of ``files``, the sorted physical row positions its deletion vector deletes (None without one).

    DV files shared by several data files are read once, distinct ones by up to ``workers`` threads.
    """
    check_instance("source", source, TableContext)
    check_instance("files", files, pa.Table)
    check_int("workers", workers, minimum=1)
    return deleted_rows_of_files(source, files, workers)


def predicate_read_bytes(source: TableContext, files: pa.Table, predicate: str) -> int:
    """Compressed bytes that finding the rows of ``predicate`` in ``files`` reads, from the files' footers.

    The engine finds a predicate's rows (a DELETE with deletion vectors) by reading only
    the predicate's columns of the row groups whose parquet statistics may match; this
    sums those column chunks (partition columns cost nothing) over ``files``, rows of
    file actions as ``Transaction.read_files()`` gives them. One footer read per file, in
    parallel; no data is read. Raises :class:`~airflow_delta.engine.InvalidFilterError`
    for a predicate the engine cannot parse.
    """
    check_instance("source", source, TableContext)
    check_instance("files", files, pa.Table)
    check_str("predicate", predicate)
    from airflow_delta.engine.expressions import parse_predicate

    bound = parse_predicate(predicate, source.schema)
    if files.num_rows == 0:
        return 0
    with ThreadPoolExecutor(max_workers=min(8, files.num_rows), thread_name_prefix="delta-footers") as pool:
        return sum(pool.map(lambda i: file_predicate_read_bytes(source, files.slice(i, 1), bound), range(files.num_rows)))
