"""Delta Lake as the oracle for row tracking and liquid clustering (issue 18).

Tables are created by Delta Lake itself (the ``delta_lake`` fixture of ``tests/delta_lake.py``,
delta-spark on its own PySpark); our DELETE, UPDATE, MERGE and OPTIMIZE run on one copy,
Delta's same statements on another, and Delta reads both: the rows, each surviving row's
``_metadata.row_id`` and ``_metadata.row_commit_version``, ``DESCRIBE DETAIL``'s clustering
columns, and whether Delta's own OPTIMIZE right after ours finds anything to do.

The module is skipped until the Delta oracle (branch ``delta17``) is merged.
"""

from __future__ import annotations

import itertools
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("tests.delta_lake", reason="the Delta Lake oracle (tests/delta_lake.py) is not merged yet")

from airflow_delta.engine import DeltaTable
from airflow_delta.spark.merge import run_merge
from airflow_delta.spark.merge_sql import merge_spec_from_sql
from airflow_delta.spark.specs import ExecutionOptions, MergeSource, TableRef, TaskIdentity, UpdateSpec
from airflow_delta.spark.update import run_update

pytestmark = pytest.mark.slow

_numbers = itertools.count()


def _identity() -> TaskIdentity:
    return TaskIdentity("dag", f"delta-oracle-{next(_numbers)}", "run")


_OPTIONS = ExecutionOptions(backoff_initial_seconds=0.0, backoff_max_seconds=0.0)


def _tracked(delta_lake: Any, *paths: str) -> tuple[dict[int, tuple[int, int]], ...]:
    """For each table: ``id`` -> (row ID, row commit version), as Delta Lake reads them
    (all tables in one statement, one Spark job)."""
    selects = " UNION ALL ".join(
        f"SELECT {index} AS side, id, _metadata.row_id AS row_id, _metadata.row_commit_version AS version "
        f"FROM delta.`{path}`"
        for index, path in enumerate(paths)
    )
    tracked: tuple[dict[int, tuple[int, int]], ...] = tuple({} for _ in paths)
    for r in delta_lake.sql(selects):
        tracked[r["side"]][int(r["id"])] = (int(r["row_id"]), int(r["version"]))
    return tracked


def _rows(delta_lake: Any, *paths: str) -> list[list[dict[str, Any]]]:
    """Each table's rows by ``id``, as Delta Lake reads them (one request, one Spark job)."""
    return [sorted(table.to_pylist(), key=lambda r: r["id"]) for table in delta_lake.read_many(paths)]


@pytest.fixture
def tracked_pair(delta_lake: Any, tmp_path: Path) -> tuple[str, str]:
    """The same row-tracking table twice: ``ours`` for our operations, ``theirs`` for Delta's."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    delta_lake.sql(
        f"CREATE TABLE delta.`{ours}` (id BIGINT, v BIGINT) USING delta "
        "TBLPROPERTIES ('delta.enableRowTracking' = 'true', 'delta.enableDeletionVectors' = 'false')"
    )
    for start in (0, 10, 20):
        values = ", ".join(f"({i}, 0)" for i in range(start, start + 10))
        delta_lake.sql(f"INSERT INTO delta.`{ours}` VALUES {values}")
    shutil.copytree(ours, theirs)
    return ours, theirs


def test_row_ids_and_commit_versions_match_delta_after_each_operation(
    delta_lake: Any, spark: Any, tracked_pair: tuple[str, str], tmp_path: Path
) -> None:
    ours, theirs = tracked_pair
    table = DeltaTable(ours)

    table.delete("id % 5 = 0")
    delta_lake.sql(f"DELETE FROM delta.`{theirs}` WHERE id % 5 = 0")
    ours_tracked, theirs_tracked = _tracked(delta_lake, ours, theirs)
    assert ours_tracked == theirs_tracked

    run_update(spark, UpdateSpec(TableRef(ours), {"v": "v + 1"}, "id % 4 = 1", _identity(), _OPTIONS))
    delta_lake.sql(f"UPDATE delta.`{theirs}` SET v = v + 1 WHERE id % 4 = 1")
    ours_tracked, theirs_tracked = _tracked(delta_lake, ours, theirs)
    assert ours_tracked == theirs_tracked

    source = str(tmp_path / "source.parquet")
    pq.write_table(pa.table({"id": pa.array([2, 3, 100], pa.int64()), "v": pa.array([7, 8, 9], pa.int64())}), source)
    run_merge(
        spark,
        merge_spec_from_sql(
            "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
            target=TableRef(ours), identity=_identity(), sources={"s": MergeSource(parquet=source)}, options=_OPTIONS,
        ),
    )
    delta_lake.sql(
        f"MERGE INTO delta.`{theirs}` t USING parquet.`{source}` s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    )
    ours_rows, theirs_rows = _tracked(delta_lake, ours, theirs)
    # An inserted row's fresh ID depends on how many files each writer wrote before it (each
    # file reserves its rows' IDs): it is above every older ID on both sides, same version.
    assert {k: v for k, v in ours_rows.items() if k != 100} == {k: v for k, v in theirs_rows.items() if k != 100}
    assert ours_rows[100][1] == theirs_rows[100][1]
    assert ours_rows[100][0] > max(v[0] for k, v in ours_rows.items() if k != 100)

    table.optimize()
    delta_lake.sql(f"OPTIMIZE delta.`{theirs}`")
    assert _tracked(delta_lake, ours, theirs) == (ours_rows, theirs_rows)  # OPTIMIZE copies: nothing changes
    ours_read, theirs_read = _rows(delta_lake, ours, theirs)
    assert ours_read == theirs_read

    # And Delta keeps writing our table: its next UPDATE sees our row IDs.
    delta_lake.sql(f"UPDATE delta.`{ours}` SET v = 0 WHERE id = 1")
    assert _tracked(delta_lake, ours)[0][1][0] == ours_rows[1][0]


CLUSTERINGS = [["a"], ["a", "b", "c"]]


@dataclass
class ClusteredCase:
    """One clustered table after the same DML by us (``ours``) and by Delta (``theirs``),
    then our OPTIMIZE and Delta's OPTIMIZE of ours right after it."""

    columns: list[str]
    ours: str
    theirs: str
    rows_after_dml: list[list[dict[str, Any]]] = field(default_factory=list)  # [ours, theirs], as Delta reads them
    clustering_columns: Any = None  # DESCRIBE DETAIL after our OPTIMIZE
    version_after_ours: int = -1  # the table's version after our OPTIMIZE
    history: list[dict[str, Any]] = field(default_factory=list)  # after Delta's OPTIMIZE
    rows_after_optimize: list[list[dict[str, Any]]] = field(default_factory=list)


@pytest.fixture(scope="module")
def clustered_cases(delta_lake: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, ClusteredCase]:
    """Both clusterings, each step for both tables at once: the reads of all four tables
    (one schema) are one request and one Spark job."""
    root = tmp_path_factory.mktemp("clustered")
    source = str(root / "source.parquet")
    pq.write_table(pa.table({k: pa.array(v, pa.int64()) for k, v in {"id": [1, 500], "a": [1, 2], "b": [3, 4], "c": [5, 6]}.items()}), source)
    merge_sql = "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT *"
    cases = {}
    for number, columns in enumerate(CLUSTERINGS):
        case = ClusteredCase(columns, str(root / f"ours{number}"), str(root / f"theirs{number}"))
        cases[",".join(columns)] = case
        # 200 rows in four files (four tasks), created by Delta in one commit.
        delta_lake.sql(
            f"CREATE TABLE delta.`{case.ours}` USING delta CLUSTER BY ({', '.join(columns)}) AS "
            "SELECT /*+ REPARTITION(4) */ id, id * 37 % 101 AS a, id * 53 % 97 AS b, id * 11 % 89 AS c FROM range(200)"
        )
        shutil.copytree(case.ours, case.theirs)
        table = DeltaTable(case.ours)
        table.delete("id % 7 = 0")
        delta_lake.sql(f"DELETE FROM delta.`{case.theirs}` WHERE id % 7 = 0")
        run_update(spark, UpdateSpec(TableRef(case.ours), {"b": "b + 1"}, "id < 20", _identity(), _OPTIONS))
        delta_lake.sql(f"UPDATE delta.`{case.theirs}` SET b = b + 1 WHERE id < 20")
        run_merge(
            spark,
            merge_spec_from_sql(
                f"MERGE INTO t USING s ON t.id = s.id {merge_sql}", target=TableRef(case.ours), identity=_identity(),
                sources={"s": MergeSource(parquet=source)}, options=_OPTIONS,
            ),
        )
        delta_lake.sql(f"MERGE INTO delta.`{case.theirs}` t USING parquet.`{source}` s ON t.id = s.id {merge_sql}")
    tables = [path for case in cases.values() for path in (case.ours, case.theirs)]
    rows = _rows(delta_lake, *tables)
    for case in cases.values():
        case.rows_after_dml = [rows[tables.index(case.ours)], rows[tables.index(case.theirs)]]
        table = DeltaTable(case.ours)
        table.optimize()
        case.clustering_columns = delta_lake.detail(case.ours)["clusteringColumns"]
        case.version_after_ours = table.version()
        delta_lake.sql(f"OPTIMIZE delta.`{case.ours}`")
        case.history = delta_lake.history(case.ours)
    rows = _rows(delta_lake, *tables)
    for case in cases.values():
        case.rows_after_optimize = [rows[tables.index(case.ours)], rows[tables.index(case.theirs)]]
    return cases


@pytest.mark.parametrize("columns", CLUSTERINGS, ids=["columns0", "columns1"])
def test_clustered_tables_after_our_operations_are_clustered_for_delta(
    clustered_cases: dict[str, ClusteredCase], columns: list[str]
) -> None:
    case = clustered_cases[",".join(columns)]
    ours_read, theirs_read = case.rows_after_dml
    assert ours_read == theirs_read
    assert len(ours_read) > 150  # the DML left most rows

    assert case.clustering_columns == columns
    latest = max(case.history, key=lambda h: int(h["version"]))
    # Delta's OPTIMIZE right after ours finds one ZCube and nothing else: no commit, or one rewriting nothing.
    assert int(latest["version"]) == case.version_after_ours or int(latest["operationMetrics"].get("numAddedFiles", 0)) == 0
    ours_read, theirs_read = case.rows_after_optimize
    assert ours_read == theirs_read
