"""The driver's plan of a DELETE or UPDATE: checking the statement, and which files to read.

Spark SQL is the language of predicates and SET expressions, so Spark's analyzer
decides whether they are valid, against an empty DataFrame of the table's schema:
analysis runs no Spark job, and a bad column or a non-boolean predicate fails before any
file is read, as the engine's :class:`InvalidFilterError` / :class:`InvalidArgumentError`.

The engine decides which files to read: ``txn.read_files(predicate)`` prunes on
partition values and statistics and records the read for Delta's conflict checks, so
an append into partitions the job did not read does not conflict with it. The engine's
SQL parser knows most of Spark SQL but not all of it (Spark's whole function library);
a predicate it cannot parse makes the job read, and depend on, the whole table, which is
correct but conflicts with any concurrent append.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from airflow_delta.engine import InvalidFilterError, TableContext, Transaction
from airflow_delta.spark.file_tasks import spark_schema
from airflow_delta.spark.spark_errors import spark_error_text

__all__ = ["Candidates", "check_predicate", "empty_target", "is_partition_predicate", "predicate_columns", "read_candidates"]

log = logging.getLogger(__name__)


def empty_target(spark: SparkSession, context: TableContext, schema: StructType | None = None) -> DataFrame:
    """An empty DataFrame of the table's logical schema (or ``schema``): Spark analyzes expressions against it without a job."""
    return spark.createDataFrame([], schema if schema is not None else spark_schema(context))


def check_predicate(spark: SparkSession, context: TableContext, predicate: str) -> None:
    """Raise :class:`InvalidFilterError` unless ``predicate`` is a boolean Spark SQL expression over the table's columns."""
    try:
        empty_target(spark, context).filter(predicate)
    except AnalysisException as error:  # ParseException is one too
        raise InvalidFilterError(predicate, f"Spark cannot use it as a condition on the table: {spark_error_text(error)}") from None


def predicate_columns(spark: SparkSession, context: TableContext, predicate: str) -> list[str] | None:
    """The table columns ``predicate`` (already checked) reads, in table order; None when Spark does not say.

    From Spark's analyzed plan of the predicate (no job runs): a DELETE reads only these
    columns of its candidate files to find the rows to delete.
    """
    try:
        analyzed = empty_target(spark, context).filter(predicate)._jdf.queryExecution().analyzed()
        references = analyzed.references().iterator()
        names = set()
        while references.hasNext():
            # A reference keeps the spelling of the predicate; Spark resolved it ignoring case.
            names.add(references.next().name().casefold())
    except Exception as error:  # a private JVM surface: never let it fail the job
        log.info("the columns of %r are not available (%s)", predicate, error)
        return None
    return [name for name in spark_schema(context).names if name.casefold() in names]


def is_partition_predicate(spark: SparkSession, context: TableContext, predicate: str) -> bool:
    """Whether ``predicate`` (already checked) reads partition columns only, so the log alone decides each file.

    Any doubt answers False: the data path is right for every predicate, the
    metadata-only path only saves work.
    """
    if not context.partition_columns:
        return False
    columns = predicate_columns(spark, context, predicate)
    return columns is not None and all(name in context.partition_columns for name in columns)


class Candidates(NamedTuple):
    """The files a statement reads (recorded in its transaction), and the filter the engine pruned them with.

    ``engine_filter`` is the predicate when the engine's parser understood it (it can also
    skip row groups on the executors: ``target_dataframe(row_group_filter=...)``), else None.
    """

    files: pa.Table
    engine_filter: str | None


def read_candidates(txn: Transaction, predicate: str | None) -> Candidates:
    """The live files ``predicate`` may match, recorded as read in ``txn`` (the whole table when the engine cannot prune on it)."""
    if predicate is None:
        return Candidates(txn.read_files(), None)
    try:
        return Candidates(txn.read_files(predicate), predicate)
    except InvalidFilterError as error:
        # Spark accepted the predicate (check_predicate ran first); the engine's parser
        # does not know all of Spark SQL, so it reads everything instead of pruning.
        log.info("reading every file: the engine cannot prune on %r (%s)", predicate, error)
        return Candidates(txn.read_files(), None)
