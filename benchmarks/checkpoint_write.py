"""Checkpoint writing, ours vs delta-rs (``deltalake.DeltaTable.create_checkpoint()``).

Inputs (built once, cached under ``benchmarks/.data/checkpoint_write``): synthetic logs
of 100,000 and 1,000,000 live files, 100 JSON commits each, partitioned by ``part``
(100 values), every add with a stats JSON string, as writers produce them. There are no
data files: checkpointing only reads and writes the log.

Cases, per size:

* ``load+checkpoint``: open the table (JSON replay) and write a checkpoint of the latest
  version, the user-visible operation (ours: ``DeltaTable(p).checkpoint()``);
* ``checkpoint (loaded)``: only the checkpoint write, on a table state loaded during
  the untimed warm-up call (delta-rs: ``create_checkpoint()`` on an open table).

Every call first removes the previous checkpoint and ``_last_checkpoint`` so each run
replays the JSON log and writes a fresh checkpoint. Peak RSS is the whole process (load
included), as for every benchmark here.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import Case, data_dir

SIZES = (100_000, 1_000_000)
COMMITS = 100
PARTITIONS = 100


def _build(target: Path, num_files: int) -> None:
    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    log_dir = tmp / "_delta_log"
    log_dir.mkdir(parents=True)
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "double", "nullable": True, "metadata": {}},
            {"name": "part", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    now = int(time.time() * 1000)
    per_commit = num_files // COMMITS
    for version in range(COMMITS):
        lines = [json.dumps({"commitInfo": {"timestamp": now, "operation": "WRITE"}})]
        if version == 0:
            lines.append(json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}))
            lines.append(json.dumps({"metaData": {
                "id": "5e0b5a4e-0000-4000-8000-000000000000", "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema), "partitionColumns": ["part"],
                "configuration": {"delta.checkpointInterval": "1000000"}, "createdTime": now,
            }}))
        for i in range(version * per_commit, (version + 1) * per_commit):
            part = f"p{i % PARTITIONS:03d}"
            stats = json.dumps({"numRecords": 1000, "minValues": {"id": i * 1000, "value": 0.5},
                                "maxValues": {"id": i * 1000 + 999, "value": 99.5},
                                "nullCount": {"id": 0, "value": 0}})
            lines.append(json.dumps({"add": {
                "path": f"part={part}/part-{i:08d}-3935a07c-416b-4344-ad97-2a38342ee2fc.c000.snappy.parquet",
                "partitionValues": {"part": part}, "size": 100_000 + i, "modificationTime": now,
                "dataChange": True, "stats": stats,
            }}))
        (log_dir / f"{version:020d}.json").write_text("\n".join(lines) + "\n")
    tmp.rename(target)


def prepare() -> dict[int, str]:
    base = data_dir("checkpoint_write")
    paths = {}
    for size in SIZES:
        path = base / f"files_{size}"
        if not path.exists():
            print(f"building a {size:,}-file log (once; cached in {base})", file=sys.stderr, flush=True)
            _build(path, size)
        paths[size] = str(path)
    return paths


def cases() -> list[Case]:
    paths = prepare()
    out = []
    for size, path in paths.items():
        label = f"{size // 1000}k" if size < 1_000_000 else f"{size // 1_000_000}M"
        out.append(Case(f"load+checkpoint {label}", ours="ours_load_and_checkpoint",
                        theirs="delta_rs_load_and_checkpoint", args=(path, size), repeat=2))
        out.append(Case(f"checkpoint (loaded) {label}", ours="ours_checkpoint_loaded",
                        theirs="delta_rs_checkpoint_loaded", args=(path, size), repeat=2))
    return out


def _clear_checkpoints(path: str) -> None:
    log_dir = os.path.join(path, "_delta_log")
    for name in os.listdir(log_dir):
        if ".checkpoint." in name or name == "_last_checkpoint":
            os.remove(os.path.join(log_dir, name))


def _check(path: str, size: int) -> None:
    import pyarrow.parquet as pq

    files = [n for n in os.listdir(os.path.join(path, "_delta_log")) if n.endswith(".checkpoint.parquet")]
    assert len(files) == 1, files
    rows = pq.read_metadata(os.path.join(path, "_delta_log", files[0])).num_rows
    assert rows == size + 2, rows  # every file plus protocol and metaData


def ours_load_and_checkpoint(path: str, size: int) -> None:
    from airflow_delta.engine import CheckpointOptions, DeltaTable

    _clear_checkpoints(path)
    # Without the log cleanup that follows by default: delta-rs's create_checkpoint() does none.
    assert DeltaTable(path).checkpoint(options=CheckpointOptions(cleanup_log=False)).version == COMMITS - 1
    _check(path, size)


def delta_rs_load_and_checkpoint(path: str, size: int) -> None:
    from deltalake import DeltaTable

    _clear_checkpoints(path)
    DeltaTable(path).create_checkpoint()
    _check(path, size)


_LOADED: dict[str, Any] = {}


def ours_checkpoint_loaded(path: str, size: int) -> None:
    from airflow_delta.engine import DeltaTable, write_checkpoint

    _clear_checkpoints(path)
    if path not in _LOADED:  # the warm-up call loads the state; timed calls reuse it
        _LOADED[path] = DeltaTable(path).snapshot()
    write_checkpoint(_LOADED[path])
    _check(path, size)


def delta_rs_checkpoint_loaded(path: str, size: int) -> None:
    from deltalake import DeltaTable

    _clear_checkpoints(path)
    if path not in _LOADED:
        _LOADED[path] = DeltaTable(path)
    _LOADED[path].create_checkpoint()
    _check(path, size)
