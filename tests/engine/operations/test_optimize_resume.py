"""OPTIMIZE under an application id: a retry resumes the batches an earlier try committed.

An interrupted try is a rewriter that fails at a given batch (as a killed worker would,
after some batches committed). Rows are read by delta-rs and delta-kernel-rs; which files
each try rewrote is read from the log's JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from airflow_delta.engine import (
    AddFile,
    DeltaTable,
    OptimizeBin,
    OptimizeOptions,
    OptimizePlan,
    OptimizeResult,
    TransactionAlreadyCommittedError,
    rewrite_bin,
)
from tests.engine.operations.test_optimize import (
    commit_actions,
    data_files_on_disk,
    live_paths,
    rows,
    small_files_table,
)
from tests.oracles import assert_oracles_read, read_with_deltars

APP = "airflow-delta:test-app"
TAG = "airflowDelta.optimizeBatch"


class TryKilledError(Exception):
    """The try was killed."""


def rewriter_failing_at(
    t: DeltaTable, batch: int, before: Callable[[], None] | None = None
) -> Callable[[OptimizePlan, Sequence[OptimizeBin]], list[list[AddFile]]]:
    """A rewriter that rewrites here and fails when it reaches batch ``batch`` (1-based) of this try."""
    calls = {"n": 0}

    def rewrite(plan: OptimizePlan, bins: Sequence[OptimizeBin]) -> list[list[AddFile]]:
        calls["n"] += 1
        if calls["n"] == batch:
            raise TryKilledError(f"killed at batch {batch}")
        if before is not None:
            before()
        source = t.snapshot(version=plan.read_version)
        return [rewrite_bin(source, b.files, zorder_by=plan.zorder_by, max_file_size=plan.max_file_size) for b in bins]

    return rewrite


def file_size(t: DeltaTable) -> int:
    return int(t.snapshot().files().column("size").to_pylist()[0])


def adds_of(path: str, version: int) -> set[str]:
    return {a["add"]["path"] for a in commit_actions(path, version) if "add" in a}


def commit_info(path: str, version: int) -> dict:  # type: ignore[type-arg]
    return next(a["commitInfo"] for a in commit_actions(path, version) if "commitInfo" in a)


def txn_of(path: str, version: int) -> tuple[str, int] | None:
    found = [a["txn"] for a in commit_actions(path, version) if "txn" in a]
    return (found[0]["appId"], found[0]["version"]) if found else None


def test_a_retry_resumes_after_the_committed_batches_and_never_rewrites_their_files(table_path: str) -> None:
    t = small_files_table(table_path)  # partitions a and b, six small files each
    before = read_with_deltars(table_path)
    # Three files per bin: two bins per partition, one batch each; batches 1-2 are partition a.
    options = OptimizeOptions(max_file_size=3 * file_size(t) + 100, batch_size=1)
    start = t.version()

    with pytest.raises(TryKilledError):
        t.optimize(options, rewriter=rewriter_failing_at(t, 3), app_id=APP)
    assert t.version() == start + 2
    first_outputs = adds_of(table_path, start + 1) | adds_of(table_path, start + 2)
    assert [commit_info(table_path, v)["tags"][TAG] for v in (start + 1, start + 2)] == ["1/4", "2/4"]

    result = t.optimize(options, app_id=APP)

    # Partition a's two outputs are small enough to be compacted together again: they were not.
    assert first_outputs <= live_paths(t)
    assert result.versions == (start + 1, start + 2, start + 3, start + 4)
    assert [txn_of(table_path, v) for v in result.versions] == [(APP, 1), None, None, None]
    assert [commit_info(table_path, v)["tags"][TAG] for v in (start + 3, start + 4)] == ["3/4", "4/4"]
    metrics = result.metrics
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"], metrics["numBatches"]) == (12, 4, 4)
    assert metrics["partitionsOptimized"] == 2 and metrics["totalConsideredFiles"] == 12
    assert metrics["filesRemoved"]["totalSize"] == sum(
        int(a["remove"]["size"]) for v in result.versions for a in commit_actions(table_path, v) if "remove" in a
    )
    assert len(t.snapshot().files()) == 4
    assert_oracles_read(table_path, before)


def test_a_retry_after_a_finished_try_returns_its_result_and_rewrites_nothing(table_path: str) -> None:
    t = small_files_table(table_path)
    first = t.optimize(OptimizeOptions(batch_size=1), app_id=APP)
    assert len(first.versions) == 2
    # New small files arrive: a new OPTIMIZE would compact them; a retry of the finished one does not.
    t.append(rows(10_000, 10, "a"))
    t.append(rows(10_010, 10, "a"))
    version = t.version()
    on_disk = data_files_on_disk(table_path)

    again = t.optimize(OptimizeOptions(batch_size=1), app_id=APP)

    assert t.version() == version and data_files_on_disk(table_path) == on_disk
    assert again.versions == first.versions
    for name in ("numFilesAdded", "numFilesRemoved", "numBatches", "partitionsOptimized", "totalConsideredFiles"):
        assert again.metrics[name] == first.metrics[name], name
    assert again.metrics["filesAdded"] == first.metrics["filesAdded"]
    # Another application (the next scheduled run) does compact them.
    assert t.optimize(OptimizeOptions(), app_id=APP + "-next").metrics["numFilesRemoved"] == 3


def test_a_dry_run_of_a_resumed_optimize_plans_only_what_is_left(table_path: str) -> None:
    t = small_files_table(table_path)
    with pytest.raises(TryKilledError):
        t.optimize(OptimizeOptions(batch_size=1), rewriter=rewriter_failing_at(t, 2), app_id=APP)
    plan = t.optimize(OptimizeOptions(batch_size=1, dry_run=True), app_id=APP).plan
    assert [(dict(p.partition_values), p.files_in) for p in plan] == [({"p": "b"}, 6)]


def test_a_resumed_zorder_leaves_the_partitions_it_finished_even_after_appends(table_path: str) -> None:
    t = small_files_table(table_path)
    before = read_with_deltars(table_path)
    options = OptimizeOptions(zorder_by=["x", "y"], batch_size=1)
    start = t.version()
    with pytest.raises(TryKilledError):
        t.optimize(options, rewriter=rewriter_failing_at(t, 2), app_id=APP)
    t.append(rows(10_000, 20, "a"))  # a new file in the finished partition
    appended = adds_of(table_path, t.version())
    a_files = set(t.snapshot().files("p = 'a'").column("path").to_pylist())

    result = t.optimize(options, app_id=APP)

    assert set(t.snapshot().files("p = 'a'").column("path").to_pylist()) == a_files  # not Z-ordered again
    assert appended <= live_paths(t)
    assert result.versions[0] == start + 1 and len(result.versions) == 2
    assert result.metrics["partitionsOptimized"] == 2 and result.metrics["zOrderStats"]["numOutputCubes"] == 2
    assert_oracles_read(table_path, before + rows(10_000, 20, "a").to_pylist())


def test_the_budget_counts_what_earlier_tries_rewrote(table_path: str) -> None:
    t = small_files_table(table_path, files_per_partition=4, partitions=("a", "b", "c"))
    options = OptimizeOptions(max_files=8, batch_size=1)  # two partitions of four this run
    with pytest.raises(TryKilledError):
        t.optimize(options, rewriter=rewriter_failing_at(t, 2), app_id=APP)

    result = t.optimize(options, app_id=APP)

    assert result.metrics["numFilesRemoved"] == 8 and len(result.versions) == 2
    assert len(t.snapshot().files("p = 'c'")) == 4  # the third partition waits for the next run
    assert t.optimize(options, app_id=APP).versions == result.versions  # the budget is spent: finished


def test_a_late_commit_of_an_earlier_try_is_refused_and_leaves_no_files(table_path: str) -> None:
    t = small_files_table(table_path)
    before = read_with_deltars(table_path)
    original = data_files_on_disk(table_path)
    retries: list[OptimizeResult] = []

    def retry_runs_meanwhile() -> None:
        if not retries:
            retries.append(t.optimize(OptimizeOptions(), app_id=APP))  # the retry finishes first

    with pytest.raises(TransactionAlreadyCommittedError):
        t.optimize(OptimizeOptions(), rewriter=rewriter_failing_at(t, 0, before=retry_runs_meanwhile), app_id=APP)

    assert t.version() == retries[0].version  # the late try committed nothing
    assert data_files_on_disk(table_path) == original | live_paths(t)  # and its files are gone
    assert t.optimize(OptimizeOptions(), app_id=APP).versions == retries[0].versions
    assert_oracles_read(table_path, before)
