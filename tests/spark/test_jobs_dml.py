"""The DML program as spark-submit runs it: by file path, the engine from the py_files zip, one line on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.spark.job_result import JobResult
from airflow_delta.spark.jobs import (
    DML_PROGRAM,
    ERROR_LINE_PREFIX,
    EXIT_DELTA_ERROR,
    RESULT_LINE_PREFIX,
    SMALL_JOB_DRIVER_JAVA_OPTIONS,
)
from airflow_delta.spark.packaging import engine_py_files
from airflow_delta.spark.specs import DeleteSpec, TableRef, TaskIdentity, UpdateSpec
from tests.oracles import assert_oracles_read

pytestmark = pytest.mark.slow

SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
SCHEMA = pa.schema([("id", pa.int64()), ("label", pa.string())])


@pytest.fixture(scope="module")
def py_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The engine's ``--py-files`` zip, built once for the module's spark-submits."""
    return engine_py_files(tmp_path_factory.mktemp("py-files-cache"))


def _spark_submit(tmp_path: Path, py_files: Path, *program_args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the code must come from the zip
    env |= {
        "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    command = [
        SPARK_SUBMIT,
        "--master", "local[2]",
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--conf", "spark.ui.enabled=false",
        # As the hook submits a small job: the C1 compiler only (C2 costs as much CPU as the JVM's start).
        "--driver-java-options", SMALL_JOB_DRIVER_JAVA_OPTIONS,
        "--conf", "spark.sql.shuffle.partitions=2",
        "--py-files", str(py_files),
        DML_PROGRAM,
        *program_args,
    ]
    workdir = tmp_path / "driver"
    workdir.mkdir(exist_ok=True)
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=540, check=False)


def _lines(stdout: str, prefix: str) -> list[str]:
    return [line[len(prefix) + 1 :] for line in stdout.splitlines() if line.startswith(prefix + " ")]


def _table(path: str) -> None:
    table = DeltaTable.create(path, SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    table.append(pa.table({"id": list(range(10)), "label": [f"r{i}" for i in range(10)]}, schema=SCHEMA))


def test_a_delete_prints_its_result_and_commits(tmp_path: Path, table_path: str, py_files: Path) -> None:
    _table(table_path)
    spec = DeleteSpec(TableRef(table_path), "id % 3 = 0", TaskIdentity("dag", "delete", "run"))
    done = _spark_submit(tmp_path, py_files, "--spec", spec.to_json())
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = _lines(done.stdout, RESULT_LINE_PREFIX)
    result = JobResult.from_json(line)
    assert result.version == 2 and result.read_version == 1 and result.operation == "DELETE"
    assert result.metrics["numDeletedRows"] == 4 and result.metrics["numDeletionVectorsAdded"] == 1
    assert _lines(done.stdout, ERROR_LINE_PREFIX) == []
    assert_oracles_read(table_path, [{"id": i, "label": f"r{i}"} for i in range(10) if i % 3])
    # What the program printed is what the log says.
    commit = DeltaTable(table_path).history(limit=1)[0]
    assert JobResult.from_commit_info(commit["version"], commit) == result


def test_an_engine_error_prints_its_class_and_exits_3(tmp_path: Path, table_path: str, py_files: Path) -> None:
    _table(table_path)
    spec = UpdateSpec(TableRef(table_path), {"id": "label"}, "id = 1", TaskIdentity("dag", "update", "run"))
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.to_json())
    done = _spark_submit(tmp_path, py_files, "--spec-file", str(spec_file))
    assert done.returncode == EXIT_DELTA_ERROR, done.stderr[-3000:]
    [line] = _lines(done.stdout, ERROR_LINE_PREFIX)
    report = json.loads(line)
    assert report["class"] == "InvalidArgumentError" and report["retryable"] is False
    assert "UpdateSpec.set['id']" in report["message"]
    assert _lines(done.stdout, RESULT_LINE_PREFIX) == []
    assert DeltaTable(table_path).version() == 1
