"""The class-data-sharing archive of a client-mode driver JVM: Spark's classes, loaded once per worker.

Every ``spark-submit`` starts a JVM that loads, parses and verifies several thousand
classes from Spark's jars before the job does anything: for a small job that is most of
the JVM's CPU. HotSpot's dynamic CDS archive keeps those classes parsed and verified in a
file that later JVMs map: a JVM run with ``-XX:ArchiveClassesAtExit=FILE`` writes the
classes it loaded when it exits, and one run with ``-XX:SharedArchiveFile=FILE`` starts
from them (JDK 13 or later; Spark 4 requires 17).

The hook asks :func:`driver_class_archive` for the options of a client-mode driver (the
JVM runs here, so the archive is a local file). The archive is named by a key of the Java
runtime and of Spark's jars (names, sizes, mtimes), so an upgrade of either starts a new
one; the JVM itself checks the archive against its runtime and class path and starts
without it (as if there were none) when they differ, so a stale archive can only cost
speed. No job's JVM writes the archive: after the first successful job of a key, the hook
starts a detached background process (:meth:`DriverClassArchive.write_in_background`) that
runs a small Spark job (:data:`~airflow_delta.spark.jobs.CLASS_ARCHIVE_PROGRAM`) whose
driver writes the archive at its exit (``-XX:ArchiveClassesAtExit``) to a temporary file,
renamed into place when that job succeeded. A lock file lets one writer run at a time; it
is held by the writer's processes themselves, so a killed writer frees it. Stdlib only: the hook runs this in the worker.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from airflow_delta.spark.jobs import CLASS_ARCHIVE_PROGRAM, SMALL_JOB_CONF
from airflow_delta.spark.packaging import default_cache_dir

__all__ = [
    "ARCHIVE_SUFFIX",
    "DriverClassArchive",
    "driver_class_archive",
    "java_executable",
    "pyspark_home",
    "worker_driver_class_archive",
    "worker_spark_home",
]

ARCHIVE_SUFFIX = ".jsa"
_ARCHIVE_PREFIX = "spark-driver-classes-"
# Bumped when the archive's options change, so that a new kind never reuses an old name.
_ARCHIVE_LAYOUT = b"airflow-delta driver CDS archive 1\n"
_TEMPORARY_SUFFIX = ".tmp"
# After a writer failed (its log is kept as the failure log), none starts for this long.
_RETRY_FAILED_AFTER_SECONDS = 3600.0
# Writers still running that this process started: kept so that they are reaped, not warned about.
_started_writers: list[subprocess.Popen[bytes]] = []


def java_executable(env: Mapping[str, str]) -> Path | None:
    """The ``java`` that ``spark-submit`` runs under ``env`` (``$JAVA_HOME/bin/java``, else the one on PATH), resolved."""
    java_home = env.get("JAVA_HOME")
    found = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java", path=env.get("PATH"))
    if found is None or not Path(found).is_file():
        return None
    return Path(os.path.realpath(found))


def _archive_key(spark_home: Path, java: Path) -> str | None:
    """A digest of what the archive depends on: the Java runtime and Spark's jars; None without jars."""
    jars = spark_home / "jars"
    try:
        entries = sorted(os.scandir(jars), key=lambda entry: entry.name)
        java_stat = java.stat()
    except OSError:
        return None
    digest = hashlib.sha256(_ARCHIVE_LAYOUT)
    digest.update(f"{java}\0{java_stat.st_size}\0{java_stat.st_mtime_ns}\n".encode())
    jar_count = 0
    for entry in entries:
        if entry.name.endswith(".jar"):
            jar_stat = entry.stat()
            digest.update(f"{entry.name}\0{jar_stat.st_size}\0{jar_stat.st_mtime_ns}\n".encode())
            jar_count += 1
    return digest.hexdigest() if jar_count else None


@dataclass(frozen=True)
class DriverClassArchive:
    """The archive of one Spark installation and Java runtime, at ``path`` once a job has written it."""

    path: Path

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    def use_option(self) -> str:
        """The JVM option that starts a driver from the archive."""
        return f"-XX:SharedArchiveFile={self.path}"

    @property
    def lock_path(self) -> Path:
        """The lock file that one writer at a time holds (shared by every key in the cache directory)."""
        return self.path.parent / f"{_ARCHIVE_PREFIX}writer.lock"

    @property
    def log_path(self) -> Path:
        """The output of the running (or last successful) writer."""
        return self.path.parent / f"{_ARCHIVE_PREFIX}writer.log"

    @property
    def failed_log_path(self) -> Path:
        """The output of the last writer that failed; no writer starts while it is under an hour old."""
        return self.path.parent / f"{_ARCHIVE_PREFIX}writer.failed.log"

    def being_written(self) -> bool:
        """Whether a writer holds the lock now (its Python process, spark-submit's JVM, or both)."""
        if not self.lock_path.exists():
            return False
        lock_fd = os.open(self.lock_path, os.O_RDONLY)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(lock_fd)  # also releases a lock taken just now
        return False

    def write_in_background(self, env: Mapping[str, str], java_options: str = "") -> int | None:
        """Start a detached writer of this archive; its process id, or None when none started.

        None starts when the archive exists, another writer runs (it holds the lock), or the
        last writer failed less than an hour ago. The writer runs in a session of its own,
        with ``env`` (a ``PATH`` that finds ``spark-submit`` and the ``SPARK_HOME`` the
        archive is keyed by), and starts its driver with ``java_options`` as well. It
        inherits the lock, which its spark-submit JVM inherits in turn: the lock is held
        until the last of them exits, whichever way they end.
        """
        for finished in [writer for writer in _started_writers if writer.poll() is not None]:
            _started_writers.remove(finished)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            if self.exists or self._failed_recently():
                return None
            with self.log_path.open("wb") as log:
                writer = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(self.path), str(lock_fd), java_options],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=dict(env), cwd=self.path.parent, pass_fds=(lock_fd,), start_new_session=True,
                )
            os.ftruncate(lock_fd, 0)
            os.write(lock_fd, f"{writer.pid}\n".encode())
            _started_writers.append(writer)
            return writer.pid
        finally:
            os.close(lock_fd)  # the writer's copy of the descriptor keeps the lock

    def _failed_recently(self) -> bool:
        try:
            return time.time() - self.failed_log_path.stat().st_mtime < _RETRY_FAILED_AFTER_SECONDS
        except OSError:
            return False

    def write(self, lock_fd: int, java_options: str) -> bool:
        """Run the small job whose driver writes the archive, and keep it if the job succeeded (the writer's body).

        Runs with the lock held (``lock_fd``), so any temporary archive in the directory
        belongs to a writer that was killed: those are removed first (each is about a
        hundred megabytes).
        """
        for abandoned in self.path.parent.glob(f".{_ARCHIVE_PREFIX}*{_TEMPORARY_SUFFIX}"):
            abandoned.unlink(missing_ok=True)
        dump = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}{_TEMPORARY_SUFFIX}")
        # The JVM warns on stdout about every class it cannot archive (hundreds of lines): off.
        driver_options = f"{java_options} -XX:ArchiveClassesAtExit={dump} -Xlog:cds=off".strip()
        spark_submit = shutil.which("spark-submit") or "spark-submit"
        confs = {
            **SMALL_JOB_CONF,
            "spark.driver.extraJavaOptions": driver_options,
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
        }
        command = [spark_submit, "--master", "local[1]"]
        for key, value in confs.items():
            command += ["--conf", f"{key}={value}"]
        try:
            with tempfile.TemporaryDirectory(prefix="airflow-delta-class-archive-") as scratch:
                finished = subprocess.run(
                    [*command, CLASS_ARCHIVE_PROGRAM, str(Path(scratch) / "rows")],
                    stdin=subprocess.DEVNULL, cwd=scratch, pass_fds=(lock_fd,), check=False,
                )
            kept = finished.returncode == 0 and self.keep(dump)
        finally:
            dump.unlink(missing_ok=True)
        print(f"driver class archive {self.path}: {'written' if kept else 'not written'}", flush=True)
        if kept:
            self.failed_log_path.unlink(missing_ok=True)
        elif self.log_path.exists():
            os.replace(self.log_path, self.failed_log_path)
        return kept

    def keep(self, dump: Path) -> bool:
        """Rename a driver's finished ``dump`` into place (unless an archive is there already); whether it was kept.

        The dump is removed in any case: a JVM that wrote nothing leaves nothing behind.
        """
        try:
            if not self.exists and dump.is_file() and dump.stat().st_size > 0:
                dump.chmod(0o644)  # the JVM writes it read-only; other local users may run drivers too
                os.replace(dump, self.path)
                self._remove_older_archives()
                return True
            return False
        finally:
            dump.unlink(missing_ok=True)

    def _remove_older_archives(self) -> None:
        """Remove the archives of other keys (an earlier Spark or Java install): about 160 MB each.

        The newest archive replaces them rather than accumulating one per install. A worker
        that still runs another install writes its own archive again after its next job.
        """
        for other in self.path.parent.glob(f"{_ARCHIVE_PREFIX}*{ARCHIVE_SUFFIX}"):
            if other != self.path:
                try:
                    other.unlink()
                except OSError:
                    pass  # another worker process removed it already


def driver_class_archive(spark_home: str | Path, env: Mapping[str, str], cache_dir: Path) -> DriverClassArchive | None:
    """The archive for drivers of the Spark at ``spark_home`` run by ``env``'s Java, in ``cache_dir``; None if unknown."""
    java = java_executable(env)
    if java is None:
        return None
    key = _archive_key(Path(spark_home), java)
    if key is None:
        return None
    return DriverClassArchive(cache_dir / f"{_ARCHIVE_PREFIX}{key}{ARCHIVE_SUFFIX}")


def pyspark_home() -> str | None:
    """The directory of the worker's PySpark installation (a complete SPARK_HOME), without importing it."""
    found = importlib.util.find_spec("pyspark")
    if found is None or found.origin is None:
        return None
    return str(Path(found.origin).parent)


def worker_spark_home(env: Mapping[str, str]) -> str | None:
    """The Spark that ``spark-submit`` runs under ``env``: ``$SPARK_HOME``, else the installed PySpark.

    The hook sets it when ``env`` lacks it (spark-submit would otherwise ask the system
    ``python3``), and the archive is keyed by the same installation.
    """
    return env.get("SPARK_HOME") or pyspark_home()


def worker_driver_class_archive() -> DriverClassArchive | None:
    """The archive of client-mode drivers that this worker's ``spark-submit`` starts
    (:func:`worker_spark_home`; the Java that ``spark-submit`` finds), in the worker's
    cache (:func:`~airflow_delta.spark.packaging.default_cache_dir`)."""
    spark_home = worker_spark_home(os.environ)
    return None if spark_home is None else driver_class_archive(spark_home, os.environ, default_cache_dir())


def _write_main(argv: list[str]) -> int:
    """The background writer: ``python -m airflow_delta.hooks.driver_jvm ARCHIVE LOCK_FD JAVA_OPTIONS``."""
    archive_path, lock_fd, java_options = argv
    return 0 if DriverClassArchive(Path(archive_path)).write(int(lock_fd), java_options) else 1


if __name__ == "__main__":
    sys.exit(_write_main(sys.argv[1:]))
