"""Snapshot loading: JSON-only log replay, and loading from a checkpoint, ours vs delta-rs.

Input (built once with delta-rs, cached under ``benchmarks/.data/snapshot_load``): a
table partitioned by ``part`` with 1,000 commits of 100 files each (100,000 live files).
Two log-only copies are derived from it (replay never opens data files):

* ``json``: the 1,000 JSON commits, no checkpoint;
* ``checkpoint``: the same commits plus a checkpoint of the last version written by
  delta-rs ``create_checkpoint()``.

Both sides materialise the list of file URIs: ``DeltaTable(p).file_uris()`` for
delta-rs, ``DeltaTable(p).snapshot()`` plus the decoded paths joined to the root for us.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from benchmarks._harness import Case, data_dir

COMMITS = 1_000
FILES_PER_COMMIT = 100


def _build_source(source: Path) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    tmp = source.with_name(source.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    parts = pa.array([f"p{i:03d}" for i in range(FILES_PER_COMMIT)])
    start = time.time()
    table: DeltaTable | str = str(tmp)
    for commit in range(COMMITS):
        batch = pa.table({
            "id": pa.array(range(commit * FILES_PER_COMMIT, (commit + 1) * FILES_PER_COMMIT), pa.int64()),
            "value": pa.array([float(commit)] * FILES_PER_COMMIT),
            "part": parts,
        })
        write_deltalake(table, batch, mode="append", partition_by=["part"],
                        configuration={"delta.checkpointInterval": "100000"} if commit == 0 else None)
        if commit == 0:
            table = DeltaTable(str(tmp))
        else:
            assert isinstance(table, DeltaTable)
            table.update_incremental()
        if commit % 100 == 99:
            print(f"  built {commit + 1}/{COMMITS} commits in {time.time() - start:.0f}s", file=sys.stderr, flush=True)
    tmp.rename(source)


def _log_copy(source: Path, target: Path, *, with_checkpoint: bool) -> None:
    from deltalake import DeltaTable

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "_delta_log").mkdir(parents=True)
    for f in (source / "_delta_log").iterdir():
        if f.is_file() and f.name.endswith(".json") and ".checkpoint." not in f.name:
            shutil.copy2(f, tmp / "_delta_log" / f.name)
    if with_checkpoint:
        DeltaTable(str(tmp)).create_checkpoint()
    tmp.rename(target)


def prepare() -> tuple[str, str]:
    base = data_dir("snapshot_load")
    source, json_only, checkpointed = base / "source", base / "json", base / "checkpoint"
    if not source.exists():
        print(f"building the {COMMITS}-commit table with delta-rs (once; cached in {base})", file=sys.stderr, flush=True)
        _build_source(source)
    if not json_only.exists():
        _log_copy(source, json_only, with_checkpoint=False)
    if not checkpointed.exists():
        _log_copy(source, checkpointed, with_checkpoint=True)
    return str(json_only), str(checkpointed)


def cases() -> list[Case]:
    json_only, checkpointed = prepare()
    return [
        Case("json_replay_1000_commits", "ours", "delta_rs", (json_only,)),
        Case("load_from_checkpoint", "ours", "delta_rs", (checkpointed,)),
    ]


def ours(path: str) -> int:
    import pyarrow.compute as pc

    from airflow_delta.engine import DeltaTable
    from airflow_delta.engine.model.arrow_numpy import string_scalar
    from airflow_delta.engine.read.snapshot import decode_paths

    table = DeltaTable(path)
    snapshot = table.snapshot()
    # Arrow scalars built from buffers: a Python ``str`` argument would make pyarrow import
    # pandas (~55 MB resident), which the engine itself avoids on this path.
    uris = pc.binary_join_element_wise(string_scalar(f"{table.root}/"), decode_paths(snapshot.add_actions.column("path")),
                                       string_scalar(""))
    files = uris.to_pylist()
    assert len(files) == COMMITS * FILES_PER_COMMIT, len(files)
    return len(files)


def delta_rs(path: str) -> int:
    from deltalake import DeltaTable

    files = DeltaTable(path).file_uris()
    assert len(files) == COMMITS * FILES_PER_COMMIT, len(files)
    return len(files)
