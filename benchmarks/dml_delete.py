"""DELETE on Spark (``run_delete``): one row of the 10-million-row table, and one partition, beside delta-rs.

Cases, each side one fresh process per run (imports, and for ours the start of a
``local[2]`` SparkSession where the DELETE needs one, included in the wall time):

* ``worker dv delete 1 row``: the engine's DV delete in this process, as
  ``DeltaDeleteOperator(execution="auto")`` runs a small delete (the function of
  :mod:`benchmarks.delete`), vs delta-rs's delete;
* ``spark dv delete 1 row``: ``run_delete`` with deletion vectors on the ``dv`` table of
  :mod:`benchmarks.delete` (the same 10,000,000 rows delta-rs wrote), vs delta-rs's delete.
  ``id = 7654321`` is a predicate the engine evaluates as Spark does and its one row group's
  ``id`` chunk is below ``driver_scan_max_bytes``: the driver finds the row with the engine
  (:mod:`airflow_delta.spark.engine_rows`), no session is built;
* ``spark dv delete 1 row, spark search``: the same with ``driver_scan_max_bytes=0``: Spark
  SQL finds the row in a Spark stage, as every DV delete did before;
* ``spark rewrite delete 1 row``: ``run_delete`` with ``useDeletionVectors=false`` (the
  touched file rewritten on the executors), vs delta-rs's delete (which rewrites too);
* ``metadata-only delete, partition``: ``DELETE ... WHERE part = 'p3'`` on a
  1,000,000-row table of 10 partitions written by delta-rs: ours in the worker through
  the engine (what the operator does, no Spark), ours through ``run_delete`` with the
  job's lazy session (no session is built), and delta-rs's delete.

Ours reports the job's ``executionTimeMs``; ``summarize`` prints the DV-over-rewrite
ratio on execution time and the ratios to delta-rs. Not part of ``make test``: run it with
``python -m benchmarks dml_delete``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import delete as one_row
from benchmarks._harness import Case, Result, compile_engine_bytecode, data_dir

PARTITIONED_ROWS = 1_000_000
PARTITION_PREDICATE = "part = 'p3'"
_SCRATCH = Path(tempfile.gettempdir()) / "airflow-delta-bench-dml-delete"

# delta-rs's side is the one of benchmarks/delete.py: one implementation of the peer.
delta_rs_delete = one_row.delta_rs_delete


def _build_partitioned(target: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    ids = pa.array(range(PARTITIONED_ROWS), pa.int64())
    parts = pa.array([f"p{i % 10}" for i in range(PARTITIONED_ROWS)], pa.string())
    write_deltalake(str(tmp), pa.table({"id": ids, "part": parts}), partition_by=["part"], mode="overwrite")
    tmp.rename(target)


def cases() -> list[Case]:
    compile_engine_bytecode()  # the worker cases are mostly imports: measure them as installed
    base = data_dir("delete")  # the input of benchmarks/delete.py, built once there
    plain, dv = base / "plain", base / "dv"
    if not plain.exists():
        print(f"building the {one_row.NUM_ROWS:,}-row table with delta-rs (once; cached in {base})", file=sys.stderr)
        one_row._build_plain(plain)
    if not dv.exists():
        one_row._build_dv(plain, dv)
    partitioned = data_dir("dml_delete") / "partitioned"
    if not partitioned.exists():
        partitioned.parent.mkdir(parents=True, exist_ok=True)
        _build_partitioned(partitioned)
    print(f"# input: {one_row.NUM_ROWS:,} rows written by delta-rs, {one_row._describe(plain)}", flush=True)
    tables = (str(dv), str(plain))
    return [
        Case("worker dv delete 1 row", ours="worker_dv_delete", theirs="delta_rs_delete",
             args=tables, repeat=2, fresh=True, setup="fresh_copies"),
        Case("spark dv delete 1 row", ours="spark_dv_delete", theirs="delta_rs_delete",
             args=tables, repeat=2, fresh=True, setup="fresh_copies"),
        Case("spark dv delete 1 row, spark search", ours="spark_dv_delete_spark_search", theirs="delta_rs_delete",
             args=tables, repeat=2, fresh=True, setup="fresh_copies"),
        Case("spark rewrite delete 1 row", ours="spark_rewrite_delete", theirs="delta_rs_delete",
             args=tables, repeat=2, fresh=True, setup="fresh_copies"),
        Case("spark rewrite delete 1 row, Spark's reader", ours="spark_rewrite_delete_spark_reader",
             theirs="delta_rs_delete", args=tables, repeat=2, fresh=True, setup="fresh_copies"),
        Case("metadata-only delete, worker", ours="worker_partition_delete", theirs="delta_rs_partition_delete",
             args=(str(partitioned),), repeat=3, fresh=True, setup="fresh_partitioned_copy"),
        Case("metadata-only delete, spark", ours="spark_partition_delete", theirs="delta_rs_partition_delete",
             args=(str(partitioned),), repeat=2, fresh=True, setup="fresh_partitioned_copy"),
    ]


def fresh_copies(dv: str, plain: str) -> list[str]:
    """Untimed, before each run: new copies of both tables (hard-linked data files)."""
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    one_row._link_copy(Path(dv), _SCRATCH / "dv")
    one_row._link_copy(Path(plain), _SCRATCH / "plain")
    return [str(_SCRATCH / "dv"), str(_SCRATCH / "plain")]


def fresh_partitioned_copy(path: str) -> list[str]:
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    one_row._link_copy(Path(path), _SCRATCH / "partitioned")
    return [str(_SCRATCH / "partitioned")]


def _spark_delete(
    path: str, predicate: str, use_deletion_vectors: bool | None, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    import os

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from airflow_delta.spark.delete import run_delete
    from airflow_delta.spark.session import LazySession
    from airflow_delta.spark.specs import DeleteSpec, ExecutionOptions, TableRef, TaskIdentity

    # As the job program runs it: the session is built when the DELETE first needs it (a
    # metadata-only one never does); executionTimeMs leaves the session's start out.
    spark = LazySession(
        "airflow-delta-bench",
        {
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "2g",
            "spark.pyspark.python": sys.executable,
        },
    )
    try:
        spec = DeleteSpec(
            TableRef(path),
            predicate,
            TaskIdentity("bench", "delete", "run"),
            ExecutionOptions(use_deletion_vectors=use_deletion_vectors, **(options or {})),
        )
        result = run_delete(spark, spec)
    finally:
        spark.stop()
    return dict(result.metrics)


# The in-worker DV delete is benchmarks/delete.py's (what execution="auto" runs): one implementation.
worker_dv_delete = one_row.ours_dv_delete


def spark_dv_delete(dv: str, plain: str) -> dict[str, Any]:
    metrics = _spark_delete(dv, one_row.PREDICATE, None)
    assert metrics["numDeletedRows"] == 1 and metrics["numDeletionVectorsAdded"] == 1, metrics
    return {"executionTimeMs": metrics["executionTimeMs"]}


def spark_dv_delete_spark_search(dv: str, plain: str) -> dict[str, Any]:
    metrics = _spark_delete(dv, one_row.PREDICATE, None, {"driver_scan_max_bytes": 0})
    assert metrics["numDeletedRows"] == 1 and metrics["numDeletionVectorsAdded"] == 1, metrics
    return {"executionTimeMs": metrics["executionTimeMs"]}


def spark_rewrite_delete(dv: str, plain: str) -> dict[str, Any]:
    metrics = _spark_delete(plain, one_row.PREDICATE, False)
    assert metrics["numDeletedRows"] == 1 and metrics["numAddedFiles"] >= 1, metrics
    return {"executionTimeMs": metrics["executionTimeMs"]}


def spark_rewrite_delete_spark_reader(dv: str, plain: str) -> dict[str, Any]:
    """The rewrite with Spark's parquet reader (``reader="spark"``); ``auto`` reads with the engine's, faster here."""
    metrics = _spark_delete(plain, one_row.PREDICATE, False, {"reader": "spark"})
    assert metrics["numDeletedRows"] == 1 and metrics["numAddedFiles"] >= 1, metrics
    return {"executionTimeMs": metrics["executionTimeMs"]}


def spark_partition_delete(path: str) -> dict[str, Any]:
    metrics = _spark_delete(path, PARTITION_PREDICATE, None)
    assert metrics["numDeletedRows"] == PARTITIONED_ROWS // 10 and metrics["numAddedFiles"] == 0, metrics
    return {"executionTimeMs": metrics["executionTimeMs"]}


def worker_partition_delete(path: str) -> dict[str, Any]:
    from airflow_delta.engine import DeltaTable

    result = DeltaTable(path).delete(PARTITION_PREDICATE)
    assert result.num_deleted_rows == PARTITIONED_ROWS // 10, dict(result.metrics)
    return {"executionTimeMs": result.metrics["executionTimeMs"]}


def delta_rs_partition_delete(path: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    metrics = DeltaTable(path).delete(PARTITION_PREDICATE)
    assert metrics["num_deleted_rows"] == PARTITIONED_ROWS // 10, metrics
    return {"executionTimeMs": metrics["execution_time_ms"]}


def summarize(results: list[Result]) -> None:
    by_name = {r.case.name: r for r in results}

    def exec_ms(result: Result, side: str = "ours") -> float:
        measurement = getattr(result, side)
        return float(measurement.detail.get("executionTimeMs") or float("nan"))

    worker = by_name.get("worker dv delete 1 row")
    if worker is not None and worker.theirs is not None:
        print(
            f"# 1 row in the worker (DVs): {worker.ours.seconds:.2f} s wall ({exec_ms(worker):.0f} ms executionTimeMs), "
            f"delta-rs {worker.theirs.seconds:.2f} s: ratio {worker.ours.seconds / worker.theirs.seconds:.2f} (goal <= 0.3); "
            f"CPU {worker.ours.cpu_seconds:.2f} s vs {worker.theirs.cpu_seconds:.2f} s: {worker.ours.cpu_seconds / worker.theirs.cpu_seconds:.2f}",
            flush=True,
        )
    dv, rewrite = by_name.get("spark dv delete 1 row"), by_name.get("spark rewrite delete 1 row")
    if dv is not None and rewrite is not None:
        print(
            f"# 1 row on Spark: executionTimeMs DV {exec_ms(dv):.0f} ms, rewrite {exec_ms(rewrite):.0f} ms "
            f"(DV {exec_ms(rewrite) / max(exec_ms(dv), 1):.1f}x faster); delta-rs {exec_ms(dv, 'theirs'):.0f} ms; "
            f"wall DV {dv.ours.seconds:.1f} s, rewrite {rewrite.ours.seconds:.1f} s, delta-rs {dv.theirs.seconds:.1f} s "
            f"(ours / delta-rs: {dv.ours.seconds / dv.theirs.seconds:.2f} and {rewrite.ours.seconds / rewrite.theirs.seconds:.2f})",
            flush=True,
        )
    spark_read = by_name.get("spark rewrite delete 1 row, Spark's reader")
    if rewrite is not None and spark_read is not None:
        print(
            f"# rewrite on Spark by reader: executionTimeMs engine reader (auto) {exec_ms(rewrite):.0f} ms, "
            f"Spark's parquet reader {exec_ms(spark_read):.0f} ms (ratio {exec_ms(spark_read) / max(exec_ms(rewrite), 1):.2f}); "
            f"wall {rewrite.ours.seconds:.1f} s vs {spark_read.ours.seconds:.1f} s",
            flush=True,
        )
    searched = by_name.get("spark dv delete 1 row, spark search")
    if searched is not None and rewrite is not None:
        print(
            f"# 1 row on Spark, rows found by a Spark stage: executionTimeMs DV {exec_ms(searched):.0f} ms "
            f"(DV {exec_ms(rewrite) / max(exec_ms(searched), 1):.1f}x faster than the rewrite), "
            f"wall {searched.ours.seconds:.1f} s",
            flush=True,
        )
    for name in ("metadata-only delete, worker", "metadata-only delete, spark"):
        result = by_name.get(name)
        if result is not None and result.theirs is not None:
            print(
                f"# {name}: ours {result.ours.seconds:.2f} s wall ({exec_ms(result):.0f} ms executionTimeMs), "
                f"delta-rs {result.theirs.seconds:.2f} s ({exec_ms(result, 'theirs'):.0f} ms): "
                f"ratio {result.ours.seconds / result.theirs.seconds:.2f}",
                flush=True,
            )
    shutil.rmtree(_SCRATCH, ignore_errors=True)
