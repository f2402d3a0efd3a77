"""TableContext: a snapshot's location, protocol and metadata as a picklable value for per-file work."""

from __future__ import annotations

import pickle
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import (
    CommitOptions,
    ConcurrentAppendException,
    DeltaTable,
    InvalidArgumentError,
    InvalidFilterError,
    PathOutsideTableError,
    TableContext,
    deleted_row_positions,
    local_data_file_paths,
    predicate_read_bytes,
    read_live_rows,
    split_by_row_groups,
    typed_partition_values,
    write_data_files,
)
from tests.conftest import shared_tables_dir
from tests.oracles import assert_oracles_read, read_with_kernel


def test_a_context_pickles_small_and_reads_the_same_after(table_path: str) -> None:
    deltalake.write_deltalake(table_path, pa.table({"id": pa.array(range(10), pa.int64()), "p": ["a", "b"] * 5}), partition_by=["p"])
    table = DeltaTable(table_path)
    context = table.context()
    _ = context.io, context.schema, context.properties  # cached values must not travel
    payload = pickle.dumps(context)
    assert len(payload) < 4096
    copy = pickle.loads(payload)
    assert (copy.uri, copy.version, copy.protocol, copy.metadata) == (context.uri, context.version, context.protocol, context.metadata)
    assert copy.schema == context.schema and copy.partition_columns == ("p",)
    files = table.snapshot().add_actions
    assert sorted(r for i in range(files.num_rows) for r in read_live_rows(copy, files.slice(i, 1))[0].column("id").to_pylist()) == list(range(10))


def test_live_rows_skip_the_deletion_vector_and_keep_physical_positions() -> None:
    # Spark wrote these deletion vectors.
    path = shared_tables_dir() / "table-with-dv-small"
    table = DeltaTable(str(path))
    files = table.snapshot().add_actions
    context = table.context()
    live = 0
    for i in range(files.num_rows):
        rows, positions = read_live_rows(context, files.slice(i, 1))
        physical = pq.read_table(path / files.column("path")[i].as_py()).column("value").to_pylist()
        assert rows.column("value").to_pylist() == [physical[p] for p in positions]
        assert list(positions) == sorted(positions)
        live += rows.num_rows
    assert live == len(read_with_kernel(path))


def test_one_file_at_a_time() -> None:
    table = DeltaTable(str(shared_tables_dir() / "table-with-dv-small"))
    with pytest.raises(ValueError, match="exactly one"):
        read_live_rows(table.context(), table.snapshot().add_actions.slice(0, 0))


@pytest.mark.parametrize(
    ("field", "value"),
    [("uri", ""), ("version", -1), ("version", "3"), ("protocol", {}), ("metadata", None), ("storage_options", ["a"])],
)
def test_bad_fields_are_refused(field: str, value: object) -> None:
    good = DeltaTable(str(shared_tables_dir() / "simple_table")).context()
    fields = {"uri": good.uri, "version": good.version, "protocol": good.protocol, "metadata": good.metadata}
    with pytest.raises(InvalidArgumentError, match=field):
        TableContext(**{**fields, field: value})


def test_a_delta_rs_table_that_lists_variant_type_is_writable_without_variant_columns(table_path: str) -> None:
    # delta-rs 1.6 lists variantType among the features of every table it creates with DVs.
    data = pa.table({"id": pa.array(range(10), pa.int64())})
    deltalake.write_deltalake(table_path, data, configuration={"delta.enableDeletionVectors": "true"})
    assert "variantType" in (deltalake.DeltaTable(table_path).protocol().writer_features or [])
    result = DeltaTable(table_path).delete("id = 3")
    assert result.metrics["numDeletedRows"] == 1
    assert_oracles_read(table_path, [{"id": i} for i in range(10) if i != 3])


def test_files_written_elsewhere_for_a_commit_are_removed_when_it_certainly_fails(table_path: str) -> None:
    table = DeltaTable.create(table_path, pa.schema([pa.field("id", pa.int64())]))
    stale = table.snapshot()
    table.append(pa.table({"id": pa.array([1], pa.int64())}))
    adds = write_data_files(table.context(stale), pa.table({"id": pa.array([2], pa.int64())}))
    written = Path(table_path) / adds[0].path
    assert written.exists()
    with pytest.raises(ConcurrentAppendException), table.transaction(CommitOptions(isolation_level="Serializable"), snapshot=stale) as txn:
        txn.read_whole_table()
        txn.add_files(adds, written_for_this_commit=True)
        txn.commit("WRITE")
    assert not written.exists()
    # Without the flag the files are the caller's: they stay.
    adds = write_data_files(table.context(stale), pa.table({"id": pa.array([3], pa.int64())}))
    with pytest.raises(ConcurrentAppendException), table.transaction(CommitOptions(isolation_level="Serializable"), snapshot=stale) as txn:
        txn.read_whole_table()
        txn.add_files(adds)
        txn.commit("WRITE")
    assert (Path(table_path) / adds[0].path).exists()


def test_a_row_group_filter_skips_row_groups_and_keeps_positions(table_path: str) -> None:
    # One file of four row groups (ids in order): the filter's row group is read, the others skipped.
    deltalake.write_deltalake(
        table_path,
        pa.table({"id": pa.array(range(400), pa.int64())}),
        writer_properties=deltalake.WriterProperties(max_row_group_size=100),
    )
    table = DeltaTable(table_path)
    files = table.snapshot().add_actions
    path = Path(table_path, files.column("path")[0].as_py())
    assert pq.ParquetFile(path).metadata.num_row_groups == 4
    rows, positions = read_live_rows(table.context(), files, ["id"], row_group_filter="id = 250")
    assert rows.column("id").to_pylist() == list(range(200, 300))
    assert positions.tolist() == list(range(200, 300))
    rows, _ = read_live_rows(table.context(), files, ["id"], row_group_filter="id < 0")
    assert rows.num_rows == 0
    with pytest.raises(InvalidFilterError):
        read_live_rows(table.context(), files, ["id"], row_group_filter="")


def _many_row_groups(table_path: str) -> DeltaTable:
    data = pa.table({"id": pa.array(range(10_000), pa.int64()), "p": ["a", "b"] * 5_000})
    deltalake.write_deltalake(
        table_path, data, configuration={"delta.enableDeletionVectors": "true"},
        writer_properties=deltalake.WriterProperties(max_row_group_size=1_000),
    )
    table = DeltaTable(table_path)
    table.delete("id % 7 = 0")
    return table


def test_row_group_ranges_cover_each_large_file_once_in_order(table_path: str) -> None:
    table = _many_row_groups(table_path)
    files = table.snapshot().add_actions
    context = table.context()
    assert split_by_row_groups(context, files, 10**12) == [(i, None) for i in range(files.num_rows)]
    splits = split_by_row_groups(context, files, 1)
    groups = pq.ParquetFile(Path(table_path) / files.column("path")[0].as_py()).metadata.num_row_groups
    assert groups > 1 and [g for _, g in splits] == [range(g, g + 1) for g in range(groups)]
    coarse = split_by_row_groups(context, files, 3 * int(files.column("size")[0].as_py()) // groups)
    covered = [g for _, r in coarse for g in r]
    assert covered == list(range(groups)) and 1 < len(coarse) < groups


def test_reading_by_row_group_ranges_gives_the_whole_files_rows_and_positions(table_path: str) -> None:
    table = _many_row_groups(table_path)
    files = table.snapshot().add_actions
    context = table.context()
    whole_rows, whole_positions = read_live_rows(context, files.slice(0, 1))
    parts = [read_live_rows(context, files.slice(i, 1), row_groups=r) for i, r in split_by_row_groups(context, files, 1)]
    assert pa.concat_tables([rows for rows, _ in parts]).equals(whole_rows)
    assert [int(p) for _, positions in parts for p in positions] == [int(p) for p in whole_positions]
    assert sorted(whole_rows.column("id").to_pylist()) == sorted(r["id"] for r in read_with_kernel(table_path))


def test_another_readers_view_of_the_files_is_the_engine_readers(tmp_path: Path) -> None:
    # Paths, partition values and deleted rows as read_live_rows applies them, for a reader elsewhere.
    table = DeltaTable(str(shared_tables_dir() / "table-with-dv-small"))
    snapshot = table.snapshot()
    context = table.context(snapshot)
    files = snapshot.add_actions
    paths = local_data_file_paths(context, files)
    assert paths is not None and all(Path(p).is_file() for p in paths)
    for i, positions in enumerate(deleted_row_positions(context, files)):
        live, kept = read_live_rows(context, files.slice(i, 1))
        total = pq.ParquetFile(paths[i]).metadata.num_rows
        deleted = set() if positions is None else set(positions.tolist())
        assert set(kept.tolist()) == set(range(total)) - deleted and live.num_rows == len(kept)
    partitioned = DeltaTable(str(shared_tables_dir() / "delta-0.8.0-partitioned"))
    part_snapshot = partitioned.snapshot()
    values = typed_partition_values(partitioned.context(part_snapshot), part_snapshot.add_actions)
    assert values.type.names == list(part_snapshot.metadata.partition_columns)


def test_a_data_file_linked_out_of_the_root_is_refused_to_another_reader(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = DeltaTable.create(str(root), pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2]}))
    snapshot = table.snapshot()
    (name,) = snapshot.add_actions.column("path").to_pylist()
    outside = tmp_path / "outside.parquet"
    (root / name).rename(outside)
    (root / name).symlink_to(outside)
    with pytest.raises(PathOutsideTableError):
        local_data_file_paths(table.context(snapshot), snapshot.add_actions)


def _chunk_bytes(path: Path, column: str, groups: list[int]) -> int:
    """pyarrow's own account of a column's compressed chunks in some row groups (the oracle)."""
    metadata = pq.ParquetFile(path).metadata
    index = metadata.schema.to_arrow_schema().get_field_index(column)
    return sum(metadata.row_group(g).column(index).total_compressed_size for g in groups)


def test_predicate_read_bytes_counts_the_predicates_chunks_of_the_row_groups_that_may_match(table_path: str) -> None:
    # Four row groups of ids in order, and a wide string column the predicate does not read.
    data = pa.table({"id": pa.array(range(400), pa.int64()), "text": [f"row {i} " * 20 for i in range(400)], "p": ["a", "b"] * 200})
    deltalake.write_deltalake(
        table_path, data, partition_by=["p"], writer_properties=deltalake.WriterProperties(max_row_group_size=50)
    )
    table = DeltaTable(table_path)
    files, context = table.snapshot().add_actions, table.context()
    paths = [Path(table_path, p) for p in files.column("path").to_pylist()]
    assert all(pq.ParquetFile(p).metadata.num_row_groups == 4 for p in paths)
    # id = 250 lies in the third row group of the file of p='a' (ids 200..298) and of p='b'.
    assert predicate_read_bytes(context, files, "id = 250") == sum(_chunk_bytes(p, "id", [2]) for p in paths)
    assert predicate_read_bytes(context, files, "id >= 0 AND text IS NOT NULL") == sum(
        _chunk_bytes(p, "id", [0, 1, 2, 3]) + _chunk_bytes(p, "text", [0, 1, 2, 3]) for p in paths
    )
    assert predicate_read_bytes(context, files, "id < 0") == 0
    assert predicate_read_bytes(context, files, "p = 'a'") == 0  # partition values come from the log
    assert predicate_read_bytes(context, files.slice(0, 0), "id = 1") == 0
    with pytest.raises(InvalidFilterError):
        predicate_read_bytes(context, files, "nope = 1")


def test_predicate_read_bytes_follows_column_mapping() -> None:
    # Spark-written, column mapping mode name: the parquet columns have physical names.
    root = shared_tables_dir() / "table_with_column_mapping"
    table = DeltaTable(str(root))
    snapshot = table.snapshot()
    files, context = snapshot.add_actions, table.context()
    column = "Super Name"  # a data column ("Company Very Short" is the partition column)
    physical = snapshot.schema.field(column).metadata[b"delta.columnMapping.physicalName"].decode()
    expected = 0
    for path in files.column("path").to_pylist():
        metadata = pq.ParquetFile(root / path).metadata
        expected += _chunk_bytes(root / path, physical, list(range(metadata.num_row_groups)))
    assert expected > 0
    assert predicate_read_bytes(context, files, f"`{column}` IS NOT NULL") == expected
