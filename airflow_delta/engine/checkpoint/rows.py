"""Checkpoint rows: file actions from a snapshot's Arrow tables, non-file actions from its objects.

File actions are streamed one record batch at a time; each batch's ``add`` struct is
assembled from the snapshot's own column buffers, so the state is never copied whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_delta.engine.checkpoint.schema import CHECKPOINT_DV_TYPE, REMOVE_TYPE
from airflow_delta.engine.model.actions import DomainMetadata, Metadata, Protocol, SetTransaction
from airflow_delta.engine.model.arrow_numpy import bool_array


def _empty_map_for_nulls(values: pa.Array) -> pa.Array:
    """``partitionValues`` is required: null maps become empty ones."""
    if values.null_count == 0:
        return values
    # A null entry spans no items (equal offsets), so the same buffers read as empty maps.
    return pa.MapArray.from_arrays(values.offsets, values.keys, values.items, type=values.type)


class NullCache:
    """All-null arrays for the unused action columns of a batch, reused across batches."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], pa.Array] = {}

    def get(self, n: int, dtype: pa.DataType) -> pa.Array:
        key = (n, str(dtype))
        arr = self._cache.get(key)
        if arr is None:
            arr = pa.nulls(n, dtype)
            self._cache[key] = arr
        return arr


@dataclass
class AddColumnLayout:
    """What the checkpoint's ``add`` column holds for this table, and how to fill it."""

    add: pa.StructType
    stats_as_json: bool
    parse_partitions: Callable[[pa.Array], pa.Array] | None = None
    parse_stats: Callable[[pa.Array], pa.Array] | None = None


def rows_table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """The non-file rows as a table of the checkpoint ``schema``, built without pandas
    (``Table.from_pylist`` would import it)."""
    # Not at module level: the expressions package imports sqlglot, which the engine's import does not need.
    from airflow_delta.engine.expressions.arrow_values import table_from_rows

    return table_from_rows([dict(r) for r in rows], schema)


def _false(n: int) -> pa.Array:
    return bool_array(np.zeros(n, dtype=bool))


def _checkpoint_dv(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The descriptor struct plus a null ``maxRowIndex``, keeping the row validity."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    n = len(values)
    children = [values.field(i) for i in range(values.type.num_fields)] + [pa.nulls(n, pa.int64())]
    return pa.StructArray.from_arrays(
        children, fields=list(CHECKPOINT_DV_TYPE), mask=values.is_null() if values.null_count else None
    )


def _add_struct(batch: pa.RecordBatch, layout: AddColumnLayout) -> pa.StructArray:
    n = batch.num_rows
    children: dict[str, pa.Array] = {
        "path": batch.column("path"),
        "partitionValues": _empty_map_for_nulls(batch.column("partition_values")),
        "size": batch.column("size"),
        "modificationTime": batch.column("modification_time"),
        # A checkpoint restates the state; it is not itself a change (as Spark writes it).
        "dataChange": _false(n),
        "tags": batch.column("tags"),
        "deletionVector": _checkpoint_dv(batch.column("deletion_vector")),
        "baseRowId": batch.column("base_row_id"),
        "defaultRowCommitVersion": batch.column("default_row_commit_version"),
        "clusteringProvider": batch.column("clustering_provider"),
    }
    if layout.stats_as_json:
        children["stats"] = batch.column("stats")
    if layout.parse_partitions is not None:
        children["partitionValues_parsed"] = layout.parse_partitions(batch.column("partition_values"))
    if layout.parse_stats is not None:
        children["stats_parsed"] = layout.parse_stats(batch.column("stats"))
    fields = [layout.add.field(i) for i in range(layout.add.num_fields)]
    return pa.StructArray.from_arrays([children[f.name] for f in fields], fields=fields)


def _remove_struct(batch: pa.RecordBatch) -> pa.StructArray:
    n = batch.num_rows
    children = [
        batch.column("path"),
        batch.column("deletion_timestamp"),
        _false(n),
        batch.column("extended_file_metadata"),
        batch.column("partition_values"),
        batch.column("size"),
        _checkpoint_dv(batch.column("deletion_vector")),
        batch.column("base_row_id"),
        batch.column("default_row_commit_version"),
    ]
    return pa.StructArray.from_arrays(children, fields=list(REMOVE_TYPE))


def file_action_batches(
    schema: pa.Schema,
    layout: AddColumnLayout,
    adds: pa.Table,
    removes: pa.Table,
    nulls: NullCache,
    *,
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    """Checkpoint record batches of ``schema``: the ``add`` rows, then the ``remove`` rows."""
    for batch in adds.to_batches(max_chunksize=batch_rows):
        if batch.num_rows:
            yield _batch_with(schema, batch.num_rows, {"add": _add_struct(batch, layout)}, nulls)
    for batch in removes.to_batches(max_chunksize=batch_rows):
        if batch.num_rows:
            yield _batch_with(schema, batch.num_rows, {"remove": _remove_struct(batch)}, nulls)


def _batch_with(schema: pa.Schema, n: int, columns: Mapping[str, pa.Array], nulls: NullCache) -> pa.RecordBatch:
    arrays = [columns[f.name] if f.name in columns else nulls.get(n, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _map_items(mapping: Mapping[str, Any] | None) -> list[tuple[str, Any]] | None:
    return list(mapping.items()) if mapping is not None else None


def _features(features: frozenset[str] | None, required: bool) -> list[str] | None:
    # Reader v3 / writer v7 tables must have non-null feature lists in checkpoints;
    # older protocols have none (null).
    if features is None:
        return [] if required else None
    return sorted(features)


def non_file_rows(
    protocol: Protocol,
    metadata: Metadata,
    transactions: Sequence[SetTransaction],
    domains: Sequence[DomainMetadata],
    checkpoint_metadata: Mapping[str, Any] | None = None,
    sidecars: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Non-file actions as rows keyed by their checkpoint column (nested maps as item lists)."""
    rows: list[dict[str, Any]] = []
    if checkpoint_metadata is not None:
        rows.append(
            {"checkpointMetadata": {"version": checkpoint_metadata["version"], "tags": _map_items(checkpoint_metadata.get("tags"))}}
        )
    rows.append(
        {
            "protocol": {
                "minReaderVersion": protocol.min_reader_version,
                "minWriterVersion": protocol.min_writer_version,
                "readerFeatures": _features(protocol.reader_features, protocol.min_reader_version >= 3),
                "writerFeatures": _features(protocol.writer_features, protocol.min_writer_version >= 7),
            }
        }
    )
    rows.append(
        {
            "metaData": {
                "id": metadata.id,
                "name": metadata.name,
                "description": metadata.description,
                "format": {"provider": metadata.format.provider, "options": _map_items(metadata.format.options) or []},
                "schemaString": metadata.schema_string,
                "partitionColumns": list(metadata.partition_columns),
                "configuration": _map_items(metadata.configuration) or [],
                "createdTime": metadata.created_time,
            }
        }
    )
    for txn in transactions:
        rows.append({"txn": {"appId": txn.app_id, "version": txn.version, "lastUpdated": txn.last_updated}})
    for domain in domains:
        rows.append({"domainMetadata": {"domain": domain.domain, "configuration": domain.configuration, "removed": False}})
    for sidecar in sidecars:
        rows.append({"sidecar": {**sidecar, "tags": _map_items(sidecar.get("tags"))}})
    return rows


def non_file_json_actions(
    protocol: Protocol,
    metadata: Metadata,
    transactions: Sequence[SetTransaction],
    domains: Sequence[DomainMetadata],
    checkpoint_metadata: Mapping[str, Any] | None = None,
    sidecars: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    actions: list[dict[str, Any]] = []
    if checkpoint_metadata is not None:
        actions.append({"checkpointMetadata": dict(checkpoint_metadata)})
    actions.append({"protocol": protocol.to_json()})
    actions.append({"metaData": metadata.to_json()})
    actions += [{"txn": t.to_json()} for t in transactions]
    actions += [{"domainMetadata": {"domain": d.domain, "configuration": d.configuration, "removed": False}} for d in domains]
    actions += [{"sidecar": dict(s)} for s in sidecars]
    return actions

