"""The apache-spark provider's ``SparkSubmitHook``, as the DML jobs run it: :class:`_DmlSubmitHook`.

A module of its own so that importing :mod:`airflow_delta.hooks.delta` (every task that
uses the provider) does not import the apache-spark hook and ``requests``:
:meth:`~airflow_delta.hooks.delta.DeltaHook.spark_submit_hook` imports this module when a
job goes to Spark.
"""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_delta.hooks.driver_jvm import DriverClassArchive, worker_spark_home
from airflow_delta.hooks.spark_output import (
    _FINISHED_TASK,
    _SPARK_LOG_LINE,
    DEFAULT_TASK_LOG_LEVEL,
    DRIVER_LOG_TAIL_LINES,
    ERROR_MARKER,
    PROGRESS_INTERVAL_SECONDS,
    RESULT_MARKER,
    SPARK_APP_LINE_PREFIX,
    SPARK_LOG_LEVELS,
    SparkApplication,
    _path_with_spark_submit,
)
from airflow_delta.spark.installation import check_spark_home

__all__ = ["_DmlSubmitHook"]


class _DmlSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` that also watches what the driver prints.

    It keeps the tail of the output, the job's result and error lines, runs
    ``spark-submit`` in a session of its own so that ``on_kill`` ends the whole process
    tree (in client mode the Python driver is a child of the spark-submit JVM and would
    otherwise live on, and could still commit), and finds ``spark-submit`` next to the
    worker's interpreter when it is not on PATH.
    """

    def __init__(self, *, log_level: str = DEFAULT_TASK_LOG_LEVEL, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.log_level = log_level
        self._progress_logged: dict[str, float] = {}
        self.output_tail: deque[str] = deque(maxlen=DRIVER_LOG_TAIL_LINES)
        self.result_line: str | None = None
        self.error_line: str | None = None
        self.application: SparkApplication | None = None
        # The class archive that does not exist yet (the first job of a Spark installation and
        # Java runtime), and the driver's JVM options: written in the background if the job succeeds.
        self._archive_to_write: tuple[DriverClassArchive, str] | None = None

    def set_driver_java_options(self, options: list[str], archive: DriverClassArchive | None) -> None:
        """Run the driver JVM with ``options`` and, in client mode, from ``archive`` (or note it to be written).

        Nothing changes when the conf sets ``spark.driver.extraJavaOptions`` itself: the
        user's JVM options are taken as they are.
        """
        if "spark.driver.extraJavaOptions" in self._conf:
            return
        options = list(options)
        if archive is not None and self.deploy_mode == "client":
            if archive.exists:
                options.append(archive.use_option())
            else:
                self._archive_to_write = (archive, " ".join(options))
        if options:
            self._conf = {**self._conf, "spark.driver.extraJavaOptions": " ".join(options)}

    def set_application_args(self, args: list[str]) -> None:
        """The program's arguments, decided once the deploy mode is known (after the connection is resolved)."""
        self._application_args = list(args)

    @property
    def master(self) -> str:
        return str(self._connection["master"])

    @property
    def deploy_mode(self) -> str:
        return str(self._connection["deploy_mode"] or "client")

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        super()._process_spark_submit_log(self._watched(itr))

    def _filters_spark_lines(self) -> bool:
        """Whether Spark's own lines below :attr:`log_level` stay out of the task log.

        Only for a client-mode driver on a local or standalone master: on YARN and
        Kubernetes the apache-spark hook reads application ids from those lines.
        """
        master = self.master
        return self.deploy_mode == "client" and not master.startswith(("yarn", "k8s://"))

    def _progress(self, stage: str, done: int, total: int) -> None:
        """Log a stage's progress at most every :data:`PROGRESS_INTERVAL_SECONDS`, and when it ends."""
        now = time.monotonic()
        last = self._progress_logged.get(stage)
        if done < total and last is not None and now - last < PROGRESS_INTERVAL_SECONDS:
            return
        self._progress_logged[stage] = now
        self.log.info("Spark progress: stage %s, %d of %d task(s) done", stage, done, total)

    def _watched(self, itr: Iterator[Any]) -> Iterator[Any]:
        threshold = SPARK_LOG_LEVELS.index(self.log_level)
        filtering = self._filters_spark_lines()
        for raw in itr:
            line = str(raw).rstrip("\n")
            self.output_tail.append(line)
            if line.startswith(RESULT_MARKER):
                self.result_line = line
            elif line.startswith(ERROR_MARKER):
                self.error_line = line
            elif line.startswith(SPARK_APP_LINE_PREFIX):
                self.application = SparkApplication.from_line(line) or self.application
                if self.application is not None:
                    self.log.info(
                        "Spark application %s registered on %s%s",
                        self.application.app_id, self.application.master,
                        f", its UI at {self.application.ui_url}" if self.application.ui_url else "",
                    )
            else:
                finished = _FINISHED_TASK.search(line)
                if finished is not None:
                    self._progress(finished["stage"], int(finished["done"]), int(finished["total"]))
                spark_line = _SPARK_LOG_LINE.match(line)
                if filtering and spark_line is not None and SPARK_LOG_LEVELS.index(spark_line["level"]) < threshold:
                    continue  # kept in the failure tail only
            yield raw

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        env = dict(kwargs.pop("env", None) or os.environ)
        env["PATH"] = _path_with_spark_submit(env.get("PATH", ""))
        # spark-submit otherwise asks `python3` where PySpark is, and the system python3
        # may not have it: the worker's PySpark is the Spark to run.
        spark_home = worker_spark_home(env)
        if spark_home is not None:
            env["SPARK_HOME"] = spark_home
            # A PySpark whose Python files and jars are two releases fails deep inside the
            # job, and every retry fails the same way: refused here, with the pip command to fix it.
            check_spark_home(spark_home)
        driver_id = super().submit(application, env=env, start_new_session=True, **kwargs)
        if self._archive_to_write is not None:
            # After the job, not with it: the writer competes with no job of this task for CPU,
            # and the task does not wait for it. A failed job starts none (its environment may be broken).
            archive, java_options = self._archive_to_write
            writer = archive.write_in_background(env, java_options)
            if writer is not None:
                self.log.info(
                    "Writing the driver JVM's class archive %s in the background (process %d): later drivers start from it",
                    archive.path, writer,
                )
        return driver_id

    def on_kill(self) -> None:
        process = self._submit_sp
        super().on_kill()
        if process is not None:
            # The session spark-submit leads: its JVM, the Python driver, local executors.
            # It outlives a leader that is gone already, so it is killed either way.
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass  # already gone
