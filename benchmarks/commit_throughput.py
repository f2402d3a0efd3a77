"""Commit throughput under contention: 1, 4 and 8 processes appending to one table at once.

Each writer process appends a one-row table ``COMMITS_PER_WRITER`` times (ours:
``DeltaTable.append``; delta-rs: ``write_deltalake(mode="append")``), so every commit
writes one small parquet file and one log entry, and with several writers most commits
first lose a race and retry. Both tables use ``delta.checkpointInterval=10`` (Delta's
default; delta-rs would otherwise checkpoint every 100 versions), so both do the same
post-commit work.

The writer processes are started (and import everything) during the untimed warm-up
call and reused, so a timed call covers: create a fresh table, let all writers append
concurrently, wait for all of them. ``commits/s = writers * COMMITS_PER_WRITER / time``.
delta-rs gives up after 15 retries without backoff, and under contention sometimes
fails reading a commit another writer is publishing ("File not found"); such a write
is retried by the benchmark worker (so both sides land the same number of commits)
and counted.

``python -m benchmarks commit_throughput`` prints the harness table (time ratio);
``python -m benchmarks.commit_throughput`` prints commits per second for both sides.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

from benchmarks._harness import Case, data_dir, measure

WRITERS = (1, 4, 8)
COMMITS_PER_WRITER = 20
CONFIG = {"delta.checkpointInterval": "10"}

_pools: dict[tuple[str, int], _WriterPool] = {}


class _WriterPool:
    """``n`` long-lived writer processes, each with its own inbox, so each run gets exactly one task per writer."""

    def __init__(self, side: str, n: int) -> None:
        ctx = mp.get_context("spawn")
        self.outbox: Any = ctx.Queue()
        self.inboxes: list[Any] = [ctx.Queue() for _ in range(n)]
        self.procs = [
            ctx.Process(target=_writer_loop, args=(side, inbox, self.outbox), daemon=True) for inbox in self.inboxes
        ]
        for p in self.procs:
            p.start()

    def run(self, path: str, commits: int) -> list[dict[str, Any]]:
        barrier_id = uuid.uuid4().hex
        for i, inbox in enumerate(self.inboxes):
            inbox.put((path, commits, i, barrier_id))
        results = [self.outbox.get(timeout=600) for _ in self.inboxes]
        failed = [r for r in results if "error" in r]
        if failed:
            raise RuntimeError(failed[0]["error"])
        return results


def _writer_loop(side: str, inbox: Any, outbox: Any) -> None:
    import traceback

    import pyarrow as pa

    if side == "ours":
        from airflow_delta.engine import DeltaTable, write_data_files  # noqa: F401  (load the writer before timing)
    else:
        import deltalake  # noqa: F401
    while True:
        path, commits, index, _ = inbox.get()
        try:
            data = pa.table({"id": pa.array([index], pa.int64()), "value": pa.array([f"w{index}"], pa.string())})
            retried = 0
            errors = 0
            if side == "ours":
                table = DeltaTable(path)
                for _ in range(commits):
                    table.append(data)
            else:
                from deltalake import write_deltalake
                from deltalake.exceptions import CommitFailedError, DeltaError

                for _ in range(commits):
                    for _attempt in range(100):
                        try:
                            write_deltalake(path, data, mode="append")
                            break
                        except CommitFailedError:
                            retried += 1  # delta-rs ran out of its 15 retries
                        except DeltaError as exc:
                            # delta-rs sometimes trips over a concurrent commit while
                            # reading the log ("File not found: .../<v>.json"); retry.
                            if "not found" not in str(exc).lower():
                                raise
                            errors += 1
                    else:
                        raise RuntimeError("delta-rs failed the same append 100 times")
            outbox.put({"index": index, "gave_up": retried, "errors": errors})
        except Exception as exc:
            outbox.put({"index": index, "error": "".join(traceback.format_exception(exc))})


def _pool(side: str, writers: int) -> _WriterPool:
    key = (side, writers)
    if key not in _pools:
        _pools[key] = _WriterPool(side, writers)
    return _pools[key]


def _fresh_path() -> str:
    """A new table directory for this run; the previous run's table of this process is removed.

    Paths are unique per process, so benchmark runs going on at the same time never
    touch each other's tables.
    """
    runs = data_dir("commit_throughput") / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for previous in _made_paths:
        shutil.rmtree(previous, ignore_errors=True)
    _made_paths.clear()
    path = runs / f"{os.getpid()}-{uuid.uuid4().hex}"
    _made_paths.append(path)
    return str(path)


_made_paths: list[Path] = []
atexit.register(lambda: [shutil.rmtree(p, ignore_errors=True) for p in _made_paths])


def _check(path: str, expected_versions: int) -> None:
    log_dir = Path(path, "_delta_log")
    versions = sorted(int(f.name.split(".")[0]) for f in log_dir.glob("*.json"))
    assert versions == list(range(expected_versions + 1)), f"expected versions 0..{expected_versions}, got {versions[-3:]}"


def ours_commits(writers: int, commits: int) -> dict[str, int]:
    import pyarrow as pa

    from airflow_delta.engine import DeltaTable

    pool = _pool("ours", writers)
    path = _fresh_path()
    schema = pa.schema([("id", pa.int64()), ("value", pa.string())])
    DeltaTable.create(path, schema, properties=CONFIG)
    results = pool.run(path, commits)
    _check(path, writers * commits)
    return {"gave_up": sum(r["gave_up"] for r in results), "errors": sum(r["errors"] for r in results)}


def delta_rs_commits(writers: int, commits: int) -> dict[str, int]:
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable

    pool = _pool("delta-rs", writers)
    path = _fresh_path()
    schema = pa.schema([("id", pa.int64()), ("value", pa.string())])
    RsTable.create(path, schema, configuration=CONFIG)
    results = pool.run(path, commits)
    _check(path, writers * commits)
    return {"gave_up": sum(r["gave_up"] for r in results), "errors": sum(r["errors"] for r in results)}


def cases() -> list[Case]:
    return [
        Case(f"{n} writer(s) x {COMMITS_PER_WRITER}", ours="ours_commits", theirs="delta_rs_commits",
             args=(n, COMMITS_PER_WRITER), repeat=2)
        for n in WRITERS
    ]


def main() -> int:
    print(f"{'writers':>7} {'commits':>7} {'ours commits/s':>14} {'delta-rs commits/s':>18} {'ours/delta-rs':>13}")
    for n in WRITERS:
        total = n * COMMITS_PER_WRITER
        ours = measure("commit_throughput", "ours_commits", (n, COMMITS_PER_WRITER), 2)
        theirs = measure("commit_throughput", "delta_rs_commits", (n, COMMITS_PER_WRITER), 2)
        ours_rate, theirs_rate = total / ours.seconds, total / theirs.seconds
        counts = delta_rs_commits(n, COMMITS_PER_WRITER)  # one more, untimed, run to count failures
        print(
            f"{n:>7} {total:>7} {ours_rate:>14.1f} {theirs_rate:>18.1f} {ours_rate / theirs_rate:>13.2f}"
            f"   (delta-rs: out of retries {counts['gave_up']}x, log read errors {counts['errors']}x)",
            flush=True,
        )
    print("ours/delta-rs above 1: we commit faster", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
