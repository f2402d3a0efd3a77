"""Per-file engine work on executors: what Spark reads and writes through the engine.

The engine's own reader is not the oracle for what a table holds: delta-rs and
delta-kernel-rs are. Row positions are checked against the physical rows of the parquet
files (read by pyarrow directly) and against the deletion vectors Spark wrote.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import (
    ConstraintViolationError,
    DataFileNotFoundError,
    DeltaTable,
    InvalidArgumentError,
    SchemaMismatchError,
    write_data_files,
)
from airflow_delta.spark.file_tasks import (
    FILE_COLUMN,
    ROW_COLUMN,
    engine_errors_from_executors,
    sweep_named_files,
    target_dataframe,
    write_dataframe,
)
from tests.conftest import shared_tables_dir
from tests.oracles import assert_oracles_read, read_with_deltars, read_with_kernel

pytestmark = pytest.mark.slow

SHARED_TABLES = ["table-with-dv-small", "table_with_column_mapping", "delta-0.8.0-partitioned", "simple_table", "checkpoint-v2-table"]


def _copy(name: str, tmp_path: Path) -> str:
    target = tmp_path / name
    shutil.copytree(shared_tables_dir() / name, target, symlinks=True)
    return str(target)


def _rows(df) -> list[dict]:
    return [row.asDict(recursive=True) for row in df.collect()]


def _naive_utc(rows: list[dict]) -> list[dict]:
    """Oracle rows as Spark collects them: timestamps naive, in the session's time zone (UTC here)."""

    def value(v: object) -> object:
        if isinstance(v, datetime) and v.tzinfo is not None:
            return v.astimezone(UTC).replace(tzinfo=None)
        return v

    return [{k: value(v) for k, v in row.items()} for row in rows]


@pytest.mark.parametrize("reader", ["engine", "spark"])
@pytest.mark.parametrize("name", SHARED_TABLES)
def test_target_rows_are_the_rows_both_oracles_read(spark, name: str, reader: str) -> None:
    path = str(shared_tables_dir() / name)
    table = DeltaTable(path)
    snapshot = table.snapshot()
    df = target_dataframe(spark, table.context(snapshot), snapshot.add_actions, reader=reader)
    rows = _rows(df.drop(FILE_COLUMN, ROW_COLUMN))
    expected = _naive_utc(read_with_kernel(path))
    assert sorted(map(repr, rows)) == sorted(map(repr, expected))
    assert len(rows) == len(read_with_deltars(path))


@pytest.mark.parametrize("reader", ["engine", "spark"])
def test_row_positions_are_physical_and_skip_deleted_rows(spark, reader: str) -> None:
    # Spark wrote this table's deletion vectors: positions must be the file's physical rows.
    path = str(shared_tables_dir() / "table-with-dv-small")
    table = DeltaTable(path)
    snapshot = table.snapshot()
    df = target_dataframe(spark, table.context(snapshot), snapshot.add_actions, reader=reader)
    got = {(r[FILE_COLUMN], r[ROW_COLUMN]): r["value"] for r in df.collect()}
    physical = {}
    for file_path in {f for f, _ in got}:
        column = pq.read_table(Path(path) / file_path).column("value").to_pylist()
        physical.update({(file_path, i): v for i, v in enumerate(column)})
    assert all(physical[key] == value for key, value in got.items())
    deleted = set(physical) - set(got)
    assert deleted, "the table has deleted rows; none were skipped"
    assert len(got) == len(read_with_kernel(path))


def test_a_column_subset_keeps_positions(spark) -> None:
    path = str(shared_tables_dir() / "delta-0.8.0-partitioned")
    table = DeltaTable(path)
    snapshot = table.snapshot()
    df = target_dataframe(spark, table.context(snapshot), snapshot.add_actions, columns=["year"])
    assert df.columns == ["year", FILE_COLUMN, ROW_COLUMN]
    assert sorted(r["year"] for r in df.collect()) == sorted(r["year"] for r in read_with_kernel(path))


def test_unknown_column_is_a_typed_error(spark) -> None:
    table = DeltaTable(str(shared_tables_dir() / "simple_table"))
    snapshot = table.snapshot()
    with pytest.raises(InvalidArgumentError, match="nope"):
        target_dataframe(spark, table.context(snapshot), snapshot.add_actions, columns=["nope"])


def test_no_files_is_an_empty_frame(spark) -> None:
    table = DeltaTable(str(shared_tables_dir() / "simple_table"))
    snapshot = table.snapshot()
    df = target_dataframe(spark, table.context(snapshot), snapshot.add_actions.slice(0, 0))
    assert df.count() == 0


SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()), pa.field("p", pa.string())])


def test_written_files_commit_and_read_in_both_oracles(spark, table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    data = spark.createDataFrame([(i, f"n{i}", "ab"[i % 2]) for i in range(50)], "id long, name string, p string")
    snapshot = table.snapshot()
    with table.transaction(snapshot=snapshot) as txn:
        adds = write_dataframe(table.context(snapshot), data)
        assert {a.partition_values["p"] for a in adds} == {"a", "b"}
        txn.add_files(adds, written_for_this_commit=True)
        txn.commit("WRITE")
    expected = [{"id": i, "name": f"n{i}", "p": "ab"[i % 2]} for i in range(50)]
    assert_oracles_read(table_path, expected)


def test_written_files_follow_column_mapping(spark, tmp_path: Path) -> None:
    path = _copy("table_with_column_mapping", tmp_path)
    table = DeltaTable(path)
    snapshot = table.snapshot()
    before = read_with_kernel(path)
    source = target_dataframe(spark, table.context(snapshot), snapshot.add_actions).drop(FILE_COLUMN, ROW_COLUMN)
    with table.transaction(snapshot=snapshot) as txn:
        txn.add_files(write_dataframe(table.context(snapshot), source), written_for_this_commit=True)
        txn.commit("WRITE")
    assert read_with_kernel(path) == sorted(before + before, key=lambda r: [(v is None, repr(v)) for v in r.values()])
    assert len(read_with_deltars(path)) == 2 * len(before)


def test_a_constraint_violation_on_an_executor_writes_nothing(spark, table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA, properties={"delta.constraints.positive": "id > 0"})
    data = spark.createDataFrame([(i, "x", "a") for i in range(-2, 3)], "id long, name string, p string")
    with pytest.raises(ConstraintViolationError, match="positive") as err:
        write_dataframe(table.context(), data)
    assert not err.value.retryable
    data_files = [p for p in Path(table_path).rglob("*.parquet")]
    assert data_files == []


def test_a_failed_write_leaves_no_file_of_a_task_still_running(spark, table_path: str) -> None:
    # Two tasks: the first breaks the constraint at once, the second is still busy (a slow
    # step before its write) when the job fails. Whether Spark's kill stops it before or
    # after it writes, no file of the write may stay once write_dataframe has raised.
    table = DeltaTable.create(table_path, SCHEMA, properties={"delta.constraints.positive": "id > 0"})

    def slow_second_partition(batches):
        import time

        for batch in batches:
            if batch.num_rows and batch.column(0)[0].as_py() > 0:
                time.sleep(1.5)
            yield batch

    data = spark.createDataFrame([(-1, "x", "a")] + [(i, "x", "a") for i in range(1, 200)], "id long, name string, p string")
    data = data.repartition(2, "id").sortWithinPartitions("id").mapInArrow(slow_second_partition, data.schema)
    with pytest.raises(ConstraintViolationError, match="positive"):
        write_dataframe(table.context(), data)
    assert list(Path(table_path).rglob("*.parquet")) == []


def test_the_sweep_removes_only_uncommitted_files_named_with_the_token(spark, table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA)
    snapshot = table.snapshot()
    token = "0123456789abcdef"
    rows = pa.table({"id": [1, 2], "name": ["a", "b"], "p": ["x", "y"]}, schema=SCHEMA)
    with table.transaction(snapshot=snapshot) as txn:
        committed = write_data_files(table.context(snapshot), rows, name_token=token)
        txn.add_files(committed, written_for_this_commit=True)
        txn.commit("WRITE")
    stray = write_data_files(table.context(snapshot), rows, name_token=token)
    other = write_data_files(table.context(snapshot), rows, name_token="fedcba9876543210")
    assert all(token in a.path for a in committed + stray)
    log_files = sorted(p.name for p in (Path(table_path) / "_delta_log").iterdir())
    removed = sweep_named_files(table.context(), token)
    assert sorted(Path(p).name for p in removed) == sorted(Path(a.path).name for a in stray)
    on_disk = {p.name for p in Path(table_path).rglob("*.parquet")}
    assert on_disk == {Path(a.path).name for a in committed + other}
    assert sorted(p.name for p in (Path(table_path) / "_delta_log").iterdir()) == log_files
    assert_oracles_read(table_path, rows.to_pylist())


def test_a_bad_name_token_is_refused(table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA)
    rows = pa.table({"id": [1], "name": ["a"], "p": ["x"]}, schema=SCHEMA)
    for token in ("", "../x", "a/b", "x" * 65):
        with pytest.raises(InvalidArgumentError, match="name_token"):
            write_data_files(table.context(), rows, name_token=token)
    assert list(Path(table_path).rglob("*.parquet")) == []


def test_missing_columns_are_refused_before_writing(spark, table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA)
    with pytest.raises(InvalidArgumentError, match="missing"):
        write_dataframe(table.context(), spark.createDataFrame([(1,)], "id long"))


def test_a_column_of_the_wrong_type_is_the_engines_schema_error(spark, table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA)
    data = spark.createDataFrame([(1, 2, "a")], "id long, name long, p string")
    with pytest.raises(SchemaMismatchError):
        write_dataframe(table.context(), data)
    assert list(Path(table_path).rglob("*.parquet")) == []


def test_reading_a_vanished_file_fails_with_the_engines_error(spark, tmp_path: Path) -> None:
    path = _copy("simple_table", tmp_path)
    table = DeltaTable(path)
    snapshot = table.snapshot()
    for f in Path(path).glob("*.parquet"):
        f.unlink()
    with pytest.raises(DataFileNotFoundError), engine_errors_from_executors():
        target_dataframe(spark, table.context(snapshot), snapshot.add_actions).collect()


def test_a_large_file_is_shared_by_tasks_and_reads_the_same(spark, table_path: str, monkeypatch) -> None:
    import deltalake

    from airflow_delta.spark import file_tasks

    data = pa.table({"id": pa.array(range(20_000), pa.int64())})
    deltalake.write_deltalake(
        table_path, data, configuration={"delta.enableDeletionVectors": "true"},
        writer_properties=deltalake.WriterProperties(max_row_group_size=2_000),
    )
    table = DeltaTable(table_path)
    table.delete("id % 3 = 0")
    snapshot = table.snapshot()
    # The engine's reader splits files itself (Spark's splits by its own maxPartitionBytes).
    whole = sorted((r[FILE_COLUMN], r[ROW_COLUMN], r["id"]) for r in target_dataframe(spark, table.context(snapshot), snapshot.add_actions, reader="engine").collect())
    monkeypatch.setattr(file_tasks, "_SPLIT_BYTES", 1)
    split = target_dataframe(spark, table.context(snapshot), snapshot.add_actions, reader="engine")
    assert split.rdd.getNumPartitions() > 1
    assert sorted((r[FILE_COLUMN], r[ROW_COLUMN], r["id"]) for r in split.collect()) == whole
    assert [row_id for _, _, row_id in whole] == sorted(r["id"] for r in read_with_kernel(table_path))
