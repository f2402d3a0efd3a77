"""OPTIMIZE on Spark (spark/optimize.py): executors rewrite, the engine plans and commits.

Rows are checked with delta-rs and delta-kernel-rs; the session is the shared local[2]
``spark`` fixture; examples are few, since every one starts Spark jobs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from airflow_delta.engine import DataFileNotFoundError, DeltaTable
from airflow_delta.spark.job_result import find_job_commit
from airflow_delta.spark.optimize import optimize_for_task, run_optimize
from airflow_delta.spark.specs import OptimizeSpec, TableRef, TaskIdentity
from tests.oracles import assert_oracles_read, read_with_deltars

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("y", pa.float64()), ("s", pa.string()), ("p", pa.string())])
IDENTITY = TaskIdentity("nightly", "optimize", "run-1")


def make_table(path: str, files_per_partition: int, rows_per_file: int, partitions: tuple[str, ...]) -> DeltaTable:
    t = DeltaTable.create(path, SCHEMA, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    rng = np.random.default_rng(7)
    start = 0
    for _ in range(files_per_partition):
        for part in partitions:
            ids = np.arange(start, start + rows_per_file, dtype=np.int64)
            t.append(pa.table({
                "id": ids,
                "x": rng.integers(0, 1000, rows_per_file),
                "y": rng.random(rows_per_file),
                "s": [f"s{i % 13}" if i % 5 else None for i in ids.tolist()],
                "p": [part] * rows_per_file,
            }, schema=SCHEMA))
            start += rows_per_file
    return t


def commit(path: str, version: int) -> list[dict[str, Any]]:
    text = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_compaction_and_dv_purge_on_spark(spark: Any, table_path: str) -> None:
    t = make_table(table_path, files_per_partition=4, rows_per_file=100, partitions=("a", "b"))
    t.delete("id % 6 = 0 AND p = 'a'")
    expected = read_with_deltars(table_path)

    result = run_optimize(spark, OptimizeSpec(TableRef(table_path), IDENTITY, batch_size=1))

    assert result.operation == "OPTIMIZE" and result.attempts == 1
    assert result.metrics["numFilesRemoved"] == 8 and result.metrics["numFilesAdded"] == 2
    assert result.metrics["numBatches"] == 2 and result.metrics["numDeletionVectorsRemoved"] == 4
    assert result.version == t.version()
    found = find_job_commit(t, IDENTITY.app_id)
    assert found is not None and found.version == result.version and found.operation == "OPTIMIZE"
    files = t.snapshot().files()
    assert files.num_rows == 2 and files.column("deletion_vector").null_count == 2
    for version in (result.version - 1, result.version):
        actions = commit(table_path, version)
        assert actions[0]["commitInfo"]["operation"] == "OPTIMIZE"
        assert all((a.get("add") or a.get("remove"))["dataChange"] is False for a in actions[1:] if "add" in a or "remove" in a)
    assert_oracles_read(table_path, expected)


def test_zorder_on_spark_clusters(spark: Any, table_path: str) -> None:
    t = make_table(table_path, files_per_partition=8, rows_per_file=1000, partitions=("a",))
    expected = read_with_deltars(table_path)
    total = sum(t.snapshot().files().column("size").to_pylist())

    result = run_optimize(spark, OptimizeSpec(TableRef(table_path), IDENTITY, zorder_by=("x", "y"), max_file_size=total // 8))

    stats = t.snapshot().files(stats=True).column("stats").to_pylist()
    boxes = [[(s["minValues"][c], s["maxValues"][c]) for c in ("x", "y")] for s in stats]
    pairs = [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes))]
    overlapping = sum(
        all(a[0] <= b[1] and b[0] <= a[1] for a, b in zip(boxes[i], boxes[j], strict=True)) for i, j in pairs
    )
    assert len(boxes) >= 6 and result.metrics["numFilesAdded"] == len(boxes)
    assert overlapping / len(pairs) < 0.5  # before: every file spans both columns' whole range
    info = commit(table_path, result.version)[0]["commitInfo"]
    assert info["operationParameters"]["zOrderBy"] == '["x","y"]'
    assert_oracles_read(table_path, expected)


def test_dry_run_on_spark_writes_nothing(spark: Any, table_path: str) -> None:
    t = make_table(table_path, files_per_partition=3, rows_per_file=10, partitions=("a",))
    version = t.version()
    result = run_optimize(spark, OptimizeSpec(TableRef(table_path), IDENTITY, dry_run=True))
    assert result.version is None and t.version() == version
    assert result.metrics["numFilesRemoved"] == 3  # what it would remove


def test_the_job_program_dispatches_optimize(spark: Any, table_path: str) -> None:
    from airflow_delta.spark.jobs.dml import run_spec

    table = make_table(table_path, files_per_partition=3, rows_per_file=20, partitions=("a",))
    before = read_with_deltars(table_path)
    spec = OptimizeSpec(TableRef(table_path), TaskIdentity("nightly", "optimize", "run-dispatch"))
    result = run_spec(spark, spec)
    assert result.operation == "OPTIMIZE" and result.version == table.version()
    assert result.metrics["numFilesRemoved"] == 3 and result.metrics["numFilesAdded"] == 1
    assert_oracles_read(table_path, before)


def test_a_spark_retry_resumes_after_a_worker_try_and_tags_alike(spark: Any, table_path: str) -> None:
    """A first try in the worker commits partition a's batch, then fails on partition b's missing file;
    the retry on Spark commits only partition b, with the same tags, and reports both batches."""
    t = make_table(table_path, files_per_partition=3, rows_per_file=50, partitions=("a", "b"))
    expected = read_with_deltars(table_path)
    b_file = Path(table_path) / t.snapshot().files("p = 'b'").column("path").to_pylist()[0]
    saved = b_file.read_bytes()
    b_file.unlink()
    spec = OptimizeSpec(TableRef(table_path), IDENTITY, batch_size=1)
    start = t.version()

    with pytest.raises(DataFileNotFoundError):
        optimize_for_task(spec)  # the worker path
    assert t.version() == start + 1
    b_file.write_bytes(saved)  # the storage hiccup is over

    result = run_optimize(spark, spec)

    assert result.version == start + 2
    assert (result.metrics["numFilesRemoved"], result.metrics["numFilesAdded"], result.metrics["numBatches"]) == (6, 2, 2)
    worker_tags, spark_tags = (
        next(a["commitInfo"]["tags"] for a in commit(table_path, v) if "commitInfo" in a) for v in (start + 1, start + 2)
    )
    assert set(worker_tags) == set(spark_tags)
    assert (worker_tags["airflowDelta.optimizeBatch"], spark_tags["airflowDelta.optimizeBatch"]) == ("1/2", "2/2")
    assert worker_tags["airflowDelta.appId"] == spark_tags["airflowDelta.appId"] == IDENTITY.app_id
    assert run_optimize(spark, spec).version == start + 2  # finished: a further retry rewrites nothing
    assert t.version() == start + 2
    assert_oracles_read(table_path, expected)
