"""``DeltaTable.checkpoint``: forced kinds, the size and version it reports, and the log cleanup after it.

Whether a checkpoint is usable is decided by delta-rs and delta-kernel-rs reading the
table after the commits it replaces were cleaned up, so that they must start from it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import CheckpointOptions, DeltaTable, InvalidArgumentError
from tests.oracles import kernel_version, read_with_deltars, read_with_kernel

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
DAY_S = 86_400


def _table(path: str, commits: int, **properties: str) -> DeltaTable:
    table = DeltaTable.create(path, SCHEMA, partition_by=["p"], properties={"delta.checkpointInterval": "1000", **properties})
    for i in range(commits):
        table.append(pa.table({"id": pa.array([i, i + 100], pa.int64()), "p": ["a", "b"]}, schema=SCHEMA))
    return table


def _age_commits(table: DeltaTable, days: int) -> None:
    """Make every commit file ``days`` old: log cleanup reads commit times from file times."""
    then = time.time() - days * DAY_S
    for name in os.listdir(table.log_dir):
        if name.endswith((".json", ".crc")):
            os.utime(Path(table.log_dir, name), (then, then))


@pytest.mark.parametrize(
    ("kind", "parts", "names"),
    [
        (None, 2, [f"{12:020d}.checkpoint.parquet"]),
        ("classic", 2, [f"{12:020d}.checkpoint.parquet"]),
        ("multi-part", 3, [f"{12:020d}.checkpoint.{i:010d}.{3:010d}.parquet" for i in (1, 2, 3)]),
    ],
)
def test_a_forced_kind_is_written_reported_and_read_by_both_oracles(
    table_path: str, kind: str | None, parts: int, names: list[str]
) -> None:
    table = _table(table_path, 12, **{"delta.logRetentionDuration": "interval 1 days"})
    expected = read_with_deltars(table_path)
    _age_commits(table, 3)
    result = table.checkpoint(options=CheckpointOptions(kind=kind, parts=parts))
    assert result.version == 12 and result.kind == (kind or "classic")
    assert [Path(f).name for f in result.files] == names
    assert result.size_in_bytes == sum(os.path.getsize(f) for f in result.files) > 0
    # The cleanup after it removed every commit before 12: readers must start from the checkpoint.
    assert {Path(f).name for f in result.cleaned_log_files} >= {f"{v:020d}.json" for v in range(12)}
    assert not Path(table.log_dir, f"{11:020d}.json").exists()
    assert read_with_deltars(table_path) == expected == read_with_kernel(table_path)
    assert kernel_version(table_path) == 12


def test_without_cleanup_the_log_stays(table_path: str) -> None:
    table = _table(table_path, 3, **{"delta.logRetentionDuration": "interval 1 days"})
    _age_commits(table, 3)
    result = table.checkpoint(options=CheckpointOptions(cleanup_log=False))
    assert result.cleaned_log_files == ()
    assert Path(table.log_dir, f"{0:020d}.json").exists()


def test_a_table_whose_automatic_checkpoints_were_missed(table_path: str) -> None:
    table = _table(table_path, 15)
    assert not any(".checkpoint." in n for n in os.listdir(table.log_dir))
    result = table.checkpoint()
    assert result.version == 15 and result.kind == "classic"
    assert result.cleaned_log_files == ()  # nothing is older than the 30-day default retention
    assert table.snapshot().log_segment.checkpoint_version == 15
    assert read_with_kernel(table_path) == read_with_deltars(table_path)


def test_a_given_version(table_path: str) -> None:
    table = _table(table_path, 4)
    result = table.checkpoint(2)
    assert result.version == 2 and Path(table.log_dir, f"{2:020d}.checkpoint.parquet").exists()
    assert table.snapshot(version=3).log_segment.checkpoint_version == 2


def test_v2_is_the_policy_s_kind_and_can_be_forced_only_where_the_protocol_allows(table_path: str, tmp_path: Path) -> None:
    v2 = _table(table_path, 3, **{"delta.checkpointPolicy": "v2"})
    expected = read_with_deltars(table_path)
    result = v2.checkpoint()
    assert result.kind == "v2" and any("_sidecars" in f for f in result.files)
    assert result.size_in_bytes == sum(os.path.getsize(f) for f in result.files)
    assert read_with_kernel(table_path) == expected
    for refused in ("classic", "multi-part"):
        with pytest.raises(InvalidArgumentError, match="kind"):
            v2.checkpoint(options=CheckpointOptions(kind=refused))
    classic = _table(str(tmp_path / "classic"), 2)
    with pytest.raises(InvalidArgumentError, match="v2Checkpoint"):
        classic.checkpoint(options=CheckpointOptions(kind="v2"))
    assert not any(".checkpoint." in n for n in os.listdir(classic.log_dir))
