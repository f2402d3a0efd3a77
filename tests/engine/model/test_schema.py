"""Delta schema JSON <-> Arrow: types, nullability, field metadata, physical schemas."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import (
    InvalidLogError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from airflow_delta.engine.model.schema import (
    arrow_to_delta_schema,
    delta_type_to_arrow,
    schema_to_arrow,
)
from tests.engine.model.schema_builders import SPEC_EXAMPLE, _field

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


# ------------------------------------------------------------------ schemaString shapes (issue 10, item 9)


def _nested_struct(depth: int) -> dict[str, Any]:
    t: dict[str, Any] = {"type": "struct", "fields": [{"name": "leaf", "type": "long", "nullable": True, "metadata": {}}]}
    for _ in range(depth):
        t = {"type": "struct", "fields": [{"name": "s", "type": t, "nullable": True, "metadata": {}}]}
    return t


@pytest.mark.parametrize(("schema", "says"), [
    ('{"type": "struct", "fields": 7}', "fields"),
    ('{"type": "struct", "fields": [7]}', "fields[0]"),
    ('{"type": "struct", "fields": [{"type": "long"}]}', "name"),
    ('{"type": "struct", "fields": [{"name": "a"}]}', "type"),
    ('{"type": "struct", "fields": [{"name": "a", "type": "long", "metadata": []}]}', "metadata"),
    ('{"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": "yes"}]}', "nullable"),
    ('{"type": "struct", "fields": [{"name": "a", "type": {"type": "struct", "fields": "x"}}]}', "fields[0].type"),
    ('{"type": "struct", "fields": [{"name": "a", "type": {"type": "array"}}]}', "elementType"),
    ('{"type": "struct", "fields": [{"name": "a", "type": {"type": "map", "keyType": "string"}}]}', "valueType"),
    ('{"type": "struct", "fields": [{"name": "a", "type": {"type": 5}}]}', "'type' must be a string"),
    ('{"type": "struct", "fields": [{"name": "a", "type": ' + "[" * 100_000 + "]" * 100_000 + "}]}", "nested too deeply"),
    (json.dumps(_nested_struct(300)), "deeper than"),
])
def test_malformed_schema_strings_are_invalid_log_errors(schema: str, says: str) -> None:
    with pytest.raises(InvalidLogError) as err:
        schema_to_arrow(schema)
    assert says in str(err.value)


def test_deep_but_reasonable_nesting_is_read() -> None:
    assert schema_to_arrow(json.dumps(_nested_struct(150))).names == ["s"]
