"""One commit of many ``add`` actions: staging (every action's fields checked) and writing the log line.

A fresh partitioned table gets one commit of 10,000 or 100,000 ``add`` actions whose
partition values and statistics hold non-ASCII text (written as raw UTF-8). Ours:
``Transaction.add_files`` then ``commit("WRITE")``; delta-rs:
``DeltaTable.create_write_transaction(actions, "append", ...)``. The data files are not
written (a commit does not open them), so the time is the commit path alone: argument
checks, JSON serialisation, the put-if-absent write and post-commit work (``.crc``).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from benchmarks._harness import Case, data_dir

SIZES = (10_000, 100_000)
_STATS = '{"numRecords":100,"minValues":{"id":0,"name":"ä😀"},"maxValues":{"id":99,"name":"ö😀"},"nullCount":{"id":0,"name":0}}'


def cases() -> list[Case]:
    scratch = str(data_dir("large_commit"))
    return [Case(f"commit of {n:,} adds", ours="ours", theirs="delta_rs", args=(scratch, n), repeat=3) for n in SIZES]


def _fresh(scratch: str) -> str:
    path = Path(scratch) / uuid.uuid4().hex
    shutil.rmtree(path, ignore_errors=True)
    return str(path)


def _schema():  # type: ignore[no-untyped-def]
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("name", pa.string()), ("p", pa.string())])


def ours(scratch: str, n: int) -> int:
    from airflow_delta.engine import AddFile, DeltaTable

    path = _fresh(scratch)
    table = DeltaTable.create(path, _schema(), partition_by=["p"])
    adds = [
        AddFile(f"p=%C3%A9{i % 100}/part-{i:06d}.parquet", {"p": f"é{i % 100}"}, 4096, 1_700_000_000_000, True, _STATS)
        for i in range(n)
    ]
    with table.transaction() as txn:
        txn.add_files(adds)
        version = txn.commit("WRITE")
    shutil.rmtree(path)
    assert version == 1
    return version


def delta_rs(scratch: str, n: int) -> int:
    import deltalake
    from deltalake.transaction import AddAction

    path = _fresh(scratch)
    deltalake.DeltaTable.create(path, _schema(), partition_by=["p"])
    table = deltalake.DeltaTable(path)
    adds = [
        AddAction(f"p=%C3%A9{i % 100}/part-{i:06d}.parquet", 4096, {"p": f"é{i % 100}"}, 1_700_000_000_000, True, _STATS)
        for i in range(n)
    ]
    table.create_write_transaction(adds, "append", _schema(), partition_by=["p"])
    version = deltalake.DeltaTable(path).version()
    shutil.rmtree(path)
    assert version == 1
    return version
