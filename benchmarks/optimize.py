"""OPTIMIZE: compaction of 10,000 small files and Z-order of 10 million rows, ours vs delta-rs.

Inputs (built once, cached under ``benchmarks/.data/optimize``):

* ``small``: 10,000 data files of 100 rows each (1,000,000 rows: ``id``, two doubles, a
  short string) in 10 partitions of 1,000 files, committed in one commit by our writer;
* ``zorder``: 10,000,000 rows (``id``, uniform random ``x`` int64 and ``y`` double, a
  short string) written by delta-rs's ``write_deltalake``, unpartitioned.

Cases, each run a fresh process (imports, and for Spark the session's start, included)
on a fresh copy of the table (data files hard-linked, log copied; untimed ``setup``):

* compaction in the worker: ``DeltaTable.optimize()`` vs delta-rs ``optimize.compact()``;
* compaction on Spark local mode (``local[2]``): ``run_optimize`` vs the same delta-rs call;
* Z-order by ``(x, y)``: ``DeltaTable.optimize(OptimizeOptions(zorder_by=...))`` vs delta-rs
  ``optimize.z_order(["x", "y"])``, both with a 64 MiB target file size.

Each side checks its own outcome (files removed and added) and returns its file counts.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._harness import Case, Result, compile_engine_bytecode, data_dir
from benchmarks.delete import _link_copy

SMALL_FILES = 10_000
SMALL_PARTITIONS = 10
ROWS_PER_SMALL_FILE = 100
ZORDER_ROWS = 10_000_000
ZORDER_TARGET = 64 << 20
_BUILD_BATCH = 1_000_000


def _build_small(target: Path) -> None:
    import numpy as np
    import pyarrow as pa

    from airflow_delta.engine import DeltaTable, write_data_files

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    schema = pa.schema([("id", pa.int64()), ("a", pa.float64()), ("b", pa.float64()), ("s", pa.string()), ("p", pa.string())])
    table = DeltaTable.create(str(tmp), schema, partition_by=["p"])
    rows = SMALL_FILES * ROWS_PER_SMALL_FILE
    rng = np.random.default_rng(0)
    ids = np.arange(rows, dtype=np.int64)
    # Rows grouped by partition, so each file of the single append is one partition's 100 rows.
    data = pa.table(
        {
            "id": ids,
            "a": rng.random(rows),
            "b": rng.random(rows),
            "s": pa.array(np.char.add("s", (ids % 1000).astype(str)).tolist()),
            "p": pa.array(np.char.add("p", (ids // (rows // SMALL_PARTITIONS)).astype(str)).tolist()),
        },
        schema=schema,
    )
    snapshot = table.snapshot()
    with table.transaction() as txn:
        adds = []
        for start in range(0, rows, ROWS_PER_SMALL_FILE):  # one call per file: exactly 10,000 files
            part = data.slice(start, ROWS_PER_SMALL_FILE)
            adds.extend(write_data_files(snapshot, part, target_file_size=1 << 40, written=txn.written_files))
        txn.add_files(adds)
        txn.commit("WRITE", {"mode": "Append", "partitionBy": '["p"]'})
    files = table.snapshot().num_files
    if files != SMALL_FILES:
        raise RuntimeError(f"built {files} files, expected {SMALL_FILES}")
    tmp.rename(target)


def _build_zorder(target: Path) -> None:
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    schema = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("y", pa.float64()), ("s", pa.string())])
    rng = np.random.default_rng(1)

    def batches() -> Any:
        for start in range(0, ZORDER_ROWS, _BUILD_BATCH):
            ids = np.arange(start, start + _BUILD_BATCH, dtype=np.int64)
            yield pa.record_batch(
                {
                    "id": ids,
                    "x": rng.integers(0, 1_000_000, _BUILD_BATCH),
                    "y": rng.random(_BUILD_BATCH),
                    "s": pa.array(np.char.add("n", (ids % 10_000).astype(str)).tolist()),
                },
                schema=schema,
            )

    write_deltalake(str(tmp), pa.RecordBatchReader.from_batches(schema, batches()), mode="overwrite")
    tmp.rename(target)


# BENCH_OPTIMIZE_CASES=worker,spark,zorder (default: all) runs only some cases, e.g. the worker's
# compaction alone on a shared machine.
CASE_NAMES = ("worker", "spark", "zorder")


def cases() -> list[Case]:
    compile_engine_bytecode()  # fresh processes: measured as installed, not compiling on every import
    base = data_dir("optimize")
    small, zorder = base / "small", base / "zorder"
    wanted = [c.strip() for c in os.environ.get("BENCH_OPTIMIZE_CASES", ",".join(CASE_NAMES)).split(",") if c.strip()]
    unknown = sorted(set(wanted) - set(CASE_NAMES))
    if unknown:
        raise SystemExit(f"BENCH_OPTIMIZE_CASES: unknown case(s) {unknown}; choose from {', '.join(CASE_NAMES)}")
    if not small.exists() and {"worker", "spark"} & set(wanted):
        print(f"building {SMALL_FILES:,} small files (once; cached in {base})", file=sys.stderr, flush=True)
        _build_small(small)
    if not zorder.exists() and "zorder" in wanted:
        print(f"building the {ZORDER_ROWS:,}-row table with delta-rs (once)", file=sys.stderr, flush=True)
        _build_zorder(zorder)
    print(f"# inputs: {SMALL_FILES:,} files of {ROWS_PER_SMALL_FILE} rows in {SMALL_PARTITIONS} partitions; "
          f"{ZORDER_ROWS:,} rows written by delta-rs", flush=True)
    every = {
        "worker": Case("compact 10,000 small files (worker)", ours="ours_compact", theirs="delta_rs_compact",
                       args=(str(small),), repeat=2, fresh=True, setup="fresh_copy"),
        "spark": Case("compact 10,000 small files (Spark local[2])", ours="ours_compact_spark",
                      theirs="delta_rs_compact", args=(str(small),), repeat=2, fresh=True, setup="fresh_copy"),
        "zorder": Case("Z-order 10M rows by (x, y)", ours="ours_zorder", theirs="delta_rs_zorder",
                       args=(str(zorder),), repeat=2, fresh=True, setup="fresh_copy"),
    }
    return [every[name] for name in CASE_NAMES if name in wanted]


_SCRATCH = Path(tempfile.gettempdir()) / "airflow-delta-bench-optimize"


def fresh_copy(source: str) -> list[str]:
    """Untimed, before each run: a new copy of the table (hard-linked data files) for the run to optimize."""
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    _link_copy(Path(source), _SCRATCH)
    return [str(_SCRATCH)]


def ours_compact(path: str) -> dict[str, Any]:
    from airflow_delta.engine import DeltaTable

    result = DeltaTable(path).optimize()
    assert result.metrics["numFilesRemoved"] == SMALL_FILES, dict(result.metrics)
    return {"filesAdded": result.metrics["numFilesAdded"], "filesRemoved": result.metrics["numFilesRemoved"]}


def ours_compact_spark(path: str) -> dict[str, Any]:
    import os

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    from airflow_delta.spark.optimize import run_optimize
    from airflow_delta.spark.session import job_session
    from airflow_delta.spark.specs import OptimizeSpec, TableRef, TaskIdentity

    spark = job_session("optimize-benchmark", {
        "spark.master": "local[2]", "spark.ui.enabled": "false", "spark.pyspark.python": sys.executable,
        "spark.sql.shuffle.partitions": "4",
    })
    spark.sparkContext.setLogLevel("ERROR")
    result = run_optimize(spark, OptimizeSpec(TableRef(path), TaskIdentity("bench", "optimize", "run")))
    spark.stop()
    assert result.metrics["numFilesRemoved"] == SMALL_FILES, result
    return {"filesAdded": result.metrics["numFilesAdded"], "filesRemoved": result.metrics["numFilesRemoved"]}


def delta_rs_compact(path: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    metrics = DeltaTable(path).optimize.compact()
    assert metrics["numFilesRemoved"] == SMALL_FILES, metrics
    return {"filesAdded": metrics["numFilesAdded"], "filesRemoved": metrics["numFilesRemoved"]}


def ours_zorder(path: str) -> dict[str, Any]:
    from airflow_delta.engine import DeltaTable, OptimizeOptions

    result = DeltaTable(path).optimize(OptimizeOptions(zorder_by=["x", "y"], max_file_size=ZORDER_TARGET))
    assert result.metrics["numFilesAdded"] >= 1, dict(result.metrics)
    return {"filesAdded": result.metrics["numFilesAdded"], "filesRemoved": result.metrics["numFilesRemoved"]}


def delta_rs_zorder(path: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    metrics = DeltaTable(path).optimize.z_order(["x", "y"], target_size=ZORDER_TARGET)
    assert metrics["numFilesAdded"] >= 1, metrics
    return {"filesAdded": metrics["numFilesAdded"], "filesRemoved": metrics["numFilesRemoved"]}


def summarize(results: list[Result]) -> None:
    for r in results:
        theirs = r.theirs.detail if r.theirs is not None else {}
        print(f"# {r.case.name}: ours files {r.ours.detail.get('filesRemoved')} -> {r.ours.detail.get('filesAdded')}, "
              f"delta-rs {theirs.get('filesRemoved')} -> {theirs.get('filesAdded')}", flush=True)
        if "children_cpu_seconds" in r.ours.detail:  # the forked rewrite process (counted in ours cpu)
            print(f"# {r.case.name}: ours cpu includes {r.ours.detail['children_cpu_seconds']:.3f} s of the forked "
                  f"rewrite process, whose peak RSS was {r.ours.detail['largest_child_peak_rss_mb']} MB "
                  "(pages shared with the task included)", flush=True)
    shutil.rmtree(_SCRATCH, ignore_errors=True)
