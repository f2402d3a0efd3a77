"""DELETE and append stay off pandas and pyarrow.dataset, their commit and post-commit work included.

A one-row DV delete in a fresh process is mostly imports; pandas (pulled in by
``pyarrow.dataset``, ``Table.filter(expression)`` and any conversion of Python values to
Arrow) would be ~0.2 s of it. Each case runs in a fresh interpreter on a table built by
the parent, and reports the heavy modules loaded after the operation; it also reports
the ``.crc`` files, because post-commit failures are only logged: a post-commit step
that broke would otherwise pass unseen. Tables checkpointed after every commit (classic and
V2 policies) show that writing the checkpoint is pandas-free too. ``pyarrow.parquet`` (the data
file writer) is allowed; writing parquet does not need ``pyarrow.dataset``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from tests.conftest import shared_tables_dir

REPO = Path(__file__).resolve().parents[3]

_CHILD = """
import json, os, sys
from airflow_delta.engine import DeltaTable
from airflow_delta.engine.expressions.arrow_values import arrow_array
import pyarrow as pa
path, operation, argument = sys.argv[1], sys.argv[2], sys.argv[3]
HEAVY = ("pandas", "pyarrow.dataset", "numpy.ma", "sqlglot")
before = [m for m in HEAVY if m in sys.modules]
table = DeltaTable(path)
out = {"before": before}
if operation == "append":
    columns = json.loads(argument)
    table.append(pa.table({name: arrow_array(values, pa.int64() if name != "part" else pa.string())
                           for name, values in columns.items()}))
else:
    result = table.delete(argument, use_deletion_vectors=(operation == "dv"))
    out["deleted"] = result.num_deleted_rows
    out["dvs"] = result.metrics["numDeletionVectorsAdded"]
out["after"] = [m for m in HEAVY if m in sys.modules]
out["log"] = sorted(os.listdir(os.path.join(path, "_delta_log")))
print(json.dumps(out))
"""


def _run(path: str, operation: str, argument: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, path, operation, argument],
        capture_output=True, text=True, check=False, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _table(root: Path, *, deletion_vectors: bool, partitioned: bool, checkpoint: str | None = None) -> str:
    """Two files (two partitions when ``partitioned``), a .crc per version; with ``checkpoint``
    ("classic" or "v2"), a checkpoint of that policy after every commit."""
    schema = pa.schema([("id", pa.int64()), ("value", pa.int64())] + ([("part", pa.string())] if partitioned else []))
    properties: dict[str, str] = {}
    if checkpoint is not None:
        properties.update({"delta.checkpointInterval": "1", "delta.checkpointPolicy": checkpoint})
    if deletion_vectors:
        properties["delta.enableDeletionVectors"] = "true"
    table = DeltaTable.create(str(root), schema, partition_by=["part"] if partitioned else [], properties=properties)
    for start, part in ((0, "a"), (100, "b")):
        rows = {"id": pa.array(range(start, start + 100), pa.int64()), "value": pa.array(range(100), pa.int64())}
        if partitioned:
            rows["part"] = pa.array([part] * 100)
        table.append(pa.table(rows, schema=schema))
    return str(root)


def _assert_light_and_checksummed(found: dict[str, object], version: int) -> None:
    assert found["before"] == [], found
    assert found["after"] == [], found
    log = found["log"]
    assert isinstance(log, list)
    # The post-commit hook ran: the new version's .crc was written (incrementally, from the last one).
    assert f"{version:020d}.crc" in log, log


@pytest.mark.parametrize("partitioned", [False, True])
def test_dv_delete_is_pandas_free(tmp_path: Path, partitioned: bool) -> None:
    root = _table(tmp_path / "t", deletion_vectors=True, partitioned=partitioned)
    found = _run(root, "dv", "id = 150 OR value IN (3, 4)")
    assert found["deleted"] == 5 and found["dvs"] == 2, found
    _assert_light_and_checksummed(found, 3)
    assert DeltaTable(root).snapshot().to_arrow().num_rows == 195


@pytest.mark.parametrize("partitioned", [False, True])
def test_rewrite_delete_is_pandas_free(tmp_path: Path, partitioned: bool) -> None:
    root = _table(tmp_path / "t", deletion_vectors=False, partitioned=partitioned)
    found = _run(root, "rewrite", "id >= 10 AND id < 20")
    assert found["deleted"] == 10 and found["dvs"] == 0, found
    _assert_light_and_checksummed(found, 3)
    assert DeltaTable(root).snapshot().to_arrow().num_rows == 190


def test_partition_only_delete_is_pandas_free(tmp_path: Path) -> None:
    # Decided from the log alone: whole files removed, no data read.
    root = _table(tmp_path / "t", deletion_vectors=True, partitioned=True)
    found = _run(root, "dv", "part = 'b'")
    assert found["deleted"] == 100, found
    _assert_light_and_checksummed(found, 3)


@pytest.mark.parametrize("partitioned", [False, True])
def test_append_is_pandas_free(tmp_path: Path, partitioned: bool) -> None:
    root = _table(tmp_path / "t", deletion_vectors=True, partitioned=partitioned)
    columns: dict[str, list[object]] = {"id": [1000, 1001], "value": [1, 2]}
    if partitioned:
        columns["part"] = ["c", "a"]
    found = _run(root, "append", json.dumps(columns))
    _assert_light_and_checksummed(found, 3)
    assert DeltaTable(root).snapshot().to_arrow().num_rows == 202


@pytest.mark.parametrize("policy", ["classic", "v2"])
@pytest.mark.parametrize("operation", ["dv", "append"])
def test_writing_a_checkpoint_is_pandas_free(tmp_path: Path, policy: str, operation: str) -> None:
    root = _table(tmp_path / "t", deletion_vectors=True, partitioned=True, checkpoint=policy)
    found = _run(root, operation, "id = 150" if operation == "dv" else json.dumps({"id": [7], "value": [7], "part": ["z"]}))
    _assert_light_and_checksummed(found, 3)
    log = found["log"]
    assert isinstance(log, list)
    checkpoints = [name for name in log if name.startswith(f"{3:020d}.checkpoint")]
    assert checkpoints, log
    # The checkpoint is read back: a snapshot loaded from it has the rows.
    expected = 199 if operation == "dv" else 201
    assert DeltaTable(root).snapshot().to_arrow().num_rows == expected


def test_dv_delete_on_a_spark_table_with_deletion_vectors_is_pandas_free(tmp_path: Path) -> None:
    # A Spark-written table whose file already has a DV: the new DV is merged with it.
    source = shared_tables_dir() / "table-with-dv-small"
    if not source.is_dir():
        pytest.skip("shared table table-with-dv-small not present")
    root = tmp_path / "t"
    shutil.copytree(source, root)
    before = DeltaTable(str(root)).snapshot().to_arrow().num_rows
    found = _run(str(root), "dv", "value = 5")
    assert found["before"] == [] and found["after"] == [], found
    assert DeltaTable(str(root)).snapshot().to_arrow().num_rows == before - found["deleted"]  # type: ignore[operator]


# What a plain OPTIMIZE (no appId) of a local table without deletion vectors, checkpoints,
# manifests or identity columns has no use for: the other operations' results, the DV code
# (and pyroaring), the checkpoint reader, the manifest writer, property validation,
# resumable-OPTIMIZE bookkeeping, row-group pruning (it reads whole files), the executors'
# TableContext, object-store URI parsing, and the stdlib modules only those pieces (and a
# commit's backoff) need.
# Each costs import time in every fresh worker process that compacts a table.
_OPTIMIZE_CHILD = """
import json, os, sys
from airflow_delta.engine import DeltaTable
result = DeltaTable(sys.argv[1]).optimize()
UNUSED = (
    "pandas", "pyarrow.dataset", "sqlglot", "pyroaring", "random", "secrets",
    "airflow_delta.engine.operations.results", "airflow_delta.engine.operations.optimize_progress",
    "airflow_delta.engine.operations.manifest", "airflow_delta.engine.read.checkpoint_reader",
    "airflow_delta.engine.write.row_deletion", "airflow_delta.engine.model.deletion_vector_files",
    "airflow_delta.engine.model.roaring_bitmap", "airflow_delta.engine.model.property_validation",
    "airflow_delta.engine.model.column_defaults", "airflow_delta.engine.read.row_groups",
    "airflow_delta.engine.read.table_context", "airflow_delta.engine.storage.options",
)
print(json.dumps({
    "versions": list(result.versions), "removed": result.metrics["numFilesRemoved"],
    "loaded": [m for m in UNUSED if m in sys.modules],
    "log": sorted(os.listdir(os.path.join(sys.argv[1], "_delta_log"))),
}))
"""


def test_optimize_loads_only_what_it_uses(tmp_path: Path) -> None:
    root = _table(tmp_path / "t", deletion_vectors=False, partitioned=False)
    proc = subprocess.run(
        [sys.executable, "-c", _OPTIMIZE_CHILD, root], capture_output=True, text=True, check=False, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["versions"] == [3] and found["removed"] == 2, found  # it compacted the two files
    assert found["loaded"] == [], found
    assert "00000000000000000003.crc" in found["log"], found  # its post-commit work ran
    assert DeltaTable(root).snapshot().to_arrow().num_rows == 200
