"""Parsing commits whose free-form maps have many distinct keys, ours vs delta-rs.

Input (written once as raw JSON, cached under ``benchmarks/.data/log_parse``): a table whose
version 1 is one commit of ``N`` adds, each add with a tag key of its own (the issue-10
case: 10,000 adds, 1.4 MB, once took 4.4 GB and 23 s because ``tags`` was inferred as a
struct with a column per key), for N = 10,000 and 100,000. Both sides materialise the file
URIs; ours also reads every add's tags, so that the tags are really parsed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmarks._harness import Case, data_dir

SIZES = (10_000, 100_000)
_SCHEMA = json.dumps({"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]})


def _build(path: Path, n: int) -> None:
    tmp = path.with_name(path.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "_delta_log").mkdir(parents=True)
    v0 = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": "bench-log-parse", "format": {"provider": "parquet", "options": {}}, "schemaString": _SCHEMA,
                      "partitionColumns": [], "configuration": {}, "createdTime": 1_700_000_000_000}},
    ]
    v1 = [{"add": {"path": f"part-{i:06d}.parquet", "partitionValues": {}, "size": 100, "modificationTime": 1_700_000_000_000,
                   "dataChange": True, "tags": {f"tag-{i}": f"value-{i}"}}} for i in range(n)]
    for version, actions in enumerate((v0, v1)):
        text = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
        (tmp / "_delta_log" / f"{version:020d}.json").write_text(text)
    tmp.rename(path)


def cases() -> list[Case]:
    out = []
    for n in SIZES:
        path = data_dir("log_parse") / f"distinct_tags_{n}"
        if not path.exists():
            _build(path, n)
        out.append(Case(f"one_commit_{n}_adds_distinct_tag_keys", "ours", "delta_rs", (str(path), n)))
    return out


def ours(path: str, n: int) -> int:
    from airflow_delta.engine import DeltaTable

    snapshot = DeltaTable(path).snapshot()
    files = snapshot.file_uris()
    tags = snapshot.add_actions.column("tags")
    assert len(files) == n and len(tags) == n and tags[n - 1].as_py() == [(f"tag-{n - 1}", f"value-{n - 1}")]
    return len(files)


def delta_rs(path: str, n: int) -> int:
    from deltalake import DeltaTable

    files = DeltaTable(path).file_uris()
    assert len(files) == n, len(files)
    return len(files)
