"""``DeltaTable.health()``: every figure checked against delta-rs's view of the same log, or against
what the test did to the table (rows deleted, files removed)."""

from __future__ import annotations

import struct
import time
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable, HealthReport, size_histogram_png

deltalake = pytest.importorskip("deltalake")

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
DAY_MS = 86_400_000


def _rows(ids: range, p: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "p": [p] * len(ids)}, schema=SCHEMA)


@pytest.fixture
def table(table_path: str) -> DeltaTable:
    table = DeltaTable.create(
        table_path, SCHEMA, partition_by=["p"],
        properties={"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "1000"},
    )
    for i in range(4):
        table.append(_rows(range(10 * i, 10 * i + 10), "a"))
    table.append(_rows(range(100, 120), "b"))
    table.append(pa.concat_tables([_rows(range(200, 210), "c"), _rows(range(210, 220), "c")]))
    table.delete("id = 0")            # 1 of 10 rows: above the 5% purge ratio
    table.delete("id >= 100 AND id < 101")  # 1 of 20 rows: exactly 5%, not above it
    table.delete("p = 'c'")           # removes the c file: a tombstone
    return table


def _deltars_adds(path: str) -> pa.Table:
    return pa.table(deltalake.DeltaTable(path).get_add_actions(flatten=True))


def test_files_sizes_and_small_files_match_delta_rs(table: DeltaTable) -> None:
    adds = _deltars_adds(table.root)
    sizes = adds.column("size_bytes").to_pylist()
    target = 2 * max(sizes)  # the largest file is exactly at half the target: not small
    report = table.health(target_file_size=target)
    assert report.version == 9 and report.num_files == len(sizes) == 5
    assert report.size_in_bytes == sum(sizes)
    assert report.small_files == sum(s < target // 2 for s in sizes) == 4
    assert report.small_file_ratio == pytest.approx(4 / 5)
    assert sum(b.files for b in report.size_histogram) == 5
    assert sum(b.bytes for b in report.size_histogram) == sum(sizes)
    for bucket in report.size_histogram:
        inside = [s for s in sizes if s >= bucket.lower and (bucket.upper is None or s < bucket.upper)]
        assert bucket.files == len(inside)
    partitions = adds.column("partition.p").to_pylist()
    small = Counter(f"p={p}" for p, s in zip(partitions, sizes, strict=True) if s < target // 2)
    assert dict(report.partitions_with_most_small_files) == dict(small)
    assert report.partitions_with_most_small_files[0] == ("p=a", max(small.values()))


def test_deletion_vectors_and_the_purge_ratio(table: DeltaTable) -> None:
    report = table.health()
    assert report.files_with_deletion_vectors == 2
    assert report.deletion_vector_coverage == pytest.approx(2 / 5)
    assert report.deleted_rows == 2
    assert report.total_rows == 60  # physical rows of the live files (the c file is gone)
    assert report.files_above_purge_ratio == 1
    assert any("purge" in r for r in report.recommendations)
    # 1 of 20 rows is 5%: above a 4% ratio, not above 5%.
    assert table.health(max_deleted_rows_ratio=0.04).files_above_purge_ratio == 2
    assert table.health(max_deleted_rows_ratio=0.2).files_above_purge_ratio == 0


def test_tombstones_and_what_vacuum_would_reclaim(table: DeltaTable) -> None:
    now = int(time.time() * 1000)
    fresh = table.health(now=now)
    # Three removes: the a and b files replaced by their DV versions keep their data files; the c file is gone.
    assert fresh.tombstones == 3
    assert fresh.vacuumable_tombstones == 0 and fresh.vacuumable_bytes == 0
    assert fresh.oldest_tombstone_ms is not None and fresh.oldest_tombstone_ms <= now
    later = table.health(now=now + 8 * DAY_MS)
    assert any(r.startswith("VACUUM") for r in later.recommendations)
    lite = table.vacuum(mode="lite", now=now + 8 * DAY_MS, dry_run=True)
    # The DV-replaced files are still live: only the c file's bytes come back, and the
    # report counts what the dry run counts (not the three expired tombstones).
    assert lite.num_files_to_delete == 1 and 0 < lite.size_of_data_to_delete < later.tombstone_bytes
    assert later.vacuumable_tombstones == lite.num_files_to_delete
    assert later.vacuumable_bytes == lite.size_of_data_to_delete


def test_log_figures(table: DeltaTable) -> None:
    report = table.health()
    assert report.commits_since_checkpoint == 10 and report.last_checkpoint_version is None
    log_files = list(Path(table.log_dir).iterdir())
    assert report.log_files == len([f for f in log_files if f.is_file()])
    assert report.log_size_in_bytes == sum(f.stat().st_size for f in log_files if f.is_file())
    table.checkpoint()
    assert table.health().commits_since_checkpoint == 0


def test_protocol_and_optimize_estimate(table: DeltaTable) -> None:
    report = table.health()
    assert (report.min_reader_version, report.min_writer_version) == (3, 7)
    assert "deletionVectors" in report.reader_features and "deletionVectors" in report.writer_features
    # Every file is small against 128 MiB: one file per partition after bin-packing.
    assert report.files_after_optimize == 2
    assert report.recommendations[0].startswith("OPTIMIZE: 5 small files")


def test_a_healthy_table_has_nothing_to_recommend(table_path: str) -> None:
    table = DeltaTable.create(table_path, SCHEMA)
    table.append(_rows(range(10), "a"))
    report = table.health()
    assert report.recommendations == ()
    assert report.partitions_with_most_small_files == (("", 1),)


def test_an_empty_table(table_path: str) -> None:
    report = DeltaTable.create(table_path, SCHEMA, partition_by=["p"]).health()
    assert report.num_files == 0 and report.small_file_ratio == 0.0 and report.total_rows == 0
    assert report.oldest_tombstone_ms is None and report.recommendations == ()


def _png_chunks(data: bytes) -> dict[bytes, bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks[kind] = body
        at += 12 + length
    return chunks


def test_the_png_is_a_valid_image_of_the_distribution(table: DeltaTable) -> None:
    report: HealthReport = table.health()
    chunks = _png_chunks(size_histogram_png(report, width=200, height=100))
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (width, height, depth, colour) == (200, 100, 8, 2)
    raw = zlib.decompress(chunks[b"IDAT"])
    assert len(raw) == height * (1 + 3 * width)
    rows = [raw[y * (1 + 3 * width) + 1 : (y + 1) * (1 + 3 * width)] for y in range(height)]
    orange = bytes((230, 120, 20))
    # Every file is small: orange bars only, and the tallest reaches the top margin.
    assert any(orange in row for row in rows[10:20]) and not any(bytes((40, 100, 200)) in row for row in rows)


def test_the_png_labels_every_bucket_and_the_file_count_of_each_bar(table: DeltaTable) -> None:
    report: HealthReport = table.health()
    chunks = _png_chunks(size_histogram_png(report))
    width, height = struct.unpack(">II", chunks[b"IHDR"][:8])
    raw = zlib.decompress(chunks[b"IDAT"])
    pixels = np.frombuffer(raw, dtype=np.uint8).reshape(height, 1 + 3 * width)[:, 1:].reshape(height, width, 3)
    ink = np.all(pixels == (40, 40, 40), axis=2)
    axis_y = int(np.flatnonzero(np.all(pixels[:, width // 2] == (0, 0, 0), axis=1))[0])
    slot = (width - 20) // len(report.size_histogram)
    for i, bucket in enumerate(report.size_histogram):
        columns = slice(10 + i * slot, 10 + (i + 1) * slot)
        # Every bucket has its bounds below the axis.
        assert ink[axis_y + 1 :, columns].any(), f"bucket {i} has no label"
        # A bar has its count above it; an empty bucket has no bar and no count.
        bar_rows = np.flatnonzero(np.all(pixels[:axis_y, 10 + i * slot + slot // 2] == (230, 120, 20), axis=1))
        if bucket.files:
            assert bar_rows.size and ink[: bar_rows[0], columns].any(), f"bucket {i} has no count"
        else:
            assert not bar_rows.size and not ink[:axis_y, columns].any()
