"""Sensors that let a DAG coordinate around a Delta table's commits.

* :class:`DeltaCommitConflictSensor` waits until the table's recent commits no longer
  stand in the way of the next task's work, judged by the engine's own conflict rules.
* :class:`DeltaPartitionSensor` waits until a partition has new data committed after a
  version or a time.

Both read the log cheaply: one listing, and only the commit files after the version
they start from; neither replays the table's files.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_delta.engine import (
    ConflictWatch,
    DeltaError,
    DeltaTable,
    InvalidArgumentError,
    TableNotFoundError,
    error_from_report,
)
from airflow_delta.hooks.delta import DEFAULT_CONN_ID, check_table_uri
from airflow_delta.hooks.task_errors import task_error
from airflow_delta.triggers.delta import (
    MAX_LISTED_COMMITS,
    DeltaCommitConflictTrigger,
    QuietJudgement,
    connection_storage_options,
    merged_storage_options,
    now_ms,
    quiet_window_start,
)

UI_COLOR = "#00add4"  # Delta Lake's teal


def _optional_version(name: str, value: Any) -> int | None:
    """A version argument after templating: an int, a digit string, or None ("None" and "" count as None)."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
        return None
    if isinstance(value, bool):
        raise InvalidArgumentError(name, value, "pass a table version (an int >= 0) or None")
    try:
        version = int(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(name, value, "pass a table version (an int >= 0) or None") from None
    if version < 0:
        raise InvalidArgumentError(name, value, "pass a table version (an int >= 0) or None")
    return version


def _seconds(name: str, value: timedelta | float | int) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise InvalidArgumentError(name, value, "pass a timedelta or a number of seconds >= 0")
    return float(seconds)


def _open_table(table_uri: str, delta_conn_id: str | None, storage_options: Mapping[str, Any] | None) -> DeltaTable:
    """The table with the connection's storage options, the sensor's own over them (a relative path is refused)."""
    return DeltaTable(
        check_table_uri("table_uri", table_uri),
        merged_storage_options(connection_storage_options(delta_conn_id), storage_options),
    )


class _TaskErrorsMixin:
    """Engine errors as the operators raise them: a non-retryable one fails the task at once
    (:class:`~airflow_delta.operators.retry.DeltaNonRetryableError`, or a skip with
    ``soft_fail``), a retryable one is a :class:`~airflow_delta.operators.retry.DeltaRetryableError`."""

    def poke(self, context: Any) -> bool | PokeReturnValue:
        try:
            return self._poke(context)
        except DeltaError as error:
            raise task_error(error) from error

    def _poke(self, context: Any) -> bool | PokeReturnValue:
        raise NotImplementedError


class DeltaCommitConflictSensor(_TaskErrorsMixin, BaseSensorOperator):
    """Wait until no recent commit of a Delta table conflicts with the work the next task will do.

    Each poke reads the commits after the version it judges from (``read_version``, or,
    without one, the version just before the quiet window that opened when the sensor
    started) and classifies each with the engine's conflict rules, as a transaction that
    read ``predicate`` at that version and then committed would meet them: a blind append
    that WriteSerializable ignores is harmless; a commit that removes files the predicate
    read (ConcurrentDeleteRead), adds files it would have read in a way the isolation level
    counts (ConcurrentAppend), or changes the metadata or protocol conflicts.

    It succeeds once no conflicting commit is younger than ``quiet_period``: harmless
    commits never make it wait. Its XCom (the return value) is a small dict:
    ``safe_version`` (the latest version when it succeeded: the version the next task
    should read), ``read_version`` (the version it judged from), ``num_waited_out`` and
    ``waited_out`` (the conflicting commits, at most the last 20, each with ``version``,
    ``operation``, ``timestamp`` in ms and the ``error`` it would cause).

    A conflicting commit never goes away: work planned at ``read_version`` that must
    not be re-planned should set ``fail_on_conflict=True``, which fails the task at the
    first one (skips it with ``soft_fail``) instead of waiting it out.

    Modes: ``poke`` and ``reschedule`` as for every sensor; ``deferrable=True`` hands the
    wait to :class:`~airflow_delta.triggers.delta.DeltaCommitConflictTrigger` in the
    triggerer. ``timeout`` bounds the whole wait in every mode; with ``soft_fail`` a
    timeout (or ``fail_on_conflict``) skips the task instead of failing it. Engine errors
    (no table, a predicate naming an unknown column, a log cleaned up past the read
    version) fail the task with the engine's error class.

    :param table_uri: the table's URI (templated).
    :param predicate: what the next task reads, as a SQL filter (templated), e.g.
        ``"day = '{{ ds }}'"``; None for the whole table.
    :param read_version: the version the next task reads or has read (templated, e.g.
        ``"{{ ti.xcom_pull(task_ids='plan')['version'] }}"``); None: judge from the start
        of the quiet window.
    :param quiet_period: how long no conflicting commit may have landed (timedelta or seconds).
    :param isolation_level: the next task's isolation level (``Serializable`` or
        ``WriteSerializable``); None: the table's ``delta.isolationLevel``.
    :param changes_data: False when the next task only rearranges data (OPTIMIZE-like
        ``dataChange=false`` rewrites), which no concurrently added file concerns.
    :param fail_on_conflict: fail (or, with ``soft_fail``, skip) at the first conflicting
        commit instead of waiting it out.
    :param storage_options: options of the table's storage (templated), over the connection's.
    :param delta_conn_id: the ``delta`` connection whose storage options apply (templated),
        as for the operators; a missing ``delta_default`` means none. A deferred wait
        passes the id, not the options, so no credential is stored with the trigger.
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param kwargs: the arguments of ``BaseSensorOperator`` (``poke_interval``,
        ``timeout``, ``mode``, ``soft_fail``, ``exponential_backoff``, ...).
    """

    template_fields = ("table_uri", "predicate", "read_version", "storage_options", "delta_conn_id")
    ui_color = UI_COLOR

    def __init__(
        self,
        *,
        table_uri: str,
        predicate: str | None = None,
        read_version: int | str | None = None,
        quiet_period: timedelta | float = 0.0,
        isolation_level: str | None = None,
        changes_data: bool = True,
        fail_on_conflict: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        delta_conn_id: str | None = DEFAULT_CONN_ID,
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.delta_conn_id = delta_conn_id
        self.predicate = predicate
        self.read_version = read_version
        self.quiet_period = _seconds("quiet_period", quiet_period)
        self.isolation_level = isolation_level
        self.changes_data = changes_data
        self.fail_on_conflict = fail_on_conflict
        self.storage_options = storage_options
        self.deferrable = deferrable
        self._watch: ConflictWatch | None = None
        self._judgement: QuietJudgement | None = None
        self._started_ms: int | None = None

    # ------------------------------------------------------------------ poke / reschedule
    def _table(self) -> DeltaTable:
        return _open_table(self.table_uri, self.delta_conn_id, self.storage_options)

    def _sensor_started_ms(self, context: Any) -> int:
        if self.reschedule:
            # Each reschedule is a new process: the first poke's time comes from Airflow.
            first = context["ti"].get_first_reschedule_date(context)
            if first is not None:
                return int(first.timestamp() * 1000)
        if self._started_ms is None:
            self._started_ms = now_ms()
        return self._started_ms

    def _judge_from(self, table: DeltaTable, started_ms: int) -> int:
        read_version = _optional_version("read_version", self.read_version)
        return quiet_window_start(table, read_version, started_ms, int(self.quiet_period * 1000))

    def _poll(self, context: Any) -> QuietJudgement:
        """The verdicts so far: the first poke of this process builds the watch, later ones read only new commits."""
        if self._watch is None or self._judgement is None:
            table = self._table()
            start = self._judge_from(table, self._sensor_started_ms(context))
            self.log.info("judging the commits of %s after version %d", self.table_uri, start)
            self._watch = ConflictWatch(
                table.location, start, self.predicate,
                isolation_level=self.isolation_level, changes_data=self.changes_data,
            )
            self._judgement = QuietJudgement(start, int(self.quiet_period * 1000))
        new = self._watch.poll()
        self._judgement.verdicts.extend(new)
        for verdict in new:
            self.log.info(
                "version %d (%s): %s", verdict.version, verdict.commit.operation,
                f"conflicts ({verdict.error})" if verdict.conflicts else "no conflict",
            )
        return self._judgement

    def _poke(self, context: Any) -> bool | PokeReturnValue:
        now = now_ms()  # before the listing: quiet as of what the poll can see (QuietJudgement.quiet)
        judgement = self._poll(context)
        conflicting = judgement.conflicting
        if self.fail_on_conflict and conflicting:
            first = conflicting[0]
            raise AirflowFailException(
                f"version {first.version} ({first.commit.operation}) of {self.table_uri} conflicts with work that "
                f"read version {judgement.start_version}: {first.error}. Plan the work again from version "
                f"{judgement.latest_version} or later"
            )
        if judgement.quiet(now):
            result = judgement.result()
            self.log.info(
                "version %d is safe to read (%d conflicting commit(s) waited out)",
                result["safe_version"], result["num_waited_out"],
            )
            return PokeReturnValue(is_done=True, xcom_value=result)
        youngest = conflicting[-1]
        wait = (judgement.quiet_period_ms - (now - youngest.commit.timestamp)) / 1000
        self.log.info(
            "version %d (%s) conflicts (%s); quiet in %.1f s unless another conflicting commit lands",
            youngest.version, youngest.commit.operation, youngest.error, wait,
        )
        return False

    # ------------------------------------------------------------------ deferrable
    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        # One poke first: no trigger when the table is quiet already.
        try:
            done = self.poke(context)
        except AirflowFailException as exc:
            if self.soft_fail:  # as BaseSensorOperator.execute treats a poke's failure
                raise AirflowSkipException(f"Skipping due to soft_fail is set to True: {exc}") from exc
            raise
        if done:
            return done.xcom_value if isinstance(done, PokeReturnValue) else None
        assert self._judgement is not None
        self.defer(
            trigger=DeltaCommitConflictTrigger(
                table_uri=self.table_uri,
                read_version=self._judgement.start_version,
                predicate=self.predicate,
                quiet_period=self.quiet_period,
                isolation_level=self.isolation_level,
                changes_data=self.changes_data,
                fail_on_conflict=self.fail_on_conflict,
                storage_options=dict(self.storage_options) if self.storage_options else None,
                delta_conn_id=self.delta_conn_id,
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: its result, or the failure it reported."""
        status = event.get("status")
        if status == "success":
            result = {k: v for k, v in event.items() if k != "status"}
            self.log.info(
                "version %d is safe to read (%d conflicting commit(s) waited out)",
                result["safe_version"], result["num_waited_out"],
            )
            return result
        if status == "conflict":
            first = event["waited_out"][0]
            raise AirflowFailException(
                f"version {first['version']} ({first['operation']}) of {self.table_uri} conflicts with work that "
                f"read version {event['read_version']}: {first['error']}. Plan the work again from version "
                f"{event['safe_version']} or later"
            )
        error = error_from_report(str(event.get("error")), str(event.get("message")))
        raise task_error(error) from error


class DeltaPartitionSensor(_TaskErrorsMixin, BaseSensorOperator):
    """Wait until a partition of a Delta table has data committed after a version or a time.

    A poke lists the log, reads the commit files after ``after_version`` (or those
    written at or after ``after_time``) and looks for a commit that added new data
    (``dataChange=true`` files) the ``partition`` filter may match, judged on the files'
    partition values and statistics. It returns False while there is none, and also
    while the table does not exist yet or has no version after ``after_version``: "not
    yet" is never an error. Its XCom: ``version`` (the first such commit), ``versions``
    (at most 20) and ``latest_version``.

    :param table_uri: the table's URI (templated).
    :param partition: the partition, as a SQL filter on partition columns (templated),
        e.g. ``"day = '{{ ds }}'"``, or a mapping of column to value (``None`` for null).
    :param after_version: only commits after this version count (templated).
    :param after_time: only commits written at or after this time count (templated; a
        datetime, an ISO-8601 string or epoch ms). One of the two is needed; with both,
        a commit must pass both.
    :param storage_options: options of the table's storage (templated), over the connection's.
    :param delta_conn_id: the ``delta`` connection whose storage options apply (templated),
        as for the operators; a missing ``delta_default`` means none.
    :param kwargs: the arguments of ``BaseSensorOperator`` (``poke_interval``,
        ``timeout``, ``mode``, ``soft_fail``, ...).
    """

    template_fields = ("table_uri", "partition", "after_version", "after_time", "storage_options", "delta_conn_id")
    ui_color = UI_COLOR

    def __init__(
        self,
        *,
        table_uri: str,
        partition: str | Mapping[str, Any],
        after_version: int | str | None = None,
        after_time: datetime | str | int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        delta_conn_id: str | None = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if after_version is None and after_time is None:
            raise InvalidArgumentError("after_version", after_version, "pass after_version, after_time, or both")
        self.table_uri = table_uri
        self.partition = partition
        self.after_version = after_version
        self.after_time = after_time
        self.storage_options = storage_options
        self.delta_conn_id = delta_conn_id

    def _predicate(self) -> str:
        if isinstance(self.partition, str):
            return self.partition
        if not isinstance(self.partition, Mapping) or not self.partition:
            raise InvalidArgumentError(
                "partition", self.partition, "pass a SQL filter on partition columns or a non-empty mapping"
            )
        terms = []
        for column, value in self.partition.items():
            name = "`" + str(column).replace("`", "``") + "`"
            if value is None:
                terms.append(f"{name} IS NULL")
            else:
                terms.append(f"{name} = '" + str(value).replace("'", "''") + "'")
        return " AND ".join(terms)

    def _poke(self, context: Any) -> bool | PokeReturnValue:
        table = _open_table(self.table_uri, self.delta_conn_id, self.storage_options)
        predicate = self._predicate()
        after_version = _optional_version("after_version", self.after_version)
        try:
            latest = table.version()
        except TableNotFoundError:
            self.log.info("no table at %s yet", self.table_uri)
            return False
        start = after_version
        if self.after_time not in (None, ""):
            if after_version is not None and after_version >= latest:
                start = after_version
            else:
                recent = table.commits_since(after_version, since=self.after_time)
                start = recent[0].version - 1 if recent else latest
        assert start is not None
        if start >= latest:
            self.log.info("no commit of %s after version %d yet", self.table_uri, start)
            return False
        hits: list[int] = []
        if start < 0:
            # Version 0 is in range: the data it created is new data (nothing was there to read).
            if table.snapshot(0).files(predicate).num_rows:
                hits.append(0)
            start = 0
        hits += [v.version for v in ConflictWatch(table.location, start, predicate).poll() if v.adds_to_read]
        if not hits:
            self.log.info("no data for %s in %s after version %d yet", predicate, self.table_uri, start)
            return False
        self.log.info("version %d added data to %s", hits[0], predicate)
        return PokeReturnValue(
            is_done=True,
            xcom_value={"version": hits[0], "versions": hits[:MAX_LISTED_COMMITS], "latest_version": latest},
        )


__all__ = ["DeltaCommitConflictSensor", "DeltaPartitionSensor"]
