"""Delta Lake on Spark as a test oracle and a live peer (issue 17).

The reference implementation runs in its own virtualenv (``.cache/delta-venv``: PySpark
4.2 and delta-spark 4.4, with Delta's jars from Maven Central in ``.cache/delta-jars``;
``make test`` sets both up through scripts/setup_delta_oracle.sh). A
:class:`DeltaLakeSession` starts one long-lived Spark-with-Delta process
(tests/delta_lake_server.py) and talks to it over its stdin/stdout, one JSON object a
line; rows come back as Arrow IPC files, so types arrive as Spark has them.

    delta_lake.sql("CREATE TABLE delta.`/tmp/t` (id BIGINT) USING delta")
    delta_lake.sql("DELETE FROM delta.`/tmp/t` WHERE id = 1")  # -> [{"num_affected_rows": 1}]
    delta_lake.read("/tmp/t", version=0)  # -> pyarrow.Table
    delta_lake.read_versions("/tmp/t", range(3))  # -> {version: pyarrow.Table}, one request
    delta_lake.read_many(["/tmp/t", "/tmp/u"])  # -> [pyarrow.Table, ...], one request
    delta_lake.history("/tmp/t")  # DESCRIBE HISTORY, newest first, operationMetrics a dict
    delta_lake.detail("/tmp/t")  # DESCRIBE DETAIL as one dict

Delta's errors raise :class:`DeltaLakeError` with Delta's names for them
(``.exception_class`` like ``ConcurrentAppendException``, ``.error_class`` like
``DELTA_CONCURRENT_APPEND.WITHOUT_HINT``). The ``delta_lake`` fixture (tests/conftest.py)
is one session per pytest(-xdist) worker, and every test that uses it runs on one worker
(``xdist_group("delta_lake")`` with ``--dist loadgroup``), so a CI run starts one; a test that needs a second, independent Delta
writer (a concurrency test) starts its own with ``DeltaLakeSession.start(...)`` as a
context manager. Calls on one session are serialised (a lock), so threads may share it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc

REPO_ROOT = Path(__file__).resolve().parents[1]
SERVER = Path(__file__).resolve().with_name("delta_lake_server.py")
SETUP_HINT = "run `make test` (or `make delta-oracle`) to set up Delta Lake under .cache/"
DEFAULT_TIMEOUT_SECONDS = 900.0
READ_COLUMN = "__delta_oracle_read__"  # tests/delta_lake_server.py tags each read's rows with it


def delta_home() -> Path:
    """Where scripts/setup_delta_oracle.sh put the venv and jars (``DELTA_ORACLE_HOME`` overrides)."""
    return Path(os.environ.get("DELTA_ORACLE_HOME", str(REPO_ROOT / ".cache")))


class DeltaLakeError(Exception):
    """An error Delta Lake (or Spark) raised for a request, with Delta's names for it."""

    def __init__(
        self,
        message: str,
        *,
        error_class: str | None = None,
        exception_class: str | None = None,
        java_class: str | None = None,
        request: str | None = None,
    ) -> None:
        super().__init__(f"{exception_class or 'error'} [{error_class}]: {message}")
        self.message = message
        self.error_class = error_class
        self.exception_class = exception_class
        self.java_class = java_class
        self.request = request


class DeltaLakeUnavailableError(RuntimeError):
    """The Delta venv or jars are missing, or the Spark process died: says how to fix it."""


def _quote(path: str | Path) -> str:
    return "delta.`" + str(path).replace("`", "``") + "`"


def table_ref(path: str | Path) -> str:
    """``delta.`<path>``` for a table path, for SQL text."""
    return _quote(path)


def _plain(value: Any) -> Any:
    """A map column's ``[(key, value), ...]`` as a dict, recursively."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class DeltaLakeSession:
    """One Spark-with-Delta process (local mode), alive until :meth:`close`."""

    def __init__(
        self,
        process: subprocess.Popen[str],
        work_dir: Path,
        log_file: IO[str],
        spark_version: str,
    ) -> None:
        self._process = process
        self._work_dir = work_dir
        self._log_file = log_file
        self._lock = threading.Lock()
        self._request_id = 0
        self.spark_version = spark_version

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def start(
        cls,
        work_dir: str | Path | None = None,
        *,
        name: str = "delta-oracle",
        master: str = "local[2]",
        driver_memory: str = "1g",
        shuffle_partitions: int = 1,
        spark_conf: Mapping[str, str] | None = None,
    ) -> DeltaLakeSession:
        """Start a session (a few seconds: a JVM); ``work_dir`` holds its logs and results."""
        home = delta_home()
        python = home / "delta-venv" / "bin" / "python"
        jars = home / "delta-jars"
        if not python.exists() or not (jars / ".installed-stamp").exists():
            raise DeltaLakeUnavailableError(f"Delta Lake is not set up ({python}, {jars} missing): {SETUP_HINT}")
        work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="delta-oracle-"))
        work.mkdir(parents=True, exist_ok=True)
        config = {
            "work_dir": str(work),
            "jars_dir": str(jars),
            "name": name,
            "master": master,
            "driver_memory": driver_memory,
            "shuffle_partitions": shuffle_partitions,
            "spark_conf": dict(spark_conf or {}),
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only, and no hostname warning
        log_file = open(work / "spark.log", "w")  # noqa: SIM115 - closed by close()
        process = subprocess.Popen(
            [str(python), str(SERVER), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            env=env,
            cwd=str(work),
        )
        session = cls(process, work, log_file, spark_version="")
        ready = session._receive("start")
        if not ready.get("ok"):
            session.close()
            raise DeltaLakeUnavailableError(f"Delta Lake's Spark session did not start: {ready.get('message')}")
        session.spark_version = ready["spark"]
        return session

    def close(self) -> None:
        """Stop Spark and the process (idempotent)."""
        process = self._process
        if process.poll() is None:
            try:
                with self._lock:
                    assert process.stdin is not None
                    process.stdin.write(json.dumps({"op": "stop"}) + "\n")
                    process.stdin.flush()
                process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait(timeout=30)
        self._log_file.close()

    def __enter__(self) -> DeltaLakeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int:
        return self._process.pid

    # ------------------------------------------------------------------ requests
    def sql(self, text: str) -> list[dict[str, Any]]:
        """Run one Delta SQL statement; its result rows (maps as dicts)."""
        return [{k: _plain(v) for k, v in row.items()} for row in self.sql_arrow(text).to_pylist()]

    def sql_arrow(self, text: str) -> pa.Table:
        """Run one Delta SQL statement; its result as Arrow."""
        return self._table({"op": "sql", "text": text})

    def read(self, path: str | Path, version: int | None = None) -> pa.Table:
        """The table's rows at ``version`` (latest if None), as Delta on Spark reads them."""
        return self._table({"op": "read", "path": str(path), "version": version})

    def read_versions(self, path: str | Path, versions: Iterable[int]) -> dict[int, pa.Table]:
        """Each of ``versions`` as Delta on Spark reads it, in one request and one Spark job
        per schema: much cheaper than a :meth:`read` per version."""
        wanted = sorted(set(versions))
        return dict(zip(wanted, self.read_many([(path, version) for version in wanted]), strict=True))

    def read_many(self, reads: Iterable[str | Path | tuple[str | Path, int | None]]) -> list[pa.Table]:
        """Several reads, each a path (the latest version) or ``(path, version)``, in one request:
        the reads of one schema are one union, one Spark job. The tables in the order asked."""
        pairs = [(str(r), None) if isinstance(r, str | Path) else (str(r[0]), r[1]) for r in reads]
        answer = self._call({"op": "read_many", "reads": pairs})
        tables: dict[int, pa.Table] = {}
        for group in answer["groups"]:
            table = self._arrow_file(Path(group["arrow"]))
            tags = table.column(READ_COLUMN)
            rows = table.drop_columns([READ_COLUMN])
            for index in group["reads"]:
                tables[index] = rows.filter(pc.equal(tags, index))
        return [tables[index] for index in range(len(pairs))]

    def history(self, path: str | Path) -> list[dict[str, Any]]:
        """``DESCRIBE HISTORY``: one dict per commit, newest first; operationMetrics etc. as dicts."""
        table = self._table({"op": "history", "path": str(path)})
        return [{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()]

    def detail(self, path: str | Path) -> dict[str, Any]:
        """``DESCRIBE DETAIL`` as one dict (properties as a dict)."""
        rows = self._table({"op": "detail", "path": str(path)}).to_pylist()
        return {k: _plain(v) for k, v in rows[0].items()}

    def _table(self, request: dict[str, Any]) -> pa.Table:
        return self._arrow_file(Path(self._call(request)["arrow"]))

    @staticmethod
    def _arrow_file(arrow_path: Path) -> pa.Table:
        """An answer's Arrow file, read and removed."""
        try:
            with pa.memory_map(str(arrow_path)) as source:
                return pa.ipc.open_file(source).read_all()
        finally:
            arrow_path.unlink(missing_ok=True)

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        description = request.get("text") or f"{request['op']} {request.get('path', '')}"
        with self._lock:
            process = self._process
            if process.poll() is not None:
                raise DeltaLakeUnavailableError(f"Delta Lake's Spark process has exited: {self._log_tail()}")
            assert process.stdin is not None
            self._request_id += 1
            request_id = self._request_id
            process.stdin.write(json.dumps(request | {"id": request_id}) + "\n")
            process.stdin.flush()
            # A call interrupted earlier (a test's timeout) leaves its answer in the pipe:
            # answers to older requests are skipped, so each caller gets its own.
            answer = self._receive(description)
            while answer.get("id") != request_id:
                for stale in [answer.get("arrow")] + [g["arrow"] for g in answer.get("groups", ())]:
                    if stale:
                        Path(stale).unlink(missing_ok=True)
                answer = self._receive(description)
        if not answer.get("ok"):
            raise DeltaLakeError(
                answer.get("message", ""),
                error_class=answer.get("error_class"),
                exception_class=answer.get("exception_class"),
                java_class=answer.get("java_class"),
                request=description,
            )
        return answer

    def _receive(self, description: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> dict[str, Any]:
        assert self._process.stdout is not None
        # A hung JVM must not hang the suite: past the timeout the process is killed, which
        # ends the read below with EOF and the error names the request.
        watchdog = threading.Timer(timeout, self._process.kill)
        watchdog.daemon = True
        watchdog.start()
        try:
            line = self._process.stdout.readline()
        finally:
            watchdog.cancel()
        if not line:
            self._process.wait(timeout=30)
            raise DeltaLakeUnavailableError(
                f"Delta Lake's Spark process ended during {description!r} "
                f"(killed after {timeout:.0f}s if it hung): {self._log_tail()}"
            )
        return json.loads(line)

    def _log_tail(self, lines: int = 40) -> str:
        self._log_file.flush()
        try:
            text = (self._work_dir / "spark.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    """A table's rows sorted by every column (as tests/oracles.py sorts them)."""
    from tests.oracles import _sort

    return _sort(table.to_pylist())
