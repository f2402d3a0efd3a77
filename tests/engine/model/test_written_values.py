"""Values we write into the log: 38-digit decimals, zero float bounds, NaN, raw UTF-8.

Rules (issue 10, items 12-14): a decimal(38, s) renders every digit whatever Python's
decimal context says; a zero maximum is +0.0 and a zero minimum -0.0 (parquet-format);
NaN is above every number (Spark), so a column holding NaN has no maximum we could write
that every reader orders right, and its minimum is the smallest other value; JSON text is
raw UTF-8, never ``\\u`` escapes.
"""

from __future__ import annotations

import decimal
import io
import json
import math
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.engine.model.actions import AddFile, action_to_line
from airflow_delta.engine.model.json_text import json_text, utf8_bytes
from airflow_delta.engine.model.partition_values import (
    decimal_string,
    parse_partition_strings,
    serialize_partition_value,
)
from airflow_delta.engine.model.stats_compute import compute_stats, stats_from_parquet_metadata
from airflow_delta.engine.model.stats_parse import parse_stats
from tests.engine.model.stats_builders import _field, _metadata

# Every digit count a decimal128 holds, at every scale, including the 29..38 digits that
# Python's default 28-digit context cannot quantize.
decimals_38 = st.integers(min_value=0, max_value=38).flatmap(
    lambda scale: st.tuples(
        st.just(scale),
        st.integers(min_value=-(10**38) + 1, max_value=10**38 - 1),
    )
)


def _decimal_of(unscaled: int, scale: int) -> Decimal:
    return Decimal(unscaled).scaleb(-scale, context=decimal.Context(prec=100))


@given(decimals_38)
def test_decimal_string_renders_every_digit(case: tuple[int, int]) -> None:
    scale, unscaled = case
    value = _decimal_of(unscaled, scale)
    text = decimal_string(value, scale)
    # Exact: the text parses back to the same unscaled integer, with exactly `scale` fractional digits.
    digits = text.lstrip("-")
    assert ("." in digits) == (scale > 0)
    if scale:
        assert len(digits.split(".")[1]) == scale
    assert int(text.replace(".", "")) == unscaled


def test_decimal_string_ignores_a_narrow_ambient_context() -> None:
    value = Decimal("12345678901234567890123456789012.345678")
    with decimal.localcontext(decimal.Context(prec=5)):
        assert decimal_string(value, 6) == "12345678901234567890123456789012.345678"
        assert decimal_string(value, 8) == "12345678901234567890123456789012.34567800"


@given(decimals_38)
def test_decimal_38_statistics_and_partition_values_round_trip(case: tuple[int, int]) -> None:
    scale, unscaled = case
    t = pa.decimal128(38, scale)
    value = _decimal_of(unscaled, scale)
    metadata = _metadata([_field("x", f"decimal(38,{scale})")])
    stats = compute_stats(pa.table({"x": pa.array([value], t)}), metadata)
    parsed = parse_stats(pa.array([stats]), metadata)
    assert parsed.field("minValues").field("x")[0].as_py() == value
    assert parsed.field("maxValues").field("x")[0].as_py() == value
    text = serialize_partition_value(value, t)
    assert parse_partition_strings(pa.array([text]), t)[0].as_py() == value


@pytest.mark.parametrize(
    ("values", "low", "high"),
    [
        ([0.0], "-0.0", "0.0"),
        ([-0.0], "-0.0", "0.0"),
        ([-0.0, 0.0], "-0.0", "0.0"),
        ([0.0, -0.0, 0.0], "-0.0", "0.0"),
        ([-1.0, -0.0], "-1.0", "0.0"),
        ([0.0, 2.5], "-0.0", "2.5"),
        ([-0.0, float("nan")], "-0.0", None),
        ([1.0, 5.0, float("nan")], "1.0", None),
    ],
)
@pytest.mark.parametrize("type_name", ["double", "float"])
def test_zero_and_nan_bounds(values: list[float], low: str | None, high: str | None, type_name: str) -> None:
    arrow_type = pa.float64() if type_name == "double" else pa.float32()
    metadata = _metadata([_field("x", type_name)])
    stats = compute_stats(pa.table({"x": pa.array(values, arrow_type)}), metadata)
    mins = json.loads(stats).get("minValues", {})
    maxs = json.loads(stats).get("maxValues", {})
    # Compare the JSON text: -0.0 == 0.0 as numbers.
    assert (f'"minValues":{{"x":{low}}}' in stats) if low is not None else "x" not in mins
    assert (f'"maxValues":{{"x":{high}}}' in stats) if high is not None else "x" not in maxs


@given(st.lists(st.floats(allow_nan=True, allow_infinity=False, width=64), min_size=1, max_size=20))
def test_float_bounds_hold_every_value_in_total_order(values: list[float]) -> None:
    """Bounds compared as readers with a total float order compare them: -0.0 < +0.0 < NaN."""
    metadata = _metadata([_field("x", "double")])
    stats = json.loads(compute_stats(pa.table({"x": pa.array(values, pa.float64())}), metadata))
    key = lambda v: (math.isnan(v), v, math.copysign(1.0, v))  # noqa: E731
    if "x" in stats.get("minValues", {}):
        assert all(key(stats["minValues"]["x"]) <= key(v) for v in values)
    if "x" in stats.get("maxValues", {}):
        assert all(key(stats["maxValues"]["x"]) >= key(v) for v in values)


ASTRAL = ["😀", "a😀b", "𝄞 clef", "\U0010ffff", "日本語", "é", "x\u2028y"]


@pytest.mark.parametrize("text", ASTRAL)
def test_log_json_is_raw_utf8(text: str) -> None:
    add = AddFile(
        path="p=x/f.parquet",
        partition_values={"p": text},
        size=1,
        modification_time=0,
        data_change=True,
        stats=compute_stats(pa.table({"s": [text]}), _metadata([_field("s", "string")])),
    )
    line = action_to_line(add)
    assert "\\u" not in line.replace("\\\\u", "")
    assert text in line
    assert json.loads(line)["add"]["partitionValues"]["p"] == text
    assert json.loads(json.loads(line)["add"]["stats"])["minValues"]["s"] == text
    assert json_text({"k": text}) == '{"k":' + '"' + text + '"}'


def test_a_lone_surrogate_is_a_typed_error() -> None:
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        utf8_bytes(json_text({"userMetadata": "bad \ud800"}), "userMetadata")


@pytest.mark.parametrize(("values", "low"), [([0.0, 1.0], "-0.0"), ([-0.0, 1.0], "-0.0"), ([-2.0, 0.0], "-2.0")])
def test_footer_zero_minimum_is_negative_zero(values: list[float], low: str) -> None:
    """A footer written by another writer may hold +0.0 as the minimum; we record -0.0, as parquet-format says."""
    buffer = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array(values, pa.float64())}), buffer)
    footer = pq.ParquetFile(io.BytesIO(buffer.getvalue())).metadata
    stats = stats_from_parquet_metadata(footer, _metadata([_field("x", "double")]))
    assert f'"minValues":{{"x":{low}}}' in stats
