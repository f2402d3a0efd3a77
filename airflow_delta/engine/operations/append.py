"""APPEND: Arrow rows written as new parquet files and committed as one blind append."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import MappingProxyType

import numpy as np
import pyarrow as pa

from airflow_delta.engine.errors import IdentityColumnWriteError, SchemaMismatchError, TableNotFoundError
from airflow_delta.engine.model.actions import AddFile, Metadata
from airflow_delta.engine.model.column_defaults import (
    IdentityColumn,
    column_default_expressions,
    generated_columns,
    identity_columns,
    with_identity_high_water_marks,
)
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
    data, identity = _with_writer_supplied_values(snapshot.metadata, data)
    adds = write_data_files(snapshot, data, target_file_size=target_file_size, written=txn.written_files)
    if identity.generated_rows:
        txn.set_metadata(with_identity_high_water_marks(snapshot.metadata, identity.furthest_values()))
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


class _IdentityFill:
    """Identity values generated for an append's rows, chunk after chunk: ``first_value + step * k``."""

    def __init__(self, columns: Sequence[IdentityColumn]) -> None:
        self.columns = tuple(columns)
        self.generated_rows = 0

    def add_to(self, chunk: pa.Table) -> pa.Table:
        rows = chunk.num_rows
        for column in self.columns:
            first = column.value(self.generated_rows) if rows else column.first_value
            values = np.arange(rows, dtype=np.int64) * np.int64(column.step) + np.int64(first)
            if rows:
                column.value(self.generated_rows + rows - 1)  # the last value: a long overflow fails here
            chunk = chunk.append_column(pa.field(column.name, pa.int64(), nullable=False), pa.array(values, pa.int64()))
        self.generated_rows += rows
        return chunk

    def furthest_values(self) -> dict[str, int]:
        return {c.name: c.value(self.generated_rows - 1) for c in self.columns}


def _with_writer_supplied_values(
    metadata: Metadata, data: pa.Table | pa.RecordBatchReader | pa.RecordBatch
) -> tuple[pa.Table | pa.RecordBatchReader | pa.RecordBatch, _IdentityFill]:
    """``data`` with the identity values the writer supplies; refusals as Delta refuses.

    An identity column missing from ``data`` gets new values (and the commit moves its
    high-water mark); a ``GENERATED ALWAYS`` one present is refused, a ``BY DEFAULT`` one
    present keeps the values given. Generated columns and column defaults are Spark SQL,
    which this engine does not evaluate: an append that would need one is refused (MERGE
    on Spark evaluates them).
    """
    names = {name.casefold() for name in data.schema.names}
    if generated_columns(metadata.schema_string):
        raise SchemaMismatchError(
            "the table has generated columns: the engine's append does not evaluate their Spark SQL generation "
            "expressions (to fill them, or to check given values as Delta does); insert through DeltaMergeOperator, "
            "whose Spark job does both"
        )
    lacking_defaults = [
        f"{name} (DEFAULT {expression})"
        for name, expression in column_default_expressions(metadata.schema_string).items()
        if name.casefold() not in names
    ]
    if lacking_defaults:
        raise SchemaMismatchError(
            f"the data lacks {', '.join(lacking_defaults)}: the engine's append does not evaluate Spark SQL defaults; "
            "give the column's values, or insert through DeltaMergeOperator, whose Spark job applies the defaults"
        )
    fill = _IdentityFill([c for c in identity_columns(metadata.schema_string) if c.name.casefold() not in names])
    for column in identity_columns(metadata.schema_string):
        if column.name.casefold() in names and column.generated_always:
            raise IdentityColumnWriteError(column.name, "insert")
    if not fill.columns:
        return data, fill
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return fill.add_to(data), fill
    reader = data
    first = fill.add_to(pa.Table.from_batches([], schema=reader.schema))
    batches = (b for batch in reader for b in fill.add_to(pa.Table.from_batches([batch])).to_batches())
    return pa.RecordBatchReader.from_batches(first.schema, batches), fill


def _num_records(add: AddFile) -> int:
    if not add.stats:
        return 0
    return int(json.loads(add.stats).get("numRecords", 0))


__all__ = ["AppendResult", "append"]
