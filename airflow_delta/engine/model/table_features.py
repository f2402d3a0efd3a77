"""Protocol gate: which reader/writer versions and table features this engine implements.

A table is read only if every reader feature it requires is implemented here, and
written only if every writer feature that is active on it is. Anything else raises
:class:`UnsupportedFeatureError` naming the features, rather than reading or writing
the table wrongly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_delta.engine.errors import UnsupportedFeatureError
from airflow_delta.engine.model import log_json
from airflow_delta.engine.model.actions import Metadata, Protocol
from airflow_delta.engine.model.arguments import check_instance
from airflow_delta.engine.model.properties import TableProperties

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
        "changeDataFeed",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "domainMetadata",
        "inCommitTimestamp",
        "typeWidening",
        "typeWidening-preview",
        # Row tracking: fresh row IDs and commit versions on every add, the high-water
        # mark domain, materialized columns on copies (model/row_tracking.py).
        "rowTracking",
        # Liquid clustering: the delta.clustering domain is kept, OPTIMIZE clusters.
        # "liquid" is the preview spelling (domain delta.liquid) of early Delta 3 tables.
        "clustering",
        "liquid",
        # Log cleanup keeps the history before delta.requireCheckpointProtectionBeforeVersion.
        "checkpointProtection",
        # Values the writer supplies (model/column_defaults.py): identity values and their
        # high-water mark, generation expressions and defaults evaluated by Spark.
        "identityColumns",
        "generatedColumns",
        "allowColumnDefaults",
        # Unshredded variants are copied through as their binary struct.
        "variantType",
        "variantType-preview",
    }
)

# Why a feature stays refused for writing: the error says so (docs/compatibility.md too).
UNSUPPORTED_WRITE_REASONS: Mapping[str, str] = {
    "icebergCompatV1": "UniForm: every commit must also write Iceberg metadata, which airflow-delta does not",
    "icebergCompatV2": "UniForm: every commit must also write Iceberg metadata, which airflow-delta does not",
    "catalogManaged": "the table's commits are owned by a catalog, which airflow-delta does not speak",
    "catalogOwned-preview": "the table's commits are owned by a catalog, which airflow-delta does not speak",
}

# Table features readers must understand too: listed in readerFeatures as well as
# writerFeatures. Every other feature is writer-only.
READER_WRITER_FEATURES: frozenset[str] = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "variantShredding",
        "variantShredding-preview",
        "catalogManaged",
        "catalogOwned-preview",
    }
)

# The (reader, writer) versions that imply a feature without table features; features
# absent here exist only as table features (writer version 7).
LEGACY_FEATURE_VERSIONS: Mapping[str, tuple[int, int]] = {
    "appendOnly": (1, 2),
    "invariants": (1, 2),
    "checkConstraints": (1, 3),
    "changeDataFeed": (1, 4),
    "generatedColumns": (1, 4),
    "columnMapping": (2, 5),
    "identityColumns": (1, 6),
}

# Boolean table properties that switch a feature on when set to "true".
FEATURE_ENABLING_PROPERTIES: Mapping[str, str] = {
    "delta.appendOnly": "appendOnly",
    "delta.enableDeletionVectors": "deletionVectors",
    "delta.enableInCommitTimestamps": "inCommitTimestamp",
    "delta.enableChangeDataFeed": "changeDataFeed",
    "delta.enableTypeWidening": "typeWidening",
    "delta.enableRowTracking": "rowTracking",
    "delta.enableIcebergCompatV1": "icebergCompatV1",
    "delta.enableIcebergCompatV2": "icebergCompatV2",
    "delta.enableVariantShredding": "variantShredding",
}

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
    check_instance("protocol", protocol, Protocol)
    if protocol.min_reader_version >= 3:
        return protocol.reader_features or frozenset()
    if protocol.min_reader_version == 2:
        return frozenset({"columnMapping"})
    return frozenset()


def writer_features(protocol: Protocol) -> frozenset[str]:
    """The writer features a protocol lists as supported, legacy versions included."""
    check_instance("protocol", protocol, Protocol)
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
        raise UnsupportedFeatureError(sorted(missing), access="read", detail=_refusal_reasons(missing))


def _fields(schema_json: dict) -> Iterable[dict]:
    stack = list(schema_json.get("fields", []))
    while stack:
        field = stack.pop()
        yield field
        stack.extend(_nested_fields(field.get("type")))


def _has_not_null_field(struct: dict) -> bool:
    stack = list(struct.get("fields", []))
    while stack:
        field = stack.pop()
        if field.get("nullable") is False:
            return True
        data_type = field.get("type")
        if isinstance(data_type, dict) and data_type.get("type") == "struct":
            stack.extend(data_type.get("fields", []))
    return False


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


_VARIANT_FEATURES = frozenset({"variantType", "variantType-preview"})


def _is_variant(data_type: object) -> bool:
    """Whether a schema type is, or directly nests (array element, map key or value), a variant."""
    if data_type == "variant":
        return True
    if isinstance(data_type, dict):
        if data_type.get("type") == "array":
            return _is_variant(data_type.get("elementType"))
        if data_type.get("type") == "map":
            return _is_variant(data_type.get("keyType")) or _is_variant(data_type.get("valueType"))
    return False


def active_writer_features(protocol: Protocol, metadata: Metadata) -> frozenset[str]:
    """Writer features that actually constrain a write to this table."""
    listed = writer_features(protocol)
    props = TableProperties.from_configuration(metadata.configuration)
    field_meta_keys: set[str] = set()
    for field in _fields(log_json.loads(metadata.schema_string)):
        field_meta_keys.update((field.get("metadata") or {}).keys())
    active = set(listed - _METADATA_ACTIVATED_WRITER_FEATURES)
    # delta-rs (1.6) lists variantType on every table it creates with reader/writer
    # features; the feature constrains only writes of variant columns, so a table
    # without one is writable.
    if not any(_is_variant(field.get("type")) for field in _fields(log_json.loads(metadata.schema_string))):
        active -= _VARIANT_FEATURES
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
        raise UnsupportedFeatureError(sorted(missing), access="write", detail=_refusal_reasons(missing))


def _refusal_reasons(features: Iterable[str]) -> str:
    return "; ".join(f"{f}: {UNSUPPORTED_WRITE_REASONS[f]}" for f in sorted(features) if f in UNSUPPORTED_WRITE_REASONS)


# ------------------------------------------------------------- choosing a protocol


def _uses_type(data_type: Any, type_name: str) -> bool:
    if isinstance(data_type, str):
        return data_type == type_name
    if not isinstance(data_type, dict):
        return False
    kind = data_type.get("type")
    if kind == "struct":
        return any(_uses_type(f.get("type"), type_name) for f in data_type.get("fields", []))
    if kind == "array":
        return _uses_type(data_type.get("elementType"), type_name)
    if kind == "map":
        return _uses_type(data_type.get("keyType"), type_name) or _uses_type(data_type.get("valueType"), type_name)
    return False


def required_features(
    schema_json: Mapping[str, Any], configuration: Mapping[str, str], *, writes_domains: bool = False
) -> frozenset[str]:
    """Table features that a schema and its table properties (and a commit writing domains) make necessary."""
    props = TableProperties.from_configuration(configuration)
    needed = {
        feature
        for key, feature in FEATURE_ENABLING_PROPERTIES.items()
        if str(configuration.get(key, "")).strip().lower() == "true"
    }
    if props.column_mapping_mode != "none":
        needed.add("columnMapping")
    if props.checkpoint_policy == "v2":
        needed.add("v2Checkpoint")
    if any(key.startswith("delta.constraints.") for key in configuration):
        needed.add("checkConstraints")
    if any("delta.invariants" in (field.get("metadata") or {}) for field in _fields(dict(schema_json))):
        needed.add("invariants")
    if _has_not_null_field(dict(schema_json)):
        # Delta enforces NOT NULL columns as invariants: a table-features protocol must list
        # "invariants" when one exists, or Delta refuses the table
        # (DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH). Like Delta's Invariants.getFromSchema,
        # only struct nesting counts (array elements and map values are not constraints).
        needed.add("invariants")
    if _uses_type(dict(schema_json), "timestamp_ntz"):
        needed.add("timestampNtz")
    top_level_metadata = [field.get("metadata") or {} for field in dict(schema_json).get("fields", [])]
    if any("delta.identity.start" in meta for meta in top_level_metadata):
        needed.add("identityColumns")
    if any("delta.generationExpression" in meta for meta in top_level_metadata):
        needed.add("generatedColumns")
    if any("CURRENT_DEFAULT" in meta for meta in top_level_metadata):
        needed.add("allowColumnDefaults")
    if writes_domains:
        needed.add("domainMetadata")
    return frozenset(needed)


# Features that need others (PROTOCOL.md, each feature's "Enablement"): row tracking and
# clustering keep their state in domain metadata.
_DEPENDENCIES: Mapping[str, frozenset[str]] = {
    "rowTracking": frozenset({"domainMetadata"}),
    "clustering": frozenset({"domainMetadata"}),
}


def _with_dependencies(features: Iterable[str]) -> set[str]:
    wanted = set(features)
    for feature in list(wanted):
        wanted |= _DEPENDENCIES.get(feature, frozenset())
    return wanted


def minimal_protocol(
    features: Iterable[str],
    min_reader_version: int | None = None,
    min_writer_version: int | None = None,
    *,
    table_features: bool = False,
) -> Protocol:
    """The smallest protocol for a new table supporting ``features``.

    Legacy versions when they suffice: (1, 2) at least, raised to the versions that
    imply each feature. Table features otherwise (a feature with no legacy version,
    ``table_features`` asked for, or minimum versions of 3 / 7): writer version 7 listing
    every feature, and reader version 3 listing the reader-writer ones when there are
    any (reader version 1 otherwise).
    """
    wanted = _with_dependencies(features)
    unsupported = sorted(
        f
        for f in wanted
        if f not in SUPPORTED_WRITER_FEATURES or (f in READER_WRITER_FEATURES and f not in SUPPORTED_READER_FEATURES)
    )
    if unsupported:
        raise UnsupportedFeatureError(unsupported, access="write", detail="a new table cannot be created with it")
    reader_floor = min_reader_version or 1
    writer_floor = min_writer_version or 2
    needs_table_features = (
        table_features
        or any(f not in LEGACY_FEATURE_VERSIONS for f in wanted)
        or reader_floor >= 3
        or writer_floor >= 7
    )
    if not needs_table_features:
        reader = max([reader_floor] + [LEGACY_FEATURE_VERSIONS[f][0] for f in wanted])
        writer = max([writer_floor] + [LEGACY_FEATURE_VERSIONS[f][1] for f in wanted])
        if reader == 2:  # reader version 2 means column mapping, which writers know from version 5
            writer = max(writer, 5)
        return Protocol(reader, writer)
    # A legacy writer version asked for explicitly keeps the features it implies.
    if min_writer_version is not None and min_writer_version < 7:
        implied = _LEGACY_WRITER_FEATURES.get(min_writer_version, frozenset())
        wanted.update(f for f in implied if f in SUPPORTED_WRITER_FEATURES)
    if min_reader_version == 2:
        wanted.add("columnMapping")
    readers = {f for f in wanted if f in READER_WRITER_FEATURES}
    if readers or reader_floor >= 3:
        return Protocol(3, 7, frozenset(readers), frozenset(wanted))
    return Protocol(1, 7, None, frozenset(wanted))


def upgrade_protocol(protocol: Protocol, features: Iterable[str]) -> Protocol:
    """The smallest change to an existing table's ``protocol`` that supports every feature in ``features``.

    A protocol that already supports them is returned unchanged. Otherwise the table
    moves to table features (writer version 7, and reader version 3 when a reader-writer
    feature is missing); the features implied by legacy versions are listed explicitly
    so that nothing the table may already use is dropped, as the spec asks of upgrades.
    """
    wanted = frozenset(_with_dependencies(features))
    have_readers = reader_features(protocol)
    have_writers = writer_features(protocol)
    wanted_readers = {f for f in wanted if f in READER_WRITER_FEATURES}
    missing_writers = wanted - have_writers
    missing_readers = wanted_readers - have_readers
    if not missing_writers and not missing_readers:
        return protocol
    writers = set(have_writers) | set(wanted) | set(have_readers)
    if protocol.min_reader_version == 2:
        writers.add("columnMapping")  # reader version 2 means column mapping
    if missing_readers or protocol.min_reader_version >= 3:
        return Protocol(3, 7, frozenset(set(have_readers) | wanted_readers), frozenset(writers))
    return Protocol(protocol.min_reader_version, 7, None, frozenset(writers))
