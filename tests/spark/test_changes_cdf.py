"""Change Data Feed of DELETE, UPDATE and MERGE on Spark (``changes.stage_row_changes``), read back by others.

The expected change of each statement is a plain Python model of it (which rows go,
their old and new values, ``_change_type`` per clause); the feed comes from delta-rs's
``load_cdf`` or, on column-mapped tables (delta-rs 1.6 refuses their change feed), from
the commit's cdc files read as plain parquet following the protocol
(``tests.oracles.read_change_files``). The table itself must still read the same in
delta-rs and delta-kernel-rs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.spark.delete import run_delete
from airflow_delta.spark.merge import run_merge
from airflow_delta.spark.specs import (
    DeleteSpec,
    ExecutionOptions,
    MergeClause,
    MergeSource,
    MergeSpec,
    TableRef,
    TaskIdentity,
    UpdateSpec,
)
from airflow_delta.spark.update import run_update
from tests.oracles import assert_oracles_read, read_change_feed_with_deltars, read_change_files, read_with_deltars

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("p", pa.string())])
SOURCE_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("p", pa.string()), ("op", pa.int64())])
Row = dict[str, Any]
_runs = iter(range(1_000_000))

# Spark's executors do the file work (no in-driver shortcut), except where a test says otherwise.
ON_EXECUTORS = ExecutionOptions(backoff_initial_seconds=0.0, backoff_max_seconds=0.0, driver_max_bytes=0)


def _identity() -> TaskIdentity:
    return TaskIdentity("cdf_tests", "dml", f"run-{next(_runs)}")


def _row(i: int) -> Row:
    return {"id": i, "v": None if i % 7 == 6 else i * 10, "p": "ab"[i % 2]}


def _table(path: Path, *, dvs: bool, column_mapping: bool = False, rows: list[Row] | None = None) -> list[Row]:
    properties = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": str(dvs).lower()}
    if column_mapping:
        properties["delta.columnMapping.mode"] = "name"
    table = DeltaTable.create(str(path), SCHEMA, partition_by=["p"], properties=properties)
    rows = rows if rows is not None else [_row(i) for i in range(16)]
    for chunk in (rows[: len(rows) // 2], rows[len(rows) // 2 :]):
        table.append(pa.Table.from_pylist(chunk, schema=SCHEMA))
    return rows


def _feed(path: Path, version: int, column_mapping: bool) -> list[Row]:
    by_files = read_change_files(path, version)
    if not column_mapping:
        assert read_change_feed_with_deltars(path, version) == by_files
    return by_files


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda row: [(value is None, repr(value)) for value in row.values()])


def _typed(rows: list[Row], change_type: str) -> list[Row]:
    return [r | {"_change_type": change_type} for r in rows]


def _commit(path: Path, version: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]
    info = next(line["commitInfo"] for line in lines if "commitInfo" in line)
    return info, [line["cdc"] for line in lines if "cdc" in line]


@pytest.mark.parametrize("dvs", [True, False], ids=["deletion-vectors", "rewrite"])
def test_delete_writes_the_deleted_rows(spark: Any, tmp_path: Path, dvs: bool) -> None:
    path = tmp_path / "t"
    rows = _table(path, dvs=dvs)
    predicate = "v > 40 AND v < 120"  # NULL v stays
    result = run_delete(spark, DeleteSpec(TableRef(str(path)), predicate, _identity(), ON_EXECUTORS))
    gone = [r for r in rows if r["v"] is not None and 40 < r["v"] < 120]
    assert result.version is not None
    info, cdc = _commit(path, result.version)
    assert result.metrics["numAddedChangeFiles"] == len(cdc) == int(info["operationMetrics"]["numAddedChangeFiles"]) > 0
    assert all(action["dataChange"] is False for action in cdc)
    assert _feed(path, result.version, False) == _sorted(_typed(gone, "delete"))
    assert_oracles_read(path, [r for r in rows if r not in gone])


@pytest.mark.parametrize("in_driver", [False, True], ids=["executors", "driver"])
def test_update_writes_pre_and_post_images_that_match_the_written_rows(spark: Any, tmp_path: Path, in_driver: bool) -> None:
    # Column-mapped, rows moving to another partition, and a non-deterministic SET: the
    # post-images must be the very rows the data files got, not a second evaluation.
    path = tmp_path / "t"
    rows = _table(path, dvs=False, column_mapping=True)
    options = ExecutionOptions(backoff_initial_seconds=0.0, backoff_max_seconds=0.0, driver_max_bytes=1 << 30 if in_driver else 0)
    spec = UpdateSpec(TableRef(str(path)), {"v": "CAST(rand() * 1000000 AS BIGINT)", "p": "'c'"}, "id % 3 = 0", _identity(), options)
    result = run_update(spark, spec)
    assert result.version is not None
    updated_ids = {r["id"] for r in rows if r["id"] % 3 == 0}
    after = read_with_deltars(path)
    post = [r for r in after if r["id"] in updated_ids]
    assert {r["p"] for r in post} == {"c"} and len(post) == len(updated_ids)
    expected = _typed([r for r in rows if r["id"] in updated_ids], "update_preimage") + _typed(post, "update_postimage")
    assert _feed(path, result.version, True) == _sorted(expected)
    assert_oracles_read(path, [r for r in rows if r["id"] not in updated_ids] + post)


CLAUSES = (
    MergeClause("matched_update", "s.op = 1", {"v": "s.v"}),
    MergeClause("matched_delete", "s.op = 2"),
    MergeClause("not_matched_insert", star=True),
    MergeClause("not_matched_by_source_delete", "t.v > 100"),
    MergeClause("not_matched_by_source_update", assignments={"v": "t.v + 1"}),
)


def _merge_model(target: list[Row], source: list[Row]) -> tuple[list[Row], list[Row]]:
    """(the change feed, the table after) of CLAUSES, in plain Python; the ON condition is ``t.id = s.id``."""
    change: list[Row] = []
    after: list[Row] = []
    for t in target:
        matches = [s for s in source if t["id"] is not None and s["id"] == t["id"]]
        if matches:
            (s,) = matches  # the test's source matches each target row at most once
            if s["op"] == 1:
                change += _typed([t], "update_preimage") + _typed([t | {"v": s["v"]}], "update_postimage")
                after.append(t | {"v": s["v"]})
            elif s["op"] == 2:
                change += _typed([t], "delete")
            else:
                after.append(t)
        elif t["v"] is not None and t["v"] > 100:
            change += _typed([t], "delete")
        else:
            new = t | {"v": None if t["v"] is None else t["v"] + 1}
            change += _typed([t], "update_preimage") + _typed([new], "update_postimage")
            after.append(new)
    target_ids = {t["id"] for t in target if t["id"] is not None}
    inserted = [{k: s[k] for k in SCHEMA.names} for s in source if s["id"] is None or s["id"] not in target_ids]
    return change + _typed(inserted, "insert"), after + inserted


@pytest.mark.parametrize(
    ("dvs", "column_mapping"), [(True, False), (False, True)], ids=["deletion-vectors", "rewrite-column-mapping"]
)
def test_merge_writes_each_clause_kind(spark: Any, tmp_path: Path, dvs: bool, column_mapping: bool) -> None:
    path = tmp_path / "t"
    target = _table(path, dvs=dvs, column_mapping=column_mapping)
    source = [
        {"id": 1, "v": 1000, "p": "b", "op": 1},
        {"id": 2, "v": 0, "p": "a", "op": 2},
        {"id": 4, "v": 0, "p": "a", "op": 0},
        {"id": 6, "v": 6000, "p": "a", "op": 1},
        {"id": 40, "v": 400, "p": "a", "op": 0},
        {"id": None, "v": 1, "p": "b", "op": 1},
    ]
    pq.write_table(pa.Table.from_pylist(source, SOURCE_SCHEMA), tmp_path / "source.parquet")
    spec = MergeSpec(
        target=TableRef(str(path)),
        source=MergeSource(parquet=str(tmp_path / "source.parquet")),
        on="t.id = s.id",
        clauses=CLAUSES,
        identity=_identity(),
        options=ON_EXECUTORS,
        source_alias="s",
        target_alias="t",
    )
    result = run_merge(spark, spec)
    assert result.version is not None
    expected_change, expected_after = _merge_model(target, source)
    info, cdc = _commit(path, result.version)
    assert result.metrics["numTargetChangeFilesAdded"] == len(cdc) > 0
    assert info["operationMetrics"]["numTargetChangeFilesAdded"] == str(len(cdc))
    assert _feed(path, result.version, column_mapping) == _sorted(expected_change)
    assert_oracles_read(path, expected_after)


def test_insert_only_merge_and_whole_file_delete_need_no_change_files(spark: Any, tmp_path: Path) -> None:
    # As Delta: an append and a removal of whole files are their own change (readers take the
    # files' rows as inserted or deleted); no cdc file is written.
    path = tmp_path / "t"
    _table(path, dvs=True)
    pq.write_table(pa.Table.from_pylist([{"id": 99, "v": 9, "p": "a", "op": 0}], SOURCE_SCHEMA), tmp_path / "s.parquet")
    merged = run_merge(
        spark,
        MergeSpec(
            target=TableRef(str(path)),
            source=MergeSource(parquet=str(tmp_path / "s.parquet")),
            on="t.id = s.id",
            clauses=(MergeClause("not_matched_insert", star=True),),
            identity=_identity(),
            options=ON_EXECUTORS,
            source_alias="s",
            target_alias="t",
        ),
    )
    deleted = run_delete(spark, DeleteSpec(TableRef(str(path)), "p = 'b'", _identity(), ON_EXECUTORS))
    checks: list[tuple[int | None, Callable[[Row], bool], str]] = [
        (merged.version, lambda r: r["id"] == 99, "insert"),
        (deleted.version, lambda r: r["p"] == "b", "delete"),
    ]
    for version, _, change_type in checks:
        assert version is not None
        assert _commit(path, version)[1] == []
        assert {r["_change_type"] for r in read_change_feed_with_deltars(path, version)} == {change_type}
    assert not (path / "_change_data").exists()


def test_a_conflicted_attempt_leaves_no_change_files(spark: Any, tmp_path: Path) -> None:
    # The first attempt writes its change files, then another writer deletes from the same
    # file; the job plans again. Only committed change files may stay on disk.
    path = tmp_path / "t"
    rows = _table(path, dvs=False)

    def interfere(attempt: int) -> None:
        if attempt == 1:
            DeltaTable(str(path)).delete("id = 2")

    result = run_delete(spark, DeleteSpec(TableRef(str(path)), "id = 4", _identity(), ON_EXECUTORS), before_commit=interfere)
    assert result.attempts == 2 and result.version is not None
    committed = {
        Path(action["path"]).name for version in range(result.version + 1) for action in _commit(path, version)[1]
    }
    assert {p.name for p in (path / "_change_data").rglob("*.parquet")} == committed
    assert _feed(path, result.version, False) == _typed([_row(4)], "delete")
    assert_oracles_read(path, [r for r in rows if r["id"] not in (2, 4)])
