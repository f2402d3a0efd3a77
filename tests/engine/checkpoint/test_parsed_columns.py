"""The typed ``partitionValues_parsed`` and ``stats_parsed`` columns, under physical names."""

from __future__ import annotations

import json

import pyarrow as pa

from airflow_delta.engine.checkpoint.parsed_columns import parsed_columns_layout
from airflow_delta.engine.model.actions import STRING_MAP_TYPE, Metadata
from airflow_delta.engine.model.properties import TableProperties


def field(name: str, dtype: str, physical: str) -> dict[str, object]:
    return {"name": name, "type": dtype, "nullable": True, "metadata": {"delta.columnMapping.physicalName": physical}}


CONFIGURATION = {"delta.columnMapping.mode": "name", "delta.checkpoint.writeStatsAsStruct": "true"}
METADATA = Metadata(
    id="t",
    schema_string=json.dumps({"type": "struct", "fields": [field("id", "long", "col-id"), field("p", "string", "col-p")]}),
    partition_columns=("p",),
    configuration=CONFIGURATION,
)


def test_nothing_is_parsed_unless_stats_as_struct_is_on() -> None:
    props = TableProperties.from_configuration({"delta.columnMapping.mode": "name"})
    assert parsed_columns_layout(METADATA, props) == (None, None, None, None)


def test_parsed_columns_carry_physical_names_and_typed_values() -> None:
    pv_type, pv_parse, st_type, st_parse = parsed_columns_layout(METADATA, TableProperties.from_configuration(CONFIGURATION))
    assert pv_type is not None and pv_parse is not None and st_type is not None and st_parse is not None
    assert [pv_type.field(i).name for i in range(pv_type.num_fields)] == ["col-p"]
    partitions = pv_parse(pa.array([[("col-p", "x")], [("col-p", None)]], type=STRING_MAP_TYPE))
    assert partitions.to_pylist() == [{"col-p": "x"}, {"col-p": None}]
    stats = st_parse(pa.array(['{"numRecords":2,"minValues":{"col-id":1},"maxValues":{"col-id":9},"nullCount":{"col-id":0}}']))
    assert stats.type == st_type
    (row,) = stats.to_pylist()
    assert row["numRecords"] == 2 and row["minValues"] == {"col-id": 1} and row["maxValues"] == {"col-id": 9}
