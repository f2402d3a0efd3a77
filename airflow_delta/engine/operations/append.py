"""APPEND: Arrow rows written as new parquet files and committed as one blind append."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import MappingProxyType

import pyarrow as pa

from airflow_delta.engine.errors import SchemaMismatchError, TableNotFoundError
from airflow_delta.engine.model.actions import AddFile
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.operations.results import AppendResult
from airflow_delta.engine.write.data_files import write_data_files
from airflow_delta.engine.write.options import AppTransaction, WriterOptions
from airflow_delta.engine.write.transaction import Transaction


def append(
    txn: Transaction,
    data: pa.Table | pa.RecordBatchReader | pa.RecordBatch,
    *,
    writer: WriterOptions | None = None,
    app_transaction: AppTransaction | None = None,
    partition_by: Sequence[str] | None = None,
) -> AppendResult:
    """Append ``data`` in the open transaction ``txn`` as one blind-append commit.

    ``app_transaction`` makes the write idempotent (a ``txn`` action): if the table
    already records that version or a later one for the app id, nothing is written and
    :class:`~airflow_delta.engine.errors.TransactionAlreadyCommittedError` is raised.
    ``partition_by``, if given, must name the table's partition columns (a guard against
    writing to the wrong table).
    """
    snapshot = txn.snapshot
    if snapshot is None:
        raise TableNotFoundError(txn.location.uri, "append needs an existing table; create it first")
    if partition_by is not None and [c.lower() for c in partition_by] != [
        c.lower() for c in snapshot.partition_columns
    ]:
        raise SchemaMismatchError(
            f"partition_by={list(partition_by)} does not match the table's partition columns "
            f"{list(snapshot.partition_columns)}; changing partitioning needs an overwrite, not an append"
        )
    if app_transaction is not None:
        # Raises TransactionAlreadyCommittedError before any file is written.
        txn.set_app_transaction(app_transaction.app_id, app_transaction.version)
    target_file_size = writer.target_file_size if writer is not None else None
    adds = write_data_files(snapshot, data, target_file_size=target_file_size, written=txn.written_files)
    txn.add_files(adds)
    metrics = {
        "numFiles": len(adds),
        "numOutputRows": sum(_num_records(a) for a in adds),
        "numOutputBytes": sum(a.size for a in adds),
    }
    version = txn.commit(
        "WRITE",
        {"mode": "Append", "partitionBy": json_text(list(snapshot.partition_columns))},
        metrics,
    )
    return AppendResult(version, MappingProxyType(metrics))


def _num_records(add: AddFile) -> int:
    if not add.stats:
        return 0
    return int(json.loads(add.stats).get("numRecords", 0))


__all__ = ["AppendResult", "append"]
