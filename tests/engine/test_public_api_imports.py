"""The engine's public API loads each name on first use (PEP 562), so what a process imports
is what it uses: ``import airflow_delta.engine`` loads no engine module and not pyarrow,
``from airflow_delta.engine import DeltaTable`` loads the facade with the storage layer only,
and a lite VACUUM dry run loads neither the commit path nor the checkpoint writer (nor pandas,
which pyarrow imports to convert a Python object); nor does an OPTIMIZE load pandas.

Each case runs in a fresh interpreter, so that nothing an earlier test imported hides an import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import airflow_delta.engine as engine
from airflow_delta.engine import DeltaTable

REPO = Path(__file__).resolve().parents[2]

_CHILD = """
import json, sys
from datetime import timedelta

def loaded(prefix):
    return sorted(m for m in sys.modules if m == prefix or m.startswith(prefix + "."))

out = {}
import airflow_delta.engine as engine
out["import"] = {"engine": loaded("airflow_delta.engine")[1:], "pyarrow": loaded("pyarrow")[:1]}
from airflow_delta.engine import DeltaTable
out["DeltaTable"] = loaded("airflow_delta.engine")
result = DeltaTable(sys.argv[1]).vacuum(
    mode="lite", dry_run=True, retention=timedelta(0), enforce_retention_duration=False
)
out["vacuum"] = {"files": result.num_files_to_delete, "engine": loaded("airflow_delta.engine"),
                 "heavy": [m for m in ("pandas", "pyarrow.dataset", "sqlglot", "numpy.ma") if m in sys.modules]}
compacted = DeltaTable(sys.argv[1]).optimize()
out["optimize"] = {"removed": compacted.metrics["numFilesRemoved"], "pandas": "pandas" in sys.modules}
print(json.dumps(out))
"""


def _table_with_a_removed_file(root: Path) -> str:
    schema = pa.schema([("id", pa.int64())])
    table = DeltaTable.create(str(root), schema)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}, schema=schema))
    table.append(pa.table({"id": pa.array([3], pa.int64())}, schema=schema))
    table.delete("id = 3")  # removes the second file whole: one file for a lite VACUUM
    table.append(pa.table({"id": pa.array([4], pa.int64())}, schema=schema))  # two live files to compact
    return str(root)


def test_imports_follow_use(tmp_path: Path) -> None:
    path = _table_with_a_removed_file(tmp_path / "t")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, path], capture_output=True, text=True, check=False, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["import"] == {"engine": [], "pyarrow": []}, found
    facade = set(found["DeltaTable"])
    assert "airflow_delta.engine.table" in facade
    layers = {name.split(".")[2] for name in facade if name.count(".") >= 2}
    assert layers <= {"table", "errors", "model", "storage"}, sorted(facade)
    assert found["vacuum"]["files"] == 1, found
    assert found["vacuum"]["heavy"] == [], found
    vacuum = set(found["vacuum"]["engine"])
    assert "airflow_delta.engine.operations.vacuum" in vacuum
    assert not {n for n in vacuum if n.startswith("airflow_delta.engine.write.")}, sorted(vacuum)
    assert "airflow_delta.engine.checkpoint.writer" not in vacuum, sorted(vacuum)
    # OPTIMIZE stages its removes as Arrow columns: no Python value reaches a pyarrow conversion.
    assert found["optimize"] == {"removed": 2, "pandas": False}, found


def test_every_public_name_is_listed_and_resolves_to_its_module() -> None:
    assert set(engine.__all__) == set(engine._MODULE_OF), "a public name without a module, or the reverse"
    assert set(engine.__all__) <= set(dir(engine))
    for name in engine.__all__:
        value = getattr(engine, name)
        module = engine._MODULE_OF[name]
        assert getattr(sys.modules[module], engine._RENAMED.get(name, name)) is value, name
