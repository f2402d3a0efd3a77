"""OPTIMIZE on Spark: the engine plans and commits, executors rewrite the bins.

The driver runs the engine's OPTIMIZE (``DeltaTable.optimize``: the plan, one
``dataChange=false`` commit per batch, Delta's metrics) with a rewriter that does each
batch's data work on the executors:

- **compaction / DV purge**: one Spark task per bin. The bins' file actions travel as
  Arrow IPC, one input row and one partition per bin, and each task calls the engine's
  :func:`~airflow_delta.engine.rewrite_bin` (read the live rows, write one file), the
  same code that runs in the worker;
- **Z-order**: a bin is a whole partition, possibly larger than one task's memory, so it
  goes through Spark as Delta's ``ZOrderClustering`` does: the live rows
  (:func:`~airflow_delta.spark.file_tasks.target_dataframe`); per Z column the bounds of
  1000 ranges from a sample, as Spark's ``RangePartitioner`` finds them for Delta's
  ``range_partition_id``; on the executors each row's range ids and their interleaved
  bits (the engine's ``range_ids_from_bounds`` and ``interleave_bits``); then
  ``repartitionByRange(files, zValue)`` and
  :func:`~airflow_delta.spark.file_tasks.write_dataframe`, one file per task.

A logical conflict (a concurrent DELETE of a file being rewritten) re-plans from the
new snapshot, with backoff, up to ``options.max_attempts``; batches committed before it
stay committed.

Exactly-once across Airflow retries: every OPTIMIZE runs under the task instance's
``txn`` appId (the engine's ``app_id``), so a retry, here or in the worker
(:func:`optimize_for_task`, shared by both), resumes after the batches earlier tries
committed and, when they finished, returns their result without rewriting anything.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sql_functions
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from airflow_delta.engine import (
    ZORDER_NUM_RANGES,
    AddFile,
    ConcurrentModificationError,
    DeltaTable,
    OptimizeBin,
    OptimizePlan,
    OptimizeResult,
    Snapshot,
    TableContext,
    TransactionAlreadyCommittedError,
    curve_key,
    range_bounds,
    range_ids_from_bounds,
    rewrite_bin,
)
from airflow_delta.spark.changes import backoff_seconds
from airflow_delta.spark.file_tasks import (
    ROW_TRACKING_COLUMNS,
    engine_errors_from_executors,
    target_dataframe,
    tracks_rows,
    write_dataframe,
)
from airflow_delta.spark.job_result import JobResult, job_tags
from airflow_delta.spark.specs import OptimizeSpec

__all__ = ["SparkBinRewriter", "job_result", "optimize_for_task", "run_optimize"]

_ZVALUE = "_delta_zvalue"
# Rows sampled per Z-order bin for the range bounds (Spark's RangePartitioner samples about 20 per range).
_SAMPLE_ROWS = 20 * ZORDER_NUM_RANGES
# write_dataframe cuts files by an in-memory size estimate; each task here writes one file.
_ONE_FILE = 1 << 62


class SparkBinRewriter:
    """The engine's ``BinRewriter`` on Spark: rewrites the bins of one batch, returns their ``add`` actions."""

    def __init__(self, spark: SparkSession, context: TableContext) -> None:
        self.spark = spark
        self.context = context

    def __call__(self, plan: OptimizePlan, bins: Sequence[OptimizeBin]) -> list[list[AddFile]]:
        if plan.zorder_by:
            return [self._zorder(plan, b) for b in bins]
        return self._compact(plan, bins)

    def _compact(self, plan: OptimizePlan, bins: Sequence[OptimizeBin]) -> list[list[AddFile]]:
        context = self.context
        max_file_size = plan.max_file_size
        payloads = [(i, _ipc(b.files)) for i, b in enumerate(bins)]
        # One slice per bin: each bin is one partition, so one task, as Delta runs one job per bin.
        rdd = self.spark.sparkContext.parallelize(payloads, len(payloads))
        inputs = self.spark.createDataFrame(rdd, "bin int, files binary")

        def rewrite(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for index, payload in zip(batch.column("bin").to_pylist(), batch.column("files").to_pylist(), strict=True):
                    files = pa.ipc.open_stream(payload).read_all()
                    adds = rewrite_bin(context, files, max_file_size=max_file_size)
                    texts = [json.dumps(a.to_json()) for a in adds]
                    yield pa.RecordBatch.from_arrays(
                        [pa.array([index] * len(texts), pa.int32()), pa.array(texts, pa.string())], ["bin", "add"]
                    )

        schema = StructType([StructField("bin", IntegerType(), False), StructField("add", StringType(), False)])
        with engine_errors_from_executors():
            rows = inputs.mapInArrow(rewrite, schema).collect()
        out: list[list[AddFile]] = [[] for _ in bins]
        for row in rows:
            out[row["bin"]].append(AddFile.from_json(json.loads(row["add"])))
        return out

    def _zorder(self, plan: OptimizePlan, bin: OptimizeBin) -> list[AddFile]:
        columns = list(plan.zorder_by)
        names = list(self.context.schema.names)
        if tracks_rows(self.context):  # the rows keep their stable row IDs and commit versions
            names += list(ROW_TRACKING_COLUMNS)
        rows = target_dataframe(self.spark, self.context, bin.files).select(*names)
        if plan.curve == "linear":  # a clustered table's one column: its values in order
            num_files = max(1, bin.size // plan.max_file_size)
            ordered = rows.repartitionByRange(num_files, *columns).sortWithinPartitions(*columns)
            adds = write_dataframe(self.context, ordered, target_file_size=_ONE_FILE, repartition_by_partition_columns=False)
            return [dataclasses.replace(a, data_change=False) for a in adds]
        # Spark's RangePartitioner samples to find range bounds; so do we, once, on the driver.
        fraction = min(1.0, _SAMPLE_ROWS / max(1, _num_records(bin.files)))
        sample = rows.select(*columns).sample(withReplacement=False, fraction=fraction, seed=0).toArrow()
        bounds = [range_bounds(sample.column(c), ZORDER_NUM_RANGES) for c in columns]
        zvalues = _with_zvalue(rows, columns, bounds, plan.curve)
        num_files = max(1, bin.size // plan.max_file_size)
        clustered = (
            zvalues.repartitionByRange(num_files, sql_functions.col(_ZVALUE)).sortWithinPartitions(_ZVALUE).select(*names)
        )
        adds = write_dataframe(self.context, clustered, target_file_size=_ONE_FILE, repartition_by_partition_columns=False)
        return [dataclasses.replace(a, data_change=False) for a in adds]


def _num_records(files: pa.Table) -> int:
    """Rows in ``files`` by their statistics: only to size the sample."""
    total = 0
    for text in files.column("stats").to_pylist():  # one per file, not per row
        total += int(json.loads(text).get("numRecords", 0)) if text else 0
    return total


def _with_zvalue(rows: DataFrame, columns: list[str], bounds: list[pa.Array], curve: str = "zorder") -> DataFrame:
    """``rows`` plus Delta's Z-value (``interleave_bits`` of each column's range id) or, for a clustered
    table's several columns, its Hilbert index (``curve_key``), computed on executors."""
    schema = StructType([*rows.schema.fields, StructField(_ZVALUE, BinaryType(), False)])
    width = 4 * len(columns)

    def interleave(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            ids = [range_ids_from_bounds(batch.column(c), b) for c, b in zip(columns, bounds, strict=True)]
            packed = curve_key(ids, curve)
            values = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(width), batch.num_rows, [None, pa.py_buffer(packed.tobytes())]
            ).cast(pa.binary())
            out_schema = batch.schema.append(pa.field(_ZVALUE, pa.binary(), False))
            yield pa.RecordBatch.from_arrays([*batch.columns, values], schema=out_schema)

    return rows.mapInArrow(interleave, schema)


def _ipc(files: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, files.schema) as writer:
        writer.write_table(files)
    return sink.getvalue().to_pybytes()


def run_optimize(spark: SparkSession, spec: OptimizeSpec) -> JobResult:
    """Run the OPTIMIZE ``spec`` asks for on ``spark``; what it did.

    ``version`` is the last version committed (None when nothing needed rewriting, or a
    dry run), ``read_version`` the snapshot the last attempt planned on, ``metrics``
    Delta's OPTIMIZE metrics flattened to integers (every batch of the task instance,
    earlier tries' too), ``attempts`` how often it planned. Every batch's commit carries
    the task's identity in ``commitInfo.tags``, as the DML jobs' commits do.
    """
    result, attempts = optimize_for_task(spec, lambda table, snapshot: SparkBinRewriter(spark, table.context(snapshot)))
    return job_result(result, attempts)


def optimize_for_task(
    spec: OptimizeSpec, rewriter_for: Callable[[DeltaTable, Snapshot], SparkBinRewriter] | None = None
) -> tuple[OptimizeResult, int]:
    """The OPTIMIZE of ``spec`` for its task instance, and how many times it planned.

    The same loop wherever the bins are rewritten: ``rewriter_for`` gives the Spark
    rewriter of a snapshot, None rewrites in this process (the operator's worker path).
    Each attempt plans on the latest snapshot under the task's appId with its tags; a
    retryable conflict plans again after a backoff, up to ``spec.options.max_attempts``.
    When another try of the same task committed a first batch meanwhile
    (``TransactionAlreadyCommittedError``), the next attempt resumes after that try's
    batches: it cannot hit the same error again, as only a first batch carries the txn.
    """
    table = DeltaTable(spec.table.uri, spec.table.storage_options or None)
    options = spec.optimize_options()
    execution = spec.options
    attempt = 0
    while True:
        attempt += 1
        snapshot = table.snapshot()
        rewriter = None if rewriter_for is None else rewriter_for(table, snapshot)
        try:
            result = table.optimize(
                options, snapshot=snapshot, rewriter=rewriter, tags=job_tags(spec.identity, attempt),
                app_id=spec.identity.app_id,
            )
            return result, attempt
        except TransactionAlreadyCommittedError:
            continue
        except ConcurrentModificationError as error:
            if not error.retryable or attempt >= execution.max_attempts:
                raise
            time.sleep(backoff_seconds(execution, attempt))


def job_result(result: OptimizeResult, attempts: int) -> JobResult:
    """The JobResult of an OPTIMIZE: Delta's OptimizeMetrics flattened to integer metrics."""
    m = result.metrics
    dv = m["deletionVectorStats"]
    metrics = {
        "numFilesAdded": m["numFilesAdded"],
        "numFilesRemoved": m["numFilesRemoved"],
        "numAddedBytes": m["filesAdded"]["totalSize"],
        "numRemovedBytes": m["filesRemoved"]["totalSize"],
        "partitionsOptimized": m["partitionsOptimized"],
        "numBatches": m["numBatches"],
        "totalConsideredFiles": m["totalConsideredFiles"],
        "totalFilesSkipped": m["totalFilesSkipped"],
        "numDeletionVectorsRemoved": dv["numDeletionVectorsRemoved"],
        "numDeletionVectorRowsRemoved": dv["numDeletionVectorRowsRemoved"],
    }
    return JobResult(
        version=result.version,
        read_version=result.read_version,
        operation="OPTIMIZE",
        metrics={k: int(v) for k, v in metrics.items()},
        attempts=attempts,
    )
