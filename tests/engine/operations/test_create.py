"""Tests of creating tables: properties, schema checks, column mapping assignment, protocol choice, version 0."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine.errors import (
    InvalidSchemaError,
    InvalidTablePropertyError,
    TableAlreadyExistsError,
    UnknownTablePropertyError,
    UnsupportedFeatureError,
)
from airflow_delta.engine.model.actions import Protocol
from airflow_delta.engine.operations.create import assign_column_mapping, normalize_properties
from airflow_delta.engine.table import DeltaTable
from tests.engine.commit_helpers import commit_actions, single_action

SIMPLE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()), pa.field("day", pa.date32())])


# ----------------------------------------------------------------------------- create


def test_create_writes_commit_info_protocol_and_metadata(table_path: str) -> None:
    DeltaTable.create(table_path, SIMPLE, partition_by=["day"], name="t", description="a table")
    actions = commit_actions(table_path)
    assert list(actions[0]) == ["commitInfo"]  # commitInfo first, as Delta writes it
    info = actions[0]["commitInfo"]
    assert info["operation"] == "CREATE TABLE"
    assert info["operationParameters"]["partitionBy"] == '["day"]'
    assert info["operationParameters"]["description"] == "a table"
    assert json.loads(info["operationParameters"]["properties"]) == {}
    assert info["isBlindAppend"] is True
    assert single_action(actions, "protocol") == {"minReaderVersion": 1, "minWriterVersion": 2}
    meta = single_action(actions, "metaData")
    assert meta["partitionColumns"] == ["day"]
    assert meta["name"] == "t" and meta["description"] == "a table"
    assert meta["format"] == {"provider": "parquet", "options": {}}
    schema = json.loads(meta["schemaString"])
    assert [(f["name"], f["type"], f["nullable"]) for f in schema["fields"]] == [
        ("id", "long", False),
        ("name", "string", True),
        ("day", "date", True),
    ]
    assert isinstance(meta["createdTime"], int) and meta["configuration"] == {}


def test_create_refuses_existing_table(table_path: str) -> None:
    DeltaTable.create(table_path, SIMPLE)
    with pytest.raises(TableAlreadyExistsError):
        DeltaTable.create(table_path, SIMPLE)


def test_concurrent_creators_exactly_one_wins(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    results: list[str] = []
    barrier = threading.Barrier(8)

    def create() -> None:
        barrier.wait()
        try:
            DeltaTable.create(path, SIMPLE)
            results.append("won")
        except TableAlreadyExistsError:
            results.append("lost")

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["lost"] * 7 + ["won"]
    assert len(commit_actions(path)) == 3


# SIMPLE's id is NOT NULL: a table-features protocol lists "invariants" for it, as Delta does.
@pytest.mark.parametrize(
    ("properties", "schema", "expected"),
    [
        ({}, SIMPLE, Protocol(1, 2)),
        ({"delta.appendOnly": "true"}, SIMPLE, Protocol(1, 2)),
        ({"delta.constraints.positive": "id > 0"}, SIMPLE, Protocol(1, 3)),
        ({"delta.columnMapping.mode": "name"}, SIMPLE, Protocol(2, 5)),
        (
            {"delta.enableDeletionVectors": "true"},
            SIMPLE,
            Protocol(3, 7, frozenset({"deletionVectors"}), frozenset({"deletionVectors", "invariants"})),
        ),
        (
            {},
            pa.schema([pa.field("t", pa.timestamp("us"))]),
            Protocol(3, 7, frozenset({"timestampNtz"}), frozenset({"timestampNtz"})),
        ),
        ({"delta.enableInCommitTimestamps": "true"}, SIMPLE, Protocol(1, 7, None, frozenset({"inCommitTimestamp", "invariants"}))),
        (
            {"delta.checkpointPolicy": "v2"},
            SIMPLE,
            Protocol(3, 7, frozenset({"v2Checkpoint"}), frozenset({"v2Checkpoint", "invariants"})),
        ),
        (
            {"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "id", "delta.appendOnly": "true"},
            SIMPLE,
            Protocol(
                3, 7, frozenset({"deletionVectors", "columnMapping"}),
                frozenset({"deletionVectors", "columnMapping", "appendOnly", "invariants"}),
            ),
        ),
        (
            {"delta.enableInCommitTimestamps": "true", "delta.constraints.c": "id > 0"},
            SIMPLE,
            Protocol(1, 7, None, frozenset({"inCommitTimestamp", "checkConstraints", "invariants"})),
        ),
        ({"delta.minWriterVersion": "4"}, SIMPLE, Protocol(1, 4)),
        ({"delta.feature.appendOnly": "supported"}, SIMPLE, Protocol(1, 7, None, frozenset({"appendOnly", "invariants"}))),
        (
            {"delta.feature.domainMetadata": "supported", "delta.minWriterVersion": "3"},
            SIMPLE,
            Protocol(1, 7, None, frozenset({"domainMetadata", "appendOnly", "invariants", "checkConstraints"})),
        ),
        (
            {"delta.feature.vacuumProtocolCheck": "supported"},
            SIMPLE,
            Protocol(3, 7, frozenset({"vacuumProtocolCheck"}), frozenset({"vacuumProtocolCheck", "invariants"})),
        ),
    ],
)
def test_create_chooses_minimal_protocol(
    table_path: str, properties: dict[str, str], schema: pa.Schema, expected: Protocol
) -> None:
    if any(k.startswith("delta.constraints.") for k in properties):
        pytest.importorskip("airflow_delta.engine.expressions")
    DeltaTable.create(table_path, schema, properties=properties)
    assert Protocol.from_json(single_action(commit_actions(table_path), "protocol")) == expected


def test_feature_and_version_properties_are_not_stored(table_path: str) -> None:
    DeltaTable.create(
        table_path, SIMPLE, properties={"delta.feature.deletionVectors": "supported", "delta.minReaderVersion": "1"}
    )
    actions = commit_actions(table_path)
    assert single_action(actions, "metaData")["configuration"] == {}
    assert Protocol.from_json(single_action(actions, "protocol")).has_reader_feature("deletionVectors")


def test_in_commit_timestamp_in_commit_info(table_path: str) -> None:
    DeltaTable.create(table_path, SIMPLE, properties={"delta.enableInCommitTimestamps": "true"})
    info = commit_actions(table_path)[0]["commitInfo"]
    assert info["inCommitTimestamp"] == info["timestamp"]
    # At version 0 there is no earlier history, so no enablement properties are recorded.
    assert "delta.inCommitTimestampEnablementVersion" not in single_action(commit_actions(table_path), "metaData")["configuration"]


def test_property_keys_are_normalised_and_user_keys_kept(table_path: str) -> None:
    DeltaTable.create(table_path, SIMPLE, properties={"DELTA.APPENDONLY": "true", "owner": "team-a"})
    assert single_action(commit_actions(table_path), "metaData")["configuration"] == {"delta.appendOnly": "true", "owner": "team-a"}


def test_unknown_delta_property_lists_valid_ones(table_path: str) -> None:
    with pytest.raises(UnknownTablePropertyError, match=r"delta\.appendOnly") as info:
        DeltaTable.create(table_path, SIMPLE, properties={"delta.appendOnyl": "true"})
    assert "delta.logRetentionDuration" in info.value.valid
    assert not os.path.exists(os.path.join(table_path, "_delta_log", f"{0:020d}.json"))


@pytest.mark.parametrize(
    "properties",
    [
        {"delta.appendOnly": "yes"},
        {"delta.logRetentionDuration": "interval 1 month"},
        {"delta.columnMapping.mode": "physical"},
        {"delta.columnMapping.maxColumnId": "5"},
        {"delta.feature.deletionVectors": "on"},
        {"delta.minReaderVersion": "4"},
        {"delta.parquet.compression.codec": "zip"},
        {"delta.targetFileSize": "-1"},
    ],
)
def test_invalid_property_values(table_path: str, properties: dict[str, str]) -> None:
    with pytest.raises(InvalidTablePropertyError):
        DeltaTable.create(table_path, SIMPLE, properties=properties)


@pytest.mark.parametrize(
    "properties",
    [{"delta.enableVariantShredding": "true"}, {"delta.feature.catalogManaged": "supported"}],
)
def test_unsupported_features_refused(table_path: str, properties: dict[str, str]) -> None:
    with pytest.raises(UnsupportedFeatureError):
        DeltaTable.create(table_path, SIMPLE, properties=properties)


@pytest.mark.parametrize(
    ("schema", "partition_by", "match"),
    [
        (SIMPLE, ["nope"], "not a top-level column"),
        (pa.schema([("a", pa.int64()), ("s", pa.struct([("x", pa.int32())]))]), ["s"], "primitive"),
        (pa.schema([("a", pa.int64())]), ["a"], "every column"),
        (pa.schema([("a", pa.int64()), ("A", pa.int64())]), [], "case"),
        (pa.schema([("a b", pa.int64())]), [], "columnMapping"),
        (pa.schema([]), [], "at least one column"),
    ],
)
def test_invalid_schemas(table_path: str, schema: pa.Schema, partition_by: list[str], match: str) -> None:
    with pytest.raises(InvalidSchemaError, match=match):
        DeltaTable.create(table_path, schema, partition_by=partition_by)


def test_column_mapping_assigns_ids_and_physical_names(table_path: str) -> None:
    schema = pa.schema(
        [
            pa.field("a b", pa.int64()),
            pa.field("s", pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.list_(pa.struct([("z", pa.int8())])))])),
            pa.field("p", pa.string()),
        ]
    )
    DeltaTable.create(table_path, schema, partition_by=["p"], properties={"delta.columnMapping.mode": "name"})
    meta = single_action(commit_actions(table_path), "metaData")
    assert meta["configuration"]["delta.columnMapping.maxColumnId"] == "6"
    fields = json.loads(meta["schemaString"])["fields"]
    ids = [fields[0]["metadata"]["delta.columnMapping.id"], fields[1]["metadata"]["delta.columnMapping.id"]]
    nested = fields[1]["type"]["fields"]
    ids += [nested[0]["metadata"]["delta.columnMapping.id"], nested[1]["metadata"]["delta.columnMapping.id"]]
    ids.append(nested[1]["type"]["elementType"]["fields"][0]["metadata"]["delta.columnMapping.id"])
    ids.append(fields[2]["metadata"]["delta.columnMapping.id"])
    assert ids == [1, 2, 3, 4, 5, 6]  # pre-order: a struct before its fields
    names = [f["metadata"]["delta.columnMapping.physicalName"] for f in fields]
    assert all(n.startswith("col-") and len(n) == 40 for n in names) and len(set(names)) == 3
    assert meta["partitionColumns"] == ["p"]  # logical name; partition values use the physical one


def test_assign_column_mapping_replaces_stale_mapping() -> None:
    schema = {
        "type": "struct",
        "fields": [
            {"name": "a", "type": "long", "nullable": True,
             "metadata": {"delta.columnMapping.id": 99, "delta.columnMapping.physicalName": "old", "comment": "c"}}
        ],
    }
    mapped, max_id = assign_column_mapping(schema)
    meta = mapped["fields"][0]["metadata"]
    assert max_id == 1 and meta["delta.columnMapping.id"] == 1 and meta["comment"] == "c"
    assert meta["delta.columnMapping.physicalName"] != "old"
    assert schema["fields"][0]["metadata"]["delta.columnMapping.id"] == 99  # input untouched


def test_normalize_properties_bool_values() -> None:
    props = normalize_properties({"delta.appendOnly": True})  # type: ignore[dict-item]
    assert props.configuration == {"delta.appendOnly": "true"}
