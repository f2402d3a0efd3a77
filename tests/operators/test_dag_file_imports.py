"""A DAG file that builds the DML operators stays light: the DAG processor parses it on every
loop and every task process parses it again before its task runs, so what it imports is paid
by every task of the DAG. Importing :mod:`airflow_delta.operators.dml` and the specs a MERGE
is written with loads neither pyarrow nor numpy, sqlglot, pandas or pyspark, nor the engine
beyond its error classes; the engine comes with the task's run (checked in a fresh
interpreter, so that nothing an earlier test imported hides an import). A task's check of its
SQL text needs sqlglot only for text that is not plain.
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
out = {
    "heavy": sorted({m.split(".")[0] for m in sys.modules} & set(heavy)),
    "engine": sorted(m for m in sys.modules if m.startswith("airflow_delta.engine.")),
}

# At run time: plain SQL text is checked without sqlglot; text that is not plain goes to
# sqlglot's tokens, which still refuse what Spark is sure to refuse.
from airflow_delta.engine import InvalidFilterError
from airflow_delta.operators.dml import _refuse_text_spark_refuses
from airflow_delta.spark.specs import MergeSource, MergeSpec, TableRef, TaskIdentity

def merge_spec(on):
    return MergeSpec(
        target=TableRef("/tmp/t"), source=MergeSource(parquet="/tmp/s.parquet"), on=on,
        clauses=(MergeClause("matched_update", assignments={"v": "s.v * 2 - 1"}, condition="t.v <> s.v"),),
        identity=TaskIdentity("d", "t", "r"), source_alias="s", target_alias="t",
    )

_refuse_text_spark_refuses(merge_spec("t.id = s.id AND (t.p >= 1 OR s.q % 2 = 0)"))
out["sqlglot_after_plain_text"] = "sqlglot" in sys.modules
try:
    _refuse_text_spark_refuses(merge_spec("t.id = s.id; DROP TABLE t"))
    out["refused"] = None
except InvalidFilterError as error:
    out["refused"] = str(error)
out["sqlglot_after_other_text"] = "sqlglot" in sys.modules
print(json.dumps(out))
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
    assert found["sqlglot_after_plain_text"] is False, found
    assert found["refused"] is not None and "';' ends a statement" in found["refused"], found
    assert found["sqlglot_after_other_text"] is True, found
