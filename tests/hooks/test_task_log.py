"""What a Spark job's output puts in the task log: Spark's lines at the connection's level or above, and
each stage's progress at most every few seconds (the rest stays in the failure tail).

The real ``_DmlSubmitHook`` (the apache-spark hook the DeltaHook builds) fed a job's output
as spark-submit prints it; a whole job through spark-submit is in
tests/operators/test_small_merge_job.py.
"""

from __future__ import annotations

import pytest

from airflow_delta.engine import InvalidArgumentError
from airflow_delta.hooks.delta import DeltaConnectionSettings
from airflow_delta.hooks.dml_submit import _DmlSubmitHook
from tests.airflow_layer import set_connection

pytestmark = pytest.mark.usefixtures("airflow_home")


def _output(stages: int, tasks: int) -> list[str]:
    lines = ["25/11/29 03:37:01 INFO SparkContext: Running Spark version 4.2.0"]
    for stage in range(stages):
        for done in range(1, tasks + 1):
            lines.append(f"25/11/29 03:37:02 INFO Executor: Running task {done - 1}.0 in stage {stage}.0")
            lines.append(
                f"25/11/29 03:37:02 INFO TaskSetManager: Finished task {done - 1}.0 in stage {stage}.0 (TID 1) "
                f"in 5 ms on host (executor driver) ({done}/{tasks})"
            )
    lines += ["25/11/29 03:37:03 WARN NativeCodeLoader: Unable to load native-hadoop library", "a line the program printed"]
    return lines


def _hook(monkeypatch: pytest.MonkeyPatch, level: str) -> _DmlSubmitHook:
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "local[2]"})
    return _DmlSubmitHook(conn_id="spark_local", log_level=level)


def test_sparks_info_lines_stay_out_and_progress_is_throttled_per_stage(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    hook = _hook(monkeypatch, "WARN")
    output = _output(stages=3, tasks=200)  # Spark's default 200 shuffle partitions: 1,200 lines of INFO

    passed = list(hook._watched(iter(output)))

    assert passed == output[-2:]  # the WARN line and the program's own output
    assert len(hook.output_tail) == 100 and hook.output_tail[-1] == output[-1]  # the failure tail keeps everything
    logged = capfd.readouterr().out.splitlines()
    progress = [line.split("] ", 1)[1].split(" [airflow", 1)[0].strip() for line in logged if "Spark progress" in line]
    # The first and the last of each stage (all within 5 s): 2 lines per stage, not 200.
    assert progress == [
        line for stage in range(3) for line in (
            f"Spark progress: stage {stage}.0, 1 of 200 task(s) done",
            f"Spark progress: stage {stage}.0, 200 of 200 task(s) done",
        )
    ]


def test_the_connection_sets_the_level_of_sparks_lines_in_the_task_log(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _hook(monkeypatch, "INFO")
    output = _output(stages=1, tasks=3)
    assert list(hook._watched(iter(output))) == output
    assert DeltaConnectionSettings.from_extra("c", {"spark_log_level": "info"}).spark_log_level == "INFO"
    assert DeltaConnectionSettings.from_extra("c", {}).spark_log_level == "WARN"
    with pytest.raises(InvalidArgumentError, match="spark_log_level"):
        DeltaConnectionSettings.from_extra("c", {"spark_log_level": "LOUD"})
