"""``UPDATE table SET column = expression, ... [WHERE predicate]`` as a Spark job, committed through the engine.

As Delta's ``UpdateCommand``: the engine prunes the files (on partition values and
statistics, recording the read), Spark reads the candidate files through the engine on
the executors, keeps the rows where ``(predicate) IS TRUE`` (all rows without a
predicate; a row whose predicate is NULL is left alone), and computes the new values.
Then :func:`~airflow_delta.spark.changes.stage_row_changes` marks the old rows in
deletion vectors and writes only the updated ones, or rewrites each touched file with its
updated and untouched rows.

A SET target is a column or a field of a struct column (``SET address.city = 'Oslo'``):
the struct is rebuilt with its other fields kept, as Delta does
(:mod:`airflow_delta.spark.nested_assignments`). A SET value is stored the way Spark's
ANSI store assignment stores it (``Dataset.to``), nested fields included:
numbers into any numeric column (an overflow fails the job), anything into a string
column, but never a string into a number, a date or a boolean column: that is refused
before any file is read, naming the column. The updated rows are written by the engine's
writer, which checks NOT NULL, CHECK constraints and invariants
(:class:`~airflow_delta.engine.ConstraintViolationError`). An UPDATE that matches no
row commits nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from pyspark.errors import AnalysisException
from pyspark.errors import ArithmeticException as SparkArithmeticException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import ArrayType, DataType, LongType, MapType, StructField, StructType

from airflow_delta.engine import (
    IdentityColumnWriteError,
    InvalidArgumentError,
    Snapshot,
    TableContext,
    Transaction,
    column_default_expressions,
    generated_columns,
    identity_columns,
)
from airflow_delta.spark.changes import StagedOperation, run_with_retries, stage_row_changes, uses_deletion_vectors
from airflow_delta.spark.column_values import check_generated, is_default_keyword, with_generated
from airflow_delta.spark.file_tasks import ROW_TRACKING_COLUMNS, fits_in_driver, spark_schema, target_dataframe
from airflow_delta.spark.job_result import JobResult
from airflow_delta.spark.nested_assignments import (
    Assigned,
    SetTree,
    assigned_leaves,
    assigned_value,
    resolve_set_targets,
)
from airflow_delta.spark.plan import check_predicate, empty_target, read_candidates
from airflow_delta.spark.spark_errors import spark_error_text
from airflow_delta.spark.specs import UpdateSpec
from airflow_delta.spark.update_worker import UPDATE_METRICS

__all__ = ["UPDATE_METRICS", "resolve_assignments", "run_update"]



def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _nullable(field: StructField) -> StructField:
    # NOT NULL is the engine writer's check (with Delta's error), not the analyzer's:
    # Dataset.to would refuse any nullable expression for a NOT NULL column or struct field up front.
    return StructField(field.name, _nullable_type(field.dataType), True, field.metadata)


def _nullable_type(data_type: DataType) -> DataType:
    if isinstance(data_type, StructType):
        return StructType([_nullable(child) for child in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable_type(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable_type(data_type.keyType), _nullable_type(data_type.valueType), True)
    return data_type


def resolve_assignments(spark: SparkSession, context: TableContext, assignments: Mapping[str, str]) -> SetTree:
    """``assignments`` resolved against the table's schema (see :func:`resolve_set_targets`), each checked by Spark's analyzer (no job).

    A key is a column or a field of a struct column (``address.city``); names match
    ignoring case, as Spark resolves them, and the tree is keyed by the schema's own
    names. Raises :class:`InvalidArgumentError` naming ``UpdateSpec.set[key]`` for a
    column or field the table does not have, a path through an array or a map, an
    expression Spark cannot analyze, or a value type Spark's ANSI store assignment refuses
    for the column or field (a string into an int, for example).
    """
    schema = spark_schema(context)
    tree = resolve_set_targets(schema, assignments, argument="UpdateSpec.set")
    empty = empty_target(spark, context)
    for assigned, field in assigned_leaves(schema, tree):
        try:
            empty.select(F.expr(assigned.expression).alias(field.name)).to(StructType([_nullable(field)]))
        except AnalysisException as error:
            raise InvalidArgumentError(
                f"UpdateSpec.set[{assigned.key!r}]",
                assigned.expression,
                f"a Spark SQL expression over the table's columns whose value Spark can store in "
                f"{assigned.key} ({field.dataType.simpleString()}): {spark_error_text(error)}",
            ) from None
    return tree


def updated_rows(rows: DataFrame, schema: StructType, assignments: SetTree) -> DataFrame:
    """``rows`` with the SET expressions applied (all of them over the old values), in the table's columns and types.

    A struct with SET fields is rebuilt with the other fields kept (:func:`assigned_value`);
    ``Dataset.to`` then casts every value, nested ones too, by store assignment.
    """
    columns: list[Column] = [
        (
            assigned_value(field, assignments[field.name], F.col(_quoted(field.name)), _expression)
            if field.name in assignments
            else F.col(_quoted(field.name))
        ).alias(field.name)
        for field in schema.fields
    ]
    updated = rows.select(*columns).to(StructType([_nullable(field) for field in schema.fields]))
    if ROW_TRACKING_COLUMNS[0] not in rows.columns:
        return updated
    # Row tracking: the updated row keeps its stable row ID; its commit version is NULL, i.e.
    # the new file's defaultRowCommitVersion (this commit), as Delta's UPDATE writes it.
    carried = rows.select(*columns, F.col(ROW_TRACKING_COLUMNS[0]))
    typed = carried.to(
        StructType([*(_nullable(field) for field in schema.fields), StructField(ROW_TRACKING_COLUMNS[0], LongType(), True)])
    )
    return typed.withColumn(ROW_TRACKING_COLUMNS[1], F.lit(None).cast("long"))


def _expression(assigned: Assigned, _field: StructField) -> Column:
    return F.expr(assigned.expression)  # cast by Dataset.to, with the whole row


def _defaults_applied(context: TableContext, assignments: Mapping[str, str]) -> dict[str, str]:
    """``SET column = DEFAULT`` as the column's default expression (NULL when it has none), as Delta resolves it."""
    defaults = {name.casefold(): text for name, text in column_default_expressions(context.metadata.schema_string).items()}
    return {
        key: (defaults.get(key.casefold(), "NULL") if is_default_keyword(value) else value)
        for key, value in assignments.items()
    }


def _refuse_identity_update(context: TableContext, assignments: SetTree) -> None:
    """Delta refuses an UPDATE of any identity column (GENERATED ALWAYS or BY DEFAULT)."""
    for column in identity_columns(context.metadata.schema_string):
        if column.name in assignments:
            raise IdentityColumnWriteError(column.name, "update")


def _with_generated_columns(rows: DataFrame, context: TableContext, assignments: SetTree) -> DataFrame:
    """The updated rows with their generated columns: computed again from the new values, or, where SET gives
    one, checked against its expression (Delta's "Generated Column" constraint) before anything is written."""
    generated = generated_columns(context.metadata.schema_string)
    if not generated:
        return rows
    schema = spark_schema(context)
    given = {name: F.lit(True) for name in generated if name in assignments}
    if given:
        check_generated(rows, generated, schema, given)
    return with_generated(rows, generated, schema, given)


def run_update(
    spark: SparkSession, spec: UpdateSpec, *, before_commit: Callable[[int], None] | None = None
) -> JobResult:
    """Run ``spec`` on ``spark``; the committed version (None if no row matched) and Delta's UPDATE metrics.

    Raises :class:`InvalidArgumentError` for a bad SET (see :func:`resolve_assignments`)
    or a value that does not fit its column (an overflow, found while writing),
    :class:`~airflow_delta.engine.InvalidFilterError` for a bad predicate (both before
    any file is read where Spark's analyzer can tell),
    :class:`~airflow_delta.engine.ConstraintViolationError` for updated rows that break a
    constraint, and the engine's conflict error when a logical conflict outlasts
    ``spec.options.max_attempts``.
    """
    predicate = spec.predicate

    def attempt(txn: Transaction, snapshot: Snapshot, context: TableContext) -> StagedOperation:
        started = time.monotonic()
        use_dvs = uses_deletion_vectors(context, spec.options)
        assignments = resolve_assignments(spark, context, _defaults_applied(context, spec.set))
        _refuse_identity_update(context, assignments)
        if predicate is not None:
            check_predicate(spark, context, predicate)
        files, engine_filter = read_candidates(txn, predicate)
        planned_ms = int((time.monotonic() - started) * 1000)
        # Row groups the predicate cannot match are skipped: a rewrite reads the untouched rows itself.
        in_driver = fits_in_driver(files, spec.options.driver_max_bytes)
        target = target_dataframe(
            spark,
            context,
            files,
            row_group_filter=engine_filter,
            in_driver=in_driver,
            reader=spec.options.reader,
            purpose="find",
        )
        # Kept: the positions and the new values must come from the same rows, read once.
        matched = (target if predicate is None else target.filter(f"({predicate}) IS TRUE")).persist()
        try:
            new_rows = _with_generated_columns(updated_rows(matched, spark_schema(context), assignments), context, assignments)
            changes = stage_row_changes(
                txn, context, files, matched, new_rows, use_dvs, in_driver=in_driver, reader=spec.options.reader,
                removed_change_type="update_preimage", new_change_type="update_postimage",
            )
        except SparkArithmeticException as error:
            raise InvalidArgumentError(
                "UpdateSpec.set", dict(spec.set), f"values that fit their columns: {spark_error_text(error)}"
            ) from None
        finally:
            matched.unpersist()
        metrics = {**changes, "numUpdatedRows": changes.removed_rows}
        if use_dvs:  # Delta's UPDATE counts every file it marks in a DV as removed (its DELETE does not)
            metrics["numRemovedFiles"] = changes.touched_files
        metrics["scanTimeMs"] += planned_ms
        metrics["executionTimeMs"] = int((time.monotonic() - started) * 1000)
        ordered = {key: int(metrics.get(key, 0)) for key in UPDATE_METRICS}
        parameters = {"predicate": [predicate] if predicate is not None else []}
        return StagedOperation("UPDATE", parameters, ordered, commit=changes.removed_rows > 0)

    return run_with_retries(spec, attempt, before_commit=before_commit)
