"""The DML driver loop (``run_with_retries``) against a concurrent metadata change, through the worker's UPDATE.

Delta raises ``MetadataChangedException`` for a concurrent metadata update and calls it
retryable. The loop plans again on the new snapshot when the change left the table's
schema and partitioning alone (a property), and fails with Delta's error when it did not
(a new column): no Spark is started, the worker's UPDATE runs the same loop as the jobs.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable, Metadata, MetadataChangedException, Transaction
from airflow_delta.spark.commit_loop import metadata_change_replannable
from airflow_delta.spark.specs import ExecutionOptions, TableRef, TaskIdentity, UpdateSpec
from airflow_delta.spark.update_worker import run_update_in_worker
from tests.oracles import assert_oracles_read

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.string())])
ROWS = [{"id": i, "part": "ab"[i % 2], "value": f"v{i}"} for i in range(6)]
_runs = itertools.count()


def _table(path: Path) -> DeltaTable:
    table = DeltaTable.create(str(path), SCHEMA, partition_by=["part"])
    table.append(pa.Table.from_pylist(ROWS, schema=SCHEMA))
    return table


def _spec(path: Path) -> UpdateSpec:
    identity = TaskIdentity("loop_tests", "u", f"run-{next(_runs)}")
    return UpdateSpec(TableRef(str(path)), {"value": "'u'"}, "id = 2", identity, ExecutionOptions(backoff_initial_seconds=0))


def _with_column(metadata: Metadata, name: str) -> Metadata:
    """``metadata`` with a nullable string column added (ALTER TABLE ADD COLUMNS)."""
    schema = json.loads(metadata.schema_string)
    schema["fields"].append({"name": name, "type": "string", "nullable": True, "metadata": {}})
    return replace(metadata, schema_string=json.dumps(schema))


def _on_first_attempt(table: DeltaTable, change: Callable[[Transaction], None], operation: str) -> tuple[list[int], Callable[[int], None]]:
    """A ``before_commit`` that commits ``change`` as another writer just before the first attempt commits."""
    attempts: list[int] = []

    def before_commit(attempt: int) -> None:
        attempts.append(attempt)
        if attempt == 1:
            with table.transaction() as txn:
                change(txn)
                txn.commit(operation)

    return attempts, before_commit


def test_an_update_that_lost_to_a_property_change_is_planned_again_and_commits(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    attempts, before_commit = _on_first_attempt(
        table, lambda txn: txn.set_properties({"airflow_delta.test.owner": "ingest"}), "SET TBLPROPERTIES"
    )

    result = run_update_in_worker(_spec(path), before_commit=before_commit)

    assert attempts == [1, 2] and result.attempts == 2
    assert (result.read_version, result.version) == (2, 3)  # planned again on the property's version
    assert DeltaTable(str(path)).snapshot().metadata.configuration["airflow_delta.test.owner"] == "ingest"
    assert_oracles_read(str(path), [{**r, "value": "u"} if r["id"] == 2 else r for r in ROWS])


def test_an_update_that_lost_to_a_schema_change_fails_with_deltas_error(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    attempts, before_commit = _on_first_attempt(
        table, lambda txn: txn.set_metadata(_with_column(txn.metadata, "note")), "ADD COLUMNS"
    )

    with pytest.raises(MetadataChangedException, match="winning commit: version 2"):
        run_update_in_worker(_spec(path), before_commit=before_commit)

    assert attempts == [1]
    assert DeltaTable(str(path)).version() == 2
    assert_oracles_read(str(path), [{**r, "note": None} for r in ROWS])


def test_only_changes_of_properties_name_and_description_are_planned_again(tmp_path: Path) -> None:
    read = _table(tmp_path / "t").snapshot().metadata

    assert metadata_change_replannable(read, replace(read, configuration={"k": "v"}, name="n", description="d"))
    assert not metadata_change_replannable(read, _with_column(read, "note"))
    assert not metadata_change_replannable(read, replace(read, partition_columns=()))
    assert not metadata_change_replannable(read, replace(read, id="another-table"))
