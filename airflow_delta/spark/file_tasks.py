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
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType

from airflow_delta.engine import (
    AddFile,
    DeltaTable,
    InvalidArgumentError,
    TableContext,
    error_from_report,
    read_live_rows,
    split_by_row_groups,
    write_data_files,
)

FILE_COLUMN = "_delta_file"
ROW_COLUMN = "_delta_row"

# The file-action columns that per-file reads use; statistics and tags stay on the driver.
_SHIPPED_ACTION_COLUMNS = ("path", "partition_values", "size", "deletion_vector")
# Files per input row of the read: enough rows for Spark to balance tasks over cores,
# few enough that a 100,000-file table does not become 100,000 tiny records.
_TASKS_PER_CORE = 4
_ADD_COLUMN = "add"
# Files larger than this are read by several tasks, a range of row groups each.
_SPLIT_BYTES = 64 * 1024 * 1024
_GROUPS_START = "_row_groups_start"
_GROUPS_STOP = "_row_groups_stop"

# How an engine error raised on an executor appears in the traceback text Spark gives the driver.
_ENGINE_ERROR_LINE = re.compile(r"airflow_delta\.engine\.errors\.([A-Za-z_][A-Za-z0-9_]*): ([^\n]*)")

__all__ = [
    "FILE_COLUMN",
    "ROW_COLUMN",
    "engine_errors_from_executors",
    "spark_schema",
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


def _arrow_schema_for(spark: SparkSession, schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects from ``mapInArrow`` for ``schema`` under this session's settings."""
    conf = spark.conf
    return to_arrow_schema(
        schema,
        timezone=conf.get("spark.sql.session.timeZone"),
        prefers_large_types=conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false").lower() == "true",
    )


def _file_batches(context: TableContext, files: pa.Table, num_slices: int) -> list[tuple[int, bytes]]:
    """``files`` cut into about ``num_slices`` Arrow IPC streams, one input row each.

    A file larger than :data:`_SPLIT_BYTES` is shared by several tasks, a range of its row
    groups each (:func:`~airflow_delta.engine.split_by_row_groups`), so that one large
    file does not leave every core but one idle.
    """
    shipped = files.select([c for c in _SHIPPED_ACTION_COLUMNS if c in files.column_names])
    splits = split_by_row_groups(context, shipped, _SPLIT_BYTES)
    if any(groups is not None for _, groups in splits):
        shipped = shipped.take(pa.array([i for i, _ in splits], pa.int64()))
    starts = pa.array([None if g is None else g.start for _, g in splits], pa.int32())
    stops = pa.array([None if g is None else g.stop for _, g in splits], pa.int32())
    shipped = shipped.append_column(_GROUPS_START, starts).append_column(_GROUPS_STOP, stops)
    per_slice = max(1, math.ceil(shipped.num_rows / max(1, num_slices)))
    out = []
    for index, start in enumerate(range(0, shipped.num_rows, per_slice)):
        sink = pa.BufferOutputStream()
        part = shipped.slice(start, per_slice)
        with pa.ipc.new_stream(sink, part.schema) as writer:
            writer.write_table(part)
        out.append((index, sink.getvalue().to_pybytes()))
    return out


def target_dataframe(
    spark: SparkSession,
    context: TableContext,
    files: pa.Table,
    columns: Sequence[str] | None = None,
    *,
    row_group_filter: str | None = None,
) -> DataFrame:
    """The live rows of ``files`` (file actions of ``context``'s snapshot), read by the engine on executors.

    Columns: the table's logical columns (or ``columns``, in that order), then
    :data:`FILE_COLUMN` and :data:`ROW_COLUMN`. A file that the snapshot no longer has,
    or that fails its checks, fails the job with the engine's typed error.
    ``row_group_filter`` (SQL the engine parses) leaves out row groups whose statistics
    rule it out: the rows are then a superset of those matching it, for a caller that
    filters them by that condition anyway.
    """
    data_schema = spark_schema(context, columns)
    names = data_schema.names
    out_schema = StructType([*data_schema.fields, StructField(FILE_COLUMN, StringType(), False), StructField(ROW_COLUMN, LongType(), False)])
    arrow_out = _arrow_schema_for(spark, out_schema)
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
                for i in range(actions.num_rows):
                    one = actions.slice(i, 1)
                    start, stop = one.column(_GROUPS_START)[0].as_py(), one.column(_GROUPS_STOP)[0].as_py()
                    groups = None if start is None else range(start, stop)
                    one = one.drop_columns([_GROUPS_START, _GROUPS_STOP])
                    rows, positions = read_live_rows(
                        context, one, names, row_group_filter=row_group_filter, row_groups=groups
                    )
                    path = one.column("path")[0]
                    rows = rows.append_column(ROW_COLUMN, pa.array(positions, pa.int64()))
                    # In batches of Spark's Arrow batch size, the file column built per batch: one
                    # batch of a whole file (or row-group range) is as many bytes of JVM direct
                    # memory at once, with the path repeated on every row (a 50M-row MERGE ran out).
                    for start in range(0, rows.num_rows, rows_per_batch):
                        part = rows.slice(start, rows_per_batch)
                        part = part.add_column(len(names), FILE_COLUMN, pa.repeat(path, part.num_rows))
                        yield from part.cast(arrow_out).to_batches()

    return inputs.mapInArrow(read, out_schema)


def write_dataframe(
    context: TableContext,
    data: DataFrame,
    *,
    target_file_size: int | None = None,
    repartition_by_partition_columns: bool = True,
) -> list[AddFile]:
    """Write ``data`` (the table's logical columns) as data files on the executors; their ``add`` actions.

    Nothing is committed: the driver stages the actions with
    ``Transaction.add_files(adds, written_for_this_commit=True)``, so they are removed if
    the commit certainly fails. Each task writes its rows through the engine's writer
    (schema conformed, NOT NULL, CHECK constraints and invariants enforced, statistics,
    physical names under column mapping); a task that fails removes what it wrote. With
    ``repartition_by_partition_columns`` a partitioned table's rows are first grouped by
    partition, so each partition gets few files, as Delta does before writing.
    """
    names = spark_schema(context).names
    missing = [n for n in names if n not in data.columns]
    if missing:
        raise InvalidArgumentError("data", data.columns, f"a DataFrame with the table's columns; missing {missing}")
    rows = data.select(*names)
    if repartition_by_partition_columns and context.partition_columns:
        rows = rows.repartition(*context.partition_columns)

    # The add actions of every task that finished: when another task fails the job, the
    # driver never sees the collected rows, so the files of the finished tasks are found here
    # (Spark merges a task's accumulator updates once, when the task succeeds).
    finished = data.sparkSession.sparkContext.accumulator([], _ListParam())

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = next(batches, None)
        if first is None:
            return
        stream = pa.RecordBatchReader.from_batches(first.schema, _chain(first, batches))
        adds = [json.dumps(a.to_json()) for a in write_data_files(context, stream, target_file_size=target_file_size)]
        finished.add(adds)
        yield pa.RecordBatch.from_arrays([pa.array(adds, pa.string())], [_ADD_COLUMN])

    try:
        with engine_errors_from_executors():
            written = rows.mapInArrow(write, StructType([StructField(_ADD_COLUMN, StringType(), False)])).collect()
    except BaseException:
        _remove_written(context, [AddFile.from_json(json.loads(text)) for text in finished.value])
        raise
    return [AddFile.from_json(json.loads(row[_ADD_COLUMN])) for row in written]


class _ListParam(AccumulatorParam):  # type: ignore[type-arg]
    def zero(self, value: list[str]) -> list[str]:
        return []

    def addInPlace(self, value1: list[str], value2: list[str]) -> list[str]:  # noqa: N802 (Spark's name)
        value1.extend(value2)
        return value1


def _remove_written(context: TableContext, adds: list[AddFile]) -> None:
    """Remove data files a failed write job left: staged as this process's own files in a transaction that aborts."""
    if not adds:
        return
    txn = DeltaTable(context.uri, context.storage_options or None).transaction()
    txn.add_files(adds, written_for_this_commit=True)
    txn.abort()


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
