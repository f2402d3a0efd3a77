"""The programs ``spark-submit`` runs, and what their output lines look like.

This package's ``__init__`` imports only the stdlib, so the Airflow side (the hook
building spark-submit arguments) can find the programs and read their lines without
importing pyspark. The programs themselves (:mod:`.dml`) are run by path, never
imported by the operators.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DML_PROGRAM", "ERROR_LINE_PREFIX", "EXIT_DELTA_ERROR", "RESULT_LINE_PREFIX", "SMALL_JOB_DRIVER_JAVA_OPTIONS"]

DML_PROGRAM = str(Path(__file__).with_name("dml.py"))
"""The path of the DELETE/UPDATE/MERGE program: the application argument of spark-submit."""

RESULT_LINE_PREFIX = "AIRFLOW_DELTA_RESULT"
"""Starts the one stdout line of a job that succeeded, followed by a space and the JobResult JSON."""

ERROR_LINE_PREFIX = "AIRFLOW_DELTA_ERROR"
"""Starts the one stdout line of a job that failed with an engine error, followed by a space
and ``{"class": ..., "message": ..., "retryable": ...}``."""

EXIT_DELTA_ERROR = 3
"""The exit status of a job that failed with an engine error (any other failure exits 1)."""

SMALL_JOB_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
"""The driver JVM's options for a small job (a few small files, or none): the C1 compiler
only. Such a job ends before C2's compilations pay off, and they cost about as much CPU as
the rest of the JVM's start; large jobs keep the JVM's default, whose C2 code runs their
data work faster."""
