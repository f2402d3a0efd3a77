"""Column mapping: modes, physical names and field ids at every nesting level, renaming data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine.errors import (
    InvalidLogError,
    SchemaMismatchError,
)
from airflow_delta.engine.model.actions import Protocol
from airflow_delta.engine.model.column_mapping import ColumnMapping, column_mapping_mode
from tests.engine.model.schema_builders import _field, _log_metadata, _metadata

# ====================================================================== column mapping


def test_column_mapping_of_a_spark_table(shared_tables: Path) -> None:
    metadata = _log_metadata(shared_tables / "table_with_column_mapping")
    mapping = ColumnMapping.from_metadata(metadata)
    assert mapping.mode == "name" and mapping.enabled
    assert mapping.physical_name("Company Very Short") == "col-173b4db9-b5ad-427f-9e75-516aae37fbbb"
    assert mapping.field_id("Super Name") == 2
    assert mapping.logical_name("col-3877fd94-0973-4941-ac6b-646849a1ff65") == "Super Name"
    assert mapping.physical_schema.names == [
        "col-173b4db9-b5ad-427f-9e75-516aae37fbbb",
        "col-3877fd94-0973-4941-ac6b-646849a1ff65",
    ]
    assert mapping.logical_schema.names == ["Company Very Short", "Super Name"]


def test_column_mapping_after_a_rename(shared_tables: Path) -> None:
    metadata = _log_metadata(shared_tables / "table_with_partitioning_mapping")
    mapping = ColumnMapping.from_metadata(metadata)
    # Mapping was switched on later (physical name = the name at that time), then id -> newid.
    assert mapping.physical_name("newid") == "id"
    assert mapping.logical_name("id") == "newid"


def test_nested_paths_cross_arrays_and_maps() -> None:
    def cm(i: int) -> dict[str, Any]:
        return {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": f"p{i}"}

    inner = {"type": "struct", "fields": [_field("leaf", "long", True, cm(3))]}
    fields = [
        _field("arr", {"type": "array", "elementType": inner, "containsNull": True}, True, cm(1)),
        _field(
            "m",
            {"type": "map", "keyType": "string", "valueType": {"type": "struct", "fields": [_field("v", "long", True, cm(4))]}, "valueContainsNull": True},
            True,
            cm(2),
        ),
    ]
    mapping = ColumnMapping.from_metadata(_metadata(fields, **{"delta.columnMapping.mode": "id"}))
    assert mapping.physical_path(("arr", "leaf")) == ("p1", "p3")
    assert mapping.physical_path(("m", "v")) == ("p2", "p4")
    assert mapping.logical_path(("p2", "p4")) == ("m", "v")
    assert mapping.field_id(("arr", "leaf")) == 3
    with pytest.raises(SchemaMismatchError):
        mapping.physical_name("nope")


def test_mode_none_ignores_physical_names_and_protocol_gates_the_mode() -> None:
    fields = [_field("a", "long", True, {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-a"})]
    assert ColumnMapping.from_metadata(_metadata(fields)).physical_name("a") == "a"
    named = _metadata(fields, **{"delta.columnMapping.mode": "name"})
    assert ColumnMapping.from_metadata(named).physical_name("a") == "col-a"
    # The property is honoured only if the protocol supports column mapping.
    assert column_mapping_mode(named, Protocol(1, 4)) == "none"
    assert column_mapping_mode(named, Protocol(2, 5)) == "name"
    assert column_mapping_mode(named, Protocol(3, 7, frozenset({"columnMapping"}), frozenset({"columnMapping"}))) == "name"
    assert column_mapping_mode(named, Protocol(3, 7, frozenset(), frozenset())) == "none"
    with pytest.raises(InvalidLogError, match=r"columnMapping\.mode"):
        column_mapping_mode(_metadata(fields, **{"delta.columnMapping.mode": "position"}))


def test_to_physical_renames_nested_columns_and_writes_field_ids(tmp_path: Path) -> None:
    def cm(i: int) -> dict[str, Any]:
        return {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": f"col-{i}"}

    fields = [
        _field("id", "long", True, cm(1)),
        _field("s", {"type": "struct", "fields": [_field("x", "integer", True, cm(3))]}, True, cm(2)),
    ]
    mapping = ColumnMapping.from_metadata(_metadata(fields, **{"delta.columnMapping.mode": "id"}))
    data = pa.Table.from_pylist([{"id": 1, "s": {"x": 7}}, {"id": 2, "s": None}], schema=mapping.logical_schema)
    physical = mapping.to_physical(data)
    assert physical.column_names == ["col-1", "col-2"]
    assert physical.schema.field("col-2").type.field(0).name == "col-3"
    assert physical.to_pylist() == [{"col-1": 1, "col-2": {"col-3": 7}}, {"col-1": 2, "col-2": None}]
    pq.write_table(physical, tmp_path / "f.parquet")
    parquet_schema = str(pq.ParquetFile(tmp_path / "f.parquet").schema)
    assert "field_id=1 col-1" in parquet_schema and "field_id=3 col-3" in parquet_schema
    # Other Arrow types of a column are cast to the table's type first.
    narrow = mapping.to_physical(pa.table({"id": pa.array([5], pa.int32())}))
    assert narrow.schema.field("col-1").type == pa.int64() and narrow.column(0).to_pylist() == [5]
    with pytest.raises(SchemaMismatchError, match="'other'"):
        mapping.to_physical(pa.table({"other": [1]}))
    with pytest.raises(SchemaMismatchError, match="'id'"):
        mapping.to_physical(pa.table({"id": ["not a number"]}))
