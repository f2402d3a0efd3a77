"""A MERGE of a few rows on Spark: the rows DuckDB's MERGE gives, few shuffle partitions, a short task log.

Through the real operator and ``spark-submit`` (local mode), from a Delta source (read
through the engine: Spark has no statistics for it, so the job sizes its shuffles from the
source's row count). The job's shuffles are sized to its data
(``airflow_delta.spark.session.size_shuffle_partitions`` and adaptive coalescing), so no
stage has Spark's default 200 tasks; the task log keeps Spark's own lines below the
connection's ``spark_log_level`` (WARN) out and logs each stage's progress at most every
5 s. The bound, documented in docs/operators.md: at most :data:`TASK_LOG_LINE_BOUND` lines
for a MERGE of a few rows.

One job proves both the rows and the job's size: each MERGE on Spark costs a JVM start.
The same clauses in the worker are test_dml_operators'
``test_merge_with_structured_clauses_from_a_delta_source_matches_duckdb``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.operators.dml import DeltaMergeOperator
from tests.airflow_layer import SCHEMA, context, make_table
from tests.operators.test_dml_operators import STRUCTURED_CLAUSES, duckdb_merge
from tests.oracles import assert_oracles_read

pytestmark = pytest.mark.usefixtures("airflow_home")

TASK_LOG_LINE_BOUND = 150
MAX_TASKS_PER_STAGE = 8  # shuffles of kilobytes are one partition; file stages have a task per file (4-5 here)

_PROGRESS = re.compile(r"Spark progress: stage (\S+), (\d+) of (\d+) task\(s\) done")


@pytest.mark.slow
@pytest.mark.usefixtures("local_spark")
def test_a_small_merge_from_a_delta_source_matches_duckdb_in_few_shuffle_partitions_with_a_short_log(
    table_path: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    rows = make_table(table_path, rows=200)
    # 19 rows: one matched by the conditional delete, 10 updated, 8 inserted.
    source_rows = [{"id": 188, "part": "a", "value": "gone"}] + [
        {"id": i, "part": "ab"[i % 2], "value": f"new{i}"} for i in range(190, 208)
    ]
    source_path = str(tmp_path / "source")
    DeltaTable.create(source_path, SCHEMA).append(pa.Table.from_pylist(source_rows, schema=SCHEMA))
    capfd.readouterr()

    result = DeltaMergeOperator(
        task_id="m", table=table_path, source={"delta": {"uri": source_path}}, on="t.id = s.id", source_alias="s",
        target_alias="t", conf={"spark.ui.showConsoleProgress": "false"},
        execution="spark",  # under "auto" so small a MERGE runs in the worker, with no Spark job to size
        clauses=STRUCTURED_CLAUSES,
    ).execute(context(task_id="m"))

    log = capfd.readouterr()
    task_log = [line for line in (log.out + log.err).splitlines() if line.strip()]
    assert (result["version"], result["operation"]) == (3, "MERGE")
    metrics = result["metrics"]
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsDeleted"], metrics["numTargetRowsInserted"]) == (
        10,
        1,
        8,
    )
    assert_oracles_read(table_path, duckdb_merge(rows, source_rows))
    stages = [(m[1], int(m[2]), int(m[3])) for m in map(_PROGRESS.search, task_log) if m]
    assert stages, "the task log shows the job's progress"
    assert max(total for _, _, total in stages) <= MAX_TASKS_PER_STAGE, stages
    assert len(task_log) <= TASK_LOG_LINE_BOUND, f"{len(task_log)} lines:\n" + "\n".join(task_log[-60:])
