"""``scripts/demo.py`` (what ``make demo`` runs), as a user runs it: a fresh process, ``--small``,
its Airflow started from the session's migrated database (``--airflow-db``).

The demo's own row check is not trusted: delta-rs and delta-kernel-rs read the table it
leaves, and the test rebuilds the expected rows from the demo's deterministic input (the
ids it wrote, the DELETEs it ran, the concurrent writer's committed batches).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import deltalake
import duckdb
import pyarrow as pa
import pytest

from scripts.demo import DELETES, SMALL, WRITER_FIRST_ID, input_batches
from tests.airflow_layer import migrated_database
from tests.oracles import read_with_deltars, read_with_kernel

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    work = tmp_path_factory.mktemp("demo")
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # The demo's OPTIMIZE job is small here (--small) but, unlike a small DELETE, gets no C1-only
    # option from the hook: every JVM it starts runs C1 only, with the serial GC (the options
    # tests.airflow_layer.tiny_job_driver_conf gives the other tests' jobs), through the Java
    # launcher's own variable, since the demo's connections are its own. The hook still adds the
    # class archive. (Each JVM notes the variable on stderr, in the task log.)
    env["JDK_JAVA_OPTIONS"] = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    result = subprocess.run(
        # The session's one migrated database (what `airflow db migrate` writes, tests/airflow_layer.py)
        # instead of a migration of the demo's own.
        [sys.executable, "-m", "scripts.demo", "--small", "--dir", str(work),
         "--airflow-db", str(migrated_database(tmp_path_factory))],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    return result, work


@pytest.mark.slow
def test_the_demo_compacts_under_a_concurrent_writer_and_loses_no_row(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, work = demo_run
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    summary = json.loads((work / "summary.json").read_text())
    table_path = summary["table"]

    assert summary["dag_run"]["state"] == "success"
    assert summary["dag_run"]["tasks"] == dict.fromkeys(["health_report", "optimize", "vacuum", "checkpoint"], "success")
    assert summary["dag_run"]["xcoms"]["optimize"]["execution"] == "spark"
    # The after-report shows fewer files, and no deletion vector is left in the compacted partitions.
    assert summary["after"]["num_files"] < summary["before"]["num_files"]
    assert summary["before"]["files_with_deletion_vectors"] > 0 == summary["after"]["files_with_deletion_vectors"]
    # The writer committed while the DAG ran, between its commits (the versions interleave).
    writer_versions = summary["writer"]["versions"]
    assert writer_versions and summary["writer"]["errors"] == []
    assert min(writer_versions) < summary["dag_run"]["xcoms"]["checkpoint"]["version"]

    # The expected ids: the demo's input (the same every run) minus its DELETEs, applied by
    # DuckDB, plus the writer's ids (50 per committed batch, from 1e9 up).
    appended = pa.concat_tables(input_batches(SMALL))
    con = duckdb.connect()
    con.register("appended", appended)
    survivors = {row[0] for row in con.execute(f"SELECT id FROM appended WHERE NOT ({' OR '.join(DELETES)})").fetchall()}
    writer_ids = {WRITER_FIRST_ID + n for n in range(SMALL.rows_per_file * len(writer_versions))}
    assert appended.num_rows == 3000
    expected = survivors | writer_ids
    assert len(expected) == summary["rows"]["expected"]

    assert sorted(row["id"] for row in read_with_deltars(table_path)) == sorted(expected)
    assert sorted(row["id"] for row in read_with_kernel(table_path)) == sorted(expected)
    # VACUUM deleted what OPTIMIZE replaced: the files on disk are the live ones.
    on_disk = {p for p in Path(table_path).rglob("*.parquet") if "_delta_log" not in p.parts}
    assert on_disk == {Path(uri) for uri in deltalake.DeltaTable(table_path).file_uris()}
    for chart in summary["charts"].values():
        assert Path(chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "BEFORE" in result.stdout and "AFTER" in result.stdout and "none lost" in result.stdout


@pytest.mark.slow
def test_the_task_log_says_what_was_read_planned_done_and_committed(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, work = demo_run
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    log = (work / "airflow-dags-test.log").read_text()
    summary = json.loads((work / "summary.json").read_text())
    optimized = summary["dag_run"]["xcoms"]["optimize"]
    table = re.escape(summary["table"])
    assert re.search(rf"OptimizeOperator on {table}: latest version \d+", log)
    plan = re.search(rf"OPTIMIZE plan of {table} at version \d+: (\d+) file\(s\), (\d+) bytes in (\d+) partition\(s\)", log)
    assert plan is not None and int(plan[1]) >= 60 and int(plan[3]) >= 4
    # Progress while Spark works: every task of the compaction stage, as it finishes.
    progress = re.findall(r"Spark progress: stage (\S+), (\d+) of (\d+) task\(s\) done", log)
    assert progress and {done for _, done, total in progress if done == total}
    committed = rf"OPTIMIZE of {table} on Spark: committed version {optimized['version']} \(read {optimized['read_version']}\)"
    assert re.search(committed, log)
    assert re.search(rf"VacuumOperator on {table}: latest version \d+", log)
