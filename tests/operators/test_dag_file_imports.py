"""A DAG file that builds the DML operators stays light: the DAG processor parses it on every
loop and every task process parses it again before its task runs, so what it imports is paid
by every task of the DAG. Importing :mod:`airflow_delta.operators.dml` and the specs a MERGE
is written with loads neither pyarrow nor numpy, sqlglot, pandas or pyspark, nor the engine
beyond its error classes; the engine comes with the task's run (checked in a fresh
interpreter, so that nothing an earlier test imported hides an import).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_CHILD = """
import json, sys
import airflow.sdk
from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaMergeOperator, DeltaUpdateOperator
from airflow_delta.spark.specs import MergeClause

DeltaMergeOperator(
    task_id="merge", table="/tmp/t", source={"parquet": "/tmp/s.parquet"}, on="t.id = s.id",
    clauses=(MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)),
    source_alias="s", target_alias="t",
)
DeltaDeleteOperator(task_id="delete", table="/tmp/t", predicate="id = 1")
DeltaUpdateOperator(task_id="update", table="/tmp/t", set={"v": "v + 1"}, predicate="id = 1")
heavy = ("pyarrow", "numpy", "sqlglot", "pandas", "pyspark")
print(json.dumps({
    "heavy": sorted({m.split(".")[0] for m in sys.modules} & set(heavy)),
    "engine": sorted(m for m in sys.modules if m.startswith("airflow_delta.engine.")),
}))
"""


def test_a_dag_file_with_dml_operators_imports_no_heavy_library(tmp_path: Path) -> None:
    env = {"AIRFLOW_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=False, cwd=REPO, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["heavy"] == [], found
    layers = {name.split(".")[2] for name in found["engine"]}
    assert layers <= {"errors", "storage"}, found  # the error classes and the storage option names
