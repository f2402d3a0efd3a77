"""Writing data files: Arrow data as parquet files with statistics, and their ``add`` actions.

Writing is two-phase, as the protocol prescribes: data files are written first (each
under a fresh UUID name, never overwritten), then one commit adds them all. A write
that fails removes the files it wrote (:class:`~airflow_delta.engine.storage.written_files.WrittenFiles`):
here when writing fails, in the transaction when the commit does; only a crash leaves
unreferenced files, which readers never see and VACUUM deletes.

* :func:`write_data_files` validates rows (schema, NOT NULL, invariants, CHECK
  constraints), splits them by partition and writes parquet files, returning their
  ``add`` actions for the caller to commit (the append operation, DELETE and UPDATE
  rewrites, the Spark programs).
* :func:`write_change_data_files` writes the change data of a row-level DELETE, UPDATE
  or MERGE on a table with ``delta.enableChangeDataFeed=true``: the table's data columns
  plus ``_change_type``, under ``_change_data/`` in partition directories, and returns
  their ``cdc`` actions.
* :func:`add_file_from_parquet` builds the ``add`` action for a file someone else
  wrote (e.g. a Spark executor), with statistics from its footer.
"""

from __future__ import annotations

import logging
import re
import string
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.errors import (
    DataFileNotFoundError,
    InvalidArgumentError,
    SchemaMismatchError,
)
from airflow_delta.engine.model.actions import AddCDCFile, AddFile, Metadata
from airflow_delta.engine.model.arguments import check_bool, check_instance, check_int, check_str
from airflow_delta.engine.model.arrow_numpy import group_row_indices, string_array
from airflow_delta.engine.model.column_mapping import ColumnMapping
from airflow_delta.engine.model.constraints import (
    Constraint,
    enforce_constraints,
    enforce_not_null,
    table_constraints,
)
from airflow_delta.engine.model.partition_values import serialize_partition_value
from airflow_delta.engine.model.row_tracking import (
    ROW_COMMIT_VERSION,
    ROW_ID,
    MaterializedColumns,
    materialized_columns,
)
from airflow_delta.engine.model.schema import schema_to_arrow
from airflow_delta.engine.model.stats_compute import compute_stats, stats_from_parquet_metadata
from airflow_delta.engine.model.table_features import (
    check_writable,
)
from airflow_delta.engine.read.snapshot import Snapshot
from airflow_delta.engine.storage.fileio import FileIO
from airflow_delta.engine.storage.paths import encode_log_path, resolve_in_table
from airflow_delta.engine.storage.written_files import WrittenFiles

if TYPE_CHECKING:
    from airflow_delta.engine.read.table_context import TableContext

log = logging.getLogger(__name__)

DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
# Change Data Feed (PROTOCOL.md "Change Data Files"): the directory of cdc files, their
# extra column and its values.
CHANGE_DATA_DIR = "_change_data"
CHANGE_TYPE_COLUMN = "_change_type"
CHANGE_TYPES = ("insert", "delete", "update_preimage", "update_postimage")
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

# Spark's ExternalCatalogUtils escape set for partition directory names (on POSIX), plus NUL,
# which no file system accepts in a name.
# What write_data_files(name_token=...) accepts: safe in any file name and any object key.
_NAME_TOKEN = re.compile(r"[A-Za-z0-9-]{1,64}")
_PATH_ESCAPE = frozenset([chr(c) for c in range(0, 0x20)] + list('"#%\'*/:=?\\\x7f{[]^'))
_COMPRESSION_EXTENSIONS: Mapping[str, str] = {
    "snappy": ".snappy",
    "zstd": ".zstd",
    "gzip": ".gz",
    "lz4": ".lz4",
    "lz4_raw": ".lz4raw",
    "brotli": ".br",
    "none": "",
}



# ------------------------------------------------------------------ data conforming


def conform_to_schema(data: pa.Table, target: pa.Schema) -> pa.Table:
    """``data`` cast to the table's logical schema, or :class:`SchemaMismatchError` naming every problem.

    Columns are matched by name (case-insensitively when there is no exact match).
    Allowed: lossless widening (int8 -> ... -> int64, float -> double, wider decimals),
    string/binary layout variants, dictionary-encoded values, timestamps of any unit
    (when no precision is lost) and zone (converted to UTC) into ``timestamp``, naive
    timestamps into ``timestamp_ntz``. Nullable Arrow fields are accepted everywhere;
    actual NULLs in NOT NULL columns or fields raise :class:`ConstraintViolationError`.
    """
    by_lower: dict[str, str] = {}
    for n in data.column_names:
        by_lower.setdefault(n.lower(), n)
    problems: list[str] = []
    columns: list[pa.ChunkedArray] = []
    matched: set[str] = set()
    for target_field in target:
        source_name = target_field.name if target_field.name in data.column_names else by_lower.get(target_field.name.lower())
        if source_name is None:
            problems.append(f"missing column {target_field.name!r} ({target_field.type})")
            continue
        matched.add(source_name)
        column = data.column(source_name)
        problem = _type_problem(column.type, target_field.type, target_field.name)
        if problem:
            problems.append(problem)
            continue
        relaxed = _all_nullable(target_field.type)
        try:
            columns.append(column if column.type == relaxed else column.cast(relaxed, safe=True))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            hint = ""
            if pa.types.is_timestamp(target_field.type) and pa.types.is_timestamp(column.type):
                hint = " (Delta stores microseconds: truncate first, e.g. column.cast(..., safe=False))"
            problems.append(f"column {target_field.name!r} cannot be converted to {target_field.type}: {exc}{hint}")
    extra = [n for n in data.column_names if n not in matched]
    if extra:
        problems.append(f"columns not in the table schema: {', '.join(repr(n) for n in extra)}")
    if problems:
        raise SchemaMismatchError(
            "data does not match the table schema: " + "; ".join(problems)
            + ". Cast or rename the data to the table schema (no schema evolution on append)"
        )
    # Arrow refuses to cast nulls into a nested non-nullable field; cast to an all-nullable
    # type first so that NOT NULL violations are reported as such, then take the table's
    # exact types (same memory layout: a zero-copy view).
    relaxed_table = pa.Table.from_arrays(columns, names=target.names)
    enforce_not_null(relaxed_table, target)
    strict = [_strict_view(c, f.type) for c, f in zip(relaxed_table.columns, target, strict=True)]
    return pa.Table.from_arrays(strict, schema=target)


def _strict_view(column: pa.ChunkedArray, strict: pa.DataType) -> pa.ChunkedArray:
    """``column`` viewed as the table's exact type.

    Arrow refuses the view when a NOT NULL child holds nulls under a NULL parent (a NULL
    variant inside a list, as Spark sends it: a struct whose binaries are null too). The
    rows are valid (``enforce_not_null`` checked them): such hidden nulls are given a zero
    value first, which no reader sees, as the parent is NULL.
    """
    if column.type == strict:
        return column
    try:
        return pa.chunked_array([chunk.view(strict) for chunk in column.chunks], type=strict)
    except pa.ArrowInvalid:
        return pa.chunked_array([_without_hidden_nulls(chunk, strict).view(strict) for chunk in column.chunks], type=strict)


_ZERO_OF = (
    (pa.types.is_binary, b""), (pa.types.is_large_binary, b""), (pa.types.is_string, ""),
    (pa.types.is_large_string, ""), (pa.types.is_integer, 0), (pa.types.is_floating, 0.0), (pa.types.is_boolean, False),
)


def _without_hidden_nulls(array: pa.Array, strict: pa.DataType) -> pa.Array:
    """``array`` with the nulls of NOT NULL children (in ``strict``) replaced by a zero value; parents' nulls kept."""
    import pyarrow.compute as pc  # only this rare repair needs it

    if pa.types.is_struct(array.type) and pa.types.is_struct(strict):
        children = []
        for i in range(array.type.num_fields):
            child = _without_hidden_nulls(array.field(i), strict.field(i).type)
            zero = next((z for test, z in _ZERO_OF if test(child.type)), None)
            if not strict.field(i).nullable and child.null_count and zero is not None:
                child = pc.fill_null(child, pa.scalar(zero, child.type))
            children.append(child)
        fields = [array.type.field(i) for i in range(array.type.num_fields)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=array.is_null() if array.null_count else None)
    if pa.types.is_map(array.type) and pa.types.is_map(strict):
        offsets = array.offsets
        start = offsets[0].as_py()
        length = offsets[-1].as_py() - start
        keys = array.keys.slice(start, length)
        items = _without_hidden_nulls(array.items.slice(start, length), strict.item_type)
        rebased = pc.subtract(offsets, pa.scalar(start, offsets.type))
        item_field = array.type.item_field.with_type(items.type)
        return pa.MapArray.from_arrays(
            rebased, keys, items, type=pa.map_(array.type.key_field, item_field),
            mask=array.is_null() if array.null_count else None,
        )
    if pa.types.is_list(array.type) and pa.types.is_list(strict):
        offsets = array.offsets
        start = offsets[0].as_py()
        values = _without_hidden_nulls(array.values.slice(start, offsets[-1].as_py() - start), strict.value_type)
        rebased = pc.subtract(offsets, pa.scalar(start, offsets.type))
        return pa.ListArray.from_arrays(
            rebased, values, type=pa.list_(array.type.value_field.with_type(values.type)),
            mask=array.is_null() if array.null_count else None,
        )
    return array


def _all_nullable(t: pa.DataType) -> pa.DataType:
    """``t`` with every nested field nullable (map keys excepted, which Arrow requires non-null)."""
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_all_nullable(t.field(i).type)).with_nullable(True) for i in range(t.num_fields)])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = t.value_field.with_type(_all_nullable(t.value_type)).with_nullable(True)
        return pa.large_list(element) if pa.types.is_large_list(t) else pa.list_(element)
    if pa.types.is_map(t):
        key = t.key_field.with_type(_all_nullable(t.key_type))
        item = t.item_field.with_type(_all_nullable(t.item_type)).with_nullable(True)
        return pa.map_(key, item, keys_sorted=t.keys_sorted)
    return t


_INT_WIDTH = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}
_UINT_WIDTH = {pa.uint8(): 8, pa.uint16(): 16, pa.uint32(): 32, pa.uint64(): 64}


def _type_problem(src: pa.DataType, dst: pa.DataType, path: str) -> str | None:
    """Why values of ``src`` cannot be written into a column of ``dst`` losslessly, or None."""
    if pa.types.is_dictionary(src):
        return _type_problem(src.value_type, dst, path)
    if pa.types.is_null(src):
        return None
    if src.equals(dst):
        return None
    mismatch = f"column {path!r} has type {src} but the table has {dst}"
    if dst in _INT_WIDTH:
        if src in _INT_WIDTH and _INT_WIDTH[src] <= _INT_WIDTH[dst]:
            return None
        if src in _UINT_WIDTH and _UINT_WIDTH[src] < _INT_WIDTH[dst]:
            return None
        return mismatch
    if pa.types.is_floating(dst):
        if pa.types.is_floating(src) and src.bit_width <= dst.bit_width:
            return None
        return mismatch
    if pa.types.is_decimal(dst):
        if pa.types.is_decimal(src) and src.scale <= dst.scale and src.precision - src.scale <= dst.precision - dst.scale:
            return None
        return mismatch
    if pa.types.is_string(dst) or pa.types.is_large_string(dst):
        return None if (pa.types.is_string(src) or pa.types.is_large_string(src) or pa.types.is_string_view(src)) else mismatch
    if pa.types.is_binary(dst) or pa.types.is_large_binary(dst):
        ok = (
            pa.types.is_binary(src) or pa.types.is_large_binary(src) or pa.types.is_binary_view(src)
            or pa.types.is_fixed_size_binary(src)
        )
        return None if ok else mismatch
    if pa.types.is_date(dst):
        return None if pa.types.is_date(src) else mismatch
    if pa.types.is_timestamp(dst):
        if not pa.types.is_timestamp(src):
            return mismatch
        if dst.tz is not None and src.tz is None:
            return (
                f"column {path!r} holds timestamps without a time zone ({src}) but the table column is a "
                "timestamp (an instant, UTC); attach the zone (e.g. pc.assume_timezone) or use a timestamp_ntz column"
            )
        if dst.tz is None and src.tz is not None:
            return (
                f"column {path!r} holds zoned timestamps ({src}) but the table column is timestamp_ntz "
                "(no time zone); drop the zone first"
            )
        return None
    if pa.types.is_struct(dst):
        if not pa.types.is_struct(src):
            return mismatch
        src_names = [src.field(i).name for i in range(src.num_fields)]
        problems = []
        for i in range(dst.num_fields):
            f = dst.field(i)
            if f.name not in src_names:
                problems.append(f"missing field {path}.{f.name}")
                continue
            p = _type_problem(src.field(src_names.index(f.name)).type, f.type, f"{path}.{f.name}")
            if p:
                problems.append(p)
        extra = [n for n in src_names if dst.get_field_index(n) < 0]
        if extra:
            problems.append(f"fields not in the table schema: {', '.join(f'{path}.{n}' for n in extra)}")
        return "; ".join(problems) or None
    if pa.types.is_list(dst) or pa.types.is_large_list(dst):
        if not (pa.types.is_list(src) or pa.types.is_large_list(src) or pa.types.is_fixed_size_list(src)
                or pa.types.is_list_view(src)):
            return mismatch
        return _type_problem(src.value_type, dst.value_type, f"{path}.element")
    if pa.types.is_map(dst):
        if not pa.types.is_map(src):
            return mismatch
        return _type_problem(src.key_type, dst.key_type, f"{path}.key") or _type_problem(
            src.item_type, dst.item_type, f"{path}.value"
        )
    return mismatch


# ---------------------------------------------------------------------- data files


class _WriteLayout(NamedTuple):
    """Everything about a table that decides how its data files are laid out.

    A named tuple, not a frozen dataclass: as immutable, a quarter of the cost to create at
    import (a frozen dataclass compiles six methods), and nothing compares or prints it.
    """

    io: FileIO
    root: str
    metadata: Metadata
    logical_schema: pa.Schema  # the table's columns, logical names and types
    partition_columns: tuple[str, ...]
    mapping: ColumnMapping  # logical <-> physical names and field ids (identity without column mapping)
    random_prefix_length: int  # 0: Hive-style partition directories
    compression: str
    target_file_size: int
    tight_bounds: bool  # deletion vectors supported: stats say their bounds are tight, as Delta writes them
    name_token: str | None = None  # in every file name: a job that failed finds its files by it
    change_data: bool = False  # cdc files: under _change_data/, named cdc-*, with _change_type, no statistics
    # Row tracking enabled: copied rows' stable row IDs and commit versions go into these columns.
    materialized: MaterializedColumns | None = None

    @property
    def data_columns(self) -> list[str]:
        return [n for n in self.logical_schema.names if n not in self.partition_columns]


def _layout(
    snapshot: Snapshot | TableContext, target_file_size: int | None, name_token: str | None = None
) -> _WriteLayout:
    metadata = snapshot.metadata
    props = snapshot.properties
    mapping = ColumnMapping.from_metadata(metadata, snapshot.protocol)
    partition_columns = tuple(snapshot.partition_columns)
    if props.randomize_file_prefixes or (mapping.enabled and partition_columns):
        # Under column mapping Delta never names directories after partition columns
        # (they would expose renamable logical names); it uses random prefixes instead.
        prefix_length = props.random_prefix_length
    else:
        prefix_length = 0
    size = target_file_size or props.target_file_size or DEFAULT_TARGET_FILE_SIZE
    return _WriteLayout(
        io=snapshot.io,
        root=snapshot.table_root,
        metadata=metadata,
        logical_schema=snapshot.schema,
        partition_columns=partition_columns,
        mapping=mapping,
        random_prefix_length=prefix_length,
        compression=props.parquet_compression_codec,
        target_file_size=int(size),
        tight_bounds=snapshot.protocol.has_writer_feature("deletionVectors"),
        name_token=name_token,
        materialized=materialized_columns(metadata),
    )


def escape_partition_path(value: str) -> str:
    """Escape a partition column name or value for a directory name, as Spark does (``%XX``)."""
    return "".join(f"%{ord(c):02X}" if c in _PATH_ESCAPE else c for c in value)


def _partition_dir(layout: _WriteLayout, values: Mapping[str, str | None]) -> str:
    if layout.change_data:
        # Delta puts change data in Hive-style directories below _change_data/ even where
        # data files get random prefixes; under column mapping the physical names name them.
        return "/".join(
            [CHANGE_DATA_DIR]
            + [
                f"{escape_partition_path(layout.mapping.physical_name(c))}="
                f"{escape_partition_path(v) if v is not None else HIVE_DEFAULT_PARTITION}"
                for c, v in ((c, values[c]) for c in layout.partition_columns)
            ]
        )
    if layout.random_prefix_length:
        # Imported here: only a table with delta.randomizeFilePrefixes needs it, and secrets
        # loads hmac and hashlib (~2 ms) that no other writer uses.
        import secrets

        alphabet = string.ascii_letters + string.digits
        return "".join(secrets.choice(alphabet) for _ in range(layout.random_prefix_length))
    return "/".join(
        f"{escape_partition_path(c)}={escape_partition_path(v) if v is not None else HIVE_DEFAULT_PARTITION}"
        for c, v in ((c, values[c]) for c in layout.partition_columns)
    )


def _check_source(snapshot: object) -> None:
    """What the writers take: a Snapshot, or a TableContext (Spark executors).

    TableContext is imported only for a value that is not a Snapshot: a writer in the
    driver's process (OPTIMIZE, an append) never needs its module.
    """
    if not isinstance(snapshot, Snapshot):
        from airflow_delta.engine.read.table_context import TableContext

        check_instance("snapshot", snapshot, (Snapshot, TableContext))


def _file_name(index: int, compression: str, token: str | None = None, *, kind: str = "part") -> str:
    unique = f"{token}-{uuid.uuid4()}" if token else str(uuid.uuid4())
    return f"{kind}-{index:05d}-{unique}.c000{_COMPRESSION_EXTENSIONS[compression]}.parquet"


class _PartitionBuffer:
    """The rows of one partition waiting for their file.

    A plain slotted class, not a dataclass (about a millisecond to create at import).
    """

    __slots__ = ("rows", "tables", "values")

    def __init__(self, values: dict[str, str | None]) -> None:
        self.values = values  # logical name -> serialized value
        self.tables: list[pa.Table] = []
        self.rows = 0


class _FileWriter:
    """Buffers validated rows per partition and writes a parquet file whenever one is full."""

    def __init__(self, layout: _WriteLayout, written: WrittenFiles) -> None:
        self.layout = layout
        self.written = written
        self.buffers: dict[tuple[str | None, ...], _PartitionBuffer] = {}
        self.rows_per_file: int | None = None
        self.adds: list[AddFile | AddCDCFile] = []
        self.file_index = 0

    def add(self, data: pa.Table) -> None:
        if data.num_rows == 0:
            return
        if self.rows_per_file is None:
            bytes_per_row = max(1, data.nbytes // data.num_rows)
            self.rows_per_file = max(1, self.layout.target_file_size // bytes_per_row)
        for values, rows in _split_partitions(data, self.layout):
            key = tuple(values[c] for c in self.layout.partition_columns)
            buffer = self.buffers.setdefault(key, _PartitionBuffer(values))
            buffer.tables.append(rows)
            buffer.rows += rows.num_rows
            if buffer.rows >= self.rows_per_file:
                self._flush(buffer, final=False)

    def finish(self) -> list[AddFile | AddCDCFile]:
        for buffer in self.buffers.values():
            self._flush(buffer, final=True)
        self.buffers.clear()
        return self.adds

    def _flush(self, buffer: _PartitionBuffer, *, final: bool) -> None:
        assert self.rows_per_file is not None
        if not buffer.tables:
            return
        pending = pa.concat_tables(buffer.tables) if len(buffer.tables) > 1 else buffer.tables[0]
        offset = 0
        while pending.num_rows - offset >= self.rows_per_file or (final and offset < pending.num_rows):
            chunk = pending.slice(offset, self.rows_per_file)
            self.adds.append(self._write_file(chunk, buffer.values))
            offset += chunk.num_rows
        rest = pending.slice(offset)
        buffer.tables = [rest] if rest.num_rows else []
        buffer.rows = rest.num_rows

    def _write_file(self, rows: pa.Table, values: Mapping[str, str | None]) -> AddFile | AddCDCFile:

        layout = self.layout
        has_directory = layout.partition_columns or layout.random_prefix_length or layout.change_data
        directory = _partition_dir(layout, values) if has_directory else ""
        kind = "cdc" if layout.change_data else "part"
        name = _file_name(self.file_index, layout.compression, layout.name_token, kind=kind)
        relative = f"{directory}/{name}" if directory else name
        self.file_index += 1
        absolute = resolve_in_table(layout.root, encode_log_path(relative))
        data_rows = rows.select(layout.data_columns)
        physical = layout.mapping.to_physical(data_rows)
        if layout.change_data:
            physical = physical.append_column(CHANGE_TYPE_COLUMN, rows.column(CHANGE_TYPE_COLUMN))
        elif layout.materialized is not None and ROW_ID in rows.column_names:
            # Hidden columns, not in the schema (so no statistics): the rows' stable values, null
            # where a row takes the file's default (a new row, or an updated row's version).
            physical = physical.append_column(
                pa.field(layout.materialized.row_id, pa.int64()), rows.column(ROW_ID)
            ).append_column(pa.field(layout.materialized.row_commit_version, pa.int64()), rows.column(ROW_COMMIT_VERSION))
        self.written.record(absolute)  # before writing: a file cut short by a failure is removed too
        with layout.io.open_output_stream(absolute) as out:
            pq.write_table(physical, out, compression=layout.compression, write_statistics=True)
        info = layout.io.info(absolute)
        if info is None:
            raise DataFileNotFoundError(f"data file {absolute} was written but cannot be listed; storage is inconsistent")
        partition_values = {layout.mapping.physical_name(c): values[c] for c in layout.partition_columns}
        if layout.change_data:
            return AddCDCFile(path=encode_log_path(relative), partition_values=partition_values, size=info.size)
        return AddFile(
            path=encode_log_path(relative),
            partition_values=partition_values,
            size=info.size,
            modification_time=info.modification_time,
            data_change=True,
            stats=compute_stats(data_rows, layout.metadata, tight_bounds=True if layout.tight_bounds else None),
        )


def _split_partitions(data: pa.Table, layout: _WriteLayout) -> Iterator[tuple[dict[str, str | None], pa.Table]]:
    """(serialized partition values by logical name, rows) for each distinct partition in ``data``."""
    if not layout.partition_columns:
        yield {}, data
        return
    if _one_partition(data, layout.partition_columns):
        # Rows of one partition (a compacted bin, an append to one partition): no grouping and
        # no copy by row list, only the chunks made contiguous, as a take would leave them.
        key = data.select(list(layout.partition_columns)).slice(0, 1).to_pylist()[0]
        yield _serialized_partition(key, layout), data.combine_chunks()
        return
    groups = group_row_indices(data, layout.partition_columns)
    row_lists = groups.column("__row_list")
    key_rows = groups.select(list(layout.partition_columns)).to_pylist()
    for i, key in enumerate(key_rows):
        yield _serialized_partition(key, layout), data.take(row_lists[i].values)


def _serialized_partition(key: Mapping[str, Any], layout: _WriteLayout) -> dict[str, str | None]:
    """The partition values of one row (by logical name) as the log writes them."""
    values: dict[str, str | None] = {}
    for c in layout.partition_columns:
        serialized = serialize_partition_value(key[c], layout.logical_schema.field(c).type)
        # An empty string cannot be told apart from NULL in a partition value (the
        # protocol reads "" as null); Delta stores both as null.
        values[c] = serialized if serialized != "" else None
    return values


def _one_partition(data: pa.Table, columns: Sequence[str]) -> bool:
    """Whether every row of ``data`` (at least one) has the same values in ``columns`` (all null counts as one)."""
    for name in columns:
        column = data.column(name)
        if column.null_count:
            if column.null_count != data.num_rows:
                return False
            continue
        if pa.types.is_floating(column.type):
            return False  # NaN and -0.0 compare apart from how they partition: let the grouping decide
        first = column[0]
        if not pc.all(pc.equal(column, first)).as_py():
            return False
    return True


# ---------------------------------------------------------------------- append


# Rows of a RecordBatchReader validated and partitioned at a time: a stream is never
# held in memory whole, only up to this many rows plus one open file per partition.
STREAM_CHUNK_ROWS = 1 << 20


def _iter_tables(data: pa.Table | pa.RecordBatchReader | pa.RecordBatch) -> Iterator[pa.Table]:
    """``data`` as tables of about :data:`STREAM_CHUNK_ROWS` rows (a Table is taken whole)."""
    chunk_rows = STREAM_CHUNK_ROWS
    if isinstance(data, pa.Table):
        yield data
        return
    if isinstance(data, pa.RecordBatch):
        yield pa.Table.from_batches([data])
        return
    if isinstance(data, pa.RecordBatchReader):
        pending: list[pa.RecordBatch] = []
        rows = 0
        for batch in data:
            pending.append(batch)
            rows += batch.num_rows
            if rows >= chunk_rows:
                yield pa.Table.from_batches(pending, schema=data.schema)
                pending, rows = [], 0
        if pending:
            yield pa.Table.from_batches(pending, schema=data.schema)
        return
    raise SchemaMismatchError(
        f"cannot write {type(data).__name__}: pass a pyarrow Table, RecordBatch or RecordBatchReader"
    )


def write_data_files(
    snapshot: Snapshot | TableContext,
    data: pa.Table | pa.RecordBatchReader | pa.RecordBatch,
    *,
    target_file_size: int | None = None,
    written: WrittenFiles | None = None,
    name_token: str | None = None,
) -> list[AddFile]:
    """Validate ``data`` against the table and write it as parquet files; returns their ``add`` actions.

    Nothing is committed: the caller commits the actions. Raises
    :class:`SchemaMismatchError` or :class:`ConstraintViolationError` before writing anything
    for a chunk that fails. Whatever fails, the files this call wrote are removed before
    the error propagates (a stream whose third chunk breaks a constraint leaves nothing of
    the first two). ``written`` records the files for the caller (a transaction removes
    them if its commit fails). ``name_token`` (letters, digits and ``-``) goes into every
    file name, so that a job whose writers may outlive its own cleanup (Spark tasks being
    killed) can find and remove the files it wrote.
    """
    _check_source(snapshot)
    check_str("name_token", name_token, optional=True)
    if name_token is not None and not _NAME_TOKEN.fullmatch(name_token):
        raise InvalidArgumentError("name_token", name_token, "1 to 64 ASCII letters, digits or '-'")
    check_instance("data", data, (pa.Table, pa.RecordBatchReader, pa.RecordBatch))
    check_int("target_file_size", target_file_size, minimum=1, optional=True)
    check_writable(snapshot.protocol, snapshot.metadata)
    layout = _layout(snapshot, target_file_size, name_token)
    constraints = table_constraints(snapshot.protocol, snapshot.metadata)
    files = written if written is not None else WrittenFiles(layout.io)
    with files.removed_on_failure():
        writer = _FileWriter(layout, files)
        for chunk in _iter_tables(data):
            chunk, carried = _split_row_tracking(chunk, layout.materialized)
            rows = _validated(chunk, layout.logical_schema, constraints)
            if carried is not None:
                rows = rows.append_column(ROW_ID, carried[0]).append_column(ROW_COMMIT_VERSION, carried[1])
            writer.add(rows)
        return [a for a in writer.finish() if isinstance(a, AddFile)]


def _split_row_tracking(
    chunk: pa.Table, materialized: MaterializedColumns | None
) -> tuple[pa.Table, tuple[pa.ChunkedArray, pa.ChunkedArray] | None]:
    """``chunk`` without the row-tracking columns, and those columns (int64) when the table keeps them.

    Rows read with ``read_data(..., row_tracking=True)`` carry their stable row ID and
    commit version: a copy keeps both, an updated row keeps its ID with a null version.
    On a table without row tracking enabled the columns are dropped (nothing to keep).
    """
    present = [n for n in (ROW_ID, ROW_COMMIT_VERSION) if n in chunk.column_names]
    if not present:
        return chunk, None
    rest = chunk.drop_columns(present)
    if materialized is None:
        return rest, None

    def column(name: str) -> pa.ChunkedArray:
        if name not in chunk.column_names:
            return pa.chunked_array([pa.nulls(chunk.num_rows, pa.int64())])
        values = chunk.column(name)
        return values if values.type == pa.int64() else values.cast(pa.int64())

    return rest, (column(ROW_ID), column(ROW_COMMIT_VERSION))


def write_change_data_files(
    snapshot: Snapshot | TableContext,
    data: pa.Table | pa.RecordBatchReader | pa.RecordBatch,
    *,
    written: WrittenFiles | None = None,
    name_token: str | None = None,
) -> list[AddCDCFile]:
    """Write the change data of a row-level change as ``cdc`` files; their actions, for ``Transaction.add_cdc``.

    ``data`` holds the table's logical columns plus :data:`CHANGE_TYPE_COLUMN`, one of
    :data:`CHANGE_TYPES` per row (``delete`` for a deleted row, ``update_preimage`` and
    ``update_postimage`` for the old and new versions of an updated one, ``insert`` for
    a MERGE insert). The files go below ``_change_data/`` in Hive-style partition
    directories, named ``cdc-<n>-[<name_token>-]<uuid>.c000.<codec>.parquet`` and laid out
    as Delta lays out its change data: the data columns under their physical names
    (partition values only in the action), then ``_change_type``; no statistics. Rows
    are not checked against the table's constraints (pre-images are rows the table held).
    ``written`` and ``name_token`` as in :func:`write_data_files`; files of a failed call
    are removed.
    """
    _check_source(snapshot)
    check_str("name_token", name_token, optional=True)
    if name_token is not None and not _NAME_TOKEN.fullmatch(name_token):
        raise InvalidArgumentError("name_token", name_token, "1 to 64 ASCII letters, digits or '-'")
    check_instance("data", data, (pa.Table, pa.RecordBatchReader, pa.RecordBatch))
    check_writable(snapshot.protocol, snapshot.metadata)
    layout = _layout(snapshot, None, name_token)._replace(change_data=True, random_prefix_length=0)
    files = written if written is not None else WrittenFiles(layout.io)
    with files.removed_on_failure():
        writer = _FileWriter(layout, files)
        for chunk in _iter_tables(data):
            writer.add(_change_rows(chunk, layout.logical_schema))
        return [a for a in writer.finish() if isinstance(a, AddCDCFile)]


def _change_rows(chunk: pa.Table, schema: pa.Schema) -> pa.Table:
    """``chunk`` conformed to the table's columns, with a valid :data:`CHANGE_TYPE_COLUMN` kept after them."""
    if CHANGE_TYPE_COLUMN not in chunk.column_names:
        raise SchemaMismatchError(
            f"change data needs a {CHANGE_TYPE_COLUMN!r} column (one of {', '.join(CHANGE_TYPES)}) beside the table's columns"
        )
    import pyarrow.compute as pc  # only change data needs it here; plain writes stay without it

    change_type = chunk.column(CHANGE_TYPE_COLUMN).cast(pa.string())
    unknown = pc.invert(pc.fill_null(pc.is_in(change_type, value_set=string_array(CHANGE_TYPES)), False))
    if pc.any(unknown).as_py():
        bad = change_type.filter(unknown)[0].as_py()
        raise SchemaMismatchError(
            f"{CHANGE_TYPE_COLUMN} must be one of {', '.join(CHANGE_TYPES)} in every row of change data, got {bad!r}"
        )
    conformed = conform_to_schema(chunk.drop_columns([CHANGE_TYPE_COLUMN]), schema)
    return conformed.append_column(pa.field(CHANGE_TYPE_COLUMN, pa.string()), change_type)


def _validated(chunk: pa.Table, schema: pa.Schema, constraints: tuple[Constraint, ...]) -> pa.Table:
    conformed = conform_to_schema(chunk, schema)  # enforces NOT NULL too
    enforce_constraints(conformed, constraints, schema)
    return conformed


# ------------------------------------------------------------- add_file_from_parquet


def add_file_from_parquet(
    io: FileIO,
    root: str,
    relative_path: str,
    partition_values: Mapping[str, Any],
    metadata: Metadata,
    data_change: bool = True,
) -> AddFile:
    """The ``add`` action for a parquet file already written below the table root.

    ``relative_path`` is the plain (not URI-encoded) path relative to the root.
    ``partition_values`` maps each partition column's logical name to its value,
    either already serialized as the protocol's string form (or None) or as a Python
    value, which is serialized here. Size and modification time come from storage,
    statistics from the parquet footer.
    """
    check_instance("io", io, FileIO)
    check_str("root", root, non_empty=True)
    check_str("relative_path", relative_path, non_empty=True)
    check_instance("partition_values", partition_values, Mapping)
    check_instance("metadata", metadata, Metadata)
    check_bool("data_change", data_change)
    log_path = encode_log_path(relative_path)
    absolute = resolve_in_table(root, log_path)
    partition_columns = tuple(metadata.partition_columns)
    given = {str(k).lower(): (k, v) for k, v in partition_values.items()}
    if sorted(given) != sorted(c.lower() for c in partition_columns):
        raise SchemaMismatchError(
            f"partition values for {sorted(str(k) for k in partition_values)} do not match the table's "
            f"partition columns {list(partition_columns)}"
        )
    info = io.info(absolute)
    if info is None:
        raise DataFileNotFoundError(f"cannot add {relative_path!r}: no file at {absolute}")
    logical = schema_to_arrow(metadata.schema_json)
    mapping = ColumnMapping.from_metadata(metadata)
    serialized: dict[str, str | None] = {}
    for column in partition_columns:
        value = given[column.lower()][1]
        if value is not None and not isinstance(value, str):
            try:
                value = serialize_partition_value(value, logical.field(column).type)
            except (TypeError, ValueError, ArithmeticError) as exc:
                raise InvalidArgumentError(
                    f"partition_values[{column!r}]", value,
                    f"pass a value of the column's type {logical.field(column).type} or its serialized string ({exc})",
                ) from exc
        serialized[mapping.physical_name(column)] = value if value != "" else None
    with io.open_input_file(absolute) as f:
        footer = pq.ParquetFile(f).metadata
    return AddFile(
        path=log_path,
        partition_values=serialized,
        size=info.size,
        modification_time=info.modification_time,
        data_change=data_change,
        stats=stats_from_parquet_metadata(footer, metadata),
    )
