"""``make demo``: the nightly maintenance DAG on a realistic local table, health before and after.

What it does, in order:

1. builds a Delta table under ``--dir`` (default ``.demo/``) through the engine: many small
   files across date partitions, as a streaming ingest leaves them, then DELETEs that
   leave deletion vectors;
2. prints the table's health report (``DeltaTable.health()``, as ``airflow-delta health``
   prints it);
3. runs ``dags_examples/delta_nightly_maintenance.py`` with ``airflow dags test`` in an
   ``AIRFLOW_HOME`` under ``--dir``: ``airflow db migrate`` first, the ``delta_default`` and
   ``spark_local`` (``local[2]``) connections from ``AIRFLOW_CONN_*`` variables, OPTIMIZE
   on Spark. Until the OPTIMIZE task ends, a concurrent writer appends a batch to the
   table every two seconds, as ingestion would;
4. prints the health before and after side by side, checks that every row is still
   there (the table's rows are exactly the ones written, minus the deleted ones), writes
   the file-size charts as PNG and prints their paths, and writes ``summary.json``.

It exits non-zero when the DAG run fails or a row is missing. ``--small`` builds a
smaller table, and ``--airflow-db`` starts Airflow from a copy of an already migrated
database instead of ``airflow db migrate`` (the test suite runs it with both).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.cli import health_lines
from airflow_delta.engine import DeltaError, DeltaTable, HealthReport, size_histogram_png
from scripts.airflow_cli import SPARK_LOCAL_CONNECTIONS, AirflowCli

REPO_ROOT = Path(__file__).resolve().parents[1]
DAG_ID = "delta_nightly_maintenance"
SCHEMA = pa.schema(
    [("id", pa.int64()), ("day", pa.string()), ("country", pa.string()), ("amount", pa.float64())]
)
COUNTRIES = np.array(["DE", "FR", "NL", "PL", "SE", "US"])
# Rows the concurrent writer appends get ids from here up, so they never collide with the table's.
WRITER_FIRST_ID = 1_000_000_000
WRITER_PERIOD_SECONDS = 2.0


@dataclass(frozen=True)
class Size:
    """How big the demo table is: ``days`` partitions, each written by ``appends`` small appends."""

    days: int
    appends: int
    rows_per_file: int


FULL = Size(days=8, appends=30, rows_per_file=4000)  # ~11 MB: compacted files land in a bigger size bucket
SMALL = Size(days=4, appends=15, rows_per_file=50)


def _batch(first_id: int, days: list[str], rows_per_day: int, rng: np.random.Generator) -> pa.Table:
    """``rows_per_day`` rows for each day, ids ``first_id`` up: one small file per day when appended."""
    n = rows_per_day * len(days)
    return pa.table(
        {
            "id": pa.array(np.arange(first_id, first_id + n, dtype=np.int64)),
            "day": pa.array(np.repeat(np.array(days), rows_per_day)),
            "country": pa.array(COUNTRIES[rng.integers(0, len(COUNTRIES), n)]),
            "amount": pa.array(np.round(rng.gamma(2.0, 20.0, n), 2)),
        },
        schema=SCHEMA,
    )


# The DELETEs of the demo table: each leaves deletion vectors on the files it touches.
DELETES = ("country = 'US' AND amount < 10", "amount > 150", "day = '2026-01-02' AND country = 'PL'")


def input_batches(size: Size) -> Iterator[pa.Table]:
    """The demo table's appends, in order: ``days`` rows groups of ``rows_per_file`` each, same data every run."""
    days = [f"2026-01-{d:02d}" for d in range(1, size.days + 1)]
    rng = np.random.default_rng(8)
    for append in range(size.appends):
        yield _batch(append * size.rows_per_file * size.days, days, size.rows_per_file, rng)


def build_table(path: Path, size: Size) -> pa.Table:
    """The demo table: ``days * appends`` small files, then :data:`DELETES`; returns the live rows' ids."""
    table = DeltaTable.create(
        str(path),
        SCHEMA,
        partition_by=["day"],
        properties={
            "delta.enableDeletionVectors": "true",
            # A demo shows VACUUM at work today; production tables keep the 7-day default.
            "delta.deletedFileRetentionDuration": "interval 0 hours",
            # With no retention, a checkpoint drops the tombstones a VACUUM lite would
            # delete by: the writers' own checkpoints would leave the DAG's VACUUM nothing.
            "delta.checkpointInterval": "1000",
        },
    )
    for batch in input_batches(size):
        table.append(batch)
    for predicate in DELETES:
        table.delete(predicate)
    return table.snapshot().to_arrow(columns=["id"])


@dataclass
class ConcurrentWriter:
    """Appends a batch to a new day's partition every few seconds, as ingestion would.

    It stops when told, when ``done()`` says so (the demo: once the OPTIMIZE task has
    ended, so that the writes overlap the compaction) or after ``max_batches``.
    """

    path: Path
    rows_per_batch: int
    max_batches: int
    done: Callable[[], bool] = lambda: False
    versions: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="concurrent-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        table = DeltaTable(str(self.path))
        rng = np.random.default_rng(9)
        for n in range(self.max_batches):
            if self._stop.wait(WRITER_PERIOD_SECONDS) or self.done():
                return
            batch = _batch(WRITER_FIRST_ID + n * self.rows_per_batch, ["2026-02-01"], self.rows_per_batch, rng)
            try:
                result = table.append(batch)
            except DeltaError as exc:  # reported at the end; the demo then fails
                self.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            self.versions.append(result.version)
            self.ids.extend(batch.column("id").to_pylist())


def side_by_side(left: list[str], right: list[str], gap: int = 4) -> str:
    width = max(map(len, left), default=0) + gap
    return "\n".join(f"{a:<{width}}{b}" for a, b in itertools.zip_longest(left, right, fillvalue=""))


def _task_line(task_id: str, outcome: dict[str, Any]) -> str:
    state = outcome["tasks"].get(task_id, "not run")
    xcom = outcome["xcoms"].get(task_id) or {}
    metrics = xcom.get("metrics") or {}
    details = {
        "optimize": f"{metrics.get('numFilesRemoved', 0)} files -> {metrics.get('numFilesAdded', 0)}",
        "vacuum": f"{metrics.get('numDeletedFiles', 0)} files deleted",
        "checkpoint": f"version {xcom.get('version')}",
    }.get(task_id, "")
    where = f" on {xcom['execution']}" if xcom.get("execution") else ""
    return f"  {task_id:<14} {state}{where}" + (f": {details}" if xcom and details else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=REPO_ROOT / ".demo", help="where the table and Airflow live")
    parser.add_argument("--small", action="store_true", help="a smaller table (for the test suite)")
    parser.add_argument(
        "--airflow-db",
        type=Path,
        help="start Airflow from a copy of this SQLite database, already migrated by this Airflow, "
        "instead of running airflow db migrate (the test suite passes its session's one)",
    )
    args = parser.parse_args(argv)
    size = SMALL if args.small else FULL
    started = time.monotonic()

    work = args.dir.resolve()
    shutil.rmtree(work, ignore_errors=True)  # a rerun starts from scratch
    work.mkdir(parents=True)
    table_path, home = work / "events", work / "airflow"
    home.mkdir()

    print(f"Building {table_path}: {size.days} daily partitions x {size.appends} appends, then {len(DELETES)} DELETEs")
    live_ids = build_table(table_path, size).column("id")
    table = DeltaTable(str(table_path))
    before = table.health()
    print("\n".join(health_lines(before, "before")))

    airflow = AirflowCli(
        home, env_vars={**SPARK_LOCAL_CONNECTIONS, "DELTA_NIGHTLY_OPTIMIZE_EXECUTION": "spark"}, logging_level="INFO"
    )
    if args.airflow_db is None:
        print(f"\nairflow db migrate (AIRFLOW_HOME={home})")
        airflow.migrate()
    else:
        print(f"\nAirflow's database: a copy of {args.airflow_db} (AIRFLOW_HOME={home})")
        shutil.copyfile(args.airflow_db, home / "airflow.db")

    dag_log = work / "airflow-dags-test.log"
    print(f"airflow dags test {DAG_ID} (OPTIMIZE on Spark local[2]); a writer appends every "
          f"{WRITER_PERIOD_SECONDS:g}s until the OPTIMIZE ends; output in {dag_log}")
    # At most a quarter as many files as the table has: the demo shows what compaction gains.
    writer = ConcurrentWriter(
        table_path,
        rows_per_batch=size.rows_per_file,
        max_batches=size.days * size.appends // 4,
        done=lambda: airflow.task_states(DAG_ID).get("optimize") in ("success", "failed", "skipped", "upstream_failed"),
    )
    writer.start()
    try:
        with open(dag_log, "wb") as output:
            conf = json.dumps({"table_uri": str(table_path)})
            returncode = airflow.start("dags", "test", DAG_ID, "--conf", conf, output=output).wait()
    finally:
        writer.stop()
    outcome = airflow.latest_run(DAG_ID)
    print(f"DAG run {outcome['state']} (exit code {returncode}); the writer committed "
          f"{len(writer.versions)} appends ({len(writer.ids)} rows) during it")
    for task_id in ("health_report", "optimize", "vacuum", "checkpoint"):
        print(_task_line(task_id, outcome))

    after = table.health()
    print()
    print(side_by_side(health_lines(before, "BEFORE"), health_lines(after, "AFTER")))

    expected = pa.concat_arrays([live_ids.combine_chunks(), pa.array(writer.ids, pa.int64())])
    actual = table.snapshot().to_arrow(columns=["id"]).column("id").combine_chunks()
    rows_kept = same_ids(actual, expected)
    print(f"\nrows: {len(expected)} expected (table minus deletes, plus the writer's), {len(actual)} in the "
          f"table: {'none lost' if rows_kept else 'MISMATCH'}")

    charts = {}
    for name, report in (("before", before), ("after", after)):
        charts[name] = work / f"file-sizes-{name}.png"
        charts[name].write_bytes(size_histogram_png(report))
    print(f"file-size charts: {charts['before']} and {charts['after']}")

    summary = {
        "table": str(table_path),
        "dag_run": outcome,
        "before": _report_summary(before),
        "after": _report_summary(after),
        "writer": {"versions": writer.versions, "rows": len(writer.ids), "errors": writer.errors},
        "rows": {"expected": len(expected), "actual": len(actual), "none_lost": rows_kept},
        "charts": {name: str(path) for name, path in charts.items()},
        "seconds": round(time.monotonic() - started, 1),
    }
    (work / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(f"summary: {work / 'summary.json'} ({summary['seconds']} s)")
    for error in writer.errors:
        print(f"the concurrent writer failed: {error}")
    ok = returncode == 0 and outcome["state"] == "success" and rows_kept and not writer.errors
    return 0 if ok else 1


def same_ids(actual: pa.Array, expected: pa.Array) -> bool:
    """Whether two id arrays hold the same ids, as many times each."""
    if len(actual) != len(expected):
        return False
    return bool(pc.all(pc.equal(actual.take(pc.sort_indices(actual)), expected.take(pc.sort_indices(expected)))).as_py())


def _report_summary(report: HealthReport) -> dict[str, Any]:
    return {
        "version": report.version,
        "num_files": report.num_files,
        "small_files": report.small_files,
        "files_with_deletion_vectors": report.files_with_deletion_vectors,
        "tombstones": report.tombstones,
        "total_rows": report.total_rows,
        "deleted_rows": report.deleted_rows,
    }


if __name__ == "__main__":
    sys.exit(main())
