"""The SparkSession of a job: plain Apache Spark, no Delta extensions, Arrow on.

The jobs never use Spark's Delta support (there are no Delta jars): Spark reads and
writes nothing of a table itself. Executors call the engine through ``mapInArrow``
(:mod:`airflow_delta.spark.file_tasks`), so Arrow must be on, and executors must run a
Python that has the engine's requirements (``EXECUTOR_REQUIREMENTS``); the submitting
side sets ``spark.pyspark.python`` for that.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping

from pyspark.sql import SparkSession

# Settings every job needs, under the caller's conf: the caller may not turn Arrow off.
_REQUIRED_CONF = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}
# Defaults the caller may override.
_DEFAULT_CONF = {
    "spark.ui.showConsoleProgress": "false",
    # Delta evaluates predicates, SET expressions and merge conditions under ANSI store
    # assignment; Spark 4 defaults to it too, but a cluster default may not.
    "spark.sql.storeAssignmentPolicy": "ANSI",
    # Shuffles sized to their data: adaptive execution merges small shuffle partitions up
    # to the advisory size instead of keeping the partition count (parallelismFirst), so a
    # few kilobytes are one task, not spark.sql.shuffle.partitions of them.
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.parallelismFirst": "false",
}

SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
SHUFFLE_PARTITION_BYTES = 64 << 20
"""About this many input bytes per shuffle partition (AQE's default advisory size)."""
_MIN_BYTES_PER_CORE = 1 << 20


UNKNOWN_SIZE_BYTES = 1 << 50
"""1 PiB: no job of ours reads that; an optimizer estimate this large means Spark has no size."""
_DEFAULT_SHUFFLE_PARTITIONS = 200  # Spark's spark.sql.shuffle.partitions default


def size_shuffle_partitions(spark: SparkSession, input_bytes: int) -> int | None:
    """Set the session's shuffle partitions from the bytes a job reads; the count set, or None if the conf fixes it.

    One partition per :data:`SHUFFLE_PARTITION_BYTES`, and at least one per core once
    there is a megabyte per core: kilobytes are one partition (Spark's default of 200
    would be 200 tasks per stage, most of them empty), large inputs get enough to keep
    every core busy. A count the application's conf sets (the connection's or the
    operator's) is left alone.
    """
    if spark.sparkContext.getConf().contains(SHUFFLE_PARTITIONS_CONF):
        return None
    cores = max(1, spark.sparkContext.defaultParallelism)
    # An optimizer estimate with no statistics behind it is Long.MaxValue-sized: then the size
    # says nothing, and Spark's own default count is the fallback (a count must fit an int).
    if input_bytes >= UNKNOWN_SIZE_BYTES:
        input_bytes = 0
        by_size = _DEFAULT_SHUFFLE_PARTITIONS
    else:
        by_size = -(-max(0, input_bytes) // SHUFFLE_PARTITION_BYTES)
    count = max(1, by_size, min(cores, max(0, input_bytes) // _MIN_BYTES_PER_CORE))
    spark.conf.set(SHUFFLE_PARTITIONS_CONF, str(count))
    return count


class LazySession:
    """A job's SparkSession, built by :func:`job_session` on first use.

    A DELETE that the log alone decides (no predicate, or partition columns only) needs no
    Spark at all: the program hands its operation one of these, and no JVM work happens
    unless the operation asks for the session. ``on_start`` is called with the session
    once it is built (the DML program reports the application it registered).
    """

    def __init__(
        self,
        app_name: str,
        conf: Mapping[str, str] | None = None,
        *,
        on_start: Callable[[SparkSession], None] | None = None,
    ) -> None:
        self.app_name = app_name
        self.conf = dict(conf or {})
        self.on_start = on_start
        self._session: SparkSession | None = None

    @property
    def started(self) -> bool:
        return self._session is not None

    def get(self) -> SparkSession:
        if self._session is None:
            self._session = job_session(self.app_name, self.conf)
            if self.on_start is not None:
                self.on_start(self._session)
        return self._session

    def stop(self, *, process_exits: bool = False) -> None:
        """Stop the session if it was built. ``process_exits``: the program ends right after.

        Then the driver does not wait for PySpark's accumulator server: its loop looks for
        a shutdown every 0.5 s, so ``SparkContext.stop()`` waits up to half a second for
        a server that, as a daemon thread, ends with the process anyway. The JVM's
        SparkContext stops all the same.
        """
        if self._session is not None:
            context = self._session.sparkContext
            server = getattr(context, "_accumulatorServer", None)
            # A Unix-socket server removes its socket file when shut down: that one is waited for.
            if process_exits and getattr(server, "address_family", None) != socket.AF_UNIX:
                context._accumulatorServer = None  # type: ignore[assignment]
            self._session.stop()
            self._session = None


def session_of(spark: SparkSession | LazySession) -> SparkSession:
    """The session itself, built now if ``spark`` is a :class:`LazySession`."""
    return spark.get() if isinstance(spark, LazySession) else spark


def job_session(app_name: str, conf: Mapping[str, str] | None = None) -> SparkSession:
    """The session of a job named ``app_name``; ``conf`` (from the spec) goes over the defaults."""
    builder = SparkSession.builder.appName(app_name)
    for key, value in {**_DEFAULT_CONF, **dict(conf or {}), **_REQUIRED_CONF}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
