"""The UPDATE in the worker (engine and pyarrow) against DuckDB's UPDATE, the two readers and the Spark job.

Each example updates a table with the worker; DuckDB's ``UPDATE`` of the same rows says
what the table must hold, and delta-rs and delta-kernel-rs must read exactly that. A few
examples also run the Spark job on a copy of the same table: same rows, metrics and change
data. The predicates and values are ones the worker evaluates exactly as Spark; the others
go to Spark (:func:`update_refusal`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaTable, InvalidArgumentError
from airflow_delta.spark.specs import TableRef, TaskIdentity, UpdateSpec
from airflow_delta.spark.update import run_update
from airflow_delta.spark.update_worker import run_update_in_worker, update_refusal
from tests.oracles import assert_oracles_read, read_change_files
from tests.spark.test_merge import TARGET_SCHEMA, Row, as_dicts, make_target

pytestmark = pytest.mark.slow

_runs = iter(range(1_000_000))
PREDICATES = [None, "id = 2", "v > 30", "p = 'a' AND v < 50", "id IS NULL", "id IN (1, 3)", "NOT (v BETWEEN 10 AND 40)"]
SETS = [{"v": "0"}, {"p": "'z'"}, {"v": "id"}, {"v": "NULL", "p": "p"}]
ROWS = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(0, 4)), st.integers(0, 60), st.sampled_from(["a", "b"])), min_size=1, max_size=10
)


def spec_for(path: Path, set_: dict[str, str], predicate: str | None) -> UpdateSpec:
    return UpdateSpec(TableRef(str(path)), dict(set_), predicate, TaskIdentity("update_tests", "u", f"run-{next(_runs)}"))


def duckdb_update(rows: list[Row], set_: dict[str, str], predicate: str | None) -> list[dict[str, Any]]:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (id BIGINT, v BIGINT, p VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [list(r) for r in rows])
    where = f" WHERE {predicate}" if predicate else ""
    con.execute("UPDATE t SET " + ", ".join(f"{k} = {v}" for k, v in set_.items()) + where)
    return [dict(zip(TARGET_SCHEMA.names, r, strict=True)) for r in con.execute("SELECT id, v, p FROM t").fetchall()]


def _enable_cdf(table: DeltaTable) -> None:
    with table.transaction() as txn:
        txn.set_properties({"delta.enableChangeDataFeed": "true"})
        txn.commit("SET TBLPROPERTIES", {}, {})


def check_update(spark: Any, rows: list[Row], set_index: int, predicate_index: int, dv: bool, partitioned: bool, cdf: bool) -> None:
    set_, predicate = SETS[set_index], PREDICATES[predicate_index]
    with tempfile.TemporaryDirectory(prefix="update-worker-") as work_dir:
        worker_path, spark_path = Path(work_dir) / "worker", Path(work_dir) / "spark"
        table = make_target(worker_path, rows, dv=dv, partitioned=partitioned)
        if cdf:
            _enable_cdf(table)
        shutil.copytree(worker_path, spark_path)
        assert update_refusal(spec_for(worker_path, set_, predicate), table.snapshot().schema) is None
        expected = duckdb_update(rows, set_, predicate)
        in_worker = run_update_in_worker(spec_for(worker_path, set_, predicate))
        assert_oracles_read(worker_path, expected)
        if spark is None:
            return
        on_spark = run_update(spark, spec_for(spark_path, set_, predicate))
        assert_oracles_read(spark_path, expected)
        assert in_worker.version == on_spark.version
        for key in ("numUpdatedRows", "numCopiedRows", "numDeletionVectorsAdded", "numRemovedFiles"):
            assert in_worker.metrics[key] == on_spark.metrics[key], key
        if cdf and in_worker.version is not None:
            assert sorted(read_change_files(worker_path, in_worker.version), key=repr) == sorted(
                read_change_files(spark_path, on_spark.version), key=repr
            )


EXAMPLE = {
    "rows": ROWS,
    "set_index": st.integers(0, len(SETS) - 1),
    "predicate_index": st.integers(0, len(PREDICATES) - 1),
    "dv": st.booleans(),
    "partitioned": st.booleans(),
    "cdf": st.booleans(),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(**EXAMPLE)
def test_worker_update_agrees_with_duckdb_and_the_readers(**example: Any) -> None:
    check_update(None, **example)


@pytest.mark.timeout(1800)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(**EXAMPLE)
def test_worker_and_spark_update_agree(spark: Any, **example: Any) -> None:
    check_update(spark, **example)


@pytest.mark.parametrize(
    ("set_", "predicate", "reason"),
    [
        ({"v": "v + 1"}, None, "cast by Spark"),
        ({"v": "0"}, "upper(p) = 'A'", "exactly as Spark"),
        ({"v": "'1'"}, None, "cast by Spark"),
        ({"v": "p"}, None, "cast to"),
        ({"s.x": "1"}, None, "struct field"),
    ],
)
def test_what_the_worker_does_not_evaluate_as_spark_goes_to_spark(
    tmp_path: Path, set_: dict[str, str], predicate: str | None, reason: str
) -> None:
    table = make_target(tmp_path / "t", [(1, 1, "a")])
    spec = spec_for(tmp_path / "t", set_, predicate)
    refusal = update_refusal(spec, table.snapshot().schema)
    assert refusal is not None and reason in refusal
    with pytest.raises(InvalidArgumentError, match="execution"):
        run_update_in_worker(spec)
    assert table.version() == 1
    assert_oracles_read(tmp_path / "t", as_dicts([(1, 1, "a")]))
