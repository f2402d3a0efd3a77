"""The maintenance history: a Delta table our engine writes, read back by us and by delta-rs."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from airflow_delta.engine import MaintenanceRecord, append_history, read_history, table_health_record
from tests.engine.fleet.helpers import small_files_table

deltalake = pytest.importorskip("deltalake")


def test_append_creates_the_table_and_rows_read_back(tmp_path: Path) -> None:
    history = str(tmp_path / "history")
    assert read_history(history) == []
    table = small_files_table(str(tmp_path / "t"), files=3)
    record = table_health_record(table.root)
    append_history(history, [MaintenanceRecord.from_health(record, dag_id="d")])
    append_history(history, [MaintenanceRecord(table.root, "OPTIMIZE", version=4, read_version=3, duration_ms=120,
                                               bytes_rewritten=1000, reason="3 small files",
                                               metrics={"numRemovedFiles": 3, "numAddedFiles": 1})])
    rows = read_history(history)
    assert [r["operation"] for r in rows] == ["HEALTH", "OPTIMIZE"]
    assert rows[0]["num_files"] == 3 and rows[0]["dag_id"] == "d"
    assert rows[1]["metrics"] == {"numAddedFiles": 1, "numRemovedFiles": 3} and rows[1]["reason"] == "3 small files"
    assert read_history(history, table_uri=table.root, operation="OPTIMIZE")[0]["version"] == 4
    assert read_history(history, table_uri="/other") == []
    # delta-rs reads the same rows.
    theirs = deltalake.DeltaTable(history).to_pyarrow_table().to_pylist()
    assert sorted(r["operation"] for r in theirs) == ["HEALTH", "OPTIMIZE"]


def test_concurrent_appends_all_land(tmp_path: Path) -> None:
    history = str(tmp_path / "history")
    append_history(history, [MaintenanceRecord("/t/0", "VACUUM")])

    def one(i: int) -> int | None:
        return append_history(history, [MaintenanceRecord(f"/t/{i}", "VACUUM", bytes_freed=i)])

    with ThreadPoolExecutor(4) as pool:
        versions = list(pool.map(one, range(1, 9)))
    assert sorted(versions) == list(range(2, 10))  # type: ignore[type-var]  # 0: create, 1: the first append
    assert len(read_history(history, operation="VACUUM")) == 9
