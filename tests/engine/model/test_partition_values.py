"""Partition values: parsing the log's strings into typed Arrow, and serialising values."""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import (
    InvalidLogError,
)
from airflow_delta.engine.model.actions import Protocol
from airflow_delta.engine.model.partition_values import (
    java_float_string,
    parse_partition_strings,
    parse_partition_values,
    partition_schema,
    serialize_partition_value,
)
from airflow_delta.engine.model.schema import (
    TIMESTAMP_NTZ_TYPE,
    TIMESTAMP_TYPE,
)
from tests.engine.model.schema_builders import _field, _log_metadata, _log_partition_values, _metadata

# ===================================================================== partition values


def test_partition_schema_follows_partition_column_order() -> None:
    fields = [_field("a", "long"), _field("b", "date"), _field("c", "string")]
    schema = partition_schema(_metadata(fields, ("c", "a")))
    assert schema.names == ["c", "a"] and schema.types == [pa.string(), pa.int64()]
    with pytest.raises(InvalidLogError, match="'zz'"):
        partition_schema(_metadata(fields, ("zz",)))


def _parse(values: list[str | None], t: pa.DataType) -> list[Any]:
    return parse_partition_strings(pa.array(values, pa.string()), t).to_pylist()


def test_null_missing_and_empty_are_null_for_every_type() -> None:
    for t in [pa.string(), pa.int32(), pa.float64(), pa.bool_(), pa.date32(), TIMESTAMP_TYPE, pa.decimal128(5, 2), pa.binary()]:
        assert _parse(["", None], t) == [None, None]


def test_numbers_booleans_and_dates() -> None:
    assert _parse(["-128", "127"], pa.int8()) == [-128, 127]
    assert _parse(["9223372036854775807"], pa.int64()) == [9223372036854775807]
    parsed = _parse(["1.5", "1.0E10", "NaN", "Infinity", "-Infinity"], pa.float64())
    assert parsed[:2] == [1.5, 1e10] and math.isnan(parsed[2]) and parsed[3:] == [math.inf, -math.inf]
    assert _parse(["true", "false", "TRUE"], pa.bool_()) == [True, False, True]
    assert _parse(["1970-01-01", "2024-02-29", "0001-01-01"], pa.date32()) == [
        dt.date(1970, 1, 1),
        dt.date(2024, 2, 29),
        dt.date(1, 1, 1),
    ]
    assert _parse(["1.5", "-12.25", "0", "1E-2"], pa.decimal128(6, 2)) == [
        Decimal("1.50"),
        Decimal("-12.25"),
        Decimal("0.00"),
        Decimal("0.01"),
    ]


@pytest.mark.parametrize(("text", "t"), [("abc", pa.int32()), ("1", pa.bool_()), ("2021.0", pa.int64()), ("2020-13-01", pa.date32())])
def test_unparseable_partition_values_name_the_column(text: str, t: pa.DataType) -> None:
    with pytest.raises(InvalidLogError, match="'col'"):
        parse_partition_strings(pa.array([text]), t, column="col")


def test_timestamps_in_every_accepted_format() -> None:
    utc = dt.UTC
    values = [
        "1970-01-01 00:00:00",
        "1970-01-01 00:00:00.123456",
        "2021-06-01 12:30:45.5",
        "1970-01-01T00:00:00.123456Z",
        "2024-01-01T10:00:00.000000Z",
        "2024-01-01T10:00:00+02:00",
        "2024-01-01 10:00:00.123456789",
        "9999-12-31 23:59:59.999999",
        "2021-01-01",
        "2021-01-01 10:00:00-05",
    ]
    assert _parse(values, TIMESTAMP_TYPE) == [
        dt.datetime(1970, 1, 1, tzinfo=utc),
        dt.datetime(1970, 1, 1, 0, 0, 0, 123456, tzinfo=utc),
        dt.datetime(2021, 6, 1, 12, 30, 45, 500000, tzinfo=utc),
        dt.datetime(1970, 1, 1, 0, 0, 0, 123456, tzinfo=utc),
        dt.datetime(2024, 1, 1, 10, tzinfo=utc),
        dt.datetime(2024, 1, 1, 8, tzinfo=utc),
        dt.datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=utc),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
        dt.datetime(2021, 1, 1, tzinfo=utc),
        dt.datetime(2021, 1, 1, 15, tzinfo=utc),
    ]
    ntz = _parse(["2021-06-01 12:30:45", "2021-06-01 12:30:45.000001", "2021-06-01T12:30:45"], TIMESTAMP_NTZ_TYPE)
    assert ntz == [
        dt.datetime(2021, 6, 1, 12, 30, 45),
        dt.datetime(2021, 6, 1, 12, 30, 45, 1),
        dt.datetime(2021, 6, 1, 12, 30, 45),
    ]


def test_binary_and_special_characters() -> None:
    # The JSON "\u0001\u0002\u0003" of the spec decodes to control characters: their bytes.
    spec_example = json.loads('"\\u0001\\u0002\\u0003"')
    assert _parse([spec_example, "héllo", "\\u00FF\\u0000"], pa.binary()) == [b"\x01\x02\x03", "héllo".encode(), b"\xff\x00"]
    special = ["A/A", "B B", "a=b", "100%", "ü€😀", " ", "__HIVE_DEFAULT_PARTITION__x"]
    assert _parse(special, pa.string()) == special


def test_parse_partition_values_of_many_files_by_physical_name() -> None:
    cm = {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-p"}
    fields = [_field("v", "long"), _field("p", "integer", True, cm), _field("d", "date")]
    metadata = _metadata(fields, ("p", "d"), **{"delta.columnMapping.mode": "name"})
    pv = pa.array(
        [[("col-p", "1"), ("d", "2020-01-01")], [("col-p", None), ("d", "")], [], None, [("p", "9")]],
        type=pa.map_(pa.string(), pa.string()),
    )
    parsed = parse_partition_values(pa.chunked_array([pv.slice(0, 2), pv.slice(2)]), metadata)
    assert parsed.type == pa.struct([pa.field("p", pa.int32()), pa.field("d", pa.date32())])
    assert parsed.to_pylist() == [
        {"p": 1, "d": dt.date(2020, 1, 1)},
        {"p": None, "d": None},
        {"p": None, "d": None},
        {"p": None, "d": None},
        {"p": None, "d": None},  # "p" is the logical name, not the physical key
    ]


    # A protocol without column mapping support: the mode is ignored, keys are logical names.
    no_mapping = Protocol(1, 2)
    assert parse_partition_values(pv, metadata, no_mapping).to_pylist()[4] == {"p": 9, "d": None}
    assert parse_partition_values(pv, metadata, Protocol(2, 5)).to_pylist()[0] == {"p": 1, "d": dt.date(2020, 1, 1)}

def test_parse_partition_values_of_sliced_maps_with_repeated_keys() -> None:
    metadata = _metadata([_field("v", "long"), _field("p", "integer"), _field("q", "string")], ("p", "q"))
    pv = pa.array(
        [[("p", "0")], [("p", "1"), ("p", "2"), ("q", None)], None, [("q", "x"), ("p", "3")], [("zz", "4")]],
        type=pa.map_(pa.string(), pa.string()),
    )
    # The first entry of a repeated key wins (as pc.map_lookup "first" does).
    assert parse_partition_values(pv.slice(1), metadata).to_pylist() == [
        {"p": 1, "q": None},
        {"p": None, "q": None},
        {"p": 3, "q": "x"},
        {"p": None, "q": None},
    ]
    assert len(parse_partition_values(pv.slice(2, 0), metadata)) == 0
    # Only nulls (no string values at all in the maps).
    only_nulls = pa.array([[("p", None)], [("q", None)]], type=pa.map_(pa.string(), pa.string()))
    assert parse_partition_values(only_nulls, metadata).to_pylist() == [{"p": None, "q": None}] * 2


def test_parse_partition_values_is_vectorised_over_many_rows() -> None:
    metadata = _metadata([_field("v", "long"), _field("ts", "timestamp"), _field("k", "string")], ("k", "ts"))
    n = 200_000
    distinct = pa.array(
        [[("k", f"key{i % 7}"), ("ts", "2024-01-01T00:00:00.000000Z" if i % 2 else "2024-01-01 00:00:00")] for i in range(14)],
        type=pa.map_(pa.string(), pa.string()),
    )
    rows = distinct.take(pa.array(np.arange(n) % 14))
    parsed = parse_partition_values(rows, metadata)
    assert len(parsed) == n
    assert parsed.field("ts").unique().to_pylist() == [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)]
    assert sorted(parsed.field("k").unique().to_pylist()) == [f"key{i}" for i in range(7)]


def test_unpartitioned_tables_give_an_empty_struct() -> None:
    metadata = _metadata([_field("v", "long")])
    pv = pa.array([[], []], type=pa.map_(pa.string(), pa.string()))
    parsed = parse_partition_values(pv, metadata)
    assert len(parsed) == 2 and parsed.type.num_fields == 0


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("delta-2.2.0-partitioned-types", [{"c1": 4, "c2": "c"}, {"c1": 5, "c2": "b"}, {"c1": 6, "c2": "a"}]),
        ("delta-0.8.0-null-partition", [{"k": "A"}, {"k": None}]),
        ("delta-0.8.0-numeric-partition", [{"x": 9, "y": 9.9}, {"x": 10, "y": 10.0}]),
        ("delta-0.8.0-special-partition", [{"x": "A/A"}, {"x": "B B"}]),
        ("table_with_column_mapping", [{"Company Very Short": "BMS"}, {"Company Very Short": "BME"}]),
    ],
)
def test_partition_values_of_real_tables(shared_tables: Path, table: str, expected: list[dict[str, Any]]) -> None:
    path = shared_tables / table
    parsed = parse_partition_values(_log_partition_values(path), _log_metadata(path))
    assert sorted(map(repr, parsed.to_pylist())) == sorted(map(repr, expected))


def test_partition_type_primitives_table_reads_strings_as_written(shared_tables: Path) -> None:
    path = shared_tables / "partition-type-primitives"
    parsed = parse_partition_values(_log_partition_values(path), _log_metadata(path))
    assert set(parsed.field("year").to_pylist()) == {"2020", "2021.0"}
    assert set(parsed.field("is_active").to_pylist()) == {"true", "false"}


# -------------------------------------------------------------------- serialisation


@pytest.mark.parametrize(
    ("value", "t", "text"),
    [
        (None, pa.int64(), None),
        ("", pa.string(), None),
        ("a b/c", pa.string(), "a b/c"),
        (True, pa.bool_(), "true"),
        (False, pa.bool_(), "false"),
        (-5, pa.int8(), "-5"),
        (1.0, pa.float64(), "1.0"),
        (1e10, pa.float64(), "1.0E10"),
        (0.0001, pa.float64(), "1.0E-4"),
        (123456.789, pa.float32(), "123456.79"),
        (float("nan"), pa.float64(), "NaN"),
        (float("-inf"), pa.float64(), "-Infinity"),
        (Decimal("1.5"), pa.decimal128(10, 3), "1.500"),
        (Decimal("-0.01"), pa.decimal128(4, 2), "-0.01"),
        (Decimal("12345678901234567890"), pa.decimal128(38, 0), "12345678901234567890"),
        (dt.date(2024, 2, 29), pa.date32(), "2024-02-29"),
        (dt.date(1, 1, 1), pa.date32(), "0001-01-01"),
        (dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone(dt.timedelta(hours=2))), TIMESTAMP_TYPE, "2024-01-01T08:00:00.000000Z"),
        (dt.datetime(1970, 1, 1, 0, 0, 0, 123456), TIMESTAMP_TYPE, "1970-01-01T00:00:00.123456Z"),
        (dt.datetime(2021, 6, 1, 12, 30, 45, 1), TIMESTAMP_NTZ_TYPE, "2021-06-01 12:30:45.000001"),
        (b"\x01\x02\x03", pa.binary(), "\x01\x02\x03"),
        (b"\xff\x00", pa.binary(), "\\u00FF\\u0000"),
        (pa.scalar(7, pa.int16()), pa.int16(), "7"),
    ],
)
def test_serialize_partition_value(value: Any, t: pa.DataType, text: str | None) -> None:
    assert serialize_partition_value(value, t) == text


def test_java_float_strings() -> None:
    assert [java_float_string(x) for x in [0.001, 9.99e-4, 1e7, 9999999.0, -0.0, 100.0]] == [
        "0.001",
        "9.99E-4",
        "1.0E7",
        "9999999.0",
        "-0.0",
        "100.0",
    ]
    assert java_float_string(0.1, single=True) == "0.1"
    assert java_float_string(3.5e38, single=True) == "Infinity"


def _round_trip(values: list[Any], t: pa.DataType) -> None:
    texts = [serialize_partition_value(v, t) for v in values]
    parsed = parse_partition_strings(pa.array(texts, pa.string()), t).to_pylist()
    expected = pa.array(values, t).to_pylist()
    assert parsed == expected


_finite = {"allow_nan": False, "allow_infinity": False}


@settings(max_examples=100, deadline=None)
@given(
    ints=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5),
    doubles=st.lists(st.floats(**_finite), max_size=5),
    floats=st.lists(st.floats(width=32, **_finite), max_size=5),
    decimals=st.lists(st.decimals(min_value=-(10**7), max_value=10**7, places=3, **_finite), max_size=5),
    dates=st.lists(st.dates(), max_size=5),
    stamps=st.lists(st.datetimes(timezones=st.just(dt.UTC)), max_size=5),
    naive=st.lists(st.datetimes(), max_size=5),
    texts=st.lists(st.text(min_size=1), max_size=5),
    blobs=st.lists(st.binary(min_size=1), max_size=5),
    bools=st.lists(st.booleans(), max_size=3),
)
def test_serialized_values_parse_back(
    ints: list[int],
    doubles: list[float],
    floats: list[float],
    decimals: list[Decimal],
    dates: list[dt.date],
    stamps: list[dt.datetime],
    naive: list[dt.datetime],
    texts: list[str],
    blobs: list[bytes],
    bools: list[bool],
) -> None:
    _round_trip(ints, pa.int64())
    _round_trip(doubles, pa.float64())
    _round_trip(floats, pa.float32())
    _round_trip(decimals, pa.decimal128(11, 3))
    _round_trip(dates, pa.date32())
    _round_trip(stamps, TIMESTAMP_TYPE)
    _round_trip(naive, TIMESTAMP_NTZ_TYPE)
    _round_trip(texts, pa.string())
    _round_trip(blobs, pa.binary())
    _round_trip(bools, pa.bool_())


def test_partition_values_written_by_delta_rs_parse_to_the_written_values(tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    columns = {
        "i": pa.array([1, -2, None], pa.int32()),
        "d": pa.array([dt.date(2020, 1, 1), dt.date(1, 1, 1), None]),
        "ts": pa.array([dt.datetime(2024, 1, 1, 10, 0, 0, 123456), dt.datetime(1970, 1, 1), None], TIMESTAMP_TYPE),
        "ntz": pa.array([dt.datetime(2024, 1, 1, 10, 0, 0, 1), dt.datetime(1970, 1, 1), None], TIMESTAMP_NTZ_TYPE),
        "s": pa.array(["a/b c", "x=y%", None]),
        "b": pa.array([True, False, None]),
        "f": pa.array([1.5, 1e20, None], pa.float64()),
        # delta-rs writes negative decimals wrongly ("0.-1"), so positive ones only.
        "dec": pa.array([Decimal("1.50"), Decimal("0.01"), None], pa.decimal128(5, 2)),
    }
    for name, values in columns.items():
        path = tmp_path / name
        deltalake.write_deltalake(str(path), pa.table({"v": pa.array([1, 2, 3], pa.int64()), name: values}), partition_by=[name])
        parsed = parse_partition_values(_log_partition_values(path), _log_metadata(path))
        assert sorted(parsed.field(name).to_pylist(), key=repr) == sorted(values.to_pylist(), key=repr), name
        # What we would write for the same values parses back the same way.
        ours = [serialize_partition_value(v, values.type) for v in values.to_pylist()]
        assert parse_partition_strings(pa.array(ours, pa.string()), values.type).to_pylist() == values.to_pylist()


_MAPS = st.lists(
    st.none() | st.lists(st.tuples(st.sampled_from(["p", "q", "r"]), st.none() | st.text(max_size=2)), max_size=4),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(maps=_MAPS, start=st.integers(0, 12), length=st.integers(0, 12))
def test_partition_lookup_agrees_with_arrow_map_lookup(maps: list[Any], start: int, length: int) -> None:
    metadata = _metadata([_field("p", "string"), _field("q", "string")], ("p", "q"))
    pv = pa.array(maps, type=pa.map_(pa.string(), pa.string())).slice(start, length)
    parsed = parse_partition_values(pv, metadata)
    for key in ("p", "q"):
        expected = [None if v == "" else v for v in pc.map_lookup(pv, pa.scalar(key), "first").to_pylist()] if len(pv) else []
        assert parsed.field(key).to_pylist() == expected
