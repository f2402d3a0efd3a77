from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_delta.engine.errors import UnsupportedFeatureError
from airflow_delta.engine.model.actions import Metadata, Protocol
from airflow_delta.engine.model.table_features import (
    active_writer_features,
    check_readable,
    check_writable,
    minimal_protocol,
    reader_features,
    required_features,
    upgrade_protocol,
    writer_features,
)


def _metadata(fields: list[dict] | None = None, configuration: dict[str, str] | None = None) -> Metadata:
    schema = {"type": "struct", "fields": fields or [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    return Metadata(id="t", schema_string=json.dumps(schema), configuration=configuration or {})


def test_legacy_reader_versions() -> None:
    check_readable(Protocol(1, 2))
    check_readable(Protocol(2, 5))
    assert reader_features(Protocol(2, 5)) == {"columnMapping"}


def test_unknown_reader_feature_is_named() -> None:
    with pytest.raises(UnsupportedFeatureError, match="variantShredding") as info:
        check_readable(Protocol(3, 7, frozenset({"deletionVectors", "variantType", "variantShredding"}), frozenset()))
    assert info.value.features == ["variantShredding"] and info.value.access == "read"


def test_reader_version_too_new() -> None:
    with pytest.raises(UnsupportedFeatureError, match="minReaderVersion 4"):
        check_readable(Protocol(4, 7))


def test_supported_table_features_read_and_write() -> None:
    p = Protocol(3, 7, frozenset({"deletionVectors", "v2Checkpoint"}), frozenset({"deletionVectors", "v2Checkpoint", "appendOnly"}))
    check_readable(p)
    check_writable(p, _metadata())


def test_metadata_activated_writer_features() -> None:
    identity = [{"name": "id", "type": "long", "nullable": True, "metadata": {"delta.identity.start": 1}}]
    p = Protocol(3, 7, frozenset(), frozenset({"identityColumns", "changeDataFeed"}))
    # listed but unused: not active
    check_writable(p, _metadata())
    assert active_writer_features(p, _metadata()) == frozenset()
    # in use: active, and written (values supplied by the writer, model/column_defaults.py)
    assert active_writer_features(p, _metadata(identity)) == frozenset({"identityColumns"})
    check_writable(p, _metadata(identity))
    assert "changeDataFeed" in active_writer_features(p, _metadata(configuration={"delta.enableChangeDataFeed": "true"}))


def test_legacy_writer_version_features() -> None:
    generated = [{"name": "g", "type": "long", "nullable": True, "metadata": {"delta.generationExpression": "id + 1"}}]
    check_writable(Protocol(1, 4), _metadata())
    assert "generatedColumns" in active_writer_features(Protocol(1, 4), _metadata(generated))
    check_writable(Protocol(1, 4), _metadata(generated))


@pytest.mark.parametrize(
    ("feature", "why"),
    [("icebergCompatV1", "Iceberg metadata"), ("icebergCompatV2", "Iceberg metadata"), ("catalogManaged", "catalog")],
)
def test_refused_writer_features_say_why(feature: str, why: str) -> None:
    readers = frozenset({feature}) if feature == "catalogManaged" else frozenset()
    with pytest.raises(UnsupportedFeatureError, match=why) as info:
        check_writable(Protocol(3, 7, readers, frozenset({feature})), _metadata())
    assert info.value.features == [feature] and info.value.retryable is False


def test_new_tables_list_the_features_their_columns_use() -> None:
    fields = [
        {"name": "id", "type": "long", "nullable": True, "metadata": {"delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.allowExplicitInsert": False}},
        {"name": "d", "type": "date", "nullable": True, "metadata": {"delta.generationExpression": "CAST(ts AS DATE)"}},
        {"name": "n", "type": "integer", "nullable": True, "metadata": {"CURRENT_DEFAULT": "1"}},
    ]
    assert required_features({"type": "struct", "fields": fields}, {}) >= {
        "identityColumns", "generatedColumns", "allowColumnDefaults"
    }


def test_unknown_writer_feature() -> None:
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        check_writable(Protocol(3, 7, frozenset(), frozenset({"someFutureFeature"})), _metadata())


@pytest.mark.parametrize("feature", ["rowTracking", "clustering", "liquid", "checkpointProtection"])
def test_row_tracking_clustering_and_checkpoint_protection_are_writable(feature: str) -> None:
    check_writable(Protocol(3, 7, frozenset(), frozenset({feature, "domainMetadata"})), _metadata())


@pytest.mark.parametrize(
    ("before", "features", "after"),
    [
        (Protocol(1, 2), {"appendOnly"}, Protocol(1, 2)),
        (Protocol(1, 4), {"changeDataFeed"}, Protocol(1, 4)),
        (Protocol(1, 2), {"inCommitTimestamp"}, Protocol(1, 7, None, frozenset({"appendOnly", "invariants", "inCommitTimestamp"}))),
        (
            Protocol(2, 5),
            {"deletionVectors"},
            Protocol(
                3, 7, frozenset({"columnMapping", "deletionVectors"}),
                frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping", "deletionVectors"}),
            ),
        ),
        (
            Protocol(3, 7, frozenset({"deletionVectors"}), frozenset({"deletionVectors"})),
            {"domainMetadata"},
            Protocol(3, 7, frozenset({"deletionVectors"}), frozenset({"deletionVectors", "domainMetadata"})),
        ),
    ],
)
def test_upgrade_protocol_keeps_existing_features(before: Protocol, features: set[str], after: Protocol) -> None:
    assert upgrade_protocol(before, features) == after


legacy_protocols = st.sampled_from(
    [Protocol(1, w) for w in range(1, 7)] + [Protocol(2, w) for w in (5, 6)]
    + [Protocol(1, 7, None, frozenset({"appendOnly"})), Protocol(3, 7, frozenset({"columnMapping"}), frozenset({"columnMapping"}))]
)
feature_sets = st.sets(st.sampled_from(["deletionVectors", "inCommitTimestamp", "domainMetadata", "appendOnly", "v2Checkpoint", "changeDataFeed"]))


@given(before=legacy_protocols, features=feature_sets)
def test_upgrade_protocol_supports_the_features_and_drops_nothing(before: Protocol, features: set[str]) -> None:
    after = upgrade_protocol(before, features)
    assert features <= writer_features(after)
    assert writer_features(before) <= writer_features(after)
    assert reader_features(before) <= reader_features(after)
    assert reader_features(after) <= writer_features(after) | {"columnMapping"}
    assert after.min_reader_version >= before.min_reader_version and after.min_writer_version >= before.min_writer_version
    if {"deletionVectors", "v2Checkpoint"} & features:
        assert after.min_reader_version == 3 and {"deletionVectors", "v2Checkpoint"} & features <= after.reader_features
    if after != before:
        assert after.min_writer_version == 7 and after.writer_features is not None
        assert (after.min_reader_version == 3) == (after.reader_features is not None)


def test_minimal_protocol_refuses_unknown_feature() -> None:
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        minimal_protocol({"someFutureFeature"})


def test_required_features_from_schema_and_properties() -> None:
    schema = {
        "type": "struct",
        "fields": [
            {"name": "t", "type": "timestamp_ntz", "nullable": True, "metadata": {}},
            {"name": "s", "type": {"type": "struct", "fields": [
                {"name": "x", "type": "long", "nullable": True, "metadata": {"delta.invariants": "{}"}}
            ]}, "nullable": True, "metadata": {}},
        ],
    }
    config = {
        "delta.enableDeletionVectors": "true",
        "delta.appendOnly": "false",
        "delta.checkpointPolicy": "v2",
        "delta.constraints.positive": "x > 0",
    }
    assert required_features(schema, config) == {
        "timestampNtz", "invariants", "deletionVectors", "v2Checkpoint", "checkConstraints"
    }
    assert "domainMetadata" in required_features({"type": "struct", "fields": []}, {}, writes_domains=True)


def _field(name: str, data_type: object, nullable: bool) -> dict:
    return {"name": name, "type": data_type, "nullable": nullable, "metadata": {}}


def test_not_null_columns_require_invariants_as_delta_counts_them() -> None:
    # Delta on Spark refuses a table-features table with a NOT NULL column whose protocol
    # lacks "invariants" (found by tests/delta: DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH).
    top = {"type": "struct", "fields": [_field("id", "long", False)]}
    nested = {"type": "struct", "fields": [_field("s", {"type": "struct", "fields": [_field("x", "long", False)]}, True)]}
    assert "invariants" in required_features(top, {})
    assert "invariants" in required_features(nested, {})
    # An array's elements and a map's values are not constraints (Delta's checkComplexTypes=false).
    array = {"type": "array", "elementType": {"type": "struct", "fields": [_field("x", "long", False)]}, "containsNull": True}
    assert "invariants" not in required_features({"type": "struct", "fields": [_field("a", array, True)]}, {})
    assert "invariants" not in required_features({"type": "struct", "fields": [_field("id", "long", True)]}, {})
