"""The concurrency stress of ``test_concurrency_stress.py`` on object stores.

Six processes (two appending, two deleting, two compacting; see run_racing_workers) race on one table on
moto's S3 server and on Azurite, committing through the stores' conditional writes. The
log and the data files are then read with a client independent of the engine's FileIO,
and checked with the same rules as the local stress: contiguous versions, every reported
commit in the log exactly once at its version and nothing else, each loser failed with
the conflict the rules predict, no row lost, duplicated or resurrected.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable
from tests.object_store_helpers import ObjectStoreServer
from tests.stress.test_concurrency_stress import PARTITIONS, SCHEMA, check_race_outcome, run_racing_workers

OPS_PER_WORKER = 3


def _log_from_store(server: ObjectStoreServer, uri: str) -> dict[int, list[dict[str, Any]]]:
    log_prefix = f"{server.key_of(uri)}/_delta_log/"
    commits = {}
    for key in server.keys(log_prefix):
        name = key[len(log_prefix):]
        if name.endswith(".json") and name[:-5].isdigit():
            text = server.read(key).decode()
            commits[int(name[:-5])] = [json.loads(line) for line in text.splitlines() if line.strip()]
    return commits


@pytest.mark.slow
def test_processes_racing_on_one_table_on_an_object_store(object_store: ObjectStoreServer, tmp_path: Path) -> None:
    uri = object_store.uri()
    table = DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=object_store.storage_options)
    for part in PARTITIONS:
        table.append(pa.table({"id": [ord(part) * 10 + i for i in range(2)], "p": [part, part]}, schema=SCHEMA))
    setup_versions = table.version()

    records = run_racing_workers(uri, tmp_path, object_store.storage_options, ops=OPS_PER_WORKER)

    def ids_in_file(path: str) -> list[int]:
        data = object_store.read(f"{object_store.key_of(uri)}/{path}")
        return pq.read_table(io.BytesIO(data), columns=["id"]).column("id").to_pylist()

    log = _log_from_store(object_store, uri)
    check_race_outcome(records, log, setup_versions, table, ids_in_file)
    appended = {i for r in records if r["outcome"] == "ok" and r["role"] == "append"
                for i in range(r["worker"] * 1_000_000 + r["op"] * 100, r["worker"] * 1_000_000 + r["op"] * 100 + 3)}
    live = set(table.snapshot().to_arrow(columns=["id"]).column("id").to_pylist())
    deleted = {i for r in records if r["outcome"] == "ok" and r["role"] == "delete" for path in r["read_paths"]
               for i in ids_in_file(path)}
    assert appended - deleted <= live, "a committed append is lost"
    assert max(log) == table.version() and len([r for r in records if r["outcome"] == "ok"]) == max(log) - setup_versions
