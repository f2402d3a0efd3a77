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


@pytest.mark.parametrize("write", ["atomic_output", "write_bytes"])
def test_a_vanished_temporary_file_is_a_typed_error_and_publishes_nothing(tmp_path: Path, write: str) -> None:
    from airflow_delta.engine.errors import AtomicWriteError

    class VanishingIO(LocalFileIO):
        """Another process deletes the temporary file just before it is renamed into place."""

        def atomic_output(self, path: str):  # type: ignore[no-untyped-def,override]
            inner = super().atomic_output(path)

            class Wrapped:
                def __enter__(self):  # type: ignore[no-untyped-def]
                    self.out = inner.__enter__()
                    return self.out

                def __exit__(self, *exc):  # type: ignore[no-untyped-def]
                    os.remove(self.out.name)
                    return inner.__exit__(*exc)

            return Wrapped()

    io = VanishingIO()
    target = str(tmp_path / "_delta_log" / "_last_checkpoint")
    with pytest.raises(AtomicWriteError, match="_last_checkpoint") as caught:
        if write == "write_bytes":
            io.write_bytes(target, b"{}")
        else:
            with io.atomic_output(target) as out:
                out.write(b"{}")
    assert caught.value.retryable is True and "nothing was written" in str(caught.value)
    assert os.listdir(tmp_path / "_delta_log") == []


def test_atomic_output_removes_its_temporary_file_on_failure(tmp_path: Path) -> None:
    target = str(tmp_path / "f")
    with pytest.raises(RuntimeError), LocalFileIO().atomic_output(target) as out:
        out.write(b"x")
        raise RuntimeError("writer failed")
    assert os.listdir(tmp_path) == []
