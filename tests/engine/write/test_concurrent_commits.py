"""``commits_since`` and ``conflicting_commits``: the log after a version, judged by the commit path's own rules.

The oracle of the property test is the real commit path: a transaction that read the
same predicate at the same version, then commits past the same history. The verdicts
must say "conflict" exactly when it raises, and the first conflicting commit must be
the winner it reports, with the same exception class.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import (
    CommitOptions,
    ConcurrentModificationError,
    ConflictWatch,
    DeltaTable,
    InvalidArgumentError,
    InvalidFilterError,
    RetryPolicy,
    VersionNotFoundError,
    write_data_files,
)

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
PARTITIONS = ("a", "b", "c")


class History:
    """A partitioned table and the operations a history is made of (each one commit, or none)."""

    def __init__(self, path: str, deletion_vectors: bool) -> None:
        props = {"delta.enableDeletionVectors": "true"} if deletion_vectors else None
        self.table = DeltaTable.create(path, SCHEMA, partition_by=["p"], properties=props)
        self._ids = itertools.count()
        self.property_changes = itertools.count()

    def rows(self, partition: str, n: int = 3) -> pa.Table:
        ids = [next(self._ids) for _ in range(n)]
        return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([partition] * n)})

    def run(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        t = self.table
        if kind == "append":  # a blind append
            t.append(self.rows(op[1]))
        elif kind == "delete_partition":  # whole files removed, nothing read from them
            t.delete(f"p = '{op[1]}'")
        elif kind == "delete_rows":  # DV updates or file rewrites
            t.delete(f"id < {op[1]}")
        elif kind == "merge_insert":  # adds files after reading a partition: not a blind append
            with t.transaction() as txn:
                txn.read_files(f"p = '{op[1]}'")
                txn.add_files(write_data_files(txn.snapshot, self.rows(op[1])), written_for_this_commit=True)
                txn.commit("MERGE")
        elif kind == "optimize":  # dataChange=false rewrite of a partition's files
            snapshot = t.snapshot()
            with t.transaction(snapshot=snapshot) as txn:
                files = txn.read_files(f"p = '{op[1]}'")
                if files.num_rows < 2:
                    return
                data = snapshot.to_arrow(filter=f"p = '{op[1]}'").select(["id", "p"])
                adds = [replace(a, data_change=False) for a in write_data_files(snapshot, data)]
                txn.remove_files(files, data_change=False)
                txn.add_files(adds, written_for_this_commit=True)
                txn.commit("OPTIMIZE")
        elif kind == "set_property":  # a metadata change
            with t.transaction() as txn:
                txn.set_properties({"airflow_delta.test.change": str(next(self.property_changes))})
                txn.commit("SET TBLPROPERTIES")
        elif kind == "enable_in_commit_timestamps":  # a protocol change (and metadata)
            with t.transaction() as txn:
                txn.set_properties({"delta.enableInCommitTimestamps": "true"})
                txn.commit("SET TBLPROPERTIES")
        else:  # pragma: no cover - the strategy makes only the kinds above
            raise AssertionError(kind)


partition = st.sampled_from(PARTITIONS)
operation = st.one_of(
    st.tuples(st.just("append"), partition),
    st.tuples(st.just("delete_partition"), partition),
    st.tuples(st.just("delete_rows"), st.integers(0, 30)),
    st.tuples(st.just("merge_insert"), partition),
    st.tuples(st.just("optimize"), partition),
    st.tuples(st.just("set_property")),
    st.tuples(st.just("enable_in_commit_timestamps")),
)
PREDICATES = (None, "p = 'a'", "p = 'b'", "id < 3", "id >= 12", "p = 'c' AND id > 5", "p IN ('a', 'c')")


def planned_work_raises(
    table: DeltaTable, read_version: int, predicate: str | None, isolation: str | None, changes_data: bool
) -> ConcurrentModificationError | None:
    """Run the planned work for real: read ``predicate`` at ``read_version``, remove what was read, commit.

    ``changes_data=True`` tells the verdicts the work commits ``dataChange=true`` file
    actions. A DELETE that read no file commits no file action at all, and at Serializable
    Delta checks such an empty commit at SnapshotIsolation (``canDowngradeToSnapshotIsolation``:
    it serialises before every winner), so there it is not the work the verdicts were asked
    about; the work then inserts a row, as a MERGE's insert clause does when its condition
    matched no file (issue 21). At WriteSerializable an empty DELETE is not downgraded
    (DELETE changes data), so it stays a DELETE.
    """
    options = CommitOptions(isolation_level=isolation, retry=RetryPolicy(max_attempts=1000))
    with table.transaction(options, snapshot=table.snapshot(read_version)) as txn:
        files = txn.read_files(predicate)
        txn.remove_files(files, data_change=changes_data)
        inserts = changes_data and files.num_rows == 0 and isolation == "Serializable"
        if inserts:
            row = pa.table({"id": pa.array([-1], pa.int64()), "p": pa.array(["a"])})
            txn.add_files(write_data_files(txn.snapshot, row), written_for_this_commit=True)
        try:
            txn.commit("MERGE" if inserts else "DELETE" if changes_data else "OPTIMIZE")
        except ConcurrentModificationError as exc:
            return exc
    return None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(operation, min_size=1, max_size=4),
    after=st.lists(operation, min_size=0, max_size=5),
    predicate=st.sampled_from(PREDICATES),
    isolation=st.sampled_from([None, "Serializable", "WriteSerializable"]),
    changes_data=st.booleans(),
    deletion_vectors=st.booleans(),
)
# Issue 21: at Serializable, work whose predicate reads no file (ids 12.. come later).
@example(
    before=[("append", "a")], after=[("append", "a")], predicate="id >= 12",
    isolation="Serializable", changes_data=True, deletion_vectors=False,
)
@example(
    before=[("append", "a")], after=[("append", "a"), ("set_property",)], predicate="id >= 12",
    isolation="Serializable", changes_data=True, deletion_vectors=False,
)
def test_verdicts_agree_with_a_real_transaction_committing_past_the_same_history(
    before: list[tuple[Any, ...]],
    after: list[tuple[Any, ...]],
    predicate: str | None,
    isolation: str | None,
    changes_data: bool,
    deletion_vectors: bool,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        history = History(f"{tmp}/t", deletion_vectors)
        for p in PARTITIONS:
            history.run(("append", p))
        for op in before:
            history.run(op)
        read_version = history.table.version()
        for op in after:
            history.run(op)
        verdicts = history.table.conflicting_commits(
            read_version, predicate, isolation_level=isolation, changes_data=changes_data
        )
        assert [v.version for v in verdicts] == list(range(read_version + 1, history.table.version() + 1))
        raised = planned_work_raises(history.table, read_version, predicate, isolation, changes_data)
        first = next((v for v in verdicts if v.conflicts), None)
        if raised is None:
            assert first is None, f"predicted {first}, but the transaction committed"
        else:
            assert first is not None, f"the transaction raised {raised!r}, no verdict said conflict"
            assert (first.version, first.error) == (raised.winning_version, type(raised).__name__)
            assert first.message == str(raised)


@pytest.fixture
def history(tmp_path: Path) -> History:
    h = History(str(tmp_path / "t"), deletion_vectors=True)
    for p in PARTITIONS:
        h.run(("append", p))
    return h


def test_the_matrix_of_the_issue(history: History) -> None:
    """Blind appends are harmless at WriteSerializable; a remove of a file read, or metadata, is not."""
    read_version = history.table.version()
    history.run(("append", "a"))  # read_version + 1: blind append into the partition read
    history.run(("delete_partition", "b"))  # + 2: elsewhere
    history.run(("delete_partition", "a"))  # + 3: removes the files read
    history.run(("set_property",))  # + 4
    verdicts = {v.version - read_version: v for v in history.table.conflicting_commits(read_version, "p = 'a'")}
    assert (verdicts[1].conflicts, verdicts[1].touches_read) == (False, True)
    assert (verdicts[2].conflicts, verdicts[2].touches_read) == (False, False)
    assert (verdicts[3].conflicts, verdicts[3].error) == (True, "ConcurrentDeleteReadException")
    assert (verdicts[4].conflicts, verdicts[4].error) == (True, "MetadataChangedException")
    serializable = history.table.conflicting_commits(read_version, "p = 'a'", isolation_level="Serializable")
    assert (serializable[0].conflicts, serializable[0].error) == (True, "ConcurrentAppendException")


def test_work_that_reads_no_file_is_judged_as_work_that_writes(history: History) -> None:
    """Issue 21: the verdicts assume ``changes_data=True`` work commits data, as a MERGE inserting does.

    At Serializable a blind append where the predicate reads conflicts with such work. A
    DELETE that read no file commits no action at all, which Delta checks at
    SnapshotIsolation (``canDowngradeToSnapshotIsolation``: an empty commit serialises
    before the winner), so it commits: the verdict errs on the side of waiting for it.
    """
    read_version = history.table.version()  # ids 0..8; nothing matches id >= 9 yet
    history.run(("append", "a"))  # ids 9..11, a blind append where the predicate reads
    (verdict,) = history.table.conflicting_commits(read_version, "id >= 9", isolation_level="Serializable")
    assert (verdict.conflicts, verdict.error) == (True, "ConcurrentAppendException")
    options = CommitOptions(isolation_level="Serializable")
    with history.table.transaction(options, snapshot=history.table.snapshot(read_version)) as merge:
        assert merge.read_files("id >= 9").num_rows == 0
        merge.add_files(write_data_files(merge.snapshot, history.rows("b")), written_for_this_commit=True)
        with pytest.raises(ConcurrentModificationError) as raised:
            merge.commit("MERGE")
        assert (raised.value.winning_version, type(raised.value).__name__) == (verdict.version, verdict.error)
    with history.table.transaction(options, snapshot=history.table.snapshot(read_version)) as delete:
        assert delete.read_files("id >= 9").num_rows == 0
        assert delete.commit("DELETE") == verdict.version + 1


def test_a_watch_reads_only_new_commits_and_keeps_its_judgement(history: History) -> None:
    read_version = history.table.version()
    watch = ConflictWatch(history.table.location, read_version, "p = 'c'")
    assert watch.poll() == []
    history.run(("append", "c"))
    first = watch.poll()
    assert [(v.version, v.conflicts) for v in first] == [(read_version + 1, False)]
    history.run(("delete_rows", 100))  # DV updates / removes of every file, 'c' among them
    (second,) = watch.poll()
    assert second.version == read_version + 2 and second.error == "ConcurrentDeleteReadException"
    assert watch.poll() == []
    assert watch.last_seen == read_version + 2


def test_commits_since_summarises_each_commit(history: History) -> None:
    start = history.table.version()
    history.run(("append", "b"))
    history.run(("optimize", "b"))
    history.run(("enable_in_commit_timestamps",))
    append, optimize, ict = history.table.commits_since(start)
    assert (append.operation, append.is_blind_append, append.changes_data) == ("WRITE", True, True)
    assert append.partitions == ({"p": "b"},) and (append.num_added_files, append.num_removed_files) == (1, 0)
    assert (optimize.operation, optimize.changes_data, optimize.num_removed_files) == ("OPTIMIZE", False, 2)
    assert (ict.changes_protocol, ict.changes_metadata) == (True, True)
    assert ict.timestamp == ict.commit_info["inCommitTimestamp"]
    assert history.table.commits_since(history.table.version()) == []
    assert [c.version for c in history.table.commits_since(-1)] == list(range(history.table.version() + 1))
    later = history.table.commits_since(start, since=ict.timestamp + 60_000)
    assert later == []


def test_bad_input_is_named(history: History) -> None:
    latest = history.table.version()
    with pytest.raises(VersionNotFoundError):
        history.table.commits_since(latest + 1)
    with pytest.raises(InvalidArgumentError, match="read_version"):
        history.table.conflicting_commits(-1)
    with pytest.raises(InvalidFilterError):
        history.table.conflicting_commits(latest, "no_such_column = 1")
    with pytest.raises(InvalidArgumentError, match="isolation_level"):
        history.table.conflicting_commits(latest, isolation_level=3)  # type: ignore[arg-type]


def test_commits_since_a_time_reads_only_the_commits_written_from_then(history: History) -> None:
    log = Path(history.table.table_uri, "_delta_log")
    for f in log.iterdir():  # the commits so far: an hour old
        os.utime(f, (time.time() - 3600, time.time() - 3600))
    start = history.table.version()
    history.run(("append", "a"))
    history.run(("append", "b"))
    cutoff = int((time.time() - 600) * 1000)
    assert [c.version for c in history.table.commits_since(since=cutoff)] == [start + 1, start + 2]
    assert [c.version for c in history.table.commits_since(start + 1, since=cutoff)] == [start + 2]
    assert history.table.commits_since(since=int(time.time() * 1000) + 60_000) == []
    # Commits before a checkpoint may be cleaned up: a time inside the kept log needs none of them.
    for version in (0, 1):
        (log / f"{version:020d}.json").unlink()
    assert [c.version for c in history.table.commits_since(since=cutoff)] == [start + 1, start + 2]
    with pytest.raises(VersionNotFoundError, match="removed by log cleanup"):
        history.table.commits_since(0)
    with pytest.raises(InvalidArgumentError, match="version"):
        history.table.commits_since()
