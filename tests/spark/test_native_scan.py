"""Spark's own parquet reader for target scans against the engine's reader, and when it is not used.

The engine's reader is itself checked against delta-rs and delta-kernel-rs
(tests/spark/test_file_tasks.py); here both readers must give exactly the same rows,
including the file and row columns the rest of the pipeline joins on, and DML run with
either reader must leave tables that both oracles read as a plain Python model expects.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructField

from airflow_delta.engine import DataFileNotFoundError, DeltaTable, InvalidArgumentError, Protocol
from airflow_delta.spark import native_scan
from airflow_delta.spark.delete import run_delete
from airflow_delta.spark.file_tasks import FILE_COLUMN, ROW_COLUMN, _target_schema, spark_schema, target_dataframe
from airflow_delta.spark.merge import run_merge
from airflow_delta.spark.native_scan import chosen_reader, hadoop_file_uri, spark_reader_refusal, spark_target_dataframe
from airflow_delta.spark.specs import (
    DeleteSpec,
    ExecutionOptions,
    MergeClause,
    MergeSource,
    MergeSpec,
    TableRef,
    TaskIdentity,
    UpdateSpec,
)
from airflow_delta.spark.update import run_update
from tests.conftest import shared_tables_dir
from tests.oracles import assert_oracles_read

pytestmark = pytest.mark.slow

# Shared tables Spark's reader reads: DVs, column mapping (name), partitions of many types
# (null, special characters, dates, timestamps, decimals, binary), timestamps at the edges of
# their range, nested columns. (The engine's reader, the reference here, is checked against
# delta-rs and delta-kernel-rs in test_file_tasks.py.)
NATIVE_TABLES = [
    "table-with-dv-small",
    "table_with_column_mapping",
    "table_with_partitioning_mapping",
    "partition-type-primitives",
    "delta-2.2.0-partitioned-types",
    "delta-0.8.0-special-partition",
    "table_with_edge_timestamps",
    "delta-1.2.1-only-struct-stats",
]

# Partition values that become escaped directory names (Spark's and delta-rs's escaping).
AWKWARD_VALUES = ["a b", "50%", "x=y", "ü-ñ", "a/b", "c:d", "#h", "plain"]
_task_numbers = itertools.count()


def _rows(df: Any) -> list[str]:
    return sorted(repr(row.asDict(recursive=True)) for row in df.collect())


def _context_and_files(path: str) -> tuple[Any, pa.Table]:
    table = DeltaTable(path)
    snapshot = table.snapshot()
    return table.context(snapshot), snapshot.add_actions


def _spark_read(spark: Any, context: Any, files: pa.Table, columns: list[str] | None = None) -> Any:
    """Spark's reader, never the fallback: a refusal fails the test."""
    frame = spark_target_dataframe(
        spark, context, files, _target_schema(context, columns), FILE_COLUMN, ROW_COLUMN, required=True
    )
    assert frame is not None
    return frame


@pytest.mark.parametrize("name", NATIVE_TABLES)
def test_both_readers_give_the_same_rows_files_and_positions(spark: Any, name: str) -> None:
    path = str(shared_tables_dir() / name)
    context, files = _context_and_files(path)
    by_spark = _rows(_spark_read(spark, context, files))
    assert by_spark == _rows(target_dataframe(spark, context, files, reader="engine"))


def test_a_column_subset_reads_the_same(spark: Any) -> None:
    path = str(shared_tables_dir() / "delta-2.2.0-partitioned-types")
    context, files = _context_and_files(path)
    names = spark_schema(context).names
    columns = [names[-1], names[0]]  # a partition column among them, out of table order
    engine = target_dataframe(spark, context, files, columns, reader="engine")
    assert _rows(_spark_read(spark, context, files, columns)) == _rows(engine)


def _awkward_table(path: str, **properties: str) -> DeltaTable:
    schema = pa.schema([("id", pa.int64()), ("part", pa.string()), ("score", pa.float64())])
    table = DeltaTable.create(path, schema, ["part"], properties)
    rows = [{"id": i, "part": AWKWARD_VALUES[i % len(AWKWARD_VALUES)], "score": i / 4} for i in range(40)]
    table.append(pa.Table.from_pylist(rows, schema=schema))
    return table


@pytest.mark.parametrize("mapping", ["none", "name"])
def test_escaped_partition_directories_map_back_to_the_log_paths(spark: Any, tmp_path: Path, mapping: str) -> None:
    path = str(tmp_path / "t")
    _awkward_table(path, **({"delta.columnMapping.mode": mapping} if mapping != "none" else {}))
    context, files = _context_and_files(path)
    frame = _spark_read(spark, context, files)
    assert _rows(frame) == _rows(target_dataframe(spark, context, files, reader="engine"))
    logged = set(files.column("path").to_pylist())
    assert {row[FILE_COLUMN] for row in frame.select(FILE_COLUMN).distinct().collect()} == logged


# Path segments: any text but the separator, NUL, and "." / ".." (which Hadoop normalizes away).
_segment = st.text(st.characters(exclude_characters="/\x00", exclude_categories=("Cs",)), min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segments=st.lists(_segment, min_size=1, max_size=4))
def test_file_uris_are_hadoops_own(spark: Any, segments: list[str]) -> None:
    local_path = "/" + "/".join(segments)
    jvm_path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path
    assert hadoop_file_uri(local_path) == jvm_path("file:" + local_path).toUri().toString()


def _refusal(context: Any, local_paths: list[str] | None = None) -> str | None:
    fields = [f for f in spark_schema(context).fields if f.name not in context.partition_columns]
    return spark_reader_refusal(context, fields, ["/t/a.parquet"] if local_paths is None else local_paths)


def test_refusals_name_what_spark_would_read_differently() -> None:
    context, _ = _context_and_files(str(shared_tables_dir() / "table_with_column_mapping"))
    assert _refusal(context) is None
    assert "local file system" in (spark_reader_refusal(context, [], None) or "")
    id_mode = replace(
        context, metadata=replace(context.metadata, configuration={**context.metadata.configuration, "delta.columnMapping.mode": "id"})
    )
    assert "'id'" in (_refusal(id_mode) or "")
    widened = replace(
        context,
        protocol=Protocol(3, 7, frozenset({"columnMapping", "typeWidening"}), frozenset({"columnMapping", "typeWidening"})),
    )
    assert "typeWidening" in (_refusal(widened) or "")
    assert "glob" in (_refusal(context, ["/t/p=[x]/a.parquet"]) or "")
    nested = StructField("s", spark_schema(_context_and_files(str(shared_tables_dir() / "delta-1.2.1-only-struct-stats"))[0])["struct"].dataType)
    assert "nested" in (spark_reader_refusal(context, [nested], ["/t/a.parquet"]) or "")
    variant, _ = _context_and_files(str(shared_tables_dir() / "spark-variant-checkpoint"))
    assert "variant" in (_refusal(variant) or "")


def test_auto_falls_back_to_the_engine_where_spark_is_refused(spark: Any) -> None:
    context, files = _context_and_files(str(shared_tables_dir() / "spark-variant-checkpoint"))
    assert (
        spark_target_dataframe(
            spark, context, files, _target_schema(context, None), FILE_COLUMN, ROW_COLUMN, required=False
        )
        is None
    )
    assert _rows(target_dataframe(spark, context, files)) == _rows(target_dataframe(spark, context, files, reader="engine"))
    with pytest.raises(InvalidArgumentError, match="variant"):
        target_dataframe(spark, context, files, reader="spark")


def test_too_many_deleted_rows_fall_back(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    context, files = _context_and_files(str(shared_tables_dir() / "table-with-dv-small"))
    monkeypatch.setattr(native_scan, "MAX_DELETED_ROWS", 1)
    with pytest.raises(InvalidArgumentError, match="deletion vectors delete"):
        target_dataframe(spark, context, files, reader="spark")
    assert _rows(target_dataframe(spark, context, files)) == _rows(target_dataframe(spark, context, files, reader="engine"))


def test_a_vanished_file_is_the_engines_error(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _awkward_table(path)
    context, files = _context_and_files(path)
    (Path(path) / unquote(files.column("path")[0].as_py())).unlink()
    with pytest.raises(DataFileNotFoundError):
        target_dataframe(spark, context, files, reader="spark").collect()


def test_a_file_gone_after_planning_fails_the_read_even_when_the_session_skips_missing_files(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    _awkward_table(path)
    context, files = _context_and_files(path)
    frame = target_dataframe(spark, context, files, reader="spark")
    (Path(path) / unquote(files.column("path")[0].as_py())).unlink()
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")
    try:
        with pytest.raises(Exception, match=r"(?i)FileNotFound|does not exist"):
            frame.collect()
    finally:
        spark.conf.unset("spark.sql.files.ignoreMissingFiles")


def test_auto_takes_sparks_reader_only_where_it_measured_faster() -> None:
    assert chosen_reader("auto", "join") == "spark"
    assert chosen_reader("auto", "find") == "engine"
    assert chosen_reader("auto", "copy") == "engine"
    assert {chosen_reader(r, p) for r in ("spark", "engine") for p in ("join", "copy")} == {"spark", "engine"}
    assert chosen_reader("spark", "copy") == "spark" and chosen_reader("engine", "join") == "engine"
    with pytest.raises(InvalidArgumentError, match="purpose"):
        chosen_reader("auto", "scan")


def test_an_unknown_reader_is_refused(spark: Any) -> None:
    context, files = _context_and_files(str(shared_tables_dir() / "simple_table"))
    with pytest.raises(InvalidArgumentError, match="reader"):
        target_dataframe(spark, context, files, reader="arrow")
    with pytest.raises(InvalidArgumentError, match="reader"):
        ExecutionOptions(reader="fast")
    assert ExecutionOptions.from_obj("options", {"reader": "engine"}).reader == "engine"


# DML through each reader: the same tables afterwards, as a Python model says.


def _options(reader: str) -> ExecutionOptions:
    # driver_max_bytes=0: the files are read by Spark tasks, where the reader applies.
    return ExecutionOptions(backoff_initial_seconds=0.0, backoff_max_seconds=0.0, driver_max_bytes=0, reader=reader)


def _identity(name: str) -> TaskIdentity:
    return TaskIdentity("dag", f"{name}-{next(_task_numbers)}", "run")


def _model_rows() -> list[dict[str, Any]]:
    return [{"id": i, "part": AWKWARD_VALUES[i % len(AWKWARD_VALUES)], "score": i / 4} for i in range(40)]


@pytest.mark.parametrize("reader", ["spark", "engine"])
@pytest.mark.parametrize("dvs", [True, False])
def test_delete_update_merge_leave_the_same_table_with_either_reader(
    spark: Any, tmp_path: Path, reader: str, dvs: bool
) -> None:
    path = str(tmp_path / "t")
    _awkward_table(path, **({"delta.enableDeletionVectors": "true"} if dvs else {}))
    options = _options(reader)
    expected = _model_rows()

    run_delete(spark, DeleteSpec(TableRef(path), "id % 3 = 0", _identity("delete"), options))
    expected = [r for r in expected if r["id"] % 3 != 0]
    assert_oracles_read(path, expected)

    run_update(spark, UpdateSpec(TableRef(path), {"score": "score * 10"}, "id % 4 = 1", _identity("update"), options))
    expected = [{**r, "score": r["score"] * 10} if r["id"] % 4 == 1 else r for r in expected]
    assert_oracles_read(path, expected)

    source_path = str(tmp_path / "source.parquet")
    source = [{"id": i, "part": "new", "score": -1.0} for i in range(30, 50)]
    pq.write_table(pa.Table.from_pylist(source, schema=pa.schema([("id", pa.int64()), ("part", pa.string()), ("score", pa.float64())])), source_path)
    run_merge(
        spark,
        MergeSpec(
            target=TableRef(path),
            source=MergeSource(parquet=source_path),
            on="t.id = s.id",
            clauses=(MergeClause("matched_update", assignments={"score": "s.score"}), MergeClause("not_matched_insert", star=True)),
            identity=_identity("merge"),
            source_alias="s",
            target_alias="t",
            options=options,
        ),
    )
    present = {r["id"] for r in expected}
    expected = [{**r, "score": -1.0} if r["id"] >= 30 else r for r in expected]
    expected += [r for r in source if r["id"] not in present]
    assert_oracles_read(path, expected)
