"""Target rows read by Spark's own parquet reader, where it reads them exactly as the engine does.

:func:`~airflow_delta.spark.file_tasks.target_dataframe` has two readers:

- ``engine``: every file is read by the engine's :func:`~airflow_delta.engine.read_live_rows`
  in a Python task (``mapInArrow``); it handles every table the engine reads, on every
  storage the engine's FileIO reaches;
- ``spark``: ``spark.read.parquet(*files)`` with the physical schema given, ``_metadata.file_path``
  and ``_metadata.row_index`` for the file and row columns. No Python worker runs and no
  row crosses into Arrow; Spark prunes row groups with the caller's filter itself.

The Delta parts Spark knows nothing about are added around the scan, from what the driver
already planned with the engine: partition values (typed by the engine's own parser) come
from a broadcast join on the file, deletion vectors (read by the engine on the driver) are
an anti-join on ``(file, row)``, and column mapping ``name`` is a rename of the physical
columns. :func:`spark_reader_refusal` says when that is not exact; the engine reader is
used then (``reader="auto"``), or the job fails with the reason (``reader="spark"``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    ArrayType,
    DataType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
)

from airflow_delta.engine import (
    DataFileNotFoundError,
    InvalidArgumentError,
    TableContext,
    deleted_row_positions,
    local_data_file_paths,
    typed_partition_values,
)

# More deleted rows than this (all files together) and the anti-join's build side, made on
# the driver, costs more than the engine reader's per-file filter saves.
MAX_DELETED_ROWS = 5_000_000

# Characters Hadoop's glob expansion treats specially: spark.read.parquet globs every path.
_GLOB_CHARACTERS = frozenset("*?[]{}\\")
# Table features whose files Spark's reader would read differently from the table's schema.
_REFUSED_FEATURES = ("typeWidening", "typeWidening-preview")
# The ASCII characters java.net.URI keeps unescaped in a path (unreserved, punct, ";", "/").
_URI_PATH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'():@&=+$,;/")

_SPARK_PATH = "__airflow_delta_spark_path"
_FILE_ID = "__airflow_delta_file_id"
_PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"

# What a target read is for, as far as choosing its reader goes: "join" (its rows stay in
# the JVM: MERGE's join of source and target), "find" (DELETE and UPDATE finding their
# rows) and "copy" (rows that go on to the engine's Python writer: a rewrite's survivors).
READ_PURPOSES = ("join", "find", "copy")
# Where reader="auto" takes Spark's reader: where it measured faster (10M rows, local[2]:
# MERGE 49.7 s against 63.3 s executionTimeMs; a rewrite's DELETE 47.1 s against 33.9 s,
# its finding phase 19.0 s against 15.0 s). docs/design/spark-layer.md has the runs.
_AUTO_SPARK_PURPOSES = frozenset({"join"})

__all__ = ["MAX_DELETED_ROWS", "READ_PURPOSES", "chosen_reader", "hadoop_file_uri", "hadoop_file_uris", "spark_reader_refusal", "spark_target_dataframe"]


def chosen_reader(reader: str, purpose: str) -> str:
    """``"spark"`` or ``"engine"``: who reads a target read for ``purpose`` (:data:`READ_PURPOSES`) under
    ``reader`` (:attr:`~airflow_delta.spark.specs.ExecutionOptions.reader`).

    ``"auto"`` takes Spark's reader only where it measured faster; Spark's reader may
    still refuse a table (:func:`spark_reader_refusal`), and ``"auto"`` then reads with the engine.
    """
    if purpose not in READ_PURPOSES:
        raise InvalidArgumentError("purpose", purpose, f"one of {', '.join(READ_PURPOSES)}")
    if reader == "auto":
        return "spark" if purpose in _AUTO_SPARK_PURPOSES else "engine"
    return reader


def _needs_escape(char: str) -> bool:
    if char in _URI_PATH_SAFE:
        return False
    return ord(char) < 0x80 or 0x80 <= ord(char) <= 0x9F or unicodedata.category(char) in ("Zs", "Zl", "Zp")


def hadoop_file_uris(local_paths: Sequence[str]) -> pa.Array:
    """What Spark's ``_metadata.file_path`` says for each local file it was given as ``file:<path>``.

    Hadoop's ``Path("file:" + path).toUri().toString()``: ``java.net.URI`` escapes, as UTF-8
    ``%XX``, the ASCII characters not legal in a path and the non-ASCII space and control
    characters; other non-ASCII characters stay as they are. Only the characters that occur
    are replaced, each once over all paths ("%" first, as the escapes bring new ones).
    """
    uris = pa.array([f"file:{p}" for p in local_paths], pa.string())
    present = set("".join(local_paths))
    for char in sorted((c for c in present if _needs_escape(c)), key=lambda c: c != "%"):
        escaped = "".join(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass"))
        uris = pc.replace_substring(uris, char, escaped)
    return uris


def hadoop_file_uri(local_path: str) -> str:
    """:func:`hadoop_file_uris` of one path."""
    return str(hadoop_file_uris([local_path])[0].as_py())


def _has_struct(data_type: DataType) -> bool:
    if isinstance(data_type, StructType):
        return True
    if isinstance(data_type, ArrayType):
        return _has_struct(data_type.elementType)
    if isinstance(data_type, MapType):
        return _has_struct(data_type.keyType) or _has_struct(data_type.valueType)
    return False


def _unreadable_type(data_type: DataType) -> str | None:
    """A type in ``data_type`` that Spark's parquet reader would not give as the engine does, or None."""
    if isinstance(data_type, NullType):
        return "void"
    name = data_type.typeName()
    if name == "variant":
        return "variant"
    if isinstance(data_type, StructType):
        return next((t for f in data_type.fields if (t := _unreadable_type(f.dataType))), None)
    if isinstance(data_type, ArrayType):
        return _unreadable_type(data_type.elementType)
    if isinstance(data_type, MapType):
        return _unreadable_type(data_type.keyType) or _unreadable_type(data_type.valueType)
    return None


def _column_mapping_mode(context: TableContext) -> str:
    mode = context.properties.column_mapping_mode
    protocol = context.protocol
    if mode != "none" and not (
        protocol.min_reader_version == 2 or (protocol.min_reader_version >= 3 and protocol.has_reader_feature("columnMapping"))
    ):
        return "unsupported"
    return mode


def spark_reader_refusal(context: TableContext, data_fields: Sequence[StructField], local_paths: Sequence[str] | None) -> str | None:
    """Why Spark's parquet reader cannot read these files exactly as the engine does; None when it can.

    ``data_fields`` are the non-partition columns read (logical, as the table's schema
    has them), ``local_paths`` the files' absolute local paths (None: not a local table).
    Deleted-row counts are checked later, once the deletion vectors are read.
    """
    if local_paths is None:
        return "the table is not on the local file system (Spark has no object-store connector here)"
    features = [f for f in _REFUSED_FEATURES if context.protocol.has_reader_feature(f) or context.protocol.has_writer_feature(f)]
    if features:
        return f"the table supports {features[0]} (files may hold narrower types than the schema)"
    mode = _column_mapping_mode(context)
    if mode == "unsupported":
        return "delta.columnMapping.mode is set but the protocol does not support column mapping"
    if mode == "id":
        return "column mapping mode 'id' (Spark's reader does not match parquet field ids by default)"
    for field in data_fields:
        unreadable = _unreadable_type(field.dataType)
        if unreadable:
            return f"column {field.name!r} has type {unreadable}"
        if mode == "name" and _has_struct(field.dataType):
            return f"column {field.name!r} is nested under column mapping (nested physical names)"
    globbed = next((p for p in local_paths if _GLOB_CHARACTERS.intersection(p) or "//" in p), None)
    if globbed is not None:
        return f"the path {globbed!r} has a character Spark would expand as a glob"
    return None


def _column(name: str) -> Column:
    """The column ``name`` as is: no dots or backticks taken as syntax (column-mapped names may hold any)."""
    return sf.col("`" + name.replace("`", "``") + "`")


def _physical_name(field: StructField, mode: str) -> str:
    if mode == "name":
        return str(field.metadata.get(_PHYSICAL_NAME_KEY, field.name))
    return field.name


def _files_frame(
    spark: SparkSession,
    context: TableContext,
    files: pa.Table,
    local_paths: Sequence[str],
    partition_fields: Sequence[StructField],
    file_column: str,
) -> DataFrame:
    """One row per file: Spark's name for it, its index, its log path and its partition values."""
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        _SPARK_PATH: hadoop_file_uris(local_paths),
        _FILE_ID: pa.array(np.arange(files.num_rows, dtype=np.int64)),
        file_column: files.column("path"),
    }
    schema = [
        StructField(_SPARK_PATH, StringType(), False),
        StructField(_FILE_ID, LongType(), False),
        StructField(file_column, StringType(), False),
    ]
    if partition_fields:
        values = typed_partition_values(context, files)
        for field in partition_fields:
            columns[field.name] = values.field(field.name)
            schema.append(StructField(field.name, field.dataType, True))
    table = pa.table(columns)
    return spark.createDataFrame(table, StructType(schema))


def _deleted_rows_frame(spark: SparkSession, context: TableContext, files: pa.Table, row_column: str) -> DataFrame | str | None:
    """``(file id, row)`` of every row the files' deletion vectors delete; None without DVs; a refusal when too many."""
    deleted = deleted_row_positions(context, files)
    counts = np.array([0 if d is None else d.size for d in deleted], dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return None
    if total > MAX_DELETED_ROWS:
        return f"the files' deletion vectors delete {total} rows (more than {MAX_DELETED_ROWS})"
    ids = np.repeat(np.arange(files.num_rows, dtype=np.int64), counts)
    rows = np.concatenate([d.astype(np.int64) for d in deleted if d is not None and d.size])
    table = pa.table({_FILE_ID: ids, row_column: rows})
    return spark.createDataFrame(table, StructType([StructField(_FILE_ID, LongType(), False), StructField(row_column, LongType(), False)]))


def spark_target_dataframe(
    spark: SparkSession,
    context: TableContext,
    files: pa.Table,
    out_schema: StructType,
    file_column: str,
    row_column: str,
    *,
    required: bool,
    row_filter: str | None = None,
) -> DataFrame | None:
    """``files``' live rows in ``out_schema`` (data columns, ``file_column``, ``row_column``) read by Spark's
    parquet reader; None when :func:`spark_reader_refusal` (or the deleted-row count) refuses it.

    With ``required`` a refusal is an :class:`~airflow_delta.engine.InvalidArgumentError`
    (``ExecutionOptions.reader``) saying why, instead of None. ``row_filter`` (Spark SQL over
    the data columns) keeps only the rows where it holds: Spark pushes it into the scan,
    which skips the row groups whose statistics rule it out (what the engine reader's
    ``row_group_filter`` does), for a caller that filters by it anyway.
    """
    data_names = out_schema.names[:-2]
    partition_names = set(context.partition_columns)
    data_fields = [f for f in out_schema.fields[:-2] if f.name not in partition_names]
    partition_fields = [f for f in out_schema.fields[:-2] if f.name in partition_names]
    local_paths = local_data_file_paths(context, files)
    refusal = spark_reader_refusal(context, data_fields, local_paths)
    deleted_rows = None
    if refusal is None:
        deleted_rows = _deleted_rows_frame(spark, context, files, row_column)
        if isinstance(deleted_rows, str):
            refusal = deleted_rows
    if refusal is not None:
        if required:
            raise InvalidArgumentError(
                "ExecutionOptions.reader", "spark", f"'auto' or 'engine' for this read: Spark's parquet reader cannot, {refusal}"
            )
        return None
    assert local_paths is not None and not isinstance(deleted_rows, str)

    mode = _column_mapping_mode(context)
    physical = StructType([StructField(_physical_name(f, mode), f.dataType, True) for f in data_fields])
    try:
        # recursiveFileLookup: the files are named one by one, and Hive-style directory names
        # must not become columns (partition values come from the log, typed as it says).
        # A missing or corrupt file fails the read whatever the session's conf says: skipping
        # it would drop its rows from a rewrite.
        scan = (
            spark.read.schema(physical)
            .option("recursiveFileLookup", "true")
            .option("ignoreMissingFiles", "false")
            .option("ignoreCorruptFiles", "false")
            .parquet(*[f"file:{p}" for p in local_paths])
        )
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" in str(exc):
            raise DataFileNotFoundError(f"a data file referenced by the log does not exist: {exc}") from exc
        raise
    scanned = scan.select(
        *[_column(p.name).alias(f.name) for p, f in zip(physical.fields, data_fields, strict=True)],
        sf.col("_metadata.file_path").alias(_SPARK_PATH),
        sf.col("_metadata.row_index").alias(row_column),
    )
    by_file = _files_frame(spark, context, files, local_paths, partition_fields, file_column)
    # A file Spark names differently from what the plan computed would lose its partition
    # values and its DV: fail the job (the engine's typed error, via the executor report)
    # instead of reading it wrong.
    unmatched = sf.concat(
        sf.lit("airflow_delta.engine.errors.UnsupportedFeatureError: Spark's parquet reader named a file "),
        sf.col(_SPARK_PATH),
        sf.lit(" that the plan does not list; run with reader='engine'"),
    )
    rows = scanned.join(sf.broadcast(by_file), _SPARK_PATH, "left").where(
        sf.when(sf.col(_FILE_ID).isNull(), sf.raise_error(unmatched)).otherwise(sf.lit(True))
    )
    if deleted_rows is not None:
        rows = rows.join(deleted_rows, [_FILE_ID, row_column], "left_anti")
    out = rows.select(*[_column(n) for n in data_names], sf.col(file_column), sf.col(row_column))
    return out if row_filter is None else out.where(row_filter)
