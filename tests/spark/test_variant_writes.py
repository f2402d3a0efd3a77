"""DELETE, UPDATE, MERGE and OPTIMIZE on Spark-written tables with unshredded variant columns.

The variant values must come through unchanged: delta-rs reads the surviving rows exactly
as it read them before (the binary ``metadata``/``value`` pair of every variant, nested
ones too), and Spark reads the data files we wrote as ``VARIANT`` with the same JSON as
the files Delta wrote.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable, OptimizeOptions
from airflow_delta.spark.merge import run_merge
from airflow_delta.spark.specs import MergeClause, MergeSource, MergeSpec, TableRef, TaskIdentity, UpdateSpec
from airflow_delta.spark.update import run_update
from tests.oracles import read_with_deltars

pytestmark = pytest.mark.slow

_runs = iter(range(1_000_000))


def _identity() -> TaskIdentity:
    return TaskIdentity("variant_tests", "dml", f"run-{next(_runs)}")


def _by_id(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in rows}


def test_dml_and_optimize_copy_variants_through(spark: Any, shared_tables: Path, tmp_path: Path) -> None:
    path = tmp_path / "t"
    shutil.copytree(shared_tables / "spark-variant-checkpoint", path)
    original = read_with_deltars(path)  # ids 0 and 1 twice (the DELETE below removes them)
    table = DeltaTable(str(path))

    table.delete("id < 10")  # the engine's DELETE, in the worker
    run_update(spark, UpdateSpec(TableRef(str(path)), {"id": "id + 1000"}, "id >= 90", _identity()))
    pq.write_table(pa.table({"id": [20, 21], "drop": [True, False]}), tmp_path / "s.parquet")
    merge = MergeSpec(
        target=TableRef(str(path)),
        source=MergeSource(parquet=str(tmp_path / "s.parquet")),
        on="t.id = s.id",
        clauses=(
            MergeClause("matched_delete", condition="s.drop"),
            MergeClause("matched_update", assignments={"id": "t.id + 2000"}),
        ),
        identity=_identity(),
        source_alias="s",
        target_alias="t",
    )
    run_merge(spark, merge)
    result = table.optimize(OptimizeOptions(min_file_size=1 << 40))  # every file is small: one compacted file
    assert result.version is not None

    expected: dict[int, dict[str, Any]] = {}
    for row in original:
        key = row["id"]
        if key < 10 or key == 20:
            continue
        new_id = key + 1000 if key >= 90 else key + 2000 if key == 21 else key
        expected[new_id] = {**row, "id": new_id}
    after = _by_id(read_with_deltars(path))
    assert after == expected
    assert len(DeltaTable(str(path)).snapshot().files()) == 1

    # Spark reads our file's variants as VARIANT, with the JSON of Delta's own files.
    ours = str(path / DeltaTable(str(path)).snapshot().files().column("path")[0].as_py())
    theirs = [str(p) for p in (shared_tables / "spark-variant-checkpoint").glob("*.parquet")]
    schema = "id long, v variant, array_of_variants array<variant>"
    columns = ("id", "to_json(v) AS v", "to_json(array_of_variants) AS a")
    read_ours = {r["id"]: (r["v"], r["a"]) for r in spark.read.schema(schema).parquet(ours).selectExpr(*columns).collect()}
    read_theirs = {r["id"]: (r["v"], r["a"]) for r in spark.read.schema(schema).parquet(*theirs).selectExpr(*columns).collect()}
    assert read_ours[50] == read_theirs[50] and read_ours[1095] == read_theirs[95]
    assert len(read_ours) == len(expected)


def test_update_with_variant_functions(spark: Any, shared_tables: Path, tmp_path: Path) -> None:
    path = tmp_path / "t"
    shutil.copytree(shared_tables / "spark-variant-checkpoint", path)
    original = {r["id"]: r for r in read_with_deltars(path) if r["id"] > 1}
    # Spark's variant functions in the predicate and the SET value: the jobs see VARIANT columns.
    spec = UpdateSpec(
        TableRef(str(path)), {"v": """parse_json('{"k": 1}')"""}, "schema_of_variant(v) IS NOT NULL AND id = 50", _identity()
    )
    assert run_update(spark, spec).metrics["numUpdatedRows"] == 1
    after = {r["id"]: r for r in read_with_deltars(path) if r["id"] > 1}
    assert {k: r for k, r in after.items() if k != 50} == {k: r for k, r in original.items() if k != 50}
    assert after[50]["v"] != original[50]["v"]
    files = [str(path / p) for p in DeltaTable(str(path)).snapshot().files().column("path").to_pylist()]
    read = spark.read.schema("id long, v variant").parquet(*files).where("id = 50").selectExpr("to_json(v) AS v").collect()
    assert [r["v"] for r in read] == ['{"k":1}']
