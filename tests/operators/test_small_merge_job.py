"""A MERGE of a few rows is a small Spark job: few shuffle partitions, and a short task log.

Through the real operator and ``spark-submit`` (local mode). The job's shuffles are sized
to its data (``airflow_delta.spark.session.size_shuffle_partitions`` and adaptive
coalescing), so no stage has Spark's default 200 tasks; the task log keeps Spark's own
lines below the connection's ``spark_log_level`` (WARN) out and logs each stage's progress
at most every 5 s. The bound, documented in docs/operators.md: at most
:data:`TASK_LOG_LINE_BOUND` lines for a MERGE of a few rows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.operators.dml import DeltaMergeOperator
from tests.airflow_layer import SCHEMA, context, make_table
from tests.oracles import assert_oracles_read

pytestmark = pytest.mark.usefixtures("airflow_home")

TASK_LOG_LINE_BOUND = 150
MAX_TASKS_PER_STAGE = 8  # shuffles of kilobytes are one partition; file stages have a task per file (4-5 here)

_PROGRESS = re.compile(r"Spark progress: stage (\S+), (\d+) of (\d+) task\(s\) done")


@pytest.mark.slow
@pytest.mark.usefixtures("local_spark")
def test_a_merge_of_a_few_rows_runs_few_shuffle_partitions_and_logs_a_short_task_log(
    table_path: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    rows = make_table(table_path, rows=200)
    source_rows = [{"id": i, "part": "ab"[i % 2], "value": f"new{i}"} for i in range(190, 208)]  # 18 rows
    source = str(tmp_path / "source.parquet")
    pq.write_table(pa.Table.from_pylist(source_rows, schema=SCHEMA), source)
    capfd.readouterr()

    result = DeltaMergeOperator(
        task_id="m", table=table_path, source={"parquet": source}, on="t.id = s.id", source_alias="s",
        target_alias="t", conf={"spark.ui.showConsoleProgress": "false"},
        execution="spark",  # under "auto" so small a MERGE runs in the worker, with no Spark job to size
        clauses=[{"kind": "matched_update", "star": True}, {"kind": "not_matched_insert", "star": True}],
    ).execute(context(task_id="m"))

    log = capfd.readouterr()
    task_log = [line for line in (log.out + log.err).splitlines() if line.strip()]
    assert result["metrics"]["numTargetRowsUpdated"] == 10 and result["metrics"]["numTargetRowsInserted"] == 8
    expected = {r["id"]: r for r in rows} | {r["id"]: r for r in source_rows}
    assert_oracles_read(table_path, list(expected.values()))
    stages = [(m[1], int(m[2]), int(m[3])) for m in map(_PROGRESS.search, task_log) if m]
    assert stages, "the task log shows the job's progress"
    assert max(total for _, _, total in stages) <= MAX_TASKS_PER_STAGE, stages
    assert len(task_log) <= TASK_LOG_LINE_BOUND, f"{len(task_log)} lines:\n" + "\n".join(task_log[-60:])
