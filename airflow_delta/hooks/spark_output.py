"""What the DML jobs print, as the hooks read it: result and error markers, Spark's log lines,
the application a job registered, and where ``spark-submit`` is.

Shared by :mod:`airflow_delta.hooks.delta` and :mod:`airflow_delta.hooks.dml_submit` (the
``SparkSubmitHook`` subclass, imported only when a job goes to Spark); imports nothing heavy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_delta.spark.jobs import ERROR_LINE_PREFIX, RESULT_LINE_PREFIX, SPARK_APP_LINE_PREFIX

# The lines the DML program prints on stdout: defined once, by the programs' package.
RESULT_MARKER = RESULT_LINE_PREFIX
ERROR_MARKER = ERROR_LINE_PREFIX

DRIVER_LOG_TAIL_LINES = 100

SPARK_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")
DEFAULT_TASK_LOG_LEVEL = "WARN"
PROGRESS_INTERVAL_SECONDS = 5.0
"""A stage's progress goes into the task log at most this often (and once when it ends)."""

# Spark's console log line: "25/11/29 03:37:01 INFO TaskSetManager: ...".
_SPARK_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?P<level>TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")

# Spark's scheduler log line for a finished task ends with "(done/total)" of its stage:
# the hook turns it into a short progress line of the task log.
_FINISHED_TASK = re.compile(r"Finished task \S+ in stage (?P<stage>\S+) .*\((?P<done>\d+)/(?P<total>\d+)\)\s*$")


def _first_json_document(text: str) -> Any:
    """The JSON document at the start of ``text``, ignoring what follows it.

    spark-submit merges the driver's stdout (relayed by the JVM in chunks) with its own
    log on stderr, so another line's text can land after a result line before its newline.
    """
    return json.JSONDecoder().raw_decode(text)[0]


@dataclass(frozen=True)
class SparkApplication:
    """The Spark application a job registered: its id, its UI's URL while it runs (None when
    the UI is off), and the master it ran on."""

    app_id: str
    ui_url: str | None = None
    master: str | None = None

    @classmethod
    def from_line(cls, line: str) -> SparkApplication | None:
        """The application an ``AIRFLOW_DELTA_SPARK_APP {...}`` line reports; None if unreadable."""
        try:
            report = _first_json_document(line.split(SPARK_APP_LINE_PREFIX, 1)[1].strip())
            app_id = report["app_id"]
        except (ValueError, KeyError, TypeError, IndexError):
            return None
        if not isinstance(app_id, str) or not app_id:
            return None
        ui_url, master = report.get("ui_url"), report.get("master")
        return cls(app_id, ui_url if isinstance(ui_url, str) else None, master if isinstance(master, str) else None)

    def url(self, history_url: str | None) -> str | None:
        """Where a person sees this application: the history server's page when one is
        configured (it outlives the job), otherwise the live UI (None when the UI is off)."""
        if history_url:
            return f"{history_url.rstrip('/')}/history/{self.app_id}/jobs/"
        return self.ui_url


def _path_with_spark_submit(path: str) -> str:
    """PATH with the worker interpreter's bin directory appended when spark-submit is not on it."""
    if shutil.which("spark-submit", path=path):
        return path
    bin_dir = str(Path(sys.executable).parent)
    return f"{path}{os.pathsep}{bin_dir}" if path else bin_dir
