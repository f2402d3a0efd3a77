"""DML on Spark over tables whose values the writer supplies: identity, generated and default columns.

Expected values come from the protocol and Delta's sources (IdentityColumn,
GenerateIdentityValues, ColumnWithDefaultExprUtils), not from our code: identity values
on ``start + step * n`` past the high-water mark, unique, the furthest one recorded in
the same commit (tagged ``delta.identity.schemaUpdate``); generated values equal to the
expression computed here in Python; delta-rs and delta-kernel-rs must read the rows.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import (
    ConstraintViolationError,
    DeltaTable,
    IdentityColumnWriteError,
    MetadataChangedException,
    OptimizeOptions,
    identity_columns,
)
from airflow_delta.spark.delete import run_delete
from airflow_delta.spark.merge import run_merge
from airflow_delta.spark.specs import (
    DeleteSpec,
    MergeClause,
    MergeSource,
    MergeSpec,
    TableRef,
    TaskIdentity,
    UpdateSpec,
)
from airflow_delta.spark.update import run_update
from tests.oracles import read_with_deltars, read_with_kernel

pytestmark = pytest.mark.slow

_runs = iter(range(1_000_000))
UTC = dt.UTC


def _identity() -> TaskIdentity:
    return TaskIdentity("column_values_tests", "dml", f"run-{next(_runs)}")


def _source(path: Path, table: pa.Table) -> MergeSource:
    pq.write_table(table, path)
    return MergeSource(parquet=str(path))


def _merge(target: Path, source: MergeSource, clauses: Sequence[MergeClause], on: str = "t.id = s.id") -> MergeSpec:
    return MergeSpec(
        target=TableRef(str(target)), source=source, on=on, clauses=tuple(clauses), identity=_identity(),
        source_alias="s", target_alias="t",
    )


def _last_commit_info(path: Path) -> dict[str, Any]:
    latest = sorted((path / "_delta_log").glob("*.json"))[-1]
    return next(json.loads(line)["commitInfo"] for line in latest.read_text().splitlines() if '"commitInfo"' in line)


def _mark(path: Path) -> int | None:
    return identity_columns(DeltaTable(str(path)).snapshot().metadata.schema_string)[0].high_water_mark


def _assert_readers_agree(path: Path) -> list[dict[str, Any]]:
    rows = read_with_deltars(path)
    assert read_with_kernel(path) == rows
    return rows


# ---------------------------------------------------------------------------------------- identity


def test_merge_inserts_identity_values_into_the_shared_table(spark: Any, shared_tables: Path, tmp_path: Path) -> None:
    target = tmp_path / "t"
    shutil.copytree(shared_tables / "checkpoint-v2-table", target)
    before_rows = _assert_readers_agree(target)
    mark = _mark(target)
    assert mark == 44
    ts = dt.datetime(2026, 1, 2, tzinfo=UTC)
    source = _source(
        tmp_path / "s.parquet",
        pa.table({"id": [1, -1, -2, -3], "name": ["renamed", "n1", "n2", "n3"], "created_at": [ts] * 4}),
    )
    clauses = [
        MergeClause("matched_update", assignments={"name": "s.name"}),
        MergeClause("not_matched_insert", assignments={"name": "s.name", "created_at": "s.created_at"}),
    ]
    result = run_merge(spark, _merge(target, source, clauses))
    assert result.metrics["numTargetRowsInserted"] == 3
    rows = _assert_readers_agree(target)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == len(before_rows) + 3
    new_ids = sorted(r["id"] for r in rows if r["name"] in {"n1", "n2", "n3"})
    assert all(i > 44 for i in new_ids)  # start 1, step 1: every value past the mark is on the sequence
    assert _mark(target) == max(new_ids)
    assert _last_commit_info(target)["tags"]["delta.identity.schemaUpdate"] == "true"
    assert {r["name"] for r in rows if r["id"] == 1} == {"renamed"}


def test_merge_on_an_empty_writer_6_identity_table(spark: Any, shared_tables: Path, tmp_path: Path) -> None:
    target = tmp_path / "t"
    shutil.copytree(shared_tables / "issue-2152", target)
    source = _source(tmp_path / "s.parquet", pa.table({"k": [f"2024-01-0{i}" for i in range(1, 6)]}))
    spec = _merge(
        target, source, [MergeClause("not_matched_insert", assignments={"TXT_DateKey": "s.k"})], on="t.TXT_DateKey = s.k"
    )
    run_merge(spark, spec)
    rows = _assert_readers_agree(target)
    ids = sorted(r["ID_D_DATE"] for r in rows)
    assert len(set(ids)) == 5 and ids[0] >= 1
    assert _mark(target) == ids[-1]
    assert DeltaTable(str(target)).snapshot().protocol.min_writer_version == 6  # no upgrade needed


def _identity_table(path: Path, start: int, step: int, *, always: bool) -> DeltaTable:
    meta = {
        "delta.identity.start": str(start),
        "delta.identity.step": str(step),
        "delta.identity.allowExplicitInsert": "false" if always else "true",
    }
    schema = pa.schema([pa.field("id", pa.int64(), metadata=meta), pa.field("k", pa.string())])
    return DeltaTable.create(str(path), schema)


def test_negative_step_values_and_mark(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "t"
    _identity_table(target, 0, -3, always=True)
    for batch in (["a", "b", "c"], ["d", "e"]):
        source = _source(tmp_path / f"s{batch[0]}.parquet", pa.table({"k": batch}))
        spec = _merge(target, source, [MergeClause("not_matched_insert", assignments={"k": "s.k"})], on="t.k = s.k")
        run_merge(spark, spec)
    rows = _assert_readers_agree(target)
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == 5
    assert all(i <= 0 and i % 3 == 0 for i in ids)
    assert _mark(target) == min(ids)


def test_explicit_values_and_updates_of_identity_columns(spark: Any, shared_tables: Path, tmp_path: Path) -> None:
    target = tmp_path / "t"
    shutil.copytree(shared_tables / "checkpoint-v2-table", target)
    source = _source(tmp_path / "s.parquet", pa.table({"id": [-1], "name": ["x"]}))
    insert_id = MergeClause("not_matched_insert", assignments={"id": "s.id", "name": "s.name"})
    with pytest.raises(IdentityColumnWriteError, match="GENERATED ALWAYS AS IDENTITY column 'id'"):
        run_merge(spark, _merge(target, source, [insert_id]))
    with pytest.raises(IdentityColumnWriteError, match="UPDATE on IDENTITY column 'id'"):
        run_merge(spark, _merge(target, source, [MergeClause("matched_update", assignments={"id": "s.id + 100"})]))
    with pytest.raises(IdentityColumnWriteError, match="UPDATE on IDENTITY column 'id'"):
        run_update(spark, UpdateSpec(TableRef(str(target)), {"id": "id + 1"}, None, _identity()))
    assert DeltaTable(str(target)).snapshot().version == 9
    # BY DEFAULT: an explicit value is inserted as given, and leaves the mark alone.
    by_default = tmp_path / "bd"
    _identity_table(by_default, 1, 1, always=False)
    source = _source(tmp_path / "bd.parquet", pa.table({"id": [100], "k": ["given"]}))
    run_merge(spark, _merge(by_default, source, [MergeClause("not_matched_insert", star=True)]))
    assert [r["id"] for r in _assert_readers_agree(by_default)] == [100]
    assert _mark(by_default) is None
    with pytest.raises(IdentityColumnWriteError, match="UPDATE"):
        run_update(spark, UpdateSpec(TableRef(str(by_default)), {"id": "1"}, None, _identity()))


def test_concurrent_identity_writers_conflict_as_delta_says(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "t"
    table = _identity_table(target, 1, 1, always=True)
    table.append(pa.table({"k": ["seed"]}))

    def append_with_identity(_attempt: int) -> None:
        DeltaTable(str(target)).append(pa.table({"k": ["concurrent"]}))  # generates id 2, moves the mark

    # Both generate identity values: both change the metadata, so the later one conflicts.
    source = _source(tmp_path / "s.parquet", pa.table({"k": ["new"]}))
    spec = _merge(target, source, [MergeClause("not_matched_insert", assignments={"k": "s.k"})], on="t.k = s.k")
    with pytest.raises(MetadataChangedException, match="identity"):
        run_merge(spark, spec, before_commit=append_with_identity)
    # A DELETE changes no metadata: the identity-only update of the winner does not conflict.
    delete = DeleteSpec(TableRef(str(target)), "k = 'seed'", _identity())
    run_delete(spark, delete, before_commit=append_with_identity)
    rows = _assert_readers_agree(target)
    assert sorted(r["k"] for r in rows) == ["concurrent", "concurrent"]
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == 2 and _mark(target) == max(ids)


# ----------------------------------------------------------------------------- generated columns


def _generated_table(path: Path) -> DeltaTable:
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("d", pa.date32(), metadata={"delta.generationExpression": "CAST(ts AS DATE)"}),
        ]
    )
    return DeltaTable.create(str(path), schema, partition_by=["d"])


def test_generated_date_partition_from_a_timestamp(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "t"
    _generated_table(target)
    ts = [dt.datetime(2026, 3, 1, 23, 30, tzinfo=UTC), dt.datetime(2026, 3, 2, 0, 30, tzinfo=UTC)]
    source = _source(tmp_path / "s.parquet", pa.table({"id": [1, 2], "ts": ts}))
    run_merge(spark, _merge(target, source, [MergeClause("not_matched_insert", star=False, assignments={"id": "s.id", "ts": "s.ts"})]))
    rows = {r["id"]: r for r in _assert_readers_agree(target)}
    assert rows[1]["d"] == dt.date(2026, 3, 1) and rows[2]["d"] == dt.date(2026, 3, 2)
    # UPDATE of the timestamp moves the row to the new date's partition.
    run_update(spark, UpdateSpec(TableRef(str(target)), {"ts": "ts + INTERVAL 1 DAY"}, "id = 1", _identity()))
    rows = {r["id"]: r for r in _assert_readers_agree(target)}
    assert rows[1]["d"] == dt.date(2026, 3, 2)
    partitions = DeltaTable(str(target)).snapshot().files().column("partition_values").to_pylist()
    assert {p["d"] for p in partitions} == {dt.date(2026, 3, 2)}  # both rows now live in the new date partition


def test_generated_values_that_disagree_are_refused(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "t"
    _generated_table(target)
    ts = dt.datetime(2026, 3, 1, 12, tzinfo=UTC)
    source = _source(tmp_path / "s.parquet", pa.table({"id": [1], "ts": [ts], "d": [dt.date(2020, 1, 1)]}))
    with pytest.raises(ConstraintViolationError, match="Generated Column") as info:
        run_merge(spark, _merge(target, source, [MergeClause("not_matched_insert", star=True)]))
    assert info.value.violating_rows == 1
    assert DeltaTable(str(target)).snapshot().version == 0
    good = _source(tmp_path / "g.parquet", pa.table({"id": [1], "ts": [ts], "d": [dt.date(2026, 3, 1)]}))
    run_merge(spark, _merge(target, good, [MergeClause("not_matched_insert", star=True)]))
    with pytest.raises(ConstraintViolationError, match="Generated Column"):
        run_update(spark, UpdateSpec(TableRef(str(target)), {"d": "DATE'2020-01-01'"}, None, _identity()))
    assert [r["d"] for r in _assert_readers_agree(target)] == [dt.date(2026, 3, 1)]


# ------------------------------------------------------------------------------- column defaults


def test_merge_insert_uses_column_defaults(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "t"
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("n", pa.int32(), metadata={"CURRENT_DEFAULT": "40 + 2", "EXISTS_DEFAULT": "42"})]
    )
    DeltaTable.create(str(target), schema)
    source = _source(tmp_path / "s.parquet", pa.table({"id": [1, 2]}))
    clauses = [
        MergeClause("not_matched_insert", condition="s.id = 1", assignments={"id": "s.id"}),
        MergeClause("not_matched_insert", assignments={"id": "s.id", "n": "DEFAULT"}),
    ]
    run_merge(spark, _merge(target, source, clauses))
    assert sorted((r["id"], r["n"]) for r in _assert_readers_agree(target)) == [(1, 42), (2, 42)]
    run_update(spark, UpdateSpec(TableRef(str(target)), {"n": "0"}, None, _identity()))
    run_update(spark, UpdateSpec(TableRef(str(target)), {"n": "DEFAULT"}, "id = 2", _identity()))
    assert sorted((r["id"], r["n"]) for r in _assert_readers_agree(target)) == [(1, 0), (2, 42)]


def test_shared_identity_table_through_delete_update_merge_optimize(spark: Any, shared_tables: Path, tmp_path: Path) -> None:
    target = tmp_path / "t"
    shutil.copytree(shared_tables / "checkpoint-v2-table", target)
    before = {r["id"]: r for r in _assert_readers_agree(target)}
    table = DeltaTable(str(target))
    table.delete("id <= 3")
    run_update(spark, UpdateSpec(TableRef(str(target)), {"name": "upper(name)"}, "id > 40", _identity()))
    source = _source(tmp_path / "s.parquet", pa.table({"id": [4], "name": ["merged"]}))
    clauses = [
        MergeClause("matched_update", assignments={"name": "s.name"}),
        MergeClause("not_matched_insert", assignments={"name": "s.name"}),
    ]
    run_merge(spark, _merge(target, source, clauses))
    assert table.optimize(OptimizeOptions(min_file_size=1 << 40)).version is not None
    after = {r["id"]: r for r in _assert_readers_agree(target)}
    expected = {}
    for key, row in before.items():
        if key <= 3:
            continue
        name = "merged" if key == 4 else row["name"].upper() if key > 40 and row["name"] is not None else row["name"]
        expected[key] = {**row, "name": name}
    assert after == expected  # surviving rows keep their identity values; the MERGE matched, inserted nothing
    assert _mark(target) == 44
    assert len(DeltaTable(str(target)).snapshot().files()) == 1
