"""Triggers that watch a Delta table's log from the triggerer's event loop.

Both poll cheaply: each poll lists ``_delta_log`` and reads only the commit files after
the last version seen (``ConflictWatch.poll`` / ``DeltaTable.commits_since``), never a
checkpoint or the table's file state. Engine calls block (file I/O, parsing), so they
run in a worker thread (``asyncio.to_thread``) and the triggerer's loop stays free.

* :class:`DeltaCommitConflictTrigger` is what :class:`~airflow_delta.sensors.delta.DeltaCommitConflictSensor`
  defers to: it fires once the commits after a read version are quiet for the work.
* :class:`DeltaTableCommitTrigger` is a ``BaseEventTrigger`` for ``AssetWatcher``: it
  fires once per new commit (optionally only for some operations or partitions), and
  keeps a watermark in the asset's state store so that a restarted triggerer does not
  fire twice for a commit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_delta.engine import (
    CommitConflict,
    ConflictWatch,
    DeltaError,
    DeltaTable,
    InvalidArgumentError,
    TableNotFoundError,
    VersionNotFoundError,
)
from airflow_delta.hooks.delta import DeltaHook, check_table_uri

# At most this many waited-out commits are listed in an event or an XCom (the count is always given).
MAX_LISTED_COMMITS = 20


# --------------------------------------------------------------------------- storage options


def merged_storage_options(
    from_connection: Mapping[str, str], explicit: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The ``delta`` connection's storage options, overridden key by key by an explicit argument's."""
    merged = {**from_connection, **(explicit or {})}
    return merged or None


def connection_storage_options(delta_conn_id: str | None) -> dict[str, str]:
    """The storage options of a ``delta`` connection (none for None), as the operators read them (``DeltaHook``)."""
    return {} if delta_conn_id is None else dict(DeltaHook(delta_conn_id).settings.storage_options)


async def aconnection_storage_options(delta_conn_id: str | None) -> dict[str, str]:
    """:func:`connection_storage_options` from the triggerer's event loop.

    Through ``DeltaHook`` (one place reads a connection, its ``storage_conn_id`` included),
    in a thread by ``sync_to_async``, as Airflow asks of triggers that read connections.
    """
    return await sync_to_async(connection_storage_options)(delta_conn_id)


# --------------------------------------------------------------------------- judging quiet


def quiet_window_start(table: DeltaTable, read_version: int | None, started_ms: int, quiet_period_ms: int) -> int:
    """The version the sensor judges commits from.

    With a read version, that version. Without one, the newest version committed before
    the quiet window that opened when the sensor started (``started_ms - quiet_period_ms``):
    the commits in that window are judged as if the work had read the version before them.
    """
    if read_version is not None:
        return read_version
    recent = table.commits_since(None, since=max(started_ms - quiet_period_ms, 0))
    # Version 0 has nothing before it to be read: a window reaching back to the table's
    # creation is judged from version 0.
    return max(recent[0].version - 1, 0) if recent else table.version()


@dataclass
class QuietJudgement:
    """The verdicts gathered since the window start, and what they say at a given moment."""

    start_version: int
    quiet_period_ms: int
    verdicts: list[CommitConflict] = field(default_factory=list)

    @property
    def conflicting(self) -> list[CommitConflict]:
        return [v for v in self.verdicts if v.conflicts]

    @property
    def latest_version(self) -> int:
        return self.verdicts[-1].version if self.verdicts else self.start_version

    def quiet(self, now_ms: int) -> bool:
        """No conflicting commit landed within the quiet period before ``now_ms``.

        ``now_ms`` is the time the poll started, before it listed the log: a poll that takes
        seconds (hundreds of commits to judge, a busy worker) must not count its own
        duration as quiet, since commits landing meanwhile are not in its listing.
        """
        return all(now_ms - v.commit.timestamp >= self.quiet_period_ms for v in self.conflicting)

    def result(self) -> dict[str, Any]:
        """The sensor's XCom: the version judged safe to read and the commits waited out (small, JSON)."""
        waited = self.conflicting
        return {
            "safe_version": self.latest_version,
            "read_version": self.start_version,
            "num_waited_out": len(waited),
            "waited_out": [_brief(v) for v in waited[-MAX_LISTED_COMMITS:]],
        }


def _brief(verdict: CommitConflict) -> dict[str, Any]:
    return {
        "version": verdict.version,
        "operation": verdict.commit.operation,
        "timestamp": verdict.commit.timestamp,
        "error": verdict.error,
    }


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------- the sensor's trigger


class DeltaCommitConflictTrigger(BaseTrigger):
    """Fires when the commits after ``read_version`` no longer stand in the way of the planned work.

    It judges each new commit with the engine's conflict rules (``ConflictWatch``) and
    fires ``{"status": "success", **result}`` once no conflicting commit is younger than
    ``quiet_period`` seconds; with ``fail_on_conflict``, ``{"status": "conflict", ...}``
    at the first conflicting commit; ``{"status": "error", "error": ..., "message": ...}``
    when the engine raises (a missing table, a bad predicate, a log cleaned up past the
    read version).

    :param table_uri: the table's URI.
    :param read_version: the version the commits are judged from (the sensor resolves it).
    :param predicate: what the work reads (a SQL filter); None for the whole table.
    :param quiet_period: seconds without a conflicting commit before the work may run.
    :param isolation_level: the work's isolation level (default: the table's).
    :param changes_data: False for work that only rearranges data (OPTIMIZE-like).
    :param fail_on_conflict: fire ``conflict`` instead of waiting a conflicting commit out.
    :param storage_options: options of the table's storage, over the connection's.
    :param delta_conn_id: the ``delta`` connection whose storage options apply, read in the
        triggerer (so no credential is stored with the trigger); None for none.
    :param poll_interval: seconds between polls of the log.
    """

    def __init__(
        self,
        *,
        table_uri: str,
        read_version: int,
        predicate: str | None = None,
        quiet_period: float = 0.0,
        isolation_level: str | None = None,
        changes_data: bool = True,
        fail_on_conflict: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        poll_interval: float = 60.0,
        delta_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.delta_conn_id = delta_conn_id
        self.read_version = read_version
        self.predicate = predicate
        self.quiet_period = quiet_period
        self.isolation_level = isolation_level
        self.changes_data = changes_data
        self.fail_on_conflict = fail_on_conflict
        self.storage_options = dict(storage_options) if storage_options else None
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "read_version": self.read_version,
                "predicate": self.predicate,
                "quiet_period": self.quiet_period,
                "isolation_level": self.isolation_level,
                "changes_data": self.changes_data,
                "fail_on_conflict": self.fail_on_conflict,
                "storage_options": self.storage_options,
                "poll_interval": self.poll_interval,
                "delta_conn_id": self.delta_conn_id,
            },
        )

    def _watch(self, storage_options: dict[str, Any] | None) -> ConflictWatch:
        table = DeltaTable(check_table_uri("table_uri", self.table_uri), storage_options)
        return ConflictWatch(
            table.location,
            self.read_version,
            self.predicate,
            isolation_level=self.isolation_level,
            changes_data=self.changes_data,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        judgement = QuietJudgement(self.read_version, int(self.quiet_period * 1000))
        try:
            from_connection = await aconnection_storage_options(self.delta_conn_id)
            watch = await asyncio.to_thread(self._watch, merged_storage_options(from_connection, self.storage_options))
            while True:
                # Quiet as of the listing, not of the end of a slow poll: commits that land
                # while it judges are not in it (see QuietJudgement.quiet).
                listed_ms = now_ms()
                new = await asyncio.to_thread(watch.poll)
                judgement.verdicts.extend(new)
                for verdict in new:
                    self.log.info(
                        "version %d (%s): %s", verdict.version, verdict.commit.operation,
                        verdict.error if verdict.conflicts else "no conflict",
                    )
                if self.fail_on_conflict and judgement.conflicting:
                    yield TriggerEvent({"status": "conflict", **judgement.result()})
                    return
                if judgement.quiet(listed_ms):
                    yield TriggerEvent({"status": "success", **judgement.result()})
                    return
                await asyncio.sleep(self.poll_interval)
        except DeltaError as exc:
            yield TriggerEvent({"status": "error", "error": type(exc).__name__, "message": str(exc)})


# --------------------------------------------------------------------------- asset watcher


WATERMARK_KEY = "delta_commit_watermark"


class DeltaTableCommitTrigger(BaseEventTrigger):
    """Fires once for each new commit of a Delta table, for ``AssetWatcher`` (data-aware scheduling).

    The event's payload (the asset event's ``extra``) holds the table URI, the commit's
    ``version``, ``operation``, ``timestamp`` (ms), ``is_blind_append`` and the
    ``partitions`` it touched (at most 20). Commits filtered out by ``operations`` or
    ``partition`` are passed over silently.

    The watermark (the last version handled) is kept in the watched asset's state store
    (``asset_state_store``, Airflow 3.3) under ``delta_commit_watermark`` and written
    before the event is handed to the triggerer: a restarted triggerer resumes after it,
    so no commit fires twice (a crash between the two loses that one event rather than
    repeating it). Without a state store (a trigger run outside a watcher), the
    watermark lives in memory only. The first run starts after ``start_version``, or
    after the latest version when None: only commits from then on fire.

    :param table_uri: the table's URI.
    :param operations: fire only for commits whose ``commitInfo.operation`` is one of these
        (e.g. ``["WRITE", "MERGE"]``); None for all.
    :param partition: fire only for commits adding or removing files this SQL filter on
        partition columns may match (e.g. ``"day = '2024-06-01'"``); None for all.
    :param start_version: the version after which commits fire, the first time; None: the latest.
    :param storage_options: options of the table's storage, over the connection's.
    :param delta_conn_id: the ``delta`` connection whose storage options apply, read in the
        triggerer (so no credential is stored with the trigger); None for none.
    :param poll_interval: seconds between polls of the log.
    """

    def __init__(
        self,
        *,
        table_uri: str,
        operations: Sequence[str] | None = None,
        partition: str | None = None,
        start_version: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        poll_interval: float = 60.0,
        delta_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        if isinstance(operations, str):
            raise InvalidArgumentError("operations", operations, "pass a list of operation names, e.g. ['WRITE']")
        self.table_uri = table_uri
        self.operations = list(operations) if operations is not None else None
        self.partition = partition
        self.start_version = start_version
        self.storage_options = dict(storage_options) if storage_options else None
        self.poll_interval = poll_interval
        self.delta_conn_id = delta_conn_id
        self._memory_watermark: int | None = None
        self._watch: ConflictWatch | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "operations": self.operations,
                "partition": self.partition,
                "start_version": self.start_version,
                "storage_options": self.storage_options,
                "poll_interval": self.poll_interval,
                "delta_conn_id": self.delta_conn_id,
            },
        )

    async def _stored_watermark(self) -> int | None:
        if self.asset_state_store is None:
            return self._memory_watermark
        try:
            value = await self.asset_state_store.aget(WATERMARK_KEY)
        except ValueError as exc:
            # Several assets watch this one trigger: Airflow's store wants to be told
            # which one, and the trigger cannot know. The watermark stays in memory.
            self.log.warning("asset state store not usable (%s); keeping the watermark in memory", exc)
            self.asset_state_store = None
            return self._memory_watermark
        return int(value) if value is not None else None  # type: ignore[arg-type]

    async def _store_watermark(self, version: int) -> None:
        self._memory_watermark = version
        if self.asset_state_store is not None:
            await self.asset_state_store.aset(WATERMARK_KEY, version)

    def _new_commits(self, table: DeltaTable, watermark: int) -> tuple[list[dict[str, Any]], int]:
        """The events for the commits after ``watermark`` that pass the filters, and the new watermark."""
        if self.partition is not None:
            if self._watch is None or self._watch.last_seen != watermark:
                # Built once (a metadata pass at the watermark); each poll then reads only new commits.
                self._watch = ConflictWatch(table.location, watermark, self.partition)
            verdicts = self._watch.poll()
            commits = [v.commit for v in verdicts if v.touches_read]
            last = self._watch.last_seen
        else:
            commits = table.commits_since(watermark)
            last = commits[-1].version if commits else watermark
        if self.operations is not None:
            commits = [c for c in commits if c.operation in self.operations]
        events = [
            {
                "table_uri": self.table_uri,
                "version": c.version,
                "operation": c.operation,
                "timestamp": c.timestamp,
                "is_blind_append": c.is_blind_append,
                "partitions": [dict(p) for p in c.partitions[:MAX_LISTED_COMMITS]],
            }
            for c in commits
        ]
        return events, last

    def _first_watermark(self, table: DeltaTable) -> int:
        if self.start_version is not None:
            return self.start_version
        try:
            return table.version()
        except TableNotFoundError:
            # Not created yet: its first commit counts (with a partition filter, the
            # first one after the table exists).
            return -1

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from_connection = await aconnection_storage_options(self.delta_conn_id)
        table = await asyncio.to_thread(
            DeltaTable,
            check_table_uri("table_uri", self.table_uri),
            merged_storage_options(from_connection, self.storage_options),
        )
        watermark = await self._stored_watermark()
        if watermark is None:
            watermark = await asyncio.to_thread(self._first_watermark, table)
            await self._store_watermark(watermark)
        while True:
            events: list[dict[str, Any]] = []
            last = watermark
            try:
                if watermark < 0 and self.partition is not None:
                    last = await asyncio.to_thread(self._first_watermark, table)
                else:
                    events, last = await asyncio.to_thread(self._new_commits, table, watermark)
            except TableNotFoundError:
                pass  # not created yet
            except VersionNotFoundError as exc:
                # The commits after the watermark were cleaned up (the watcher was down
                # longer than the log's retention): what they were cannot be told any more.
                last = await asyncio.to_thread(table.version)
                self.log.warning("%s; resuming after the latest version, %d", exc, last)
            except DeltaError as exc:
                if not exc.retryable:
                    # A bad partition filter, an unsupported table: no later poll can do better.
                    self.log.error("watching %s failed and stops: %s: %s", self.table_uri, type(exc).__name__, exc)
                    raise
                # The store is failing for now (or a commit is in flight): the next poll tries again.
                self.log.warning("watching %s: %s: %s; polling again", self.table_uri, type(exc).__name__, exc)
            for payload in events:
                await self._store_watermark(payload["version"])
                self.log.info("new commit %d (%s) of %s", payload["version"], payload["operation"], self.table_uri)
                yield TriggerEvent(payload)
            if last != watermark:
                watermark = last
                await self._store_watermark(watermark)
            await asyncio.sleep(self.poll_interval)


__all__ = [
    "DeltaCommitConflictTrigger",
    "DeltaTableCommitTrigger",
    "QuietJudgement",
    "aconnection_storage_options",
    "connection_storage_options",
    "merged_storage_options",
    "quiet_window_start",
]
