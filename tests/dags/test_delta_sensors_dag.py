"""The Delta sensors under the real Airflow CLI, and a DAG scheduled by a Delta table's commits.

``airflow dags test`` runs ``delta_commit_sensors`` (``tests/dags/delta_sensor_dags/``) in
an ``AIRFLOW_HOME`` and SQLite database in a temporary directory, while this test commits
to the table from a thread: a harmless append, a DELETE rewriting a file of the partition
the sensors guard, small conflicting metadata commits until the poke sensor has started,
then blind appends into that partition (a conflict only for the reschedule sensor, which
judges at Serializable) until the reschedule sensor's second try has started; then data
for the partition the partition sensor waits for. Every conflicting commit is kept
younger than the quiet period until the sensor is known to be poking (each try leaves a
file as it starts), so none lands after a sensor could have judged the table quiet,
however slowly Airflow starts each task. Run and task states, XComs and times are read
from that database.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from scripts.airflow_cli import AirflowCli, output_tail
from tests.airflow_layer import migrated_airflow
from tests.oracles import assert_oracles_read

DAGS_FOLDER = Path(__file__).resolve().parent / "delta_sensor_dags"
DAG_ID = "delta_commit_sensors"
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> AirflowCli:
    return migrated_airflow(tmp_path_factory, DAGS_FOLDER)


def _rows(partition: str, ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([partition] * len(ids))})


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace(" ", "T")).timestamp()


@pytest.mark.slow
def test_sensors_wait_through_conflicts_in_poke_and_reschedule_mode(airflow: AirflowCli, tmp_path: Path) -> None:
    path = str(tmp_path / "events")
    # No automatic checkpoints: writing one makes a gap between two of the writer's commits
    # that, on a loaded machine, could outlast a quiet period.
    table = DeltaTable.create(path, SCHEMA, partition_by=["p"], properties={"delta.checkpointInterval": "100000"})
    table.append(_rows("a", [0, 1, 2]))
    table.append(_rows("b", [10, 11]))
    read_version = table.version()
    expected = {("a", 0), ("a", 1), ("a", 2), ("b", 10), ("b", 11)}
    # The versions each sensor must wait out, by the rules it judges with (the writer is one thread: in order).
    conflicts: dict[str, list[int]] = {"wait_poke": [], "wait_reschedule": []}
    writes: dict[str, int] = {}
    failures: list[BaseException] = []
    next_id = iter(range(100, 10_000, 2))

    def append_to_a() -> int:
        """A blind append into partition a: harmless at WriteSerializable (wait_poke), a conflict at Serializable."""
        first = next(next_id)
        version = table.append(_rows("a", [first, first + 1])).version
        assert version is not None
        expected.update({("a", first), ("a", first + 1)})
        conflicts["wait_reschedule"].append(version)
        return first

    def delete_in_a(row_id: int) -> None:
        """A DELETE that rewrites a file of partition a: a conflict for both sensors."""
        version = table.delete(f"p = 'a' AND id = {row_id}").version
        assert version is not None
        expected.discard(("a", row_id))
        for waited in conflicts.values():
            waited.append(version)

    def metadata_conflict() -> None:
        """One small commit that conflicts with any work: cheap enough to keep up under load."""
        with table.transaction() as txn:
            txn.set_properties({"airflow_delta.test.writer": str(next(next_id))})
            version = txn.commit("SET TBLPROPERTIES")
        for waited in conflicts.values():
            waited.append(version)

    marks = tmp_path / "marks"
    marks.mkdir()

    def commit_until(sensor: str, tries: int, commit: Callable[[], object]) -> None:
        """``commit()`` every 0.3 s until try ``tries`` of ``sensor`` has started (the DAG leaves a file per try):
        each of its pokes before then sees a conflicting commit younger than its quiet period."""
        deadline = time.monotonic() + 480
        while len(list(marks.glob(f"{sensor}.*"))) < tries:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sensor} never started try {tries}")
            time.sleep(0.3)
            commit()

    def writer() -> None:
        try:
            writes["append_b"] = table.append(_rows("b", [30])).version  # another partition: harmless
            expected.add(("b", 30))
            delete_in_a(append_to_a())
            commit_until("wait_poke", 1, metadata_conflict)
            # From here on only blind appends into a, and without a pause: wait_poke ignores them and succeeds
            # after its quiet period, while wait_reschedule cannot succeed at a poke (it sees one younger than
            # its quiet period) until its second try has started, however late Airflow starts it. Nothing the
            # sensors would wait for is committed after a poke could have found the table quiet.
            commit_until("wait_reschedule", 2, append_to_a)
            writes["append_c"] = table.append(_rows("c", [40, 41])).version  # what the partition sensor waits for
            expected.update({("c", 40), ("c", 41)})
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    conf = {"table_uri": path, "read_version": read_version, "delete": "p = 'a' AND id = 1", "marks_dir": str(marks)}
    # Minutes, not seconds, only on a loaded machine (each task parses its DAG file first).
    result = replace(airflow, timeout=900).run("dags", "test", DAG_ID, "--conf", json.dumps(conf))
    thread.join()
    assert not failures, failures
    run = airflow.latest_run(DAG_ID)
    assert run["state"] == "success", output_tail(result)
    assert run["tasks"] == dict.fromkeys(
        ["wait_poke", "wait_reschedule", "partition_has_data", "delete_at_safe_version"], "success"
    )

    def commit_time(version: int) -> float:
        return table.commits_since(version - 1)[0].timestamp / 1000

    for sensor, quiet in (("wait_poke", 2.0), ("wait_reschedule", 4.0)):
        judged = run["xcoms"][sensor]
        assert judged["read_version"] == read_version
        # Every conflicting commit is waited out, none of the harmless ones (the XCom lists the last 20).
        assert judged["num_waited_out"] == len(conflicts[sensor])
        assert [c["version"] for c in judged["waited_out"]] == conflicts[sensor][-20:]
        assert {c["error"] for c in judged["waited_out"]} <= {"ConcurrentAppendException", "MetadataChangedException"}
        assert judged["safe_version"] >= conflicts[sensor][-1]
        # It waited the quiet period out after the last conflicting commit.
        assert _epoch(run["end_dates"][sensor]) - commit_time(conflicts[sensor][-1]) >= quiet
    assert run["reschedules"].get("wait_reschedule", 0) >= 1
    assert run["xcoms"]["partition_has_data"]["version"] == writes["append_c"]

    # The DELETE planned at the safe version committed; the table holds every other row.
    deleted = run["xcoms"]["delete_at_safe_version"]
    assert deleted["deleted"] == 1 and deleted["read_version"] >= conflicts["wait_reschedule"][-1]
    expected.discard(("a", 1))
    assert_oracles_read(path, [{"id": i, "p": p} for p, i in expected])


@pytest.mark.slow
def test_the_asset_watcher_dag_parses_and_its_trigger_is_stored(airflow: AirflowCli) -> None:
    """``airflow dags reserialize`` parses the DAG folder and stores the DAGs as the scheduler reads them."""
    result = airflow.run("dags", "reserialize")
    assert result.returncode == 0, output_tail(result)
    with sqlite3.connect(airflow.home / "airflow.db") as db:
        # What `airflow dags list-import-errors` lists, read where it reads it (one CLI start less).
        assert db.execute("SELECT filename, stacktrace FROM import_error").fetchall() == []
        (data, compressed) = db.execute(
            "SELECT data, data_compressed FROM serialized_dag WHERE dag_id = 'delta_events_consumer'"
        ).fetchone()
    text = data if data is not None else zlib.decompress(compressed).decode()
    serialized = json.loads(text)
    watchers = [watcher for found in _find(serialized, "watchers") for watcher in found]
    assert [w["name"] for w in watchers] == ["delta_events_writes"]
    trigger = watchers[0]["trigger"]
    assert trigger["classpath"] == "airflow_delta.triggers.delta.DeltaTableCommitTrigger"
    assert "/data/delta/events" in json.dumps(trigger["kwargs"])


def _find(value: Any, key: str) -> list[Any]:
    """Every value stored under ``key`` anywhere in a JSON document."""
    found: list[Any] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k == key:
                found.append(v)
            found.extend(_find(v, key))
    elif isinstance(value, list):
        for v in value:
            found.extend(_find(v, key))
    return found
