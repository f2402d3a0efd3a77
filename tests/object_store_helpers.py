"""Real object-store servers on loopback for the tests: moto's S3 server and Azurite.

Each server runs as a child process on a free port of 127.0.0.1, started once per test
session (per xdist worker) and stopped at its end (fixtures in ``tests/conftest.py``).
Azurite comes from the npm registry: installed once into ``.cache/azurite`` of the
repository (gitignored), under a file lock so that parallel workers install it once.
A server that cannot be installed or started fails the tests that need it with the
reason, never skips them.

Test code reaches the servers two ways: through the engine (``storage_options`` in
delta-rs's keys, ``uri(name)``), and through clients independent of the engine's FileIO
(``boto3`` for S3; Azure Blob REST signed with the account key, or obstore directly), which
set up buckets and check what the engine wrote.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any

import obstore
from obstore.store import AzureStore, S3Store

REPO = Path(__file__).resolve().parents[1]
AZURITE_VERSION = "3.37.0"
AZURITE_DIR = REPO / ".cache" / f"azurite-{AZURITE_VERSION}"
# Azurite's well-known development account (public, documented by Microsoft for the emulator).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
MOTO_KEY_ID, MOTO_SECRET, MOTO_REGION = "testing-key-id", "testing-secret", "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout}s: {log.read_text()[-2000:]}")


@dataclass
class ObjectStoreServer:
    """One running server: its store kind, bucket, the engine's storage options and the process."""

    kind: str  # "s3" or "azure"
    scheme: str
    bucket: str
    storage_options: dict[str, str]
    endpoint: str
    process: subprocess.Popen[bytes]
    created: set[str] = field(default_factory=set)

    def uri(self, name: str | None = None) -> str:
        """A fresh table URI in the bucket (a unique prefix unless ``name`` is given)."""
        return f"{self.scheme}://{self.bucket}/{name or 'table-' + uuid.uuid4().hex[:12]}"

    def key_of(self, uri: str) -> str:
        return uri.split("://", 1)[1].split("/", 1)[1]

    def raw_store(self) -> S3Store | AzureStore:
        """obstore directly (not the engine's FileIO): to plant or inspect objects."""
        if self.kind == "s3":
            return S3Store(self.bucket, config={
                "aws_endpoint": self.endpoint, "aws_access_key_id": MOTO_KEY_ID, "aws_secret_access_key": MOTO_SECRET,
                "aws_region": MOTO_REGION}, client_options={"allow_http": True})
        return AzureStore(self.bucket, config={
            "azure_storage_account_name": AZURITE_ACCOUNT, "azure_storage_account_key": AZURITE_KEY,
            "azure_endpoint": self.endpoint}, client_options={"allow_http": True})

    def keys(self, prefix: str) -> list[str]:
        """Every object key below ``prefix`` (listed by the independent client)."""
        if self.kind == "s3":
            client = s3_client(self.endpoint)
            keys: list[str] = []
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                keys.extend(o["Key"] for o in page.get("Contents", []))
            return sorted(keys)
        return sorted(meta["path"] for page in obstore.list(self.raw_store(), prefix) for meta in page)

    def read(self, key: str) -> bytes:
        if self.kind == "s3":
            return s3_client(self.endpoint).get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return obstore.get(self.raw_store(), key).bytes().to_bytes()

    def new_bucket(self) -> str:
        """Create another bucket (container) and return its name."""
        name = f"b{uuid.uuid4().hex[:16]}"
        if self.kind == "s3":
            s3_client(self.endpoint).create_bucket(Bucket=name)
        else:
            create_azure_container(self.endpoint, name)
        return name

    def stop(self) -> None:
        # Killed outright: both servers take seconds to shut down gracefully, and nothing
        # they hold outlives the session (Azurite's data is in the session's tmp dir).
        self.process.kill()
        self.process.wait()


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=MOTO_KEY_ID,
                        aws_secret_access_key=MOTO_SECRET, region_name=MOTO_REGION)


def start_moto(tmp: Path) -> ObjectStoreServer:
    """moto's S3 server (``tests/moto_s3_server.py``: moto's app, writes serialised as S3 makes
    conditional creates atomic) on a free port."""
    port = free_port()
    log = tmp / "moto.log"
    process = subprocess.Popen([sys.executable, "-m", "tests.moto_s3_server", str(port)], stdout=log.open("wb"),
                               stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    _wait_for_port(port, process, log, "moto_server")
    endpoint = f"http://127.0.0.1:{port}"
    bucket = f"delta-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint).create_bucket(Bucket=bucket)
    options = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": MOTO_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": MOTO_SECRET,
        "AWS_REGION": MOTO_REGION,
        "AWS_ALLOW_HTTP": "true",
    }
    return ObjectStoreServer("s3", "s3", bucket, options, endpoint, process)


def install_azurite() -> Path:
    """The ``azurite-blob`` executable, installed from npm into ``.cache/`` once (under a lock)."""
    binary = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed: Azurite (npm package 'azurite') runs the Azure tests; install Node.js and npm")
    AZURITE_DIR.mkdir(parents=True, exist_ok=True)
    with open(AZURITE_DIR / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            result = subprocess.run(
                [npm, "install", "--prefix", str(AZURITE_DIR), f"azurite@{AZURITE_VERSION}", "--no-audit", "--no-fund",
                 "--loglevel", "error"],
                capture_output=True, text=True, timeout=600,
            )
            if result.returncode != 0 or not binary.exists():
                raise RuntimeError(
                    f"npm install azurite@{AZURITE_VERSION} failed (is the npm registry reachable?): "
                    f"{result.stderr[-2000:]}"
                )
    return binary


def start_azurite(tmp: Path) -> ObjectStoreServer:
    """Azurite's Blob service on a free port, data under ``tmp``."""
    binary = install_azurite()
    port = free_port()
    log = tmp / "azurite.log"
    data = tmp / "azurite-data"
    data.mkdir()
    process = subprocess.Popen(
        [str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(data),
         "--skipApiVersionCheck", "--loose", "--silent"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env={**os.environ, "NODE_NO_WARNINGS": "1"},
    )
    _wait_for_port(port, process, log, "azurite-blob")
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    container = f"delta-{uuid.uuid4().hex[:12]}"
    create_azure_container(endpoint, container)
    options = {
        "AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT,
        "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
        "AZURE_ENDPOINT": endpoint,
        "AZURE_ALLOW_HTTP": "true",
    }
    return ObjectStoreServer("azure", "az", container, options, endpoint, process)


def create_azure_container(endpoint: str, container: str) -> None:
    """``PUT ?restype=container`` signed with the account's Shared Key (what the Azure SDK sends)."""
    date = formatdate(usegmt=True)
    version = "2021-08-06"
    # Canonicalised resource of a path-style (emulator) URL: the account, then the URL path.
    string_to_sign = (
        "PUT\n" + "\n" * 11 + f"x-ms-date:{date}\nx-ms-version:{version}\n"
        f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{container}\nrestype:container"
    )
    signature = base64.b64encode(
        hmac.new(base64.b64decode(AZURITE_KEY), string_to_sign.encode(), hashlib.sha256).digest()
    ).decode()
    request = urllib.request.Request(
        f"{endpoint}/{container}?restype=container", method="PUT",
        headers={"x-ms-date": date, "x-ms-version": version, "Content-Length": "0",
                 "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{signature}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        if response.status != 201:
            raise RuntimeError(f"creating container {container} answered {response.status}")


@contextlib.contextmanager
def running(server: ObjectStoreServer) -> Iterator[ObjectStoreServer]:
    try:
        yield server
    finally:
        server.stop()


class FaultyProxy:
    """An HTTP proxy on loopback in front of a server that fails requests the way stores do.

    ``fail_next(n, status)`` answers the next ``n`` requests with ``status`` (503 Slow Down,
    500, 429 throttling; 0 closes the connection without an answer, as a reset does) instead
    of forwarding them; ``reject_conditional_puts`` answers
    every PUT with ``If-None-Match`` with 501 Not Implemented, like an S3-compatible server
    without conditional writes. ``requests`` counts what reached the proxy.
    """

    def __init__(self, target: str) -> None:
        import http.server
        import threading
        from urllib.parse import urlsplit

        parts = urlsplit(target)
        self.target_host, self.target_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.path_prefix = parts.path.rstrip("/")
        self.requests = 0
        self.failures_left = 0
        self.failure_status = 503
        self.failure_code = "SlowDown"
        self.reject_conditional_puts = False
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with proxy._lock:
                    proxy.requests += 1
                    fail = proxy.failures_left > 0
                    if fail:
                        proxy.failures_left -= 1
                status = proxy.failure_status if fail else None
                code = proxy.failure_code if fail else "NotImplemented"
                if status is None and proxy.reject_conditional_puts and self.command == "PUT" and (
                    "If-None-Match" in self.headers
                ):
                    status = 501
                if status == 0:  # a connection reset: closed without a response
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if status is not None:
                    payload = f"<Error><Code>{code}</Code><Message>injected by the test proxy</Message></Error>".encode()
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                import http.client

                connection = http.client.HTTPConnection(proxy.target_host, proxy.target_port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"{proxy.target_host}:{proxy.target_port}"
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                self.send_response(response.status)
                head = self.command == "HEAD"  # its Content-Length is the object's size, with no body
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection") and (head or key.lower() != "content-length"):
                        self.send_header(key, value)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                connection.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle  # noqa: N815

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path_prefix}"

    def fail_next(self, count: int, status: int = 503, code: str = "SlowDown") -> None:
        with self._lock:
            self.failures_left, self.failure_status, self.failure_code = count, status, code

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def options_via(server: ObjectStoreServer, endpoint: str, **extra: str) -> dict[str, str]:
    """The server's storage options with the endpoint replaced (a proxy in front of it)."""
    key = "AWS_ENDPOINT_URL" if server.kind == "s3" else "AZURE_ENDPOINT"
    return {**server.storage_options, key: endpoint, **extra}
