"""Change data files (``write_change_data_files``): Spark's layout, and refusing rows that are not change data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import CHANGE_TYPE_COLUMN, DeltaTable, SchemaMismatchError, write_change_data_files
from tests.engine.checkpoint.table_helpers import copy_shared
from tests.oracles import read_change_feed_with_deltars, read_with_deltars, read_with_kernel


def _cdc_actions(path: str, version: int) -> list[dict[str, Any]]:
    lines = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [json.loads(line)["cdc"] for line in lines if line.startswith('{"cdc"')]


def _layout(schema: pa.Schema) -> list[tuple[str, str]]:
    return [(field.name, str(field.type)) for field in schema]


def test_change_files_have_sparks_layout_on_a_spark_table(shared_tables: Path, tmp_path: Path) -> None:
    # cdf-table: written by Spark 3.5 / Delta 3.0, partitioned by birthday (a date), CDF on.
    path = copy_shared(shared_tables, "cdf-table", str(tmp_path))
    before = read_with_deltars(path)
    result = DeltaTable(path).delete("id % 2 = 0 AND name IS NOT NULL")
    assert result.version is not None
    ours = _cdc_actions(path, result.version)
    spark_files = [p for p in Path(path, "_change_data").rglob("cdc-*.parquet") if p.name not in {Path(a["path"]).name for a in ours}]
    assert ours and spark_files
    spark_layout = _layout(pq.read_schema(spark_files[0]))
    for action in ours:
        # Same columns, order and types as Spark's (the partition column only in the action), same directories.
        assert _layout(pq.read_schema(Path(path) / action["path"])) == spark_layout == [
            ("id", "int32"), ("name", "string"), (CHANGE_TYPE_COLUMN, "string")
        ]
        assert action["path"] == f"_change_data/birthday={action['partitionValues']['birthday']}/" + Path(action["path"]).name
        assert Path(action["path"]).name.startswith("cdc-")
    deleted = [r | {"_change_type": "delete"} for r in before if r["id"] % 2 == 0 and r["name"] is not None]
    assert read_change_feed_with_deltars(path, result.version) == sorted(deleted, key=lambda r: [repr(v) for v in r.values()])
    # The feed of the whole history, Spark's commits and ours, still reads.
    import deltalake

    feed = pa.table(deltalake.DeltaTable(path).load_cdf(starting_version=0).read_all())
    assert feed.column("_commit_version").to_pylist().count(result.version) == len(deleted)
    remaining = [r for r in before if r not in [{k: v for k, v in d.items() if k != "_change_type"} for d in deleted]]
    assert read_with_deltars(path) == read_with_kernel(path) == remaining


@pytest.mark.parametrize(
    ("change_type", "match"),
    [(None, "_change_type' column"), (pa.array(["delete", "upsert"]), "got 'upsert'"), (pa.array(["delete", None]), "got None")],
)
def test_rows_that_are_not_change_data_are_refused(tmp_path: Path, change_type: pa.Array | None, match: str) -> None:
    table = DeltaTable.create(str(tmp_path / "t"), pa.schema([("id", pa.int64())]), properties={"delta.enableChangeDataFeed": "true"})
    rows = pa.table({"id": [1, 2]})
    if change_type is not None:
        rows = rows.append_column(CHANGE_TYPE_COLUMN, change_type)
    with pytest.raises(SchemaMismatchError, match=match):
        write_change_data_files(table.snapshot(), rows)
    assert not (tmp_path / "t" / "_change_data").exists()
