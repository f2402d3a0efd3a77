"""The planner: thresholds, exclusions, cool-downs, budgets, ranking, and the reasons it gives."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_delta.engine import InvalidArgumentError, MaintenanceBudget, TableHealthRecord, plan_maintenance

NOW = 1_700_000_000_000
MIB = 1 << 20


def rec(table: str, **fields: object) -> TableHealthRecord:
    base: dict[str, object] = {"table": table, "status": "ok", "checked_ms": NOW, "elapsed_ms": 1,
                               "num_files": 10, "files_after_optimize": 10, "size_in_bytes": 10 * 128 * MIB}
    base.update(fields)
    return TableHealthRecord(**base)  # type: ignore[arg-type]


def small(table: str, files: int, small_bytes: int, **fields: object) -> TableHealthRecord:
    return rec(table, num_files=files, small_files=files, files_after_optimize=1, small_file_bytes=small_bytes, **fields)


def decision(plan, table: str, operation: str | None):
    return next(d for d in plan.decisions if d.table == table and d.operation == operation)


def test_each_need_becomes_its_task_with_operator_kwargs() -> None:
    records = [
        small("/t/small", 100, 50 * MIB),
        rec("/t/dv", files_above_purge_ratio=3, bytes_above_purge_ratio=300 * MIB, deleted_rows_ratio=0.2),
        rec("/t/vac", vacuumable_files=5, vacuumable_bytes=900 * MIB),
        rec("/t/log", commits_since_checkpoint=400),
        rec("/t/fine"),
        TableHealthRecord(table="/t/broken", status="unreadable", checked_ms=NOW, elapsed_ms=1, reason="boom"),
    ]
    plan = plan_maintenance(records, operator_kwargs={"VACUUM": {"mode": "lite"}})
    assert [t["table"] for t in plan.optimize] == ["/t/small", "/t/dv"]  # 99 files per 50 MiB beats a purge
    assert plan.vacuum == ({"table": "/t/vac", "mode": "lite", "maintenance_reason": plan.vacuum[0]["maintenance_reason"]},)
    assert "5 files" in plan.vacuum[0]["maintenance_reason"]
    assert [t["table"] for t in plan.checkpoint] == ["/t/log"]
    assert plan.bytes_rewritten == 350 * MIB
    assert not decision(plan, "/t/fine", "OPTIMIZE").chosen
    assert "nothing to compact" in decision(plan, "/t/fine", "OPTIMIZE").reason
    assert decision(plan, "/t/broken", None).reason == "unreadable: boom"
    assert "400 commits" in decision(plan, "/t/log", "CHECKPOINT").reason
    # The dict form feeds expand_kwargs: one list per operation, plain JSON.
    as_dict = plan.to_dict()
    assert as_dict["optimize"][0]["table"] == "/t/small" and as_dict["decisions"][0]["table"]


def test_the_byte_budget_takes_the_best_benefit_per_byte_first() -> None:
    records = [
        small("/t/a", 10, 400 * MIB),   # 9 files removed for 400 MiB
        small("/t/b", 50, 100 * MIB),   # 49 for 100 MiB: best
        small("/t/c", 20, 300 * MIB),   # 19 for 300 MiB
    ]
    plan = plan_maintenance(records, MaintenanceBudget(max_bytes_rewritten=450 * MIB, operations=["OPTIMIZE"]))
    assert [t["table"] for t in plan.optimize] == ["/t/b", "/t/c"]
    assert plan.bytes_rewritten == 400 * MIB
    assert "over budget" in decision(plan, "/t/a", "OPTIMIZE").reason
    assert "rank 1" in decision(plan, "/t/b", "OPTIMIZE").reason


def test_task_and_table_limits() -> None:
    records = [small(f"/t/{i}", 10 + i, MIB, vacuumable_files=1, vacuumable_bytes=(i + 1) * MIB) for i in range(5)]
    plan = plan_maintenance(records, MaintenanceBudget(max_tasks=3))
    assert len(plan.optimize) + len(plan.vacuum) == 3
    plan = plan_maintenance(records, MaintenanceBudget(max_tables=2))
    assert len({t["table"] for t in (*plan.optimize, *plan.vacuum)}) == 2
    assert any("max_tables" in d.reason for d in plan.decisions if not d.chosen)


def test_cooldowns_from_the_log_tail_and_the_history() -> None:
    hour = 3_600_000
    records = [small("/t/recent", 10, MIB, last_optimize_ms=NOW - 2 * hour), small("/t/old", 10, MIB,
               last_optimize_ms=NOW - 20 * hour), small("/t/hist", 10, MIB)]
    history = [{"table_uri": "/t/hist", "operation": "OPTIMIZE", "recorded_ms": NOW - hour, "status": "success"},
               {"table_uri": "/t/old", "operation": "OPTIMIZE", "recorded_ms": NOW - hour, "status": "failed"}]
    plan = plan_maintenance(records, MaintenanceBudget(operations=["OPTIMIZE"]), history=history)
    assert [t["table"] for t in plan.optimize] == ["/t/old"]
    assert "cooling down" in decision(plan, "/t/recent", "OPTIMIZE").reason
    assert "cooling down" in decision(plan, "/t/hist", "OPTIMIZE").reason
    # A per-table cool-down overrides the default.
    budget = MaintenanceBudget(operations=["OPTIMIZE"], table_cooldowns={"/t/rec*": {"OPTIMIZE": timedelta(hours=1)}})
    assert "/t/recent" in [t["table"] for t in plan_maintenance(records, budget).optimize]


def test_tables_and_partitions_left_alone() -> None:
    records = [small("/lake/gold/x", 10, MIB), small("/lake/raw/y", 10, MIB)]
    budget = MaintenanceBudget(exclude_tables=["/lake/gold/*"],
                               exclude_partitions={"/lake/raw/*": ["day = '2024-01-01'", "day = '2024-01-02'"]})
    plan = plan_maintenance(records, budget)
    assert [t["table"] for t in plan.optimize] == ["/lake/raw/y"]
    assert plan.optimize[0]["where"] == "NOT (day = '2024-01-01') AND NOT (day = '2024-01-02')"
    assert "left alone" in decision(plan, "/lake/gold/x", None).reason


def test_bad_budgets_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="max_tasks"):
        MaintenanceBudget(max_tasks=-1)
    with pytest.raises(InvalidArgumentError, match="operations"):
        MaintenanceBudget(operations=["REORG"])
    with pytest.raises(InvalidArgumentError):
        MaintenanceBudget(cooldowns={"OPTIMIZE": 5})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgumentError, match="record"):
        plan_maintenance([{"not": "a record"}])
