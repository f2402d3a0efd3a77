from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from airflow_delta.engine.errors import CommitNotSupportedError
from airflow_delta.engine.storage.fileio import FileIO, LocalFileIO, resolve_table_uri


def test_put_if_absent_creates_then_refuses(tmp_path: Path) -> None:
    io = LocalFileIO()
    target = str(tmp_path / "_delta_log" / "00000000000000000000.json")
    assert io.put_if_absent(target, b"first\n") is True
    assert io.put_if_absent(target, b"second\n") is False
    assert Path(target).read_bytes() == b"first\n"
    # no temp files are left behind, winner or loser
    assert sorted(os.listdir(tmp_path / "_delta_log")) == ["00000000000000000000.json"]


def test_put_if_absent_has_exactly_one_winner_under_contention(tmp_path: Path) -> None:
    io = LocalFileIO()
    target = str(tmp_path / "commit.json")
    barrier = threading.Barrier(16)
    wins: list[int] = []

    def race(i: int) -> None:
        barrier.wait()
        if io.put_if_absent(target, f"writer {i}\n".encode()):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert Path(target).read_text() == f"writer {wins[0]}\n"


def test_generic_filesystem_refuses_to_commit(tmp_path: Path) -> None:
    io = FileIO(pafs.LocalFileSystem())
    with pytest.raises(CommitNotSupportedError, match="atomic create-if-absent"):
        io.put_if_absent(str(tmp_path / "x.json"), b"{}")


def test_write_bytes_replaces_atomically_and_lists(tmp_path: Path) -> None:
    io = LocalFileIO()
    path = str(tmp_path / "d" / "_last_checkpoint")
    io.write_bytes(path, b"one")
    io.write_bytes(path, b"two")
    assert io.read_bytes(path) == b"two"
    assert [f.name for f in io.list_dir(str(tmp_path / "d"))] == ["_last_checkpoint"]
    assert io.list_dir(str(tmp_path / "missing")) == []
    assert io.read_range(path, 1, 2) == b"wo"
    info = io.info(path)
    assert info is not None and info.size == 3 and info.modification_time > 0


def test_resolve_table_uri_local_forms(tmp_path: Path) -> None:
    io, root = resolve_table_uri(str(tmp_path) + "/")
    assert isinstance(io, LocalFileIO)
    assert root == str(tmp_path)
    _, root2 = resolve_table_uri(f"file://{tmp_path}")
    assert root2 == str(tmp_path)
