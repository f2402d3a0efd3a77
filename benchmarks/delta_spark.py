"""The Spark path against Delta Lake on the same Spark (issue 17's benchmark, issue 21's goal 4).

Each case runs on the same input, with the same ``local[2]`` resources and the same driver
memory (2 GiB), one implementation after the other, every run a fresh process on a fresh
hard-linked copy of the input (untimed ``setup``):

* ours: the operator a user's DAG runs, forced onto Spark (``execution="spark"``),
  ``.execute(context)`` in a fresh Python process: the real ``DeltaHook`` and
  ``SparkSubmitHook``, ``spark-submit --master local[2]`` of our job, JVM start included;
  ``executionTimeMs`` is read from our commit's ``operationMetrics`` (the operator's result);
* Delta: a fresh process of the Delta venv's Python (``.cache/delta-venv``, PySpark 4.2 and
  delta-spark 4.4 with the jars of ``.cache/delta-jars``, as ``make delta-oracle`` sets them
  up) running the SQL statement (``benchmarks/_delta_spark_peer.py``), Delta's defaults
  otherwise; ``executionTimeMs`` from ``DESCRIBE HISTORY``.

The wall time of each side is the whole fresh process (imports, JVM start, the job, the
commit). Cases (``BENCH_DELTA_SPARK_CASES`` picks some of these keys; default all):

* ``delete``: ``DELETE ... WHERE id = 7654321`` (1 row) of 10,000,000 rows, with deletion
  vectors (the ``dv`` table) and without (the ``plain`` table: files rewritten);
* ``delete10``: ``DELETE ... WHERE id % 10 = 3`` (10% of the rows, spread over every file),
  with and without DVs;
* ``update``: ``UPDATE ... SET value = -value WHERE id % 10 = 3`` (10% of the rows) on the
  DV table;
* ``merge``: ``MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT
  MATCHED THEN INSERT *`` of 1,000,000 parquet source rows (100,000 matching) into the DV table;
* ``optimize``: compaction of 10,000 files of 100 rows in 10 partitions (``benchmarks/optimize``'s input);
* ``zorder``: Z-order of 10,000,000 rows by ``(x, y)``, 64 MiB files;
* ``vacuum``: VACUUM of 100,000 files (10,000 removed, 1,000 orphans; ``benchmarks/vacuum``'s
  input) with zero retention, as a dry run and for real (full mode: both list the table).

The 10M-row table and the MERGE source are ``benchmarks/dml_merge``'s (delta-rs wrote the
target; the ``dv`` log adds a commit enabling deletion vectors). OPTIMIZE records no
``executionTimeMs`` on either side: its own start-to-end time (``startTimeMs`` and
``endTimeMs`` of Delta's result row and of our job's metrics) stands in. Where a side
records neither (VACUUM; a dry run commits nothing) the table shows ``-`` and only wall
times compare; Delta's statement time in its process
(``statementMs``, the session already started) is printed beside it.
``BENCH_DELTA_SPARK_REPEAT`` (default 1) sets the runs per side; the best is reported.
``BENCH_DELTA_SPARK_EVENT_LOG=DIR`` has both sides write Spark event logs there, for a
profile of their stages (``python -m benchmarks._spark_stages DIR``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks import dml_merge, optimize, vacuum
from benchmarks._harness import REPO_ROOT, Case, Result, compile_engine_bytecode, data_dir, use_isolated_airflow
from benchmarks.delete import _build_dv, _link_copy

DRIVER_MEMORY = "2g"
ROW_ID = 7_654_321
ONE_ROW = f"id = {ROW_ID}"
TENTH = "id % 10 = 3"
TENTH_ROWS = dml_merge.NUM_ROWS // 10
ZORDER_TARGET = optimize.ZORDER_TARGET
VACUUM_FILES = vacuum.REMOVED + vacuum.ORPHANS
CASE_KEYS = ("delete", "delete10", "update", "merge", "optimize", "zorder", "vacuum")
REPEAT = int(os.environ.get("BENCH_DELTA_SPARK_REPEAT", "1"))
# One per measuring process (setup and summarize run there): runs of different cases may overlap.
_SCRATCH = Path(tempfile.gettempdir()) / f"airflow-delta-bench-delta-spark-{os.getpid()}"
PEER = Path(__file__).resolve().with_name("_delta_spark_peer.py")
# A directory for both sides' Spark event logs (stage and task times, for profiles:
# ``python -m benchmarks._spark_stages DIR``); unset: no event log.
EVENT_LOG_DIR = os.environ.get("BENCH_DELTA_SPARK_EVENT_LOG", "")


def delta_home() -> Path:
    """Where ``make delta-oracle`` put the Delta venv and jars (``DELTA_ORACLE_HOME`` overrides, as in the tests)."""
    return Path(os.environ.get("DELTA_ORACLE_HOME", str(REPO_ROOT / ".cache")))


def selected_keys() -> list[str]:
    wanted = [k.strip() for k in os.environ.get("BENCH_DELTA_SPARK_CASES", ",".join(CASE_KEYS)).split(",") if k.strip()]
    unknown = sorted(set(wanted) - set(CASE_KEYS))
    if unknown:
        raise SystemExit(f"BENCH_DELTA_SPARK_CASES: unknown case(s) {unknown}; choose from {', '.join(CASE_KEYS)}")
    return [key for key in CASE_KEYS if key in wanted]


def case_list(keys: list[str], inputs: dict[str, str]) -> list[Case]:
    """The cases of ``keys`` on the inputs' paths (no data is read or built here)."""
    table_args = (inputs["dv"], inputs["plain"], inputs["source"])

    def case(name: str, function: str, args: tuple[str, ...], setup: str) -> Case:
        return Case(name, ours=f"ours_{function}", theirs=f"delta_{function}", args=args, repeat=REPEAT,
                    fresh=True, setup=setup)

    every = {
        "delete": [case("delete 1 row of 10M, DVs", "delete_one_dv", table_args, "fresh_tables"),
                   case("delete 1 row of 10M, rewrite", "delete_one_rewrite", table_args, "fresh_tables")],
        "delete10": [case("delete 10% of 10M, DVs", "delete_tenth_dv", table_args, "fresh_tables"),
                     case("delete 10% of 10M, rewrite", "delete_tenth_rewrite", table_args, "fresh_tables")],
        "update": [case("update 10% of 10M, DVs", "update_tenth", table_args, "fresh_tables")],
        "merge": [case("merge 1M (10% match) into 10M", "merge", table_args, "fresh_tables")],
        "optimize": [case("optimize 10,000 small files", "compact", (inputs["small"],), "fresh_copy")],
        "zorder": [case("Z-order 10M rows by (x, y)", "zorder", (inputs["zorder"],), "fresh_copy")],
        "vacuum": [case("vacuum dry run, 100,000 files", "vacuum_dry_run", (inputs["vacuum"],), "fresh_copy"),
                   case("vacuum, 100,000 files", "vacuum", (inputs["vacuum"],), "fresh_copy")],
    }
    return [c for key in keys for c in every[key]]


def _inputs(keys: list[str]) -> dict[str, str]:
    """Build (once, cached under benchmarks/.data) the inputs the selected cases need."""
    inputs: dict[str, str] = {"dv": "", "plain": "", "source": "", "small": "", "zorder": "", "vacuum": ""}
    if {"delete", "delete10", "update", "merge"} & set(keys):
        base = data_dir(f"dml_merge-{dml_merge.NUM_ROWS}")  # dml_merge's input: built once for both benchmarks
        plain, dv, source = base / "plain", base / "dv", base / "source.parquet"
        if not plain.exists():
            print(f"building the {dml_merge.NUM_ROWS:,}-row table with delta-rs (once; cached in {base})",
                  file=sys.stderr, flush=True)
            dml_merge._build_target(plain)
        if not dv.exists():
            _build_dv(plain, dv)
        if not source.exists():
            dml_merge._build_source(source)
        inputs.update(dv=str(dv), plain=str(plain), source=str(source))
    base = data_dir("optimize")
    if "optimize" in keys:
        if not (base / "small").exists():
            print(f"building {optimize.SMALL_FILES:,} small files (once; cached in {base})", file=sys.stderr, flush=True)
            optimize._build_small(base / "small")
        inputs["small"] = str(base / "small")
    if "zorder" in keys:
        if not (base / "zorder").exists():
            print(f"building the {optimize.ZORDER_ROWS:,}-row table with delta-rs (once)", file=sys.stderr, flush=True)
            optimize._build_zorder(base / "zorder")
        inputs["zorder"] = str(base / "zorder")
    if "vacuum" in keys:
        inputs["vacuum"] = vacuum._build(data_dir("vacuum"))
    return inputs


def cases() -> list[Case]:
    home = delta_home()
    if not (home / "delta-venv" / "bin" / "python").exists() or not (home / "delta-jars" / ".installed-stamp").exists():
        raise SystemExit(f"Delta Lake is not set up under {home}: run `make delta-oracle` (or set DELTA_ORACLE_HOME)")
    compile_engine_bytecode()
    keys = selected_keys()
    inputs = _inputs(keys)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# ours: the operator with execution='spark' (spark-submit, local[2], driver {DRIVER_MEMORY}); "
          f"Delta: delta-spark 4.4 on PySpark 4.2, local[2], driver {DRIVER_MEMORY}; load average {load}", flush=True)
    return case_list(keys, inputs)


# ---------------------------------------------------------------------- per-run copies (untimed)
def fresh_tables(dv: str, plain: str, source: str) -> list[str]:
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    _link_copy(Path(dv), _SCRATCH / "dv")
    _link_copy(Path(plain), _SCRATCH / "plain")
    return [str(_SCRATCH / "dv"), str(_SCRATCH / "plain"), source]


def fresh_copy(path: str) -> list[str]:
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    _link_copy(Path(path), _SCRATCH / "table")
    return [str(_SCRATCH / "table")]


# ---------------------------------------------------------------------- ours: the operators on Spark
def _run_operator(make: Any) -> dict[str, Any]:
    """``make()``'s operator ``.execute(context)`` with a ``local[2]`` Spark connection, in this fresh process."""
    airflow_home = tempfile.mkdtemp(prefix="bench-delta-spark-airflow-")
    use_isolated_airflow(airflow_home)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from tests.airflow_layer import context

    try:
        return dict(make().execute(context()))
    finally:
        shutil.rmtree(airflow_home, ignore_errors=True)


def _event_log_conf() -> dict[str, str]:
    if not EVENT_LOG_DIR:
        return {}
    Path(EVENT_LOG_DIR).mkdir(parents=True, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(Path(EVENT_LOG_DIR).resolve())}


def _conf() -> dict[str, str]:
    return {"spark.driver.memory": DRIVER_MEMORY, "spark.ui.enabled": "false", **_event_log_conf()}


def _ours_metrics(result: dict[str, Any], **expected: int) -> dict[str, Any]:
    metrics = dict(result.get("metrics") or {})
    for key, value in expected.items():
        assert int(metrics.get(key, -1)) == value, (key, value, metrics)
    execution_ms = metrics.get("executionTimeMs")
    if execution_ms is None and metrics.get("startTimeMs") and metrics.get("endTimeMs"):
        execution_ms = int(metrics["endTimeMs"]) - int(metrics["startTimeMs"])  # OPTIMIZE's own start to end
    return {"executionTimeMs": execution_ms, "metrics": metrics}


def _ours_delete(path: str, predicate: str, **expected: int) -> dict[str, Any]:
    from airflow_delta.operators.dml import DeltaDeleteOperator

    result = _run_operator(lambda: DeltaDeleteOperator(
        task_id="delete", table=path, predicate=predicate, execution="spark", conf=_conf()))
    return _ours_metrics(result, **expected)


def ours_delete_one_dv(dv: str, plain: str, source: str) -> dict[str, Any]:
    return _ours_delete(dv, ONE_ROW, numDeletedRows=1, numDeletionVectorsAdded=1)


def ours_delete_one_rewrite(dv: str, plain: str, source: str) -> dict[str, Any]:
    return _ours_delete(plain, ONE_ROW, numDeletedRows=1)


def ours_delete_tenth_dv(dv: str, plain: str, source: str) -> dict[str, Any]:
    return _ours_delete(dv, TENTH, numDeletedRows=TENTH_ROWS)


def ours_delete_tenth_rewrite(dv: str, plain: str, source: str) -> dict[str, Any]:
    return _ours_delete(plain, TENTH, numDeletedRows=TENTH_ROWS)


def ours_update_tenth(dv: str, plain: str, source: str) -> dict[str, Any]:
    from airflow_delta.operators.dml import DeltaUpdateOperator

    result = _run_operator(lambda: DeltaUpdateOperator(
        task_id="update", table=dv, set={"value": "-value"}, predicate=TENTH, execution="spark", conf=_conf()))
    return _ours_metrics(result, numUpdatedRows=TENTH_ROWS)


def ours_merge(dv: str, plain: str, source: str) -> dict[str, Any]:
    from airflow_delta.operators.dml import DeltaMergeOperator
    from airflow_delta.spark.specs import MergeClause

    clauses = (MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True))
    result = _run_operator(lambda: DeltaMergeOperator(
        task_id="merge", table=dv, source={"parquet": source}, on=dml_merge.ON, clauses=clauses,
        source_alias="s", target_alias="t", execution="spark", conf=_conf()))
    return _ours_metrics(result, numTargetRowsUpdated=dml_merge.MATCHED,
                         numTargetRowsInserted=dml_merge.NUM_SOURCE - dml_merge.MATCHED)


def ours_compact(path: str) -> dict[str, Any]:
    from airflow_delta.operators.maintenance import OptimizeOperator

    result = _run_operator(lambda: OptimizeOperator(task_id="optimize", table=path, execution="spark", conf=_conf()))
    return _ours_metrics(result, numFilesRemoved=optimize.SMALL_FILES)


def ours_zorder(path: str) -> dict[str, Any]:
    from airflow_delta.operators.maintenance import OptimizeOperator

    result = _run_operator(lambda: OptimizeOperator(
        task_id="zorder", table=path, zorder_by=["x", "y"], target_file_size=ZORDER_TARGET, execution="spark",
        conf=_conf()))
    return _ours_metrics(result)


def _ours_vacuum(path: str, dry_run: bool) -> dict[str, Any]:
    from airflow_delta.operators.maintenance import VacuumOperator

    result = _run_operator(lambda: VacuumOperator(
        task_id="vacuum", table=path, mode="full", retention=timedelta(0), enforce_retention_duration=False,
        dry_run=dry_run, execution="spark", conf=_conf(), file_list_path=str(Path(path).parent / "vacuum-list.txt")))
    metrics = dict(result.get("metrics") or {})
    found = metrics.get("numFilesToDelete") if dry_run else metrics.get("numDeletedFiles")
    assert int(found or -1) == VACUUM_FILES, metrics
    return {"executionTimeMs": metrics.get("executionTimeMs"), "metrics": metrics}


def ours_vacuum_dry_run(path: str) -> dict[str, Any]:
    return _ours_vacuum(path, dry_run=True)


def ours_vacuum(path: str) -> dict[str, Any]:
    return _ours_vacuum(path, dry_run=False)


# ---------------------------------------------------------------------- Delta Lake on Spark
def _delta(statement: str, table: str, *, history: bool = True, conf: dict[str, str] | None = None) -> dict[str, Any]:
    """``statement`` in a fresh Spark-with-Delta process (benchmarks/_delta_spark_peer.py); its answer."""
    home = delta_home()
    work = Path(tempfile.mkdtemp(prefix="bench-delta-spark-peer-"))
    config = {"jars_dir": str(home / "delta-jars"), "work_dir": str(work), "driver_memory": DRIVER_MEMORY,
              "conf": {**_event_log_conf(), **(conf or {})}, "statement": statement, "table": table, "history": history}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "PYTHONPATH"))}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    try:
        proc = subprocess.run([str(home / "delta-venv" / "bin" / "python"), str(PEER), json.dumps(config)],
                              capture_output=True, text=True, env=env, cwd=work, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"Delta's {statement!r} failed:\n{proc.stderr[-4000:]}")
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    metrics = answer.get("operationMetrics") or {}
    execution_ms = int(metrics["executionTimeMs"]) if "executionTimeMs" in metrics else answer.get("commandMs")
    return {"executionTimeMs": execution_ms,
            "statementMs": answer["statementMs"], "resultRows": answer["resultRows"],
            "operation": answer.get("operation"), "metrics": metrics}


def _ref(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def _expect(answer: dict[str, Any], **expected: int) -> dict[str, Any]:
    for key, value in expected.items():
        assert int(answer["metrics"].get(key, -1)) == value, (key, value, answer)
    return answer


def delta_delete_one_dv(dv: str, plain: str, source: str) -> dict[str, Any]:
    return _expect(_delta(f"DELETE FROM {_ref(dv)} WHERE {ONE_ROW}", dv), numDeletedRows=1, numDeletionVectorsAdded=1)


def delta_delete_one_rewrite(dv: str, plain: str, source: str) -> dict[str, Any]:
    return _expect(_delta(f"DELETE FROM {_ref(plain)} WHERE {ONE_ROW}", plain), numDeletedRows=1)


def delta_delete_tenth_dv(dv: str, plain: str, source: str) -> dict[str, Any]:
    return _expect(_delta(f"DELETE FROM {_ref(dv)} WHERE {TENTH}", dv), numDeletedRows=TENTH_ROWS)


def delta_delete_tenth_rewrite(dv: str, plain: str, source: str) -> dict[str, Any]:
    return _expect(_delta(f"DELETE FROM {_ref(plain)} WHERE {TENTH}", plain), numDeletedRows=TENTH_ROWS)


def delta_update_tenth(dv: str, plain: str, source: str) -> dict[str, Any]:
    return _expect(_delta(f"UPDATE {_ref(dv)} SET value = -value WHERE {TENTH}", dv), numUpdatedRows=TENTH_ROWS)


def delta_merge(dv: str, plain: str, source: str) -> dict[str, Any]:
    statement = (f"MERGE INTO {_ref(dv)} t USING parquet.`{source}` s ON {dml_merge.ON} "
                 "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    return _expect(_delta(statement, dv), numTargetRowsUpdated=dml_merge.MATCHED,
                   numTargetRowsInserted=dml_merge.NUM_SOURCE - dml_merge.MATCHED)


def delta_compact(path: str) -> dict[str, Any]:
    return _expect(_delta(f"OPTIMIZE {_ref(path)}", path), numRemovedFiles=optimize.SMALL_FILES)  # the history's name


def delta_zorder(path: str) -> dict[str, Any]:
    return _delta(f"OPTIMIZE {_ref(path)} ZORDER BY (x, y)", path,
                  conf={"spark.databricks.delta.optimize.maxFileSize": str(ZORDER_TARGET)})


_VACUUM_CONF = {
    "spark.databricks.delta.retentionDurationCheck.enabled": "false",
    # VACUUM START / END commits, as ours writes (a dry run commits nothing on either side).
    "spark.databricks.delta.vacuum.logging.enabled": "true",
}


def delta_vacuum_dry_run(path: str) -> dict[str, Any]:
    answer = _delta(f"VACUUM {_ref(path)} RETAIN 0 HOURS DRY RUN", path, history=False, conf=_VACUUM_CONF)
    assert answer["resultRows"] == VACUUM_FILES, answer
    return answer


def delta_vacuum(path: str) -> dict[str, Any]:
    answer = _delta(f"VACUUM {_ref(path)} RETAIN 0 HOURS", path, conf=_VACUUM_CONF)
    return _expect(answer, numDeletedFiles=VACUUM_FILES)


# ---------------------------------------------------------------------- the table
def _ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}x" if ours is not None and theirs else "-"


def _ms(value: Any) -> float | None:
    return None if value is None else float(value)


def _line(result: Result) -> str:
    theirs = result.theirs
    assert theirs is not None
    ours_ms, delta_ms = _ms(result.ours.detail.get("executionTimeMs")), _ms(theirs.detail.get("executionTimeMs"))
    return (
        f"# {result.case.name:<34} {'-' if ours_ms is None else f'{ours_ms:.0f}':>11} "
        f"{'-' if delta_ms is None else f'{delta_ms:.0f}':>12} {_ratio(ours_ms, delta_ms):>7} "
        f"{result.ours.seconds:8.1f}s {theirs.seconds:9.1f}s {_ratio(result.ours.seconds, theirs.seconds):>7} "
        f"{theirs.detail.get('statementMs', '-'):>12}"
    )


def report_case(result: Result) -> None:
    """As soon as a case is measured: its ratios and both sides' metrics, with the load average."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{_line(result)}  (load {load})", flush=True)
    print(
        f"# {result.case.name}: ours {json.dumps(result.ours.detail.get('metrics'), sort_keys=True)}; "
        f"Delta {json.dumps(result.theirs.detail.get('metrics') if result.theirs else None, sort_keys=True)}",
        flush=True,
    )


def summarize(results: list[Result]) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# ours / Delta Lake on Spark (local[2], driver {DRIVER_MEMORY}), load average now {load}", flush=True)
    print(
        f"# {'case':<34} {'ours execMs':>11} {'Delta execMs':>12} {'ratio':>7} {'ours wall':>9} "
        f"{'Delta wall':>10} {'ratio':>7} {'Delta stmtMs':>12}",
        flush=True,
    )
    for result in results:
        print(_line(result), flush=True)
    shutil.rmtree(_SCRATCH, ignore_errors=True)
