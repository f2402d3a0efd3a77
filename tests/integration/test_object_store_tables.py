"""Tables on object stores, end to end, cross-checked with delta-rs over the same server.

Each test runs once on moto's S3 server and once on Azurite (the ``object_store``
fixture). The engine creates, appends, deletes (deletion vectors and rewrites),
compacts, checkpoints and cleans up the log through its public API; after every step
delta-rs, given the same storage options, must read exactly the rows an independent
Python model of the table says are there, and so must we. The other way round, we
read, and append to, a table delta-rs wrote, optimized and checkpointed there.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from airflow_delta.engine import CommitOptions, DeltaTable, RetentionTooShortError, write_data_files
from tests.object_store_helpers import ObjectStoreServer
from tests.oracles import read_with_deltars

deltalake = pytest.importorskip("deltalake")

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("p", pa.string()), pa.field("v", pa.float64())])


def _batch(ids: range) -> list[dict[str, Any]]:
    return [{"id": i, "p": "abc"[i % 3], "v": i / 4} for i in ids]


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: row["id"])


def _ours(table: DeltaTable) -> list[dict[str, Any]]:
    return _sorted(table.snapshot().to_arrow().select(SCHEMA.names).to_pylist())


def _check(table: DeltaTable, server: ObjectStoreServer, expected: list[dict[str, Any]]) -> None:
    expected = _sorted(expected)
    assert _ours(table) == expected, "we read other rows"
    assert _sorted(read_with_deltars(table.table_uri, storage_options=server.storage_options)) == expected, (
        "delta-rs reads other rows"
    )
    assert deltalake.DeltaTable(table.table_uri, storage_options=server.storage_options).version() == table.version()


def test_engine_verbs_on_an_object_store_read_the_same_in_deltars(object_store: ObjectStoreServer) -> None:
    server = object_store
    table = DeltaTable.create(
        server.uri(), SCHEMA, partition_by=["p"], storage_options=server.storage_options,
        properties={"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "100"},
    )
    expected: list[dict[str, Any]] = []
    for start in (0, 10, 20):
        rows = _batch(range(start, start + 10))
        table.append(pa.Table.from_pylist(rows, schema=SCHEMA))
        expected += rows
    _check(table, server, expected)

    # DELETE with deletion vectors, then one that rewrites files.
    result = table.delete("id % 5 = 0")
    assert result.metrics["numDeletedRows"] == 6 and result.metrics["numDeletionVectorsAdded"] > 0
    expected = [r for r in expected if r["id"] % 5 != 0]
    _check(table, server, expected)
    result = table.delete("p = 'c' AND id > 24", use_deletion_vectors=False)
    assert result.metrics["numDeletionVectorsAdded"] == 0 and result.metrics["numAddedFiles"] == 1  # 23 stays
    expected = [r for r in expected if not (r["p"] == "c" and r["id"] > 24)]
    _check(table, server, expected)

    # OPTIMIZE of one partition: its live rows rewritten into one file, dataChange=false.
    with table.transaction(CommitOptions()) as txn:
        files = txn.read_files("p = 'a'")
        assert files.num_rows == 3
        live = table.snapshot(txn.read_version).to_arrow(filter="p = 'a'")
        txn.remove_files(files, data_change=False)
        txn.add_files(replace(add, data_change=False) for add in write_data_files(txn.snapshot, live))
        txn.commit("OPTIMIZE", {"predicate": "[\"p = 'a'\"]"})
    assert table.snapshot().plan_files("p = 'a'").num_rows == 1
    _check(table, server, expected)

    # CHECKPOINT, then log cleanup anchored on it: older commits go, every reader still agrees.
    version = table.checkpoint().version
    log_prefix = f"{server.key_of(table.table_uri)}/_delta_log/"
    log_keys = {key[len(log_prefix):] for key in server.keys(log_prefix)}
    assert f"{version:020d}.checkpoint.parquet" in log_keys and "_last_checkpoint" in log_keys
    removed = table.cleanup_log(retention=timedelta(0), now=datetime.now(UTC) + timedelta(days=1))
    assert removed, "commits older than the checkpoint are expired"
    remaining = {key[len(log_prefix):] for key in server.keys(log_prefix)}
    assert f"{0:020d}.json" not in remaining and f"{version:020d}.json" in remaining
    _check(table, server, expected)
    table.append(pa.Table.from_pylist(_batch(range(100, 103)), schema=SCHEMA))
    _check(table, server, expected + _batch(range(100, 103)))
    assert [entry["operation"] for entry in table.history(limit=2)] == ["WRITE", "OPTIMIZE"]


def test_we_read_and_extend_what_deltars_writes(object_store: ObjectStoreServer) -> None:
    server = object_store
    uri, options = server.uri(), server.storage_options
    expected = _batch(range(0, 20))
    deltalake.write_deltalake(uri, pa.Table.from_pylist(expected, schema=SCHEMA), partition_by=["p"],
                              storage_options=options)
    deltalake.write_deltalake(uri, pa.Table.from_pylist(_batch(range(20, 30)), schema=SCHEMA), mode="append",
                              storage_options=options)
    expected += _batch(range(20, 30))
    theirs = deltalake.DeltaTable(uri, storage_options=options)
    theirs.delete("id < 5")
    theirs.optimize.compact()
    theirs.create_checkpoint()
    expected = [r for r in expected if r["id"] >= 5]

    table = DeltaTable(uri, options)
    assert table.version() == deltalake.DeltaTable(uri, storage_options=options).version()
    assert [e["operation"] for e in table.history(limit=2)] == ["OPTIMIZE", "DELETE"]
    _check(table, server, expected)

    table.append(pa.Table.from_pylist(_batch(range(40, 45)), schema=SCHEMA))
    table.delete("id = 41")
    expected += [r for r in _batch(range(40, 45)) if r["id"] != 41]
    _check(table, server, expected)


def test_azurite_through_the_emulator_option_as_delta_rs_takes_it(
    azure_server: ObjectStoreServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AZURE_STORAGE_USE_EMULATOR alone: the well-known account and key, and the emulator's
    # address from AZURITE_BLOB_STORAGE_URL (object_store's variable; default port 10000).
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azure_server.endpoint.rsplit("/", 1)[0])
    options = {"AZURE_STORAGE_USE_EMULATOR": "true"}
    uri = azure_server.uri()
    table = DeltaTable.create(uri, SCHEMA, storage_options=options)
    rows = _batch(range(5))
    table.append(pa.Table.from_pylist(rows, schema=SCHEMA))
    assert _sorted(read_with_deltars(uri, storage_options=options)) == _sorted(rows)
    assert _ours(DeltaTable(uri, options)) == _sorted(rows)


def _table_keys(server: ObjectStoreServer, table: DeltaTable) -> set[str]:
    """Keys below the table root, relative to it (listed by the independent client)."""
    prefix = server.key_of(table.table_uri) + "/"
    return {key[len(prefix):] for key in server.keys(prefix)}


def test_vacuum_lite_and_full_dry_and_real_on_an_object_store(object_store: ObjectStoreServer, tmp_path: Any) -> None:
    server = object_store
    table = DeltaTable.create(server.uri(), SCHEMA, partition_by=["p"], storage_options=server.storage_options)
    rows = _batch(range(30))
    table.append(pa.Table.from_pylist(rows[:15], schema=SCHEMA))
    table.append(pa.Table.from_pylist(rows[15:], schema=SCHEMA))
    live_before = set(table.snapshot().add_actions.column("path").to_pylist())
    table.delete("id < 3", use_deletion_vectors=False)  # rewrites: tombstones for vacuum to find
    expected = [r for r in rows if r["id"] >= 3]
    live = set(table.snapshot().add_actions.column("path").to_pylist())
    tombstoned = live_before - live
    assert tombstoned
    # An orphan (a writer that died before committing) and files Delta's rule calls hidden.
    io, root = table.location.io, table.location.root
    planted_hidden = {"p=a/.part-x.parquet.crc", "_tmp_writer/x.parquet", ".hidden.parquet", "p=b/_SUCCESS"}
    for relative in ("p=a/orphan.parquet", *planted_hidden):
        io.write_bytes(f"{root}/{relative}", b"not referenced by any commit")
    later = datetime.now(UTC) + timedelta(days=30)

    # The retention check: shorter than the table's 7 days is refused unless switched off.
    with pytest.raises(RetentionTooShortError):
        table.vacuum(retention=timedelta(0), now=later)
    # Within the retention nothing goes: every candidate is younger than an hour.
    young = table.vacuum(retention=timedelta(hours=1), enforce_retention_duration=False, dry_run=True)
    assert young.num_files_to_delete == 0

    lite = table.vacuum(mode="lite", retention=timedelta(0), enforce_retention_duration=False, now=later,
                        dry_run=True, file_list_path=str(tmp_path / "lite.txt"))
    assert set((tmp_path / "lite.txt").read_text().split()) == tombstoned
    assert lite.num_files_to_delete == len(tombstoned) and lite.metrics["numVacuumedDirectories"] == 0
    full = table.vacuum(retention=timedelta(0), enforce_retention_duration=False, now=later, dry_run=True,
                        file_list_path=str(tmp_path / "full.txt"))
    assert set((tmp_path / "full.txt").read_text().split()) == tombstoned | {"p=a/orphan.parquet"}
    assert full.metrics["numVacuumedDirectories"] == 4  # the root and p=a, p=b, p=c; hidden ones not entered
    assert tombstoned | {"p=a/orphan.parquet"} <= _table_keys(server, table), "a dry run deletes nothing"

    done = table.vacuum(mode="lite", retention=timedelta(0), enforce_retention_duration=False, now=later)
    assert done.num_deleted_files == len(tombstoned) and done.start_version is not None
    keys = _table_keys(server, table)
    assert not tombstoned & keys and "p=a/orphan.parquet" in keys
    done = table.vacuum(retention=timedelta(0), enforce_retention_duration=False, now=later)
    assert done.num_deleted_files == 1
    keys = _table_keys(server, table)
    assert "p=a/orphan.parquet" not in keys and planted_hidden <= keys and live <= keys
    assert any(key.startswith("_delta_log/") for key in keys)
    _check(table, server, expected)
    assert [e["operation"] for e in table.history(limit=4)] == ["VACUUM END", "VACUUM START"] * 2


def test_file_uris_are_full_uris_that_delta_rs_gives_and_opens(object_store: ObjectStoreServer) -> None:
    server = object_store
    table = DeltaTable.create(server.uri(), SCHEMA, partition_by=["p"], storage_options=server.storage_options)
    table.append(pa.Table.from_pylist(_batch(range(9)), schema=SCHEMA))
    ours = table.snapshot().file_uris()
    assert len(ours) == 3 and all(uri.startswith(f"{server.scheme}://{server.bucket}/") for uri in ours)
    assert sorted(ours) == sorted(deltalake.DeltaTable(table.table_uri, storage_options=server.storage_options).file_uris())
    assert table.snapshot().file_uris("p = 'b'") == [u for u in ours if "/p=b/" in u]
    # Each names an object the independent client finds: the three files hold the table's rows.
    import pyarrow.parquet as pq

    keys = [uri.split("://", 1)[1].split("/", 1)[1] for uri in ours]
    assert sum(pq.read_table(pa.BufferReader(server.read(key))).num_rows for key in keys) == 9
