from __future__ import annotations

import json

import pytest

from airflow_delta.engine.actions import Metadata, Protocol
from airflow_delta.engine.errors import UnsupportedFeatureError
from airflow_delta.engine.protocol import active_writer_features, check_readable, check_writable, reader_features


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
    # listed but unused: writable
    check_writable(p, _metadata())
    assert active_writer_features(p, _metadata()) == frozenset()
    # in use: refused, naming the feature
    with pytest.raises(UnsupportedFeatureError, match="identityColumns"):
        check_writable(p, _metadata(identity))
    assert "changeDataFeed" in active_writer_features(p, _metadata(configuration={"delta.enableChangeDataFeed": "true"}))


def test_legacy_writer_version_features() -> None:
    generated = [{"name": "g", "type": "long", "nullable": True, "metadata": {"delta.generationExpression": "id + 1"}}]
    check_writable(Protocol(1, 4), _metadata())
    with pytest.raises(UnsupportedFeatureError, match="generatedColumns"):
        check_writable(Protocol(1, 4), _metadata(generated))


def test_unknown_writer_feature() -> None:
    with pytest.raises(UnsupportedFeatureError, match="rowTracking"):
        check_writable(Protocol(3, 7, frozenset(), frozenset({"rowTracking"})), _metadata())
