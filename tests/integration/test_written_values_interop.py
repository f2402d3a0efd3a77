"""Tables we write hold values every reader reads right (issue 10, items 12-14).

38-digit decimals in statistics and partition values, astral characters in partition
values and string statistics (raw UTF-8 JSON), and zero float bounds: each table is read
back by delta-rs and delta-kernel-rs (tests/oracles.py), and delta-rs's file skipping
over our statistics returns every matching row.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaTable
from tests.oracles import assert_oracles_read, read_with_deltars

deltalake = pytest.importorskip("deltalake")

DECIMALS = [
    Decimal("12345678901234567890123456789012.345678"),
    Decimal("-99999999999999999999999999999999.999999"),
    Decimal("0.000001"),
    Decimal("99999999999999999999999999999999.999999"),
]
KEYS = [
    Decimal("12345678901234567890123456789012345678"),
    Decimal("-99999999999999999999999999999999999999"),
    Decimal("1"),
    Decimal("12345678901234567890123456789012345678"),
]


def _decimal_table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "d": pa.array(DECIMALS, pa.decimal128(38, 6)),
            "k": pa.array(KEYS, pa.decimal128(38, 0)),
        }
    )


def _count(path: str, where: str) -> int:
    table = deltalake.DeltaTable(path)
    reader = deltalake.QueryBuilder().register("t", table).execute(f"SELECT count(*) AS n FROM t WHERE {where}")
    return pa.table(reader.read_all()).column(0)[0].as_py()


@pytest.mark.parametrize("partition_by", [[], ["k"]])
def test_decimal_38_table_is_written_and_read_by_both_oracles(table_path: str, partition_by: list[str]) -> None:
    data = _decimal_table()
    table = DeltaTable.create(table_path, data.schema, partition_by=partition_by)
    table.append(data)
    assert_oracles_read(table_path, data.to_pylist())
    # delta-rs skips files with our 38-digit bounds and still finds the rows.
    assert _count(table_path, "d > CAST('99999999999999999999999999999999.999998' AS DECIMAL(38, 6))") == 1
    assert _count(table_path, "k = CAST('12345678901234567890123456789012345678' AS DECIMAL(38, 0))") == 2
    # Our own statistics parse back at full precision: file skipping keeps exactly the matching file(s).
    table.checkpoint()
    snapshot = DeltaTable(table_path).snapshot()
    assert snapshot.to_arrow(filter="d > 99999999999999999999999999999999.999998").column("id").to_pylist() == [4]
    kept = snapshot.files("d < 0")
    assert kept.num_rows == (1 if partition_by else snapshot.files().num_rows)


@pytest.mark.parametrize("partition_by", [None, ["k"]])
def test_rewrite_delete_on_a_deltars_decimal_38_table(table_path: str, partition_by: list[str] | None) -> None:
    """A rewrite DELETE on a table delta-rs wrote, holding 38-digit decimals: the new file's stats render every digit."""
    data = _decimal_table()
    deltalake.write_deltalake(table_path, data, partition_by=partition_by)
    result = DeltaTable(table_path).delete("id = 3")
    assert result.version == 1
    remaining = [row for row in data.to_pylist() if row["id"] != 3]
    assert_oracles_read(table_path, remaining)
    assert DeltaTable(table_path).snapshot().to_arrow().sort_by("id").to_pylist() == remaining


def test_deletion_vector_delete_on_a_decimal_38_table(table_path: str) -> None:
    data = _decimal_table()
    table = DeltaTable.create(
        table_path, data.schema, partition_by=["k"], properties={"delta.enableDeletionVectors": "true"}
    )
    table.append(data)
    table.delete("d < 0")
    assert_oracles_read(table_path, [row for row in data.to_pylist() if row["d"] >= 0])


ASTRAL_VALUES = ["a😀b", "😀", "𝄞 clef", "\U0010ffff", "日本", "zz"]


def test_astral_partition_values_and_string_stats_read_identically(table_path: str) -> None:
    data = pa.table(
        {
            "p": ASTRAL_VALUES,
            "s": [v * 2 for v in ASTRAL_VALUES],
            "n": pa.array(range(len(ASTRAL_VALUES)), pa.int64()),
        }
    )
    table = DeltaTable.create(table_path, data.schema, partition_by=["p"])
    table.append(data)
    log_text = "".join(p.read_text("utf-8") for p in sorted(Path(table_path, "_delta_log").glob("*.json")))
    assert "\\ud83d" not in log_text.lower() and "😀" in log_text
    assert_oracles_read(table_path, data.to_pylist())
    # delta-rs reads our partition values and statistics as written...
    actions = pa.table(deltalake.DeltaTable(table_path).get_add_actions(flatten=True))
    by_partition = dict(zip(actions.column("partition.p").to_pylist(), actions.column("min.s").to_pylist(), strict=True))
    assert by_partition == {v: v * 2 for v in ASTRAL_VALUES}
    # ...and skips files by them without losing a row.
    for value in ASTRAL_VALUES:
        assert _count(table_path, f"s = '{value * 2}'") == 1
        assert _count(table_path, f"p = '{value}'") == 1
    dataset = deltalake.DeltaTable(table_path).to_pyarrow_dataset()
    assert dataset.to_table(filter=pc.field("s") == "😀😀").column("n").to_pylist() == [1]
    # Code point order: U+1F600 and U+10FFFF are at or above U+1F600; U+1D11E and CJK are below.
    assert sorted(dataset.to_table(filter=pc.field("s") >= "😀").column("n").to_pylist()) == [1, 3]


def test_zero_bounds_let_deltars_find_every_zero(table_path: str) -> None:
    schema = pa.schema([("f", pa.float64()), ("g", pa.float32())])
    table = DeltaTable.create(table_path, schema)
    # One file per append: only -0.0, only +0.0, both, and zero beside other values.
    for f in ([-0.0], [0.0], [0.0, -0.0], [-1.0, -0.0], [-0.0, 2.0]):
        table.append(pa.table({"f": pa.array(f, pa.float64()), "g": pa.array(f, pa.float32())}, schema=schema))
    assert _count(table_path, "f = 0.0") == 6
    assert _count(table_path, "g = 0.0") == 6
    assert _count(table_path, "f >= 0.0") == 7
    assert _count(table_path, "f <= 0.0") == 7
    dataset = deltalake.DeltaTable(table_path).to_pyarrow_dataset()
    assert dataset.to_table(filter=pc.field("f") == 0.0).num_rows == 6
    assert len(read_with_deltars(table_path)) == 8


def test_nan_rows_are_found_by_deltars(table_path: str) -> None:
    """NaN is above every number (Spark): a file holding NaN must not be skipped for x = v or x > v."""
    schema = pa.schema([("x", pa.float64())])
    table = DeltaTable.create(table_path, schema)
    table.append(pa.table({"x": [1.0, 5.0, float("nan")]}, schema=schema))
    table.append(pa.table({"x": [float("nan")]}, schema=schema))
    assert _count(table_path, "x = 5.0") == 1
    assert _count(table_path, "x > 2.0") == 3
    assert _count(table_path, "isnan(x)") == 2
    dataset = deltalake.DeltaTable(table_path).to_pyarrow_dataset()
    assert dataset.to_table(filter=pc.field("x") == 5.0).num_rows == 1
    assert DeltaTable(table_path).snapshot().to_arrow(filter="x = 5.0").num_rows == 1


def test_every_json_file_we_write_is_raw_utf8(table_path: str) -> None:
    """Commits, .crc, _last_checkpoint (its checkpointSchema) and commitInfo keep astral characters raw."""
    schema = pa.schema([("name😀", pa.string()), ("𝄞", pa.int64())])
    table = DeltaTable.create(table_path, schema, partition_by=["name😀"], description="table 😀")
    data = pa.table({"name😀": ["x😀", "y"], "𝄞": pa.array([1, 2], pa.int64())}, schema=schema)
    table.append(data)
    table.checkpoint()
    log = Path(table_path, "_delta_log")
    written = [p for p in log.iterdir() if p.suffix in (".json", ".crc") or p.name == "_last_checkpoint"]
    assert {p.suffix for p in written} >= {".json", ".crc", ""}
    for path in written:
        text = path.read_bytes().decode("utf-8")
        assert "\\ud8" not in text.lower() and "\\ud83d" not in text.lower(), path.name
    assert "😀" in Path(log, f"{1:020d}.crc").read_text("utf-8")  # the schema inside the checksum's metadata
    assert "table 😀" in Path(log, f"{0:020d}.json").read_text("utf-8")
    assert_oracles_read(table_path, data.to_pylist())


unicode_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x10FFFF, blacklist_categories=("Cs", "Cc")),
    min_size=1,
    max_size=40,
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(unicode_text, min_size=1, max_size=4, unique=True))
def test_any_unicode_statistics_prune_right_in_deltars(tmp_path_factory: pytest.TempPathFactory, values: list[str]) -> None:
    """Strings of any code points (astral ones, past the 32-character stats prefix): every reader finds each row."""
    table_path = str(tmp_path_factory.mktemp("unicode") / "table")
    schema = pa.schema([("s", pa.string()), ("n", pa.int64())])
    table = DeltaTable.create(table_path, schema)
    for n, value in enumerate(values):  # one file per value: each file has its own bounds
        table.append(pa.table({"s": [value], "n": pa.array([n], pa.int64())}, schema=schema))
    rows = [{"s": v, "n": n} for n, v in enumerate(values)]
    assert_oracles_read(table_path, rows)
    dataset = deltalake.DeltaTable(table_path).to_pyarrow_dataset()
    snapshot = DeltaTable(table_path).snapshot()
    for n, value in enumerate(values):
        assert dataset.to_table(filter=pc.field("s") == value).column("n").to_pylist() == [n]
        literal = value.replace("\\", "\\\\").replace("'", "\\'")  # Spark SQL string escapes
        assert snapshot.to_arrow(filter=f"s = '{literal}'").column("n").to_pylist() == [n]


float_values = st.lists(
    st.sampled_from([0.0, -0.0, float("nan"), 1.5, -2.0, float("inf"), float("-inf")]) | st.floats(-3, 3, width=32),
    min_size=1,
    max_size=4,
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(float_values, min_size=1, max_size=4))
def test_any_float_statistics_prune_right_in_deltars(tmp_path_factory: pytest.TempPathFactory, files: list[list[float]]) -> None:
    """Zeros of either sign, NaN and infinities across files: delta-rs's file skipping finds every matching row."""
    table_path = str(tmp_path_factory.mktemp("floats") / "table")
    schema = pa.schema([("x", pa.float64())])
    table = DeltaTable.create(table_path, schema)
    for values in files:
        table.append(pa.table({"x": pa.array(values, pa.float64())}, schema=schema))
    every = [v for values in files for v in values]
    dataset = deltalake.DeltaTable(table_path).to_pyarrow_dataset()
    # The reader's own semantics, without file skipping: the whole table, filtered in memory.
    whole = pa.table({"x": pa.array(every, pa.float64())})
    has_nan = any(v != v for v in every)
    for probe in {0.0, -0.0, 1.5, -2.0, *(v for v in every if v == v)}:
        x = pc.field("x")
        # With NaN rows, "x >= v" differs between IEEE (pyarrow in memory: false) and Spark's order (NaN
        # above all: true), which pyarrow's fragment guarantees happen to follow; compare only where they agree.
        expressions = [x == probe, x <= probe, x < probe] + ([] if has_nan else [x >= probe, x > probe])
        for expression in expressions:
            assert dataset.to_table(filter=expression).num_rows == whole.filter(expression).num_rows, (probe, expression)
