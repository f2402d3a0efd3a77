"""What the DML operator adds to Spark: DeltaDeleteOperator end to end minus a bare spark-submit.

Two cases, each run in a fresh interpreter (imports included, as an Airflow task pays them):

- ``operator delete on spark``: ``DeltaDeleteOperator(execution="spark").execute(context)``
  on a 20-row table with DVs, one row deleted, through the real ``DeltaHook`` and the
  apache-spark provider's ``SparkSubmitHook`` (``local[2]``); the context is the one the
  operator tests build (``tests/airflow_layer.context``);
- ``bare spark-submit``: ``spark-submit --master local[2]`` of a PySpark program that
  starts a SparkSession and stops it, with the same interpreter for the driver and workers;
- ``bare spark-submit, C1 driver``: the same with the driver JVM option the operator gives
  a small job (``SMALL_JOB_DRIVER_JAVA_OPTIONS``), so that the operator's own work can be
  told apart from that JIT saving;
- ``bare spark-submit, C1 + class archive``: the same, also started from the worker's
  class-data-sharing archive of Spark's classes (``airflow_delta/hooks/driver_jvm.py``),
  as the operator's client-mode driver is.

All sides run without the Spark UI (``spark.ui.enabled=false``). The operator's first
Spark job on a worker starts the class archive's background writer; ``cases()`` makes sure
that one-off run is behind us (untimed, its wall time printed), so that every timed run is
a worker's ordinary run.

The harness's CPU time is that of the measuring Python process only; each function also
returns the CPU time of its child processes (the spark-submit JVM and the Python driver
and workers), so that the summary can show where the machine's time went.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import Case, Result, data_dir, use_isolated_airflow

EMPTY_PROGRAM = """\
from pyspark.sql import SparkSession

SparkSession.builder.appName("empty").getOrCreate().stop()
"""

_SCRATCH = data_dir("operator_overhead")


def cases() -> list[Case]:
    _write_class_archive()
    return [
        Case("operator delete on spark", ours="operator_delete", setup="fresh_table", repeat=3, fresh=True),
        Case("bare spark-submit", ours="bare_spark_submit", setup="empty_program", repeat=3, fresh=True),
        # The same empty program with the driver JVM option the operator gives a small job:
        # the overhead against it is the operator's own work, with the JIT saving taken out.
        Case("bare spark-submit, C1 driver", ours="bare_spark_submit_c1", setup="empty_program", repeat=3, fresh=True),
        Case(
            "bare spark-submit, C1 + archive", ours="bare_spark_submit_archived", setup="empty_program", repeat=3, fresh=True
        ),
    ]


def _write_class_archive() -> None:
    """The worker's first Spark job starts the writer of the driver JVM's class archive: done here, untimed, if not done yet."""
    from airflow_delta.hooks.driver_jvm import worker_driver_class_archive

    archive = worker_driver_class_archive()
    if archive is None or archive.exists:
        return
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import sys; from benchmarks.operator_overhead import operator_delete; "
         "operator_delete(*sys.argv[1:])", *fresh_table()],
        check=True, capture_output=True, cwd=Path(__file__).resolve().parents[1],
    )
    while archive.being_written():  # the job started the writer in the background
        time.sleep(1.0)
    print(f"# the first job and the background writer of the driver class archive: {time.perf_counter() - started:.2f} s "
          f"wall, once per worker and Spark/Java version ({archive.path}, written: {archive.exists})", flush=True)


def fresh_table() -> tuple[str, str]:
    """A new 20-row table with DVs (the operator changes it) and a new AIRFLOW_HOME."""
    from tests.airflow_layer import make_table

    run_dir = Path(tempfile.mkdtemp(dir=_SCRATCH))
    make_table(run_dir / "table", dvs=True)
    (run_dir / "airflow_home").mkdir()
    return str(run_dir / "table"), str(run_dir / "airflow_home")


def empty_program() -> tuple[str]:
    path = _SCRATCH / "empty_program.py"
    path.write_text(EMPTY_PROGRAM)
    return (str(path),)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def operator_delete(table_path: str, airflow_home: str) -> dict[str, Any]:
    use_isolated_airflow(airflow_home)
    children_before = _children_cpu()
    from airflow_delta.operators.dml import DeltaDeleteOperator
    from tests.airflow_layer import context

    # The bare side's Spark settings (no UI): the difference is what the operator adds, not the UI's start.
    operator = DeltaDeleteOperator(
        task_id="d", table=table_path, predicate="id = 7", execution="spark", conf={"spark.ui.enabled": "false"}
    )
    result = operator.execute(context())
    # A broken operator must not look fast: it deleted exactly the one row, on Spark.
    assert result["operation"] == "DELETE" and result["metrics"]["numDeletedRows"] == 1, result
    shutil.rmtree(Path(table_path).parent, ignore_errors=True)
    return {"childrenCpuSeconds": _children_cpu() - children_before, **result["metrics"]}


def bare_spark_submit(program: str, *extra: str) -> dict[str, Any]:
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    children_before = _children_cpu()
    started = time.perf_counter()
    subprocess.run(
        [spark_submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false", *extra, program],
        env=env,
        check=True,
        capture_output=True,
    )
    return {"childrenCpuSeconds": _children_cpu() - children_before, "submitSeconds": time.perf_counter() - started}


def bare_spark_submit_c1(program: str) -> dict[str, Any]:
    # From the programs' stdlib-only package: importing the hook would put Airflow's imports on this side.
    from airflow_delta.spark.jobs import SMALL_JOB_DRIVER_JAVA_OPTIONS

    return bare_spark_submit(program, "--conf", f"spark.driver.extraJavaOptions={SMALL_JOB_DRIVER_JAVA_OPTIONS}")


def bare_spark_submit_archived(program: str) -> dict[str, Any]:
    from airflow_delta.hooks.driver_jvm import worker_driver_class_archive
    from airflow_delta.spark.jobs import SMALL_JOB_DRIVER_JAVA_OPTIONS

    archive = worker_driver_class_archive()
    options = SMALL_JOB_DRIVER_JAVA_OPTIONS if archive is None else f"{SMALL_JOB_DRIVER_JAVA_OPTIONS} {archive.use_option()}"
    return bare_spark_submit(program, "--conf", f"spark.driver.extraJavaOptions={options}")


def _cpu_with_children(result: Result) -> float:
    """The measuring process's CPU plus its children's (spark-submit's JVM, the Python driver and workers)."""
    return result.ours.cpu_seconds + float(result.ours.detail.get("childrenCpuSeconds", 0.0))


def summarize(results: list[Result]) -> None:
    by_name = {r.case.name: r for r in results}
    operator, bare = by_name.get("operator delete on spark"), by_name.get("bare spark-submit")
    if operator is None or bare is None:
        return
    op_cpu, bare_cpu = _cpu_with_children(operator), _cpu_with_children(bare)
    print(
        f"# operator overhead: {operator.ours.seconds - bare.ours.seconds:.2f} s wall "
        f"(operator {operator.ours.seconds:.2f} s, bare spark-submit {bare.ours.seconds:.2f} s; goal < 3 s); "
        f"CPU incl. children {op_cpu - bare_cpu:.2f} s (operator {op_cpu:.2f} s, bare {bare_cpu:.2f} s); "
        f"executionTimeMs {operator.ours.detail.get('executionTimeMs')}; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    for name, what in (
        ("bare spark-submit, C1 driver", "the same C1 driver"),
        ("bare spark-submit, C1 + archive", "the same C1 driver and class archive"),
    ):
        baseline = by_name.get(name)
        if baseline is None:
            continue
        baseline_cpu = _cpu_with_children(baseline)
        print(
            f"# against a bare spark-submit with {what}: {operator.ours.seconds - baseline.ours.seconds:.2f} s "
            f"wall (bare {baseline.ours.seconds:.2f} s), CPU incl. children {op_cpu - baseline_cpu:.2f} s "
            f"(bare {baseline_cpu:.2f} s)",
            flush=True,
        )
    shutil.rmtree(_SCRATCH, ignore_errors=True)
