"""The maintenance planner: health records in, a budgeted list of maintenance tasks out.

Pure: it reads no table. For each healthy table it proposes the maintenance the record
justifies (OPTIMIZE for small files or deletion vectors above the purge ratio, VACUUM for
expired tombstones, CHECKPOINT for a long log tail), drops what the exclusions and the
cool-downs forbid, ranks the rest by expected benefit per byte rewritten, and takes them
in that order while the budget lasts (bytes to rewrite, tasks, tables). Every table gets a
decision saying why it was chosen or skipped.

The benefit is a byte-equivalent estimate, documented so a user can tune it:

* OPTIMIZE: each file compaction removes saves ``file_cost_bytes`` (the cost of opening a
  file on every scan), plus the deleted rows' share of the bytes purged; its cost is the
  bytes rewritten (the small files, and the files above the purge ratio).
* VACUUM: the bytes it frees; it rewrites nothing, so its cost is the floor
  ``min_cost_bytes``.
* CHECKPOINT: ``commit_cost_bytes`` per commit every reader stops replaying; its cost is
  the floor too.

The plan's ``optimize``, ``vacuum`` and ``checkpoint`` lists are keyword arguments for the
maintenance operators, one dict per table, for dynamic task mapping
(``OptimizeOperator.partial(...).expand_kwargs(plan["optimize"])``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.engine.fleet.health import TableHealthRecord
from airflow_delta.engine.model.arguments import check_int, check_str_sequence

OPTIMIZE, VACUUM, CHECKPOINT = "OPTIMIZE", "VACUUM", "CHECKPOINT"
OPERATIONS = (OPTIMIZE, VACUUM, CHECKPOINT)


@dataclass(frozen=True)
class MaintenanceBudget:
    """What one planning round may spend, and what it must leave alone.

    :param max_bytes_rewritten: Total bytes the OPTIMIZE tasks may rewrite (None: no limit).
    :param max_tasks: Tasks of all operations together (None: no limit).
    :param max_tables: Distinct tables that get any task (None: no limit).
    :param cooldowns: Per operation, the least time between two runs on one table; the last
        run is the newer of the history's and the log tail's.
    :param table_cooldowns: ``{glob: {operation: timedelta}}`` overrides for matching tables.
    :param exclude_tables: Globs (``fnmatch``) of table URIs to leave alone.
    :param exclude_partitions: ``{glob: [partition predicate, ...]}``: partitions of
        matching tables that OPTIMIZE must not rewrite (becomes its ``where``).
    :param operations: Which operations to plan.
    :param min_files_removed: OPTIMIZE only when compaction removes at least this many files
        (or a file is above the purge ratio).
    :param min_vacuum_bytes: VACUUM only when it frees at least this many bytes (and a file).
    :param min_commits_since_checkpoint: CHECKPOINT only from this many commits after the last.
    :param file_cost_bytes, commit_cost_bytes, min_cost_bytes: the benefit model (module doc).
    """

    max_bytes_rewritten: int | None = None
    max_tasks: int | None = None
    max_tables: int | None = None
    cooldowns: Mapping[str, timedelta] = field(default_factory=lambda: {
        OPTIMIZE: timedelta(hours=12), VACUUM: timedelta(days=1), CHECKPOINT: timedelta(hours=1),
    })
    table_cooldowns: Mapping[str, Mapping[str, timedelta]] = field(default_factory=dict)
    exclude_tables: Sequence[str] = ()
    exclude_partitions: Mapping[str, Sequence[str]] = field(default_factory=dict)
    operations: Sequence[str] = OPERATIONS
    min_files_removed: int = 2
    min_vacuum_bytes: int = 1
    min_commits_since_checkpoint: int = 50
    file_cost_bytes: int = 4 << 20
    commit_cost_bytes: int = 1 << 20
    min_cost_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        for name in ("max_bytes_rewritten", "max_tasks", "max_tables"):
            check_int(name, getattr(self, name), minimum=0, optional=True)
        for name in ("min_files_removed", "min_vacuum_bytes", "min_commits_since_checkpoint"):
            check_int(name, getattr(self, name), minimum=0)
        for name in ("file_cost_bytes", "commit_cost_bytes", "min_cost_bytes"):
            check_int(name, getattr(self, name), minimum=1)
        operations = check_str_sequence("operations", self.operations) or ()
        for op in operations:
            if op not in OPERATIONS:
                raise InvalidArgumentError("operations", op, f"one of {', '.join(OPERATIONS)}")
        object.__setattr__(self, "operations", tuple(operations))
        object.__setattr__(self, "exclude_tables", check_str_sequence("exclude_tables", self.exclude_tables) or ())
        _check_cooldowns("cooldowns", self.cooldowns)
        if not isinstance(self.table_cooldowns, Mapping):
            raise InvalidArgumentError("table_cooldowns", self.table_cooldowns, "pass {glob: {operation: timedelta}}")
        for glob, cooldowns in self.table_cooldowns.items():
            _check_cooldowns(f"table_cooldowns[{glob!r}]", cooldowns)
        if not isinstance(self.exclude_partitions, Mapping):
            raise InvalidArgumentError("exclude_partitions", self.exclude_partitions, "pass {glob: [predicate, ...]}")
        for glob, predicates in self.exclude_partitions.items():
            check_str_sequence(f"exclude_partitions[{glob!r}]", predicates)

    def cooldown(self, table: str, operation: str) -> timedelta:
        for glob, cooldowns in self.table_cooldowns.items():
            if fnmatch.fnmatchcase(table, glob) and operation in cooldowns:
                return cooldowns[operation]
        return self.cooldowns.get(operation, timedelta(0))

    def excluded(self, table: str) -> str | None:
        return next((g for g in self.exclude_tables if fnmatch.fnmatchcase(table, g)), None)

    def excluded_partitions(self, table: str) -> tuple[str, ...]:
        out: list[str] = []
        for glob, predicates in self.exclude_partitions.items():
            if fnmatch.fnmatchcase(table, glob):
                out.extend(predicates)
        return tuple(dict.fromkeys(out))


def _check_cooldowns(name: str, cooldowns: object) -> None:
    if not isinstance(cooldowns, Mapping):
        raise InvalidArgumentError(name, cooldowns, "pass {operation: timedelta}")
    for op, value in cooldowns.items():
        if op not in OPERATIONS:
            raise InvalidArgumentError(name, op, f"operations are {', '.join(OPERATIONS)}")
        if not isinstance(value, timedelta) or value < timedelta(0):
            raise InvalidArgumentError(f"{name}[{op!r}]", value, "pass a timedelta >= 0")


@dataclass(frozen=True, slots=True)
class PlannedTask:
    """One proposed maintenance task and the numbers it was ranked by."""

    table: str
    operation: str
    benefit_bytes: int
    cost_bytes: int
    bytes_rewritten: int
    reason: str
    where: str | None = None

    @property
    def score(self) -> float:
        return self.benefit_bytes / self.cost_bytes


@dataclass(frozen=True, slots=True)
class Decision:
    """Why a table's operation was chosen or skipped (``chosen`` False: ``reason`` says why not)."""

    table: str
    operation: str | None
    chosen: bool
    reason: str
    score: float | None = None
    bytes_rewritten: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table, "operation": self.operation, "chosen": self.chosen, "reason": self.reason,
            "score": self.score, "bytes_rewritten": self.bytes_rewritten,
        }


@dataclass(frozen=True)
class MaintenancePlan:
    """The chosen tasks per operation (operator keyword arguments), and every decision with its reason."""

    optimize: tuple[dict[str, Any], ...]
    vacuum: tuple[dict[str, Any], ...]
    checkpoint: tuple[dict[str, Any], ...]
    decisions: tuple[Decision, ...]
    bytes_rewritten: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what a plan task returns, one key per operation for ``expand_kwargs``."""
        return {
            "optimize": [dict(t) for t in self.optimize],
            "vacuum": [dict(t) for t in self.vacuum],
            "checkpoint": [dict(t) for t in self.checkpoint],
            "decisions": [d.to_dict() for d in self.decisions],
            "bytes_rewritten": self.bytes_rewritten,
        }


def _ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _candidates(record: TableHealthRecord, budget: MaintenanceBudget) -> tuple[list[PlannedTask], list[Decision]]:
    """What this table's record justifies, and why each other operation is not proposed."""
    tasks: list[PlannedTask] = []
    skipped: list[Decision] = []
    table = record.table
    if OPTIMIZE in budget.operations:
        removed = record.num_files - record.files_after_optimize
        purge = record.files_above_purge_ratio
        if removed >= budget.min_files_removed or purge:
            excluded = budget.excluded_partitions(table)
            where = " AND ".join(f"NOT ({p})" for p in excluded) or None
            rewritten = record.small_file_bytes + record.bytes_above_purge_ratio
            dead = int(record.bytes_above_purge_ratio * min(1.0, record.deleted_rows_ratio * 2)) if purge else 0
            benefit = max(removed, 0) * budget.file_cost_bytes + dead
            parts = []
            if removed > 0:
                parts.append(f"{record.small_files} small files, compaction leaves {record.files_after_optimize} of "
                             f"{record.num_files}")
            if purge:
                parts.append(f"{purge} files above the deletion-vector purge ratio")
            if excluded:
                parts.append(f"leaving alone {', '.join(excluded)}")
            tasks.append(PlannedTask(table, OPTIMIZE, benefit, max(rewritten, budget.min_cost_bytes), rewritten,
                                     "; ".join(parts), where))
        else:
            skipped.append(Decision(table, OPTIMIZE, False,
                                    f"nothing to compact: {record.small_files} small files of {record.num_files}, "
                                    "none above the purge ratio"))
    if VACUUM in budget.operations:
        if record.vacuumable_files and record.vacuumable_bytes >= budget.min_vacuum_bytes:
            tasks.append(PlannedTask(
                table, VACUUM, record.vacuumable_bytes, budget.min_cost_bytes, 0,
                f"{record.vacuumable_files} files ({_human(record.vacuumable_bytes)}) past the retention",
            ))
        else:
            skipped.append(Decision(table, VACUUM, False,
                                    f"nothing to vacuum: {record.vacuumable_files} files past the retention"))
    if CHECKPOINT in budget.operations:
        since = record.commits_since_checkpoint
        if since >= budget.min_commits_since_checkpoint:
            tasks.append(PlannedTask(
                table, CHECKPOINT, since * budget.commit_cost_bytes, budget.min_cost_bytes, 0,
                f"{since} commits since the last checkpoint",
            ))
        else:
            skipped.append(Decision(table, CHECKPOINT, False,
                                    f"{since} commits since the last checkpoint (threshold "
                                    f"{budget.min_commits_since_checkpoint})"))
    return tasks, skipped


def _last_runs(history: Iterable[Mapping[str, Any]] | None) -> dict[tuple[str, str], int]:
    """``(table, operation) -> newest run's time (ms)`` from history rows (``table_uri``, ``operation``, ``recorded_ms``)."""
    last: dict[tuple[str, str], int] = {}
    for row in history or ():
        op, table, when = row.get("operation"), row.get("table_uri"), row.get("recorded_ms")
        if op in OPERATIONS and isinstance(table, str) and isinstance(when, int) and row.get("status", "success") == "success":
            key = (table, op)
            last[key] = max(last.get(key, when), when)
    return last


def plan_maintenance(
    records: Iterable[TableHealthRecord | Mapping[str, Any]],
    budget: MaintenanceBudget | None = None,
    *,
    history: Iterable[Mapping[str, Any]] | None = None,
    now_ms: int | None = None,
    operator_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
) -> MaintenancePlan:
    """Choose the maintenance tasks for the fleet under ``budget`` (see the module doc).

    ``records`` are :class:`TableHealthRecord` objects or their ``to_dict()`` form (XCom).
    ``history`` rows (the maintenance history's ``table_uri``, ``operation``, ``recorded_ms``,
    ``status``) supply the last runs for the cool-downs beside the log tail's.
    ``operator_kwargs`` adds fixed arguments per operation to every task's kwargs (e.g.
    ``{"VACUUM": {"mode": "lite"}}``). ``now_ms`` defaults to the records' check time.
    """
    budget = MaintenanceBudget() if budget is None else budget
    if not isinstance(budget, MaintenanceBudget):
        raise InvalidArgumentError("budget", budget, "pass a MaintenanceBudget")
    parsed = [r if isinstance(r, TableHealthRecord) else TableHealthRecord.from_dict(r) for r in records]
    extra = {op: dict((operator_kwargs or {}).get(op, {})) for op in OPERATIONS}
    for op in (operator_kwargs or {}):
        if op not in OPERATIONS:
            raise InvalidArgumentError("operator_kwargs", op, f"keys are {', '.join(OPERATIONS)}")
    last_runs = _last_runs(history)
    decisions: list[Decision] = []
    proposed: list[PlannedTask] = []
    for record in parsed:
        if not record.ok:
            decisions.append(Decision(record.table, None, False, f"{record.status}: {record.reason}"))
            continue
        glob = budget.excluded(record.table)
        if glob is not None:
            decisions.append(Decision(record.table, None, False, f"left alone (exclude_tables {glob!r})"))
            continue
        tasks, skipped = _candidates(record, budget)
        decisions.extend(skipped)
        now = record.checked_ms if now_ms is None else now_ms
        for task in tasks:
            seen = {OPTIMIZE: record.last_optimize_ms, VACUUM: record.last_vacuum_ms,
                    CHECKPOINT: record.last_checkpoint_ms}[task.operation]
            last = max(filter(None, (seen, last_runs.get((task.table, task.operation)))), default=None)
            cooldown = budget.cooldown(task.table, task.operation)
            if last is not None and now - last < _ms(cooldown):
                ago = timedelta(milliseconds=now - last)
                decisions.append(Decision(task.table, task.operation, False,
                                          f"cooling down: last {task.operation} {ago} ago, cool-down {cooldown} "
                                          f"({task.reason})", task.score, task.bytes_rewritten))
                continue
            proposed.append(task)
    # Best benefit per byte first; ties: more benefit, then the table's name for a stable order.
    proposed.sort(key=lambda t: (-t.score, -t.benefit_bytes, t.table, t.operation))
    chosen: dict[str, list[dict[str, Any]]] = {op: [] for op in OPERATIONS}
    tables: set[str] = set()
    spent = 0
    count = 0
    for task in proposed:
        why_not = None
        if budget.max_tasks is not None and count >= budget.max_tasks:
            why_not = f"over budget: max_tasks {budget.max_tasks} reached"
        elif budget.max_tables is not None and task.table not in tables and len(tables) >= budget.max_tables:
            why_not = f"over budget: max_tables {budget.max_tables} reached"
        elif budget.max_bytes_rewritten is not None and spent + task.bytes_rewritten > budget.max_bytes_rewritten:
            why_not = (f"over budget: rewriting {_human(task.bytes_rewritten)} would pass max_bytes_rewritten "
                       f"({_human(spent)} of {_human(budget.max_bytes_rewritten)} taken)")
        if why_not is not None:
            decisions.append(Decision(task.table, task.operation, False, f"{why_not} ({task.reason})",
                                      task.score, task.bytes_rewritten))
            continue
        count += 1
        spent += task.bytes_rewritten
        tables.add(task.table)
        kwargs: dict[str, Any] = {"table": task.table, **extra[task.operation], "maintenance_reason": task.reason}
        if task.where is not None:
            kwargs["where"] = task.where
        chosen[task.operation].append(kwargs)
        decisions.append(Decision(task.table, task.operation, True,
                                  f"rank {count}: {task.reason}; benefit/cost {task.score:.2f}",
                                  task.score, task.bytes_rewritten))
    return MaintenancePlan(
        optimize=tuple(chosen[OPTIMIZE]), vacuum=tuple(chosen[VACUUM]), checkpoint=tuple(chosen[CHECKPOINT]),
        decisions=tuple(decisions), bytes_rewritten=spent,
    )


__all__ = [
    "CHECKPOINT", "OPERATIONS", "OPTIMIZE", "VACUUM",
    "Decision", "MaintenanceBudget", "MaintenancePlan", "PlannedTask", "plan_maintenance",
]
