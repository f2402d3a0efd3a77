"""Fleet health: 1,000 tables of 1,000 live files each, every table's health record, in a fresh process.

Input (built once, cached under ``benchmarks/.data/fleet_health``): one template table whose
version 0 commits 1,000 adds (with ``numRecords`` statistics, 10 partitions) and 200 removes,
checkpointed by the engine at version 1 (a commitInfo-only commit), then 10 tail commits
(each one add and one remove, the newest an OPTIMIZE): a checkpoint plus a log tail, as
health reads them. No data file exists: health never reads one. The template's
``_delta_log`` is hard-linked into 1,000 table directories under one prefix.

Ours: ``resolve_fleet(prefix=...)`` (discovery) and ``fleet_health(..., parallelism=8)``, the
public API the fleet health operator calls; the record count and the sum of live files are
returned as a check. delta-rs: for each table, ``DeltaTable(path)`` and its add actions'
sizes (the least a health check needs: the live files), on the same 8 threads.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from benchmarks._harness import Case, data_dir

TABLES = 1_000
FILES = 1_000
PARALLELISM = 8
_SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "part", "type": "string", "nullable": True, "metadata": {}},
]})
_NOW = 1_700_000_000_000


def _add(i: int, size: int) -> dict:
    return {"add": {"path": f"part={i % 10}/f-{i:06d}.parquet", "partitionValues": {"part": str(i % 10)}, "size": size,
                    "modificationTime": _NOW, "dataChange": True,
                    "stats": json.dumps({"numRecords": 1000, "minValues": {"id": i}, "maxValues": {"id": i + 999},
                                         "nullCount": {"id": 0}})}}


def _remove(i: int) -> dict:
    return {"remove": {"path": f"part={i % 10}/old-{i:06d}.parquet", "partitionValues": {"part": str(i % 10)},
                       "size": 4096, "deletionTimestamp": _NOW, "dataChange": True, "extendedFileMetadata": True}}


def _write(log: Path, version: int, actions: list[dict]) -> None:
    text = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
    (log / f"{version:020d}.json").write_text(text)


def _template(path: Path) -> None:
    from airflow_delta.engine import DeltaTable

    log = path / "_delta_log"
    log.mkdir(parents=True)
    info = {"commitInfo": {"timestamp": _NOW, "operation": "WRITE", "operationParameters": {}}}
    _write(log, 0, [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": "bench-fleet", "format": {"provider": "parquet", "options": {}}, "schemaString": _SCHEMA,
                      "partitionColumns": ["part"], "configuration": {"delta.checkpointInterval": "1000"},
                      "createdTime": _NOW}},
        info, *(_add(i, (i % 7 + 1) << 20) for i in range(FILES)), *(_remove(i) for i in range(200)),
    ])
    _write(log, 1, [info])
    DeltaTable(str(path)).checkpoint(1)
    for v in range(2, 12):
        op = "OPTIMIZE" if v == 11 else "WRITE"
        _write(log, v, [{"commitInfo": {"timestamp": _NOW + v, "operation": op, "operationParameters": {}}},
                        {"remove": {**_add(v, 1 << 20)["add"], "deletionTimestamp": _NOW + v, "dataChange": True}},
                        _add(FILES + v, 2 << 20)])


def _build(root: Path) -> None:
    tmp = root.with_name(root.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    template = tmp / "_template"
    _template(template)
    for t in range(TABLES):
        log = tmp / "lake" / f"db{t % 10}" / f"table_{t:04d}" / "_delta_log"
        log.mkdir(parents=True)
        for f in (template / "_delta_log").iterdir():
            if f.is_file():
                os.link(f, log / f.name)
    tmp.rename(root)


def cases() -> list[Case]:
    root = data_dir("fleet_health") / f"{TABLES}x{FILES}"
    if not root.exists():
        _build(root)
    return [Case(f"{TABLES}_tables_x_{FILES}_files", "ours", "delta_rs", (str(root / "lake"),), repeat=2, fresh=True)]


def ours(prefix: str) -> dict:
    from airflow_delta.engine import fleet_health, resolve_fleet

    records = fleet_health(resolve_fleet(prefix=prefix), parallelism=PARALLELISM)
    assert all(r.status == "ok" for r in records), [r.reason for r in records if r.status != "ok"][:3]
    return {"tables": len(records), "live_files": sum(r.num_files for r in records),
            "vacuumable_files": sum(r.vacuumable_files for r in records)}


def delta_rs(prefix: str) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    import deltalake
    import pyarrow as pa
    import pyarrow.compute as pc

    tables = sorted(str(p.parent) for p in Path(prefix).glob("*/*/_delta_log"))

    def one(path: str) -> int:
        actions = pa.table(deltalake.DeltaTable(path).get_add_actions(flatten=True))  # arro3 -> pyarrow
        pc.sum(actions.column("size_bytes"))
        return actions.num_rows

    with ThreadPoolExecutor(PARALLELISM) as pool:
        files = list(pool.map(one, tables))
    return {"tables": len(files), "live_files": sum(files)}
