"""VACUUM with the listing on Spark executors (spark/vacuum.py), and the VACUUM / CONVERT job specs.

The worker's listing is the reference: on a table with nested partitions, hidden
directories and files, orphans, ``_change_data`` and deletion vector files, the plan made
from the executors' listing must be exactly the plan made in the worker (same paths, same
bytes, same directory count), and a real run must leave a table both oracles read as
before. The session is the shared local[2] ``spark`` fixture.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.spark.jobs.dml import run_spec
from airflow_delta.spark.specs import ConvertSpec, TableRef, TaskIdentity, VacuumSpec, spec_from_json
from airflow_delta.spark.vacuum import spark_lister
from tests.engine.operations.test_convert import PARTITION_SCHEMA, PARTITIONS, write_hive_dir
from tests.engine.operations.test_vacuum import DAY_MS, _age, _all_files
from tests.oracles import assert_oracles_read, read_with_deltars, read_with_kernel

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("q", pa.int64())])
IDENTITY = TaskIdentity(dag_id="care", task_id="vacuum", run_id="r1")


def _rows(ids: range, p: str, q: int) -> pa.Table:
    n = len(ids)
    return pa.table({"id": pa.array(list(ids), pa.int64()), "p": [p] * n, "q": pa.array([q] * n, pa.int64())}, schema=SCHEMA)


def _table_with_everything(path: str, now: int) -> DeltaTable:
    """Two partition levels, DV deletes (one DV file superseded), a removed partition, and
    orphans and hidden files at every depth, all older than the retention."""
    table = DeltaTable.create(path, SCHEMA, partition_by=["p", "q"], properties={"delta.enableDeletionVectors": "true"})
    table.append(pa.concat_tables([_rows(range(0, 5), "a", 1), _rows(range(5, 10), "b", 2), _rows(range(10, 12), "a", 2)]))
    table.append(_rows(range(20, 25), "a", 1))
    table.delete("id = 1")
    table.delete("id = 2")
    table.delete("p = 'b'")
    root = Path(path)
    extra = [
        "orphan-top.parquet", "p=a/orphan.parquet", "p=a/q=1/orphan.parquet", "p=a/q=1/deeper/orphan.parquet",
        "_change_data/cdc-1.parquet", "_SUCCESS", "_tmp/part-x.parquet", "p=a/_tmp/part-y.parquet",
        "p=a/q=2/.part-z.parquet.crc",
    ]
    for relative in extra:
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_rows(range(900, 901), "a", 1), target)
    for file in root.rglob("*"):
        if file.is_file() and "_delta_log" not in file.parts:
            _age(file, 10 * DAY_MS, now)
    return table


def test_the_executors_listing_plans_exactly_what_the_worker_plans(spark: Any, table_path: str, tmp_path: Path) -> None:
    now = int(time.time() * 1000) + 30 * DAY_MS
    table = _table_with_everything(table_path, now)
    lister = spark_lister(spark, table_path)
    in_worker = table.vacuum(now=now, dry_run=True, file_list_path=str(tmp_path / "worker.txt"))
    on_spark = table.vacuum(now=now, dry_run=True, file_list_path=str(tmp_path / "spark.txt"), list_files=lister)

    worker_plan = (tmp_path / "worker.txt").read_text().splitlines()
    assert sorted((tmp_path / "spark.txt").read_text().splitlines()) == sorted(worker_plan)
    assert on_spark.metrics == in_worker.metrics
    # Expired: the removed p=b file, the superseded DV file, the four data orphans and _change_data's.
    assert on_spark.num_files_to_delete == 7
    assert not any(part.startswith(("_tmp", "_SUCCESS", ".part")) for path in worker_plan for part in path.split("/"))

    latest = read_with_deltars(table_path)
    before = _all_files(Path(table_path))
    result = table.vacuum(now=now, list_files=lister)
    assert before - _all_files(Path(table_path)) == set(worker_plan)
    assert result.num_deleted_files == 7
    assert read_with_deltars(table_path) == latest == read_with_kernel(table_path)


def test_a_vacuum_spec_runs_through_the_job_program(spark: Any, table_path: str) -> None:
    now = int(time.time() * 1000)
    table = _table_with_everything(table_path, now)
    latest = read_with_deltars(table_path)
    spec = VacuumSpec(
        table=TableRef(uri=table_path), identity=IDENTITY, mode="full", retention_ms=0, enforce_retention_duration=False
    )
    assert spec_from_json(spec.to_json()) == spec

    result = run_spec(spark, spec_from_json(spec.to_json()))

    assert result.operation == "VACUUM" and result.metrics["numDeletedFiles"] == 7
    # root, p=a, p=a/q=1, p=a/q=1/deeper, p=a/q=2, p=b, p=b/q=2, _change_data; never _delta_log, _tmp, p=a/_tmp
    assert result.metrics["numVacuumedDirectories"] == 8
    start, end = table.history(limit=2)[::-1]
    assert (start["operation"], end["operation"]) == ("VACUUM START", "VACUUM END")
    assert (result.metrics["startVersion"], result.version) == (start["version"], end["version"])
    assert read_with_deltars(table_path) == latest == read_with_kernel(table_path)
    # A retention shorter than the table's is refused on the driver too, before anything is deleted.
    from airflow_delta.engine import RetentionTooShortError

    with pytest.raises(RetentionTooShortError):
        run_spec(spark, VacuumSpec(table=TableRef(uri=table_path), identity=IDENTITY, retention_ms=0))
    assert table.vacuum(retention=timedelta(0), enforce_retention_duration=False, dry_run=True).num_files_to_delete == 0


def test_a_convert_spec_reads_footers_on_executors_and_commits_version_zero(spark: Any, tmp_path: Path) -> None:
    expected = write_hive_dir(tmp_path / "dir", PARTITIONS)
    spec = ConvertSpec(
        table=TableRef(uri=str(tmp_path / "dir")), identity=IDENTITY, partition_schema=PARTITION_SCHEMA, local_below=0
    )
    assert spec_from_json(spec.to_json()) == spec

    result = run_spec(spark, spec_from_json(spec.to_json()))

    assert (result.operation, result.version, result.metrics["numFiles"]) == ("CONVERT", 0, len(PARTITIONS))
    assert_oracles_read(tmp_path / "dir", expected)
