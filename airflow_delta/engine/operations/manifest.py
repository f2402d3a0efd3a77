"""Symlink format manifests: ``_symlink_format_manifest/`` for Presto, Trino and Athena.

Delta's ``GenerateSymlinkManifest``: one ``manifest`` text file per partition directory
(``_symlink_format_manifest/<col>=<value>/.../manifest``; a single
``_symlink_format_manifest/manifest`` for an unpartitioned table), listing the absolute
URI of every live data file of that partition, one per line. The directory of a
partition is built from the file's partition values, escaped as Spark names partition
directories (``%XX``, ``__HIVE_DEFAULT_PARTITION__`` for null), so it matches the
partitions a Hive metastore knows whatever the data files' own paths are.

* :func:`generate_symlink_manifest` writes all of them (``full``) and deletes the
  manifests of partitions that no longer have files; with ``partitions`` it rewrites only
  those partitions (``incremental``), deleting the manifest of each that became empty.
* :func:`manifests_after_commit` is the post-commit step: when the table sets
  ``delta.compatibility.symlinkFormatManifest.enabled``, the partitions the commit touched
  (its adds and removes) are regenerated; the first time (no manifest directory yet), all.

Each manifest is written with the FileIO's atomic output (temp + rename on local storage,
one PUT on object stores), so a reader sees the old list or the new one, never half.
Like Delta, tables whose files carry deletion vectors, or that use column mapping, are
refused (:class:`ManifestNotSupportedError`): these engines would read deleted rows, or
physical column names they do not know.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import ManifestNotSupportedError
from airflow_delta.engine.model.arrow_numpy import group_row_indices, int64_array, null_scalar, string_scalar
from airflow_delta.engine.model.column_mapping import column_mapping_mode
from airflow_delta.engine.model.properties import SYMLINK_MANIFEST_PROPERTY, symlink_manifest_enabled
from airflow_delta.engine.read.snapshot import Snapshot, relative_paths
from airflow_delta.engine.storage.fileio import LocalFileIO
from airflow_delta.engine.storage.location import TableLocation

log = logging.getLogger(__name__)

MANIFEST_DIR = "_symlink_format_manifest"
MANIFEST_FILE = "manifest"
# A partition: its values as the log writes them, in the table's partition column order.
PartitionKey = tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class ManifestResult:
    """What one manifest generation did.

    ``mode`` is ``full`` or ``incremental``; ``written`` and ``deleted`` are the manifest
    files' paths relative to the table root; ``num_data_files`` the files listed in the
    manifests written.
    """

    mode: str
    written: tuple[str, ...]
    deleted: tuple[str, ...]
    num_data_files: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "written": list(self.written),
            "deleted": list(self.deleted),
            "numDataFiles": self.num_data_files,
        }


def generate_symlink_manifest(
    location: TableLocation, snapshot: Snapshot, partitions: Iterable[PartitionKey] | None = None
) -> ManifestResult:
    """Write the manifests of ``snapshot`` (all partitions, or only ``partitions``).

    Full generation also deletes every manifest under ``_symlink_format_manifest/`` whose
    partition has no live file; incremental generation deletes the manifests of the given
    partitions that have none.
    """
    _check_supported(location, snapshot)
    partition_columns = tuple(snapshot.metadata.partition_columns)
    adds = snapshot.add_actions
    uris = _data_file_uris(location, snapshot, adds.column("path"))
    keys = _partition_key_columns(adds.column("partition_values"), partition_columns)
    groups = group_row_indices(pa.table({**keys, "__uri": uris}), list(keys)) if keys else None
    wanted = None if partitions is None else {tuple(p) for p in partitions}

    written: list[str] = []
    listed = 0
    if groups is None:  # unpartitioned: one manifest at the root of the manifest directory, even when empty
        written.append(_write_manifest(location, "", uris.to_pylist()))
        listed = len(uris)
    else:
        columns = [groups.column(name).to_pylist() for name in keys]
        row_lists = groups.column("__row_list").to_pylist()
        # One iteration per partition (not per file): a partition's URIs are taken at once.
        for i, rows in enumerate(row_lists):
            key = tuple(column[i] for column in columns)
            if wanted is not None and key not in wanted:
                continue
            files = uris.take(int64_array(np.asarray(rows, dtype=np.int64))).to_pylist()
            written.append(_write_manifest(location, partition_dir(partition_columns, key), files))
            listed += len(files)

    if wanted is None:
        stale = sorted(set(_existing_manifests(location)) - set(written))
    else:
        live = {partition_dir(partition_columns, k) for k in _live_keys(groups, keys)}
        stale = sorted(
            _manifest_path(d) for d in (partition_dir(partition_columns, k) for k in wanted) if d not in live
        )
    deleted = [path for path in stale if _delete_quietly(location, path)]
    return ManifestResult(
        mode="full" if wanted is None else "incremental",
        written=tuple(written),
        deleted=tuple(deleted),
        num_data_files=listed,
    )


def manifests_after_commit(
    location: TableLocation, snapshot: Snapshot, actions: Sequence[Mapping[str, Any]] | None
) -> ManifestResult | None:
    """The post-commit step: regenerate what a commit changed, when the table asks for manifests.

    Returns None when the property is not set. Without the commit's actions, or before any
    manifest exists, or when a remove does not carry its partition values, everything is
    regenerated.
    """
    if not symlink_manifest_enabled(snapshot.metadata.configuration):
        return None
    partition_columns = tuple(snapshot.metadata.partition_columns)
    touched: set[PartitionKey] | None = set()
    for action in actions or ():
        body = action.get("add") or action.get("remove")
        if body is None:
            continue
        values = body.get("partitionValues")
        if values is None and partition_columns:
            touched = None  # a remove without partition values: we cannot tell its partition
            break
        assert touched is not None
        touched.add(tuple(_log_value((values or {}).get(c)) for c in partition_columns))
    if actions is None or not location.io.is_dir(f"{location.root}/{MANIFEST_DIR}"):
        touched = None
    if touched is not None and not touched:
        return ManifestResult("incremental", (), (), 0)  # no file changed (VACUUM, properties...)
    if touched is not None and not partition_columns:
        touched = None  # the one manifest lists the whole table
    return generate_symlink_manifest(location, snapshot, touched)


def partition_dir(partition_columns: Sequence[str], key: PartitionKey) -> str:
    """``col=value/...`` of a partition, escaped as Spark names partition directories."""
    from airflow_delta.engine.write.data_files import HIVE_DEFAULT_PARTITION, escape_partition_path

    return "/".join(
        f"{escape_partition_path(column)}={HIVE_DEFAULT_PARTITION if value is None else escape_partition_path(value)}"
        for column, value in zip(partition_columns, key, strict=True)
    )


# ------------------------------------------------------------------ internals


def _check_supported(location: TableLocation, snapshot: Snapshot) -> None:
    if column_mapping_mode(snapshot.metadata, snapshot.protocol) != "none":
        raise ManifestNotSupportedError(
            location.uri, "the table uses column mapping; manifest readers would not find its physical column names"
        )
    dv = snapshot.add_actions.column("dv_id")
    if dv.null_count != len(dv):
        raise ManifestNotSupportedError(
            location.uri,
            f"{len(dv) - dv.null_count} live file(s) have deletion vectors, whose deleted rows manifest readers "
            "would return; run OPTIMIZE with a DV purge (max_deleted_rows_ratio=0) first, and disable "
            "delta.enableDeletionVectors on tables that need manifests",
        )


def _log_value(value: Any) -> str | None:
    # The log writes a null partition value as null or as an empty string.
    return None if value is None or value == "" else str(value)


def _partition_key_columns(values: pa.ChunkedArray, partition_columns: Sequence[str]) -> dict[str, pa.Array]:
    """Each partition column's value per file (null for a null value), by ``map_lookup``."""
    out: dict[str, pa.Array] = {}
    empty = string_scalar("")
    for i, column in enumerate(partition_columns):
        looked_up = pc.map_lookup(values, string_scalar(column), "first")
        looked_up = pc.if_else(pc.equal(looked_up, empty), null_scalar(pa.string()), looked_up)
        out[f"__p{i}"] = looked_up.combine_chunks() if isinstance(looked_up, pa.ChunkedArray) else looked_up
    return out


def _live_keys(groups: pa.Table | None, keys: Mapping[str, pa.Array]) -> list[PartitionKey]:
    if groups is None:
        return []
    columns = [groups.column(name).to_pylist() for name in keys]
    return [tuple(column[i] for column in columns) for i in range(groups.num_rows)]


def _data_file_uris(location: TableLocation, snapshot: Snapshot, paths: pa.ChunkedArray) -> pa.Array:
    """Absolute URIs of the data files, as Delta writes them: Hadoop's ``file:/...`` for local tables."""
    relative = relative_paths(snapshot.table_root, paths)
    prefix = _table_uri_prefix(location)
    return pc.binary_join_element_wise(string_scalar(prefix + "/"), relative, string_scalar(""))


def _table_uri_prefix(location: TableLocation) -> str:
    if isinstance(location.io, LocalFileIO):
        return "file:" + posixpath.normpath(location.root)
    scheme = location.uri.split("://", 1)[0] if "://" in location.uri else "file"
    return f"{scheme}://{location.root}"


def _manifest_path(relative_dir: str) -> str:
    return posixpath.join(MANIFEST_DIR, relative_dir, MANIFEST_FILE) if relative_dir else f"{MANIFEST_DIR}/{MANIFEST_FILE}"


def _write_manifest(location: TableLocation, relative_dir: str, uris: Sequence[str]) -> str:
    path = _manifest_path(relative_dir)
    body = "".join(uri + "\n" for uri in uris).encode("utf-8")
    with location.io.atomic_output(f"{location.root}/{path}") as out:
        out.write(body)
    return path


def _existing_manifests(location: TableLocation) -> list[str]:
    base = f"{location.root}/{MANIFEST_DIR}"
    prefix = posixpath.normpath(location.root) + "/"
    return [
        posixpath.normpath(f.path)[len(prefix):]
        for f in location.io.walk(base)
        if f.name == MANIFEST_FILE
    ]


def _delete_quietly(location: TableLocation, relative: str) -> bool:
    try:
        location.io.delete(f"{location.root}/{relative}")
    except FileNotFoundError:
        return False
    return True


__all__ = [
    "MANIFEST_DIR",
    "SYMLINK_MANIFEST_PROPERTY",
    "ManifestResult",
    "generate_symlink_manifest",
    "manifests_after_commit",
    "partition_dir",
    "symlink_manifest_enabled",
]
