"""Reading data files: deletion vectors, partition columns, column mapping, type conformance.

Shared tables are checked against delta-rs's DataFusion reader (``QueryBuilder``), which
implements column mapping and deletion vectors; ``to_pyarrow_table()`` does neither.
Tables for situations the shared ones lack (``id`` mode, permuted physical names, type
widening, INT96, missing columns) are written here: parquet with pyarrow, a JSON commit
by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import (
    CorruptDataFileError,
    DataFileNotFoundError,
    InvalidFilterError,
    PathOutsideTableError,
    SchemaMismatchError,
)
from airflow_delta.engine.model.actions import AddFile, Metadata, Protocol, action_to_line
from airflow_delta.engine.model.column_mapping import ColumnMapping
from airflow_delta.engine.model.deletion_vector_files import write_deletion_vector
from airflow_delta.engine.read.scan import read_data
from airflow_delta.engine.read.snapshot import Snapshot
from airflow_delta.engine.storage.fileio import LocalFileIO
from airflow_delta.engine.table import DeltaTable

UTC = dt.UTC


def _snapshot(path: Path | str) -> Snapshot:
    return DeltaTable(str(path)).snapshot()


def _rows(table: pa.Table) -> list[str]:
    return sorted(repr(r) for r in table.to_pylist())


def _delta_rs_rows(path: Path, schema: pa.Schema) -> list[str]:
    deltalake = pytest.importorskip("deltalake")
    table = deltalake.DeltaTable(str(path))
    result = pa.table(deltalake.QueryBuilder().register("t", table).execute("select * from t").read_all())
    return _rows(result.select(schema.names).cast(schema))


# ===================================================================== shared tables

SHARED_TABLES = [
    "delta-2.2.0-partitioned-types",
    "partition-type-primitives",
    "delta-0.8.0-special-partition",
    "delta-0.8.0-null-partition",
    "delta-0.8.0-numeric-partition",
    "delta-0.8.0-date",
    "delta-0.8.0-partitioned",
    "table_with_column_mapping",
    "table_with_partitioning_mapping",
    "delta-1.2.1-only-struct-stats",
    "table_with_null_stats_in_notnull_struct",
    "table-with-dv-small",
    "cdf-table-with-cdc-and-dvs",
]


@pytest.mark.parametrize("name", SHARED_TABLES)
def test_shared_tables_match_delta_rs(shared_tables: Path, name: str) -> None:
    snapshot = _snapshot(shared_tables / name)
    ours = read_data(snapshot, snapshot.add_actions)
    assert ours.schema == snapshot.schema
    assert _rows(ours) == _delta_rs_rows(shared_tables / name, ours.schema)


def test_partition_columns_are_typed_from_the_log(shared_tables: Path) -> None:
    snapshot = _snapshot(shared_tables / "delta-0.8.0-numeric-partition")
    data = read_data(snapshot, snapshot.add_actions)
    assert data.schema.field("x").type == pa.int64() and data.schema.field("y").type == pa.float64()
    assert sorted((r["x"], r["y"], r["z"]) for r in data.to_pylist()) == [(9, 9.9, "a"), (10, 10.0, "b")]
    nulls = read_data(*_all(shared_tables / "delta-0.8.0-null-partition"))
    assert sorted(nulls.to_pylist(), key=repr) == [{"k": "A", "v": 1}, {"k": None, "v": 2}]
    special = read_data(*_all(shared_tables / "delta-0.8.0-special-partition"))
    assert sorted(special.column("x").to_pylist()) == ["A/A", "B B"]


def _all(path: Path) -> tuple[Snapshot, pa.Table]:
    snapshot = _snapshot(path)
    return snapshot, snapshot.add_actions


def test_column_mapping_name_mode_reads_physical_columns(shared_tables: Path) -> None:
    # delta-rs's to_pyarrow_table() returns nulls for "Super Name" here; the file column is
    # col-3877fd94-... (field id 2) and the log's stats name its values.
    data = read_data(*_all(shared_tables / "table_with_column_mapping"))
    assert data.column_names == ["Company Very Short", "Super Name"]
    assert sorted(data.column("Super Name").to_pylist()) == [
        "Anthony Johnson",
        "Mr. Daniel Ferguson MD",
        "Nathan Bennett",
        "Stephanie Mcgrath",
        "Timothy Lamb",
    ]


def test_rename_under_column_mapping_keeps_partition_values(shared_tables: Path) -> None:
    # Mapping enabled on an existing table (physical name "id"), then id renamed to newid.
    data = read_data(*_all(shared_tables / "table_with_partitioning_mapping"))
    assert sorted(data.to_pylist(), key=lambda r: r["newid"]) == [
        {"newid": 1, "description": "Initial data"},
        {"newid": 2, "description": "Additional data"},
    ]


def test_int96_timestamps_in_year_9999(shared_tables: Path) -> None:
    data = read_data(*_all(shared_tables / "table_with_edge_timestamps"))
    assert data.schema.field("BIG_DATE").type == pa.timestamp("us", tz="UTC")
    assert sorted(data.column("BIG_DATE").to_pylist()) == [
        dt.datetime(9999, 12, 30, tzinfo=UTC),
        dt.datetime(9999, 12, 31, tzinfo=UTC),
    ]


def test_deletion_vector_of_a_spark_table(shared_tables: Path) -> None:
    snapshot, files = _all(shared_tables / "table-with-dv-small")
    assert files.column("deletion_vector").null_count == 0
    data = read_data(snapshot, files)
    # The file holds 0..9; the DV deletes rows 0 and 9.
    assert sorted(data.column("value").to_pylist()) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_user_facing_files_layout_is_accepted(shared_tables: Path) -> None:
    snapshot = _snapshot(shared_tables / "delta-0.8.0-special-partition")
    files = snapshot.files()  # decoded paths ("x=A%2FA/...") and typed partition struct
    assert any("%2F" in p for p in files.column("path").to_pylist())
    assert _rows(read_data(snapshot, files)) == _rows(read_data(snapshot, snapshot.add_actions))


# ============================================================ projection and filters


def test_columns_come_in_table_order(shared_tables: Path) -> None:
    snapshot, files = _all(shared_tables / "delta-2.2.0-partitioned-types")
    data = read_data(snapshot, files, columns=["c3", "c1"])
    assert data.column_names == ["c1", "c3"]
    only_partition = read_data(snapshot, files, columns=["c2"])
    assert sorted(only_partition.column("c2").to_pylist()) == ["a", "b", "c"]
    assert read_data(snapshot, files, columns=[]).num_rows == 3
    with pytest.raises(SchemaMismatchError, match="'nope'"):
        read_data(snapshot, files, columns=["c1", "nope"])


def test_row_filter_on_partition_and_data_columns(shared_tables: Path) -> None:
    snapshot, files = _all(shared_tables / "delta-2.2.0-partitioned-types")
    data = read_data(snapshot, files, row_filter=(pc.field("c1") >= 5) & (pc.field("c2") != "a"))
    assert data.to_pylist() == [{"c1": 5, "c2": "b", "c3": 6}]
    # The filter may reference columns that are not projected.
    projected = read_data(snapshot, files, columns=["c3"], row_filter=pc.field("c2") == "c")
    assert projected.column_names == ["c3"] and projected.num_rows == 1
    with pytest.raises(InvalidFilterError):
        read_data(snapshot, files, row_filter=pc.field("missing") == 1)


def test_no_files_give_an_empty_table_with_the_schema(shared_tables: Path) -> None:
    snapshot, files = _all(shared_tables / "delta-2.2.0-partitioned-types")
    empty = read_data(snapshot, files.slice(0, 0), columns=["c2", "c3"])
    assert empty.num_rows == 0 and empty.schema == snapshot.schema.remove(0)


# ================================================================= hand-written tables


def _field(name: str, t: Any, metadata: dict[str, Any] | None = None, nullable: bool = True) -> dict[str, Any]:
    return {"name": name, "type": t, "nullable": nullable, "metadata": metadata or {}}


def _cm(field_id: int, physical: str) -> dict[str, Any]:
    return {"delta.columnMapping.id": field_id, "delta.columnMapping.physicalName": physical}


def _write_file(root: Path, relative: str, data: pa.Table, partition_values: dict[str, str | None] | None = None, **kwargs: Any) -> AddFile:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, path, **kwargs)
    return AddFile(relative, partition_values or {}, os.path.getsize(path), 0)


def _write_log(
    root: Path,
    fields: list[dict[str, Any]],
    adds: list[AddFile],
    *,
    partition_columns: tuple[str, ...] = (),
    features: tuple[str, ...] = (),
    **configuration: str,
) -> Snapshot:
    protocol = Protocol(3, 7, frozenset(features), frozenset(features)) if features else Protocol(1, 2)
    metadata = Metadata(
        id="test-table",
        schema_string=json.dumps({"type": "struct", "fields": fields}),
        partition_columns=partition_columns,
        configuration=configuration,
    )
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    lines = [action_to_line(protocol), action_to_line(metadata), *(action_to_line(a) for a in adds)]
    (log / "00000000000000000000.json").write_text("\n".join(lines) + "\n")
    return _snapshot(root)


def _with_field_id(name: str, t: pa.DataType, field_id: int) -> pa.Field:
    return pa.field(name, t, metadata={"PARQUET:field_id": str(field_id)})


def test_id_mode_resolves_columns_by_field_id(tmp_path: Path) -> None:
    fields = [
        _field("a", "long", _cm(1, "col-a")),
        _field("s", {"type": "struct", "fields": [_field("x", "integer", _cm(3, "col-x")), _field("y", "string", _cm(4, "col-y"))]}, _cm(2, "col-s")),
        _field("added_later", "string", _cm(5, "col-new")),
    ]
    # The file's names are deliberately wrong (as after a rename in another engine): only ids count.
    struct_type = pa.struct([_with_field_id("zz", pa.string(), 4), _with_field_id("yy", pa.int32(), 3)])
    file_schema = pa.schema([_with_field_id("s_old", struct_type, 2), _with_field_id("a_old", pa.int64(), 1)])
    data = pa.Table.from_pylist([{"s_old": {"zz": "p", "yy": 7}, "a_old": 1}, {"s_old": None, "a_old": 2}], schema=file_schema)
    add = _write_file(tmp_path, "f1.parquet", data)
    snapshot = _write_log(tmp_path, fields, [add], features=("columnMapping",), **{"delta.columnMapping.mode": "id"})
    result = read_data(snapshot, snapshot.add_actions)
    assert result.schema == snapshot.schema
    assert result.to_pylist() == [
        {"a": 1, "s": {"x": 7, "y": "p"}, "added_later": None},
        {"a": 2, "s": None, "added_later": None},
    ]


def test_id_mode_refuses_files_without_field_ids(tmp_path: Path) -> None:
    add = _write_file(tmp_path, "f.parquet", pa.table({"col-a": [1]}))
    snapshot = _write_log(
        tmp_path, [_field("a", "long", _cm(1, "col-a"))], [add], features=("columnMapping",), **{"delta.columnMapping.mode": "id"}
    )
    with pytest.raises(CorruptDataFileError, match="field ids"):
        read_data(snapshot, snapshot.add_actions)


def test_name_mode_follows_permuted_physical_names(tmp_path: Path) -> None:
    # After renames a -> tmp, b -> a, tmp -> b the logical and physical names are swapped;
    # equal-looking nested types must not short-circuit resolution.
    inner = {"type": "struct", "fields": [_field("a", "integer", _cm(2, "b")), _field("b", "integer", _cm(3, "a"))]}
    fields = [
        _field("s", inner, _cm(1, "s")),
        _field("l", {"type": "array", "elementType": inner, "containsNull": True}, _cm(4, "l")),
        _field("m", {"type": "map", "keyType": "string", "valueType": inner, "valueContainsNull": True}, _cm(5, "m")),
    ]
    pair = pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.int32())])
    file_schema = pa.schema([("s", pair), ("l", pa.list_(pa.field("element", pair))), ("m", pa.map_(pa.string(), pair))])
    data = pa.Table.from_pylist(
        [{"s": {"a": 1, "b": 2}, "l": [{"a": 3, "b": 4}, None], "m": [("k", {"a": 5, "b": 6})]}], schema=file_schema
    )
    add = _write_file(tmp_path, "f.parquet", data)
    snapshot = _write_log(tmp_path, fields, [add], features=("columnMapping",), **{"delta.columnMapping.mode": "name"})
    assert read_data(snapshot, snapshot.add_actions).to_pylist() == [
        {"s": {"a": 2, "b": 1}, "l": [{"a": 4, "b": 3}, None], "m": [("k", {"a": 6, "b": 5})]}
    ]


def test_schema_evolution_widening_and_missing_columns(tmp_path: Path) -> None:
    fields = [
        _field("i", "long"),
        _field("f", "double"),
        _field("d", "decimal(12,2)"),
        _field("dn", "timestamp_ntz"),
        _field("s", {"type": "struct", "fields": [_field("x", "long"), _field("new", "string")]}),
        _field("tags", {"type": "array", "elementType": "long", "containsNull": True}),
        _field("new_col", "date"),
    ]
    old = pa.table(
        {
            "i": pa.array([1, None], pa.int32()),
            "f": pa.array([1.5, 2.5], pa.float32()),
            "d": pa.array([1, 2], pa.int32()),
            "dn": pa.array([dt.date(2020, 1, 1), None], pa.date32()),
            "s": pa.array([{"x": 1}, {"x": None}], pa.struct([("x", pa.int16())])),
            "tags": pa.array([[1, 2], []], pa.list_(pa.int8())),
        }
    )
    add = _write_file(tmp_path, "old.parquet", old)
    snapshot = _write_log(tmp_path, fields, [add], features=("typeWidening", "timestampNtz"))
    result = read_data(snapshot, snapshot.add_actions)
    assert result.schema == snapshot.schema
    assert result.to_pylist() == [
        {"i": 1, "f": 1.5, "d": pa.scalar(1, pa.decimal128(12, 2)).as_py(), "dn": dt.datetime(2020, 1, 1), "s": {"x": 1, "new": None}, "tags": [1, 2], "new_col": None},
        {"i": None, "f": 2.5, "d": pa.scalar(2, pa.decimal128(12, 2)).as_py(), "dn": None, "s": {"x": None, "new": None}, "tags": [], "new_col": None},
    ]


def test_timestamps_are_normalised_to_microseconds_and_the_table_zone(tmp_path: Path) -> None:
    fields = [_field("ts", "timestamp"), _field("ntz", "timestamp_ntz"), _field("ms", "timestamp")]
    instant = dt.datetime(2024, 5, 6, 7, 8, 9, 123456)
    data = pa.table(
        {
            "ts": pa.array([instant], pa.timestamp("ns")),  # INT96 below
            "ntz": pa.array([instant], pa.timestamp("us")),
            "ms": pa.array([instant.replace(microsecond=123000)], pa.timestamp("ms", tz="UTC")),
        }
    )
    add = _write_file(tmp_path, "f.parquet", data, use_deprecated_int96_timestamps=True)
    assert "int96" in str(pq.ParquetFile(tmp_path / "f.parquet").schema)
    snapshot = _write_log(tmp_path, fields, [add], features=("timestampNtz",))
    result = read_data(snapshot, snapshot.add_actions)
    assert result.schema.types == [pa.timestamp("us", tz="UTC"), pa.timestamp("us"), pa.timestamp("us", tz="UTC")]
    assert result.to_pylist() == [
        {"ts": instant.replace(tzinfo=UTC), "ntz": instant, "ms": instant.replace(microsecond=123000, tzinfo=UTC)}
    ]


def test_partition_values_from_the_log_win_over_file_columns(tmp_path: Path) -> None:
    fields = [_field("v", "string"), _field("day", "date"), _field("n", "integer")]
    # Some writers also store partition columns in the file; the log is authoritative.
    add = _write_file(tmp_path, "day=2024-01-01/f.parquet", pa.table({"v": ["x", "y"], "day": ["garbage", "garbage"]}), {"day": "2024-01-01", "n": None})
    snapshot = _write_log(tmp_path, fields, [add], partition_columns=("day", "n"))
    assert read_data(snapshot, snapshot.add_actions).to_pylist() == [
        {"v": "x", "day": dt.date(2024, 1, 1), "n": None},
        {"v": "y", "day": dt.date(2024, 1, 1), "n": None},
    ]


def test_deletion_vectors_drop_rows_by_position(tmp_path: Path) -> None:
    io = LocalFileIO()
    root = str(tmp_path)
    ids = pa.table({"id": pa.array(range(100), pa.int64())})
    on_disk = write_deletion_vector(io, root, [0, 5, 99])
    inline = write_deletion_vector(io, root, [1, 2], inline=True)
    adds = [
        _write_file(tmp_path, "a.parquet", ids, row_group_size=30),
        _write_file(tmp_path, "b.parquet", ids),
        _write_file(tmp_path, "c.parquet", ids),
    ]
    adds = [
        AddFile(adds[0].path, {}, adds[0].size, 0, deletion_vector=on_disk),
        AddFile(adds[1].path, {}, adds[1].size, 0, deletion_vector=inline),
        adds[2],
    ]
    snapshot = _write_log(tmp_path, [_field("id", "long")], adds, features=("deletionVectors",))
    result = read_data(snapshot, snapshot.add_actions)
    assert result.num_rows == 300 - 5
    by_file = [result.slice(0, 97), result.slice(97, 98), result.slice(195)]
    assert 0 not in by_file[0].column("id").to_pylist() and 99 not in by_file[0].column("id").to_pylist()
    assert by_file[0].column("id").to_pylist() == [i for i in range(100) if i not in (0, 5, 99)]
    assert by_file[1].column("id").to_pylist() == [i for i in range(100) if i not in (1, 2)]
    assert by_file[2].column("id").to_pylist() == list(range(100))
    # Counting rows (no columns) still honours the deletion vectors.
    assert read_data(snapshot, snapshot.add_actions, columns=[]).num_rows == 295
    # The filter applies to surviving rows only.
    assert read_data(snapshot, snapshot.add_actions, row_filter=pc.field("id") < 3).column("id").to_pylist() == [1, 2, 0, 0, 1, 2]


def test_deletion_vector_past_the_end_of_the_file_is_refused(tmp_path: Path) -> None:
    dv = write_deletion_vector(LocalFileIO(), str(tmp_path), [10], inline=True)
    add = _write_file(tmp_path, "f.parquet", pa.table({"id": [1, 2, 3]}))
    snapshot = _write_log(tmp_path, [_field("id", "long")], [AddFile(add.path, {}, add.size, 0, deletion_vector=dv)], features=("deletionVectors",))
    with pytest.raises(CorruptDataFileError, match="row 10"):
        read_data(snapshot, snapshot.add_actions)


def test_many_files_keep_their_order(tmp_path: Path) -> None:
    adds = [_write_file(tmp_path, f"p/f{i:02d}.parquet", pa.table({"i": pa.array([i, i], pa.int64())})) for i in range(40)]
    snapshot = _write_log(tmp_path, [_field("i", "long")], adds)
    result = read_data(snapshot, snapshot.add_actions, max_workers=8)
    assert result.column("i").to_pylist() == [i for i in range(40) for _ in range(2)]


def test_runs_of_files_stored_alike_keep_each_files_partition_values_and_deleted_rows(tmp_path: Path) -> None:
    """Consecutive files with one stored layout are conformed together: each row still gets its own
    file's partition value, each file's DV drops its own rows, and a change of layout (an older file
    with a narrower type and no ``n`` column) between runs is conformed apart."""
    dv = write_deletion_vector(LocalFileIO(), str(tmp_path), [0], inline=True)
    wide = {"i": pa.array([1, 2], pa.int64()), "n": pa.array(["a", "b"])}
    narrow = {"i": pa.array([3, 4], pa.int32())}
    layouts = [wide, wide, narrow, narrow, wide]
    adds = []
    for k, data in enumerate(layouts):
        add = _write_file(tmp_path, f"p={k}/f.parquet", pa.table(data), {"p": None if k == 3 else str(k)})
        adds.append(AddFile(add.path, add.partition_values, add.size, 0, deletion_vector=dv if k in (1, 2) else None))
    snapshot = _write_log(
        tmp_path, [_field("i", "long"), _field("n", "string"), _field("p", "integer")], adds,
        partition_columns=("p",), features=("deletionVectors", "typeWidening"),
    )
    expected = [
        {"i": 1, "n": "a", "p": 0}, {"i": 2, "n": "b", "p": 0},
        {"i": 2, "n": "b", "p": 1},
        {"i": 4, "n": None, "p": 2},
        {"i": 3, "n": None, "p": None}, {"i": 4, "n": None, "p": None},
        {"i": 1, "n": "a", "p": 4}, {"i": 2, "n": "b", "p": 4},
    ]
    for workers in (1, 3):
        assert read_data(snapshot, snapshot.add_actions, max_workers=workers).to_pylist() == expected
    # Only some columns: the leaves read follow the file's layout.
    assert read_data(snapshot, snapshot.add_actions, columns=["n", "p"]).to_pylist() == [
        {"n": r["n"], "p": r["p"]} for r in expected
    ]


def test_files_with_one_parquet_schema_but_other_stored_arrow_types_are_read_apart(tmp_path: Path) -> None:
    """A file's layout is recognised by its parquet schema and key-value metadata together: the same
    parquet columns with a stored Arrow schema of other types (large strings) are another layout, and
    each file's rows are read and cast as their own file stores them."""
    plain = pa.table({"s": pa.array(["a", "b"])})
    large = pa.table({"s": pa.array(["c"], pa.large_string())})
    adds = [
        _write_file(tmp_path, "f0.parquet", plain, store_schema=False),
        _write_file(tmp_path, "f1.parquet", large, store_schema=True),
        _write_file(tmp_path, "f2.parquet", plain, store_schema=False),
    ]
    assert pq.read_metadata(tmp_path / "f0.parquet").schema.equals(pq.read_metadata(tmp_path / "f1.parquet").schema)
    snapshot = _write_log(tmp_path, [_field("s", "string")], adds)
    for workers in (1, 2):
        result = read_data(snapshot, snapshot.add_actions, max_workers=workers)
        assert result.schema.types == [pa.string()]
        assert result.column("s").to_pylist() == ["a", "b", "c", "a", "b"]


def test_string_encodings_are_cast_to_the_table_type(tmp_path: Path) -> None:
    data = pa.table({"s": pa.array(["a", "b", "a"], pa.large_string()), "d": pa.array(["x", None, "x"]).dictionary_encode()})
    add = _write_file(tmp_path, "f.parquet", data, store_schema=True)
    snapshot = _write_log(tmp_path, [_field("s", "string"), _field("d", "string")], [add])
    result = read_data(snapshot, snapshot.add_actions)
    assert result.schema.types == [pa.string(), pa.string()]
    assert result.to_pylist() == [{"s": "a", "d": "x"}, {"s": "b", "d": None}, {"s": "a", "d": "x"}]


def test_missing_and_outside_files_are_refused(tmp_path: Path) -> None:
    missing = AddFile("gone.parquet", {}, 10, 0)
    snapshot = _write_log(tmp_path / "t1", [_field("id", "long")], [missing])
    with pytest.raises(DataFileNotFoundError, match=r"gone\.parquet"):
        read_data(snapshot, snapshot.add_actions)
    outside = AddFile("../elsewhere.parquet", {}, 10, 0)
    snapshot = _write_log(tmp_path / "t2", [_field("id", "long")], [outside])
    with pytest.raises(PathOutsideTableError):
        read_data(snapshot, snapshot.add_actions)


def test_files_of_several_layouts_interleaved_are_each_read_by_their_own(tmp_path: Path) -> None:
    """Files read whole are recognised by the Arrow schema they come out with; one stored otherwise
    (another column order, an extra column to leave out, another stored type) gets its own layout."""
    base = pa.table({"id": pa.array([1, 2], pa.int64()), "s": pa.array(["a", "b"])})
    shapes = {
        "same": base,
        "extra": base.append_column("dropped", pa.array([9, 9], pa.int64())),
        "permuted": base.select(["s", "id"]),
        "large": base.cast(pa.schema([("id", pa.int64()), ("s", pa.large_string())])),
    }
    order = ["same", "extra", "same", "permuted", "large", "same", "extra", "permuted"]
    adds = []
    for i, shape in enumerate(order):
        data = shapes[shape].set_column(shapes[shape].schema.get_field_index("id"), "id", pa.array([2 * i, 2 * i + 1], pa.int64()))
        adds.append(_write_file(tmp_path, f"f{i}.parquet", data))
    snapshot = _write_log(tmp_path, [_field("id", "long"), _field("s", "string")], adds)
    result = read_data(snapshot, snapshot.add_actions, max_workers=1)
    assert result.schema == pa.schema([("id", pa.int64()), ("s", pa.string())])
    assert result.column("id").to_pylist() == list(range(2 * len(order)))
    assert result.column("s").to_pylist() == ["a", "b"] * len(order)


def test_a_scan_of_many_files_leaves_no_reference_cycles(tmp_path: Path) -> None:
    """Reading a file leaves nothing for the cyclic garbage collector (pyarrow's FileMetaData.schema
    is a cycle): with thousands of files, collections would otherwise run every few hundred files."""
    import gc

    adds = [_write_file(tmp_path, f"f{i}.parquet", pa.table({"id": pa.array([i], pa.int64())})) for i in range(30)]
    snapshot = _write_log(tmp_path, [_field("id", "long")], adds)
    read_data(snapshot, snapshot.add_actions, max_workers=1)  # the layout, once per scan
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        read_data(snapshot, snapshot.add_actions, max_workers=1)
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage if type(o).__module__.startswith("pyarrow")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert len(left) <= 2, left  # the one layout worked out by this scan


@pytest.mark.parametrize("logged", ["exact", "smaller", "larger", "zero"])
def test_a_small_file_is_read_whole_whatever_size_the_log_says(tmp_path: Path, logged: str) -> None:
    """Small local files are read into memory in one read; the logged size only decides how much
    to ask for. A log that understates it falls back to the streamed open, one that overstates
    it reads what is there: the rows are the same either way."""
    data = pa.table({"id": pa.array(range(50), pa.int64()), "s": pa.array([f"v{i}" for i in range(50)])})
    add = _write_file(tmp_path, "f.parquet", data)
    size = {"exact": add.size, "smaller": add.size - 100, "larger": add.size + 5000, "zero": 0}[logged]
    snapshot = _write_log(tmp_path, [_field("id", "long"), _field("s", "string")], [AddFile("f.parquet", {}, size, 0)])
    assert read_data(snapshot, snapshot.add_actions).equals(data)


def test_a_data_file_that_is_a_link_is_read_only_if_it_stays_inside(tmp_path: Path) -> None:
    """The whole-file read never follows a link (O_NOFOLLOW): a linked data file takes the checked
    open, which reads a link that stays inside the table and refuses one that leads out."""
    table, outside = tmp_path / "t", tmp_path / "outside"
    data = pa.table({"id": pa.array([1, 2], pa.int64())})
    add = _write_file(table, "real.parquet", data)
    outside.mkdir()
    pq.write_table(pa.table({"id": pa.array([666], pa.int64())}), outside / "secret.parquet")
    os.symlink(table / "real.parquet", table / "inside.parquet")
    os.symlink(outside / "secret.parquet", table / "out.parquet")
    snapshot = _write_log(table, [_field("id", "long")], [AddFile("inside.parquet", {}, add.size, 0)])
    assert read_data(snapshot, snapshot.add_actions).equals(data)
    size = os.path.getsize(outside / "secret.parquet")
    snapshot = _write_log(tmp_path / "t2", [_field("id", "long")], [AddFile("out.parquet", {}, size, 0)])
    os.symlink(outside / "secret.parquet", tmp_path / "t2" / "out.parquet")
    with pytest.raises(PathOutsideTableError, match="real location"):
        read_data(snapshot, snapshot.add_actions)


def test_unreadable_parquet_is_reported_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    snapshot = _write_log(tmp_path, [_field("id", "long")], [AddFile("bad.parquet", {}, 18, 0)])
    with pytest.raises(CorruptDataFileError, match=r"bad\.parquet"):
        read_data(snapshot, snapshot.add_actions)


# ============================================================ property: nested mapping

_LEAVES = st.sampled_from(["long", "string"])


def _types(max_leaves: int = 6) -> st.SearchStrategy[Any]:
    return st.recursive(
        _LEAVES,
        lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=3).map(lambda ts: {"type": "struct", "fields": ts}),
            children.map(lambda t: {"type": "array", "elementType": t, "containsNull": True}),
            children.map(lambda t: {"type": "map", "keyType": "string", "valueType": t, "valueContainsNull": True}),
        ),
        max_leaves=max_leaves,
    )


def _value(t: Any) -> st.SearchStrategy[Any]:
    if t == "long":
        return st.none() | st.integers(-(2**63), 2**63 - 1)
    if t == "string":
        return st.none() | st.text(max_size=3)
    if t["type"] == "struct":
        return st.none() | st.fixed_dictionaries({f["name"]: _value(f["type"]) for f in t["fields"]})
    if t["type"] == "array":
        return st.none() | st.lists(_value(t["elementType"]), max_size=3)
    return st.none() | st.dictionaries(st.text(max_size=2), _value(t["valueType"]), max_size=2).map(lambda d: list(d.items()))


class _Ids:
    def __init__(self) -> None:
        self.next = 0

    def take(self) -> int:
        self.next += 1
        return self.next


def _name_fields(t: Any, ids: _Ids, shuffle: st.DataObject) -> Any:
    """Give struct fields logical names a, b, c, ... and physical names that are a permutation of them."""
    if isinstance(t, str):
        return t
    if t["type"] == "array":
        return {**t, "elementType": _name_fields(t["elementType"], ids, shuffle)}
    if t["type"] == "map":
        return {**t, "valueType": _name_fields(t["valueType"], ids, shuffle)}
    names = [chr(ord("a") + i) for i in range(len(t["fields"]))]
    physical = shuffle.draw(st.permutations(names))
    return {
        "type": "struct",
        "fields": [
            _field(n, _name_fields(ft, ids, shuffle), _cm(ids.take(), p)) for n, p, ft in zip(names, physical, t["fields"], strict=True)
        ],
    }


@settings(max_examples=40, deadline=None)
@given(data=st.data(), mode=st.sampled_from(["name", "id"]))
def test_nested_column_mapping_round_trips(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, mode: str) -> None:
    root = tmp_path_factory.mktemp("t")
    ids = _Ids()
    column_types = data.draw(st.lists(_types(), min_size=1, max_size=3))
    struct = _name_fields({"type": "struct", "fields": column_types}, ids, data)
    fields = struct["fields"]
    mapping = ColumnMapping.from_schema(json.dumps(struct), mode)
    row_values = st.fixed_dictionaries({f["name"]: _value(f["type"]) for f in fields})
    rows = data.draw(st.lists(row_values, min_size=1, max_size=4))
    logical = pa.Table.from_pylist(rows, schema=mapping.logical_schema)
    physical = mapping.to_physical(logical)
    # Files need not store columns in table order (e.g. after a column was moved).
    physical = physical.select(data.draw(st.permutations(physical.column_names)))
    if mode == "id":
        # Names in the file do not matter in id mode: scramble them, keep the field ids.
        physical = physical.rename_columns([f"junk{i}" for i in range(physical.num_columns)])
    add = _write_file(root, "f.parquet", physical)
    snapshot = _write_log(root, fields, [add], features=("columnMapping",), **{"delta.columnMapping.mode": mode})
    assert read_data(snapshot, snapshot.add_actions).to_pylist() == logical.to_pylist()
