"""Validating the table properties a user asks for, before they reach a commit.

``delta.*`` keys are checked against every property Delta defines, so a typo is
refused instead of silently doing nothing. Creating a table and ``SET TBLPROPERTIES``
in a transaction use the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_delta.engine.errors import InvalidTablePropertyError, UnknownTablePropertyError, UnsupportedFeatureError
from airflow_delta.engine.model.constraints import CHECK_CONSTRAINT_PREFIX
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.model.table_features import FEATURE_ENABLING_PROPERTIES, SUPPORTED_WRITER_FEATURES

COLUMN_MAPPING_ID = "delta.columnMapping.id"
COLUMN_MAPPING_PHYSICAL_NAME = "delta.columnMapping.physicalName"
COLUMN_MAPPING_MAX_ID = "delta.columnMapping.maxColumnId"


# Every table property Delta defines (delta-spark's DeltaConfigs and the protocol's
# "Table Properties"), so that a typo such as delta.appendOnyl is refused instead of
# silently doing nothing. Two families are open-ended: delta.constraints.<name> (CHECK
# constraints) and delta.feature.<name> (explicit table-feature support).
KNOWN_DELTA_PROPERTIES: tuple[str, ...] = (
    "delta.appendOnly",
    "delta.autoOptimize",
    "delta.autoOptimize.autoCompact",
    "delta.autoOptimize.optimizeWrite",
    "delta.checkpoint.writeStatsAsJson",
    "delta.checkpoint.writeStatsAsStruct",
    "delta.checkpointInterval",
    "delta.checkpointPolicy",
    "delta.checkpointRetentionDuration",
    "delta.columnMapping.maxColumnId",
    "delta.columnMapping.mode",
    "delta.compatibility.symlinkFormatManifest.enabled",
    "delta.dataSkippingNumIndexedCols",
    "delta.dataSkippingStatsColumns",
    "delta.deletedFileRetentionDuration",
    "delta.enableChangeDataFeed",
    "delta.enableDeletionVectors",
    "delta.enableExpiredLogCleanup",
    "delta.enableIcebergCompatV1",
    "delta.enableIcebergCompatV2",
    "delta.enableInCommitTimestamps",
    "delta.enableRowTracking",
    "delta.enableTypeWidening",
    "delta.enableVariantShredding",
    "delta.inCommitTimestampEnablementTimestamp",
    "delta.inCommitTimestampEnablementVersion",
    "delta.isolationLevel",
    "delta.logRetentionDuration",
    "delta.minReaderVersion",
    "delta.minWriterVersion",
    "delta.parquet.compression.codec",
    "delta.parquet.format.version",
    "delta.randomPrefixLength",
    "delta.randomizeFilePrefixes",
    "delta.requireCheckpointProtectionBeforeVersion",
    "delta.rowTrackingSuspended",
    "delta.sampleRetentionDuration",
    "delta.setTransactionRetentionDuration",
    "delta.targetFileSize",
    "delta.tuneFileSizesForRewrites",
    "delta.universalFormat.enabledFormats",
)
_KNOWN_BY_LOWER = {k.lower(): k for k in KNOWN_DELTA_PROPERTIES}
FEATURE_PROPERTY_PREFIX = "delta.feature."

# Properties only a writer sets (Delta refuses them from users): they record facts
# about the table's history, which a user cannot know at creation.
_WRITER_OWNED_PROPERTIES = frozenset(
    {
        COLUMN_MAPPING_MAX_ID,
        "delta.inCommitTimestampEnablementVersion",
        "delta.inCommitTimestampEnablementTimestamp",
    }
)


@dataclass(frozen=True, slots=True)
class NormalizedProperties:
    configuration: dict[str, str]  # what goes into metaData.configuration
    features: frozenset[str]  # features asked for explicitly (delta.feature.<name>)
    min_reader_version: int | None  # delta.minReaderVersion, if given
    min_writer_version: int | None  # delta.minWriterVersion, if given


def normalize_properties(properties: Mapping[str, str] | None) -> NormalizedProperties:
    """Validate user properties for a new table.

    ``delta.*`` keys are matched case-insensitively and stored in Delta's spelling;
    unknown ones raise :class:`UnknownTablePropertyError` listing the valid ones. Other
    keys are user metadata and kept as given. ``delta.feature.<name>`` and
    ``delta.min{Reader,Writer}Version`` shape the protocol and are not stored, as in
    Delta. Values are checked with :class:`TableProperties`.
    """
    configuration: dict[str, str] = {}
    features: set[str] = set()
    min_reader: int | None = None
    min_writer: int | None = None
    for raw_key, raw_value in (properties or {}).items():
        key = str(raw_key)
        if raw_value is None:
            raise InvalidTablePropertyError(key, raw_value, "a string value")
        value = str(raw_value).lower() if isinstance(raw_value, bool) else str(raw_value)
        lower = key.lower()
        if not lower.startswith("delta."):
            configuration[key] = value
            continue
        if lower.startswith(FEATURE_PROPERTY_PREFIX):
            name = key[len(FEATURE_PROPERTY_PREFIX):]
            if value.strip().lower() not in ("supported", "enabled"):
                raise InvalidTablePropertyError(key, value, "'supported'")
            features.add(name)
            continue
        if lower.startswith(CHECK_CONSTRAINT_PREFIX):
            name = key[len(CHECK_CONSTRAINT_PREFIX):]
            if not name or not value.strip():
                raise InvalidTablePropertyError(key, value, "delta.constraints.<name> = <boolean SQL expression>")
            # Delta keys constraints by their lower-cased name (names are case-insensitive).
            configuration[CHECK_CONSTRAINT_PREFIX + name.lower()] = value
            continue
        canonical = _KNOWN_BY_LOWER.get(lower)
        if canonical is None:
            raise UnknownTablePropertyError(
                key, value, [*KNOWN_DELTA_PROPERTIES, "delta.constraints.<name>", "delta.feature.<name>"]
            )
        if canonical in _WRITER_OWNED_PROPERTIES:
            raise InvalidTablePropertyError(key, value, "no value: the writer maintains this property itself")
        if canonical == "delta.minReaderVersion":
            min_reader = _version_property(key, value, 1, 3)
            continue
        if canonical == "delta.minWriterVersion":
            min_writer = _version_property(key, value, 2, 7)
            continue
        configuration[canonical] = value
    for key, feature in FEATURE_ENABLING_PROPERTIES.items():
        if feature not in SUPPORTED_WRITER_FEATURES and configuration.get(key, "").strip().lower() == "true":
            raise UnsupportedFeatureError([feature], access="write", detail=f"{key}=true asks for it")
    if configuration.get("delta.universalFormat.enabledFormats", "").strip():
        raise UnsupportedFeatureError(["icebergCompatV2"], access="write", detail="delta.universalFormat.enabledFormats")
    TableProperties.from_configuration(configuration).check_durations_settable()  # InvalidTablePropertyError
    return NormalizedProperties(configuration, frozenset(features), min_reader, min_writer)


def _version_property(key: str, value: str, low: int, high: int) -> int:
    try:
        parsed = int(value)
    except ValueError:
        raise InvalidTablePropertyError(key, value, f"an integer from {low} to {high}") from None
    if not low <= parsed <= high:
        raise InvalidTablePropertyError(key, value, f"an integer from {low} to {high}")
    return parsed


# ------------------------------------------------------------------ schema checks
