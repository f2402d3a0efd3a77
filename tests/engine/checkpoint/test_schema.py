"""The checkpoint's parquet schema: the ``add`` struct, column order, and ``checkpointSchema``."""

from __future__ import annotations

import pyarrow as pa

from airflow_delta.engine.checkpoint.schema import (
    CHECKPOINT_SCHEMA_MAX_CHARS,
    add_type,
    checkpoint_schema,
    delta_schema_of,
)

PARSED_PARTITIONS = pa.struct([("p", pa.string())])
PARSED_STATS = pa.struct([("numRecords", pa.int64())])


def names(struct: pa.StructType) -> list[str]:
    return [struct.field(i).name for i in range(struct.num_fields)]


def test_add_type_follows_the_stats_settings() -> None:
    plain = add_type()
    assert names(plain)[-1] == "stats" and "stats_parsed" not in names(plain)
    parsed = add_type(stats_as_json=False, partition_values_parsed=PARSED_PARTITIONS, stats_parsed=PARSED_STATS)
    assert "stats" not in names(parsed)
    assert names(parsed)[-2:] == ["partitionValues_parsed", "stats_parsed"]
    assert parsed.field("stats_parsed").type == PARSED_STATS
    assert parsed.field("deletionVector").type.field("maxRowIndex").type == pa.int64()


def test_checkpoint_columns_in_sparks_order() -> None:
    add = add_type()
    assert checkpoint_schema(add).names == ["txn", "add", "remove", "metaData", "protocol", "domainMetadata"]
    assert checkpoint_schema(add, v2=True).names[-2:] == ["checkpointMetadata", "sidecar"]
    assert checkpoint_schema(add, non_file_actions=False).names == ["add", "remove"]
    assert "add" not in checkpoint_schema(add, v2=True, file_actions=False).names


def test_delta_schema_of_translates_the_parquet_schema() -> None:
    schema = pa.schema(
        [
            ("s", pa.struct([("a", pa.int32()), ("ts", pa.timestamp("us", "UTC"))])),
            ("m", pa.map_(pa.string(), pa.string())),
            ("l", pa.list_(pa.int64())),
            ("d", pa.decimal128(10, 2)),
            ("ntz", pa.timestamp("us")),
        ]
    )
    document = delta_schema_of(schema)
    assert document is not None and document["type"] == "struct"
    fields = {f["name"]: f["type"] for f in document["fields"]}
    assert [f["name"] for f in fields["s"]["fields"]] == ["a", "ts"]
    assert [f["type"] for f in fields["s"]["fields"]] == ["integer", "timestamp"]
    assert fields["m"] == {"type": "map", "keyType": "string", "valueType": "string", "valueContainsNull": True}
    assert fields["l"] == {"type": "array", "elementType": "long", "containsNull": True}
    assert (fields["d"], fields["ntz"]) == ("decimal(10,2)", "timestamp_ntz")


def test_delta_schema_of_is_left_out_when_too_large_or_untranslatable() -> None:
    wide = pa.schema([(f"column_{i:05d}", pa.int64()) for i in range(CHECKPOINT_SCHEMA_MAX_CHARS // 50)])
    assert delta_schema_of(wide) is None
    assert delta_schema_of(pa.schema([("t", pa.time64("us"))])) is None
