"""Duration properties Delta accepts never make a table unusable (issue 20, item 13).

``interval 2147483647 days`` is longer than a Python ``timedelta`` holds; Delta accepts
it (its long of microseconds wraps to ~34,000 years), delta-rs reads the table. Every
verb works on such a table, with the retention capped at the longest Delta can hold
("forever"). A duration Delta refuses (months) fails only the operations that need it,
with a typed error, never a read.
"""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable, InvalidTablePropertyError
from airflow_delta.engine.model.properties import MAX_INTERVAL
from tests.oracles import read_with_deltars

HUGE = "interval 2147483647 days"


def _delta_rs_table(path: Path, configuration: dict[str, str]) -> str:
    deltalake.write_deltalake(str(path), pa.table({"id": pa.array([1, 2, 3], pa.int64())}), configuration=configuration)
    deltalake.DeltaTable(str(path)).delete("id = 2")  # a tombstone for vacuum to weigh
    return str(path)


@pytest.mark.parametrize("key", ["delta.deletedFileRetentionDuration", "delta.logRetentionDuration"])
def test_every_verb_works_on_a_table_with_a_retention_delta_accepts(tmp_path: Path, key: str) -> None:
    root = _delta_rs_table(tmp_path / "t", {key: HUGE, "delta.setTransactionRetentionDuration": HUGE})
    table = DeltaTable(root)
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [1, 3]
    assert table.snapshot().properties.duration(key) == MAX_INTERVAL
    for mode in ("full", "lite"):
        plan = table.vacuum(dry_run=True, mode=mode)
        if key == "delta.deletedFileRetentionDuration":  # kept forever: nothing to delete
            assert plan.num_files_to_delete == 0
    table.vacuum()
    report = table.health()
    if key == "delta.deletedFileRetentionDuration":
        assert report.vacuumable_tombstones == 0
    table.append(pa.table({"id": pa.array([4], pa.int64())}))
    table.checkpoint()
    table.cleanup_log()
    assert sorted(row["id"] for row in read_with_deltars(root)) == [1, 3, 4]
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [1, 3, 4]


def test_a_duration_delta_refuses_fails_only_the_operations_that_need_it(tmp_path: Path) -> None:
    # delta-rs stores it as given; Delta's own readers ignore it until a VACUUM needs it.
    root = _delta_rs_table(tmp_path / "t", {"delta.deletedFileRetentionDuration": "interval 1 month"})
    table = DeltaTable(root)
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [1, 3]
    table.append(pa.table({"id": pa.array([4], pa.int64())}))  # its post-commit checkpoint may fail, the commit stands
    with pytest.raises(InvalidTablePropertyError, match=r"delta\.deletedFileRetentionDuration.*months and years"):
        table.vacuum(dry_run=True)
    with pytest.raises(InvalidTablePropertyError, match=r"delta\.deletedFileRetentionDuration"):
        table.checkpoint()
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist()) == [1, 3, 4]
