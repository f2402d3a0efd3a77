"""Fleet health: each record checked against delta-rs (files, VACUUM's dry run) or what the test did."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from airflow_delta.engine import (
    TableHealthRecord,
    discover_tables,
    fleet_health,
    iter_fleet_health,
    table_health_record,
)
from tests.engine.fleet.helpers import deletion_vector_table, long_log_table, small_files_table, vacuum_table

deltalake = pytest.importorskip("deltalake")
DAY_MS = 86_400_000


def test_records_of_tables_with_different_needs(tmp_path: Path) -> None:
    small = small_files_table(str(tmp_path / "small"), files=6)
    dv = deletion_vector_table(str(tmp_path / "dv"))
    vac = vacuum_table(str(tmp_path / "vac"))
    log = long_log_table(str(tmp_path / "log"), commits=12)
    later = int(time.time() * 1000) + 8 * DAY_MS  # past the 7-day retention
    by_table = {r.table: r for r in fleet_health([small.root, dv.root, vac.root, log.root], now=later, parallelism=2)}

    s = by_table[small.root]
    assert s.status == "ok" and s.num_files == 6 == len(deltalake.DeltaTable(small.root).file_uris())
    assert s.small_files == 6 and s.files_after_optimize == 1
    assert s.small_file_bytes == s.size_in_bytes
    assert s.partitions_with_most_small_files == (("day=2024-01-01", 6),)
    assert s.partition_columns == ("day",)

    d = by_table[dv.root]
    assert d.files_with_deletion_vectors == 1 and d.files_above_purge_ratio == 1
    assert d.deleted_rows == 30 and d.total_rows == 100 and d.deleted_rows_ratio == pytest.approx(0.3)
    assert d.bytes_above_purge_ratio == d.size_in_bytes > 0

    v = by_table[vac.root]
    assert v.last_optimize_ms is not None and v.last_optimize_ms <= int(time.time() * 1000)
    assert v.ms_since_last_optimize == later - v.last_optimize_ms and v.last_vacuum_ms is None
    assert v.tombstones == 4
    # Counted as VACUUM's dry run counts them: ours, and delta-rs's lite vacuum, at retention 0.
    ours = vac.vacuum(mode="lite", now=later, dry_run=True)
    theirs = deltalake.DeltaTable(vac.root).vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False)
    assert v.vacuumable_files == ours.num_files_to_delete == len(theirs) == 4
    assert v.vacuumable_bytes == ours.size_of_data_to_delete > 0

    g = by_table[log.root]
    assert g.commits_since_checkpoint == 13 and g.last_checkpoint_version is None
    assert g.version == 12 and g.log_files == len(list(Path(log.root, "_delta_log").iterdir()))  # commits and .crc
    log.checkpoint()
    assert table_health_record(log.root).commits_since_checkpoint == 0
    # Every record is small and JSON-serialisable, and comes back from its dict.
    for record in by_table.values():
        text = json.dumps(record.to_dict())
        assert len(text) < 4000
        assert TableHealthRecord.from_dict(json.loads(text)) == record


def test_a_broken_or_refused_table_is_reported_and_the_rest_go_on(tmp_path: Path) -> None:
    good = small_files_table(str(tmp_path / "good"), files=2)
    broken = tmp_path / "broken" / "_delta_log"
    broken.mkdir(parents=True)
    (broken / "00000000000000000000.json").write_text("{not json\n")
    refused = tmp_path / "refused" / "_delta_log"
    refused.mkdir(parents=True)
    (refused / "00000000000000000000.json").write_text(
        json.dumps({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                 "readerFeatures": ["someFutureFeature"], "writerFeatures": ["someFutureFeature"]}})
        + "\n" + json.dumps({"metaData": {"id": "x", "format": {"provider": "parquet", "options": {}},
                                          "schemaString": '{"type":"struct","fields":[]}',
                                          "partitionColumns": [], "configuration": {}}}) + "\n"
    )
    missing = str(tmp_path / "missing")
    records = fleet_health([str(tmp_path / "broken"), str(tmp_path / "refused"), missing, good.root])
    assert [r.table for r in records] == [str(tmp_path / "broken"), str(tmp_path / "refused"), missing, good.root]
    assert [r.status for r in records] == ["unreadable", "refused", "unreadable", "ok"]
    assert "someFutureFeature" in records[1].reason and records[1].error_type == "UnsupportedFeatureError"
    assert records[2].error_type == "TableNotFoundError"
    assert all(r.reason for r in records[:3]) and records[3].num_files == 2


def test_the_shared_tables_all_get_a_record_matching_delta_rs(shared_tables: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    shutil.copytree(shared_tables, lake, symlinks=True)
    tables = discover_tables(str(lake), max_depth=2).tables
    assert len(tables) >= 40
    records = list(iter_fleet_health(tables, parallelism=4))
    assert [r.table for r in records] == list(tables)
    checked = 0
    for record in records:
        if record.status != "ok":
            assert record.reason, record
            continue
        try:
            theirs = deltalake.DeltaTable(record.table)
            files = len(theirs.file_uris())
        except Exception:  # a table delta-rs cannot read is no oracle
            continue
        assert record.num_files == files, record.table
        assert record.version == theirs.version(), record.table
        checked += 1
    assert checked >= 30
