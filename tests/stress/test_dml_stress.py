"""DELETE, UPDATE and MERGE on Spark while appender processes write the same table.

Three spawned processes append, through the engine's public ``DeltaTable.append``, into
their own partitions (``a0``, ``a1``, ``a2``) of a table partitioned by ``part`` with
``delta.isolationLevel=Serializable``: at that level the conflict checker looks at *every*
file a winner added, blind appends included, so only the partition pruning of the DML's
recorded reads keeps the appends out of its way. The DML jobs run in this process on the
session's SparkSession and touch only partition ``d``, which the appenders never write.

Afterwards:

- versions are contiguous, and every append that returned a version is a WRITE at that
  version, and its rows are in the table exactly once (no row lost or duplicated);
- the DML jobs that only met appends into other partitions planned once (``attempts``
  is 1) and logged no conflict; the one job that had an append land in the partition it
  read (between its planning and its commit) conflicted once and planned again, as the
  Serializable rules say it must;
- delta-rs and delta-kernel-rs read exactly the rows a plain Python model predicts.
"""

from __future__ import annotations

import itertools
import json
import logging
import multiprocessing as mp
import time
import traceback
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import CommitOptions, DeltaTable, RetryPolicy
from airflow_delta.spark.delete import run_delete
from airflow_delta.spark.merge import run_merge
from airflow_delta.spark.specs import (
    DeleteSpec,
    ExecutionOptions,
    MergeClause,
    MergeSource,
    MergeSpec,
    TableRef,
    TaskIdentity,
    UpdateSpec,
)
from airflow_delta.spark.update import run_update
from tests.oracles import assert_oracles_read, kernel_version
from tests.spark.conftest import spark  # noqa: F401  (the session's SparkSession, shared with tests/spark)

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("score", pa.int64())])
APPENDERS = 3
ROWS_PER_APPEND = 4
MAX_APPENDS = 150  # a bound, should the DML jobs be slow: the appenders stop when the DML is done
DML_PARTITION = "d"
SEED_IDS = range(60)  # partition d: score = id % 3
MERGE_IDS = range(50, 70)  # 50..59 are (partly) in the table, 60..69 are new
CONFLICT_ROW_ID = 1_000_000  # appended into partition d in the middle of the last DELETE
_task_numbers = itertools.count()


def _appender(root: str, worker: int, started: Any, stop: Any, out_file: str) -> None:
    """Append small batches into partition ``a<worker>`` until ``stop``; record each outcome."""
    table = DeltaTable(root)
    # Physical races between the appenders are many: a patient commit retry, as a real writer would use.
    options = CommitOptions(retry=RetryPolicy(max_attempts=500, initial_backoff=0.001, max_backoff=0.05))
    records: list[dict[str, Any]] = []
    for batch in range(MAX_APPENDS):
        if stop.is_set():
            break
        first_id = 10_000 + (worker * MAX_APPENDS + batch) * ROWS_PER_APPEND
        ids = list(range(first_id, first_id + ROWS_PER_APPEND))
        record: dict[str, Any] = {"worker": worker, "batch": batch, "ids": ids}
        try:
            data = pa.table({"id": ids, "part": [f"a{worker}"] * len(ids), "score": [batch] * len(ids)}, schema=SCHEMA)
            record["version"] = table.append(data, commit=options).version
        except Exception as exc:
            record["error"] = "".join(traceback.format_exception(exc))
        records.append(record)
        started.set()
        time.sleep(0.2)  # paced: the log stays small enough for the DML to replay quickly
    Path(out_file).write_text(json.dumps(records))


def _identity(name: str) -> TaskIdentity:
    return TaskIdentity("stress", f"{name}-{next(_task_numbers)}", "run")


def _options() -> ExecutionOptions:
    return ExecutionOptions(max_attempts=5, backoff_initial_seconds=0.0, backoff_max_seconds=0.0)


def _commit_actions(root: str, version: int) -> list[dict[str, Any]]:
    text = (Path(root) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _expected_dml_rows() -> list[dict[str, Any]]:
    """Partition d after DELETE score = 0, UPDATE score + 100 where score = 1, MERGE, DELETE score = 2."""
    rows = {i: i % 3 for i in SEED_IDS}
    rows = {i: s for i, s in rows.items() if s != 0}
    rows = {i: s + 100 if s == 1 else s for i, s in rows.items()}
    rows.update(dict.fromkeys(MERGE_IDS, 7))  # matched rows updated, the others inserted
    rows = {i: s for i, s in rows.items() if s != 2}  # the conflicting row (score 2) is deleted too
    return [{"id": i, "part": DML_PARTITION, "score": s} for i, s in rows.items()]


def test_dml_jobs_while_appenders_write_other_partitions(spark, tmp_path: Path, caplog) -> None:  # noqa: F811
    root = str(tmp_path / "table")
    table = DeltaTable.create(root, SCHEMA, ["part"], {"delta.isolationLevel": "Serializable"})
    seed = [{"id": i, "part": DML_PARTITION, "score": i % 3} for i in SEED_IDS]
    for chunk in (seed[:30], seed[30:]):  # two files in partition d
        table.append(pa.Table.from_pylist(chunk, schema=SCHEMA))
    source_path = tmp_path / "source.parquet"
    merge_source = [{"id": i, "part": DML_PARTITION, "score": 7} for i in MERGE_IDS]
    pq.write_table(pa.Table.from_pylist(merge_source, schema=SCHEMA), source_path)

    context = mp.get_context("spawn")
    stop = context.Event()
    started = [context.Event() for _ in range(APPENDERS)]
    out_files = [str(tmp_path / f"appender-{w}.json") for w in range(APPENDERS)]
    processes = [
        context.Process(target=_appender, args=(root, w, started[w], stop, out_files[w])) for w in range(APPENDERS)
    ]
    for process in processes:
        process.start()
    results = []
    conflict_appends: list[int] = []
    try:
        for event in started:
            assert event.wait(60), "an appender did not commit within 60 s"
        caplog.set_level(logging.WARNING, logger="airflow_delta.spark.changes")
        target = TableRef(root)
        results.append(
            run_delete(spark, DeleteSpec(target, "part = 'd' AND score = 0", _identity("delete"), _options()))
        )
        results.append(
            run_update(
                spark,
                UpdateSpec(
                    target, {"score": "score + 100"}, "part = 'd' AND score = 1", _identity("update"), _options()
                ),
            )
        )
        results.append(
            run_merge(
                spark,
                MergeSpec(
                    target=target,
                    source=MergeSource(parquet=str(source_path)),
                    on="t.id = s.id AND t.part = 'd'",
                    clauses=(
                        MergeClause("matched_update", assignments={"score": "s.score"}),
                        MergeClause("not_matched_insert", star=True),
                    ),
                    identity=_identity("merge"),
                    source_alias="s",
                    target_alias="t",
                    options=_options(),
                ),
            )
        )
        no_conflict_warnings = [r.getMessage() for r in caplog.records if "conflicted" in r.getMessage()]

        def append_into_the_read_partition(attempt: int) -> None:
            # A row the DELETE's predicate matches lands after the DELETE read partition d.
            if attempt == 1:
                row = pa.table({"id": [CONFLICT_ROW_ID], "part": [DML_PARTITION], "score": [2]}, schema=SCHEMA)
                conflict_appends.append(DeltaTable(root).append(row).version)

        results.append(
            run_delete(
                spark,
                DeleteSpec(target, "part = 'd' AND score = 2", _identity("delete-conflict"), _options()),
                before_commit=append_into_the_read_partition,
            )
        )
    finally:
        stop.set()
        for process in processes:
            process.join(60)
    assert all(process.exitcode == 0 for process in processes), [p.exitcode for p in processes]
    appends = [record for out in out_files for record in json.loads(Path(out).read_text())]
    conflict_warnings = [r.getMessage() for r in caplog.records if "conflicted" in r.getMessage()]

    # No append failed: a blind append reads nothing, so no logical conflict can stop it.
    assert [a["error"] for a in appends if "error" in a] == []
    append_versions = [a["version"] for a in appends]
    dml_versions = [r.version for r in results]
    assert None not in dml_versions
    # The DML really ran while the appenders wrote: appends committed between its commits.
    assert any(dml_versions[0] < v < dml_versions[2] for v in append_versions), (dml_versions, append_versions)

    # Versions are contiguous, each taken by exactly one writer that reported it.
    latest = DeltaTable(root).snapshot().version
    on_disk = sorted(int(p.name.split(".")[0]) for p in (Path(root) / "_delta_log").glob("*.json"))
    assert on_disk == list(range(latest + 1))
    assert kernel_version(root) == latest
    reported = [0, 1, 2, *append_versions, *conflict_appends, *dml_versions]  # 0: create, 1-2: seed
    assert sorted(reported) == list(range(latest + 1))

    # Every append is a WRITE at its version, holding its own rows' partition.
    for append in appends:
        actions = _commit_actions(root, append["version"])
        commit_info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        assert commit_info["operation"] == "WRITE"
        assert {a["add"]["partitionValues"]["part"] for a in actions if "add" in a} == {f"a{append['worker']}"}
    for result, operation in zip(results, ("DELETE", "UPDATE", "MERGE", "DELETE"), strict=True):
        assert result.operation == operation
        commit_info = next(a["commitInfo"] for a in _commit_actions(root, result.version) if "commitInfo" in a)
        assert commit_info["operation"] == operation
        assert commit_info["isolationLevel"] == "Serializable"

    # Appends into partitions a DML job did not read never made it plan again.
    assert [r.attempts for r in results[:3]] == [1, 1, 1]
    assert no_conflict_warnings == []
    # The append into partition d, after the last DELETE read it, must conflict: planned again, once.
    assert len(conflict_appends) == 1
    assert results[3].attempts == 2
    assert results[3].read_version >= conflict_appends[0]
    assert len(conflict_warnings) == 1
    assert results[3].metrics["numDeletedRows"] == sum(1 for i in SEED_IDS if i % 3 == 2 and i < 50) + 1

    # Every appended row exactly once, the DML's rows as the model says: as both oracles read it.
    expected = _expected_dml_rows()
    expected += [{"id": i, "part": f"a{a['worker']}", "score": a["batch"]} for a in appends for i in a["ids"]]
    assert len({row["id"] for row in expected}) == len(expected)
    assert_oracles_read(root, expected)
