"""The programs ``spark-submit`` runs, and what their output lines look like.

This package's ``__init__`` imports only the stdlib, so the Airflow side (the hook
building spark-submit arguments) can find the programs and read their lines without
importing pyspark. The programs themselves (:mod:`.dml`) are run by path, never
imported by the operators.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder
from pathlib import Path

__all__ = [
    "CLASS_ARCHIVE_PROGRAM",
    "DML_PROGRAM",
    "ERROR_LINE_PREFIX",
    "EXIT_DELTA_ERROR",
    "RESULT_LINE_PREFIX",
    "SMALL_JOB_CONF",
    "SMALL_JOB_DRIVER_JAVA_OPTIONS",
    "SPARK_APP_LINE_PREFIX",
    "prefer_installed_pyspark",
]

DML_PROGRAM = str(Path(__file__).with_name("dml.py"))
"""The path of the DELETE/UPDATE/MERGE program: the application argument of spark-submit."""

CLASS_ARCHIVE_PROGRAM = str(Path(__file__).with_name("warm_classes.py"))
"""The path of the small job whose driver writes the class archive (:mod:`airflow_delta.hooks.driver_jvm`)."""

RESULT_LINE_PREFIX = "AIRFLOW_DELTA_RESULT"
"""Starts the one stdout line of a job that succeeded, followed by a space and the JobResult JSON."""

ERROR_LINE_PREFIX = "AIRFLOW_DELTA_ERROR"
"""Starts the one stdout line of a job that failed with an engine error, followed by a space
and ``{"class": ..., "message": ..., "retryable": ...}``."""

SPARK_APP_LINE_PREFIX = "AIRFLOW_DELTA_SPARK_APP"
"""Starts the stdout line a job prints when it registers its Spark application (builds its
SparkSession), followed by ``{"app_id": ..., "ui_url": ..., "master": ...}``. A job that
never prints it ran only in the driver process: nothing appeared on the cluster."""

EXIT_DELTA_ERROR = 3
"""The exit status of a job that failed with an engine error (any other failure exits 1)."""

SMALL_JOB_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
"""The driver JVM's options for a small job (a few small files, or none): the C1 compiler
only. Such a job ends before C2's compilations pay off, and they cost about as much CPU as
the rest of the JVM's start; large jobs keep the JVM's default, whose C2 code runs their
data work faster."""

SMALL_JOB_CONF: dict[str, str] = {
    # The driver's web UI (a Jetty server and its pages, started with the SparkContext)
    # costs about as much as the job's own work, and nobody opens it for a job this short.
    "spark.ui.enabled": "false",
}
"""Spark conf defaults of a small job (the conf given by the connection or operator wins)."""


def prefer_installed_pyspark(path: list[str] | None = None) -> bool:
    """Take ``pyspark.zip`` off ``path`` (``sys.path``) when it is the copy that this interpreter's installed PySpark ships.

    spark-submit puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on a Python driver's
    path. Python compiles every module it imports from a zip, at every start, and caches
    none of them (about 0.4 s of CPU for ``pyspark.sql``), while an installed package
    has its bytecode cached. When ``SPARK_HOME`` is the installed PySpark itself (pip's
    PySpark is a complete Spark, and the hook runs spark-submit from it), the zip holds
    the same release: the installed package is imported instead. Any other zip (a
    cluster's own Spark) stays first. Called before anything imports pyspark; whether a
    zip was taken off.
    """
    entries = sys.path if path is None else path
    if "pyspark" in sys.modules:
        return False
    zips = [entry for entry in entries if os.path.basename(entry) == "pyspark.zip"]
    if not zips:
        return False
    installed = PathFinder.find_spec("pyspark", [entry for entry in entries if not entry.endswith(".zip")])
    if installed is None or installed.origin is None:
        return False
    own_zip = os.path.realpath(Path(installed.origin).parent / "python" / "lib" / "pyspark.zip")
    taken_off = [entry for entry in zips if os.path.realpath(entry) == own_zip]
    for entry in taken_off:
        entries.remove(entry)
    return bool(taken_off)
