"""A commit never lands at or below a version the log has moved past (issue 10, item 1).

Each test interleaves a transaction with real appends, real checkpoints and a real log
cleanup (clock in 2100, retention 0) at a chosen point of its commit: a committer that
runs the interference before or after the actual put-if-absent. Whatever the point,
``commit()`` either returns a version whose rows every reader sees, or raises a typed
error; when the error says nothing was written, nothing is in the table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.errors import (
    CommitFailedError,
    CommitOutcomeUnknownError,
    LogMovedPastCommitError,
    TableAlreadyExistsError,
)
from airflow_delta.engine.write.committer import CommitResponse, FileIOCommitter
from airflow_delta.engine.write.options import CommitOptions
from airflow_delta.engine.write.retry import RetryPolicy
from airflow_delta.engine.write.transaction import Transaction
from tests.engine.write.transaction_helpers import SCHEMA, data_files, rows
from tests.oracles import assert_oracles_read

FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01: every commit is past any retention


def append(table: DeltaTable, ids: list[int]) -> int:
    with table.transaction() as txn:
        txn.add_files(data_files(txn, rows("a", ids)))
        return txn.commit("WRITE")


def clean(table: DeltaTable) -> list[str]:
    return table.cleanup_log(retention="interval 0 seconds", now=FAR_FUTURE_MS)


def ids_of(table: DeltaTable) -> list[int]:
    return sorted(table.snapshot().to_arrow().column("id").to_pylist())


def expected_rows(ids: list[int]) -> list[dict[str, object]]:
    return [{"id": i, "value": f"v{i}", "p": "a"} for i in ids]


class HookedCommitter(FileIOCommitter):
    """The real put-if-absent committer, with interference before or after the n-th write."""

    def __init__(self, table: DeltaTable, *, before: Callable[[], None] | None = None,
                 after: Callable[[], None] | None = None, on_call: int = 1) -> None:
        super().__init__(table.location)
        self.before, self.after, self.on_call, self.calls = before, after, on_call, 0

    def commit(self, version: int, payload: bytes) -> CommitResponse:
        self.calls += 1
        if self.calls == self.on_call and self.before is not None:
            self.before()
        response = super().commit(version, payload)
        if self.calls == self.on_call and self.after is not None:
            self.after()
        return response


@pytest.fixture
def table(table_path: str) -> DeltaTable:
    t = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])  # v0
    append(t, [1])  # v1
    return t


def stale_transaction(table: DeltaTable, committer: HookedCommitter) -> Transaction:
    txn = Transaction(table.location, committer=committer,
                      options=CommitOptions(retry=RetryPolicy(max_attempts=5, initial_backoff=0)))
    txn.add_files(data_files(txn, rows("a", [99])))
    return txn


def commit_file(table: DeltaTable, version: int) -> Path:
    return Path(table.root, "_delta_log", f"{version:020d}.json")


def test_retry_after_cleanup_removed_the_lost_version_writes_nothing(table: DeltaTable) -> None:
    # The example: read v1, lose v2 to another writer; while backing off, v3 is
    # committed and checkpointed and cleanup removes v0..v2. The retry would find v2
    # free and "commit" it where no reader looks.
    def others() -> None:
        append(table, [3])  # v3
        table.checkpoint(3)
        assert any(p.endswith(f"{2:020d}.json") for p in clean(table))

    committer = HookedCommitter(table, before=lambda: append(table, [2]), after=others)
    txn = stale_transaction(table, committer)
    with pytest.raises(LogMovedPastCommitError, match="Nothing was written") as caught:
        txn.commit("WRITE")
    assert caught.value.version == 2 and isinstance(caught.value, CommitFailedError)
    assert committer.calls == 1  # the version was refused before a second write
    assert not commit_file(table, 2).exists()
    assert table.version() == 3 and ids_of(table) == [1, 2, 3]
    assert_oracles_read(table.root, expected_rows([1, 2, 3]))


def test_first_attempt_refused_once_cleanup_passed_the_read_version(table: DeltaTable) -> None:
    txn = stale_transaction(table, HookedCommitter(table))
    append(table, [2])  # v2
    append(table, [3])  # v3
    table.checkpoint(3)
    clean(table)
    with pytest.raises(LogMovedPastCommitError, match="checkpoint of version 3"):
        txn.commit("WRITE")
    assert not commit_file(table, 2).exists() and ids_of(table) == [1, 2, 3]


def test_winners_still_in_the_log_are_caught_up_with_even_after_cleanup(table: DeltaTable) -> None:
    # Cleanup removed the version this transaction read, but every commit after it is
    # still there: the transaction checks them and lands after them.
    txn = stale_transaction(table, HookedCommitter(table))
    append(table, [2])  # v2
    table.checkpoint(2)
    clean(table)  # deletes v0, v1
    assert not commit_file(table, 1).exists()
    assert txn.commit("WRITE") == 3
    assert ids_of(table) == [1, 2, 99]


def test_cleanup_between_the_check_and_the_write_of_a_listed_version(table: DeltaTable) -> None:
    # v2 is in the log when the attempt is checked; before the write lands, v3 is
    # committed and checkpointed and cleanup removes v2, so the put-if-absent of v2
    # "succeeds". The commit is below the log's start: it is deleted again.
    def others() -> None:
        append(table, [3])
        table.checkpoint(3)
        clean(table)

    txn = stale_transaction(table, HookedCommitter(table, before=others))  # reads v1
    append(table, [2])  # v2, the winner this stale transaction will find
    with pytest.raises(LogMovedPastCommitError, match="deleted again"):
        txn.commit("WRITE")
    assert not commit_file(table, 2).exists()
    assert table.version() == 3 and ids_of(table) == [1, 2, 3]
    assert_oracles_read(table.root, expected_rows([1, 2, 3]))


def test_log_moving_past_an_unlisted_version_during_the_write_is_reported_unknown(table: DeltaTable) -> None:
    # v2 is free when checked; before the write, another writer takes v2, v3 is
    # checkpointed and cleanup removes v0..v2. Our v2 then lands where no reader looks,
    # which cannot be told from a cleanup that ran after our commit: not retryable.
    def others() -> None:
        append(table, [2])
        append(table, [3])
        table.checkpoint(3)
        clean(table)

    txn = stale_transaction(table, HookedCommitter(table, before=others))
    with pytest.raises(CommitOutcomeUnknownError, match=txn.txn_id) as caught:
        txn.commit("WRITE")
    assert caught.value.retryable is False and caught.value.version == 2
    assert ids_of(table) == [1, 2, 3]


def test_cleanup_right_after_our_commit_anchored_on_it_keeps_the_commit(table: DeltaTable) -> None:
    # Our v2 lands; before the transaction looks again, v2 is checkpointed and cleanup
    # removes v0, v1 (the file it checks). The checkpoint was made from our commit.
    def others() -> None:
        table.checkpoint(2)
        clean(table)

    txn = stale_transaction(table, HookedCommitter(table, after=others))
    assert txn.commit("WRITE") == 2
    assert not commit_file(table, 1).exists()
    assert ids_of(table) == [1, 99]
    assert_oracles_read(table.root, expected_rows([1, 99]))


def test_a_new_table_is_not_created_over_a_cleaned_up_log(table_path: str) -> None:
    creator = DeltaTable(table_path).transaction()  # no table yet: it will commit version 0
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    creator.set_metadata(table.snapshot().metadata)
    append(table, [1])
    table.checkpoint(1)
    clean(table)  # version 0 is gone from disk
    assert not commit_file(table, 0).exists()
    with pytest.raises(TableAlreadyExistsError):
        creator.commit("CREATE TABLE")
    assert not commit_file(table, 0).exists() and ids_of(table) == [1]


def test_a_commit_whose_temporary_file_vanished_is_retried_and_lands_once(
    table: DeltaTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process deletes the commit's hidden temporary file before it is linked into
    # place: the write did not happen, the transaction reads the version back, finds it
    # free and writes again. Nothing untyped escapes, and the rows land exactly once.
    import os

    real_link = os.link
    vanished: list[str] = []

    def link_after_deletion(src: str, dst: str, **kwargs: Any) -> None:
        # FileIO links relative to the log directory's descriptor (src_dir_fd / dst_dir_fd).
        if not vanished and dst.endswith(".json"):
            vanished.append(src)
            os.remove(src, dir_fd=kwargs.get("src_dir_fd"))
        real_link(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", link_after_deletion)
    txn = stale_transaction(table, HookedCommitter(table))
    assert txn.commit("WRITE") == 2
    assert vanished and txn.attempts == 2
    assert ids_of(table) == [1, 99]
    assert not [n for n in os.listdir(Path(table.root, "_delta_log")) if n.endswith(".tmp")]


# ------------------------------------------------------- every interleaving, as a property

# "advance" appends twice, checkpoints and cleans up: the log moves past what came before.
ADVANCE = ["append", "append", "checkpoint", "cleanup"]
OPS = st.lists(st.sampled_from(["append", "checkpoint", "cleanup", "advance"]), max_size=3)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.integers(0, 2), between=OPS, before_put=OPS, after_put=OPS)
def test_any_interleaving_of_appends_checkpoints_and_cleanups_with_a_commit(
    tmp_path_factory: pytest.TempPathFactory, before: int, between: list[str], before_put: list[str],
    after_put: list[str],
) -> None:
    # A transaction opens after ``before`` appends; ``between`` runs before it commits,
    # ``before_put`` / ``after_put`` around its first write. Whatever the order: commit()
    # returns a version whose row every reader sees, or says nothing was written and
    # nothing is there, or (only when the log moved during the write) says it cannot tell.
    table = DeltaTable.create(str(tmp_path_factory.mktemp("prop") / "t"), SCHEMA, partition_by=["p"])
    next_id = iter(range(1, 1000))
    appended: list[int] = []

    def run(ops: list[str]) -> Callable[[], None]:
        def go() -> None:
            for step in [s for op in ops for s in (ADVANCE if op == "advance" else [op])]:
                if step == "append":
                    appended.append(next(next_id))
                    append(table, [appended[-1]])
                elif step == "checkpoint":
                    table.checkpoint()
                else:
                    clean(table)
        return go

    run(["append"] * before)()
    txn = stale_transaction(table, HookedCommitter(table, before=run(before_put), after=run(after_put)))
    run(between)()
    try:
        version = txn.commit("WRITE")
        outcome = "committed"
    except LogMovedPastCommitError:
        outcome = "nothing written"
    except CommitOutcomeUnknownError:
        outcome = "unknown"
    ids = ids_of(table)
    assert len(ids) == len(set(ids))
    assert set(appended) <= set(ids)
    if outcome == "committed":
        assert 99 in ids and version <= table.version()
    elif outcome == "nothing written":
        assert 99 not in ids
    assert_oracles_read(table.root, expected_rows(ids))
