from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_delta.engine.errors import InvalidTablePropertyError
from airflow_delta.engine.model.properties import MAX_INTERVAL, TableProperties, parse_interval


def test_defaults_follow_the_protocol() -> None:
    p = TableProperties.from_configuration({})
    assert p.checkpoint_interval == 10
    assert p.log_retention == timedelta(days=30)
    assert p.deleted_file_retention == timedelta(days=7)
    assert p.enable_expired_log_cleanup is True
    assert p.append_only is False
    assert p.checkpoint_policy == "classic"
    assert p.column_mapping_mode == "none"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("interval 7 days", timedelta(days=7)),
        ("interval 1 week", timedelta(weeks=1)),
        ("INTERVAL 36 HOURS", timedelta(hours=36)),
        ("interval 1 day 12 hours", timedelta(hours=36)),
        ("30 days", timedelta(days=30)),
        ("interval 0 seconds", timedelta(0)),
        ("interval 500 milliseconds", timedelta(milliseconds=500)),
        # Spark's interval syntax, as Delta hands every duration to IntervalUtils.stringToInterval
        ("  interval 1 day  ", timedelta(days=1)),
        ("1 day -1 hour", timedelta(hours=23)),
        ("+2 hours - 30 minutes", timedelta(minutes=90)),
        ("1.5 seconds", timedelta(milliseconds=1500)),
        (".25 second", timedelta(milliseconds=250)),
        ("3. seconds", timedelta(seconds=3)),
        ("1.123456789 seconds", timedelta(microseconds=1_123_456)),
        ("7 microseconds", timedelta(microseconds=7)),
        ("2 Weeks 1 Day", timedelta(days=15)),
        ("interval 7\t days", timedelta(days=7)),
        ("interval 106751991 days", timedelta(days=106751991)),
    ],
)
def test_parse_interval(text: str, expected: timedelta) -> None:
    assert parse_interval("k", text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "interval 1 month", "1 year", "7", "forever", "interval -1 days", "interval 3 fortnights", "7days",
        "1.5 days", "1.1234567891 seconds", "interval", "interval\t7 days", "", "interval interval 1 day", "1 dayss", "1 d",
        "2147483648 days",  # Spark keeps days in an int
        "9223372036854775808 microseconds",  # and the number in a long
    ],
)
def test_parse_interval_rejects(text: str) -> None:
    with pytest.raises(InvalidTablePropertyError, match="k="):
        parse_interval("k", text)


def test_typed_values_and_errors() -> None:
    p = TableProperties.from_configuration(
        {
            "delta.appendOnly": "TRUE",
            "delta.checkpointInterval": "5",
            "delta.checkpointPolicy": "v2",
            "delta.logRetentionDuration": "interval 2 days",
            "delta.columnMapping.mode": "name",
            "delta.dataSkippingStatsColumns": "a, b.c",
        }
    )
    assert p.append_only and p.checkpoint_interval == 5 and p.checkpoint_policy == "v2"
    assert p.log_retention == timedelta(days=2)
    assert p.column_mapping_mode == "name"
    assert p.data_skipping_stats_columns == ("a", "b.c")
    with pytest.raises(InvalidTablePropertyError, match=r"delta.checkpointInterval='0'.*integer >= 1"):
        TableProperties.from_configuration({"delta.checkpointInterval": "0"})
    with pytest.raises(InvalidTablePropertyError, match="'true' or 'false'"):
        TableProperties.from_configuration({"delta.appendOnly": "yes"})
    with pytest.raises(InvalidTablePropertyError, match="one of classic, v2"):
        TableProperties.from_configuration({"delta.checkpointPolicy": "v3"})


@pytest.mark.parametrize(
    ("value", "expected"), [("134217728", 134217728), ("100mb", 100 << 20), ("1G", 1 << 30), ("64k", 64 << 10)]
)
def test_target_file_size_property_accepts_units(value: str, expected: int) -> None:
    assert TableProperties.from_configuration({"delta.targetFileSize": value}).target_file_size == expected


@pytest.mark.parametrize("value", ["0", "-5mb", "lots", "12 parsecs"])
def test_target_file_size_rejects(value: str) -> None:
    with pytest.raises(InvalidTablePropertyError, match="positive size in bytes"):
        TableProperties.from_configuration({"delta.targetFileSize": value})


def test_parquet_codec() -> None:
    assert TableProperties.from_configuration({}).parquet_compression_codec == "snappy"
    assert TableProperties.from_configuration({"delta.parquet.compression.codec": "UNCOMPRESSED"}).parquet_compression_codec == "none"
    with pytest.raises(InvalidTablePropertyError, match="one of uncompressed, snappy"):
        TableProperties.from_configuration({"delta.parquet.compression.codec": "zip"})


@pytest.mark.parametrize(
    "text", ["interval 2147483647 days", "2147483647 days 23 hours", "106751991 days 23 hours"]
)
def test_intervals_longer_than_delta_can_hold_are_capped(text: str) -> None:
    # Delta accepts them (its long of microseconds wraps); they mean "forever" and are
    # capped at the longest duration Delta can represent, so `now - retention` stays an int64.
    assert parse_interval("k", text) == MAX_INTERVAL == timedelta(microseconds=2**63 - 1)


def test_a_bad_duration_fails_the_operation_that_needs_it_not_the_read() -> None:
    for value in ("interval 1 month", "-1 days", "soon"):
        p = TableProperties.for_reading({"delta.deletedFileRetentionDuration": value, "delta.appendOnly": "true"})
        assert p.append_only
        assert p.log_retention == timedelta(days=30)
        with pytest.raises(InvalidTablePropertyError, match=r"delta\.deletedFileRetentionDuration"):
            p.deleted_file_retention  # noqa: B018


def test_for_reading_falls_back_to_defaults_but_writers_still_refuse() -> None:
    conf = {"delta.appendOnly": "yes", "delta.checkpointInterval": "5"}
    p = TableProperties.for_reading(conf)
    assert p.append_only is False and p.checkpoint_interval == 5
    with pytest.raises(InvalidTablePropertyError, match=r"delta\.appendOnly"):
        TableProperties.from_configuration(conf)


@pytest.mark.parametrize(
    ("value", "settable"),
    [("interval 2147483647 days", True), ("interval 106751991 days", True), ("interval 106751992 days", False),
     ("1 month", False)],
)
def test_durations_a_table_may_be_given(value: str, settable: bool) -> None:
    # Delta wraps days * 86400000000 in a long: 106751992 days would read as a negative
    # retention there (a VACUUM deleting files of the future), so it is refused when set.
    from airflow_delta.engine.model.property_validation import normalize_properties

    if settable:
        normalize_properties({"delta.logRetentionDuration": value})
    else:
        with pytest.raises(InvalidTablePropertyError, match=r"delta\.logRetentionDuration"):
            normalize_properties({"delta.logRetentionDuration": value})
