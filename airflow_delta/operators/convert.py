"""``ConvertToDeltaOperator`` and ``GenerateSymlinkManifestOperator``: thin, in the worker.

Each opens the table through :class:`~airflow_delta.hooks.delta.DeltaHook` (the ``delta``
connection's storage options), makes one engine call and returns a small JSON dict:

* ``ConvertToDeltaOperator``: ``DeltaTable.convert_to_delta`` (footers read on a thread
  pool), or, for directories whose footers outgrow one machine, a Spark job
  (:class:`~airflow_delta.spark.specs.ConvertSpec`, ``airflow_delta.spark.convert.run_convert``:
  footers read on executors, version 0 committed by the driver).
* ``GenerateSymlinkManifestOperator``: ``DeltaTable.generate_symlink_manifest`` (full
  generation; tables with ``delta.compatibility.symlinkFormatManifest.enabled`` also get
  incremental updates after each of our commits).

Delta errors become retryable or non-retryable task errors, as in the other operators.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from airflow_delta.engine import (
    DeltaTable,
    InvalidArgumentError,
    TableAlreadyExistsError,
    TableLocation,
    parse_partition_schema,
    plan_convert,
)
from airflow_delta.hooks.delta import DeltaHook
from airflow_delta.operators.maintenance import _DeltaMaintenanceOperator
from airflow_delta.operators.task_identity import task_identity
from airflow_delta.spark.specs import ConvertSpec, TableRef

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DEFAULT_CONVERT_WORKER_THRESHOLD_FILES", "ConvertToDeltaOperator", "GenerateSymlinkManifestOperator"]

DEFAULT_CONVERT_WORKER_THRESHOLD_FILES = 5_000
"""``execution="auto"`` reads footers in the worker up to this many files (a Spark job costs seconds to start)."""


class ConvertToDeltaOperator(_DeltaMaintenanceOperator):
    """``CONVERT TO DELTA parquet.`table` [NO STATISTICS] [PARTITIONED BY (...)]``: version 0 of a new Delta table.

    :param table: URI of the parquet directory (templated).
    :param partition_schema: The Hive partition columns in directory order, as Spark DDL
        (``"year INT, region STRING"``, templated) or a mapping ``{name: type}``; None for an
        unpartitioned directory.
    :param properties: ``delta.*`` table properties of the new table (templated), e.g.
        ``{"delta.compatibility.symlinkFormatManifest.enabled": "true"}``.
    :param collect_stats: Write per-file statistics from the footers (Delta's default);
        False is ``NO STATISTICS``.
    :param parallelism: Footers read concurrently in the worker.
    :param if_delta: What to do when the directory is a Delta table already: ``fail``
        (a non-retryable ``TableAlreadyExistsError``) or ``skip`` the task (a retry of a
        conversion that committed, or a DAG run twice).
    :param execution: ``worker`` reads the footers on the worker's threads; ``spark``
        submits a Spark job that reads them on executors; ``auto`` lists the directory in the
        worker and submits to Spark when it holds more than ``worker_threshold_files`` files.
    :param worker_threshold_files: ``auto`` converts in the worker up to this many parquet files.
    :param conf: Spark conf for the job, over the connection's (templated).
    :param maintenance_reason: Why this run was planned (the fleet planner's reason), kept with
        the run in the maintenance history (VACUUM, OPTIMIZE, CHECKPOINT and RESTORE record runs;
        docs/fleet.md).
    :param delta_conn_id: The ``delta`` connection (storage options, Spark connection, conf).
    :param storage_conn_id: An Airflow ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``
        connection mapped to storage options, over the ``delta`` connection's (docs/storage.md).
    """

    template_fields: Sequence[str] = ("table", "partition_schema", "properties", "conf")

    def __init__(
        self,
        *,
        table: str,
        partition_schema: str | Mapping[str, str] | None = None,
        properties: Mapping[str, str] | None = None,
        collect_stats: bool = True,
        parallelism: int = 8,
        if_delta: Literal["fail", "skip"] = "fail",
        execution: Literal["auto", "worker", "spark"] = "auto",
        worker_threshold_files: int = DEFAULT_CONVERT_WORKER_THRESHOLD_FILES,
        conf: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(table=table, **kwargs)
        if if_delta not in ("fail", "skip"):
            raise InvalidArgumentError("if_delta", if_delta, "pass 'fail' or 'skip'")
        if execution not in ("auto", "worker", "spark"):
            raise InvalidArgumentError("execution", execution, "one of 'auto', 'worker' or 'spark'")
        if isinstance(worker_threshold_files, bool) or not isinstance(worker_threshold_files, int) or (
            worker_threshold_files < 0
        ):
            raise InvalidArgumentError("worker_threshold_files", worker_threshold_files, "an int >= 0")
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidArgumentError("parallelism", parallelism, "an int >= 1")
        self.partition_schema = partition_schema
        self.properties = properties
        self.collect_stats = collect_stats
        self.parallelism = parallelism
        self.if_delta = if_delta
        self.execution = execution
        self.worker_threshold_files = worker_threshold_files
        self.conf = conf

    def run(self, hook: DeltaHook, table: DeltaTable, context: Context) -> dict[str, Any]:
        try:
            if self._runs_on_spark(hook):
                return self._run_on_spark(hook, context)
            result = DeltaTable.convert_to_delta(
                self.table,
                self.partition_schema or None,
                storage_options=hook.settings.storage_options or None,
                properties=dict(self.properties) if self.properties else None,
                collect_stats=self.collect_stats,
                parallelism=self.parallelism,
            )
        except TableAlreadyExistsError:
            if self.if_delta == "skip":
                self.skip(f"{self.table} is a Delta table already")
            raise
        self.log.info(
            "CONVERT TO DELTA of %s: %d file(s), partitioned by %s",
            self.table, result.num_files, list(result.partition_columns) or "nothing",
        )
        return {**result.to_dict(), "execution": "worker"}

    def _runs_on_spark(self, hook: DeltaHook) -> bool:
        if self.execution != "auto":
            return self.execution == "spark"
        # The listing is the cheap part; the footers it counts are what a Spark job spreads out.
        location = TableLocation.from_uri(self.table, hook.settings.storage_options or None)
        files = len(plan_convert(location, parse_partition_schema(self.partition_schema or None)).files)
        on_spark = files > self.worker_threshold_files
        self.log.info(
            "CONVERT TO DELTA of %s: %d parquet file(s) (threshold %d): footers read %s",
            self.table, files, self.worker_threshold_files, "on Spark" if on_spark else "in the worker",
        )
        return on_spark

    def _run_on_spark(self, hook: DeltaHook, context: Context) -> dict[str, Any]:
        partition_schema = self.partition_schema or None
        spec = ConvertSpec(
            table=TableRef(uri=self.table, storage_options=hook.settings.storage_options),
            identity=task_identity(context),
            partition_schema=dict(partition_schema) if isinstance(partition_schema, Mapping) else partition_schema,
            properties=dict(self.properties or {}),
            collect_stats=self.collect_stats,
            local_below=0,  # the operator chose Spark: the driver reads no footer itself
        )
        printed = hook.submit(spec, conf=self.conf)
        # Version 0 is in the log whether or not the driver's output was visible (cluster mode).
        snapshot = hook.table(self.table).snapshot()
        self.log.info("CONVERT TO DELTA of %s on Spark: %s", self.table, printed)
        return {
            "version": snapshot.version,
            "numFiles": snapshot.num_files,
            "partitionColumns": list(snapshot.metadata.partition_columns),
            "schema": snapshot.schema.to_string(show_schema_metadata=False),
            "metrics": {} if printed is None else {k: v for k, v in printed.metrics.items() if k != "numFiles"},
            "execution": "spark",
        }



class GenerateSymlinkManifestOperator(_DeltaMaintenanceOperator):
    """``GENERATE symlink_format_manifest FOR TABLE delta.`table```: manifests for Presto, Trino and Athena.

    Writes ``_symlink_format_manifest/<partition>/manifest`` for every partition (each file
    atomically) and removes those of partitions without files. Tables with deletion vectors
    or column mapping fail with a non-retryable ``ManifestNotSupportedError``, as in Delta.

    :param table: URI of the Delta table (templated).
    :param maintenance_reason: Why this run was planned (the fleet planner's reason), kept with
        the run in the maintenance history (VACUUM, OPTIMIZE, CHECKPOINT and RESTORE record runs;
        docs/fleet.md).
    :param delta_conn_id: The ``delta`` connection (storage options).
    :param storage_conn_id: An Airflow ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``
        connection mapped to storage options, over the ``delta`` connection's (docs/storage.md).
    """

    def run(self, hook: DeltaHook, table: DeltaTable, context: Context) -> dict[str, Any]:
        result = table.generate_symlink_manifest()
        self.log.info(
            "GENERATE symlink_format_manifest of %s: %d manifest(s) written listing %d file(s), %d removed",
            self.table, len(result.written), result.num_data_files, len(result.deleted),
        )
        return {
            "mode": result.mode,
            "manifests_written": len(result.written),
            "manifests_deleted": len(result.deleted),
            "num_data_files": result.num_data_files,
        }
