"""Deleting rows through deletion vectors: what ``Transaction.delete_rows`` stages and commits.

Conflicts between concurrent row deletions, the protocol upgrade when DVs are enabled
in the same transaction, and delta-rs reading the result stay in test_transaction.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.errors import DeletionVectorsNotEnabledError, InvalidTransactionError
from airflow_delta.engine.model.actions import AddFile
from airflow_delta.engine.write.row_deletion import RowDeletion, live_files_by_path, num_records_of, stage_row_deletion
from tests.engine.write.transaction_helpers import (
    FLAT_SCHEMA,
    _dv_table,
    _live,
    _path_of,
    commit_lines,
    data_files,
    flat_rows,
    live_paths,
)


def test_delete_rows_merges_with_the_existing_deletion_vector(table_path: str) -> None:
    from airflow_delta.engine.model.deletion_vector_files import read_deletion_vector

    t = _dv_table(table_path)
    a, bc = _path_of(t, "a"), _path_of(t, "b c")
    assert bc == "p=b c/" + bc.split("/", 1)[1]  # decoded path, as files() gives it
    with t.transaction() as txn:
        first = txn.delete_rows({a: [0, 1, 2], bc: [9]})
        v1 = txn.commit("DELETE")
    assert (first.num_deleted_rows, first.num_deletion_vectors_added, first.num_deletion_vectors_updated) == (4, 2, 0)
    lines = commit_lines(t, v1)
    adds = [line["add"] for line in lines if "add" in line]
    # Both DVs packed into one new DV file, at different offsets.
    assert len({a["deletionVector"]["pathOrInlineDv"] for a in adds}) == 1
    assert sorted(a["deletionVector"]["offset"] for a in adds)[0] == 1
    with t.transaction() as txn:
        files = txn.read_files("p = 'a'")  # log paths work as keys too
        second = txn.delete_rows({files.column("path")[0].as_py(): [2, 3, 9]})  # row 2 is already deleted
        v2 = txn.commit("DELETE")
    assert second.num_deleted_rows == 2 and second.num_deletion_vectors_updated == 1
    lines = commit_lines(t, v2)
    (remove,) = [line["remove"] for line in lines if "remove" in line]
    (add,) = [line["add"] for line in lines if "add" in line]
    old = next(x["add"] for x in commit_lines(t, v1) if "add" in x and x["add"]["partitionValues"]["p"] == "a")
    assert remove["deletionVector"] == old["deletionVector"]  # the old (path, dv) goes
    assert remove["dataChange"] is True and remove["extendedFileMetadata"] is True
    assert remove["size"] == old["size"] and remove["partitionValues"] == {"p": "a"} and remove["stats"] == old["stats"]
    assert add["path"] == remove["path"] and add["deletionVector"]["cardinality"] == 5  # union, not a sum
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 10 and stats["tightBounds"] is False
    assert stats["minValues"] == {"id": 0, "value": "v0"}  # bounds kept (now wide), as Delta does
    from airflow_delta.engine.model.actions import DeletionVectorDescriptor

    dv = read_deletion_vector(t.io, t.root, DeletionVectorDescriptor.from_json(add["deletionVector"]), num_records=10)
    assert dv.to_numpy().tolist() == [0, 1, 2, 3, 9]
    assert _live(t) == [4, 5, 6, 7, 8, *range(100, 109)]



def test_delete_rows_removes_a_file_that_loses_every_row(table_path: str) -> None:
    t = _dv_table(table_path)
    a = _path_of(t, "a")
    with t.transaction() as txn:
        txn.delete_rows({a: range(0, 10, 2)})
        txn.commit("DELETE")
    with t.transaction() as txn:
        summary = txn.delete_rows({a: range(1, 10, 2)})
        version = txn.commit("DELETE")
    assert summary.num_removed_files == 1 and summary.removed_paths == (a,)
    assert summary.num_deletion_vectors_removed == 1 and summary.adds == ()
    lines = commit_lines(t, version)
    assert not [x for x in lines if "add" in x]
    (remove,) = [x["remove"] for x in lines if "remove" in x]
    assert remove["deletionVector"]["cardinality"] == 5
    assert _live(t) == list(range(100, 110))
    assert a not in live_paths(t)



def test_delete_rows_of_already_deleted_rows_stages_nothing(table_path: str) -> None:
    t = _dv_table(table_path)
    a = _path_of(t, "a")
    with t.transaction() as txn:
        txn.delete_rows({a: [4]})
        txn.commit("DELETE")
    txn = t.transaction()
    summary = txn.delete_rows({a: [4, 4]})
    assert summary.num_deleted_rows == 0 and not txn.has_staged_actions
    txn.abort()



def test_delete_rows_refuses_rows_past_the_end_and_unknown_files(table_path: str) -> None:
    from airflow_delta.engine.errors import RowIndexOutOfRangeError

    t = _dv_table(table_path)
    a = _path_of(t, "a")
    txn = t.transaction()
    with pytest.raises(RowIndexOutOfRangeError, match="has 10 records") as info:
        txn.delete_rows({a: [3, 10]})
    assert (info.value.row_index, info.value.num_records) == (10, 10)
    with pytest.raises(InvalidTransactionError, match="not a live file"):
        txn.delete_rows({"p=a/missing.parquet": [0]})
    txn.delete_rows({a: [1]})
    with pytest.raises(InvalidTransactionError, match="already removed in this transaction"):
        txn.delete_rows({a: [2]})
    # Only the one accepted call wrote a DV; refused calls write nothing.
    assert len([n for n in os.listdir(t.root) if n.startswith("deletion_vector_")]) == 1
    txn.abort()
    # Aborting removes the DV file the transaction wrote.
    assert [n for n in os.listdir(t.root) if n.startswith("deletion_vector_")] == []



def test_delete_rows_uses_a_random_prefix_when_asked(table_path: str) -> None:
    t = DeltaTable.create(
        table_path,
        FLAT_SCHEMA,
        properties={
            "delta.enableDeletionVectors": "true",
            "delta.randomizeFilePrefixes": "true",
            "delta.randomPrefixLength": "3",
        },
    )
    t.append(flat_rows(list(range(5))))
    (path,) = t.snapshot().files().column("path").to_pylist()
    with t.transaction() as txn:
        txn.delete_rows({path: [1]})
        version = txn.commit("DELETE")
    (add,) = [x["add"] for x in commit_lines(t, version) if "add" in x]
    encoded = add["deletionVector"]["pathOrInlineDv"]
    assert len(encoded) == 23  # 3 prefix characters + the 20-character Z85 UUID
    prefix = encoded[:3]
    assert prefix.isalnum() and any(n.startswith("deletion_vector_") for n in os.listdir(Path(t.root, prefix)))
    assert sorted(t.snapshot().to_arrow().column("id").to_pylist()) == [0, 2, 3, 4]



def test_delete_rows_on_a_file_without_statistics_records_num_records(table_path: str) -> None:
    t = DeltaTable.create(table_path, FLAT_SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    with t.transaction() as txn:
        (add,) = data_files(txn, flat_rows([7, 8, 9]))
        txn.add(AddFile(add.path, {}, add.size, add.modification_time))  # no stats at all
        txn.commit("WRITE")
    with t.transaction() as txn:
        txn.delete_rows({add.path: [1]})
        version = txn.commit("DELETE")
    (new,) = [x["add"] for x in commit_lines(t, version) if "add" in x]
    # A file with a DV must state its physical row count (spec, Per-file Statistics): taken from the footer.
    assert json.loads(new["stats"]) == {"numRecords": 3, "tightBounds": False}
    assert sorted(t.snapshot().to_arrow().column("id").to_pylist()) == [7, 9]



# ------------------------------------------------------------------ the staging functions themselves


def test_stage_row_deletion_writes_dvs_and_returns_actions_without_committing(table_path: str) -> None:
    t = _dv_table(table_path)
    snapshot = t.snapshot()
    a = _path_of(t, "a")
    summary = stage_row_deletion(
        snapshot, snapshot.metadata, {a: [1, 3]}, table_uri=t.root, already_removed=(), deletion_timestamp=None,
        clock=lambda: 4242,
    )
    assert summary.num_deleted_rows == 2 and summary.num_deletion_vectors_added == 1
    (remove,) = summary.removes
    (add,) = summary.adds
    assert remove.deletion_timestamp == 4242 and remove.deletion_vector is None
    assert add.path == remove.path and add.deletion_vector is not None and add.deletion_vector.cardinality == 2
    assert t.version() == snapshot.version  # nothing committed
    assert _live(t) == [*range(10), *range(100, 110)]


def test_stage_row_deletion_needs_deletion_vectors_and_stages_nothing_for_no_rows(table_path: str) -> None:
    t = DeltaTable.create(table_path, FLAT_SCHEMA)
    snapshot = t.snapshot()
    with pytest.raises(DeletionVectorsNotEnabledError):
        stage_row_deletion(
            snapshot, snapshot.metadata, {}, table_uri=t.root, already_removed=(), deletion_timestamp=1, clock=lambda: 1
        )
    enabled = dataclasses.replace(snapshot.metadata, configuration={"delta.enableDeletionVectors": "true"})
    none = stage_row_deletion(
        snapshot, enabled, {}, table_uri=t.root, already_removed=(), deletion_timestamp=1, clock=lambda: 1
    )
    assert none == RowDeletion()


def test_live_files_by_path_accepts_log_paths_and_decoded_paths(table_path: str) -> None:
    t = _dv_table(table_path)
    snapshot = t.snapshot()
    decoded = _path_of(t, "b c")
    log_path = next(p for p in snapshot.add_actions.column("path").to_pylist() if p.startswith("p=b%20c/"))
    for key in (decoded, log_path):
        found = live_files_by_path(snapshot, [key])
        assert found.column("key").to_pylist() == [key]
        assert found.column("path").to_pylist() == [log_path]
    with pytest.raises(InvalidTransactionError, match=r"'nope.parquet' is not a live file .*\(1 more"):
        live_files_by_path(snapshot, ["nope.parquet", "other.parquet"])


def test_num_records_of_reads_the_footer_whatever_the_statistics_say(table_path: str) -> None:
    t = _dv_table(table_path)
    snapshot = t.snapshot()
    row = live_files_by_path(snapshot, [_path_of(t, "a")]).to_pylist()[0]
    assert num_records_of(snapshot, row) == 10
    for stats in ('{"numRecords": 7}', '{"numRecords": 70}', '{"numRecords": -1}', None, '{"minValues": {}}'):
        assert num_records_of(snapshot, dict(row, stats=stats)) == 10
