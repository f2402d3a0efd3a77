"""``remove`` actions built from Arrow file actions (``FILE_ACTIONS_SCHEMA`` rows)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from airflow_delta.engine.model.actions import DeletionVectorDescriptor, Metadata, RemoveFile
from airflow_delta.engine.model.properties import TableProperties


def removes_from_file_actions(
    files: pa.Table, deletion_timestamp: int, *, data_change: bool = True, partition_columns: Sequence[str] | None = None
) -> list[RemoveFile]:
    """``remove`` actions for ``FILE_ACTIONS_SCHEMA`` rows, carrying what Delta puts in extended file metadata
    (``partition_columns``: partition values trimmed to exactly those keys, :func:`only_partition_columns`)."""
    # Column by column: only the columns a remove carries become Python objects (not the
    # whole row), and columns with no value at all (DVs, tags) are not converted.
    num_rows = files.num_rows

    def values(name: str) -> list[Any]:
        if name not in files.column_names or files.column(name).null_count == num_rows:
            return [None] * num_rows
        return files.column(name).to_pylist()

    partitions = values("partition_values")
    if partition_columns is not None:
        columns = list(partition_columns)
        partitions = [only_partition_columns(pv, columns) for pv in partitions]
    else:
        partitions = [dict(pv) if pv is not None else {} for pv in partitions]
    return [
        RemoveFile(
            path=path,
            deletion_timestamp=deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=pv,
            size=size,
            stats=stats,
            tags=dict(tags) if tags else None,
            deletion_vector=DeletionVectorDescriptor.from_json(dv) if dv and dv.get("storageType") else None,
            base_row_id=base_row_id,
            default_row_commit_version=commit_version,
        )
        for path, pv, size, stats, tags, dv, base_row_id, commit_version in zip(
            files.column("path").to_pylist(),
            partitions,
            values("size"),
            values("stats"),
            values("tags"),
            values("deletion_vector"),
            values("base_row_id"),
            values("default_row_commit_version"),
            strict=True,
        )
    ]


def staged_removes(files: pa.Table, metadata: Metadata, deletion_timestamp: int, *, data_change: bool) -> list[RemoveFile]:
    """The ``remove`` actions a transaction stages for ``files``: partition values trimmed to the table's columns."""
    return removes_from_file_actions(
        files, deletion_timestamp, data_change=data_change, partition_columns=physical_partition_columns(metadata)
    )


def physical_partition_columns(metadata: Metadata) -> list[str]:
    """The table's partition columns by the names file actions use: physical names under column mapping."""
    mode = TableProperties.from_configuration(metadata.configuration).column_mapping_mode
    if mode == "none" or not metadata.partition_columns:
        return list(metadata.partition_columns)
    physical: dict[str, str] = {}
    for f in metadata.schema_json.get("fields", []):
        name = f.get("name")
        physical[name] = (f.get("metadata") or {}).get("delta.columnMapping.physicalName", name)
    return [physical.get(c, c) for c in metadata.partition_columns]


def only_partition_columns(values: Mapping[str, str | None] | None, columns: Sequence[str]) -> dict[str, str | None]:
    """A file's ``partitionValues`` with exactly the table's (physical) partition columns as keys.

    The Arrow form of file actions may carry extra keys with null values (one map type
    for all files of a log); the actions we write must not.
    """
    given = dict(values) if values else {}
    return {c: given.get(c) for c in columns}


__all__ = ["only_partition_columns", "physical_partition_columns", "removes_from_file_actions", "staged_removes"]
