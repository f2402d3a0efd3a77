"""VACUUM and the change data files our DELETE writes: kept within the retention, removed after it, as Delta does.

Delta keeps no ``cdc`` action in the table's state: VACUUM treats ``_change_data`` files
like other files no snapshot references, deleting them once older than the retention.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa

from airflow_delta.engine import DeltaTable
from tests.oracles import read_change_feed_with_deltars, read_with_deltars, read_with_kernel


def test_change_files_stay_within_the_retention_and_go_after_it(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    table = DeltaTable.create(path, schema, partition_by=["p"], properties={"delta.enableChangeDataFeed": "true"})
    table.append(pa.table({"id": list(range(10)), "p": ["a", "b"] * 5}, schema=schema))
    version = table.delete("id < 4").version
    assert version is not None
    change_files = sorted(Path(path, "_change_data").rglob("*.parquet"))
    feed = read_change_feed_with_deltars(path, version)
    assert len(change_files) == 2 and len(feed) == 4

    kept = table.vacuum()  # the default 7 days: a retained version may still read its change data
    assert kept.num_deleted_files == 0
    assert sorted(Path(path, "_change_data").rglob("*.parquet")) == change_files
    assert read_change_feed_with_deltars(path, version) == feed

    expired = table.vacuum(retention=timedelta(0), enforce_retention_duration=False)
    assert not list(Path(path, "_change_data").rglob("*.parquet"))
    assert expired.num_deleted_files == len(change_files) + 2  # and the two rewritten data files
    assert read_with_deltars(path) == read_with_kernel(path) == [{"id": i, "p": "ab"[i % 2]} for i in range(4, 10)]
