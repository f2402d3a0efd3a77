"""VACUUM dry run on a 100,000-file table, each run a fresh process (imports included).

The input: commit 0 adds 100,000 one-byte files in 100 partition directories; commit 1
removes 10,000 of them (deletion timestamp in 1970); 1,000 orphan files no commit names
lie beside them; every file's modification time is in 2020. Both sides plan with a zero
retention (its safety check off) and delete nothing:

* full: ours ``vacuum(mode="full", dry_run=True)`` (lists the table), delta-rs
  ``vacuum(dry_run=True, full=True)``; both must find the 11,000 files.
* lite: ours ``vacuum(mode="lite", dry_run=True)`` (the log only), delta-rs
  ``vacuum(dry_run=True)`` (its default, which still lists the directory); both must find
  the 10,000 removed files (delta-rs's non-full mode also reports orphans written since the
  last checkpoint, so it counts 11,000).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from benchmarks._harness import Case, compile_engine_bytecode, data_dir

FILES = 100_000
REMOVED = 10_000
ORPHANS = 1_000
PARTITIONS = 100
OLD_SECONDS = 1_577_836_800  # 2020-01-01


def _path(i: int) -> str:
    return f"part=p{i % PARTITIONS:03d}/part-{i:08d}.parquet"


def _build(path: Path) -> str:
    root = path / f"files-{FILES}"
    done = root / "_delta_log" / f"{1:020d}.json"
    if done.exists():
        return str(root)
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    for p in range(PARTITIONS):
        (root / f"part=p{p:03d}").mkdir(exist_ok=True)
    for i in range(FILES + ORPHANS):
        name = root / _path(i) if i < FILES else root / f"part=p{i % PARTITIONS:03d}/orphan-{i:08d}.parquet"
        name.write_bytes(b"x")
        os.utime(name, (OLD_SECONDS, OLD_SECONDS))
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}},
    ]}
    lines = [
        {"commitInfo": {"timestamp": 1, "operation": "WRITE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": "bench", "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema),
                      "partitionColumns": ["part"], "configuration": {}, "createdTime": 1}},
    ]
    lines += [
        {"add": {"path": _path(i), "partitionValues": {"part": f"p{i % PARTITIONS:03d}"}, "size": 1,
                 "modificationTime": 1, "dataChange": True}}
        for i in range(FILES)
    ]
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in lines))
    removes = [{"commitInfo": {"timestamp": 2, "operation": "DELETE"}}] + [
        {"remove": {"path": _path(i), "partitionValues": {"part": f"p{i % PARTITIONS:03d}"}, "size": 1,
                    "deletionTimestamp": 2, "dataChange": True, "extendedFileMetadata": True}}
        for i in range(0, FILES, FILES // REMOVED)
    ]
    (done.parent / f".{done.name}.tmp").write_text("".join(json.dumps(a) + "\n" for a in removes))
    os.replace(done.parent / f".{done.name}.tmp", done)
    for name in log.iterdir():
        os.utime(name, (OLD_SECONDS, OLD_SECONDS))
    return str(root)


def cases() -> list[Case]:
    compile_engine_bytecode()  # fresh processes, mostly imports: measured as installed, not compiling each run
    root = _build(data_dir("vacuum"))
    return [
        Case(f"vacuum dry run, full, {FILES:,} files", ours="ours_full", theirs="delta_rs_full", args=(root,),
             repeat=3, fresh=True),
        Case(f"vacuum dry run, lite, {FILES:,} files", ours="ours_lite", theirs="delta_rs_default", args=(root,),
             repeat=3, fresh=True),
    ]


def ours_full(root: str) -> dict[str, int]:
    from datetime import timedelta

    from airflow_delta.engine import DeltaTable

    result = DeltaTable(root).vacuum(retention=timedelta(0), enforce_retention_duration=False, dry_run=True)
    assert result.num_files_to_delete == REMOVED + ORPHANS, result.metrics
    return dict(result.metrics)


def ours_lite(root: str) -> dict[str, int]:
    from datetime import timedelta

    from airflow_delta.engine import DeltaTable

    result = DeltaTable(root).vacuum(
        retention=timedelta(0), enforce_retention_duration=False, dry_run=True, mode="lite"
    )
    assert result.num_files_to_delete == REMOVED, result.metrics
    return dict(result.metrics)


def delta_rs_full(root: str) -> dict[str, int]:
    import deltalake

    files = deltalake.DeltaTable(root).vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True)
    assert len(files) == REMOVED + ORPHANS, len(files)
    return {"numFilesToDelete": len(files)}


def delta_rs_default(root: str) -> dict[str, int]:
    import deltalake

    files = deltalake.DeltaTable(root).vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False)
    assert len(files) >= REMOVED, len(files)
    return {"numFilesToDelete": len(files)}
