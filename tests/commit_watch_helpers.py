"""A small partitioned table for the sensor and trigger tests, which watch its commits."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from airflow_delta.engine import DeltaTable

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def rows(partition: str, start: int = 0, n: int = 2) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "p": pa.array([partition] * n)})


def events_table(tmp_path: Path) -> DeltaTable:
    """``events`` under ``tmp_path``, partitioned by ``p``: version 0 creates it, versions 1 and 2 append to a and b."""
    t = DeltaTable.create(str(tmp_path / "events"), SCHEMA, partition_by=["p"])
    for p in ("a", "b"):
        t.append(rows(p))
    return t
