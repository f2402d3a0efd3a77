"""Per-file engine work on Spark executors: reading a table's files and writing new ones.

Spark never reads or writes a Delta table itself here (there are no Delta jars). The
driver plans with the engine and hands executors file actions; each executor calls the
engine through ``mapInArrow``:

- :func:`target_dataframe`: the live rows of the given files, with the table's logical
  columns (partition values filled in, column mapping resolved, deletion vectors
  applied), plus ``_delta_file`` (the file's path as the log writes it) and
  ``_delta_row`` (the row's physical position in it, what a deletion vector stores).
- :func:`write_dataframe`: rows in the table's logical columns written as data files
  with statistics, physical names, partition directories and constraints checked; the
  driver gets their ``add`` actions back and commits them.

Spark SQL does the rest (predicates, SET expressions, joins). The executor functions
close over a :class:`~airflow_delta.engine.TableContext`, a few kilobytes pickled,
never the file list, which travels as Arrow IPC in the rows of the input DataFrame.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import SparkContext
from pyspark.accumulators import AccumulatorParam
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import ArrayType, DataType, LongType, MapType, StringType, StructField, StructType, VariantType

from airflow_delta.engine import (
    CHANGE_TYPE_COLUMN,
    ROW_COMMIT_VERSION_COLUMN,
    ROW_ID_COLUMN,
    AddCDCFile,
    AddFile,
    DeltaTable,
    InvalidArgumentError,
    TableContext,
    error_from_report,
    keeps_row_ids,
    read_live_rows,
    row_tracking_values,
    split_by_row_groups,
    write_change_data_files,
    write_data_files,
)
from airflow_delta.spark.native_scan import chosen_reader, spark_target_dataframe
from airflow_delta.spark.specs import READERS

FILE_COLUMN = "_delta_file"
ROW_COLUMN = "_delta_row"

# The file-action columns that per-file reads use; statistics and tags stay on the driver.
_SHIPPED_ACTION_COLUMNS = (
    "path", "partition_values", "size", "deletion_vector", "base_row_id", "default_row_commit_version"
)
# Row tracking: the stable row ID and commit version of each target row (after ROW_COLUMN),
# which rewrites keep (engine's ROW_ID_COLUMN / ROW_COMMIT_VERSION_COLUMN).
ROW_TRACKING_COLUMNS = (ROW_ID_COLUMN, ROW_COMMIT_VERSION_COLUMN)
# Files per input row of the read: enough rows for Spark to balance tasks over cores,
# few enough that a 100,000-file table does not become 100,000 tiny records.
_TASKS_PER_CORE = 4
_ADD_COLUMN = "add"
# Files larger than this are read by several tasks, a range of row groups each.
_SPLIT_BYTES = 64 * 1024 * 1024
_GROUPS_START = "_row_groups_start"
_GROUPS_STOP = "_row_groups_stop"

# The job tag of a write_dataframe call's Spark jobs (the file-name token follows).
_WRITE_TAG_PREFIX = "airflow-delta-write-"
# How long a failed write waits for its killed tasks to end before it sweeps their files anyway.
_TASKS_END_TIMEOUT_SECONDS = 120.0

log = logging.getLogger(__name__)

# How an engine error raised on an executor appears in the traceback text Spark gives the driver.
_ENGINE_ERROR_LINE = re.compile(r"airflow_delta\.engine\.errors\.([A-Za-z_][A-Za-z0-9_]*): ([^\n]*)")

__all__ = [
    "FILE_COLUMN",
    "ROW_COLUMN",
    "collect_arrow",
    "engine_errors_from_executors",
    "fits_in_driver",
    "read_rows_in_driver",
    "spark_schema",
    "sweep_named_files",
    "target_dataframe",
    "write_dataframe",
]


@contextmanager
def engine_errors_from_executors() -> Iterator[None]:
    """Re-raise an engine error that an executor raised as that error's class, on the driver.

    Spark reports a failed Python task as a ``PythonException`` (or a Java exception
    wrapping one) whose text holds the executor's traceback. Wrap every Spark action
    over frames from this module: a constraint violation or a corrupt file then fails the
    job with the engine's typed error (and its ``retryable``), the original attached as
    the cause.
    """
    try:
        yield
    except Exception as exc:
        found = _ENGINE_ERROR_LINE.findall(str(exc))
        if not found or type(exc).__module__.startswith("airflow_delta"):
            raise
        class_name, message = found[-1]  # the innermost raise comes last in a traceback
        raise error_from_report(class_name, message) from exc


def spark_schema(context: TableContext, columns: Sequence[str] | None = None) -> StructType:
    """The table's logical schema as Spark's: Delta's schemaString is Spark's own JSON form."""
    schema = StructType.fromJson(json.loads(context.metadata.schema_string))
    if columns is None:
        return schema
    by_name = {f.name: f for f in schema.fields}
    missing = [c for c in columns if c not in by_name]
    if missing:
        raise InvalidArgumentError("columns", list(columns), f"columns of the table; {missing} are not among {list(by_name)}")
    return StructType([by_name[c] for c in columns])


def tracks_rows(context: TableContext) -> bool:
    """Whether the table has row tracking enabled: target rows carry :data:`ROW_TRACKING_COLUMNS`, rewrites keep them."""
    return keeps_row_ids(context.metadata)


def _target_schema(context: TableContext, columns: Sequence[str] | None) -> StructType:
    """The schema of :func:`target_dataframe`: the data columns, then :data:`FILE_COLUMN` and :data:`ROW_COLUMN`
    (and :data:`ROW_TRACKING_COLUMNS` on a row-tracking table)."""
    data_schema = spark_schema(context, columns)
    tracking = [StructField(name, LongType(), True) for name in ROW_TRACKING_COLUMNS] if tracks_rows(context) else []
    return StructType(
        [
            *data_schema.fields,
            StructField(FILE_COLUMN, StringType(), False),
            StructField(ROW_COLUMN, LongType(), False),
            *tracking,
        ]
    )


def _data_names(schema: StructType) -> list[str]:
    """The data columns of a :func:`_target_schema`."""
    extra = {FILE_COLUMN, ROW_COLUMN, *ROW_TRACKING_COLUMNS}
    return [name for name in schema.names if name not in extra]


def _arrow_schema_for(spark: SparkSession, schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects from ``mapInArrow`` for ``schema`` under this session's settings."""
    conf = spark.conf
    return to_arrow_schema(
        schema,
        timezone=conf.get("spark.sql.session.timeZone"),
        prefers_large_types=conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false").lower() == "true",
    )


def _split_actions(context: TableContext, files: pa.Table) -> pa.Table:
    """``files``' shipped columns, one row per unit of read work, with its row-group range.

    A file larger than :data:`_SPLIT_BYTES` becomes several rows, a range of its row
    groups each (:func:`~airflow_delta.engine.split_by_row_groups`), so that one large
    file does not leave every core but one idle.
    """
    shipped = files.select([c for c in _SHIPPED_ACTION_COLUMNS if c in files.column_names])
    splits = split_by_row_groups(context, shipped, _SPLIT_BYTES)
    if any(groups is not None for _, groups in splits):
        shipped = shipped.take(pa.array([i for i, _ in splits], pa.int64()))
    starts = pa.array([None if g is None else g.start for _, g in splits], pa.int32())
    stops = pa.array([None if g is None else g.stop for _, g in splits], pa.int32())
    return shipped.append_column(_GROUPS_START, starts).append_column(_GROUPS_STOP, stops)


def _file_batches(context: TableContext, files: pa.Table, num_slices: int) -> list[tuple[int, bytes]]:
    """``files`` (:func:`_split_actions`) cut into about ``num_slices`` Arrow IPC streams, one input row each."""
    shipped = _split_actions(context, files)
    per_slice = max(1, math.ceil(shipped.num_rows / max(1, num_slices)))
    out = []
    for index, start in enumerate(range(0, shipped.num_rows, per_slice)):
        sink = pa.BufferOutputStream()
        part = shipped.slice(start, per_slice)
        with pa.ipc.new_stream(sink, part.schema) as writer:
            writer.write_table(part)
        out.append((index, sink.getvalue().to_pybytes()))
    return out


def _read_split_actions(
    context: TableContext,
    actions: pa.Table,
    names: Sequence[str],
    row_group_filter: str | None,
    arrow_out: pa.Schema,
    rows_per_batch: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """The live rows of each unit of :func:`_split_actions`, with :data:`FILE_COLUMN` and
    :data:`ROW_COLUMN`, cast to ``arrow_out``: the read of a Spark task and of the driver alike.

    With ``rows_per_batch`` the rows go out in batches of at most that many rows, the file
    column built per batch: one batch of a whole file (or row-group range) is as many bytes
    of JVM direct memory at once, with the path repeated on every row (a 50M-row MERGE ran
    out of it)."""
    for i in range(actions.num_rows):
        one = actions.slice(i, 1)
        start, stop = one.column(_GROUPS_START)[0].as_py(), one.column(_GROUPS_STOP)[0].as_py()
        groups = None if start is None else range(start, stop)
        one = one.drop_columns([_GROUPS_START, _GROUPS_STOP])
        rows, positions = read_live_rows(context, one, names, row_group_filter=row_group_filter, row_groups=groups)
        if rows.column_names != list(names):  # the engine gives the table's order; the frame has the caller's
            rows = rows.select(list(names))
        path = one.column("path")[0]
        rows = rows.append_column(ROW_COLUMN, pa.array(positions, pa.int64()))
        if len(arrow_out) > len(names) + 2:  # row tracking: each row's stable ID and commit version
            tracked = row_tracking_values(context, one, positions)
            for name in ROW_TRACKING_COLUMNS:
                rows = rows.append_column(name, tracked.column(name))
        step = rows_per_batch or max(rows.num_rows, 1)
        for begin in range(0, max(rows.num_rows, 1), step):
            part = rows.slice(begin, step)
            part = part.add_column(len(names), FILE_COLUMN, pa.repeat(path, part.num_rows))
            yield from part.cast(arrow_out).to_batches()


def _read_in_driver(
    context: TableContext, files: pa.Table, names: Sequence[str], row_group_filter: str | None, arrow_out: pa.Schema
) -> pa.Table:
    actions = _split_actions(context, files)
    return pa.Table.from_batches(list(_read_split_actions(context, actions, names, row_group_filter, arrow_out)), arrow_out)


def read_rows_in_driver(spark: SparkSession, context: TableContext, files: pa.Table) -> pa.Table:
    """What ``target_dataframe(spark, context, files)`` holds, read in this process as one Arrow table."""
    schema = _target_schema(context, None)
    return _read_in_driver(context, files, _data_names(schema), None, _arrow_schema_for(spark, schema))


def fits_in_driver(files: pa.Table, max_bytes: int) -> bool:
    """Whether file work on ``files`` (file actions) runs in the driver: they total less than ``max_bytes``.

    See :attr:`~airflow_delta.spark.specs.ExecutionOptions.driver_max_bytes`.
    """
    return int(pc.sum(files.column("size")).as_py() or 0) < max_bytes


def target_dataframe(
    spark: SparkSession,
    context: TableContext,
    files: pa.Table,
    columns: Sequence[str] | None = None,
    *,
    row_group_filter: str | None = None,
    in_driver: bool = False,
    reader: str = "auto",
    purpose: str = "copy",
) -> DataFrame:
    """The live rows of ``files`` (file actions of ``context``'s snapshot), read on executors.

    Columns: the table's logical columns (or ``columns``, in that order), then
    :data:`FILE_COLUMN` and :data:`ROW_COLUMN`. A file that the snapshot no longer has,
    or that fails its checks, fails the job with the engine's typed error.
    ``row_group_filter`` (SQL the engine parses) leaves out row groups whose statistics
    rule it out: the rows are then a superset of those matching it, for a caller that
    filters them by that condition anyway. ``in_driver`` reads the files in this process
    (for a few small files, see :func:`fits_in_driver`) and hands Spark the rows.

    ``reader`` (:attr:`~airflow_delta.spark.specs.ExecutionOptions.reader`) picks who reads
    the files on executors: ``"spark"`` is Spark's own parquet reader
    (:mod:`~airflow_delta.spark.native_scan`; ``row_group_filter`` then filters the rows, and
    Spark skips row groups with it), ``"engine"`` the engine's, and ``"auto"`` Spark's
    where it reads the files exactly (:func:`~airflow_delta.spark.native_scan.spark_reader_refusal`)
    and measured faster for ``purpose`` (:func:`~airflow_delta.spark.native_scan.chosen_reader`).
    """
    if reader not in READERS:
        raise InvalidArgumentError("reader", reader, f"one of {', '.join(READERS)}")
    out_schema = _target_schema(context, columns)
    # Spark's reader knows nothing of row IDs: a row-tracking table is read by the engine.
    if not in_driver and chosen_reader(reader, purpose) == "spark" and files.num_rows and not tracks_rows(context):
        native = spark_target_dataframe(
            spark, context, files, out_schema, FILE_COLUMN, ROW_COLUMN, required=reader == "spark", row_filter=row_group_filter
        )
        if native is not None:
            return native
    names = _data_names(out_schema)
    arrow_out = _arrow_schema_for(spark, out_schema)
    if in_driver:
        # The same engine read, in this process: no Spark task (and no Python worker) starts.
        rows = _read_in_driver(context, files, names, row_group_filter, arrow_out)
        return spark.createDataFrame(rows, out_schema)
    cores = spark.sparkContext.defaultParallelism
    # Spark's own Arrow batch size (0 or less is "no limit" to Spark; a bound is kept here).
    rows_per_batch = int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000") or 10000)
    rows_per_batch = rows_per_batch if rows_per_batch > 0 else 10000
    slices = _file_batches(context, files, cores * _TASKS_PER_CORE) if files.num_rows else []
    rdd = spark.sparkContext.parallelize(slices, max(1, len(slices)))
    inputs = spark.createDataFrame(rdd, "slice int, actions binary")

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for payload in batch.column("actions").to_pylist():
                actions = pa.ipc.open_stream(payload).read_all()
                yield from _read_split_actions(context, actions, names, row_group_filter, arrow_out, rows_per_batch)

    return inputs.mapInArrow(read, out_schema)


def write_dataframe(
    context: TableContext,
    data: DataFrame,
    *,
    target_file_size: int | None = None,
    repartition_by_partition_columns: bool = True,
    in_driver: bool = False,
) -> list[AddFile]:
    """Write ``data`` (the table's logical columns) as data files on the executors; their ``add`` actions.

    Nothing is committed: the driver stages the actions with
    ``Transaction.add_files(adds, written_for_this_commit=True)``, so they are removed if
    the commit certainly fails. Each task writes its rows through the engine's writer
    (schema conformed, NOT NULL, CHECK constraints and invariants enforced, statistics,
    physical names under column mapping); a task that fails removes what it wrote. With
    ``repartition_by_partition_columns`` a partitioned table's rows are first grouped by
    partition, so each partition gets few files, as Delta does before writing.
    ``in_driver`` collects the rows (few, see :func:`fits_in_driver`) and writes them in this
    process with the same engine writer, so that no Python worker starts for them.
    """
    names = spark_schema(context).names
    if tracks_rows(context):  # rows copied or updated keep their stable values (null: the file's default)
        names += [name for name in ROW_TRACKING_COLUMNS if name in data.columns]
    rows = _columns_to_write(data, names, "a DataFrame with the table's columns")
    if in_driver:
        # The engine's writer removes what it wrote when it fails.
        return write_data_files(context, _collected(rows), target_file_size=target_file_size)
    if repartition_by_partition_columns and context.partition_columns:
        rows = rows.repartition(*context.partition_columns)

    def write_files(stream: pa.RecordBatchReader, token: str) -> list[AddFile]:
        return write_data_files(context, stream, target_file_size=target_file_size, name_token=token)

    return [AddFile.from_json(action["add"]) for action in _write_on_executors(context, rows, write_files)]


def write_change_dataframe(context: TableContext, data: DataFrame, *, in_driver: bool = False) -> list[AddCDCFile]:
    """Write ``data`` (the table's logical columns and ``_change_type``) as change data files; their ``cdc`` actions.

    The engine's :func:`~airflow_delta.engine.write_change_data_files` writes each task's
    rows below ``_change_data/``; a failed job removes what its tasks wrote, exactly as
    :func:`write_dataframe` does (same name token and sweep). The driver stages the
    actions with ``Transaction.add_cdc(action, written_for_this_commit=True)``.
    ``in_driver`` collects the rows and writes them in this process.
    """
    names = [*spark_schema(context).names, CHANGE_TYPE_COLUMN]
    rows = _columns_to_write(data, names, f"change data with the table's columns and {CHANGE_TYPE_COLUMN}")
    if in_driver:
        return write_change_data_files(context, _collected(rows))
    if context.partition_columns:
        rows = rows.repartition(*context.partition_columns)

    def write_files(stream: pa.RecordBatchReader, token: str) -> list[AddCDCFile]:
        return write_change_data_files(context, stream, name_token=token)

    return [AddCDCFile.from_json(action["cdc"]) for action in _write_on_executors(context, rows, write_files)]


def _columns_to_write(data: DataFrame, names: Sequence[str], expected: str) -> DataFrame:
    missing = [n for n in names if n not in data.columns]
    if missing:
        raise InvalidArgumentError("data", data.columns, f"{expected}; missing {missing}")
    return data.select(*names)


def _collected(rows: DataFrame) -> pa.Table:
    with engine_errors_from_executors():
        return collect_arrow(rows)


def _has_variant(data_type: DataType) -> bool:
    if isinstance(data_type, VariantType):
        return True
    if isinstance(data_type, StructType):
        return any(_has_variant(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return _has_variant(data_type.elementType)
    if isinstance(data_type, MapType):
        return _has_variant(data_type.keyType) or _has_variant(data_type.valueType)
    return False


def collect_arrow(frame: DataFrame) -> pa.Table:
    """``frame.toArrow()``, but for variants as Spark sends them.

    PySpark casts the collected batches to its Arrow form of the schema, whose variant is a
    struct of two non-null binaries; a NULL variant inside a list or map arrives with null
    children, which that cast refuses. The batches themselves are what Spark computed, so
    a frame with a variant column is taken as collected (the engine's writer conforms the
    layout to the table's schema).
    """
    if not _has_variant(frame.schema):
        return frame.toArrow()
    batches = frame._collect_as_arrow()
    if not batches:
        return frame.toArrow()  # no rows: nothing for the cast to refuse
    return pa.Table.from_batches(batches)


def _write_on_executors(
    context: TableContext,
    rows: DataFrame,
    write_files: Callable[[pa.RecordBatchReader, str], Sequence[AddFile | AddCDCFile]],
) -> list[dict[str, Any]]:
    """Run ``write_files(rows of one task, token)`` in every task; the actions they return as log lines
    (``{"add": {...}}``, ``{"cdc": {...}}``) parsed as JSON.

    After a failure every file the write made is removed (see :func:`_end_tasks_and_sweep`).
    """
    # Every file of this call carries the token in its name, and its Spark jobs the tag: after
    # a failure the driver ends the job's tasks and then finds and removes every file they wrote.
    token = uuid.uuid4().hex
    tag = f"{_WRITE_TAG_PREFIX}{token}"
    spark_context = rows.sparkSession.sparkContext
    # The actions of every task that finished: when another task fails the job, the
    # driver never sees the collected rows, so the files of the finished tasks are found here
    # (Spark merges a task's accumulator updates once, when the task succeeds).
    finished = spark_context.accumulator([], _ListParam())

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = next(batches, None)
        if first is None:
            return
        stream = pa.RecordBatchReader.from_batches(first.schema, _chain(first, batches))
        actions = [json.dumps({"cdc" if isinstance(a, AddCDCFile) else "add": a.to_json()}) for a in write_files(stream, token)]
        finished.add(actions)
        yield pa.RecordBatch.from_arrays([pa.array(actions, pa.string())], [_ADD_COLUMN])

    spark_context.addJobTag(tag)
    try:
        with engine_errors_from_executors():
            written = rows.mapInArrow(write, StructType([StructField(_ADD_COLUMN, StringType(), False)])).collect()
    except BaseException:
        _remove_written(context, [json.loads(text) for text in finished.value])
        _end_tasks_and_sweep(spark_context, context, tag, token)
        raise
    finally:
        spark_context.removeJobTag(tag)
    return [json.loads(row[_ADD_COLUMN]) for row in written]


def _end_tasks_and_sweep(spark_context: SparkContext, context: TableContext, tag: str, token: str) -> None:
    """After a failed write: end its tasks, then remove every file named with ``token`` that no commit holds.

    When one task fails the job, Spark kills the others, but a killed task can still finish
    the file it was writing after the driver learns of the failure. So the job's tasks are
    cancelled and awaited first (Spark reports a task ended only once its Python worker has
    returned or been destroyed), and only then is the table root searched for the token.
    """
    try:
        spark_context.cancelJobsWithTag(tag)
        ended = _wait_for_tasks_to_end(spark_context, tag)
    except Exception as error:  # never hide the write's own error behind a cleanup one
        log.warning("could not wait for the tasks of failed write %s to end: %s", tag, error)
        ended = False
    if not ended:
        log.warning("tasks of failed write %s may still be running; its files are swept anyway", tag)
    try:
        sweep_named_files(context, token)
    except Exception as error:
        log.warning("could not remove the files of failed write %s (token %s): %s", tag, token, error)


def _wait_for_tasks_to_end(spark_context: SparkContext, tag: str) -> bool:
    """Whether every task of the jobs tagged ``tag`` ended within :data:`_TASKS_END_TIMEOUT_SECONDS`."""
    job_ids = list(spark_context._jsc.sc().statusTracker().getJobIdsForTag(tag))
    tracker = spark_context.statusTracker()
    deadline = time.monotonic() + _TASKS_END_TIMEOUT_SECONDS
    while True:
        running = 0
        for job_id in job_ids:
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = tracker.getStageInfo(stage_id)
                running += stage.numActiveTasks if stage is not None else 0
        if running == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def sweep_named_files(context: TableContext, token: str) -> list[str]:
    """Remove the data files below the table root whose name holds ``token`` and that the latest
    snapshot does not hold; their paths.

    For a write that failed: its files are in no commit. The check against the latest
    snapshot is a second guard: a committed file is never removed. The log directory is
    never searched, and nothing outside the table root is touched (the table's FileIO is
    confined to it).
    """
    io, root = context.io, context.table_root.rstrip("/")
    log_dir = f"{root}/_delta_log/"
    found = [info.path for info in io.walk(root) if token in info.name and not info.path.startswith(log_dir)]
    if not found:
        return []
    snapshot = DeltaTable(context.uri, context.storage_options or None).snapshot()
    # Compared by file name: a log path may be relative, absolute or URL-encoded, a name is a name.
    committed_names = pc.replace_substring_regex(snapshot.add_actions.column("path"), r"^.*/", "")
    found_paths = pa.array(found, pa.string())
    found_names = pc.replace_substring_regex(found_paths, r"^.*/", "")
    doomed = found_paths.filter(pc.invert(pc.is_in(found_names, value_set=committed_names.combine_chunks())))
    paths = doomed.to_pylist()
    io.delete_many(paths)
    return paths


class _ListParam(AccumulatorParam):  # type: ignore[type-arg]
    def zero(self, value: list[str]) -> list[str]:
        return []

    def addInPlace(self, value1: list[str], value2: list[str]) -> list[str]:  # noqa: N802 (Spark's name)
        value1.extend(value2)
        return value1


def _remove_written(context: TableContext, actions: list[dict[str, Any]]) -> None:
    """Remove the files a failed write job left (``add`` or ``cdc`` log lines): staged as this
    process's own files in a transaction that aborts."""
    if not actions:
        return
    txn = DeltaTable(context.uri, context.storage_options or None).transaction()
    for action in actions:
        if "add" in action:
            txn.add_files([AddFile.from_json(action["add"])], written_for_this_commit=True)
        else:
            txn.add_cdc(AddCDCFile.from_json(action["cdc"]), written_for_this_commit=True)
    txn.abort()


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
