"""Tests of the embedded writer: appending Arrow data, file layout, statistics, constraints."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import (
    ConstraintViolationError,
    DataFileNotFoundError,
    DeltaError,
    InvalidTablePropertyError,
    PathOutsideTableError,
    SchemaMismatchError,
    TableNotFoundError,
    TransactionAlreadyCommittedError,
    UnsupportedFeatureError,
)
from airflow_delta.engine.model.actions import Protocol
from airflow_delta.engine.table import DeltaTable
from airflow_delta.engine.write import data_files as writer
from airflow_delta.engine.write.data_files import (
    add_file_from_parquet,
    conform_to_schema,
    escape_partition_path,
    write_data_files,
)
from airflow_delta.engine.write.options import AppTransaction, WriterOptions
from tests.engine.commit_helpers import commit_actions, single_action

SIMPLE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()), pa.field("day", pa.date32())])


def test_escape_partition_path_like_spark() -> None:
    assert escape_partition_path("a/b c=d%e") == "a%2Fb c%3Dd%25e"
    assert escape_partition_path("x:y?z#{[]}^*'\"\\") == "x%3Ay%3Fz%23%7B%5B%5D}%5E%2A%27%22%5C"
    assert escape_partition_path("é\x01") == "é%01"


# ---------------------------------------------------------------------- conforming data

TARGET = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("ntz", pa.timestamp("us")),
        pa.field("dec", pa.decimal128(10, 2)),
        pa.field("s", pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])),
        pa.field("l", pa.list_(pa.field("element", pa.int64()))),
        pa.field("m", pa.map_(pa.string(), pa.float64())),
    ]
)


def _row_data(**overrides: Any) -> dict[str, pa.Array]:
    base = {
        "id": pa.array([1], pa.int32()),
        "ts": pa.array([1_000_000_000], pa.timestamp("ns", tz="Europe/Paris")),
        "ntz": pa.array([5], pa.timestamp("ms")),
        "dec": pa.array([Decimal("1.5")], pa.decimal128(5, 1)),
        "s": pa.array([{"b": "x", "a": 2}], pa.struct([("b", pa.large_string()), ("a", pa.int8())])),
        "l": pa.array([[1, 2]], pa.large_list(pa.int16())),
        "m": pa.array([[("k", 1.5)]], pa.map_(pa.string(), pa.float32())),
    }
    base.update(overrides)
    return base


def test_conform_allows_lossless_casts_and_reorders() -> None:
    data = pa.table(_row_data())
    out = conform_to_schema(data.select(list(reversed(data.column_names))), TARGET)
    assert out.schema == TARGET
    row = out.to_pylist()[0]
    assert row["id"] == 1 and row["s"] == {"a": 2, "b": "x"} and row["l"] == [1, 2]
    assert row["dec"] == Decimal("1.50")
    assert row["ts"].isoformat() == "1970-01-01T00:00:01+00:00"  # converted to UTC
    assert row["ntz"].isoformat() == "1970-01-01T00:00:00.005000"


def test_conform_matches_column_names_case_insensitively() -> None:
    data = pa.table({"ID": pa.array([1], pa.int64())})
    assert conform_to_schema(data, pa.schema([("id", pa.int64())])).column_names == ["id"]


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"id": pa.array([1], pa.float64())}, "'id' has type double"),
        ({"ts": pa.array([1], pa.timestamp("us"))}, "without a time zone"),
        ({"ntz": pa.array([1], pa.timestamp("us", tz="UTC"))}, "timestamp_ntz"),
        ({"ts": pa.array([1_000_000_001], pa.timestamp("ns", tz="UTC"))}, "would lose data"),
        ({"dec": pa.array([Decimal("1.123")], pa.decimal128(5, 3))}, "'dec' has type decimal"),
        ({"s": pa.array([{"a": 1}], pa.struct([("a", pa.int32())]))}, r"missing field s\.b"),
        ({"l": pa.array([["x"]], pa.list_(pa.string()))}, r"l\.element"),
        ({"extra": pa.array([1])}, "'extra'"),
    ],
)
def test_conform_names_each_problem(overrides: dict[str, pa.Array], match: str) -> None:
    with pytest.raises(SchemaMismatchError, match=match):
        conform_to_schema(pa.table(_row_data(**overrides)), TARGET)


def test_conform_reports_missing_columns() -> None:
    data = _row_data()
    del data["m"]
    with pytest.raises(SchemaMismatchError, match="missing column 'm'"):
        conform_to_schema(pa.table(data), TARGET)


def test_conform_accepts_dictionary_and_null_columns() -> None:
    target = pa.schema([("s", pa.string()), ("n", pa.int64())])
    data = pa.table({"s": pa.array(["a", "b"]).dictionary_encode(), "n": pa.nulls(2)})
    out = conform_to_schema(data, target)
    assert out.schema == target and out.to_pylist() == [{"s": "a", "n": None}, {"s": "b", "n": None}]


# --------------------------------------------------------------------------------- append

DATA_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("p", pa.string()),
    ]
)


def _data(ids: range | list[int], p: list[str | None] | None = None) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {"id": ids, "name": [f"n{i}" for i in ids], "p": p if p is not None else ["a"] * len(ids)}, schema=DATA_SCHEMA
    )


def _sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.sort_by("id").to_pylist()


def _data_files(path: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, f), path)
        for d, _, files in os.walk(path)
        for f in files
        if f.endswith(".parquet") and "_delta_log" not in d
    )


def test_append_commits_blind_append_and_reads_back(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA)
    assert table.append(_data(range(5))).version == 1
    assert table.append(_data(range(5, 8))).version == 2
    assert _sorted_rows(table.snapshot().to_arrow()) == _sorted_rows(_data(range(8)))
    info = commit_actions(table_path, 1)[0]["commitInfo"]
    assert info["operation"] == "WRITE"
    assert info["operationParameters"] == {"mode": "Append", "partitionBy": "[]"}
    assert info["isBlindAppend"] is True
    assert info["operationMetrics"]["numFiles"] == "1" and info["operationMetrics"]["numOutputRows"] == "5"
    (add,) = [a["add"] for a in commit_actions(table_path, 1) if "add" in a]
    assert add["partitionValues"] == {} and add["dataChange"] is True
    assert re.fullmatch(r"part-00000-[0-9a-f-]{36}\.c000\.snappy\.parquet", add["path"])
    stored = os.stat(os.path.join(table_path, add["path"]))
    assert add["size"] == stored.st_size
    assert json.loads(add["stats"])["numRecords"] == 5


def test_append_partitioned_uses_hive_directories(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA, partition_by=["p"])
    table.append(_data(range(5), ["a", "b/c", None, "", "a"]))
    adds = [a["add"] for a in commit_actions(table_path, 1) if "add" in a]
    by_value = {a["partitionValues"]["p"]: a for a in adds}
    # An empty string is a null partition value (protocol), stored like Spark does.
    assert set(by_value) == {"a", "b/c", None}
    assert by_value["b/c"]["path"].startswith("p=b%252Fc/")  # escaped dir, then URI-encoded
    assert by_value[None]["path"].startswith("p=__HIVE_DEFAULT_PARTITION__/")
    assert os.path.isdir(os.path.join(table_path, "p=b%2Fc"))
    assert json.loads(by_value["a"]["stats"])["numRecords"] == 2
    assert "p" not in json.loads(by_value["a"]["stats"])["minValues"]  # partition columns have no stats
    got = _sorted_rows(table.snapshot().to_arrow())
    assert [r["p"] for r in got] == ["a", "b/c", None, None, "a"]
    # the partition column is not materialised in the data files
    import pyarrow.parquet as pq

    assert pq.read_schema(os.path.join(table_path, pathlib_unquote(by_value["a"]["path"]))).names == ["id", "name"]


def pathlib_unquote(log_path: str) -> str:
    from urllib.parse import unquote

    return unquote(log_path)


def test_append_partition_types_round_trip(table_path: str) -> None:
    schema = pa.schema(
        [
            pa.field("v", pa.int32()),
            pa.field("d", pa.date32()),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("dec", pa.decimal128(6, 2)),
            pa.field("b", pa.bool_()),
        ]
    )
    data = pa.table(
        {
            "v": [1, 2],
            "d": [dt.date(2024, 1, 2), None],
            "ts": [dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC), None],
            "dec": [Decimal("12.30"), Decimal("-1.00")],
            "b": [True, False],
        },
        schema=schema,
    )
    table = DeltaTable.create(table_path, schema, partition_by=["d", "ts", "dec", "b"])
    table.append(data)
    assert _sorted_rows_by(table.snapshot().to_arrow(), "v") == data.to_pylist()
    pvs = sorted((a["add"]["partitionValues"] for a in commit_actions(table_path, 1) if "add" in a), key=lambda x: x["dec"])
    assert pvs[1] == {"d": "2024-01-02", "ts": "2024-01-02T03:04:05.000006Z", "dec": "12.30", "b": "true"}
    assert pvs[0] == {"d": None, "ts": None, "dec": "-1.00", "b": "false"}


def _sorted_rows_by(table: pa.Table, key: str) -> list[dict[str, Any]]:
    return table.sort_by(key).to_pylist()


def test_append_splits_files_by_target_size(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA, partition_by=["p"])
    data = _data(range(1000), ["a" if i % 3 else "b" for i in range(1000)])
    bytes_per_row = data.nbytes // data.num_rows
    table.append(data, writer=WriterOptions(target_file_size=bytes_per_row * 100))
    adds = [a["add"] for a in commit_actions(table_path, 1) if "add" in a]
    counts = [json.loads(a["stats"])["numRecords"] for a in adds]
    assert sum(counts) == 1000 and max(counts) == 100 and len(adds) == 11
    assert len({a["path"] for a in adds}) == len(adds)
    assert _sorted_rows(table.snapshot().to_arrow()) == _sorted_rows(data)


def test_append_record_batch_reader(table_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "STREAM_CHUNK_ROWS", 10)
    table = DeltaTable.create(table_path, DATA_SCHEMA)
    batches = _data(range(35)).to_batches(max_chunksize=7)
    table.append(pa.RecordBatchReader.from_batches(DATA_SCHEMA, batches))
    assert _sorted_rows(table.snapshot().to_arrow()) == _sorted_rows(_data(range(35)))


def test_failed_stream_leaves_table_unchanged(table_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "STREAM_CHUNK_ROWS", 10)
    table = DeltaTable.create(table_path, DATA_SCHEMA)
    table.append(_data(range(3)))

    def batches() -> Iterator[pa.RecordBatch]:
        yield from _data(range(100, 120)).to_batches()
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError, match="source failed"):
        table.append(pa.RecordBatchReader.from_batches(DATA_SCHEMA, batches()), writer=WriterOptions(target_file_size=1))
    assert table.version() == 1
    # Files of the first chunks were written, then removed when the stream failed.
    assert len(_data_files(table_path)) == 1
    assert _sorted_rows(table.snapshot().to_arrow()) == _sorted_rows(_data(range(3)))


def test_schema_mismatch_writes_nothing(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA)
    bad = pa.table({"id": [1], "name": [2]})
    with pytest.raises(SchemaMismatchError, match=r"'name' has type int64.*missing column 'p'"):
        table.append(bad)
    assert table.version() == 0 and _data_files(table_path) == []


def test_not_null_violation_writes_nothing(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA)
    data = pa.table({"id": [1, None], "name": ["a", "b"], "p": ["x", "y"]})
    with pytest.raises(ConstraintViolationError, match="NOT NULL constraint on id"):
        table.append(data)
    assert table.version() == 0 and _data_files(table_path) == []


def test_check_constraint_enforced_on_append(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA, properties={"delta.constraints.small_id": "id < 10"})
    table.append(_data(range(3)))
    with pytest.raises(ConstraintViolationError, match="CHECK constraint small_id") as info:
        table.append(_data([5, 12, 13]))
    assert info.value.violating_rows == 2 and info.value.example == {"id": 12}
    assert table.version() == 1


def test_invalid_check_constraint_refused_at_create(table_path: str) -> None:
    with pytest.raises(InvalidTablePropertyError, match=r"delta\.constraints\.c"):
        DeltaTable.create(table_path, DATA_SCHEMA, properties={"delta.constraints.c": "nope > 1"})


def test_invariant_enforced_on_append(table_path: str) -> None:
    invariant = json.dumps({"expression": {"expression": "id >= 0"}})
    schema = pa.schema([pa.field("id", pa.int64(), metadata={"delta.invariants": invariant}), pa.field("name", pa.string())])
    table = DeltaTable.create(table_path, schema)
    assert Protocol.from_json(single_action(commit_actions(table_path), "protocol")) == Protocol(1, 2)
    field = json.loads(single_action(commit_actions(table_path), "metaData")["schemaString"])["fields"][0]
    assert json.loads(field["metadata"]["delta.invariants"]) == {"expression": {"expression": "id >= 0"}}
    table.append(pa.table({"id": [0, 1], "name": ["a", "b"]}))
    with pytest.raises(ConstraintViolationError, match="invariant on id"):
        table.append(pa.table({"id": [-1], "name": ["a"]}))


def test_column_mapping_writes_physical_names_and_field_ids(table_path: str) -> None:
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            pa.field("my id", pa.int64()),
            pa.field("s", pa.struct([pa.field("inner x", pa.int32())])),
            pa.field("part", pa.string()),
        ]
    )
    table = DeltaTable.create(table_path, schema, partition_by=["part"], properties={"delta.columnMapping.mode": "name"})
    data = pa.table({"my id": [1, 2], "s": [{"inner x": 1}, None], "part": ["a", "b"]}, schema=schema)
    table.append(data)
    fields = json.loads(single_action(commit_actions(table_path), "metaData")["schemaString"])["fields"]
    physical = {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in fields}
    inner_physical = fields[1]["type"]["fields"][0]["metadata"]["delta.columnMapping.physicalName"]
    adds = [a["add"] for a in commit_actions(table_path, 1) if "add" in a]
    for add in adds:
        assert set(add["partitionValues"]) == {physical["part"]}
        # random two-character prefix directories, never partition-named ones
        assert re.fullmatch(r"[A-Za-z0-9]{2}/part-\d{5}-[0-9a-f-]{36}\.c000\.snappy\.parquet", add["path"])
        stats = json.loads(add["stats"])
        assert set(stats["nullCount"]) == {physical["my id"], physical["s"]}
        file_schema = pq.ParquetFile(os.path.join(table_path, add["path"])).schema_arrow
        assert file_schema.names == [physical["my id"], physical["s"]]
        assert file_schema.field(0).metadata[b"PARQUET:field_id"] == b"1"
        assert file_schema.field(1).type.field(0).name == inner_physical
        assert file_schema.field(1).type.field(0).metadata[b"PARQUET:field_id"] == b"3"
    assert _sorted_rows_by(table.snapshot().to_arrow(), "my id") == data.to_pylist()


def test_randomized_prefixes_and_codec_property(table_path: str) -> None:
    import pyarrow.parquet as pq

    table = DeltaTable.create(
        table_path,
        DATA_SCHEMA,
        properties={
            "delta.randomizeFilePrefixes": "true",
            "delta.randomPrefixLength": "4",
            "delta.parquet.compression.codec": "zstd",
        },
    )
    table.append(_data(range(3)))
    (add,) = [a["add"] for a in commit_actions(table_path, 1) if "add" in a]
    assert re.fullmatch(r"[A-Za-z0-9]{4}/part-00000-[0-9a-f-]{36}\.c000\.zstd\.parquet", add["path"])
    assert pq.ParquetFile(os.path.join(table_path, add["path"])).metadata.row_group(0).column(0).compression == "ZSTD"


def test_timestamps_are_written_as_microseconds(table_path: str) -> None:
    import pyarrow.parquet as pq

    schema = pa.schema([pa.field("ts", pa.timestamp("us", tz="UTC")), pa.field("ntz", pa.timestamp("us"))])
    table = DeltaTable.create(table_path, schema)
    table.append(
        pa.table(
            {
                "ts": pa.array([1_000_000_000_000], pa.timestamp("ns", tz="UTC")),
                "ntz": pa.array([2_000_000_000], pa.timestamp("ns")),
            }
        )
    )
    (add,) = [a["add"] for a in commit_actions(table_path, 1) if "add" in a]
    parquet_schema = pq.ParquetFile(os.path.join(table_path, add["path"])).schema
    ts, ntz = parquet_schema.column(0), parquet_schema.column(1)
    assert ts.physical_type == "INT64" and "isAdjustedToUTC=true, timeUnit=microseconds" in str(ts.logical_type)
    assert ntz.physical_type == "INT64" and "isAdjustedToUTC=false, timeUnit=microseconds" in str(ntz.logical_type)
    assert table.snapshot().to_arrow().to_pylist()[0]["ntz"] == dt.datetime(1970, 1, 1, 0, 0, 2)


def test_deletion_vector_tables_get_tight_bounds(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    table.append(_data(range(3)))
    (add,) = [a["add"] for a in commit_actions(table_path, 1) if "add" in a]
    assert json.loads(add["stats"])["tightBounds"] is True


def test_idempotent_append_with_app_id(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA)
    assert table.append(_data(range(3)), app_transaction=AppTransaction("etl", 7)).version == 1
    assert {
        k: v for k, v in single_action(commit_actions(table_path, 1), "txn").items() if k in ("appId", "version")
    } == {"appId": "etl", "version": 7}
    files_before = _data_files(table_path)
    with pytest.raises(TransactionAlreadyCommittedError):
        table.append(_data(range(3)), app_transaction=AppTransaction("etl", 7))
    assert _data_files(table_path) == files_before and table.version() == 1
    assert table.append(_data(range(3, 4)), app_transaction=AppTransaction("etl", 8)).version == 2


def test_append_guards(table_path: str) -> None:
    with pytest.raises(TableNotFoundError):
        DeltaTable(table_path).append(_data(range(1)))
    table = DeltaTable.create(table_path, DATA_SCHEMA, partition_by=["p"])
    with pytest.raises(SchemaMismatchError, match="partition"):
        table.append(_data(range(1)), partition_by=["name"])
    with pytest.raises(DeltaError, match=r"AppTransaction.version=-1 .*integer >= 0"):
        table.append(_data(range(1)), app_transaction=AppTransaction("x", -1))
    with pytest.raises(DeltaError, match=r"AppTransaction.app_id=.*non-empty string"):
        table.append(_data(range(1)), app_transaction=AppTransaction("", 1))
    assert table.append(_data(range(1)), partition_by=["P"]).version == 1


def test_empty_append_commits_no_files(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA)
    assert table.append(_data([])).version == 1
    assert not [a for a in commit_actions(table_path, 1) if "add" in a]


def test_concurrent_appends_all_commit(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA)
    versions: list[int] = []
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            versions.append(DeltaTable(table_path).append(_data(range(i * 10, i * 10 + 10))).version)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sorted(versions) == [1, 2, 3, 4]
    assert table.snapshot().to_arrow().num_rows == 40


# ------------------------------------------------------------------- write_data_files etc.


def test_write_data_files_does_not_commit(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA, partition_by=["p"])
    adds = write_data_files(table.snapshot(), _data(range(4), ["a", "a", "b", "b"]))
    assert len(adds) == 2 and table.version() == 0
    assert sorted(a.partition_values["p"] for a in adds) == ["a", "b"]
    assert all(os.path.exists(os.path.join(table_path, pathlib_unquote(a.path))) for a in adds)


def test_add_file_from_parquet_for_a_file_written_elsewhere(table_path: str) -> None:
    import pyarrow.parquet as pq

    table = DeltaTable.create(table_path, DATA_SCHEMA, partition_by=["p"])
    relative = "p=x y/part-00000-executor.c000.snappy.parquet"
    os.makedirs(os.path.join(table_path, "p=x y"))
    pq.write_table(pa.table({"id": [3, 1, 2], "name": ["c", None, "b"]}), os.path.join(table_path, relative))
    snapshot = table.snapshot()
    add = add_file_from_parquet(table.io, table.root, relative, {"p": "x y"}, snapshot.metadata)
    assert add.path == "p=x%20y/part-00000-executor.c000.snappy.parquet"
    assert add.partition_values == {"p": "x y"}
    assert add.size == os.stat(os.path.join(table_path, relative)).st_size
    stats = json.loads(add.stats or "{}")
    assert stats["numRecords"] == 3 and stats["minValues"]["id"] == 1 and stats["maxValues"]["id"] == 3
    assert stats["nullCount"]["name"] == 1
    with table.transaction() as txn:
        txn.add(add)
        txn.commit("WRITE", {"mode": "Append"})
    assert _sorted_rows(table.snapshot().to_arrow()) == [
        {"id": 1, "name": None, "p": "x y"},
        {"id": 2, "name": "b", "p": "x y"},
        {"id": 3, "name": "c", "p": "x y"},
    ]


def test_add_file_from_parquet_errors(table_path: str) -> None:
    table = DeltaTable.create(table_path, DATA_SCHEMA, partition_by=["p"])
    meta = table.snapshot().metadata
    with pytest.raises(DataFileNotFoundError):
        add_file_from_parquet(table.io, table.root, "p=a/missing.parquet", {"p": "a"}, meta)
    with pytest.raises(PathOutsideTableError):
        add_file_from_parquet(table.io, table.root, "../elsewhere.parquet", {"p": "a"}, meta)
    with pytest.raises(SchemaMismatchError, match="partition"):
        add_file_from_parquet(table.io, table.root, "p=a/x.parquet", {"q": "a"}, meta)


def test_constraint_names_are_lower_cased_and_partition_by_may_be_a_string(table_path: str) -> None:
    DeltaTable.create(table_path, DATA_SCHEMA, partition_by="p", properties={"delta.constraints.Id_Pos": "id > 0"})
    meta = single_action(commit_actions(table_path), "metaData")
    assert meta["configuration"] == {"delta.constraints.id_pos": "id > 0"}
    assert meta["partitionColumns"] == ["p"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(st.one_of(st.none(), st.text(max_size=6)), st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))),
        max_size=25,
    )
)
def test_partitioned_round_trip_property(tmp_path: Path, rows: list[tuple[str | None, int | None]]) -> None:
    path = tempfile.mkdtemp(dir=tmp_path)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("p", pa.string()), pa.field("v", pa.int64())])
    data = pa.table(
        {"id": list(range(len(rows))), "p": [r[0] for r in rows], "v": [r[1] for r in rows]}, schema=schema
    )
    table = DeltaTable.create(path, schema, partition_by=["p"])
    table.append(data)
    got = table.snapshot().to_arrow().sort_by("id").to_pylist()
    # An empty string partition value reads back as null (the protocol cannot tell them apart).
    expected = [{**r, "p": r["p"] or None} for r in data.to_pylist()]
    assert got == expected
    for add in (a["add"] for a in commit_actions(path, 1) if "add" in a):
        directory = pathlib_unquote(add["path"]).split("/")[0]
        value = add["partitionValues"]["p"]
        assert directory == f"p={escape_partition_path(value) if value is not None else '__HIVE_DEFAULT_PARTITION__'}"


# ----------------------------------------------------------- appending to Spark-written tables


@pytest.mark.parametrize(
    "name",
    ["simple_table", "delta-0.8.0-partitioned", "table_with_column_mapping", "table-with-dv-small", "delta-0.8.0-date"],
)
def test_append_to_copies_of_spark_tables(shared_tables: Path, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    shutil.copytree(shared_tables / name, path)
    table = DeltaTable(str(path))
    before = table.snapshot()
    existing = before.to_arrow()
    extra = existing.slice(0, 2)  # rows of exactly the table's types, appended again
    version = table.append(extra).version
    assert version == before.version + 1
    after = table.snapshot().to_arrow()
    assert after.num_rows == existing.num_rows + extra.num_rows
    key = after.column_names

    def count(t: pa.Table) -> dict[tuple[Any, ...], int]:
        out: dict[tuple[Any, ...], int] = {}
        for row in t.select(key).to_pylist():
            k = tuple(repr(row[c]) for c in key)
            out[k] = out.get(k, 0) + 1
        return out

    expected = count(existing)
    for k, n in count(extra).items():
        expected[k] = expected.get(k, 0) + n
    assert count(after) == expected
    adds = [a["add"] for a in commit_actions(str(path), version) if "add" in a]
    assert adds and all(set(a["partitionValues"]) == set(_physical_partition_keys(before)) for a in adds)


def _physical_partition_keys(snapshot: Any) -> list[str]:
    fields = {f["name"]: f for f in snapshot.metadata.schema_json["fields"]}
    mode = snapshot.properties.column_mapping_mode
    return [
        (fields[c].get("metadata") or {}).get("delta.columnMapping.physicalName", c) if mode != "none" else c
        for c in snapshot.partition_columns
    ]


def test_append_refuses_active_unsupported_writer_features(tmp_path: Path) -> None:
    # icebergCompatV2 (UniForm) is not written by the engine: an append is refused before any file is written.
    path = tmp_path / "t"
    table = DeltaTable.create(str(path), pa.schema([pa.field("id", pa.int64())]))
    log = path / "_delta_log" / "00000000000000000001.json"
    log.write_text(json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["icebergCompatV2"]}}) + "\n")
    with pytest.raises(UnsupportedFeatureError, match="Iceberg metadata"):
        table.append(pa.table({"id": [1]}))
    assert _data_files(str(path)) == []


def test_nested_not_null_fields_on_append(table_path: str) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("s", pa.struct([pa.field("a", pa.int64(), nullable=False)])),
            pa.field("l", pa.list_(pa.field("element", pa.int64(), nullable=False))),
        ]
    )
    table = DeltaTable.create(table_path, schema)
    field = json.loads(single_action(commit_actions(table_path), "metaData")["schemaString"])["fields"][1]
    assert field["type"]["fields"][0]["nullable"] is False
    # A null struct has no fields, so its NOT NULL field is not violated.
    good = pa.table({"id": [1, 2], "s": [{"a": 1}, None], "l": [[1], None]})
    table.append(good)
    assert table.snapshot().to_arrow().sort_by("id").to_pylist() == good.to_pylist()
    with pytest.raises(ConstraintViolationError, match=r"NOT NULL constraint on s\.a"):
        table.append(pa.table({"id": [3], "s": [{"a": None}], "l": [[]]}))
    with pytest.raises(ConstraintViolationError, match=r"NOT NULL constraint on l\[\]"):
        table.append(pa.table({"id": [3], "s": [{"a": 3}], "l": [[None]]}))
    assert table.version() == 1
