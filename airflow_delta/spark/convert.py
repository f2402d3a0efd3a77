"""CONVERT TO DELTA with the parquet footers read on Spark executors.

The engine plans the conversion (listing, partition directories, refusals), merges the
schema and commits version 0 on the driver; only the per-file footer work moves:
:class:`SparkFooterReader` runs the engine's :func:`~airflow_delta.engine.read_parquet_schema`
and :func:`~airflow_delta.engine.convert_file` in ``mapPartitions`` over the file list, so a
directory of hundreds of thousands of files is read by the cluster instead of one
machine. Below ``local_below`` files the thread pool of the worker is faster than
scheduling a job, and is used instead.

Executors reopen the storage from the table URI and storage options; they get plain
values (paths, partition values as strings, the metaData as JSON), never the plan.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from airflow_delta.engine import (
    AddFile,
    ConvertPlan,
    ConvertResult,
    DeltaTable,
    Metadata,
    SourceFile,
    TableLocation,
    ThreadPoolFooterReader,
    convert_file,
    read_parquet_schema,
)
from airflow_delta.spark.file_tasks import engine_errors_from_executors

# Files up to this count are read by the worker's threads: a Spark job costs seconds to schedule.
SPARK_FILE_THRESHOLD = 5_000
# Files per Spark task: enough tasks to balance over the cores, not one task per file.
_FILES_PER_TASK = 256


class SparkFooterReader:
    """A :class:`~airflow_delta.engine.FooterReader` that reads footers on executors (``mapPartitions``)."""

    def __init__(
        self,
        spark: SparkSession,
        table_uri: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        collect_stats: bool = True,
        local_below: int = SPARK_FILE_THRESHOLD,
        parallelism: int = 8,
    ) -> None:
        self.spark = spark
        self.table_uri = table_uri
        self.storage_options = dict(storage_options or {})
        self.collect_stats = collect_stats
        self.local_below = local_below
        self.local = ThreadPoolFooterReader(parallelism, collect_stats)
        self.used_spark = False

    def _on_spark(self, plan: ConvertPlan) -> bool:
        return len(plan.files) > self.local_below

    def _slices(self, count: int) -> int:
        cores = max(1, self.spark.sparkContext.defaultParallelism)
        return max(1, min(count, max(cores, -(-count // _FILES_PER_TASK))))

    def schemas(self, plan: ConvertPlan) -> list[pa.Schema]:
        if not self._on_spark(plan):
            return self.local.schemas(plan)
        self.used_spark = True
        uri, options = self.table_uri, self.storage_options

        def read(items: Iterable[tuple[int, str]]) -> Iterator[tuple[int, bytes]]:
            location = TableLocation.from_uri(uri, options or None)
            for index, relative_path in items:
                schema = read_parquet_schema(location.io, location.root, relative_path)
                yield index, schema.serialize().to_pybytes()

        items = [(i, f.relative_path) for i, f in enumerate(plan.files)]
        rdd = self.spark.sparkContext.parallelize(items, self._slices(len(items)))
        with engine_errors_from_executors():
            found = dict(rdd.mapPartitions(read).collect())
        return [pa.ipc.read_schema(pa.py_buffer(found[i])) for i in range(len(items))]

    def add_files(self, plan: ConvertPlan, metadata: Metadata) -> list[AddFile]:
        if not self._on_spark(plan):
            return self.local.add_files(plan, metadata)
        uri, options, collect_stats = self.table_uri, self.storage_options, self.collect_stats
        metadata_json = json.dumps(metadata.to_json())

        def build(
            items: Iterable[tuple[int, str, int, dict[str, str | None]]],
        ) -> Iterator[tuple[int, str]]:
            location = TableLocation.from_uri(uri, options or None)
            table_metadata = Metadata.from_json(json.loads(metadata_json))
            for index, relative_path, size, partition_values in items:
                add = convert_file(
                    location.io, location.root, SourceFile(relative_path, size), partition_values,
                    table_metadata, collect_stats,
                )
                yield index, json.dumps(add.to_json())

        items = [
            (i, f.relative_path, f.size, dict(plan.log_partition_values[i])) for i, f in enumerate(plan.files)
        ]
        rdd = self.spark.sparkContext.parallelize(items, self._slices(len(items)))
        with engine_errors_from_executors():
            found = dict(rdd.mapPartitions(build).collect())
        return [AddFile.from_json(json.loads(found[i])) for i in range(len(items))]


def run_convert(
    spark: SparkSession,
    table_uri: str,
    partition_schema: str | pa.Schema | Mapping[str, str] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    properties: Mapping[str, str] | None = None,
    collect_stats: bool = True,
    local_below: int = SPARK_FILE_THRESHOLD,
) -> ConvertResult:
    """``DeltaTable.convert_to_delta`` with footers read on executors when there are more than ``local_below`` files."""
    reader = SparkFooterReader(
        spark, table_uri, storage_options, collect_stats=collect_stats, local_below=local_below
    )
    return DeltaTable.convert_to_delta(
        table_uri, partition_schema, storage_options=storage_options, properties=properties,
        collect_stats=collect_stats, reader=reader,
    )


__all__ = ["SPARK_FILE_THRESHOLD", "SparkFooterReader", "run_convert"]
