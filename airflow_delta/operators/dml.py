"""DELETE, UPDATE and MERGE on a Delta table from a DAG: ``DeltaDeleteOperator``,
``DeltaUpdateOperator``, ``DeltaMergeOperator``.

The operators are thin. Each builds its operation's spec (:mod:`airflow_delta.spark.specs`)
with the task instance's identity, and then:

1. looks in the table's log for an earlier try's commit with the same ``txn`` appId; if it
   is there, returns that commit's result and submits nothing (exactly once across
   retries);
2. runs the operation: on Spark through :class:`~airflow_delta.hooks.delta.DeltaHook`
   (``spark-submit`` of the DML program), or, for a DELETE that is metadata-only or small
   or a small MERGE the worker evaluates exactly as Spark, in the worker through the
   engine, with the same appId;
3. returns ``{version, read_version, operation, metrics, attempts}`` read from the log:
   the same wherever the driver ran.

Delta errors become :class:`~airflow_delta.operators.retry.DeltaRetryableError` (a
conflict: retry) or :class:`~airflow_delta.operators.retry.DeltaNonRetryableError`
(fail at once with the engine's message).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from airflow.sdk import BaseOperator

from airflow_delta.engine import DeltaError, InvalidArgumentError, InvalidFilterError
from airflow_delta.hooks.delta import DEFAULT_CONN_ID, DeltaHook, files_summary
from airflow_delta.operators.lineage import DeltaLineageMixin
from airflow_delta.operators.links import SparkApplicationLink
from airflow_delta.operators.retry import task_error
from airflow_delta.operators.task_identity import task_identity as _task_identity
from airflow_delta.spark.job_result import JobResult
from airflow_delta.spark.specs import (
    DeleteSpec,
    ExecutionOptions,
    MergeClause,
    MergeSource,
    MergeSpec,
    Spec,
    TableRef,
    TaskIdentity,
    UpdateSpec,
    sql_texts,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from airflow.sdk import Context

    from airflow_delta.engine import DeltaTable, Snapshot, TableContext, Transaction

# A DAG file that builds these operators (parsed by the DAG processor and again in every
# task process) imports neither pyarrow nor the engine's table layers: the engine (and
# pyarrow with it) is imported when a task runs, by the hook's ``table`` or by the
# functions below. Only the engine's error classes are imported here.

__all__ = ["DeltaDeleteOperator", "DeltaMergeOperator", "DeltaUpdateOperator"]

DEFAULT_WORKER_THRESHOLD_BYTES = 256 << 20
"""``execution="auto"`` runs a DELETE in the worker when its candidate files total less."""


def _sql_columns() -> ModuleType:
    """:mod:`airflow_delta.spark.sql_columns`, imported when a task reads SQL text: it loads sqlglot and its
    Spark dialect, which a DAG file that only builds operators (parsed by every scheduler loop) never needs."""
    from airflow_delta.spark import sql_columns

    return sql_columns


# SQL text made of these characters only, with no ``--`` or ``/*``, has no quote, backquote,
# comment, escape or ``;``: nothing in it that sqlglot's tokens could show Spark refuses
# (:func:`airflow_delta.spark.sql_columns.refuse_text_spark_refuses`), so a task whose texts
# are all plain (``t.id = s.id``, ``v + 1``) checks them without importing sqlglot.
_PLAIN_SQL_TEXT = re.compile(r"[A-Za-z0-9_\s.,()=<>!+*/%-]*")


def _refuse_text_spark_refuses(spec: Spec) -> None:
    """Fail at once on SQL text of ``spec`` that Spark is sure to refuse; sqlglot only for text that is not plain."""
    if all(
        _PLAIN_SQL_TEXT.fullmatch(text) and "--" not in text and "/*" not in text for _, text, _ in sql_texts(spec)
    ):
        return
    _sql_columns().refuse_text_spark_refuses(spec)


def _total_size(files: pa.Table) -> int:
    """The bytes of a table of files (``Snapshot.files``)."""
    import pyarrow.compute as pc

    return int(pc.sum(files.column("size")).as_py() or 0)


def _checked_execution(execution: object, worker_threshold_bytes: object) -> None:
    if execution not in ("auto", "spark", "worker"):
        raise InvalidArgumentError("execution", execution, "one of 'auto', 'spark' or 'worker'")
    if (
        isinstance(worker_threshold_bytes, bool)
        or not isinstance(worker_threshold_bytes, int)
        or worker_threshold_bytes < 0
    ):
        raise InvalidArgumentError("worker_threshold_bytes", worker_threshold_bytes, "an int >= 0")


def _as_dict(result: JobResult) -> dict[str, Any]:
    return {
        "version": result.version,
        "read_version": result.read_version,
        "operation": result.operation,
        "metrics": dict(result.metrics),
        "attempts": result.attempts,
    }


class _DeltaDmlOperator(BaseOperator):
    """What the three DML operators share: the connection, exactly-once, Spark, errors."""

    OPERATION: ClassVar[str]
    template_fields: Sequence[str] = ("table", "conf")
    template_fields_renderers: ClassVar[dict[str, str]] = {"conf": "json"}
    operator_extra_links = (SparkApplicationLink(),)
    ui_color = "#00add4"
    ui_fgcolor = "#ffffff"

    def __init__(
        self,
        *,
        table: str,
        delta_conn_id: str = DEFAULT_CONN_ID,
        conf: dict[str, str] | None = None,
        max_attempts: int = 3,
        use_deletion_vectors: bool | None = None,
        storage_conn_id: str | None = None,
        reader: str = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.delta_conn_id = delta_conn_id
        self.storage_conn_id = storage_conn_id
        self.conf = conf
        self.max_attempts = max_attempts
        self.use_deletion_vectors = use_deletion_vectors
        self.reader = reader
        self._options()  # a bad max_attempts, use_deletion_vectors or reader fails when the DAG is parsed
        self._hook: DeltaHook | None = None
        self._planned: tuple[Snapshot, str, pa.Table] | None = None

    # ------------------------------------------------------------------ parts
    def _options(self) -> ExecutionOptions:
        return ExecutionOptions(
            max_attempts=self.max_attempts, use_deletion_vectors=self.use_deletion_vectors, reader=self.reader
        )

    def _table_ref(self, hook: DeltaHook) -> TableRef:
        return TableRef(uri=self.table, storage_options=hook.settings.storage_options)

    def build_spec(self, identity: TaskIdentity, hook: DeltaHook) -> Spec:
        raise NotImplementedError

    def run_in_worker(self, table: DeltaTable, spec: Spec, snapshot: Snapshot) -> bool:
        """Whether this spec runs in the worker instead of on Spark (a DELETE or a MERGE can)."""
        return False

    def planned_files(self, snapshot: Snapshot, predicate: str) -> pa.Table:
        """``snapshot.plan_files(predicate)``, pruned once per snapshot and predicate: deciding where
        a DELETE runs and whether its job is small both need it."""
        if self._planned is None or self._planned[0] is not snapshot or self._planned[1] != predicate:
            self._planned = (snapshot, predicate, snapshot.plan_files(predicate))
        return self._planned[2]

    # ------------------------------------------------------------------ execute
    def execute(self, context: Context) -> dict[str, Any]:
        identity = _task_identity(context)
        hook = self._hook = DeltaHook(self.delta_conn_id, storage_conn_id=self.storage_conn_id)
        try:
            table = hook.table(self.table)
            snapshot = table.snapshot()
            earlier = hook.find_commit(table, identity.app_id, snapshot=snapshot, operation=self.OPERATION)
            if earlier is not None:
                self.log.info(
                    "An earlier try of this task instance already committed version %s (appId %s): "
                    "returning its result, applying nothing again",
                    earlier.version,
                    identity.app_id,
                )
                return _as_dict(earlier)
            self.log.info(
                "%s on %s: read version %d (%s live)",
                self.OPERATION, self.table, snapshot.version, files_summary(snapshot.files()),
            )
            spec = self.build_spec(identity, hook)
            # SQL text Spark is sure to refuse fails here, at once, before any job starts.
            _refuse_text_spark_refuses(spec)
            if self.run_in_worker(table, spec, snapshot):
                result = self._run_in_worker(table, spec, snapshot)
            else:
                result = self._run_on_spark(hook, table, spec, snapshot)
        except DeltaError as error:
            raise task_error(error) from error
        self.log.info(
            "%s on %s: committed version %s (read %s), %d attempt(s), metrics %s",
            result.operation,
            self.table,
            result.version,
            result.read_version,
            result.attempts,
            dict(result.metrics),
        )
        return _as_dict(result)

    def is_small_job(self, spec: Spec, snapshot: Snapshot) -> bool:
        """Whether the job will read only a few small files (its driver then does the file work).

        Planned from the log here (DELETE and UPDATE): the files the predicate may match
        total less than ``driver_max_bytes``. A predicate the engine cannot plan is not small.
        """
        if not isinstance(spec, (DeleteSpec, UpdateSpec)):
            return False
        predicate = spec.predicate
        if isinstance(spec, DeleteSpec) and (
            predicate is None or _sql_columns().references_only(predicate, snapshot.partition_columns)
        ):
            return True  # metadata-only: the job reads no file
        try:
            candidates = self.planned_files(snapshot, predicate)
        except InvalidFilterError:
            return False
        return _total_size(candidates) < spec.options.driver_max_bytes

    def _run_on_spark(self, hook: DeltaHook, table: DeltaTable, spec: Spec, snapshot: Snapshot) -> JobResult:
        printed = hook.submit(spec, conf=self.conf, small_job=self.is_small_job(spec, snapshot))
        committed = hook.find_commit(table, spec.identity.app_id, operation=self.OPERATION)
        if committed is not None:
            return committed
        if printed is not None:
            return printed  # the job matched nothing and committed nothing
        # The driver's output is not visible here (cluster mode) and nothing was committed.
        return JobResult(version=None, read_version=snapshot.version, operation=self.OPERATION, metrics={}, attempts=1)

    def _run_in_worker(self, table: DeltaTable, spec: Spec, snapshot: Snapshot) -> JobResult:
        raise NotImplementedError

    def on_kill(self) -> None:
        """Kill the Spark application, whatever the deploy mode; its commit cannot land afterwards."""
        if self._hook is not None:
            self._hook.on_kill()


class DeltaDeleteOperator(DeltaLineageMixin, _DeltaDmlOperator):
    """``DELETE FROM table [WHERE predicate]`` on a Delta table.

    With no predicate every file is removed; a predicate on partition columns only removes
    whole files, decided from the log. Otherwise matching rows are marked in deletion
    vectors (where the table enables them) or their files rewritten. A DELETE that matches
    no row commits nothing (``version`` None).

    ``execution="auto"`` runs in the Airflow worker, through the engine with no Spark job,
    when the delete is metadata-only (no predicate, or partition columns only) or when the
    candidate files left after pruning total less than ``worker_threshold_bytes``;
    otherwise on Spark. ``"spark"`` and ``"worker"`` force one or the other (a predicate
    the engine cannot evaluate, such as a Spark function, needs Spark).

    :param table: URI of the Delta table (templated).
    :param predicate: Spark SQL condition; rows where it is NULL stay. None deletes every
        row. (templated)
    :param execution: ``auto``, ``spark`` or ``worker`` (see above).
    :param worker_threshold_bytes: ``auto`` runs in the worker below this many bytes of
        candidate files.
    :param delta_conn_id: The ``delta`` connection (storage options, Spark connection,
        default conf, deploy mode).
    :param storage_conn_id: An Airflow ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``
        connection mapped to storage options, over the ``delta`` connection's (docs/storage.md).
    :param conf: Spark conf for this job, over the connection's. (templated)
    :param max_attempts: Attempts on a logical conflict (ConcurrentAppend, ConcurrentDeleteRead,
        ConcurrentDeleteDelete), the first included, before the task fails with a retryable error.
    :param use_deletion_vectors: None follows ``delta.enableDeletionVectors``; False rewrites
        files; True requires DVs.
    :param reader: who reads the target's files on Spark: ``"auto"`` (Spark's own parquet
        reader for MERGE's target where it reads the table exactly, the engine's elsewhere),
        ``"spark"`` or ``"engine"``.
    """

    OPERATION = LINEAGE_OPERATION = "DELETE"
    template_fields: Sequence[str] = ("table", "predicate", "conf")

    def __init__(
        self,
        *,
        table: str,
        predicate: str | None = None,
        execution: Literal["auto", "spark", "worker"] = "auto",
        worker_threshold_bytes: int = DEFAULT_WORKER_THRESHOLD_BYTES,
        **kwargs: Any,
    ) -> None:
        super().__init__(table=table, **kwargs)
        _checked_execution(execution, worker_threshold_bytes)
        self.predicate = predicate
        self.execution = execution
        self.worker_threshold_bytes = worker_threshold_bytes

    def build_spec(self, identity: TaskIdentity, hook: DeltaHook) -> DeleteSpec:
        return DeleteSpec(
            table=self._table_ref(hook), predicate=self.predicate, identity=identity, options=self._options()
        )

    def run_in_worker(self, table: DeltaTable, spec: Spec, snapshot: Snapshot) -> bool:
        assert isinstance(spec, DeleteSpec)
        if self.execution != "auto":
            return self.execution == "worker"
        if spec.predicate is None:
            self.log.info("A DELETE of every row is metadata-only: running in the worker, no Spark job")
            return True
        try:
            candidates = self.planned_files(snapshot, spec.predicate)
        except InvalidFilterError as error:
            if not _sql_columns().references_only(spec.predicate, snapshot.schema.names):
                raise  # a column the table does not have: Spark would fail the same way, later
            self.log.info("The engine cannot evaluate the predicate (%s): running on Spark", error)
            return False
        if _sql_columns().references_only(spec.predicate, snapshot.partition_columns):
            self.log.info("A predicate on partition columns only is metadata-only: running in the worker, no Spark job")
            return True
        size = _total_size(candidates)
        in_worker = size < self.worker_threshold_bytes
        self.log.info(
            "%d candidate file(s), %d bytes after pruning (threshold %d): running %s",
            candidates.num_rows,
            size,
            self.worker_threshold_bytes,
            "in the worker" if in_worker else "on Spark",
        )
        return in_worker

    def _run_in_worker(self, table: DeltaTable, spec: Spec, snapshot: Snapshot) -> JobResult:
        """The DELETE through the engine in this process, with the Spark job's attempts, tags and exactly-once.

        The engine stages it (``stage_delete``: pruning, the metadata-only case, DVs or
        rewrites); the job's driver loop (``run_with_retries``) commits it with the task's
        appId and tags, plans again on logical conflicts, and returns an earlier try's
        commit if one lands first. Nothing here starts Spark.
        """
        assert isinstance(spec, DeleteSpec)
        from airflow_delta.spark.commit_loop import StagedOperation, run_with_retries, uses_deletion_vectors

        predicate = spec.predicate

        def attempt(txn: Transaction, snapshot: Snapshot, context: TableContext) -> StagedOperation:
            use_dvs = uses_deletion_vectors(context, spec.options)
            from airflow_delta.engine import stage_delete

            metrics = stage_delete(txn, predicate, use_deletion_vectors=use_dvs)
            changed = bool(metrics.get("numDeletedRows") or metrics.get("numRemovedFiles"))
            parameters = {"predicate": [predicate] if predicate is not None else []}
            return StagedOperation("DELETE", parameters, metrics, commit=changed)

        result = run_with_retries(spec, attempt)
        if result.version is None:
            return result
        # The same return value as a job's: read back from the log.
        committed = self._hook.find_commit(table, spec.identity.app_id, operation="DELETE") if self._hook else None
        return committed if committed is not None else result


class DeltaUpdateOperator(DeltaLineageMixin, _DeltaDmlOperator):
    """``UPDATE table SET column = expression, ... [WHERE predicate]`` on a Delta table, on Spark or in the worker.

    With deletion vectors the old rows are marked in DVs and only the updated rows are
    written; without, the touched files are rewritten. A SET value is cast to the column's
    type by Spark's store-assignment rules; updated rows must satisfy the table's CHECK
    constraints, NOT NULL and invariants.

    ``execution="auto"`` runs the UPDATE in the Airflow worker, with the engine and pyarrow
    (:mod:`airflow_delta.spark.update_worker`), when the worker evaluates the predicate and
    every SET value exactly as Spark does (comparisons, IN, BETWEEN, IS NULL over columns
    and plain literals; values that are columns or literals stored unchanged or widened
    exactly) and the candidate files total less than ``worker_threshold_bytes``; otherwise
    on Spark, and the log says why. ``"spark"`` and ``"worker"`` force one or the other.

    :param table: URI of the Delta table (templated).
    :param set: Column name, or struct field path such as ``address.city``, -> Spark SQL
        expression. (templated)
    :param predicate: Spark SQL condition; rows where it is NULL are left alone. None
        updates every row. (templated)
    :param execution: ``auto``, ``spark`` or ``worker`` (see above).
    :param worker_threshold_bytes: ``auto`` runs in the worker below this many bytes of
        candidate files.
    :param delta_conn_id: The ``delta`` connection (storage options, Spark connection,
        default conf, deploy mode).
    :param storage_conn_id: An Airflow ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``
        connection mapped to storage options, over the ``delta`` connection's (docs/storage.md).
    :param conf: Spark conf for this job, over the connection's. (templated)
    :param max_attempts: Attempts on a logical conflict, the first included.
    :param use_deletion_vectors: None follows ``delta.enableDeletionVectors``; False rewrites
        files; True requires DVs.
    :param reader: who reads the target's files on Spark: ``"auto"`` (Spark's own parquet
        reader for MERGE's target where it reads the table exactly, the engine's elsewhere),
        ``"spark"`` or ``"engine"``.
    """

    OPERATION = LINEAGE_OPERATION = "UPDATE"
    template_fields: Sequence[str] = ("table", "set", "predicate", "conf")
    template_fields_renderers: ClassVar[dict[str, str]] = {"set": "json", "conf": "json"}

    def __init__(
        self,
        *,
        table: str,
        set: dict[str, str],
        predicate: str | None = None,
        execution: Literal["auto", "spark", "worker"] = "auto",
        worker_threshold_bytes: int = DEFAULT_WORKER_THRESHOLD_BYTES,
        **kwargs: Any,
    ) -> None:
        super().__init__(table=table, **kwargs)
        _checked_execution(execution, worker_threshold_bytes)
        self.set = set
        self.predicate = predicate
        self.execution = execution
        self.worker_threshold_bytes = worker_threshold_bytes

    def run_in_worker(self, table: DeltaTable, spec: Spec, snapshot: Snapshot) -> bool:
        """Whether this UPDATE runs in the worker (``airflow_delta.spark.update_worker``); the log says why or why not."""
        assert isinstance(spec, UpdateSpec)
        if self.execution == "spark":
            return False
        from airflow_delta.spark import update_worker

        reason = update_worker.table_refusal(snapshot) or update_worker.update_refusal(spec, snapshot.schema)
        if reason is not None:
            if self.execution == "worker":
                raise InvalidArgumentError(
                    "execution", "worker", f"an UPDATE the worker evaluates exactly as Spark does; here {reason}: use 'auto' or 'spark'"
                )
            self.log.info("UPDATE on Spark: the worker does not run it exactly as Spark would (%s)", reason)
            return False
        if self.execution == "worker":
            return True
        candidates = update_worker.candidate_files(snapshot, spec)
        size = _total_size(candidates)
        in_worker = size < self.worker_threshold_bytes
        self.log.info(
            "UPDATE: %d candidate file(s), %d bytes after pruning (threshold %d): running %s",
            candidates.num_rows, size, self.worker_threshold_bytes, "in the worker" if in_worker else "on Spark",
        )
        return in_worker

    def _run_in_worker(self, table: DeltaTable, spec: Spec, snapshot: Snapshot) -> JobResult:
        """The UPDATE with the engine and pyarrow in this process, through the job's driver loop; no Spark starts."""
        assert isinstance(spec, UpdateSpec)
        from airflow_delta.spark.update_worker import run_update_in_worker

        result = run_update_in_worker(spec)
        if result.version is None:
            return result
        committed = self._hook.find_commit(table, spec.identity.app_id, operation="UPDATE") if self._hook else None
        return committed if committed is not None else result

    def build_spec(self, identity: TaskIdentity, hook: DeltaHook) -> UpdateSpec:
        return UpdateSpec(
            table=self._table_ref(hook),
            set=self.set,
            predicate=self.predicate,
            identity=identity,
            options=self._options(),
        )


class DeltaMergeOperator(DeltaLineageMixin, _DeltaDmlOperator):
    """``MERGE INTO table USING source ON condition WHEN ...`` on a Delta table, on Spark or in the worker.

    Give either ``merge_sql`` (the whole statement, with ``sources`` naming what its
    ``USING`` reads; the statement's target is ``table``) or the structured ``source``,
    ``on`` and ``clauses``. Clauses run in Delta's order (WHEN
    MATCHED, WHEN NOT MATCHED [BY TARGET], WHEN NOT MATCHED BY SOURCE), each group in the
    order given. A target row that the ON condition joins with more than one source row
    fails the task at once (``MultipleSourceRowsMatchedError``), whatever the clause
    conditions, as in Delta; not when the only WHEN MATCHED clause is an unconditional
    DELETE, nor in an insert-only MERGE.

    In the structured form, ``on``, conditions and values name the two sides by
    ``source_alias`` and ``target_alias`` (``source`` and ``target`` unless given: with
    ``on="t.id = s.id"`` pass ``source_alias="s", target_alias="t"``). A clause's ``kind`` is
    ``matched_update``, ``matched_delete``, ``not_matched_insert``,
    ``not_matched_by_source_update`` or ``not_matched_by_source_delete``; ``"star": True``
    is ``UPDATE SET *`` / ``INSERT *``. A full example is in ``docs/operators.md``::

        DeltaMergeOperator(
            task_id="upsert",
            table="s3://lake/customers",
            source={"parquet": "s3://lake/incoming/customers/{{ ds }}/"},
            on="t.id = s.id",
            source_alias="s",
            target_alias="t",
            clauses=[
                {"kind": "matched_delete", "condition": "s.deleted"},
                {"kind": "matched_update", "assignments": {"email": "s.email"}},
                {"kind": "not_matched_insert", "star": True},
            ],
        )

    ``execution="auto"`` runs the MERGE in the Airflow worker, with the engine and pyarrow
    and no Spark job (:mod:`airflow_delta.spark.merge_worker`), when the worker evaluates
    every ON condition, clause condition and written value exactly as Spark does and the
    source and the candidate target files (after skipping by the source's keys) total less
    than ``worker_threshold_bytes``; otherwise on Spark, and the log says why. ``"spark"``
    forces Spark; ``"worker"`` forces the worker and fails at once for a MERGE it cannot
    run exactly as Spark. Both commit the same rows, metrics and parameters.

    :param table: URI of the target Delta table (templated).
    :param merge_sql: A ``MERGE INTO ... USING ... ON ... WHEN ...`` statement in Spark SQL
        (``MERGE WITH SCHEMA EVOLUTION INTO`` turns on schema evolution). (templated)
    :param sources: For ``merge_sql``: each table name its ``USING`` reads (directly or in a
        subquery) -> a :class:`~airflow_delta.spark.specs.MergeSource` or its JSON form
        (``{"delta": {"uri": ...}}`` or ``{"parquet": path}``). (templated)
    :param source: The source: a :class:`~airflow_delta.spark.specs.MergeSource`, or its JSON
        form ``{"delta": {"uri": ..., "version": ...}}``, ``{"parquet": path}`` or
        ``{"query": sql, "views": {name: {"delta": ...} | {"parquet": ...}}}``. (templated)
    :param on: The merge condition over ``source_alias`` and ``target_alias`` (by default
        ``source`` and ``target``). (templated)
    :param clauses: :class:`~airflow_delta.spark.specs.MergeClause` objects or their JSON
        form ``{"kind": "matched_update", "condition": ..., "assignments": {...}, "star": false}``
        (kinds above). (templated)
    :param source_alias: The source's alias in ``on`` and the clauses (default ``source``).
    :param target_alias: The target's alias in ``on`` and the clauses (default ``target``).
    :param schema_evolution: Let ``UPDATE SET *`` and ``INSERT *`` add the source's new columns.
    :param execution: ``auto``, ``spark`` or ``worker`` (see above).
    :param worker_threshold_bytes: ``auto`` runs in the worker below this many bytes of source
        rows (in memory) and candidate target files.
    :param delta_conn_id: The ``delta`` connection (storage options, Spark connection,
        default conf, deploy mode).
    :param storage_conn_id: An Airflow ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``
        connection mapped to storage options, over the ``delta`` connection's (docs/storage.md).
    :param conf: Spark conf for this job, over the connection's. (templated)
    :param max_attempts: Attempts on a logical conflict, the first included.
    :param use_deletion_vectors: None follows ``delta.enableDeletionVectors``; False rewrites
        files; True requires DVs.
    :param reader: who reads the target's files on Spark: ``"auto"`` (Spark's own parquet
        reader for MERGE's target where it reads the table exactly, the engine's elsewhere),
        ``"spark"`` or ``"engine"``.
    """

    OPERATION = LINEAGE_OPERATION = "MERGE"
    template_fields: Sequence[str] = ("table", "merge_sql", "sources", "source", "on", "clauses", "conf")
    template_fields_renderers: ClassVar[dict[str, str]] = {"merge_sql": "sql", "conf": "json"}

    def __init__(
        self,
        *,
        table: str,
        merge_sql: str | None = None,
        sources: Mapping[str, MergeSource | Mapping[str, Any]] | None = None,
        source: MergeSource | Mapping[str, Any] | None = None,
        on: str | None = None,
        clauses: Sequence[MergeClause | Mapping[str, Any]] | None = None,
        source_alias: str = "source",
        target_alias: str = "target",
        schema_evolution: bool = False,
        execution: Literal["auto", "spark", "worker"] = "auto",
        worker_threshold_bytes: int = DEFAULT_WORKER_THRESHOLD_BYTES,
        **kwargs: Any,
    ) -> None:
        super().__init__(table=table, **kwargs)
        _checked_execution(execution, worker_threshold_bytes)
        self.execution = execution
        self.worker_threshold_bytes = worker_threshold_bytes
        self._worker_source: tuple[MergeSpec, Any] | None = None
        structured = [
            name for name, value in (("source", source), ("on", on), ("clauses", clauses)) if value is not None
        ]
        if merge_sql is not None and structured:
            raise InvalidArgumentError(
                "merge_sql", merge_sql, f"either merge_sql or source/on/clauses, not both (also given: {structured})"
            )
        if merge_sql is None and len(structured) != 3:
            raise InvalidArgumentError("source", source, "a MERGE needs merge_sql, or all of source, on and clauses")
        if sources is not None and merge_sql is None:
            raise InvalidArgumentError("sources", sources, "sources only with merge_sql (give source otherwise)")
        self.merge_sql = merge_sql
        self.sources = sources
        self.source = source
        self.on = on
        self.clauses = clauses
        self.source_alias = source_alias
        self.target_alias = target_alias
        self.schema_evolution = schema_evolution

    def build_spec(self, identity: TaskIdentity, hook: DeltaHook) -> MergeSpec:
        target = self._table_ref(hook)
        if self.merge_sql is not None:
            from airflow_delta.spark.merge_sql import merge_spec_from_sql

            return merge_spec_from_sql(
                self.merge_sql,
                target=target,
                identity=identity,
                sources={name: _merge_source(f"sources.{name}", value) for name, value in (self.sources or {}).items()},
                schema_evolution=self.schema_evolution,
                options=self._options(),
            )
        source = _merge_source("source", self.source)
        clauses = tuple(
            clause if isinstance(clause, MergeClause) else MergeClause.from_obj(f"clauses[{i}]", clause)
            for i, clause in enumerate(self.clauses or ())
        )
        return MergeSpec(
            target=target,
            source=source,
            on=str(self.on),
            clauses=clauses,
            identity=identity,
            source_alias=self.source_alias,
            target_alias=self.target_alias,
            schema_evolution=self.schema_evolution,
            options=self._options(),
        )


    def run_in_worker(self, table: DeltaTable, spec: Spec, snapshot: Snapshot) -> bool:
        """Whether this MERGE runs in the worker (``airflow_delta.spark.merge_worker``); the log says why or why not."""
        assert isinstance(spec, MergeSpec)
        if self.execution == "spark":
            return False
        from airflow_delta.spark import merge_worker

        reason = merge_worker.table_refusal(snapshot) or merge_worker.source_refusal(spec.source)
        source = None
        if reason is None and self.execution == "auto":
            stored = merge_worker.source_file_bytes(spec.source)
            if stored >= self.worker_threshold_bytes:
                self.log.info(
                    "MERGE on Spark: the source's files hold %d bytes (threshold %d), not read in the worker",
                    stored, self.worker_threshold_bytes,
                )
                return False
        if reason is None:
            source = merge_worker.read_source(spec.source)
            reason = merge_worker.worker_refusal(spec, snapshot.schema, source.schema)
        if reason is not None:
            if self.execution == "worker":
                raise InvalidArgumentError(
                    "execution", "worker", f"a MERGE the worker evaluates exactly as Spark does; here {reason}: use 'auto' or 'spark'"
                )
            self.log.info("MERGE on Spark: the worker does not run it exactly as Spark would (%s)", reason)
            return False
        assert source is not None
        self._worker_source = (spec, source)
        if self.execution == "worker":
            return True
        bound = merge_worker.bind_merge(spec, snapshot.schema, source.schema)
        candidates = merge_worker.candidate_files(snapshot, bound, source)
        size = _total_size(candidates) + source.nbytes
        in_worker = size < self.worker_threshold_bytes
        self.log.info(
            "MERGE: %d source row(s) (%d bytes) and %d candidate target file(s) of %d bytes after skipping "
            "(threshold %d in all): running %s",
            source.num_rows, source.nbytes, candidates.num_rows, size - source.nbytes, self.worker_threshold_bytes,
            "in the worker" if in_worker else "on Spark",
        )
        return in_worker

    def _run_in_worker(self, table: DeltaTable, spec: Spec, snapshot: Snapshot) -> JobResult:
        """The MERGE with the engine and pyarrow in this process, through the Spark job's driver loop
        (``run_with_retries``: attempts, the task's appId and tags, exactly-once); no Spark starts."""
        assert isinstance(spec, MergeSpec)
        from airflow_delta.spark.merge_worker import run_merge_in_worker

        kept = self._worker_source
        result = run_merge_in_worker(spec, kept[1] if kept is not None and kept[0] is spec else None)
        if result.version is None:
            return result
        committed = self._hook.find_commit(table, spec.identity.app_id, operation="MERGE") if self._hook else None
        return committed if committed is not None else result


def _merge_source(name: str, value: object) -> MergeSource:
    """A MergeSource given as itself or in its JSON form (what a templated dict renders to)."""
    return value if isinstance(value, MergeSource) else MergeSource.from_obj(name, value)
