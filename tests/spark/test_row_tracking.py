"""UPDATE, DELETE, MERGE and OPTIMIZE on Spark keep row IDs (PROTOCOL.md "Row Tracking"), and write clustered tables.

Row IDs and commit versions are read back by :func:`tests.oracles.reference_row_tracking`
(the protocol's reader requirements, not the engine's reader); the rows by delta-rs and
delta-kernel-rs. The expected values follow the protocol: a copied row keeps both, an
updated row keeps its ID and takes the commit's version, an inserted row gets a fresh ID
above the table's high-water mark.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.spark.delete import run_delete
from airflow_delta.spark.merge import run_merge
from airflow_delta.spark.merge_sql import merge_spec_from_sql
from airflow_delta.spark.optimize import run_optimize
from airflow_delta.spark.specs import (
    DeleteSpec,
    ExecutionOptions,
    MergeSource,
    OptimizeSpec,
    TableRef,
    TaskIdentity,
    UpdateSpec,
)
from airflow_delta.spark.update import run_update
from tests.conftest import shared_tables_dir
from tests.oracles import assert_oracles_read, high_water_mark, reference_row_tracking

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
_numbers = itertools.count()


def _identity() -> TaskIdentity:
    return TaskIdentity("dag", f"rowtracking-{next(_numbers)}", "run")


def _options(in_driver: bool) -> ExecutionOptions:
    # driver_max_bytes=0: every file is read and written by executors.
    return ExecutionOptions(
        backoff_initial_seconds=0.0, backoff_max_seconds=0.0, **({} if in_driver else {"driver_max_bytes": 0})
    )


def _table(path: str) -> DeltaTable:
    table = DeltaTable.create(path, SCHEMA, properties={"delta.enableRowTracking": "true"})
    for start in (0, 10, 20):
        table.append(pa.table({"id": list(range(start, start + 10)), "v": [0] * 10}, schema=SCHEMA))
    return table


@pytest.mark.parametrize("in_driver", [False, True], ids=["executors", "driver"])
def test_update_delete_merge_optimize_keep_row_ids(spark: Any, tmp_path: Path, in_driver: bool) -> None:
    path = str(tmp_path / "t")
    table = _table(path)
    start = reference_row_tracking(path)
    assert start == {i: (i, 1 + i // 10) for i in range(30)}

    update = run_update(spark, UpdateSpec(TableRef(path), {"v": "v + 1"}, "id % 4 = 1", _identity(), _options(in_driver)))
    after_update = reference_row_tracking(path)
    assert after_update == {i: (i, update.version if i % 4 == 1 else 1 + i // 10) for i in range(30)}

    run_delete(spark, DeleteSpec(TableRef(path), "id % 5 = 0", _identity(), _options(in_driver)))
    after_delete = reference_row_tracking(path)
    assert after_delete == {i: after_update[i] for i in range(30) if i % 5}

    source = str(tmp_path / "source.parquet")
    pq.write_table(pa.table({"id": [2, 3, 100], "v": [7, 8, 9]}), source)
    merge = run_merge(
        spark,
        merge_spec_from_sql(
            "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
            target=TableRef(path), identity=_identity(), sources={"s": MergeSource(parquet=source)},
            options=_options(in_driver),
        ),
    )
    after_merge = reference_row_tracking(path)
    mark_before_merge = max(row_id for row_id, _ in after_delete.values())
    assert {i: after_merge[i] for i in after_delete} == {
        i: (after_delete[i][0], merge.version) if i in (2, 3) else after_delete[i] for i in after_delete
    }
    assert after_merge[100][1] == merge.version and after_merge[100][0] > mark_before_merge
    assert len({row_id for row_id, _ in after_merge.values()}) == len(after_merge)
    assert high_water_mark(path) >= max(row_id for row_id, _ in after_merge.values())

    run_optimize(spark, OptimizeSpec(TableRef(path), _identity(), options=_options(in_driver)))
    assert reference_row_tracking(path) == after_merge
    expected = [{"id": i, "v": {2: 7, 3: 8}.get(i, 1 if i % 4 == 1 else 0)} for i in range(30) if i % 5]
    assert_oracles_read(path, [*expected, {"id": 100, "v": 9}])
    assert table.snapshot().version == 7


def test_spark_zorder_optimize_keeps_row_ids(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _table(path)
    before = reference_row_tracking(path)
    run_optimize(spark, OptimizeSpec(TableRef(path), _identity(), zorder_by=("v", "id"), options=_options(False)))
    assert reference_row_tracking(path) == before


def test_shared_liquid_table_takes_update_and_merge_on_spark(spark: Any, tmp_path: Path) -> None:
    source_table = shared_tables_dir() / "table_with_liquid_clustering"
    if not source_table.exists():
        pytest.skip(f"{source_table} is not available")
    path = str(tmp_path / "liquid")
    shutil.copytree(source_table, path)
    run_update(spark, UpdateSpec(TableRef(path), {"id": "id + 100"}, "id < 3", _identity(), _options(False)))
    source = str(tmp_path / "source.parquet")
    pq.write_table(pa.table({"id": pa.array([5, 50], pa.int64())}), source)
    run_merge(
        spark,
        merge_spec_from_sql(
            "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT *",
            target=TableRef(path), identity=_identity(), sources={"s": MergeSource(parquet=source)},
            options=_options(False),
        ),
    )
    run_optimize(spark, OptimizeSpec(TableRef(path), _identity(), options=_options(False)))
    expected = sorted({100, 101, 102, 3, 4, 6, 7, 8, 9, 50})
    assert_oracles_read(path, [{"id": i} for i in expected])
    files = DeltaTable(path).snapshot().add_actions
    assert set(files.column("clustering_provider").to_pylist()) == {"liquid"}
    assert None not in files.column("base_row_id").to_pylist()
