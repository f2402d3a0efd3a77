"""Row tracking (PROTOCOL.md "Row Tracking"): fresh row IDs per commit, the high-water mark, rebases, copies.

The row IDs and commit versions a table holds are read back by
:func:`tests.oracles.reference_row_tracking`, a reader written from the protocol's reader requirements alone (JSON commits replayed,
data files read with pyarrow, materialized columns coalesced with ``baseRowId`` plus the
row's position), never by the engine's reader. Delta Lake itself checks the same behaviour
in ``tests/spark/test_row_tracking_delta.py`` once the Delta oracle is available.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import (
    AddFile,
    DeltaTable,
    InvalidTransactionError,
    OptimizeOptions,
    RowTrackingBackfillError,
)
from airflow_delta.engine.model.row_tracking import assign_row_tracking, high_water_mark_domain
from tests.oracles import assert_oracles_read, high_water_mark, reference_row_tracking

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def _rows(ids: range | list[int]) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "v": [f"v{i}" for i in ids]}, schema=SCHEMA)


def _create(path: str, batches: list[range], **properties: str) -> DeltaTable:
    table = DeltaTable.create(path, SCHEMA, properties={"delta.enableRowTracking": "true", **properties})
    for ids in batches:
        table.append(_rows(ids))
    return table


# ------------------------------------------------------------------ assignment


def _add(i: int, records: int | None, base: int | None = None, version: int | None = None) -> AddFile:
    stats = json.dumps({"numRecords": records}) if records is not None else None
    return AddFile(f"f{i}.parquet", {}, 10, 0, stats=stats, base_row_id=base, default_row_commit_version=version)


@given(
    st.integers(-1, 10_000),
    st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=12),
    st.integers(0, 1000),
)
def test_fresh_row_ids_follow_the_high_water_mark_without_overlap(mark: int, files: list[tuple[int, bool]], version: int) -> None:
    adds = [_add(i, n, base=7 if kept else None, version=3 if kept else None) for i, (n, kept) in enumerate(files)]
    assigned, new_mark = assign_row_tracking(adds, mark, version)
    fresh = [(a.base_row_id, n) for a, (n, kept) in zip(assigned, files, strict=True) if not kept]
    next_id = mark + 1
    for base, records in fresh:
        assert base == next_id  # contiguous, above the old mark, in the order of the adds
        next_id += records
    assert new_mark == next_id - 1
    for add, (_n, kept) in zip(assigned, files, strict=True):
        # A re-committed file keeps the add's values; a new one is this commit's.
        assert (add.base_row_id, add.default_row_commit_version) == ((7, 3) if kept else (add.base_row_id, version))


def test_a_new_file_without_a_record_count_cannot_get_row_ids() -> None:
    with pytest.raises(InvalidTransactionError, match="numRecords"):
        assign_row_tracking([_add(0, None)], -1, 1)


def test_appends_assign_ids_and_versions_and_record_the_high_water_mark(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _create(path, [range(0, 5), range(5, 12)])
    rows = reference_row_tracking(path)
    assert rows == {i: (i, 1 if i < 5 else 2) for i in range(12)}
    assert high_water_mark(path) == 11
    config = table.snapshot().metadata.configuration
    assert config["delta.rowTracking.materializedRowIdColumnName"].startswith("_row-id-col-")
    assert config["delta.rowTracking.materializedRowCommitVersionColumnName"].startswith("_row-commit-version-col-")
    assert {"rowTracking", "domainMetadata"} <= table.snapshot().protocol.writer_features


def test_the_high_water_mark_domain_cannot_be_staged(tmp_path: Path) -> None:
    table = _create(str(tmp_path / "t"), [range(3)])
    with table.transaction() as txn, pytest.raises(InvalidTransactionError, match="high-water mark"):
        txn.set_domain_metadata("delta.rowTracking", high_water_mark_domain(100).configuration, system=True)


# ------------------------------------------------------------------ rebase after a lost race


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 20), min_size=2, max_size=4), st.randoms(use_true_random=False))
def test_concurrent_appends_are_rebased_onto_the_winners_high_water_mark(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], rng: Any
) -> None:
    path = str(tmp_path_factory.mktemp("rebase") / "t")
    table = _create(path, [range(0, 3)])
    # Every writer reads version 1 and stages its append; they commit in a random order,
    # so all but the first lose the race for version 2 and are rebased.
    start = 100
    writers = []
    for size in sizes:
        txn = table.transaction()
        txn.add_files(_write(table, range(start, start + size)))
        writers.append((txn, range(start, start + size)))
        start += size
    rng.shuffle(writers)
    versions = {}
    for txn, ids in writers:
        versions[ids.start] = txn.commit("WRITE")
    rows = reference_row_tracking(path)
    all_ids = [row_id for row_id, _ in rows.values()]
    assert len(set(all_ids)) == len(all_ids) == 3 + sum(sizes)  # no ID is given twice
    assert high_water_mark(path) == max(all_ids) == len(all_ids) - 1
    for _txn, ids in writers:
        assert {rows[i][1] for i in ids} == {versions[ids.start]}  # the version it landed at, not the one it tried


def _write(table: DeltaTable, ids: range) -> list[AddFile]:
    from airflow_delta.engine import write_data_files

    return write_data_files(table.snapshot(), _rows(ids))


def test_threads_appending_at_once_never_share_a_row_id(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _create(path, [])
    errors: list[BaseException] = []

    def append(start: int) -> None:
        try:
            DeltaTable(path).append(_rows(range(start, start + 10)))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(n * 10,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    rows = reference_row_tracking(path)
    assert sorted(row_id for row_id, _ in rows.values()) == list(range(40))


# ------------------------------------------------------------------ copies keep the stable values


def test_delete_by_rewriting_keeps_the_copied_rows_ids_and_versions(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _create(path, [range(0, 10), range(10, 20)])
    before = reference_row_tracking(path)
    result = table.delete("id % 3 = 0")
    after = reference_row_tracking(path)
    assert result.metrics["numCopiedRows"] == 13
    assert after == {i: before[i] for i in range(20) if i % 3}
    assert high_water_mark(path) == 19 + 13  # the new file's fresh IDs are reserved all the same
    assert_oracles_read(path, [{"id": i, "v": f"v{i}"} for i in range(20) if i % 3])


def test_optimize_keeps_ids_and_versions_through_two_compactions(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _create(path, [range(0, 4), range(4, 9), range(9, 11)])
    table.delete("id = 5")
    before = reference_row_tracking(path)
    table.optimize()
    assert reference_row_tracking(path) == before
    table.append(_rows(range(11, 14)))
    with_new = reference_row_tracking(path)
    table.optimize()
    assert reference_row_tracking(path) == with_new
    assert with_new[12][1] == table.snapshot().version - 1  # the append's version, kept by OPTIMIZE
    assert_oracles_read(path, [{"id": i, "v": f"v{i}"} for i in range(14) if i != 5])


def test_optimize_zorder_keeps_ids(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _create(path, [range(0, 6), range(6, 12)])
    before = reference_row_tracking(path)
    table.optimize(OptimizeOptions(zorder_by=["id"]))
    assert reference_row_tracking(path) == before


# ------------------------------------------------------------------ enabling


def test_enabling_on_a_table_with_untracked_files_is_refused(tmp_path: Path) -> None:
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    table.append(_rows(range(3)))
    with table.transaction() as txn:
        txn.set_properties({"delta.enableRowTracking": "true"})
        with pytest.raises(RowTrackingBackfillError, match="ALTER TABLE") as raised:
            txn.commit("SET TBLPROPERTIES")
    assert raised.value.files_without_row_ids == 1 and not raised.value.retryable
    assert table.version() == 1


def test_enabling_on_a_table_whose_files_all_have_row_ids_names_the_columns(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA, properties={"delta.feature.rowTracking": "supported"})
    table.append(_rows(range(4)))  # supported: IDs are assigned, not yet relied upon
    assert table.snapshot().add_actions.column("base_row_id").to_pylist() == [0]
    with table.transaction() as txn:
        txn.set_properties({"delta.enableRowTracking": "true"})
        txn.commit("SET TBLPROPERTIES")
    assert reference_row_tracking(path) == {i: (i, 1) for i in range(4)}


def test_suspended_row_tracking_assigns_nothing(tmp_path: Path) -> None:
    table = DeltaTable.create(
        str(tmp_path / "t"), SCHEMA,
        properties={"delta.feature.rowTracking": "supported", "delta.rowTrackingSuspended": "true"},
    )
    table.append(_rows(range(4)))
    files = table.snapshot().add_actions
    assert files.column("base_row_id").to_pylist() == [None]
    assert "delta.rowTracking" not in table.snapshot().domain_metadata


def test_a_recommitted_file_keeps_its_values(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _create(path, [range(0, 6)], **{"delta.enableDeletionVectors": "true"})
    table.delete("id = 2")  # a deletion vector: the same file is added again
    add = table.snapshot().add_actions
    assert add.column("base_row_id").to_pylist() == [0]
    assert add.column("default_row_commit_version").to_pylist() == [1]
    assert high_water_mark(path) == 5


def test_convert_to_delta_with_row_tracking_assigns_ids_in_version_zero(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.mkdir()
    pq.write_table(_rows(range(0, 3)), path / "a.parquet")
    pq.write_table(_rows(range(3, 5)), path / "b.parquet")
    DeltaTable.convert_to_delta(str(path), properties={"delta.enableRowTracking": "true"})
    rows = reference_row_tracking(path)
    assert sorted(rows.values()) == [(i, 0) for i in range(5)]
    assert high_water_mark(path) == 4
