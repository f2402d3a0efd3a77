"""A maintenance operator's result as a row of the maintenance history (docs/fleet.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_delta.engine import MaintenanceRecord
from airflow_delta.spark.specs import TaskIdentity


def _int(metrics: Mapping[str, Any], *names: str) -> int | None:
    """The first of ``names`` in ``metrics`` that holds an integer (Delta's metrics are often strings)."""
    for name in names:
        value = metrics.get(name)
        if value is None or isinstance(value, bool):
            continue
        try:
            return int(value)
        except (TypeError, ValueError):
            continue
    return None


def maintenance_record(
    table: str,
    operation: str,
    status: str,
    result: Mapping[str, Any],
    *,
    duration_ms: int,
    reason: str | None,
    identity: TaskIdentity,
) -> MaintenanceRecord:
    """One history row: the committed version, Delta's metrics, the bytes rewritten (OPTIMIZE) or
    freed (VACUUM), and the task instance that ran it."""
    metrics = dict(result.get("metrics") or {})
    version = result.get("version", result.get("end_version"))
    if operation == "CHECKPOINT":
        metrics = {k: result[k] for k in ("kind", "num_files", "size_in_bytes", "cleaned_log_files") if k in result}
    return MaintenanceRecord(
        table_uri=table,
        operation=operation,
        status=status,
        version=version if isinstance(version, int) else None,
        read_version=result.get("read_version", result.get("start_version")),
        duration_ms=duration_ms,
        bytes_rewritten=_int(metrics, "numRemovedBytes") if operation == "OPTIMIZE" else None,
        bytes_freed=_int(metrics, "sizeOfDataToDelete") if operation == "VACUUM" else None,
        files_removed=_int(metrics, "numFilesRemoved", "numRemovedFiles", "numDeletedFiles"),
        files_added=_int(metrics, "numFilesAdded", "numAddedFiles"),
        reason=reason,
        metrics=metrics or None,
        dag_id=identity.dag_id,
        task_id=identity.task_id,
        run_id=identity.run_id,
        map_index=identity.map_index,
    )
