"""Maintaining a whole lake from a DAG: ``DeltaFleetHealthOperator`` reads the health of every
table of the fleet, ``DeltaMaintenancePlanOperator`` turns it into a budgeted plan whose lists
feed dynamic task mapping of the maintenance operators::

    health = DeltaFleetHealthOperator(task_id="health", prefix="s3://lake/")
    plan = DeltaMaintenancePlanOperator(task_id="plan", health=health.output, max_bytes_rewritten=50 << 30)
    OptimizeOperator.partial(task_id="optimize").expand_kwargs(planned_tasks(plan, "optimize"))
    VacuumOperator.partial(task_id="vacuum").expand_kwargs(planned_tasks(plan, "vacuum"))
    CheckpointOperator.partial(task_id="checkpoint").expand_kwargs(planned_tasks(plan, "checkpoint"))

(Airflow maps only over a task's return value, not over one key of it, so
:func:`planned_tasks` adds a small task per operation that picks its list out of the plan.)

Each table then runs as its own task instance, with its own retries and logs; each run
records itself in the maintenance history when one is configured (docs/fleet.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_delta.engine import (
    DEFAULT_DISCOVERY_DEPTH,
    DeltaError,
    InvalidArgumentError,
    MaintenanceBudget,
    MaintenanceRecord,
    TableHealthRecord,
    append_history,
    iter_fleet_health,
    plan_maintenance,
    read_history,
    resolve_fleet,
)
from airflow_delta.hooks.delta import DEFAULT_CONN_ID, DeltaHook
from airflow_delta.operators.retry import task_error
from airflow_delta.operators.task_identity import task_identity

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaFleetHealthOperator", "DeltaMaintenancePlanOperator", "PlannedTasksOperator", "planned_tasks"]

PLAN_KEYS = ("optimize", "vacuum", "checkpoint")


class DeltaFleetHealthOperator(BaseOperator):
    """The health of every table of a fleet, read in parallel from each table's log (never its data files).

    Name the fleet one way: ``tables`` (URIs), ``prefix`` (Delta tables are discovered under
    it, ``max_depth`` directory levels down, ``_delta_log`` marking a table), or
    ``tables_callable`` (returns URIs). Returns one JSON record per table
    (:class:`~airflow_delta.engine.TableHealthRecord`); a table that cannot be read, or uses
    a feature the engine refuses, has ``status`` ``unreadable`` or ``refused`` and a
    ``reason``, and never fails the task. With a maintenance history configured, each
    readable table's record is appended to it as a ``HEALTH`` row (the page's charts).

    :param tables: Table URIs (templated).
    :param prefix: A local path or object-store URI to discover tables under (templated).
    :param tables_callable: A callable returning table URIs.
    :param max_depth: Directory levels below ``prefix`` that discovery lists.
    :param parallelism: Tables read at once (memory holds at most about twice as many tables).
    :param target_file_size: The size compaction aims at; default each table's own.
    :param max_deleted_rows_ratio: A file's deleted-rows share above which OPTIMIZE purges it.
    :param record_history: Append ``HEALTH`` rows to the maintenance history, if one is configured.
    :param delta_conn_id: The ``delta`` connection (storage options, the history's location).
    :param storage_conn_id: An ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform`` connection.
    """

    template_fields: Sequence[str] = ("tables", "prefix")
    ui_color = "#5b8c5a"
    ui_fgcolor = "#ffffff"

    def __init__(
        self,
        *,
        tables: Sequence[str] | None = None,
        prefix: str | None = None,
        tables_callable: Callable[[], Iterable[str]] | None = None,
        max_depth: int = DEFAULT_DISCOVERY_DEPTH,
        parallelism: int = 8,
        target_file_size: int | None = None,
        max_deleted_rows_ratio: float = 0.05,
        record_history: bool = True,
        delta_conn_id: str = DEFAULT_CONN_ID,
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        sources = [s for s in (tables, prefix, tables_callable) if s is not None]
        if len(sources) != 1:
            raise InvalidArgumentError("tables", None, "name the fleet one way: tables=[...], prefix='...' or tables_callable=...")
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidArgumentError("parallelism", parallelism, "an int >= 1")
        self.tables = tables
        self.prefix = prefix
        self.tables_callable = tables_callable
        self.max_depth = max_depth
        self.parallelism = parallelism
        self.target_file_size = target_file_size
        self.max_deleted_rows_ratio = max_deleted_rows_ratio
        self.record_history = record_history
        self.delta_conn_id = delta_conn_id
        self.storage_conn_id = storage_conn_id

    def execute(self, context: Context) -> list[dict[str, Any]]:
        hook = DeltaHook(self.delta_conn_id, storage_conn_id=self.storage_conn_id)
        options = hook.settings.storage_options or None
        started = time.monotonic()
        try:
            uris = resolve_fleet(
                tables=self.tables, prefix=self.prefix, tables_callable=self.tables_callable,
                storage_options=options, max_depth=self.max_depth,
            )
            self.log.info("Fleet: %d table(s)", len(uris))
            records: list[TableHealthRecord] = []
            for record in iter_fleet_health(
                uris, options, parallelism=self.parallelism, target_file_size=self.target_file_size,
                max_deleted_rows_ratio=self.max_deleted_rows_ratio,
            ):
                if record.ok:
                    self.log.info("%s: version %s, %d file(s), %d small, %d vacuumable, %d commit(s) since checkpoint",
                                  record.table, record.version, record.num_files, record.small_files,
                                  record.vacuumable_files, record.commits_since_checkpoint)
                else:
                    self.log.warning("%s: %s: %s", record.table, record.status, record.reason)
                records.append(record)
        except DeltaError as error:
            raise task_error(error) from error
        self.log.info("Health of %d table(s) in %.1f s (%d not readable)", len(records), time.monotonic() - started,
                      sum(not r.ok for r in records))
        if self.record_history:
            self._record(hook, records, context)
        return [r.to_dict() for r in records]

    def _record(self, hook: DeltaHook, records: list[TableHealthRecord], context: Context) -> None:
        uri = hook.maintenance_history_uri()
        if uri is None:
            return
        identity = task_identity(context)
        rows = [
            MaintenanceRecord.from_health(r, dag_id=identity.dag_id, task_id=identity.task_id, run_id=identity.run_id,
                                          map_index=identity.map_index)
            for r in records if r.ok
        ]
        try:
            version = append_history(uri, rows, hook.settings.storage_options or None)
            self.log.info("Recorded %d health row(s) in the maintenance history %s (version %s)", len(rows), uri, version)
        except Exception:
            self.log.warning("Could not record the fleet's health in the maintenance history %s", uri, exc_info=True)


def _timedelta(name: str, value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return timedelta(seconds=value)
    raise InvalidArgumentError(name, value, "a timedelta or a number of seconds")


class DeltaMaintenancePlanOperator(BaseOperator):
    """Turn the fleet's health into maintenance tasks under a budget (:func:`~airflow_delta.engine.plan_maintenance`).

    Returns ``{"optimize": [...], "vacuum": [...], "checkpoint": [...], "decisions": [...],
    "bytes_rewritten": n}``: each list holds keyword-argument dicts for
    ``OptimizeOperator.partial(...).expand_kwargs(planned_tasks(plan, "optimize"))`` (and
    the same for VACUUM and CHECKPOINT). Every table's decision, chosen or skipped and why,
    goes to the task log and to ``decisions``. The cool-downs look at the maintenance history
    (when one is configured) and at the log tail's last OPTIMIZE and VACUUM.

    :param health: The records of :class:`DeltaFleetHealthOperator` (templated: its ``.output``).
    :param max_bytes_rewritten: Bytes the OPTIMIZE tasks may rewrite in all.
    :param max_tasks: Tasks in all.
    :param max_tables: Distinct tables.
    :param cooldowns: ``{operation: timedelta or seconds}``: the least time between two runs on a table.
    :param table_cooldowns: ``{glob: {operation: timedelta or seconds}}`` overrides for matching tables.
    :param exclude_tables: Globs of table URIs to leave alone.
    :param exclude_partitions: ``{glob: [partition predicate, ...]}`` that OPTIMIZE must not rewrite.
    :param operations: Which of ``OPTIMIZE``, ``VACUUM``, ``CHECKPOINT`` to plan.
    :param budget_options: Other :class:`~airflow_delta.engine.MaintenanceBudget` fields
        (``min_files_removed``, ``min_vacuum_bytes``, ``min_commits_since_checkpoint``...).
    :param operator_kwargs: ``{operation: {argument: value}}`` added to every task of that operation.
    :param delta_conn_id: The ``delta`` connection (where the history is).
    :param storage_conn_id: An ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform`` connection.
    """

    template_fields: Sequence[str] = ("health",)
    ui_color = "#5b8c5a"
    ui_fgcolor = "#ffffff"

    def __init__(
        self,
        *,
        health: Any,
        max_bytes_rewritten: int | None = None,
        max_tasks: int | None = None,
        max_tables: int | None = None,
        cooldowns: Mapping[str, timedelta | float] | None = None,
        table_cooldowns: Mapping[str, Mapping[str, timedelta | float]] | None = None,
        exclude_tables: Sequence[str] = (),
        exclude_partitions: Mapping[str, Sequence[str]] | None = None,
        operations: Sequence[str] = ("OPTIMIZE", "VACUUM", "CHECKPOINT"),
        budget_options: Mapping[str, Any] | None = None,
        operator_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        delta_conn_id: str = DEFAULT_CONN_ID,
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.health = health
        self.operator_kwargs = dict(operator_kwargs or {})
        self.delta_conn_id = delta_conn_id
        self.storage_conn_id = storage_conn_id
        fields: dict[str, Any] = dict(budget_options or {})
        if cooldowns is not None:
            defaults = MaintenanceBudget().cooldowns
            fields["cooldowns"] = {**defaults, **{op: _timedelta(f"cooldowns[{op!r}]", v) for op, v in cooldowns.items()}}
        if table_cooldowns is not None:
            fields["table_cooldowns"] = {
                glob: {op: _timedelta(f"table_cooldowns[{glob!r}][{op!r}]", v) for op, v in per.items()}
                for glob, per in table_cooldowns.items()
            }
        try:
            # Built now: a bad budget fails when the DAG is parsed, with the engine's message.
            self.budget = MaintenanceBudget(
                max_bytes_rewritten=max_bytes_rewritten, max_tasks=max_tasks, max_tables=max_tables,
                exclude_tables=exclude_tables, exclude_partitions=dict(exclude_partitions or {}),
                operations=operations, **fields,
            )
        except TypeError as error:
            raise InvalidArgumentError("budget_options", budget_options, f"MaintenanceBudget fields only ({error})") from None

    def execute(self, context: Context) -> dict[str, Any]:
        if not isinstance(self.health, list):
            raise InvalidArgumentError("health", type(self.health).__name__, "the list DeltaFleetHealthOperator returns")
        hook = DeltaHook(self.delta_conn_id, storage_conn_id=self.storage_conn_id)
        history: list[dict[str, Any]] = []
        uri = hook.maintenance_history_uri()
        if uri is not None:
            longest = max([*self.budget.cooldowns.values(),
                           *(v for per in self.budget.table_cooldowns.values() for v in per.values())],
                          default=timedelta(0))
            since = max(0, int((time.time() - longest.total_seconds()) * 1000))
            history = [r for r in read_history(uri, hook.settings.storage_options or None, since_ms=since)
                       if r["operation"] != "HEALTH"]
        try:
            plan = plan_maintenance(self.health, self.budget, history=history, operator_kwargs=self.operator_kwargs)
        except DeltaError as error:
            raise task_error(error) from error
        for d in plan.decisions:
            self.log.info("%s %s %s: %s", "CHOSEN " if d.chosen else "skipped", d.operation or "-", d.table, d.reason)
        self.log.info("Plan: %d OPTIMIZE, %d VACUUM, %d CHECKPOINT; %d byte(s) to rewrite",
                      len(plan.optimize), len(plan.vacuum), len(plan.checkpoint), plan.bytes_rewritten)
        return plan.to_dict()


class PlannedTasksOperator(BaseOperator):
    """Picks one operation's task list out of a plan, for ``expand_kwargs`` (see :func:`planned_tasks`).

    :param plan: The plan (templated: the :class:`DeltaMaintenancePlanOperator`'s ``.output``).
    :param operation: ``optimize``, ``vacuum`` or ``checkpoint``.
    """

    template_fields: Sequence[str] = ("plan",)
    ui_color = "#5b8c5a"
    ui_fgcolor = "#ffffff"

    def __init__(self, *, plan: Any, operation: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if operation not in PLAN_KEYS:
            raise InvalidArgumentError("operation", operation, f"one of {', '.join(PLAN_KEYS)}")
        self.plan = plan
        self.operation = operation

    def execute(self, context: Context) -> list[dict[str, Any]]:
        if not isinstance(self.plan, Mapping) or not isinstance(self.plan.get(self.operation), list):
            raise InvalidArgumentError("plan", type(self.plan).__name__, "the dict DeltaMaintenancePlanOperator returns")
        tasks = list(self.plan[self.operation])
        self.log.info("%d %s task(s): %s", len(tasks), self.operation.upper(), [t.get("table") for t in tasks])
        return tasks


def planned_tasks(plan: DeltaMaintenancePlanOperator, operation: str, **kwargs: Any) -> Any:
    """The keyword-argument list of ``operation`` (``optimize``, ``vacuum`` or ``checkpoint``) in
    ``plan``'s result, as an XCom argument for ``expand_kwargs``: a :class:`PlannedTasksOperator`
    named ``<plan task>_<operation>`` downstream of ``plan``."""
    if not isinstance(plan, DeltaMaintenancePlanOperator):
        raise InvalidArgumentError("plan", plan, "a DeltaMaintenancePlanOperator")
    kwargs.setdefault("task_id", f"{plan.task_id}_{operation}")
    return PlannedTasksOperator(plan=plan.output, operation=operation, **kwargs).output
