"""The Delta Lake oracle itself (tests/delta_lake.py): Delta on Spark reads what our engine
writes, our engine reads what Delta writes, and Delta's errors arrive with Delta's names."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from tests.delta_lake import DeltaLakeError, DeltaLakeSession, sorted_rows, table_ref
from tests.oracles import read_with_deltars, read_with_kernel


def test_delta_reads_every_version_our_engine_writes(delta_lake: DeltaLakeSession, tmp_path: Path) -> None:
    path = str(tmp_path / "ours")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("part", pa.string())])
    table = DeltaTable.create(path, schema, partition_by=["part"], properties={"delta.enableDeletionVectors": "true"})
    table.append(pa.table({"id": list(range(10)), "part": ["a", "b"] * 5}, schema=schema))
    table.delete("id >= 7")
    # All versions in one request (read_versions); the next test reads them one by one (read).
    theirs = delta_lake.read_versions(path, range(table.version() + 1))
    assert sorted(theirs) == [0, 1, 2] and theirs[0].num_rows == 0  # the empty version 0 too
    for version in range(table.version() + 1):
        ours = sorted_rows(table.snapshot(version).to_arrow())
        assert sorted_rows(theirs[version]) == ours, f"version {version}"
        assert theirs[version].column_names == ["id", "part"]  # the version tag is gone
    assert sorted_rows(delta_lake.read(path)) == read_with_deltars(path) == read_with_kernel(path)
    history = delta_lake.history(path)
    assert [entry["version"] for entry in history] == [2, 1, 0]
    assert history[0]["operation"] == "DELETE"
    assert history[0]["operationMetrics"]["numDeletedRows"] == "3"
    detail = delta_lake.detail(path)
    assert detail["partitionColumns"] == ["part"]
    assert "deletionVectors" in detail["tableFeatures"]


def test_our_engine_reads_every_version_delta_writes(delta_lake: DeltaLakeSession, tmp_path: Path) -> None:
    path = str(tmp_path / "theirs")
    ref = table_ref(path)
    delta_lake.sql(
        f"CREATE TABLE {ref} (id BIGINT, name STRING) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    delta_lake.sql(f"INSERT INTO {ref} VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")
    assert delta_lake.sql(f"DELETE FROM {ref} WHERE id = 2") == [{"num_affected_rows": 1}]
    delta_lake.sql(f"UPDATE {ref} SET name = 'z' WHERE id = 3")
    table = DeltaTable(path)
    assert table.version() == 3
    for version in range(4):
        assert sorted_rows(table.snapshot(version).to_arrow()) == sorted_rows(delta_lake.read(path, version)), version
    assert sorted_rows(table.snapshot().to_arrow()) == [
        {"id": 1, "name": "a"},
        {"id": 3, "name": "z"},
        {"id": 4, "name": "d"},
    ]


def test_delta_errors_carry_deltas_names(delta_lake: DeltaLakeSession, tmp_path: Path) -> None:
    with pytest.raises(DeltaLakeError) as missing:
        delta_lake.sql(f"SELECT * FROM {table_ref(tmp_path / 'missing')}")
    assert (missing.value.error_class, missing.value.exception_class) == ("PATH_NOT_FOUND", "AnalysisException")
    assert missing.value.java_class == "org.apache.spark.sql.AnalysisException"
    # The session survives an error and serves the next request.
    assert delta_lake.sql("SELECT 1 AS one") == [{"one": 1}]
