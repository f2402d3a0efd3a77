"""Delta tables and snapshots for checkpoint tests: small delta-rs tables, read back through our reader."""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable as RsTable
from deltalake import QueryBuilder, write_deltalake

from airflow_delta.engine.read.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.storage.fileio import LocalFileIO

IO = LocalFileIO()


def snapshot_of(path: str, version: int | None = None) -> Snapshot:
    return load_snapshot(IO, path, version)



def make_partitioned_table(path: str, commits: int = 6) -> None:
    for i in range(commits):
        data = pa.table({"a": [i, i + 100], "part": ["x" if i % 2 else "y"] * 2, "s": [f"v{i}", None]})
        write_deltalake(path, data, partition_by=["part"], mode="append")
    RsTable(path).delete("a = 1")  # a tombstone and a rewritten file



def log_names(path: str) -> list[str]:
    return sorted(os.listdir(f"{path}/_delta_log"))


def delete_commits_before(path: str, version: int) -> None:
    """Drop the JSON commits (and .crc) a checkpoint at ``version`` covers: reconstruction must need only it."""
    for name in log_names(path):
        covered = name[:20].isdigit() and int(name[:20]) < version and ".checkpoint." not in name
        if covered and (name.endswith(".json") or name.endswith(".crc")):
            os.remove(f"{path}/_delta_log/{name}")


def rs_view(path: str) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
    """What delta-rs reads: version, all rows (sorted), add actions (sorted by path)."""
    dt = RsTable(path)
    data = pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all())
    rows = sorted(data.to_pylist(), key=repr)
    adds = sorted(pa.table(dt.get_add_actions(flatten=True)).to_pylist(), key=lambda r: r["path"])
    return dt.version(), rows, adds


class OurView:
    """What our reader reconstructs (live files and tombstones, sorted), comparable with ==."""

    ADD_COLUMNS = ["path", "dv_id", "partition_values", "size", "modification_time", "stats", "tags",
                   "deletion_vector", "base_row_id", "default_row_commit_version"]
    REMOVE_COLUMNS = ["path", "dv_id", "deletion_timestamp", "size"]

    def __init__(self, snap: Snapshot) -> None:
        self.version = snap.version
        self.adds = snap.add_actions.select(self.ADD_COLUMNS).sort_by([("path", "ascending"), ("dv_id", "ascending")])
        self.removes = snap.tombstones.select(self.REMOVE_COLUMNS).sort_by([("path", "ascending"), ("dv_id", "ascending")])

    @staticmethod
    def _same(a: pa.Table, b: pa.Table) -> bool:
        if a.num_rows != b.num_rows:
            return False
        for name in a.column_names:
            x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
            if pa.types.is_map(x.type):  # maps are unordered: compare their sorted entries
                same = [sorted(m) if m is not None else None for m in x.to_pylist()] == [
                    sorted(m) if m is not None else None for m in y.to_pylist()
                ]
            else:
                same = x.equals(y)
            if not same:
                return False
        return True

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, OurView)
            and self.version == other.version
            and self._same(self.adds, other.adds)
            and self._same(self.removes, other.removes)
        )

    def __repr__(self) -> str:
        return f"OurView(v{self.version}, {self.adds.num_rows} files, {self.removes.num_rows} tombstones)"


def our_view(path: str, version: int | None = None) -> OurView:
    return OurView(snapshot_of(path, version))


def as_of_last_removal(snap: Snapshot) -> int:
    """A clock at which none of the snapshot's tombstones has expired yet (old shared tables)."""
    stamps = [t for t in snap.tombstones.column("deletion_timestamp").to_pylist() if t is not None]
    return max(stamps) if stamps else int(time.time() * 1000)


def copy_shared(shared_tables: Path, name: str, dest: str) -> str:
    target = os.path.join(dest, name)
    shutil.copytree(shared_tables / name, target)
    for dirpath, dirnames, filenames in os.walk(target):
        for entry in dirnames + filenames:
            full = os.path.join(dirpath, entry)
            os.chmod(full, os.stat(full).st_mode | stat.S_IWUSR)
        os.chmod(dirpath, os.stat(dirpath).st_mode | stat.S_IWUSR)
    return target


def remove_checkpoints(path: str) -> None:
    log_dir = f"{path}/_delta_log"
    for name in os.listdir(log_dir):
        if ".checkpoint." in name or name == "_last_checkpoint":
            os.remove(f"{log_dir}/{name}")
    shutil.rmtree(f"{log_dir}/_sidecars", ignore_errors=True)


# ----------------------------------------------------------------- classic
