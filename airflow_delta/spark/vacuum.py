"""VACUUM with the table's listing spread over Spark executors.

A full VACUUM lists every file below the table root. On a table whose listing outgrows
one machine (hundreds of thousands of partition directories on an object store), the
listing is the cost, so it moves to the cluster:

- the driver lists the root (:func:`~airflow_delta.engine.list_top_level`): the files
  directly under it and its non-hidden sub-directories (the partition directories of the
  first partition column, ``_change_data``, ...);
- each Spark task lists the subtrees of a share of those directories through the
  engine's FileIO (:func:`~airflow_delta.engine.list_table_files` ``under=`` the
  directory), reopened on the executor from the table URI and storage options, and
  returns (relative path, size, modification time) rows;
- the driver joins the pieces (:func:`~airflow_delta.engine.merge_listings`) and the
  engine plans with its one set of rules (retained paths, hidden paths, retention,
  paths outside the root): ``DeltaTable.vacuum(list_files=...)``.

The deletes stay on the driver, on the engine's bounded thread pool (batched
``DeleteObjects`` on object stores): deleting is cheap next to listing and must be
counted in one place for ``VACUUM END``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from pyspark.sql import SparkSession

from airflow_delta.engine import (
    DeltaTable,
    FileIO,
    ListFiles,
    TableListing,
    TableLocation,
    VacuumResult,
    list_table_files,
    list_top_level,
    merge_listings,
)
from airflow_delta.spark.file_tasks import engine_errors_from_executors
from airflow_delta.spark.job_result import JobResult
from airflow_delta.spark.specs import VacuumSpec

__all__ = ["job_result", "run_vacuum", "spark_lister"]

# Directories per Spark task: a partition directory is often small, one task each would
# spend more on scheduling than on listing.
_DIRECTORIES_PER_TASK = 16
# Paths per driver-log line when the file list goes to the log.
_LOG_CHUNK = 1000


def spark_lister(spark: SparkSession, table_uri: str, storage_options: Mapping[str, Any] | None = None) -> ListFiles:
    """A :data:`~airflow_delta.engine.ListFiles` that lists the root's subtrees on executors."""
    options = dict(storage_options or {})

    def list_files(io: FileIO, root: str, partition_prefixes: tuple[str, ...], parallelism: int) -> TableListing:
        top, directories = list_top_level(io, root, partition_prefixes)
        if not directories:
            return top

        def list_subtrees(relative_dirs: Iterable[str]) -> Iterator[tuple[list[str], list[int] | None, list[int] | None, int]]:
            location = TableLocation.from_uri(table_uri, options or None)
            for relative_dir in relative_dirs:
                piece = list_table_files(location.io, location.root, partition_prefixes, parallelism, under=relative_dir)
                yield piece.paths, piece.sizes, piece.mtimes, piece.directories

        cores = max(1, spark.sparkContext.defaultParallelism)
        slices = max(1, min(len(directories), max(cores, -(-len(directories) // _DIRECTORIES_PER_TASK))))
        rdd = spark.sparkContext.parallelize(directories, slices)
        with engine_errors_from_executors():
            pieces = rdd.mapPartitions(list_subtrees).collect()
        return merge_listings([top, *(TableListing(*piece) for piece in pieces)])

    return list_files


def run_vacuum(spark: SparkSession, spec: VacuumSpec) -> JobResult:
    """Run the VACUUM ``spec`` asks for, the listing (``full``) on ``spark``'s executors.

    Without ``spec.file_list_path`` the paths go to the driver's log (the task log in
    client mode), through a temporary file removed afterwards; never into the result.
    """
    table = DeltaTable(spec.table.uri, spec.table.storage_options or None)
    read_version = table.snapshot().version
    list_path = spec.file_list_path
    if list_path is None:
        handle, list_path = tempfile.mkstemp(prefix="vacuum-files-", suffix=".txt")
        os.close(handle)
    try:
        result = table.vacuum(
            retention=None if spec.retention_ms is None else timedelta(milliseconds=spec.retention_ms),
            mode=spec.mode,
            dry_run=spec.dry_run,
            enforce_retention_duration=spec.enforce_retention_duration,
            parallelism=spec.parallelism,
            file_list_path=list_path,
            list_files=spark_lister(spark, spec.table.uri, spec.table.storage_options),
        )
        if spec.file_list_path is None:
            _print_file_list(list_path, "would delete" if spec.dry_run else "deleted")
    finally:
        if spec.file_list_path is None:
            os.unlink(list_path)
    return job_result(result, read_version)


def _print_file_list(path: str, verb: str) -> None:
    with open(path, encoding="utf-8") as listing:
        chunk: list[str] = []
        for line in listing:
            chunk.append(line.rstrip("\n"))
            if len(chunk) == _LOG_CHUNK:
                print(f"VACUUM {verb}:\n" + "\n".join(chunk), flush=True)
                chunk = []
        if chunk:
            print(f"VACUUM {verb}:\n" + "\n".join(chunk), flush=True)


def job_result(result: VacuumResult, read_version: int) -> JobResult:
    """The JobResult of a VACUUM: Delta's metrics, plus what the operator returns beside them.

    ``version`` is the VACUUM END commit (None for a dry run, or a table we may not commit
    to); ``startVersion``, ``retentionMillis``, ``deleteBeforeMillis`` and
    ``skippedOutsideRoot`` ride in the metrics, as ints.
    """
    metrics = {key: int(value) for key, value in result.metrics.items()}
    metrics["retentionMillis"] = int(result.retention_ms)
    metrics["deleteBeforeMillis"] = int(result.delete_before_ms)
    metrics["skippedOutsideRoot"] = int(result.skipped_outside_root)
    if result.start_version is not None:
        metrics["startVersion"] = int(result.start_version)
    return JobResult(
        version=result.end_version, read_version=read_version, operation="VACUUM", metrics=metrics, attempts=1
    )
