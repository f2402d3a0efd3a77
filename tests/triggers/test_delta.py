"""The Delta triggers, run by asyncio as the triggerer runs them, against real tables with commits appearing."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.models.trigger import Trigger
from airflow.serialization.decoders import smart_decode_trigger_kwargs
from airflow.serialization.encoders import encode_trigger
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_delta.engine import DeltaTable, InvalidArgumentError
from airflow_delta.triggers.delta import WATERMARK_KEY, DeltaCommitConflictTrigger, DeltaTableCommitTrigger
from tests.airflow_layer import set_connection
from tests.commit_watch_helpers import SCHEMA, events_table, rows
from tests.object_store_helpers import ObjectStoreServer


@pytest.fixture
def table(tmp_path: Path) -> DeltaTable:
    return events_table(tmp_path)


class AssetStateStore:
    """The asset state store's async interface (``aget``/``aset``), kept in a dict shared across "restarts".

    The triggerer injects Airflow's store, which talks to the API server through the
    supervisor; this keeps the same values the same way for a trigger run in the test's loop.
    """

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def through_the_metadata_database(trigger: BaseTrigger) -> BaseTrigger:
    """Store the trigger as Airflow does (encoded, encrypted kwargs in a Trigger row), then inflate it as the triggerer does."""
    encoded = encode_trigger(trigger)
    row = Trigger(encoded["classpath"], encoded["kwargs"])
    module, _, name = row.classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    return cls(**{k: smart_decode_trigger_kwargs(v) for k, v in row.kwargs.items()})


@pytest.mark.parametrize(
    "trigger",
    [
        DeltaCommitConflictTrigger(
            table_uri="/data/t", read_version=7, predicate="p = 'a'", quiet_period=2.5,
            isolation_level="Serializable", changes_data=False, fail_on_conflict=True,
            storage_options={"region": "eu"}, poll_interval=0.5, delta_conn_id="delta_lake",
        ),
        DeltaCommitConflictTrigger(table_uri="s3://b/t", read_version=0),
        DeltaTableCommitTrigger(
            table_uri="/data/t", operations=["WRITE", "MERGE"], partition="p = 'a'", start_version=3,
            storage_options={"k": "v"}, poll_interval=1.0, delta_conn_id="{{ not templated here }}",
        ),
        DeltaTableCommitTrigger(table_uri="/data/t"),
    ],
    ids=["conflict-all-arguments", "conflict-defaults", "commit-all-arguments", "commit-defaults"],
)
def test_serialize_round_trip_through_airflow(trigger: BaseTrigger) -> None:
    inflated = through_the_metadata_database(trigger)
    assert type(inflated) is type(trigger)
    assert inflated.serialize() == trigger.serialize()


def test_commit_trigger_refuses_a_single_string_of_operations() -> None:
    from airflow_delta.engine import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="operations"):
        DeltaTableCommitTrigger(table_uri="/t", operations="WRITE")  # type: ignore[arg-type]


async def next_event(events: AsyncIterator[TriggerEvent], timeout: float = 20.0) -> TriggerEvent:
    return await asyncio.wait_for(anext(events), timeout)


def test_conflict_trigger_waits_through_conflicts_that_land_while_it_runs(table: DeltaTable) -> None:
    read_version = table.version()
    table.delete("p = 'a' AND id = 0")  # a conflict just before: the trigger must wait
    trigger = DeltaCommitConflictTrigger(
        table_uri=table.table_uri, read_version=read_version, predicate="p = 'a'", quiet_period=4.0,
        poll_interval=0.05,
    )

    async def scenario() -> tuple[TriggerEvent, int]:
        events = trigger.run()
        first = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.5)
        assert not first.done()
        # (The quiet period leaves seconds for the next two commits to land, even on a loaded machine.)
        await asyncio.to_thread(table.append, rows("a", 100))  # harmless: does not prolong the wait
        # Rewrites the appended file: its new file lands where the work reads (ConcurrentAppend).
        second = await asyncio.to_thread(table.delete, "p = 'a' AND id = 100")
        event = await asyncio.wait_for(first, 20)
        return event, second.version

    event, second_delete = asyncio.run(scenario())
    fired = time.time()
    landed = table.commits_since(second_delete - 1)[0].timestamp / 1000
    assert event.payload["status"] == "success"
    assert fired - landed >= 4.0
    assert [c["version"] for c in event.payload["waited_out"]] == [read_version + 1, second_delete]
    assert event.payload["safe_version"] == second_delete


def test_conflict_trigger_fires_after_the_quiet_period_following_the_last_conflict(table: DeltaTable) -> None:
    read_version = table.version()
    table.append(rows("a", 100))  # harmless
    delete = table.delete("p = 'a' AND id = 0")  # conflicts (ConcurrentDeleteRead or Append)
    trigger = DeltaCommitConflictTrigger(
        table_uri=table.table_uri, read_version=read_version, predicate="p = 'a'", quiet_period=2.0,
        poll_interval=0.05,
    )
    landed = (table.commits_since(delete.version - 1)[0]).timestamp / 1000

    async def scenario() -> tuple[TriggerEvent, float, int]:
        events = trigger.run()
        first = asyncio.ensure_future(anext(events))
        ticks = 0
        while not first.done():  # the event loop keeps turning while the trigger waits
            ticks += 1
            await asyncio.sleep(0.01)
        return first.result(), time.time(), ticks

    event, fired, ticks = asyncio.run(scenario())
    assert event.payload["status"] == "success"
    assert fired - landed >= 2.0
    assert ticks >= 10
    assert event.payload["safe_version"] == delete.version
    assert event.payload["read_version"] == read_version
    assert [c["version"] for c in event.payload["waited_out"]] == [delete.version]
    assert event.payload["waited_out"][0]["operation"] == "DELETE"


def test_conflict_trigger_reports_a_conflict_when_told_not_to_wait(table: DeltaTable) -> None:
    read_version = table.version()
    table.append(rows("b", 50))  # harmless
    with table.transaction() as txn:
        txn.set_properties({"airflow_delta.test": "1"})
        txn.commit("SET TBLPROPERTIES")
    trigger = DeltaCommitConflictTrigger(
        table_uri=table.table_uri, read_version=read_version, predicate="p = 'b'", quiet_period=3600,
        fail_on_conflict=True, poll_interval=0.05,
    )
    event = asyncio.run(next_event(trigger.run()))
    assert event.payload["status"] == "conflict"
    assert event.payload["waited_out"] == [
        {"version": read_version + 2, "operation": "SET TBLPROPERTIES", "error": "MetadataChangedException",
         "timestamp": table.commits_since(read_version + 1)[0].timestamp}
    ]


def test_conflict_trigger_reports_engine_errors_as_events(tmp_path: Path) -> None:
    trigger = DeltaCommitConflictTrigger(table_uri=str(tmp_path / "missing"), read_version=0, poll_interval=0.05)

    event = asyncio.run(next_event(trigger.run()))
    assert event.payload["status"] == "error"
    assert event.payload["error"] == "TableNotFoundError"


def commit_trigger_events(
    trigger: DeltaTableCommitTrigger,
    store: AssetStateStore | None,
    writes: list[Any],
    expected: int,
    ready: Callable[[], bool] | None = None,
) -> list[dict[str, Any]]:
    """Run the trigger while ``writes`` run in a thread; collect ``expected`` events, then wait for any extra.

    The writes start once the trigger has had time to take its watermark (and ``ready()`` holds).
    """
    trigger.asset_state_store = store  # type: ignore[assignment]
    if ready is None and store is not None:
        ready = lambda: WATERMARK_KEY in store.values  # noqa: E731 - the trigger has taken its watermark

    async def scenario() -> list[dict[str, Any]]:
        events = trigger.run()
        got: list[dict[str, Any]] = []
        started = threading.Event()

        def write() -> None:
            started.wait()
            deadline = time.monotonic() + 20
            while ready is not None and not ready() and time.monotonic() < deadline:
                time.sleep(0.01)
            for w in writes:
                w()

        writer = asyncio.ensure_future(asyncio.to_thread(write))
        pending = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.2)  # the trigger has taken its watermark before anything is written
        started.set()
        while len(got) < expected:
            got.append((await asyncio.wait_for(pending, 20)).payload)
            pending = asyncio.ensure_future(anext(events))
        await writer
        done, _ = await asyncio.wait({pending}, timeout=0.5)  # nothing more may come
        if done:
            got.append(pending.result().payload)
        else:
            pending.cancel()  # as the triggerer cancels a trigger it stops
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        await events.aclose()
        return got

    return asyncio.run(scenario())


def test_commit_trigger_fires_once_per_new_commit_and_not_again_after_a_restart(table: DeltaTable) -> None:
    store = AssetStateStore()
    start = table.version()
    first = DeltaTableCommitTrigger(table_uri=table.table_uri, poll_interval=0.05)
    events = commit_trigger_events(
        first, store,
        [lambda: table.append(rows("a", 10)), lambda: table.delete("id = 10"), lambda: table.append(rows("b", 20))],
        expected=3,
    )
    assert [e["version"] for e in events] == [start + 1, start + 2, start + 3]
    assert [e["operation"] for e in events] == ["WRITE", "DELETE", "WRITE"]
    assert events[0]["is_blind_append"] is True and events[0]["partitions"] == [{"p": "a"}]
    assert store.values[WATERMARK_KEY] == start + 3

    # A restarted triggerer inflates the trigger again: the watermark is read back, old commits stay quiet.
    restarted = through_the_metadata_database(first)
    assert isinstance(restarted, DeltaTableCommitTrigger)
    again = commit_trigger_events(restarted, store, [lambda: table.append(rows("a", 30))], expected=1)
    assert [e["version"] for e in again] == [start + 4]


def test_commit_trigger_filters_by_operation_and_partition(table: DeltaTable) -> None:
    start = table.version()
    trigger = DeltaTableCommitTrigger(
        table_uri=table.table_uri, operations=["WRITE"], partition="p = 'b'", poll_interval=0.05
    )
    events = commit_trigger_events(
        trigger, AssetStateStore(),
        [
            lambda: table.append(rows("a", 10)),  # other partition
            lambda: table.delete("p = 'b' AND id = 0"),  # partition b, but a DELETE
            lambda: table.append(rows("b", 20)),  # fires
        ],
        expected=1,
    )
    assert [(e["version"], e["operation"]) for e in events] == [(start + 3, "WRITE")]


def test_commit_trigger_without_a_store_starts_at_the_latest_version_or_the_one_given(table: DeltaTable) -> None:
    start = table.version()
    table.append(rows("a", 10))
    from_start = DeltaTableCommitTrigger(table_uri=table.table_uri, start_version=start, poll_interval=0.05)
    events = commit_trigger_events(from_start, None, [], expected=1)
    assert [e["version"] for e in events] == [start + 1]
    from_latest = DeltaTableCommitTrigger(table_uri=table.table_uri, poll_interval=0.05)
    assert commit_trigger_events(from_latest, None, [], expected=0) == []


def test_commit_trigger_waits_for_a_table_to_be_created(tmp_path: Path) -> None:
    uri = str(tmp_path / "later")
    trigger = DeltaTableCommitTrigger(table_uri=uri, poll_interval=0.05)
    created: list[DeltaTable] = []
    events = commit_trigger_events(
        trigger, AssetStateStore(),
        [lambda: created.append(DeltaTable.create(uri, SCHEMA, partition_by=["p"])),
         lambda: created[0].append(rows("a"))],
        expected=2,
    )
    assert [e["version"] for e in events] == [0, 1]
    assert events[0]["operation"] == "CREATE TABLE"


def test_commit_trigger_resumes_after_the_latest_version_when_its_watermark_was_cleaned_up(table: DeltaTable) -> None:
    store = AssetStateStore()
    store.values[WATERMARK_KEY] = 0
    table.checkpoint()
    for version in (0, 1):  # as metadata cleanup removes commits behind a checkpoint
        Path(table.table_uri, "_delta_log", f"{version:020d}.json").unlink()
    latest = table.version()
    trigger = DeltaTableCommitTrigger(table_uri=table.table_uri, poll_interval=0.05)
    events = commit_trigger_events(
        trigger, store, [lambda: table.append(rows("a", 10))], expected=1,
        ready=lambda: store.values[WATERMARK_KEY] == latest,
    )
    assert [e["version"] for e in events] == [latest + 1]


def test_commit_trigger_keeps_the_watermark_in_memory_when_several_assets_share_it(table: DeltaTable) -> None:
    from airflow.sdk import Asset
    from airflow.sdk.execution_time.context import AssetStateStoreAccessors

    # Airflow's own accessors for two watched assets: which one to use is ambiguous, so
    # they refuse (before any call to the API server) and the trigger falls back to memory.
    shared = AssetStateStoreAccessors(inlets=[Asset(name="one", uri="file:///one"), Asset(name="two", uri="file:///two")])
    start = table.version()
    trigger = DeltaTableCommitTrigger(table_uri=table.table_uri, poll_interval=0.05)
    events = commit_trigger_events(
        trigger, shared, [lambda: table.append(rows("a", 10))], expected=1,  # type: ignore[arg-type]
        ready=lambda: trigger._memory_watermark is not None,
    )
    assert [e["version"] for e in events] == [start + 1]


@pytest.mark.slow
def test_both_triggers_read_storage_options_from_the_delta_connection_in_the_event_loop(
    s3_server: ObjectStoreServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = s3_server.storage_options
    # The table's credentials and endpoint are in the connection only; the trigger's own options add to them.
    set_connection(monkeypatch, "delta_s3", {"conn_type": "delta", "extra": {"storage_options": options}})
    table = DeltaTable.create(s3_server.uri(), SCHEMA, partition_by=["p"], storage_options=options)
    table.append(rows("a"))
    start = table.version()
    commit = through_the_metadata_database(
        DeltaTableCommitTrigger(table_uri=table.table_uri, start_version=start, delta_conn_id="delta_s3",
                                storage_options={"AWS_REGION": options["AWS_REGION"]}, poll_interval=0.05)
    )
    conflict = through_the_metadata_database(
        DeltaCommitConflictTrigger(table_uri=table.table_uri, read_version=start, predicate="p = 'a'",
                                   delta_conn_id="delta_s3", poll_interval=0.05)
    )
    assert "testing-secret" not in repr(commit.serialize()) + repr(conflict.serialize())
    appended = table.append(rows("b", 10)).version

    async def first_events() -> tuple[TriggerEvent, TriggerEvent]:
        return await next_event(commit.run()), await next_event(conflict.run())

    fired, judged = asyncio.run(first_events())
    assert (fired.payload["version"], fired.payload["operation"]) == (appended, "WRITE")
    assert judged.payload["status"] == "success" and judged.payload["safe_version"] == appended

    missing = DeltaTableCommitTrigger(table_uri=table.table_uri, delta_conn_id="delta_nowhere")
    with pytest.raises(InvalidArgumentError, match="no connection 'delta_nowhere' exists"):
        asyncio.run(next_event(missing.run()))
