"""Column mapping (protocol "Column Mapping"): the mode and every column's physical name and field id.

:class:`ColumnMapping` knows the mode (``none``, ``name``, ``id``) of a table's ``metaData`` and,
for every column at every nesting level, its logical name, physical name and field id; it
renames logical data to the physical names data files hold (:meth:`ColumnMapping.to_physical`).
:func:`column_mapping_mode` reads the mode from the table properties, honouring the protocol.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from airflow_delta.engine.errors import (
    InvalidLogError,
    SchemaMismatchError,
)
from airflow_delta.engine.model.schema import FIELD_ID_KEY, PHYSICAL_NAME_KEY, parse_schema_json, schema_to_arrow

if TYPE_CHECKING:
    from airflow_delta.engine.model.actions import Metadata, Protocol

COLUMN_MAPPING_MODE_KEY = "delta.columnMapping.mode"
COLUMN_MAPPING_MODES = ("none", "name", "id")


# ColumnInfo are named tuples, not frozen dataclasses: as immutable, a quarter of the
# cost to create at import (a frozen dataclass compiles six methods, ~1 ms), which every
# process that opens a table pays; nothing compares them to other types or copies them.
class ColumnInfo(NamedTuple):
    """One column at any nesting level: its logical and physical name and field id."""

    logical_name: str
    physical_name: str
    field_id: int | None


@dataclass(frozen=True)
class ColumnMapping:
    """The table's column mapping: mode and every column's physical name and field id.

    Paths are tuples of struct field names from the top level down; arrays and maps are
    crossed transparently (the path to ``d`` in ``e: array<struct<d>>`` is ``("e", "d")``).
    In mode ``none`` every physical name is the logical name.
    """

    mode: str
    logical_schema: pa.Schema
    physical_schema: pa.Schema
    _by_logical: Mapping[tuple[str, ...], ColumnInfo] = field(repr=False)
    _by_physical: Mapping[tuple[str, ...], tuple[str, ...]] = field(repr=False)

    @classmethod
    def from_metadata(cls, metadata: Metadata, protocol: Protocol | None = None) -> ColumnMapping:
        """The mapping of ``metadata``; with ``protocol``, the mode is honoured only if the
        protocol supports column mapping (reader version 2, or the ``columnMapping`` feature)."""
        mode = column_mapping_mode(metadata, protocol)
        return _cached_mapping(metadata.schema_string, mode)

    @classmethod
    def from_schema(cls, schema_json: Mapping[str, Any] | str, mode: str) -> ColumnMapping:
        if mode not in COLUMN_MAPPING_MODES:
            raise InvalidLogError(f"unknown column mapping mode {mode!r}: expected one of none, name, id")
        if isinstance(schema_json, str):
            return _cached_mapping(schema_json, mode)
        return _build_mapping(parse_schema_json(schema_json), mode)

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    def column(self, path: str | Sequence[str]) -> ColumnInfo:
        key = (path,) if isinstance(path, str) else tuple(path)
        try:
            return self._by_logical[key]
        except KeyError:
            raise SchemaMismatchError(f"no column {'.'.join(key)!r} in the table schema") from None

    def physical_name(self, logical: str | Sequence[str]) -> str:
        """The physical name of a top-level column (or of the last element of a path)."""
        return self.column(logical).physical_name

    def physical_path(self, logical_path: Sequence[str]) -> tuple[str, ...]:
        path = tuple(logical_path)
        return tuple(self.column(path[: i + 1]).physical_name for i in range(len(path)))

    def field_id(self, logical: str | Sequence[str]) -> int | None:
        return self.column(logical).field_id

    def logical_path(self, physical_path: Sequence[str]) -> tuple[str, ...]:
        key = tuple(physical_path)
        try:
            return self._by_physical[key]
        except KeyError:
            raise SchemaMismatchError(f"no column with physical name {'.'.join(key)!r} in the table schema") from None

    def logical_name(self, physical: str) -> str:
        return self.logical_path((physical,))[-1]

    def to_physical(self, data: pa.Table) -> pa.Table:
        """``data`` (logical names, table column order) renamed to physical names, nested too.

        Zero-copy when the columns already have the table's types (only names and parquet
        field ids change); other types are cast to the table's first.
        """
        fields = []
        columns = []
        for name, column in zip(data.column_names, data.columns, strict=True):
            index = self.logical_schema.get_field_index(name)
            if index < 0:
                raise SchemaMismatchError(f"column {name!r} is not in the table schema")
            logical_type = self.logical_schema.field(index).type
            target = self.physical_schema.field(index)
            if column.type != logical_type:
                try:
                    column = column.cast(logical_type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                    raise SchemaMismatchError(f"column {name!r} ({column.type}) cannot be stored as {logical_type}: {exc}") from exc
            fields.append(target)
            columns.append(pa.chunked_array([chunk.view(target.type) for chunk in column.chunks], type=target.type))
        return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def column_mapping_mode(metadata: Metadata, protocol: Protocol | None = None) -> str:
    """``delta.columnMapping.mode`` of the table (``none`` when unset or not supported by ``protocol``)."""
    raw = metadata.configuration.get(COLUMN_MAPPING_MODE_KEY)
    mode = raw.strip().lower() if raw else "none"
    if mode not in COLUMN_MAPPING_MODES:
        raise InvalidLogError(f"table property {COLUMN_MAPPING_MODE_KEY}={raw!r} is invalid: expected none, name or id")
    if protocol is not None and mode != "none":
        supported = protocol.min_reader_version == 2 or (
            protocol.min_reader_version >= 3 and protocol.has_reader_feature("columnMapping")
        )
        if not supported:
            return "none"
    return mode


@functools.lru_cache(maxsize=64)
def _cached_mapping(schema_string: str, mode: str) -> ColumnMapping:
    return _build_mapping(parse_schema_json(schema_string), mode)


def _build_mapping(schema_json: Mapping[str, Any], mode: str) -> ColumnMapping:
    logical = schema_to_arrow(schema_json)
    physical = schema_to_arrow(schema_json, physical=True) if mode != "none" else logical
    by_logical: dict[tuple[str, ...], ColumnInfo] = {}
    by_physical: dict[tuple[str, ...], tuple[str, ...]] = {}

    def walk(fields: Sequence[Mapping[str, Any]], lpath: tuple[str, ...], ppath: tuple[str, ...]) -> None:
        for f in fields:
            meta = f.get("metadata") or {}
            lname = str(f["name"])
            pname = str(meta.get(PHYSICAL_NAME_KEY) or lname) if mode != "none" else lname
            fid = meta.get(FIELD_ID_KEY)
            info = ColumnInfo(lname, pname, int(fid) if fid is not None else None)
            lp, pp = (*lpath, lname), (*ppath, pname)
            by_logical[lp] = info
            by_physical[pp] = lp
            for nested in _struct_fields_within(f["type"]):
                walk(nested, lp, pp)

    walk(schema_json.get("fields", []), (), ())
    return ColumnMapping(mode, logical, physical, MappingProxyType(by_logical), MappingProxyType(by_physical))


def _struct_fields_within(t: Any) -> list[Sequence[Mapping[str, Any]]]:
    """Field lists of the structs directly inside ``t`` (through arrays and maps)."""
    if not isinstance(t, Mapping):
        return []
    kind = t.get("type")
    if kind == "struct":
        return [t.get("fields", [])]
    if kind == "array":
        return _struct_fields_within(t.get("elementType"))
    if kind == "map":
        return _struct_fields_within(t.get("keyType")) + _struct_fields_within(t.get("valueType"))
    return []
