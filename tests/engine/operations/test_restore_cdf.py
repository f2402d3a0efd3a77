"""RESTORE on a Change Data Feed table: committed without change files, as Delta does; readers see its files come and go."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from airflow_delta.engine import DeltaTable
from tests.oracles import assert_oracles_read, read_change_feed_with_deltars


def test_restore_needs_no_change_files(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64())])
    table = DeltaTable.create(path, schema, properties={"delta.enableChangeDataFeed": "true"})
    table.append(pa.table({"id": [1, 2, 3]}, schema=schema))
    table.delete("id = 2")  # a rewrite with change files
    result = table.restore(1)
    assert result.version == 3
    assert not any(line.startswith('{"cdc"') for line in (Path(path) / "_delta_log" / f"{3:020d}.json").read_text().splitlines())
    # The rewritten file's rows leave, the restored file's rows come back: delta-rs reads the files as the change.
    feed = read_change_feed_with_deltars(path, 3)
    assert sorted((row["id"], row["_change_type"]) for row in feed) == [
        (1, "delete"), (1, "insert"), (2, "insert"), (3, "delete"), (3, "insert")
    ]
    assert_oracles_read(path, [{"id": 1}, {"id": 2}, {"id": 3}])
