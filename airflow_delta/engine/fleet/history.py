"""The maintenance history: one row per maintenance run (and per table per fleet health check),
appended to a Delta table that the engine writes, so it can be queried like any other table
(``DeltaTable(uri).snapshot().to_arrow(filter=...)``, Spark, DuckDB, delta-rs).

Appends are blind appends, which never conflict with each other, so many mapped tasks
record into the same table at once. The table is created on the first append; a second
creator racing it simply appends to the table the first one made.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa

from airflow_delta.engine.errors import InvalidArgumentError, TableAlreadyExistsError, TableNotFoundError
from airflow_delta.engine.fleet.health import TableHealthRecord
from airflow_delta.engine.model.arguments import check_int, check_str
from airflow_delta.engine.table import DeltaTable

HEALTH = "HEALTH"
"""The ``operation`` of a row that records a health check, not a maintenance run."""

MAINTENANCE_HISTORY_SCHEMA = pa.schema([
    pa.field("recorded_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("recorded_ms", pa.int64(), nullable=False),
    pa.field("table_uri", pa.string(), nullable=False),
    pa.field("operation", pa.string(), nullable=False),
    pa.field("status", pa.string(), nullable=False),
    pa.field("version", pa.int64()),
    pa.field("read_version", pa.int64()),
    pa.field("duration_ms", pa.int64()),
    pa.field("bytes_rewritten", pa.int64()),
    pa.field("bytes_freed", pa.int64()),
    pa.field("files_removed", pa.int64()),
    pa.field("files_added", pa.int64()),
    pa.field("reason", pa.string()),
    pa.field("metrics", pa.string()),
    pa.field("dag_id", pa.string()),
    pa.field("task_id", pa.string()),
    pa.field("run_id", pa.string()),
    pa.field("map_index", pa.int64()),
    # The table's health at that time (HEALTH rows; null on maintenance rows).
    pa.field("num_files", pa.int64()),
    pa.field("size_in_bytes", pa.int64()),
    pa.field("small_files", pa.int64()),
    pa.field("files_with_deletion_vectors", pa.int64()),
    pa.field("deleted_rows", pa.int64()),
    pa.field("tombstones", pa.int64()),
    pa.field("vacuumable_bytes", pa.int64()),
    pa.field("commits_since_checkpoint", pa.int64()),
    pa.field("log_files", pa.int64()),
    pa.field("log_size_in_bytes", pa.int64()),
])


@dataclass(frozen=True, slots=True)
class MaintenanceRecord:
    """One row of the history. ``metrics`` is the operation's metrics (stored as JSON)."""

    table_uri: str
    operation: str
    status: str = "success"
    recorded_ms: int | None = None
    version: int | None = None
    read_version: int | None = None
    duration_ms: int | None = None
    bytes_rewritten: int | None = None
    bytes_freed: int | None = None
    files_removed: int | None = None
    files_added: int | None = None
    reason: str | None = None
    metrics: Mapping[str, Any] | None = None
    dag_id: str | None = None
    task_id: str | None = None
    run_id: str | None = None
    map_index: int | None = None
    num_files: int | None = None
    size_in_bytes: int | None = None
    small_files: int | None = None
    files_with_deletion_vectors: int | None = None
    deleted_rows: int | None = None
    tombstones: int | None = None
    vacuumable_bytes: int | None = None
    commits_since_checkpoint: int | None = None
    log_files: int | None = None
    log_size_in_bytes: int | None = None

    def __post_init__(self) -> None:
        check_str("table_uri", self.table_uri, non_empty=True)
        check_str("operation", self.operation, non_empty=True)
        check_str("status", self.status, non_empty=True)
        check_int("recorded_ms", self.recorded_ms, minimum=0, optional=True)

    @classmethod
    def from_health(cls, record: TableHealthRecord, **task: Any) -> MaintenanceRecord:
        """A ``HEALTH`` row of a table's record: its numbers over time feed the page's charts, and
        ``metrics`` holds the whole record (:func:`latest_health` gives it back)."""
        return cls(
            table_uri=record.table, operation=HEALTH, status=record.status, recorded_ms=record.checked_ms,
            version=record.version, duration_ms=record.elapsed_ms, reason=record.reason,
            metrics=record.to_dict(),
            num_files=record.num_files, size_in_bytes=record.size_in_bytes, small_files=record.small_files,
            files_with_deletion_vectors=record.files_with_deletion_vectors, deleted_rows=record.deleted_rows,
            tombstones=record.tombstones, vacuumable_bytes=record.vacuumable_bytes,
            commits_since_checkpoint=record.commits_since_checkpoint, log_files=record.log_files,
            log_size_in_bytes=record.log_size_in_bytes, **task,
        )

    def row(self, now_ms: int) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        when = self.recorded_ms if self.recorded_ms is not None else now_ms
        out["recorded_ms"] = when
        out["recorded_at"] = when * 1000
        out["metrics"] = None if self.metrics is None else json.dumps(dict(self.metrics), sort_keys=True, default=str)
        return out


def _rows_to_arrow(rows: Sequence[dict[str, Any]]) -> pa.Table:
    columns = {}
    for f in MAINTENANCE_HISTORY_SCHEMA:
        values = [r.get(f.name) for r in rows]
        if f.name == "recorded_at":
            columns[f.name] = pa.array(values, pa.int64()).cast(f.type)
        else:
            columns[f.name] = pa.array(values, f.type)
    return pa.table(columns, schema=MAINTENANCE_HISTORY_SCHEMA)


def append_history(
    history_uri: str, records: Sequence[MaintenanceRecord], storage_options: Mapping[str, Any] | None = None
) -> int | None:
    """Append ``records`` to the history table at ``history_uri`` (created on first use); the version
    committed, or None when there was nothing to append."""
    check_str("history_uri", history_uri, non_empty=True)
    records = list(records)
    for i, record in enumerate(records):
        if not isinstance(record, MaintenanceRecord):
            raise InvalidArgumentError(f"records[{i}]", record, "pass MaintenanceRecord objects")
    if not records:
        return None
    now = int(time.time() * 1000)
    data = _rows_to_arrow([r.row(now) for r in records])
    table = DeltaTable(history_uri, storage_options)
    try:
        table.version()
    except TableNotFoundError:
        try:
            DeltaTable.create(history_uri, MAINTENANCE_HISTORY_SCHEMA, storage_options=storage_options,
                              name="airflow_delta_maintenance_history",
                              description="airflow-delta: one row per maintenance run and health check")
        except TableAlreadyExistsError:
            pass  # another task created it meanwhile: append to theirs
    return table.append(data).version


def read_history(
    history_uri: str,
    storage_options: Mapping[str, Any] | None = None,
    *,
    table_uri: str | None = None,
    operation: str | None = None,
    since_ms: int | None = None,
) -> list[dict[str, Any]]:
    """Rows of the history, oldest first, optionally of one table, one operation, or since a time;
    ``metrics`` parsed back to a dict. An absent history is empty."""
    check_str("table_uri", table_uri, optional=True)
    check_str("operation", operation, optional=True)
    check_int("since_ms", since_ms, minimum=0, optional=True)
    clauses = []
    if table_uri is not None:
        clauses.append("table_uri = '" + table_uri.replace("'", "''") + "'")
    if operation is not None:
        clauses.append("operation = '" + operation.replace("'", "''") + "'")
    if since_ms is not None:
        clauses.append(f"recorded_ms >= {since_ms}")
    try:
        snapshot = DeltaTable(history_uri, storage_options).snapshot()
    except TableNotFoundError:
        return []
    data = snapshot.to_arrow(filter=" AND ".join(clauses) or None)
    rows = data.drop_columns(["recorded_at"]).to_pylist()
    rows.sort(key=lambda r: r["recorded_ms"])
    for row in rows:
        if row.get("metrics"):
            row["metrics"] = json.loads(row["metrics"])
    return rows


def latest_health(rows: Sequence[Mapping[str, Any]]) -> dict[str, TableHealthRecord]:
    """Each table's newest health record in ``rows`` (as :func:`read_history` returns them)."""
    newest: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        if row.get("operation") == HEALTH and isinstance(row.get("metrics"), Mapping):
            current = newest.get(row["table_uri"])
            if current is None or row["recorded_ms"] >= current["recorded_ms"]:
                newest[row["table_uri"]] = row
    return {table: TableHealthRecord.from_dict(row["metrics"]) for table, row in newest.items()}


__all__ = [
    "HEALTH", "MAINTENANCE_HISTORY_SCHEMA", "MaintenanceRecord", "append_history", "latest_health", "read_history",
]
