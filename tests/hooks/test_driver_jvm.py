"""The driver JVM's class-data-sharing archive: named by Spark's jars and the Java runtime, kept only when complete.

The end-to-end test runs real ``spark-submit``s through ``DeltaHook``: a failed one
leaves no archive, a successful one writes it, and a JVM started from it loads Spark's
classes from it (HotSpot's class-loading log says where each class came from).
"""

from __future__ import annotations

import os
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
    empty = archive.new_dump()
    empty.write_bytes(b"")
    assert not archive.keep(empty) and not archive.exists  # a JVM that wrote nothing

    first, second = archive.new_dump(), archive.new_dump()
    assert first != second  # concurrent first jobs write files of their own
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
    dump = archive.new_dump()
    dump.write_bytes(b"new")

    assert archive.keep(dump)

    assert sorted(p.name for p in cache.iterdir()) == sorted([archive.path.name, unrelated.name])


def test_a_new_dump_removes_dumps_abandoned_over_an_hour_ago(tmp_path: Path) -> None:
    archive = DriverClassArchive(tmp_path / "spark-driver-classes-k.jsa")
    abandoned, running = archive.new_dump(), archive.new_dump()
    abandoned.write_bytes(b"killed while writing")
    running.write_bytes(b"being written")
    two_hours_ago = time.time() - 7200
    os.utime(abandoned, (two_hours_ago, two_hours_ago))
    other = tmp_path / "other.tmp"
    other.write_bytes(b"not an archive")
    os.utime(other, (two_hours_ago, two_hours_ago))

    archive.new_dump()

    assert not abandoned.exists()
    assert running.exists() and other.exists()


def _driver_java_options(hook: DeltaHook, spec: DeleteSpec, **kwargs: object) -> str | None:
    submit_hook = hook.spark_submit_hook(spec, **kwargs)  # type: ignore[arg-type]
    command = submit_hook._build_spark_submit_command(str(DeltaHook.DML_APPLICATION))
    confs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    found = [c.split("=", 1)[1] for c in confs if c.startswith("spark.driver.extraJavaOptions=")]
    return found[0] if found else None


@pytest.mark.usefixtures("airflow_home")
def test_a_client_mode_driver_writes_or_uses_the_archive_a_cluster_mode_one_neither(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW_DELTA_CACHE", str(tmp_path / "cache"))
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "local[2]"})
    set_connection(monkeypatch, "spark_yarn", {"conn_type": "spark", "host": "yarn"})
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local"}})
    spec = DeleteSpec(table=TableRef(uri=str(tmp_path / "t")), predicate="id = 1", identity=IDENTITY)
    archive = worker_driver_class_archive()
    assert archive is not None and archive.path.parent == tmp_path / "cache"

    writing = _driver_java_options(DeltaHook(), spec, small_job=True)
    assert writing is not None
    c1, dump, quiet = writing.split(" ")
    assert c1 == SMALL_JOB_DRIVER_JAVA_OPTIONS
    assert dump.startswith(f"-XX:ArchiveClassesAtExit={archive.path.parent}/.{archive.path.name}.")
    assert quiet == "-Xlog:cds=off"  # no warning per class it cannot archive, in the task log

    archive.path.write_bytes(b"an archive")
    assert _driver_java_options(DeltaHook(), spec) == archive.use_option()
    # The user's JVM options are taken as they are.
    assert _driver_java_options(DeltaHook(), spec, conf={"spark.driver.extraJavaOptions": "-Xss4m"}) == "-Xss4m"
    # A cluster-mode driver runs elsewhere: the worker's archive means nothing there.
    assert _driver_java_options(DeltaHook(spark_conn_id="spark_yarn", deploy_mode="cluster"), spec) is None


@pytest.mark.slow
@pytest.mark.usefixtures("airflow_home")
def test_the_first_successful_job_writes_the_archive_that_later_drivers_load_sparks_classes_from(
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

    # A failed spark-submit's JVM still writes at its exit: that archive is not kept.
    with pytest.raises(DeltaSparkJobError):
        DeltaHook(spark_conn_id="spark_nowhere").submit(spec("id = 7"), small_job=True)
    assert sorted(path.suffix for path in cache.iterdir()) == [".zip"]
    assert DeltaTable(table_path).version() == 2

    DeltaHook().submit(spec("id = 7"), small_job=True)
    assert archive.exists
    assert sorted(path.suffix for path in cache.iterdir()) == [".jsa", ".zip"]  # no temporary left
    assert DeltaTable(table_path).version() == 3
    assert_oracles_read(table_path, [row for row in rows if row["id"] != 7])

    # A driver started from the archive takes Spark's classes from it.
    program = tmp_path / "empty.py"
    program.write_text('from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate().stop()\n')
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
