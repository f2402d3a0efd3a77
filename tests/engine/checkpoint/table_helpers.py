"""Delta tables and snapshots for checkpoint tests: small delta-rs tables, read back through our reader."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable as RsTable
from deltalake import write_deltalake

from airflow_delta.engine.read.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.storage.fileio import LocalFileIO

IO = LocalFileIO()


def snapshot_of(path: str, version: int | None = None) -> Snapshot:
    return load_snapshot(IO, path, version)



def make_partitioned_table(path: str, commits: int = 6) -> None:
    for i in range(commits):
        data = pa.table({"a": [i, i + 100], "part": ["x" if i % 2 else "y"] * 2, "s": [f"v{i}", None]})
        write_deltalake(path, data, partition_by=["part"], mode="append")
    RsTable(path).delete("a = 1")  # a tombstone and a rewritten file

