"""Naming the fleet: discovery under a prefix (local and S3/Azure), lists and callables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_delta.engine import DeltaTable, InvalidArgumentError, discover_tables, resolve_fleet
from tests.engine.fleet.helpers import SCHEMA, rows, small_files_table


def _lake(root: Path) -> list[str]:
    """Tables at depths 1, 2 and 3, a partitioned one, a non-table directory and a hidden one."""
    paths = [root / "sales", root / "raw" / "events", root / "raw" / "deep" / "clicks", root / "a" / "b" / "c" / "too_deep"]
    for path in paths:
        path.mkdir(parents=True)
        small_files_table(str(path), files=2)
    (root / "not_a_table" / "x").mkdir(parents=True)
    (root / "not_a_table" / "x" / "data.parquet").write_bytes(b"PAR1")
    hidden = root / ".trash" / "old"
    hidden.mkdir(parents=True)
    DeltaTable.create(str(hidden), SCHEMA)
    return [str(p) for p in paths]


def test_discovery_finds_tables_within_the_depth_and_never_enters_one(tmp_path: Path) -> None:
    sales, events, clicks, too_deep = _lake(tmp_path)
    # A table nested inside another table's directory is not looked for: tables are leaves.
    DeltaTable.create(str(Path(sales) / "day=2024-01-01" / "nested"), SCHEMA)
    found = discover_tables(str(tmp_path), max_depth=3)
    assert found.tables == tuple(sorted([sales, events, clicks]))
    assert too_deep not in found.tables  # depth 4
    assert discover_tables(str(tmp_path), max_depth=4).tables == tuple(sorted([sales, events, clicks, too_deep]))
    assert discover_tables(str(tmp_path), max_depth=1).tables == (sales,)
    # The prefix itself may be a table.
    assert discover_tables(sales, max_depth=0).tables == (sales,)


def test_discovery_does_not_follow_a_link_out_of_the_prefix(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    small_files_table(str(outside / "secret"), files=1)
    lake = tmp_path / "lake"
    lake.mkdir()
    small_files_table(str(lake / "mine"), files=1)
    os.symlink(outside, lake / "link")
    found = discover_tables(str(lake))
    assert found.tables == (str(lake / "mine"),)
    assert [uri for uri, _ in found.skipped] == [str(lake / "link")]


def test_discovery_on_object_stores(object_store) -> None:
    prefix = object_store.uri()
    for name in ("t1", "nested/t2"):
        table = DeltaTable.create(f"{prefix}/{name}", SCHEMA, partition_by=["day"],
                                  storage_options=object_store.storage_options)
        table.append(rows(range(3), "2024-01-01"))
    found = discover_tables(prefix, object_store.storage_options)
    assert found.tables == (f"{prefix}/nested/t2", f"{prefix}/t1")
    # The depth bounds the delimited listings too: nested/t2 is two levels down.
    assert discover_tables(prefix, object_store.storage_options, max_depth=1).tables == (f"{prefix}/t1",)


def test_resolve_fleet_takes_exactly_one_source(tmp_path: Path) -> None:
    tables = _lake(tmp_path)
    assert resolve_fleet(tables=[tables[0], tables[1], tables[0]]) == (tables[0], tables[1])
    assert resolve_fleet(tables_callable=lambda: iter(tables[:2])) == tuple(tables[:2])
    assert set(resolve_fleet(prefix=str(tmp_path))) == set(tables[:3])
    with pytest.raises(InvalidArgumentError, match="one way"):
        resolve_fleet(tables=tables, prefix=str(tmp_path))
    with pytest.raises(InvalidArgumentError, match="one way"):
        resolve_fleet()
    with pytest.raises(InvalidArgumentError):
        resolve_fleet(tables="/one/path/not/a/list")
