"""MERGE on Spark against independent oracles.

The expected table after a MERGE is what DuckDB's own ``MERGE INTO`` makes of the same
rows and clauses; delta-rs and delta-kernel-rs must read exactly that from the table we
committed. Whether a MERGE must fail with Delta's multiple-match error is decided by a
plain Python model of Delta's rule (DuckDB does not raise it), written from Delta's
``ClassicMergeExecutor``: a target row that the ON condition joins with more than one
source row fails a MERGE that is not insert-only, unless its only WHEN MATCHED clause
is an unconditional DELETE.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructType

from airflow_delta.engine import DeltaTable, InvalidArgumentError, InvalidFilterError, MultipleSourceRowsMatchedError
from airflow_delta.spark.file_tasks import FILE_COLUMN, ROW_COLUMN, spark_schema, target_dataframe
from airflow_delta.spark.merge import (
    BROADCAST_SOURCE_BYTES,
    BROADCAST_SOURCE_CONF,
    SOURCE_ROW_COLUMN,
    MergePlan,
    broadcasts_source,
    load_source,
    matched_pairs,
    materialized_source,
    run_merge,
    source_bytes,
    target_only_filter,
)
from airflow_delta.spark.specs import ExecutionOptions, MergeClause, MergeSource, MergeSpec, TableRef, TaskIdentity
from tests.oracles import assert_oracles_read, read_with_deltars

pytestmark = pytest.mark.slow

TARGET_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("p", pa.string())])
SOURCE_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("p", pa.string()), ("op", pa.int64())])
Row = tuple[Any, ...]
_runs = iter(range(1_000_000))


def identity() -> TaskIdentity:
    """A task instance of its own for every MERGE (one appId each: a MERGE is never skipped as a retry)."""
    return TaskIdentity("merge_tests", "merge", f"run-{next(_runs)}")


def make_target(
    path: Path, rows: Sequence[Row], *, dv: bool = True, partitioned: bool = False, column_mapping: bool = False
) -> DeltaTable:
    properties = {"delta.enableDeletionVectors": "true" if dv else "false"}
    if column_mapping:
        properties["delta.columnMapping.mode"] = "name"
    table = DeltaTable.create(str(path), TARGET_SCHEMA, partition_by=["p"] if partitioned else [], properties=properties)
    # Two appends: a MERGE then touches some files and not others.
    half = len(rows) // 2
    for part in (rows[:half], rows[half:]):
        if part:
            table.append(pa.Table.from_pylist([dict(zip(TARGET_SCHEMA.names, r, strict=True)) for r in part], TARGET_SCHEMA))
    return table


def write_source(path: Path, rows: Sequence[Row], schema: pa.Schema = SOURCE_SCHEMA) -> MergeSource:
    pq.write_table(pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema), path)
    return MergeSource(parquet=str(path))


def spec_for(target: Path, source: MergeSource, clauses: Sequence[MergeClause], on: str = "t.id = s.id", **kw: Any) -> MergeSpec:
    return MergeSpec(
        target=TableRef(str(target)),
        source=source,
        on=on,
        clauses=tuple(clauses),
        identity=identity(),
        source_alias="s",
        target_alias="t",
        **kw,
    )


def as_dicts(rows: Sequence[Row], schema: pa.Schema = TARGET_SCHEMA) -> list[dict[str, Any]]:
    return [dict(zip(schema.names, r, strict=True)) for r in rows]


# ---------------------------------------------------------------------------------------
# The oracles: DuckDB's MERGE INTO, and Delta's multiple-match rule as a model


def duckdb_merge(target_rows: Sequence[Row], source_rows: Sequence[Row], spec: MergeSpec) -> list[dict[str, Any]]:
    """The target's rows after DuckDB runs the same MERGE (``*`` spelled out by column name, as Delta resolves it)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE tgt (id BIGINT, v BIGINT, p VARCHAR)")
    con.execute("CREATE TABLE src (id BIGINT, v BIGINT, p VARCHAR, op BIGINT)")
    if target_rows:
        con.executemany("INSERT INTO tgt VALUES (?, ?, ?)", [list(r) for r in target_rows])
    if source_rows:
        con.executemany("INSERT INTO src VALUES (?, ?, ?, ?)", [list(r) for r in source_rows])
    star = {name: f"s.{name}" for name in TARGET_SCHEMA.names}
    whens = []
    for clause in spec.clauses:
        head = {"WHEN MATCHED": "WHEN MATCHED", "WHEN NOT MATCHED": "WHEN NOT MATCHED BY TARGET"}.get(
            clause.group, "WHEN NOT MATCHED BY SOURCE"
        )
        condition = f" AND ({clause.condition})" if clause.condition else ""
        values = clause.assignments if clause.assignments is not None else star
        if clause.kind.endswith("delete"):
            action = "DELETE"
        elif clause.kind == "not_matched_insert":
            action = f"INSERT ({', '.join(values)}) VALUES ({', '.join(values.values())})"
        else:
            action = "UPDATE SET " + ", ".join(f"{k} = {v}" for k, v in values.items())
        whens.append(f"{head}{condition} THEN {action}")
    con.execute(f"MERGE INTO tgt AS t USING src AS s ON {spec.on} " + " ".join(whens))
    return [dict(zip(TARGET_SCHEMA.names, row, strict=True)) for row in con.execute("SELECT id, v, p FROM tgt").fetchall()]


def delta_raises_multiple_match(target_rows: Sequence[Row], source_rows: Sequence[Row], spec: MergeSpec, on_partition: str | None) -> bool:
    if all(clause.kind == "not_matched_insert" for clause in spec.clauses):
        return False  # insert-only MERGE: Delta never checks
    matched = [c for c in spec.clauses if c.group == "WHEN MATCHED"]
    if len(matched) == 1 and matched[0].kind == "matched_delete" and matched[0].condition is None:
        return False
    for tid, _, tp in target_rows:
        if tid is None or (on_partition is not None and tp != on_partition):
            continue
        if sum(1 for sid, *_ in source_rows if sid == tid) > 1:
            return True
    return False


@contextmanager
def source_broadcast(spark: Any, enabled: bool) -> Iterator[None]:
    """The session's MERGE broadcast threshold set so that the test's (tiny) source is broadcast or not."""
    spark.conf.set(BROADCAST_SOURCE_CONF, str(BROADCAST_SOURCE_BYTES if enabled else -1))
    try:
        yield
    finally:
        spark.conf.unset(BROADCAST_SOURCE_CONF)


def data_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*.parquet")}


# ---------------------------------------------------------------------------------------
# Property: random tables and clause sets, DVs on and off, partitioned, column-mapped

IDS = st.one_of(st.none(), st.integers(0, 4))
OPS = st.one_of(st.none(), st.integers(0, 2))
TARGET_ROWS = st.lists(st.tuples(IDS, st.integers(0, 60), st.sampled_from(["a", "b"])), min_size=1, max_size=10)
SOURCE_ROWS = st.lists(st.tuples(IDS, st.integers(0, 60), st.sampled_from(["a", "b"]), OPS), max_size=6)

MATCHED_CONDITIONAL = [
    MergeClause("matched_update", "s.op = 1", {"v": "s.v + t.v"}),
    MergeClause("matched_delete", "s.op = 2"),
    MergeClause("matched_update", "t.v > s.v", {"v": "s.v", "p": "s.p"}),
]
MATCHED_LAST = [None, MergeClause("matched_update", star=True), MergeClause("matched_delete")]
INSERT_CONDITIONAL = [MergeClause("not_matched_insert", "s.op <> 2", {"id": "s.id", "v": "s.v * 2", "p": "'b'"})]
INSERT_LAST = [None, MergeClause("not_matched_insert", star=True)]
BY_SOURCE_CONDITIONAL = [
    MergeClause("not_matched_by_source_delete", "t.v > 40"),
    MergeClause("not_matched_by_source_update", "t.p = 'a'", {"v": "t.v + 1000"}),
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


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    target_rows=TARGET_ROWS,
    source_rows=SOURCE_ROWS,
    clauses=clause_sets(),
    dv=st.booleans(),
    partitioned=st.booleans(),
    column_mapping=st.booleans(),
    on_partition=st.sampled_from([None, "a"]),
    unique_source_keys=st.booleans(),
    broadcast_source=st.booleans(),
)
def test_merge_matches_duckdb_and_delta_rule(
    spark: Any,
    target_rows: list[Row],
    source_rows: list[Row],
    clauses: list[MergeClause],
    dv: bool,
    partitioned: bool,
    column_mapping: bool,
    on_partition: str | None,
    unique_source_keys: bool,
    broadcast_source: bool,
) -> None:
    keys = [r[0] for r in target_rows if r[0] is not None]
    if unique_source_keys:
        # Half the examples: at most one source row per key, so most MERGEs commit.
        seen: set[int] = set()
        source_rows = [r for r in source_rows if r[0] is None or not (r[0] in seen or seen.add(r[0]))]
    elif keys:
        # The other half: two more source rows for a target key, where Delta's multiple-match
        # rule decides (it may not apply: insert-only, a lone unconditional DELETE, ON's partition).
        source_rows = [*source_rows, (keys[0], 1, "a", 1), (keys[0], 2, "b", 0)]
    # A directory per example, removed after it (tmp_path is one per test, not per example).
    # Both ways of matching: the source broadcast to the target's scan, or both sides shuffled.
    with tempfile.TemporaryDirectory(prefix="merge-prop-") as work_dir, source_broadcast(spark, broadcast_source):
        check_one_merge(spark, Path(work_dir), target_rows, source_rows, clauses, dv, partitioned, column_mapping, on_partition)


def check_one_merge(
    spark: Any,
    work: Path,
    target_rows: list[Row],
    source_rows: list[Row],
    clauses: list[MergeClause],
    dv: bool,
    partitioned: bool,
    column_mapping: bool,
    on_partition: str | None,
) -> None:
    target = work / "target"
    table = make_target(target, target_rows, dv=dv, partitioned=partitioned, column_mapping=column_mapping)
    source = write_source(work / "source.parquet", source_rows)
    # A target-only conjunct in ON: Delta prunes the target's files with it.
    on = "t.id = s.id" if on_partition is None else f"t.id = s.id AND t.p = '{on_partition}'"
    spec = spec_for(target, source, clauses, on=on)
    version_before, files_before = table.version(), data_files(target)

    if delta_raises_multiple_match(target_rows, source_rows, spec, on_partition):
        event("Delta's multiple-match error")
        with pytest.raises(MultipleSourceRowsMatchedError) as caught:
            run_merge(spark, spec)
        assert "deduplicate the source" in str(caught.value)
        assert table.version() == version_before
        assert data_files(target) == files_before  # what the failed MERGE wrote is gone
        assert_oracles_read(target, as_dicts(target_rows))
        return

    expected = duckdb_merge(target_rows, source_rows, spec)
    result = run_merge(spark, spec)
    event("committed" if result.version is not None else "nothing to commit")
    assert_oracles_read(target, expected)
    metrics = result.metrics
    assert metrics["numSourceRows"] == len(source_rows)
    # Row accounting: what stays = before - deleted + inserted (an update replaces a row).
    assert len(expected) == len(target_rows) - metrics["numTargetRowsDeleted"] + metrics["numTargetRowsInserted"]
    if result.version is None:
        assert table.version() == version_before
        assert sorted(map(repr, expected)) == sorted(map(repr, as_dicts(target_rows)))
    else:
        assert result.version == version_before + 1
        info = table.history(1)[0]
        assert info["operation"] == "MERGE"
        assert info["operationMetrics"]["numTargetRowsUpdated"] == str(metrics["numTargetRowsUpdated"])


# ---------------------------------------------------------------------------------------
# Fixed cases: what each path commits


UPSERT = [
    MergeClause("matched_update", "s.op = 1", {"v": "s.v + t.v"}),
    MergeClause("matched_delete", "s.op = 2"),
    MergeClause("not_matched_insert", star=True),
    MergeClause("not_matched_by_source_update", "t.v > 15", {"v": "t.v - 1"}),
]
UPSERT_TARGET = [(1, 10, "a"), (2, 20, "b"), (3, 30, "a"), (None, 40, "b"), (5, 50, "a")]
UPSERT_SOURCE = [(1, 100, "a", 1), (4, 400, "b", 0), (None, 500, "a", 0), (3, 300, "a", 2)]


def commit_actions(path: Path, version: int) -> list[dict[str, Any]]:
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


@pytest.mark.parametrize("dv", [True, False], ids=["deletion-vectors", "rewrite"])
def test_upsert_commits_what_delta_commits(spark: Any, tmp_path: Path, dv: bool) -> None:
    target = tmp_path / "target"
    make_target(target, UPSERT_TARGET, dv=dv)
    spec = spec_for(target, write_source(tmp_path / "s.parquet", UPSERT_SOURCE), UPSERT)
    expected = duckdb_merge(UPSERT_TARGET, UPSERT_SOURCE, spec)
    result = run_merge(spark, spec)
    assert_oracles_read(target, expected)

    m = result.metrics
    assert (m["numSourceRows"], m["numTargetRowsInserted"], m["numTargetRowsMatchedUpdated"]) == (4, 2, 1)
    assert (m["numTargetRowsNotMatchedBySourceUpdated"], m["numTargetRowsUpdated"]) == (3, 4)
    assert (m["numTargetRowsMatchedDeleted"], m["numTargetRowsDeleted"], m["numTargetRowsNotMatchedBySourceDeleted"]) == (1, 1, 0)
    assert m["numOutputRows"] == m["numTargetRowsInserted"] + m["numTargetRowsUpdated"] + m["numTargetRowsCopied"]
    actions = commit_actions(target, result.version)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "MERGE"
    assert info["isBlindAppend"] is False
    assert info["operationParameters"] == {
        "predicate": '["t.id = s.id"]',
        "matchedPredicates": '[{"predicate":"s.op = 1","actionType":"update"},{"predicate":"s.op = 2","actionType":"delete"}]',
        "notMatchedPredicates": '[{"actionType":"insert"}]',
        "notMatchedBySourcePredicates": '[{"predicate":"t.v > 15","actionType":"update"}]',
    }
    assert info["tags"]["airflowDelta.appId"] == spec.identity.app_id
    assert {k: int(v) for k, v in info["operationMetrics"].items()} == dict(m)
    assert [a["txn"]["appId"] for a in actions if "txn" in a] == [spec.identity.app_id]
    adds = [a["add"] for a in actions if "add" in a]
    assert all(a["dataChange"] for a in adds)
    if dv:
        # Every target row changes, so both files leave whole (no DV is needed) and nothing is copied.
        assert (m["numTargetRowsCopied"], m["numTargetFilesRemoved"], m["numTargetDeletionVectorsAdded"]) == (0, 2, 0)
    else:
        assert not any(a.get("deletionVector") for a in adds)
        assert m["numTargetRowsCopied"] == len(UPSERT_TARGET) - m["numTargetRowsUpdated"] - m["numTargetRowsDeleted"]


def test_deletion_vectors_mark_rows_and_write_only_changed_rows(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "target"
    rows = [(i, i, "a") for i in range(40)]
    make_target(target, rows, dv=True)
    source_rows = [(3, 0, "a", 1), (25, 0, "a", 2)]
    spec = spec_for(target, write_source(tmp_path / "s.parquet", source_rows), UPSERT[:2])
    result = run_merge(spark, spec)
    assert_oracles_read(target, duckdb_merge(rows, source_rows, spec))
    m = result.metrics
    # One row updated in one file, one deleted in the other: two DVs, one new file with the updated row.
    assert (m["numTargetDeletionVectorsAdded"], m["numTargetFilesAdded"], m["numTargetRowsCopied"]) == (2, 1, 0)
    assert m["numOutputRows"] == 1


def test_insert_only_appends_without_touching_the_target(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "target"
    table = make_target(target, [(1, 1, "a"), (2, 2, "b")], dv=False, partitioned=True)
    source_rows = [(1, 10, "a", 0), (3, 30, "a", 0), (4, 40, "b", 2), (4, 41, "b", 0)]
    clauses = [MergeClause("not_matched_insert", "s.op <> 2", star=True)]
    # Duplicate source keys are fine here: an insert-only MERGE never checks.
    spec = spec_for(target, write_source(tmp_path / "s.parquet", source_rows), clauses, on="t.id = s.id AND t.p = 'a'")
    expected = duckdb_merge([(1, 1, "a"), (2, 2, "b")], source_rows, spec)
    result = run_merge(spark, spec)
    assert_oracles_read(target, expected)
    actions = commit_actions(target, result.version)
    assert not any("remove" in a for a in actions)
    assert result.metrics["numTargetRowsInserted"] == 2
    # The ON condition's target-only conjunct pruned partition b's file from what the MERGE read.
    assert (result.metrics["numTargetFilesBeforeSkipping"], result.metrics["numTargetFilesAfterSkipping"]) == (2, 1)
    assert table.version() == result.version


@pytest.mark.parametrize("broadcast", [True, False], ids=["small-source", "threshold-off"])
def test_a_small_source_is_broadcast_and_the_target_is_not_shuffled(spark: Any, tmp_path: Path, broadcast: bool) -> None:
    target = tmp_path / "target"
    table = make_target(target, [(i, i, "a") for i in range(10)])
    spec = spec_for(target, write_source(tmp_path / "s.parquet", [(1, 0, "a", 1), (20, 0, "a", 0)]), UPSERT[:3])
    with source_broadcast(spark, broadcast):
        source, num_source_rows = materialized_source(load_source(spark, spec.source))
        assert num_source_rows == 2
        # The count is the job that filled the lazy checkpoint: the lineage is cut, the parquet file is not read again.
        assert source._jdf.queryExecution().analyzed().rdd().isCheckpointed()
        assert broadcasts_source(spark, source) is broadcast
        context = table.context(table.snapshot())
        source_schema = StructType([f for f in source.schema.fields if f.name != SOURCE_ROW_COLUMN])
        plan = MergePlan.of(spec, spark_schema(context), source_schema)
        target_rows = target_dataframe(spark, context, table.snapshot().add_actions, plan.target_columns_read())
        pairs = matched_pairs(plan, source, target_rows, broadcast_source=broadcast)
        physical = pairs._jdf.queryExecution().executedPlan().toString()
        if broadcast:  # the source is sent to the target's scan tasks, and nothing is repartitioned
            assert "BroadcastHashJoin" in physical
            assert "Exchange hashpartitioning" not in physical
        assert [(r[FILE_COLUMN] is not None, r[ROW_COLUMN]) for r in pairs.collect()] == [(True, 1)]


def test_a_delta_source_has_no_spark_statistics_and_is_sized_by_its_rows(spark: Any, tmp_path: Path) -> None:
    # A Delta source is read through the engine: Spark's estimate of it is Long.MaxValue-sized,
    # so sizing by that estimate alone never broadcast a 23-row source and kept 200-task stages.
    make_target(tmp_path / "source", [(i, i, "a") for i in range(23)])
    source, num_source_rows = materialized_source(load_source(spark, MergeSource(delta=TableRef(uri=str(tmp_path / "source")))))
    assert num_source_rows == 23
    assert int(str(source._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())) > 1 << 50
    row_bytes = int(source._jdf.schema().defaultSize())
    assert source_bytes(source, num_source_rows) == 23 * row_bytes < 10_000
    assert broadcasts_source(spark, source, num_source_rows)
    assert not broadcasts_source(spark, source)  # without the row count the size stays unknown


def test_nothing_to_change_commits_nothing(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "target"
    table = make_target(target, [(1, 1, "a")])
    spec = spec_for(target, write_source(tmp_path / "s.parquet", [(1, 5, "a", 0)]), [MergeClause("matched_delete", "s.op = 1")])
    result = run_merge(spark, spec)
    assert result.version is None
    assert table.version() == 1
    assert result.metrics["numSourceRows"] == 1


def test_unconditional_delete_tolerates_duplicate_source_rows(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "target"
    rows = [(1, 1, "a"), (2, 2, "a"), (3, 3, "a")]
    make_target(target, rows)
    source_rows = [(1, 0, "a", 0), (1, 0, "a", 0), (1, 0, "a", 1), (2, 0, "a", 0)]
    spec = spec_for(target, write_source(tmp_path / "s.parquet", source_rows), [MergeClause("matched_delete")])
    result = run_merge(spark, spec)
    assert_oracles_read(target, as_dicts([(3, 3, "a")]))
    # Delta subtracts the extra pairs: two rows deleted, not four.
    assert (result.metrics["numTargetRowsDeleted"], result.metrics["numTargetRowsMatchedDeleted"]) == (2, 2)


def test_duplicate_source_rows_fail_even_when_a_condition_would_skip_them(spark: Any, tmp_path: Path) -> None:
    # Delta counts every joined pair, not only those a clause acts on.
    target = tmp_path / "target"
    table = make_target(target, [(1, 1, "a")])
    source_rows = [(1, 0, "a", 1), (1, 0, "a", 0)]
    clauses = [MergeClause("matched_update", "s.op = 1", {"v": "s.v"})]
    spec = spec_for(target, write_source(tmp_path / "s.parquet", source_rows), clauses)
    with pytest.raises(MultipleSourceRowsMatchedError) as caught:
        run_merge(spark, spec)
    assert caught.value.retryable is False
    assert "1 target row(s)" in str(caught.value)
    assert table.version() == 1


def test_star_without_a_target_column_in_the_source_is_refused(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "target"
    table = make_target(target, [(1, 1, "a")])
    narrow = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    source = write_source(tmp_path / "s.parquet", [(2, 2)], narrow)
    with pytest.raises(InvalidArgumentError) as caught:
        run_merge(spark, spec_for(target, source, [MergeClause("not_matched_insert", star=True)]))
    assert caught.value.argument == "MergeSpec.clauses[0].star"
    assert "['p']" in str(caught.value)
    assert table.version() == 1


@pytest.mark.parametrize("column_mapping", [False, True], ids=["plain", "column-mapping"])
def test_schema_evolution_adds_source_columns(spark: Any, tmp_path: Path, column_mapping: bool) -> None:
    target = tmp_path / "target"
    table = make_target(target, [(1, 1, "a"), (2, 2, "b")], dv=False, column_mapping=column_mapping)
    wide = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("extra", pa.string())])  # no p: kept / NULL
    source = write_source(tmp_path / "s.parquet", [(1, 10, "x"), (3, 30, "y")], wide)
    clauses = [MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)]
    before = table.version()
    result = run_merge(spark, spec_for(target, source, clauses, schema_evolution=True))
    assert result.version == before + 1
    assert table.snapshot().schema.names == ["id", "v", "p", "extra"]
    assert_oracles_read(
        target,
        [
            {"id": 1, "v": 10, "p": "a", "extra": "x"},  # UPDATE SET * keeps p, which the source lacks
            {"id": 2, "v": 2, "p": "b", "extra": None},  # untouched row: NULL in the new column
            {"id": 3, "v": 30, "p": None, "extra": "y"},  # INSERT * sets p NULL
        ],
    )


@pytest.mark.parametrize(
    "clause",
    [
        MergeClause("matched_update", "s.nope = 1", {"v": "s.v"}),  # no such source column
        MergeClause("matched_update", "s.v", {"v": "s.v"}),  # not a boolean condition
        MergeClause("matched_update", assignments={"v": "s.v +"}),  # not an expression
    ],
    ids=["unknown-column", "non-boolean", "unparsable"],
)
def test_bad_expressions_fail_before_any_write(spark: Any, tmp_path: Path, clause: MergeClause) -> None:
    target = tmp_path / "target"
    table = make_target(target, [(1, 1, "a")])
    before = table.version(), data_files(target)
    with pytest.raises(InvalidFilterError) as caught:  # the class docs/operators.md gives MERGE conditions and values
        run_merge(spark, spec_for(target, write_source(tmp_path / "s.parquet", [(1, 2, "a", 0)]), [clause]))
    assert "over the target (t) and source (s) columns" in str(caught.value)
    assert "_delta_file" not in str(caught.value) and "__airflow_delta" not in str(caught.value)
    assert (table.version(), data_files(target)) == before


def test_without_schema_evolution_extra_source_columns_are_ignored(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "target"
    table = make_target(target, [(1, 1, "a")])
    source = write_source(tmp_path / "s.parquet", [(1, 5, "z", 0), (2, 6, "y", 0)])  # op is not a target column
    clauses = [MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)]
    run_merge(spark, spec_for(target, source, clauses))
    assert table.snapshot().schema.names == ["id", "v", "p"]
    assert_oracles_read(target, as_dicts([(1, 5, "z"), (2, 6, "y")]))


def test_delta_source_at_a_version_and_query_sources(spark: Any, tmp_path: Path) -> None:
    source_table = tmp_path / "source_table"
    src = DeltaTable.create(str(source_table), SOURCE_SCHEMA)
    src.append(pa.Table.from_pylist(as_dicts([(1, 100, "a", 1), (7, 700, "b", 0)], SOURCE_SCHEMA), SOURCE_SCHEMA))
    src.append(pa.Table.from_pylist(as_dicts([(2, 200, "a", 1)], SOURCE_SCHEMA), SOURCE_SCHEMA))  # version 2: not read
    target = tmp_path / "target"
    make_target(target, [(1, 1, "a"), (2, 2, "a")])
    at_v1 = MergeSource(delta=TableRef(str(source_table), version=1))
    upsert = [MergeClause("matched_update", assignments={"v": "s.v"}), MergeClause("not_matched_insert", star=True)]
    run_merge(spark, spec_for(target, at_v1, upsert))
    assert_oracles_read(target, as_dicts([(1, 100, "a"), (2, 2, "a"), (7, 700, "b")]))

    # A query joining a Delta table (latest) and a parquet file, both as views.
    bonus = write_source(tmp_path / "bonus.parquet", [(2, 5, "a", 0)])
    query = MergeSource(
        query="SELECT u.id, u.v + b.v AS v, u.p FROM updates u JOIN bonus b ON u.id = b.id",
        views={"updates": MergeSource(delta=TableRef(str(source_table))), "bonus": bonus},
    )
    run_merge(spark, spec_for(target, query, [MergeClause("matched_update", assignments={"v": "s.v"})]))
    assert_oracles_read(target, as_dicts([(1, 100, "a"), (2, 205, "a"), (7, 700, "b")]))


def test_a_retry_of_a_committed_task_returns_its_commit(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "target"
    table = make_target(target, [(1, 1, "a")])
    spec = spec_for(target, write_source(tmp_path / "s.parquet", [(2, 2, "b", 0)]), [MergeClause("not_matched_insert", star=True)])
    first = run_merge(spark, spec)
    again = run_merge(spark, spec)
    assert again.version == first.version == table.version()
    assert again.metrics == first.metrics
    assert len(read_with_deltars(target)) == 2  # inserted once


def test_concurrent_changes_conflict_only_where_the_merge_read(spark: Any, tmp_path: Path) -> None:
    # ON prunes the target to partition a, and the MERGE records that read. A concurrent
    # DELETE in partition b commits beside it; one in partition a makes it plan again
    # (ConcurrentDeleteReadException) on the new snapshot, in the same application.
    target = tmp_path / "target"
    table = make_target(target, [(1, 1, "a"), (2, 2, "b"), (3, 3, "a"), (4, 4, "b")], partitioned=True)
    clauses = [MergeClause("matched_update", assignments={"v": "s.v"}), MergeClause("not_matched_insert", star=True)]
    on = "t.id = s.id AND t.p = 'a'"
    winners: list[int] = []

    def delete_first_try(predicate: str) -> Any:
        def before_commit(attempt: int) -> None:
            if attempt == 1:
                winners.append(DeltaTable(str(target)).delete(predicate).version)

        return before_commit

    source = write_source(tmp_path / "s.parquet", [(3, 30, "a", 0), (5, 50, "a", 0)])
    beside = run_merge(spark, spec_for(target, source, clauses, on=on), before_commit=delete_first_try("id = 2"))
    assert (beside.attempts, beside.version) == (1, winners[-1] + 1)
    assert_oracles_read(target, as_dicts([(1, 1, "a"), (3, 30, "a"), (4, 4, "b"), (5, 50, "a")]))

    source = write_source(tmp_path / "s2.parquet", [(1, 10, "a", 0), (3, 33, "a", 0)])
    retried = run_merge(spark, spec_for(target, source, clauses, on=on), before_commit=delete_first_try("id = 1"))
    assert retried.attempts == 2
    assert retried.read_version == winners[-1]
    # Planned again on the snapshot without id 1: it is inserted, not updated.
    assert (retried.metrics["numTargetRowsMatchedUpdated"], retried.metrics["numTargetRowsInserted"]) == (1, 1)
    assert_oracles_read(target, as_dicts([(1, 10, "a"), (3, 33, "a"), (4, 4, "b"), (5, 50, "a")]))
    assert table.version() == retried.version


def test_use_deletion_vectors_false_rewrites_on_a_dv_table(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "target"
    rows = [(i, i, "a") for i in range(6)]
    make_target(target, rows, dv=True)
    source_rows = [(1, 0, "a", 2)]
    spec = spec_for(
        target,
        write_source(tmp_path / "s.parquet", source_rows),
        [MergeClause("matched_delete", "s.op = 2")],
        options=ExecutionOptions(use_deletion_vectors=False),
    )
    result = run_merge(spark, spec)
    assert_oracles_read(target, duckdb_merge(rows, source_rows, spec))
    assert result.metrics["numTargetDeletionVectorsAdded"] == 0
    assert result.metrics["numTargetRowsCopied"] == 2  # the other rows of the touched file


@pytest.mark.parametrize(
    ("on", "expected"),
    [
        ("t.id = s.id", None),
        ("t.id = s.id AND t.p = 'a'", "(p = 'a')"),
        ("t.p IN ('a', 'b') AND t.id = s.id AND t.v > 3", "(p IN ('a', 'b')) AND (v > 3)"),
        ("t.id = s.id OR t.p = 'a'", None),  # not a conjunct of its own
        ("t.id = s.id AND t.nope = 1", None),  # not a target column
        ("t.id = s.id AND t.v > rand()", None),  # not deterministic
    ],
)
def test_target_only_conjuncts_of_on(on: str, expected: str | None) -> None:
    spec = MergeSpec(
        target=TableRef("/t"),
        source=MergeSource(parquet="/s"),
        on=on,
        clauses=(MergeClause("matched_delete"),),
        identity=identity(),
        source_alias="s",
        target_alias="t",
    )
    assert target_only_filter(spec, ["id", "v", "p"]) == expected
