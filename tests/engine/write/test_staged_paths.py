"""A path that a reader would refuse never reaches the log: it is refused when it is staged."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.errors import DeltaError, InvalidPathError, PathOutsideTableError
from airflow_delta.engine.model.actions import AddCDCFile, AddFile, DeletionVectorDescriptor, RemoveFile
from airflow_delta.engine.model.z85 import encode_uuid
from airflow_delta.engine.storage.paths import URI_SCHEME
from tests.engine.storage.test_paths import HOSTILE_PATHS
from tests.engine.write.transaction_helpers import FLAT_SCHEMA, data_files, flat_rows

# Hostile paths as a table would meet them: relative to its real root, absolute ones rebased.
_ROOT_IN_TABLE = "/data/table"


def _hostile(root: str) -> list[tuple[str, type[DeltaError]]]:
    return [(p.replace(_ROOT_IN_TABLE, root), e) for p, e in HOSTILE_PATHS]


@pytest.fixture
def table(table_path: str) -> DeltaTable:
    t = DeltaTable.create(table_path, FLAT_SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    t.append(flat_rows([1, 2, 3]))
    return t


def _log_state(table: DeltaTable) -> dict[str, bytes]:
    log = Path(table.root, "_delta_log")
    return {p.name: p.read_bytes() for p in log.iterdir() if p.is_file()}


def _add(path: str, dv: DeletionVectorDescriptor | None = None) -> AddFile:
    return AddFile(path=path, partition_values={}, size=1, modification_time=1, deletion_vector=dv)


def test_every_hostile_path_is_refused_by_every_staging_call(table: DeltaTable) -> None:
    before = _log_state(table)
    for path, error in _hostile(table.root):
        txn = table.transaction()
        stagers = {
            "add": lambda p=path, t=txn: t.add(_add(p)),
            "add_files": lambda p=path, t=txn: t.add_files([_add("ok.parquet"), _add(p)]),
            "remove": lambda p=path, t=txn: t.remove(RemoveFile(path=p, deletion_timestamp=1)),
            "add_cdc": lambda p=path, t=txn: t.add_cdc(AddCDCFile(path=p, partition_values={}, size=1)),
        }
        if path.startswith("/") or re.match(URI_SCHEME, path):  # a 'p' DV path is absolute
            stagers["p deletion vector"] = lambda p=path, t=txn: t.add(
                _add("ok.parquet", DeletionVectorDescriptor("p", p, 10, 1, 1)))
        for name, stage in stagers.items():
            with pytest.raises(error) as raised:
                stage()
            assert repr(path)[1:-1] in str(raised.value) or name == "p deletion vector", name
    # nothing was staged, so nothing could be committed: the log is untouched and readable
    assert _log_state(table) == before
    assert table.snapshot().to_arrow().num_rows == 3


def test_a_u_deletion_vector_prefix_cannot_leave_the_root(table: DeltaTable) -> None:
    txn = table.transaction()
    for prefix in ("../", "../../x/", "a/../../"):
        dv = DeletionVectorDescriptor("u", prefix + encode_uuid(uuid.uuid4()), 10, 1, 1)
        with pytest.raises(PathOutsideTableError, match="deletion vector of a staged add"):
            txn.add(_add("ok.parquet", dv))


def test_the_issue_example_no_longer_breaks_the_table(table: DeltaTable) -> None:
    txn = table.transaction()
    with pytest.raises(PathOutsideTableError, match=r"'\.\./\.\./x'"):
        txn.add(_add("../../x"))
    txn.add_files(data_files(txn, flat_rows([4])))  # the transaction stays usable
    assert txn.commit("WRITE") == 2
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [1, 2, 3, 4]


def test_good_paths_still_stage_and_read(table: DeltaTable) -> None:
    txn = table.transaction()
    # a name needing escapes, and an absolute file: URI inside the root, as Spark may write them
    adds = data_files(txn, flat_rows([7]))
    src = Path(table.root, adds[0].path)
    os.rename(src, Path(table.root, "a b%c.parquet"))
    txn.add(AddFile(path="a%20b%25c.parquet", partition_values={}, size=adds[0].size,
                    modification_time=adds[0].modification_time, stats=adds[0].stats))
    assert txn.commit("WRITE") == 2
    assert "a b%c.parquet" in table.snapshot().files().column("path").to_pylist()
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [1, 2, 3, 7]


@pytest.mark.parametrize(("log_path", "error"), HOSTILE_PATHS)
def test_hostile_paths_in_the_log_are_refused_with_typed_errors(table_path: str, log_path: str,
                                                               error: type[DeltaError]) -> None:
    """A log written by someone else: files() and to_arrow() refuse the path, never touch it."""
    t = DeltaTable.create(table_path, FLAT_SCHEMA)
    log_path = log_path.replace(_ROOT_IN_TABLE, table_path)
    line = {"add": {"path": log_path, "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": True}}
    Path(table_path, "_delta_log", f"{1:020d}.json").write_text(json.dumps(line) + "\n")
    snapshot = t.snapshot()
    with pytest.raises(error):
        snapshot.files()
    with pytest.raises(error):
        snapshot.to_arrow()


def test_staging_validates_many_paths_at_once(table: DeltaTable) -> None:
    txn = table.transaction()
    good = [_add(f"p=a/part-{i:05d}.parquet") for i in range(10_000)]
    txn.add_files(good)  # one vectorised match, no per-path Python work for plain names
    with pytest.raises(InvalidPathError, match="in a staged add action"):
        txn.add_files([*good[:10], _add("bad%zz")])
    assert pa.array([a.path for a in good]).null_count == 0


def test_a_staged_path_through_a_link_leading_out_is_refused(table: DeltaTable, tmp_path: Path) -> None:
    """Lexically inside, physically outside: a reader would refuse it, so staging does."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.parquet").write_bytes(b"PAR1")
    os.symlink(outside, Path(table.root, "linked"))
    os.symlink(outside / "x.parquet", Path(table.root, "file-link.parquet"))
    txn = table.transaction()
    for path in ("linked/x.parquet", "file-link.parquet"):
        with pytest.raises(PathOutsideTableError, match="symbolic link leads out"):
            txn.add(_add(path))
    with pytest.raises(PathOutsideTableError, match="symbolic link leads out"):
        txn.add(_add("ok.parquet", DeletionVectorDescriptor("p", f"file://{table.root}/linked/dv.bin", 10, 1, 1)))
    txn.add(_add("p=a/not-written-yet.parquet"))  # a file not there (yet) is the reader's to report


@pytest.mark.parametrize("path", ["loop/x.parquet", "pair/x.parquet", "self-file.parquet", "a/loop/b/x.parquet"])
def test_a_staged_path_through_a_loop_of_links_never_reaches_the_log(table: DeltaTable, path: str) -> None:
    """A directory (or the file) that is a loop of links: every read would fail, so staging refuses it, typed."""
    root = Path(table.root)
    os.symlink("loop", root / "loop")
    os.symlink("pair-b", root / "pair")
    os.symlink("pair", root / "pair-b")
    os.symlink("self-file.parquet", root / "self-file.parquet")
    (root / "a").mkdir()
    os.symlink("../loop", root / "a" / "loop")
    before = _log_state(table)
    txn = table.transaction()
    with pytest.raises(InvalidPathError, match="loop of symbolic links"):
        txn.add(_add(path))
    with pytest.raises(InvalidPathError, match="loop of symbolic links"):
        txn.add(_add("ok.parquet", DeletionVectorDescriptor("p", f"file://{table.root}/{path}", 10, 1, 1)))
    assert _log_state(table) == before
    assert DeltaTable(table.root).snapshot().to_arrow().num_rows == 3
