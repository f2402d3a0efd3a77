"""Every public verb and option refuses a bad Python argument with a typed DeltaError (issue 10, item 9).

The table below calls each public verb and option object of ``airflow_delta.engine`` with
arguments of the wrong type or out of range, one parameter at a time, and expects an
:class:`InvalidArgumentError` naming the parameter: never a ``TypeError``, ``ValueError``,
``AttributeError`` from deep inside, and never a silent success. A coverage test checks
that no public verb is missing from the table.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import airflow_delta.engine as engine
from airflow_delta.engine import (
    AddCDCFile,
    AddFile,
    AppTransaction,
    CommitOptions,
    DeltaError,
    DeltaTable,
    FileIOCommitter,
    InvalidArgumentError,
    OptimizeOptions,
    RemoveFile,
    RetryPolicy,
    RowIndexOutOfRangeError,
    Snapshot,
    TableLocation,
    TableProperties,
    Transaction,
    WriterOptions,
    add_file_from_parquet,
    parse_interval,
    reader_features,
    write_checkpoint,
    write_data_files,
    writer_features,
)

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


class _NotAnything:
    """A value of no type any public argument accepts."""

    def __repr__(self) -> str:
        return "<not anything>"


# Bad values per kind of parameter. Each must be refused for every parameter of that kind.
NOT_INT: list[Any] = ["1", 1.0, 1.5, True, False, [1], b"1", _NotAnything()]
NOT_STR: list[Any] = [1, 1.5, b"x", ["x"], True, _NotAnything()]
NOT_BOOL: list[Any] = ["false", "true", 0, 1, 1.0, _NotAnything()]
NOT_MAPPING: list[Any] = ["a=b", ["a", "b"], [("a", "b")], 1, _NotAnything()]
NOT_STR_SEQUENCE: list[Any] = [1, b"p", [1], ["p", None], {"p": 1}, _NotAnything()]
NOT_NUMBER: list[Any] = ["1", True, None, float("nan"), float("inf"), [1.0], _NotAnything()]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> DeltaTable:
    path = str(tmp_path_factory.mktemp("public-arguments") / "table")
    created = DeltaTable.create(path, SCHEMA, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    created.append(pa.table({"id": pa.array(range(10), pa.int64()), "p": ["a"] * 10}, schema=SCHEMA))
    return created


def _first_path(table: DeltaTable) -> str:
    return table.snapshot().files().column("path")[0].as_py()


def _cases(table: DeltaTable) -> list[tuple[str, Any, Callable[[Any], Any]]]:
    """(parameter label, bad value, call with it) for every parameter of every public verb."""
    snap = table.snapshot()
    path = _first_path(table)
    data = pa.table({"id": pa.array([1], pa.int64()), "p": ["a"]}, schema=SCHEMA)
    out: list[tuple[str, Any, Callable[[Any], Any]]] = []

    def each(label: str, values: list[Any], call: Callable[[Any], Any]) -> None:
        out.extend((label, value, call) for value in values)

    # DeltaTable
    each("DeltaTable.table_uri", [*NOT_STR, "", None], lambda v: DeltaTable(v))
    each("DeltaTable.storage_options", NOT_MAPPING, lambda v: DeltaTable(table.table_uri, v))
    each("DeltaTable.io", ["local", 1], lambda v: DeltaTable(table.table_uri, io=v))
    each("DeltaTable.snapshot.version", [*NOT_INT, -1, -(2**70)], lambda v: table.snapshot(version=v))
    each("DeltaTable.snapshot.timestamp", [1.5, True, [1], b"2024", _NotAnything()], lambda v: table.snapshot(timestamp=v))
    each("DeltaTable.snapshot.timestamp (with a version)", [0], lambda v: table.snapshot(version=v, timestamp=0))
    each("DeltaTable.history.limit", [*NOT_INT, 0, -1], lambda v: table.history(limit=v))
    each("DeltaTable.commits_since.version", [*NOT_INT, -2], lambda v: table.commits_since(v))
    each("DeltaTable.commits_since.since", [1.5, True, [1], b"2024", _NotAnything()], lambda v: table.commits_since(since=v))
    each("DeltaTable.commits_since.version (neither given)", [None], lambda v: table.commits_since(v))
    each("DeltaTable.conflicting_commits.read_version", [*NOT_INT, -1, None], lambda v: table.conflicting_commits(v))
    each("DeltaTable.conflicting_commits.predicate", NOT_STR, lambda v: table.conflicting_commits(0, v))
    each("DeltaTable.conflicting_commits.isolation_level", [1, True, b"Serializable", _NotAnything()],
         lambda v: table.conflicting_commits(0, isolation_level=v))
    each("DeltaTable.conflicting_commits.changes_data", NOT_BOOL, lambda v: table.conflicting_commits(0, changes_data=v))
    each("DeltaTable.context.snapshot", ["latest", 1, table], lambda v: table.context(v))
    each("DeltaTable.create.schema", [{"id": "long"}, "id long", None], lambda v: DeltaTable.create(table.table_uri + "-x", v))
    each(
        "DeltaTable.create.partition_by",
        NOT_STR_SEQUENCE,
        lambda v: DeltaTable.create(table.table_uri + "-x", SCHEMA, partition_by=v),
    )
    each(
        "DeltaTable.create.properties",
        [*NOT_MAPPING, {"delta.appendOnly": True}, {1: "x"}],
        lambda v: DeltaTable.create(table.table_uri + "-x", SCHEMA, properties=v),
    )
    each("DeltaTable.create.name", NOT_STR, lambda v: DeltaTable.create(table.table_uri + "-x", SCHEMA, name=v))
    each("DeltaTable.create.description", NOT_STR, lambda v: DeltaTable.create(table.table_uri + "-x", SCHEMA, description=v))
    each("DeltaTable.convert_to_delta.table_uri", [*NOT_STR, ""], lambda v: DeltaTable.convert_to_delta(v))
    each(
        "DeltaTable.convert_to_delta.partition_schema",
        [1, ["year INT"], "year", "year INTERVAL", {"year": "struct"}, _NotAnything()],
        lambda v: DeltaTable.convert_to_delta(table.table_uri + "-x", v),
    )
    each(
        "DeltaTable.convert_to_delta.properties",
        [*NOT_MAPPING, {1: "x"}],
        lambda v: DeltaTable.convert_to_delta(table.table_uri + "-x", properties=v),
    )
    each("DeltaTable.convert_to_delta.name", NOT_STR, lambda v: DeltaTable.convert_to_delta(table.table_uri + "-x", name=v))
    each(
        "DeltaTable.convert_to_delta.description",
        NOT_STR,
        lambda v: DeltaTable.convert_to_delta(table.table_uri + "-x", description=v),
    )
    each(
        "DeltaTable.convert_to_delta.collect_stats",
        NOT_BOOL,
        lambda v: DeltaTable.convert_to_delta(table.table_uri + "-x", collect_stats=v),
    )
    each(
        "DeltaTable.convert_to_delta.parallelism",
        [*NOT_INT, 0, -1],
        lambda v: DeltaTable.convert_to_delta(table.table_uri + "-x", parallelism=v),
    )
    each(
        "DeltaTable.convert_to_delta.reader",
        [1, "spark", len],
        lambda v: DeltaTable.convert_to_delta(table.table_uri + "-x", reader=v),
    )
    each("DeltaTable.transaction.options", [RetryPolicy(), "serializable", 1], lambda v: table.transaction(v))
    each("DeltaTable.transaction.snapshot", [0, "latest", table], lambda v: table.transaction(snapshot=v))
    each("DeltaTable.append.data", [data.to_pylist(), {"id": [1]}, None, 1], lambda v: table.append(v))
    each("DeltaTable.append.writer", [CommitOptions(), 1, {"target_file_size": 1}], lambda v: table.append(data, writer=v))
    each("DeltaTable.append.commit", [WriterOptions(), RetryPolicy(), 1], lambda v: table.append(data, commit=v))
    each("DeltaTable.append.app_transaction", [("app", 1), "app", 1], lambda v: table.append(data, app_transaction=v))
    each("DeltaTable.append.partition_by", NOT_STR_SEQUENCE, lambda v: table.append(data, partition_by=v))
    each("DeltaTable.delete.predicate", NOT_STR, lambda v: table.delete(v))
    each("DeltaTable.delete.use_deletion_vectors", NOT_BOOL, lambda v: table.delete("id = 99", use_deletion_vectors=v))
    each("DeltaTable.delete.writer", [CommitOptions(), 1], lambda v: table.delete("id = 99", writer=v))
    each("DeltaTable.delete.commit", [WriterOptions(), 1], lambda v: table.delete("id = 99", commit=v))
    each("DeltaTable.delete.snapshot", [0, "latest"], lambda v: table.delete("id = 99", snapshot=v))
    each("DeltaTable.checkpoint.version", [*NOT_INT, -1], lambda v: table.checkpoint(v))
    each("DeltaTable.checkpoint.options", ["v2", {"kind": "v2"}, CommitOptions()], lambda v: table.checkpoint(options=v))
    each("DeltaTable.vacuum.retention", [7, 7.0, "7 days", -dt.timedelta(hours=1)], lambda v: table.vacuum(retention=v, dry_run=True))
    each("DeltaTable.vacuum.mode", ["FULL", "deep", 1, None], lambda v: table.vacuum(mode=v, dry_run=True))
    each("DeltaTable.vacuum.dry_run", NOT_BOOL, lambda v: table.vacuum(dry_run=v))
    each(
        "DeltaTable.vacuum.enforce_retention_duration",
        NOT_BOOL,
        lambda v: table.vacuum(enforce_retention_duration=v, dry_run=True),
    )
    each("DeltaTable.vacuum.now", ["now", 1.5, True, -1], lambda v: table.vacuum(now=v, dry_run=True))
    each("DeltaTable.vacuum.parallelism", [*NOT_INT, 0, -1], lambda v: table.vacuum(parallelism=v, dry_run=True))
    each("DeltaTable.vacuum.file_list_path", [*NOT_STR, ""], lambda v: table.vacuum(file_list_path=v, dry_run=True))
    each("DeltaTable.vacuum.list_files", ["listing", 1, [[]]], lambda v: table.vacuum(list_files=v, dry_run=True))
    each("DeltaTable.restore.version", [*NOT_INT, -1], lambda v: table.restore(v))
    each("DeltaTable.restore.timestamp", [1.5, True, [1], _NotAnything()], lambda v: table.restore(timestamp=v))
    each("DeltaTable.restore.version (with a timestamp, or neither)", [0, None], lambda v: table.restore(v, 0 if v == 0 else None))
    each("DeltaTable.restore.commit", [WriterOptions(), 1], lambda v: table.restore(0, commit=v))
    each("DeltaTable.health.now", ["now", 1.5, True, -1], lambda v: table.health(now=v))
    each("DeltaTable.health.target_file_size", [*NOT_INT, 0, -1], lambda v: table.health(target_file_size=v))
    each("DeltaTable.health.max_deleted_rows_ratio", [*NOT_NUMBER, -0.1, 1.5], lambda v: table.health(max_deleted_rows_ratio=v))
    each("CheckpointOptions.kind", ["V2", "multipart", 2, True], lambda v: engine.CheckpointOptions(kind=v))
    each("CheckpointOptions.parts", [*NOT_INT, 1, 0, None], lambda v: engine.CheckpointOptions(parts=v))
    each("CheckpointOptions.cleanup_log", NOT_BOOL, lambda v: engine.CheckpointOptions(cleanup_log=v))
    each("size_histogram_png.report", [None, {}, table], lambda v: engine.size_histogram_png(v))
    each("DeltaTable.cleanup_log.retention", [7, 7.0, -dt.timedelta(days=1), ["7 days"]], lambda v: table.cleanup_log(retention=v, dry_run=True))
    each("DeltaTable.cleanup_log.now", ["now", 1.5, True, -1], lambda v: table.cleanup_log(now=v, dry_run=True))
    each("DeltaTable.cleanup_log.dry_run", NOT_BOOL, lambda v: table.cleanup_log(dry_run=v))
    each("DeltaTable.optimize.options", [CommitOptions(), {"where": "p = 'a'"}, 1], lambda v: table.optimize(v))
    each("DeltaTable.optimize.commit", [WriterOptions(), 1], lambda v: table.optimize(commit=v))
    each("DeltaTable.optimize.snapshot", [0, "latest"], lambda v: table.optimize(snapshot=v))
    each("DeltaTable.optimize.rewriter", ["spark", 1], lambda v: table.optimize(rewriter=v))
    each("DeltaTable.optimize.tags", NOT_MAPPING, lambda v: table.optimize(tags=v))
    each("DeltaTable.cluster_by.columns", NOT_STR_SEQUENCE, lambda v: table.cluster_by(v))
    each("DeltaTable.cluster_by.commit", [WriterOptions(), 1, {}], lambda v: table.cluster_by(["id"], commit=v))

    # Snapshot reads
    each("Snapshot.files.filter", NOT_STR, lambda v: snap.files(v))
    each("Snapshot.files.stats", NOT_BOOL, lambda v: snap.files(stats=v))
    each("Snapshot.plan_files.filter", NOT_STR, lambda v: snap.plan_files(v))
    each("Snapshot.file_uris.filter", NOT_STR, lambda v: snap.file_uris(v))
    each("Snapshot.to_arrow.columns", NOT_STR_SEQUENCE, lambda v: snap.to_arrow(columns=v))
    each("Snapshot.to_arrow.filter", NOT_STR, lambda v: snap.to_arrow(filter=v))
    each("Snapshot.transaction_version.app_id", NOT_STR, lambda v: snap.transaction_version(v))
    each("Snapshot.data_file_path.path", [*NOT_STR, ""], lambda v: snap.data_file_path(v))
    each("Snapshot.file_state_of_names.names", ["x", ["x"], None, pa.array([1])], lambda v: snap.file_state_of_names(v))
    each("Snapshot.removes_of_versions.start", [-1, "0", None, 1.0, True], lambda v: snap.removes_of_versions(v, 1))
    each("Snapshot.removes_of_versions.end", [-1, "1", None, 1.0], lambda v: snap.removes_of_versions(1, v))

    # Transaction: a fresh one per call, so that one refusal cannot affect the next.
    def txn() -> Transaction:
        return table.transaction()

    each("Transaction.location", ["/tmp/x", 1], lambda v: Transaction(v))
    each("Transaction.options", [RetryPolicy(), 1], lambda v: Transaction(table.location, options=v))
    each("Transaction.snapshot", [1, "x"], lambda v: Transaction(table.location, snapshot=v))
    each("Transaction.committer", [1, "x"], lambda v: Transaction(table.location, committer=v))
    each("Transaction.post_commit", [1, "x"], lambda v: Transaction(table.location, post_commit=v))
    each("Transaction.read_files.filter", NOT_STR, lambda v: txn().read_files(v))
    each("Transaction.mark_files_read.paths", [1, [1], pa.array([1]), pa.table({"x": [1]})], lambda v: txn().mark_files_read(v))
    each("Transaction.read_app_transaction.app_id", [*NOT_STR, ""], lambda v: txn().read_app_transaction(v))
    each("Transaction.add.action", [{"path": "x"}, "x", None], lambda v: txn().add(v))
    each("Transaction.add_files.actions", [AddFile("x", {}, 1, 0, True), "x", [{"path": "x"}], 1], lambda v: txn().add_files(v))
    each("Transaction.add_files.written_for_this_commit", [1, "yes", None], lambda v: txn().add_files([], written_for_this_commit=v))
    each("Transaction.remove.action", [AddFile("x", {}, 1, 0, True), "x"], lambda v: txn().remove(v))
    each("Transaction.remove_files.files", [["x"], "x", pa.table({"x": [1]})], lambda v: txn().remove_files(v))
    each("Transaction.remove_files.data_change", NOT_BOOL, lambda v: txn().remove_files(snap.add_actions, data_change=v))
    each("Transaction.remove_files.deletion_timestamp", [*NOT_INT, -1], lambda v: txn().remove_files(snap.add_actions, deletion_timestamp=v))
    each("Transaction.delete_rows.deletes", [[path], path, 1], lambda v: txn().delete_rows(v))
    each("Transaction.delete_rows.deletes key", [1, b"x", ""], lambda v: txn().delete_rows({v: [0]}))
    each(
        "Transaction.delete_rows positions",
        [
            [-1], [0, -5], -1, 3, [1.0], [0.5], ["1"], [True], [None], [[0, 1]], "01", None, {0: 1},
            np.array([1.0]), np.array([-1]), np.array([[0, 1]]), np.array(["1"]),
            pa.array([1.0]), pa.array([0, None], pa.int64()), pa.array([-1], pa.int64()), [2**70], range(-1, 2),
        ],
        lambda v: txn().delete_rows({path: v}),
    )
    each("Transaction.delete_rows.deletion_timestamp", [*NOT_INT, -1], lambda v: txn().delete_rows({path: [0]}, deletion_timestamp=v))
    each("Transaction.delete_rows.target_dv_file_size", [*NOT_INT, 0, -1], lambda v: txn().delete_rows({path: [0]}, target_dv_file_size=v))
    good_add = AddFile("x.parquet", {"p": "a"}, 1, 0, True)
    for field_name, bad_values in (
        ("path", [7, b"x", "", None]),
        ("partition_values", ["p=a", {"p": 1}, {1: "a"}, None]),
        ("size", ["1", -1, 1.0, None, True, np.int64(5)]),
        ("modification_time", ["0", -5, 0.5]),
        ("data_change", ["true", 1, None]),
        ("stats", [{"numRecords": 1}, 1]),
        ("tags", [["a"], {"k": 1}]),
        ("deletion_vector", [{"storageType": "u"}, "u"]),
        ("base_row_id", ["1", -1, 1.5]),
        ("default_row_commit_version", ["1", -1]),
        ("clustering_provider", [1, ["liquid"]]),
    ):
        each(
            f"Transaction.add.action.{field_name}",
            bad_values,
            lambda v, f=field_name: txn().add(dataclasses.replace(good_add, **{f: v})),
        )
        each(
            f"Transaction.add_files.actions[0].{field_name}",
            bad_values,
            lambda v, f=field_name: txn().add_files([dataclasses.replace(good_add, **{f: v})]),
        )
    good_remove = RemoveFile("x.parquet", 0)
    for field_name, bad_values in (
        ("path", [7, ""]),
        ("deletion_timestamp", ["0", -1]),
        ("data_change", ["false"]),
        ("size", ["1", -1]),
        ("partition_values", ["p=a", {"p": 1}]),
    ):
        each(
            f"Transaction.remove.action.{field_name}",
            bad_values,
            lambda v, f=field_name: txn().remove(dataclasses.replace(good_remove, **{f: v})),
        )
    each("Transaction.add_cdc.action.size", ["1", -1], lambda v: txn().add_cdc(AddCDCFile("c.parquet", {}, v)))
    each("Transaction.add_cdc.action", [AddFile("x", {}, 1, 0, True), "x"], lambda v: txn().add_cdc(v))
    each("Transaction.set_metadata.metadata", [{"id": "x"}, "x"], lambda v: txn().set_metadata(v))
    each("Transaction.set_properties.properties", [*NOT_MAPPING, {"delta.appendOnly": True}, {1: "x"}], lambda v: txn().set_properties(v))
    each("Transaction.set_protocol.protocol", [(1, 2), "1,2"], lambda v: txn().set_protocol(v))
    each("Transaction.set_app_transaction.app_id", [*NOT_STR, ""], lambda v: txn().set_app_transaction(v, 1))
    each("Transaction.set_app_transaction.version", [*NOT_INT, -1], lambda v: txn().set_app_transaction("app", v))
    each("Transaction.set_domain_metadata.domain", [*NOT_STR, ""], lambda v: txn().set_domain_metadata(v, "{}"))
    each("Transaction.set_domain_metadata.configuration", [1, ["x"], None], lambda v: txn().set_domain_metadata("d", v))
    each("Transaction.set_domain_metadata.removed", NOT_BOOL, lambda v: txn().set_domain_metadata("d", "{}", removed=v))
    each("Transaction.commit.operation", [*NOT_STR, "", None], lambda v: txn().commit(v))
    each("Transaction.commit.operation_parameters", ["x", [1]], lambda v: txn().commit("WRITE", v))
    each("Transaction.commit.operation_metrics", ["x", [1]], lambda v: txn().commit("WRITE", None, v))
    each("Transaction.commit.user_metadata", NOT_STR, lambda v: txn().commit("WRITE", user_metadata=v))
    each("Transaction.commit.tags", [*NOT_MAPPING, {"k": 1}], lambda v: txn().commit("WRITE", tags=v))

    # Options
    each("RetryPolicy.max_attempts", [*NOT_INT, 0, -1], lambda v: RetryPolicy(max_attempts=v))
    each("RetryPolicy.initial_backoff", [*NOT_NUMBER, -0.1], lambda v: RetryPolicy(initial_backoff=v))
    each("RetryPolicy.max_backoff", [*NOT_NUMBER, -1], lambda v: RetryPolicy(max_backoff=v))
    each("CommitOptions.isolation_level", [1, "Snapshot", "SnapshotIsolation", True], lambda v: CommitOptions(isolation_level=v))
    each("CommitOptions.retry", [3, {"max_attempts": 3}, None], lambda v: CommitOptions(retry=v))
    each("CommitOptions.engine_info", [*NOT_STR, "", None], lambda v: CommitOptions(engine_info=v))
    each("CommitOptions.seed", NOT_INT, lambda v: CommitOptions(seed=v))
    each("WriterOptions.target_file_size", [*NOT_INT, 0, -1], lambda v: WriterOptions(target_file_size=v))
    each("OptimizeOptions.where", [*NOT_STR, ""], lambda v: OptimizeOptions(where=v))
    each("OptimizeOptions.zorder_by", [*NOT_STR_SEQUENCE, ["a", "A"]], lambda v: OptimizeOptions(zorder_by=v))
    for size in ("target_file_size", "min_file_size", "max_file_size", "max_files", "max_bytes", "batch_size"):
        each(f"OptimizeOptions.{size}", [*NOT_INT, 0, -1], lambda v, size=size: OptimizeOptions(**{size: v}))
    each("OptimizeOptions.max_deleted_rows_ratio", [*NOT_NUMBER, -0.1, 1.5], lambda v: OptimizeOptions(max_deleted_rows_ratio=v))
    each("OptimizeOptions.dry_run", NOT_BOOL, lambda v: OptimizeOptions(dry_run=v))
    each("OptimizeOptions.min_file_size (above max_file_size)", [11], lambda v: OptimizeOptions(min_file_size=v, max_file_size=10))
    each("AppTransaction.app_id", [*NOT_STR, "", None], lambda v: AppTransaction(v, 1))
    each("AppTransaction.version", [*NOT_INT, -1, None], lambda v: AppTransaction("app", v))

    # Functions
    each("write_data_files.snapshot", [table, None, "x"], lambda v: write_data_files(v, data))
    each("write_data_files.data", [data.to_pylist(), None], lambda v: write_data_files(snap, v))
    each("write_data_files.target_file_size", [*NOT_INT, 0], lambda v: write_data_files(snap, data, target_file_size=v))
    each("add_file_from_parquet.relative_path", [*NOT_STR, ""], lambda v: add_file_from_parquet(table.io, table.root, v, {"p": "a"}, snap.metadata))
    each("add_file_from_parquet.partition_values", ["p=a", ["a"]], lambda v: add_file_from_parquet(table.io, table.root, path, v, snap.metadata))
    each(
        "add_file_from_parquet.partition_values['p']",
        [[1], object(), {"a": 1}],
        lambda v: add_file_from_parquet(table.io, table.root, path, {"p": v}, snap.metadata),
    )
    each("Transaction.set_domain_metadata.configuration (not JSON)", [{"k": object()}, {"k": {1, 2}}], lambda v: txn().set_domain_metadata("d", v))
    each("add_file_from_parquet.metadata", [{}, "x"], lambda v: add_file_from_parquet(table.io, table.root, path, {"p": "a"}, v))
    each("add_file_from_parquet.data_change", NOT_BOOL, lambda v: add_file_from_parquet(table.io, table.root, path, {"p": "a"}, snap.metadata, v))
    each("write_checkpoint.snapshot", [table, None], lambda v: write_checkpoint(v))
    each("write_checkpoint.part_size", [*NOT_INT, 0], lambda v: write_checkpoint(snap, part_size=v))
    each("write_checkpoint.sidecar_size", [*NOT_INT, 0, None], lambda v: write_checkpoint(snap, sidecar_size=v))
    each("write_checkpoint.v2_format", ["avro", 1, None], lambda v: write_checkpoint(snap, v2_format=v))
    each("write_checkpoint.now_ms", [*NOT_INT, -1], lambda v: write_checkpoint(snap, now_ms=v))
    each("write_checkpoint.update_last_checkpoint", NOT_BOOL, lambda v: write_checkpoint(snap, update_last_checkpoint=v))
    each("write_checkpoint.kind", ["V2", 1], lambda v: write_checkpoint(snap, kind=v))
    each("write_checkpoint.num_parts", [*NOT_INT, 0], lambda v: write_checkpoint(snap, num_parts=v))
    each("TableLocation.from_uri.table_uri", [*NOT_STR, ""], lambda v: TableLocation.from_uri(v))
    each("TableLocation.from_uri.storage_options", NOT_MAPPING, lambda v: TableLocation.from_uri(table.table_uri, v))
    each("TableLocation.io", ["local", None], lambda v: TableLocation(v, table.root, table.table_uri))
    each("TableLocation.root", [1, "", None], lambda v: TableLocation(table.io, v, table.table_uri))
    each("TableLocation.uri", [1, ""], lambda v: TableLocation(table.io, table.root, v))
    each("FileIOCommitter.location", [table.table_uri, table], lambda v: FileIOCommitter(v))
    each("reader_features.protocol", [(1, 2), None], lambda v: reader_features(v))
    each("writer_features.protocol", [(1, 2), None], lambda v: writer_features(v))
    each("TableProperties.from_configuration.configuration", [["a"], 1, None], lambda v: TableProperties.from_configuration(v))
    each(
        "TableProperties.from_configuration delta.appendOnly",
        [True, 1, ["true"]],
        lambda v: TableProperties.from_configuration({"delta.appendOnly": v}),
    )
    each("parse_interval.delta.logRetentionDuration", [*NOT_STR, None], lambda v: parse_interval("delta.logRetentionDuration", v))
    return out


def test_every_bad_argument_is_a_typed_error(table: DeltaTable) -> None:
    version_before = table.version()
    failures = []
    for label, value, call in _cases(table):
        try:
            call(value)
        except InvalidArgumentError as exc:
            if label.rsplit(".", 1)[-1].split()[0] not in str(exc) and "position" not in label:
                failures.append(f"{label}={value!r}: the message does not name the argument: {exc}")
        except DeltaError as exc:
            # Another typed error is acceptable only where the value parses as the type but means nothing
            # (an unknown isolation level, a property value the property parser refuses).
            # An empty path is the path rule's (InvalidPathError), like every other malformed path.
            if not isinstance(exc, (engine.InvalidTablePropertyError, engine.InvalidTransactionError, engine.InvalidPathError)):
                failures.append(f"{label}={value!r}: {type(exc).__name__} instead of InvalidArgumentError: {exc}")
        except BaseException as exc:
            failures.append(f"{label}={value!r}: untyped {type(exc).__name__}: {exc}")
        else:
            failures.append(f"{label}={value!r}: accepted")
    assert not failures, "\n".join(failures)
    assert table.version() == version_before  # nothing was committed by a refused call


def test_a_position_past_the_end_is_row_index_out_of_range(table: DeltaTable) -> None:
    with pytest.raises(RowIndexOutOfRangeError, match="has 10 records"), table.transaction() as txn:
        txn.delete_rows({_first_path(table): [10]})


@pytest.mark.parametrize(
    ("positions", "count"),
    [
        ([0, 1], 2),
        ((2,), 1),
        (range(3, 5), 2),
        (np.array([5], np.int64), 1),
        (np.array([6], np.uint32), 1),
        (pa.array([7], pa.int8()), 1),
        (pa.chunked_array([[8], [9]], pa.int64()), 2),
        (iter([8]), 1),
        ([np.int64(9)], 1),
    ],
)
def test_good_positions_of_every_accepted_kind_are_taken(table: DeltaTable, positions: Any, count: int) -> None:
    txn = table.transaction()
    assert txn.delete_rows({_first_path(table): positions}).num_deleted_rows == count
    txn.abort()


def test_every_public_verb_is_in_the_table(table: DeltaTable) -> None:
    """A public method or function added later must get rows in the table above."""
    labels = {label.split(" ")[0].rsplit(".", 1)[0] for label, _, _ in _cases(table)}
    labels |= {label.split(" ")[0] for label, _, _ in _cases(table)}
    # Verbs without arguments to get wrong.
    no_arguments = {
        "DeltaTable.version", "DeltaTable.io", "DeltaTable.root", "DeltaTable.log_dir",
        "Transaction.abort", "Transaction.read_whole_table", "Transaction.metadata", "Transaction.protocol",
        "Transaction.has_staged_actions", "RetryPolicy.backoff",
    }
    missing = []
    for cls in (DeltaTable, Snapshot, Transaction):
        for name, member in vars(cls).items():
            if name.startswith("_") or not (inspect.isfunction(member) or isinstance(member, classmethod)):
                continue
            parameters = inspect.signature(getattr(cls, name)).parameters
            if len([p for p in parameters if p not in ("self", "cls")]) == 0:
                continue
            label = f"{cls.__name__}.{name}"
            if label not in labels and label not in no_arguments:
                missing.append(label)
    for function in (
        write_data_files, add_file_from_parquet, write_checkpoint, parse_interval, reader_features, writer_features,
        engine.size_histogram_png,
    ):
        if not any(label.startswith(function.__name__) for label in labels):
            missing.append(function.__name__)
    assert not missing, f"public verbs with no bad-argument cases: {missing}"


position_items = st.one_of(
    st.integers(min_value=-3, max_value=12),
    st.integers(min_value=2**62, max_value=2**80),
    st.floats(allow_nan=True),
    st.booleans(),
    st.text(max_size=2),
    st.none(),
    st.integers(min_value=0, max_value=9).map(np.int64),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(positions=st.lists(position_items, max_size=6))
def test_delete_rows_positions_of_any_kind(table: DeltaTable, positions: list[Any]) -> None:
    """Accepted exactly when every item is an integer (not a bool) in the file's 0..9; else a typed error."""
    plain = [p for p in positions if isinstance(p, (int, np.integer)) and not isinstance(p, bool)]
    txn = table.transaction()
    try:
        if len(plain) < len(positions) or any(p < 0 for p in plain):
            with pytest.raises(InvalidArgumentError):
                txn.delete_rows({_first_path(table): positions})
        elif any(p > 9 for p in plain):
            with pytest.raises((RowIndexOutOfRangeError, InvalidArgumentError)):
                txn.delete_rows({_first_path(table): positions})
        else:
            summary = txn.delete_rows({_first_path(table): positions})
            assert summary.num_deleted_rows == len(set(int(p) for p in plain))
    finally:
        txn.abort()
