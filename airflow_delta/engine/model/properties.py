"""Typed, validated access to the ``delta.*`` table properties the engine acts on.

Values live in ``metaData.configuration`` as strings; :class:`TableProperties` parses
each once, applies the protocol's defaults, and rejects values the protocol does not
allow with :class:`InvalidTablePropertyError`, naming the property and what it expects.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from airflow_delta.engine.errors import InvalidTablePropertyError
from airflow_delta.engine.model.arguments import check_instance, check_str

# Spark's interval units (``IntervalUtils.stringToInterval``), singular or plural, and
# which of CalendarInterval's three fields each adds to: months, days or microseconds.
log = logging.getLogger(__name__)

_INTERVAL_UNITS: dict[str, tuple[str, int]] = {
    "year": ("months", 12),
    "month": ("months", 1),
    "week": ("days", 7),
    "day": ("days", 1),
    "hour": ("micros", 3_600_000_000),
    "minute": ("micros", 60_000_000),
    "second": ("micros", 1_000_000),
    "millisecond": ("micros", 1_000),
    "microsecond": ("micros", 1),
}
_WHITESPACE = " \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"  # Java's Character.isWhitespace, ASCII part
_INTERVAL_TERM = re.compile(
    rf"[{_WHITESPACE}]*(?P<sign>[+-]?)[{_WHITESPACE}]*(?P<value>\d+(?:\.\d*)?|\.\d+)[{_WHITESPACE}]+"
    rf"(?P<unit>{'|'.join(sorted(_INTERVAL_UNITS, key=len, reverse=True))})s?(?=[{_WHITESPACE}]|$)"
)
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_MICROS_PER_DAY = 86_400_000_000
MAX_INTERVAL = timedelta(microseconds=_LONG_MAX)
"""The longest retention the engine uses: Delta's own limit, a Long of microseconds (~292,000
years). A longer interval (``interval 2147483647 days``, which Delta accepts) means "forever" and
is capped here; arithmetic on it (``now - retention``) stays within int64 milliseconds."""

_INTERVAL_EXPECTED = (
    "a calendar interval such as 'interval 7 days' or '2 weeks' (units week, day, hour, minute, second, "
    "millisecond, microsecond; months and years are not accepted: use '365 days' for a year)"
)


def _calendar_interval(key: str, value: str) -> tuple[int, int, int]:
    """``(months, days, microseconds)`` of ``value`` as Delta parses a duration property.

    Delta prepends ``interval `` when absent and hands the text to Spark's
    ``IntervalUtils.stringToInterval``: signed terms ``<number> <unit>`` separated by
    whitespace, a fraction (up to 9 digits) for seconds only, each field checked for
    overflow (months and days are ints, microseconds a long) as Spark checks it.
    """
    text = value.strip(_WHITESPACE + "\x00").lower()
    if not text:
        raise InvalidTablePropertyError(key, value, _INTERVAL_EXPECTED)
    body = text[len("interval "):] if text.startswith("interval ") else text
    fields = {"months": 0, "days": 0, "micros": 0}
    position = 0
    body = body.strip(_WHITESPACE)
    while position < len(body):
        match = _INTERVAL_TERM.match(body, position)
        if match is None:
            raise InvalidTablePropertyError(key, value, _INTERVAL_EXPECTED)
        whole, _, fraction = match["value"].partition(".")
        unit = match["unit"]
        if "." in match["value"] and unit != "second":
            raise InvalidTablePropertyError(key, value, _INTERVAL_EXPECTED + f"; only seconds may have a fraction, not {unit}s")
        if len(fraction) > 9:
            raise InvalidTablePropertyError(key, value, _INTERVAL_EXPECTED + "; at most nanosecond precision")
        amount = int(whole or "0")
        if amount > _LONG_MAX:
            raise InvalidTablePropertyError(key, value, _INTERVAL_EXPECTED + f"; {amount} does not fit a long")
        sign = -1 if match["sign"] == "-" else 1
        field_name, factor = _INTERVAL_UNITS[unit]
        added = sign * amount * factor
        if unit == "second" and fraction:
            added += sign * (int(fraction.ljust(9, "0")) // 1000)
        total = fields[field_name] + added
        limit = _LONG_MAX if field_name == "micros" else _INT_MAX
        if not -limit - 1 <= total <= limit or not -limit - 1 <= sign * amount * factor <= limit:
            raise InvalidTablePropertyError(key, value, _INTERVAL_EXPECTED + f"; the {field_name} overflow")
        fields[field_name] = total
        position = match.end()
        while position < len(body) and body[position] in _WHITESPACE:
            position += 1
    return fields["months"], fields["days"], fields["micros"]


def parse_interval(key: str, value: str) -> timedelta:
    """Parse a Delta duration such as ``interval 7 days``, ``1 week 12 hours`` or ``0.5 seconds``.

    Every form Delta accepts (Spark's interval syntax, ``interval`` optional). Months and
    years are refused, as Delta refuses them: their length is not fixed; so is a negative
    total. An interval longer than :data:`MAX_INTERVAL` (Delta's own limit) is capped there.
    """
    check_str("key", key)
    check_str(key, value)
    months, days, micros = _calendar_interval(key, value)
    if months:
        raise InvalidTablePropertyError(key, value, _INTERVAL_EXPECTED)
    total = days * _MICROS_PER_DAY + micros
    if total < 0:
        raise InvalidTablePropertyError(key, value, "a non-negative interval")
    return timedelta(microseconds=min(total, _LONG_MAX))


def check_interval_settable(key: str, value: str) -> None:
    """Refuse a duration that a table must not be given, beyond what :func:`parse_interval` refuses.

    Delta computes ``days * 86400000000 + microseconds`` in a long without an overflow
    check: an interval it parses can wrap to a negative duration there (``interval
    106751992 days``), which its VACUUM would read as a retention ending in the future.
    Such a value is refused when set; one that wraps to a positive duration (``interval
    2147483647 days``) is accepted, as Delta accepts it.
    """
    parse_interval(key, value)
    _, days, micros = _calendar_interval(key, value)
    wrapped = (days * _MICROS_PER_DAY + micros + 2**63) % 2**64 - 2**63
    if wrapped < 0:
        raise InvalidTablePropertyError(
            key, value, "an interval Delta can hold: at most 106751991 days (a long of microseconds)"
        )


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


# The duration properties the engine acts on, with the protocol's defaults (None: no default).
DURATION_DEFAULTS: dict[str, timedelta | None] = {
    "delta.logRetentionDuration": timedelta(days=30),
    "delta.deletedFileRetentionDuration": timedelta(days=7),
    "delta.checkpointRetentionDuration": timedelta(days=2),
    "delta.setTransactionRetentionDuration": None,
}


@dataclass(frozen=True, slots=True)
class TableProperties:
    """The ``delta.*`` table properties this engine acts on, parsed, with Delta's defaults."""

    append_only: bool = False
    checkpoint_interval: int = 10
    checkpoint_policy: str = "classic"
    checkpoint_write_stats_as_json: bool = True
    checkpoint_write_stats_as_struct: bool = False
    # The duration properties as set, parsed when an operation asks for one: a value this
    # engine cannot use fails that operation (typed), never a read of the table.
    durations: tuple[tuple[str, str], ...] = ()
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
            durations=tuple((key, c[key]) for key in DURATION_DEFAULTS if c.get(key) is not None),
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

    @classmethod
    def for_reading(cls, configuration: Mapping[str, str]) -> TableProperties:
        """The properties as a reader uses them: a value this engine cannot parse is logged and
        read as the property's default, so that no table property ever fails a read.

        Writers parse with :meth:`from_configuration`, which raises
        :class:`InvalidTablePropertyError`; duration properties are parsed only when an
        operation asks for one (:meth:`duration`).
        """
        usable = dict(configuration)
        while True:
            try:
                return cls.from_configuration(usable)
            except InvalidTablePropertyError as exc:
                if exc.key not in usable:
                    raise
                log.warning("reading the table with the default of %s: %s", exc.key, exc)
                del usable[exc.key]

    def duration(self, key: str) -> timedelta | None:
        """The duration property ``key`` (one of :data:`DURATION_DEFAULTS`), or its default.

        Raises :class:`InvalidTablePropertyError` for a value Delta would not accept (months,
        a negative total, text that is no interval); a value longer than Delta can hold is
        capped at :data:`MAX_INTERVAL`.
        """
        for name, value in self.durations:
            if name == key:
                return parse_interval(key, value)
        return DURATION_DEFAULTS[key]

    @property
    def log_retention(self) -> timedelta:
        """``delta.logRetentionDuration`` (30 days)."""
        return self.duration("delta.logRetentionDuration") or timedelta(0)

    @property
    def deleted_file_retention(self) -> timedelta:
        """``delta.deletedFileRetentionDuration`` (7 days)."""
        return self.duration("delta.deletedFileRetentionDuration") or timedelta(0)

    @property
    def checkpoint_retention(self) -> timedelta:
        """``delta.checkpointRetentionDuration`` (2 days)."""
        return self.duration("delta.checkpointRetentionDuration") or timedelta(0)

    @property
    def set_transaction_retention(self) -> timedelta | None:
        """``delta.setTransactionRetentionDuration`` (None: identifiers never expire)."""
        return self.duration("delta.setTransactionRetentionDuration")

    def check_durations_settable(self) -> None:
        """Refuse, when a table is given them, durations Delta refuses or would misread."""
        for key, value in self.durations:
            check_interval_settable(key, value)


# Here, beside the other properties, rather than with the manifest writer: every commit's
# post-commit step asks whether it is set, and only a table that sets it loads that writer.
SYMLINK_MANIFEST_PROPERTY = "delta.compatibility.symlinkFormatManifest.enabled"


def symlink_manifest_enabled(configuration: Mapping[str, str]) -> bool:
    """Whether the table asks for manifests after each commit (the property, case-insensitively true)."""
    return str(configuration.get(SYMLINK_MANIFEST_PROPERTY, "false")).strip().lower() == "true"
