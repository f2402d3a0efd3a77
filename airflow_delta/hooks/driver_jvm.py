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
speed. The first job of a key writes the archive at its JVM's exit to a temporary file
that the hook renames into place after the job succeeds; concurrent first jobs each
write their own file, and one of them wins. Stdlib only: the hook runs this in the worker.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

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
# A temporary archive this old belongs to a JVM that was killed while writing it.
_ABANDONED_AFTER_SECONDS = 3600.0


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

    @staticmethod
    def write_options(dump: Path) -> list[str]:
        """The JVM options that write the archive to ``dump`` at the JVM's exit.

        The JVM warns on stdout about every class it cannot archive (hundreds of lines, in
        the task log): those warnings are off while it writes.
        """
        return [f"-XX:ArchiveClassesAtExit={dump}", "-Xlog:cds=off"]

    def new_dump(self) -> Path:
        """A fresh temporary path for a driver to write the archive to (``-XX:ArchiveClassesAtExit``).

        Temporary archives of killed drivers, older than an hour, are removed first: each
        is about a hundred megabytes.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        prefix = f".{self.path.name}."
        now = time.time()
        for stale in self.path.parent.glob(f"{prefix}*.tmp"):
            try:
                if now - stale.stat().st_mtime > _ABANDONED_AFTER_SECONDS:
                    stale.unlink()
            except OSError:
                pass  # another worker process removed it, or it is not ours to remove
        return self.path.with_name(f"{prefix}{uuid.uuid4().hex}.tmp")

    def keep(self, dump: Path) -> bool:
        """Rename a driver's finished ``dump`` into place (unless an archive is there already); whether it was kept.

        The dump is removed in any case: a JVM that wrote nothing, or another job that won
        the race, leaves nothing behind.
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
        that still runs another install writes its own archive again on its next job.
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
