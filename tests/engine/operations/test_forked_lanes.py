"""Tasks in this process and in a forked one (forked_lanes), and OPTIMIZE's bins rewritten that way."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from airflow_delta.engine import (
    CorruptDataFileError,
    DataFileNotFoundError,
    DeltaTable,
    LocalFileIO,
    OptimizeOptions,
    RewriteProcessError,
)
from airflow_delta.engine.operations import forked_lanes, optimize
from airflow_delta.engine.operations.forked_lanes import lanes_possible, run_in_lanes
from airflow_delta.engine.read.scan import read_data
from airflow_delta.engine.storage.written_files import WrittenFiles
from tests.engine.operations.test_optimize import DV, commit_actions, data_files_on_disk, live_paths, small_files_table
from tests.oracles import assert_oracles_read, read_with_deltars

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="forked lanes run on Linux only")


def _create(io: LocalFileIO, written: WrittenFiles, name: str) -> None:
    """As a writer does: record the file, then create it."""
    path = f"{io.table_root}/{name}"
    written.record(path)
    Path(path).write_text(name)


def _files(root: Path) -> set[str]:
    return {p.name for p in root.iterdir()}


def test_tasks_run_in_both_processes_and_results_come_in_task_order(tmp_path: Path) -> None:
    io = LocalFileIO(str(tmp_path))
    written = WrittenFiles(io)

    def task(i: int, files: WrittenFiles) -> tuple[int, int]:
        _create(io, files, f"f{i}")
        time.sleep(0.02)  # both lanes get some: neither can take every task before the other starts
        return i, os.getpid()

    results = run_in_lanes(12, task, io, written, lanes=2)

    assert [i for i, _ in results] == list(range(12))
    assert {pid for _, pid in results} - {os.getpid()}, "no task ran in the forked process"
    assert len({pid for _, pid in results}) == 2
    assert sorted(Path(p).name for p in written.paths) == sorted(f"f{i}" for i in range(12))
    assert _files(tmp_path) == {f"f{i}" for i in range(12)}


@pytest.mark.parametrize("count", [1, 2, 1025, 2100])
def test_any_number_of_tasks_runs_once_each(tmp_path: Path, count: int) -> None:
    """More tasks than the token pipe holds one to a token go several to a token."""
    io = LocalFileIO(str(tmp_path))
    ran = tmp_path / "ran"
    ran.mkdir()

    def task(i: int, files: WrittenFiles) -> int:
        (ran / str(i)).touch(exist_ok=False)  # a task that ran twice fails here
        return i * i

    assert run_in_lanes(count, task, io, WrittenFiles(io), lanes=2) == [i * i for i in range(count)]
    assert len(list(ran.iterdir())) == count


def test_a_child_reaped_by_someone_elses_sigchld_handler_still_delivers(tmp_path: Path) -> None:
    """A host process (a web server, a task runner) may reap every child on SIGCHLD itself."""
    io = LocalFileIO(str(tmp_path))

    def reap_all(signum: int, frame: object) -> None:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass

    def task(i: int, files: WrittenFiles) -> int:
        time.sleep(0.02)
        return i

    previous = signal.signal(signal.SIGCHLD, reap_all)
    try:
        assert run_in_lanes(6, task, io, WrittenFiles(io), lanes=2) == list(range(6))
    finally:
        signal.signal(signal.SIGCHLD, previous)


def test_a_childs_engine_error_is_raised_as_its_class_and_every_file_is_removed(tmp_path: Path) -> None:
    io = LocalFileIO(str(tmp_path))
    written = WrittenFiles(io)
    parent = os.getpid()

    def task(i: int, files: WrittenFiles) -> int:
        _create(io, files, f"f{i}")
        time.sleep(0.02)
        if os.getpid() != parent:
            raise CorruptDataFileError(f"part-{i}.parquet", "not a parquet file")
        return i

    with pytest.raises(CorruptDataFileError, match=r"part-\d+\.parquet.*not a parquet file") as raised:
        run_in_lanes(8, task, io, written, lanes=2)
    assert raised.value.retryable is False
    assert _files(tmp_path) == set()  # the parent's files and the child's
    assert written.paths == ()


def test_a_killed_child_fails_the_run_retryably_and_its_files_are_removed(tmp_path: Path) -> None:
    io = LocalFileIO(str(tmp_path))
    written = WrittenFiles(io)
    parent = os.getpid()

    def task(i: int, files: WrittenFiles) -> int:
        _create(io, files, f"f{i}")
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would
        time.sleep(0.02)
        return i

    with pytest.raises(RewriteProcessError, match=r"killed by signal 9 .*\(task \d+\).*max_file_size") as raised:
        run_in_lanes(6, task, io, written, lanes=2)
    assert raised.value.retryable is True
    assert _files(tmp_path) == set()


def test_a_failure_in_the_parent_kills_the_child_and_removes_its_files(tmp_path: Path) -> None:
    io = LocalFileIO(str(tmp_path))
    written = WrittenFiles(io)
    parent = os.getpid()
    child_pid = tmp_path.parent / f"{tmp_path.name}.child"

    def task(i: int, files: WrittenFiles) -> int:
        _create(io, files, f"f{i}")
        if os.getpid() != parent:
            child_pid.write_text(str(os.getpid()))
            time.sleep(60)  # killed long before
        while not child_pid.exists():
            time.sleep(0.01)
        raise ValueError("the parent's bin failed")

    with pytest.raises(ValueError, match="the parent's bin failed"):
        run_in_lanes(4, task, io, written, lanes=2)
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(int(child_pid.read_text()), 0)
    assert _files(tmp_path) == set()


def test_the_childs_log_records_reach_the_parents_handlers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    io = LocalFileIO(str(tmp_path))
    parent = os.getpid()

    def task(i: int, files: WrittenFiles) -> int:
        if os.getpid() != parent:
            logging.getLogger("airflow_delta.test_lanes").warning("task %d ran in pid %d", i, os.getpid())
        time.sleep(0.02)
        return i

    with caplog.at_level(logging.WARNING, logger="airflow_delta.test_lanes"):
        run_in_lanes(6, task, io, WrittenFiles(io), lanes=2)
    forwarded = [r for r in caplog.records if r.name == "airflow_delta.test_lanes"]
    assert forwarded and all(r.levelno == logging.WARNING for r in forwarded)
    assert all(r.getMessage().startswith("task ") and f"pid {parent}" not in r.getMessage() for r in forwarded)


def test_a_child_dies_with_its_parent(tmp_path: Path) -> None:
    """Killing the task's process (SIGKILL: no handler runs) leaves no rewrite process behind."""
    child_pid = tmp_path / "child.pid"
    script = textwrap.dedent(
        f"""
        import os, time
        from pathlib import Path
        from airflow_delta.engine import LocalFileIO
        from airflow_delta.engine.operations.forked_lanes import run_in_lanes
        from airflow_delta.engine.storage.written_files import WrittenFiles
        io = LocalFileIO({str(tmp_path)!r})
        parent = os.getpid()
        def task(i, files):
            if os.getpid() != parent:
                Path({str(child_pid)!r}).write_text(str(os.getpid()))
            time.sleep(60)
        run_in_lanes(2, task, io, WrittenFiles(io), lanes=2)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while not child_pid.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert child_pid.exists(), "the forked lane never started"
        pid = int(child_pid.read_text())
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(pid), f"the forked lane {pid} outlived its parent"
    finally:
        proc.kill()
        proc.wait()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for init to reap it has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_lanes_are_for_local_storage_on_linux(tmp_path: Path) -> None:
    assert lanes_possible(LocalFileIO(str(tmp_path)))

    class OtherIO(LocalFileIO):  # any other FileIO (an object store's client does not survive fork)
        pass

    assert not lanes_possible(OtherIO(str(tmp_path)))


# ------------------------------------------------------------------ OPTIMIZE through forked lanes


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """OPTIMIZE forks for any bin count, and the forks it makes are counted (os.fork runs as ever)."""
    monkeypatch.setattr(optimize, "_FORK_MIN_FILES", 1)
    monkeypatch.setattr(optimize, "_cores", lambda: 2)
    made: list[int] = []
    real_fork = os.fork

    def counted_fork() -> int:
        pid = real_fork()
        if pid:
            made.append(pid)
        return pid

    monkeypatch.setattr(forked_lanes.os, "fork", counted_fork)
    return made


@pytest.mark.parametrize("properties", [None, DV, {"delta.enableRowTracking": "true"}, {"delta.columnMapping.mode": "name"}])
def test_optimize_in_forked_lanes_commits_what_the_threads_commit(
    tmp_path: Path, forks: list[int], monkeypatch: pytest.MonkeyPatch, properties: dict[str, str] | None
) -> None:
    paths = {mode: str(tmp_path / mode) for mode in ("forked", "threads")}
    tables = {
        mode: small_files_table(path, files_per_partition=3, partitions=("a", "b"), properties=properties)
        for mode, path in paths.items()
    }
    if properties == DV:
        for t in tables.values():
            t.delete("id % 3 = 0")
    before = read_with_deltars(paths["forked"])

    forked = tables["forked"].optimize(OptimizeOptions(max_deleted_rows_ratio=0))
    assert len(forks) == 1
    monkeypatch.setattr(forked_lanes, "lanes_possible", lambda io: False)
    threaded = tables["threads"].optimize(OptimizeOptions(max_deleted_rows_ratio=0))
    assert len(forks) == 1

    assert_oracles_read(paths["forked"], before)
    assert {k: v for k, v in forked.metrics.items() if not k.endswith("TimeMs") and k != "filesAdded"} == {
        k: v for k, v in threaded.metrics.items() if not k.endswith("TimeMs") and k != "filesAdded"
    }
    adds = {}
    for mode, t in tables.items():
        actions = commit_actions(paths[mode], t.version())
        adds[mode] = sorted(
            (
                tuple(a["add"]["partitionValues"].values()),  # physical names differ with column mapping
                a["add"]["dataChange"],
                sorted(a["add"]),
                a["add"].get("baseRowId"),
            )
            for a in actions
            if "add" in a
        )
        assert data_files_on_disk(paths[mode]) >= {p for p in live_paths(t)}
    assert adds["forked"] == adds["threads"] and len(adds["forked"]) == 2  # one file a partition, alike
    if properties and "delta.enableRowTracking" in properties:
        # Each row keeps its stable row ID and commit version through either rewrite.
        tracked = {mode: _ids_and_row_ids(t) for mode, t in tables.items()}
        assert tracked["forked"] == tracked["threads"] and len(tracked["forked"]) == len(before)


def _ids_and_row_ids(t: DeltaTable) -> list[tuple[int, ...]]:
    snapshot = t.snapshot()
    data = read_data(snapshot, snapshot.files(), row_tracking=True)
    return sorted(zip(*(data.column(i).to_pylist() for i in (0, data.num_columns - 2, data.num_columns - 1)), strict=True))


def test_a_bin_that_fails_in_a_forked_lane_commits_nothing_and_leaves_no_file(tmp_path: Path, forks: list[int]) -> None:
    path = str(tmp_path / "t")
    t = small_files_table(path, files_per_partition=3, partitions=("a", "b", "c"))
    start = t.version()
    live = live_paths(t)
    os.remove(Path(path) / sorted(t.snapshot().files("p = 'c'").column("path").to_pylist())[0])
    on_disk = data_files_on_disk(path)

    with pytest.raises(DataFileNotFoundError, match="does not exist"):
        t.optimize()

    assert len(forks) == 1
    assert t.version() == start and live_paths(t) == live
    assert data_files_on_disk(path) == on_disk  # nothing either lane wrote is left


def test_optimize_forks_beside_other_threads(tmp_path: Path, forks: list[int], caplog: pytest.LogCaptureFixture) -> None:
    """An Airflow task runs beside threads of its own (the supervisor's channel): lanes still fork."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        path = str(tmp_path / "t")
        t = small_files_table(path, files_per_partition=3, partitions=("a", "b"))
        before = read_with_deltars(path)
        with caplog.at_level(logging.INFO, logger="airflow_delta.engine.operations.optimize"):
            t.optimize()
    finally:
        stop.set()
        other.join()
    assert len(forks) == 1
    assert "rewrote 2 bins of 6 files in 2 processes (this one and 1 forked from it)" in caplog.messages
    assert_oracles_read(path, before)
