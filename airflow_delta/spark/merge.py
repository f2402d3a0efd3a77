"""MERGE on plain Spark, committed through the engine: :func:`run_merge`.

As Delta's ``MergeIntoCommand`` does it, in Spark SQL over engine-read target files:

1. The source (a Delta table read through the engine, a parquet path, or a Spark SQL
   query over such views) is read once, numbered and locally checkpointed, so every pass
   and every attempt after a conflict sees the same rows (Delta materializes the source
   for the same reason).
2. The target files the MERGE reads are chosen as Delta chooses them: pruned by the ON
   condition's target-only conjuncts when there is no WHEN NOT MATCHED BY SOURCE clause,
   else the whole table; the transaction records them (and the predicate), so an append
   elsewhere does not conflict.
3. Without WHEN NOT MATCHED BY SOURCE, an inner join on ON finds the matched pairs; a
   source no larger than :data:`BROADCAST_SOURCE_BYTES` (or the session's
   :data:`BROADCAST_SOURCE_CONF`) is broadcast, so the target is scanned in place and
   never shuffled. The source rows whose number is in no pair are the unmatched ones.
   **Insert-only** (only WHEN NOT MATCHED clauses) inserts those; nothing of the target
   is rewritten. With WHEN NOT MATCHED BY SOURCE, one right or full outer join instead.
4. One ``CASE`` picks, per row, the first clause of its group whose condition is TRUE
   (NULL is not TRUE), and the row's new values. Delta's multiple-match rule is checked
   on that: a target row that joins more than one source row fails the MERGE
   (:class:`MultipleSourceRowsMatchedError`), unless the only WHEN MATCHED clause is an
   unconditional DELETE.
5. Updated and deleted target rows leave their files, updated and inserted rows are
   written, through :func:`~airflow_delta.spark.changes.stage_row_changes` (DVs when the
   table enables them, else rewriting touched files), and the commit, retries on logical
   conflicts and exactly-once go through :func:`~airflow_delta.spark.changes.run_with_retries`.

Values are cast to the target column's type (Spark's cast under the session's ANSI
setting). ``UPDATE SET *`` / ``INSERT *`` take the source column of each target column's
name; without schema evolution every target column must be in the source (extra source
columns are ignored), with it the source's other columns are added to the table
(nullable, at the end) and target columns the source lacks keep their value (UPDATE) or
are NULL (INSERT).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import StructField, StructType

from airflow_delta.engine import (
    CHANGE_TYPE_COLUMN,
    DeltaError,
    DeltaTable,
    IdentityColumn,
    IdentityColumnWriteError,
    InvalidArgumentError,
    InvalidFilterError,
    Metadata,
    MultipleSourceRowsMatchedError,
    Snapshot,
    TableContext,
    Transaction,
    column_default_expressions,
    generated_columns,
    identity_columns,
    with_identity_high_water_marks,
)
from airflow_delta.spark.changes import StagedOperation, run_with_retries, stage_row_changes, uses_deletion_vectors
from airflow_delta.spark.column_paths import set_target_paths
from airflow_delta.spark.column_values import check_generated, is_default_keyword, with_generated, with_identity_values
from airflow_delta.spark.file_tasks import (
    FILE_COLUMN,
    ROW_COLUMN,
    ROW_TRACKING_COLUMNS,
    engine_errors_from_executors,
    spark_schema,
    target_dataframe,
    write_dataframe,
)
from airflow_delta.spark.job_result import JobResult
from airflow_delta.spark.merge_common import (
    MAX_SKIPPING_KEYS,
    KeyValues,
    count_clauses,
    equi_keys,
    operation_parameters,
    source_key_filter,
    target_only_filter,
    with_file_metrics,
    zero_merge_metrics,
)
from airflow_delta.spark.nested_assignments import Assigned, SetTree, assigned_value, resolve_set_targets
from airflow_delta.spark.session import UNKNOWN_SIZE_BYTES, size_shuffle_partitions
from airflow_delta.spark.spark_errors import spark_error_text
from airflow_delta.spark.specs import MergeSource, MergeSpec

__all__ = [
    "OPERATION",
    "MergePlan",
    "broadcasts_source",
    "load_source",
    "matched_pairs",
    "materialized_source",
    "merge_outcome",
    "operation_parameters",
    "outcome_of_matches",
    "run_merge",
    "source_bytes",
    "target_only_filter",
]

OPERATION = "MERGE"

# A source at most this large (bytes, Spark's estimate of the materialized source) is
# broadcast to the target's scan tasks; set spark.airflow_delta.merge.broadcastSourceBytes
# to change it (-1: never). It bounds what the driver and every executor hold at once.
BROADCAST_SOURCE_CONF = "spark.airflow_delta.merge.broadcastSourceBytes"
BROADCAST_SOURCE_BYTES = 256 * 1024 * 1024

# Columns the job adds to the joined rows; the prefix keeps them apart from user columns.
_SOURCE_PRESENT = "__airflow_delta_merge_source_present"
# The source row's number, given when the source is materialized: how the rows that matched nothing are found.
SOURCE_ROW_COLUMN = "__airflow_delta_merge_source_row"
_TARGET_PRESENT = "__airflow_delta_merge_target_present"
ACTION_COLUMN = "__airflow_delta_merge_action"
MATCHED_COLUMN = "__airflow_delta_merge_matched"

_UPDATE_KINDS = ("matched_update", "not_matched_by_source_update")
_DELETE_KINDS = ("matched_delete", "not_matched_by_source_delete")


def _quote(name: str) -> str:
    """``name`` as a Spark SQL identifier (backticks doubled inside)."""
    return "`" + name.replace("`", "``") + "`"


def _ref(alias: str, name: str) -> Column:
    return F.col(f"{_quote(alias)}.{_quote(name)}")


def _target_row_id(frame: DataFrame, alias: str | None) -> list[Column]:
    """On a row-tracking table: the target row's stable row ID (NULL for a source row), which an update keeps."""
    row_id = ROW_TRACKING_COLUMNS[0]
    if row_id not in frame.columns:
        return []
    return [(_ref(alias, row_id) if alias is not None else F.lit(None).cast("long")).alias(row_id)]


# ---------------------------------------------------------------------------------------
# The source


def load_source(spark: SparkSession, source: MergeSource) -> DataFrame:
    """The source rows: a Delta table read through the engine (at its version), a parquet path, or a query over views."""
    if source.delta is not None:
        table = DeltaTable(source.delta.uri, source.delta.storage_options or None)
        snapshot = table.snapshot(source.delta.version)
        frame = target_dataframe(spark, table.context(snapshot), snapshot.add_actions)
        return frame.drop(FILE_COLUMN, ROW_COLUMN)
    if source.parquet is not None:
        return spark.read.parquet(source.parquet)
    for name, view in source.views.items():
        load_source(spark, view).createOrReplaceTempView(name)
    assert source.query is not None  # MergeSource holds exactly one of the three
    return spark.sql(source.query)


# ---------------------------------------------------------------------------------------
# Planning: the clauses resolved against the target's and the source's columns


@dataclass(frozen=True)
class MergePlan:
    """A MERGE's clauses resolved against the target schema (evolved when asked) and the source columns.

    ``schema`` is the schema rows are written in: the target's, plus the source columns
    that schema evolution adds (``added``).
    """

    spec: MergeSpec
    target_schema: StructType
    source_schema: StructType
    schema: StructType
    added: tuple[StructField, ...]
    # Values the writer supplies, from the target's metadata (none without it).
    identity: tuple[IdentityColumn, ...] = ()
    generated: Mapping[str, str] = dataclasses.field(default_factory=dict)
    defaults: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(
        cls, spec: MergeSpec, target_schema: StructType, source_schema: StructType, metadata: Metadata | None = None
    ) -> MergePlan:
        target_names = {f.name.casefold() for f in target_schema.fields}
        added: list[StructField] = []
        if spec.schema_evolution and any(clause.star for clause in spec.clauses):
            added = [
                StructField(f.name, f.dataType, True, f.metadata)
                for f in source_schema.fields
                if f.name.casefold() not in target_names
            ]
        schema = StructType([*target_schema.fields, *added])
        supplied: dict[str, Any] = {}
        if metadata is not None:
            supplied = {
                "identity": identity_columns(metadata.schema_string),
                "generated": generated_columns(metadata.schema_string),
                "defaults": column_default_expressions(metadata.schema_string),
            }
        plan = cls(spec, target_schema, source_schema, schema, tuple(added), **supplied)
        plan._check_clauses()
        plan._check_identity_writes()
        return plan

    def _clause_gives(self, index: int, column: str) -> bool:
        """Whether clause ``index`` gives ``column`` a value of its own (not DEFAULT, not left out)."""
        clause = self.spec.clauses[index]
        key = column.casefold()
        for target, expression in (clause.assignments or {}).items():
            if target.casefold() == key:
                return not is_default_keyword(expression)
        if clause.star:
            if not self.spec.schema_evolution:
                return True  # every target column, from the source's column of its name
            return key in {f.name.casefold() for f in self.source_schema.fields}
        return False

    def _check_identity_writes(self) -> None:
        """Delta's refusals: an UPDATE of an identity column, an INSERT giving a GENERATED ALWAYS one."""
        for index, clause in enumerate(self.spec.clauses):
            if clause.kind.endswith("_delete"):
                continue
            for column in self.identity:
                if not self._clause_gives(index, column.name):
                    continue
                if clause.kind in _UPDATE_KINDS:
                    raise IdentityColumnWriteError(column.name, "update")
                if column.generated_always:
                    raise IdentityColumnWriteError(column.name, "insert")

    def clauses_giving(self, column: str) -> list[int]:
        """The writing clauses that give ``column`` their own value."""
        return [
            index
            for index, clause in enumerate(self.spec.clauses)
            if not clause.kind.endswith("_delete") and self._clause_gives(index, column)
        ]

    def identity_generating_clauses(self, column: str) -> list[int]:
        """The INSERT clauses whose rows get new values of identity column ``column``."""
        return [
            index
            for index, clause in enumerate(self.spec.clauses)
            if clause.kind == "not_matched_insert" and not self._clause_gives(index, column)
        ]

    @property
    def insert_only(self) -> bool:
        return all(clause.kind == "not_matched_insert" for clause in self.spec.clauses)

    @property
    def only_unconditional_delete(self) -> bool:
        """Delta's exception to the multiple-match error: every joined pair of a target row deletes it."""
        matched = [c for c in self.spec.clauses if c.group == "WHEN MATCHED"]
        return len(matched) == 1 and matched[0].kind == "matched_delete" and matched[0].condition is None

    def _set_targets(self, index: int) -> SetTree:
        """Clause ``index``'s assignments resolved against :attr:`schema`: columns, or fields of struct columns."""
        assignments = self.spec.clauses[index].assignments or {}
        return resolve_set_targets(self.schema, assignments, argument=f"MergeSpec.clauses[{index}].assignments")

    def _check_clauses(self) -> None:
        for index, clause in enumerate(self.spec.clauses):
            self._set_targets(index)
            if clause.star and not self.spec.schema_evolution:
                source_names = {f.name.casefold() for f in self.source_schema.fields}
                missing = [f.name for f in self.target_schema.fields if f.name.casefold() not in source_names]
                if missing:
                    star = "UPDATE SET *" if clause.kind == "matched_update" else "INSERT *"
                    raise InvalidArgumentError(
                        f"MergeSpec.clauses[{index}].star",
                        True,
                        f"a source with every target column for {star}; it lacks {missing}: list the assignments, "
                        "or turn on schema evolution (then UPDATE keeps those columns and INSERT sets them NULL)",
                    )

    def target_columns_read(self) -> list[str]:
        """The target columns the MERGE reads: those its expressions name, and those an UPDATE keeps.

        Delta reads only these in its join too. Any identifier part that names a target
        column counts (``t.s.x`` and ``s.x`` may both mean the struct ``s``): reading a
        column too many costs little, one too few fails the job. Text sqlglot cannot
        parse reads every column.
        """
        target_names = {f.name.casefold(): f.name for f in self.target_schema.fields}
        source_names = {f.name.casefold() for f in self.source_schema.fields}
        texts = [self.spec.on]
        needed: set[str] = set()
        for clause in self.spec.clauses:
            if clause.condition is not None:
                texts.append(clause.condition)
            texts.extend((clause.assignments or {}).values())
            if clause.kind in _UPDATE_KINDS:
                # Wholly assigned columns need no read; a struct with SET fields keeps its others.
                assigned = {
                    path[0].casefold()
                    for path in set_target_paths("assignments", clause.assignments or {}).values()
                    if len(path) == 1
                }
                for key in target_names:
                    if key not in assigned and not (clause.star and key in source_names):
                        needed.add(key)  # kept as it was: read to be written again
        for text in texts:
            try:
                tree = sqlglot.parse_one(text, read="spark")
            except sqlglot.errors.SqlglotError:
                return list(self.target_schema.names)
            for column in tree.find_all(sqlglot.exp.Column):
                for part in column.parts:
                    if part.name.casefold() in target_names:
                        needed.add(part.name.casefold())
        # At least one column: a frame of no columns would lose its rows' count.
        return [f.name for f in self.target_schema.fields if f.name.casefold() in needed] or self.target_schema.names[:1]

    def values(self, index: int) -> list[Column]:
        """The row clause ``index`` writes, one value per column of :attr:`schema`, cast to the column's type.

        A struct whose fields the clause SETs is rebuilt with its other fields kept (each
        SET value cast to its field's type), as Delta does.
        """
        clause = self.spec.clauses[index]
        alias_t, alias_s = self.spec.target_alias, self.spec.source_alias
        assigned = self._set_targets(index)
        source_names = {f.name.casefold(): f.name for f in self.source_schema.fields}
        target_names = {f.name.casefold() for f in self.target_schema.fields}
        is_update = clause.kind in _UPDATE_KINDS
        out = []
        for field in self.schema.fields:
            key = field.name.casefold()
            target = assigned.get(field.name)
            if isinstance(target, Assigned) and is_default_keyword(target.expression):
                # SET / INSERT ... DEFAULT: the column's default (NULL without one); identity and
                # generated columns get their values after (see _with_supplied_values).
                default = self.defaults.get(field.name)
                out.append((F.expr(default) if default is not None else F.lit(None)).cast(field.dataType))
                continue
            if target is not None:
                out.append(assigned_value(field, target, _ref(alias_t, field.name), _cast_value))
                continue
            if clause.star and key in source_names:
                value = _ref(alias_s, source_names[key])
            elif is_update and key in target_names:
                value = _ref(alias_t, field.name)  # an UPDATE keeps what it does not assign
            elif field.name in self.defaults and not is_update:
                value = F.expr(self.defaults[field.name])  # INSERT leaving out a column with a default
            else:
                value = F.lit(None)  # INSERT of an unlisted column; a column the target does not have yet
            out.append(value.cast(field.dataType))
        return out


def _cast_value(assigned: Assigned, field: StructField) -> Column:
    return F.expr(assigned.expression).cast(field.dataType)


def _first_true(conditions: Sequence[tuple[str | None, int]]) -> Column:
    """The index of the first clause whose condition is TRUE (NULL is not), else NULL."""
    result: Any = F
    for condition, index in conditions:
        test = F.lit(True) if condition is None else F.coalesce(F.expr(condition), F.lit(False))
        result = result.when(test, F.lit(index))
    return result if result is not F else F.lit(None).cast("int")


def _join_type(plan: MergePlan) -> str:
    kinds = {clause.group for clause in plan.spec.clauses}
    inserts = "WHEN NOT MATCHED" in kinds
    by_source = "WHEN NOT MATCHED BY SOURCE" in kinds
    if inserts and by_source:
        return "full_outer"
    if inserts:
        return "left_outer"
    return "right_outer" if by_source else "inner"


def merge_outcome(plan: MergePlan, source: DataFrame, target: DataFrame) -> DataFrame:
    """The joined rows a MERGE with a WHEN NOT MATCHED BY SOURCE clause acts on: one outer join of source and target.

    One row per joined pair that a clause changes or that matched, and per unmatched
    row of either side that a clause changes. Columns: :data:`FILE_COLUMN`,
    :data:`ROW_COLUMN` (of the target row, NULL for a source row that matched none),
    :data:`ACTION_COLUMN` (the index in ``plan.spec.clauses`` of the clause that applies,
    NULL for no change), :data:`MATCHED_COLUMN` (the pair matched on ON), then the
    written values in ``plan.schema``'s columns. Every target row takes part, so the
    whole target is shuffled; MERGEs without such a clause go through
    :func:`matched_pairs` and :func:`outcome_of_matches` instead.
    """
    spec = plan.spec
    src = source.withColumn(_SOURCE_PRESENT, F.lit(True)).alias(spec.source_alias)
    tgt = target.withColumn(_TARGET_PRESENT, F.lit(True)).alias(spec.target_alias)
    joined = src.join(tgt, F.expr(spec.on), _join_type(plan))
    groups = _clause_groups(plan)
    source_present = F.col(_SOURCE_PRESENT).isNotNull()
    target_present = F.col(_TARGET_PRESENT).isNotNull()
    matched = source_present & target_present
    action = (
        F.when(matched, _first_true(groups.get("WHEN MATCHED", [])))
        .when(~target_present, _first_true(groups.get("WHEN NOT MATCHED", [])))
        .otherwise(_first_true(groups.get("WHEN NOT MATCHED BY SOURCE", [])))
    )
    with_action = joined.select("*", action.alias(ACTION_COLUMN), matched.alias(MATCHED_COLUMN))
    return with_action.where(F.col(ACTION_COLUMN).isNotNull() | F.col(MATCHED_COLUMN)).select(
        _ref(spec.target_alias, FILE_COLUMN).alias(FILE_COLUMN),
        _ref(spec.target_alias, ROW_COLUMN).alias(ROW_COLUMN),
        *_target_row_id(target, spec.target_alias),
        F.col(ACTION_COLUMN),
        F.col(MATCHED_COLUMN),
        *_written_columns(plan),
    )


def matched_pairs(plan: MergePlan, source: DataFrame, target: DataFrame, *, broadcast_source: bool) -> DataFrame:
    """The (source row, target row) pairs that ON joins, for a MERGE without WHEN NOT MATCHED BY SOURCE.

    An inner join: with ``broadcast_source`` the source is sent to every task and the
    target is read in place (a broadcast hash join, no shuffle of the target), which is
    what makes a MERGE of a small source into a large table cost one scan of the
    target's join columns. Columns: :data:`SOURCE_ROW_COLUMN`, :data:`FILE_COLUMN`,
    :data:`ROW_COLUMN`, :data:`ACTION_COLUMN` (the WHEN MATCHED clause that applies, or
    NULL), :data:`MATCHED_COLUMN` (always TRUE), then the written values.
    """
    spec = plan.spec
    src = (F.broadcast(source) if broadcast_source else source).alias(spec.source_alias)
    joined = src.join(target.alias(spec.target_alias), F.expr(spec.on), "inner")
    matched_group = _clause_groups(plan).get("WHEN MATCHED", [])
    with_action = joined.select("*", _first_true(matched_group).alias(ACTION_COLUMN))
    return with_action.select(
        _ref(spec.source_alias, SOURCE_ROW_COLUMN).alias(SOURCE_ROW_COLUMN),
        _ref(spec.target_alias, FILE_COLUMN).alias(FILE_COLUMN),
        _ref(spec.target_alias, ROW_COLUMN).alias(ROW_COLUMN),
        *_target_row_id(target, spec.target_alias),
        F.col(ACTION_COLUMN),
        F.lit(True).alias(MATCHED_COLUMN),
        *_written_columns(plan, [index for _, index in matched_group]),
    )


def outcome_of_matches(plan: MergePlan, source: DataFrame, pairs: DataFrame) -> DataFrame:
    """:func:`merge_outcome`'s rows from :func:`matched_pairs`: the pairs, and the source rows no pair holds.

    A source row matched no target row exactly when its :data:`SOURCE_ROW_COLUMN` is in
    no pair: an anti join of the source with the pairs' row numbers, which reads the
    source again and never the target.
    """
    matched = pairs.drop(SOURCE_ROW_COLUMN)
    if "WHEN NOT MATCHED" not in _clause_groups(plan):
        return matched
    return matched.unionByName(_unmatched_rows(plan, source, pairs))


def insert_only_rows(plan: MergePlan, source: DataFrame, pairs: DataFrame) -> DataFrame:
    """Insert-only MERGE: the rows to insert (source rows in no pair of :func:`matched_pairs` that take an INSERT clause)."""
    return _unmatched_rows(plan, source, pairs).drop(FILE_COLUMN, ROW_COLUMN, MATCHED_COLUMN, *ROW_TRACKING_COLUMNS)


def _unmatched_rows(plan: MergePlan, source: DataFrame, pairs: DataFrame) -> DataFrame:
    spec = plan.spec
    taken = pairs.select(SOURCE_ROW_COLUMN)
    unmatched = source.join(taken, SOURCE_ROW_COLUMN, "left_anti").alias(spec.source_alias)
    group = _clause_groups(plan).get("WHEN NOT MATCHED", [])
    chosen = unmatched.select("*", _first_true(group).alias(ACTION_COLUMN)).where(F.col(ACTION_COLUMN).isNotNull())
    return chosen.select(
        F.lit(None).cast("string").alias(FILE_COLUMN),
        F.lit(None).cast("long").alias(ROW_COLUMN),
        *_target_row_id(pairs, None),
        F.col(ACTION_COLUMN),
        F.lit(False).alias(MATCHED_COLUMN),
        *_written_columns(plan, [index for _, index in group]),
    )


def _clause_groups(plan: MergePlan) -> dict[str, list[tuple[str | None, int]]]:
    """Per clause group, its clauses' (condition, index in ``plan.spec.clauses``), in order."""
    groups: dict[str, list[tuple[str | None, int]]] = {}
    for index, clause in enumerate(plan.spec.clauses):
        groups.setdefault(clause.group, []).append((clause.condition, index))
    return groups


def _written_columns(plan: MergePlan, clauses: Sequence[int] | None = None) -> list[Column]:
    """Per column of ``plan.schema``, the value the row's clause (:data:`ACTION_COLUMN`) writes; NULL when none applies.

    ``clauses`` (indexes) limits the CASE to the clauses that can apply to the frame's
    rows: a frame of unmatched source rows has no target columns to evaluate an UPDATE on.
    """
    indexes = range(len(plan.spec.clauses)) if clauses is None else clauses
    per_clause = [(index, plan.values(index)) for index in indexes]
    written = []
    for position, field in enumerate(plan.schema.fields):
        value: Any = F
        for index, values in per_clause:
            value = value.when(F.col(ACTION_COLUMN) == index, values[position])
        written.append((value if per_clause else F.lit(None).cast(field.dataType)).alias(field.name))
    return written


# ---------------------------------------------------------------------------------------
# Target files


def source_key_values(source: DataFrame, columns: Sequence[str]) -> dict[str, KeyValues]:
    """Per source column: its (min, max, distinct values when at most :data:`MAX_SKIPPING_KEYS`), NULLs left out.

    One aggregation over the materialized source, and one more for the distinct values
    of the keys that have few.
    """
    if not columns:
        return {}
    aggregates = []
    for i, name in enumerate(columns):
        column = F.col(_quote(name))
        aggregates += [F.min(column).alias(f"lo{i}"), F.max(column).alias(f"hi{i}"), F.approx_count_distinct(column).alias(f"n{i}")]
    row = source.agg(*aggregates).collect()[0]
    out: dict[str, KeyValues] = {}
    for i, name in enumerate(columns):
        distinct = None
        if row[f"n{i}"] is not None and int(row[f"n{i}"]) <= MAX_SKIPPING_KEYS // 2:
            # approx_count_distinct errs by a few percent: collect at most one more than the limit.
            values = [r[0] for r in source.select(_quote(name)).where(F.col(_quote(name)).isNotNull()).distinct().limit(MAX_SKIPPING_KEYS + 1).collect()]
            distinct = values if len(values) <= MAX_SKIPPING_KEYS else None
        out[name] = (row[f"lo{i}"], row[f"hi{i}"], distinct)
    return out


def read_filter(spec: MergeSpec, target_columns: Sequence[str], skipping: str | None) -> str | None:
    """The target files' read predicate: ON's target-only conjuncts and the source's key filter, ANDed."""
    parts = [text for text in (target_only_filter(spec, target_columns), skipping) if text is not None]
    return " AND ".join(f"({text})" for text in parts) or None




def _read_target_files(txn: Transaction, spec: MergeSpec, plan: MergePlan, source: DataFrame) -> pa.Table:
    """The target files to join against, recorded as read: pruned by ON's target-only conjuncts, as Delta
    prunes, and skipped by the source's join keys (:mod:`~airflow_delta.spark.merge_common`)."""
    if not any(clause.group == "WHEN NOT MATCHED BY SOURCE" for clause in spec.clauses):
        keys = equi_keys(spec, plan.target_schema.names, plan.source_schema.names)
        skipping = None
        if keys:
            values = source_key_values(source, sorted({source_column for _, source_column in keys}))
            types = {field.name: field.type for field in txn.snapshot.schema} if txn.snapshot is not None else {}
            skipping = source_key_filter(
                {target: (types[target], values[source_column]) for target, source_column in keys if target in types}
            )
        for text in dict.fromkeys([read_filter(spec, plan.target_schema.names, skipping), target_only_filter(spec, plan.target_schema.names)]):
            if text is None:
                continue
            try:
                return txn.read_files(text)
            except DeltaError:
                pass  # the engine cannot prune on this text (Spark-only functions): try less, then the whole table
    return txn.read_files(None)


# ---------------------------------------------------------------------------------------
# Schema evolution


def _evolved_metadata(metadata: Metadata, added: Sequence[StructField]) -> Metadata:
    """``metadata`` with ``added`` columns at the end; under column mapping each gets an id and a physical name."""
    schema = json.loads(metadata.schema_string)
    configuration = dict(metadata.configuration)
    mapping = configuration.get("delta.columnMapping.mode", "none")
    next_id = int(configuration.get("delta.columnMapping.maxColumnId", "0"))
    for field in added:
        as_json = field.jsonValue()
        if mapping != "none":
            if isinstance(field.dataType, StructType) or "struct" in field.dataType.simpleString():
                raise InvalidArgumentError(
                    "MergeSpec.schema_evolution",
                    True,
                    f"source columns of simple types to add to a column-mapped table; {field.name!r} is "
                    f"{field.dataType.simpleString()}: add it to the table first",
                )
            next_id += 1
            as_json["metadata"] = {
                **as_json.get("metadata", {}),
                "delta.columnMapping.id": next_id,
                "delta.columnMapping.physicalName": f"col-{uuid.uuid4()}",
            }
        schema["fields"].append(as_json)
    if mapping != "none":
        configuration["delta.columnMapping.maxColumnId"] = str(next_id)
    return replace(metadata, schema_string=json.dumps(schema), configuration=configuration)


# ---------------------------------------------------------------------------------------
# Metrics and parameters, under Delta's names


@contextmanager
def _analyzed(spec: MergeSpec) -> Iterator[None]:
    """Spark's analysis errors (unknown columns, bad expressions, non-boolean conditions) as :class:`InvalidFilterError`.

    The message is Spark's whole (the column, its suggestions), without the job's internal
    columns (:func:`~airflow_delta.spark.spark_errors.spark_error_text`).
    """
    try:
        yield
    except AnalysisException as error:  # ParseException is one too
        raise InvalidFilterError(
            spec.on,
            f"Spark cannot analyze the MERGE's ON condition, clause conditions and values over the target "
            f"({spec.target_alias}) and source ({spec.source_alias}) columns: {spark_error_text(error)}",
        ) from None


@contextmanager
def _persisted(frame: DataFrame) -> Iterator[DataFrame]:
    persisted = frame.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        yield persisted
    finally:
        persisted.unpersist()


# ---------------------------------------------------------------------------------------
# The job


def run_merge(
    spark: SparkSession, spec: MergeSpec, *, before_commit: Callable[[int], None] | None = None
) -> JobResult:
    """Run ``spec`` on ``spark``: plan, join, check, write, and commit through the engine (see the module docstring).

    ``before_commit(attempt)`` runs after an attempt staged its actions, before it commits
    (tests let another writer commit in between).
    """
    run_started = time.monotonic()  # Delta's executionTimeMs covers the whole command, source included
    with engine_errors_from_executors():
        source, num_source_rows = materialized_source(load_source(spark, spec.source))
        materialized_ms = _ms_since(run_started)
        broadcast = broadcasts_source(spark, source, num_source_rows)

        def attempt(txn: Transaction, snapshot: Snapshot, context: TableContext) -> StagedOperation:
            with ExitStack() as stack:
                staged = _attempt(spark, spec, source, num_source_rows, broadcast, run_started, txn, snapshot, context, stack)
            return staged._replace(metrics={**staged.metrics, "materializeSourceTimeMs": materialized_ms})

        return run_with_retries(spec, attempt, before_commit=before_commit)


def materialized_source(frame: DataFrame) -> tuple[DataFrame, int]:
    """The source rows, numbered (:data:`SOURCE_ROW_COLUMN`) and kept in the application: read once for every
    attempt; and their count (``numSourceRows``), from the same pass.

    A local checkpoint, not a cache: its lineage is cut, so a lost block fails the job
    instead of being recomputed. A recomputed source could number its rows differently
    (a query's shuffle order), and the anti join that finds unmatched source rows by
    number would then insert a matched row or drop an unmatched one.

    The checkpoint is lazy and the count is the job that fills it: one pass over the
    source reads, numbers, stores and counts it (an eager checkpoint followed by a count
    read the stored rows a second time). Spark cuts the lineage when that job ends.
    """
    if SOURCE_ROW_COLUMN in frame.columns:
        raise InvalidArgumentError("MergeSpec.source", SOURCE_ROW_COLUMN, "a source without this reserved column name")
    numbered = frame.withColumn(SOURCE_ROW_COLUMN, F.monotonically_increasing_id())
    checkpointed = numbered.localCheckpoint(eager=False, storageLevel=StorageLevel.MEMORY_AND_DISK)
    return checkpointed, checkpointed.count()


def _estimated_bytes(frame: DataFrame) -> int:
    """The optimizer's size of ``frame``; 0 when it has none."""
    try:
        return int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # a private JVM surface: sizing is an optimisation only
        return 0


def source_bytes(source: DataFrame, num_source_rows: int | None = None) -> int:
    """The size of the materialized source: the optimizer's, or its rows times Spark's row size.

    A parquet or query source carries the optimizer's statistics through its checkpoint. A
    Delta source is read through the engine (a Python scan), so Spark has no size for it
    and says Long.MaxValue: then a 23-row source would never be broadcast and its shuffles
    would keep Spark's 200 partitions. Its row count is known once it is materialized, and
    Spark's default size of a row of its schema makes the estimate the planner would make.
    """
    estimate = _estimated_bytes(source)
    if 0 < estimate < UNKNOWN_SIZE_BYTES or num_source_rows is None:
        return estimate
    try:
        row_bytes = int(source._jdf.schema().defaultSize())
    except Exception:  # a private JVM surface: sizing is an optimisation only
        return estimate
    return num_source_rows * max(1, row_bytes)


def broadcasts_source(spark: SparkSession, source: DataFrame, num_source_rows: int | None = None) -> bool:
    """Whether the matching join sends the source to every task: its size is known and at most the threshold.

    The threshold is the session's ``spark.airflow_delta.merge.broadcastSourceBytes``
    (:data:`BROADCAST_SOURCE_BYTES` by default; -1 never broadcasts). The size is the
    optimizer's estimate of the materialized source, or, when Spark has none (a Delta
    source), its ``num_source_rows`` times Spark's row size (:func:`source_bytes`).
    """
    threshold = int(spark.conf.get(BROADCAST_SOURCE_CONF, str(BROADCAST_SOURCE_BYTES)) or BROADCAST_SOURCE_BYTES)
    if threshold < 0:
        return False
    return source_bytes(source, num_source_rows) <= threshold


def _attempt(
    spark: SparkSession,
    spec: MergeSpec,
    source: DataFrame,
    num_source_rows: int,
    broadcast_source: bool,
    run_started: float,
    txn: Transaction,
    snapshot: Snapshot,
    context: TableContext,
    stack: ExitStack,
) -> StagedOperation:
    started = time.monotonic()
    source_schema = StructType([f for f in source.schema.fields if f.name != SOURCE_ROW_COLUMN])
    plan = MergePlan.of(spec, spark_schema(context), source_schema, context.metadata)
    metrics = zero_merge_metrics()
    metrics["numSourceRows"] = num_source_rows
    write_context = context
    if plan.added:
        evolved = _evolved_metadata(context.metadata, plan.added)
        txn.set_metadata(evolved)
        write_context = replace(context, metadata=evolved)
    files = _read_target_files(txn, spec, plan, source)
    metrics["numTargetFilesBeforeSkipping"] = snapshot.add_actions.num_rows
    metrics["numTargetFilesAfterSkipping"] = files.num_rows
    # The join's shuffles sized to the source and the candidate files, not to Spark's default 200.
    candidate_bytes = int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0
    size_shuffle_partitions(spark, candidate_bytes + source_bytes(source, num_source_rows))
    target = target_dataframe(spark, context, files, plan.target_columns_read(), reader=spec.options.reader, purpose="join")
    parameters = operation_parameters(spec)

    # Building the frames runs Spark's analyzer (no job): a bad column or expression fails here.
    with _analyzed(spec):
        if "WHEN NOT MATCHED BY SOURCE" in _clause_groups(plan):
            rows = merge_outcome(plan, source.drop(SOURCE_ROW_COLUMN), target)
        else:
            # Kept: the anti join for unmatched source rows reads the pairs again, not the target.
            pairs = stack.enter_context(_persisted(matched_pairs(plan, source, target, broadcast_source=broadcast_source)))
            if plan.insert_only:
                rows = insert_only_rows(plan, source, pairs)
            else:
                rows = outcome_of_matches(plan, source, pairs)
        rows, high_water_marks = _with_supplied_values(plan, rows)
    if high_water_marks:
        # The commit moves the identity columns' high-water marks (a metadata update Delta tags as identity-only).
        marked = with_identity_high_water_marks(write_context.metadata, high_water_marks)
        if marked is not write_context.metadata:
            txn.set_metadata(marked)
            write_context = replace(write_context, metadata=marked)

    if plan.insert_only:
        # Delta's insert-only MERGE: an append of the unmatched source rows; the target is only read.
        with _persisted(rows) as inserted:
            _check_generated(plan, inserted)
            counts = _counts_by_action(inserted)
            metrics["scanTimeMs"] = _ms_since(started)
            count_clauses(metrics, spec, counts)
            if not counts and not plan.added:
                return _finish(metrics, run_started, parameters, commit=False)
            rewrite_started = time.monotonic()
            adds = write_dataframe(write_context, inserted.drop(ACTION_COLUMN)) if counts else []
        txn.add_files(adds, written_for_this_commit=True)
        metrics["rewriteTimeMs"] = _ms_since(rewrite_started)
        changes = {"numAddedFiles": len(adds), "numAddedBytes": sum(add.size for add in adds)}
        return _finish(with_file_metrics(metrics, changes), run_started, parameters)

    with _persisted(rows) as outcome:
        overcount = _check_multiple_matches(plan, outcome)
        _check_generated(plan, outcome)
        counts = _counts_by_action(outcome)
        metrics["scanTimeMs"] = _ms_since(started)
        count_clauses(metrics, spec, counts)
        metrics["numTargetRowsMatchedDeleted"] -= overcount
        metrics["numTargetRowsDeleted"] -= overcount
        if not counts and not plan.added:
            return _finish(metrics, run_started, parameters, commit=False)
        kinds = [clause.kind for clause in spec.clauses]
        removing = [i for i, kind in enumerate(kinds) if kind in _UPDATE_KINDS or kind in _DELETE_KINDS]
        writing = [i for i, kind in enumerate(kinds) if kind in _UPDATE_KINDS or kind == "not_matched_insert"]
        action = F.col(ACTION_COLUMN)
        updating = [i for i, kind in enumerate(kinds) if kind in _UPDATE_KINDS]
        # Change Data Feed: each row's _change_type follows its clause (used on CDF tables only).
        removed = outcome.where(action.isin(removing)).select(
            FILE_COLUMN, ROW_COLUMN,
            F.when(action.isin(updating), "update_preimage").otherwise("delete").alias(CHANGE_TYPE_COLUMN),
        )
        if overcount:
            removed = removed.distinct()
        # Row tracking: an updated row keeps its row ID and takes this commit's version (NULL:
        # the new file's defaultRowCommitVersion); an inserted row gets fresh ones.
        tracking = (
            [F.col(ROW_TRACKING_COLUMNS[0]), F.lit(None).cast("long").alias(ROW_TRACKING_COLUMNS[1])]
            if ROW_TRACKING_COLUMNS[0] in outcome.columns
            else []
        )
        new_rows = (
            outcome.where(action.isin(writing)).select(
                *plan.schema.names,
                F.when(action.isin(updating), "update_postimage").otherwise("insert").alias(CHANGE_TYPE_COLUMN),
                *tracking,
            )
            if writing
            else None
        )
        changes = stage_row_changes(
            txn,
            write_context,
            files,
            removed,
            new_rows,
            uses_deletion_vectors(context, spec.options),
            reader=spec.options.reader,
        )
    return _finish(with_file_metrics(metrics, changes), run_started, parameters)


def _action_in(indexes: Sequence[int]) -> Column:
    return F.col(ACTION_COLUMN).isin(list(indexes)) if indexes else F.lit(False)


def _with_supplied_values(plan: MergePlan, rows: DataFrame) -> tuple[DataFrame, dict[str, int]]:
    """``rows`` with the identity values INSERTs generate and the generated columns computed; the identity columns' furthest new values."""
    marks: dict[str, int] = {}
    for column in plan.identity:
        generating = plan.identity_generating_clauses(column.name)
        if generating:
            rows, furthest = with_identity_values(rows, [column], _action_in(generating))
            marks.update(furthest)
    given = {name: _action_in(plan.clauses_giving(name)) for name in plan.generated}
    return with_generated(rows, plan.generated, plan.schema, given), marks


def _check_generated(plan: MergePlan, rows: DataFrame) -> None:
    """Delta's "Generated Column" constraint on the rows whose clause gave a generated column's value."""
    given = {name: _action_in(plan.clauses_giving(name)) for name in plan.generated if plan.clauses_giving(name)}
    if given:
        check_generated(rows, plan.generated, plan.schema, given)


def _counts_by_action(frame: DataFrame) -> dict[int, int]:
    rows = frame.where(F.col(ACTION_COLUMN).isNotNull()).groupBy(ACTION_COLUMN).count().collect()
    return {int(row[ACTION_COLUMN]): int(row["count"]) for row in rows}


def _check_multiple_matches(plan: MergePlan, outcome: DataFrame) -> int:
    """Delta's rule: a target row joined with more than one source row fails the MERGE; returns the overcount.

    The exception is a MERGE whose only WHEN MATCHED clause is an unconditional DELETE:
    every pair deletes the same row, so it is not ambiguous; the extra pairs are then
    the overcount of deleted rows, returned to be subtracted from the metrics.
    """
    repeated = outcome.where(F.col(MATCHED_COLUMN)).groupBy(FILE_COLUMN, ROW_COLUMN).count().where(F.col("count") > 1)
    summary = repeated.agg(F.count(F.lit(1)).alias("rows"), F.sum("count").alias("pairs")).collect()[0]
    rows, pairs = int(summary["rows"] or 0), int(summary["pairs"] or 0)
    if rows == 0:
        return 0
    if not plan.only_unconditional_delete:
        raise MultipleSourceRowsMatchedError(rows)
    return pairs - rows


def _finish(
    metrics: dict[str, int], run_started: float, parameters: Mapping[str, str], *, commit: bool = True
) -> StagedOperation:
    metrics["executionTimeMs"] = _ms_since(run_started)
    return StagedOperation(OPERATION, dict(parameters), metrics, commit)


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
