"""Cross-checks with delta-rs (the ``deltalake`` package), an independent Delta implementation.

Tables we create and append to must read identically in delta-rs, with the same file
statistics and partition values; delta-rs must be able to append to our tables and we
to its tables, each reading the other's commits.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest

from airflow_delta.engine.errors import ConstraintViolationError
from airflow_delta.engine.table import DeltaTable
from airflow_delta.engine.write.options import WriterOptions

deltalake = pytest.importorskip("deltalake")

UTC = dt.UTC

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("flag", pa.bool_()),
        pa.field("i8", pa.int8()),
        pa.field("i16", pa.int16()),
        pa.field("i32", pa.int32()),
        pa.field("f32", pa.float32()),
        pa.field("f64", pa.float64()),
        pa.field("dec", pa.decimal128(12, 3)),
        pa.field("day", pa.date32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("ntz", pa.timestamp("us")),
        pa.field("text", pa.string()),
        pa.field("raw", pa.binary()),
        pa.field("st", pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])),
        pa.field("arr", pa.list_(pa.field("element", pa.int64()))),
        pa.field("m", pa.map_(pa.string(), pa.int32())),
        pa.field("arr_st", pa.list_(pa.field("element", pa.struct([pa.field("x", pa.float64())])))),
        pa.field("part", pa.string()),
    ]
)


def _rows(start: int, count: int) -> pa.Table:
    rows: list[dict[str, Any]] = []
    for i in range(start, start + count):
        null = i % 7 == 3  # every column but id is null in some rows
        rows.append(
            {
                "id": i,
                "flag": None if null else i % 2 == 0,
                "i8": None if null else (i % 200) - 100,
                "i16": None if null else i * 3 - 500,
                "i32": None if null else i * 1000,
                "f32": None if null else i / 4,
                "f64": None if null else i * 1.5 - 7,
                "dec": None if null else Decimal(i * 7 - 30) / 1000,
                "day": None if null else dt.date(2024, 1, 1) + dt.timedelta(days=i),
                "ts": None if null else dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i, microseconds=i),
                "ntz": None if null else dt.datetime(2023, 6, 1) + dt.timedelta(minutes=i, microseconds=3 * i),
                "text": None if null else f"row {i} é",
                "raw": None if null else bytes([i % 256, 0, 255]),
                "st": None if null else {"a": i, "b": None if i % 5 == 0 else f"b{i}"},
                "arr": None if null else list(range(i % 4)),
                "m": None if null else {f"k{i}": i},
                "arr_st": None if null else [{"x": i / 2}, {"x": None}],
                "part": None if i % 5 == 0 else ["north", "south/east", "west wind"][i % 3],
            }
        )
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _by_id(table: pa.Table) -> list[dict[str, Any]]:
    return _normalize(table.sort_by("id").to_pylist())


def _normalize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Map columns come back as lists of (key, value) pairs from pyarrow; compare as dicts.
    out = []
    for row in rows:
        fixed = dict(row)
        for key, value in row.items():
            if isinstance(value, list) and value and isinstance(value[0], tuple):
                fixed[key] = dict(value)
        out.append(fixed)
    return out


def _deltars_rows(path: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    table = deltalake.DeltaTable(path).to_pyarrow_table(columns=columns)
    return _by_id(table.cast(_compatible_schema(table.schema)))


def _compatible_schema(schema: pa.Schema) -> pa.Schema:
    # delta-rs may hand back view / large / dictionary types; cast to the plain ones we use.
    fields = []
    for f in schema:
        target = SCHEMA.field(f.name).type if f.name in SCHEMA.names else f.type
        fields.append(pa.field(f.name, target, f.nullable))
    return pa.schema(fields)


@pytest.mark.parametrize("partition_by", [[], ["part"]])
def test_our_table_reads_identically_in_deltars(table_path: str, partition_by: list[str]) -> None:
    ours = DeltaTable.create(table_path, SCHEMA, partition_by=partition_by)
    ours.append(_rows(0, 40))
    ours.append(_rows(40, 25), writer=WriterOptions(target_file_size=4096))
    expected = _by_id(_rows(0, 65))
    assert _deltars_rows(table_path) == expected
    assert _by_id(ours.snapshot().to_arrow()) == expected
    assert deltalake.DeltaTable(table_path).version() == 2


@pytest.mark.parametrize("partition_by", [[], ["part"]])
def test_deltars_sees_our_stats_and_partition_values(table_path: str, partition_by: list[str]) -> None:
    ours = DeltaTable.create(table_path, SCHEMA, partition_by=partition_by)
    ours.append(_rows(0, 50), writer=WriterOptions(target_file_size=2048))
    theirs = pa.table(deltalake.DeltaTable(table_path).get_add_actions(flatten=True))
    their_rows = {unquote(r["path"]): r for r in theirs.to_pylist()}  # delta-rs keeps log (URI) form
    files = ours.snapshot().files(stats=True).to_pylist()
    assert len(files) > 2 and sorted(their_rows) == sorted(f["path"] for f in files)
    compared = 0
    for f in files:
        theirs_row = their_rows[f["path"]]
        assert theirs_row["num_records"] == f["num_records"]
        assert theirs_row["size_bytes"] == f["size"]
        for column in partition_by:
            assert theirs_row[f"partition.{column}"] == f["partition_values"][column]
        stats = f["stats"]
        for column in ("id", "i8", "i16", "i32", "f64", "dec", "day", "ts", "ntz", "text"):
            for ours_key, their_key in (("minValues", "min"), ("maxValues", "max"), ("nullCount", "null_count")):
                mine = stats[ours_key][column]
                their = theirs_row.get(f"{their_key}.{column}")
                assert _same(mine, their), (f["path"], ours_key, column, mine, their)
                compared += 1
        assert theirs_row["null_count.st.a"] == stats["nullCount"]["st"]["a"]
        assert theirs_row["min.st.b"] == stats["minValues"]["st"]["b"]
    assert compared > 0


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b)
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime) and (a.tzinfo is None) != (b.tzinfo is None):
        return a.replace(tzinfo=None) == b.replace(tzinfo=None)
    return a == b


def test_deltars_appends_to_our_table(table_path: str) -> None:
    ours = DeltaTable.create(table_path, SCHEMA, partition_by=["part"])
    ours.append(_rows(0, 20))
    deltalake.write_deltalake(table_path, _rows(20, 20), mode="append")
    ours.append(_rows(40, 5))
    assert _by_id(DeltaTable(table_path).snapshot().to_arrow()) == _by_id(_rows(0, 45))
    assert _deltars_rows(table_path) == _by_id(_rows(0, 45))


def test_we_append_to_deltars_tables(table_path: str) -> None:
    deltalake.write_deltalake(table_path, _rows(0, 15), partition_by=["part"])
    ours = DeltaTable(table_path)
    assert ours.append(_rows(15, 15)).version == 1
    assert _by_id(ours.snapshot().to_arrow()) == _by_id(_rows(0, 30))
    assert _deltars_rows(table_path) == _by_id(_rows(0, 30))


def test_deltars_constraints_are_enforced_by_us(table_path: str) -> None:
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([5, 6], pa.int64())})
    deltalake.write_deltalake(table_path, data)
    deltalake.DeltaTable(table_path).alter.add_constraint({"v_positive": "v > 0"})
    ours = DeltaTable(table_path)
    ours.append(pa.table({"id": pa.array([3], pa.int64()), "v": pa.array([1], pa.int64())}))
    with pytest.raises(ConstraintViolationError, match="v_positive"):
        ours.append(pa.table({"id": pa.array([4], pa.int64()), "v": pa.array([-1], pa.int64())}))
    assert deltalake.DeltaTable(table_path).to_pyarrow_table().num_rows == 3


@pytest.mark.parametrize("mode", ["name", "id"])
def test_column_mapping_table_reads_in_deltars(table_path: str, mode: str) -> None:
    # delta-rs's pyarrow-dataset reader (to_pyarrow_table) ignores physical names and
    # returns nulls for column-mapped data; its DataFusion reader resolves them. So the
    # comparison goes through QueryBuilder.
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("my value", pa.string()),
            pa.field("st", pa.struct([pa.field("inner a", pa.int32())])),
            pa.field("part", pa.string()),
        ]
    )
    data = pa.table(
        {
            "id": [1, 2, 3, 4],
            "my value": ["a", None, "c", "d"],
            "st": [{"inner a": 1}, None, {"inner a": 3}, {"inner a": None}],
            "part": ["x", "y", None, "x"],
        },
        schema=schema,
    )
    ours = DeltaTable.create(table_path, schema, partition_by=["part"], properties={"delta.columnMapping.mode": mode})
    ours.append(data)
    theirs = deltalake.DeltaTable(table_path)
    result = pa.table(deltalake.QueryBuilder().register("t", theirs).execute("select * from t order by id").read_all())
    got = result.cast(pa.schema([pa.field(f.name, schema.field(f.name).type) for f in result.schema])).to_pylist()
    assert got == data.to_pylist()
    assert _by_id(ours.snapshot().to_arrow()) == data.to_pylist()


def test_deletion_vector_and_ict_tables_open_in_deltars(table_path: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("ntz", pa.timestamp("us"))])
    ours = DeltaTable.create(
        table_path,
        schema,
        properties={"delta.enableDeletionVectors": "true", "delta.enableInCommitTimestamps": "true"},
    )
    ours.append(pa.table({"id": [1, 2], "ntz": [dt.datetime(2020, 1, 1), None]}, schema=schema))
    theirs = deltalake.DeltaTable(table_path)
    protocol = theirs.protocol()
    assert set(protocol.reader_features or []) == {"deletionVectors", "timestampNtz"}
    assert set(protocol.writer_features or []) == {"deletionVectors", "timestampNtz", "inCommitTimestamp"}
    # delta-rs's pyarrow reader refuses deletion-vector tables; its DataFusion reader reads them.
    result = pa.table(deltalake.QueryBuilder().register("t", theirs).execute("select * from t order by id").read_all())
    assert result.to_pylist() == [
        {"id": 1, "ntz": dt.datetime(2020, 1, 1)},
        {"id": 2, "ntz": None},
    ]
    history = theirs.history()
    assert [h["operation"] for h in history] == ["WRITE", "CREATE TABLE"]
    assert all("inCommitTimestamp" in h for h in history)


def test_table_metadata_as_deltars_sees_it(table_path: str) -> None:
    DeltaTable.create(
        table_path,
        SCHEMA,
        partition_by=["part"],
        properties={"delta.appendOnly": "true", "team": "data"},
        name="events",
        description="all events",
    )
    theirs = deltalake.DeltaTable(table_path)
    meta = theirs.metadata()
    assert meta.name == "events" and meta.description == "all events"
    assert meta.partition_columns == ["part"]
    assert meta.configuration == {"delta.appendOnly": "true", "team": "data"}
    assert [f.name for f in theirs.schema().fields] == SCHEMA.names
    assert json.loads(theirs.schema().to_json())["fields"][9]["type"] == "timestamp"


def test_we_append_to_deltars_column_mapping_table(table_path: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("a b", pa.string())])
    deltalake.DeltaTable.create(table_path, schema=schema, configuration={"delta.columnMapping.mode": "name"})
    ours = DeltaTable(table_path)
    ours.append(pa.table({"id": [2, 1], "a b": ["y", "x"]}, schema=schema))
    theirs = deltalake.DeltaTable(table_path)
    result = pa.table(deltalake.QueryBuilder().register("t", theirs).execute("select * from t order by id").read_all())
    assert result.cast(schema).to_pylist() == [{"id": 1, "a b": "x"}, {"id": 2, "a b": "y"}]
    assert ours.snapshot().to_arrow().sort_by("id").to_pylist() == [{"id": 1, "a b": "x"}, {"id": 2, "a b": "y"}]
