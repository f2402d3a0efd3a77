"""Snapshot load of the 100,000-file table from an S3 server, ours vs delta-rs.

Input: the logs of ``snapshot_load`` (1,000 delta-rs commits of 100 files each, 100,000
live files; a JSON-only copy and one with a delta-rs checkpoint of the last version),
uploaded once per run to a moto S3 server that this module starts on loopback
(``moto_server`` from the test extra) and stops at exit. Both sides get the same
storage options (delta-rs's keys, ``AWS_ENDPOINT_URL`` + ``AWS_ALLOW_HTTP``) and
materialise the file URIs, each in fresh processes (imports included):
``DeltaTable(uri, storage_options).snapshot().file_uris()`` for us,
``deltalake.DeltaTable(uri, storage_options=...).file_uris()`` for delta-rs.

The server is moto's single Python process on the same 2 cores as the client, so every
request costs milliseconds of CPU: the numbers compare the two clients' request
patterns (how many requests, how much overlap) rather than S3's latency.
"""

from __future__ import annotations

import atexit
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks._harness import Case, data_dir
from benchmarks.snapshot_load import COMMITS, FILES_PER_COMMIT, prepare

KEY_ID, SECRET, REGION = "bench-key", "bench-secret", "us-east-1"
BUCKET = "delta-bench"


def _start_moto() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = data_dir("object_store_load") / "moto.log"
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    atexit.register(process.kill)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return f"http://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    raise RuntimeError(f"moto_server did not start: {log.read_text()[-2000:]}")


def storage_options(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true"}


def _upload(endpoint: str, local: Path, prefix: str) -> None:
    """Upload a table's ``_delta_log`` (the benchmark never opens data files) under ``prefix``."""
    import obstore
    from obstore.store import S3Store

    store = S3Store(BUCKET, config={"aws_endpoint": endpoint, "aws_access_key_id": KEY_ID,
                                    "aws_secret_access_key": SECRET, "aws_region": REGION},
                    client_options={"allow_http": True})
    files = [f for f in (local / "_delta_log").iterdir() if f.is_file()]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda f: obstore.put(store, f"{prefix}/_delta_log/{f.name}", f.read_bytes()), files))


def cases() -> list[Case]:
    json_only, checkpointed = prepare()
    endpoint = _start_moto()
    import boto3

    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET,
                 region_name=REGION).create_bucket(Bucket=BUCKET)
    started = time.monotonic()
    _upload(endpoint, Path(json_only), "json")
    _upload(endpoint, Path(checkpointed), "checkpoint")
    print(f"  uploaded both logs to moto in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    options = storage_options(endpoint)
    return [
        Case("s3_json_replay_1000_commits", "ours", "delta_rs", (f"s3://{BUCKET}/json", options), repeat=3, fresh=True),
        Case("s3_load_from_checkpoint", "ours", "delta_rs", (f"s3://{BUCKET}/checkpoint", options), repeat=3, fresh=True),
    ]


def ours(uri: str, options: dict[str, Any]) -> dict[str, Any]:
    from airflow_delta.engine import DeltaTable

    files = DeltaTable(uri, options).snapshot().file_uris()
    assert len(files) == COMMITS * FILES_PER_COMMIT, len(files)
    return {"files": len(files)}


def delta_rs(uri: str, options: dict[str, Any]) -> dict[str, Any]:
    from deltalake import DeltaTable

    files = DeltaTable(uri, storage_options=options).file_uris()
    assert len(files) == COMMITS * FILES_PER_COMMIT, len(files)
    return {"files": len(files)}
