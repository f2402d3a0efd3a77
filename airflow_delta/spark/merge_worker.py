"""MERGE in the Airflow worker, with the engine and pyarrow: no Spark job, no JVM.

A small MERGE spends seconds starting Spark and milliseconds changing rows. This module
runs it in the worker's process, with Delta's semantics, when every expression it
evaluates is one the engine evaluates exactly as Spark SQL does in any session;
:func:`worker_refusal` says why not otherwise, and the MERGE goes to Spark
(:mod:`airflow_delta.spark.merge`). Nothing is approximated: what is not provably the
same is Spark's.

What runs here (:func:`worker_refusal` checks each point before anything is read):

- the source is a Delta table (read through the engine at its version, deletion vectors
  applied) or a parquet file or directory on the local file system without Hive-style
  partition directories, whose columns are of types Spark reads as pyarrow does (no
  unsigned integers, no nanosecond timestamps, no nested types); a query is Spark SQL;
- ON is a conjunction with at least one ``target.column = source.column`` of the same
  kind (integers, strings, dates, booleans; no floating point: Spark's join treats NaN
  and -0.0 its own way), the other conjuncts and every clause condition in the subset
  of :func:`~airflow_delta.spark.engine_rows.condition_evaluates_as_spark` (comparisons,
  IN, BETWEEN, IS NULL, AND/OR/NOT of columns and plain literals of the same kind);
- each value a clause writes (SET, INSERT, ``*``) is a column, NULL or a plain literal
  whose cast to the target column is the identity or a widening Spark does exactly
  (a smaller integer to a larger one, float to double, an integer literal that fits);
- no schema evolution and no assignment to a struct field.

The MERGE itself (:func:`stage_merge`), as the Spark job does it: the target files are
chosen and recorded as the Spark job chooses them (ON's target-only conjuncts and the
source's key ranges; the whole table with WHEN NOT MATCHED BY SOURCE); their live rows
are read with their physical positions; a hash join on the equality keys (NULL keys
never match), the remaining ON conjuncts on the pairs; per group the first clause whose
condition is TRUE; Delta's multiple-match rule; removed rows marked in deletion vectors
(where the table uses them) or their files rewritten; new rows written with the
engine's writer (column mapping, partitions, constraints); change data on CDF tables.
The metrics and ``operationParameters`` are the Spark job's.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from airflow_delta.engine import (
    CHANGE_TYPE_COLUMN,
    DeltaError,
    DeltaTable,
    InvalidArgumentError,
    MultipleSourceRowsMatchedError,
    Snapshot,
    TableContext,
    Transaction,
    bool_array,
    combined,
    condition_mask,
    indices_to_numpy,
    inner_hash_join,
    int32_array,
    int64_array,
    int64_to_numpy,
    mask_to_numpy,
    read_live_rows,
    split_by_row_groups,
    write_change_data_files,
    write_data_files,
    writer_features,
)
from airflow_delta.spark.engine_rows import condition_evaluates_as_spark, value_kind
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
from airflow_delta.spark.specs import MergeSource, MergeSpec

__all__ = ["STREAM_BYTES", "BoundMerge", "bind_merge", "candidate_files", "read_source", "run_merge_in_worker", "source_file_bytes", "source_refusal", "stage_merge", "table_refusal", "worker_refusal"]

log = logging.getLogger(__name__)

_UPDATE_KINDS = ("matched_update", "not_matched_by_source_update")
_DELETE_KINDS = ("matched_delete", "not_matched_by_source_delete")
_PLAIN_INTEGER = re.compile(r"\d{1,18}")
_INTEGER_RANGE = {8: (-(2**7), 2**7 - 1), 16: (-(2**15), 2**15 - 1), 32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}


class _LeftToSparkError(Exception):
    """Raised while binding: this part of the MERGE is Spark's to evaluate (the message says why)."""


# ---------------------------------------------------------------------------------------
# The source


def source_refusal(source: MergeSource) -> str | None:
    """Why the worker does not read ``source`` itself, or None when it does (see the module docstring)."""
    if source.query is not None:
        return "the source is a Spark SQL query"
    if source.parquet is not None:
        if "://" in source.parquet and not source.parquet.startswith("file://"):
            return "a parquet source on an object store is read by Spark"
        path = Path(source.parquet.removeprefix("file://"))
        if not path.exists():
            return f"the parquet source {str(path)!r} does not exist here (Spark says so)"
        if path.is_dir() and any(child.is_dir() and "=" in child.name for child in path.iterdir()):
            return "the parquet source has Hive-style partition directories, whose column types Spark infers"
    return None


# Table features whose writes the worker leaves to the Spark job: row IDs kept across updates
# (row tracking), clustering, and columns whose values the writer computes.
_SPARK_FEATURES = ("rowTracking", "clustering")
_SPARK_COLUMN_METADATA = ("delta.generationExpression", "delta.identity.start", "CURRENT_DEFAULT")


def table_refusal(snapshot: Snapshot | TableContext) -> str | None:
    """Why the worker leaves DML on this table to Spark (a feature it does not write), or None."""
    listed = writer_features(snapshot.protocol)
    for feature in _SPARK_FEATURES:
        if feature in listed:
            return f"the table uses the {feature} feature, which the Spark job writes"
    if snapshot.metadata.configuration.get("delta.enableRowTracking", "false").lower() == "true":
        return "the table enables row tracking, which the Spark job writes"
    for key in _SPARK_COLUMN_METADATA:
        if key in snapshot.metadata.schema_string:
            return f"the table has columns with {key}, whose values the Spark job computes"
    return None


def source_file_bytes(source: MergeSource) -> int:
    """The bytes of the files :func:`read_source` would read (its data files at the version for a Delta
    source): what deciding where a MERGE runs can know before reading any row."""
    if source.delta is not None:
        table = DeltaTable(source.delta.uri, source.delta.storage_options or None)
        return int(pc.sum(table.snapshot(source.delta.version).add_actions.column("size")).as_py() or 0)
    assert source.parquet is not None
    path = Path(source.parquet.removeprefix("file://"))
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.name.startswith(("_", ".")))
    return path.stat().st_size


def read_source(source: MergeSource) -> pa.Table:
    """The source's rows, as Spark would read them (:func:`source_refusal` returned None for it)."""
    if source.delta is not None:
        table = DeltaTable(source.delta.uri, source.delta.storage_options or None)
        return table.snapshot(source.delta.version).to_arrow()
    assert source.parquet is not None
    import pyarrow.parquet as pq

    path = Path(source.parquet.removeprefix("file://"))
    if path.is_dir():
        # Spark skips files whose names start with "_" or "." (as pyarrow's dataset does).
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(("_", ".")))
        tables = [pq.ParquetFile(p).read() for p in files]
        return pa.concat_tables(tables, promote_options="none") if tables else pa.table({})
    # ParquetFile, not read_table: read_table goes through pyarrow.dataset, whose import (pandas) costs seconds.
    return pq.ParquetFile(path).read()


def _source_type_refusal(schema: pa.Schema) -> str | None:
    seen: set[str] = set()
    for column in schema:
        key = column.name.casefold()
        if key in seen:
            return f"the source has two columns named {column.name!r} ignoring case"
        seen.add(key)
        kind = column.type
        if pa.types.is_unsigned_integer(kind):
            return f"the source column {column.name!r} is unsigned ({kind}), which Spark reads as a wider type"
        if pa.types.is_timestamp(kind) and kind.unit != "us":
            return f"the source column {column.name!r} is {kind}, which Spark reads at its own precision"
        if pa.types.is_nested(kind) or pa.types.is_dictionary(kind) or pa.types.is_null(kind):
            return f"the source column {column.name!r} is {kind}"
    return None


# ---------------------------------------------------------------------------------------
# Binding the MERGE's expressions to the target's and the source's columns


@dataclass(frozen=True)
class _Value:
    """What a clause writes into one target column: a column of one side, or a literal."""

    side: Literal["target", "source", "literal"]
    name: str = ""
    literal: Any = None


@dataclass(frozen=True)
class _Clause:
    index: int
    kind: str
    condition: str | None  # over the synthetic names of :class:`BoundMerge`
    values: tuple[_Value, ...] = ()  # one per target column, for UPDATE and INSERT


@dataclass(frozen=True)
class _Names:
    """What :func:`_view` and :func:`_written` need of a bound statement."""

    target_schema: pa.Schema
    target_names: dict[str, str]  # synthetic -> target column
    source_names: dict[str, str]  # synthetic -> source column


@dataclass(frozen=True)
class BoundMerge:
    """A MERGE whose every expression the worker evaluates exactly as Spark does.

    Conditions are rewritten over synthetic column names (``__t<i>`` for the target's
    column i, ``__s<i>`` for the source's), so that one engine condition can name both
    sides.
    """

    spec: MergeSpec
    target_schema: pa.Schema
    source_schema: pa.Schema
    keys: tuple[tuple[str, str], ...]  # (target column, source column) of ON's equalities
    residual: str | None  # ON's other conjuncts
    clauses: tuple[_Clause, ...]
    target_names: dict[str, str] = field(default_factory=dict)  # synthetic -> target column
    source_names: dict[str, str] = field(default_factory=dict)  # synthetic -> source column

    @property
    def insert_only(self) -> bool:
        return all(clause.kind == "not_matched_insert" for clause in self.clauses)

    @property
    def only_unconditional_delete(self) -> bool:
        matched = [c for c in self.clauses if c.kind.startswith("matched_")]
        return len(matched) == 1 and matched[0].kind == "matched_delete" and matched[0].condition is None

    @property
    def by_source(self) -> bool:
        return any(c.kind.startswith("not_matched_by_source") for c in self.clauses)


class _Binder:
    """Binds SQL texts over a target and a source (aliases ``target_alias``, ``source_alias``) to synthetic names."""

    def __init__(self, target_alias: str, source_alias: str, target: pa.Schema, source: pa.Schema) -> None:
        self.target_alias = target_alias
        self.source_alias = source_alias
        self.target = target
        self.source = source
        self.target_by_key = {name.casefold(): i for i, name in enumerate(target.names)}
        self.source_by_key = {name.casefold(): i for i, name in enumerate(source.names)}
        self.used_target: dict[str, str] = {}
        self.used_source: dict[str, str] = {}

    def synthetic(self, side: str, index: int) -> str:
        if side == "target":
            name = f"__t{index}"
            self.used_target[name] = self.target.names[index]
        else:
            name = f"__s{index}"
            self.used_source[name] = self.source.names[index]
        return name

    def resolve(self, column: exp.Column, sides: Sequence[str]) -> tuple[str, int]:
        parts = [part.name for part in column.parts]
        t_alias, s_alias = self.target_alias.casefold(), self.source_alias.casefold()
        if len(parts) == 2:
            qualifier, key = parts[0].casefold(), parts[1].casefold()
            side = "target" if qualifier == t_alias else "source" if qualifier == s_alias else None
            if side is None:
                raise _LeftToSparkError(f"{column.sql(dialect='spark')} names neither the target nor the source")
        elif len(parts) == 1:
            key = parts[0].casefold()
            found = [s for s, names in (("target", self.target_by_key), ("source", self.source_by_key)) if key in names]
            if len(found) != 1:
                raise _LeftToSparkError(f"the unqualified column {parts[0]!r} is in {'both sides' if found else 'neither side'}")
            side = found[0]
        else:
            raise _LeftToSparkError(f"{column.sql(dialect='spark')} is a struct field")
        if side not in sides:
            raise _LeftToSparkError(f"{column.sql(dialect='spark')} cannot be evaluated where it is used (Spark reports it)")
        names = self.target_by_key if side == "target" else self.source_by_key
        if key not in names:
            raise _LeftToSparkError(f"{column.sql(dialect='spark')} is no column of the {side}")
        return side, names[key]

    def condition(self, text: str, sides: Sequence[str]) -> str:
        """``text`` over the synthetic names; raises :class:`_LeftToSparkError` unless the engine evaluates it as Spark does."""
        try:
            tree = sqlglot.parse_one(text, read="spark")
        except sqlglot.errors.SqlglotError:
            raise _LeftToSparkError(f"sqlglot cannot parse {text!r}") from None
        rewritten = self._rewrite(tree, sides)
        out = rewritten.sql(dialect="spark")
        if not condition_evaluates_as_spark(out, self.schema()):
            raise _LeftToSparkError(f"the engine does not evaluate {text!r} exactly as Spark does")
        return out

    def _rewrite(self, tree: exp.Expression, sides: Sequence[str]) -> exp.Expression:
        def replace(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column):
                side, index = self.resolve(node, sides)
                return exp.column(self.synthetic(side, index))
            return node

        return tree.copy().transform(replace)

    def schema(self) -> pa.Schema:
        fields = [pa.field(name, self.target.field(column).type) for name, column in self.used_target.items()]
        fields += [pa.field(name, self.source.field(column).type) for name, column in self.used_source.items()]
        return pa.schema(fields)

    def value(self, text: str, sides: Sequence[str], target_type: pa.DataType, column: str) -> _Value:
        try:
            tree = sqlglot.parse_one(text, read="spark")
        except sqlglot.errors.SqlglotError:
            raise _LeftToSparkError(f"sqlglot cannot parse {text!r}") from None
        while isinstance(tree, exp.Paren):
            tree = tree.this
        if isinstance(tree, exp.Column):
            side, index = self.resolve(tree, sides)
            names = self.target.names if side == "target" else self.source.names
            source_type = (self.target if side == "target" else self.source).field(index).type
            if not _widens_exactly(source_type, target_type):
                raise _LeftToSparkError(f"{text!r} ({source_type}) is cast to {column!r} ({target_type}) by Spark's rules")
            return _Value(side, names[index])  # type: ignore[arg-type]
        return _Value("literal", literal=_literal_value(tree, target_type, text, column))


def _normal(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(data_type):
        return pa.string()
    if pa.types.is_large_binary(data_type):
        return pa.binary()
    return data_type


def _widens_exactly(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether Spark's cast of ``source`` values to ``target`` is the identity or a lossless widening."""
    source, target = _normal(source), _normal(target)
    if source == target:
        return True
    if pa.types.is_signed_integer(source) and pa.types.is_signed_integer(target):
        return source.bit_width <= target.bit_width
    return pa.types.is_float32(source) and pa.types.is_float64(target)


def _literal_value(tree: exp.Expression, target_type: pa.DataType, text: str, column: str) -> Any:
    if isinstance(tree, exp.Null):
        return None
    if isinstance(tree, exp.Boolean) and pa.types.is_boolean(target_type):
        return bool(tree.this)
    if isinstance(tree, exp.Literal) and tree.is_string and value_kind(target_type) == "string" and "\\" not in tree.this:
        return tree.this
    negative = isinstance(tree, exp.Neg)
    number = tree.this if negative else tree
    if (
        isinstance(number, exp.Literal)
        and not number.is_string
        and _PLAIN_INTEGER.fullmatch(number.this)
        and pa.types.is_signed_integer(target_type)
    ):
        value = -int(number.this) if negative else int(number.this)
        low, high = _INTEGER_RANGE[target_type.bit_width]
        if low <= value <= high:
            return value
    raise _LeftToSparkError(f"the value {text!r} of {column!r} ({target_type}) is cast by Spark's rules")


def bind_merge(spec: MergeSpec, target_schema: pa.Schema, source_schema: pa.Schema) -> BoundMerge:
    """``spec`` bound for the worker; :class:`~airflow_delta.engine.InvalidArgumentError` when the worker
    cannot run it exactly as Spark would (:func:`worker_refusal` says why without raising)."""
    try:
        return _bind_merge(spec, target_schema, source_schema)
    except _LeftToSparkError as reason:
        raise InvalidArgumentError(
            "execution", "worker", f"a MERGE the worker evaluates exactly as Spark does; here {reason}: run it on Spark"
        ) from None


def _bind_merge(spec: MergeSpec, target_schema: pa.Schema, source_schema: pa.Schema) -> BoundMerge:
    if spec.schema_evolution:
        raise _LeftToSparkError("schema evolution")
    refusal = _source_type_refusal(source_schema)
    if refusal:
        raise _LeftToSparkError(refusal)
    binder = _Binder(spec.target_alias, spec.source_alias, target_schema, source_schema)
    keys = equi_keys(spec, target_schema.names, source_schema.names)
    usable = []
    for target_column, source_column in keys:
        t_type, s_type = target_schema.field(target_column).type, source_schema.field(source_column).type
        kinds = {value_kind(t_type), value_kind(s_type)}
        same_kind = len(kinds) == 1 and bool(kinds & {"string", "date", "boolean"})
        if same_kind or (pa.types.is_integer(t_type) and pa.types.is_integer(s_type)):
            usable.append((target_column, source_column))
    if not usable:
        raise _LeftToSparkError("ON has no equality of a target and a source column of the same kind (integers, strings, dates)")
    residual_parts = []
    conjuncts = _conjuncts(spec.on)
    for conjunct in conjuncts:
        if _is_key(conjunct, spec, usable):
            continue
        residual_parts.append(binder.condition(conjunct.sql(dialect="spark"), ("target", "source")))
    clauses = []
    for index, clause in enumerate(spec.clauses):
        if clause.kind.startswith("matched_"):
            sides: tuple[str, ...] = ("target", "source")
        elif clause.kind == "not_matched_insert":
            sides = ("source",)
        else:
            sides = ("target",)
        condition = binder.condition(clause.condition, sides) if clause.condition is not None else None
        values: tuple[_Value, ...] = ()
        if clause.kind in _UPDATE_KINDS or clause.kind == "not_matched_insert":
            values = _clause_values(binder, clause.kind, clause.assignments, clause.star, sides, target_schema, source_schema)
        clauses.append(_Clause(index, clause.kind, condition, values))
    residual = " AND ".join(f"({part})" for part in residual_parts) or None
    return BoundMerge(
        spec, target_schema, source_schema, tuple(usable), residual, tuple(clauses),
        dict(binder.used_target), dict(binder.used_source),
    )


def _conjuncts(text: str) -> list[exp.Expression]:
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except sqlglot.errors.SqlglotError:
        raise _LeftToSparkError(f"sqlglot cannot parse ON {text!r}") from None
    while isinstance(tree, exp.Paren):
        tree = tree.this
    return list(tree.flatten()) if isinstance(tree, exp.And) else [tree]


def _is_key(conjunct: exp.Expression, spec: MergeSpec, keys: Sequence[tuple[str, str]]) -> bool:
    while isinstance(conjunct, exp.Paren):
        conjunct = conjunct.this
    if not isinstance(conjunct, exp.EQ):
        return False
    sides = [conjunct.left, conjunct.right]
    if not all(isinstance(side, exp.Column) and not side.args.get("db") for side in sides):
        return False
    named = {side.table.casefold(): side.name.casefold() for side in sides}
    pair = (named.get(spec.target_alias.casefold()), named.get(spec.source_alias.casefold()))
    return any((t.casefold(), s.casefold()) == pair for t, s in keys)


def _clause_values(
    binder: _Binder,
    kind: str,
    assignments: dict[str, str] | None,
    star: bool,
    sides: Sequence[str],
    target: pa.Schema,
    source: pa.Schema,
) -> tuple[_Value, ...]:
    assigned: dict[str, str] = {}
    for key, text in (assignments or {}).items():
        path = key.split(".")
        if len(path) == 2 and path[0].casefold() == binder.target_alias.casefold():
            path = path[1:]
        if len(path) != 1 or "`" in key:
            raise _LeftToSparkError(f"the assignment to {key!r} sets a struct field")
        if path[0].casefold() not in binder.target_by_key:
            raise _LeftToSparkError(f"{key!r} is no target column (Spark reports it)")
        assigned[path[0].casefold()] = text
    source_keys = {name.casefold(): name for name in source.names}
    values = []
    for column in target:
        key = column.name.casefold()
        if key in assigned:
            values.append(binder.value(assigned[key], sides, column.type, column.name))
        elif star:
            if key not in source_keys:
                raise _LeftToSparkError(f"* without the target column {column.name!r} in the source (Spark reports it)")
            values.append(binder.value(f"`{binder.source_alias}`.`{source_keys[key]}`", sides, column.type, column.name))
        elif kind in _UPDATE_KINDS:
            values.append(_Value("target", column.name))
        else:
            values.append(_Value("literal", literal=None))
    return tuple(values)


def worker_refusal(spec: MergeSpec, target_schema: pa.Schema, source_schema: pa.Schema) -> str | None:
    """Why this MERGE must run on Spark, or None when the worker runs it exactly as Spark would."""
    try:
        _bind_merge(spec, target_schema, source_schema)
    except _LeftToSparkError as reason:
        return str(reason)
    return None


# ---------------------------------------------------------------------------------------
# Running it


_FILE = "__airflow_delta_file"  # the row's file: its index in the file actions read (int32)
_ROW = "__airflow_delta_row"


def _integer_keys(source: pa.Table, column: str, known: dict[str, _IntegerKeys | None]) -> _IntegerKeys | None:
    """The source column's integer or date keys, sorted once per MERGE (kept in ``known``); None for other types."""
    if column not in known:
        numeric = _as_int64(_key_column(source.column(column)).drop_null())
        known[column] = None if numeric is None else _IntegerKeys.of(numeric)
    return known[column]


def _key_values(source: pa.Table, column: str, known: dict[str, _IntegerKeys | None]) -> KeyValues:
    values = source.column(column)
    if pa.types.is_integer(values.type):
        # Sorted with numpy: the range and the distinct count without hashing every source row.
        keys = _integer_keys(source, column, known)
        assert keys is not None
        if not len(keys.ordered):
            return None, None, []
        listed = keys.distinct.tolist() if len(keys.distinct) <= MAX_SKIPPING_KEYS else None
        return int(keys.ordered[0]), int(keys.ordered[-1]), listed
    low_high = pc.min_max(values).as_py()
    distinct = pc.unique(values.drop_null()) if values.null_count < len(values) else pa.array([])
    listed = distinct.to_pylist() if len(distinct) <= MAX_SKIPPING_KEYS else None
    return low_high["min"], low_high["max"], listed


def _read_filter(bound: BoundMerge, source: pa.Table, known: dict[str, _IntegerKeys | None] | None = None) -> str | None:
    """The recorded read predicate: the Spark job's (``merge._read_target_files``), from the same pieces."""
    types = {f.name: f.type for f in bound.target_schema}
    known = {} if known is None else known
    skipping = source_key_filter({t: (types[t], _key_values(source, s, known)) for t, s in bound.keys})
    parts = [text for text in (target_only_filter(bound.spec, bound.target_schema.names), skipping) if text]
    return " AND ".join(f"({text})" for text in parts) or None


def _read_target_files(
    txn: Transaction, bound: BoundMerge, source: pa.Table, known: dict[str, _IntegerKeys | None]
) -> tuple[str | None, pa.Table]:
    """The target files to join, recorded as read, and the filter that chose them (the Spark job's choice)."""
    if bound.by_source:
        return None, txn.read_files(None)
    for text in dict.fromkeys([_read_filter(bound, source, known), target_only_filter(bound.spec, bound.target_schema.names)]):
        if text is None:
            continue
        try:
            return text, txn.read_files(text)
        except DeltaError:
            pass  # the engine cannot prune on this text: try less, then the whole table
    return None, txn.read_files(None)


def candidate_files(snapshot: Snapshot, bound: BoundMerge, source: pa.Table) -> pa.Table:
    """The target files :func:`stage_merge` would read on ``snapshot`` (for deciding where a MERGE runs)."""
    if bound.by_source:
        return snapshot.add_actions
    for text in dict.fromkeys([_read_filter(bound, source), target_only_filter(bound.spec, bound.target_schema.names)]):
        if text is None:
            continue
        try:
            return snapshot.plan_files(text)
        except DeltaError:
            pass
    return snapshot.add_actions


def _target_columns(bound: BoundMerge, context: TableContext, use_deletion_vectors: bool) -> list[str] | None:
    """The target columns to read: all where files are rewritten or change data written (their rows are
    written again), else those the keys, conditions and values name (as Delta's join reads)."""
    if bound.insert_only:
        return [t for t, _ in bound.keys] + list(bound.target_names.values())
    if not use_deletion_vectors or context.properties.enable_change_data_feed:
        return None
    needed = {t for t, _ in bound.keys} | set(bound.target_names.values())
    needed |= {value.name for clause in bound.clauses for value in clause.values if value.side == "target"}
    return [name for name in bound.target_schema.names if name in needed]


# What one read of the target holds, about (compressed bytes of a file, or of consecutive row
# groups of a larger one; a row group is never split): the worker reads the target in such
# pieces, one per core at a time on threads, keeps only the rows whose keys the source holds and
# drops the rest. Smaller pieces were faster as well as smaller (1M-row row groups: 8 MiB pieces read
# a 10M-row target in 0.67 s of CPU and a 407 MB peak, 32 MiB pieces 0.75 s and 488 MB).
STREAM_BYTES = 8 << 20


@dataclass(frozen=True)
class _IntegerKeys:
    """A source's integer (or date) key values, for lookups: sorted, and where their range is
    dense enough, a bitmap of which values in ``low..`` the source holds (one bit per value)."""

    ordered: np.ndarray
    distinct: np.ndarray  # ``ordered`` without repeats
    low: int = 0
    bits: np.ndarray | None = None  # uint8, bit ``v - low`` (little-endian within each byte) set for each value v

    @classmethod
    def of(cls, values: np.ndarray) -> _IntegerKeys:
        ordered = np.sort(values)
        distinct = ordered[_first_of_runs(ordered)]
        if not len(ordered):
            return cls(ordered, distinct)
        low, high = int(ordered[0]), int(ordered[-1])
        if high - low >= _BITS_PER_SOURCE_KEY * len(ordered) + (1 << 23):
            return cls(ordered, distinct)
        offsets = distinct - low
        byte_of = offsets >> 3
        bit = np.left_shift(np.uint8(1), (offsets & 7).astype(np.uint8))
        # Distinct values set distinct bits of their byte: per byte, the sum of its bits is their OR.
        starts = np.flatnonzero(_first_of_runs(byte_of))
        bits = np.zeros((high - low) // 8 + 1, dtype=np.uint8)
        bits[byte_of[starts]] = np.add.reduceat(bit, starts, dtype=np.uint8)
        return cls(ordered, distinct, low, bits)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        if self.bits is not None:
            high = min(self.low + len(self.bits) * 8 - 1, 2**63 - 1)
            inside = (keys >= self.low) & (keys <= high)  # compared before subtracting: no int64 overflow
            offsets = keys[inside] - self.low
            found = np.zeros(len(keys), dtype=bool)
            found[inside] = (self.bits[offsets >> 3] >> (offsets & 7).astype(np.uint8)) & 1
            return found
        if not len(self.ordered):
            return np.zeros(len(keys), dtype=bool)
        at = np.minimum(np.searchsorted(self.ordered, keys), len(self.ordered) - 1)
        return self.ordered[at] == keys


# An integer key's bitmap (one bit per value between the source's lowest and highest) is used
# while it is at most as large as the sorted keys (64 bits per source key) plus 1 MiB; else a
# binary search. A lookup in it costs about a quarter of the search (11 ms against 46 ms per
# million target rows).
_BITS_PER_SOURCE_KEY = 64


class _KeyFilter:
    """Which target rows may match a source row: each equality key's value is among the source's.

    A superset of the matched rows (the join after it is exact, and NULL keys never match),
    so that the worker keeps only these rows of each piece of the target it reads. Integer
    and date keys are looked up in numpy (:class:`_IntegerKeys`), others with
    ``pyarrow.compute.is_in``; a key whose two sides do not share one Arrow type is not
    filtered on (every row is kept for it).
    """

    def __init__(self, bound: BoundMerge, source: pa.Table, known: dict[str, _IntegerKeys | None]) -> None:
        self.checks: list[tuple[str, _IntegerKeys | pa.Array]] = []
        for target_column, source_column in bound.keys:
            values = _key_column(source.column(source_column)).drop_null()
            if values.type != _key_type(bound.target_schema.field(target_column).type):
                continue
            keys = _integer_keys(source, source_column, known)
            self.checks.append((target_column, keys if keys is not None else pc.unique(values)))

    def mask(self, rows: pa.Table) -> np.ndarray | None:
        """Per row of ``rows``, whether it may match (None: every row may)."""
        keep: np.ndarray | None = None
        for column, values in self.checks:
            keys = _key_column(rows.column(column))
            if isinstance(values, _IntegerKeys):
                found = values.contains(_as_int64(keys))  # type: ignore[arg-type]
                if keys.null_count:
                    found &= mask_to_numpy(pc.is_valid(keys))
            else:
                found = mask_to_numpy(pc.is_in(keys, value_set=values))  # NULL is not in the set
            keep = found if keep is None else keep & found
        return keep


def _as_int64(values: pa.Array) -> np.ndarray | None:
    """Integer or date keys as int64 numpy (a NULL as 0: the caller masks NULLs out), else None."""
    if pa.types.is_integer(values.type) or pa.types.is_date64(values.type):
        wide = values.cast(pa.int64())
    elif pa.types.is_date32(values.type):
        wide = values.cast(pa.int32()).cast(pa.int64())
    else:
        return None
    return int64_to_numpy(wide.fill_null(0) if wide.null_count else wide)


def _read_target(
    context: TableContext,
    files: pa.Table,
    row_group_filter: str | None,
    columns: Sequence[str] | None = None,
    candidates: _KeyFilter | None = None,
    stream_bytes: int = STREAM_BYTES,
) -> pa.Table:
    """The live rows of ``files`` (``columns``, default all) with their file's index and physical position, on threads.

    With ``candidates``, only the rows it keeps: the files are read in pieces of about
    ``stream_bytes`` (a file, or consecutive row groups of a larger one) and each piece is
    filtered as soon as it is read, so that memory follows the pieces and the kept rows,
    not the target's size.
    """
    columns = None if columns is None else list(dict.fromkeys(columns))
    if candidates is None:
        pieces: list[tuple[int, range | None]] = [(i, None) for i in range(files.num_rows)]
    else:
        pieces = split_by_row_groups(context, files, stream_bytes)

    def one(piece: tuple[int, range | None]) -> pa.Table:
        i, groups = piece
        rows, positions = read_live_rows(context, files.slice(i, 1), columns, row_group_filter=row_group_filter, row_groups=groups)
        keep = candidates.mask(rows) if candidates is not None and rows.num_rows else None
        if keep is not None:
            rows, positions = rows.filter(bool_array(keep)), positions[keep]
        return rows.append_column(_FILE, int32_array(np.full(rows.num_rows, i, np.int32))).append_column(
            _ROW, int64_array(positions)
        )

    if not pieces:
        fields = [f for f in context.schema if columns is None or f.name in columns]
        empty = pa.schema([*fields, pa.field(_FILE, pa.int32()), pa.field(_ROW, pa.int64())])
        return empty.empty_table()
    # Streamed pieces are decoded and filtered (CPU): one per core in flight bounds the memory
    # (at 10M rows 2 threads were as fast as 4 on 2 cores, and peaked ~80 MB lower). Whole files: 2 per core.
    per_core = 1 if candidates is not None else 2
    workers = max(1, min(len(pieces), max(2, (os.cpu_count() or 2) * per_core)))
    if workers == 1:
        parts = [one(pieces[0])]
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="merge-read") as pool:
            parts = list(pool.map(one, pieces))
    return pa.concat_tables(parts)


def _key_type(data_type: pa.DataType) -> pa.DataType:
    """The type a join key of ``data_type`` is compared in: integers as int64, strings as string."""
    return pa.int64() if pa.types.is_integer(data_type) else _normal(data_type)


def _key_column(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A join key in one type for both sides (:func:`_key_type`)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    wanted = _key_type(values.type)
    return values if values.type == wanted else values.cast(wanted)


def _matched_pairs(bound: BoundMerge, source: pa.Table, target: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(source row, target row) index pairs that ON joins; NULL keys never match."""
    source_keys = {f"k{i}": _key_column(source.column(s)) for i, (_, s) in enumerate(bound.keys)}
    target_keys = {f"k{i}": _key_column(target.column(t)) for i, (t, _) in enumerate(bound.keys)}
    left = pa.table({**source_keys, "__s": int64_array(np.arange(source.num_rows, dtype=np.int64))})
    right = pa.table({**target_keys, "__t": int64_array(np.arange(target.num_rows, dtype=np.int64))})
    names = list(source_keys)
    for name in names:
        left = left.filter(pc.is_valid(left.column(name)))
        right = right.filter(pc.is_valid(right.column(name)))
    # Acero builds its hash table from its second input: the smaller side (the source, unless
    # the target was read streamed and only its rows with the source's keys were kept).
    if right.num_rows < left.num_rows:
        joined = inner_hash_join(left, right, names, ["__s"], ["__t"])
    else:
        joined = inner_hash_join(right, left, names, ["__t"], ["__s"])
    s_rows = int64_to_numpy(joined.column("__s"))
    t_rows = int64_to_numpy(joined.column("__t"))
    if bound.residual is not None and len(s_rows):
        keep = mask_to_numpy(condition_mask(_view(bound, source, target, s_rows, t_rows), bound.residual))
        s_rows, t_rows = s_rows[keep], t_rows[keep]
    order = np.lexsort((s_rows, t_rows))  # deterministic, whatever order the join's threads gave
    return s_rows[order], t_rows[order]


def _view(
    bound: BoundMerge | _Names, source: pa.Table, target: pa.Table, s_rows: np.ndarray | None, t_rows: np.ndarray | None
) -> pa.Table:
    """The rows the conditions see, under the synthetic names: target row ``t_rows[i]`` beside source row ``s_rows[i]``."""
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    if t_rows is not None:
        taken = int64_array(t_rows)
        for synthetic, name in bound.target_names.items():
            columns[synthetic] = target.column(name).take(taken)
    if s_rows is not None:
        taken = int64_array(s_rows)
        for synthetic, name in bound.source_names.items():
            columns[synthetic] = source.column(name).take(taken)
    length = len(t_rows if t_rows is not None else s_rows)  # type: ignore[arg-type]
    if not columns:
        return pa.table({"__none": pa.nulls(length, pa.int8())})
    return pa.table(columns)


def _choose(clauses: Sequence[_Clause], view: pa.Table) -> np.ndarray:
    """Per row of ``view``, the index of the first clause whose condition is TRUE, else -1."""
    action = np.full(view.num_rows, -1, dtype=np.int64)
    for clause in clauses:
        open_rows = action < 0
        if not open_rows.any():
            break
        if clause.condition is None:
            action[open_rows] = clause.index
            continue
        true = mask_to_numpy(condition_mask(view, clause.condition))  # NULL is not TRUE
        action[open_rows & true] = clause.index
    return action


def _written(
    bound: BoundMerge | _Names, clause: _Clause, source: pa.Table, target: pa.Table, s_rows: np.ndarray | None, t_rows: np.ndarray | None
) -> pa.Table:
    """The rows ``clause`` writes, in the target's columns and types, for the given source and target rows."""
    count = len(t_rows if t_rows is not None else s_rows)  # type: ignore[arg-type]
    arrays = []
    for column, value in zip(bound.target_schema, clause.values, strict=True):
        if value.side == "literal":
            array: pa.Array | pa.ChunkedArray = pa.array([value.literal] * count, type=column.type)
        else:
            rows = t_rows if value.side == "target" else s_rows
            side = target if value.side == "target" else source
            array = side.column(value.name).take(int64_array(rows))
            if array.type != column.type:
                array = array.cast(column.type)  # an exact widening (bind_merge checked)
        arrays.append(array)
    nullable = pa.schema([f.with_nullable(True) for f in bound.target_schema])  # NOT NULL is the writer's check
    return pa.Table.from_arrays(arrays, schema=nullable)


def stage_merge(
    txn: Transaction,
    snapshot: Snapshot,
    context: TableContext,
    bound: BoundMerge,
    source: pa.Table,
    use_deletion_vectors: bool,
    started: float,
    stream_bytes: int = STREAM_BYTES,
) -> tuple[dict[str, int], dict[str, str], bool]:
    """Stage ``bound`` in ``txn``; (Delta's MERGE metrics, ``operationParameters``, whether to commit).

    Where no target row leaves the table but a matched one (deletion vectors, or an
    insert-only MERGE) and no clause is WHEN NOT MATCHED BY SOURCE, the target is read in
    pieces of about ``stream_bytes`` and only the rows whose keys the source holds are kept
    (:class:`_KeyFilter`); otherwise every candidate row is read (files are rewritten with
    their other rows, or the unmatched rows are the clauses').
    """
    spec = bound.spec
    metrics = zero_merge_metrics()
    metrics["numSourceRows"] = source.num_rows
    parameters = operation_parameters(spec)
    scan_started = time.monotonic()
    known: dict[str, _IntegerKeys | None] = {}  # the source's integer keys, sorted once for both uses
    read_filter, files = _read_target_files(txn, bound, source, known)
    metrics["numTargetFilesBeforeSkipping"] = snapshot.add_actions.num_rows
    metrics["numTargetFilesAfterSkipping"] = files.num_rows
    # Row groups the filter rules out hold no matched row either (it is a superset of the matches);
    # a file that is rewritten needs all its rows, so row groups are skipped only with DVs.
    skips_row_groups = use_deletion_vectors or bound.insert_only
    streams = skips_row_groups and not bound.by_source
    target = _read_target(
        context,
        files,
        read_filter if skips_row_groups else None,
        _target_columns(bound, context, use_deletion_vectors),
        _KeyFilter(bound, source, known) if streams else None,
        stream_bytes,
    )
    s_rows, t_rows = _matched_pairs(bound, source, target)

    matched_clauses = [c for c in bound.clauses if c.kind.startswith("matched_")]
    insert_clauses = [c for c in bound.clauses if c.kind == "not_matched_insert"]
    by_source_clauses = [c for c in bound.clauses if c.kind.startswith("not_matched_by_source")]

    unmatched_source = _unmatched(source.num_rows, s_rows)
    if not bound.insert_only and len(t_rows):
        first = _first_of_runs(t_rows)  # the pairs come ordered by target row
        if not first.all():
            starts = np.flatnonzero(first)
            pairs_per_target = np.diff(np.append(starts, len(t_rows)))
            if not bound.only_unconditional_delete:
                raise MultipleSourceRowsMatchedError(int((pairs_per_target > 1).sum()))
            # Every pair deletes the same row (Delta counts it once): keep one pair per target row.
            s_rows, t_rows = s_rows[first], t_rows[first]
    matched_action = _choose(matched_clauses, _view(bound, source, target, s_rows, t_rows)) if len(t_rows) else np.empty(0, np.int64)

    insert_action = (
        _choose(insert_clauses, _view(bound, source, target, unmatched_source, None))
        if insert_clauses and len(unmatched_source)
        else np.full(len(unmatched_source), -1, np.int64)
    )
    if by_source_clauses:
        unmatched_target = _unmatched(target.num_rows, t_rows)
        by_source_action = (
            _choose(by_source_clauses, _view(bound, source, target, None, unmatched_target))
            if len(unmatched_target)
            else np.empty(0, np.int64)
        )
    else:
        unmatched_target, by_source_action = np.empty(0, np.int64), np.empty(0, np.int64)

    counts: dict[int, int] = {}
    for actions in (matched_action, insert_action, by_source_action):
        for index, count in enumerate(np.bincount(actions[actions >= 0]).tolist()):
            if count:
                counts[index] = counts.get(index, 0) + count
    count_clauses(metrics, spec, counts)
    metrics["scanTimeMs"] = _ms_since(scan_started)
    if not counts:
        metrics["executionTimeMs"] = _ms_since(started)
        return metrics, parameters, False

    # What leaves the target (target row indexes, and each one's change type) and what is written.
    removed: list[np.ndarray] = []
    removed_types: list[np.ndarray] = []
    new_parts: list[pa.Table] = []
    new_types: list[str] = []
    for clause in bound.clauses:
        if clause.kind.startswith("matched_"):
            chosen = matched_action == clause.index
            c_s, c_t = s_rows[chosen], t_rows[chosen]
        elif clause.kind == "not_matched_insert":
            c_s, c_t = unmatched_source[insert_action == clause.index], None
        else:
            c_s, c_t = None, unmatched_target[by_source_action == clause.index]
        size = len(c_t if c_t is not None else c_s)  # type: ignore[arg-type]
        if size == 0:
            continue
        if c_t is not None:
            removed.append(c_t)
            if context.properties.enable_change_data_feed:  # a million-row object array costs ~0.1 s
                kind = "update_preimage" if clause.kind in _UPDATE_KINDS else "delete"
                removed_types.append(np.full(size, kind, dtype=object))
        if clause.values:
            new_parts.append(_written(bound, clause, source, target, c_s, c_t))
            new_types.append("insert" if clause.kind == "not_matched_insert" else "update_postimage")
    new_rows = pa.concat_tables(new_parts) if new_parts else None

    rewrite_started = time.monotonic()
    if bound.insert_only:
        changes = _write_new(txn, context, new_rows)
    else:
        removed_rows = np.concatenate(removed) if removed else np.empty(0, np.int64)
        changes = _stage_row_changes(txn, context, files, target, removed_rows, new_rows, use_deletion_vectors)
        if context.properties.enable_change_data_feed:
            types = np.concatenate(removed_types) if removed else np.empty(0, dtype=object)
            _stage_change_data(txn, context, target, removed_rows, types, new_parts, new_types, changes)
    changes["rewriteTimeMs"] = _ms_since(rewrite_started)
    with_file_metrics(metrics, changes)
    metrics["executionTimeMs"] = _ms_since(started)
    return metrics, parameters, True


def _first_of_runs(ordered: np.ndarray) -> np.ndarray:
    """Per value of a sorted array, whether it differs from the one before (the first of each run of equals)."""
    if not len(ordered):
        return np.zeros(0, dtype=bool)
    return np.concatenate([[True], ordered[1:] != ordered[:-1]])


def _unmatched(count: int, matched: np.ndarray) -> np.ndarray:
    """The indexes below ``count`` not in ``matched``, ascending (a mask, not a sort of both sides)."""
    seen = np.zeros(count, dtype=bool)
    seen[matched] = True
    return np.flatnonzero(~seen).astype(np.int64)


def run_merge_in_worker(
    spec: MergeSpec,
    source: pa.Table | None = None,
    *,
    before_commit: Callable[[int], None] | None = None,
    stream_bytes: int = STREAM_BYTES,
) -> JobResult:
    """Run ``spec`` in this process (the worker's MERGE), with the Spark job's driver loop
    (``run_with_retries``: attempts on logical conflicts, the task's appId and tags, exactly-once).

    ``source``: its rows when already read (:func:`read_source`). ``stream_bytes``: the pieces
    the target is read in, where :func:`stage_merge` streams it. A MERGE the worker cannot
    run exactly as Spark fails with :class:`~airflow_delta.engine.InvalidArgumentError` before
    anything is written.
    """
    from airflow_delta.spark.commit_loop import StagedOperation, run_with_retries, uses_deletion_vectors

    started = time.monotonic()
    refusal = source_refusal(spec.source) if source is None else None
    if refusal is not None:
        raise InvalidArgumentError(
            "execution", "worker", f"a MERGE the worker evaluates exactly as Spark does; here {refusal}: run it on Spark"
        )
    rows = read_source(spec.source) if source is None else source
    # Delta's materializeSourceTimeMs, as the Spark job writes it: reading the source once for every attempt.
    materialized_ms = _ms_since(started)

    def attempt(txn: Transaction, snapshot: Snapshot, context: TableContext) -> StagedOperation:
        refusal = table_refusal(snapshot)
        if refusal is not None:
            raise InvalidArgumentError(
                "execution", "worker", f"a MERGE the worker writes as Spark does; here {refusal}: run it on Spark"
            )
        bound = bind_merge(spec, snapshot.schema, rows.schema)
        metrics, parameters, commit = stage_merge(
            txn, snapshot, context, bound, rows, uses_deletion_vectors(context, spec.options), started, stream_bytes
        )
        return StagedOperation(
            "MERGE", parameters, {**metrics, "materializeSourceTimeMs": materialized_ms}, commit=commit
        )

    return run_with_retries(spec, attempt, before_commit=before_commit)


def _stage_change_data(
    txn: Transaction,
    context: TableContext,
    target: pa.Table,
    removed_rows: np.ndarray,
    removed_types: np.ndarray,
    new_parts: Sequence[pa.Table],
    new_types: Sequence[str],
    changes: dict[str, int],
) -> None:
    """Change data as Delta writes it: each removed target row as it was (``update_preimage`` or
    ``delete``), and each new row (``update_postimage`` or ``insert``), as ``cdc`` files."""
    parts = []
    if len(removed_rows):
        before = target.take(int64_array(removed_rows)).drop_columns([_FILE, _ROW])
        parts.append(before.append_column(CHANGE_TYPE_COLUMN, pa.array(removed_types, pa.string())))
    for part, kind in zip(new_parts, new_types, strict=True):
        parts.append(part.append_column(CHANGE_TYPE_COLUMN, pa.array([kind] * part.num_rows, pa.string())))
    if not parts:
        return
    change = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
    for cdc in write_change_data_files(context, change, written=txn.written_files):
        txn.add_cdc(cdc)
        changes["numAddedChangeFiles"] = changes.get("numAddedChangeFiles", 0) + 1


def _write_new(txn: Transaction, context: TableContext, rows: pa.Table | None) -> dict[str, int]:
    if rows is None or rows.num_rows == 0:
        return {"numAddedFiles": 0, "numAddedBytes": 0}
    adds = write_data_files(context, rows, written=txn.written_files)
    txn.add_files(adds)
    return {"numAddedFiles": len(adds), "numAddedBytes": sum(add.size for add in adds)}


def _stage_row_changes(
    txn: Transaction,
    context: TableContext,
    files: pa.Table,
    target: pa.Table,
    removed_rows: np.ndarray,
    new_rows: pa.Table | None,
    use_deletion_vectors: bool,
) -> dict[str, int]:
    """The removed target rows leave their files (DVs, or the files rewritten with their other rows); new rows written."""
    metrics: dict[str, int] = {}
    removed_rows = np.sort(removed_rows)
    removed_rows = removed_rows[_first_of_runs(removed_rows)]
    taken = int64_array(removed_rows)
    file_of_row = indices_to_numpy(combined(target.column(_FILE).take(taken))) if len(removed_rows) else np.empty(0, np.int64)
    positions = int64_to_numpy(target.column(_ROW).take(taken)) if len(removed_rows) else np.empty(0, np.int64)
    # Grouped by file with one stable sort (np.unique hashes: 0.4 s per million rows here).
    order = np.argsort(file_of_row, kind="stable")
    file_of_row, positions = file_of_row[order], positions[order]
    starts = np.flatnonzero(_first_of_runs(file_of_row))
    ends = np.append(starts[1:], len(file_of_row)) if len(starts) else starts
    touched_indexes = file_of_row[starts]
    paths = files.column("path").to_pylist()
    if use_deletion_vectors:
        deletes = {
            paths[int(file_of_row[a])]: np.sort(positions[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
        }
        if deletes:
            summary = txn.delete_rows(deletes)
            metrics["numRemovedFiles"] = summary.num_removed_files
            metrics["numRemovedBytes"] = summary.num_removed_bytes
            metrics["numDeletionVectorsAdded"] = summary.num_deletion_vectors_added
            metrics["numDeletionVectorsUpdated"] = summary.num_deletion_vectors_updated
            metrics["numDeletionVectorsRemoved"] = summary.num_deletion_vectors_removed
        metrics.update(_write_new(txn, context, new_rows))
        metrics["numCopiedRows"] = 0
        return metrics
    touched_files = files.take(int64_array(touched_indexes))
    parts = []
    copied = 0
    if touched_files.num_rows:
        txn.remove_files(touched_files)
        keep = np.ones(target.num_rows, dtype=bool)
        keep[removed_rows] = False
        in_touched = np.isin(indices_to_numpy(combined(target.column(_FILE))), touched_indexes)
        survivors = target.filter(bool_array(keep & in_touched)).drop_columns([_FILE, _ROW])
        copied = survivors.num_rows
        if copied:
            parts.append(survivors.cast(pa.schema([f.with_nullable(True) for f in survivors.schema])))
    if new_rows is not None:
        parts.append(new_rows if not parts else new_rows.cast(parts[0].schema))
    metrics.update(_write_new(txn, context, pa.concat_tables(parts) if parts else None))
    metrics["numRemovedFiles"] = touched_files.num_rows
    metrics["numRemovedBytes"] = int(pc.sum(touched_files.column("size")).as_py() or 0)
    metrics["numDeletionVectorsRemoved"] = touched_files.num_rows - touched_files.column("deletion_vector").null_count
    metrics["numCopiedRows"] = copied
    return metrics


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
