"""A VACUUM retention longer than the table's ``delta.deletedFileRetentionDuration`` (issue 20, item 15).

A checkpoint keeps only the tombstones younger than the table's retention, so a full
VACUUM no longer knows that a version older than that still reads a removed file: with a
longer retention, such a version can lose files although its successor was committed
inside the window asked for. Delta behaves the same. The docs say so, and VACUUM warns.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from tests.oracles import read_with_deltars

HOUR_MS = 3_600_000
SCHEMA = pa.schema([("id", pa.int64())])


def test_a_longer_retention_than_the_table_s_warns_and_is_no_promise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA, properties={"delta.deletedFileRetentionDuration": "interval 1 hour"})
    table.append(pa.table({"id": pa.array([1], pa.int64())}))  # version 1: file f
    now = int(time.time() * 1000)
    with table.transaction() as txn:  # version 2 removes f, stamped two hours ago
        txn.remove_files(txn.read_files(), deletion_timestamp=now - 2 * HOUR_MS)
        txn.commit("DELETE")
    table.append(pa.table({"id": pa.array([2], pa.int64())}))
    table.checkpoint()  # drops f's tombstone: older than the table's hour
    for parquet in Path(path).glob("*.parquet"):
        os.utime(parquet, (now / 1000 - 3 * 86_400, now / 1000 - 3 * 86_400))
    assert read_with_deltars(path, version=1) == [{"id": 1}]

    with caplog.at_level(logging.WARNING, logger="airflow_delta.engine.operations.vacuum"):
        result = table.vacuum(retention=timedelta(days=1), now=now)
    assert "longer than the table's delta.deletedFileRetentionDuration" in caplog.text
    # Version 1's successor was committed seconds ago, inside the day asked for, yet its file is gone.
    assert result.num_deleted_files == 1
    with pytest.raises(Exception):  # noqa: B017 - delta-rs's error for the missing file
        read_with_deltars(path, version=1)
    assert read_with_deltars(path) == [{"id": 2}]


def test_the_table_s_own_retention_does_not_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA, properties={"delta.deletedFileRetentionDuration": "interval 1 hour"})
    table.append(pa.table({"id": pa.array([1], pa.int64())}))
    with caplog.at_level(logging.WARNING, logger="airflow_delta.engine.operations.vacuum"):
        table.vacuum(dry_run=True)
        table.vacuum(dry_run=True, retention=timedelta(hours=1))
    assert "longer than the table's" not in caplog.text
