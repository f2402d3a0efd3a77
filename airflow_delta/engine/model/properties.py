"""Typed, validated access to the ``delta.*`` table properties the engine acts on.

Values live in ``metaData.configuration`` as strings; :class:`TableProperties` parses
each once, applies the protocol's defaults, and rejects values the protocol does not
allow with :class:`InvalidTablePropertyError`, naming the property and what it expects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from airflow_delta.engine.errors import InvalidTablePropertyError
from airflow_delta.engine.model.arguments import check_instance, check_str

_INTERVAL_UNITS_MS = {
    "microsecond": 0.001,
    "millisecond": 1,
    "second": 1_000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 7 * 86_400_000,
}
_INTERVAL_PART = re.compile(r"(-?\d+)\s*([a-z]+?)s?\b")


def parse_interval(key: str, value: str) -> timedelta:
    """Parse a Delta interval such as ``interval 7 days`` or ``interval 1 week 12 hours``.

    Months and years are refused, as Delta refuses them: their length is not fixed.
    """
    check_str("key", key)
    check_str(key, value)
    text = value.strip().lower()
    if text.startswith("interval"):
        text = text[len("interval"):].strip()
    parts = _INTERVAL_PART.findall(text)
    leftover = _INTERVAL_PART.sub("", text).strip()
    if not parts or leftover:
        raise InvalidTablePropertyError(key, value, "an interval such as 'interval 7 days'")
    total_ms = 0.0
    for amount, unit in parts:
        if unit not in _INTERVAL_UNITS_MS:
            raise InvalidTablePropertyError(
                key, value, "an interval in weeks, days, hours, minutes, seconds or smaller units"
            )
        total_ms += int(amount) * _INTERVAL_UNITS_MS[unit]
    if total_ms < 0:
        raise InvalidTablePropertyError(key, value, "a non-negative interval")
    return timedelta(milliseconds=total_ms)


def _parse_bool(key: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise InvalidTablePropertyError(key, value, "'true' or 'false'")


def _parse_int(key: str, value: str | None, default: int, minimum: int) -> int:
    if value is None:
        return default
    try:
        parsed = int(value.strip())
    except ValueError:
        raise InvalidTablePropertyError(key, value, f"an integer >= {minimum}") from None
    if parsed < minimum:
        raise InvalidTablePropertyError(key, value, f"an integer >= {minimum}")
    return parsed


_BYTE_SIZE = re.compile(r"^\s*(\d+)\s*([kmgtp]?)b?\s*$", re.IGNORECASE)
_BYTE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}

# Parquet codecs a table may ask for with delta.parquet.compression.codec.
PARQUET_CODECS: tuple[str, ...] = ("none", "snappy", "gzip", "lz4", "lz4_raw", "zstd", "brotli")


def parse_byte_size(key: str, value: str | None) -> int | None:
    """A size in bytes, plain or with a unit as Spark reads it (``134217728``, ``128mb``, ``1g``)."""
    if value is None:
        return None
    match = _BYTE_SIZE.match(value)
    if not match or int(match.group(1)) < 1:
        raise InvalidTablePropertyError(key, value, "a positive size in bytes such as 134217728 or 128mb")
    return int(match.group(1)) * _BYTE_UNITS[match.group(2).lower()]


def _parse_codec(key: str, value: str | None) -> str:
    if value is None:
        return "snappy"
    codec = value.strip().lower()
    codec = "none" if codec == "uncompressed" else codec
    if codec not in PARQUET_CODECS:
        raise InvalidTablePropertyError(key, value, "one of uncompressed, snappy, gzip, lz4, lz4_raw, zstd, brotli")
    return codec


def _parse_choice(key: str, value: str | None, default: str, choices: tuple[str, ...]) -> str:
    if value is None:
        return default
    for choice in choices:
        if value.strip().lower() == choice.lower():
            return choice
    raise InvalidTablePropertyError(key, value, "one of " + ", ".join(choices))


@dataclass(frozen=True, slots=True)
class TableProperties:
    append_only: bool = False
    checkpoint_interval: int = 10
    checkpoint_policy: str = "classic"
    checkpoint_write_stats_as_json: bool = True
    checkpoint_write_stats_as_struct: bool = False
    log_retention: timedelta = timedelta(days=30)
    deleted_file_retention: timedelta = timedelta(days=7)
    checkpoint_retention: timedelta = timedelta(days=2)
    set_transaction_retention: timedelta | None = None
    enable_expired_log_cleanup: bool = True
    enable_deletion_vectors: bool = False
    enable_change_data_feed: bool = False
    enable_in_commit_timestamps: bool = False
    in_commit_timestamp_enablement_version: int | None = None
    in_commit_timestamp_enablement_timestamp: int | None = None
    column_mapping_mode: str = "none"
    column_mapping_max_id: int = 0
    isolation_level: str = "WriteSerializable"
    randomize_file_prefixes: bool = False
    random_prefix_length: int = 2
    data_skipping_num_indexed_cols: int = 32
    data_skipping_stats_columns: tuple[str, ...] | None = None
    target_file_size: int | None = None
    parquet_compression_codec: str = "snappy"

    @classmethod
    def from_configuration(cls, configuration: Mapping[str, str]) -> TableProperties:
        check_instance("configuration", configuration, Mapping)
        for key, value in configuration.items():
            if value is not None and not isinstance(value, str) and str(key).startswith("delta."):
                raise InvalidTablePropertyError(str(key), value, "a string value, as Delta stores every table property")
        c = configuration

        def interval(key: str, default: timedelta) -> timedelta:
            v = c.get(key)
            return parse_interval(key, v) if v is not None else default

        ict_version = c.get("delta.inCommitTimestampEnablementVersion")
        ict_ts = c.get("delta.inCommitTimestampEnablementTimestamp")
        stats_cols = c.get("delta.dataSkippingStatsColumns")
        return cls(
            append_only=_parse_bool("delta.appendOnly", c.get("delta.appendOnly"), False),
            checkpoint_interval=_parse_int("delta.checkpointInterval", c.get("delta.checkpointInterval"), 10, 1),
            checkpoint_policy=_parse_choice("delta.checkpointPolicy", c.get("delta.checkpointPolicy"), "classic", ("classic", "v2")),
            checkpoint_write_stats_as_json=_parse_bool(
                "delta.checkpoint.writeStatsAsJson", c.get("delta.checkpoint.writeStatsAsJson"), True
            ),
            checkpoint_write_stats_as_struct=_parse_bool(
                "delta.checkpoint.writeStatsAsStruct", c.get("delta.checkpoint.writeStatsAsStruct"), False
            ),
            log_retention=interval("delta.logRetentionDuration", timedelta(days=30)),
            deleted_file_retention=interval("delta.deletedFileRetentionDuration", timedelta(days=7)),
            checkpoint_retention=interval("delta.checkpointRetentionDuration", timedelta(days=2)),
            set_transaction_retention=(
                parse_interval("delta.setTransactionRetentionDuration", c["delta.setTransactionRetentionDuration"])
                if c.get("delta.setTransactionRetentionDuration") is not None
                else None
            ),
            enable_expired_log_cleanup=_parse_bool(
                "delta.enableExpiredLogCleanup", c.get("delta.enableExpiredLogCleanup"), True
            ),
            enable_deletion_vectors=_parse_bool(
                "delta.enableDeletionVectors", c.get("delta.enableDeletionVectors"), False
            ),
            enable_change_data_feed=_parse_bool(
                "delta.enableChangeDataFeed", c.get("delta.enableChangeDataFeed"), False
            ),
            enable_in_commit_timestamps=_parse_bool(
                "delta.enableInCommitTimestamps", c.get("delta.enableInCommitTimestamps"), False
            ),
            in_commit_timestamp_enablement_version=(
                _parse_int("delta.inCommitTimestampEnablementVersion", ict_version, 0, 0) if ict_version else None
            ),
            in_commit_timestamp_enablement_timestamp=(
                _parse_int("delta.inCommitTimestampEnablementTimestamp", ict_ts, 0, 0) if ict_ts else None
            ),
            column_mapping_mode=_parse_choice(
                "delta.columnMapping.mode", c.get("delta.columnMapping.mode"), "none", ("none", "name", "id")
            ),
            column_mapping_max_id=_parse_int("delta.columnMapping.maxColumnId", c.get("delta.columnMapping.maxColumnId"), 0, 0),
            isolation_level=_parse_choice(
                "delta.isolationLevel", c.get("delta.isolationLevel"), "WriteSerializable", ("Serializable", "WriteSerializable")
            ),
            randomize_file_prefixes=_parse_bool(
                "delta.randomizeFilePrefixes", c.get("delta.randomizeFilePrefixes"), False
            ),
            random_prefix_length=_parse_int("delta.randomPrefixLength", c.get("delta.randomPrefixLength"), 2, 1),
            data_skipping_num_indexed_cols=_parse_int(
                "delta.dataSkippingNumIndexedCols", c.get("delta.dataSkippingNumIndexedCols"), 32, -1
            ),
            data_skipping_stats_columns=(
                tuple(s.strip() for s in stats_cols.split(",") if s.strip()) if stats_cols else None
            ),
            target_file_size=parse_byte_size("delta.targetFileSize", c.get("delta.targetFileSize")),
            parquet_compression_codec=_parse_codec(
                "delta.parquet.compression.codec", c.get("delta.parquet.compression.codec")
            ),
        )
