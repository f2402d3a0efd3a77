"""OPTIMIZE in the worker (engine/operations/optimize.py): compaction, Z-order, DV purge, batches.

Rows before and after are read by delta-rs and delta-kernel-rs (tests/oracles.py), never
by our own reader alone; commits are read back from the log's JSON.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine import (
    ConcurrentDeleteReadException,
    DataFileNotFoundError,
    DeltaError,
    DeltaTable,
    InvalidArgumentError,
    OptimizeOptions,
    plan_optimize,
)
from airflow_delta.engine.operations.optimize import (
    interleave_bits,
    range_bounds,
    range_ids_from_bounds,
    range_partition_ids,
)
from tests.oracles import assert_oracles_read, read_with_deltars, read_with_kernel

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("y", pa.float64()), ("s", pa.string()), ("p", pa.string())])
DV = {"delta.enableDeletionVectors": "true"}


def rows(start: int, count: int, part: str, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed + start)
    ids = np.arange(start, start + count, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "x": rng.integers(0, 1000, count),
            "y": rng.random(count),
            "s": [None if i % 7 == 3 else f"s{i % 11}" for i in ids.tolist()],
            "p": [part] * count,
        },
        schema=SCHEMA,
    )


def small_files_table(path: str, *, files_per_partition: int = 6, partitions: tuple[str, ...] = ("a", "b"),
                      properties: dict[str, str] | None = None, rows_per_file: int = 50) -> DeltaTable:
    t = DeltaTable.create(path, SCHEMA, partition_by=["p"], properties=properties)
    start = 0
    for i in range(files_per_partition):
        for part in partitions:
            t.append(rows(start, rows_per_file, part, seed=i))
            start += rows_per_file
    return t


def commit_actions(path: str, version: int) -> list[dict[str, Any]]:
    text = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def data_files_on_disk(path: str) -> set[str]:
    root = Path(path)
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_delta_log" not in p.parts}


def live_paths(t: DeltaTable) -> set[str]:
    return set(t.snapshot().files().column("path").to_pylist())


# ------------------------------------------------------------------ compaction


def test_compaction_keeps_rows_fewer_files_data_change_false(table_path: str) -> None:
    t = small_files_table(table_path)
    before = read_with_deltars(table_path)
    files_before = t.snapshot().num_files

    result = t.optimize()

    assert result.versions == (t.version(),)
    assert t.snapshot().num_files == 2 < files_before  # one file per partition
    assert_oracles_read(table_path, before)
    actions = commit_actions(table_path, result.versions[0])
    info = actions[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE"
    assert info["operationParameters"] == {"predicate": "[]", "zOrderBy": "[]", "auto": False}
    assert info["isolationLevel"] == "SnapshotIsolation"
    metrics = info["operationMetrics"]
    assert metrics["numRemovedFiles"] == str(files_before) and metrics["numAddedFiles"] == "2"
    file_actions = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert len(file_actions) == files_before + 2
    assert all(a["dataChange"] is False for a in file_actions)
    # As Delta's OptimizeExecutor: every remove carries the operation's start time.
    removes = [a["remove"] for a in actions if "remove" in a]
    assert {r["deletionTimestamp"] for r in removes} == {result.metrics["startTimeMs"]}
    assert result.metrics["numFilesRemoved"] == files_before and result.metrics["numFilesAdded"] == 2
    assert result.metrics["filesRemoved"]["totalFiles"] == files_before
    assert result.metrics["filesAdded"]["totalSize"] == int(metrics["numAddedBytes"])
    assert result.metrics["partitionsOptimized"] == 2 and result.metrics["numBatches"] == 1
    assert result.metrics["totalConsideredFiles"] == files_before and result.metrics["totalFilesSkipped"] == 0


def test_nothing_to_do_commits_nothing(table_path: str) -> None:
    t = small_files_table(table_path, files_per_partition=1)
    version = t.version()
    result = t.optimize()  # one small file per partition: a bin of one file without DV is skipped
    assert result.versions == () and result.version is None and t.version() == version
    assert result.metrics["totalFilesSkipped"] == 2


def test_large_files_are_not_compacted(table_path: str) -> None:
    t = small_files_table(table_path)
    sizes = t.snapshot().files().column("size").to_pylist()
    # Only files below min_file_size are candidates: a threshold under every size leaves all alone.
    result = t.optimize(OptimizeOptions(min_file_size=min(sizes), max_file_size=10 * max(sizes)))
    assert result.versions == ()


def test_bins_respect_max_file_size(table_path: str) -> None:
    t = small_files_table(table_path, files_per_partition=8, partitions=("a",))
    size = max(t.snapshot().files().column("size").to_pylist())
    plan = plan_optimize(t.snapshot(), OptimizeOptions(max_file_size=3 * size))
    assert len(plan.bins) >= 2
    assert all(b.size <= 3 * size for b in plan.bins)
    before = read_with_deltars(table_path)
    result = t.optimize(OptimizeOptions(max_file_size=3 * size))
    assert result.metrics["numFilesAdded"] == len(plan.bins)
    assert_oracles_read(table_path, before)


# ------------------------------------------------------------------ WHERE


def test_where_on_partition_rewrites_only_that_partition(table_path: str) -> None:
    t = small_files_table(table_path)
    b_files = set(t.snapshot().files("p = 'b'").column("path").to_pylist())
    before = read_with_deltars(table_path)

    result = t.optimize(OptimizeOptions(where="p = 'a'"))

    assert b_files <= live_paths(t)  # partition b untouched
    assert len(t.snapshot().files("p = 'a'")) == 1
    assert result.metrics["partitionsOptimized"] == 1
    info = commit_actions(table_path, result.versions[0])[0]["commitInfo"]
    assert info["operationParameters"]["predicate"] == json.dumps(["p = 'a'"])
    assert_oracles_read(table_path, before)


def test_where_on_data_column_is_refused(table_path: str) -> None:
    t = small_files_table(table_path, files_per_partition=2)
    version = t.version()
    with pytest.raises(InvalidArgumentError) as raised:
        t.optimize(OptimizeOptions(where="p = 'a' AND x > 3"))
    assert raised.value.retryable is False
    assert "where" in str(raised.value) and "'x'" in str(raised.value)
    assert t.version() == version


# ------------------------------------------------------------------ deletion vectors


def test_dv_purge_rewrites_files_over_the_ratio_and_keeps_rows(table_path: str) -> None:
    t = small_files_table(table_path, files_per_partition=3, properties=DV, rows_per_file=200)
    t.delete("id % 5 = 0 AND p = 'a'")  # 20% of the rows of every file in a
    t.delete("id = 201")  # one row of one file in b: 0.5%, under the ratio
    before = read_with_deltars(table_path)
    sizes = t.snapshot().files().column("size").to_pylist()

    # Files are all "large" here (min_file_size below them): only the DV ratio selects.
    result = t.optimize(OptimizeOptions(min_file_size=1, max_file_size=100 * max(sizes)))

    files = t.snapshot().files()
    with_dv = files.filter(pa.compute.is_valid(files.column("deletion_vector")))
    assert with_dv.num_rows == 1  # the file of b under the ratio keeps its DV
    assert result.metrics["deletionVectorStats"]["numDeletionVectorsRemoved"] == 3
    assert result.metrics["deletionVectorStats"]["numDeletionVectorRowsRemoved"] == 120
    assert_oracles_read(table_path, before)

    purge = t.optimize(OptimizeOptions(min_file_size=1, max_file_size=100 * max(sizes), max_deleted_rows_ratio=0.0))
    files = t.snapshot().files()
    assert files.column("deletion_vector").null_count == files.num_rows  # REORG ... APPLY (PURGE)
    assert purge.metrics["numDeletionVectorsRemoved"] == 1
    assert_oracles_read(table_path, before)


# ------------------------------------------------------------------ Z-order


def file_boxes(t: DeltaTable, columns: list[str]) -> list[list[tuple[float, float]]]:
    stats = t.snapshot().files(stats=True).column("stats").to_pylist()
    return [[(s["minValues"][c], s["maxValues"][c]) for c in columns] for s in stats]


def overlap(boxes: list[list[tuple[float, float]]]) -> float:
    """The share of file pairs whose min/max boxes over the Z columns intersect (1.0: no skipping possible)."""
    pairs = hits = 0
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            pairs += 1
            hits += all(a_lo <= b_hi and b_lo <= a_hi for (a_lo, a_hi), (b_lo, b_hi) in zip(boxes[i], boxes[j], strict=True))
    return hits / pairs


def test_zorder_clusters_files(table_path: str) -> None:
    t = small_files_table(table_path, files_per_partition=16, partitions=("a",), rows_per_file=500)
    before_rows = read_with_deltars(table_path)
    before = overlap(file_boxes(t, ["x", "y"]))
    total = sum(t.snapshot().files().column("size").to_pylist())

    result = t.optimize(OptimizeOptions(zorder_by=["x", "y"], max_file_size=total // 16))

    after_boxes = file_boxes(t, ["x", "y"])
    after = overlap(after_boxes)
    assert len(after_boxes) >= 12
    assert before == 1.0  # random rows: every file spans everything
    print(f"file-pair overlap of the Z columns: before {before:.2f}, after {after:.2f}")
    assert after < 0.35 * before, (before, after)
    assert result.metrics["zOrderStats"]["numOutputCubes"] == 1
    info = commit_actions(table_path, result.versions[0])[0]["commitInfo"]
    assert info["operationParameters"]["zOrderBy"] == '["x","y"]'  # compact, as Delta (Jackson) writes it
    assert_oracles_read(table_path, before_rows)


def test_zorder_rewrites_even_a_single_file(table_path: str) -> None:
    t = small_files_table(table_path, files_per_partition=1, partitions=("a",))
    result = t.optimize(OptimizeOptions(zorder_by=["x"]))
    assert result.metrics["numFilesRemoved"] == 1


@pytest.mark.parametrize(
    ("columns", "properties", "message"),
    [
        (["p"], None, "partition column"),
        (["nope"], None, "not one of"),
        (["y"], {"delta.dataSkippingNumIndexedCols": "2"}, "statistics"),
    ],
)
def test_zorder_refusals(table_path: str, columns: list[str], properties: dict[str, str] | None, message: str) -> None:
    t = small_files_table(table_path, files_per_partition=1, properties=properties)
    with pytest.raises(InvalidArgumentError, match=message) as raised:
        t.optimize(OptimizeOptions(zorder_by=columns))
    assert "zorder_by" in str(raised.value) and raised.value.retryable is False


def delta_interleave(values: list[int]) -> bytes:
    """Delta's InterleaveBits, spelled out bit by bit: bit 31..0, and within a bit each input in order."""
    out = bytearray()
    byte, filled = 0, 0
    for bit in range(31, -1, -1):
        for v in values:
            byte = (byte << 1) | ((v >> bit) & 1)
            filled += 1
            if filled == 8:
                out.append(byte)
                byte, filled = 0, 0
    return bytes(out)


@settings(max_examples=60)
@given(st.lists(st.lists(st.integers(0, 2**32 - 1), min_size=3, max_size=3), min_size=1, max_size=20))
def test_interleave_bits_is_deltas(rows_of_ids: list[list[int]]) -> None:
    ids = [np.array([r[k] for r in rows_of_ids], dtype=np.uint32) for k in range(3)]
    packed = interleave_bits(ids)
    assert [bytes(row) for row in packed] == [delta_interleave(r) for r in rows_of_ids]


@settings(max_examples=60)
@given(st.lists(st.one_of(st.none(), st.integers(-50, 50)), min_size=1, max_size=200), st.integers(1, 64))
def test_range_partition_ids_are_an_ordered_scaled_rank(values: list[int | None], num_ranges: int) -> None:
    ids = range_partition_ids(pa.array(values, pa.int64()), num_ranges)
    assert ids.min() >= 0 and ids.max() < num_ranges
    order = sorted(range(len(values)), key=lambda i: (values[i] is not None, values[i] or 0))
    ordered = ids[order]
    assert (np.diff(ordered.astype(np.int64)) >= 0).all()  # never decreasing in (nulls first) value order
    by_value: dict[int | None, set[int]] = {}
    for v, i in zip(values, ids.tolist(), strict=True):
        by_value.setdefault(v, set()).add(i)
    assert all(len(s) == 1 for s in by_value.values())  # equal values share a range


# ------------------------------------------------------------------ concurrency


def test_concurrent_blind_append_does_not_conflict(table_path: str) -> None:
    t = small_files_table(table_path)
    read = t.snapshot()
    t.append(rows(10_000, 30, "a"))  # lands after OPTIMIZE read its snapshot
    expected = read_with_deltars(table_path)

    result = t.optimize(snapshot=read)

    assert result.versions == (read.version + 2,)
    assert_oracles_read(table_path, expected)


def test_appends_racing_in_threads_all_survive(table_path: str) -> None:
    t = small_files_table(table_path, files_per_partition=10)
    stop = threading.Event()
    appended: list[int] = []

    def appender() -> None:
        writer = DeltaTable(table_path)
        start = 100_000
        while not stop.is_set() and len(appended) < 40:
            writer.append(rows(start, 5, "a" if start % 2 else "b"))
            appended.append(start)
            start += 5

    thread = threading.Thread(target=appender)
    thread.start()
    try:
        for _ in range(3):
            t.optimize(OptimizeOptions(batch_size=1))
    finally:
        stop.set()
        thread.join()
    ids = sorted(r["id"] for r in read_with_deltars(table_path))
    expected = sorted(list(range(0, 10 * 2 * 50)) + [s + k for s in appended for k in range(5)])
    assert ids == expected
    assert read_with_kernel(table_path) == read_with_deltars(table_path)


def test_concurrent_delete_of_a_rewritten_file_conflicts_and_leaves_no_files(table_path: str) -> None:
    t = small_files_table(table_path)
    read = t.snapshot()
    on_disk = data_files_on_disk(table_path)
    t.delete("p = 'a'")  # removes files OPTIMIZE is about to rewrite
    with pytest.raises(ConcurrentDeleteReadException) as raised:
        t.optimize(snapshot=read)
    assert raised.value.retryable is True
    assert data_files_on_disk(table_path) == on_disk  # what the failed OPTIMIZE wrote is gone


# ------------------------------------------------------------------ batches, budget, dry run


def test_batches_commit_separately_and_a_failing_batch_loses_only_itself(table_path: str) -> None:
    t = small_files_table(table_path)
    a_files = set(t.snapshot().files("p = 'a'").column("path").to_pylist())
    b_files = t.snapshot().files("p = 'b'").column("path").to_pylist()
    start = t.version()
    os.remove(Path(table_path) / b_files[0])  # partition b (the second batch) cannot be read
    on_disk = data_files_on_disk(table_path)

    with pytest.raises(DataFileNotFoundError):
        t.optimize(OptimizeOptions(batch_size=1))

    assert t.version() == start + 1  # batch 1 committed
    live = live_paths(t)
    assert not (a_files & live) and len(t.snapshot().files("p = 'a'")) == 1
    assert set(b_files) <= live  # batch 2 changed nothing in the log
    added = data_files_on_disk(table_path) - on_disk
    assert added == set(t.snapshot().files("p = 'a'").column("path").to_pylist())  # nothing of batch 2 stayed


def test_batches_metrics(table_path: str) -> None:
    t = small_files_table(table_path)
    before = read_with_deltars(table_path)
    result = t.optimize(OptimizeOptions(batch_size=1))
    assert len(result.versions) == 2 and result.metrics["numBatches"] == 2
    for version in result.versions:
        info = commit_actions(table_path, version)[0]["commitInfo"]
        assert info["operation"] == "OPTIMIZE" and info["operationMetrics"]["numAddedFiles"] == "1"
    assert_oracles_read(table_path, before)


def test_budget_is_honoured(table_path: str) -> None:
    t = small_files_table(table_path, files_per_partition=5, partitions=("a", "b", "c"))
    result = t.optimize(OptimizeOptions(max_files=11))
    assert result.metrics["numFilesRemoved"] == 10  # two partitions of five fit, the third waits
    assert result.metrics["partitionsOptimized"] == 2
    assert len(t.snapshot().files("p = 'c'")) == 5
    size = sum(t.snapshot().files("p = 'c'").column("size").to_pylist())
    assert t.optimize(OptimizeOptions(max_bytes=size - 1)).versions == ()
    assert t.optimize(OptimizeOptions(max_bytes=size)).metrics["numFilesRemoved"] == 5


def test_dry_run_plans_without_writing(table_path: str) -> None:
    t = small_files_table(table_path, properties=DV)
    t.delete("id % 4 = 0 AND p = 'b'")
    version, on_disk = t.version(), data_files_on_disk(table_path)
    log = sorted(os.listdir(Path(table_path) / "_delta_log"))

    planned = t.optimize(OptimizeOptions(dry_run=True))

    assert planned.dry_run and planned.versions == () and t.version() == version
    assert data_files_on_disk(table_path) == on_disk and sorted(os.listdir(Path(table_path) / "_delta_log")) == log
    by_partition = {p.partition_values["p"]: p for p in planned.plan}
    a_sizes = t.snapshot().files("p = 'a'").column("size").to_pylist()
    assert by_partition["a"].files_in == len(a_sizes) and by_partition["a"].bytes_in == sum(a_sizes)
    assert by_partition["a"].files_out == 1 and by_partition["a"].bytes_out == sum(a_sizes)
    assert by_partition["b"].bytes_out < by_partition["b"].bytes_in  # a quarter of b's rows are purged

    done = t.optimize()
    assert {p.partition_values["p"]: (p.files_in, p.bytes_in) for p in done.plan} == {
        k: (p.files_in, p.bytes_in) for k, p in by_partition.items()
    }


# ------------------------------------------------------------------ other tables and options


def test_column_mapping_and_unpartitioned(table_path: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("x", pa.int64())])
    t = DeltaTable.create(table_path, schema, properties={"delta.columnMapping.mode": "name", **DV})
    for i in range(5):
        t.append(pa.table({"id": list(range(i * 10, i * 10 + 10)), "x": list(range(10))}, schema=schema))
    t.delete("id = 3")
    before = read_with_deltars(table_path)
    t.optimize(OptimizeOptions(zorder_by=["X"]))  # column names resolve ignoring case, as in Spark
    assert t.snapshot().num_files == 1
    assert_oracles_read(table_path, before)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_file_size": 10, "max_file_size": 5},
        {"max_deleted_rows_ratio": 1.5},
        {"max_files": 0},
        {"zorder_by": ["a", "A"]},
        {"where": ""},
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        OptimizeOptions(**kwargs)
    assert isinstance(raised.value, DeltaError) and raised.value.retryable is False


@settings(max_examples=60)
@given(
    st.lists(st.integers(-100, 100), min_size=1, max_size=300),
    st.lists(st.one_of(st.none(), st.integers(-120, 120)), min_size=1, max_size=100),
    st.integers(2, 50),
)
def test_range_ids_from_sampled_bounds_count_the_bounds_below(sample: list[int], values: list[int | None], num_ranges: int) -> None:
    bounds = range_bounds(pa.array(sample, pa.int64()), num_ranges)
    assert len(bounds) == num_ranges - 1
    assert bounds.to_pylist() == sorted(bounds.to_pylist())
    ids = range_ids_from_bounds(pa.array(values, pa.int64()), bounds)
    expected = [0 if v is None else sum(b < v for b in bounds.to_pylist()) for v in values]
    assert ids.tolist() == expected


def test_range_ids_from_bounds_on_strings() -> None:
    bounds = range_bounds(pa.array(["d", "b", None, "f", "h"]), 3)
    assert bounds.to_pylist() == ["d", "f"]
    assert range_ids_from_bounds(pa.array(["a", "d", "e", None, "z"]), bounds).tolist() == [0, 0, 1, 0, 2]


def test_append_only_tables_can_be_optimized(table_path: str) -> None:
    # OPTIMIZE removes no data (dataChange=false), so delta.appendOnly does not forbid it, as in Delta.
    t = small_files_table(table_path, files_per_partition=3, properties={"delta.appendOnly": "true"})
    before = read_with_deltars(table_path)
    assert t.optimize().metrics["numFilesRemoved"] == 6
    assert_oracles_read(table_path, before)


@settings(max_examples=100)
@given(st.lists(st.integers(1, 500), max_size=60), st.integers(1, 800))
def test_bins_are_deltas_greedy_packing(sizes: list[int], max_size: int) -> None:
    from airflow_delta.engine.operations.optimize import _pack

    ordered = np.sort(np.array(sizes, dtype=np.int64))
    bins = _pack(ordered, max_size, one_bin=False)
    covered = np.concatenate(bins).tolist() if bins else []
    assert covered == list(range(len(sizes)))  # every file once, in order
    for members in bins:
        assert ordered[members].sum() <= max_size or len(members) == 1  # only a lone large file passes the limit
    for current, following in itertools.pairwise(bins):
        assert ordered[current].sum() + ordered[following[0]] > max_size  # a bin closes only when the next file does not fit


def test_a_failing_bin_among_parallel_bins_leaves_no_files(table_path: str) -> None:
    t = small_files_table(table_path, partitions=("a", "b", "c"))
    version = t.version()
    os.remove(Path(table_path) / t.snapshot().files("p = 'b'").column("path")[0].as_py())
    on_disk = data_files_on_disk(table_path)
    with pytest.raises(DataFileNotFoundError):
        t.optimize()  # one batch of three bins, rewritten two at a time
    assert t.version() == version
    assert data_files_on_disk(table_path) == on_disk  # the bins that succeeded removed their files too
