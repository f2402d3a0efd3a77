"""Small tables with different maintenance needs, written by the engine, for the fleet tests."""

from __future__ import annotations

import pyarrow as pa

from airflow_delta.engine import DeltaTable, OptimizeOptions

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])


def rows(ids: range, day: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "day": [day] * len(ids)}, schema=SCHEMA)


def small_files_table(path: str, files: int = 6) -> DeltaTable:
    """``files`` one-batch appends into one partition: compaction would leave one file."""
    table = DeltaTable.create(path, SCHEMA, partition_by=["day"], properties={"delta.checkpointInterval": "1000"})
    for i in range(files):
        table.append(rows(range(10 * i, 10 * i + 10), "2024-01-01"))
    return table


def deletion_vector_table(path: str) -> DeltaTable:
    """One file with a deletion vector deleting 30% of its rows: above the purge ratio."""
    table = DeltaTable.create(path, SCHEMA, properties={"delta.enableDeletionVectors": "true",
                                                        "delta.checkpointInterval": "1000"})
    table.append(rows(range(100), "2024-01-01"))
    table.delete("id < 30")
    return table


def vacuum_table(path: str) -> DeltaTable:
    """Compacted once: the compacted files are tombstones (vacuumable once past the retention)."""
    table = small_files_table(path, files=4)
    table.optimize(OptimizeOptions())
    return table


def long_log_table(path: str, commits: int = 12) -> DeltaTable:
    """A table with one file per commit and no checkpoint: a long log tail."""
    table = DeltaTable.create(path, SCHEMA, properties={"delta.checkpointInterval": "1000"})
    for i in range(commits):
        table.append(rows(range(i, i + 1), "2024-01-01"))
    return table
