"""Delta schema JSON <-> Arrow, column mapping, partition value (de)serialisation."""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import (
    InvalidLogError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from airflow_delta.engine.model.actions import Metadata, Protocol
from airflow_delta.engine.model.schema import (
    TIMESTAMP_NTZ_TYPE,
    TIMESTAMP_TYPE,
    ColumnMapping,
    arrow_to_delta_schema,
    column_mapping_mode,
    delta_type_to_arrow,
    java_float_string,
    parse_partition_strings,
    parse_partition_values,
    partition_schema,
    schema_to_arrow,
    serialize_partition_value,
)

# The example schema of the protocol's appendix "Schema Serialization Format".
SPEC_EXAMPLE = {
    "type": "struct",
    "fields": [
        {"name": "a", "type": "integer", "nullable": False, "metadata": {}},
        {
            "name": "b",
            "type": {"type": "struct", "fields": [{"name": "d", "type": "integer", "nullable": False, "metadata": {}}]},
            "nullable": True,
            "metadata": {},
        },
        {"name": "c", "type": {"type": "array", "elementType": "integer", "containsNull": False}, "nullable": True, "metadata": {}},
        {
            "name": "e",
            "type": {
                "type": "array",
                "elementType": {
                    "type": "struct",
                    "fields": [{"name": "d", "type": "integer", "nullable": False, "metadata": {}}],
                },
                "containsNull": True,
            },
            "nullable": True,
            "metadata": {},
        },
        {
            "name": "f",
            "type": {"type": "map", "keyType": "string", "valueType": "string", "valueContainsNull": True},
            "nullable": True,
            "metadata": {},
        },
    ],
}


def _field(name: str, t: Any, nullable: bool = True, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "type": t, "nullable": nullable, "metadata": metadata or {}}


def _metadata(fields: list[dict[str, Any]], partition_columns: tuple[str, ...] = (), **configuration: str) -> Metadata:
    return Metadata(
        id="test",
        schema_string=json.dumps({"type": "struct", "fields": fields}),
        partition_columns=partition_columns,
        configuration=configuration,
    )


def _log_metadata(table: Path) -> Metadata:
    found = None
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            if line.strip() and "metaData" in json.loads(line):
                found = Metadata.from_json(json.loads(line)["metaData"])
    assert found is not None
    return found


def _log_partition_values(table: Path) -> pa.Array:
    rows = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action:
                rows.append(list(action["add"]["partitionValues"].items()))
    return pa.array(rows, type=pa.map_(pa.string(), pa.string()))


# =================================================================== schema conversion


def test_spec_example_maps_to_arrow_with_nullability() -> None:
    schema = schema_to_arrow(SPEC_EXAMPLE)
    assert schema.names == ["a", "b", "c", "e", "f"]
    assert schema.field("a").type == pa.int32() and not schema.field("a").nullable
    b = schema.field("b").type
    assert pa.types.is_struct(b) and b.field("d").type == pa.int32() and not b.field("d").nullable
    c = schema.field("c").type
    assert pa.types.is_list(c) and c.value_type == pa.int32() and not c.value_field.nullable
    e = schema.field("e").type
    assert e.value_field.nullable and pa.types.is_struct(e.value_type)
    f = schema.field("f").type
    assert pa.types.is_map(f) and f.key_type == pa.string() and f.item_field.nullable
    assert not f.key_field.nullable


def test_spec_example_round_trips() -> None:
    assert arrow_to_delta_schema(schema_to_arrow(SPEC_EXAMPLE)) == SPEC_EXAMPLE
    # The raw schemaString is accepted as well as the parsed JSON.
    assert schema_to_arrow(json.dumps(SPEC_EXAMPLE)) == schema_to_arrow(SPEC_EXAMPLE)


@pytest.mark.parametrize(
    ("delta", "arrow"),
    [
        ("string", pa.string()),
        ("long", pa.int64()),
        ("integer", pa.int32()),
        ("short", pa.int16()),
        ("byte", pa.int8()),
        ("float", pa.float32()),
        ("double", pa.float64()),
        ("boolean", pa.bool_()),
        ("binary", pa.binary()),
        ("date", pa.date32()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestamp_ntz", pa.timestamp("us")),
        ("decimal(10,2)", pa.decimal128(10, 2)),
        ("decimal(38,0)", pa.decimal128(38, 0)),
        ("decimal(5, 5)", pa.decimal128(5, 5)),
    ],
)
def test_primitive_types(delta: str, arrow: pa.DataType) -> None:
    assert delta_type_to_arrow(delta) == arrow
    back = arrow_to_delta_schema(pa.schema([pa.field("x", arrow)]))["fields"][0]["type"]
    assert back == delta.replace(" ", "")


@pytest.mark.parametrize("bad", ["decimal(39,0)", "decimal(0,0)", "decimal(4,5)"])
def test_invalid_decimals_are_refused(bad: str) -> None:
    with pytest.raises(InvalidLogError, match="decimal"):
        delta_type_to_arrow(bad)


_VARIANT = pa.struct([pa.field("metadata", pa.binary(), nullable=False), pa.field("value", pa.binary(), nullable=False)])


@pytest.mark.parametrize(
    ("t", "arrow"),
    [
        ("variant", _VARIANT),
        ({"type": "variant"}, _VARIANT),
        ({"type": "array", "elementType": "variant", "containsNull": True}, pa.list_(pa.field("element", _VARIANT))),
    ],
)
def test_variant_is_the_unshredded_struct_of_binaries(t: Any, arrow: pa.DataType) -> None:
    # delta-rs's layout (protocol "Variant data in Parquet", exposed raw); more in test_variant.py.
    assert schema_to_arrow({"type": "struct", "fields": [_field("v", t)]}).field("v").type == arrow


def test_unknown_type_is_refused() -> None:
    with pytest.raises(UnsupportedFeatureError, match="geometry"):
        delta_type_to_arrow("geometry")


def test_physical_schema_carries_physical_names_and_field_ids() -> None:
    schema = {
        "type": "struct",
        "fields": [
            _field(
                "outer",
                {
                    "type": "array",
                    "elementType": {
                        "type": "struct",
                        "fields": [_field("d", "integer", False, {"delta.columnMapping.id": 5, "delta.columnMapping.physicalName": "col-d"})],
                    },
                    "containsNull": True,
                },
                metadata={"delta.columnMapping.id": 4, "delta.columnMapping.physicalName": "col-outer"},
            )
        ],
    }
    physical = schema_to_arrow(schema, physical=True)
    outer = physical.field("col-outer")
    assert outer.metadata[b"PARQUET:field_id"] == b"4"
    inner = outer.type.value_type.field("col-d")
    assert inner.metadata[b"PARQUET:field_id"] == b"5"
    # The logical schema keeps the logical names and the mapping in field metadata.
    logical = schema_to_arrow(schema)
    assert logical.field("outer").metadata[b"delta.columnMapping.physicalName"] == b"col-outer"
    assert b"PARQUET:field_id" not in logical.field("outer").metadata


def test_field_metadata_round_trips_with_its_json_types() -> None:
    metadata = {
        "delta.columnMapping.id": 3,
        "delta.columnMapping.physicalName": "col-1",
        "delta.invariants": '{"expression":{"expression":"x > 1"}}',
        "CURRENT_DEFAULT": "1",
        "comment": "true",
        "delta.identity.start": 1,
        "delta.identity.allowExplicitInsert": False,
        "delta.typeChanges": [{"fromType": "integer", "toType": "long", "tableVersion": 2}],
        "custom": {"nested": [1, 2]},
    }
    schema = {"type": "struct", "fields": [_field("x", "long", True, metadata)]}
    assert arrow_to_delta_schema(schema_to_arrow(schema)) == schema


def test_arrow_to_delta_maps_widths_and_variants_of_types() -> None:
    arrow = pa.schema(
        [
            pa.field("u8", pa.uint8()),
            pa.field("u16", pa.uint16()),
            pa.field("u32", pa.uint32()),
            pa.field("f16", pa.float16()),
            pa.field("ls", pa.large_string()),
            pa.field("sv", pa.string_view()),
            pa.field("lb", pa.large_binary()),
            pa.field("dict", pa.dictionary(pa.int32(), pa.string())),
            pa.field("ms_utc", pa.timestamp("ms", tz="Europe/Paris")),
            pa.field("ns_naive", pa.timestamp("ns")),
            pa.field("d64", pa.date64()),
            pa.field("ll", pa.large_list(pa.int64())),
        ]
    )
    types = [f["type"] for f in arrow_to_delta_schema(arrow)["fields"]]
    assert types == [
        "short",
        "integer",
        "long",
        "float",
        "string",
        "string",
        "binary",
        "string",
        "timestamp",
        "timestamp_ntz",
        "date",
        {"type": "array", "elementType": "long", "containsNull": True},
    ]


@pytest.mark.parametrize("t", [pa.uint64(), pa.time32("s"), pa.duration("us"), pa.decimal256(40, 2)])
def test_arrow_types_delta_cannot_store_are_refused(t: pa.DataType) -> None:
    with pytest.raises(SchemaMismatchError, match="'x'"):
        arrow_to_delta_schema(pa.schema([pa.field("x", t)]))


_PRIMITIVE_NAMES = st.sampled_from(
    ["string", "long", "integer", "short", "byte", "float", "double", "boolean", "binary", "date", "timestamp", "timestamp_ntz"]
)
_DECIMALS = st.tuples(st.integers(1, 38), st.integers(0, 38)).filter(lambda ps: ps[1] <= ps[0]).map(lambda ps: f"decimal({ps[0]},{ps[1]})")
_NAMES = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8)


def _struct_of(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    fields = st.lists(st.tuples(_NAMES, children, st.booleans()), min_size=1, max_size=4, unique_by=lambda f: f[0])
    return fields.map(lambda fs: {"type": "struct", "fields": [_field(n, t, nullable) for n, t, nullable in fs]})


_DELTA_TYPES = st.recursive(
    _PRIMITIVE_NAMES | _DECIMALS,
    lambda children: st.one_of(
        _struct_of(children),
        st.builds(lambda e, n: {"type": "array", "elementType": e, "containsNull": n}, children, st.booleans()),
        st.builds(
            lambda k, v, n: {"type": "map", "keyType": k, "valueType": v, "valueContainsNull": n},
            _PRIMITIVE_NAMES,
            children,
            st.booleans(),
        ),
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(_struct_of(_DELTA_TYPES))
def test_any_delta_schema_round_trips_through_arrow(schema: dict[str, Any]) -> None:
    assert arrow_to_delta_schema(schema_to_arrow(schema)) == schema


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


# ===================================================================== partition values


def test_partition_schema_follows_partition_column_order() -> None:
    fields = [_field("a", "long"), _field("b", "date"), _field("c", "string")]
    schema = partition_schema(_metadata(fields, ("c", "a")))
    assert schema.names == ["c", "a"] and schema.types == [pa.string(), pa.int64()]
    with pytest.raises(InvalidLogError, match="'zz'"):
        partition_schema(_metadata(fields, ("zz",)))


def _parse(values: list[str | None], t: pa.DataType) -> list[Any]:
    return parse_partition_strings(pa.array(values, pa.string()), t).to_pylist()


def test_null_missing_and_empty_are_null_for_every_type() -> None:
    for t in [pa.string(), pa.int32(), pa.float64(), pa.bool_(), pa.date32(), TIMESTAMP_TYPE, pa.decimal128(5, 2), pa.binary()]:
        assert _parse(["", None], t) == [None, None]


def test_numbers_booleans_and_dates() -> None:
    assert _parse(["-128", "127"], pa.int8()) == [-128, 127]
    assert _parse(["9223372036854775807"], pa.int64()) == [9223372036854775807]
    parsed = _parse(["1.5", "1.0E10", "NaN", "Infinity", "-Infinity"], pa.float64())
    assert parsed[:2] == [1.5, 1e10] and math.isnan(parsed[2]) and parsed[3:] == [math.inf, -math.inf]
    assert _parse(["true", "false", "TRUE"], pa.bool_()) == [True, False, True]
    assert _parse(["1970-01-01", "2024-02-29", "0001-01-01"], pa.date32()) == [
        dt.date(1970, 1, 1),
        dt.date(2024, 2, 29),
        dt.date(1, 1, 1),
    ]
    assert _parse(["1.5", "-12.25", "0", "1E-2"], pa.decimal128(6, 2)) == [
        Decimal("1.50"),
        Decimal("-12.25"),
        Decimal("0.00"),
        Decimal("0.01"),
    ]


@pytest.mark.parametrize(("text", "t"), [("abc", pa.int32()), ("1", pa.bool_()), ("2021.0", pa.int64()), ("2020-13-01", pa.date32())])
def test_unparseable_partition_values_name_the_column(text: str, t: pa.DataType) -> None:
    with pytest.raises(InvalidLogError, match="'col'"):
        parse_partition_strings(pa.array([text]), t, column="col")


def test_timestamps_in_every_accepted_format() -> None:
    utc = dt.UTC
    values = [
        "1970-01-01 00:00:00",
        "1970-01-01 00:00:00.123456",
        "2021-06-01 12:30:45.5",
        "1970-01-01T00:00:00.123456Z",
        "2024-01-01T10:00:00.000000Z",
        "2024-01-01T10:00:00+02:00",
        "2024-01-01 10:00:00.123456789",
        "9999-12-31 23:59:59.999999",
        "2021-01-01",
        "2021-01-01 10:00:00-05",
    ]
    assert _parse(values, TIMESTAMP_TYPE) == [
        dt.datetime(1970, 1, 1, tzinfo=utc),
        dt.datetime(1970, 1, 1, 0, 0, 0, 123456, tzinfo=utc),
        dt.datetime(2021, 6, 1, 12, 30, 45, 500000, tzinfo=utc),
        dt.datetime(1970, 1, 1, 0, 0, 0, 123456, tzinfo=utc),
        dt.datetime(2024, 1, 1, 10, tzinfo=utc),
        dt.datetime(2024, 1, 1, 8, tzinfo=utc),
        dt.datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=utc),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
        dt.datetime(2021, 1, 1, tzinfo=utc),
        dt.datetime(2021, 1, 1, 15, tzinfo=utc),
    ]
    ntz = _parse(["2021-06-01 12:30:45", "2021-06-01 12:30:45.000001", "2021-06-01T12:30:45"], TIMESTAMP_NTZ_TYPE)
    assert ntz == [
        dt.datetime(2021, 6, 1, 12, 30, 45),
        dt.datetime(2021, 6, 1, 12, 30, 45, 1),
        dt.datetime(2021, 6, 1, 12, 30, 45),
    ]


def test_binary_and_special_characters() -> None:
    # The JSON "\u0001\u0002\u0003" of the spec decodes to control characters: their bytes.
    spec_example = json.loads('"\\u0001\\u0002\\u0003"')
    assert _parse([spec_example, "héllo", "\\u00FF\\u0000"], pa.binary()) == [b"\x01\x02\x03", "héllo".encode(), b"\xff\x00"]
    special = ["A/A", "B B", "a=b", "100%", "ü€😀", " ", "__HIVE_DEFAULT_PARTITION__x"]
    assert _parse(special, pa.string()) == special


def test_parse_partition_values_of_many_files_by_physical_name() -> None:
    cm = {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-p"}
    fields = [_field("v", "long"), _field("p", "integer", True, cm), _field("d", "date")]
    metadata = _metadata(fields, ("p", "d"), **{"delta.columnMapping.mode": "name"})
    pv = pa.array(
        [[("col-p", "1"), ("d", "2020-01-01")], [("col-p", None), ("d", "")], [], None, [("p", "9")]],
        type=pa.map_(pa.string(), pa.string()),
    )
    parsed = parse_partition_values(pa.chunked_array([pv.slice(0, 2), pv.slice(2)]), metadata)
    assert parsed.type == pa.struct([pa.field("p", pa.int32()), pa.field("d", pa.date32())])
    assert parsed.to_pylist() == [
        {"p": 1, "d": dt.date(2020, 1, 1)},
        {"p": None, "d": None},
        {"p": None, "d": None},
        {"p": None, "d": None},
        {"p": None, "d": None},  # "p" is the logical name, not the physical key
    ]


    # A protocol without column mapping support: the mode is ignored, keys are logical names.
    no_mapping = Protocol(1, 2)
    assert parse_partition_values(pv, metadata, no_mapping).to_pylist()[4] == {"p": 9, "d": None}
    assert parse_partition_values(pv, metadata, Protocol(2, 5)).to_pylist()[0] == {"p": 1, "d": dt.date(2020, 1, 1)}

def test_parse_partition_values_of_sliced_maps_with_repeated_keys() -> None:
    metadata = _metadata([_field("v", "long"), _field("p", "integer"), _field("q", "string")], ("p", "q"))
    pv = pa.array(
        [[("p", "0")], [("p", "1"), ("p", "2"), ("q", None)], None, [("q", "x"), ("p", "3")], [("zz", "4")]],
        type=pa.map_(pa.string(), pa.string()),
    )
    # The first entry of a repeated key wins (as pc.map_lookup "first" does).
    assert parse_partition_values(pv.slice(1), metadata).to_pylist() == [
        {"p": 1, "q": None},
        {"p": None, "q": None},
        {"p": 3, "q": "x"},
        {"p": None, "q": None},
    ]
    assert len(parse_partition_values(pv.slice(2, 0), metadata)) == 0
    # Only nulls (no string values at all in the maps).
    only_nulls = pa.array([[("p", None)], [("q", None)]], type=pa.map_(pa.string(), pa.string()))
    assert parse_partition_values(only_nulls, metadata).to_pylist() == [{"p": None, "q": None}] * 2


def test_parse_partition_values_is_vectorised_over_many_rows() -> None:
    metadata = _metadata([_field("v", "long"), _field("ts", "timestamp"), _field("k", "string")], ("k", "ts"))
    n = 200_000
    distinct = pa.array(
        [[("k", f"key{i % 7}"), ("ts", "2024-01-01T00:00:00.000000Z" if i % 2 else "2024-01-01 00:00:00")] for i in range(14)],
        type=pa.map_(pa.string(), pa.string()),
    )
    rows = distinct.take(pa.array(np.arange(n) % 14))
    parsed = parse_partition_values(rows, metadata)
    assert len(parsed) == n
    assert parsed.field("ts").unique().to_pylist() == [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)]
    assert sorted(parsed.field("k").unique().to_pylist()) == [f"key{i}" for i in range(7)]


def test_unpartitioned_tables_give_an_empty_struct() -> None:
    metadata = _metadata([_field("v", "long")])
    pv = pa.array([[], []], type=pa.map_(pa.string(), pa.string()))
    parsed = parse_partition_values(pv, metadata)
    assert len(parsed) == 2 and parsed.type.num_fields == 0


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("delta-2.2.0-partitioned-types", [{"c1": 4, "c2": "c"}, {"c1": 5, "c2": "b"}, {"c1": 6, "c2": "a"}]),
        ("delta-0.8.0-null-partition", [{"k": "A"}, {"k": None}]),
        ("delta-0.8.0-numeric-partition", [{"x": 9, "y": 9.9}, {"x": 10, "y": 10.0}]),
        ("delta-0.8.0-special-partition", [{"x": "A/A"}, {"x": "B B"}]),
        ("table_with_column_mapping", [{"Company Very Short": "BMS"}, {"Company Very Short": "BME"}]),
    ],
)
def test_partition_values_of_real_tables(shared_tables: Path, table: str, expected: list[dict[str, Any]]) -> None:
    path = shared_tables / table
    parsed = parse_partition_values(_log_partition_values(path), _log_metadata(path))
    assert sorted(map(repr, parsed.to_pylist())) == sorted(map(repr, expected))


def test_partition_type_primitives_table_reads_strings_as_written(shared_tables: Path) -> None:
    path = shared_tables / "partition-type-primitives"
    parsed = parse_partition_values(_log_partition_values(path), _log_metadata(path))
    assert set(parsed.field("year").to_pylist()) == {"2020", "2021.0"}
    assert set(parsed.field("is_active").to_pylist()) == {"true", "false"}


# -------------------------------------------------------------------- serialisation


@pytest.mark.parametrize(
    ("value", "t", "text"),
    [
        (None, pa.int64(), None),
        ("", pa.string(), None),
        ("a b/c", pa.string(), "a b/c"),
        (True, pa.bool_(), "true"),
        (False, pa.bool_(), "false"),
        (-5, pa.int8(), "-5"),
        (1.0, pa.float64(), "1.0"),
        (1e10, pa.float64(), "1.0E10"),
        (0.0001, pa.float64(), "1.0E-4"),
        (123456.789, pa.float32(), "123456.79"),
        (float("nan"), pa.float64(), "NaN"),
        (float("-inf"), pa.float64(), "-Infinity"),
        (Decimal("1.5"), pa.decimal128(10, 3), "1.500"),
        (Decimal("-0.01"), pa.decimal128(4, 2), "-0.01"),
        (Decimal("12345678901234567890"), pa.decimal128(38, 0), "12345678901234567890"),
        (dt.date(2024, 2, 29), pa.date32(), "2024-02-29"),
        (dt.date(1, 1, 1), pa.date32(), "0001-01-01"),
        (dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone(dt.timedelta(hours=2))), TIMESTAMP_TYPE, "2024-01-01T08:00:00.000000Z"),
        (dt.datetime(1970, 1, 1, 0, 0, 0, 123456), TIMESTAMP_TYPE, "1970-01-01T00:00:00.123456Z"),
        (dt.datetime(2021, 6, 1, 12, 30, 45, 1), TIMESTAMP_NTZ_TYPE, "2021-06-01 12:30:45.000001"),
        (b"\x01\x02\x03", pa.binary(), "\x01\x02\x03"),
        (b"\xff\x00", pa.binary(), "\\u00FF\\u0000"),
        (pa.scalar(7, pa.int16()), pa.int16(), "7"),
    ],
)
def test_serialize_partition_value(value: Any, t: pa.DataType, text: str | None) -> None:
    assert serialize_partition_value(value, t) == text


def test_java_float_strings() -> None:
    assert [java_float_string(x) for x in [0.001, 9.99e-4, 1e7, 9999999.0, -0.0, 100.0]] == [
        "0.001",
        "9.99E-4",
        "1.0E7",
        "9999999.0",
        "-0.0",
        "100.0",
    ]
    assert java_float_string(0.1, single=True) == "0.1"
    assert java_float_string(3.5e38, single=True) == "Infinity"


def _round_trip(values: list[Any], t: pa.DataType) -> None:
    texts = [serialize_partition_value(v, t) for v in values]
    parsed = parse_partition_strings(pa.array(texts, pa.string()), t).to_pylist()
    expected = pa.array(values, t).to_pylist()
    assert parsed == expected


_finite = {"allow_nan": False, "allow_infinity": False}


@settings(max_examples=100, deadline=None)
@given(
    ints=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5),
    doubles=st.lists(st.floats(**_finite), max_size=5),
    floats=st.lists(st.floats(width=32, **_finite), max_size=5),
    decimals=st.lists(st.decimals(min_value=-(10**7), max_value=10**7, places=3, **_finite), max_size=5),
    dates=st.lists(st.dates(), max_size=5),
    stamps=st.lists(st.datetimes(timezones=st.just(dt.UTC)), max_size=5),
    naive=st.lists(st.datetimes(), max_size=5),
    texts=st.lists(st.text(min_size=1), max_size=5),
    blobs=st.lists(st.binary(min_size=1), max_size=5),
    bools=st.lists(st.booleans(), max_size=3),
)
def test_serialized_values_parse_back(
    ints: list[int],
    doubles: list[float],
    floats: list[float],
    decimals: list[Decimal],
    dates: list[dt.date],
    stamps: list[dt.datetime],
    naive: list[dt.datetime],
    texts: list[str],
    blobs: list[bytes],
    bools: list[bool],
) -> None:
    _round_trip(ints, pa.int64())
    _round_trip(doubles, pa.float64())
    _round_trip(floats, pa.float32())
    _round_trip(decimals, pa.decimal128(11, 3))
    _round_trip(dates, pa.date32())
    _round_trip(stamps, TIMESTAMP_TYPE)
    _round_trip(naive, TIMESTAMP_NTZ_TYPE)
    _round_trip(texts, pa.string())
    _round_trip(blobs, pa.binary())
    _round_trip(bools, pa.bool_())


def test_partition_values_written_by_delta_rs_parse_to_the_written_values(tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    columns = {
        "i": pa.array([1, -2, None], pa.int32()),
        "d": pa.array([dt.date(2020, 1, 1), dt.date(1, 1, 1), None]),
        "ts": pa.array([dt.datetime(2024, 1, 1, 10, 0, 0, 123456), dt.datetime(1970, 1, 1), None], TIMESTAMP_TYPE),
        "ntz": pa.array([dt.datetime(2024, 1, 1, 10, 0, 0, 1), dt.datetime(1970, 1, 1), None], TIMESTAMP_NTZ_TYPE),
        "s": pa.array(["a/b c", "x=y%", None]),
        "b": pa.array([True, False, None]),
        "f": pa.array([1.5, 1e20, None], pa.float64()),
        # delta-rs writes negative decimals wrongly ("0.-1"), so positive ones only.
        "dec": pa.array([Decimal("1.50"), Decimal("0.01"), None], pa.decimal128(5, 2)),
    }
    for name, values in columns.items():
        path = tmp_path / name
        deltalake.write_deltalake(str(path), pa.table({"v": pa.array([1, 2, 3], pa.int64()), name: values}), partition_by=[name])
        parsed = parse_partition_values(_log_partition_values(path), _log_metadata(path))
        assert sorted(parsed.field(name).to_pylist(), key=repr) == sorted(values.to_pylist(), key=repr), name
        # What we would write for the same values parses back the same way.
        ours = [serialize_partition_value(v, values.type) for v in values.to_pylist()]
        assert parse_partition_strings(pa.array(ours, pa.string()), values.type).to_pylist() == values.to_pylist()


_MAPS = st.lists(
    st.none() | st.lists(st.tuples(st.sampled_from(["p", "q", "r"]), st.none() | st.text(max_size=2)), max_size=4),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(maps=_MAPS, start=st.integers(0, 12), length=st.integers(0, 12))
def test_partition_lookup_agrees_with_arrow_map_lookup(maps: list[Any], start: int, length: int) -> None:
    metadata = _metadata([_field("p", "string"), _field("q", "string")], ("p", "q"))
    pv = pa.array(maps, type=pa.map_(pa.string(), pa.string())).slice(start, length)
    parsed = parse_partition_values(pv, metadata)
    for key in ("p", "q"):
        expected = [None if v == "" else v for v in pc.map_lookup(pv, pa.scalar(key), "first").to_pylist()] if len(pv) else []
        assert parsed.field(key).to_pylist() == expected
