from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_delta.engine.errors import InvalidTablePropertyError
from airflow_delta.engine.model.properties import TableProperties, parse_interval


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
    ],
)
def test_parse_interval(text: str, expected: timedelta) -> None:
    assert parse_interval("k", text) == expected


@pytest.mark.parametrize("text", ["interval 1 month", "7", "forever", "interval -1 days", "interval 3 fortnights"])
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
