"""Nothing outside the table root: symbolic links inside a table that lead out of it, built for real.

Each scenario puts a directory ``outside`` beside the table, links to it from inside the
table, runs the public API, and shows the refusal (``PathOutsideTableError``) and that
``outside`` is untouched: same entries, same bytes, same modification times (its own
included, so nothing was created or deleted in it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import string
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import CorruptCommitError, DeltaTable, PathOutsideTableError
from airflow_delta.engine.operations.log_cleanup import cleanup_log
from tests.engine.checkpoint.table_helpers import copy_shared

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
DAY = 86_400_000
OLD_NS = 1_000_000_000 * 1_000_000_000  # 2001: older than any retention


def rows(part: str, ids: list[int]) -> pa.Table:
    return pa.table({"id": ids, "p": [part] * len(ids)}, schema=SCHEMA)


def tree_state(path: Path) -> dict[str, tuple[int, str]]:
    """Every entry below ``path`` (and ``path`` itself): mtime and content hash (link target for links)."""
    state: dict[str, tuple[int, str]] = {}
    for entry in [path, *sorted(path.rglob("*"))]:
        st = entry.lstat()
        if entry.is_symlink():
            what = "link:" + os.readlink(entry)
        elif entry.is_dir():
            what = "dir"
        else:
            what = hashlib.sha256(entry.read_bytes()).hexdigest()
        state[str(entry.relative_to(path))] = (st.st_mtime_ns, what)
    return state


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every table, with a file of its own, all with old modification times."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "precious.parquet").write_bytes(b"not the table's")
    os.utime(directory / "precious.parquet", ns=(OLD_NS, OLD_NS))
    os.utime(directory, ns=(OLD_NS, OLD_NS))
    return directory


def partitioned(table_path: str) -> DeltaTable:
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    table.append(rows("a", [1, 2]))
    table.append(rows("b", [3]))
    return table


def test_reads_through_a_symlinked_partition_directory_are_refused(table_path: str, outside: Path) -> None:
    partitioned(table_path)
    shutil.move(Path(table_path, "p=b"), outside / "p=b")  # the data now lives outside, reached by a link
    os.symlink(outside / "p=b", Path(table_path, "p=b"))
    before = tree_state(outside)

    snapshot = DeltaTable(table_path).snapshot()
    assert sorted(snapshot.files().column("path").to_pylist())[0].startswith("p=a/")  # listing is only names
    with pytest.raises(PathOutsideTableError, match=r"real location .*outside.*symbolic link"):
        snapshot.to_arrow()
    with pytest.raises(PathOutsideTableError):
        DeltaTable(table_path).delete("id = 3")
    assert snapshot.to_arrow(filter="p = 'a'").num_rows == 2  # what is inside still reads
    assert tree_state(outside) == before


def test_a_symlinked_data_file_is_refused(table_path: str, outside: Path) -> None:
    table = partitioned(table_path)
    (data_file,) = Path(table_path, "p=b").iterdir()
    shutil.move(data_file, outside / data_file.name)
    os.symlink(outside / data_file.name, data_file)
    before = tree_state(outside)
    with pytest.raises(PathOutsideTableError):
        table.snapshot().to_arrow()
    assert tree_state(outside) == before


def test_append_through_a_symlinked_partition_directory_is_refused(table_path: str, outside: Path) -> None:
    table = partitioned(table_path)
    os.symlink(outside, Path(table_path, "p=c"))
    before = tree_state(outside)
    with pytest.raises(PathOutsideTableError, match="p=c"):
        table.append(rows("c", [9]))
    assert tree_state(outside) == before
    assert table.version() == 2
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_delete_does_not_write_deletion_vectors_into_a_symlinked_prefix_directory(
    table_path: str, outside: Path
) -> None:
    table = DeltaTable.create(table_path, SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    table.append(rows("a", [1, 2, 3]))
    with table.transaction() as txn:  # from now on, DV files go to a random one-character directory
        txn.set_properties({"delta.randomizeFilePrefixes": "true", "delta.randomPrefixLength": "1"})
        txn.commit("SET TBLPROPERTIES")
    for char in string.ascii_letters + string.digits:  # every directory a DV could go to leads out
        os.symlink(outside, Path(table_path, char))
    before = tree_state(outside)
    with pytest.raises(PathOutsideTableError, match="deletion_vector_"):
        table.delete("id = 2", use_deletion_vectors=True)
    assert tree_state(outside) == before
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_deletion_vectors_are_not_read_through_a_symlinked_prefix_directory(table_path: str, outside: Path) -> None:
    table = DeltaTable.create(table_path, SCHEMA, properties={
        "delta.enableDeletionVectors": "true", "delta.randomizeFilePrefixes": "true", "delta.randomPrefixLength": "3"})
    table.append(rows("a", [1, 2, 3]))
    table.delete("id = 2", use_deletion_vectors=True)
    (dv_file,) = Path(table_path).rglob("deletion_vector_*.bin")
    shutil.move(dv_file.parent, outside / "dv")
    os.symlink(outside / "dv", dv_file.parent)
    before = tree_state(outside)
    with pytest.raises(PathOutsideTableError, match="deletion_vector_"):
        DeltaTable(table_path).snapshot().to_arrow()
    assert tree_state(outside) == before


def test_a_v2_checkpoint_does_not_write_sidecars_into_a_symlinked_sidecar_directory(
    table_path: str, outside: Path
) -> None:
    table = DeltaTable.create(table_path, SCHEMA, properties={"delta.checkpointPolicy": "v2"})
    table.append(rows("a", [1, 2, 3]))
    os.symlink(outside, Path(table_path, "_delta_log", "_sidecars"))
    before = tree_state(outside)
    with pytest.raises(PathOutsideTableError, match="_sidecars"):
        table.checkpoint()
    assert tree_state(outside) == before
    assert not [n for n in os.listdir(Path(table_path, "_delta_log")) if "checkpoint" in n]


def _v2_table_with_old_log(shared_tables: Path, tmp_path: Path) -> str:
    path = copy_shared(shared_tables, "checkpoint-v2-table", str(tmp_path))
    for entry in Path(path, "_delta_log").rglob("*"):
        if entry.is_file():
            os.utime(entry, ns=(OLD_NS, OLD_NS))
    return path


def test_cleanup_does_not_list_or_delete_through_a_symlinked_sidecar_directory(
    shared_tables: Path, tmp_path: Path, outside: Path
) -> None:
    path = _v2_table_with_old_log(shared_tables, tmp_path)
    table = DeltaTable(path)
    latest = table.snapshot()  # loaded before the link is planted, as a long-running cleanup would hold it
    sidecars = Path(path, "_delta_log", "_sidecars")
    shutil.move(sidecars, outside / "sidecars")  # unreferenced-looking, old files, reached by a link
    os.symlink(outside / "sidecars", sidecars)
    before = tree_state(outside)
    with pytest.raises(PathOutsideTableError, match="_sidecars"):
        DeltaTable(path).snapshot().files()  # readers refuse the sidecars too
    # Refused: either at the listing of _sidecars, or earlier, when no checkpoint whose
    # sidecars lie inside the table can anchor the cleanup (then nothing is deleted at all).
    try:
        deleted = cleanup_log(table.location, latest, retention=timedelta(days=1))
    except PathOutsideTableError as exc:
        assert "_sidecars" in str(exc)
        deleted = []
    assert not [p for p in deleted if "_sidecars" in p]
    assert tree_state(outside) == before


def test_cleanup_removes_symlinks_never_their_targets(shared_tables: Path, tmp_path: Path, outside: Path) -> None:
    path = _v2_table_with_old_log(shared_tables, tmp_path)
    log_dir = Path(path, "_delta_log")
    # an expired commit and an orphan sidecar, each a link to a file outside
    shutil.copy(log_dir / f"{0:020d}.json", outside / "commit-0.json")
    (log_dir / f"{0:020d}.json").unlink()
    os.symlink(outside / "commit-0.json", log_dir / f"{0:020d}.json")
    os.symlink(outside / "precious.parquet", log_dir / "_sidecars" / "orphan.parquet")
    for target in (outside / "commit-0.json", outside):
        os.utime(target, ns=(OLD_NS, OLD_NS))
    before = tree_state(outside)

    deleted = [os.path.basename(p) for p in DeltaTable(path).cleanup_log(retention=timedelta(days=1))]

    assert f"{0:020d}.json" in deleted and "orphan.parquet" in deleted
    assert not os.path.lexists(log_dir / f"{0:020d}.json") and not os.path.lexists(log_dir / "_sidecars" / "orphan.parquet")
    assert tree_state(outside) == before  # the targets are still there, unchanged


def test_a_symlinked_log_directory_is_refused(table_path: str, outside: Path) -> None:
    partitioned(table_path)
    shutil.move(Path(table_path, "_delta_log"), outside / "_delta_log")
    os.symlink(outside / "_delta_log", Path(table_path, "_delta_log"))
    before = tree_state(outside)
    with pytest.raises(PathOutsideTableError, match="_delta_log"):
        DeltaTable(table_path).snapshot()
    with pytest.raises(PathOutsideTableError):
        DeltaTable(table_path).append(rows("a", [5]))
    assert tree_state(outside) == before


def test_the_table_root_itself_may_be_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real-table"
    real.mkdir()
    link = tmp_path / "link-to-table"
    os.symlink(real, link)
    table = DeltaTable.create(str(link), SCHEMA, partition_by=["p"],
                              properties={"delta.enableDeletionVectors": "true", "delta.checkpointPolicy": "v2"})
    table.append(rows("a", [1, 2, 3]))
    table.append(rows("b", [4]))
    assert table.delete("id = 2").version == 3
    assert table.checkpoint().version == 3
    assert sorted(DeltaTable(str(link)).snapshot().to_arrow().column("id").to_pylist()) == [1, 3, 4]
    assert sorted(DeltaTable(str(real)).snapshot().to_arrow().column("id").to_pylist()) == [1, 3, 4]
    assert table.cleanup_log(retention=timedelta(days=0), dry_run=True) is not None


@pytest.mark.parametrize("value", ["../../../x", "a/../../..", "/etc", "%2F..%2F..", "..", ".", "a\\..\\..", "\x00"])
def test_hostile_partition_values_stay_inside_the_table(tmp_path: Path, value: str) -> None:
    """Partition values become directory names escaped as Spark escapes them, never path segments."""
    root = tmp_path / "deep" / "table"
    root.mkdir(parents=True)
    table = DeltaTable.create(str(root), SCHEMA, partition_by=["p"])
    table.append(rows(value, [1]))
    written = [p for p in tmp_path.rglob("*.parquet")]
    assert len(written) == 1 and written[0].parent.parent == root  # one directory below the root
    assert table.snapshot().to_arrow().to_pylist() == [{"id": 1, "p": value}]


@pytest.mark.parametrize("kind", ["dangling-link", "link-loop", "directory", "link-out-to-directory"])
def test_a_next_commit_name_that_is_no_file_fails_a_read_and_a_writer_at_once(
    table_path: str, outside: Path, kind: str
) -> None:
    """``_delta_log/<next version>.json`` taken by something not a file: no silent end of log, no endless retries.

    Without the rule the reader stopped one version early and every writer lost the
    create-if-absent race to it until its attempts ran out.
    """
    partitioned(table_path)  # versions 0..2
    commit = Path(table_path, "_delta_log", f"{3:020d}.json")
    if kind == "dangling-link":
        os.symlink("nowhere.json", commit)
    elif kind == "link-loop":
        os.symlink(commit.name, commit)
    elif kind == "directory":
        commit.mkdir()
    else:
        os.symlink(outside, commit)
    before = tree_state(outside)
    with pytest.raises(CorruptCommitError, match="names commit 3 but is not a readable file"):
        DeltaTable(table_path).snapshot()
    with pytest.raises(CorruptCommitError, match="names commit 3"):
        DeltaTable(table_path).append(rows("a", [9]))
    assert sorted(p.name for p in Path(table_path, "_delta_log").glob("*.json")) == [f"{v:020d}.json" for v in range(4)]
    assert tree_state(outside) == before
