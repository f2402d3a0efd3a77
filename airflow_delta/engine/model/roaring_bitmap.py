"""Delta's RoaringBitmapArray: the set of deleted row indexes of one deletion vector.

A deletion vector is the set of row indexes (0-based positions in a parquet file) that are
logically deleted from that file. The protocol stores it as a *RoaringBitmapArray*: a 4-byte
little-endian magic number, then the portable 64-bit Roaring format (a bucket count and, per
32-bit "high" key, a standard 32-bit Roaring bitmap of the low halves).

The bytes we write match Delta's reference implementation: buckets are written densely from
key 0 to the largest key (empty buckets included, as Spark does), and bitmaps get the container
types Spark's bitmap aggregator gives them (run-length optimised, arrays kept on a size tie).
Re-serialising a bitmap Spark wrote gives its bytes back. (When Spark *merges* a new DV into an
existing one it skips the run-length pass, so for merges our bytes may differ from Spark's; both
are valid.) Reading also accepts the legacy "native" RoaringBitmapArray format (magic
1681511376), including the big-endian framing of the protocol's own inline example, which Spark
itself refuses.
"""

from __future__ import annotations

import array
import bisect
import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Union

import numpy as np
import pyarrow as pa
from pyroaring import AbstractBitMap, BitMap, FrozenBitMap

from airflow_delta.engine.errors import CorruptDeletionVectorError

__all__ = [
    "MAX_ROW_INDEX",
    "NATIVE_MAGIC",
    "PORTABLE_MAGIC",
    "RoaringBitmapArray",
    "RowIndexes",
]

PORTABLE_MAGIC = 1681511377
NATIVE_MAGIC = 1681511376  # legacy format: read, never written
# Delta serializes every bucket from key 0 up to the largest key, so the size of a DV grows with
# its largest row index (12 bytes per 2**32 rows). Spark accepts indexes up to about 2**63 in
# principle but would need gigabytes for them; we cap row indexes at 2**48 - 1 (a DV of at most
# 65536 buckets), far above the row count of any parquet file.
MAX_ROW_INDEX = 2**48 - 1
_MAX_BUCKETS = (MAX_ROW_INDEX >> 32) + 1

# pyroaring's fastest constructor path takes an array.array of C unsigned ints.
if array.array("I").itemsize != 4:  # pragma: no cover - every supported platform has 4-byte ints
    raise ImportError("airflow_delta.engine.model.roaring_bitmap needs a 4-byte C unsigned int")


RowIndexes = Union["RoaringBitmapArray", np.ndarray, pa.Array, pa.ChunkedArray, Iterable[int]]


def _sorted(values: np.ndarray) -> np.ndarray:
    """``values`` in ascending order; Roaring builds a bitmap several times faster from sorted input."""
    if values.size > 1 and not bool(np.all(values[1:] >= values[:-1])):
        return np.sort(values)
    return values


def _frozen_bucket(low: np.ndarray) -> FrozenBitMap:
    """A run-optimised 32-bit bitmap of ``low`` (uint32), built through pyroaring's fast path."""
    values = array.array("I")
    values.frombytes(np.ascontiguousarray(low, dtype=np.uint32).tobytes())
    return FrozenBitMap(values, optimize=True)


# Buckets up to this many rows are rebuilt value by value after set operations (see _canonical).
_CANONICAL_REBUILD_LIMIT = 1 << 24


def _canonical(bitmap: AbstractBitMap) -> FrozenBitMap:
    """``bitmap`` with the container types Spark's bitmap aggregator would write for the same rows.

    Roaring keeps a run container where a run and an array serialise to the same size, but
    never turns an array into a run on such a tie; so the bytes depend on how a bitmap was
    built. Rebuilding from the values (as :meth:`RoaringBitmapArray.from_indices` does) gives
    the aggregator's form. Huge buckets are only run-length optimised, which is equally valid.
    """
    if len(bitmap) <= _CANONICAL_REBUILD_LIMIT:
        return _frozen_bucket(np.frombuffer(bitmap.to_array(), dtype=np.uint32))
    mutable = BitMap(bitmap)
    mutable.run_optimize()
    return FrozenBitMap(mutable, optimize=False)


_EMPTY_BUCKET = FrozenBitMap()
_EMPTY_BUCKET_BYTES = _EMPTY_BUCKET.serialize()


class RoaringBitmapArray:
    """An immutable set of 64-bit row indexes in Delta's RoaringBitmapArray layout.

    Internally a sorted tuple of non-empty 32-bit buckets (``key`` = high 32 bits) plus the
    number of buckets the serialized form has: Delta writes every key from 0 to the largest
    one, empty buckets included, and keeps trailing empty buckets it read, so
    :meth:`serialize` of a deserialized Delta bitmap gives back the same bytes.
    """

    __slots__ = ("_bitmaps", "_bucket_count", "_keys", "_rows")

    def __init__(self) -> None:
        self._keys: tuple[int, ...] = ()
        self._bitmaps: tuple[FrozenBitMap, ...] = ()
        self._bucket_count = 0
        self._rows: np.ndarray | None = None  # to_numpy() result, computed once

    @classmethod
    def _create(cls, buckets: Mapping[int, FrozenBitMap], bucket_count: int) -> RoaringBitmapArray:
        self = cls.__new__(cls)
        keys = sorted(k for k, bm in buckets.items() if len(bm))
        self._keys = tuple(keys)
        self._bitmaps = tuple(buckets[k] for k in keys)
        self._bucket_count = max(bucket_count, keys[-1] + 1 if keys else 0)
        self._rows = None
        return self

    # ------------------------------------------------------------ building
    @classmethod
    def from_indices(cls, indices: RowIndexes) -> RoaringBitmapArray:
        """The set of ``indices`` (any order, duplicates allowed): numpy, Arrow, or an iterable of ints."""
        if isinstance(indices, RoaringBitmapArray):
            return indices
        rows = _as_row_index_array(indices)
        if rows.size == 0:
            return cls()
        if int(rows.max()) <= 0xFFFFFFFF:  # the common case: every row in the first bucket
            return cls._create({0: _frozen_bucket(_sorted(rows.astype(np.uint32)))}, 1)
        # Row indexes stay below 2**48, so bucket keys fit in 16 bits: count them with bincount
        # and group rows by key with numpy's radix (stable) sort, both linear in the row count.
        highs = (rows >> np.uint64(32)).astype(np.uint16)
        low = rows.astype(np.uint32)  # keeps the low 32 bits
        counts = np.bincount(highs)
        keys = np.flatnonzero(counts)
        low = low[np.argsort(highs, kind="stable")]
        bounds = np.concatenate(([0], np.cumsum(counts[keys]))).tolist()
        buckets = {int(k): _frozen_bucket(_sorted(low[bounds[i] : bounds[i + 1]])) for i, k in enumerate(keys.tolist())}
        return cls._create(buckets, int(keys[-1]) + 1)

    @classmethod
    def from_range(cls, start: int, stop: int) -> RoaringBitmapArray:
        """Rows ``start <= row < stop`` (e.g. every row of a file), built per bucket without materialising them."""
        if start < 0 or stop > MAX_ROW_INDEX + 1:
            raise ValueError(f"row range [{start}, {stop}) is outside 0..{MAX_ROW_INDEX}")
        buckets: dict[int, FrozenBitMap] = {}
        row = start
        while row < stop:
            key = row >> 32
            bucket_end = min(stop, (key + 1) << 32)
            bucket = BitMap()
            bucket.add_range(row & 0xFFFFFFFF, bucket_end - (key << 32))
            buckets[key] = _canonical(bucket)
            row = bucket_end
        return cls._create(buckets, max(buckets) + 1 if buckets else 0)

    # ------------------------------------------------------------ set views
    @property
    def cardinality(self) -> int:
        """Number of rows in the set."""
        return sum(len(bm) for bm in self._bitmaps)

    def __len__(self) -> int:
        return self.cardinality

    def __bool__(self) -> bool:
        return bool(self._keys)

    @property
    def bucket_count(self) -> int:
        """Buckets in the serialized form (keys 0..bucket_count-1, empty ones included)."""
        return self._bucket_count

    def __contains__(self, row: object) -> bool:
        if not isinstance(row, (int, np.integer)) or row < 0:
            return False
        key, low = int(row) >> 32, int(row) & 0xFFFFFFFF
        i = bisect.bisect_left(self._keys, key)
        return i < len(self._keys) and self._keys[i] == key and low in self._bitmaps[i]

    def __iter__(self) -> Iterator[int]:
        for key, bitmap in zip(self._keys, self._bitmaps, strict=True):
            base = key << 32
            for low in bitmap:
                yield base | low

    def to_numpy(self) -> np.ndarray:
        """All rows as a sorted ``uint64`` array (bucket by bucket, no per-row Python work).

        The array is computed once and shared by later calls, so it is read-only.
        """
        if self._rows is None:
            parts = [np.empty(0, dtype=np.uint64)]
            for key, bitmap in zip(self._keys, self._bitmaps, strict=True):
                low = np.frombuffer(bitmap.to_array(), dtype=np.uint32).astype(np.uint64)
                parts.append(low | np.uint64(key << 32) if key else low)
            rows = parts[-1] if len(parts) == 2 else np.concatenate(parts)
            rows.flags.writeable = False
            self._rows = rows
        return self._rows

    def to_arrow(self) -> pa.UInt64Array:
        return pa.array(self.to_numpy(), type=pa.uint64())

    def keep_mask(self, num_rows: int, start: int = 0) -> np.ndarray:
        """Boolean mask over rows ``start .. start + num_rows - 1``: True where the row is *not* deleted.

        Made for scans that read a data file in batches: pass each batch's first row index.
        """
        mask = np.ones(num_rows, dtype=np.bool_)
        if not self._keys or num_rows <= 0:
            return mask
        rows = self.to_numpy()
        lo, hi = np.searchsorted(rows, [start, start + num_rows])
        mask[(rows[lo:hi] - np.uint64(start)).astype(np.intp)] = False
        return mask

    @property
    def max(self) -> int | None:
        """The largest row, or None when empty."""
        if not self._keys:
            return None
        return (self._keys[-1] << 32) | self._bitmaps[-1].max()

    # ------------------------------------------------------------ set algebra
    def union(self, *others: RowIndexes) -> RoaringBitmapArray:
        """Rows in this set or any of ``others``, encoded as :meth:`from_indices` would encode them."""
        result: dict[int, AbstractBitMap] = dict(zip(self._keys, self._bitmaps, strict=True))
        changed: set[int] = set()
        bucket_count = self._bucket_count
        for other in others:
            other_rb = RoaringBitmapArray.from_indices(other)
            bucket_count = max(bucket_count, other_rb._bucket_count)
            for key, bitmap in zip(other_rb._keys, other_rb._bitmaps, strict=True):
                current = result.get(key)
                if current is None:
                    result[key] = bitmap
                elif not bitmap.issubset(current):
                    result[key] = current | bitmap
                    changed.add(key)
        frozen = {k: (_canonical(bm) if k in changed else bm) for k, bm in result.items()}
        return RoaringBitmapArray._create(frozen, bucket_count)  # type: ignore[arg-type]

    def __or__(self, other: RoaringBitmapArray) -> RoaringBitmapArray:
        return self.union(other)

    def difference(self, other: RoaringBitmapArray) -> RoaringBitmapArray:
        """Rows in this set but not in ``other``."""
        theirs = dict(zip(other._keys, other._bitmaps, strict=True))
        buckets = {}
        for key, bitmap in zip(self._keys, self._bitmaps, strict=True):
            remove = theirs.get(key)
            buckets[key] = bitmap if remove is None else _canonical(bitmap - remove)
        return RoaringBitmapArray._create(buckets, self._bucket_count)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RoaringBitmapArray):
            return NotImplemented
        return self._keys == other._keys and self._bitmaps == other._bitmaps

    def __hash__(self) -> int:
        return hash((self._keys, self._bitmaps))

    def __repr__(self) -> str:
        shown = self.to_numpy()[:8].tolist() if self._keys else []
        more = ", ..." if self.cardinality > len(shown) else ""
        return f"RoaringBitmapArray(cardinality={self.cardinality}, rows=[{', '.join(map(str, shown))}{more}])"

    # ------------------------------------------------------------ serialization
    def serialize(self) -> bytes:
        """The portable RoaringBitmapArray bytes (magic 1681511377), exactly as Delta writes them."""
        if self._bucket_count > _MAX_BUCKETS:
            raise ValueError(
                f"cannot serialize a deletion vector with {self._bucket_count} buckets (rows up to "
                f"{(self._bucket_count << 32) - 1}): Delta's dense layout would need "
                f"{12 * self._bucket_count} bytes; row indexes are capped at {MAX_ROW_INDEX}"
            )
        by_key = dict(zip(self._keys, self._bitmaps, strict=True))
        parts = [struct.pack("<iq", PORTABLE_MAGIC, self._bucket_count)]
        for key in range(self._bucket_count):
            bitmap = by_key.get(key)
            parts.append(struct.pack("<I", key))
            parts.append(bitmap.serialize() if bitmap is not None else _EMPTY_BUCKET_BYTES)
        return b"".join(parts)

    @classmethod
    def deserialize(cls, data: bytes | memoryview, source: str = "<deletion vector bytes>") -> RoaringBitmapArray:
        """Parse a RoaringBitmapArray (portable or legacy native format); ``source`` names it in errors."""
        buf = memoryview(data).cast("B")
        if len(buf) < 4:
            raise CorruptDeletionVectorError(source, f"{len(buf)} bytes are too few for a RoaringBitmapArray")
        (magic,) = struct.unpack_from("<i", buf, 0)
        if magic == PORTABLE_MAGIC:
            buckets, bucket_count, end = _parse_portable(buf, source)
        elif magic == NATIVE_MAGIC:
            buckets, bucket_count, end = _parse_native(buf, source, "<")
        elif struct.unpack_from(">i", buf, 0)[0] == NATIVE_MAGIC:
            # The protocol's own inline example (rows 3, 4, 7, 11, 18, 29) frames the legacy format
            # big-endian. Spark refuses it; those four bytes mean nothing else, so we read it.
            buckets, bucket_count, end = _parse_native(buf, source, ">")
        else:
            raise CorruptDeletionVectorError(
                source, f"unknown RoaringBitmapArray magic number {magic} (expected {PORTABLE_MAGIC})"
            )
        if end != len(buf):
            raise CorruptDeletionVectorError(source, f"{len(buf) - end} unexpected bytes after the bitmap")
        return cls._create(buckets, bucket_count)


def _as_row_index_array(indices: Any) -> np.ndarray:
    """``indices`` as a uint64 numpy array, refusing negative, non-integer or too large values."""
    if isinstance(indices, (pa.Array, pa.ChunkedArray)):
        if indices.null_count:
            raise ValueError("row indexes must not contain nulls")
        indices = indices.to_numpy()
    elif isinstance(indices, range):
        indices = np.arange(indices.start, indices.stop, indices.step, dtype=np.int64)
    elif not isinstance(indices, np.ndarray):
        indices = np.asarray(indices if isinstance(indices, (list, tuple)) else list(indices))
    if indices.size == 0:
        return np.empty(0, dtype=np.uint64)
    if indices.dtype.kind == "i":
        if int(indices.min()) < 0:
            raise ValueError(f"row indexes must be >= 0, got {int(indices.min())}")
    elif indices.dtype.kind != "u":
        raise ValueError(f"row indexes must be integers, got an array of {indices.dtype}")
    rows = indices.astype(np.uint64, copy=False).ravel()
    if int(rows.max()) > MAX_ROW_INDEX:
        raise ValueError(f"row index {int(rows.max())} is larger than a deletion vector can hold ({MAX_ROW_INDEX})")
    return rows


def _bucket_size(buf: memoryview, start: int, source: str) -> int:
    """Length of the portable 32-bit Roaring bitmap at ``start``, found from its headers alone."""
    end = len(buf)

    def need(pos: int, n: int, what: str) -> None:
        if pos + n > end:
            raise CorruptDeletionVectorError(source, f"truncated 32-bit bitmap at byte {start}: {what} runs past the end")

    need(start, 4, "the cookie")
    (cookie,) = struct.unpack_from("<I", buf, start)
    if cookie == 12346:  # SERIAL_COOKIE_NO_RUNCONTAINER
        need(start + 4, 4, "the container count")
        (count,) = struct.unpack_from("<I", buf, start + 4)
        if count > 65536:
            raise CorruptDeletionVectorError(source, f"32-bit bitmap at byte {start} claims {count} containers")
        pos = start + 8
        is_run = np.zeros(count, dtype=np.bool_)
        has_offsets = True
    elif cookie & 0xFFFF == 12347:  # SERIAL_COOKIE: run containers present
        count = (cookie >> 16) + 1
        flag_bytes = (count + 7) // 8
        need(start + 4, flag_bytes, "the run-container flags")
        flags = np.frombuffer(buf, dtype=np.uint8, count=flag_bytes, offset=start + 4)
        is_run = np.unpackbits(flags, bitorder="little")[:count].astype(np.bool_)
        pos = start + 4 + flag_bytes
        has_offsets = count >= 4  # NO_OFFSET_THRESHOLD
    else:
        raise CorruptDeletionVectorError(source, f"bad 32-bit Roaring cookie {cookie:#x} at byte {start}")
    need(pos, 4 * count, "the descriptive header")
    header = np.frombuffer(buf, dtype="<u2", count=2 * count, offset=pos).reshape(-1, 2)
    cardinalities = header[:, 1].astype(np.int64) + 1
    pos += 4 * count + (4 * count if has_offsets else 0)
    # Array containers hold 2 bytes per value, bitsets 8 KiB; run containers say how many runs they have.
    fixed = np.where(cardinalities <= 4096, 2 * cardinalities, 8192)
    if not is_run.any():
        size = pos + int(fixed.sum())
        need(start, size - start, "the containers")
        return size - start
    for run, fixed_size in zip(is_run.tolist(), fixed.tolist(), strict=True):
        if run:
            need(pos, 2, "a run container")
            (runs,) = struct.unpack_from("<H", buf, pos)
            pos += 2 + 4 * runs
        else:
            pos += fixed_size
    need(start, pos - start, "the containers")
    return pos - start


def _load_bucket(buf: memoryview, start: int, size: int, source: str) -> FrozenBitMap:
    try:
        return FrozenBitMap.deserialize(bytes(buf[start : start + size]))
    except ValueError as exc:
        raise CorruptDeletionVectorError(source, f"invalid 32-bit Roaring bitmap at byte {start}: {exc}") from exc


def _parse_portable(buf: memoryview, source: str) -> tuple[dict[int, FrozenBitMap], int, int]:
    if len(buf) < 12:
        raise CorruptDeletionVectorError(source, "truncated: no room for the bucket count")
    (count,) = struct.unpack_from("<q", buf, 4)
    # Every bucket takes at least 12 bytes (key and an empty bitmap), which bounds a sane count.
    if count < 0 or count > (len(buf) - 12) // 12:
        raise CorruptDeletionVectorError(source, f"bucket count {count} does not fit in {len(buf)} bytes")
    buckets: dict[int, FrozenBitMap] = {}
    pos, next_key = 12, 0
    for _ in range(count):
        if pos + 4 > len(buf):
            raise CorruptDeletionVectorError(source, f"truncated: bucket key at byte {pos} runs past the end")
        (key,) = struct.unpack_from("<I", buf, pos)
        if key >= 2**31:
            raise CorruptDeletionVectorError(source, f"bucket key {key} has its most significant bit set")
        if key < next_key:
            raise CorruptDeletionVectorError(source, f"bucket keys are not strictly ascending ({key} after {next_key - 1})")
        if buf[pos + 4 : pos + 12] == _EMPTY_BUCKET_BYTES:
            size = len(_EMPTY_BUCKET_BYTES)  # Delta's filler between used keys; nothing to load
        else:
            size = _bucket_size(buf, pos + 4, source)
            buckets[key] = _load_bucket(buf, pos + 4, size, source)
        pos += 4 + size
        next_key = key + 1
    return buckets, next_key, pos


def _parse_native(buf: memoryview, source: str, order: str) -> tuple[dict[int, FrozenBitMap], int, int]:
    """The legacy format: bitmap count, then per bucket (key = position) its size and bitmap.

    ``order`` is the byte order of those framing integers ("<" as Delta writes, ">" as in the
    protocol's inline example); the 32-bit bitmaps themselves are always little-endian.
    """
    if len(buf) < 8:
        raise CorruptDeletionVectorError(source, "truncated: no room for the bitmap count")
    (count,) = struct.unpack_from(order + "i", buf, 4)
    if count < 0 or count > (len(buf) - 8) // 12:
        raise CorruptDeletionVectorError(source, f"bitmap count {count} does not fit in {len(buf)} bytes")
    buckets: dict[int, FrozenBitMap] = {}
    pos = 8
    for key in range(count):
        if pos + 4 > len(buf):
            raise CorruptDeletionVectorError(source, f"truncated: bitmap size at byte {pos} runs past the end")
        (declared,) = struct.unpack_from(order + "i", buf, pos)
        size = _bucket_size(buf, pos + 4, source)
        if declared != size:
            raise CorruptDeletionVectorError(source, f"bitmap {key} declares {declared} bytes but holds {size}")
        buckets[key] = _load_bucket(buf, pos + 4, size, source)
        pos += 4 + size
    return buckets, count, pos
