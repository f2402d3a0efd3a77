"""What the MERGE on Spark and the MERGE in the worker share, without Spark: which target
files a MERGE reads, its ``operationParameters`` and its metrics under Delta's names.

Which target files are read (Delta prunes with ON's target-only conjuncts; we also skip by
the source's join keys):

- :func:`target_only_filter`: the conjuncts of ON that name target columns only.
- :func:`equi_keys`: the ``target.column = source.column`` conjuncts of ON. A target row
  can match only a source row whose key equals its own, so a target file whose
  statistics put every key outside the source's keys holds no matched row.
- :func:`source_key_filter`: per key, the source's range ``[min, max]`` (or, for a source
  with few distinct keys, the keys themselves) as a filter on the target column. With
  :func:`target_only_filter` it becomes the read predicate the transaction records
  (``Transaction.read_files``), so conflict detection stays exact: a concurrent append
  conflicts exactly when it adds a row that filter may match, the only rows that could
  have joined the source. Not used with WHEN NOT MATCHED BY SOURCE (every target row
  takes part then).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import sqlglot

from airflow_delta.spark.specs import MergeSpec
from airflow_delta.spark.sql_columns import SparkSqlText

__all__ = [
    "FILE_METRICS",
    "MAX_SKIPPING_KEYS",
    "METRIC_OF_KIND",
    "KeyValues",
    "count_clauses",
    "equi_keys",
    "operation_parameters",
    "source_key_filter",
    "target_only_filter",
    "with_file_metrics",
    "zero_merge_metrics",
]

# A source with at most this many distinct values of a key is skipped by the values
# themselves (an IN list in the recorded read predicate), else by their range.
MAX_SKIPPING_KEYS = 100

METRIC_OF_KIND = {
    "matched_update": "numTargetRowsMatchedUpdated",
    "not_matched_by_source_update": "numTargetRowsNotMatchedBySourceUpdated",
    "matched_delete": "numTargetRowsMatchedDeleted",
    "not_matched_by_source_delete": "numTargetRowsNotMatchedBySourceDeleted",
    "not_matched_insert": "numTargetRowsInserted",
}

# The file metrics of a row-level change (``stage_row_changes``), renamed as MERGE names them.
FILE_METRICS = {
    "numAddedFiles": "numTargetFilesAdded",
    "numRemovedFiles": "numTargetFilesRemoved",
    "numAddedBytes": "numTargetBytesAdded",
    "numRemovedBytes": "numTargetBytesRemoved",
    "numDeletionVectorsAdded": "numTargetDeletionVectorsAdded",
    "numDeletionVectorsRemoved": "numTargetDeletionVectorsRemoved",
    "numDeletionVectorsUpdated": "numTargetDeletionVectorsUpdated",
    "numAddedChangeFiles": "numTargetChangeFilesAdded",
    "numCopiedRows": "numTargetRowsCopied",
    "rewriteTimeMs": "rewriteTimeMs",
}


def _conjuncts(text: str) -> list[sqlglot.exp.Expression] | None:
    try:
        condition = sqlglot.parse_one(text, read="spark")
    except sqlglot.errors.SqlglotError:
        return None
    while isinstance(condition, sqlglot.exp.Paren):
        condition = condition.this
    return list(condition.flatten()) if isinstance(condition, sqlglot.exp.And) else [condition]


def target_only_filter(spec: MergeSpec, partition_and_data_columns: Sequence[str]) -> str | None:
    """The conjuncts of ON that reference only target columns, as an engine filter text; None if there are none.

    Delta prunes the target's files with these before the join. A conjunct qualifies
    when each of its columns is qualified with the target alias and names a target
    column, and it calls no function that could be non-deterministic (a subquery, rand):
    only such conjuncts are true of the target row alone.
    """
    conjuncts = _conjuncts(spec.on)
    if conjuncts is None:
        return None
    names = {name.casefold() for name in partition_and_data_columns}
    kept = []
    for conjunct in conjuncts:
        columns = list(conjunct.find_all(sqlglot.exp.Column))
        if not columns or any(
            column.table.casefold() != spec.target_alias.casefold() or column.name.casefold() not in names
            for column in columns
        ):
            continue
        if any(isinstance(node, (sqlglot.exp.Subquery, sqlglot.exp.Rand)) for node in conjunct.walk()):
            continue
        unqualified = conjunct.copy()
        for column in unqualified.find_all(sqlglot.exp.Column):
            column.set("table", None)
        kept.append(unqualified.sql(dialect=SparkSqlText))
    return " AND ".join(f"({text})" for text in kept) or None


def equi_keys(spec: MergeSpec, target_columns: Sequence[str], source_columns: Sequence[str]) -> list[tuple[str, str]]:
    """The ``(target column, source column)`` of each top-level ON conjunct ``t.a = s.b`` (either way round).

    Names as the schemas spell them; both sides must be plain columns qualified with the
    aliases (a struct field or an expression is no key). ``<=>`` is not one: NULL keys match there.
    """
    conjuncts = _conjuncts(spec.on)
    if conjuncts is None:
        return []
    targets = {name.casefold(): name for name in target_columns}
    sources = {name.casefold(): name for name in source_columns}
    t_alias, s_alias = spec.target_alias.casefold(), spec.source_alias.casefold()
    keys = []
    for conjunct in conjuncts:
        while isinstance(conjunct, sqlglot.exp.Paren):
            conjunct = conjunct.this
        if not isinstance(conjunct, sqlglot.exp.EQ):
            continue
        sides = [conjunct.left, conjunct.right]
        if not all(isinstance(side, sqlglot.exp.Column) and not side.args.get("db") for side in sides):
            continue
        by_alias = {side.table.casefold(): side.name.casefold() for side in sides}
        if set(by_alias) != {t_alias, s_alias}:
            continue
        target, source = by_alias[t_alias], by_alias[s_alias]
        if target in targets and source in sources:
            keys.append((targets[target], sources[source]))
    return keys


KeyValues = tuple[Any, Any, Sequence[Any] | None]
"""One key's source values: ``(min, max, distinct values or None when there are many)``, NULLs left out."""


def _literal(value: Any, target_type: pa.DataType) -> str | None:
    """``value`` as a SQL literal of the target column's kind, read exactly by the engine's filter; None to skip nothing."""
    if pa.types.is_integer(target_type) and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if (pa.types.is_string(target_type) or pa.types.is_large_string(target_type)) and isinstance(value, str):
        if "\\" in value:
            return None  # Spark's escapes
        return "'" + value.replace("'", "''") + "'"
    if pa.types.is_date32(target_type) and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return f"DATE'{value.isoformat()}'"
    return None


def source_key_filter(keys: Mapping[str, tuple[pa.DataType, KeyValues]]) -> str | None:
    """A filter on the target's key columns that every target row matching a source row satisfies; None if none.

    ``keys``: target column -> (its type, the source's values of the key it joins, :data:`KeyValues`).
    A key the source holds no non-NULL value of matches no target row (NULL keys never
    match): the filter is then ``false``. Values of types whose literals the engine might
    read differently from Spark (floats, decimals, timestamps) skip nothing.
    """
    parts = []
    for column, (target_type, (low, high, distinct)) in keys.items():
        name = "`" + column.replace("`", "``") + "`"
        if low is None or high is None:
            return "false"
        if distinct is not None:
            literals = [_literal(v, target_type) for v in distinct]
            if literals and all(text is not None for text in literals):
                parts.append(f"{name} IN ({', '.join(sorted(set(literals)))})")  # type: ignore[arg-type]
                continue
        low_text, high_text = _literal(low, target_type), _literal(high, target_type)
        if low_text is not None and high_text is not None:
            parts.append(f"{name} >= {low_text} AND {name} <= {high_text}")
    return " AND ".join(f"({part})" for part in parts) or None


def operation_parameters(spec: MergeSpec) -> dict[str, str]:
    """``operationParameters`` as Delta writes them for MERGE (JSON strings of the predicates per group)."""

    def predicates(group: str) -> str:
        out = []
        for clause in spec.clauses:
            if clause.group != group:
                continue
            entry = {"actionType": clause.kind.rsplit("_", 1)[1]}
            if clause.condition is not None:
                entry = {"predicate": clause.condition, **entry}
            out.append(entry)
        return json.dumps(out, separators=(",", ":"))

    return {
        "predicate": json.dumps([spec.on]),
        "matchedPredicates": predicates("WHEN MATCHED"),
        "notMatchedPredicates": predicates("WHEN NOT MATCHED"),
        "notMatchedBySourcePredicates": predicates("WHEN NOT MATCHED BY SOURCE"),
    }


def zero_merge_metrics() -> dict[str, int]:
    names = (
        "numSourceRows",
        "numTargetRowsInserted",
        "numTargetRowsUpdated",
        "numTargetRowsMatchedUpdated",
        "numTargetRowsNotMatchedBySourceUpdated",
        "numTargetRowsDeleted",
        "numTargetRowsMatchedDeleted",
        "numTargetRowsNotMatchedBySourceDeleted",
        "numTargetRowsCopied",
        "numOutputRows",
        "numTargetFilesAdded",
        "numTargetFilesRemoved",
        "numTargetBytesAdded",
        "numTargetBytesRemoved",
        "numTargetDeletionVectorsAdded",
        "numTargetDeletionVectorsRemoved",
        "numTargetDeletionVectorsUpdated",
        "numTargetChangeFilesAdded",
        "scanTimeMs",
        "rewriteTimeMs",
    )
    return dict.fromkeys(names, 0)


def count_clauses(metrics: dict[str, int], spec: MergeSpec, counts: Mapping[int, int]) -> None:
    """Add the rows each clause (index -> rows) acted on to ``metrics``, and the totals."""
    for index, count in counts.items():
        metrics[METRIC_OF_KIND[spec.clauses[index].kind]] += count
    metrics["numTargetRowsUpdated"] = (
        metrics["numTargetRowsMatchedUpdated"] + metrics["numTargetRowsNotMatchedBySourceUpdated"]
    )
    metrics["numTargetRowsDeleted"] = (
        metrics["numTargetRowsMatchedDeleted"] + metrics["numTargetRowsNotMatchedBySourceDeleted"]
    )


def with_file_metrics(metrics: dict[str, int], changes: Mapping[str, int]) -> dict[str, int]:
    for theirs, ours in FILE_METRICS.items():
        if theirs in changes:
            metrics[ours] = int(changes[theirs])
    # Locating the rows that leave their files is part of Delta's scan, after our join.
    metrics["scanTimeMs"] += int(changes.get("scanTimeMs", 0))
    metrics["numOutputRows"] = metrics["numTargetRowsInserted"] + metrics["numTargetRowsUpdated"] + metrics[
        "numTargetRowsCopied"
    ]
    return metrics
