"""Scheduled table care from a DAG: ``VacuumOperator``, ``OptimizeOperator``,
``CheckpointOperator``, ``RestoreOperator``.

The operators are thin, like the DML ones: each opens the table through
:class:`~airflow_delta.hooks.delta.DeltaHook` (the ``delta`` connection's storage
options), calls one engine verb (``vacuum``, ``optimize``, ``checkpoint``, ``restore``)
and returns a small JSON dict with Delta's metrics. Only a large OPTIMIZE or a full VACUUM of
a large table leaves the worker: it submits an :class:`~airflow_delta.spark.specs.OptimizeSpec`
or a :class:`~airflow_delta.spark.specs.VacuumSpec` to Spark.

``only_if_needed=True`` (VACUUM, OPTIMIZE, CHECKPOINT) first asks the engine whether the
run would gain anything and, if not, skips the task (``AirflowSkipException``) with the
reason in the task log.

Retries are safe. OPTIMIZE and RESTORE commit under the task instance's ``txn`` appId
with its identity in ``commitInfo.tags``, as the DML operators do: a retry of a RESTORE
that committed returns that commit's result and restores nothing again; a retry of an
OPTIMIZE resumes after the batches earlier tries committed (and returns their result
when they finished). VACUUM and CHECKPOINT need no appId: running them again deletes
nothing that a first run kept, and rewrites the same checkpoint; a retry returns what
it did itself (see docs/maintenance.md).

Delta errors become :class:`~airflow_delta.operators.retry.DeltaRetryableError` (a
conflict: retry) or :class:`~airflow_delta.operators.retry.DeltaNonRetryableError`
(fail at once with the engine's message), as for the DML operators.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from airflow_delta.engine import (
    AppTransaction,
    CheckpointOptions,
    ConcurrentTransactionException,
    DeltaError,
    DeltaTable,
    FileIO,
    InvalidArgumentError,
    ListFiles,
    OptimizeOptions,
    OptimizeResult,
    TableListing,
    TableNotFoundError,
    TransactionAlreadyCommittedError,
    append_history,
    list_table_files,
    parse_interval,
    writer_features,
)
from airflow_delta.hooks.delta import DEFAULT_CONN_ID, DeltaHook
from airflow_delta.operators.history import maintenance_record
from airflow_delta.operators.lineage import DeltaLineageMixin
from airflow_delta.operators.links import SparkApplicationLink
from airflow_delta.operators.retry import task_error
from airflow_delta.operators.task_identity import task_identity
from airflow_delta.spark.job_result import job_tags
from airflow_delta.spark.specs import ExecutionOptions, OptimizeSpec, TableRef, TaskIdentity, VacuumSpec

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_delta.spark.job_result import JobResult

__all__ = ["CheckpointOperator", "OptimizeOperator", "RestoreOperator", "VacuumOperator"]

DEFAULT_OPTIMIZE_WORKER_THRESHOLD_BYTES = 1 << 30
"""``execution="auto"`` compacts in the worker when the planned input totals less."""

DEFAULT_VACUUM_WORKER_THRESHOLD_FILES = 500_000
"""``execution="auto"`` lists a ``full`` VACUUM in the worker up to this many live files."""

# What the VACUUM job returns beside Delta's metrics (spark/vacuum.py's job_result).
_VACUUM_JOB_FIELDS = ("retentionMillis", "deleteBeforeMillis", "startVersion", "skippedOutsideRoot")

_PARSE_TIME_IDENTITY = TaskIdentity(dag_id="parse", task_id="parse", run_id="parse")
"""Stands in for the task instance when arguments are checked as the DAG is parsed."""

_FILE_LIST_LOG_CHUNK = 1000
"""Paths per task-log line when a vacuum's file list goes to the log."""

MAX_LISTED_IN_XCOM = 20
"""At most this many partitions of an OPTIMIZE plan, or checkpoint files, in a return value.

XCom lives in the metadata database: a return value stays a small JSON dict whatever the
table's size. The counts are always there; the full plan goes to the task log.
"""


def _check_non_negative_int(name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(name, value, "an int >= 0" + (" or None" if optional else ""))


def _retention(value: timedelta | str | None) -> timedelta | None:
    """A retention given as a timedelta or a Delta interval string (``interval 7 days``), as templates render it."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        return parse_interval("retention", value)
    raise InvalidArgumentError("retention", value, "a timedelta, a Delta interval such as 'interval 7 days', or None")


def _listed_once() -> ListFiles:
    """A VACUUM lister that lists the table on its first call and returns that listing after."""
    listings: list[TableListing] = []

    def list_files(io: FileIO, root: str, partition_prefixes: tuple[str, ...], parallelism: int) -> TableListing:
        if not listings:
            listings.append(list_table_files(io, root, partition_prefixes, parallelism))
        return listings[0]

    return list_files


class _DeltaMaintenanceOperator(BaseOperator):
    """What the maintenance operators share: the connection, the table, engine errors as task errors,
    and the record of each run in the maintenance history (``HISTORY_OPERATION``; docs/fleet.md)."""

    template_fields: Sequence[str] = ("table",)
    operator_extra_links = (SparkApplicationLink(),)
    ui_color = "#5b8c5a"
    ui_fgcolor = "#ffffff"
    HISTORY_OPERATION: str | None = None
    """The operation's name in the maintenance history; None: runs are not recorded."""

    def __init__(
        self,
        *,
        table: str,
        delta_conn_id: str = DEFAULT_CONN_ID,
        storage_conn_id: str | None = None,
        maintenance_reason: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if maintenance_reason is not None and not isinstance(maintenance_reason, str):
            raise InvalidArgumentError("maintenance_reason", maintenance_reason, "a sentence, or None")
        self.table = table
        self.delta_conn_id = delta_conn_id
        self.storage_conn_id = storage_conn_id
        self.maintenance_reason = maintenance_reason
        self._hook: DeltaHook | None = None

    def on_kill(self) -> None:
        """Kill the Spark application, if one runs. Nothing half-made stays: OPTIMIZE's committed
        batches changed no data, VACUUM deleted only files no retained version needs, and
        CONVERT's version 0 appears only when complete."""
        if self._hook is not None:
            self._hook.on_kill()

    def execute(self, context: Context) -> dict[str, Any]:
        hook = self._hook = DeltaHook(self.delta_conn_id, storage_conn_id=self.storage_conn_id)
        started = time.monotonic()
        try:
            table = hook.table(self.table)
            self._log_latest_version(table)
            result = self.run(hook, table, context)
        except AirflowSkipException as skipped:
            self._record_history(hook, context, started, "skipped", None, str(skipped))
            raise
        except DeltaError as error:
            self._record_history(hook, context, started, "failed", None, str(error))
            raise task_error(error) from error
        except Exception as error:
            self._record_history(hook, context, started, "failed", None, str(error))
            raise
        self._record_history(hook, context, started, "success", result, None)
        return result

    def _record_history(
        self, hook: DeltaHook, context: Context, started: float, status: str, result: dict[str, Any] | None,
        error: str | None,
    ) -> None:
        """Append this run to the maintenance history, when one is configured; a failure to record
        is logged and never fails the maintenance itself (its commit is what counts)."""
        if self.HISTORY_OPERATION is None or (result is not None and result.get("dry_run")):
            return
        try:
            uri = hook.maintenance_history_uri()
            if uri is None:
                return
            record = maintenance_record(
                self.table, self.HISTORY_OPERATION, status, result or {},
                duration_ms=int((time.monotonic() - started) * 1000),
                reason=self.maintenance_reason if error is None else f"{self.maintenance_reason or ''} | {error}"[:2000],
                identity=task_identity(context),
            )
            version = append_history(uri, [record], hook.settings.storage_options or None)
            self.log.info("Recorded %s of %s in the maintenance history %s (version %s)",
                          self.HISTORY_OPERATION, self.table, uri, version)
        except Exception:
            self.log.warning("Could not record %s of %s in the maintenance history", self.HISTORY_OPERATION,
                             self.table, exc_info=True)

    def run(self, hook: DeltaHook, table: DeltaTable, context: Context) -> dict[str, Any]:
        raise NotImplementedError

    def _log_latest_version(self, table: DeltaTable) -> None:
        try:
            version = table.version()
        except TableNotFoundError:  # CONVERT TO DELTA starts from a directory with no table yet
            self.log.info("%s on %s: no Delta table there yet", self.task_type, self.table)
            return
        self.log.info("%s on %s: latest version %d", self.task_type, self.table, version)

    def skip(self, reason: str) -> None:
        self.log.info("Skipping: %s", reason)
        raise AirflowSkipException(reason)


class VacuumOperator(DeltaLineageMixin, _DeltaMaintenanceOperator):
    """``VACUUM table [RETAIN n HOURS] [LITE | FULL] [DRY RUN]`` on a Delta table.

    Deletes the files that no version within the retention needs. ``lite`` reads the log
    only; ``full`` also lists the table and removes orphans that were never committed. A
    real run commits VACUUM START and VACUUM END with Delta's metrics. The file list goes
    to ``file_list_path`` or, without one, to the task log; never to XCom.

    ``execution="spark"`` submits a ``full`` VACUUM as a Spark job whose executors list
    the table's directories (the driver plans with the engine's same rules and deletes on
    its bounded thread pool); ``"auto"`` does so when the table has more than
    ``worker_threshold_files`` live files, and runs in the worker otherwise. ``lite``
    lists nothing and always runs in the worker.

    :param table: URI of the Delta table (templated).
    :param mode: ``lite`` or ``full``.
    :param retention: A ``timedelta`` or a Delta interval such as ``interval 7 days``
        (templated); None takes ``delta.deletedFileRetentionDuration``. A shorter retention
        than the table's is refused unless ``enforce_retention_duration`` is False.
    :param dry_run: Report what would be deleted; delete and commit nothing.
    :param enforce_retention_duration: Refuse a retention shorter than the table's.
    :param file_list_path: A local file the list of deleted (or, in a dry run, deletable)
        paths is written to, one a line (templated); None logs the list instead.
    :param parallelism: Concurrent deletes (and listings) in the worker.
    :param only_if_needed: Skip the task when a dry run finds nothing to delete.
    :param execution: ``auto``, ``worker`` or ``spark`` (see above); ``spark`` needs ``full``.
    :param worker_threshold_files: ``auto`` lists in the worker up to this many live files.
    :param conf: Spark conf for the job, over the connection's (templated).
    :param maintenance_reason: Why this run was planned (the fleet planner's reason), kept with
        the run in the maintenance history (VACUUM, OPTIMIZE, CHECKPOINT and RESTORE record runs;
        docs/fleet.md).
    :param delta_conn_id: The ``delta`` connection (storage options, Spark connection, conf).
    :param storage_conn_id: An Airflow ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``
        connection mapped to storage options, over the ``delta`` connection's (docs/storage.md).
    """

    LINEAGE_OPERATION = HISTORY_OPERATION = "VACUUM"
    CHANGES_DATA = False  # dataChange=false: no default outlet (docs/maintenance-operators.md)

    template_fields: Sequence[str] = ("table", "retention", "file_list_path", "conf")

    def __init__(
        self,
        *,
        table: str,
        mode: Literal["lite", "full"] = "lite",
        retention: timedelta | str | None = None,
        dry_run: bool = False,
        enforce_retention_duration: bool = True,
        file_list_path: str | None = None,
        parallelism: int = 8,
        only_if_needed: bool = False,
        execution: Literal["auto", "worker", "spark"] = "auto",
        worker_threshold_files: int = DEFAULT_VACUUM_WORKER_THRESHOLD_FILES,
        conf: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(table=table, **kwargs)
        if mode not in ("lite", "full"):
            raise InvalidArgumentError("mode", mode, "one of 'lite' or 'full'")
        if execution not in ("auto", "worker", "spark"):
            raise InvalidArgumentError("execution", execution, "one of 'auto', 'worker' or 'spark'")
        if execution == "spark" and mode == "lite":
            raise InvalidArgumentError(
                "execution", execution, "'worker' or 'auto' with mode='lite': a lite VACUUM lists nothing to spread out"
            )
        _check_non_negative_int("worker_threshold_files", worker_threshold_files)
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidArgumentError("parallelism", parallelism, "an int >= 1")
        if not isinstance(retention, (timedelta, str, type(None))):
            raise InvalidArgumentError("retention", retention, "a timedelta, a Delta interval string, or None")
        self.mode = mode
        self.retention = retention
        self.dry_run = dry_run
        self.enforce_retention_duration = enforce_retention_duration
        self.file_list_path = file_list_path
        self.parallelism = parallelism
        self.only_if_needed = only_if_needed
        self.execution = execution
        self.worker_threshold_files = worker_threshold_files
        self.conf = conf

    def run(self, hook: DeltaHook, table: DeltaTable, context: Context) -> dict[str, Any]:
        if self._runs_on_spark(table):
            return self._run_on_spark(hook, context)
        arguments: dict[str, Any] = {
            "retention": _retention(self.retention),
            "mode": self.mode,
            "enforce_retention_duration": self.enforce_retention_duration,
            "parallelism": self.parallelism,
        }
        if self.only_if_needed and not self.dry_run:
            # A dry run, not health(): only it sees orphans (full) and a retention argument. Its
            # listing serves the real run too: listed before that run's snapshot, it can only
            # miss files written since, which the run then keeps.
            arguments["list_files"] = _listed_once()
            found = table.vacuum(dry_run=True, **arguments)
            if found.num_files_to_delete == 0:
                self.skip(f"VACUUM {self.mode} would delete no file of {self.table}")
        list_path = self.file_list_path
        to_log = list_path is None
        if to_log:
            handle, list_path = tempfile.mkstemp(prefix="vacuum-files-", suffix=".txt")
            os.close(handle)
        try:
            result = table.vacuum(dry_run=self.dry_run, file_list_path=list_path, **arguments)
            if to_log:
                self._log_file_list(list_path)
        finally:
            if to_log:
                os.unlink(list_path)
        self.log.info("VACUUM %s of %s (dry run: %s): metrics %s", self.mode, self.table, self.dry_run, result.metrics)
        return {
            "mode": result.mode,
            "dry_run": result.dry_run,
            "retention_ms": result.retention_ms,
            "delete_before_ms": result.delete_before_ms,
            "start_version": result.start_version,
            "end_version": result.end_version,
            "metrics": dict(result.metrics),
            "file_list_path": self.file_list_path,
            "skipped_outside_root": result.skipped_outside_root,
            "execution": "worker",
        }

    def _runs_on_spark(self, table: DeltaTable) -> bool:
        if self.execution != "auto" or self.mode == "lite":
            return self.execution == "spark"
        # The live file count stands for the listing's size: orphans are few next to it.
        live_files = table.snapshot().num_files
        on_spark = live_files > self.worker_threshold_files
        self.log.info(
            "VACUUM full of %s: %d live file(s) (threshold %d): listing %s",
            self.table, live_files, self.worker_threshold_files, "on Spark" if on_spark else "in the worker",
        )
        return on_spark

    def _run_on_spark(self, hook: DeltaHook, context: Context) -> dict[str, Any]:
        retention = _retention(self.retention)
        spec = VacuumSpec(
            table=TableRef(uri=self.table, storage_options=hook.settings.storage_options),
            identity=task_identity(context),
            mode=self.mode,
            retention_ms=None if retention is None else int(retention.total_seconds() * 1000),
            enforce_retention_duration=self.enforce_retention_duration,
            dry_run=self.dry_run,
            parallelism=self.parallelism,
            file_list_path=self.file_list_path,
        )
        if self.only_if_needed and not self.dry_run:
            # The check lists on Spark too: a second, dry-run job (its file list in the driver's log).
            found = hook.submit(dataclasses.replace(spec, dry_run=True, file_list_path=None), conf=self.conf)
            if found is not None and found.metrics.get("numFilesToDelete") == 0:
                self.skip(f"VACUUM {self.mode} would delete no file of {self.table}")
        printed: JobResult | None = hook.submit(spec, conf=self.conf)
        if printed is None:
            # Cluster deploy mode: the driver's output is not visible; the commits are in the log.
            self.log.warning("VACUUM of %s ran on Spark; its result was not visible to the worker", self.table)
        metrics = {} if printed is None else dict(printed.metrics)
        self.log.info("VACUUM %s of %s on Spark (dry run: %s): metrics %s", self.mode, self.table, self.dry_run, metrics)
        extra = {key: metrics.pop(key, None) for key in _VACUUM_JOB_FIELDS}
        return {
            "mode": self.mode,
            "dry_run": self.dry_run,
            "retention_ms": extra["retentionMillis"],
            "delete_before_ms": extra["deleteBeforeMillis"],
            "start_version": extra["startVersion"],
            "end_version": None if printed is None else printed.version,
            "metrics": metrics,
            "file_list_path": self.file_list_path,
            "skipped_outside_root": extra["skippedOutsideRoot"],
            "execution": "spark",
        }


    def _log_file_list(self, path: str) -> None:
        # A real run lists its plan; numDeletedFiles (logged after) counts the files that still existed.
        verb = "would delete" if self.dry_run else "planned"
        with open(path, encoding="utf-8") as listing:
            chunk: list[str] = []
            for line in listing:
                chunk.append(line.rstrip("\n"))
                if len(chunk) == _FILE_LIST_LOG_CHUNK:
                    self.log.info("VACUUM %s:\n%s", verb, "\n".join(chunk))
                    chunk = []
            if chunk:
                self.log.info("VACUUM %s:\n%s", verb, "\n".join(chunk))


def _is_clustered(table: DeltaTable) -> bool:
    """Whether OPTIMIZE clusters the table (liquid clustering) rather than compacts it."""
    return bool({"clustering", "liquid"} & writer_features(table.snapshot().protocol))


class OptimizeOperator(DeltaLineageMixin, _DeltaMaintenanceOperator):
    """``OPTIMIZE table [WHERE partition predicate] [ZORDER BY (columns)]`` with DV purge.

    Small files of each partition are compacted toward the target size (``dataChange=false``
    commits, one per batch), files whose deletion vectors delete more than
    ``max_deleted_rows_ratio`` of their rows are rewritten without them, and ``zorder_by``
    rewrites every selected file in Z-order. On a clustered table (liquid clustering)
    OPTIMIZE clusters by the table's clustering columns instead, incrementally, as
    Delta's does; ``zorder_by`` and ``where`` are refused there.

    ``execution="auto"`` plans in the worker (a dry run) and compacts there, with the
    engine and no Spark job, when the planned input totals less than
    ``worker_threshold_bytes``; otherwise it submits the OPTIMIZE job to Spark.
    ``"worker"`` and ``"spark"`` force one or the other. A dry run always stays in the
    worker.

    A retry of the task resumes: batches an earlier try committed are not rewritten, and
    when that try finished, its result is returned (see docs/optimize.md).

    :param table: URI of the Delta table (templated).
    :param where: A predicate on partition columns (templated); others are refused.
    :param zorder_by: Data columns with statistics to Z-order by.
    :param target_file_size: Bytes; default ``delta.targetFileSize``, else 1 GiB.
    :param min_file_size: Files below it are compacted (default: the target).
    :param max_file_size: The largest bin (default: the target).
    :param max_deleted_rows_ratio: Purge files whose DVs delete more than this share of rows.
    :param max_files: Budget: at most this many input files this run.
    :param max_bytes: Budget: at most this many input bytes this run.
    :param batch_size: Input bytes per commit (default: one commit).
    :param dry_run: Return the plan per partition; write and commit nothing.
    :param full: Clustered tables: recluster every file (Delta's ``OPTIMIZE FULL``).
    :param execution: ``auto``, ``worker`` or ``spark`` (see above).
    :param worker_threshold_bytes: ``auto`` compacts in the worker below this many input bytes.
    :param only_if_needed: Skip the task when the health report says OPTIMIZE gains nothing
        (no fewer files after it and no file above the purge ratio); never with ``zorder_by``,
        ``full``, or on a clustered table (compaction health says nothing about clustering).
    :param maintenance_reason: Why this run was planned (the fleet planner's reason), kept with
        the run in the maintenance history (VACUUM, OPTIMIZE, CHECKPOINT and RESTORE record runs;
        docs/fleet.md).
    :param delta_conn_id: The ``delta`` connection (storage options, Spark connection, conf).
    :param storage_conn_id: An Airflow ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``
        connection mapped to storage options, over the ``delta`` connection's (docs/storage.md).
    :param conf: Spark conf for the job, over the connection's. (templated)
    :param max_attempts: Plans on a conflict (a concurrent DELETE of a file being compacted).
    """

    LINEAGE_OPERATION = HISTORY_OPERATION = "OPTIMIZE"
    CHANGES_DATA = False  # dataChange=false: no default outlet (docs/maintenance-operators.md)

    template_fields: Sequence[str] = ("table", "where", "conf")

    def __init__(
        self,
        *,
        table: str,
        where: str | None = None,
        zorder_by: str | Sequence[str] = (),
        target_file_size: int | None = None,
        min_file_size: int | None = None,
        max_file_size: int | None = None,
        max_deleted_rows_ratio: float = OptimizeOptions().max_deleted_rows_ratio,
        max_files: int | None = None,
        max_bytes: int | None = None,
        batch_size: int | None = None,
        dry_run: bool = False,
        full: bool = False,
        execution: Literal["auto", "worker", "spark"] = "auto",
        worker_threshold_bytes: int = DEFAULT_OPTIMIZE_WORKER_THRESHOLD_BYTES,
        only_if_needed: bool = False,
        conf: dict[str, str] | None = None,
        max_attempts: int = 3,
        **kwargs: Any,
    ) -> None:
        super().__init__(table=table, **kwargs)
        if execution not in ("auto", "worker", "spark"):
            raise InvalidArgumentError("execution", execution, "one of 'auto', 'worker' or 'spark'")
        _check_non_negative_int("worker_threshold_bytes", worker_threshold_bytes)
        self.where = where
        # One column may come as a plain string (as the engine's OptimizeOptions takes it), not its characters.
        self.zorder_by = (zorder_by,) if isinstance(zorder_by, str) else tuple(zorder_by)
        self.target_file_size = target_file_size
        self.min_file_size = min_file_size
        self.max_file_size = max_file_size
        self.max_deleted_rows_ratio = max_deleted_rows_ratio
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.batch_size = batch_size
        self.dry_run = dry_run
        self.full = full
        self.execution = execution
        self.worker_threshold_bytes = worker_threshold_bytes
        self.only_if_needed = only_if_needed
        self.conf = conf
        self.max_attempts = max_attempts
        # Bad sizes, ratio, budget or attempts fail when the DAG is parsed, with the engine's messages.
        self._spec(TableRef(uri=table), _PARSE_TIME_IDENTITY)

    def run(self, hook: DeltaHook, table: DeltaTable, context: Context) -> dict[str, Any]:
        spec = self._spec(TableRef(uri=self.table, storage_options=hook.settings.storage_options), task_identity(context))
        app_id = spec.identity.app_id
        resuming = table.snapshot().transaction_version(app_id) is not None
        if resuming:
            # An earlier try committed batches: finish (or report) its OPTIMIZE, whatever health says now.
            self.log.info("An earlier try of this task committed OPTIMIZE batches on %s: resuming after them", self.table)
        elif self.only_if_needed and not self.zorder_by and not self.full and not _is_clustered(table):
            report = table.health(
                target_file_size=self.target_file_size, max_deleted_rows_ratio=float(self.max_deleted_rows_ratio)
            )
            if report.files_after_optimize >= report.num_files and report.files_above_purge_ratio == 0:
                self.skip(
                    f"OPTIMIZE would gain nothing on {self.table}: {report.num_files} file(s), "
                    f"{report.small_files} small, none above the purge ratio"
                )
        if self.dry_run:
            return self._worker_result(table.optimize(spec.optimize_options(), app_id=app_id), "worker", attempts=1)
        # What is left to do (a retry plans only what earlier tries did not commit), from the
        # metadata only: it goes to the task log and decides where the work runs.
        plan = table.optimize(dataclasses.replace(spec.optimize_options(), dry_run=True), app_id=app_id)
        self._log_plan(plan)
        if self._runs_in_worker(plan):
            from airflow_delta.spark.optimize import optimize_for_task

            result, attempts = optimize_for_task(spec)
            return self._worker_result(result, "worker", attempts=attempts)
        return self._run_on_spark(hook, table, spec)

    def _spec(self, table: TableRef, identity: TaskIdentity) -> OptimizeSpec:
        """The job's spec; its ``optimize_options()`` are the engine's options wherever OPTIMIZE runs."""
        return OptimizeSpec(
            table=table,
            identity=identity,
            where=self.where,
            zorder_by=self.zorder_by,
            target_file_size=self.target_file_size,
            min_file_size=self.min_file_size,
            max_file_size=self.max_file_size,
            max_deleted_rows_ratio=self.max_deleted_rows_ratio,  # checked as given: a bad value names the argument
            max_files=self.max_files,
            max_bytes=self.max_bytes,
            batch_size=self.batch_size,
            dry_run=self.dry_run,
            full=self.full,
            options=ExecutionOptions(max_attempts=self.max_attempts),
        )

    def _log_plan(self, plan: OptimizeResult) -> None:
        self.log.info(
            "OPTIMIZE plan of %s at version %d: %d file(s), %d bytes in %d partition(s) -> about %d file(s)",
            self.table,
            plan.read_version,
            sum(partition.files_in for partition in plan.plan),
            sum(partition.bytes_in for partition in plan.plan),
            len(plan.plan),
            sum(partition.files_out for partition in plan.plan),
        )

    def _runs_in_worker(self, plan: OptimizeResult) -> bool:
        if self.execution != "auto":
            return self.execution == "worker"
        planned = sum(partition.bytes_in for partition in plan.plan)
        in_worker = planned < self.worker_threshold_bytes
        self.log.info(
            "OPTIMIZE plans %d input byte(s) (threshold %d): running %s",
            planned,
            self.worker_threshold_bytes,
            "in the worker" if in_worker else "on Spark",
        )
        return in_worker

    def _worker_result(self, result: OptimizeResult, where: str, *, attempts: int) -> dict[str, Any]:
        from airflow_delta.spark.optimize import job_result

        flat = job_result(result, attempts=attempts)
        self.log.info(
            "OPTIMIZE of %s (dry run: %s): read version %d, committed version(s) %s, metrics %s",
            self.table,
            result.dry_run,
            result.read_version,
            list(result.versions),
            flat.metrics,
        )
        return {
            "versions": list(result.versions),
            "version": result.version,
            "read_version": result.read_version,
            "operation": "OPTIMIZE",
            "dry_run": result.dry_run,
            "execution": where,
            "attempts": attempts,
            "metrics": dict(flat.metrics),
            "plan_partitions": len(result.plan),
            "plan": self._plan_summary(result),
        }

    def _plan_summary(self, result: OptimizeResult) -> list[dict[str, Any]]:
        """The plan per partition: the first :data:`MAX_LISTED_IN_XCOM` for XCom, all of them in the task log."""
        rows = [
            {
                "partition_values": dict(partition.partition_values),
                "num_bins": partition.num_bins,
                "files_in": partition.files_in,
                "bytes_in": partition.bytes_in,
                "files_out": partition.files_out,
                "bytes_out": partition.bytes_out,
            }
            for partition in result.plan  # one entry per partition, not per file
        ]
        for start in range(0, len(rows), _FILE_LIST_LOG_CHUNK):
            self.log.info("OPTIMIZE plan per partition:\n%s", "\n".join(map(str, rows[start : start + _FILE_LIST_LOG_CHUNK])))
        return rows[:MAX_LISTED_IN_XCOM]

    def _run_on_spark(self, hook: DeltaHook, table: DeltaTable, spec: OptimizeSpec) -> dict[str, Any]:
        printed: JobResult | None = hook.submit(spec, conf=self.conf)
        committed = hook.find_commit(table, spec.identity.app_id, operation="OPTIMIZE")
        result = printed if printed is not None else committed
        self.log.info(
            "OPTIMIZE of %s on Spark: committed version %s (read %s), metrics %s",
            self.table,
            None if result is None else result.version,
            None if result is None else result.read_version,
            {} if result is None else dict(result.metrics),
        )
        return {
            "versions": None,  # the job prints only its last version
            "version": None if result is None else result.version,
            "read_version": None if result is None else result.read_version,
            "operation": "OPTIMIZE",
            "dry_run": False,
            "execution": "spark",
            "attempts": None if result is None else result.attempts,
            "metrics": {} if result is None else dict(result.metrics),
            "plan_partitions": None,
            "plan": [],
        }



class CheckpointOperator(DeltaLineageMixin, _DeltaMaintenanceOperator):
    """Write a checkpoint of a Delta table, then clean up its expired log.

    :param table: URI of the Delta table (templated).
    :param version: The version to checkpoint; None: the latest.
    :param kind: None follows ``delta.checkpointPolicy``; or force ``classic``,
        ``multi-part`` or ``v2``.
    :param parts: Parts of a ``multi-part`` checkpoint (at least 2).
    :param cleanup_log: Delete expired log files afterwards per ``delta.logRetentionDuration``.
    :param only_if_needed: Skip the task when the version already has the latest checkpoint.
    :param maintenance_reason: Why this run was planned (the fleet planner's reason), kept with
        the run in the maintenance history (VACUUM, OPTIMIZE, CHECKPOINT and RESTORE record runs;
        docs/fleet.md).
    :param delta_conn_id: The ``delta`` connection (storage options).
    :param storage_conn_id: An Airflow ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``
        connection mapped to storage options, over the ``delta`` connection's (docs/storage.md).
    """

    LINEAGE_OPERATION = HISTORY_OPERATION = "CHECKPOINT"
    CHANGES_DATA = COMMITS = False  # writes a checkpoint, no commit: no default outlet

    def __init__(
        self,
        *,
        table: str,
        version: int | None = None,
        kind: str | None = None,
        parts: int = 2,
        cleanup_log: bool = True,
        only_if_needed: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(table=table, **kwargs)
        _check_non_negative_int("version", version, optional=True)
        self.version = version
        self.kind = kind
        self.parts = parts
        self.cleanup_log = cleanup_log
        self.only_if_needed = only_if_needed
        self._options()  # a bad kind or parts fails when the DAG is parsed

    def _options(self) -> CheckpointOptions:
        return CheckpointOptions(kind=self.kind, parts=self.parts, cleanup_log=self.cleanup_log)

    def run(self, hook: DeltaHook, table: DeltaTable, context: Context) -> dict[str, Any]:
        if self.only_if_needed:
            report = table.health()
            target = report.version if self.version is None else self.version
            if report.last_checkpoint_version == target:
                self.skip(f"version {target} of {self.table} already has the latest checkpoint")
        result = table.checkpoint(self.version, self._options())
        self.log.info(
            "CHECKPOINT of %s: version %s (%s), %d file(s), %d bytes; %d log file(s) cleaned",
            self.table,
            result.version,
            result.kind,
            len(result.files),
            result.size_in_bytes,
            len(result.cleaned_log_files),
        )
        return {
            "version": result.version,
            "kind": result.kind,
            "num_files": len(result.files),
            "files": list(result.files[:MAX_LISTED_IN_XCOM]),
            "size_in_bytes": result.size_in_bytes,
            "cleaned_log_files": len(result.cleaned_log_files),
        }


class RestoreOperator(DeltaLineageMixin, _DeltaMaintenanceOperator):
    """``RESTORE TABLE table TO VERSION AS OF v | TIMESTAMP AS OF t`` in one commit.

    Fails before committing anything (a non-retryable ``RestoreFilesMissingError``) when a
    file the target version needs was vacuumed. Restoring a table that already equals the
    target commits nothing (``version`` None).

    The commit carries the task instance's ``txn`` appId: a retry whose earlier try
    committed returns that commit's result and restores nothing again.

    :param table: URI of the Delta table (templated).
    :param version: The version to restore; give this or ``timestamp``.
    :param timestamp: A datetime, ISO string or epoch ms: the last version committed at or
        before it (templated).
    :param maintenance_reason: Why this run was planned (the fleet planner's reason), kept with
        the run in the maintenance history (VACUUM, OPTIMIZE, CHECKPOINT and RESTORE record runs;
        docs/fleet.md).
    :param delta_conn_id: The ``delta`` connection (storage options).
    :param storage_conn_id: An Airflow ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``
        connection mapped to storage options, over the ``delta`` connection's (docs/storage.md).
    """

    LINEAGE_OPERATION = HISTORY_OPERATION = "RESTORE"

    template_fields: Sequence[str] = ("table", "timestamp")

    def __init__(
        self,
        *,
        table: str,
        version: int | None = None,
        timestamp: datetime | str | int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(table=table, **kwargs)
        if (version is None) == (timestamp is None):
            raise InvalidArgumentError("version", version, "exactly one of version or timestamp")
        _check_non_negative_int("version", version, optional=True)
        self.version = version
        self.timestamp = timestamp

    def run(self, hook: DeltaHook, table: DeltaTable, context: Context) -> dict[str, Any]:
        identity = task_identity(context)
        earlier = hook.find_commit(table, identity.app_id, operation="RESTORE")
        if earlier is not None:
            self.log.info("An earlier try of this task restored %s in version %s: not restoring again", self.table, earlier.version)
            return self._earlier_result(table, earlier)
        try:
            result = table.restore(
                self.version,
                self.timestamp,
                app_transaction=AppTransaction(identity.app_id, 1),
                tags=job_tags(identity, 1),
            )
        except (TransactionAlreadyCommittedError, ConcurrentTransactionException) as error:
            # Another try of this task instance committed while this one planned.
            earlier = hook.find_commit(table, identity.app_id, operation="RESTORE")
            if earlier is None:
                raise
            self.log.info("Another try of this task restored %s first (%s)", self.table, error)
            return self._earlier_result(table, earlier)
        self.log.info(
            "RESTORE of %s to version %s: committed %s, metrics %s",
            self.table,
            result.restored_version,
            result.version,
            dict(result.metrics),
        )
        return {
            "version": result.version,
            "read_version": result.read_version,
            "restored_version": result.restored_version,
            "operation": "RESTORE",
            "metrics": dict(result.metrics),
        }

    def _earlier_result(self, table: DeltaTable, earlier: JobResult) -> dict[str, Any]:
        # The version a timestamp names does not change, so it is found again rather than stored.
        restored = self.version if self.version is not None else table.snapshot(timestamp=self.timestamp).version
        return {
            "version": earlier.version,
            "read_version": earlier.read_version,
            "restored_version": restored,
            "operation": "RESTORE",
            "metrics": dict(earlier.metrics),
        }
