"""The public read path stays off heavy imports: pandas never, sqlglot only for a filter beyond the simple shapes.

pyarrow imports pandas (~0.2 s, ~55 MB) on its first conversion of a Python object, and
``pyarrow.dataset`` imports it at once; ``np.unique`` imports ``numpy.ma`` (~30 ms).
``Snapshot.files()``, ``files(filter)`` and ``to_arrow()`` (with or without a filter) avoid
all three. Each case runs in a fresh interpreter, so that nothing an
earlier test imported hides an import.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from tests.conftest import shared_tables_dir

REPO = Path(__file__).resolve().parents[3]

# The child: imports the engine, then runs each step and reports the heavy modules loaded
# after it. Filters run last: the simple shapes (comparisons, AND / OR / NOT, IN, IS NULL)
# are read without sqlglot, anything else (a function call) loads it.
_CHILD = """
import json, sys
from airflow_delta.engine import DeltaTable
path, filters = sys.argv[1], json.loads(sys.argv[2])
HEAVY = ("pandas", "pyarrow.dataset", "numpy.ma", "sqlglot")
out = {"import": [m for m in HEAVY if m in sys.modules]}
snapshot = DeltaTable(path).snapshot()
files = snapshot.files()
out["files()"] = [m for m in HEAVY if m in sys.modules]
snapshot.files(stats=True)
out["files(stats=True)"] = [m for m in HEAVY if m in sys.modules]
rows = snapshot.to_arrow()
out["to_arrow()"] = [m for m in HEAVY if m in sys.modules]
out["file_uris()"] = (len(snapshot.file_uris()), [m for m in HEAVY if m in sys.modules])
out["counts"] = [files.num_rows, rows.num_rows]
for text in filters:
    snapshot.files(text)
    out["files(" + text + ")"] = [m for m in HEAVY if m in sys.modules]
    snapshot.to_arrow(filter=text)
    out["to_arrow(" + text + ")"] = [m for m in HEAVY if m in sys.modules]
print(json.dumps(out))
"""


def _heavy_imports(path: str, filters: list[str]) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, path, json.dumps(filters)],
        capture_output=True, text=True, check=False, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_light(found: dict[str, object], filters: list[str], first_sqlglot_filter: str | None = None) -> None:
    """Nothing heavy anywhere; sqlglot from ``first_sqlglot_filter`` on (filters run in order)."""
    assert found["import"] == [], found
    assert found["files()"] == [], found
    assert found["files(stats=True)"] == [], found
    assert found["to_arrow()"] == [], found
    assert found["file_uris()"][1] == [], found  # type: ignore[index]
    expected: list[str] = []
    for text in filters:
        if text == first_sqlglot_filter:
            expected = ["sqlglot"]  # sqlglot parses this filter; pandas and pyarrow.dataset stay out
        assert found[f"files({text})"] == expected, (text, found)
        assert found[f"to_arrow({text})"] == expected, (text, found)


def _typed_partitions_table(root: str) -> str:
    """A table partitioned by every kind of partition type, with nulls among the values."""
    schema = pa.schema([
        ("id", pa.int64()), ("name", pa.string()),
        ("p_int", pa.int32()), ("p_date", pa.date32()), ("p_ts", pa.timestamp("us", tz="UTC")),
        ("p_bool", pa.bool_()), ("p_dec", pa.decimal128(10, 2)), ("p_bin", pa.binary()),
        ("p_str", pa.string()), ("p_double", pa.float64()),
    ])
    partitions = [n for n in schema.names if n.startswith("p_")]
    table = DeltaTable.create(root, schema, partition_by=partitions)
    rows = pa.table({
        "id": pa.array([1, 2, 3], pa.int64()),
        "name": pa.array(["a", "b", None]),
        "p_int": pa.array([1, None, -7], pa.int32()),
        "p_date": pa.array([dt.date(2024, 1, 1), dt.date(1969, 12, 31), None]),
        "p_ts": pa.array([dt.datetime(2024, 1, 1, 12, 30, tzinfo=dt.UTC), None,
                          dt.datetime(1900, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")),
        "p_bool": pa.array([True, False, None]),
        "p_dec": pa.array([Decimal("1.50"), None, Decimal("-3.25")], pa.decimal128(10, 2)),
        "p_bin": pa.array([b"\x00\x01", b"ab", None]),
        "p_str": pa.array(["x y", "a%b/c", None]),
        "p_double": pa.array([1.5, None, -0.0]),
    }, schema=schema)
    table.append(rows)
    table.append(rows)
    return root


def test_typed_partitions_read_without_pandas(tmp_path: Path) -> None:
    root = _typed_partitions_table(str(tmp_path / "typed"))
    filters = ["p_int = 1", "p_date >= '2024-01-01' AND p_str = 'x y'", "id > 1 OR p_bool", "lower(p_str) = 'x y'"]
    found = _heavy_imports(root, filters)
    assert found["counts"] == [6, 6], found
    _assert_light(found, filters, first_sqlglot_filter="lower(p_str) = 'x y'")


@pytest.mark.parametrize(("table", "filters"), [
    ("delta-0.8.0-partitioned", ["year = '2020'", "month > '1' AND value IS NOT NULL"]),
    ("delta-2.2.0-partitioned-types", ["c1 = 4", "c2 IN ('a', 'c')"]),
    ("partition-type-primitives", ["is_active = 'true'", "event_date < '2023-01-03'"]),
    ("delta-0.8.0-null-partition", ["k IS NULL"]),
    ("delta-0.8.0-special-partition", ["x = 'A/A'"]),
    ("table_with_partitioning_mapping", ["newid = 1"]),
    ("table-with-dv-small", ["value > 3"]),
    ("checkpoint-v2-table", ["id > 2"]),
    ("delta-1.2.1-only-struct-stats", ["integer > 3"]),
    ("table_with_edge_timestamps", []),
])
def test_shared_tables_read_without_pandas(table: str, filters: list[str]) -> None:
    # Spark- and delta-rs-written tables: partitions, DVs, V2 checkpoints, struct-only
    # checkpoint statistics (nanosecond timestamps), column mapping.
    path = shared_tables_dir() / table
    if not path.is_dir():
        pytest.skip(f"shared table {table} not present")
    _assert_light(_heavy_imports(str(path), filters), filters)
