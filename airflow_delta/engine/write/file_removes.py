"""``remove`` actions built from Arrow file actions (``FILE_ACTIONS_SCHEMA`` rows)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

import pyarrow as pa

from airflow_delta.engine.model.actions import DeletionVectorDescriptor, Metadata, RemoveFile
from airflow_delta.engine.model.json_text import json_text
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
        # Once per distinct partition (the files of a commit share a few), not per file; the
        # removes of one partition share one dict, which nothing changes (actions are immutable).
        trimmed: dict[tuple[tuple[str, str | None], ...], dict[str, str | None]] = {}
        for i, pv in enumerate(partitions):
            key = tuple(pv) if pv is not None else ()
            found = trimmed.get(key)
            if found is None:
                found = trimmed[key] = only_partition_columns(pv, columns)
            partitions[i] = found
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


def remove_json_line(remove: RemoveFile, partitions_seen: dict[int, str] | None = None) -> str:
    """The log line of ``remove``: exactly ``json_text({"remove": remove.to_json()})``, put together from
    its encoded fields instead of going through a dict and the generic encoder (a commit of a
    compaction writes 10,000 of them; about a third of the time).

    The fields are written in ``to_json``'s order, strings with the encoder's own escaping (non-ASCII
    kept as itself). A remove with tags, a deletion vector or a field of an unexpected type takes the
    generic path. ``partitions_seen``: the JSON of partition-value mappings already written, by the
    mapping's ``id``, for one serialisation whose removes are all alive (staged removes of one
    partition share their mapping, so each is encoded once).
    """
    if remove.tags or remove.deletion_vector is not None or not _plain_fields(remove):
        return json_text({"remove": remove.to_json()})
    parts = ['{"remove":{"path":', encode_basestring(remove.path), ',"dataChange":', _BOOLEAN[remove.data_change]]
    if remove.deletion_timestamp is not None:
        parts += [',"deletionTimestamp":', int.__repr__(remove.deletion_timestamp)]
    if remove.extended_file_metadata is not None:
        parts += [',"extendedFileMetadata":', _BOOLEAN[remove.extended_file_metadata]]
    if remove.partition_values is not None:
        values = remove.partition_values
        text = partitions_seen.get(id(values)) if partitions_seen is not None else None
        if text is None:
            text = json_text(dict(values))
            if partitions_seen is not None:
                partitions_seen[id(values)] = text
        parts += [',"partitionValues":', text]
    if remove.size is not None:
        parts += [',"size":', int.__repr__(remove.size)]
    if remove.stats is not None:
        parts += [',"stats":', encode_basestring(remove.stats)]
    if remove.base_row_id is not None:
        parts += [',"baseRowId":', int.__repr__(remove.base_row_id)]
    if remove.default_row_commit_version is not None:
        parts += [',"defaultRowCommitVersion":', int.__repr__(remove.default_row_commit_version)]
    parts.append("}}")
    return "".join(parts)


_BOOLEAN = {True: "true", False: "false"}


def _plain_fields(remove: RemoveFile) -> bool:
    """Whether every field of ``remove`` has the type the line builder writes (str, exact bool, exact int)."""
    return (
        type(remove.path) is str
        and type(remove.data_change) is bool
        and (remove.deletion_timestamp is None or type(remove.deletion_timestamp) is int)
        and (remove.extended_file_metadata is None or type(remove.extended_file_metadata) is bool)
        and (remove.size is None or type(remove.size) is int)
        and (remove.stats is None or type(remove.stats) is str)
        and (remove.base_row_id is None or type(remove.base_row_id) is int)
        and (remove.default_row_commit_version is None or type(remove.default_row_commit_version) is int)
    )


__all__ = [
    "only_partition_columns",
    "physical_partition_columns",
    "remove_json_line",
    "removes_from_file_actions",
    "staged_removes",
]
