"""Optimistic transactions on real tables: staging, commitInfo, rebase and retry, writer checks.

"Concurrent" writers here are two transactions opened on the same snapshot, committed
one after the other: the second one finds the first in its way, exactly as when two
processes race (``test_concurrency_stress.py`` does the racing for real).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.errors import (
    AppendOnlyViolationError,
    CommitFailedError,
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    InvalidTransactionError,
    MetadataChangedException,
    ProtocolChangedException,
    TableAlreadyExistsError,
    TransactionAlreadyCommittedError,
    UnsupportedFeatureError,
)
from airflow_delta.engine.model.actions import AddCDCFile, AddFile, Protocol, RemoveFile
from airflow_delta.engine.model.commit_info import ENGINE_INFO
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.storage.fileio import LocalFileIO
from airflow_delta.engine.write.conflicts import IsolationLevel
from airflow_delta.engine.write.options import CommitOptions
from airflow_delta.engine.write.retry import RetryPolicy
from airflow_delta.engine.write.transaction import Transaction
from tests.engine.write.transaction_helpers import (
    FLAT_SCHEMA,
    SCHEMA,
    _dv_table,
    _live,
    _path_of,
    commit_lines,
    data_files,
    flat_rows,
    live_paths,
    rows,
)

# ------------------------------------------------------------------ helpers


def append(table: DeltaTable, part: str, ids: list[int]) -> int:
    with table.transaction() as txn:
        txn.add_files(data_files(txn, rows(part, ids)))
        return txn.commit("WRITE", {"mode": "Append", "partitionBy": ["p"]}, {"numFiles": 1})


def commit_info(table: DeltaTable, version: int) -> dict[str, Any]:
    first = commit_lines(table, version)[0]
    assert list(first) == ["commitInfo"], "commitInfo must be the first action"
    return first["commitInfo"]


@pytest.fixture
def table(table_path: str) -> DeltaTable:
    t = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    append(t, "a", [1, 2, 3])  # v1
    append(t, "b", [10, 11])  # v2
    return t


@pytest.fixture
def flat_table(table_path: str) -> DeltaTable:
    t = DeltaTable.create(table_path, FLAT_SCHEMA)
    with t.transaction() as txn:
        txn.add_files(data_files(txn, flat_rows([1, 2, 3])))
        txn.commit("WRITE")
    return t


# ------------------------------------------------------------------ commitInfo


def test_commit_writes_next_version_with_delta_commit_info(table: DeltaTable) -> None:
    with table.transaction() as txn:
        adds = data_files(txn, rows("c", [7]))
        txn.add_files(adds)
        version = txn.commit(
            "WRITE", {"mode": "Append", "partitionBy": ["p"], "statsOnLoad": False, "x": None}, {"numFiles": 1, "ok": True}
        )
    assert version == 3 == table.version()
    info = commit_info(table, 3)
    assert list(info)[:3] == ["timestamp", "operation", "operationParameters"]
    assert info["operation"] == "WRITE"
    # Scalars stay JSON scalars, as Delta writes them ("statsOnLoad":false); lists are JSON text.
    assert info["operationParameters"] == {"mode": "Append", "partitionBy": '["p"]', "statsOnLoad": False, "x": None}
    assert info["readVersion"] == 2
    assert info["isolationLevel"] == "WriteSerializable"
    assert info["isBlindAppend"] is True
    assert info["operationMetrics"] == {"numFiles": "1", "ok": "true"}
    assert info["engineInfo"] == ENGINE_INFO and ENGINE_INFO.startswith("airflow-delta/")
    assert info["txnId"] == txn.txn_id
    assert "inCommitTimestamp" not in info
    assert txn.committed_version == 3 and txn.attempts == 1 and txn.winning_commits == []
    assert {a.path for a in adds} <= {p.replace(" ", "%20") for p in live_paths(table)}


def test_operation_parameters_are_encoded_like_delta_writes_them(shared_tables: Path, table: DeltaTable) -> None:
    # Delta writes each parameter value as raw JSON of what the operation passed: strings as
    # strings, booleans and numbers as JSON scalars (OPTIMIZE's "auto":true), lists and maps
    # pre-encoded as JSON text ("partitionBy":"[]"). Spark reads them back as strings either way.
    log = Path(shared_tables, "cdf-table-with-cdc-and-dvs", "_delta_log", f"{3:020d}.json")
    spark_written = json.loads(log.read_text().splitlines()[0])["commitInfo"]
    assert spark_written["operation"] == "OPTIMIZE" and spark_written["operationParameters"]["auto"] is True
    spark_params = spark_written["operationParameters"]
    with table.transaction() as txn:
        txn.add_files(data_files(txn, rows("c", [8])))
        txn.commit("OPTIMIZE", {k: (json.loads(v) if isinstance(v, str) and v.startswith("[") else v)
                                for k, v in spark_params.items()})
    assert commit_info(table, 3)["operationParameters"] == spark_params


def test_read_then_write_is_not_a_blind_append(table: DeltaTable) -> None:
    with table.transaction() as txn:
        files = txn.read_files("p = 'a'")
        assert files.num_rows == 1
        txn.remove_files(files)
        txn.commit("DELETE", {"predicate": ["p = 'a'"]})
    info = commit_info(table, 3)
    assert info["isBlindAppend"] is False
    removes = [line["remove"] for line in commit_lines(table, 3) if "remove" in line]
    assert len(removes) == 1 and removes[0]["dataChange"] is True
    assert removes[0]["extendedFileMetadata"] is True and removes[0]["partitionValues"] == {"p": "a"}
    # remove_files encodes the line when staging: the generic encoder's text of the same action.
    raw = [line for line in Path(table.root, "_delta_log", f"{3:020d}.json").read_text().splitlines() if '"remove"' in line]
    assert raw == [json_text({"remove": removes[0]})]
    assert table.snapshot().files().num_rows == 1


# ------------------------------------------------------------------ rebase and retry


def test_concurrent_blind_appends_both_commit(table: DeltaTable) -> None:
    t1, t2 = table.transaction(), table.transaction()
    t1.add_files(data_files(t1, rows("a", [100])))
    t2.add_files(data_files(t2, rows("a", [200])))
    assert t1.commit("WRITE") == 3
    assert t2.commit("WRITE") == 4
    assert t2.attempts == 2
    assert [w.version for w in t2.winning_commits] == [3]
    assert commit_info(table, 4)["readVersion"] == 2  # what it read, not where it landed
    assert sorted(table.snapshot().to_arrow(columns=["id"]).column("id").to_pylist()) == [1, 2, 3, 10, 11, 100, 200]


def test_delete_conflicts_with_concurrent_non_blind_add_in_its_partition(table: DeltaTable) -> None:
    deleter = table.transaction()
    deleter.remove_files(deleter.read_files("p = 'a'"))

    merger = table.transaction()
    merger.read_files("p = 'b'")  # reads, so it is not a blind append
    merger.add_files(data_files(merger, rows("a", [4])))
    assert merger.commit("MERGE") == 3

    with pytest.raises(ConcurrentAppendException) as info:
        deleter.commit("DELETE")
    assert info.value.winning_version == 3 and info.value.winning_operation == "MERGE"
    assert info.value.conflicting == [{"p": "a"}]
    assert table.version() == 3  # the loser wrote nothing


def test_delete_rebases_over_an_append_to_another_partition(table: DeltaTable) -> None:
    deleter = table.transaction()
    deleter.remove_files(deleter.read_files("p = 'a'"))
    merger = table.transaction()
    merger.read_files("p = 'b'")
    merger.add_files(data_files(merger, rows("c", [4])))
    merger.commit("MERGE")
    assert deleter.commit("DELETE") == 4
    assert sorted(table.snapshot().to_arrow(columns=["id"]).column("id").to_pylist()) == [4, 10, 11]


def test_write_serializable_ignores_blind_appends_serializable_does_not(table: DeltaTable) -> None:
    for level, expect_conflict in ((IsolationLevel.WRITE_SERIALIZABLE, False), (IsolationLevel.SERIALIZABLE, True)):
        deleter = table.transaction(CommitOptions(isolation_level=level))
        deleter.remove_files(deleter.read_files("p = 'b'"))
        append(table, "b", [50])  # a blind append into the partition the deleter read
        if expect_conflict:
            with pytest.raises(ConcurrentAppendException):
                deleter.commit("DELETE")
        else:
            deleter.commit("DELETE")
            assert commit_info(table, table.version())["isolationLevel"] == "WriteSerializable"


def test_table_isolation_level_property_is_the_default(table_path: str) -> None:
    t = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={"delta.isolationLevel": "Serializable"})
    append(t, "a", [1])
    deleter = t.transaction()
    deleter.remove_files(deleter.read_files("p = 'a'"))
    append(t, "a", [2])
    with pytest.raises(ConcurrentAppendException):
        deleter.commit("DELETE")


def test_optimize_runs_at_snapshot_isolation(table: DeltaTable) -> None:
    append(table, "a", [4])  # v3: partition a now has two files
    optimize = table.transaction()
    small = optimize.read_files("p = 'a'")
    assert small.num_rows == 2
    optimize.remove_files(small, data_change=False)
    compacted = data_files(optimize, rows("a", [1, 2, 3, 4]))
    optimize.add_files(AddFile(**{**_fields(a), "data_change": False}) for a in compacted)

    merger = table.transaction()
    merger.read_files("p = 'b'")
    merger.add_files(data_files(merger, rows("a", [5])))
    merger.commit("MERGE")  # v4 adds into partition a: irrelevant to a rearrangement

    assert optimize.commit("OPTIMIZE") == 5
    assert commit_info(table, 5)["isolationLevel"] == "SnapshotIsolation"
    assert sorted(table.snapshot().to_arrow(columns=["id"]).column("id").to_pylist()) == [1, 2, 3, 4, 5, 10, 11]


def _compact_partition(table: DeltaTable, part: str) -> int:
    """An OPTIMIZE-like rewrite: non-blind, its removes and adds all dataChange=false."""
    optimize = table.transaction()
    files = optimize.read_files(f"p = '{part}'")
    optimize.remove_files(files, data_change=False)
    ids = sorted(table.snapshot().to_arrow(columns=["id"], filter=f"p = '{part}'").column("id").to_pylist())
    optimize.add_files(AddFile(**{**_fields(a), "data_change": False}) for a in data_files(optimize, rows(part, ids)))
    return optimize.commit("OPTIMIZE")


@pytest.mark.parametrize("level", ["WriteSerializable", "Serializable"])
def test_empty_delete_is_downgraded_only_as_delta_does(table: DeltaTable, level: str) -> None:
    # Delta's canDowngradeToSnapshotIsolation: a transaction without dataChange=true file
    # actions runs at SnapshotIsolation at Serializable, but at WriteSerializable only if
    # its operation does not change data; DELETE does (DeltaOperations.Delete.changesData).
    # So a DELETE that matched no file in partition c still sees, at WriteSerializable, a
    # non-blind winner (an OPTIMIZE; its dataChange=false adds count) adding files in c.
    deleter = table.transaction(CommitOptions(isolation_level=level))
    assert deleter.read_files("p = 'c'").num_rows == 0
    append(table, "c", [20])  # v3, a blind append: never in the way of a WriteSerializable reader
    assert _compact_partition(table, "c") == 4  # v4: non-blind, adds in c
    if level == "WriteSerializable":
        with pytest.raises(ConcurrentAppendException) as info:
            deleter.commit("DELETE")
        assert info.value.winning_version == 4
        assert table.version() == 4
    else:
        assert deleter.commit("DELETE") == 5
        assert commit_info(table, 5)["isolationLevel"] == "SnapshotIsolation"


def test_empty_optimize_is_downgraded_at_write_serializable(table: DeltaTable) -> None:
    optimize = table.transaction()
    assert optimize.read_files("p = 'c'").num_rows == 0
    append(table, "c", [20])
    _compact_partition(table, "c")  # v4
    assert optimize.commit("OPTIMIZE") == 5  # OPTIMIZE does not change data: SnapshotIsolation
    assert commit_info(table, 5)["isolationLevel"] == "SnapshotIsolation"


def test_optimize_loses_to_a_delete_of_a_file_it_compacts(table: DeltaTable) -> None:
    optimize = table.transaction()
    optimize.remove_files(optimize.read_files("p = 'a'"), data_change=False)
    deleter = table.transaction()
    deleter.remove_files(deleter.read_files("p = 'a'"))
    deleter.commit("DELETE")
    with pytest.raises(ConcurrentDeleteReadException):
        optimize.commit("OPTIMIZE")


def test_two_blind_deletes_of_the_same_file(table: DeltaTable) -> None:
    files = table.snapshot().add_actions
    target = files.filter(pc.equal(files.column("path"), files.column("path")[0]))
    first, second = table.transaction(), table.transaction()
    first.remove_files(target)
    second.remove_files(target)
    first.commit("DELETE")
    with pytest.raises(ConcurrentDeleteDeleteException):
        second.commit("DELETE")


def test_statistics_narrow_what_a_data_filter_depends_on(flat_table: DeltaTable) -> None:
    deleter = flat_table.transaction()
    deleter.remove_files(deleter.read_files("id < 10"))

    far = flat_table.transaction()
    far.mark_files_read([])  # not blind, but reads nothing
    far.read_files("id > 1000")
    far.add_files(data_files(far, flat_rows([100, 200])))
    far.commit("MERGE")  # stats: 100..200, cannot hold id < 10
    assert deleter.commit("DELETE") == 3

    deleter2 = flat_table.transaction()
    deleter2.remove_files(deleter2.read_files("id < 150"))
    near = flat_table.transaction()
    near.read_files("id > 1000")
    near.add_files(data_files(near, flat_rows([5, 6])))
    near.commit("MERGE")
    with pytest.raises(ConcurrentAppendException):
        deleter2.commit("DELETE")


def test_winner_metadata_change_aborts(table: DeltaTable) -> None:
    deleter = table.transaction()
    deleter.remove_files(deleter.read_files("p = 'a'"))
    with table.transaction() as alter:
        alter.set_properties({"delta.logRetentionDuration": "interval 60 days"})
        alter.commit("SET TBLPROPERTIES", {"properties": {"delta.logRetentionDuration": "interval 60 days"}})
    with pytest.raises(MetadataChangedException):
        deleter.commit("DELETE")


def test_winner_protocol_change_aborts(table: DeltaTable) -> None:
    writer = table.transaction()
    writer.add_files(data_files(writer, rows("a", [9])))
    with table.transaction() as upgrade:
        upgrade.set_protocol(Protocol(1, 3))
        upgrade.commit("UPGRADE PROTOCOL")
    with pytest.raises(ProtocolChangedException):
        writer.commit("WRITE")


def test_retries_are_bounded(table: DeltaTable) -> None:
    txn = table.transaction(CommitOptions(retry=RetryPolicy(max_attempts=1)))
    txn.add_files(data_files(txn, rows("a", [9])))
    append(table, "b", [1])
    with pytest.raises(CommitFailedError, match=r"after 1 attempt"):
        txn.commit("WRITE")
    assert table.version() == 3


# ------------------------------------------------------------------ idempotent writes


def test_idempotent_write_already_in_snapshot(table: DeltaTable) -> None:
    with table.transaction() as txn:
        txn.set_app_transaction("job-1", 5)
        txn.add_files(data_files(txn, rows("a", [9])))
        txn.commit("WRITE")
    txn = table.transaction()
    assert txn.read_app_transaction("job-1") == 5
    with pytest.raises(TransactionAlreadyCommittedError):
        txn.set_app_transaction("job-1", 5)
    txn.set_app_transaction("job-1", 6)


def test_idempotent_write_committed_by_a_winner_writes_nothing(table: DeltaTable) -> None:
    first, second = table.transaction(), table.transaction()
    for txn in (first, second):
        txn.set_app_transaction("job-1", 1)
        txn.add_files(data_files(txn, rows("a", [9])))
    assert first.commit("WRITE") == 3
    with pytest.raises(TransactionAlreadyCommittedError):
        second.commit("WRITE")
    assert table.version() == 3
    assert table.snapshot().transactions["job-1"].version == 1


def test_concurrent_instances_of_one_app_conflict(table: DeltaTable) -> None:
    older, newer = table.transaction(), table.transaction()
    older.set_app_transaction("job-1", 1)
    newer.set_app_transaction("job-1", 2)
    older.add_files(data_files(older, rows("a", [9])))
    newer.add_files(data_files(newer, rows("a", [8])))
    older.commit("WRITE")
    with pytest.raises(ConcurrentTransactionException):
        newer.commit("WRITE")


# ------------------------------------------------------------------ writer checks


def test_append_only_refuses_data_removal_but_allows_rearranging(table_path: str) -> None:
    t = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={"delta.appendOnly": "true"})
    append(t, "a", [1])
    txn = t.transaction()
    txn.remove_files(txn.read_files("p = 'a'"))
    with pytest.raises(AppendOnlyViolationError):
        txn.commit("DELETE")
    assert t.version() == 1
    with t.transaction() as txn:
        files = txn.read_files("p = 'a'")
        txn.remove_files(files, data_change=False)
        txn.add_files(AddFile(**{**_fields(a), "data_change": False}) for a in data_files(txn, rows("a", [1])))
        assert txn.commit("OPTIMIZE") == 2


def test_enabling_deletion_vectors_upgrades_the_protocol(table: DeltaTable) -> None:
    assert table.snapshot().protocol == Protocol(1, 2)
    with table.transaction() as txn:
        txn.set_properties({"delta.enableDeletionVectors": "true"})
        version = txn.commit("SET TBLPROPERTIES")
    protocol = table.snapshot().protocol
    assert protocol == Protocol(3, 7, frozenset({"deletionVectors"}), frozenset({"appendOnly", "invariants", "deletionVectors"}))
    kinds = [next(iter(line)) for line in commit_lines(table, version)]
    assert kinds == ["commitInfo", "protocol", "metaData"]


def test_duplicate_and_misplaced_actions_are_refused(table: DeltaTable) -> None:
    txn = table.transaction()
    add = data_files(txn, rows("a", [9]))[0]
    txn.add(add)
    txn.add(add)
    with pytest.raises(InvalidTransactionError, match="twice"):
        txn.commit("WRITE")
    txn = table.transaction()
    txn.add(AddFile(**{**_fields(add), "partition_values": {"q": "a"}}))
    with pytest.raises(InvalidTransactionError, match="partition"):
        txn.commit("WRITE")
    assert table.version() == 2



def test_removes_staged_as_batches_and_one_by_one_are_checked_and_written_in_staging_order(table: DeltaTable) -> None:
    """remove_files() stages a batch (columns); the duplicate check and the log see the same removes,
    in the order they were staged, as if each had been staged alone."""
    for stage_twice in (
        lambda txn, files: (txn.remove_files(files), txn.remove_files(files)),
        lambda txn, files: (txn.remove_files(files), txn.remove(_single_remove(files, 1))),
        lambda txn, files: (txn.remove(_single_remove(files, 1)), txn.remove_files(files)),
    ):
        txn = table.transaction()
        stage_twice(txn, txn.read_files("p = 'a'"))
        with pytest.raises(InvalidTransactionError, match=r"p=a/.*is removed twice"):
            txn.commit("DELETE")
    for part, ids in (("a", [4]), ("b", [12]), ("b", [13])):
        append(table, part, ids)
    txn = table.transaction()
    files_a, files_b = txn.read_files("p = 'a'"), txn.read_files("p = 'b'")
    assert (files_a.num_rows, files_b.num_rows) == (2, 3)
    single = _single_remove(files_b, 5)
    txn.remove_files(files_a, deletion_timestamp=7)
    txn.remove(single)
    txn.remove_files(files_b.slice(1), deletion_timestamp=7)
    version = txn.commit("DELETE")
    removes = [line["remove"] for line in commit_lines(table, version) if "remove" in line]
    assert [r["path"] for r in removes] == [
        *files_a.column("path").to_pylist(), single.path, *files_b.slice(1).column("path").to_pylist()
    ]
    assert [r["deletionTimestamp"] for r in removes] == [7] * files_a.num_rows + [5] + [7] * (files_b.num_rows - 1)
    assert table.snapshot().files().num_rows == 0


def _cdf_table(table_path: str) -> DeltaTable:
    """A table with Change Data Feed and deletion vectors on, its protocol written raw as Spark writes it."""
    reference = DeltaTable.create(table_path + "_ref", SCHEMA, partition_by=["p"])
    metadata = reference.snapshot().metadata
    config = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}
    t = DeltaTable(table_path)
    protocol = Protocol(3, 7, frozenset({"deletionVectors"}), frozenset({"deletionVectors", "changeDataFeed"}))
    _write_raw_commit(t, 0, [
        {"commitInfo": {"timestamp": 1, "operation": "CREATE TABLE"}},
        {"protocol": protocol.to_json()},
        {"metaData": {**metadata.to_json(), "configuration": config}},
    ])
    return t


def test_change_data_feed_rewrite_needs_cdc_actions(table_path: str) -> None:
    t = _cdf_table(table_path)
    with t.transaction() as txn:
        txn.add_files(data_files(txn, pa.concat_tables([rows("a", [1, 2]), rows("b", [3])])))
        assert txn.commit("WRITE") == 1

    def dv_update(txn: Transaction) -> None:
        files = txn.read_files("p = 'a'")
        txn.remove_files(files)
        txn.add(AddFile(**{**_fields(AddFile.from_json(_add_json(files))), "deletion_vector": _inline_dv()}))

    txn = t.transaction()
    dv_update(txn)
    with pytest.raises(InvalidTransactionError, match="cdc"):
        txn.commit("DELETE")
    with t.transaction() as txn:
        dv_update(txn)
        txn.add_cdc(AddCDCFile("_change_data/cdc-1.parquet", {"p": "a"}, 1))
        assert txn.commit("DELETE") == 2
    # Removing whole files needs no change data: the change is exactly the files' rows.
    with t.transaction() as txn:
        txn.remove_files(txn.read_files("p = 'b'"))
        assert txn.commit("DELETE") == 3
    # A copy-on-write rewrite into a new file needs it as much as a DV update does ...
    txn = t.transaction()
    txn.remove_files(txn.read_files("p = 'a'"))
    txn.add_files(data_files(txn, rows("a", [2])))
    with pytest.raises(InvalidTransactionError, match="cdc"):
        txn.commit("UPDATE")
    # ... but an overwrite replaces every row: old ones deleted, new ones inserted.
    with t.transaction() as txn:
        txn.remove_files(txn.read_files("p = 'a'"))
        txn.add_files(data_files(txn, rows("a", [5])))
        assert txn.commit("WRITE", {"mode": "Overwrite"}) == 4


def test_deletion_vectors_need_the_feature(table: DeltaTable) -> None:
    txn = table.transaction()
    files = txn.read_files("p = 'a'")
    txn.remove_files(files)
    txn.add(AddFile(**{**_fields(AddFile.from_json(_add_json(files))), "deletion_vector": _inline_dv()}))
    with pytest.raises(InvalidTransactionError, match="deletionVectors"):
        txn.commit("DELETE")


def test_system_domains_are_refused_and_user_domains_conflict(table: DeltaTable) -> None:
    txn = table.transaction()
    with pytest.raises(InvalidTransactionError, match="system-controlled"):
        txn.set_domain_metadata("delta.clustering", {"clusteringColumns": []})
    with table.transaction() as txn:
        txn.set_domain_metadata("myapp.init", "{}")
        txn.commit("SET DOMAIN")  # upgrades the protocol with domainMetadata
    assert "domainMetadata" in (table.snapshot().protocol.writer_features or ())
    first, second, other = table.transaction(), table.transaction(), table.transaction()
    first.set_domain_metadata("myapp.state", {"k": 1})
    second.set_domain_metadata("myapp.state", {"k": 2})
    other.set_domain_metadata("myapp.other", {"k": 3})
    first.commit("SET DOMAIN")
    with pytest.raises(ConcurrentTransactionException) as info:
        second.commit("SET DOMAIN")
    assert info.value.conflicting == ["myapp.state"]
    other.commit("SET DOMAIN")
    domains = table.snapshot().domain_metadata
    assert domains["myapp.state"].configuration == '{"k":1}' and "myapp.other" in domains


# ------------------------------------------------------------------ in-commit timestamps


def _write_raw_commit(table: DeltaTable, version: int, actions: list[dict[str, Any]]) -> None:
    body = "\n".join(json.dumps(a) for a in actions) + "\n"
    assert table.io.put_if_absent(f"{table.root}/_delta_log/{version:020d}.json", body.encode())


def test_in_commit_timestamp_is_first_and_strictly_increasing(table_path: str) -> None:
    t = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={"delta.enableInCommitTimestamps": "true"})
    v1 = append(t, "a", [1])
    info = commit_info(t, v1)
    assert next(iter(info)) == "inCommitTimestamp"
    future = info["inCommitTimestamp"] + 10_000_000
    _write_raw_commit(t, 2, [{"commitInfo": {"inCommitTimestamp": future, "timestamp": 1, "operation": "X"}}])
    v3 = append(t, "a", [2])
    assert commit_info(t, v3)["inCommitTimestamp"] == future + 1


def test_in_commit_timestamp_is_recomputed_on_rebase(table_path: str) -> None:
    t = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={"delta.enableInCommitTimestamps": "true"})
    txn = t.transaction()
    txn.add_files(data_files(txn, rows("a", [1])))
    future = commit_info(t, 0)["inCommitTimestamp"] + 50_000_000
    _write_raw_commit(t, 1, [{"commitInfo": {"inCommitTimestamp": future, "timestamp": 1, "operation": "X", "isBlindAppend": True}}])
    assert txn.commit("WRITE") == 2
    assert commit_info(t, 2)["inCommitTimestamp"] == future + 1


def test_enabling_in_commit_timestamps_records_enablement(table: DeltaTable) -> None:
    with table.transaction() as txn:
        txn.set_properties({"delta.enableInCommitTimestamps": "true"})
        version = txn.commit("SET TBLPROPERTIES")
    info = commit_info(table, version)
    metadata = table.snapshot().metadata
    assert metadata.configuration["delta.inCommitTimestampEnablementVersion"] == str(version)
    assert metadata.configuration["delta.inCommitTimestampEnablementTimestamp"] == str(info["inCommitTimestamp"])
    previous_mtime = os.stat(Path(table.root, "_delta_log", f"{version - 1:020d}.json")).st_mtime_ns // 1_000_000
    assert info["inCommitTimestamp"] > previous_mtime
    assert "inCommitTimestamp" in (table.snapshot().protocol.writer_features or ())


# ------------------------------------------------------------------ lifecycle


def test_exception_in_block_never_commits(table: DeltaTable) -> None:
    with pytest.raises(RuntimeError), table.transaction() as txn:
        txn.add_files(data_files(txn, rows("a", [9])))
        raise RuntimeError("boom")
    assert table.version() == 2
    with pytest.raises(InvalidTransactionError):
        txn.commit("WRITE")


def test_leaving_block_with_staged_actions_but_no_commit_is_an_error(table: DeltaTable) -> None:
    with pytest.raises(InvalidTransactionError, match="commit"), table.transaction() as txn:
        txn.add_files(data_files(txn, rows("a", [9])))
    assert table.version() == 2
    with table.transaction() as txn:  # nothing staged: nothing to say
        txn.read_files()


def test_a_transaction_commits_once(table: DeltaTable) -> None:
    with table.transaction() as txn:
        txn.add_files(data_files(txn, rows("a", [9])))
        txn.commit("WRITE")
        with pytest.raises(InvalidTransactionError, match="committed"):
            txn.commit("WRITE")


def test_create_table_through_a_transaction(table_path: str) -> None:
    reference = DeltaTable.create(table_path + "_ref", SCHEMA)
    metadata = reference.snapshot().metadata
    creator, racer = DeltaTable(table_path).transaction(), DeltaTable(table_path).transaction()
    assert creator.read_version == -1
    creator.set_metadata(metadata)
    racer.set_metadata(metadata)
    assert creator.commit("CREATE TABLE") == 0
    info = commit_info(DeltaTable(table_path), 0)
    assert "readVersion" not in info
    assert DeltaTable(table_path).snapshot().protocol == Protocol(1, 2)
    with pytest.raises(TableAlreadyExistsError):
        racer.commit("CREATE TABLE")


# ------------------------------------------------------------------ storage failures


def test_a_transaction_older_than_the_cleaned_up_log_does_not_reuse_a_deleted_version(table: DeltaTable) -> None:
    # The transaction read version 2. Meanwhile versions 3..6 were committed, version 5
    # was checkpointed and metadata cleanup deleted commits 0..4. Version 3 is free on
    # disk again, but it was used: writing it would "succeed" invisibly (readers start
    # from the checkpoint), and the commits it must be checked against are gone.
    stale = table.transaction()
    stale.add_files(data_files(stale, rows("a", [99])))
    for i in range(4):
        append(table, "b", [20 + i])
    table.checkpoint(5)
    deleted = table.cleanup_log(retention="interval 0 seconds", now=4_102_444_800_000)  # year 2100
    assert any(p.endswith(f"{3:020d}.json") for p in deleted)
    with pytest.raises(CommitFailedError, match="cleaned up"):
        stale.commit("WRITE")
    assert not Path(table.root, "_delta_log", f"{3:020d}.json").exists()
    assert table.version() == 6


class FlakyIO(LocalFileIO):
    """Local storage whose put-if-absent fails the first ``failures`` times, before or after writing."""

    def __init__(self, failures: int, after_write: bool) -> None:
        super().__init__()
        self.failures = failures
        self.after_write = after_write
        self.calls = 0

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if not path.endswith(".json"):  # .crc files of the post-commit hook
            return super().put_if_absent(path, data)
        self.calls += 1
        if self.calls <= self.failures:
            if self.after_write:
                super().put_if_absent(path, data)
            raise OSError("injected: connection reset")
        return super().put_if_absent(path, data)


@pytest.mark.parametrize("after_write", [False, True])
def test_ambiguous_storage_errors_commit_exactly_once(table: DeltaTable, after_write: bool) -> None:
    flaky = FlakyIO(failures=2, after_write=after_write)
    table = DeltaTable(table.table_uri, io=flaky)
    txn = table.transaction()
    txn.add_files(data_files(txn, rows("a", [9])))
    version = txn.commit("WRITE")
    assert version == 3 == table.version()
    assert commit_info(table, 3)["txnId"] == txn.txn_id
    assert flaky.calls == (1 if after_write else 3)  # a landed write is found by its txnId


class LateLandingIO(LocalFileIO):
    """The first commit write fails with a timeout but lands later, just before the retry looks."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: tuple[str, bytes] | None = None
        self.calls = 0

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if not path.endswith(".json"):
            return super().put_if_absent(path, data)
        self.calls += 1
        if self.calls == 1:
            self.pending = (path, data)
            raise OSError("injected: timeout")
        if self.pending is not None:
            super().put_if_absent(*self.pending)
            self.pending = None
        return super().put_if_absent(path, data)


def test_a_late_landing_attempt_hands_its_own_actions_to_the_post_commit_hook(
    table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retry's payload differs from the one that landed (each attempt takes a new
    # timestamp and in-commit timestamp); the .crc must describe what is in the log.
    from airflow_delta.engine.operations import post_commit as post_commit_module
    from airflow_delta.engine.write import transaction as transaction_module

    DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={"delta.enableInCommitTimestamps": "true"})
    t = DeltaTable(table_path, io=LateLandingIO())
    txn = t.transaction(CommitOptions(retry=RetryPolicy(initial_backoff=0)))
    txn.add_files(data_files(txn, rows("a", [1])))
    clock = iter(range(4_000_000_000_000, 4_000_000_001_000, 7))
    monkeypatch.setattr(transaction_module, "_now_ms", lambda: next(clock))
    seen: list[list[dict[str, Any]]] = []
    monkeypatch.setattr(post_commit_module, "run_post_commit", lambda location, version, actions: seen.append(actions))
    assert txn.commit("WRITE") == 1
    assert t.io.calls == 2
    landed = commit_lines(t, 1)
    assert landed[0]["commitInfo"]["txnId"] == txn.txn_id
    assert seen == [landed]


class UnreadableLogIO(FlakyIO):
    """Like :class:`FlakyIO`, and reading a commit back also fails its first ``read_failures`` times."""

    def __init__(self, failures: int, after_write: bool, read_failures: int) -> None:
        super().__init__(failures, after_write)
        self.read_failures = read_failures
        self.reads = 0

    def read_bytes(self, path: str) -> bytes:
        if path.endswith(".json") and "_delta_log" in path:
            self.reads += 1
            if self.reads <= self.read_failures:
                raise OSError("injected: read timeout")
        return super().read_bytes(path)


def test_a_failed_read_back_after_an_ambiguous_write_is_retried(table: DeltaTable) -> None:
    # The write landed but reported an error, and reading the version back fails once:
    # the next attempt finds its own txnId instead of surfacing a bare OSError.
    table = DeltaTable(table.table_uri, io=UnreadableLogIO(failures=1, after_write=True, read_failures=1))
    txn = table.transaction(CommitOptions(retry=RetryPolicy(initial_backoff=0)))
    txn.add_files(data_files(txn, rows("a", [9])))
    assert txn.commit("WRITE") == 3 == table.version()
    assert commit_info(table, 3)["txnId"] == txn.txn_id
    assert not Path(table.root, "_delta_log", f"{4:020d}.json").exists()


def test_an_unknown_commit_outcome_is_a_commit_failure_naming_the_txn_id(table: DeltaTable) -> None:
    table = DeltaTable(table.table_uri, io=UnreadableLogIO(failures=1, after_write=True, read_failures=100))
    txn = table.transaction(CommitOptions(retry=RetryPolicy(max_attempts=3, initial_backoff=0)))
    txn.add_files(data_files(txn, rows("a", [9])))
    with pytest.raises(CommitFailedError, match=txn.txn_id) as info:
        txn.commit("WRITE")
    assert isinstance(info.value.__cause__, OSError)
    assert "may have" in str(info.value)
    table = DeltaTable(table.table_uri)
    assert table.version() == 3 and commit_info(table, 3)["txnId"] == txn.txn_id  # it had landed, once


def test_storage_errors_exhaust_attempts(table: DeltaTable) -> None:
    table = DeltaTable(table.table_uri, io=FlakyIO(failures=10, after_write=False))
    txn = table.transaction(CommitOptions(retry=RetryPolicy(max_attempts=3, initial_backoff=0)))
    txn.add_files(data_files(txn, rows("a", [9])))
    with pytest.raises(CommitFailedError, match="3 attempt") as info:
        txn.commit("WRITE")
    assert isinstance(info.value.__cause__, OSError)
    assert table.version() == 2


def test_post_commit_failure_does_not_fail_the_commit(table: DeltaTable, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from airflow_delta.engine.operations import post_commit as post_commit_module

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("checkpoint storage is down")

    monkeypatch.setattr(post_commit_module, "run_post_commit", broken)
    assert append(table, "a", [9]) == 3
    assert "post-commit hook failed" in caplog.text


# ------------------------------------------------------------------ local helpers


def _fields(add: AddFile) -> dict[str, Any]:
    return {name: getattr(add, name) for name in AddFile.__slots__}


def _add_json(files: pa.Table) -> dict[str, Any]:
    row = files.slice(0, 1).to_pylist()[0]
    return {
        "path": row["path"], "partitionValues": dict(row["partition_values"]), "size": row["size"],
        "modificationTime": row["modification_time"], "dataChange": True, "stats": row["stats"],
    }


def _single_remove(files: pa.Table, deletion_timestamp: int) -> RemoveFile:
    """A remove of the first of ``files``, staged by itself."""
    row = files.slice(0, 1).to_pylist()[0]
    return RemoveFile(
        row["path"], deletion_timestamp, partition_values=dict(row["partition_values"]), size=row["size"]
    )


def _inline_dv() -> Any:
    from airflow_delta.engine.model.actions import DeletionVectorDescriptor

    return DeletionVectorDescriptor("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", 40, 6)


# ------------------------------------------------------------------ conservative matching


def test_files_without_statistics_may_match_a_data_filter(flat_table: DeltaTable) -> None:
    deleter = flat_table.transaction()
    deleter.remove_files(deleter.read_files("id < 10"))
    other = flat_table.transaction()
    other.read_files("id > 1000")
    no_stats = [AddFile(**{**_fields(a), "stats": None}) for a in data_files(other, flat_rows([500]))]
    other.add_files(no_stats)
    other.commit("MERGE")
    with pytest.raises(ConcurrentAppendException):
        deleter.commit("DELETE")


def test_read_files_prunes_with_partition_values_and_statistics(table: DeltaTable) -> None:
    txn = table.transaction()
    assert txn.read_files("p = 'b'").num_rows == 1
    assert txn.read_files("id > 100").num_rows == 0
    assert txn.read_files("id >= 3").num_rows == 2
    txn.abort()


# ------------------------------------------------------------------ delta-rs as the other writer


def test_delta_rs_reads_what_we_commit(table: DeltaTable) -> None:
    deltalake = pytest.importorskip("deltalake")
    with table.transaction() as txn:
        txn.remove_files(txn.read_files("p = 'a'"))
        txn.commit("DELETE", {"predicate": ["p = 'a'"]}, {"numRemovedFiles": 1})
    theirs = deltalake.DeltaTable(table.root)
    assert theirs.version() == 3
    assert sorted(theirs.to_pyarrow_table().column("id").to_pylist()) == [10, 11]
    history = theirs.history(1)[0]
    assert history["operation"] == "DELETE" and history["readVersion"] == 2


@pytest.mark.parametrize("level", ["WriteSerializable", "Serializable"])
def test_delta_rs_append_as_the_winner(table: DeltaTable, level: str) -> None:
    # delta-rs writes no isBlindAppend, so, as in Delta, its adds count as changed data
    # even at WriteSerializable: a DELETE that read the partition must not commit over them.
    deltalake = pytest.importorskip("deltalake")
    deleter = table.transaction(CommitOptions(isolation_level=level))
    deleter.remove_files(deleter.read_files("p = 'a'"))
    deltalake.write_deltalake(table.root, rows("a", [77]), mode="append")
    assert "isBlindAppend" not in commit_info(table, 3)
    with pytest.raises(ConcurrentAppendException) as info:
        deleter.commit("DELETE")
    assert info.value.winning_version == 3 and info.value.conflicting == [{"p": "a"}]


def test_delta_rs_append_elsewhere_is_rebased_over(table: DeltaTable) -> None:
    deltalake = pytest.importorskip("deltalake")
    deleter = table.transaction()
    deleter.remove_files(deleter.read_files("p = 'a'"))
    deltalake.write_deltalake(table.root, rows("z", [77]), mode="append")
    assert deleter.commit("DELETE") == 4
    assert sorted(table.snapshot().to_arrow(columns=["id"]).column("id").to_pylist()) == [10, 11, 77]


def test_protocol_downgrades_are_refused(table: DeltaTable) -> None:
    with table.transaction() as txn:
        txn.set_protocol(Protocol(1, 7, None, frozenset({"appendOnly", "invariants", "domainMetadata"})))
        txn.commit("UPGRADE PROTOCOL")
    for staged in (Protocol(1, 2), Protocol(1, 7, None, frozenset({"appendOnly", "invariants"}))):
        txn = table.transaction()
        txn.set_protocol(staged)
        with pytest.raises(InvalidTransactionError, match="downgrade"):
            txn.commit("UPGRADE PROTOCOL")


def test_successful_commits_run_the_post_commit_hook(table_path: str) -> None:
    t = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={"delta.checkpointInterval": "2"})
    append(t, "a", [1])
    append(t, "b", [2])
    log_dir = Path(table_path, "_delta_log")
    assert (log_dir / f"{2:020d}.checkpoint.parquet").is_file()
    assert (log_dir / f"{2:020d}.crc").is_file()


def test_storage_without_atomic_create_refuses_to_commit(table: DeltaTable) -> None:
    import pyarrow.fs as pafs

    from airflow_delta.engine.errors import CommitNotSupportedError
    from airflow_delta.engine.storage.fileio import FileIO

    table = DeltaTable(table.table_uri, io=FileIO(pafs.LocalFileSystem()))
    txn = table.transaction()
    txn.add_files(data_files(txn, rows("a", [9])))
    with pytest.raises(CommitNotSupportedError):
        txn.commit("WRITE")
    assert table.version() == 2


def test_feature_properties_shape_the_protocol_and_are_not_stored(table: DeltaTable) -> None:
    with table.transaction() as txn:
        txn.set_properties({"delta.feature.domainMetadata": "supported", "myapp.owner": "team-a"})
        txn.commit("SET TBLPROPERTIES")
    snapshot = table.snapshot()
    assert "domainMetadata" in (snapshot.protocol.writer_features or ())
    assert dict(snapshot.metadata.configuration) == {"myapp.owner": "team-a"}
    with table.transaction() as txn:
        txn.set_properties({"myapp.owner": None})
        txn.commit("UNSET TBLPROPERTIES")
    assert dict(table.snapshot().metadata.configuration) == {}


def test_properties_of_unimplemented_features_are_refused(table: DeltaTable) -> None:
    txn = table.transaction()
    with pytest.raises(UnsupportedFeatureError, match="icebergCompatV1"):
        txn.set_properties({"delta.enableIcebergCompatV1": "true"})
    from dataclasses import replace as dc_replace

    txn.set_metadata(dc_replace(txn.metadata, configuration={"delta.enableIcebergCompatV1": "true"}))
    with pytest.raises(UnsupportedFeatureError, match="icebergCompatV1"):
        txn.commit("SET TBLPROPERTIES")
    assert table.version() == 2


def test_snapshot_isolation_cannot_be_asked_for(table: DeltaTable) -> None:
    with pytest.raises(InvalidTransactionError, match="automatically"):
        table.transaction(CommitOptions(isolation_level="SnapshotIsolation"))


def test_whole_table_read_depends_on_every_change_but_blind_appends(table: DeltaTable) -> None:
    reader = table.transaction()
    everything = reader.read_files()
    assert everything.num_rows == 2
    reader.add_files(data_files(reader, rows("c", [99])))  # e.g. INSERT ... SELECT from the table itself
    append(table, "a", [50])  # blind: invisible at WriteSerializable
    deleter = table.transaction()
    deleter.remove_files(deleter.read_files("p = 'b'"))
    deleter.commit("DELETE")
    with pytest.raises(ConcurrentDeleteReadException) as info:
        reader.commit("WRITE")
    assert info.value.winning_version == 4
    assert commit_info(table, 4)["operation"] == "DELETE"


# ------------------------------------------------------------------ delete_rows (deletion vectors)


def test_delete_rows_needs_deletion_vectors_enabled(table: DeltaTable) -> None:
    from airflow_delta.engine.errors import DeletionVectorsNotEnabledError

    path = _path_of(table, "a")
    txn = table.transaction()
    with pytest.raises(DeletionVectorsNotEnabledError, match=r"delta\.enableDeletionVectors=true"):
        txn.delete_rows({path: [0]})
    # Enabling it in the same transaction upgrades the protocol at commit.
    txn.set_properties({"delta.enableDeletionVectors": "true"})
    txn.delete_rows({path: [0]})
    version = txn.commit("DELETE")
    protocol = next(x["protocol"] for x in commit_lines(table, version) if "protocol" in x)
    assert "deletionVectors" in protocol["readerFeatures"] and "deletionVectors" in protocol["writerFeatures"]
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [2, 3, 10, 11]


def test_concurrent_deletes_of_the_same_file_conflict(table_path: str) -> None:
    from airflow_delta.engine.errors import ConcurrentDeleteDeleteException as DeleteDelete

    t = _dv_table(table_path)
    a = _path_of(t, "a")
    loser = t.transaction()
    loser.delete_rows({a: [5]})
    with t.transaction() as winner:
        winner.delete_rows({a: range(10)})  # removes the file outright
        winner.commit("DELETE")
    with pytest.raises(DeleteDelete) as info:
        loser.commit("DELETE")
    assert info.value.conflicting == [a] and info.value.winning_operation == "DELETE"


def test_concurrent_deletion_vector_updates_of_one_file_conflict_like_delta(table_path: str) -> None:
    # Both keep the file and give it a new DV: remove (path, dv0) + add (path, dv). Delta
    # compares removes by path only, so this is a delete/delete conflict; a loser that read
    # the file through a filter meets the winner's re-added file first (appends are
    # checked before deletes), as in Delta.
    t = _dv_table(table_path)
    bc = _path_of(t, "b c")
    blind, reader = t.transaction(), t.transaction()
    blind.delete_rows({bc: [1]})
    reader.read_files("p = 'b c'")
    reader.delete_rows({bc: [2]})
    with t.transaction() as winner:
        winner.delete_rows({bc: [0]})
        winner.commit("DELETE")
    with pytest.raises(ConcurrentDeleteDeleteException) as info:
        blind.commit("DELETE")
    assert info.value.conflicting == [bc]
    with pytest.raises(ConcurrentAppendException):
        reader.commit("DELETE")
    assert _live(t) == list(range(10)) + list(range(101, 110))  # only the winner's DV applies


def test_delta_rs_reads_the_deletion_vectors_of_delete_rows(table_path: str) -> None:
    deltalake = pytest.importorskip("deltalake")
    t = _dv_table(table_path)
    a, bc = _path_of(t, "a"), _path_of(t, "b c")
    for rows_a, rows_bc in (([0, 3], [1]), ([3, 4, 7], [1, 2, 8])):
        with t.transaction() as txn:
            txn.delete_rows({a: rows_a, bc: rows_bc})
            txn.commit("DELETE")
    expected = [1, 2, 5, 6, 8, 9, 100, 103, 104, 105, 106, 107, 109]
    dt = deltalake.DeltaTable(t.root)
    got = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT id FROM t").read_all())
    assert sorted(got.column("id").to_pylist()) == expected == _live(t)


def test_files_read_from_snapshot_files_are_not_decoded_twice(table_path: str) -> None:
    # A partition value with '%' is stored on disk as "p=50%25off" and in the log as
    # "p=50%2525off"; snapshot.files() gives the decoded "p=50%25off". Decoding that
    # again would give "p=50%off", and the concurrent delete below would go unseen.
    from airflow_delta.engine.errors import ConcurrentDeleteReadException

    table = DeltaTable.create(table_path, pa.schema([("p", pa.string()), ("v", pa.int64())]), partition_by=["p"])
    table.append(pa.table({"p": ["50%off"], "v": [1]}))
    reader = table.transaction()
    files = reader.snapshot.files()
    assert files.column("path")[0].as_py().startswith("p=50%25off/")
    reader.mark_files_read(files)

    deleter = table.transaction()
    deleter.remove_files(deleter.read_files(None))
    deleter.commit("DELETE")

    reader.add_files([])
    reader.set_properties({"owner": "etl"})
    with pytest.raises(ConcurrentDeleteReadException):
        reader.commit("SET TBLPROPERTIES")
