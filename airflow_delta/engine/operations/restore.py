"""RESTORE TABLE TO VERSION / TIMESTAMP, as Delta's ``RestoreTableCommand`` does it.

One commit that makes the table's live files those of the target version:

* files of the target that are not live now are re-added (``dataChange=true``, the
  target's statistics, partition values, tags and deletion vector);
* live files that the target does not have are removed;
* a file is identified by (path, deletion vector): one that carries another DV in the
  target is removed and re-added with the target's DV.

Before anything is staged, every file to re-add (and its DV file) is checked to exist: a
target some of whose files were vacuumed is refused with
:class:`RestoreFilesMissingError`, and nothing is committed. The target's metadata
(schema, properties) is restored; the protocol is never downgraded: it becomes the
current one plus any feature the target needs. The transaction reads the whole table, so
a concurrent change to the files is a conflict, not silently undone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import RestoreFilesMissingError
from airflow_delta.engine.model.actions import AddFile, DeletionVectorDescriptor
from airflow_delta.engine.model.arrow_numpy import bool_array, int64_scalar, mask_to_numpy
from airflow_delta.engine.model.column_defaults import with_merged_high_water_marks
from airflow_delta.engine.model.table_features import reader_features, upgrade_protocol, writer_features
from airflow_delta.engine.operations.results import RestoreResult
from airflow_delta.engine.operations.vacuum import dv_file_paths
from airflow_delta.engine.read.snapshot import Snapshot
from airflow_delta.engine.storage.fileio import FileIO
from airflow_delta.engine.storage.paths import resolve_in_table
from airflow_delta.engine.write.transaction import Transaction

# Missing files named in the error; the count covers the rest.
MISSING_SHOWN = 5
# Existence checks in flight at once (one request each on object stores).
CHECK_PARALLELISM = 16


def file_keys(files: pa.Table) -> pa.Array:
    """One string per file action: its log path and DV id, the protocol's identity of a file."""
    dv = pc.fill_null(files.column("dv_id"), "")
    return pc.binary_join_element_wise(files.column("path"), dv, "\x00")


def _size_sum(files: pa.Table) -> int:
    total = pc.sum(pc.fill_null(files.column("size"), int64_scalar(0))).as_py()
    return int(total or 0)


def files_needed(root: str, files: pa.Table) -> list[str]:
    """Storage paths of the data files and on-disk DV files that ``files`` reference."""
    paths = [resolve_in_table(root, p) for p in pc.unique(files.column("path")).to_pylist()]
    return paths + [f"{root}/{p}" for p in dv_file_paths(root, files.column("deletion_vector"))]


def missing_files(io: FileIO, paths: Sequence[str]) -> list[str]:
    """Those of ``paths`` that do not exist, checked on a bounded pool."""
    if not paths:
        return []
    with ThreadPoolExecutor(max_workers=min(CHECK_PARALLELISM, len(paths)), thread_name_prefix="restore") as pool:
        present = list(pool.map(lambda p: io.info(p) is not None, paths))
    return [p for p, ok in zip(paths, present, strict=True) if not ok]


def _adds_from_rows(files: pa.Table) -> list[AddFile]:
    # The transaction stages action objects; one per file re-added (the restore's size).
    out = []
    for row in files.to_pylist():
        dv = row.get("deletion_vector")
        tags = row.get("tags")
        out.append(
            AddFile(
                path=row["path"],
                partition_values=dict(row.get("partition_values") or {}),
                size=int(row["size"]),
                modification_time=int(row["modification_time"]),
                data_change=True,
                stats=row.get("stats"),
                tags=dict(tags) if tags else None,
                deletion_vector=DeletionVectorDescriptor.from_json(dv) if dv and dv.get("storageType") else None,
                base_row_id=row.get("base_row_id"),
                default_row_commit_version=row.get("default_row_commit_version"),
                clustering_provider=row.get("clustering_provider"),
            )
        )
    return out


def restore(
    txn: Transaction,
    target: Snapshot,
    *,
    version: int | None,
    timestamp: datetime | str | int | None,
    tags: Mapping[str, str] | None = None,
) -> RestoreResult:
    """Stage and commit the restore of ``txn``'s table to ``target``; see the module docstring.

    ``tags`` go into the commit's ``commitInfo.tags``."""
    current = txn.snapshot
    assert current is not None  # a transaction on an existing table always has its snapshot
    txn.read_whole_table()
    current_files, target_files = current.add_actions, target.add_actions
    in_target = mask_to_numpy(pc.is_in(file_keys(current_files), value_set=file_keys(target_files)))
    in_current = mask_to_numpy(pc.is_in(file_keys(target_files), value_set=file_keys(current_files)))
    to_remove = current_files.filter(bool_array(~in_target))
    to_add = target_files.filter(bool_array(~in_current))

    missing = missing_files(current.io, files_needed(current.table_root, to_add))
    if missing:
        raise RestoreFilesMissingError(target.version, missing[:MISSING_SHOWN], len(missing))

    protocol = upgrade_protocol(current.protocol, reader_features(target.protocol) | writer_features(target.protocol))
    # The restored schema keeps the current identity high-water marks where they are further
    # (values generated since must not be generated again), as Delta's RESTORE does.
    restored_metadata = with_merged_high_water_marks(target.metadata, current.metadata)
    metadata_changes = restored_metadata.to_json() != current.metadata.to_json()
    metrics = {
        "tableSizeAfterRestore": _size_sum(target_files),
        "numOfFilesAfterRestore": target_files.num_rows,
        "numRemovedFiles": to_remove.num_rows,
        "numRestoredFiles": to_add.num_rows,
        "removedFilesSize": _size_sum(to_remove),
        "restoredFilesSize": _size_sum(to_add),
    }
    if not (to_remove.num_rows or to_add.num_rows or metadata_changes or protocol != current.protocol):
        txn.abort()
        return RestoreResult(None, current.version, target.version, metrics)
    if protocol != current.protocol:
        txn.set_protocol(protocol)
    if metadata_changes:
        txn.set_metadata(restored_metadata)
    if to_remove.num_rows:
        txn.remove_files(to_remove, data_change=True)
    if to_add.num_rows:
        txn.add_files(_adds_from_rows(to_add))
    parameters: dict[str, object] = {"version": version} if version is not None else {"timestamp": str(timestamp)}
    committed = txn.commit("RESTORE", parameters, metrics, tags=tags)
    return RestoreResult(committed, current.version, target.version, metrics)


__all__ = ["file_keys", "files_needed", "missing_files", "restore"]
