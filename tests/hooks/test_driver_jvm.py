"""The driver JVM's class-data-sharing archive: named by Spark's jars and the Java runtime, kept only when complete.

The end-to-end test runs real ``spark-submit``s through ``DeltaHook``: a failed job starts
no writer, a successful one returns with the archive being written by a background
process (never by the job's own JVM), a killed writer leaves nothing, two starts run one
writer, and a JVM started from the archive loads Spark's classes from it (HotSpot's
class-loading log says where each class came from).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.hooks.delta import SMALL_JOB_DRIVER_JAVA_OPTIONS, DeltaHook, DeltaSparkJobError
from airflow_delta.hooks.driver_jvm import (
    DriverClassArchive,
    driver_class_archive,
    java_executable,
    worker_driver_class_archive,
)
from airflow_delta.spark.specs import DeleteSpec, TableRef, TaskIdentity
from tests.airflow_layer import make_table, set_connection
from tests.oracles import assert_oracles_read

IDENTITY = TaskIdentity("dag", "delete_rows", "manual__2026-01-01", -1)


def _fake_spark_home(root: Path, jars: dict[str, bytes]) -> Path:
    (root / "jars").mkdir(parents=True)
    for name, body in jars.items():
        (root / "jars" / name).write_bytes(body)
    return root


def _fake_java(root: Path) -> dict[str, str]:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "java").write_bytes(b"#!/bin/sh\n")
    return {"JAVA_HOME": str(root), "PATH": ""}


def test_the_archive_is_named_by_sparks_jars_and_the_java_runtime(tmp_path: Path) -> None:
    spark_home = _fake_spark_home(tmp_path / "spark", {"spark-core.jar": b"core", "spark-sql.jar": b"sql"})
    env = _fake_java(tmp_path / "jdk")
    cache = tmp_path / "cache"
    first = driver_class_archive(spark_home, env, cache)
    assert first is not None and first.path.parent == cache and first.path.suffix == ".jsa"
    assert driver_class_archive(spark_home, env, cache) == first  # stable

    (spark_home / "jars" / "README").write_text("not a jar")
    assert driver_class_archive(spark_home, env, cache) == first  # only jars count
    (spark_home / "jars" / "spark-sql.jar").write_bytes(b"sql, upgraded")
    upgraded = driver_class_archive(spark_home, env, cache)
    assert upgraded is not None and upgraded != first
    other_java = driver_class_archive(spark_home, _fake_java(tmp_path / "jdk2"), cache)
    assert other_java is not None and other_java not in (first, upgraded)


def test_without_a_java_or_jars_there_is_no_archive(tmp_path: Path) -> None:
    spark_home = _fake_spark_home(tmp_path / "spark", {"spark-core.jar": b"core"})
    assert driver_class_archive(spark_home, {"PATH": str(tmp_path / "empty")}, tmp_path) is None
    assert java_executable({"JAVA_HOME": str(tmp_path / "no-jdk")}) is None
    no_jars = _fake_spark_home(tmp_path / "empty-spark", {})
    assert driver_class_archive(no_jars, _fake_java(tmp_path / "jdk"), tmp_path) is None
    assert driver_class_archive(tmp_path / "missing", _fake_java(tmp_path / "jdk3"), tmp_path) is None


def test_a_dump_is_kept_once_and_never_left_behind(tmp_path: Path) -> None:
    archive = DriverClassArchive(tmp_path / "cache" / "spark-driver-classes-k.jsa")
    archive.path.parent.mkdir()
    empty = archive.path.with_name(f".{archive.path.name}.a.tmp")
    empty.write_bytes(b"")
    assert not archive.keep(empty) and not archive.exists  # a JVM that wrote nothing

    first, second = (archive.path.with_name(f".{archive.path.name}.{n}.tmp") for n in "bc")
    first.write_bytes(b"first")
    second.write_bytes(b"second")
    first.chmod(0o444)  # as the JVM leaves it
    assert archive.keep(first)
    assert not archive.keep(second)  # the first one in place wins
    assert archive.path.read_bytes() == b"first"
    assert oct(archive.path.stat().st_mode & 0o777) == "0o644"
    assert list(archive.path.parent.iterdir()) == [archive.path]
    assert archive.use_option() == f"-XX:SharedArchiveFile={archive.path}"


def test_a_new_archive_replaces_the_archives_of_earlier_installs(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    older = [cache / "spark-driver-classes-old1.jsa", cache / "spark-driver-classes-old2.jsa"]
    for path in older:
        path.write_bytes(b"an earlier install's archive")
    unrelated = cache / "airflow_delta-py-files-x.zip"
    unrelated.write_bytes(b"not an archive")
    archive = DriverClassArchive(cache / "spark-driver-classes-new.jsa")
    dump = cache / f".{archive.path.name}.x.tmp"
    dump.write_bytes(b"new")

    assert archive.keep(dump)

    assert sorted(p.name for p in cache.iterdir()) == sorted([archive.path.name, unrelated.name])


def test_no_writer_starts_while_one_holds_the_lock_or_after_a_recent_failure(tmp_path: Path) -> None:
    archive = DriverClassArchive(tmp_path / "cache" / "spark-driver-classes-k.jsa")
    archive.path.parent.mkdir()
    assert not archive.being_written()
    # Another writer: a process that holds the lock file's lock (as a writer's JVM does).
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
         "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)", str(archive.lock_path)],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        assert archive.being_written()
        assert archive.write_in_background(os.environ) is None
    finally:
        holder.kill()
        holder.wait()
    assert not archive.being_written()  # a killed holder frees the lock
    archive.failed_log_path.write_text("the last writer failed")
    assert archive.write_in_background(os.environ) is None
    assert not archive.being_written() and not archive.log_path.exists()


def _driver_java_options(hook: DeltaHook, spec: DeleteSpec, **kwargs: object) -> str | None:
    submit_hook = hook.spark_submit_hook(spec, **kwargs)  # type: ignore[arg-type]
    command = submit_hook._build_spark_submit_command(str(DeltaHook.DML_APPLICATION))
    confs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    found = [c.split("=", 1)[1] for c in confs if c.startswith("spark.driver.extraJavaOptions=")]
    return found[0] if found else None


@pytest.mark.usefixtures("airflow_home")
def test_a_client_mode_driver_uses_the_archive_and_never_writes_it_a_cluster_mode_one_neither(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW_DELTA_CACHE", str(tmp_path / "cache"))
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "local[2]"})
    set_connection(monkeypatch, "spark_yarn", {"conn_type": "spark", "host": "yarn"})
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local"}})
    spec = DeleteSpec(table=TableRef(uri=str(tmp_path / "t")), predicate="id = 1", identity=IDENTITY)
    archive = worker_driver_class_archive()
    assert archive is not None and archive.path.parent == tmp_path / "cache"

    # The job's own JVM never writes the archive (it would hold the task at its exit).
    assert _driver_java_options(DeltaHook(), spec, small_job=True) == SMALL_JOB_DRIVER_JAVA_OPTIONS
    assert _driver_java_options(DeltaHook(), spec) is None

    archive.path.write_bytes(b"an archive")
    assert _driver_java_options(DeltaHook(), spec) == archive.use_option()
    # The user's JVM options are taken as they are.
    assert _driver_java_options(DeltaHook(), spec, conf={"spark.driver.extraJavaOptions": "-Xss4m"}) == "-Xss4m"
    # A cluster-mode driver runs elsewhere: the worker's archive means nothing there.
    assert _driver_java_options(DeltaHook(spark_conn_id="spark_yarn", deploy_mode="cluster"), spec) is None


def _wait_for_writer(archive: DriverClassArchive, timeout: float = 900.0) -> None:
    """Wait until no writer holds the lock (its processes exited), looking every tenth of a second."""
    deadline = time.monotonic() + timeout
    while archive.being_written():
        assert time.monotonic() < deadline, "the background writer did not finish"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.usefixtures("airflow_home")
def test_the_first_successful_job_starts_a_background_writer_whose_archive_later_drivers_load_classes_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("AIRFLOW_DELTA_CACHE", str(cache))
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "local[1]"})
    set_connection(monkeypatch, "spark_nowhere", {"conn_type": "spark", "host": "nowhere://x"})
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local"}})
    table_path = str(tmp_path / "table")
    rows = make_table(table_path, dvs=True)
    archive = worker_driver_class_archive()
    assert archive is not None and archive.path.parent == cache

    def spec(predicate: str) -> DeleteSpec:
        return DeleteSpec(table=TableRef(uri=table_path), predicate=predicate, identity=IDENTITY)

    # A failed job starts no writer.
    with pytest.raises(DeltaSparkJobError):
        DeltaHook(spark_conn_id="spark_nowhere").submit(spec("id = 7"), small_job=True)
    assert sorted(path.suffix for path in cache.iterdir()) == [".zip"]
    assert DeltaTable(table_path).version() == 2

    # The job returns right after its commit: the archive is written by another process, later.
    DeltaHook().submit(spec("id = 7"), small_job=True)
    assert DeltaTable(table_path).version() == 3
    assert_oracles_read(table_path, [row for row in rows if row["id"] != 7])
    assert archive.being_written() and not archive.exists
    writer = int(archive.lock_path.read_text())
    # A second start while it runs starts nothing (as a concurrent job's would).
    assert archive.write_in_background(os.environ) is None

    # A killed writer (its whole session: Python, spark-submit's JVM) leaves no archive and frees the lock.
    os.killpg(writer, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while archive.being_written() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not archive.being_written() and not archive.exists
    assert not archive.failed_log_path.exists()  # killed, not failed: the next try is not put off

    # The next try, with two starts at once: one writer, one archive, no temporary file left.
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    started = [archive.write_in_background(env, SMALL_JOB_DRIVER_JAVA_OPTIONS) for _ in range(2)]
    assert started[0] is not None and started[1] is None
    _wait_for_writer(archive)
    if not archive.exists:
        pytest.fail(f"the writer failed:\n{archive.failed_log_path.read_text()[-4000:]}")
    assert sorted(path.suffix for path in cache.iterdir()) == [".jsa", ".lock", ".log", ".zip"]

    # A later job maps the archive.
    submit_hook = DeltaHook().spark_submit_hook(spec("id = 8"), small_job=True)
    assert submit_hook._conf["spark.driver.extraJavaOptions"].endswith(archive.use_option())
    # A driver started from the archive takes Spark's classes from it. The program only has the
    # driver JVM load SparkContext's class (through the gateway spark-submit gives it): starting
    # a SparkContext would load the same class from the same place, and cost seconds more.
    program = tmp_path / "load_spark_context_class.py"
    program.write_text(
        "from pyspark import SparkContext\n"
        "SparkContext._ensure_initialized()\n"
        "SparkContext._jvm.java.lang.Class.forName('org.apache.spark.SparkContext')\n"
    )
    loaded = tmp_path / "class-load.log"
    options = f"{SMALL_JOB_DRIVER_JAVA_OPTIONS} {archive.use_option()} -Xlog:class+load=info:file={loaded}"
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    subprocess.run(
        [spark_submit, "--master", "local[1]", "--conf", f"spark.driver.extraJavaOptions={options}", str(program)],
        env=env, check=True, capture_output=True, cwd=tmp_path,
    )
    (context_line,) = [line for line in loaded.read_text().splitlines() if " org.apache.spark.SparkContext " in line]
    assert "source: shared objects file (top)" in context_line, context_line
