"""A Spark standalone master and worker on 127.0.0.1, for tests that submit to a real cluster.

Started with ``spark-class`` from the venv's PySpark, web UIs on free ports, logs and the
worker's work and local directories in a temporary directory of their own, so that a
client-mode driver shares no temporary files with the worker. One cluster per test
session (per xdist worker), stopped at the end.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SPARK_CLASS = Path(sys.executable).parent / "spark-class"
STARTUP_TIMEOUT_SECONDS = 90
# The JVM options of the cluster's daemons, and of the executors a test's job may ask for
# (``spark.executor.extraJavaOptions``): the C1 compiler only and the serial GC. They serve
# a few small jobs and exit; C2's compilations and the parallel GC's threads would cost
# more CPU than they ever save on the 2 cores the suite shares.
STANDALONE_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    base_dir: Path
    worker_dir: Path

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}"
            for path in sorted(self.base_dir.glob("*.log"))
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(condition: object, what: str, processes: list[subprocess.Popen[bytes]], logs: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        dead = [p.args for p in processes if p.poll() is not None]
        if dead:
            break
        time.sleep(0.5)
    text = "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(logs.glob("*.log")))
    raise RuntimeError(f"the standalone cluster did not come up ({what}):\n{text}")


def _start(name: str, args: list[str], env: dict[str, str], base: Path) -> subprocess.Popen[bytes]:
    log = open(base / f"{name}.log", "wb")  # noqa: SIM115 - the process writes it until the session ends
    return subprocess.Popen(
        [str(SPARK_CLASS), *args],
        env=env,
        cwd=base,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    base = tmp_path_factory.mktemp("spark-standalone")
    worker_dir = base / "worker"
    (worker_dir / "work").mkdir(parents=True)
    (worker_dir / "local").mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SPARK_", "PYSPARK_"))}
    env.pop("PYTHONPATH", None)  # executors get the engine from the job's py_files, nothing else
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(base),
        SPARK_WORKER_DIR=str(worker_dir / "work"),
        SPARK_LOCAL_DIRS=str(worker_dir / "local"),
        SPARK_NO_DAEMONIZE="1",
        SPARK_DAEMON_JAVA_OPTS=STANDALONE_JAVA_OPTIONS,
        SPARK_HOME=str(Path(importlib.util.find_spec("pyspark").origin).parent),  # type: ignore[arg-type]
    )
    port = _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    master = _start(
        "master",
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(_free_port()),
        ],
        env,
        base,
    )
    processes = [master]
    try:
        _wait_for(lambda: _accepts(port), "master port", processes, base)
        worker = _start(
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                master_url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(_free_port()),
                "--work-dir",
                str(worker_dir / "work"),
            ],
            env,
            base,
        )
        processes.append(worker)
        _wait_for(
            lambda: "Successfully registered with master" in (base / "worker.log").read_text(errors="replace"),
            "worker registration",
            processes,
            base,
        )
        yield StandaloneCluster(master_url=master_url, base_dir=base, worker_dir=worker_dir)
    finally:
        for process in reversed(processes):
            _stop(process)


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0
