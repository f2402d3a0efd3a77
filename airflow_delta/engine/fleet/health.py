"""Fleet health: one small, JSON-ready record per table, read in parallel from the log only.

Each table's record comes from its :meth:`DeltaTable.health` report (the newest checkpoint
and the commits after it, never a data file) plus what the log tail says about recent
maintenance. Tables are read on a bounded thread pool and each snapshot is dropped once
its record is built, so memory holds at most ``parallelism`` tables at a time whatever the
fleet's size. A table that cannot be read, or that uses a feature the engine refuses, gets
a record with ``status`` ``unreadable`` or ``refused`` and the reason; it never stops the rest.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from airflow_delta.engine.errors import InvalidArgumentError, UnsupportedFeatureError
from airflow_delta.engine.model.arguments import check_int, check_number
from airflow_delta.engine.operations.health import health_report
from airflow_delta.engine.read.snapshot import Snapshot
from airflow_delta.engine.table import DeltaTable

DEFAULT_FLEET_PARALLELISM = 8

# commitInfo operations that count as each kind of maintenance.
OPTIMIZE_OPERATIONS = frozenset({"OPTIMIZE"})
VACUUM_OPERATIONS = frozenset({"VACUUM END", "VACUUM START"})

STATUS_OK, STATUS_UNREADABLE, STATUS_REFUSED = "ok", "unreadable", "refused"


@dataclass(frozen=True, slots=True)
class TableHealthRecord:
    """One table's health as the planner and the "Delta tables" page need it; plain values only.

    ``status`` is ``ok``, ``unreadable`` (``reason`` says why) or ``refused`` (a protocol
    feature the engine does not implement). Files: ``num_files``, ``size_in_bytes``,
    ``small_files`` and their bytes, ``files_after_optimize`` (what compaction would leave).
    Deletion vectors: ``files_with_deletion_vectors``, ``deleted_rows_ratio`` (deleted rows
    over the rows of the live files), ``files_above_purge_ratio`` and their bytes.
    Tombstones: ``tombstones``, ``vacuumable_files`` and ``vacuumable_bytes`` (what a lite
    VACUUM's dry run would delete now). Log: ``commits_since_checkpoint``,
    ``last_checkpoint_version``, ``log_files``, ``log_size_in_bytes``. Maintenance seen in
    the log tail (commits after the newest checkpoint; None when none there):
    ``last_optimize_ms``, ``last_vacuum_ms`` (and how long before ``checked_ms``:
    ``ms_since_last_optimize``, ``ms_since_last_vacuum``), and ``last_checkpoint_ms`` (the
    checkpoint's file time). ``size_histogram``: ``[lower, upper, files, bytes]`` per bucket.
    """

    table: str
    status: str
    checked_ms: int
    elapsed_ms: int
    reason: str | None = None
    error_type: str | None = None
    version: int | None = None
    last_commit_ms: int | None = None
    partition_columns: tuple[str, ...] = ()
    num_files: int = 0
    size_in_bytes: int = 0
    target_file_size: int = 0
    small_files: int = 0
    small_file_bytes: int = 0
    files_after_optimize: int = 0
    partitions_with_most_small_files: tuple[tuple[str, int], ...] = ()
    files_with_deletion_vectors: int = 0
    deleted_rows: int = 0
    total_rows: int | None = None
    deleted_rows_ratio: float = 0.0
    files_above_purge_ratio: int = 0
    bytes_above_purge_ratio: int = 0
    tombstones: int = 0
    tombstone_bytes: int = 0
    vacuumable_files: int = 0
    vacuumable_bytes: int = 0
    retention_ms: int = 0
    commits_since_checkpoint: int = 0
    last_checkpoint_version: int | None = None
    last_checkpoint_ms: int | None = None
    log_files: int = 0
    log_size_in_bytes: int = 0
    last_optimize_ms: int | None = None
    last_vacuum_ms: int | None = None
    ms_since_last_optimize: int | None = None
    ms_since_last_vacuum: int | None = None
    size_histogram: tuple[tuple[int, int | None, int, int], ...] = field(default=())
    recommendations: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (tuples as lists): what XCom and the page's API carry."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableHealthRecord:
        """The record back from :meth:`to_dict` (an XCom value); unknown keys are refused."""
        if not isinstance(data, Mapping):
            raise InvalidArgumentError("record", data, "pass a dict made by TableHealthRecord.to_dict()")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown or "table" not in data or "status" not in data:
            raise InvalidArgumentError(
                "record", sorted(unknown) or data, "pass a dict made by TableHealthRecord.to_dict() (table, status, ...)"
            )
        values = dict(data)
        for name in ("partition_columns", "recommendations"):
            if name in values:
                values[name] = tuple(values[name])
        if "partitions_with_most_small_files" in values:
            values["partitions_with_most_small_files"] = tuple(
                (str(p), int(n)) for p, n in values["partitions_with_most_small_files"]
            )
        if "size_histogram" in values:
            values["size_histogram"] = tuple(tuple(b) for b in values["size_histogram"])
        return cls(**values)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _now_ms(now: datetime | int | None) -> int:
    if now is None:
        return int(time.time() * 1000)
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise InvalidArgumentError("now", now, "pass a timezone-aware datetime or epoch milliseconds")
        return int(now.timestamp() * 1000)
    check_int("now", now, minimum=0)
    return now


def _last_maintenance(snapshot: Snapshot, operations: frozenset[str]) -> int | None:
    """Timestamp of the newest commit in the log tail whose operation is one of ``operations``."""
    newest = None
    for version in sorted(snapshot.tail_commit_infos, reverse=True):
        info = snapshot.tail_commit_infos[version]
        if info.get("operation") in operations:
            stamp = info.get("inCommitTimestamp", info.get("timestamp"))
            newest = int(stamp) if isinstance(stamp, (int, float)) else None
            break
    return newest


def table_health_record(
    table: str,
    storage_options: Mapping[str, Any] | None = None,
    *,
    now: datetime | int | None = None,
    target_file_size: int | None = None,
    max_deleted_rows_ratio: float = 0.05,
) -> TableHealthRecord:
    """The health record of one table; never raises for a table that cannot be read (see ``status``)."""
    now_ms = _now_ms(now)
    started = time.monotonic()
    try:
        snapshot = DeltaTable(table, storage_options).snapshot()
        report = health_report(
            snapshot, now_ms=now_ms, target_file_size=target_file_size, max_deleted_rows_ratio=max_deleted_rows_ratio
        )
    except UnsupportedFeatureError as error:
        return _failed(table, STATUS_REFUSED, error, now_ms, started)
    except Exception as error:  # any table's failure is its record, never the fleet's
        return _failed(table, STATUS_UNREADABLE, error, now_ms, started)
    last_optimize = _last_maintenance(snapshot, OPTIMIZE_OPERATIONS)
    last_vacuum = _last_maintenance(snapshot, VACUUM_OPERATIONS)
    segment = snapshot.log_segment
    checkpoint_ms = segment.checkpoint_files[0].modification_time if segment.checkpoint_files else None
    total_rows = report.total_rows
    return TableHealthRecord(
        table=table,
        status=STATUS_OK,
        checked_ms=now_ms,
        elapsed_ms=int((time.monotonic() - started) * 1000),
        version=report.version,
        last_commit_ms=snapshot.timestamp,
        partition_columns=tuple(snapshot.metadata.partition_columns),
        num_files=report.num_files,
        size_in_bytes=report.size_in_bytes,
        target_file_size=report.target_file_size,
        small_files=report.small_files,
        small_file_bytes=report.small_file_bytes,
        files_after_optimize=report.files_after_optimize,
        partitions_with_most_small_files=report.partitions_with_most_small_files,
        files_with_deletion_vectors=report.files_with_deletion_vectors,
        deleted_rows=report.deleted_rows,
        total_rows=total_rows,
        deleted_rows_ratio=report.deleted_rows / total_rows if total_rows else 0.0,
        files_above_purge_ratio=report.files_above_purge_ratio,
        bytes_above_purge_ratio=report.bytes_above_purge_ratio,
        tombstones=report.tombstones,
        tombstone_bytes=report.tombstone_bytes,
        vacuumable_files=report.vacuumable_tombstones,
        vacuumable_bytes=report.vacuumable_bytes,
        retention_ms=int(snapshot.properties.deleted_file_retention.total_seconds() * 1000),
        commits_since_checkpoint=report.commits_since_checkpoint,
        last_checkpoint_version=report.last_checkpoint_version,
        last_checkpoint_ms=checkpoint_ms,
        log_files=report.log_files,
        log_size_in_bytes=report.log_size_in_bytes,
        last_optimize_ms=last_optimize,
        last_vacuum_ms=last_vacuum,
        ms_since_last_optimize=None if last_optimize is None else max(0, now_ms - last_optimize),
        ms_since_last_vacuum=None if last_vacuum is None else max(0, now_ms - last_vacuum),
        size_histogram=tuple((b.lower, b.upper, b.files, b.bytes) for b in report.size_histogram),
        recommendations=report.recommendations,
    )


def _failed(table: str, status: str, error: Exception, now_ms: int, started: float) -> TableHealthRecord:
    reason = str(error) or type(error).__name__
    return TableHealthRecord(
        table=table, status=status, checked_ms=now_ms, elapsed_ms=int((time.monotonic() - started) * 1000),
        reason=reason[:2000], error_type=type(error).__name__,
    )


def iter_fleet_health(
    tables: Iterable[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    parallelism: int = DEFAULT_FLEET_PARALLELISM,
    now: datetime | int | None = None,
    target_file_size: int | None = None,
    max_deleted_rows_ratio: float = 0.05,
) -> Iterator[TableHealthRecord]:
    """Each table's record, in the order given, read on ``parallelism`` threads.

    At most ``2 * parallelism`` tables are in flight: the next is submitted as a record is
    taken, so memory stays bounded by the tables being read, not by the fleet.
    """
    check_int("parallelism", parallelism, minimum=1)
    check_int("target_file_size", target_file_size, minimum=1, optional=True)
    check_number("max_deleted_rows_ratio", max_deleted_rows_ratio, minimum=0)
    now_ms = _now_ms(now)

    def one(uri: str) -> TableHealthRecord:
        return table_health_record(
            uri, storage_options, now=now_ms, target_file_size=target_file_size,
            max_deleted_rows_ratio=max_deleted_rows_ratio,
        )

    names = iter(tables)
    with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="fleet-health") as pool:
        pending = [pool.submit(one, uri) for _, uri in zip(range(2 * parallelism), names, strict=False)]
        while pending:
            record = pending.pop(0).result()
            next_uri = next(names, None)
            if next_uri is not None:
                pending.append(pool.submit(one, next_uri))
            yield record


def fleet_health(
    tables: Sequence[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    parallelism: int = DEFAULT_FLEET_PARALLELISM,
    now: datetime | int | None = None,
    target_file_size: int | None = None,
    max_deleted_rows_ratio: float = 0.05,
) -> list[TableHealthRecord]:
    """:func:`iter_fleet_health` as a list (records are small: a few hundred bytes each)."""
    return list(iter_fleet_health(
        tables, storage_options, parallelism=parallelism, now=now, target_file_size=target_file_size,
        max_deleted_rows_ratio=max_deleted_rows_ratio,
    ))


__all__ = [
    "DEFAULT_FLEET_PARALLELISM",
    "STATUS_OK",
    "STATUS_REFUSED",
    "STATUS_UNREADABLE",
    "TableHealthRecord",
    "fleet_health",
    "iter_fleet_health",
    "table_health_record",
]
