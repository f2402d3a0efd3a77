"""Which columns per-file statistics cover: the table's data columns as a tree of :class:`StatsField`.

Shared by reading statistics (:mod:`~airflow_delta.engine.model.stats_parse`) and computing
them (:mod:`~airflow_delta.engine.model.stats_compute`). The protocol ("Per-file Statistics")
keys ``minValues`` / ``maxValues`` / ``nullCount`` by *physical* column names under column
mapping and mirrors the table schema, nested structs included; partition columns are never
in data files. :func:`indexed_columns` picks the columns a writer collects statistics on from
``delta.dataSkippingStatsColumns`` / ``delta.dataSkippingNumIndexedCols``.

Min/max exist only for byte, short, integer, long, float, double, decimal, date, timestamp,
timestamp_ntz and string columns; not for boolean, binary, arrays, maps or variants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_delta.engine.errors import UnsupportedFeatureError
from airflow_delta.engine.model.actions import Metadata
from airflow_delta.engine.model.column_mapping import ColumnMapping
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.model.schema import delta_type_to_arrow

__all__ = [
    "StatsField",
    "data_fields",
    "indexed_columns",
    "leaf_paths",
]

_MIN_MAX_PRIMITIVES = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "date", "timestamp", "timestamp_ntz", "string"}
)


def _has_min_max(delta_type: Any) -> bool:
    return isinstance(delta_type, str) and (delta_type in _MIN_MAX_PRIMITIVES or delta_type.startswith("decimal"))


# =========================================================================== the stats schema


@dataclass(frozen=True)
class StatsField:
    """One column in the statistics: a struct (with children) or a leaf."""

    logical: str
    physical: str
    delta_type: Any  # the Delta type: a name, or a struct/array/map definition
    arrow_type: pa.DataType | None  # None for leaves of a type this engine does not know
    children: tuple[StatsField, ...] | None = None  # set for structs

    @property
    def is_struct(self) -> bool:
        return self.children is not None

    @property
    def has_min_max(self) -> bool:
        return self.children is None and _has_min_max(self.delta_type) and self.arrow_type is not None


def _fields_of(schema_fields: Sequence[Mapping[str, Any]], mapping_enabled: bool) -> tuple[StatsField, ...]:
    out = []
    for f in schema_fields:
        name = str(f["name"])
        meta = f.get("metadata") or {}
        physical = str(meta.get("delta.columnMapping.physicalName") or name) if mapping_enabled else name
        t = f["type"]
        if isinstance(t, Mapping) and t.get("type") == "struct":
            children = _fields_of(t.get("fields", []), mapping_enabled)
            out.append(StatsField(name, physical, t, None, children))
            continue
        try:
            arrow_type: pa.DataType | None = delta_type_to_arrow(t)
        except UnsupportedFeatureError:
            arrow_type = None  # an unknown type: only its nullCount is meaningful here
        out.append(StatsField(name, physical, t, arrow_type))
    return tuple(out)


def data_fields(metadata: Metadata) -> tuple[StatsField, ...]:
    """The table's columns without partition columns (those are not in data files)."""
    mapping = ColumnMapping.from_metadata(metadata)
    fields = _fields_of(metadata.schema_json.get("fields", []), mapping.enabled)
    partitions = {c.casefold() for c in metadata.partition_columns}
    return tuple(f for f in fields if f.logical.casefold() not in partitions)




def indexed_columns(
    metadata: Metadata,
    *,
    num_indexed_cols: int | None = None,
    stats_columns: Sequence[str] | None = None,
) -> tuple[StatsField, ...]:
    """The columns statistics are collected on, per the table properties (or the overrides).

    ``delta.dataSkippingStatsColumns`` (explicit column names, nested ``a.b`` allowed) wins
    over ``delta.dataSkippingNumIndexedCols`` (the first N leaf columns; -1 = all).
    Partition columns are never indexed.
    """
    properties = TableProperties.from_configuration(metadata.configuration)
    fields = data_fields(metadata)
    if stats_columns is None and num_indexed_cols is None:
        stats_columns = properties.data_skipping_stats_columns
        num_indexed_cols = properties.data_skipping_num_indexed_cols
    if stats_columns is not None:
        paths = [tuple(p.casefold() for p in _split_column_path(c)) for c in stats_columns]
        return _filter_fields(fields, paths)
    assert num_indexed_cols is not None
    if num_indexed_cols < 0:
        return fields
    return _first_leaves(fields, num_indexed_cols)[0]


def _split_column_path(text: str) -> list[str]:
    """``a.b`` -> [a, b]; backticks quote names containing dots (`` `a.b`.c ``)."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    text = text.strip()
    while i < len(text):
        ch = text[i]
        if ch == "`":
            if quoted and i + 1 < len(text) and text[i + 1] == "`":
                current.append("`")
                i += 2
                continue
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _filter_fields(fields: Sequence[StatsField], paths: Sequence[tuple[str, ...]]) -> tuple[StatsField, ...]:
    out = []
    for f in fields:
        mine = [p[1:] for p in paths if p and p[0] == f.logical.casefold()]
        if not mine:
            continue
        if any(not rest for rest in mine) or not f.is_struct:
            if all(rest for rest in mine) and not f.is_struct:
                continue  # a nested path into a non-struct matches nothing
            out.append(f)
            continue
        assert f.children is not None
        children = _filter_fields(f.children, [r for r in mine if r])
        if children:
            out.append(StatsField(f.logical, f.physical, f.delta_type, f.arrow_type, children))
    return tuple(out)


def _first_leaves(fields: Sequence[StatsField], budget: int) -> tuple[tuple[StatsField, ...], int]:
    out: list[StatsField] = []
    used = 0
    for f in fields:
        if used >= budget:
            break
        if f.is_struct:
            assert f.children is not None
            children, n = _first_leaves(f.children, budget - used)
            used += n
            out.append(StatsField(f.logical, f.physical, f.delta_type, f.arrow_type, children))
        else:
            used += 1
            out.append(f)
    return tuple(out), used


def leaf_paths(fields: Iterable[StatsField], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Logical paths of the leaves in ``fields`` (handy for callers and tests)."""
    out: list[tuple[str, ...]] = []
    for f in fields:
        if f.is_struct:
            assert f.children is not None
            out.extend(leaf_paths(f.children, (*prefix, f.logical)))
        else:
            out.append((*prefix, f.logical))
    return out
