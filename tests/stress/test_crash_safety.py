"""A writer killed at any point of a commit leaves a readable table and no half-visible commit.

Writers run as real subprocesses and die by SIGKILL: either at a chosen point of the
commit (through a FileIO that kills its own process there: before the commit file is
written, halfway through writing it, after writing it but before it is linked into
place, and after it is in place but before the post-commit hook), or at a random
moment while committing in a loop. After each death the table must load, its versions
must be contiguous, every commit file must be complete, and the next writer must
commit at the next version. (Crash tests of checkpoint writing belong to the checkpoint tests.)
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
REPO = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import os, signal, sys, uuid
    sys.path.insert(0, {repo!r})
    import pyarrow as pa
    from airflow_delta.engine import DeltaTable
    from airflow_delta.engine.storage.fileio import LocalFileIO

    root, kill_at, first_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    class DyingIO(LocalFileIO):
        def put_if_absent(self, path, data):
            if not path.endswith(".json"):
                return super().put_if_absent(path, data)
            if kill_at == "before-write":
                die()
            if kill_at in ("mid-write", "before-link"):
                # What LocalFileIO.put_if_absent does, up to the point of death.
                tmp = os.path.join(os.path.dirname(path), f".{{os.path.basename(path)}}.{{uuid.uuid4().hex}}.tmp")
                with open(tmp, "wb") as out:
                    out.write(data if kill_at == "before-link" else data[: len(data) // 2])
                    out.flush()
                    os.fsync(out.fileno())
                die()
            written = super().put_if_absent(path, data)
            if kill_at == "after-link":
                die()
            return written

    table = DeltaTable(root, io=DyingIO() if kill_at != "none" else None)
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    print("ready", flush=True)
    for i in range(count):
        ids = [first_id + i]
        table.append(pa.table({{"id": ids, "p": ["x"]}}, schema=schema))
        print("committed", first_id + i, flush=True)
    """
).format(repo=str(REPO))


def _run_writer(script: Path, root: str, kill_at: str, first_id: int, count: int = 1) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), root, kill_at, str(first_id), str(count)],
        capture_output=True, text=True, timeout=300, check=False,
    )


def _assert_consistent(root: str) -> tuple[int, list[int]]:
    """The table loads, versions are contiguous, every commit file is complete JSON with commitInfo first."""
    log_dir = Path(root, "_delta_log")
    versions = sorted(int(f.name.split(".")[0]) for f in log_dir.glob("*.json"))
    assert versions == list(range(len(versions))), f"versions not contiguous: {versions}"
    for v in versions:
        text = (log_dir / f"{v:020d}.json").read_text()
        assert text.endswith("\n"), f"commit {v} is truncated"
        lines = [json.loads(line) for line in text.splitlines()]
        assert "commitInfo" in lines[0]
    table = DeltaTable(root)
    snapshot = table.snapshot()
    assert snapshot.version == versions[-1]
    ids = sorted(snapshot.to_arrow(columns=["id"]).column("id").to_pylist())
    return snapshot.version, ids


@pytest.fixture
def writer_script(tmp_path: Path) -> Path:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    return script


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kill_at", "lands"),
    [("before-write", False), ("mid-write", False), ("before-link", False), ("after-link", True)],
)
def test_writer_killed_at_each_point_of_a_commit(table_path: str, writer_script: Path, kill_at: str, lands: bool) -> None:
    DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    version_before, ids_before = _assert_consistent(table_path)

    result = _run_writer(writer_script, table_path, kill_at, first_id=100)
    assert result.returncode == -signal.SIGKILL, result.stderr

    version, ids = _assert_consistent(table_path)
    if lands:
        assert (version, ids) == (version_before + 1, [*ids_before, 100])
    else:
        assert (version, ids) == (version_before, ids_before)
    leftovers = [f.name for f in Path(table_path, "_delta_log").iterdir() if f.name.endswith(".tmp")]
    assert bool(leftovers) == (kill_at in ("mid-write", "before-link"))  # hidden, and ignored by readers

    # The next writer commits at the next version, over whatever the dead one left behind.
    result = _run_writer(writer_script, table_path, "none", first_id=200)
    assert result.returncode == 0, result.stderr
    assert _assert_consistent(table_path) == (version + 1, sorted([*ids, 200]))


@pytest.mark.slow
def test_writers_killed_at_random_moments(table_path: str, writer_script: Path) -> None:
    DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    rng = random.Random(7)
    committed: list[int] = []
    for round_ in range(3):
        first_id = (round_ + 1) * 1000
        proc = subprocess.Popen(
            [sys.executable, str(writer_script), table_path, "none", str(first_id), "1000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.6))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        reported = [int(line.split()[1]) for line in out.splitlines() if line.startswith("committed")]
        _, ids = _assert_consistent(table_path)
        # Everything reported committed is there; at most one more commit (the one in
        # flight when the kill came) may have landed without being reported.
        committed.extend(reported)
        assert set(committed) <= set(ids)
        unreported = set(ids) - set(committed)
        assert len(unreported) <= 1
        committed.extend(unreported)
    result = _run_writer(writer_script, table_path, "none", first_id=9999)
    assert result.returncode == 0, result.stderr
    assert 9999 in _assert_consistent(table_path)[1]
