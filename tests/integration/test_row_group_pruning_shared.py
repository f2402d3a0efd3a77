"""Row-group pruning on every shared table (Spark- and delta-rs-written parquet): never a false negative.

For each readable table, a few of its files and each top-level column of a type a filter
can compare, predicates built from values the file holds (its smallest, middle and largest)
must match the same physical rows whether the file is read through row-group pruning
(footer statistics, only the predicate's columns) or read in full (once per file, every
predicate evaluated on that read). This covers writers' statistics as they are found:
INT96 and nanosecond timestamps, decimals stored as INT32, INT64 and fixed-length bytes,
dictionary pages, NULL-only groups, old writers' statistics.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.errors import DeltaError
from airflow_delta.engine.expressions import parse_predicate
from airflow_delta.engine.expressions.arrow_values import evaluate
from airflow_delta.engine.model.actions import DELETION_VECTOR_TYPE
from airflow_delta.engine.model.arrow_numpy import mask_to_numpy
from airflow_delta.engine.operations.delete import matching_rows
from airflow_delta.engine.read.scan import read_data

FILES_PER_TABLE = 3


def _tables(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "_delta_log").is_dir())


def _literal(value: Any, t: pa.DataType) -> str | None:
    """``value`` of column type ``t`` as a SQL literal of that type (None: not a type this test covers)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if pa.types.is_integer(t):
        return str(value)
    if pa.types.is_floating(t):
        return f"CAST('{value!r}' AS {'FLOAT' if pa.types.is_float32(t) else 'DOUBLE'})".replace("nan", "NaN").replace(
            "inf", "Infinity"
        )
    if pa.types.is_decimal(t) and isinstance(value, Decimal):
        return f"CAST('{value}' AS DECIMAL({t.precision},{t.scale}))"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
    if pa.types.is_date(t) and isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if pa.types.is_timestamp(t) and isinstance(value, dt.datetime):
        text = value.replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")
        return f"TIMESTAMP '{text}'" if t.tz else f"TIMESTAMP_NTZ '{text}'"
    return None


def _sample_values(column: pa.ChunkedArray) -> list[Any]:
    valid = column.drop_null()
    if len(valid) == 0:
        return []
    ordered = valid.take(pc.sort_indices(valid))
    return [ordered[0].as_py(), ordered[len(ordered) // 2].as_py(), ordered[-1].as_py()]


def _compare_table(table_dir: Path) -> int:
    """How many (file, predicate) pairs of the table were compared; 0 for a table that does not load."""
    try:
        snapshot = DeltaTable(str(table_dir)).snapshot()
        files = snapshot.add_actions.slice(0, FILES_PER_TABLE)
    except DeltaError:
        return 0  # some shared tables are broken on purpose
    if files.num_rows == 0:
        return 0
    # Physical rows on both sides: the DVs are left out.
    files = files.set_column(
        files.schema.get_field_index("deletion_vector"), "deletion_vector", pa.nulls(files.num_rows, DELETION_VECTOR_TYPE)
    )
    partition_columns = set(snapshot.partition_columns)
    compared = 0
    for i in range(files.num_rows):
        file = files.slice(i, 1)
        try:
            data = read_data(snapshot, file)
        except DeltaError:
            continue  # a data file the table's own tests expect to fail
        for field in snapshot.schema:
            if field.name in partition_columns or pa.types.is_nested(field.type):
                continue
            predicates = [f"`{field.name}` IS NULL", f"`{field.name}` IS NOT NULL"]
            for value in _sample_values(data.column(field.name)):
                literal = _literal(value, field.type)
                if literal is not None:
                    predicates += [f"`{field.name}` {op} {literal}" for op in ("=", "<", ">=", "!=")]
            for predicate in predicates:
                try:
                    pruned = matching_rows(snapshot, file, predicate)[0]
                except DeltaError:
                    continue  # a type the filter language does not compare (e.g. variant)
                # In full: the file as read above (every row group), filtered as matching_rows
                # filters (NULL is no match); one read of the file serves all its predicates.
                expression = parse_predicate(predicate, snapshot.schema).to_arrow(nulls_as_false=True)
                full = np.flatnonzero(mask_to_numpy(evaluate(data, expression)))
                assert pruned.tolist() == full.tolist(), f"{table_dir.name}: {predicate}"
                compared += 1
    return compared


def test_pruned_and_full_reads_match_the_same_rows_on_every_shared_table(shared_tables: Path) -> None:
    compared = {name: _compare_table(shared_tables / name) for name in _tables(shared_tables)}
    covered = [name for name, n in compared.items() if n]
    # Most shared tables have comparable columns; a drop means the test stopped looking.
    assert len(covered) >= 30, f"only {len(covered)} tables compared: {covered}"
    assert sum(compared.values()) >= 1_000


def test_dv_deletes_on_a_delta_rs_table_with_small_row_groups_and_truncated_statistics(tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    from tests.oracles import read_with_deltars, read_with_kernel

    def normal(rows: list[dict[str, Any]]) -> list[str]:  # NaN != NaN: compare the rows' text
        return sorted(repr(sorted(r.items())) for r in rows)

    n = 2_000
    ids = list(range(n))
    rows = pa.table({
        "id": pa.array(ids, pa.int64()),
        # Long strings sharing long prefixes, multi-byte and astral characters: truncated bounds.
        "s": pa.array([None if i % 97 == 0 else f"{'prefix-' * 5}\u00e9\U0001f600{i % 50:04d}" for i in ids]),
        "d": pa.array([Decimal(i) / 100 - 5 for i in ids], pa.decimal128(38, 2)),
        "f": pa.array([float("nan") if i % 13 == 0 else i * 0.5 for i in ids], pa.float64()),
    })
    path = str(tmp_path / "t")
    deltalake.write_deltalake(
        path, rows,
        writer_properties=deltalake.WriterProperties(max_row_group_size=128, statistics_truncate_length=8),
    )
    table = DeltaTable(path)
    with table.transaction() as txn:
        txn.set_properties({"delta.enableDeletionVectors": "true"})
        txn.commit("SET TBLPROPERTIES")
    kept = rows.to_pylist()
    for predicate, deleted in [
        ("id = 1234", lambda r: r["id"] == 1234),
        (f"s = '{'prefix-' * 5}\u00e9\U0001f6000007'", lambda r: r["s"] == f"{'prefix-' * 5}\u00e9\U0001f6000007"),
        ("d >= CAST('14.95' AS DECIMAL(38,2))", lambda r: r["d"] >= Decimal("14.95")),
        ("f > 999.0", lambda r: r["f"] != r["f"] or r["f"] > 999.0),  # NaN is above every number
        ("s IS NULL AND id < 500", lambda r: r["s"] is None and r["id"] < 500),
    ]:
        expected_deleted = sum(1 for r in kept if deleted(r))
        result = table.delete(predicate)
        assert result.num_deleted_rows == expected_deleted, predicate
        kept = [r for r in kept if not deleted(r)]
        assert normal(table.snapshot().to_arrow().to_pylist()) == normal(kept), predicate
    assert normal(read_with_deltars(path)) == normal(kept)
    assert normal(read_with_kernel(path)) == normal(kept)
