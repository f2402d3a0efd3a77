"""The checkpoint's typed ``stats_parsed`` and ``partitionValues_parsed`` columns (physical names)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from airflow_delta.engine.model import partition_values as partition_values_module
from airflow_delta.engine.model import stats_parse as stats_module
from airflow_delta.engine.model.actions import STRING_MAP_TYPE, Metadata
from airflow_delta.engine.model.properties import TableProperties

log = logging.getLogger(__name__)


def _physical_name_map(schema_json: Mapping[str, Any]) -> dict[str, Any]:
    """logical name -> (physical name, nested map) for struct fields, from column-mapping metadata."""
    out: dict[str, Any] = {}
    for f in schema_json.get("fields", []):
        physical = (f.get("metadata") or {}).get("delta.columnMapping.physicalName", f["name"])
        nested = f.get("type")
        out[f["name"]] = (physical, _physical_name_map(nested) if isinstance(nested, dict) and nested.get("type") == "struct" else {})
    return out


def _rename_struct(arr: pa.Array, names: Mapping[str, Any]) -> pa.Array:
    if not pa.types.is_struct(arr.type) or not names:
        return arr
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    children = []
    fields = []
    for i in range(arr.type.num_fields):
        f = arr.type.field(i)
        physical, nested = names.get(f.name, (f.name, {}))
        child = _rename_struct(arr.field(i), nested)
        children.append(child)
        fields.append(pa.field(physical, child.type, f.nullable))
    return pa.StructArray.from_arrays(children, fields=fields, mask=arr.is_null() if arr.null_count else None)


def parsed_columns_layout(metadata: Metadata, props: TableProperties) -> tuple[pa.StructType | None, Callable | None, pa.StructType | None, Callable | None]:
    """Types and parsers for ``partitionValues_parsed`` and ``stats_parsed`` (physical names).

    Uses the schema and stats modules; if either cannot handle this table, the struct
    columns are left out (and the JSON stats kept), which readers accept.
    """
    if not props.checkpoint_write_stats_as_struct:
        return None, None, None, None
    names = _physical_name_map(metadata.schema_json)
    pv_type = pv_parse = st_type = st_parse = None
    try:

        def parse_stats(values: pa.Array) -> pa.Array:
            parsed = stats_module.parse_stats(values, metadata)
            return _rename_stats(parsed, names)

        probe = parse_stats(pa.nulls(1, pa.string()))
        st_type, st_parse = probe.type, parse_stats
    except Exception as exc:
        log.warning("checkpoint: not writing stats_parsed (%s)", exc)
    if metadata.partition_columns:
        try:

            def parse_partitions(values: pa.Array) -> pa.Array:
                parsed = partition_values_module.parse_partition_values(values, metadata)
                return _rename_struct(parsed, {k: (v[0], {}) for k, v in names.items()})

            from airflow_delta.engine.expressions.arrow_values import arrow_array  # sqlglot: only when checkpointing

            probe = parse_partitions(arrow_array([[]], STRING_MAP_TYPE))
            pv_type, pv_parse = probe.type, parse_partitions
        except Exception as exc:
            log.warning("checkpoint: not writing partitionValues_parsed (%s)", exc)
            return None, None, None, None  # required together when partitioned: write neither
    return pv_type, pv_parse, st_type, st_parse


def _rename_stats(parsed: pa.Array, names: Mapping[str, Any]) -> pa.Array:
    if isinstance(parsed, pa.ChunkedArray):
        parsed = parsed.combine_chunks()
    children, fields = [], []
    for i in range(parsed.type.num_fields):
        f = parsed.type.field(i)
        child = parsed.field(i)
        if f.name in ("minValues", "maxValues", "nullCount"):
            child = _rename_struct(child, names)
        children.append(child)
        fields.append(pa.field(f.name, child.type, f.nullable))
    return pa.StructArray.from_arrays(children, fields=fields, mask=parsed.is_null() if parsed.null_count else None)

