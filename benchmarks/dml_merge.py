"""MERGE of 1,000,000 source rows (10% matching, the rest inserted) into a 10,000,000-row table.

Input (built once, cached under ``benchmarks/.data/dml_merge``): the target written by
delta-rs (``id`` 0..9,999,999, a double and a short string), in two logs sharing the data
files: ``plain`` (as delta-rs wrote it; delta-rs merges into it) and ``dv`` (plus a
commit enabling deletion vectors; ours merges into it, as a table that enables DVs is
where our MERGE marks updated rows instead of rewriting files). The source is one parquet
file: every 100th target id (100,000 rows, matched and updated) and 900,000 new ids.

The statement, on both sides::

    MERGE INTO t USING s ON t.id = s.id
    WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *

Ours is the Spark job's function, ``run_merge``, in a fresh process that starts a
``local[2]`` SparkSession (as ``spark-submit --master local[2]`` of the job would),
session start included. It reports the commit's ``executionTimeMs`` and the Spark
driver's peak memory: the Python driver process (measured by the harness) and the JVM
(its ``VmHWM``). delta-rs runs ``DeltaTable.merge`` with the source as an Arrow table.
``AIRFLOW_DELTA_BENCH_MERGE_ROWS`` scales the target (e.g. 50000000).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._harness import Case, Result, data_dir
from benchmarks.delete import _build_dv, _link_copy  # one way to make the DV copy of an input

NUM_ROWS = int(os.environ.get("AIRFLOW_DELTA_BENCH_MERGE_ROWS", "10000000"))
NUM_SOURCE = 1_000_000
MATCHED = NUM_SOURCE // 10
_BUILD_BATCH = 1_000_000
ON = "t.id = s.id"


def _batch(start: int, stop: int) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array(range(start, stop), pa.int64())
    return pa.record_batch(
        {
            "id": ids,
            "value": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
            "name": pc.binary_join_element_wise("n", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), ""),
        }
    )


def _build_target(target: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    first = _batch(0, 1)
    batches = (_batch(start, min(start + _BUILD_BATCH, NUM_ROWS)) for start in range(0, NUM_ROWS, _BUILD_BATCH))
    write_deltalake(str(tmp), pa.RecordBatchReader.from_batches(first.schema, batches), mode="overwrite")
    tmp.rename(target)


def _build_source(path: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    matched = np.arange(0, NUM_ROWS, NUM_ROWS // MATCHED, dtype=np.int64)[:MATCHED]
    new = np.arange(NUM_ROWS, NUM_ROWS + NUM_SOURCE - MATCHED, dtype=np.int64)
    ids = pa.array(np.concatenate([matched, new]))
    table = pa.table(
        {
            "id": ids,
            "value": pc.multiply(pc.cast(ids, pa.float64()), -1.0),
            "name": pa.array(["updated"] * NUM_SOURCE, pa.string()),
        }
    )
    tmp = path.with_name(path.name + ".building")
    pq.write_table(table, tmp)
    tmp.rename(path)


def cases() -> list[Case]:
    base = data_dir(f"dml_merge-{NUM_ROWS}")
    plain, dv, source = base / "plain", base / "dv", base / "source.parquet"
    if not plain.exists():
        print(f"building the {NUM_ROWS:,}-row target with delta-rs (once; cached in {base})", file=sys.stderr, flush=True)
        _build_target(plain)
    if not dv.exists():
        _build_dv(plain, dv)
    if not source.exists():
        _build_source(source)
    print(f"# input: {NUM_ROWS:,} target rows written by delta-rs; {NUM_SOURCE:,} source rows, {MATCHED:,} matching", flush=True)
    # The job as it runs by default (reader="auto": Spark's parquet reader for this target),
    # then with the engine's reader: the two target readers side by side.
    return [
        Case(
            f"merge 1M into {NUM_ROWS // 1_000_000}M{suffix}",
            ours=function,
            theirs="delta_rs_merge",
            args=(str(dv), str(plain), str(source)),
            # A 50M-row run takes minutes per side: one run each there.
            repeat=2 if NUM_ROWS <= 10_000_000 else 1,
            fresh=True,
            setup="fresh_copies",
        )
        for suffix, function in (("", "ours_merge"), (", engine reader", "ours_merge_engine_reader"))
    ]


_SCRATCH = Path(tempfile.gettempdir()) / f"airflow-delta-bench-merge-{NUM_ROWS}"  # one per size: runs may overlap


def fresh_copies(dv: str, plain: str, source: str) -> list[str]:
    """Untimed, before each run: new copies of both targets (hard-linked data files) for the run to modify."""
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    _link_copy(Path(dv), _SCRATCH / "dv")
    _link_copy(Path(plain), _SCRATCH / "plain")
    return [str(_SCRATCH / "dv"), str(_SCRATCH / "plain"), source]


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def ours_merge(dv: str, plain: str, source: str) -> dict[str, Any]:
    """The job's MERGE as it runs by default (``reader="auto"``: Spark's parquet reader for this local table)."""
    return _ours_merge(dv, source, "auto")


def ours_merge_engine_reader(dv: str, plain: str, source: str) -> dict[str, Any]:
    """The same MERGE with the engine's reader on executors (``reader="engine"``)."""
    return _ours_merge(dv, source, "engine")


def _ours_merge(dv: str, source: str, reader: str) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from airflow_delta.spark.merge import run_merge
    from airflow_delta.spark.session import job_session
    from airflow_delta.spark.specs import ExecutionOptions, MergeClause, MergeSource, MergeSpec, TableRef, TaskIdentity

    spark = job_session(
        "bench-merge",
        {
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            "spark.driver.memory": "2g",
            "spark.sql.shuffle.partitions": "8",
            "spark.pyspark.python": sys.executable,
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    spec = MergeSpec(
        target=TableRef(dv),
        source=MergeSource(parquet=source),
        on=ON,
        clauses=(MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)),
        identity=TaskIdentity("bench", "merge", "run"),
        source_alias="s",
        target_alias="t",
        options=ExecutionOptions(reader=reader),
    )
    result = run_merge(spark, spec)
    metrics = result.metrics
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (MATCHED, NUM_SOURCE - MATCHED), metrics
    jvm_pid = int(spark.sparkContext._gateway.jvm.java.lang.ProcessHandle.current().pid())
    jvm_peak = _peak_rss_mb(jvm_pid)
    spark.stop()
    return {"executionTimeMs": metrics["executionTimeMs"], "jvmPeakMb": round(jvm_peak)}


def delta_rs_merge(dv: str, plain: str, source: str) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    metrics = (
        DeltaTable(plain)
        .merge(source=pq.read_table(source), predicate=ON, source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert (metrics["num_target_rows_updated"], metrics["num_target_rows_inserted"]) == (
        MATCHED,
        NUM_SOURCE - MATCHED,
    ), metrics
    return {"executionTimeMs": metrics["execution_time_ms"]}


def summarize(results: list[Result]) -> None:
    by_reader = {r.case.name.endswith("engine reader"): r for r in results}
    if len(by_reader) == 2:
        spark_read, engine_read = by_reader[False].ours, by_reader[True].ours
        spark_ms = float(spark_read.detail.get("executionTimeMs") or 0)
        engine_ms = float(engine_read.detail.get("executionTimeMs") or 0)
        print(
            f"# target reader: executionTimeMs Spark's parquet reader (auto) {spark_ms:.0f} ms, engine reader "
            f"{engine_ms:.0f} ms (ratio {spark_ms / max(engine_ms, 1):.2f}); wall {spark_read.seconds:.1f} s vs "
            f"{engine_read.seconds:.1f} s",
            flush=True,
        )
    for result in results:
        theirs = result.theirs
        assert theirs is not None
        ours = result.ours
        print(
            f"# {result.case.name}: ours wall {ours.seconds:.1f} s (executionTimeMs "
            f"{ours.detail.get('executionTimeMs')}), Python driver peak {ours.peak_rss_mb:.0f} MB, "
            f"JVM driver peak {ours.detail.get('jvmPeakMb')} MB; delta-rs wall {theirs.seconds:.1f} s "
            f"(execution_time_ms {theirs.detail.get('executionTimeMs')}), peak {theirs.peak_rss_mb:.0f} MB; "
            f"wall ratio ours/delta-rs {ours.seconds / theirs.seconds:.2f}",
            flush=True,
        )
