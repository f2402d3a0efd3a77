"""Filters with long IN lists, ours vs delta-rs: the cost must grow linearly with the list.

Input (built once, cached under ``benchmarks/.data/filter_in_list``): a table of 100
files of 1,000 rows each (``id`` 0..99,999, one contiguous range per file), written by
us, with statistics. Each case filters it with ``id IN (...)`` of N even values from
0..2N (so the list spans the files holding ids below 2N) for N = 2,000, 20,000 and
200,000: ours ``DeltaTable(p).snapshot().to_arrow(filter="id IN (...)")`` (parse,
bind, prune files by binary search over the sorted values, read, filter; each call's
text differs, so no call reuses a cached parse); delta-rs
``DeltaTable(p).to_pyarrow_table(filters=[("id", "in", values)])``. The SQL text is
built in the untimed warm-up call (a cache per process), as a DAG would hold it already.

Going from 2,000 to 200,000 values multiplies the list by 100: linear work multiplies
our time by at most ~100 (before, binding was quadratic-like: ~45 s for 200,000 values).
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

from benchmarks._harness import Case, data_dir

FILES = 100
ROWS_PER_FILE = 1_000
SIZES = (2_000, 20_000, 200_000)


def _build(path: Path) -> Path:
    table_path = path / "table"
    if (table_path / "_delta_log").exists():
        return table_path
    import pyarrow as pa

    from airflow_delta.engine import DeltaTable

    table = DeltaTable.create(str(table_path), pa.schema([("id", pa.int64()), ("v", pa.string())]))
    for i in range(FILES):
        ids = pa.array(range(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE), pa.int64())
        table.append(pa.table({"id": ids, "v": pa.array([f"r{j}" for j in range(len(ids))])}))
    return table_path


def cases() -> list[Case]:
    path = _build(data_dir("filter_in_list"))
    return [Case(f"to_arrow(id IN {n:,} values)", ours="ours", theirs="delta_rs", args=(str(path), n), repeat=3) for n in SIZES]


@functools.cache
def _values(n: int) -> list[int]:
    return list(range(0, 2 * n, 2))


@functools.cache
def _sql(n: int) -> str:
    return "id IN (" + ", ".join(map(str, _values(n))) + ")"


def _expected_rows(n: int) -> int:
    return len([v for v in _values(n) if v < FILES * ROWS_PER_FILE])


_calls = itertools.count()


def ours(path: str, n: int) -> int:
    from airflow_delta.engine import DeltaTable

    # A different text each call (an always-true extra term), so that every timed call
    # parses and binds the list instead of reusing the previous call's parse.
    sql = f"{_sql(n)} AND id > -{next(_calls) + 1}"
    rows = DeltaTable(path).snapshot().to_arrow(filter=sql).num_rows
    assert rows == _expected_rows(n), rows
    return rows


def delta_rs(path: str, n: int) -> int:
    import deltalake

    rows = deltalake.DeltaTable(path).to_pyarrow_table(filters=[("id", "in", _values(n))]).num_rows
    assert rows == _expected_rows(n), rows
    return rows
