"""Computing per-file statistics: from data (as Delta writes them) and from parquet footers; round trips."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.model.schema import schema_to_arrow
from airflow_delta.engine.model.stats_compute import (
    compute_stats,
    stats_from_parquet_metadata,
    truncate_max_string,
    truncate_min_string,
)
from airflow_delta.engine.model.stats_parse import parse_stats
from tests.engine.model.stats_builders import ALL_TYPES, UTC, _field, _metadata

# --------------------------------------------------------------------------- compute_stats


def _all_types_table() -> pa.Table:
    schema = pa.schema([f for f in schema_to_arrow(ALL_TYPES.schema_string) if f.name != "p"])
    return pa.table(
        {
            "i": [3, None, -1],
            "l": [10, 20, None],
            "f": [1.5, None, 0.25],
            "d": [1.5, float("nan"), -2.0],
            "dec": [Decimal("1.5"), Decimal("-2.25"), None],
            "s": ["b" * 40, "é", None],
            "b": [True, None, False],
            "bin": [b"x", None, b"y"],
            "dt": [dt.date(2024, 1, 1), None, dt.date(1969, 12, 31)],
            "ts": [dt.datetime(2024, 1, 1, 0, 0, 0, 999999, tzinfo=UTC), None, dt.datetime(1969, 12, 31, 23, 59, 59, 999500, tzinfo=UTC)],
            "ntz": [dt.datetime(2024, 1, 1, 12), None, None],
            "st": [{"x": 1, "arr": [1]}, None, {"x": None, "arr": None}],
            "m": [[("k", "v")], None, None],
        },
        schema=schema,
    )


def test_compute_stats_as_delta_writes_them() -> None:
    stats = json.loads(compute_stats(_all_types_table(), ALL_TYPES))
    assert stats["numRecords"] == 3
    assert stats["minValues"] == {
        "i": -1,
        "l": 10,
        "f": 0.25,
        "d": -2.0,
        "dec": -2.25,
        "s": "b" * 32,
        "dt": "1969-12-31",
        "ts": "1969-12-31T23:59:59.999Z",
        "ntz": "2024-01-01T12:00:00.000",
        "st": {"x": 1},
    }
    # "é" > "bbb...": the maximum is not truncated; d has a NaN so no maximum.
    assert stats["maxValues"] == {
        "i": 3,
        "l": 20,
        "f": 1.5,
        "dec": 1.5,
        "s": "é",
        "dt": "2024-01-01",
        "ts": "2024-01-01T00:00:00.999Z",
        "ntz": "2024-01-01T12:00:00.000",
        "st": {"x": 1},
    }
    assert stats["nullCount"] == {
        "i": 1, "l": 1, "f": 1, "d": 0, "dec": 1, "s": 1, "b": 1, "bin": 1, "dt": 1, "ts": 1, "ntz": 2,
        "st": {"x": 2, "arr": 2}, "m": 2,
    }
    assert "tightBounds" not in stats
    text = compute_stats(_all_types_table(), ALL_TYPES)
    assert '"dec":1.50000' in text  # decimals keep their scale, as Spark writes them
    assert text.startswith('{"numRecords":3,"minValues":')


def test_string_truncation_keeps_valid_bounds() -> None:
    assert truncate_min_string("a" * 40) == "a" * 32
    assert truncate_max_string("a" * 40) == "a" * 32 + "\ufffd"
    assert truncate_max_string("short") == "short"
    # Characters at or above the tie-breaker are kept, so the bound stays above the value.
    value = "a" * 32 + "\uffff\U0001d11eb"
    bound = truncate_max_string(value)
    assert bound == "a" * 32 + "\uffff\U0001d11e\ufffd"
    assert bound.encode() > value.encode()
    assert truncate_max_string("a" * 32 + "\uffff") == "a" * 32 + "\uffff\ufffd"


def test_compute_stats_indexed_columns_and_column_mapping() -> None:
    metadata = _metadata(
        [
            _field("a", "long", {"delta.columnMapping.physicalName": "col-a", "delta.columnMapping.id": 1}),
            _field("s", {"type": "struct", "fields": [_field("x", "long", {"delta.columnMapping.physicalName": "col-x", "delta.columnMapping.id": 3})]}, {"delta.columnMapping.physicalName": "col-s", "delta.columnMapping.id": 2}),
            _field("c", "string", {"delta.columnMapping.physicalName": "col-c", "delta.columnMapping.id": 4}),
        ],
        configuration={"delta.columnMapping.mode": "name", "delta.dataSkippingNumIndexedCols": "2"},
    )
    data = pa.table({"a": [1, 2], "s": [{"x": 5}, {"x": 6}], "c": ["u", "v"]})
    stats = json.loads(compute_stats(data, metadata))
    assert stats == {
        "numRecords": 2,
        "minValues": {"col-a": 1, "col-s": {"col-x": 5}},
        "maxValues": {"col-a": 2, "col-s": {"col-x": 6}},
        "nullCount": {"col-a": 0, "col-s": {"col-x": 0}},
    }
    assert json.loads(compute_stats(data, metadata, num_indexed_cols=1))["nullCount"] == {"col-a": 0}
    assert json.loads(compute_stats(data, metadata, num_indexed_cols=-1))["nullCount"] == {"col-a": 0, "col-s": {"col-x": 0}, "col-c": 0}
    assert json.loads(compute_stats(data, metadata, num_indexed_cols=0)) == {"numRecords": 2}
    by_name = json.loads(compute_stats(data, metadata, stats_columns=["C", "s.x"]))
    assert by_name["minValues"] == {"col-s": {"col-x": 5}, "col-c": "u"}
    assert json.loads(compute_stats(data, metadata, tight_bounds=True))["tightBounds"] is True
    # Round trip back to logical names.
    parsed = parse_stats([compute_stats(data, metadata, num_indexed_cols=-1)], metadata).to_pylist()[0]
    assert parsed["maxValues"] == {"a": 2, "s": {"x": 6}, "c": "v"}


def test_missing_and_all_null_columns() -> None:
    metadata = _metadata([_field("a", "long"), _field("b", "string")])
    stats = json.loads(compute_stats(pa.table({"a": pa.array([None, None], pa.int64())}), metadata))
    assert stats == {"numRecords": 2, "nullCount": {"a": 2, "b": 2}}
    assert json.loads(compute_stats(pa.table({"a": pa.array([], pa.int64())}), metadata)) == {"numRecords": 0, "nullCount": {"a": 0, "b": 0}}


def test_float_infinities_and_all_nan() -> None:
    metadata = _metadata([_field("x", "double"), _field("y", "double")])
    stats = json.loads(compute_stats(pa.table({"x": [float("-inf"), 1.0], "y": [float("nan"), float("nan")]}), metadata))
    # -inf has no JSON number and an all-NaN column has no bounds: no minimum at all.
    assert "minValues" not in stats
    assert stats["maxValues"] == {"x": 1.0}
    assert stats["nullCount"] == {"x": 0, "y": 0}


# --------------------------------------------------------------------------- footers


def test_stats_from_parquet_footer() -> None:
    table = _all_types_table()
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=2)
    footer = pq.ParquetFile(io.BytesIO(buffer.getvalue())).metadata
    stats = json.loads(stats_from_parquet_metadata(footer, ALL_TYPES))
    computed = json.loads(compute_stats(table, ALL_TYPES))
    assert stats["numRecords"] == 3
    # Footers give the same minima; maxima except float/double (NaN is not in footers).
    assert stats["minValues"] == computed["minValues"]
    expected_max = {k: v for k, v in computed["maxValues"].items() if k not in ("f", "d")}
    assert stats["maxValues"] == expected_max
    # Null counts of leaves; arrays and maps (leaf counts are not row counts) are left out.
    expected_nulls = {k: v for k, v in computed["nullCount"].items() if k != "m"}
    expected_nulls["st"] = {"x": 2}
    assert stats["nullCount"] == expected_nulls


def test_footer_without_statistics_leaves_columns_out() -> None:
    metadata = _metadata([_field("a", "long"), _field("b", "long")])
    buffer = io.BytesIO()
    pq.write_table(pa.table({"a": [1, 2]}), buffer, write_statistics=False)
    footer = pq.ParquetFile(io.BytesIO(buffer.getvalue())).metadata
    # a has no statistics at all; b is not in the file, so it is all null.
    assert json.loads(stats_from_parquet_metadata(footer, metadata)) == {"numRecords": 2, "nullCount": {"b": 2}}


# --------------------------------------------------------------------------- round trip (hypothesis)

ROUND_TRIP_META = _metadata(
    [_field("i", "long"), _field("s", "string"), _field("dt", "date"), _field("ts", "timestamp"), _field("dec", "decimal(10,3)"), _field("x", "double"), _field("st", {"type": "struct", "fields": [_field("n", "integer")]})]
)
ROUND_TRIP_SCHEMA = schema_to_arrow(ROUND_TRIP_META.schema_string)

round_trip_rows = st.lists(
    st.fixed_dictionaries(
        {
            "i": st.none() | st.integers(-(2**63), 2**63 - 1),
            "s": st.none() | st.text(max_size=40),
            "dt": st.none() | st.dates(),
            "ts": st.none() | st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)).map(lambda d: d.replace(tzinfo=UTC)),
            "dec": st.none() | st.decimals(min_value=-(10**7) + 1, max_value=10**7 - 1, places=3, allow_nan=False),
            "x": st.none() | st.floats(allow_nan=False, allow_infinity=False),
            "st": st.none() | st.fixed_dictionaries({"n": st.none() | st.integers(-(2**31), 2**31 - 1)}),
        }
    ),
    min_size=1,
    max_size=20,
)


def _floor_ms(value: dt.datetime) -> dt.datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=round_trip_rows)
def test_compute_then_parse_gives_true_bounds_and_null_counts(rows: list[dict]) -> None:
    table = pa.Table.from_pylist(rows, schema=ROUND_TRIP_SCHEMA)
    parsed = parse_stats([compute_stats(table, ROUND_TRIP_META)], ROUND_TRIP_META).to_pylist()[0]
    assert parsed["numRecords"] == len(rows)
    for column in ("i", "s", "dt", "ts", "dec", "x"):
        values = [r[column] for r in rows if r[column] is not None]
        assert parsed["nullCount"][column] == len(rows) - len(values)
        low, high = (parsed["minValues"] or {}).get(column), (parsed["maxValues"] or {}).get(column)
        if not values:
            assert low is None and high is None
            continue
        if column == "s":
            true_low = min(values, key=lambda v: v.encode())
            true_high = max(values, key=lambda v: v.encode())
            assert low == true_low[:32]
            assert high.encode() >= true_high.encode()
            if len(true_high) <= 32:
                assert high == true_high
        elif column == "ts":
            assert low == _floor_ms(min(values))
            assert high == _floor_ms(max(values))
        elif column == "x":
            assert low == min(values) and high == max(values)
            # parquet-format: a zero minimum is -0.0 and a zero maximum +0.0, whatever zeros the rows hold.
            assert low != 0 or math.copysign(1, low) == -1
            assert high != 0 or math.copysign(1, high) == 1
        else:
            assert low == min(values) and high == max(values)
    nested = [r["st"]["n"] for r in rows if r["st"] is not None and r["st"]["n"] is not None]
    assert parsed["nullCount"]["st"]["n"] == len(rows) - len(nested)
    if nested:
        assert parsed["minValues"]["st"]["n"] == min(nested)
        assert parsed["maxValues"]["st"]["n"] == max(nested)
