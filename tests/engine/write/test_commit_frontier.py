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

import pytest
from hypothesis import HealthCheck, example, given, settings
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

    def link_after_deletion(src: str, dst: str, **kwargs: object) -> None:
        # The confined FileIO links relative to the directory it checked (src_dir_fd).
        if not vanished and str(dst).endswith(".json"):
            vanished.append(src)
            os.remove(src, dir_fd=kwargs.get("src_dir_fd"))  # type: ignore[arg-type]
        real_link(src, dst, **kwargs)  # type: ignore[arg-type]

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
# Found by this test: the checkpoint that anchored the cleanup, written again after our commit,
# made that commit look confirmed while readers never replay it.
@example(before=0, between=[], before_put=["advance"], after_put=["checkpoint"])
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


# ------------------------------------------- _last_checkpoint is a hint, not a frontier

def write_hint(table: DeltaTable, version: int, **extra: object) -> Path:
    import json

    path = Path(table.root, "_delta_log", "_last_checkpoint")
    path.write_text(json.dumps({"version": version, "size": 3, **extra}))
    return path


def hint_version(table: DeltaTable) -> int:
    import json

    return int(json.loads(Path(table.root, "_delta_log", "_last_checkpoint").read_text())["version"])


def missing_multipart_checkpoint(table: DeltaTable) -> int:
    # A multi-part set of version 1 with part 2 of 2 missing: incomplete, so not a checkpoint.
    table.checkpoint(1)
    log_dir = Path(table.root, "_delta_log")
    classic = log_dir / f"{1:020d}.checkpoint.parquet"
    classic.rename(log_dir / f"{1:020d}.checkpoint.{1:010d}.{2:010d}.parquet")
    return 1


@pytest.mark.parametrize(
    "make_hint",
    [
        lambda t: write_hint(t, 10**9),  # far beyond every commit and checkpoint
        lambda t: write_hint(t, 2**62, parts=3),
        lambda t: write_hint(t, 5),  # a version no one has committed yet
        lambda t: write_hint(t, 1),  # a committed version that was never checkpointed
        lambda t: write_hint(t, missing_multipart_checkpoint(t), parts=2),  # an incomplete checkpoint
    ],
    ids=["1e9", "2**62-multipart", "next-versions", "never-checkpointed", "incomplete-multipart"],
)
def test_a_hint_naming_a_missing_checkpoint_does_not_block_commits(
    table: DeltaTable, make_hint: Callable[[DeltaTable], Path]
) -> None:
    make_hint(table)
    # Readers fall back to listing, as the protocol says of a hint they cannot follow.
    assert table.version() == 1 and ids_of(table) == [1]
    for expected_version, new_id in [(2, 2), (3, 3), (4, 4), (5, 5), (6, 6)]:
        assert append(table, [new_id]) == expected_version
    assert ids_of(table) == [1, 2, 3, 4, 5, 6]
    # delta-rs refuses any table whose hint names a missing checkpoint ("Had a
    # _last_checkpoint hint but didn't find any checkpoints"): the oracles check the
    # log we wrote once that debris is gone.
    Path(table.root, "_delta_log", "_last_checkpoint").unlink()
    assert_oracles_read(table.root, expected_rows([1, 2, 3, 4, 5, 6]))


def test_a_stale_transaction_is_still_refused_beside_a_bogus_hint(table: DeltaTable) -> None:
    # Ignoring a bad hint does not weaken the frontier: a real checkpoint past the
    # version is still a refusal.
    txn = stale_transaction(table, HookedCommitter(table))  # reads v1
    append(table, [2])
    append(table, [3])
    table.checkpoint(3)
    clean(table)
    write_hint(table, 10**9)
    with pytest.raises(LogMovedPastCommitError, match="checkpoint of version 3"):
        txn.commit("WRITE")
    assert ids_of(table) == [1, 2, 3]


def test_the_automatic_checkpoint_rewrites_a_hint_naming_a_missing_checkpoint(table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={"delta.checkpointInterval": "2"})
    append(table, [1])  # v1
    write_hint(table, 10**9)
    append(table, [2])  # v2: the post-commit checkpoint
    assert Path(table.root, "_delta_log", f"{2:020d}.checkpoint.parquet").exists()
    assert hint_version(table) == 2
    assert_oracles_read(table.root, expected_rows([1, 2]))


def test_a_checkpoint_keeps_a_newer_hint_whose_checkpoint_is_present(table: DeltaTable) -> None:
    append(table, [2])
    table.checkpoint(2)
    table.checkpoint(1)  # an older checkpoint written late does not move the hint back
    assert hint_version(table) == 2


def test_cleanup_repoints_a_hint_naming_a_missing_checkpoint(table: DeltaTable) -> None:
    append(table, [2])
    table.checkpoint(2)
    append(table, [3])
    write_hint(table, 10**9)
    assert clean(table)
    assert hint_version(table) == 2
    assert ids_of(table) == [1, 2, 3]
    assert_oracles_read(table.root, expected_rows([1, 2, 3]))


# ------------------------------------------------- create_table under the same rule

def test_create_is_refused_when_another_tables_version_0_was_cleaned_up_during_it(
    table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The listing before the write finds no log; before the put-if-absent of version 0,
    # another creator makes a table, checkpoints it and cleanup removes its version 0.
    # Our version 0 would land below that checkpoint, where no reader looks.
    from airflow_delta.engine.operations import create as create_module

    real_exists = create_module._table_exists
    others: list[DeltaTable] = []

    def racing_exists(io: object, root: str) -> bool:
        answer = real_exists(io, root)  # type: ignore[arg-type]
        if not others:
            monkeypatch.setattr(create_module, "_table_exists", real_exists)
            other = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
            append(other, [1])
            other.checkpoint(1)
            clean(other)
            others.append(other)
        return answer

    monkeypatch.setattr(create_module, "_table_exists", racing_exists)
    with pytest.raises(TableAlreadyExistsError):
        DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    assert others and not commit_file(others[0], 0).exists()  # ours was removed again
    assert ids_of(DeltaTable(table_path)) == [1]
    assert_oracles_read(table_path, expected_rows([1]))


def test_create_stands_when_a_fast_writer_checkpoints_right_after_it(
    table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkpoint past version 0 right after the write is not a sign of a lost
    # create when it was made from our version 0 (same table id).
    from airflow_delta.engine.operations import create as create_module

    real_list_log = create_module.list_log
    done: list[bool] = []

    def list_after_a_fast_writer(io: object, root: str) -> object:
        if not done:
            done.append(True)
            fast = DeltaTable(table_path)
            append(fast, [1])
            fast.checkpoint(1)
            clean(fast)  # removes our version 0, behind the checkpoint made from it
        return real_list_log(io, root)  # type: ignore[arg-type]

    monkeypatch.setattr(create_module, "list_log", list_after_a_fast_writer)
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    assert done and ids_of(table) == [1]
    assert_oracles_read(table_path, expected_rows([1]))


def test_concurrent_creates_make_exactly_one_table(table_path: str) -> None:
    import threading

    creators = 6
    barrier = threading.Barrier(creators)
    outcomes: list[str] = []

    def create() -> None:
        barrier.wait()
        try:
            DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
            outcomes.append("created")
        except TableAlreadyExistsError:
            outcomes.append("exists")

    threads = [threading.Thread(target=create) for _ in range(creators)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["created"] + ["exists"] * (creators - 1)
    log_files = sorted(p.name for p in Path(table_path, "_delta_log").iterdir())
    assert set(log_files) <= {f"{0:020d}.json", f"{0:020d}.crc"}  # no loser left a file behind
    table = DeltaTable(table_path)
    assert table.version() == 0 and append(table, [1]) == 1
    assert_oracles_read(table_path, expected_rows([1]))


# --------------------------------------- a foreign cleaner that deletes in another order

def backdate(path: Path, seconds: int = 60) -> None:
    import os

    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns - seconds * 1_000_000_000))


@pytest.mark.parametrize("deleted_first", [[2], [2, 0], [2, 1, 0]], ids=["only-v2", "v2-then-v0", "newest-first"])
def test_a_foreign_cleaner_deleting_out_of_order_cannot_hide_a_commit(
    table: DeltaTable, deleted_first: list[int]
) -> None:
    # Between our check and our write, v2 and v3 are committed, v3 is checkpointed, and a
    # cleaner that does not go oldest first (delta-rs may not) has so far deleted v2 but
    # not v1. Our put-if-absent of v2 succeeds while v1, the predecessor we check,
    # remains: only the checkpoint of v3, written before our commit, gives it away.
    def others() -> None:
        append(table, [2])
        append(table, [3])
        table.checkpoint(3)
        for checkpoint_file in Path(table.root, "_delta_log").glob(f"{3:020d}.checkpoint*"):
            backdate(checkpoint_file)  # written well before our commit
        for v in deleted_first:
            commit_file(table, v).unlink()

    txn = stale_transaction(table, HookedCommitter(table, before=others))
    with pytest.raises(CommitOutcomeUnknownError, match="checkpoint of version 3 was written before it"):
        txn.commit("WRITE")
    assert ids_of(table) == [1, 2, 3]  # readers start at checkpoint 3: our v2 is not among them


def test_a_checkpoint_written_again_after_our_commit_does_not_confirm_it(table: DeltaTable) -> None:
    # Between our check and our write, v2 and v3 are committed and checkpointed and cleanup
    # removes v0..v2, so our put of v2 succeeds; then the checkpoint of v3 is written again.
    # Its new time says "after our commit", but it was built from the old one, without ours:
    # commit 3, older than ours, gives it away.
    def others() -> None:
        append(table, [2])
        append(table, [3])
        table.checkpoint(3)
        clean(table)

    txn = stale_transaction(table, HookedCommitter(table, before=others, after=lambda: table.checkpoint(3)))
    with pytest.raises(CommitOutcomeUnknownError, match="commit 3 was written before it"):
        txn.commit("WRITE")
    assert ids_of(table) == [1, 2, 3]  # readers start at checkpoint 3: our v2 is not among them


def test_a_checkpoint_past_our_commit_written_after_it_confirms_it(table: DeltaTable) -> None:
    # The other way round: v3 and its checkpoint come after our v2, and a foreign
    # cleaner removes v0 and v1 out of order. The checkpoint was made from our commit.
    def others() -> None:
        append(table, [3])
        table.checkpoint(3)
        commit_file(table, 1).unlink()
        commit_file(table, 0).unlink()

    txn = stale_transaction(table, HookedCommitter(table, after=others))
    assert txn.commit("WRITE") == 2
    assert ids_of(table) == [1, 3, 99]
    assert_oracles_read(table.root, expected_rows([1, 3, 99]))


def test_a_creating_transaction_that_lands_below_another_tables_checkpoint_is_removed(table_path: str) -> None:
    # A transaction creating the table checks the (empty) log; before its write another
    # table is created, checkpointed past version 0 and cleaned up to that checkpoint.
    other: list[DeltaTable] = []

    def others() -> None:
        created = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
        append(created, [1])
        created.checkpoint(1)
        backdate(Path(table_path, "_delta_log", f"{1:020d}.checkpoint.parquet"))
        clean(created)
        other.append(created)

    creator = DeltaTable(table_path).transaction()
    creator._committer = HookedCommitter(DeltaTable(table_path), before=others)
    creator.set_metadata(DeltaTable.create(str(Path(table_path).parent / "model"), SCHEMA).snapshot().metadata)
    with pytest.raises(TableAlreadyExistsError):
        creator.commit("CREATE TABLE")
    assert other and not commit_file(other[0], 0).exists()
    assert ids_of(other[0]) == [1]
    assert_oracles_read(table_path, expected_rows([1]))


def test_create_never_deletes_a_version_0_it_cannot_tell_apart(
    table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkpoint past version 0 appears right after the create, and the table cannot be
    # read to compare table ids: writers may already build on our version 0, so it stays
    # and the create reports that it cannot tell.
    from airflow_delta.engine.errors import InvalidLogError
    from airflow_delta.engine.operations import create as create_module

    real_list_log = create_module.list_log

    def list_after_a_fast_writer(io: object, root: str) -> object:
        monkeypatch.setattr(create_module, "list_log", real_list_log)
        fast = DeltaTable(table_path)
        append(fast, [1])
        fast.checkpoint(1)
        return real_list_log(io, root)  # type: ignore[arg-type]

    def unreadable(*args: object, **kwargs: object) -> object:
        raise InvalidLogError("the log cannot be read right now")

    monkeypatch.setattr(create_module, "list_log", list_after_a_fast_writer)
    monkeypatch.setattr(create_module, "load_snapshot", unreadable)
    with pytest.raises(CommitOutcomeUnknownError) as caught:
        DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    assert caught.value.version == 0 and caught.value.retryable is False
    assert Path(table_path, "_delta_log", f"{0:020d}.json").exists()
    assert ids_of(DeltaTable(table_path)) == [1]


def test_a_listing_that_hides_the_newest_entries_is_named_as_the_cause_not_cleanup(table: DeltaTable) -> None:
    # The writer read version 1; the store's listing then lags behind and shows only
    # version 0. No cleanup ran (it keeps the newest versions): the message must say so.
    txn = stale_transaction(table, HookedCommitter(table))
    hidden = commit_file(table, 1)
    moved = hidden.with_name("lagging-replica")
    hidden.rename(moved)
    try:
        with pytest.raises(LogMovedPastCommitError) as caught:
            txn.commit("WRITE")
    finally:
        moved.rename(hidden)
    message = str(caught.value)
    assert caught.value.listing_behind and caught.value.retryable
    assert "listing of the log shows version 0, older than version 1" in message
    assert "list-after-write" in message and "cleanup ran" not in message and "cleaned it up" not in message
    assert not commit_file(table, 2).exists() and ids_of(table) == [1]
