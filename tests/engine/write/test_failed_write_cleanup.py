"""A write that fails removes the files it wrote (issue 10, item 12).

Every write path is tried with a failure injected after some of its files exist: data
files of an append or a rewrite DELETE, DV files, checkpoint parts and sidecars, the
temporary files of atomic writes. Afterwards the table directory holds exactly what it
held before. The one exception is a commit whose outcome storage did not report: the log
may reference its files, so they stay.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from airflow_delta.engine.checkpoint import classic, v2
from airflow_delta.engine.checkpoint.writer import write_checkpoint
from airflow_delta.engine.errors import (
    CommitFailedError,
    CommitNotSupportedError,
    ConcurrentModificationError,
    ConstraintViolationError,
    InvalidArgumentError,
    InvalidTransactionError,
)
from airflow_delta.engine.model import deletion_vector_files
from airflow_delta.engine.storage.fileio import FileIO, LocalFileIO
from airflow_delta.engine.table import DeltaTable
from airflow_delta.engine.write import data_files
from airflow_delta.engine.write.committer import Committed, Conflicted, FileIOCommitter, RetryableFailure
from airflow_delta.engine.write.options import CommitOptions, WriterOptions
from airflow_delta.engine.write.retry import RetryPolicy
from airflow_delta.engine.write.transaction import Transaction

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


class InjectedError(RuntimeError):
    """The failure a test injects into a write."""


def _rows(ids: range, part: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "p": [part] * len(ids)}, schema=SCHEMA)


def _tree(root: str) -> set[str]:
    """Every file under the table root (hidden temporary files included), relative."""
    out = set()
    for directory, _dirs, files in os.walk(root):
        for name in files:
            out.add(os.path.relpath(os.path.join(directory, name), root))
    return out


def _fail_on_call(n: int, real: Callable[..., Any], *, before: bool = False) -> Callable[..., Any]:
    """``real``, except that its ``n``-th call (1-based) raises InjectedError, after running
    (the step's file exists) or ``before`` it (the earlier steps' files exist)."""
    calls = {"count": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls["count"] += 1
        if before and calls["count"] == n:
            raise InjectedError(f"injected before call {n}")
        result = real(*args, **kwargs)
        if calls["count"] == n:
            raise InjectedError(f"injected after call {n}")
        return result

    return wrapper


def _table(table_path: str, **properties: str) -> DeltaTable:
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties=properties or None)
    table.append(_rows(range(10), "a"))
    table.append(_rows(range(10, 20), "b"))
    return table


# ------------------------------------------------------------------------ appends


@pytest.mark.parametrize("failing_file", [1, 2, 5])
def test_append_failing_after_some_files_removes_them(
    table_path: str, monkeypatch: pytest.MonkeyPatch, failing_file: int
) -> None:
    """Stats of the n-th file raise: every file written so far (and the n-th) is removed."""
    table = _table(table_path)
    before = _tree(table_path)
    monkeypatch.setattr(data_files, "compute_stats", _fail_on_call(failing_file, data_files.compute_stats))
    data = pa.concat_tables([_rows(range(100, 110), part) for part in "abcdef"])
    with pytest.raises(InjectedError):
        table.append(data, writer=WriterOptions(target_file_size=1))
    assert _tree(table_path) == before
    assert table.version() == 2


def test_append_stream_breaking_a_constraint_in_a_later_chunk_removes_earlier_files(
    table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(table_path, **{"delta.constraints.small": "id < 1000"})
    before = _tree(table_path)
    monkeypatch.setattr(data_files, "STREAM_CHUNK_ROWS", 5)
    batches = [_rows(range(100, 105)).to_batches()[0], _rows(range(105, 110)).to_batches()[0], _rows(range(1000, 1001)).to_batches()[0]]
    with pytest.raises(ConstraintViolationError):
        table.append(pa.RecordBatchReader.from_batches(SCHEMA, iter(batches)), writer=WriterOptions(target_file_size=1))
    assert _tree(table_path) == before


def test_append_whose_commit_gives_up_removes_its_files(table_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every attempt finds its version taken, and the attempts run out: nothing of ours is in the log."""
    table = _table(table_path)
    before = _tree(table_path)

    def always_taken(self: FileIOCommitter, version: int, payload: bytes) -> Conflicted:
        return Conflicted(version)

    monkeypatch.setattr(FileIOCommitter, "commit", always_taken)
    no_wait = CommitOptions(retry=RetryPolicy(max_attempts=3, initial_backoff=0, max_backoff=0))
    with pytest.raises(CommitFailedError, match="after 3 attempt"):
        table.append(_rows(range(100, 110)), commit=no_wait)
    assert _tree(table_path) == before


def test_commit_refused_at_validation_removes_its_files(table_path: str) -> None:
    """Actions the commit refuses before any attempt (a file added twice) after its files were written."""
    table = _table(table_path)
    before = _tree(table_path)
    with pytest.raises(InvalidTransactionError, match="added twice"), table.transaction() as txn:
        adds = data_files.write_data_files(txn.snapshot, _rows(range(100, 110)), written=txn.written_files)
        txn.add_files([*adds, adds[0]])
        txn.commit("WRITE")
    assert _tree(table_path) == before


def test_files_stay_when_the_commit_may_have_landed(table_path: str) -> None:
    """Storage reported an error for the commit write: it may be in the log, so its files must stay."""
    table = _table(table_path)
    before = _tree(table_path)

    class Unreported:
        def commit(self, version: int, payload: bytes) -> Committed | RetryableFailure:
            return RetryableFailure(version, OSError("timed out"))

    txn = Transaction(
        table.location,
        committer=Unreported(),  # type: ignore[arg-type]
        options=CommitOptions(retry=RetryPolicy(max_attempts=1)),
    )
    with pytest.raises(CommitFailedError, match="may have been written by this transaction"), txn:
        txn.add_files(data_files.write_data_files(txn.snapshot, _rows(range(100, 110)), written=txn.written_files))
        txn.commit("WRITE")
    assert len(_tree(table_path) - before) == 1


# ------------------------------------------------------------------------ DELETE


def test_rewrite_delete_losing_a_conflict_removes_its_rewritten_files(table_path: str) -> None:
    table = _table(table_path)
    old = table.snapshot()
    table.delete("id = 1")  # the winner: removes the file of partition a
    before = _tree(table_path)
    with pytest.raises(ConcurrentModificationError):
        table.delete("id = 2", snapshot=old)
    assert _tree(table_path) == before


def test_deletion_vector_delete_losing_a_conflict_removes_its_dv_files(table_path: str) -> None:
    table = _table(table_path, **{"delta.enableDeletionVectors": "true"})
    old = table.snapshot()
    table.delete("id = 1")
    before = _tree(table_path)
    with pytest.raises(ConcurrentModificationError):
        table.delete("id = 2 OR id = 12", snapshot=old)
    assert _tree(table_path) == before


def test_deletion_vector_write_failing_after_the_first_file_removes_it(
    table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(table_path, **{"delta.enableDeletionVectors": "true"})
    before = _tree(table_path)
    real = deletion_vector_files._write_dv_file
    monkeypatch.setattr(deletion_vector_files, "_write_dv_file", _fail_on_call(2, real))
    # A target size of 1 byte puts each DV into a file of its own: the second file fails.
    txn = table.transaction()
    with pytest.raises(InjectedError), txn:
        paths = txn.read_files().column("path").to_pylist()
        txn.delete_rows({path: [0] for path in paths}, target_dv_file_size=1)
    assert _tree(table_path) == before


def test_aborted_transaction_removes_its_files(table_path: str) -> None:
    table = _table(table_path, **{"delta.enableDeletionVectors": "true"})
    before = _tree(table_path)
    with pytest.raises(InjectedError), table.transaction() as txn:
        path = txn.read_files().column("path")[0].as_py()
        txn.delete_rows({path: [0, 1]})
        txn.add_files(data_files.write_data_files(txn.snapshot, _rows(range(100, 110)), written=txn.written_files))
        assert len(_tree(table_path) - before) == 2
        raise InjectedError("the caller's code fails before commit")
    assert _tree(table_path) == before


# ------------------------------------------------------------------------ checkpoints


@pytest.mark.parametrize("failing_part", [1, 2, 3])
def test_multi_part_checkpoint_failing_part_way_removes_its_parts(
    table_path: str, monkeypatch: pytest.MonkeyPatch, failing_part: int
) -> None:
    table = _table(table_path)
    for part in "cdef":
        table.append(_rows(range(5), part))
    before = _tree(table_path)
    # Part n fails while being written: parts 1..n-1 are complete files by then.
    monkeypatch.setattr(classic, "write_parquet", _fail_on_call(failing_part, classic.write_parquet, before=True))
    with pytest.raises(InjectedError):
        write_checkpoint(table.snapshot(), part_size=2)
    assert _tree(table_path) == before


@pytest.mark.parametrize("failing_file", [1, 3, 4])  # a sidecar, the last sidecar, the top-level file
def test_v2_checkpoint_failing_part_way_removes_sidecars_and_top_level_file(
    table_path: str, monkeypatch: pytest.MonkeyPatch, failing_file: int
) -> None:
    table = _table(table_path, **{"delta.checkpointPolicy": "v2"})
    table.append(_rows(range(5), "c"))
    before = _tree(table_path)
    monkeypatch.setattr(v2, "write_parquet", _fail_on_call(failing_file, v2.write_parquet))
    with pytest.raises(InjectedError):
        write_checkpoint(table.snapshot(), sidecar_size=1, v2_classic_compat=False)
    assert _tree(table_path) == before


def test_checkpoint_parts_replaced_by_another_writer_are_kept(table_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A part name is shared with racing checkpointers: once another writer replaced it, it is theirs."""
    table = _table(table_path)
    for part in "cdef":
        table.append(_rows(range(5), part))
    real = classic.write_parquet
    written: list[str] = []

    def replaced_then_fail(io: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        if len(written) == 2:
            # Another checkpointer rewrote part 1 (same name, a new file); then our part 3 fails.
            os.utime(written[0], ns=(1, 1))
            raise InjectedError("part 3 fails")
        written.append(path)
        return real(io, path, *args, **kwargs)

    monkeypatch.setattr(classic, "write_parquet", replaced_then_fail)
    with pytest.raises(InjectedError):
        write_checkpoint(table.snapshot(), part_size=2)
    assert os.path.exists(written[0]) and not os.path.exists(written[1])


# ------------------------------------------------------------------------ temporary files


def test_atomic_write_failing_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    io = LocalFileIO()

    def broken_replace(*args: object, **kwargs: object) -> None:
        raise OSError(28, "no space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="no space"):
        io.write_bytes(str(tmp_path / "_delta_log" / "_last_checkpoint"), b"{}")
    assert _tree(str(tmp_path)) == set()


def test_rewrite_delete_failing_while_writing_removes_its_files(table_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(table_path)
    before = _tree(table_path)
    monkeypatch.setattr(data_files, "compute_stats", _fail_on_call(1, data_files.compute_stats))
    with pytest.raises(InjectedError):
        table.delete("id = 1 OR id = 11", writer=WriterOptions(target_file_size=1))
    assert _tree(table_path) == before


def test_commit_refusing_a_lone_surrogate_removes_its_files(table_path: str) -> None:
    """userMetadata that UTF-8 cannot encode is refused at commit time; the data files go too."""
    table = _table(table_path)
    before = _tree(table_path)
    with pytest.raises(InvalidArgumentError, match="lone surrogate"), table.transaction() as txn:
        txn.add_files(data_files.write_data_files(txn.snapshot, _rows(range(100, 110)), written=txn.written_files))
        txn.commit("WRITE", user_metadata="bad \ud800 text")
    assert _tree(table_path) == before
    assert table.version() == 2


def test_storage_without_atomic_commits_leaves_no_data_files(table_path: str) -> None:
    """A FileIO that cannot commit refuses before writing the commit: the data files it wrote are removed."""
    _table(table_path)
    before = _tree(table_path)
    table = DeltaTable(table_path, io=FileIO(pafs.LocalFileSystem()))
    with pytest.raises(CommitNotSupportedError):
        table.append(_rows(range(100, 110)))
    assert _tree(table_path) == before
