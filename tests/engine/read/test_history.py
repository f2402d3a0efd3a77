"""``read_history`` and timestamp -> version resolution (file times and in-commit timestamps)."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_delta.engine.errors import (
    CorruptCommitError,
    InvalidTimestampError,
    TableNotFoundError,
    VersionNotFoundError,
)
from airflow_delta.engine.read.history import (
    extract_commit_info,
    monotonic_timestamps,
    read_history,
    timestamp_of_version,
    to_epoch_ms,
    version_at_timestamp,
)
from airflow_delta.engine.storage.fileio import LocalFileIO
from tests.engine.read import log_builders as b

IO = LocalFileIO()
T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def _table(root: str, mtimes: list[int]) -> None:
    for v, mtime in enumerate(mtimes):
        head = [b.protocol(), b.metadata()] if v == 0 else []
        body = [] if v == 2 else [b.commit_info(f"OP{v}", operationParameters={"v": v})]
        b.write_commit(root, v, [*body, *head, b.add(f"f{v}")], mtime_ms=mtime)


# ------------------------------------------------------------------ inputs


def test_to_epoch_ms() -> None:
    assert to_epoch_ms(T0) == T0
    assert to_epoch_ms(datetime(2023, 11, 14, 22, 13, 20)) == T0  # naive = UTC
    assert to_epoch_ms(datetime(2023, 11, 14, 23, 13, 20, tzinfo=timezone(timedelta(hours=1)))) == T0
    assert to_epoch_ms(datetime(2023, 11, 14, 22, 13, 20, 999_999, tzinfo=UTC)) == T0 + 999
    assert to_epoch_ms("2023-11-14T22:13:20Z") == T0
    assert to_epoch_ms("2023-11-14 22:13:20.5+00:00") == T0 + 500
    assert to_epoch_ms(date(1970, 1, 2)) == 86_400_000
    assert to_epoch_ms("1970-01-02") == 86_400_000
    for bad in ("yesterday", True, 1.5, None):
        with pytest.raises(InvalidTimestampError):
            to_epoch_ms(bad)  # type: ignore[arg-type]


def test_monotonic_timestamps() -> None:
    assert monotonic_timestamps([5, 3, 3, 10, 9]).tolist() == [5, 6, 7, 10, 11]
    assert monotonic_timestamps([]).tolist() == []


def test_extract_commit_info() -> None:
    data = b'{"add":{"path":"a"}}\n{"commitInfo":{"operation":"X"}}\n'
    assert extract_commit_info(data, "f") == {"operation": "X"}
    assert extract_commit_info(b'{ "commitInfo" : {"operation": "Y"}}\n', "f") == {"operation": "Y"}
    add = b'{"add":{"path":"a","partitionValues":{},"size":1,"modificationTime":1,"dataChange":true}}\n'
    assert extract_commit_info(add, "f") is None
    with pytest.raises(CorruptCommitError):  # the full parse checks every action it reads
        extract_commit_info(b'{"add":{"path":"a"}}\n', "f")


# ------------------------------------------------------------------ history


def test_history_newest_first(table_path: str) -> None:
    _table(table_path, [T0, T0 + 1000, T0 + 2000, T0 + 3000])
    history = read_history(IO, table_path)
    assert [h["version"] for h in history] == [3, 2, 1, 0]
    assert [h["timestamp"] for h in history] == [T0 + 3000, T0 + 2000, T0 + 1000, T0]
    assert history[0]["operation"] == "OP3" and history[0]["operationParameters"] == {"v": 3}
    assert history[1] == {"version": 2, "timestamp": T0 + 2000}  # no commitInfo: still listed
    assert [h["version"] for h in read_history(IO, table_path, limit=2)] == [3, 2]
    assert read_history(IO, table_path, limit=0) == []


def test_history_after_cleanup(table_path: str) -> None:
    _table(table_path, [T0, T0 + 1000, T0 + 2000, T0 + 3000])
    b.write_classic_checkpoint(table_path, 2, [b.protocol(), b.metadata(), b.add("f0"), b.add("f1"), b.add("f2")])
    for v in (0, 1):
        os.remove(b.commit_file(table_path, v))
    assert [h["version"] for h in read_history(IO, table_path)] == [3, 2]


def test_history_of_missing_table(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError):
        read_history(IO, str(tmp_path))


# ------------------------------------------------------------------ timestamp -> version


def test_version_at_timestamp(table_path: str) -> None:
    _table(table_path, [T0, T0 + 1000, T0 + 2000, T0 + 3000])
    assert version_at_timestamp(IO, table_path, T0) == 0
    assert version_at_timestamp(IO, table_path, T0 + 999) == 0
    assert version_at_timestamp(IO, table_path, T0 + 1000) == 1
    assert version_at_timestamp(IO, table_path, datetime(2023, 11, 14, 22, 13, 22, 500_000)) == 2
    assert version_at_timestamp(IO, table_path, T0 + 3000) == 3
    with pytest.raises(VersionNotFoundError, match="before the earliest") as err:
        version_at_timestamp(IO, table_path, T0 - 1)
    assert (err.value.earliest, err.value.latest) == (0, 3)
    with pytest.raises(VersionNotFoundError, match="after the latest"):
        version_at_timestamp(IO, table_path, T0 + 3001)


def test_file_times_are_made_monotonic(table_path: str) -> None:
    # Version 2's file is older than version 1's (clock skew): it counts as T0 + 5001.
    _table(table_path, [T0, T0 + 5000, T0 + 1000, T0 + 9000])
    assert version_at_timestamp(IO, table_path, T0 + 1500) == 0
    assert version_at_timestamp(IO, table_path, T0 + 5000) == 1
    assert version_at_timestamp(IO, table_path, T0 + 5001) == 2


def test_timestamp_after_cleanup(table_path: str) -> None:
    _table(table_path, [T0, T0 + 1000, T0 + 2000, T0 + 3000])
    b.write_classic_checkpoint(table_path, 2, [b.protocol(), b.metadata(), b.add("f0"), b.add("f1"), b.add("f2")])
    for v in (0, 1):
        os.remove(b.commit_file(table_path, v))
    with pytest.raises(VersionNotFoundError) as err:
        version_at_timestamp(IO, table_path, T0 + 1500)
    assert (err.value.earliest, err.value.latest) == (2, 3)
    assert version_at_timestamp(IO, table_path, T0 + 2500) == 2


def _ict_table(root: str) -> None:
    """Versions 0-1 by file time; in-commit timestamps from version 2 (enablement at 2)."""
    b.write_commit(root, 0, [b.commit_info(), b.protocol(1, 7, writer_features=["inCommitTimestamp"]), b.metadata()], mtime_ms=T0)
    b.write_commit(root, 1, [b.commit_info(), b.add("a")], mtime_ms=T0 + 1000)
    config = {"delta.enableInCommitTimestamps": "true", "delta.inCommitTimestampEnablementVersion": "2",
              "delta.inCommitTimestampEnablementTimestamp": str(T0 + 10_000)}
    b.write_commit(root, 2, [{"commitInfo": {"inCommitTimestamp": T0 + 10_000}}, b.metadata(configuration=config)],
                   mtime_ms=T0 + 99_000)
    b.write_commit(root, 3, [{"commitInfo": {"inCommitTimestamp": T0 + 20_000}}, b.add("b")], mtime_ms=T0 + 5)
    b.write_commit(root, 4, [{"commitInfo": {"inCommitTimestamp": T0 + 30_000}}, b.add("c")], mtime_ms=T0 + 6)


def test_in_commit_timestamps(table_path: str) -> None:
    _ict_table(table_path)
    assert version_at_timestamp(IO, table_path, T0 + 500) == 0
    assert version_at_timestamp(IO, table_path, T0 + 9_999) == 1  # before enablement: file times
    assert version_at_timestamp(IO, table_path, T0 + 10_000) == 2
    assert version_at_timestamp(IO, table_path, T0 + 25_000) == 3
    assert version_at_timestamp(IO, table_path, T0 + 30_000) == 4
    with pytest.raises(VersionNotFoundError, match="after the latest"):
        version_at_timestamp(IO, table_path, T0 + 30_001)
    history = read_history(IO, table_path)
    assert [h["timestamp"] for h in history] == [T0 + 30_000, T0 + 20_000, T0 + 10_000, T0 + 1000, T0]
    assert timestamp_of_version(IO, table_path, 3) == T0 + 20_000
    assert timestamp_of_version(IO, table_path, 1) == T0 + 1000


def test_shared_ict_table(shared_tables: Path) -> None:
    root = str(shared_tables / "cdc_ict_table")
    history = read_history(IO, root)
    assert [h["timestamp"] for h in history] == [h["inCommitTimestamp"] for h in history]
    # (Version 1's in-commit timestamp is deliberately out of order in this table, so
    # only the monotonic tail is a meaningful time-travel target.)
    for h in history[:2]:
        assert version_at_timestamp(IO, root, h["timestamp"]) == h["version"]


def test_non_monotonic_in_commit_timestamps(table_path: str) -> None:
    # A non-compliant writer: v2's ICT is before v1's. The spec defines an ICT as at least
    # 1 ms after the previous one, so v2 counts as committed at v1 + 1 ms. (A binary search
    # over the raw values would answer 2 for T0 + 150, although v2 came after T0 + 200.)
    raw = [T0 + 100, T0 + 200, T0 + 50, T0 + 300, T0 + 400, T0 + 500, T0 + 600]
    config = {"delta.enableInCommitTimestamps": "true"}
    for v, ict in enumerate(raw):
        head = [b.protocol(1, 7, writer_features=["inCommitTimestamp"]), b.metadata(configuration=config)] if v == 0 else []
        b.write_commit(table_path, v, [{"commitInfo": {"inCommitTimestamp": ict}}, *head, b.add(f"f{v}")],
                       mtime_ms=T0 + 99_000 - v)  # file times are irrelevant here
    effective = monotonic_timestamps(raw).tolist()
    assert effective[:4] == [T0 + 100, T0 + 200, T0 + 201, T0 + 300]
    for requested in range(T0 + 100, T0 + 601, 7):
        expected = max(v for v, t in enumerate(effective) if t <= requested)
        assert version_at_timestamp(IO, table_path, requested) == expected, requested
    assert version_at_timestamp(IO, table_path, T0 + 150) == 0
    assert version_at_timestamp(IO, table_path, T0 + 200) == 1
    assert version_at_timestamp(IO, table_path, T0 + 201) == 2
    with pytest.raises(VersionNotFoundError, match="before the earliest"):
        version_at_timestamp(IO, table_path, T0 + 60)  # v2's raw ICT, but v0 and v1 came later
    # History keeps what each commit recorded.
    assert [h["timestamp"] for h in read_history(IO, table_path)] == raw[::-1]


def test_shared_ict_table_non_monotonic(shared_tables: Path) -> None:
    # cdc_ict_table: v1's in-commit timestamp is a year *before* v0's (non-compliant).
    root = str(shared_tables / "cdc_ict_table")
    icts = {h["version"]: h["inCommitTimestamp"] for h in read_history(IO, root)}
    assert icts[1] < icts[0] < icts[2] < icts[3]
    assert version_at_timestamp(IO, root, icts[0]) == 0  # v1 counts as committed at icts[0] + 1
    assert version_at_timestamp(IO, root, icts[0] + 1) == 1
    assert version_at_timestamp(IO, root, icts[2] - 1) == 1
    assert version_at_timestamp(IO, root, icts[2]) == 2
    with pytest.raises(VersionNotFoundError, match="before the earliest"):
        version_at_timestamp(IO, root, icts[1])  # the table did not exist yet
    with pytest.raises(VersionNotFoundError, match="before the earliest"):
        version_at_timestamp(IO, root, icts[0] - 1)
