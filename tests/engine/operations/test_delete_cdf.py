"""The in-worker DELETE on Change Data Feed tables: the change data it writes, read by delta-rs.

The expected change is a plain Python model of the statement (the rows the predicate
deletes, SQL three-valued logic); the change feed comes from delta-rs's ``load_cdf`` or,
on column-mapped tables (which delta-rs's change feed refuses), from the commit's cdc
files read as plain parquet (``tests.oracles.read_change_files``). The table itself must
still read the same in delta-rs and delta-kernel-rs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import ConcurrentModificationError, DeltaTable, stage_delete
from tests.oracles import assert_oracles_read, read_change_feed_with_deltars, read_change_files

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("p", pa.string())])
CDF = {"delta.enableChangeDataFeed": "true"}
DV = {"delta.enableDeletionVectors": "true"}
COLUMN_MAPPING = {"delta.columnMapping.mode": "name"}


def _row(i: int) -> dict[str, Any]:
    return {"id": i, "s": None if i % 4 == 3 else f"s{i}", "p": "ab"[i % 2]}


def _table(path: str, properties: dict[str, str], ids: list[int], *, partitioned: bool = True) -> DeltaTable:
    table = DeltaTable.create(path, SCHEMA, partition_by=["p"] if partitioned else [], properties={**CDF, **properties})
    half = len(ids) // 2
    for chunk in (ids[:half], ids[half:]):
        if chunk:
            table.append(pa.Table.from_pylist([_row(i) for i in chunk], schema=SCHEMA))
    return table


def _actions(path: str, version: int, key: str) -> list[dict[str, Any]]:
    lines = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [json.loads(line)[key] for line in lines if f'"{key}"' in line[:12]]


def _deleted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r | {"_change_type": "delete"} for r in rows]


@pytest.mark.parametrize(
    "properties",
    [DV, {}, COLUMN_MAPPING, {**DV, **COLUMN_MAPPING}],
    ids=["deletion-vectors", "rewrite", "column-mapping-rewrite", "column-mapping-dvs"],
)
def test_deleted_rows_are_the_change_data(tmp_path: Path, properties: dict[str, str]) -> None:
    path = str(tmp_path / "t")
    ids = list(range(40))
    table = _table(path, properties, ids)
    # s IS NULL for ids 3, 7, ...: the NULL rows of the comparison stay (SQL), only the IS NULL ones go.
    result = table.delete("id % 5 = 0 OR s IS NULL")
    gone = [_row(i) for i in ids if i % 5 == 0 or i % 4 == 3]
    version = result.version
    assert version is not None
    cdc = _actions(path, version, "cdc")
    assert result.metrics["numAddedChangeFiles"] == len(cdc) == 2  # one per partition
    assert all(a["dataChange"] is False and a["path"].startswith("_change_data/") for a in cdc)
    assert read_change_files(path, version) == sorted(_deleted(gone), key=_key)
    if not properties.get("delta.columnMapping.mode"):
        assert read_change_feed_with_deltars(path, version) == read_change_files(path, version)
    assert_oracles_read(path, [_row(i) for i in ids if _row(i) not in gone])


def _key(row: dict[str, Any]) -> list[tuple[bool, str]]:
    return [(value is None, repr(value)) for value in row.values()]


def test_whole_partitions_need_no_change_files(tmp_path: Path) -> None:
    # Delta's metadata-only DELETE writes no cdc file: readers take the removed files' rows as deleted.
    path = str(tmp_path / "t")
    table = _table(path, DV, list(range(10)))
    result = table.delete("p = 'a'")
    assert result.version is not None and result.metrics["numAddedChangeFiles"] == 0
    assert _actions(path, result.version, "cdc") == []
    assert read_change_feed_with_deltars(path, result.version) == sorted(
        _deleted([_row(i) for i in range(0, 10, 2)]), key=_key
    )
    assert not (Path(path) / "_change_data").exists()


def test_a_failed_commit_removes_its_change_files(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _table(path, {}, list(range(10)), partitioned=False)
    txn = table.transaction()
    stage_delete(txn, "id = 1")
    table.delete("id = 2")  # removes the file txn read and rewrites
    with pytest.raises(ConcurrentModificationError):
        txn.commit("DELETE")
    files = {p.name for p in (Path(path) / "_change_data").glob("*.parquet")}
    assert files == {Path(a["path"]).name for a in _actions(path, 3, "cdc")}  # only the winner's
    assert read_change_feed_with_deltars(path, 3) == _deleted([_row(2)])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ids=st.lists(st.integers(0, 50), min_size=1, max_size=30),
    threshold=st.integers(-1, 51),
    modulus=st.integers(1, 4),
    use_dvs=st.booleans(),
)
def test_change_feed_matches_the_model(tmp_path_factory: Any, ids: list[int], threshold: int, modulus: int, use_dvs: bool) -> None:
    path = str(tmp_path_factory.mktemp("cdf") / "t")
    table = _table(path, DV if use_dvs else {}, ids)
    result = table.delete(f"id < {threshold} AND id % {modulus} = 0")
    gone = [_row(i) for i in ids if i < threshold and i % modulus == 0]
    if not gone:
        assert result.version is None
        return
    assert result.version is not None
    # Every touched file loses only some rows or all of them; either way the change is the deleted rows.
    assert read_change_feed_with_deltars(path, result.version) == sorted(_deleted(gone), key=_key)
    assert_oracles_read(path, [_row(i) for i in ids if not (i < threshold and i % modulus == 0)])


def test_rows_an_earlier_deletion_vector_removed_are_no_change(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _table(path, DV, list(range(40)), partitioned=False)
    table.delete("id < 10")
    result = table.delete("id < 20")  # overlaps the rows the files' DVs already delete
    assert result.version is not None and result.metrics["numDeletedRows"] == 10
    assert read_change_feed_with_deltars(path, result.version) == sorted(_deleted([_row(i) for i in range(10, 20)]), key=_key)
    assert_oracles_read(path, [_row(i) for i in range(20, 40)])
