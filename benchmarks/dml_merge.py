"""MERGE of 1,000,000 source rows (10% matching, the rest inserted) into a 10,000,000-row table.

Input (built once, cached under ``benchmarks/.data/dml_merge``): the target written by
delta-rs (``id`` 0..9,999,999, a double and a short string), in two logs sharing the data
files: ``plain`` (as delta-rs wrote it; delta-rs merges into it) and ``dv`` (plus a
commit enabling deletion vectors; ours merges into it, as a table that enables DVs is
where our MERGE marks updated rows instead of rewriting files). The source is one parquet
file: every 100th target id (100,000 rows, matched and updated) and 900,000 new ids.

The statement, on both sides::

    MERGE INTO t USING s ON t.id = s.id
    WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *

Ours is the Spark job's function, ``run_merge``, in a fresh process that starts a
``local[2]`` SparkSession (as ``spark-submit --master local[2]`` of the job would),
session start included. It reports the commit's ``executionTimeMs`` and the Spark
driver's peak memory: the Python driver process (measured by the harness) and the JVM
(its ``VmHWM``). delta-rs runs ``DeltaTable.merge`` with the source as an Arrow table.
``AIRFLOW_DELTA_BENCH_MERGE_ROWS`` scales the target (e.g. 50000000).

More cases, each side in a fresh process:

- ``merge 18 into 3,000 (task)``: ``DeltaMergeOperator.execute`` with the default
  ``execution="auto"`` (it runs in the worker) on a 3,000-row table with deletion vectors,
  18 source rows (9 updates, 9 inserts) from parquet, imports included, as an Airflow task
  pays them; against delta-rs's ``merge`` of the same rows in a fresh process. The same
  task with ``execution="spark"`` (``local[2]``) is the third line, for scale.
- ``upsert 10,000 into 1M (worker)``: the worker's MERGE of 10,000 source rows (1,000
  spread-out matches, 9,000 inserts) into a 1,000,000-row DV table as a user runs it,
  ``DeltaMergeOperator(execution="worker").execute`` (Airflow's SDK and the provider imported
  in the process, as a task pays them; the time before ``execute`` and ``execute`` itself are
  reported apart), then the same MERGE as ``run_merge_in_worker`` (no Airflow); delta-rs's
  ``merge`` of the same beside each. A third line puts both in an Airflow task process: our
  operator beside delta-rs's ``merge`` called by a ``PythonOperator`` (what a DAG around a
  delta-rs script runs), each ``execute`` in a fresh process with Airflow's SDK imported.
- ``merge 1M into <N>M (worker)`` (case ``large_worker``): the 1M-into-10M MERGE above (the
  ``dv`` table) through ``DeltaMergeOperator(execution="worker").execute`` in a fresh
  process, no Spark, beside delta-rs's ``merge`` into ``plain``, with the peak RSS of both
  processes (``AIRFLOW_DELTA_BENCH_MERGE_ROWS=50000000`` for the 50M target).
- ``upsert 10,000 recent keys into <N> laid out by key``: a target of files of 100,000
  consecutive keys (``AIRFLOW_DELTA_BENCH_MERGE_SKIP_ROWS``, default 100,000,000; written
  with pyarrow column by column, one parquet file at a time, and made a Delta table by the
  engine's ``convert_to_delta``, statistics from the footers), the 5,000 highest keys
  updated and 5,000 new ones inserted, in the worker: the ``numTargetFilesAfterSkipping``
  share of the files (goal: at most 5%), and delta-rs's ``merge`` of the same (it prunes by
  the source's key range too; its files scanned and skipped are printed).
- ``skipping_spark`` (not run by default): the same upsert as ``DeltaMergeOperator.execute``
  forced onto Spark (``execution="spark"``, ``spark-submit --master local[2]``, 2 GiB driver,
  fresh process), the files the job read of the table's, beside delta-rs's ``merge``.

- ``merge 18 into 3,000 (airflow dags test)``: the same MERGE as a user runs it, the task of a
  DAG file run by ``airflow dags test`` (a subprocess: the CLI's start, the DAG file's parse,
  the in-process execution API, the task in the worker; its AIRFLOW_HOME migrated once,
  untimed), beside ``a no-op task (airflow dags test)``: a DAG of one ``PythonOperator`` that
  does nothing, run the same way, what Airflow costs whatever the task (not an ``EmptyOperator``:
  a real scheduler never runs one). The CPU time of the ``airflow`` child process and each task
  instance's duration as Airflow records it are reported for both, so the summary prints what
  the MERGE task adds to Airflow's own cost. In ``airflow dags test`` a task instance's
  duration starts when the task is queued, before the in-process execution API that the task
  talks to is built: the first task of the process pays for that, whatever it does.
- ``merge 18 into 3,000 (scheduler, LocalExecutor)`` (case ``small_scheduler``, not run by
  default): the same two DAGs run by a real Airflow, ``airflow api-server``, ``dag-processor`` and
  ``scheduler`` with the LocalExecutor as ``airflow standalone`` runs them (127.0.0.1, a copy of
  the migrated database, all stopped at the end), MERGE and no-op runs alternating three times
  each; the task instances' durations as Airflow records them.

``AIRFLOW_DELTA_BENCH_MERGE_CASES`` (comma-separated: ``large``, ``large_worker``, ``small``,
``small_spark``, ``small_dags_test``, ``small_scheduler``, ``worker``, ``skipping``, ``skipping_spark``;
default all but ``skipping_spark`` and ``small_scheduler``) picks the cases.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._harness import Case, Result, compile_engine_bytecode, data_dir, use_isolated_airflow
from benchmarks.delete import _build_dv, _link_copy  # one way to make the DV copy of an input

NUM_ROWS = int(os.environ.get("AIRFLOW_DELTA_BENCH_MERGE_ROWS", "10000000"))
NUM_SOURCE = 1_000_000
MATCHED = NUM_SOURCE // 10
_BUILD_BATCH = 1_000_000
ON = "t.id = s.id"


def _batch(start: int, stop: int) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array(range(start, stop), pa.int64())
    return pa.record_batch(
        {
            "id": ids,
            "value": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
            "name": pc.binary_join_element_wise("n", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), ""),
        }
    )


def _build_target(target: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    first = _batch(0, 1)
    batches = (_batch(start, min(start + _BUILD_BATCH, NUM_ROWS)) for start in range(0, NUM_ROWS, _BUILD_BATCH))
    write_deltalake(str(tmp), pa.RecordBatchReader.from_batches(first.schema, batches), mode="overwrite")
    tmp.rename(target)


def _build_source(path: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    matched = np.arange(0, NUM_ROWS, NUM_ROWS // MATCHED, dtype=np.int64)[:MATCHED]
    new = np.arange(NUM_ROWS, NUM_ROWS + NUM_SOURCE - MATCHED, dtype=np.int64)
    ids = pa.array(np.concatenate([matched, new]))
    table = pa.table(
        {
            "id": ids,
            "value": pc.multiply(pc.cast(ids, pa.float64()), -1.0),
            "name": pa.array(["updated"] * NUM_SOURCE, pa.string()),
        }
    )
    tmp = path.with_name(path.name + ".building")
    pq.write_table(table, tmp)
    tmp.rename(path)


SELECTED = set(os.environ.get(
    "AIRFLOW_DELTA_BENCH_MERGE_CASES", "large,large_worker,small,small_spark,small_dags_test,worker,skipping"  # not skipping_spark
).split(","))
SKIP_ROWS = int(os.environ.get("AIRFLOW_DELTA_BENCH_MERGE_SKIP_ROWS", "100000000"))
SKIP_FILE_ROWS = 100_000
SMALL_TARGET, SMALL_SOURCE = 3_000, 18
WORKER_TARGET, WORKER_SOURCE, WORKER_MATCHED = 1_000_000, 10_000, 1_000
UPSERT = "t.id = s.id"


def cases() -> list[Case]:
    compile_engine_bytecode()  # fresh processes: measured as installed, not compiling on every import
    selected: list[Case] = []
    if SELECTED & {"small", "small_spark", "small_dags_test", "small_scheduler"}:
        selected += _small_cases()
    if "worker" in SELECTED:
        selected += _worker_cases()
    if SELECTED & {"skipping", "skipping_spark"}:
        selected += _skipping_cases()
    if SELECTED & {"large", "large_worker"}:
        selected += _large_cases()
    return selected


def _write_source_parquet(path: Path, ids: Any) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    ids = pa.array(ids, pa.int64())
    table = pa.table(
        {"id": ids, "value": pc.multiply(pc.cast(ids, pa.float64()), -1.0), "name": pa.array(["updated"] * len(ids))}
    )
    pq.write_table(table, path)


def _write_target(path: Path, num_rows: int, file_rows: int) -> None:
    """A target written by delta-rs, one append per ``file_rows`` consecutive ids (laid out by key), then a checkpoint."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    tmp = path.with_name(path.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    for start in range(0, num_rows, file_rows):
        write_deltalake(str(tmp), pa.table(_batch(start, min(start + file_rows, num_rows))), mode="append")
    DeltaTable(str(tmp)).create_checkpoint()
    tmp.rename(path)


def _write_target_by_key(path: Path, num_rows: int, file_rows: int) -> None:
    """A target laid out by key, built cheaply: one parquet file per ``file_rows`` consecutive ids,
    each written by pyarrow from columns computed whole (numpy, pyarrow.compute), then made a
    Delta table by the engine's CONVERT TO DELTA (one commit; each file's statistics from its
    footer). The rows are :func:`_batch`'s, as in the targets delta-rs writes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from airflow_delta.engine import DeltaTable

    tmp = path.with_name(path.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for number, start in enumerate(range(0, num_rows, file_rows)):
        ids = pa.array(np.arange(start, min(start + file_rows, num_rows), dtype=np.int64))
        names = pc.binary_join_element_wise("n", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), "")
        columns = {"id": ids, "value": pc.multiply(pc.cast(ids, pa.float64()), 0.5), "name": names}
        pq.write_table(pa.table(columns), tmp / f"part-{number:05d}.snappy.parquet")
    DeltaTable.convert_to_delta(str(tmp))
    tmp.rename(path)


def _inputs(
    name: str, num_rows: int, file_rows: int, source_ids: Any, build: Callable[[Path, int, int], None] = _write_target
) -> tuple[Path, Path, Path]:
    base = data_dir(name)
    plain, dv, source = base / "plain", base / "dv", base / "source.parquet"
    if not plain.exists():
        print(f"building the {num_rows:,}-row target of {name} (once; cached in {base})", file=sys.stderr, flush=True)
        build(plain, num_rows, file_rows)
    if not dv.exists():
        _build_dv(plain, dv)
    if not source.exists():
        _write_source_parquet(source, source_ids)
    return plain, dv, source


def _small_cases() -> list[Case]:
    import numpy as np

    ids = np.concatenate([np.arange(0, SMALL_TARGET, SMALL_TARGET // 9)[:9], np.arange(SMALL_TARGET, SMALL_TARGET + 9)])
    plain, dv, source = _inputs("dml_merge-small", SMALL_TARGET, SMALL_TARGET, ids)
    args = (str(dv), str(plain), str(source))
    cases = []
    if "small" in SELECTED:
        cases.append(Case("merge 18 into 3,000 (task, auto)", ours="operator_merge_auto", theirs="delta_rs_upsert",
                          args=args, repeat=3, fresh=True, setup="fresh_small_copies"))
    if "small_spark" in SELECTED:
        cases.append(Case("merge 18 into 3,000 (task, spark)", ours="operator_merge_spark", args=args, repeat=1,
                          fresh=True, setup="fresh_small_copies"))
    if "small_dags_test" in SELECTED:
        _migrated_airflow()
        cases += [
            Case("merge 18 into 3,000 (airflow dags test)", ours="dags_test_merge", theirs="delta_rs_upsert", args=args,
                 repeat=1, fresh=True, setup="fresh_small_copies"),  # a whole Airflow run per side: minutes under load
            Case("a no-op task (airflow dags test)", ours="dags_test_noop", repeat=1, fresh=True),
        ]
    if "small_scheduler" in SELECTED:
        _migrated_airflow()
        cases.append(Case("merge 18 into 3,000 (scheduler, LocalExecutor)", ours="scheduler_merge", args=args, repeat=1,
                          fresh=True, setup="fresh_small_copies"))
    return cases


# The DAG files of the ``airflow dags test`` cases: the MERGE task as a user writes it, and a no-op task.
_MERGE_DAG = """\
from datetime import UTC, datetime

from airflow.sdk import DAG, Param

from airflow_delta.operators.dml import DeltaMergeOperator
from airflow_delta.spark.specs import MergeClause

with DAG(dag_id="bench_merge", schedule=None, start_date=datetime(2025, 1, 1, tzinfo=UTC), catchup=False,
         params={"table": Param(type="string"), "source": Param(type="string")}):
    DeltaMergeOperator(
        task_id="merge", table="{{ params.table }}", source={"parquet": "{{ params.source }}"}, on="t.id = s.id",
        clauses=(MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)),
        source_alias="s", target_alias="t",
    )
"""
# The baseline is a PythonOperator that does nothing, not an EmptyOperator: a real scheduler
# never runs an EmptyOperator (DagRun.schedule_tis marks it success with a zero duration),
# while ``airflow dags test`` runs it like any task, so it measures nothing a user's task pays.
_NOOP_DAG = """\
from datetime import UTC, datetime

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG


def nothing() -> None:
    return None


with DAG(dag_id="bench_noop", schedule=None, start_date=datetime(2025, 1, 1, tzinfo=UTC), catchup=False):
    PythonOperator(task_id="nothing", python_callable=nothing)
"""


def _airflow_cli() -> Any:
    from scripts.airflow_cli import SPARK_LOCAL_CONNECTIONS, AirflowCli

    base = data_dir("dml_merge-airflow")
    dags = base / "dags"
    dags.mkdir(exist_ok=True)
    stale = dags / "bench_empty.py"  # the former EmptyOperator baseline
    if stale.exists():
        stale.unlink()
    for name, text in (("bench_merge.py", _MERGE_DAG), ("bench_noop.py", _NOOP_DAG)):
        if not (dags / name).exists() or (dags / name).read_text() != text:
            (dags / name).write_text(text)
    return AirflowCli(base / "home", dags, SPARK_LOCAL_CONNECTIONS, logging_level="INFO", timeout=900)


def _migrated_airflow() -> None:
    """``airflow db migrate`` of the cases' AIRFLOW_HOME, once (untimed; kept in ``benchmarks/.data``)."""
    cli = _airflow_cli()
    if not (cli.home / "airflow.db").exists():
        print(f"# migrating the Airflow database of the dags-test cases (once; {cli.home})", file=sys.stderr, flush=True)
        cli.migrate()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _dags_test(dag_id: str, conf: dict[str, Any]) -> dict[str, Any]:
    from scripts.airflow_cli import output_tail

    cli = _airflow_cli()
    before, started = _children_cpu(), time.perf_counter()
    result = cli.run("dags", "test", dag_id, "--conf", json.dumps(conf))
    seconds, cpu = time.perf_counter() - started, _children_cpu() - before
    assert result.returncode == 0, output_tail(result)
    run = cli.latest_run(dag_id)
    assert run["state"] == "success", (run, output_tail(result))
    # What Airflow records as the task's duration (its task instance's start to end), beside the whole CLI run.
    task_seconds = {task: round(float(d), 3) for task, d in run["durations"].items() if d is not None}
    return {"airflowSeconds": round(seconds, 3), "airflowCpuSeconds": round(cpu, 3), "taskSeconds": task_seconds,
            "xcoms": run["xcoms"]}


def dags_test_merge(dv: str, plain: str, source: str) -> dict[str, Any]:
    """``airflow dags test`` of the MERGE DAG: its task runs the 18-row MERGE (in the worker: ``execution="auto"``)."""
    detail = _dags_test("bench_merge", {"table": dv, "source": source})
    metrics = detail.pop("xcoms")["merge"]["metrics"]
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (9, 9), metrics
    return {**detail, "executionTimeMs": metrics.get("executionTimeMs")}


def dags_test_noop() -> dict[str, Any]:
    """``airflow dags test`` of a DAG with one ``PythonOperator`` that does nothing: Airflow's own cost."""
    detail = _dags_test("bench_noop", {})
    detail.pop("xcoms")
    return detail


SCHEDULER_ROUNDS = 3


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.5)


def _answers(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def scheduler_merge(dv: str, plain: str, source: str) -> dict[str, Any]:
    """The MERGE DAG and the no-op DAG run by a real Airflow: ``airflow api-server``, ``dag-processor`` and
    ``scheduler`` with the LocalExecutor (as ``airflow standalone`` runs them), on a copy of the migrated
    database, every server on 127.0.0.1 and stopped at the end. The runs alternate, MERGE first,
    ``SCHEDULER_ROUNDS`` of each; each task instance's duration is what Airflow records (the task
    process's start to its end), read from the database. The first task after the scheduler starts
    also pays the executor's warm-up, whichever DAG it belongs to, so the rounds are reported apart."""
    import signal
    import sqlite3
    import subprocess

    cli = _airflow_cli()
    home = Path(tempfile.mkdtemp(prefix="bench-merge-scheduler-"))
    shutil.copyfile(cli.home / "airflow.db", home / "airflow.db")
    port = _free_port()
    env = cli.env() | {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": "bench-merge-scheduler",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    logs = home / "server-logs"
    logs.mkdir()
    database = sqlite3.connect(home / "airflow.db", timeout=30)
    # The copied database may know these DAGs from ``dags test`` runs, paused (as DAGs are created).
    database.execute("update dag set is_paused = 0 where dag_id in ('bench_merge', 'bench_noop')")
    database.commit()

    servers: list[subprocess.Popen[bytes]] = []

    def query(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return database.execute(sql, params).fetchall()

    def trigger(dag_id: str, run_id: str, conf: dict[str, Any]) -> None:
        result = subprocess.run([airflow, "dags", "trigger", dag_id, "--run-id", run_id, "--conf", json.dumps(conf)],
                                env=env, cwd=home, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        _wait_for(f"{dag_id} {run_id}", lambda: bool(query(
            "select 1 from dag_run where dag_id = ? and run_id = ? and state in ('success', 'failed')", dag_id, run_id)), 300)

    try:
        for command in (["api-server", "--host", "127.0.0.1", "--port", str(port)], ["dag-processor"], ["scheduler"]):
            servers.append(subprocess.Popen(
                [airflow, *command], env=env, cwd=home, stdout=(logs / f"{command[0]}.log").open("w"),
                stderr=subprocess.STDOUT, start_new_session=True))
        _wait_for("the api-server", lambda: _answers(f"http://127.0.0.1:{port}/execution/health"), 300)
        _wait_for("the DAG files to be parsed", lambda: len(query(
            "select dag_id from serialized_dag where dag_id in ('bench_merge', 'bench_noop')")) == 2, 300)
        for round_ in range(1, SCHEDULER_ROUNDS + 1):
            trigger("bench_merge", f"merge{round_}", {"table": dv, "source": source})
            trigger("bench_noop", f"noop{round_}", {})
        rows = query("select dag_id, run_id, state, duration from task_instance order by start_date")
    finally:
        for server in servers:
            os.killpg(server.pid, signal.SIGTERM)
        for server in servers:
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        database.close()
    assert all(state == "success" for _, _, state, _ in rows), rows
    durations = {run_id: round(float(duration), 3) for _, run_id, _, duration in rows}
    return {"taskSeconds": durations, "executionTimeMs": None}


def _worker_cases() -> list[Case]:
    import numpy as np

    step = WORKER_TARGET // WORKER_MATCHED
    ids = np.concatenate([np.arange(0, WORKER_TARGET, step)[:WORKER_MATCHED], np.arange(WORKER_TARGET, WORKER_TARGET + WORKER_SOURCE - WORKER_MATCHED)])
    plain, dv, source = _inputs("dml_merge-worker", WORKER_TARGET, WORKER_TARGET, ids)
    args = (str(dv), str(plain), str(source))
    return [
        Case("upsert 10,000 into 1M (worker)", ours="operator_upsert_worker", theirs="delta_rs_upsert", args=args,
             repeat=2, fresh=True, setup="fresh_worker_copies"),
        # The same MERGE without Airflow: run_merge_in_worker in a fresh process (the engine's imports only).
        Case("upsert 10,000 into 1M (run_merge_in_worker)", ours="worker_upsert", theirs="delta_rs_upsert", args=args,
             repeat=2, fresh=True, setup="fresh_worker_copies"),
        # Both as Airflow tasks: delta-rs's merge inside a PythonOperator in a fresh process pays
        # what our operator's process pays before ``execute`` (Airflow's SDK, the task context).
        Case("upsert 10,000 into 1M (worker; both as Airflow tasks)", ours="operator_upsert_worker",
             theirs="delta_rs_upsert_task", args=args, repeat=2, fresh=True, setup="fresh_worker_copies"),
    ]


def _skipping_cases() -> list[Case]:
    import numpy as np

    ids = np.arange(SKIP_ROWS - 5_000, SKIP_ROWS + 5_000)
    plain, dv, source = _inputs(f"dml_merge-skipping-{SKIP_ROWS}", SKIP_ROWS, SKIP_FILE_ROWS, ids, _write_target_by_key)
    args = (str(dv), str(plain), str(source))
    cases = []
    if "skipping" in SELECTED:
        cases.append(Case(f"upsert 10,000 recent keys into {SKIP_ROWS:,} laid out by key (worker)", ours="worker_upsert",
                          theirs="delta_rs_upsert", args=args, repeat=1, fresh=True, setup="fresh_skipping_copies"))
    if "skipping_spark" in SELECTED:
        cases.append(Case(f"upsert 10,000 recent keys into {SKIP_ROWS:,} laid out by key (operator, spark)",
                          ours="operator_upsert_spark", theirs="delta_rs_upsert", args=args, repeat=1, fresh=True,
                          setup="fresh_skipping_copies"))
    return cases


def _fresh(name: str, dv: str, plain: str, source: str) -> list[str]:
    scratch = Path(tempfile.gettempdir()) / f"airflow-delta-bench-merge-{name}"
    shutil.rmtree(scratch, ignore_errors=True)
    _link_copy(Path(dv), scratch / "dv")
    _link_copy(Path(plain), scratch / "plain")
    return [str(scratch / "dv"), str(scratch / "plain"), source]


def fresh_small_copies(dv: str, plain: str, source: str) -> list[str]:
    return _fresh("small", dv, plain, source)


def fresh_worker_copies(dv: str, plain: str, source: str) -> list[str]:
    return _fresh("worker", dv, plain, source)


def fresh_skipping_copies(dv: str, plain: str, source: str) -> list[str]:
    return _fresh(f"skipping-{SKIP_ROWS}", dv, plain, source)


def _upsert_clauses() -> tuple[Any, ...]:
    from airflow_delta.spark.specs import MergeClause

    return (MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True))


def _operator_merge(
    dv: str, source: str, execution: str, expected: tuple[int, int] = (9, 9), conf: dict[str, str] | None = None
) -> dict[str, Any]:
    started = time.perf_counter()
    airflow_home = tempfile.mkdtemp(prefix="bench-merge-airflow-")
    use_isolated_airflow(airflow_home)
    from airflow_delta.operators.dml import DeltaMergeOperator
    from tests.airflow_layer import context

    operator = DeltaMergeOperator(
        task_id="m", table=dv, source={"parquet": source}, on=UPSERT, clauses=_upsert_clauses(),
        source_alias="s", target_alias="t", execution=execution, conf={"spark.ui.enabled": "false", **(conf or {})},
    )
    task_context = context()
    # What an Airflow task process has paid before its operator runs (Airflow's SDK, the provider's
    # module, the context), apart from ``execute`` itself: the split says where a fresh process's time goes.
    executing = time.perf_counter()
    result = operator.execute(task_context)
    execute_seconds = time.perf_counter() - executing
    metrics = result["metrics"]
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == expected, metrics
    shutil.rmtree(airflow_home, ignore_errors=True)
    return {"importSeconds": round(executing - started, 3), "executeSeconds": round(execute_seconds, 3)} | {
        key: metrics[key] for key in (
            "executionTimeMs", "numTargetFilesBeforeSkipping", "numTargetFilesAfterSkipping", "scanTimeMs",
            "materializeSourceTimeMs", "rewriteTimeMs",
        ) if key in metrics}


def operator_merge_auto(dv: str, plain: str, source: str) -> dict[str, Any]:
    """The task as a user writes it (``execution="auto"``: this MERGE runs in the worker)."""
    return _operator_merge(dv, source, "auto")


def operator_merge_spark(dv: str, plain: str, source: str) -> dict[str, Any]:
    """The same task forced onto Spark ``local[2]``."""
    return _operator_merge(dv, source, "spark")


def operator_upsert_spark(dv: str, plain: str, source: str) -> dict[str, Any]:
    """The recent-keys upsert as ``DeltaMergeOperator.execute`` forced onto Spark (``local[2]``, 2 GiB driver)."""
    return _operator_merge(dv, source, "spark", expected=(5_000, 5_000), conf={"spark.driver.memory": "2g"})


def operator_upsert_worker(dv: str, plain: str, source: str) -> dict[str, Any]:
    """The 1M-row upsert as a user runs it in the worker: ``DeltaMergeOperator(execution="worker").execute``."""
    return _operator_merge(dv, source, "worker", expected=(WORKER_MATCHED, WORKER_SOURCE - WORKER_MATCHED))


def worker_upsert(dv: str, plain: str, source: str) -> dict[str, Any]:
    from airflow_delta.spark.merge_worker import run_merge_in_worker
    from airflow_delta.spark.specs import MergeSource, MergeSpec, TableRef, TaskIdentity

    spec = MergeSpec(
        target=TableRef(dv), source=MergeSource(parquet=source), on=UPSERT, clauses=_upsert_clauses(),
        identity=TaskIdentity("bench", "merge", "run"), source_alias="s", target_alias="t",
    )
    metrics = run_merge_in_worker(spec).metrics
    return {key: metrics[key] for key in (
        "executionTimeMs", "numTargetRowsUpdated", "numTargetRowsInserted",
        "numTargetFilesBeforeSkipping", "numTargetFilesAfterSkipping",
    )}


def delta_rs_upsert(dv: str, plain: str, source: str) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    metrics = (
        DeltaTable(plain)
        .merge(source=pq.read_table(source), predicate=UPSERT, source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    return {
        "executionTimeMs": metrics["execution_time_ms"],
        "numTargetRowsUpdated": metrics["num_target_rows_updated"],
        "numTargetRowsInserted": metrics["num_target_rows_inserted"],
        # delta-rs's names: the files its scan read, and the files it skipped (by the source's key range).
        "deltaRsFilesScanned": metrics.get("num_target_files_scanned"),
        "deltaRsFilesSkipped": metrics.get("num_target_files_skipped_during_scan"),
        "deltaRsFilesRemoved": metrics.get("num_target_files_removed"),
    }


def delta_rs_upsert_task(dv: str, plain: str, source: str) -> dict[str, Any]:
    """delta-rs's ``merge`` as a user's DAG would run it: a ``PythonOperator`` task, ``execute`` in this fresh process."""
    started = time.perf_counter()
    airflow_home = tempfile.mkdtemp(prefix="bench-merge-airflow-")
    use_isolated_airflow(airflow_home)
    from airflow.providers.standard.operators.python import PythonOperator

    from tests.airflow_layer import context

    operator = PythonOperator(task_id="m", python_callable=delta_rs_upsert, op_args=[dv, plain, source])
    task_context = context()
    executing = time.perf_counter()
    result = dict(operator.execute(task_context))
    execute_seconds = time.perf_counter() - executing
    shutil.rmtree(airflow_home, ignore_errors=True)
    return {"importSeconds": round(executing - started, 3), "executeSeconds": round(execute_seconds, 3)} | result


def _large_cases() -> list[Case]:
    base = data_dir(f"dml_merge-{NUM_ROWS}")
    plain, dv, source = base / "plain", base / "dv", base / "source.parquet"
    if not plain.exists():
        print(f"building the {NUM_ROWS:,}-row target with delta-rs (once; cached in {base})", file=sys.stderr, flush=True)
        _build_target(plain)
    if not dv.exists():
        _build_dv(plain, dv)
    if not source.exists():
        _build_source(source)
    print(f"# input: {NUM_ROWS:,} target rows written by delta-rs; {NUM_SOURCE:,} source rows, {MATCHED:,} matching", flush=True)
    cases = []
    if "large_worker" in SELECTED:
        # The same MERGE as a user runs it in the Airflow worker (no JVM), beside delta-rs.
        cases.append(Case(f"merge 1M into {NUM_ROWS // 1_000_000}M (worker)", ours="operator_merge_large_worker",
                          theirs="delta_rs_merge", args=(str(dv), str(plain), str(source)),
                          repeat=2 if NUM_ROWS <= 10_000_000 else 1, fresh=True, setup="fresh_copies"))
    if "large" in SELECTED:
        # The job as it runs by default (reader="auto": Spark's parquet reader for this target),
        # then with the engine's reader: the two target readers side by side.
        cases += [
            Case(
                f"merge 1M into {NUM_ROWS // 1_000_000}M{suffix}",
                ours=function,
                theirs="delta_rs_merge",
                args=(str(dv), str(plain), str(source)),
                # A 50M-row run takes minutes per side: one run each there.
                repeat=2 if NUM_ROWS <= 10_000_000 else 1,
                fresh=True,
                setup="fresh_copies",
            )
            for suffix, function in (("", "ours_merge"), (", engine reader", "ours_merge_engine_reader"))
        ]
    return cases


_SCRATCH = Path(tempfile.gettempdir()) / f"airflow-delta-bench-merge-{NUM_ROWS}"  # one per size: runs may overlap


def fresh_copies(dv: str, plain: str, source: str) -> list[str]:
    """Untimed, before each run: new copies of both targets (hard-linked data files) for the run to modify."""
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    _link_copy(Path(dv), _SCRATCH / "dv")
    _link_copy(Path(plain), _SCRATCH / "plain")
    return [str(_SCRATCH / "dv"), str(_SCRATCH / "plain"), source]


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def operator_merge_large_worker(dv: str, plain: str, source: str) -> dict[str, Any]:
    """The 1M-into-10M MERGE as ``DeltaMergeOperator(execution="worker").execute`` (no Spark), imports included."""
    return _operator_merge(dv, source, "worker", expected=(MATCHED, NUM_SOURCE - MATCHED))


def ours_merge(dv: str, plain: str, source: str) -> dict[str, Any]:
    """The job's MERGE as it runs by default (``reader="auto"``: Spark's parquet reader for this local table)."""
    return _ours_merge(dv, source, "auto")


def ours_merge_engine_reader(dv: str, plain: str, source: str) -> dict[str, Any]:
    """The same MERGE with the engine's reader on executors (``reader="engine"``)."""
    return _ours_merge(dv, source, "engine")


def _ours_merge(dv: str, source: str, reader: str) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from airflow_delta.spark.merge import run_merge
    from airflow_delta.spark.session import job_session
    from airflow_delta.spark.specs import ExecutionOptions, MergeClause, MergeSource, MergeSpec, TableRef, TaskIdentity

    spark = job_session(
        "bench-merge",
        {
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            "spark.driver.memory": "2g",
            "spark.sql.shuffle.partitions": "8",
            "spark.pyspark.python": sys.executable,
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    spec = MergeSpec(
        target=TableRef(dv),
        source=MergeSource(parquet=source),
        on=ON,
        clauses=(MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)),
        identity=TaskIdentity("bench", "merge", "run"),
        source_alias="s",
        target_alias="t",
        options=ExecutionOptions(reader=reader),
    )
    result = run_merge(spark, spec)
    metrics = result.metrics
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (MATCHED, NUM_SOURCE - MATCHED), metrics
    jvm_pid = int(spark.sparkContext._gateway.jvm.java.lang.ProcessHandle.current().pid())
    jvm_peak = _peak_rss_mb(jvm_pid)
    spark.stop()
    return {"executionTimeMs": metrics["executionTimeMs"], "jvmPeakMb": round(jvm_peak)}


def delta_rs_merge(dv: str, plain: str, source: str) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    metrics = (
        DeltaTable(plain)
        .merge(source=pq.read_table(source), predicate=ON, source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert (metrics["num_target_rows_updated"], metrics["num_target_rows_inserted"]) == (
        MATCHED,
        NUM_SOURCE - MATCHED,
    ), metrics
    return {"executionTimeMs": metrics["execution_time_ms"]}


def _task_seconds(result: Result) -> float:
    """The task instance duration Airflow recorded for the one task of a dags-test case."""
    return float(sum(result.ours.detail.get("taskSeconds", {}).values()))


def _summarize_dags_test(results: list[Result]) -> None:
    by_name = {r.case.name: r for r in results}
    merge, noop = by_name.get("merge 18 into 3,000 (airflow dags test)"), by_name.get("a no-op task (airflow dags test)")
    if merge is None:
        return
    line = (f"# airflow dags test, MERGE task: {merge.ours.seconds:.2f} s wall, "
            f"{merge.ours.detail.get('airflowCpuSeconds')} s CPU of the airflow process, "
            f"task instance duration (Airflow's record) {merge.ours.detail.get('taskSeconds')} s")
    if noop is not None:
        line += (f"; no-op task: {noop.ours.seconds:.2f} s wall, {noop.ours.detail.get('airflowCpuSeconds')} s CPU, "
                 f"task instance {noop.ours.detail.get('taskSeconds')} s; "
                 f"the MERGE task adds {merge.ours.seconds - noop.ours.seconds:.2f} s wall "
                 f"({_task_seconds(merge) - _task_seconds(noop):.2f} s of task instance duration), "
                 f"{float(merge.ours.detail['airflowCpuSeconds']) - float(noop.ours.detail['airflowCpuSeconds']):.2f} s CPU")
    if merge.theirs is not None:
        line += f"; delta-rs in a fresh process {merge.theirs.seconds:.2f} s wall, {merge.theirs.cpu_seconds:.2f} s CPU"
    print(line + f"; load {os.getloadavg()[0]:.1f}", flush=True)


def _summarize_scheduler(results: list[Result]) -> None:
    for result in results:
        if "scheduler" not in result.case.name:
            continue
        durations = result.ours.detail["taskSeconds"]
        merges = [durations[f"merge{i}"] for i in range(1, SCHEDULER_ROUNDS + 1)]
        noops = [durations[f"noop{i}"] for i in range(1, SCHEDULER_ROUNDS + 1)]
        print(f"# {result.case.name}: task instance durations (Airflow's record), MERGE {merges} s, no-op {noops} s "
              f"(runs alternate, MERGE first; the first task after the scheduler starts pays the executor's "
              f"warm-up); after the first round the MERGE task adds "
              f"{sum(merges[1:]) / len(merges[1:]) - sum(noops[1:]) / len(noops[1:]):.2f} s to a no-op task; "
              f"load {os.getloadavg()[0]:.1f}", flush=True)


def summarize(results: list[Result]) -> None:
    _summarize_dags_test(results)
    _summarize_scheduler(results)
    results = [r for r in results if "dags test" not in r.case.name and "scheduler" not in r.case.name]
    extra = [r for r in results if not r.case.name.startswith("merge 1M")]
    for result in extra:
        ours, theirs = result.ours, result.theirs
        line = f"# {result.case.name}: ours wall {ours.seconds:.2f} s (executionTimeMs {ours.detail.get('executionTimeMs')})"
        if "executeSeconds" in ours.detail:
            line += f" = imports and task set-up {ours.detail['importSeconds']:.2f} s + execute {ours.detail['executeSeconds']:.2f} s"
        if "numTargetFilesAfterSkipping" in ours.detail:
            before, after = ours.detail["numTargetFilesBeforeSkipping"], ours.detail["numTargetFilesAfterSkipping"]
            line += f", target files read {after} of {before} ({100 * after / max(before, 1):.2f}%)"
        if theirs is not None:
            line += (
                f"; delta-rs wall {theirs.seconds:.2f} s (execution_time_ms {theirs.detail.get('executionTimeMs')})"
                f"; wall ratio ours/delta-rs {ours.seconds / theirs.seconds:.2f}"
            )
            if theirs.detail.get("deltaRsFilesScanned") is not None:
                scanned, skipped = theirs.detail["deltaRsFilesScanned"], theirs.detail.get("deltaRsFilesSkipped")
                line += (f"; delta-rs files scanned {scanned}, skipped {skipped}, "
                         f"rewritten {theirs.detail.get('deltaRsFilesRemoved')}")
        print(line, flush=True)
    results = [r for r in results if r.case.name.startswith("merge 1M")]
    by_reader = {r.case.name.endswith("engine reader"): r for r in results if not r.case.name.endswith("(worker)")}
    if len(by_reader) == 2:
        spark_read, engine_read = by_reader[False].ours, by_reader[True].ours
        spark_ms = float(spark_read.detail.get("executionTimeMs") or 0)
        engine_ms = float(engine_read.detail.get("executionTimeMs") or 0)
        print(
            f"# target reader: executionTimeMs Spark's parquet reader (auto) {spark_ms:.0f} ms, engine reader "
            f"{engine_ms:.0f} ms (ratio {spark_ms / max(engine_ms, 1):.2f}); wall {spark_read.seconds:.1f} s vs "
            f"{engine_read.seconds:.1f} s",
            flush=True,
        )
    for result in results:
        theirs = result.theirs
        assert theirs is not None
        ours = result.ours
        if result.case.name.endswith("(worker)"):
            print(
                f"# {result.case.name}: ours wall {ours.seconds:.2f} s = imports and task set-up "
                f"{ours.detail.get('importSeconds')} s + execute {ours.detail.get('executeSeconds')} s; CPU "
                f"{ours.cpu_seconds:.2f} s (executionTimeMs "
                f"{ours.detail.get('executionTimeMs')}, scanTimeMs {ours.detail.get('scanTimeMs')}, rewriteTimeMs "
                f"{ours.detail.get('rewriteTimeMs')}), peak RSS {ours.peak_rss_mb:.0f} MB; delta-rs wall "
                f"{theirs.seconds:.2f} s, CPU {theirs.cpu_seconds:.2f} s (execution_time_ms "
                f"{theirs.detail.get('executionTimeMs')}), peak RSS {theirs.peak_rss_mb:.0f} MB; wall ratio ours/delta-rs "
                f"{ours.seconds / theirs.seconds:.2f}, CPU ratio {ours.cpu_seconds / theirs.cpu_seconds:.2f}",
                flush=True,
            )
            continue
        print(
            f"# {result.case.name}: ours wall {ours.seconds:.1f} s (executionTimeMs "
            f"{ours.detail.get('executionTimeMs')}), Python driver peak {ours.peak_rss_mb:.0f} MB, "
            f"JVM driver peak {ours.detail.get('jvmPeakMb')} MB; delta-rs wall {theirs.seconds:.1f} s "
            f"(execution_time_ms {theirs.detail.get('executionTimeMs')}), peak {theirs.peak_rss_mb:.0f} MB; "
            f"wall ratio ours/delta-rs {ours.seconds / theirs.seconds:.2f}",
            flush=True,
        )
