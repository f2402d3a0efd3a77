"""Classic checkpoints: one parquet file, or a multi-part (V1) checkpoint for large states.

A multi-part checkpoint's parts are clustered by Spark's hash of each file action's key,
as the protocol requires, so part sizes are about, not exactly, the part size.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_delta.engine.checkpoint.file_names import checkpoint_file_name, multipart_checkpoint_file_name
from airflow_delta.engine.checkpoint.output import CheckpointResult, WrittenFile, chain_batches, write_parquet
from airflow_delta.engine.checkpoint.rows import (
    AddColumnLayout,
    NullCache,
    file_action_batches,
    non_file_rows,
    rows_table,
)
from airflow_delta.engine.checkpoint.schema import checkpoint_schema, delta_schema_of
from airflow_delta.engine.checkpoint.spark_hash import SPARK_HASH_SEED, spark_partition_ids
from airflow_delta.engine.model.actions import DomainMetadata, SetTransaction
from airflow_delta.engine.model.arrow_numpy import bool_array
from airflow_delta.engine.storage.fileio import FileIO
from airflow_delta.engine.storage.written_files import WrittenFiles

if TYPE_CHECKING:
    from airflow_delta.engine.read.snapshot import Snapshot

# Actions per part of a multi-part (V1) checkpoint; Spark's default part size.
DEFAULT_PART_SIZE = 5_000_000


def write_classic(
    snapshot: Snapshot,
    layout: AddColumnLayout,
    adds: pa.Table,
    removes: pa.Table,
    txns: list[SetTransaction],
    domains: list[DomainMetadata],
    nulls: NullCache,
    *,
    part_size: int | None,
    batch_rows: int,
    written: WrittenFiles | None = None,
    num_parts: int | None = None,
) -> CheckpointResult:
    """A classic checkpoint of ``snapshot``, multi-part when it holds more than ``part_size`` file actions
    (or in exactly ``num_parts`` parts when given: a forced multi-part checkpoint)."""
    io: FileIO = snapshot.io
    version = snapshot.version
    log_dir = f"{snapshot.table_root}/_delta_log"
    # The caller removes these if the checkpoint fails (write_checkpoint does).
    written = written if written is not None else WrittenFiles(io)
    # Spark's rule: file actions (live files and kept tombstones) per part; the
    # handful of non-file actions do not count.
    file_actions = adds.num_rows + removes.num_rows
    if num_parts is None:
        num_parts = max(1, math.ceil(file_actions / part_size)) if part_size else 1
    if snapshot.protocol.has_writer_feature("v2Checkpoint"):
        num_parts = 1  # multi-part checkpoints are forbidden once v2Checkpoint is supported
    schema = checkpoint_schema(layout.add)
    non_file = rows_table(non_file_rows(snapshot.protocol, snapshot.metadata, txns, domains), schema)
    if num_parts == 1:
        path = f"{log_dir}/{checkpoint_file_name(version)}"
        batches = chain_batches(
            non_file.to_batches(), file_action_batches(schema, layout, adds, removes, nulls, batch_rows=batch_rows)
        )
        parts = [write_parquet(io, path, schema, batches, batch_rows=batch_rows)]
        written.record_shared_name(path)
        kind = "classic"
    else:
        parts = _write_multipart(
            io, log_dir, version, num_parts, schema, layout, non_file, adds, removes, nulls, snapshot, batch_rows,
            written,
        )
        kind = "multi-part"
    document: dict[str, Any] = {
        "version": version,
        "size": sum(w.rows for w in parts),
        "parts": num_parts if num_parts > 1 else None,
        "sizeInBytes": sum(w.size for w in parts),
        "numOfAddFiles": adds.num_rows,
        "checkpointSchema": delta_schema_of(schema),
    }
    return CheckpointResult(version, kind, tuple(w.path for w in parts), (), document)


def _write_multipart(
    io: FileIO,
    log_dir: str,
    version: int,
    num_parts: int,
    schema: pa.Schema,
    layout: AddColumnLayout,
    non_file: pa.Table,
    adds: pa.Table,
    removes: pa.Table,
    nulls: NullCache,
    snapshot: Snapshot,
    batch_rows: int,
    written_files: WrittenFiles,
) -> list[WrittenFile]:
    # The protocol requires Spark-style hash clustering by the file key so that racing
    # writers produce identical parts: (path, dvId) when the table supports DVs, else path.
    with_dv = snapshot.protocol.has_reader_feature("deletionVectors") or snapshot.protocol.has_writer_feature(
        "deletionVectors"
    )
    add_ids = spark_partition_ids(adds.column("path"), adds.column("dv_id") if with_dv else None, num_parts)
    rm_ids = spark_partition_ids(removes.column("path"), removes.column("dv_id") if with_dv else None, num_parts)
    # Non-file actions have a null key: Spark hashes null to the seed.
    non_file_part = SPARK_HASH_SEED % num_parts
    written = []
    for part in range(num_parts):
        part_adds = adds.filter(bool_array(add_ids == part))
        part_removes = removes.filter(bool_array(rm_ids == part))
        head = non_file.to_batches() if part == non_file_part else []
        path = f"{log_dir}/{multipart_checkpoint_file_name(version, part + 1, num_parts)}"
        batches = chain_batches(
            head, file_action_batches(schema, layout, part_adds, part_removes, nulls, batch_rows=batch_rows)
        )
        written.append(write_parquet(io, path, schema, batches, batch_rows=batch_rows))
        # Part names are shared with racing checkpointers: removed on failure only while ours.
        written_files.record_shared_name(path)
        del part_adds, part_removes
    return written
