"""The public read path as users run it: a fresh process per call, imports included.

Every timed run is a new interpreter (``Case(fresh=True)``) that imports the
library and makes one public call, as an Airflow task or a user's script does; the two
sides alternate, and the best of ``repeat`` runs is reported. Bytecode is whatever the
environment has: ``make`` compiles it for the venv and for this package.

Inputs (built once, cached under ``benchmarks/.data/read_path``):

* ``json``: a synthetic log of 1,000 JSON commits of 100 adds each (100,000 live files),
  partitioned by ``part`` (string, 100 values) and ``day`` (date, 10 values), every add
  with a stats JSON string as writers produce them; no data files (listing files reads
  only the log);
* ``checkpoint``: the same commits plus a delta-rs ``create_checkpoint()`` of the last
  version;
* ``data``: a mid-size table written by delta-rs (1,000,000 rows in 100 files,
  partitioned by ``part``) for ``to_arrow()``.

Cases (ours | delta-rs):

* files() from JSON and from a checkpoint: ``DeltaTable(p).snapshot().files()`` |
  ``DeltaTable(p).file_uris()``;
* files(filter) on the checkpointed table: ``files("part = 'p042'")`` |
  ``file_uris(partition_filters=[("part", "=", "p042")])``;
* to_arrow(): ``DeltaTable(p).snapshot().to_arrow()`` | ``DeltaTable(p).to_pyarrow_table()``;
* files() from the checkpoint once more without bytecode (``PYTHONDONTWRITEBYTECODE=1`` and an
  empty ``PYTHONPYCACHEPREFIX``: every module, the standard library's too, is compiled from
  source), as a deployment that never compiles pays it.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import time
from pathlib import Path

from benchmarks._harness import Case, compile_engine_bytecode, data_dir

COMMITS = 1_000
FILES_PER_COMMIT = 100
NUM_FILES = COMMITS * FILES_PER_COMMIT
PARTS = 100
DAYS = 10
DATA_ROWS = 1_000_000
DATA_FILES = 100
DATA_PARTS = 20
FILTER_PART = "p042"
REPEAT = 5


def _build_log(target: Path) -> None:
    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    log_dir = tmp / "_delta_log"
    log_dir.mkdir(parents=True)
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "double", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}},
        {"name": "day", "type": "date", "nullable": True, "metadata": {}},
    ]}
    now = int(time.time() * 1000)
    first_day = dt.date(2024, 1, 1)
    for version in range(COMMITS):
        lines = [json.dumps({"commitInfo": {"timestamp": now + version, "operation": "WRITE"}})]
        if version == 0:
            lines.append(json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}))
            lines.append(json.dumps({"metaData": {
                "id": "5e0b5a4e-0000-4000-8000-000000000001", "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema), "partitionColumns": ["part", "day"],
                "configuration": {"delta.checkpointInterval": "1000000"}, "createdTime": now,
            }}))
        for i in range(version * FILES_PER_COMMIT, (version + 1) * FILES_PER_COMMIT):
            part, day = f"p{i % PARTS:03d}", (first_day + dt.timedelta(days=i % DAYS)).isoformat()
            stats = json.dumps({"numRecords": 1000, "minValues": {"id": i * 1000, "value": 0.5},
                                "maxValues": {"id": i * 1000 + 999, "value": 99.5},
                                "nullCount": {"id": 0, "value": 0}})
            lines.append(json.dumps({"add": {
                "path": f"part={part}/day={day}/part-{i:08d}-3935a07c-416b-4344-ad97-2a38342ee2fc.c000.snappy.parquet",
                "partitionValues": {"part": part, "day": day}, "size": 100_000 + i,
                "modificationTime": now + version, "dataChange": True, "stats": stats,
            }}))
        (log_dir / f"{version:020d}.json").write_text("\n".join(lines) + "\n")
    tmp.rename(target)


def _checkpointed_copy(source: Path, target: Path) -> None:
    from deltalake import DeltaTable

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp)
    DeltaTable(str(tmp)).create_checkpoint()
    tmp.rename(target)


def _build_data(target: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    per_append = DATA_ROWS // (DATA_FILES // DATA_PARTS)
    for n in range(DATA_FILES // DATA_PARTS):  # each append writes one file per partition
        ids = pa.array(range(n * per_append, (n + 1) * per_append), pa.int64())
        batch = pa.table({
            "id": ids,
            "value": pa.compute.multiply(ids.cast(pa.float64()), 0.5),
            "name": pa.compute.cast(ids, pa.string()),
            "part": pa.array([f"p{i % DATA_PARTS:02d}" for i in range(per_append)]),
        })
        write_deltalake(str(tmp), batch, mode="append", partition_by=["part"])
    tmp.rename(target)


def prepare() -> dict[str, str]:
    compile_engine_bytecode()
    base = data_dir("read_path")
    json_only, checkpointed, data = base / "json", base / "checkpoint", base / "data"
    if not json_only.exists():
        print(f"building a {COMMITS:,}-commit, {NUM_FILES:,}-file log (once; cached in {base})",
              file=sys.stderr, flush=True)
        _build_log(json_only)
    if not checkpointed.exists():
        _checkpointed_copy(json_only, checkpointed)
    if not data.exists():
        print(f"building a {DATA_ROWS:,}-row table with delta-rs (once; cached in {base})", file=sys.stderr, flush=True)
        _build_data(data)
    return {"json": str(json_only), "checkpoint": str(checkpointed), "data": str(data)}


def cases() -> list[Case]:
    paths = prepare()
    return [
        Case("files() json 1000 commits", "ours_files", "delta_rs_files", (paths["json"],), REPEAT, True),
        Case("files() checkpoint 100k", "ours_files", "delta_rs_files", (paths["checkpoint"],), REPEAT, True),
        Case("files(filter) checkpoint", "ours_files_filtered", "delta_rs_files_filtered",
             (paths["checkpoint"],), REPEAT, True),
        Case("files(filter) json", "ours_files_filtered", "delta_rs_files_filtered", (paths["json"],), REPEAT, True),
        Case("to_arrow() 1M rows", "ours_to_arrow", "delta_rs_to_arrow", (paths["data"],), REPEAT, True),
        # Without bytecode (PYTHONDONTWRITEBYTECODE and no .pyc found): every import compiles its source.
        Case("files() checkpoint, no .pyc", "ours_files", "delta_rs_files", (paths["checkpoint"],), 3, True,
             env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(data_dir("read_path") / "no-pycache")}),
    ]


def ours_files(path: str) -> int:
    from airflow_delta.engine import DeltaTable

    files = DeltaTable(path).snapshot().files()
    assert files.num_rows == NUM_FILES, files.num_rows
    return files.num_rows


def delta_rs_files(path: str) -> int:
    from deltalake import DeltaTable

    files = DeltaTable(path).file_uris()
    assert len(files) == NUM_FILES, len(files)
    return len(files)


def ours_files_filtered(path: str) -> int:
    from airflow_delta.engine import DeltaTable

    files = DeltaTable(path).snapshot().files(f"part = '{FILTER_PART}'")
    assert files.num_rows == NUM_FILES // PARTS, files.num_rows
    return files.num_rows


def delta_rs_files_filtered(path: str) -> int:
    from deltalake import DeltaTable

    files = DeltaTable(path).file_uris(partition_filters=[("part", "=", FILTER_PART)])
    assert len(files) == NUM_FILES // PARTS, len(files)
    return len(files)


def ours_to_arrow(path: str) -> int:
    from airflow_delta.engine import DeltaTable

    rows = DeltaTable(path).snapshot().to_arrow()
    assert rows.num_rows == DATA_ROWS, rows.num_rows
    return rows.num_rows


def delta_rs_to_arrow(path: str) -> int:
    from deltalake import DeltaTable

    rows = DeltaTable(path).to_pyarrow_table()
    assert rows.num_rows == DATA_ROWS, rows.num_rows
    return rows.num_rows
