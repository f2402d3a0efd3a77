"""Tables, data files and commits for transaction-level tests: written through our own Transaction."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.model.actions import AddFile
from airflow_delta.engine.storage.location import TableLocation
from airflow_delta.engine.write.transaction import Transaction
from tests.engine.commit_helpers import commit_actions

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string()), ("p", pa.string())])
FLAT_SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string())])


def rows(part: str, ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "value": [f"v{i}" for i in ids], "p": [part] * len(ids)}, schema=SCHEMA)



def flat_rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "value": [f"v{i}" for i in ids]}, schema=FLAT_SCHEMA)



def data_files(txn: Transaction, data: pa.Table) -> list[AddFile]:
    """Write ``data`` as one parquet file per partition and return its ``add`` actions (with stats)."""
    assert txn.snapshot is not None
    return write_parquet_adds(txn.location, data, tuple(txn.snapshot.partition_columns))



def write_parquet_adds(table: TableLocation, data: pa.Table, partition_columns: tuple[str, ...]) -> list[AddFile]:
    groups: dict[tuple[str, ...], list[int]] = {}
    keys = [data.column(c).to_pylist() for c in partition_columns]
    for i in range(data.num_rows):
        groups.setdefault(tuple(str(k[i]) for k in keys), []).append(i)
    adds = []
    for values, indices in groups.items():
        part = data.take(indices).drop_columns(list(partition_columns))
        directory = "/".join(f"{c}={v}" for c, v in zip(partition_columns, values, strict=True))
        relative = f"{directory}/part-{uuid.uuid4().hex}.parquet" if directory else f"part-{uuid.uuid4().hex}.parquet"
        absolute = Path(table.root, relative)
        absolute.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, absolute)
        stats = {
            "numRecords": part.num_rows,
            "minValues": {c: pc.min(part.column(c)).as_py() for c in part.column_names},
            "maxValues": {c: pc.max(part.column(c)).as_py() for c in part.column_names},
            "nullCount": {c: part.column(c).null_count for c in part.column_names},
        }
        adds.append(
            AddFile(
                path=relative,
                partition_values=dict(zip(partition_columns, values, strict=True)),
                size=absolute.stat().st_size,
                modification_time=absolute.stat().st_mtime_ns // 1_000_000,
                stats=json.dumps(stats),
            )
        )
    return adds



def commit_lines(table: DeltaTable, version: int) -> list[dict[str, Any]]:
    return commit_actions(table.root, version)



def live_paths(table: DeltaTable) -> set[str]:
    return set(table.snapshot().files().column("path").to_pylist())



def _dv_table(table_path: str, **properties: str) -> DeltaTable:
    t = DeltaTable.create(
        table_path, SCHEMA, partition_by=["p"], properties={"delta.enableDeletionVectors": "true", **properties}
    )
    t.append(rows("a", list(range(10))))
    t.append(rows("b c", list(range(100, 110))))  # a partition directory that needs URI encoding
    return t



def _live(table: DeltaTable) -> list[int]:
    return sorted(table.snapshot().to_arrow(columns=["id"]).column("id").to_pylist())



def _path_of(table: DeltaTable, part: str) -> str:
    files = table.snapshot().files(f"p = '{part}'")
    assert files.num_rows == 1
    return str(files.column("path")[0].as_py())

