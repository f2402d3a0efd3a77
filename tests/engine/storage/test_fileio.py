from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import CommitNotSupportedError, InvalidPathError, PathOutsideTableError
from airflow_delta.engine.storage.fileio import FileIO, LocalFileIO, resolve_table_uri
from airflow_delta.engine.storage.location import TableLocation


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


@pytest.mark.parametrize("form", ["file:{}", "file://{}", "file://localhost{}", "FILE:{}"])
def test_every_local_file_uri_form_names_the_path_not_a_directory_under_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    monkeypatch.chdir(tmp_path)
    _, root = resolve_table_uri(form.format(tmp_path / "t"))
    assert root == str(tmp_path / "t")  # one slash is Hadoop's form, the one symlink manifests hold


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("/data/x\x00y", "without NUL bytes"),
        ("file:/data/x\x00y", "without NUL bytes"),
        ("file://otherhost/data/t", "not of another host"),
        ("file:data/t", "absolute file: URI"),
    ],
)
def test_table_uris_no_store_can_name_are_typed_errors(uri: str, expected: str) -> None:
    from airflow_delta.engine import DeltaTable, InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=expected):
        DeltaTable(uri)


# ------------------------------------------------ confinement to the table's real root


@pytest.fixture
def confined(tmp_path: Path) -> tuple[LocalFileIO, Path, Path]:
    """(FileIO confined to ``table``, ``table``, ``outside``) with ``outside/secret`` and a link ``table/out``."""
    table, outside = tmp_path / "table", tmp_path / "outside"
    (table / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    os.symlink(outside, table / "out")
    os.symlink(outside / "secret", table / "sub" / "secret-link")
    (table / "sub" / "mine").write_bytes(b"mine")
    io, _root = resolve_table_uri(str(table))
    assert isinstance(io, LocalFileIO)
    return io, table, outside


def _outside_state(outside: Path) -> list[tuple[str, int, bytes]]:
    entries = sorted((p.name, p.lstat().st_mtime_ns, p.read_bytes()) for p in outside.iterdir())
    return [*entries, ("", outside.lstat().st_mtime_ns, b"")]


def test_every_operation_refuses_a_linked_directory_leading_out(confined: tuple[LocalFileIO, Path, Path]) -> None:
    io, table, outside = confined
    before = _outside_state(outside)
    target = str(table / "out" / "secret")
    operations = {
        "open_input_file": lambda: io.open_input_file(target),
        "read_bytes": lambda: io.read_bytes(target),
        "read_range": lambda: io.read_range(target, 0, 2),
        "read_small_file": lambda: io.read_small_file(target, 100),
        "info": lambda: io.info(target),
        "exists": lambda: io.exists(target),
        "list_dir": lambda: io.list_dir(str(table / "out")),
        "walk": lambda: list(io.walk(str(table / "out"))),
        "write_bytes": lambda: io.write_bytes(str(table / "out" / "new"), b"x"),
        "put_if_absent": lambda: io.put_if_absent(str(table / "out" / "new.json"), b"x"),
        "open_output_stream": lambda: io.open_output_stream(str(table / "out" / "new.parquet")),
        "mkdirs": lambda: io.mkdirs(str(table / "out" / "d")),
        "delete": lambda: io.delete(target),
        "below a linked directory": lambda: io.write_bytes(str(table / "out" / "a" / "b"), b"x"),
    }
    for name, operation in operations.items():
        with pytest.raises(PathOutsideTableError, match="symbolic link leads out"):
            operation()
        assert _outside_state(outside) == before, name


def test_paths_not_below_the_root_are_refused_before_any_syscall(confined: tuple[LocalFileIO, Path, Path]) -> None:
    io, table, outside = confined
    for path in (str(outside / "secret"), str(table) + "-other/x", str(table / ".." / "outside" / "secret")):
        with pytest.raises(PathOutsideTableError):
            io.read_bytes(path)
        with pytest.raises(PathOutsideTableError):
            io.delete(path)
    assert (outside / "secret").read_bytes() == b"secret"


def test_a_file_link_is_read_only_if_it_stays_inside_and_never_written_through(
    confined: tuple[LocalFileIO, Path, Path],
) -> None:
    io, table, outside = confined
    link = str(table / "sub" / "secret-link")
    with pytest.raises(PathOutsideTableError, match="real location"):
        io.read_bytes(link)
    os.symlink(table / "sub" / "mine", table / "sub" / "inside-link")
    assert io.read_bytes(str(table / "sub" / "inside-link")) == b"mine"  # a link within the table is fine
    # The whole-file read never goes through a link: it leaves links to the checked open above.
    assert io.read_small_file(link, 100) is None
    assert io.read_small_file(str(table / "sub" / "inside-link"), 100) is None
    assert io.read_small_file(str(table / "sub" / "mine"), 4) == b"mine"
    assert io.read_small_file(str(table / "sub" / "mine"), 100) == b"mine"  # a log that says more
    assert io.read_small_file(str(table / "sub" / "mine"), 3) is None  # a file larger than the log says
    with pytest.raises(PathOutsideTableError, match="real location"):
        io.open_output_stream(link)  # a link leading out
    with pytest.raises(InvalidPathError, match="never writes through"):
        io.open_output_stream(str(table / "sub" / "inside-link"))  # a link within the table
    assert io.put_if_absent(link, b"x") is False  # the name is taken (by the link), nothing written
    io.write_bytes(link, b"replaced")  # the link itself is replaced by a file, its target untouched
    assert not os.path.islink(link) and Path(link).read_bytes() == b"replaced"
    assert (outside / "secret").read_bytes() == b"secret"


def test_delete_removes_a_link_never_its_target(confined: tuple[LocalFileIO, Path, Path]) -> None:
    io, table, outside = confined
    io.delete(str(table / "sub" / "secret-link"))
    io.delete(str(table / "out"))  # a link to a directory is a name in the table: removed, not followed
    assert not os.path.lexists(table / "sub" / "secret-link") and not os.path.lexists(table / "out")
    assert (outside / "secret").read_bytes() == b"secret"


def test_a_directory_swapped_for_a_link_after_a_check_is_still_refused_by_writes_and_deletes(
    confined: tuple[LocalFileIO, Path, Path],
) -> None:
    # Writes and deletes check the directory they actually opened, not a cached answer.
    io, table, outside = confined
    assert io.read_bytes(str(table / "sub" / "mine")) == b"mine"  # "sub" checked (and cached) as inside
    os.rename(table / "sub", table / "sub-moved")
    os.symlink(outside, table / "sub")  # now "sub" leads out
    (outside / "mine").write_bytes(b"outside copy")
    for operation in (lambda: io.write_bytes(str(table / "sub" / "new"), b"x"),
                      lambda: io.put_if_absent(str(table / "sub" / "new.json"), b"x"),
                      lambda: io.delete(str(table / "sub" / "mine"))):
        with pytest.raises(PathOutsideTableError):
            operation()
    assert sorted(p.name for p in outside.iterdir()) == ["mine", "secret"]
    # a fresh FileIO (every DeltaTable gets one) refuses the read too
    fresh, _root = resolve_table_uri(str(table))
    with pytest.raises(PathOutsideTableError):
        fresh.read_bytes(str(table / "sub" / "mine"))


def test_walk_does_not_follow_links(confined: tuple[LocalFileIO, Path, Path]) -> None:
    io, table, _outside = confined
    assert sorted(os.path.relpath(f.path, table) for f in io.walk(str(table))) == ["sub/mine"]


def test_the_root_may_be_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    io = LocalFileIO(str(tmp_path / "link"))
    io.write_bytes(str(tmp_path / "link" / "a" / "b.json"), b"x")
    assert io.put_if_absent(str(tmp_path / "link" / "a" / "c.json"), b"y") is True
    assert io.read_bytes(str(tmp_path / "link" / "a" / "b.json")) == b"x"
    assert io.read_bytes(str(real / "a" / "c.json")) == b"y"  # the real form of the root is inside too
    io.delete(str(tmp_path / "link" / "a" / "b.json"))
    assert sorted(os.listdir(real / "a")) == ["c.json"]  # no temp files left behind
    assert io.is_dir(str(tmp_path / "link")) and io.exists(str(tmp_path / "link"))


def test_a_table_location_confines_a_local_fileio_it_is_handed(tmp_path: Path) -> None:
    unconfined = LocalFileIO()
    location = TableLocation(unconfined, str(tmp_path / "t"), str(tmp_path / "t"))
    assert location.io is unconfined and unconfined.table_root == str(tmp_path / "t")
    other = TableLocation(unconfined, str(tmp_path / "u"), str(tmp_path / "u"))
    assert other.io is not unconfined and isinstance(other.io, LocalFileIO)
    assert other.io.table_root == str(tmp_path / "u") and unconfined.table_root == str(tmp_path / "t")
    with pytest.raises(PathOutsideTableError):
        location.io.read_bytes(str(tmp_path / "u" / "x"))


# Trees with links planted anywhere: names a/b/c, each either a real directory, a link to a
# directory outside, a link to another place inside, or a link to a file outside.
_NAMES = st.sampled_from(["a", "b", "c"])
_KINDS = st.sampled_from(["dir", "link-out", "link-in", "file-link-out", "missing"])


@settings(max_examples=60)
@given(
    layout=st.lists(st.tuples(_NAMES, _KINDS), min_size=1, max_size=3),
    target=st.lists(_NAMES, min_size=1, max_size=3),
    operation=st.sampled_from(["read", "read_small", "info", "list", "write", "put", "stream", "delete"]),
)
def test_no_operation_ever_touches_outside_whatever_the_links(
    layout: list[tuple[str, str]], target: list[str], operation: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        table, outside = Path(tmp, "table"), Path(tmp, "outside")
        (outside / "d").mkdir(parents=True)
        (outside / "d" / "a").write_bytes(b"outside")
        (outside / "f").write_bytes(b"outside file")
        table.mkdir()
        (table / "inner").mkdir()
        (table / "inner" / "a").write_bytes(b"inside")
        # Build the chain table/n1/n2/...: each level as the layout says.
        current = table
        for name, kind in layout:
            node = current / name
            if os.path.lexists(node):
                break
            if kind == "dir":
                node.mkdir()
            elif kind == "link-out":
                os.symlink(outside / "d", node)
            elif kind == "link-in":
                os.symlink(table / "inner", node)
            elif kind == "file-link-out":
                os.symlink(outside / "f", node)
            if kind != "dir":
                break
            current = node
        before = _outside_tree(outside)
        path = str(table.joinpath(*target))
        real = os.path.realpath(path)
        real_parent = os.path.realpath(os.path.dirname(path))
        inside = real.startswith(str(table) + "/")
        parent_inside = real_parent == str(table) or real_parent.startswith(str(table) + "/")
        io, _root = resolve_table_uri(str(table))
        calls = {
            "read": lambda: io.read_bytes(path),
            # As the scan reads a small data file: whole at once, or (a link) through the checked open.
            "read_small": lambda: io.read_small_file(path, 1 << 10) or io.read_bytes(path),
            "info": lambda: io.info(path),
            "list": lambda: io.list_dir(path),
            "write": lambda: io.write_bytes(path, b"new"),
            "put": lambda: io.put_if_absent(path, b"new"),
            "stream": lambda: io.open_output_stream(path).close(),
            "delete": lambda: io.delete(path),
        }
        try:
            calls[operation]()
            refused = False
        except PathOutsideTableError:
            refused = True
        except (OSError, InvalidPathError):
            refused = False  # missing, a directory, a link written through: other errors, nothing touched
        # Whatever happened, nothing outside changed.
        assert _outside_tree(outside) == before
        # A refusal is never spurious: what was refused really leads out.
        if refused:
            assert not parent_inside or not inside
        # What leads out is refused (reads look at the file itself; writes and deletes at its directory).
        if operation in ("read", "read_small") and not inside and os.path.exists(path):
            assert refused
        if operation in ("write", "put", "stream", "delete") and not parent_inside:
            assert refused


def _outside_tree(outside: Path) -> list[tuple[str, int, bytes]]:
    return [(str(p.relative_to(outside)), p.lstat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
            for p in sorted([outside, *outside.rglob("*")])]


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
                    directory = os.path.dirname(path)
                    for name in os.listdir(directory):  # the hidden temporary file beside the target
                        if name.startswith(".") and name.endswith(".tmp"):
                            os.remove(os.path.join(directory, name))
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
# ------------------------------------------------ symbolic-link loops: a typed error, never an OSError

_LOOP_OPERATIONS = {
    "read": lambda io, path: io.read_bytes(path),
    "read_small": lambda io, path: io.read_small_file(path, 10) or io.read_bytes(path),
    "info": lambda io, path: io.info(path),
    "exists": lambda io, path: io.exists(path),
    "is_dir": lambda io, path: io.is_dir(path),
    "list": lambda io, path: io.list_dir(path),
    "walk": lambda io, path: list(io.walk(path)),
    "write": lambda io, path: io.write_bytes(path, b"x"),
    "put": lambda io, path: io.put_if_absent(path, b"x"),
    "stream": lambda io, path: io.open_output_stream(path).close(),
    "mkdirs": lambda io, path: io.mkdirs(path),
    "delete": lambda io, path: io.delete(path),
    "check_inside": lambda io, path: io.check_inside([path]),
}


@pytest.mark.parametrize("operation", sorted(_LOOP_OPERATIONS))
@pytest.mark.parametrize(
    "layout",
    ["self-loop", "two-link-loop", "root-loop"],
)
def test_a_symbolic_link_loop_on_the_way_is_a_typed_error(tmp_path: Path, operation: str, layout: str) -> None:
    """A loop of links in a directory of the path (ELOOP) is an InvalidPathError, whatever the operation."""
    table = tmp_path / "table"
    if layout == "root-loop":
        os.symlink("table", table)  # the root itself loops: nothing below it can be reached
        path = str(table / "_delta_log" / "00000000000000000000.json")
    else:
        table.mkdir()
        if layout == "self-loop":
            os.symlink("p=a", table / "p=a")
        else:
            os.symlink("y", table / "p=a")
            os.symlink("p=a", table / "y")
        path = str(table / "p=a" / "part-0.parquet")
    io, _root = resolve_table_uri(str(table))
    with pytest.raises(InvalidPathError, match="loop of symbolic links"):
        _LOOP_OPERATIONS[operation](io, path if operation not in ("list", "walk") else os.path.dirname(path))


@pytest.mark.parametrize("operation", ["read", "read_small", "check_inside"])
def test_a_file_that_is_a_link_loop_is_a_typed_error_when_read(tmp_path: Path, operation: str) -> None:
    table = tmp_path / "table"
    table.mkdir()
    os.symlink("x.parquet", table / "x.parquet")
    io, _root = resolve_table_uri(str(table))
    with pytest.raises(InvalidPathError, match="loop of symbolic links"):
        _LOOP_OPERATIONS[operation](io, str(table / "x.parquet"))
    io.delete(str(table / "x.parquet"))  # deleting removes the link itself, loop or not
    assert not os.path.lexists(table / "x.parquet")


def test_a_directory_removed_while_it_is_listed_lists_as_empty(tmp_path: Path) -> None:
    # pyarrow's allow_not_found covers a directory missing before the listing, not one a
    # concurrent writer's cleanup removes during it (seen with racing table creates).
    class Vanishing(pafs.LocalFileSystem):
        def get_file_info(self, selector):  # type: ignore[no-untyped-def,override]
            raise FileNotFoundError(f"Cannot list directory '{selector.base_dir}'")

    io = FileIO(Vanishing())
    (tmp_path / "_delta_log").mkdir()
    assert io.list_dir(str(tmp_path / "_delta_log")) == []
