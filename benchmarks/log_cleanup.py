"""Log cleanup that moves the start of the log: what reading its anchor checkpoint in full costs.

Cleanup anchors only on a checkpoint that reads in full (every page of every column, the
reader's own passes, sidecars), so a cleanup that would delete something first reads that
checkpoint. The input is a 100,000-file table: commit 0 with every add, commit 1, a
checkpoint of version 1. Ours: ``cleanup_log(dry_run=True)`` with retention 0 and a clock
in 2100 (the full plan, anchor verified, nothing deleted, so every run is the same);
delta-rs: opening the same table from its checkpoint and listing the file URIs, the read
any cleanup anchored on it would at least need (delta-rs has no dry-run cleanup).
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks._harness import Case, data_dir

FILES = 100_000
FAR_FUTURE_MS = 4_102_444_800_000


def _build(path: Path) -> str:
    root = path / f"files-{FILES}"
    if (root / "_delta_log" / f"{1:020d}.checkpoint.parquet").exists():
        return str(root)
    from airflow_delta.engine import DeltaTable, write_checkpoint

    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    lines = [
        {"commitInfo": {"timestamp": 1, "operation": "WRITE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": "bench", "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema),
                      "partitionColumns": [], "configuration": {}, "createdTime": 1}},
    ]
    for i in range(FILES):
        stats = json.dumps({"numRecords": 10, "minValues": {"id": i}, "maxValues": {"id": i + 9}, "nullCount": {"id": 0}})
        lines.append({"add": {"path": f"part-{i:08d}.parquet", "partitionValues": {}, "size": 1000,
                              "modificationTime": 1, "dataChange": True, "stats": stats}})
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in lines))
    (log / f"{1:020d}.json").write_text(json.dumps({"commitInfo": {"timestamp": 2, "operation": "WRITE"}}) + "\n")
    write_checkpoint(DeltaTable(str(root)).snapshot())
    return str(root)


def cases() -> list[Case]:
    root = _build(data_dir("log_cleanup"))
    return [Case(f"cleanup plan with anchor read in full, {FILES:,} files", ours="ours_cleanup_plan",
                 theirs="delta_rs_open_from_checkpoint", args=(root,), repeat=3)]


def ours_cleanup_plan(root: str) -> int:
    from airflow_delta.engine import DeltaTable

    doomed = DeltaTable(root).cleanup_log(retention="interval 0 seconds", now=FAR_FUTURE_MS, dry_run=True)
    assert any(p.endswith(f"{0:020d}.json") for p in doomed)
    return len(doomed)


def delta_rs_open_from_checkpoint(root: str) -> int:
    import deltalake

    uris = deltalake.DeltaTable(root).file_uris()
    assert len(uris) == FILES
    return len(uris)
