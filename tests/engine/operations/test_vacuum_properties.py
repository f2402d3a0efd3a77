"""VACUUM over random histories (hypothesis): nothing a retained version needs is ever deleted.

A history is a random sequence of appends, deletion-vector deletes, whole-file deletes,
partition rewrites (OPTIMIZE-like, ``dataChange=false``), checkpoints (of random kinds),
log cleanups and orphan files (data files no commit references). Every commit that removes
files stamps its tombstones with a logical clock, one hour per step, starting a day in the
future: every file on disk is then older than any cutoff, and which tombstones have expired
is decided by the clock alone. Then a vacuum (lite or full) runs at a random retention.

Properties, decided by delta-rs:

* every version inside the retention that delta-rs could read before (log cleanup may have
  made older ones unreadable) reads the same rows afterwards;
* no file that delta-rs lists for such a version was deleted, and nothing under
  ``_delta_log`` or another hidden path was;
* a full vacuum deleted every orphan.
"""

from __future__ import annotations

import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import (
    CheckpointOptions,
    DeltaTable,
    RowIndexOutOfRangeError,
    VacuumLiteNotPossibleError,
    write_data_files,
)
from tests.oracles import read_with_deltars

HOUR_MS = 3_600_000
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
PARTITIONS = ("a", "b")

step = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(PARTITIONS), st.integers(1, 4)),
    st.tuples(st.just("dv_delete"), st.integers(0, 50), st.integers(0, 3)),
    st.tuples(st.just("remove_file"), st.integers(0, 50)),
    st.tuples(st.just("rewrite"), st.sampled_from(PARTITIONS)),
    st.tuples(st.just("checkpoint"), st.sampled_from([None, "classic", "multi-part"])),
    st.tuples(st.just("cleanup_log"),),
    st.tuples(st.just("orphan"), st.sampled_from(PARTITIONS)),
)


class History:
    """Runs steps against a table, recording the logical time of every version."""

    def __init__(self, path: str, base_ms: int) -> None:
        self.table = DeltaTable.create(
            path, SCHEMA, partition_by=["p"],
            properties={"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "1000"},
        )
        self.path = path
        self.base_ms = base_ms
        self.clock = 0
        self.version_time = {0: base_ms}
        self.next_id = 0
        self.orphans: list[str] = []

    def now(self) -> int:
        return self.base_ms + self.clock * HOUR_MS

    def _committed(self, version: int) -> None:
        self.version_time[version] = self.now()

    def run(self, action: tuple) -> None:
        self.clock += 1
        kind = action[0]
        table = self.table
        if kind == "append":
            _, p, n = action
            ids = list(range(self.next_id, self.next_id + n))
            self.next_id += n
            self._committed(table.append(pa.table({"id": pa.array(ids, pa.int64()), "p": [p] * n}, schema=SCHEMA)).version)
        elif kind == "dv_delete":
            _, pick, row = action
            with table.transaction() as txn:
                files = txn.read_files()
                if files.num_rows == 0:
                    txn.abort()
                    return
                path = files.column("path")[pick % files.num_rows].as_py()
                try:
                    txn.delete_rows({path: [0, row]}, deletion_timestamp=self.now())
                except RowIndexOutOfRangeError:  # the file has fewer rows
                    txn.abort()
                    return
                if not txn.has_staged_actions:
                    txn.abort()
                    return
                self._committed(txn.commit("DELETE"))
        elif kind == "remove_file":
            with table.transaction() as txn:
                files = txn.read_files()
                if files.num_rows == 0:
                    txn.abort()
                    return
                txn.remove_files(files.slice(action[1] % files.num_rows, 1), deletion_timestamp=self.now())
                self._committed(txn.commit("DELETE"))
        elif kind == "rewrite":
            with table.transaction() as txn:
                files = txn.read_files(f"p = '{action[1]}'")
                if files.num_rows == 0:
                    txn.abort()
                    return
                assert txn.snapshot is not None
                rows = txn.snapshot.to_arrow(filter=f"p = '{action[1]}'")
                txn.remove_files(files, data_change=False, deletion_timestamp=self.now())
                if rows.num_rows:
                    txn.add_files(write_data_files(txn.snapshot, rows.select(SCHEMA.names)), written_for_this_commit=True)
                self._committed(txn.commit("OPTIMIZE"))
        elif kind == "checkpoint":
            table.checkpoint(options=CheckpointOptions(kind=action[1], cleanup_log=False))
        elif kind == "cleanup_log":
            # Every commit before the newest checkpoint goes (file times are real: "now" far ahead).
            table.cleanup_log(retention=timedelta(0), now=int(time.time() * 1000) + 3 * 24 * HOUR_MS)
        elif kind == "orphan":
            directory = Path(self.path, f"p={action[1]}")
            directory.mkdir(exist_ok=True)
            name = f"p={action[1]}/part-orphan-{self.clock}.parquet"
            pq.write_table(pa.table({"id": pa.array([-1], pa.int64())}), Path(self.path, name))
            self.orphans.append(name)


def _files_on_disk(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _readable(path: str, version: int) -> tuple[list[dict], set[str]] | None:
    import deltalake

    try:
        adds = pa.table(deltalake.DeltaTable(path, version=version).get_add_actions(flatten=True))
        return read_with_deltars(path, version=version), set(adds.column("path").to_pylist())
    except Exception:  # cleaned up: delta-rs cannot reconstruct this version
        return None


@pytest.mark.slow
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(step, min_size=3, max_size=10),
    retention_steps=st.integers(0, 11),
    mode=st.sampled_from(["full", "lite"]),
)
def test_vacuum_keeps_every_version_inside_the_retention(steps: list[tuple], retention_steps: int, mode: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = f"{directory}/table"
        Path(path).mkdir()
        history = History(path, base_ms=int(time.time() * 1000) + 24 * HOUR_MS)
        history.run(("append", "a", 3))
        history.run(("append", "b", 2))
        for action in steps:
            history.run(action)
        latest = history.table.version()
        vacuum_now = history.now() + HOUR_MS // 2
        cutoff = vacuum_now - retention_steps * HOUR_MS
        # Version v is inside the retention when the commit after it (which may remove its files) is newer than the cutoff.
        times = [history.version_time.get(v, history.base_ms) for v in range(latest + 1)]
        retained = [v for v in range(latest + 1) if v == latest or times[v + 1] > cutoff]
        before = {v: r for v in retained if (r := _readable(path, v)) is not None}
        assert latest in before
        root = Path(path)
        on_disk = _files_on_disk(root)

        arguments = {"retention": timedelta(milliseconds=vacuum_now - cutoff), "enforce_retention_duration": False,
                     "now": vacuum_now}
        try:
            result = history.table.vacuum(mode=mode, **arguments)
        except VacuumLiteNotPossibleError:
            # Log cleanup deleted commits lite would read, and no vacuum recorded where to start.
            assert mode == "lite" and not Path(path, "_delta_log", f"{0:020d}.json").exists()
            assert _files_on_disk(root) == on_disk
            event("lite refused: commits cleaned up")
            return

        removed = on_disk - _files_on_disk(root)
        event(f"{mode} vacuum deleted {'some' if removed else 'no'} files")
        assert result.num_deleted_files == len(removed)
        assert not any(p.startswith(("_", ".")) or "/." in p or "/_" in p for p in removed)
        for version, (rows, files) in before.items():
            assert not (files & removed), f"vacuum deleted files version {version} needs"
            assert read_with_deltars(path, version=version) == rows, f"version {version} reads differently"
        if mode == "full":
            assert set(history.orphans) <= removed
        else:
            assert not set(history.orphans) & removed
        # _last_vacuum_info: what was vacuumed is never planned again (issue 20, item 14).
        assert history.table.vacuum(mode="lite", dry_run=True, **arguments).num_files_to_delete == 0
