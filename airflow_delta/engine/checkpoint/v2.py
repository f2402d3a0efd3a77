"""V2 checkpoints: a UUID-named top-level file whose file actions live in sidecar files.

Sidecars (parquet, in ``_delta_log/_sidecars``) are written first; the top-level file
(parquet or JSON) only once every sidecar it names exists. Optionally a classic-named
V2 checkpoint with the same content follows, for clients that only look for classic names.
"""

from __future__ import annotations

import math
import posixpath
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_delta.engine.checkpoint.file_names import (
    SIDECAR_DIR_NAME,
    checkpoint_file_name,
    sidecar_file_name,
    v2_checkpoint_file_name,
)
from airflow_delta.engine.checkpoint.last_checkpoint import (
    LAST_CHECKPOINT_MAX_NON_FILE_ACTIONS,
    LAST_CHECKPOINT_MAX_SIDECARS,
)
from airflow_delta.engine.checkpoint.output import CheckpointResult, WrittenFile, atomic_file, write_parquet
from airflow_delta.engine.checkpoint.rows import (
    AddColumnLayout,
    NullCache,
    file_action_batches,
    non_file_json_actions,
    non_file_rows,
    rows_table,
)
from airflow_delta.engine.checkpoint.schema import checkpoint_schema, delta_schema_of
from airflow_delta.engine.model.actions import DomainMetadata, SetTransaction
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.storage.fileio import FileIO
from airflow_delta.engine.storage.written_files import WrittenFiles

if TYPE_CHECKING:
    from airflow_delta.engine.read.snapshot import Snapshot

# File actions per sidecar of a V2 checkpoint; Spark's default for V2.
DEFAULT_SIDECAR_SIZE = 50_000


def write_v2(
    snapshot: Snapshot,
    layout: AddColumnLayout,
    adds: pa.Table,
    removes: pa.Table,
    txns: list[SetTransaction],
    domains: list[DomainMetadata],
    nulls: NullCache,
    *,
    batch_rows: int,
    sidecar_size: int,
    file_format: str,
    classic_compat: bool,
    written: WrittenFiles | None = None,
) -> CheckpointResult:
    """A V2 checkpoint of ``snapshot``: sidecars first, then the top-level file(s) naming them."""
    io: FileIO = snapshot.io
    version = snapshot.version
    log_dir = f"{snapshot.table_root}/_delta_log"
    # The caller removes these if the checkpoint fails (write_checkpoint does).
    written = written if written is not None else WrittenFiles(io)
    sidecar_dir = f"{log_dir}/{SIDECAR_DIR_NAME}"
    side_schema = checkpoint_schema(layout.add, file_actions=True, non_file_actions=False)

    # 1. sidecars: all file actions, in slices of at most sidecar_size rows.
    total_files = adds.num_rows + removes.num_rows
    num_sidecars = math.ceil(total_files / sidecar_size) if total_files else 0
    sidecars: list[WrittenFile] = []
    for index in range(num_sidecars):
        start, stop = index * sidecar_size, min((index + 1) * sidecar_size, total_files)
        part_adds = adds.slice(start, max(0, min(stop, adds.num_rows) - start)) if start < adds.num_rows else adds.slice(0, 0)
        rm_start = max(0, start - adds.num_rows)
        rm_stop = max(0, stop - adds.num_rows)
        part_removes = removes.slice(rm_start, rm_stop - rm_start)
        name = sidecar_file_name(version, index + 1, num_sidecars, str(uuid.uuid4()))
        batches = file_action_batches(side_schema, layout, part_adds, part_removes, nulls, batch_rows=batch_rows)
        written.record(f"{sidecar_dir}/{name}")  # a UUID name: ours alone
        sidecars.append(write_parquet(io, f"{sidecar_dir}/{name}", side_schema, batches, batch_rows=batch_rows))
    sidecar_actions = [
        {"path": posixpath.basename(s.path), "sizeInBytes": s.size, "modificationTime": s.modification_time}
        for s in sidecars
    ]
    tags = {
        "sidecarNumActions": str(sum(s.rows for s in sidecars)),
        "sidecarSizeInBytes": str(sum(s.size for s in sidecars)),
        "numOfAddFiles": str(adds.num_rows),
    }
    # Spark records the sidecars' schema too (left out when too large, as Spark does).
    sidecar_schema_doc = delta_schema_of(side_schema)
    if sidecar_schema_doc is not None:
        tags["sidecarFileSchema"] = json_text(sidecar_schema_doc)
    checkpoint_metadata = {"version": version, "tags": tags}
    protocol, metadata = snapshot.protocol, snapshot.metadata

    # 2. the top-level file, only once every sidecar it names exists.
    top_schema = checkpoint_schema(layout.add, v2=True)
    top_rows = non_file_rows(protocol, metadata, txns, domains, checkpoint_metadata, sidecar_actions)
    unique = str(uuid.uuid4())
    top_path = f"{log_dir}/{v2_checkpoint_file_name(version, unique, file_format)}"
    written.record(top_path)
    if file_format == "json":
        lines = non_file_json_actions(protocol, metadata, txns, domains, checkpoint_metadata, sidecar_actions)
        payload = ("\n".join(json_text(a) for a in lines) + "\n").encode("utf-8")
        with atomic_file(io, top_path) as out:
            out.write(payload)
        info = io.info(top_path)
        top = WrittenFile(top_path, info.size if info else len(payload), info.modification_time if info else 0, len(lines))
        checkpoint_schema_doc = None
    else:
        table = rows_table(top_rows, top_schema)
        top = write_parquet(io, top_path, top_schema, iter(table.to_batches()), batch_rows=batch_rows)
        checkpoint_schema_doc = delta_schema_of(top_schema)
    files = [top_path]

    # 3. a classic-named V2 checkpoint with the same content, for clients that only
    # look for classic names (they find the protocol and fail with a clear error).
    if classic_compat:
        compat_path = f"{log_dir}/{checkpoint_file_name(version)}"
        table = rows_table(top_rows, top_schema)
        write_parquet(io, compat_path, top_schema, iter(table.to_batches()), batch_rows=batch_rows)
        written.record_shared_name(compat_path)
        files.append(compat_path)

    non_file_actions = non_file_json_actions(protocol, metadata, txns, domains, None)
    non_file_actions.append({"checkpointMetadata": checkpoint_metadata})
    v2_info: dict[str, Any] = {
        "path": posixpath.basename(top_path),
        "sizeInBytes": top.size,
        "modificationTime": top.modification_time,
    }
    if len(non_file_actions) <= LAST_CHECKPOINT_MAX_NON_FILE_ACTIONS:
        v2_info["nonFileActions"] = non_file_actions
    if len(sidecar_actions) <= LAST_CHECKPOINT_MAX_SIDECARS:
        v2_info["sidecarFiles"] = sidecar_actions
    document = {
        "version": version,
        "size": top.rows + sum(s.rows for s in sidecars),
        "sizeInBytes": top.size + sum(s.size for s in sidecars),
        "numOfAddFiles": adds.num_rows,
        "v2Checkpoint": v2_info,
        "checkpointSchema": checkpoint_schema_doc,
    }
    return CheckpointResult(version, "v2", tuple(files), tuple(s.path for s in sidecars), document)
