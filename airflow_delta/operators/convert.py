"""``ConvertToDeltaOperator`` and ``GenerateSymlinkManifestOperator``: thin, in the worker.

Each opens the table through :class:`~airflow_delta.hooks.delta.DeltaHook` (the ``delta``
connection's storage options), makes one engine call and returns a small JSON dict:

* ``ConvertToDeltaOperator``: ``DeltaTable.convert_to_delta`` (footers read on a thread
  pool; for directories whose footers outgrow one machine, call
  ``airflow_delta.spark.convert.run_convert`` from a Spark job).
* ``GenerateSymlinkManifestOperator``: ``DeltaTable.generate_symlink_manifest`` (full
  generation; tables with ``delta.compatibility.symlinkFormatManifest.enabled`` also get
  incremental updates after each of our commits).

Delta errors become retryable or non-retryable task errors, as in the other operators.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from airflow_delta.engine import DeltaTable, InvalidArgumentError, TableAlreadyExistsError
from airflow_delta.hooks.delta import DeltaHook
from airflow_delta.operators.maintenance import _DeltaMaintenanceOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["ConvertToDeltaOperator", "GenerateSymlinkManifestOperator"]


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
    :param delta_conn_id: The ``delta`` connection (storage options).
    :param storage_conn_id: An Airflow ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``
        connection mapped to storage options, over the ``delta`` connection's (docs/storage.md).
    """

    template_fields: Sequence[str] = ("table", "partition_schema", "properties")

    def __init__(
        self,
        *,
        table: str,
        partition_schema: str | Mapping[str, str] | None = None,
        properties: Mapping[str, str] | None = None,
        collect_stats: bool = True,
        parallelism: int = 8,
        if_delta: Literal["fail", "skip"] = "fail",
        **kwargs: Any,
    ) -> None:
        super().__init__(table=table, **kwargs)
        if if_delta not in ("fail", "skip"):
            raise InvalidArgumentError("if_delta", if_delta, "pass 'fail' or 'skip'")
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidArgumentError("parallelism", parallelism, "an int >= 1")
        self.partition_schema = partition_schema
        self.properties = properties
        self.collect_stats = collect_stats
        self.parallelism = parallelism
        self.if_delta = if_delta

    def run(self, hook: DeltaHook, table: DeltaTable, context: Context) -> dict[str, Any]:
        try:
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
        return result.to_dict()


class GenerateSymlinkManifestOperator(_DeltaMaintenanceOperator):
    """``GENERATE symlink_format_manifest FOR TABLE delta.`table```: manifests for Presto, Trino and Athena.

    Writes ``_symlink_format_manifest/<partition>/manifest`` for every partition (each file
    atomically) and removes those of partitions without files. Tables with deletion vectors
    or column mapping fail with a non-retryable ``ManifestNotSupportedError``, as in Delta.

    :param table: URI of the Delta table (templated).
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
