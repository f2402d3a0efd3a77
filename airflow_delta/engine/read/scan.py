"""Reading a table's data files into Arrow, as the snapshot defines them.

:func:`read_data` takes the file actions a scan planned (rows of
:data:`~airflow_delta.engine.model.actions.FILE_ACTIONS_SCHEMA`) and returns their rows in the
table's logical schema. For each file it:

1. reads the parquet through the snapshot's FileIO (path resolved inside the table root),
   with INT96 timestamps read at microsecond precision so year-9999 values survive;
2. drops the rows its deletion vector names (row index = position in the file);
3. resolves each table column in the file: by name (no column mapping), by physical
   name (``name`` mode) or by parquet field id (``id`` mode), at every nesting level;
   columns the file lacks (added later by schema evolution) become nulls;
4. casts to the table's types (type widening such as int -> long, timestamps to
   microseconds with the right time zone, unshredded variants to the
   ``struct<metadata, value>`` of :data:`~airflow_delta.engine.model.schema.VARIANT_TYPE`),
   and adds the partition columns as constants
   from the log (they are usually not in the file, and the log is authoritative);
5. applies the row filter.

Files are read on a bounded thread pool (parquet decoding releases the GIL), each thread a
run of consecutive files; the output keeps the order of ``files``. A file's layout (where the
table's columns are in it) is worked out once per distinct stored schema. Steps 3 to 5 run once per run of consecutive files stored with
the same schema, not per file (a compaction reads thousands of small files written alike),
with each row's partition values taken from its own file's log entry.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple
from typing import Protocol as Interface

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow._parquet import ParquetReader

from airflow_delta.engine.errors import (
    CorruptDataFileError,
    DataFileNotFoundError,
    DeltaError,
    InvalidFilterError,
    SchemaMismatchError,
)
from airflow_delta.engine.model.actions import DeletionVectorDescriptor, Metadata, Protocol
from airflow_delta.engine.model.arrow_numpy import bool_array, combined, empty_table, int64_array, mask_to_numpy
from airflow_delta.engine.model.column_mapping import column_mapping_mode
from airflow_delta.engine.model.partition_values import parse_partition_values, partition_schema
from airflow_delta.engine.model.row_tracking import ROW_COMMIT_VERSION, ROW_ID, materialized_columns, stable_values
from airflow_delta.engine.model.schema import FIELD_ID_KEY, PARQUET_FIELD_ID_KEY, PHYSICAL_NAME_KEY, VARIANT_TYPE
from airflow_delta.engine.storage.fileio import FileIO, LocalFileIO
from airflow_delta.engine.storage.paths import check_log_paths, encode_log_path

if TYPE_CHECKING:
    from airflow_delta.engine.expressions import Predicate
    from airflow_delta.engine.read.row_groups import RowGroupColumn

# Upper bound of concurrent file reads; object stores like more, local disks need fewer.
DEFAULT_MAX_WORKERS = min(32, (os.cpu_count() or 4) * 2)

_FIELD_ID_BYTES = PARQUET_FIELD_ID_KEY.encode()
# Runs of files per reader thread: few enough that a run's hand-over costs little next to its
# reads, enough that a thread whose files are slower does not hold up the others for long.
_CHUNKS_PER_WORKER = 4
# File layouts a scan remembers (files of one table are mostly stored alike; each lookup is linear).
_KEPT_LAYOUTS = 8
# Files up to this size (as the log records it) are read whole into memory and parsed there:
# a small file's footer and column chunks are one read instead of several.
_SMALL_FILE_BYTES = 1 << 20
_PHYSICAL_NAME_BYTES = PHYSICAL_NAME_KEY.encode()
_DELTA_FIELD_ID_BYTES = FIELD_ID_KEY.encode()


class ScanSource(Interface):
    """What a scan needs to know of the table state it reads: a Snapshot is one.

    A structural type, so that this module never imports the snapshot module, which
    imports it (``Snapshot.to_arrow`` is a scan).
    """

    @property
    def io(self) -> FileIO: ...
    @property
    def table_root(self) -> str: ...
    @property
    def schema(self) -> pa.Schema: ...
    @property
    def metadata(self) -> Metadata: ...
    @property
    def protocol(self) -> Protocol: ...
    @property
    def partition_columns(self) -> Sequence[str]: ...


def read_data(
    snapshot: ScanSource,
    files: pa.Table,
    columns: Sequence[str] | None = None,
    row_filter: pc.Expression | None = None,
    *,
    max_workers: int | None = None,
    row_tracking: bool = False,
    row_filter_columns: Sequence[str] | None = None,
) -> pa.Table:
    """The rows of ``files`` (live file actions of ``snapshot``) as one Arrow table.

    ``row_tracking``: on a table with row tracking enabled, two more columns follow,
    :data:`~.row_tracking.ROW_ID` and :data:`~.row_tracking.ROW_COMMIT_VERSION`, each
    row's stable row ID and commit version, for a rewrite that copies rows and must
    keep them (:func:`row_tracking_values`); ignored on other tables.

    ``columns`` selects top-level columns by logical name (output keeps the table's
    column order); ``row_filter`` is an Arrow expression over logical names, applied
    after deletion vectors; ``row_filter_columns``, the top-level logical columns it
    references when the caller knows them (a bound predicate's ``columns``), spares
    binding the expression to an empty table to find out whether it needs more columns
    than ``columns`` (for a filter of thousands of terms, a noticeable part of a second).
    ``files`` is normally in ``FILE_ACTIONS_SCHEMA`` layout
    (URI-encoded paths, ``partition_values`` as a map keyed by physical names); the
    user-facing layout of ``Snapshot.files()`` (decoded paths, typed partition struct)
    is accepted too.
    """
    table_schema: pa.Schema = snapshot.schema
    output_schema = _project(table_schema, columns)
    read_schema = output_schema
    if row_filter is not None and not _filter_fits(row_filter, row_filter_columns, output_schema):
        # The filter needs columns the caller did not ask for: read them, drop them after.
        if not _filter_fits(row_filter, row_filter_columns, table_schema):
            raise InvalidFilterError(str(row_filter), "it references columns that are not in the table")
        read_schema = table_schema
    if row_tracking and materialized_columns(snapshot.metadata) is not None:
        if row_filter is not None:
            raise ValueError("row_tracking reads whole files: filter the rows afterwards")
        parts = [
            _with_columns(
                read_data(snapshot, files.slice(i, 1), columns, max_workers=max_workers),
                row_tracking_values(snapshot, files.slice(i, 1)),
            )
            for i in range(files.num_rows)
        ]
        if parts:
            return pa.concat_tables(parts)
        return _with_columns(empty_table(output_schema), row_tracking_values(snapshot, files, np.empty(0, np.int64)))
    if files.num_rows == 0:
        return empty_table(output_schema)

    mode = column_mapping_mode(snapshot.metadata, snapshot.protocol)
    partition_names = set(snapshot.partition_columns)
    partitions = _partition_values(files, snapshot)
    paths = _absolute_paths(files, snapshot.table_root)
    workers = max(1, min(files.num_rows, max_workers or DEFAULT_MAX_WORKERS))
    deleted_rows = _deleted_rows(snapshot, files, workers)
    plan = _FilePlan(
        io=snapshot.io,
        table_root=snapshot.table_root,
        read_schema=read_schema,
        output_names=output_schema.names,
        partition_names=partition_names,
        mode=mode,
        row_filter=row_filter,
        layouts=[],
        pre_buffer=not isinstance(snapshot.io, LocalFileIO),
    )
    partition_arrays = {name: partitions.field(name) for name in partition_names if name in read_schema.names}
    # Partition values are taken per run of files below, not per file.
    small_sizes = _small_sizes(files) if not plan.pre_buffer else [None] * len(paths)
    tasks = [_FileTask(path, deleted_rows[i], {}, small_sizes[i]) for i, path in enumerate(paths)]
    # A few (large) files also decode their columns in parallel; many files already keep
    # every core busy one file each.
    column_threads = len(tasks) < (os.cpu_count() or 4)
    if workers == 1:
        stored = [_read_stored(plan, task, use_threads=column_threads) for task in tasks]
    else:
        # Each thread reads a run of consecutive files, not one file per pool task: a small
        # file's read is a fraction of a millisecond, and a task per file (its future, its
        # wake-up, the GIL handed over for it) costs as much again.
        bounds = np.linspace(0, len(tasks), min(len(tasks), workers * _CHUNKS_PER_WORKER) + 1).astype(np.int64)

        def read_run(run: tuple[int, int]) -> list[_StoredRows]:
            return [_read_stored(plan, task, use_threads=column_threads) for task in tasks[run[0] : run[1]]]

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="delta-scan") as pool:
            runs = pool.map(read_run, [(int(a), int(b)) for a, b in itertools.pairwise(bounds)])
            stored = [rows for run in runs for rows in run]
    if not output_schema.names:
        # concat_tables drops the row count of column-less tables; keep it.
        return _rows_only(sum(s.num_rows for s in stored))
    tables = [
        _runs_in_table_schema(plan, tasks, stored, start, stop, partition_arrays)
        for start, stop in _same_layout_runs(stored)
    ]
    return pa.concat_tables(tables) if tables else empty_table(output_schema)


def _small_sizes(files: pa.Table) -> list[int | None]:
    """Per file, its logged size when at most :data:`_SMALL_FILE_BYTES` (read whole), else None."""
    if "size" not in files.column_names:
        return [None] * files.num_rows
    # The tasks are Python objects anyway; comparing against Python ints in pyarrow compute
    # would convert them, and the first conversion of a Python object imports pandas.
    return [s if s is not None and 0 <= s <= _SMALL_FILE_BYTES else None for s in files.column("size").to_pylist()]


def _rows_only(num_rows: int) -> pa.Table:
    """A table with no columns and ``num_rows`` rows (e.g. for ``count(*)``)."""
    return pa.table({"rows": pa.nulls(num_rows)}).select([])


# ------------------------------------------------------------------------------- planning


# The scan's private records are named tuples and plain slotted classes, not dataclasses:
# a frozen dataclass costs over a millisecond to create at import (it compiles six methods),
# a named tuple a quarter of that, and nothing here compares, prints or copies them.
class _FilePlan(NamedTuple):
    """What every file read of one scan shares."""

    io: FileIO
    table_root: str
    read_schema: pa.Schema
    output_names: list[str]
    partition_names: set[str]
    mode: str
    row_filter: pc.Expression | None
    # File layouts met so far (see _file_layout), shared by the scan's threads: pass a new list.
    layouts: list[_FileLayout]
    # Arrow's pre-buffering coalesces a file's column reads into few requests, which pays on
    # object stores; on a local disk it only hands each small read to an I/O thread and waits.
    pre_buffer: bool = True


class _FileTask:
    __slots__ = ("deleted_rows", "partition_values", "path", "small_size")

    def __init__(
        self,
        path: str,
        deleted_rows: np.ndarray | None,
        partition_values: dict[str, pa.Scalar],
        small_size: int | None = None,
    ) -> None:
        self.path = path  # absolute, FileIO form
        self.deleted_rows = deleted_rows  # sorted row indexes the file's deletion vector removes
        self.partition_values = partition_values
        # The file's size as the log records it, when it is small enough to read whole (a hint:
        # see FileIO.read_small_file); None: open it for reads of its footer and column chunks.
        self.small_size = small_size


def _project(schema: pa.Schema, columns: Sequence[str] | None) -> pa.Schema:
    if columns is None:
        return schema
    if isinstance(columns, str):
        columns = [columns]
    wanted = set(columns)
    unknown = [c for c in columns if schema.get_field_index(c) < 0]
    if unknown:
        raise SchemaMismatchError(
            f"unknown column(s) {', '.join(map(repr, unknown))}; the table's columns are {', '.join(schema.names)}"
        )
    return pa.schema([f for f in schema if f.name in wanted], metadata=schema.metadata)


def _filter_rows(table: pa.Table, expression: pc.Expression) -> pa.Table:
    """The rows of ``table`` where ``expression`` is true (``Table.filter(expression)`` would
    import pyarrow.dataset, and with it pandas). Only called with a filter, whose parsing
    has loaded the expressions package already."""
    from airflow_delta.engine.expressions.arrow_values import evaluate

    return table.filter(evaluate(table, expression))


def _filter_fits(expression: pc.Expression, columns: Sequence[str] | None, schema: pa.Schema) -> bool:
    """Whether ``expression`` (referencing ``columns``, if known) can be evaluated on rows of ``schema``."""
    if columns is None:
        return _binds(expression, schema)
    return all(schema.get_field_index(column) >= 0 for column in columns)


def _binds(expression: pc.Expression, schema: pa.Schema) -> bool:
    try:
        _filter_rows(empty_table(schema), expression)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, KeyError):
        return False
    return True


def _partition_values(files: pa.Table, snapshot: ScanSource) -> pa.StructArray:
    pschema = partition_schema(snapshot.metadata)
    if not len(pschema):
        return pa.StructArray.from_buffers(pa.struct([]), files.num_rows, [None])
    column = files.column("partition_values")
    if pa.types.is_struct(column.type):  # already typed (Snapshot.files() layout)
        struct = combined(column)
        return pa.StructArray.from_arrays(
            [struct.field(f.name).cast(f.type) for f in pschema], fields=list(pschema)
        )
    return parse_partition_values(column, snapshot.metadata, snapshot.protocol)


def _absolute_paths(files: pa.Table, table_root: str) -> list[str]:
    encoded = pa.types.is_map(files.schema.field("partition_values").type) if "partition_values" in files.column_names else True
    paths = files.column("path").to_pylist()
    if not encoded:
        # Snapshot.files() decodes paths; resolve_in_table expects them as in the log.
        paths = [encode_log_path(p) if "://" not in p else p for p in paths]
    # resolve_in_table's rule, with cheap tests per path first (a compaction reads thousands).
    return check_log_paths(table_root, paths, "a data file the log references")


def absolute_data_paths(files: pa.Table, table_root: str) -> list[str]:
    """The storage paths of ``files`` (file actions), each checked to lie below ``table_root``."""
    return _absolute_paths(files, table_root)


def partition_values_of(files: pa.Table, snapshot: ScanSource) -> pa.StructArray:
    """The typed partition values of ``files`` (file actions), one struct per file."""
    return _partition_values(files, snapshot)


def deleted_rows_of_files(snapshot: ScanSource, files: pa.Table, workers: int) -> list[np.ndarray | None]:
    """Per file of ``files``, the sorted row indexes its deletion vector removes (None without a DV)."""
    return _deleted_rows(snapshot, files, workers)


def row_group_sizes(snapshot: ScanSource, file: pa.Table) -> np.ndarray:
    """Compressed bytes of each row group of one data file (a one-row table of file actions), from its footer."""
    path = _absolute_paths(file, snapshot.table_root)[0]
    try:
        with snapshot.io.open_input_file(path) as source:
            metadata = pq.ParquetFile(source).metadata
    except FileNotFoundError as exc:
        raise DataFileNotFoundError(f"data file {path} referenced by the log does not exist") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptDataFileError(path, str(exc)) from exc
    sizes = np.zeros(metadata.num_row_groups, np.int64)
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        sizes[g] = sum(group.column(c).total_compressed_size for c in range(group.num_columns))
    return sizes


def _with_columns(data: pa.Table, extra: pa.Table) -> pa.Table:
    for name in extra.column_names:
        data = data.append_column(extra.schema.field(name), extra.column(name))
    return data


def row_tracking_values(source: ScanSource, file: pa.Table, positions: np.ndarray | None = None) -> pa.Table:
    """Stable row IDs and row commit versions of rows of one data file (a one-row table of file actions).

    A table of :data:`~.row_tracking.ROW_ID` and :data:`~.row_tracking.ROW_COMMIT_VERSION`
    (int64), one row per position of ``positions`` (physical row indexes), or per live
    row (deletion vector applied) in file order when None. The file's materialized
    columns win where they hold a value; otherwise the ID is ``baseRowId`` plus the
    position and the version ``defaultRowCommitVersion`` (PROTOCOL.md, reader
    requirements of row tracking). The table must have row tracking enabled.
    """
    names = materialized_columns(source.metadata)
    if names is None:
        raise ValueError("the table does not have row tracking enabled (delta.enableRowTracking)")
    schema = pa.schema([pa.field(ROW_ID, pa.int64()), pa.field(ROW_COMMIT_VERSION, pa.int64())])
    if file.num_rows == 0:
        return schema.empty_table()
    path = _absolute_paths(file, source.table_root)[0]
    try:
        with source.io.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            present = [n for n in (names.row_id, names.row_commit_version) if n in parquet.schema_arrow.names]
            stored = parquet.read(columns=present, use_threads=False) if present else None
            num_rows = parquet.metadata.num_rows
    except FileNotFoundError as exc:
        raise DataFileNotFoundError(f"data file {path} referenced by the log does not exist") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptDataFileError(path, str(exc)) from exc
    if positions is None:
        positions = np.arange(num_rows, dtype=np.int64)
        deleted = deleted_rows_of_file(source, file)
        if deleted is not None and deleted.size:
            positions = positions[~np.isin(positions, deleted)]
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size and int(positions.max()) >= num_rows:
        raise CorruptDataFileError(path, f"row {int(positions.max())} asked for, the file has {num_rows} rows")

    def materialized(name: str) -> pa.Array | None:
        if stored is None or name not in stored.column_names:
            return None
        return combined(stored.column(name)).take(int64_array(positions))

    base = file.column("base_row_id")[0].as_py() if "base_row_id" in file.column_names else None
    version = file.column("default_row_commit_version")[0].as_py() if "default_row_commit_version" in file.column_names else None
    return pa.Table.from_arrays(
        [
            stable_values(base, positions, materialized(names.row_id), per_row=True),
            stable_values(version, positions, materialized(names.row_commit_version), per_row=False),
        ],
        schema=schema,
    )


def deleted_rows_of_file(snapshot: ScanSource, file: pa.Table) -> np.ndarray | None:
    """The sorted physical row indexes that the deletion vector of one file (a one-row table) removes; None without one."""
    return _deleted_rows(snapshot, file, workers=1)[0]


def _deleted_rows(snapshot: ScanSource, files: pa.Table, workers: int) -> list[np.ndarray | None]:
    """Per file, the sorted row indexes its deletion vector removes (None without a DV).

    DVs are grouped by the file that stores them and each group goes through
    :func:`read_deletion_vectors`, which opens a DV file shared by many data files (as
    Spark writes them) only once; distinct DV files are read in parallel.
    """
    none: list[np.ndarray | None] = [None] * files.num_rows
    if "deletion_vector" not in files.column_names:
        return none
    column = files.column("deletion_vector")
    if column.null_count == len(column):
        return none
    # Loaded once a file has a DV, not with the module: a table without DVs (an OPTIMIZE of
    # one, every read of one) never needs the DV file code (random, zlib, Z85, pyroaring's bitmaps).
    from airflow_delta.engine.model.deletion_vector_files import dv_descriptor_from_struct, read_deletion_vectors

    # Only rows that have a DV become Python objects (files with DVs are the minority).
    groups: dict[tuple[str, str], list[tuple[int, DeletionVectorDescriptor]]] = {}
    valid = mask_to_numpy(pc.is_valid(column))
    for i in np.flatnonzero(valid):
        row = column[int(i)].as_py()
        if row and row.get("storageType"):
            dv = dv_descriptor_from_struct(row)
            # Inline DVs need no I/O; keep them together in one group.
            key = ("i", "") if dv.storage_type == "i" else (dv.storage_type, dv.path_or_inline_dv)
            groups.setdefault(key, []).append((int(i), dv))

    def read_group(members: list[tuple[int, DeletionVectorDescriptor]]) -> list[tuple[int, np.ndarray]]:
        bitmaps = read_deletion_vectors(snapshot.io, snapshot.table_root, [dv for _, dv in members])
        return [(i, np.asarray(b.to_numpy(), dtype=np.uint64)) for (i, _), b in zip(members, bitmaps, strict=True) if b is not None]

    out = none
    if len(groups) > 1 and workers > 1:
        with ThreadPoolExecutor(max_workers=min(workers, len(groups)), thread_name_prefix="delta-dv") as pool:
            results = list(pool.map(read_group, groups.values()))
    else:
        results = [read_group(members) for members in groups.values()]
    for result in results:
        for i, rows in result:
            out[i] = rows
    return out


# ------------------------------------------------------------------------------ one file


class _StoredRows:
    """The live rows of one file as the file stores them (deletion vector applied), and its layout."""

    __slots__ = ("layout", "num_rows", "raw")

    def __init__(self, raw: pa.Table, num_rows: int, layout: _FileLayout) -> None:
        self.raw = raw  # the file's columns that hold table columns, under the file's own names and types
        self.num_rows = num_rows
        self.layout = layout


def _file_error(path: str, exc: Exception) -> DeltaError:
    """How a failure to read or conform the file at ``path`` is reported."""
    if isinstance(exc, FileNotFoundError):
        return DataFileNotFoundError(
            f"data file {path} referenced by the log does not exist; it may have been "
            "removed by VACUUM or deleted outside Delta"
        )
    return CorruptDataFileError(path, str(exc))


_READ_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError)


def _read_stored(plan: _FilePlan, task: _FileTask, use_threads: bool) -> _StoredRows:
    try:
        return _read_stored_unchecked(plan, task, use_threads)
    except DeltaError:
        raise
    except _READ_ERRORS as exc:
        raise _file_error(task.path, exc) from exc


class _FileLayout(NamedTuple):
    """Where the table's columns are in files stored with one schema, worked out once per schema."""

    file_schema: pa.Schema
    num_leaves: int  # parquet leaf columns of the file
    matches: dict[str, int | None]
    resolver: _Resolver
    leaves: list[int] | None  # parquet leaf columns to read; None: every column
    names: list[str] | None  # when the leaves cannot be told: the fields to keep of a whole read
    # What the Arrow schema of a file is derived from (with the scan's reader options): its
    # parquet schema (names, types, repetition, field ids) and its key-value metadata (the
    # stored Arrow schema among it). Files equal in both have this layout.
    parquet_schema: pq.ParquetSchema
    key_value_metadata: dict[bytes, bytes] | None

    @property
    def whole(self) -> bool:
        """Whether files of this layout are read whole (every column)."""
        return self.leaves is None and self.names is None


def _file_layout(plan: _FilePlan, path: str, parquet: ParquetReader) -> _FileLayout:
    """The layout of the file ``parquet`` has open (found among those ``plan`` has seen, usually one).

    A known layout is recognised by the file's parquet schema and key-value metadata, without
    converting them to an Arrow schema per file (a compaction opens thousands of files stored alike).
    """
    metadata = parquet.metadata
    parquet_schema = metadata.schema
    key_value_metadata = metadata.metadata
    for known in plan.layouts:
        if known.key_value_metadata == key_value_metadata and known.parquet_schema.equals(parquet_schema):
            return known
    file_schema = parquet.schema_arrow
    num_leaves = metadata.num_columns
    data_fields = [f for f in plan.read_schema if f.name not in plan.partition_names]
    # Without data columns to find (only partition columns asked for) nothing needs resolving.
    resolver = _resolver(plan.mode if data_fields else "none", path, file_schema)
    matches = {f.name: resolver(list(file_schema), f) for f in data_fields}
    to_read = sorted({i for i in matches.values() if i is not None})
    # Leaves are numbered depth-first: a top-level field's leaves follow those of the fields before it.
    first_leaf = np.concatenate([[0], np.cumsum([_leaf_count(f.type) for f in file_schema])]).astype(np.int64)
    leaves: list[int] | None = None
    names: list[str] | None = None
    if int(first_leaf[-1]) != num_leaves:
        names = [file_schema.field(i).name for i in to_read]  # a numbering we do not follow: select by name
    elif len(to_read) < len(file_schema):
        leaves = [leaf for i in to_read for leaf in range(int(first_leaf[i]), int(first_leaf[i + 1]))]
    layout = _FileLayout(file_schema, num_leaves, matches, resolver, leaves, names, parquet_schema, key_value_metadata)
    if len(plan.layouts) < _KEPT_LAYOUTS:
        plan.layouts.append(layout)  # two threads racing here at most add it twice
    return layout


def _read_stored_unchecked(plan: _FilePlan, task: _FileTask, use_threads: bool) -> _StoredRows:
    whole = plan.io.read_small_file(task.path, task.small_size) if task.small_size is not None else None
    with (plan.io.open_input_file(task.path) if whole is None else pa.BufferReader(whole)) as source:
        # The reader pq.ParquetFile wraps, without its per-file Python set-up.
        parquet = ParquetReader()
        parquet.open(source, coerce_int96_timestamp_unit="us", pre_buffer=plan.pre_buffer, arrow_extensions_enabled=True)
        metadata = parquet.metadata
        num_rows = metadata.num_rows
        raw: pa.Table | None = None
        layout: _FileLayout | None = None
        num_leaves = metadata.num_columns
        candidates = [known for known in plan.layouts if known.whole and known.num_leaves == num_leaves]
        if candidates:
            # Files like those met so far are read whole: read this one, then recognise its layout by the
            # Arrow schema it came out with (field metadata, so field ids, included; a layout is worked
            # out from that schema and the leaf count alone). Recognising it by the parquet schema first
            # would take FileMetaData.schema, which pyarrow keeps in a reference cycle: one per file, left
            # to the garbage collector, which then runs every few hundred files holding the GIL.
            raw = parquet.read_all(use_threads=use_threads)
            schema = raw.schema
            layout = next((k for k in candidates if k.file_schema.equals(schema, check_metadata=True)), None)
        if layout is None:
            layout = _file_layout(plan, task.path, parquet)
            if layout.names is not None:
                raw = (raw if raw is not None else parquet.read_all(use_threads=use_threads)).select(layout.names)
            elif raw is None or not layout.whole:
                raw = parquet.read_all(column_indices=layout.leaves, use_threads=use_threads)

    if task.deleted_rows is not None and task.deleted_rows.size:
        raw = raw.filter(_keep_mask(task.path, task.deleted_rows, num_rows))
        num_rows = raw.num_rows
    return _StoredRows(raw, num_rows, layout)


def _same_layout_runs(stored: Sequence[_StoredRows]) -> list[tuple[int, int]]:
    """``[start, stop)`` runs of consecutive files that store their columns alike (equal schemas, field
    metadata included): each run is conformed to the table's schema in one pass, not file by file."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(stored)):
        here, first = stored[i].layout, stored[start].layout
        if here is not first and not here.file_schema.equals(first.file_schema, check_metadata=True):
            runs.append((start, i))
            start = i
    if stored:
        runs.append((start, len(stored)))
    return runs


def _runs_in_table_schema(
    plan: _FilePlan,
    tasks: Sequence[_FileTask],
    stored: Sequence[_StoredRows],
    start: int,
    stop: int,
    partition_arrays: dict[str, pa.Array],
) -> pa.Table:
    """The rows of files ``start:stop`` (one layout) in the table's schema; partition values from the log, per row."""
    first = stored[start].layout
    members = stored[start:stop]
    raw = members[0].raw if len(members) == 1 else pa.concat_tables([m.raw for m in members])
    counts = np.fromiter((m.num_rows for m in members), dtype=np.int64, count=len(members))
    num_rows = int(counts.sum())
    partition_columns: dict[str, pa.Array] = {}
    if partition_arrays:
        rows_file = int64_array(np.repeat(np.arange(start, stop, dtype=np.int64), counts))
        partition_columns = {name: values.take(rows_file) for name, values in partition_arrays.items()}
    try:
        return _conform_rows(plan, raw, num_rows, first.file_schema, first.matches, first.resolver, partition_columns)
    except DeltaError:
        raise
    except _READ_ERRORS as exc:
        raise _file_error(tasks[start].path, exc) from exc


def _in_table_schema(
    plan: _FilePlan,
    task: _FileTask,
    raw: pa.Table,
    num_rows: int,
    file_schema: pa.Schema,
    matches: dict[str, int | None],
    resolver: _Resolver,
) -> pa.Table:
    """``raw`` (``num_rows`` rows, columns as the file stores them) as rows of the table: partition constants,
    types, row filter."""
    partition_columns: dict[str, pa.Array] = {}
    for name, value in task.partition_values.items():
        if value is not None and value.is_valid:
            partition_columns[name] = pa.repeat(value, num_rows)
    return _conform_rows(plan, raw, num_rows, file_schema, matches, resolver, partition_columns)


def _conform_rows(
    plan: _FilePlan,
    raw: pa.Table,
    num_rows: int,
    file_schema: pa.Schema,
    matches: dict[str, int | None],
    resolver: _Resolver,
    partition_columns: dict[str, pa.Array],
) -> pa.Table:
    """``raw`` (``num_rows`` rows stored alike) in the table's schema; ``partition_columns``: each partition
    column's value per row (a column not given is null)."""
    arrays: list[pa.ChunkedArray | pa.Array] = []
    for target in plan.read_schema:
        if target.name in plan.partition_names:
            column = partition_columns.get(target.name)
            arrays.append(pa.nulls(num_rows, target.type) if column is None else column.cast(target.type))
            continue
        index = matches[target.name]
        if index is None:
            arrays.append(pa.nulls(num_rows, target.type))
            continue
        source_column = raw.column(file_schema.field(index).name)
        arrays.append(_conform_chunked(source_column, target, resolver))
    # With no columns asked for, still keep one (empty) row per surviving row.
    table = pa.Table.from_arrays(arrays, schema=plan.read_schema) if arrays else _rows_only(num_rows)
    if plan.row_filter is not None:
        table = _filter_rows(table, plan.row_filter)
    if table.schema.names != plan.output_names:
        table = table.select(plan.output_names)
    return table


def _keep_mask(path: str, deleted: np.ndarray, num_rows: int) -> pa.Array:
    if int(deleted[-1]) >= num_rows:
        raise CorruptDataFileError(
            path, f"its deletion vector deletes row {int(deleted[-1])} but the file has only {num_rows} rows"
        )
    keep = np.ones(num_rows, dtype=bool)
    keep[deleted.astype(np.int64)] = False
    return bool_array(keep)


# ------------------------------------------------------------------- column resolution

# Finds, among a file's fields at one nesting level, the one holding a table field.
_Resolver = Callable[[list[pa.Field], pa.Field], "int | None"]


def _resolver(mode: str, path: str, file_schema: pa.Schema) -> _Resolver:
    if mode == "id":
        if not any(_has_field_ids(f) for f in file_schema):
            raise CorruptDataFileError(
                path,
                "the table uses column mapping mode 'id' but the file has no parquet field ids; "
                "columns cannot be resolved (rewrite the file, or switch the table to mode 'name')",
            )
        return _match_by_id
    if mode == "name":
        return _match_by_physical_name
    return _match_by_name


def _has_field_ids(f: pa.Field) -> bool:
    return bool(f.metadata) and _FIELD_ID_BYTES in f.metadata


def _match_by_name(candidates: list[pa.Field], target: pa.Field) -> int | None:
    for i, f in enumerate(candidates):
        if f.name == target.name:
            return i
    # Spark resolves parquet columns case-insensitively; follow it when unambiguous.
    lowered = target.name.lower()
    hits = [i for i, f in enumerate(candidates) if f.name.lower() == lowered]
    return hits[0] if len(hits) == 1 else None


def _physical_name(target: pa.Field) -> str:
    meta = target.metadata
    if meta and _PHYSICAL_NAME_BYTES in meta:
        return meta[_PHYSICAL_NAME_BYTES].decode()
    return target.name


def _match_by_physical_name(candidates: list[pa.Field], target: pa.Field) -> int | None:
    name = _physical_name(target)
    for i, f in enumerate(candidates):
        if f.name == name:
            return i
    return None


def _match_by_id(candidates: list[pa.Field], target: pa.Field) -> int | None:
    meta = target.metadata
    if not meta or _DELTA_FIELD_ID_BYTES not in meta:
        return _match_by_physical_name(candidates, target)
    wanted = meta[_DELTA_FIELD_ID_BYTES].decode().strip()
    for i, f in enumerate(candidates):
        if f.metadata and f.metadata.get(_FIELD_ID_BYTES, b"").decode().strip() == wanted:
            return i
    return None


# ----------------------------------------------------------------------- type conform


def _conform_chunked(column: pa.ChunkedArray, target: pa.Field, resolver: _Resolver) -> pa.ChunkedArray:
    if _same(column.type, target.type, resolver):
        return column
    chunks = [_conform(chunk, target.type, resolver) for chunk in column.chunks]
    return pa.chunked_array(chunks, type=target.type)


def _conform(array: pa.Array, target: pa.DataType, resolver: _Resolver) -> pa.Array:
    """``array`` (as stored in a file) in the table's ``target`` type, nested fields resolved."""
    source = array.type
    if _same(source, target, resolver):
        return array
    if pa.types.is_dictionary(source):
        return _conform(array.dictionary_decode(), target, resolver)
    if pa.types.is_null(source):
        return pa.nulls(len(array), target)
    mask = array.is_null() if array.null_count else None
    if target == VARIANT_TYPE and pa.types.is_struct(source):
        return _conform_variant(array, mask)
    if pa.types.is_struct(target):
        if not pa.types.is_struct(source):
            raise pa.ArrowTypeError(f"expected a struct for {target}, the file has {source}")
        candidates = [source.field(i) for i in range(source.num_fields)]
        children = []
        for j in range(target.num_fields):
            child_target = target.field(j)
            index = resolver(candidates, child_target)
            if index is None:
                children.append(pa.nulls(len(array), child_target.type))
            else:
                children.append(_conform(array.field(index), child_target.type, resolver))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_list(target) and _is_list_like(source):
        offsets = array.offsets
        if offsets.type != pa.int32():
            offsets = offsets.cast(pa.int32())
        values = _conform(array.values, target.value_type, resolver)
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=mask)
    if pa.types.is_map(target) and pa.types.is_map(source):
        keys = _conform(array.keys, target.key_type, resolver)
        items = _conform(array.items, target.item_type, resolver)
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target, mask=mask)
    if pa.types.is_timestamp(target) and pa.types.is_timestamp(source):
        # Finer units (nanoseconds) are truncated to the table's microseconds; a change of
        # time zone label keeps the instant (INT96 and TIMESTAMP(isAdjustedToUTC) are UTC).
        return array.cast(target, safe=False)
    return array.cast(target)


def _conform_variant(array: pa.StructArray, mask: pa.Array | None) -> pa.StructArray:
    """An unshredded variant as stored (``value`` and ``metadata`` binaries, Spark writes
    ``value`` first) in the table's field order. The two names are the protocol's own,
    never column-mapped."""
    names = [array.type.field(i).name for i in range(array.type.num_fields)]
    if "typed_value" in names:
        # The protocol gate only lets tables without variantShredding through, and such
        # tables must not hold shredded files; reading just ``value`` would lose data.
        raise pa.ArrowTypeError(
            "a variant column is stored shredded (it has a typed_value field) but the table does not "
            "support variantShredding; shredded variants cannot be read without reconstruction"
        )
    missing = [f.name for f in VARIANT_TYPE if f.name not in names]
    if missing:
        raise pa.ArrowTypeError(
            f"a variant column lacks its {' and '.join(missing)} field; unshredded variants must store both "
            "value and metadata binaries"
        )
    children = [array.field(names.index(f.name)).cast(f.type) for f in VARIANT_TYPE]
    return pa.StructArray.from_arrays(children, fields=list(VARIANT_TYPE), mask=mask)


def _same(source: pa.DataType, target: pa.DataType, resolver: _Resolver) -> bool:
    """Whether a file's column can be used as is. Under column mapping, equal nested
    names are not enough: physical names may be a permutation of the logical ones."""
    if source != target:
        return False
    return resolver is _match_by_name or not _has_struct(target)


def _has_struct(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return True
    if _is_list_like(t):
        return _has_struct(t.value_type)
    if pa.types.is_map(t):
        return _has_struct(t.key_type) or _has_struct(t.item_type)
    return False


def _is_list_like(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


# ------------------------------------------------------------ row groups with positions


@dataclass(frozen=True, slots=True)
class PositionedRows:
    """Rows of some row groups of one data file, and how to find their physical positions in it."""

    rows: pa.Table  # the columns asked for, in the table's schema: the row groups read, in file order
    group_starts: np.ndarray  # int64: position in the file of the first row of each row group read
    group_ends: np.ndarray  # int64: cumulative row counts of the row groups read (end of each in ``rows``)
    num_physical_rows: int  # every row the file stores (its footer), deleted ones included

    def positions(self, indexes: np.ndarray) -> np.ndarray:
        """The physical row index (what a deletion vector stores) of each row of ``rows`` at ``indexes``."""
        indexes = np.asarray(indexes, dtype=np.int64)
        group = np.searchsorted(self.group_ends, indexes, side="right")
        first_in_rows = np.concatenate([[0], self.group_ends[:-1]]).astype(np.int64)
        return self.group_starts[group] + (indexes - first_in_rows[group])

    def all_positions(self) -> np.ndarray:
        """The physical row index of every row of ``rows``, in order (:meth:`positions` of all of
        them, without a search per row: each row group's rows are consecutive in the file)."""
        lengths = np.diff(self.group_ends, prepend=0).astype(np.int64)
        shift = self.group_starts - (self.group_ends - lengths)  # file position minus index in ``rows``, per group
        return np.arange(int(self.group_ends[-1]) if len(self.group_ends) else 0, dtype=np.int64) + np.repeat(shift, lengths)


def _unfiltered_plan(snapshot: ScanSource, columns: Sequence[str]) -> _FilePlan:
    """The plan of a one-file read of ``columns`` with no row filter (a positioned read, or its footer)."""
    read_schema = _project(snapshot.schema, columns)
    return _FilePlan(
        io=snapshot.io,
        table_root=snapshot.table_root,
        read_schema=read_schema,
        output_names=read_schema.names,
        partition_names=set(snapshot.partition_columns),
        mode=column_mapping_mode(snapshot.metadata, snapshot.protocol),
        row_filter=None,
        layouts=[],
    )


def read_with_row_positions(
    snapshot: ScanSource,
    file: pa.Table,
    columns: Sequence[str],
    predicate: Predicate | None = None,
    *,
    use_threads: bool = True,
    row_groups: range | None = None,
) -> PositionedRows:
    """The rows of one file (a one-row table of file actions) that ``predicate`` may match, deletion vector ignored.

    ``row_groups`` limits the read to those row groups of the file (by index), so that
    several tasks can share one large file.

    Only the row groups whose parquet statistics do not rule the predicate out are read
    (:func:`~.row_groups.row_groups_may_match`), and only ``columns`` (top-level logical
    names) of them; any row's position in the file follows from the row
    counts of the row groups before it (:meth:`PositionedRows.positions`). The rows are
    not filtered: evaluating the predicate on them is the caller's.
    """
    if file.num_rows != 1:
        raise ValueError(f"expected exactly one file, got {file.num_rows}")
    plan = _unfiltered_plan(snapshot, columns)
    output_schema, partition_names = plan.read_schema, plan.partition_names
    partitions = _partition_values(file, snapshot)
    path = _absolute_paths(file, snapshot.table_root)[0]
    task = _FileTask(
        path,
        None,
        {name: partitions.field(name)[0] for name in partition_names if name in output_schema.names},
    )
    try:
        return _read_with_row_positions(plan, task, predicate, use_threads, row_groups)
    except DeltaError:
        raise
    except FileNotFoundError as exc:
        raise DataFileNotFoundError(
            f"data file {path} referenced by the log does not exist; it may have been "
            "removed by VACUUM or deleted outside Delta"
        ) from exc
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError) as exc:
        raise CorruptDataFileError(path, str(exc)) from exc


def _read_with_row_positions(
    plan: _FilePlan, task: _FileTask, predicate: Predicate | None, use_threads: bool, row_groups: range | None = None
) -> PositionedRows:
    with plan.io.open_input_file(task.path) as source:
        parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        metadata = parquet.metadata
        file_schema = parquet.schema_arrow
        matches, resolver, groups = _groups_to_read(plan, task.path, metadata, file_schema, predicate, row_groups)
        group_rows = np.array([metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)], np.int64)
        to_read = sorted({i for i in matches.values() if i is not None})
        if groups:
            raw = parquet.read_row_groups(
                groups, columns=[file_schema.field(i).name for i in to_read], use_threads=use_threads
            )
        else:
            raw = pa.schema([file_schema.field(i) for i in to_read]).empty_table()
    file_starts = np.concatenate([[0], np.cumsum(group_rows)[:-1]]).astype(np.int64)
    read_rows = group_rows[groups] if groups else np.empty(0, np.int64)
    if int(read_rows.sum()) != raw.num_rows:
        raise CorruptDataFileError(
            task.path, f"its row groups hold {raw.num_rows} rows, but their footer entries say {int(read_rows.sum())}"
        )
    rows = _in_table_schema(plan, task, raw, raw.num_rows, file_schema, matches, resolver)
    return PositionedRows(rows, file_starts[groups], np.cumsum(read_rows).astype(np.int64), int(metadata.num_rows))


def _groups_to_read(
    plan: _FilePlan,
    path: str,
    metadata: pq.FileMetaData,
    file_schema: pa.Schema,
    predicate: Predicate | None,
    row_groups: range | None,
) -> tuple[dict[str, int | None], _Resolver, list[int]]:
    """Where each data column of ``plan.read_schema`` is in one file (index among its top-level
    fields, None if absent), the resolver that found them, and the row groups to read: those
    in ``row_groups`` whose statistics do not rule ``predicate`` out."""
    data_fields = [f for f in plan.read_schema if f.name not in plan.partition_names]
    resolver = _resolver(plan.mode if data_fields else "none", path, file_schema)
    matches = {f.name: resolver(list(file_schema), f) for f in data_fields}
    if row_groups is not None and (row_groups.start < 0 or row_groups.stop > metadata.num_row_groups):
        raise CorruptDataFileError(
            path, f"it has {metadata.num_row_groups} row groups, fewer than the planned {row_groups.stop}"
        )
    if predicate is None:
        groups = list(range(metadata.num_row_groups))
    else:
        # Imported here: only a read with a predicate prunes row groups by their statistics
        # (an OPTIMIZE or a whole-table read never does).
        from airflow_delta.engine.read.row_groups import row_groups_may_match

        groups = row_groups_may_match(predicate, metadata, _leaf_columns(plan.read_schema, file_schema, metadata, matches))
    if row_groups is not None:
        groups = [g for g in groups if g in row_groups]
    return matches, resolver, groups


def file_predicate_read_bytes(snapshot: ScanSource, file: pa.Table, predicate: Predicate) -> int:
    """Compressed bytes that finding ``predicate``'s rows in one file (a one-row table of file actions) reads.

    That is what :func:`read_with_row_positions` with the predicate's columns reads: the
    column chunks of those columns (partition columns come from the log and cost
    nothing) in the row groups whose statistics do not rule the predicate out; only the
    footer is read here.
    """
    if file.num_rows != 1:
        raise ValueError(f"expected exactly one file, got {file.num_rows}")
    plan = _unfiltered_plan(snapshot, list(predicate.columns))
    path = _absolute_paths(file, snapshot.table_root)[0]
    try:
        with snapshot.io.open_input_file(path) as source:
            parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
            metadata, file_schema = parquet.metadata, parquet.schema_arrow
    except FileNotFoundError as exc:
        raise DataFileNotFoundError(f"data file {path} referenced by the log does not exist") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptDataFileError(path, str(exc)) from exc
    matches, _, groups = _groups_to_read(plan, path, metadata, file_schema, predicate, None)
    # Leaves are numbered depth-first: a top-level field's leaves follow those of the fields before it.
    first_leaf = np.concatenate([[0], np.cumsum([_leaf_count(f.type) for f in file_schema])]).astype(np.int64)
    leaves = [
        leaf
        for index in sorted({i for i in matches.values() if i is not None})
        for leaf in range(int(first_leaf[index]), int(first_leaf[index + 1]))
    ]
    return sum(metadata.row_group(g).column(leaf).total_compressed_size for g in groups for leaf in leaves)


def _leaf_columns(
    read_schema: pa.Schema, file_schema: pa.Schema, metadata: pq.FileMetaData, matches: dict[str, int | None]
) -> dict[str, RowGroupColumn]:
    """The table columns stored as one top-level parquet leaf (not nested), where row-group statistics are.

    Leaves are numbered depth-first, as the file schema lists them: a top-level field's
    first leaf follows every leaf of the fields before it (no matching on dotted paths,
    which a column named ``a.b`` and a struct ``a`` with a field ``b`` would share).
    """
    first_leaf = np.concatenate([[0], np.cumsum([_leaf_count(f.type) for f in file_schema])]).astype(np.int64)
    if int(first_leaf[-1]) != metadata.num_columns:
        return {}  # a layout we do not understand: no statistics, every row group is read
    from airflow_delta.engine.read.row_groups import RowGroupColumn  # with the pruning (_groups_to_read)

    out: dict[str, RowGroupColumn] = {}
    for name, index in matches.items():
        if index is None:
            continue
        stored = file_schema.field(index)
        if _leaf_count(stored.type) != 1 or pa.types.is_nested(stored.type):
            continue
        out[name] = RowGroupColumn(int(first_leaf[index]), stored.type, read_schema.field(name).type)
    return out


def _leaf_count(t: pa.DataType) -> int:
    """How many parquet leaf columns store a field of Arrow type ``t``."""
    if pa.types.is_struct(t):
        return sum(_leaf_count(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaf_count(t.key_type) + _leaf_count(t.item_type)
    if _is_list_like(t) or pa.types.is_fixed_size_list(t):
        return _leaf_count(t.value_type)
    if pa.types.is_dictionary(t):
        return _leaf_count(t.value_type)
    return 1
