"""Reading per-file statistics: the Arrow stats type and parsing stats JSON, on real tables too."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.model.stats_parse import parse_num_records, parse_stats, stats_type
from tests.engine.model.stats_builders import ALL_TYPES, UTC, _field, _log_actions, _metadata

# --------------------------------------------------------------------------- stats_type


def test_stats_type_mirrors_the_schema_without_partition_columns() -> None:
    t = stats_type(ALL_TYPES)
    assert [f.name for f in t] == ["numRecords", "minValues", "maxValues", "nullCount", "tightBounds"]
    assert t.field("numRecords").type == pa.int64()
    assert t.field("tightBounds").type == pa.bool_()
    min_values = t.field("minValues").type
    assert min_values == t.field("maxValues").type
    # Only types Delta keeps min/max for; booleans, binary, arrays and maps have none.
    assert [f.name for f in min_values] == ["i", "l", "f", "d", "dec", "s", "dt", "ts", "ntz", "st"]
    assert min_values.field("dec").type == pa.decimal128(8, 5)
    assert min_values.field("ts").type == pa.timestamp("us", "UTC")
    assert min_values.field("ntz").type == pa.timestamp("us")
    assert min_values.field("st").type == pa.struct([("x", pa.int16())])
    null_count = t.field("nullCount").type
    assert [f.name for f in null_count] == ["i", "l", "f", "d", "dec", "s", "b", "bin", "dt", "ts", "ntz", "st", "m"]
    assert null_count.field("st").type == pa.struct([("x", pa.int64()), ("arr", pa.int64())])
    assert all(null_count.field(n).type == pa.int64() for n in ("i", "m", "bin"))


# --------------------------------------------------------------------------- parse_stats


def test_parse_stats_of_real_tables(shared_tables: Path) -> None:
    metadata, adds = _log_actions(shared_tables / "delta-1.2.1-only-struct-stats")
    parsed = parse_stats(pa.array([a.get("stats") for a in adds], pa.string()), metadata)
    assert parsed.type == stats_type(metadata)
    first = parsed.to_pylist()[0]
    raw = json.loads(adds[0]["stats"])
    assert first["numRecords"] == raw["numRecords"]
    assert first["minValues"]["decimal"] == Decimal("-5.67800")
    assert first["minValues"]["timestamp"] == dt.datetime(2022, 10, 24, 22, 59, 32, 846000, tzinfo=UTC)
    assert first["minValues"]["date"] == dt.date(2022, 10, 24)
    assert first["minValues"]["nested_struct"] == {"struct_element": {"nested_struct_element": "nested_struct_value"}}
    assert first["nullCount"]["null"] == 1
    assert first["nullCount"]["map"] == 0
    # Integer minima over the files are the integers the log recorded.
    assert [r["minValues"]["integer"] for r in parsed.to_pylist()] == [json.loads(a["stats"])["minValues"]["integer"] for a in adds]


def test_parse_stats_edge_timestamps_and_non_null_struct(shared_tables: Path) -> None:
    metadata, adds = _log_actions(shared_tables / "table_with_edge_timestamps")
    rows = parse_stats([a["stats"] for a in adds], metadata).to_pylist()
    assert rows[0]["maxValues"]["BIG_DATE"] == dt.datetime(9999, 12, 31, tzinfo=UTC)
    metadata, adds = _log_actions(shared_tables / "table_with_null_stats_in_notnull_struct")
    rows = parse_stats([a["stats"] for a in adds], metadata).to_pylist()
    assert [r["minValues"]["s"]["l"] for r in rows] == [10, 20]
    assert rows[0]["nullCount"]["s"] == {"l": 0, "b": 0}


def test_parse_stats_maps_physical_names_under_column_mapping(shared_tables: Path) -> None:
    metadata, adds = _log_actions(shared_tables / "table_with_column_mapping")
    rows = parse_stats([a["stats"] for a in adds], metadata).to_pylist()
    assert rows[0]["minValues"] == {"Super Name": json.loads(adds[0]["stats"])["minValues"]["col-3877fd94-0973-4941-ac6b-646849a1ff65"]}
    # The partition column is not in the stats type.
    assert "Company Very Short" not in stats_type(metadata).field("nullCount").type.names


def test_parse_stats_null_bad_and_odd_documents() -> None:
    metadata = _metadata([_field("a", "long"), _field("d", "date"), _field("x", "double"), _field("dec", "decimal(4,2)"), _field("t", "timestamp")])
    docs = [
        None,
        "",
        "  ",
        "not json",
        "[1, 2]",
        '{"numRecords": "many"}',
        '{"numRecords": 2, "minValues": {"a": 1.5, "d": "2024-02-30", "x": "NaN", "dec": 1.234}, "maxValues": {"a": "x", "x": NaN, "dec": 12.5}}',
        '{\n  "numRecords": 3,\n  "minValues": {"t": "2024-01-01T01:00:00.000+01:00", "dec": 1}\n}',
        '{"numRecords": 4, "unknownStat": {"a": 1}, "nullCount": {"a": 4, "zz": 1}, "tightBounds": false}',
    ]
    rows = parse_stats(pa.array(docs, pa.string()), metadata).to_pylist()
    assert rows[:5] == [None] * 5
    assert rows[5]["numRecords"] is None
    assert rows[6]["numRecords"] == 2
    assert rows[6]["minValues"] == {"a": None, "d": None, "x": None, "dec": None, "t": None}
    # A bound that does not parse for its column (dec's minimum 1.234 in decimal(4,2))
    # makes that column's statistics unknown, the well-formed maximum 12.5 included.
    assert rows[6]["maxValues"] == {"a": None, "d": None, "x": None, "dec": None, "t": None}
    assert rows[7]["minValues"]["t"] == dt.datetime(2024, 1, 1, tzinfo=UTC)
    assert rows[7]["minValues"]["dec"] == Decimal("1.00")
    assert rows[8]["nullCount"]["a"] == 4
    assert rows[8]["tightBounds"] is False


def test_parse_stats_of_many_rows_isolates_a_bad_chunk() -> None:
    metadata = _metadata([_field("a", "long")])
    good = '{"numRecords":1,"minValues":{"a":%d},"maxValues":{"a":%d},"nullCount":{"a":0}}'
    docs = [good % (i, i) for i in range(20_000)]
    docs[12_345] = '{"numRecords":1,"minValues":{"a":"oops"}}'
    parsed = parse_stats(pa.chunked_array([docs[:7000], docs[7000:]]), metadata)
    mins = parsed.field("minValues").field("a").to_pylist()
    assert mins[12_345] is None
    assert mins[:5] == [0, 1, 2, 3, 4]
    assert mins[19_999] == 19_999
    assert parse_stats([], metadata).type == stats_type(metadata)


@pytest.mark.parametrize("table_name", ["delta-1.2.1-only-struct-stats", "http_requests", "table_with_column_mapping"])
def test_parse_every_stats_string_of_real_tables(shared_tables: Path, table_name: str) -> None:
    metadata, adds = _log_actions(shared_tables / table_name)
    docs = [a.get("stats") for a in adds]
    parsed = parse_stats(docs, metadata)
    assert len(parsed) == len(docs)
    records = parsed.field("numRecords").to_pylist()
    assert records == [json.loads(d)["numRecords"] if d else None for d in docs]


# ------------------------------------------------------------------ numRecords alone

_NUM_RECORDS_DOCS = st.one_of(
    st.none(),
    st.sampled_from(["", "  ", "{}", "[]", "7", "null", '{"numRecords": null}', '{"numRecords": "12"}',
                     '{"numRecords": 1.5}', '{"numRecords": 1e3}', '{"numRecords": 99999999999999999999}',
                     '{"numRecords": 123456789012345678}', '{"numRecords": -3}', '{"numRecords":5}',
                     '\n{ "numRecords" :\n 8 ,"minValues":{}}', '{"minValues": {"numRecords": 4}, "numRecords": 9}',
                     '{"numRecords": 2, "numRecords": 3}', '{"numRecords": 6', '{"numRecords": 10}x']),
    st.builds(lambda n, first, spaced: json.dumps(
        {"numRecords": n, "minValues": {"a": 1}} if first else {"minValues": {"a": 1}, "numRecords": n},
        separators=(", ", ": ") if spaced else (",", ":")),
        st.integers(-(2**63), 2**63 - 1), st.booleans(), st.booleans()),
)


@settings(max_examples=200, deadline=None)
@given(docs=st.lists(_NUM_RECORDS_DOCS, max_size=12))
def test_num_records_alone_equal_the_full_parse(docs: list[str | None]) -> None:
    """Taking numRecords without parsing the documents gives, row for row, what the full parse says."""
    metadata = _metadata([_field("a", "long")])
    full = pa.compute.struct_field(parse_stats(docs, metadata), "numRecords") if docs else pa.nulls(0, pa.int64())
    assert parse_num_records(docs).to_pylist() == full.to_pylist()


def test_date_bounds_under_column_mapping_are_read_by_physical_name() -> None:
    # A date column's bounds are parsed after the read; under column mapping the raw
    # document names it physically, and a bound that is no date forgets the column's stats.
    mapped = {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-d"}
    metadata = _metadata(
        [_field("d", "date", mapped), _field("i", "long", {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-i"})],
        configuration={"delta.columnMapping.mode": "name"},
    )
    documents = [
        json.dumps({"numRecords": 2, "minValues": {"col-d": "2024-01-01", "col-i": 1}, "maxValues": {"col-d": "2024-02-01", "col-i": 5}, "nullCount": {"col-d": 0, "col-i": 0}}),
        json.dumps({"numRecords": 1, "minValues": {"col-d": "not a date", "col-i": 1}, "maxValues": {"col-d": "2024-02-01", "col-i": 1}, "nullCount": {"col-d": 0, "col-i": 0}}),
        json.dumps({"numRecords": 1, "nullCount": {"col-d": 1, "col-i": 1}}),
    ]
    stats = parse_stats(documents, metadata).to_pylist()
    assert stats[0]["minValues"] == {"d": dt.date(2024, 1, 1), "i": 1}
    assert stats[0]["maxValues"] == {"d": dt.date(2024, 2, 1), "i": 5}
    assert stats[1]["minValues"]["d"] is None and stats[1]["maxValues"]["d"] is None and stats[1]["nullCount"]["d"] is None
    assert stats[1]["minValues"]["i"] == 1
    assert stats[2]["minValues"] is None and stats[2]["nullCount"] == {"d": 1, "i": 1}
