"""The table health report: what maintenance would gain on a table, from its log alone.

Everything is computed from one snapshot's Arrow file actions, vectorised (no loop over
files), plus one listing of ``_delta_log`` for the log's size. Nothing lists the data
directories, so the report is cheap enough to run before every maintenance task; the
bytes a full vacuum would reclaim beyond expired tombstones (orphans) need a listing,
which ``vacuum(dry_run=True)`` does.

Thresholds follow Delta: a file is small below half the target size (auto compaction's
``minFileSize`` default), the target is ``delta.targetFileSize`` or 128 MiB, and a file
needs its deleted rows purged above ``maxDeletedRowsRatio`` (0.05, OPTIMIZE's default).
"""

from __future__ import annotations

import math
import struct
import time
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import VacuumLiteNotPossibleError
from airflow_delta.engine.model.arguments import check_instance, check_int
from airflow_delta.engine.model.arrow_numpy import (
    bool_array,
    combined,
    int64_scalar,
    int64_to_numpy,
    mask_to_numpy,
    string_scalar,
)
from airflow_delta.engine.model.table_features import reader_features, writer_features
from airflow_delta.engine.operations.results import HealthReport, SizeBucket
from airflow_delta.engine.operations.vacuum import plan_lite, plan_lite_from_state, tombstones_not_vacuumed
from airflow_delta.engine.read.commit_reader import read_commits
from airflow_delta.engine.read.history import read_commit_infos
from airflow_delta.engine.read.listing import LogListing, list_log
from airflow_delta.engine.read.snapshot import Snapshot

DEFAULT_TARGET_FILE_SIZE = 128 << 20
DEFAULT_MAX_DELETED_ROWS_RATIO = 0.05
# Bucket edges of the size distribution, in bytes.
SIZE_BUCKET_EDGES = (0, 1 << 20, 8 << 20, 32 << 20, 64 << 20, 128 << 20, 256 << 20, 1 << 30)
TOP_PARTITIONS = 10
# Recommend a checkpoint once this many commits must be replayed on top of the last one.
COMMITS_BEFORE_CHECKPOINT_ADVICE = 100
# How far back the report looks for the last OPTIMIZE when it recommends another one.
COMMITS_SCANNED_FOR_OPTIMIZE = 100
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_EMPTY, _HIVE_NULL, _EQUALS, _SLASH = (string_scalar(s) for s in ("", HIVE_NULL, "=", "/"))


def partition_keys(partition_values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``col=value/col2=value2`` per file (``""`` for an unpartitioned table), vectorised over the map column."""
    values = combined(partition_values)
    if len(values) == 0 or not isinstance(values, pa.MapArray) or len(values.keys) == 0:
        return pc.fill_null(pa.nulls(len(values), pa.string()), _EMPTY)
    # Scalars made by pyarrow, not from Python strings: that conversion imports pandas (a second of CPU).
    pair = pc.binary_join_element_wise(values.keys, pc.fill_null(values.items, _HIVE_NULL), _EQUALS)
    offsets = values.offsets
    lists = pa.ListArray.from_arrays(pc.subtract(offsets, offsets[0]), pair)
    return pc.fill_null(pc.binary_join(lists, _SLASH), _EMPTY)


def _sizes(files: pa.Table) -> np.ndarray:
    return int64_to_numpy(pc.fill_null(files.column("size"), int64_scalar(0)))


def _num_records(stats: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, bool]:
    """``numRecords`` of each file from its stats JSON (a regex, not a parse); False when any is missing."""
    stats = combined(stats)
    if len(stats) == 0:
        return np.zeros(0, dtype=np.int64), True
    found = pc.extract_regex(pc.fill_null(stats, _EMPTY), r'"numRecords"\s*:\s*(?P<n>\d+)')
    text = found.field("n")
    complete = found.null_count == 0
    return int64_to_numpy(pc.fill_null(pc.cast(text, pa.int64()), int64_scalar(0))), complete


def _histogram(sizes: np.ndarray) -> tuple[SizeBucket, ...]:
    edges = np.array([*SIZE_BUCKET_EDGES, np.iinfo(np.int64).max], dtype=np.int64)
    bucket = np.searchsorted(edges, sizes, side="right") - 1
    counts = np.bincount(bucket, minlength=len(SIZE_BUCKET_EDGES))
    bytes_ = np.bincount(bucket, weights=sizes, minlength=len(SIZE_BUCKET_EDGES))
    out = []
    for i, lower in enumerate(SIZE_BUCKET_EDGES):
        upper = SIZE_BUCKET_EDGES[i + 1] if i + 1 < len(SIZE_BUCKET_EDGES) else None
        out.append(SizeBucket(lower, upper, int(counts[i]), int(bytes_[i])))
    return tuple(out)


def _log_size(snapshot: Snapshot) -> tuple[int, int]:
    files = snapshot.io.list_dir(f"{snapshot.table_root}/_delta_log")
    return len(files), sum(f.size for f in files)


def _small_files_since_optimize(
    snapshot: Snapshot, small_mask: np.ndarray, listing: LogListing
) -> tuple[int, int] | None:
    """(version of the last OPTIMIZE among the latest commits, how many of the small live files
    (``small_mask`` over ``snapshot.add_actions``) commits after it added), or None when none of
    the last :data:`COMMITS_SCANNED_FOR_OPTIMIZE` commits is one.

    Why OPTIMIZE is still recommended right after one: usually files written since (a
    concurrent writer, the next ingestion). An OPTIMIZE in the log tail is found in the
    commitInfos the snapshot already read, and a live file's ``version`` then says whether a
    commit after it added the file; otherwise only the commits' heads are read to find it,
    and the commits after it for their adds.
    """
    adds = snapshot.add_actions
    checkpoint = snapshot.log_segment.checkpoint_version
    tail = snapshot.tail_commit_infos
    in_tail = [v for v in sorted(tail, reverse=True)[:COMMITS_SCANNED_FOR_OPTIMIZE]
               if (tail[v] or {}).get("operation") == "OPTIMIZE"]
    if in_tail and (checkpoint is None or in_tail[0] > checkpoint):
        last = in_tail[0]
        added_after = int64_to_numpy(pc.fill_null(adds.column("version"), int64_scalar(-1))) > last
        return last, int(np.count_nonzero(small_mask & added_after))
    small_paths = adds.column("path").filter(bool_array(small_mask))
    versions = sorted((v for v in listing.commits if v <= snapshot.version), reverse=True)[:COMMITS_SCANNED_FOR_OPTIMIZE]
    infos = read_commit_infos(snapshot.io, [listing.commits[v].path for v in versions])
    last = next((v for v, info in zip(versions, infos, strict=True) if (info or {}).get("operation") == "OPTIMIZE"), None)
    if last is None:
        return None
    after = list(range(last + 1, snapshot.version + 1))
    if not after:
        return last, 0
    parsed = read_commits(snapshot.io, [listing.commits[v] for v in after], after)
    added = parsed.file_actions.filter(parsed.file_actions.column("is_add")).column("path")
    return last, int(pc.sum(pc.is_in(small_paths, value_set=added)).as_py() or 0)


def _hours(ms: int) -> str:
    hours = ms / 3_600_000
    return f"{hours:g} h" if hours < 1e6 else "unbounded"


def _recommendations(
    *, files: int, small: int, files_after: int, purge: int, vacuumable: int, vacuumable_bytes: int,
    retention_ms: int, commits_since_checkpoint: int, vacuum_from_log: bool,
    since_optimize: tuple[int, int] | None,
) -> tuple[str, ...]:
    out = []
    if small >= 2 and files_after < files:
        why = ""
        if since_optimize is not None:
            why = f" ({since_optimize[1]} of them added since the last OPTIMIZE, version {since_optimize[0]})"
        out.append(
            f"OPTIMIZE: {small} small files{why}; compaction would leave about {files_after} files instead of {files}"
        )
    if purge:
        out.append(f"OPTIMIZE (purge deletion vectors): {purge} files have more deleted rows than the purge ratio")
    if vacuumable:
        out.append(
            f"VACUUM: {vacuumable} removed files ({vacuumable_bytes} bytes) that no version within the "
            f"{_hours(retention_ms)} retention reads"
            + ("" if vacuum_from_log else "; log cleanup removed commits a lite VACUUM reads: run a full one")
        )
    if commits_since_checkpoint >= COMMITS_BEFORE_CHECKPOINT_ADVICE:
        out.append(
            f"CHECKPOINT: {commits_since_checkpoint} commits since the last checkpoint slow down every read of the table"
        )
    return tuple(out)


def health_report(
    snapshot: Snapshot,
    *,
    now_ms: int | None = None,
    target_file_size: int | None = None,
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO,
) -> HealthReport:
    """The :class:`HealthReport` of ``snapshot``; ``now_ms`` is the clock for tombstone expiry."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    props = snapshot.properties
    target = target_file_size or props.target_file_size or DEFAULT_TARGET_FILE_SIZE
    adds = snapshot.add_actions
    sizes = _sizes(adds)
    small_mask = sizes < target // 2
    keys = partition_keys(adds.column("partition_values"))

    # Partitions with the most small files, and what bin-packing them would leave.
    small_keys = keys.filter(bool_array(small_mask))
    top: list[tuple[str, int]] = []
    files_after = int(np.count_nonzero(~small_mask))
    if len(small_keys):
        counts = pc.value_counts(small_keys)
        order = np.argsort(-int64_to_numpy(counts.field("counts").cast(pa.int64())), kind="stable")
        names, numbers = counts.field("values"), counts.field("counts")
        top = [(names[int(i)].as_py(), int(numbers[int(i)].as_py())) for i in order[:TOP_PARTITIONS]]
        # Per partition, the small bytes packed into ceil(bytes / target) files.
        key_index = int64_to_numpy(pc.index_in(small_keys, value_set=names).cast(pa.int64()))
        small_bytes = np.bincount(key_index, weights=sizes[small_mask], minlength=len(names))
        files_after += int(np.ceil(small_bytes / target).clip(min=1).sum())

    # Deletion vectors and the purge ratio.
    dv = combined(adds.column("deletion_vector"))
    has_dv = mask_to_numpy(pc.is_valid(dv)) if len(dv) else np.zeros(0, dtype=bool)
    cardinality = (
        int64_to_numpy(pc.fill_null(pc.struct_field(dv, "cardinality"), int64_scalar(0))) if len(dv)
        else np.zeros(0, dtype=np.int64)
    )
    records, complete = _num_records(adds.column("stats"))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(records > 0, cardinality / np.maximum(records, 1), 0.0)
    purge_mask = has_dv & (ratio > max_deleted_rows_ratio)
    above_purge = int(np.count_nonzero(purge_mask))

    # Tombstones, and what a VACUUM would reclaim now under the table's retention: the plan of
    # a lite dry run itself (a tombstone of a file still live with a new DV, or one a VACUUM
    # deleted already, is not counted).
    # One whole listing of the log serves the lite plan, the vacuumed tombstones and the last OPTIMIZE.
    listing = list_log(snapshot.io, snapshot.table_root)
    # Tombstones whose files a completed VACUUM deleted stay in the state until a checkpoint
    # drops them; ``_last_vacuum_info`` says which they are, and they are not counted.
    tombstones = tombstones_not_vacuumed(snapshot, listing)
    retention_ms = int(props.deleted_file_retention.total_seconds() * 1000)
    try:
        vacuum_plan, from_log = plan_lite(snapshot, now - retention_ms, listing), True
    except VacuumLiteNotPossibleError:  # commits gone: the state's tombstones not yet vacuumed
        vacuum_plan, from_log = plan_lite_from_state(snapshot, now - retention_ms, tombstones), False
    stamps = tombstones.column("deletion_timestamp").drop_null()
    oldest = pc.min(stamps).as_py() if len(stamps) else None

    log_files, log_bytes = _log_size(snapshot)
    checkpoint_version = snapshot.log_segment.checkpoint_version
    since = snapshot.version - (checkpoint_version if checkpoint_version is not None else -1)
    small = int(np.count_nonzero(small_mask))
    files_with_dv = int(np.count_nonzero(has_dv))
    since_optimize = None
    if small >= 2 and files_after < adds.num_rows:
        since_optimize = _small_files_since_optimize(snapshot, small_mask, listing)
    vacuumable = len(vacuum_plan.paths)
    vacuumable_bytes = vacuum_plan.total_bytes
    return HealthReport(
        table_root=snapshot.table_root,
        version=snapshot.version,
        num_files=adds.num_rows,
        size_in_bytes=int(sizes.sum()),
        target_file_size=int(target),
        small_files=small,
        small_file_ratio=small / adds.num_rows if adds.num_rows else 0.0,
        size_histogram=_histogram(sizes),
        partitions_with_most_small_files=tuple(top),
        files_with_deletion_vectors=files_with_dv,
        deletion_vector_coverage=files_with_dv / adds.num_rows if adds.num_rows else 0.0,
        deleted_rows=int(cardinality.sum()),
        total_rows=int(records.sum()) if complete else None,
        max_deleted_rows_ratio=float(max_deleted_rows_ratio),
        files_above_purge_ratio=above_purge,
        tombstones=tombstones.num_rows,
        tombstone_bytes=int(_sizes(tombstones).sum()),
        oldest_tombstone_ms=oldest,
        vacuumable_tombstones=vacuumable,
        vacuumable_bytes=vacuumable_bytes,
        commits_since_checkpoint=since,
        last_checkpoint_version=checkpoint_version,
        log_files=log_files,
        log_size_in_bytes=log_bytes,
        min_reader_version=snapshot.protocol.min_reader_version,
        min_writer_version=snapshot.protocol.min_writer_version,
        reader_features=tuple(sorted(reader_features(snapshot.protocol))),
        writer_features=tuple(sorted(writer_features(snapshot.protocol))),
        files_after_optimize=files_after,
        last_optimize_version=since_optimize[0] if since_optimize else None,
        small_files_since_optimize=since_optimize[1] if since_optimize else None,
        small_file_bytes=int(sizes[small_mask].sum()),
        bytes_above_purge_ratio=int(sizes[purge_mask].sum()),
        recommendations=_recommendations(
            files=adds.num_rows, small=small, files_after=files_after, purge=above_purge,
            vacuumable=vacuumable, vacuumable_bytes=vacuumable_bytes, retention_ms=retention_ms,
            vacuum_from_log=from_log, since_optimize=since_optimize,
            commits_since_checkpoint=since,
        ),
    )


# ------------------------------------------------------------------ the picture


def _png(pixels: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of ``pixels`` (height x width x 3 uint8), with zlib only."""
    height, width, _ = pixels.shape
    raw = np.concatenate([np.zeros((height, 1), dtype=np.uint8), pixels.reshape(height, width * 3)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9)) + chunk(
        b"IEND", b""
    )


# A 3x5 pixel font for the chart's labels: file counts and bucket bounds need only these.
_GLYPHS: dict[str, tuple[str, ...]] = {
    "0": ("111", "101", "101", "101", "111"), "1": ("010", "110", "010", "010", "111"),
    "2": ("111", "001", "111", "100", "111"), "3": ("111", "001", "111", "001", "111"),
    "4": ("101", "101", "111", "001", "001"), "5": ("111", "100", "111", "001", "111"),
    "6": ("111", "100", "111", "101", "111"), "7": ("111", "001", "001", "001", "001"),
    "8": ("111", "101", "111", "101", "111"), "9": ("111", "101", "111", "001", "111"),
    "K": ("101", "101", "110", "101", "101"), "M": ("101", "111", "111", "101", "101"),
    "G": ("111", "100", "101", "101", "111"), "T": ("111", "010", "010", "010", "010"),
    "-": ("000", "000", "111", "000", "000"), "+": ("000", "010", "111", "010", "000"),
    " ": ("000", "000", "000", "000", "000"),
}
_GLYPH_MASKS = {c: np.array([[ch == "1" for ch in row] for row in rows]) for c, rows in _GLYPHS.items()}
_GLYPH_HEIGHT, _GLYPH_ADVANCE = 5, 4  # 3 pixels wide, 1 between characters
_INK = (40, 40, 40)


def _short_size(n: int) -> str:
    """``1048576`` -> ``1M``: bucket edges are powers of two, so the 1024-based unit is exact."""
    for unit in ("", "K", "M", "G", "T"):
        if n < 1024 or unit == "T":
            return f"{n}{unit}"
        n //= 1024
    raise AssertionError("unreachable")


def _text_width(text: str, scale: int) -> int:
    return (len(text) * _GLYPH_ADVANCE - 1) * scale if text else 0


def _draw_text(canvas: np.ndarray, text: str, x: int, y: int, scale: int) -> None:
    """Draw ``text`` with its top-left corner at (x, y); pixels outside the canvas are dropped."""
    height, width, _ = canvas.shape
    for i, char in enumerate(text):
        mask = np.kron(_GLYPH_MASKS[char], np.ones((scale, scale), dtype=bool))
        x0 = x + i * _GLYPH_ADVANCE * scale
        ys, xs = np.nonzero(mask)
        ys, xs = ys + y, xs + x0
        keep = (ys >= 0) & (ys < height) & (xs >= 0) & (xs < width)
        canvas[ys[keep], xs[keep]] = _INK


def size_histogram_png(report: HealthReport, *, width: int = 640, height: int = 280) -> bytes:
    """A bar chart of the file-size distribution: one bar per bucket (left: smallest), height by file
    count, small-file buckets in orange; the buckets are those of ``report.size_histogram``.

    Each bar is labelled with its file count above it and each bucket with its bounds below
    the axis (``1M-8M``; sizes in 1024-based units), when the image is large enough to hold
    the labels (at least 64 pixels high, and a slot per bucket wide enough for its label)."""
    check_instance("report", report, HealthReport)
    check_int("width", width, minimum=len(report.size_histogram) * 4 + 20)
    check_int("height", height, minimum=24)
    canvas = np.full((height, width, 3), 255, dtype=np.uint8)
    buckets = report.size_histogram
    peak = max((b.files for b in buckets), default=0)
    margin = 10
    slot = (width - 2 * margin) // max(len(buckets), 1)
    bounds = [
        f"{_short_size(b.lower)}-{_short_size(b.upper)}" if b.upper is not None else f"{_short_size(b.lower)}+"
        for b in buckets
    ]
    counts = [str(b.files) for b in buckets]
    widest = max((len(s) for s in [*bounds, *counts]), default=0)
    # Labels at twice the font's size where they fit, else at its size, else none.
    scale = next((s for s in (2, 1) if height >= 64 * s and _text_width("0" * widest, s) <= slot - 2), 0)
    label_height = _GLYPH_HEIGHT * scale + 3 if scale else 0
    axis_y = height - margin - label_height
    top = margin + label_height
    canvas[axis_y, margin : width - margin] = (0, 0, 0)  # the axis
    small_below = report.target_file_size // 2
    for i, bucket in enumerate(buckets):
        centre = margin + i * slot + slot // 2
        if scale:
            _draw_text(canvas, bounds[i], centre - _text_width(bounds[i], scale) // 2, axis_y + 3, scale)
        if not bucket.files:
            continue
        bar = max(1, math.ceil((axis_y - top) * bucket.files / peak))
        x0 = margin + i * slot + slot // 8
        x1 = margin + (i + 1) * slot - slot // 8
        colour = (230, 120, 20) if bucket.lower < small_below else (40, 100, 200)
        canvas[axis_y - bar : axis_y, x0:x1] = colour
        if scale:
            _draw_text(canvas, counts[i], centre - _text_width(counts[i], scale) // 2, axis_y - bar - label_height, scale)
    return _png(canvas)


__all__ = ["health_report", "partition_keys", "size_histogram_png"]
