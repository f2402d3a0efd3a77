"""Many processes appending, deleting and compacting one table at once.

Six processes (two of each role, started by multiprocessing's fork server) hammer a partitioned table. Afterwards the
log is checked against what every process reported:

- versions are contiguous and every commit that reported success is in the log exactly
  once, at the version it reported (found by its ``txnId``); nothing else is;
- every loser failed with the exception the rules predict for the *first* conflicting
  winner after its read version, and every winner had no such conflicting commit in
  its way (an independent oracle replays the rules from the log);
- the final table holds no duplicated row and none a successful DELETE removed.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.errors import ConcurrentModificationError
from airflow_delta.engine.storage.paths import decode_log_path
from airflow_delta.engine.write.options import CommitOptions
from airflow_delta.engine.write.retry import RetryPolicy

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
PARTITIONS = ("a", "b", "c")
ROLES = ("append", "append", "delete", "delete", "compact", "compact")
OPS_PER_WORKER = 8


def _worker(
    root: str,
    worker: int,
    role: str,
    barrier: Any,
    out_file: str,
    storage_options: dict[str, str] | None = None,
    ops: int = OPS_PER_WORKER,
) -> None:
    # Import everything before the barrier, so that the workers really start together.
    from airflow_delta.engine.read.scan import read_data
    from airflow_delta.engine.write.data_files import write_data_files

    table = DeltaTable(root, storage_options)
    table.version()  # the store's client is built before the barrier too
    rng = random.Random(worker)
    records: list[dict[str, Any]] = []
    barrier.wait()
    for op in range(ops):
        started = time.monotonic()
        part = rng.choice(PARTITIONS)
        record: dict[str, Any] = {"worker": worker, "role": role, "op": op, "partition": part}
        try:
            txn = table.transaction(
                CommitOptions(
                    retry=RetryPolicy(max_attempts=500, initial_backoff=0.001, max_backoff=0.05), seed=worker * 1000 + op
                )
            )
            record["txn_id"] = txn.txn_id
            record["read_version"] = txn.read_version
            if role == "append":
                ids = [worker * 1_000_000 + op * 100 + i for i in range(3)]
                txn.add_files(write_data_files(txn.snapshot, pa.table({"id": ids, "p": [part] * 3}, schema=SCHEMA)))
                operation = "WRITE"
            else:
                files = txn.read_files(f"p = '{part}'")
                record["read_paths"] = [decode_log_path(p) for p in files.column("path").to_pylist()]
                if role == "delete":
                    txn.remove_files(files)
                    operation = "DELETE"
                else:
                    if files.num_rows == 0:
                        txn.abort()
                        record["outcome"] = "skipped"
                        record["seconds"] = round(time.monotonic() - started, 3)
                        records.append(record)
                        continue
                    data = read_data(txn.snapshot, files)
                    txn.remove_files(files, data_change=False)
                    txn.add_files(replace(a, data_change=False) for a in write_data_files(txn.snapshot, data))
                    operation = "OPTIMIZE"
            record["version"] = txn.commit(operation, {"partition": part})
            record["outcome"] = "ok"
            record["attempts"] = txn.attempts
        except ConcurrentModificationError as exc:
            record["outcome"] = type(exc).__name__
            record["winning_version"] = exc.winning_version
        except Exception as exc:
            record["outcome"] = "error"
            record["error"] = "".join(traceback.format_exception(exc))
        record["seconds"] = round(time.monotonic() - started, 3)
        records.append(record)
    Path(out_file).write_text(json.dumps(records))


def _read_log(root: str) -> dict[int, list[dict[str, Any]]]:
    log_dir = Path(root, "_delta_log")
    commits = {}
    for f in log_dir.glob("*.json"):
        commits[int(f.name.split(".")[0])] = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return commits


def _summary(actions: list[dict[str, Any]]) -> dict[str, Any]:
    info = actions[0].get("commitInfo", {})
    return {
        "txn_id": info.get("txnId"),
        "blind": info.get("isBlindAppend") is True,
        "added_parts": {a["add"]["partitionValues"]["p"] for a in actions if "add" in a},
        "removed": {decode_log_path(a["remove"]["path"]) for a in actions if "remove" in a},
    }


def _expected_conflict(record: dict[str, Any], summary: dict[str, Any]) -> str | None:
    """The rules, restated for this workload: what does this winner do to this transaction?"""
    role = record["role"]
    if role == "append":
        return None  # blind appends never conflict on files, and nobody changes metadata
    read = set(record.get("read_paths", []))
    if role == "delete" and not summary["blind"] and record["partition"] in summary["added_parts"]:
        # WriteSerializable: every add of a non-blind winner counts, dataChange=false ones
        # (OPTIMIZE) too (Delta's WinningCommitSummary.changedDataAddedFiles), and it counts
        # for a DELETE that matched no file as well: DELETE changes data, so it is never
        # downgraded to SnapshotIsolation (OptimisticTransaction.canDowngradeToSnapshotIsolation).
        return "ConcurrentAppendException"
    if read & summary["removed"]:
        return "ConcurrentDeleteReadException"
    return None


@pytest.mark.slow
def test_processes_racing_on_one_table(table_path: str, tmp_path: Path) -> None:
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    for part in PARTITIONS:
        table.append(pa.table({"id": [ord(part) * 10 + i for i in range(2)], "p": [part, part]}, schema=SCHEMA))
    setup_versions = table.version()

    records = run_racing_workers(table_path, tmp_path)
    check_race_outcome(
        records, _read_log(table_path), setup_versions, table,
        lambda path: pq.read_table(Path(table_path, path), columns=["id"]).column("id").to_pylist(),
    )
    for path in pc.unique(table.snapshot().add_actions.column("path")).to_pylist():
        assert Path(table_path, decode_log_path(path)).is_file()


def run_racing_workers(uri: str, tmp_path: Path, storage_options: dict[str, str] | None = None,
                       roles: tuple[str, ...] = ROLES, ops: int = OPS_PER_WORKER) -> list[dict[str, Any]]:
    """Start one fresh process per role on the table at ``uri`` together; the records they report.

    The processes are forked by multiprocessing's fork server, which imported this module
    (and with it the engine) once, instead of six spawned interpreters importing it each
    (about a second of CPU apiece). Each worker is still a new process that has not
    touched the table or a store before the race (the server never does).
    """
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])  # read when the server starts (once per test process)
    barrier = ctx.Barrier(len(roles))
    outs = [str(tmp_path / f"worker-{i}.json") for i in range(len(roles))]
    procs = [ctx.Process(target=_worker, args=(uri, i, role, barrier, outs[i], storage_options, ops))
             for i, role in enumerate(roles)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0, f"worker {p.name} exited with {p.exitcode}"
    return [r for out in outs for r in json.loads(Path(out).read_text())]


def check_race_outcome(
    records: list[dict[str, Any]],
    log: dict[int, list[dict[str, Any]]],
    setup_versions: int,
    table: DeltaTable,
    ids_in_file: Callable[[str], list[int]],
) -> None:
    """What the workers reported against the log (``{version: actions}``) and the final table.

    ``ids_in_file(relative_path)`` reads the ids of a data file with a reader independent
    of the engine.
    """
    errors = [r["error"] for r in records if r["outcome"] == "error"]
    assert not errors, errors[0]

    latest = max(log)
    assert sorted(log) == list(range(latest + 1)), "versions must be contiguous"
    summaries = {v: _summary(actions) for v, actions in log.items()}

    committed = [r for r in records if r["outcome"] == "ok"]
    by_txn = {}
    for v in range(setup_versions + 1, latest + 1):
        txn_id = summaries[v]["txn_id"]
        assert txn_id not in by_txn, f"txnId {txn_id} committed twice"
        by_txn[txn_id] = v
    assert {r["txn_id"]: r["version"] for r in committed} == by_txn, "log and reported successes must match exactly"

    for r in records:
        if r["outcome"] == "skipped":
            continue
        end = r["version"] if r["outcome"] == "ok" else r["winning_version"]
        in_the_way = [
            (v, _expected_conflict(r, summaries[v])) for v in range(r["read_version"] + 1, end + 1) if v != r.get("version")
        ]
        first = next(((v, kind) for v, kind in in_the_way if kind is not None), None)
        if r["outcome"] == "ok":
            assert first is None, f"{r['role']} committed over a conflicting winner {first}: {r}"
        else:
            assert first == (r["winning_version"], r["outcome"]), f"rules predict {first} for {r}"

    # The table is readable and consistent: no resurrected or duplicated rows.
    ids = table.snapshot().to_arrow(columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a row is live twice (two rewrites of the same file both won?)"
    deleted: set[int] = set()
    for r in committed:
        if r["role"] == "delete":
            for path in r["read_paths"]:
                deleted.update(ids_in_file(path))
    assert not deleted & set(ids), "rows a successful DELETE removed are live again"
    assert "ok" in {r["outcome"] for r in records}

