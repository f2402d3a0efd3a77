"""Protocol gate: which reader/writer versions and table features this engine implements.

A table is read only if every reader feature it requires is implemented here, and
written only if every writer feature that is active on it is. Anything else raises
:class:`UnsupportedFeatureError` naming the features, rather than reading or writing
the table wrongly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from airflow_delta.engine.actions import Metadata, Protocol
from airflow_delta.engine.errors import UnsupportedFeatureError
from airflow_delta.engine.table_properties import TableProperties

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

# Reader features whose read-side semantics this engine implements.
SUPPORTED_READER_FEATURES: frozenset[str] = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        # Unshredded variants only: read as the raw struct<metadata, value> of binaries
        # (the protocol's "Alternate" exposure). variantShredding stays unsupported: its
        # files need reconstruction we do not implement.
        "variantType",
        "variantType-preview",
    }
)

# Writer features whose writer requirements this engine meets.
SUPPORTED_WRITER_FEATURES: frozenset[str] = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "domainMetadata",
        "inCommitTimestamp",
        "typeWidening",
        "typeWidening-preview",
    }
)

# Writer features that only constrain writers when the metadata switches them on; a
# table that lists them without using them can still be written.
_METADATA_ACTIVATED_WRITER_FEATURES = frozenset(
    {"changeDataFeed", "generatedColumns", "identityColumns", "allowColumnDefaults"}
)

# Features implied by legacy (pre-table-features) protocol versions.
_LEGACY_WRITER_FEATURES: dict[int, frozenset[str]] = {
    2: frozenset({"appendOnly", "invariants"}),
    3: frozenset({"appendOnly", "invariants", "checkConstraints"}),
    4: frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}),
    5: frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping"}),
    6: frozenset(
        {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping", "identityColumns"}
    ),
}


def reader_features(protocol: Protocol) -> frozenset[str]:
    """The reader features a protocol requires, legacy versions included."""
    if protocol.min_reader_version >= 3:
        return protocol.reader_features or frozenset()
    if protocol.min_reader_version == 2:
        return frozenset({"columnMapping"})
    return frozenset()


def writer_features(protocol: Protocol) -> frozenset[str]:
    """The writer features a protocol lists as supported, legacy versions included."""
    if protocol.min_writer_version >= 7:
        return protocol.writer_features or frozenset()
    return _LEGACY_WRITER_FEATURES.get(protocol.min_writer_version, frozenset())


def check_readable(protocol: Protocol) -> None:
    if protocol.min_reader_version > MAX_READER_VERSION:
        raise UnsupportedFeatureError(
            [f"minReaderVersion {protocol.min_reader_version}"], access="read",
            detail=f"the highest reader version implemented is {MAX_READER_VERSION}",
        )
    missing = reader_features(protocol) - SUPPORTED_READER_FEATURES
    if missing:
        raise UnsupportedFeatureError(sorted(missing), access="read")


def _fields(schema_json: dict) -> Iterable[dict]:
    stack = list(schema_json.get("fields", []))
    while stack:
        field = stack.pop()
        yield field
        stack.extend(_nested_fields(field.get("type")))


def _nested_fields(data_type: object) -> list[dict]:
    if not isinstance(data_type, dict):
        return []
    kind = data_type.get("type")
    if kind == "struct":
        return list(data_type.get("fields", []))
    if kind == "array":
        return _nested_fields(data_type.get("elementType"))
    if kind == "map":
        return _nested_fields(data_type.get("keyType")) + _nested_fields(data_type.get("valueType"))
    return []


def active_writer_features(protocol: Protocol, metadata: Metadata) -> frozenset[str]:
    """Writer features that actually constrain a write to this table."""
    listed = writer_features(protocol)
    props = TableProperties.from_configuration(metadata.configuration)
    field_meta_keys: set[str] = set()
    for field in _fields(json.loads(metadata.schema_string)):
        field_meta_keys.update((field.get("metadata") or {}).keys())
    active = set(listed - _METADATA_ACTIVATED_WRITER_FEATURES)
    if "changeDataFeed" in listed and props.enable_change_data_feed:
        active.add("changeDataFeed")
    if "generatedColumns" in listed and "delta.generationExpression" in field_meta_keys:
        active.add("generatedColumns")
    if "identityColumns" in listed and "delta.identity.start" in field_meta_keys:
        active.add("identityColumns")
    if "allowColumnDefaults" in listed and "CURRENT_DEFAULT" in field_meta_keys:
        active.add("allowColumnDefaults")
    return frozenset(active)


def check_writable(protocol: Protocol, metadata: Metadata) -> None:
    check_readable(protocol)
    if protocol.min_writer_version > MAX_WRITER_VERSION:
        raise UnsupportedFeatureError(
            [f"minWriterVersion {protocol.min_writer_version}"], access="write",
            detail=f"the highest writer version implemented is {MAX_WRITER_VERSION}",
        )
    missing = active_writer_features(protocol, metadata) - SUPPORTED_WRITER_FEATURES
    if missing:
        raise UnsupportedFeatureError(sorted(missing), access="write")
