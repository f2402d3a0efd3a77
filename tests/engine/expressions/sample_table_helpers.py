"""A table schema and rows shared by the filter tests: every type a filter meets, NULLs and a NaN."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa

UTC = dt.UTC

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("dt", pa.string()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", "UTC")),
        ("amt", pa.decimal128(8, 2)),
        ("x", pa.float64()),
        ("s", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("flag", pa.bool_()),
        ("My Col", pa.int32()),
        ("small", pa.int8()),
    ]
)

ROWS = pa.table(
    {
        "id": [1, 2, None, 40],
        "dt": ["2024-01-01", "2024-01-02", None, "x"],
        "d": [dt.date(2024, 1, 1), None, dt.date(2024, 2, 1), dt.date(2023, 1, 1)],
        "ts": pa.array(
            [dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 1, 12, tzinfo=UTC), None, dt.datetime(2023, 6, 1, tzinfo=UTC)],
            pa.timestamp("us", "UTC"),
        ),
        "amt": pa.array([Decimal("1.50"), Decimal("2.00"), None, Decimal("-3.25")], pa.decimal128(8, 2)),
        "x": [1.0, float("nan"), None, 2.5],
        "s": [{"a": 1, "b": "q"}, None, {"a": None, "b": "r"}, {"a": 4, "b": "abc"}],
        "flag": [True, False, None, True],
        "My Col": pa.array([1, 2, 3, 4], pa.int32()),
        "small": pa.array([1, 2, 3, 4], pa.int8()),
    },
    schema=SCHEMA,
)
