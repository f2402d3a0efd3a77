"""The MERGE in the worker (engine and pyarrow) against the MERGE on Spark and the oracles.

Every example runs both ways on two copies of the same target: each result must be what
DuckDB's ``MERGE INTO`` makes of the rows (read by delta-rs and delta-kernel-rs), both
must fail alike where Delta's multiple-match rule says so (a plain Python model), and the
two commits must carry the same row metrics and, on Change Data Feed tables, the same
change data. The clause sets are those the worker evaluates exactly as Spark
(columns, plain literals, comparisons); :func:`worker_refusal` cases check the rest goes
to Spark with a reason.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaTable, InvalidArgumentError, MultipleSourceRowsMatchedError
from airflow_delta.spark.merge import run_merge
from airflow_delta.spark.merge_common import equi_keys, source_key_filter
from airflow_delta.spark.merge_worker import (
    read_source,
    run_merge_in_worker,
    source_refusal,
    table_refusal,
    worker_refusal,
)
from airflow_delta.spark.specs import ExecutionOptions, MergeClause, MergeSource, TableRef
from tests.oracles import assert_oracles_read, read_change_files
from tests.spark.test_merge import (
    SOURCE_SCHEMA,
    TARGET_SCHEMA,
    Row,
    as_dicts,
    data_files,
    delta_raises_multiple_match,
    duckdb_merge,
    make_target,
    spec_for,
    write_source,
)

pytestmark = pytest.mark.slow

ROW_METRICS = (
    "numSourceRows",
    "numTargetRowsInserted",
    "numTargetRowsUpdated",
    "numTargetRowsMatchedUpdated",
    "numTargetRowsNotMatchedBySourceUpdated",
    "numTargetRowsDeleted",
    "numTargetRowsMatchedDeleted",
    "numTargetRowsNotMatchedBySourceDeleted",
    "numTargetRowsCopied",
    "numOutputRows",
    "numTargetFilesBeforeSkipping",
    "numTargetFilesAfterSkipping",
)

IDS = st.one_of(st.none(), st.integers(0, 4))
OPS = st.one_of(st.none(), st.integers(0, 2))
TARGET_ROWS = st.lists(st.tuples(IDS, st.integers(0, 60), st.sampled_from(["a", "b"])), min_size=1, max_size=10)
SOURCE_ROWS = st.lists(st.tuples(IDS, st.integers(0, 60), st.sampled_from(["a", "b"]), OPS), max_size=6)

MATCHED_CONDITIONAL = [
    MergeClause("matched_update", "s.op = 1", {"v": "s.v"}),
    MergeClause("matched_delete", "s.op = 2"),
    MergeClause("matched_update", "t.v > s.v", {"v": "s.v", "p": "s.p"}),
]
MATCHED_LAST = [None, MergeClause("matched_update", star=True), MergeClause("matched_delete")]
INSERT_CONDITIONAL = [MergeClause("not_matched_insert", "s.op <> 2", {"id": "s.id", "v": "s.v", "p": "'b'"})]
INSERT_LAST = [None, MergeClause("not_matched_insert", star=True)]
BY_SOURCE_CONDITIONAL = [
    MergeClause("not_matched_by_source_delete", "t.v > 40"),
    MergeClause("not_matched_by_source_update", "t.p = 'a'", {"v": "1000"}),
]
BY_SOURCE_LAST = [None, MergeClause("not_matched_by_source_delete"), MergeClause("not_matched_by_source_update", assignments={"v": "0"})]


@st.composite
def clause_sets(draw: st.DrawFn) -> list[MergeClause]:
    clauses: list[MergeClause] = []
    for conditional, last in (
        (MATCHED_CONDITIONAL, MATCHED_LAST),
        (INSERT_CONDITIONAL, INSERT_LAST),
        (BY_SOURCE_CONDITIONAL, BY_SOURCE_LAST),
    ):
        chosen = draw(st.lists(st.sampled_from(range(len(conditional))), unique=True, max_size=2))
        clauses += [conditional[i] for i in chosen]
        final = draw(st.sampled_from(last))
        if final is not None:
            clauses.append(final)
    if not clauses:
        clauses.append(MergeClause("matched_delete"))
    return clauses


def _enable_cdf(table: DeltaTable) -> None:
    with table.transaction() as txn:
        txn.set_properties({"delta.enableChangeDataFeed": "true"})
        txn.commit("SET TBLPROPERTIES", {}, {})


EXAMPLE = {
    "target_rows": TARGET_ROWS,
    "source_rows": SOURCE_ROWS,
    "clauses": clause_sets(),
    "dv": st.booleans(),
    "partitioned": st.booleans(),
    "column_mapping": st.booleans(),
    "cdf": st.booleans(),
    "on_partition": st.sampled_from([None, "a"]),
    "unique_source_keys": st.booleans(),
}


@pytest.mark.timeout(1800)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(**EXAMPLE)
def test_worker_and_spark_merge_agree_with_the_oracles(spark: Any, **example: Any) -> None:
    """Both paths on copies of one table: the same rows, metrics, parameters and change data (Spark is slow: few examples)."""
    check_both_ways(spark, **example)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(**EXAMPLE)
def test_worker_merge_agrees_with_the_oracles(**example: Any) -> None:
    """The worker alone, on many more examples (it takes milliseconds): DuckDB, the model, delta-rs, delta-kernel-rs."""
    check_both_ways(None, **example)


def check_both_ways(
    spark: Any,
    target_rows: list[Row],
    source_rows: list[Row],
    clauses: list[MergeClause],
    dv: bool,
    partitioned: bool,
    column_mapping: bool,
    cdf: bool,
    on_partition: str | None,
    unique_source_keys: bool,
) -> None:
    keys = [r[0] for r in target_rows if r[0] is not None]
    if unique_source_keys:
        seen: set[int] = set()
        source_rows = [r for r in source_rows if r[0] is None or not (r[0] in seen or seen.add(r[0]))]
    elif keys:
        source_rows = [*source_rows, (keys[0], 1, "a", 1), (keys[0], 2, "b", 0)]
    with tempfile.TemporaryDirectory(prefix="merge-worker-prop-") as work_dir:
        work = Path(work_dir)
        worker_target, spark_target = work / "worker", work / "spark"
        table = make_target(worker_target, target_rows, dv=dv, partitioned=partitioned, column_mapping=column_mapping)
        if cdf:
            _enable_cdf(table)
        shutil.copytree(worker_target, spark_target)
        source = write_source(work / "source.parquet", source_rows)
        on = "t.id = s.id" if on_partition is None else f"t.id = s.id AND t.p = '{on_partition}'"
        worker_spec = spec_for(worker_target, source, clauses, on=on)
        spark_spec = spec_for(spark_target, source, clauses, on=on)
        assert worker_refusal(worker_spec, table.snapshot().schema, read_source(source).schema) is None
        version_before, files_before = table.version(), data_files(worker_target)

        if delta_raises_multiple_match(target_rows, source_rows, worker_spec, on_partition):
            event("multiple-match error")
            with pytest.raises(MultipleSourceRowsMatchedError):
                run_merge_in_worker(worker_spec)
            if spark is not None:
                with pytest.raises(MultipleSourceRowsMatchedError):
                    run_merge(spark, spark_spec)
            assert table.version() == version_before
            assert data_files(worker_target) == files_before
            assert_oracles_read(worker_target, as_dicts(target_rows))
            return

        expected = duckdb_merge(target_rows, source_rows, worker_spec)
        in_worker = run_merge_in_worker(worker_spec)
        event("committed" if in_worker.version is not None else "nothing to commit")
        assert_oracles_read(worker_target, expected)
        metrics = in_worker.metrics
        assert len(expected) == len(target_rows) - metrics["numTargetRowsDeleted"] + metrics["numTargetRowsInserted"]
        if spark is None:
            return
        on_spark = run_merge(spark, spark_spec)
        assert_oracles_read(spark_target, expected)
        assert in_worker.version == on_spark.version
        assert {k: in_worker.metrics[k] for k in ROW_METRICS} == {k: on_spark.metrics[k] for k in ROW_METRICS}
        if in_worker.version is not None:
            info = DeltaTable(str(worker_target)).history(1)[0]
            assert info["operation"] == "MERGE"
            assert info["operationParameters"] == DeltaTable(str(spark_target)).history(1)[0]["operationParameters"]
            if cdf:
                assert _sorted(read_change_files(worker_target, in_worker.version)) == _sorted(
                    read_change_files(spark_target, on_spark.version)
                )


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=repr)


# ---------------------------------------------------------------------------------------
# Fixed cases


UPSERT = [
    MergeClause("matched_update", "s.op = 1", {"v": "s.v"}),
    MergeClause("matched_delete", "s.op = 2"),
    MergeClause("not_matched_insert", star=True),
    MergeClause("not_matched_by_source_update", "t.v > 15", {"v": "-1"}),
]
# Rows 6 and 7 stay as they are: their files keep live rows (DVs), or are copied (rewrites).
UPSERT_TARGET = [(1, 10, "a"), (2, 20, "b"), (6, 5, "b"), (3, 30, "a"), (None, 40, "b"), (5, 50, "a"), (7, 1, "a")]
UPSERT_SOURCE = [(1, 100, "a", 1), (4, 400, "b", 0), (None, 500, "a", 0), (3, 300, "a", 2)]


@pytest.mark.parametrize("dv", [True, False])
def test_upsert_in_the_worker_writes_dvs_or_rewrites_as_the_table_says(tmp_path: Path, dv: bool) -> None:
    table = make_target(tmp_path / "t", UPSERT_TARGET, dv=dv)
    source = write_source(tmp_path / "s.parquet", UPSERT_SOURCE)
    spec = spec_for(tmp_path / "t", source, UPSERT)
    result = run_merge_in_worker(spec)
    assert_oracles_read(tmp_path / "t", duckdb_merge(UPSERT_TARGET, UPSERT_SOURCE, spec))
    metrics = result.metrics
    assert (metrics["numTargetRowsMatchedUpdated"], metrics["numTargetRowsMatchedDeleted"]) == (1, 1)
    assert (metrics["numTargetRowsInserted"], metrics["numTargetRowsNotMatchedBySourceUpdated"]) == (2, 3)
    actions = [line for line in (tmp_path / "t" / "_delta_log" / f"{result.version:020d}.json").read_text().splitlines()]
    with_dv = [a for a in actions if '"add"' in a and '"deletionVector":{' in a]
    if dv:
        assert (metrics["numTargetDeletionVectorsAdded"], metrics["numTargetRowsCopied"]) == (2, 0)
        assert len(with_dv) == 2
    else:
        assert (metrics["numTargetDeletionVectorsAdded"], metrics["numTargetRowsCopied"]) == (0, 2)
        assert not with_dv
    assert sum('"txn"' in a for a in actions) == 1  # the task's appId: exactly once across retries
    assert table.history(1)[0]["operation"] == "MERGE"


def test_a_delta_source_at_a_version_is_read_by_the_worker(tmp_path: Path) -> None:
    make_target(tmp_path / "t", [(1, 10, "a"), (2, 20, "b")])
    source_table = DeltaTable.create(str(tmp_path / "src"), SOURCE_SCHEMA)
    source_table.append(pa.Table.from_pylist(as_dicts([(2, 7, "b", 0)], SOURCE_SCHEMA), SOURCE_SCHEMA))
    source_table.append(pa.Table.from_pylist(as_dicts([(3, 9, "a", 0)], SOURCE_SCHEMA), SOURCE_SCHEMA))
    source = MergeSource(delta=TableRef(str(tmp_path / "src"), version=1))
    spec = spec_for(tmp_path / "t", source, [MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)])
    result = run_merge_in_worker(spec)
    assert result.metrics["numSourceRows"] == 1
    assert_oracles_read(tmp_path / "t", as_dicts([(1, 10, "a"), (2, 7, "b")]))


def test_keys_outside_the_source_range_skip_target_files(tmp_path: Path) -> None:
    table = DeltaTable.create(str(tmp_path / "t"), TARGET_SCHEMA)
    for start in range(0, 100, 10):  # ten files, each a range of ten keys
        table.append(pa.Table.from_pylist(as_dicts([(i, i, "a") for i in range(start, start + 10)]), TARGET_SCHEMA))
    source = write_source(tmp_path / "s.parquet", [(95, 0, "a", 0), (97, 1, "a", 0), (200, 2, "b", 0)])
    spec = spec_for(tmp_path / "t", source, [MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)])
    result = run_merge_in_worker(spec)
    assert result.metrics["numTargetFilesBeforeSkipping"] == 10
    assert result.metrics["numTargetFilesAfterSkipping"] == 1
    assert result.metrics["numTargetRowsUpdated"] == 2 and result.metrics["numTargetRowsInserted"] == 1
    expected = [(i, i, "a") for i in range(100) if i not in (95, 97)] + [(95, 0, "a"), (97, 1, "a"), (200, 2, "b")]
    assert_oracles_read(tmp_path / "t", as_dicts(expected))


@pytest.mark.parametrize(("deleted", "attempts"), [("id = 5", 1), ("id = 36", 2)])
def test_the_key_filter_is_the_recorded_read(tmp_path: Path, deleted: str, attempts: int) -> None:
    # Four files of ten keys; the source's only key is 35, so the MERGE reads (and records)
    # the last file alone. A concurrent DELETE elsewhere commits beside it; one in that file
    # makes it plan again (ConcurrentDeleteReadException).
    table = DeltaTable.create(str(tmp_path / "t"), TARGET_SCHEMA)
    for start in range(0, 40, 10):
        table.append(pa.Table.from_pylist(as_dicts([(i, i, "a") for i in range(start, start + 10)]), TARGET_SCHEMA))
    source = write_source(tmp_path / "s.parquet", [(35, 0, "a", 0)])
    spec = spec_for(
        tmp_path / "t",
        source,
        [MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)],
        options=ExecutionOptions(backoff_initial_seconds=0.0),
    )

    def concurrent_delete(attempt: int) -> None:
        if attempt == 1:
            DeltaTable(str(tmp_path / "t")).delete(deleted)

    result = run_merge_in_worker(spec, before_commit=concurrent_delete)
    assert result.attempts == attempts
    assert result.metrics["numTargetFilesAfterSkipping"] == 1
    removed = 5 if deleted == "id = 5" else 36
    expected = [(i, i, "a") for i in range(40) if i not in (35, removed)] + [(35, 0, "a")]
    assert_oracles_read(tmp_path / "t", as_dicts(expected))


@pytest.mark.parametrize(
    ("on", "clauses", "reason"),
    [
        ("t.id = s.id", [MergeClause("matched_update", assignments={"v": "s.v + t.v"})], "cast by Spark"),
        ("t.id = s.id", [MergeClause("matched_update", "s.v > 1.5e1", {"v": "s.v"})], "exactly as Spark"),
        ("t.id = s.id", [MergeClause("matched_update", "upper(s.p) = 'A'", {"v": "s.v"})], "exactly as Spark"),
        ("t.id < s.id", [MergeClause("matched_delete")], "no equality"),
        ("t.id <=> s.id", [MergeClause("matched_delete")], "no equality"),
        ("t.id = s.id", [MergeClause("matched_update", assignments={"v": "'5'"})], "cast by Spark"),
        ("t.id = s.id", [MergeClause("matched_update", assignments={"id": "s.p"})], "cast to"),
    ],
)
def test_what_the_worker_does_not_evaluate_as_spark_goes_to_spark(
    tmp_path: Path, on: str, clauses: list[MergeClause], reason: str
) -> None:
    table = make_target(tmp_path / "t", [(1, 1, "a")])
    spec = spec_for(tmp_path / "t", write_source(tmp_path / "s.parquet", [(1, 2, "a", 0)]), clauses, on=on)
    refusal = worker_refusal(spec, table.snapshot().schema, SOURCE_SCHEMA)
    assert refusal is not None and reason in refusal
    with pytest.raises(InvalidArgumentError, match="execution"):
        run_merge_in_worker(spec)
    assert table.version() == 1  # nothing committed


def test_sources_the_worker_does_not_read(tmp_path: Path) -> None:
    assert source_refusal(MergeSource(query="SELECT 1 AS id")) == "the source is a Spark SQL query"
    assert "object store" in (source_refusal(MergeSource(parquet="s3://bucket/x")) or "")
    partitioned = tmp_path / "src" / "day=1"
    partitioned.mkdir(parents=True)
    pq.write_table(pa.table({"id": [1]}), partitioned / "part.parquet")
    assert "Hive-style" in (source_refusal(MergeSource(parquet=str(tmp_path / "src"))) or "")
    unsigned = tmp_path / "u.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.uint32()), "v": [1], "p": ["a"]}), unsigned)
    table = make_target(tmp_path / "t", [(1, 1, "a")])
    spec = spec_for(tmp_path / "t", MergeSource(parquet=str(unsigned)), [MergeClause("matched_delete")])
    assert "unsigned" in (worker_refusal(spec, table.snapshot().schema, read_source(spec.source).schema) or "")


def test_source_key_filter_shapes() -> None:
    spec = spec_for(Path("/x"), MergeSource(parquet="/y"), [MergeClause("matched_delete")], on="s.id = t.id AND t.p = s.p AND t.v > 1")
    assert equi_keys(spec, TARGET_SCHEMA.names, SOURCE_SCHEMA.names) == [("id", "id"), ("p", "p")]
    assert source_key_filter({"id": (pa.int64(), (1, 9, None))}) == "(`id` >= 1 AND `id` <= 9)"
    assert source_key_filter({"p": (pa.string(), ("a", "b'c", ["b'c", "a"]))}) == "(`p` IN ('a', 'b''c'))"
    assert source_key_filter({"id": (pa.int64(), (None, None, []))}) == "false"  # only NULL keys: nothing matches
    assert source_key_filter({"id": (pa.float64(), (1.0, 2.0, None))}) is None  # floats: nothing skipped


def test_tables_with_features_the_worker_does_not_write_go_to_spark(tmp_path: Path) -> None:
    # A Delta-written table with liquid clustering and row tracking (copied: the MERGE is refused before writing).
    shared = Path(os.environ.get("DELTA_SHARED_TABLES", "../shared/delta-tables")) / "table_with_liquid_clustering"
    if not shared.exists():
        pytest.skip("the shared Delta tables are not here")
    shutil.copytree(shared, tmp_path / "t")
    table = DeltaTable(str(tmp_path / "t"))
    assert "rowTracking" in (table_refusal(table.snapshot()) or "")
    assert table_refusal(make_target(tmp_path / "plain", [(1, 1, "a")]).snapshot()) is None
    schema = table.snapshot().schema
    key = schema.names[0]
    source = tmp_path / "s.parquet"
    pq.write_table(pa.table({key: pa.array([], schema.field(key).type)}), source)
    spec = spec_for(tmp_path / "t", MergeSource(parquet=str(source)), [MergeClause("matched_delete")], on=f"t.{key} = s.{key}")
    version = table.version()
    with pytest.raises(InvalidArgumentError, match="rowTracking"):
        run_merge_in_worker(spec)
    assert table.version() == version


# ---------------------------------------------------------------------------------------
# The target read in pieces (several files, several row groups each)

# Three files of nine rows in row groups of three (keys 0..26 and two NULLs); key 7 is also
# in the last file, and key 20 in the first: target rows with one key in two files and pieces.
PIECES_TARGET = [
    [(i, i, "a") for i in range(0, 8)] + [(20, 200, "b")],
    [(i, i, "b") for i in range(8, 16)] + [(None, 0, "a")],
    [(i, i, "a") for i in range(16, 24)] + [(7, 70, "b"), (None, 1, "b")],
]
PIECES_CLAUSES = [
    MergeClause("matched_delete", "s.op = 2"),
    MergeClause("matched_update", "t.v < s.v", {"v": "s.v", "p": "s.p"}),
    MergeClause("not_matched_insert", star=True),
]
# Updates of key 7 (two target rows in files 0 and 2) and 20 (files 0 and 2), one in the middle file,
# a delete, a NULL key (inserted, never matched), a row whose condition holds for no clause, and inserts.
PIECES_SOURCE = [(7, 100, "c", 0), (20, 300, "c", 0), (12, 120, "c", 0), (3, 0, "c", 2), (None, 5, "c", 0),
                 (17, 1, "c", 0), (40, 40, "c", 0), (41, 41, "c", 1)]


def _scaled(rows: list[Row], scale: int) -> list[Row]:
    return [(None if row[0] is None else row[0] * scale, *row[1:]) for row in rows]


def _pieces_target(path: Path, cdf: bool, scale: int = 1) -> None:
    path.mkdir(parents=True)
    for number, rows in enumerate(PIECES_TARGET):
        table = pa.Table.from_pylist(as_dicts(_scaled(rows, scale)), TARGET_SCHEMA)
        pq.write_table(table, path / f"part-{number}.parquet", row_group_size=3)
    properties = {"delta.enableDeletionVectors": "true"} | ({"delta.enableChangeDataFeed": "true"} if cdf else {})
    DeltaTable.convert_to_delta(str(path), properties=properties)


# The keys' layouts: small integers (looked up in a bitmap), integers far apart (a binary search),
# and a second key, a string (pyarrow's is_in), whose values match some of the target's rows only.
PIECES_LAYOUTS = {
    "dense": (1, "t.id = s.id", PIECES_SOURCE, (5, 1, 3)),
    "sparse": (10**15, "t.id = s.id", PIECES_SOURCE, (5, 1, 3)),
    "two keys": (1, "t.id = s.id AND t.p = s.p",
                 [(7, 100, "b", 0), (20, 300, "a", 0), (12, 120, "b", 0), (3, 0, "a", 2), (None, 5, "a", 0), (40, 40, "c", 0)],
                 (3, 1, 2)),
}


@pytest.mark.parametrize(("layout", "cdf"), [("dense", False), ("dense", True), ("sparse", False), ("two keys", False)])
def test_the_target_read_in_pieces_merges_as_read_whole(tmp_path: Path, layout: str, cdf: bool) -> None:
    # Every row group its own piece (stream_bytes=1) against every file read at once: the same
    # rows (DuckDB's, read by delta-rs and delta-kernel-rs), metrics and change data.
    scale, on, source_rows, (updated, deleted, inserted) = PIECES_LAYOUTS[layout]
    source_rows = _scaled(source_rows, scale)
    source = write_source(tmp_path / "s.parquet", source_rows)
    results = {}
    for name, stream_bytes in (("pieces", 1), ("whole", 1 << 40)):
        _pieces_target(tmp_path / name, cdf, scale)
        results[name] = run_merge_in_worker(spec_for(tmp_path / name, source, PIECES_CLAUSES, on=on), stream_bytes=stream_bytes)
    target_rows = _scaled([row for rows in PIECES_TARGET for row in rows], scale)
    expected = duckdb_merge(target_rows, source_rows, spec_for(tmp_path / "pieces", source, PIECES_CLAUSES, on=on))
    for name in results:
        assert_oracles_read(tmp_path / name, expected)
    pieces, whole = results["pieces"].metrics, results["whole"].metrics
    assert {k: pieces[k] for k in ROW_METRICS} == {k: whole[k] for k in ROW_METRICS}
    assert (pieces["numTargetRowsMatchedUpdated"], pieces["numTargetRowsMatchedDeleted"], pieces["numTargetRowsInserted"]) == (
        updated, deleted, inserted
    )
    assert pieces["numTargetRowsCopied"] == 0  # DVs: the touched files are marked, not rewritten
    if cdf:
        assert _sorted(read_change_files(tmp_path / "pieces", results["pieces"].version)) == _sorted(
            read_change_files(tmp_path / "whole", results["whole"].version)
        )


def test_a_multiple_match_found_across_pieces_fails_and_changes_nothing(tmp_path: Path) -> None:
    # Two source rows for key 7, whose target rows are in the first and the last file.
    _pieces_target(tmp_path / "t", cdf=False)
    version = DeltaTable(str(tmp_path / "t")).version()
    source = write_source(tmp_path / "s.parquet", [(7, 1, "c", 0), (7, 2, "c", 0), (30, 3, "c", 0)])
    spec = spec_for(tmp_path / "t", source, [MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)])
    with pytest.raises(MultipleSourceRowsMatchedError):
        run_merge_in_worker(spec, stream_bytes=1)
    assert DeltaTable(str(tmp_path / "t")).version() == version
    assert_oracles_read(tmp_path / "t", as_dicts([row for rows in PIECES_TARGET for row in rows]))
