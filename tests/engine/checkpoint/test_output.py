"""Checkpoint files appear only once complete; what was written is reported."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine.checkpoint.output import atomic_file, chain_batches, write_parquet
from airflow_delta.engine.storage.fileio import LocalFileIO

IO = LocalFileIO()
SCHEMA = pa.schema([("n", pa.int64())])


def batch(*values: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"n": list(values)}, schema=SCHEMA)


def test_atomic_file_appears_only_when_complete(tmp_path: Path) -> None:
    target = str(tmp_path / "log" / "file.parquet")
    with atomic_file(IO, target) as out:
        out.write(b"partial")
        assert not os.path.exists(target)  # readers never see it half written
        assert [n for n in os.listdir(tmp_path / "log") if n.startswith(".file.parquet.")]
    assert Path(target).read_bytes() == b"partial"
    assert os.listdir(tmp_path / "log") == ["file.parquet"]


def test_atomic_file_leaves_nothing_behind_when_the_writer_fails(tmp_path: Path) -> None:
    target = str(tmp_path / "file.parquet")
    with pytest.raises(RuntimeError), atomic_file(IO, target) as out:
        out.write(b"partial")
        raise RuntimeError("killed")
    assert os.listdir(tmp_path) == []


def test_write_parquet_reports_rows_and_size_and_caps_row_groups(tmp_path: Path) -> None:
    path = str(tmp_path / "file.parquet")
    written = write_parquet(IO, path, SCHEMA, iter([batch(1, 2, 3), batch(), batch(4, 5)]), batch_rows=2)
    parquet = pq.ParquetFile(path)
    assert (written.path, written.rows, written.size) == (path, 5, os.path.getsize(path))
    assert parquet.read().column("n").to_pylist() == [1, 2, 3, 4, 5]
    assert max(parquet.metadata.row_group(i).num_rows for i in range(parquet.metadata.num_row_groups)) == 2


def test_write_parquet_of_no_rows_is_still_a_valid_file(tmp_path: Path) -> None:
    path = str(tmp_path / "empty.parquet")
    written = write_parquet(IO, path, SCHEMA, iter([]), batch_rows=10)
    assert written.rows == 0 and pq.read_table(path).schema == SCHEMA


def test_chain_batches_yields_each_iterable_in_turn_lazily() -> None:
    consumed: list[str] = []

    def second() -> object:
        consumed.append("second")
        yield batch(3)

    chained = chain_batches([batch(1), batch(2)], second())
    assert next(chained).column(0).to_pylist() == [1] and consumed == []
    assert [b.column(0).to_pylist() for b in chained] == [[2], [3]]
    assert consumed == ["second"]


def test_log_cleanup_during_a_checkpoint_leaves_its_temporary_file_alone(tmp_path: Path) -> None:
    # A cleanup with a clock far ahead runs while a checkpoint is being written: the
    # checkpoint's temporary file is not the cleanup's to delete, and the checkpoint lands.
    from airflow_delta.engine import DeltaTable
    from airflow_delta.engine.checkpoint.writer import create_checkpoint

    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA)
    for n in range(3):
        table.append(pa.table({"n": [n]}, schema=SCHEMA))
    table.checkpoint(2)
    table.append(pa.table({"n": [3]}, schema=SCHEMA))
    seen: list[list[str]] = []

    class CleanupMidWriteIO(LocalFileIO):
        def atomic_output(self, path: str):  # type: ignore[no-untyped-def,override]
            inner = super().atomic_output(path)

            class Wrapped:
                def __enter__(self):  # type: ignore[no-untyped-def]
                    return inner.__enter__()

                def __exit__(self, *exc):  # type: ignore[no-untyped-def]
                    seen.append(table.cleanup_log(retention="interval 0 seconds", now=4_102_444_800_000))
                    return inner.__exit__(*exc)

            return Wrapped()

    snapshot = DeltaTable(path, io=CleanupMidWriteIO()).snapshot()
    assert create_checkpoint(snapshot) == 4
    assert seen and any(p.endswith(".json") for p in seen[0])  # the cleanup did run, and deleted commits
    assert not any(".tmp" in p for deleted in seen for p in deleted)
    assert Path(path, "_delta_log", f"{4:020d}.checkpoint.parquet").exists()
    assert sorted(DeltaTable(path).snapshot().to_arrow().column("n").to_pylist()) == [0, 1, 2, 3]
