"""``DeltaTable.delete`` with an ``AppTransaction`` and commitInfo ``tags``: what the Airflow
layer's in-worker DELETE relies on for exactly-once retries."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import (
    AppTransaction,
    DeltaTable,
    TransactionAlreadyCommittedError,
)
from tests.oracles import assert_oracles_read

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])


def _table(path: str) -> DeltaTable:
    table = DeltaTable.create(path, SCHEMA, partition_by=["part"])
    table.append(pa.table({"id": [1, 2, 3, 4], "part": ["a", "a", "b", "b"]}, schema=SCHEMA))
    return table


def _commit_lines(path: str, version: int) -> list[dict]:
    text = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


def test_delete_commits_the_txn_and_the_tags(table_path: str) -> None:
    table = _table(table_path)
    app = AppTransaction("airflow-delta:test", 1)

    result = table.delete("id = 1", app_transaction=app, tags={"airflowDelta.appId": app.app_id})

    assert result.version == 2
    actions = _commit_lines(table_path, 2)
    txns = [a["txn"] for a in actions if "txn" in a]
    assert [(t["appId"], t["version"]) for t in txns] == [(app.app_id, 1)]
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["tags"] == {"airflowDelta.appId": app.app_id}
    assert table.snapshot().transactions[app.app_id].version == 1
    assert_oracles_read(table_path, [{"id": 2, "part": "a"}, {"id": 3, "part": "b"}, {"id": 4, "part": "b"}])


def test_a_second_delete_with_the_same_app_transaction_is_refused_before_reading(table_path: str) -> None:
    table = _table(table_path)
    app = AppTransaction("airflow-delta:test", 1)
    table.delete("part = 'a'", app_transaction=app)

    with pytest.raises(TransactionAlreadyCommittedError, match="already committed"):
        table.delete("part = 'b'", app_transaction=app)

    assert table.version() == 2
    assert_oracles_read(table_path, [{"id": 3, "part": "b"}, {"id": 4, "part": "b"}])


def test_a_delete_matching_nothing_commits_no_txn(table_path: str) -> None:
    table = _table(table_path)
    app = AppTransaction("airflow-delta:test", 1)

    result = table.delete("id = 99", app_transaction=app)

    assert result.version is None
    assert app.app_id not in table.snapshot().transactions


def test_a_late_delete_on_an_old_snapshot_fails_when_the_app_id_committed_since(table_path: str) -> None:
    table = _table(table_path)
    app = AppTransaction("airflow-delta:test", 1)
    stale = table.snapshot()
    table.delete("id = 1", app_transaction=app)  # the earlier try's commit lands first

    with pytest.raises(TransactionAlreadyCommittedError):
        table.delete("id = 3", app_transaction=app, snapshot=stale)

    assert_oracles_read(table_path, [{"id": 2, "part": "a"}, {"id": 3, "part": "b"}, {"id": 4, "part": "b"}])
