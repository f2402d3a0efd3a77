"""The same operation in both implementations (issue 17, item 4).

Each case builds one tiny table with our engine, copies it, runs the operation with Delta
SQL on one copy and with ours on the other, and compares:

- the rows (Delta reads both copies; our engine reads ours as Delta does);
- the protocol and metadata the operation commits (none, or the same);
- the ``operationMetrics``: every metric Delta writes for the operation we write too,
  under the same name (or :data:`DELTA_METRICS` marks it a documented difference), and
  the metrics the data decides (row counts, counts of removed files, deletion vectors,
  sizes of files both tables share) have the same value. Metrics that are Delta's choice
  (sizes and counts of the files it writes, timings) are only checked by name; the list
  is in docs/compatibility.md ("Checked against Delta Lake 4.4").

Ours runs through the engine's public API (``DeltaTable`` verbs) or the worker path of the
operators (``run_update_in_worker``, ``run_merge_in_worker``): the DML operators under
``execution="auto"`` run exactly these for tables this small, so the commit is the one the
operator writes. One case runs the operator's Spark job (``run_merge``, on Spark in local
mode) to check that the Spark job writes the same metrics.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable, OptimizeOptions
from airflow_delta.spark.merge import run_merge
from airflow_delta.spark.merge_worker import run_merge_in_worker
from airflow_delta.spark.specs import MergeClause, MergeSource, MergeSpec, TableRef, TaskIdentity, UpdateSpec
from airflow_delta.spark.update_worker import run_update_in_worker, update_refusal
from tests.delta_lake import DeltaLakeSession, sorted_rows, table_ref
from tests.spark.conftest import spark  # noqa: F401  (a fixture: the Spark session of tests/spark)

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("part", pa.string()),
    ]
)
SOURCE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("part", pa.string()),
        pa.field("op", pa.string()),
    ]
)

DV = {"delta.enableDeletionVectors": "true"}
DV_CDF = {**DV, "delta.enableChangeDataFeed": "true"}
COPY_ON_WRITE = {"delta.enableDeletionVectors": "false"}

# Each metric Delta writes for an operation (DeltaOperationMetrics in DeltaOperations.scala,
# and what Delta 4.4 actually wrote in these cases), and what we hold it to:
#   "data":   the data decides it; ours has the same name and value.
#   "choice": Delta's choice (what it writes, timings); ours has the same name.
DATA, CHOICE = "data", "choice"
DELTA_METRICS: dict[str, dict[str, str]] = {
    "DELETE": {
        "numDeletedRows": DATA,
        "numCopiedRows": DATA,  # the surviving rows of the removed files
        "numRemovedFiles": DATA,
        "numRemovedBytes": DATA,
        "numDeletionVectorsAdded": DATA,
        "numDeletionVectorsRemoved": DATA,
        "numDeletionVectorsUpdated": DATA,
        "numAddedFiles": CHOICE,
        "numAddedBytes": CHOICE,
        "numAddedChangeFiles": CHOICE,
        "executionTimeMs": CHOICE,
        "scanTimeMs": CHOICE,
        "rewriteTimeMs": CHOICE,
    },
    "UPDATE": {
        "numUpdatedRows": DATA,
        "numCopiedRows": DATA,
        "numRemovedFiles": DATA,
        "numRemovedBytes": DATA,
        "numDeletionVectorsAdded": DATA,
        "numDeletionVectorsRemoved": DATA,
        "numDeletionVectorsUpdated": DATA,
        "numAddedFiles": CHOICE,
        "numAddedBytes": CHOICE,
        "numAddedChangeFiles": CHOICE,
        "executionTimeMs": CHOICE,
        "scanTimeMs": CHOICE,
        "rewriteTimeMs": CHOICE,
    },
    "MERGE": {
        "numSourceRows": DATA,
        "numTargetRowsInserted": DATA,
        "numTargetRowsUpdated": DATA,
        "numTargetRowsMatchedUpdated": DATA,
        "numTargetRowsNotMatchedBySourceUpdated": DATA,
        "numTargetRowsDeleted": DATA,
        "numTargetRowsMatchedDeleted": DATA,
        "numTargetRowsNotMatchedBySourceDeleted": DATA,
        "numTargetRowsCopied": DATA,
        "numOutputRows": DATA,
        "numTargetFilesRemoved": DATA,
        "numTargetBytesRemoved": DATA,
        "numTargetDeletionVectorsAdded": DATA,
        "numTargetDeletionVectorsRemoved": DATA,
        "numTargetDeletionVectorsUpdated": DATA,
        "numTargetFilesAdded": CHOICE,
        "numTargetBytesAdded": CHOICE,
        "numTargetChangeFilesAdded": CHOICE,
        "executionTimeMs": CHOICE,
        "materializeSourceTimeMs": CHOICE,
        "scanTimeMs": CHOICE,
        "rewriteTimeMs": CHOICE,
    },
    "OPTIMIZE": {
        "numRemovedFiles": DATA,
        "numRemovedBytes": DATA,
        "numDeletionVectorsRemoved": DATA,
        "numAddedFiles": CHOICE,
        "numAddedBytes": CHOICE,
        "minFileSize": CHOICE,
        "p25FileSize": CHOICE,
        "p50FileSize": CHOICE,
        "p75FileSize": CHOICE,
        "maxFileSize": CHOICE,
    },
    "RESTORE": {
        # RESTORE writes no data file: every value is decided by the two versions' files.
        "tableSizeAfterRestore": DATA,
        "numOfFilesAfterRestore": DATA,
        "numRemovedFiles": DATA,
        "numRestoredFiles": DATA,
        "removedFilesSize": DATA,
        "restoredFilesSize": DATA,
    },
    "VACUUM START": {"numFilesToDelete": DATA, "sizeOfDataToDelete": DATA},
    "VACUUM END": {"numDeletedFiles": DATA, "numVacuumedDirectories": DATA},
}
# Metrics Delta writes that we do not, each with its reason (docs/compatibility.md).
DOCUMENTED_MISSING: dict[str, dict[str, str]] = {}

_run_ids = iter(range(1_000_000))


def _identity() -> TaskIdentity:
    return TaskIdentity("same_operation", "t", f"run-{next(_run_ids)}")


def _rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {"id": ids, "name": [f"n{i}" for i in ids], "part": ["a" if i % 3 else "b" for i in ids]}, schema=SCHEMA
    )


@dataclass(frozen=True)
class Case:
    """One operation: the table it starts from, Delta's SQL and ours, the operations they commit."""

    name: str
    properties: Mapping[str, str]
    delta_sql: Callable[[str, str], str]  # (table ref, source parquet path) -> SQL
    ours: Callable[[str, str], object]  # (table path, source parquet path)
    operations: tuple[str, ...]
    base_dml: tuple[str, ...] = ()  # DELETE predicates our engine runs while building the table
    setup_sql: tuple[str, ...] = field(default=())  # Delta session settings for the statement
    delta_choice: tuple[str, ...] = ()  # "data" metrics whose value is Delta's choice in this case
    # Delta's RESTORE writes the restored version's protocol and metaData even when unchanged; we do not.
    delta_rewrites_metadata: bool = False


def _delete(predicate: str) -> Callable[[str, str], object]:
    return lambda path, _source: DeltaTable(path).delete(predicate)


def _update(set_: dict[str, str], predicate: str) -> Callable[[str, str], None]:
    def run(path: str, _source: str) -> None:
        spec = UpdateSpec(TableRef(path), dict(set_), predicate, _identity())
        # The refusal is what sends an UPDATE to Spark: None means the operator runs this in the worker.
        assert update_refusal(spec, DeltaTable(path).snapshot().schema) is None
        run_update_in_worker(spec)

    return run


MERGE_CLAUSES = (
    MergeClause("matched_update", "s.op = 'u'", {"name": "s.name"}),
    MergeClause("matched_delete", "s.op = 'd'"),
    MergeClause("not_matched_insert", None, {"id": "s.id", "name": "s.name", "part": "s.part"}),
    MergeClause("not_matched_by_source_update", "t.id < 3", {"name": "'gone'"}),
    MergeClause("not_matched_by_source_delete", "t.id >= 27"),
)
MERGE_SQL = (
    "MERGE INTO {ref} t USING parquet.`{source}` s ON t.id = s.id "
    "WHEN MATCHED AND s.op = 'u' THEN UPDATE SET name = s.name "
    "WHEN MATCHED AND s.op = 'd' THEN DELETE "
    "WHEN NOT MATCHED THEN INSERT (id, name, part) VALUES (s.id, s.name, s.part) "
    "WHEN NOT MATCHED BY SOURCE AND t.id < 3 THEN UPDATE SET name = 'gone' "
    "WHEN NOT MATCHED BY SOURCE AND t.id >= 27 THEN DELETE"
)
MERGE_SOURCE = [
    {"id": 5, "name": "u5", "part": "a", "op": "u"},
    {"id": 9, "name": "u9", "part": "b", "op": "u"},
    {"id": 13, "name": "d13", "part": "a", "op": "d"},
    {"id": 14, "name": "x14", "part": "a", "op": "x"},  # matched, no clause applies: unchanged
    {"id": 100, "name": "i100", "part": "a", "op": "i"},
    {"id": 101, "name": "i101", "part": "b", "op": "i"},
]


# Without DVs Delta rewrites every file with a row the ON condition matches, even one no clause
# changes (id 14 here, with several WHEN MATCHED clauses); we rewrite only files with a changed
# row. The rows are the same; the files rewritten, and the rows copied, are each one's choice.
MERGE_REWRITE_CHOICE = ("numTargetFilesRemoved", "numTargetBytesRemoved", "numTargetRowsCopied", "numOutputRows")


def _merge_spec(path: str, source: str) -> MergeSpec:
    return MergeSpec(
        target=TableRef(path),
        source=MergeSource(parquet=source),
        on="t.id = s.id",
        clauses=MERGE_CLAUSES,
        identity=_identity(),
        source_alias="s",
        target_alias="t",
    )


def _merge(path: str, source: str) -> None:
    run_merge_in_worker(_merge_spec(path, source))


def _vacuum(path: str, _source: str) -> None:
    DeltaTable(path).vacuum(retention=timedelta(0), enforce_retention_duration=False)


NO_RETENTION_CHECK = ("SET spark.databricks.delta.retentionDurationCheck.enabled = false",)

CASES = [
    Case(
        "delete-dv",
        DV_CDF,
        lambda ref, _s: f"DELETE FROM {ref} WHERE id % 4 = 1",
        _delete("id % 4 = 1"),
        ("DELETE",),
    ),
    Case(
        "delete-copy-on-write",
        COPY_ON_WRITE,
        lambda ref, _s: f"DELETE FROM {ref} WHERE id % 4 = 1",
        _delete("id % 4 = 1"),
        ("DELETE",),
    ),
    Case(
        "delete-partition",
        DV,
        lambda ref, _s: f"DELETE FROM {ref} WHERE part = 'b'",
        _delete("part = 'b'"),
        ("DELETE",),
    ),
    Case(
        "update-dv",
        DV_CDF,
        lambda ref, _s: f"UPDATE {ref} SET name = 'u' WHERE id IN (0, 5, 10, 15, 20, 25)",
        _update({"name": "'u'"}, "id IN (0, 5, 10, 15, 20, 25)"),
        ("UPDATE",),
        # With DVs Delta's UPDATE removes no whole file, yet its numRemovedBytes is the size of
        # the change files it writes (UpdateCommand counts every non-AddFile it wrote); ours is 0.
        delta_choice=("numRemovedBytes",),
    ),
    Case(
        "update-copy-on-write",
        COPY_ON_WRITE,
        lambda ref, _s: f"UPDATE {ref} SET name = 'u' WHERE id IN (0, 5, 10, 15, 20, 25)",
        _update({"name": "'u'"}, "id IN (0, 5, 10, 15, 20, 25)"),
        ("UPDATE",),
    ),
    Case("merge-dv", DV, lambda ref, s: MERGE_SQL.format(ref=ref, source=s), _merge, ("MERGE",)),
    Case(
        "merge-copy-on-write",
        COPY_ON_WRITE,
        lambda ref, s: MERGE_SQL.format(ref=ref, source=s),
        _merge,
        ("MERGE",),
        delta_choice=MERGE_REWRITE_CHOICE,
    ),
    Case(
        "optimize",
        DV,
        lambda ref, _s: f"OPTIMIZE {ref}",
        lambda path, _s: DeltaTable(path).optimize(OptimizeOptions()),
        ("OPTIMIZE",),
        base_dml=("id = 4",),
    ),
    Case(
        "optimize-zorder",
        DV,
        lambda ref, _s: f"OPTIMIZE {ref} ZORDER BY (id, name)",
        lambda path, _s: DeltaTable(path).optimize(OptimizeOptions(zorder_by=("id", "name"))),
        ("OPTIMIZE",),
        base_dml=("id = 4",),
    ),
    Case(
        "restore",
        DV,
        lambda ref, _s: f"RESTORE TABLE {ref} TO VERSION AS OF 2",
        lambda path, _s: DeltaTable(path).restore(version=2),
        ("RESTORE",),
        base_dml=("id = 4", "part = 'b'"),
        delta_rewrites_metadata=True,
    ),
    Case(
        "vacuum",
        COPY_ON_WRITE,
        lambda ref, _s: f"VACUUM {ref} RETAIN 0 HOURS",
        _vacuum,
        ("VACUUM START", "VACUUM END"),
        base_dml=("id % 4 = 1", "part = 'b'"),
        setup_sql=NO_RETENTION_CHECK,
    ),
]


def _build(path: Path, case: Case) -> None:
    table = DeltaTable.create(str(path), SCHEMA, partition_by=["part"], properties=dict(case.properties))
    for start in (0, 10, 20):
        table.append(_rows(start, 10))
    for predicate in case.base_dml:
        table.delete(predicate)


def _commit_actions(path: Path, version: int) -> list[dict[str, Any]]:
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _commits(path: Path, since: int) -> list[list[dict[str, Any]]]:
    """The actions of each commit after version ``since``, in order."""
    table = DeltaTable(str(path))
    return [_commit_actions(path, v) for v in range(since + 1, table.version() + 1)]


def _table_changes(commit: list[dict[str, Any]]) -> dict[str, Any]:
    """The protocol and metadata a commit writes (what Delta decides, not ids or timestamps)."""
    changes: dict[str, Any] = {}
    for action in commit:
        if "protocol" in action:
            protocol = action["protocol"]
            changes["protocol"] = {k: sorted(v) if isinstance(v, list) else v for k, v in protocol.items()}
        if "metaData" in action:
            meta = action["metaData"]
            changes["metaData"] = {k: meta.get(k) for k in ("schemaString", "partitionColumns", "configuration")}
    return changes


def _changes(delta_lake: DeltaLakeSession, paths: tuple[Path, ...], version: int) -> list[list[tuple[Any, ...]]]:
    """Each table's change rows of ``version`` (table_changes), all in one statement."""
    rows = delta_lake.sql(
        " UNION ALL ".join(
            f"SELECT {index} AS side, id, name, part, _change_type "
            f"FROM table_changes_by_path('{path}', {version}, {version})"
            for index, path in enumerate(paths)
        )
    )
    return [
        sorted((r["id"], r["name"], r["part"], r["_change_type"]) for r in rows if r["side"] == i)
        for i in range(len(paths))
    ]


def _commit_info(commit: list[dict[str, Any]]) -> dict[str, Any]:
    return next(a["commitInfo"] for a in commit if "commitInfo" in a)


def _compare_metrics(
    operation: str, theirs: Mapping[str, str], ours: Mapping[str, str], delta_choice: tuple[str, ...] = ()
) -> list[str]:
    """What differs between Delta's operationMetrics and ours for one commit, against DELTA_METRICS."""
    kinds = {**DELTA_METRICS[operation], **dict.fromkeys(delta_choice, CHOICE)}
    missing_ok = DOCUMENTED_MISSING.get(operation, {})
    problems = []
    for name, value in sorted(theirs.items()):
        kind = kinds.get(name)
        if kind is None:
            problems.append(f"{operation}: Delta writes {name}={value}, not in DELTA_METRICS")
        elif name not in ours:
            if name not in missing_ok:
                problems.append(f"{operation}: Delta writes {name}={value}, we do not")
        elif kind == DATA and ours[name] != value:
            problems.append(f"{operation}: {name} Delta {value}, ours {ours[name]}")
    return problems


@dataclass
class DeltaSide:
    """Delta's copy of a case's table after Delta's statement, and what Delta read of it."""

    base: Path
    theirs: Path
    source: str
    before: int
    rows: list[dict[str, Any]] | None = None  # Delta's read of ``theirs``, once read


class DeltaSides:
    """Delta's side of each case, run once per module: the MERGE job on Spark is held to
    the very statement (and Delta's read of its result) that the worker's copy-on-write MERGE
    case is, so Delta runs that MERGE once."""

    def __init__(self, delta_lake: DeltaLakeSession, root: Path) -> None:
        self._delta_lake = delta_lake
        self._root = root
        self._sides: dict[tuple[Any, ...], DeltaSide] = {}

    def get(self, case: Case) -> DeltaSide:
        key = (tuple(sorted(case.properties.items())), case.base_dml, case.setup_sql, case.delta_sql("REF", "SRC"))
        if key not in self._sides:
            work = self._root / f"case-{len(self._sides)}"
            base, theirs = work / "base", work / "theirs"
            _build(base, case)
            shutil.copytree(base, theirs)
            source = str(work / "source.parquet")
            pq.write_table(pa.Table.from_pylist(MERGE_SOURCE, schema=SOURCE_SCHEMA), source)
            before = DeltaTable(str(base)).version()
            for statement in case.setup_sql:
                self._delta_lake.sql(statement)
            try:
                self._delta_lake.sql(case.delta_sql(table_ref(theirs), source))
            finally:  # the session is shared: leave Delta's safety check on for the next test
                if case.setup_sql:
                    self._delta_lake.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = true")
            self._sides[key] = DeltaSide(base, theirs, source, before)
        return self._sides[key]


@pytest.fixture(scope="module")
def delta_sides(delta_lake: DeltaLakeSession, tmp_path_factory: pytest.TempPathFactory) -> DeltaSides:
    return DeltaSides(delta_lake, tmp_path_factory.mktemp("same-operation"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_same_operation_writes_the_same_rows_changes_and_metrics(
    delta_lake: DeltaLakeSession, delta_sides: DeltaSides, tmp_path: Path, case: Case
) -> None:
    _check_the_same_operation(delta_lake, delta_sides, tmp_path, case)


def _merge_job_on_spark(spark: Any) -> Callable[[str, str], None]:  # noqa: F811
    def run(path: str, source: str) -> None:
        run_merge(spark, _merge_spec(path, source))

    return run


@pytest.mark.slow
def test_the_merge_job_on_spark_writes_what_delta_writes(
    delta_lake: DeltaLakeSession,
    delta_sides: DeltaSides,
    spark: Any,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    # The operator's Spark job itself (airflow_delta/spark/merge.py's run_merge, on the test
    # session's Spark in local mode): its metrics are its own code, not the worker's. The
    # operator's way there (DeltaMergeOperator(execution="spark") -> SparkSubmitHook ->
    # spark-submit) is run end to end by tests/operators/test_small_merge_job.py and
    # tests/operators/test_spark_application.py.
    case = Case(
        "merge-job-on-spark",
        COPY_ON_WRITE,
        lambda ref, s: MERGE_SQL.format(ref=ref, source=s),
        _merge_job_on_spark(spark),
        ("MERGE",),
        delta_choice=MERGE_REWRITE_CHOICE,
    )
    _check_the_same_operation(delta_lake, delta_sides, tmp_path, case)


def _check_the_same_operation(
    delta_lake: DeltaLakeSession, delta_sides: DeltaSides, tmp_path: Path, case: Case
) -> None:
    delta_side = delta_sides.get(case)
    theirs_path, ours_path, before = delta_side.theirs, tmp_path / "ours", delta_side.before
    shutil.copytree(delta_side.base, ours_path)
    case.ours(str(ours_path), delta_side.source)

    theirs_commits, ours_commits = _commits(theirs_path, before), _commits(ours_path, before)
    assert [_commit_info(c)["operation"] for c in theirs_commits] == list(case.operations)
    assert [_commit_info(c)["operation"] for c in ours_commits] == list(case.operations)

    if delta_side.rows is None:
        theirs_read, ours_read = delta_lake.read_many([theirs_path, ours_path])  # one request, one Spark job
        delta_side.rows = sorted_rows(theirs_read)
    else:  # Delta read its own copy for the case that shares this statement
        ours_read = delta_lake.read(ours_path)
    expected = delta_side.rows
    assert sorted_rows(ours_read) == expected
    assert sorted_rows(DeltaTable(str(ours_path)).snapshot().to_arrow()) == expected

    if case.properties.get("delta.enableChangeDataFeed") == "true":
        # Delta writes no change files for a DELETE with DVs (it derives the rows from the
        # DVs); we do. Its table_changes must give the same change rows on both copies.
        ours_changes, theirs_changes = _changes(delta_lake, (ours_path, theirs_path), before + 1)
        assert ours_changes == theirs_changes

    problems = []
    for theirs, ours, operation in zip(theirs_commits, ours_commits, case.operations, strict=True):
        if not case.delta_rewrites_metadata:
            assert _table_changes(ours) == _table_changes(theirs), operation
        problems += _compare_metrics(
            operation,
            _commit_info(theirs).get("operationMetrics", {}),
            _commit_info(ours).get("operationMetrics", {}),
            case.delta_choice,
        )
    assert not problems, "\n".join(problems)
