"""Commits in raw UTF-8 (issue 10, item 13) are read back whole by every path that reads them.

JSON written as raw UTF-8 (as Spark writes it, and we do) carries U+2028, U+2029 and U+0085
unescaped inside strings; a reader that splits a decoded str into lines would cut a JSON
line there.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_delta.engine.table import DeltaTable
from airflow_delta.engine.write import data_files
from airflow_delta.engine.write.options import CommitOptions

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def _rows(ids: range, part: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "p": [part] * len(ids)}, schema=SCHEMA)


def _table(table_path: str) -> DeltaTable:
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"])
    table.append(_rows(range(10), "a"))
    table.append(_rows(range(10, 20), "b"))
    return table


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_a_winner_with_unicode_line_separators_in_its_strings_is_read_whole(table_path: str, separator: str) -> None:
    """Raw UTF-8 JSON keeps U+2028/U+2029/U+0085 unescaped: conflict checks must not split lines at them."""
    table = _table(table_path)
    old = table.snapshot()
    with table.transaction() as winner:
        winner.add_files(data_files.write_data_files(winner.snapshot, _rows(range(5), f"x{separator}y"), written=winner.written_files))
        winner.commit("WRITE", user_metadata=f"a{separator}b")
    assert table.append(_rows(range(5), "z"), commit=CommitOptions()).version == 4
    late = table.transaction(snapshot=old)
    with late:
        late.add_files(data_files.write_data_files(old, _rows(range(5), "q"), written=late.written_files))
        assert late.commit("WRITE") == 5  # a blind append after reading both winners
    assert table.snapshot().to_arrow(filter="p = 'q'").num_rows == 5
