"""Writers, checkpointers and log cleanups with a clock far ahead, at once, some killed by SIGKILL.

Every process is a real subprocess. Writers append rows with ids no other attempt uses;
checkpointers checkpoint the latest version; cleanups run with retention 0 and a clock
in 2100, so every commit behind a checkpoint is fair game the moment it is written.
Every second or so one process dies by SIGKILL and a fresh one takes its place.
Afterwards:

- every ``append`` that returned a version has its rows in the table, exactly once;
- rows of appends that failed with "nothing was written" are not in the table;
- no process saw anything but a ``DeltaError`` subclass, and no temporary file of a
  live writer (a checkpoint's part or sidecar, a commit) vanished under it;
- our reader, delta-rs and delta-kernel-rs read the same rows.

The race runs until enough has happened (``STRESS_APPENDS`` successful appends, default
24, at least three kills and a cleanup that deleted commits), not for a fixed time, so a
busy machine makes it slower, never vacuous; ``STRESS_MAX_SECONDS`` (default 240) caps it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from tests.oracles import read_with_deltars, read_with_kernel

REPO = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.int64())])
TARGET_APPENDS = int(os.environ.get("STRESS_APPENDS", "24"))
MAX_SECONDS = float(os.environ.get("STRESS_MAX_SECONDS", "240"))
MIN_KILLS = 3
ROLES = ("writer", "writer", "writer", "checkpoint", "cleanup", "cleanup")
ROWS_PER_APPEND = 3

WORKER = textwrap.dedent(
    """
    import json, os, random, sys, time, traceback
    sys.path.insert(0, {repo!r})
    import pyarrow as pa
    from airflow_delta.engine import (
        CheckpointOptions, CommitOptions, DeltaError, DeltaTable, LogMovedPastCommitError, RetryPolicy,
        write_data_files,
    )

    role, root, out, id_base, stop = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    schema = pa.schema([("id", pa.int64()), ("writer", pa.int64())])
    far_future_ms = 4_102_444_800_000  # 2100-01-01
    options = CommitOptions(retry=RetryPolicy(max_attempts=40, initial_backoff=0.001, max_backoff=0.02))
    write_data_files.__name__  # imported now (it loads on first use), not in the middle of the race
    log = open(out, "a", buffering=1)
    rng = random.Random(id_base)

    def record(**event):
        log.write(json.dumps(event) + "\\n")

    record(event="ready")

    n = 0
    while not os.path.exists(stop):
        table = DeltaTable(root)
        first = id_base + n * {rows}
        n += 1
        try:
            if role == "writer":
                ids = list(range(first, first + {rows}))
                record(event="try", first=first)
                with table.transaction(options) as txn:
                    data = pa.table({{"id": ids, "writer": [id_base] * {rows}}}, schema=schema)
                    txn.add_files(write_data_files(txn.snapshot, data))
                    # Let the transaction age while others commit, checkpoint and clean up.
                    time.sleep(rng.uniform(0, 0.3))
                    version = txn.commit("WRITE", {{"mode": "Append"}})
                record(event="ok", first=first, version=version)
            elif role == "checkpoint":
                # Checkpoint only: the cleanup role cleans up.
                record(event="ok", version=table.checkpoint(options=CheckpointOptions(cleanup_log=False)).version)
                time.sleep(rng.uniform(0, 0.1))
            else:
                record(event="ok", deleted=len(table.cleanup_log(retention="interval 0 seconds", now=far_future_ms)))
                time.sleep(rng.uniform(0, 0.05))  # often, but leaving the writers some CPU
        except LogMovedPastCommitError as exc:
            record(event="nothing-written", first=first, error=str(exc))
        except DeltaError as exc:
            record(event="typed", first=first, type=type(exc).__name__, error=str(exc))
        except BaseException as exc:
            record(event="untyped", first=first, type=type(exc).__name__, error="".join(traceback.format_exception(exc)))
    """
).format(repo=str(REPO), rows=ROWS_PER_APPEND)


def _events(out_dir: Path) -> list[dict[str, Any]]:
    events = []
    for file in sorted(out_dir.glob("*.jsonl")):
        for line in file.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line of a process killed while writing it
            event["role"] = file.name.split("-")[0]
            events.append(event)
    return events


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["classic", "v2"])
def test_writers_checkpointers_and_cleanups_killed_at_random(table_path: str, tmp_path: Path, policy: str) -> None:
    # Writers checkpoint too (every 3 versions, in their post-commit hook). V2 checkpoints
    # write sidecars first and their top-level file last: cleanups must not take the
    # sidecars of a checkpoint still being written for orphans.
    table = DeltaTable.create(
        table_path, SCHEMA, properties={"delta.checkpointInterval": "3", "delta.checkpointPolicy": policy}
    )
    table.append(pa.table({"id": [-1], "writer": [0]}, schema=SCHEMA))
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out_dir = tmp_path / "events"
    out_dir.mkdir()
    rng = random.Random(10)
    stop = tmp_path / "stop"
    spawned = 0
    outs: dict[int, Path] = {}

    def spawn(role: str) -> subprocess.Popen[bytes]:
        nonlocal spawned
        spawned += 1
        out = out_dir / f"{role}-{spawned}.jsonl"
        proc = subprocess.Popen(
            [sys.executable, str(script), role, table_path, str(out), str(spawned * 10_000_000), str(stop)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        outs[proc.pid] = out
        return proc

    def enough(events: list[dict[str, Any]]) -> bool:
        appends = sum(1 for e in events if e["role"] == "writer" and e["event"] == "ok")
        cleaned = any(e.get("deleted") for e in events if e["role"] == "cleanup")
        return appends >= TARGET_APPENDS and cleaned and killed >= MIN_KILLS

    procs = [(role, spawn(role)) for role in ROLES]
    killed = 0
    deadline = time.monotonic() + MAX_SECONDS
    try:
        while time.monotonic() < deadline and not enough(_events(out_dir)):
            time.sleep(rng.uniform(0.5, 1.5))
            index = rng.randrange(len(procs))
            role, victim = procs[index]
            out = outs[victim.pid]
            if not out.exists() or len(out.read_text().splitlines()) < 3:
                continue  # still importing, or no work done yet: killing it now would test little
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed += 1
            procs[index] = (role, spawn(role))
    finally:
        stop.touch()
        for _role, proc in procs:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    for _role, proc in procs:
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""

    events = _events(out_dir)
    summary: dict[str, int] = {}
    for e in events:
        key = f"{e['role']}:{e['event']}" + (f":{e['type']}" if "type" in e else "")
        summary[key] = summary.get(key, 0) + 1
    print(f"killed {killed} of {spawned} processes; outcomes {summary}")  # shown with -s
    for e in events:
        if e["event"] == "typed":
            print(f"  {e['role']}: {e['type']}: {e['error'][:400]}")
    untyped = [e for e in events if e["event"] == "untyped"]
    assert not untyped, untyped[0]["error"]
    # Nobody may delete another process's temporary files (cleanup leaves them alone).
    vanished = [e for e in events if e.get("type") == "AtomicWriteError"]
    assert not vanished, vanished[0]["error"]
    returned = {e["first"]: e["version"] for e in events if e["role"] == "writer" and e["event"] == "ok"}
    nothing_written = {e["first"] for e in events if e["event"] == "nothing-written"}
    attempted = {e["first"] for e in events if e["role"] == "writer" and e["event"] == "try"}
    assert enough(events), f"the race did not get far enough in {MAX_SECONDS} s to prove anything: {summary}"

    ours = DeltaTable(table_path).snapshot().to_arrow()
    ids = ours.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a row is in the table twice"
    present = set(ids)
    lost = {first: version for first, version in returned.items()
            if not set(range(first, first + ROWS_PER_APPEND)) <= present}
    assert not lost, f"appends that returned a version but whose rows are missing: {lost}"
    assert not {f for f in nothing_written if f in present}, "an append reported 'nothing was written' but landed"
    firsts = {i // 10_000_000 * 10_000_000 + i % 10_000_000 // ROWS_PER_APPEND * ROWS_PER_APPEND for i in present}
    assert firsts - {-1} <= attempted, "rows nobody appended"
    assert len(set(returned.values())) == len(returned), "two appends returned the same version"

    expected = sorted(ours.to_pylist(), key=lambda r: (r["id"], r["writer"]))
    for oracle in (read_with_deltars, read_with_kernel):
        rows = sorted(oracle(table_path), key=lambda r: (r["id"], r["writer"]))
        assert rows == expected, f"{oracle.__name__} reads other rows than ours"
