"""Deletion vectors (DVs): Z85, the RoaringBitmapArray format, and DV files, read and write.

A DV is the set of row indexes (0-based positions in a parquet file) that are logically
deleted from that file. The protocol stores it as a *RoaringBitmapArray*: a 4-byte
little-endian magic number, then the portable 64-bit Roaring format (a bucket count and,
per 32-bit "high" key, a standard 32-bit Roaring bitmap of the low halves). Descriptors in
``add``/``remove`` actions say where the bytes are:

* ``u``: in ``<root>/<random prefix>/deletion_vector_<uuid>.bin``; ``pathOrInlineDv`` is the
  prefix followed by the UUID in 20 Z85 characters;
* ``i``: inline, ``pathOrInlineDv`` is the Z85 of the serialized bitmap;
* ``p``: in the file at an absolute (URL-encoded) URI.

A DV file is a format-version byte (1), then per DV: its size (4 bytes, big-endian), the
serialized bitmap, and the CRC-32 of the bitmap (4 bytes, big-endian). A descriptor's
``offset`` points at the size field, and ``sizeInBytes`` counts only the bitmap.

The bytes we write match Delta's reference implementation: buckets are written densely from
key 0 to the largest key (empty buckets included, as Spark does), bitmaps get the container
types Spark's bitmap aggregator gives them (run-length optimised, arrays kept on a size tie),
DV files are framed as Spark frames them, and Z85 pads unaligned input with zero bytes that
``sizeInBytes`` strips again. Re-serialising a DV Spark wrote gives its bytes back. (When Spark
*merges* a new DV into an existing one it skips the run-length pass, so for merges our bytes
may differ from Spark's; both are valid.) Reading also accepts the legacy "native"
RoaringBitmapArray format (magic 1681511376), including the big-endian framing of the
protocol's own inline example, which Spark itself refuses.
"""

from __future__ import annotations

import array
import bisect
import posixpath
import random
import string
import struct
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Union
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
from pyroaring import AbstractBitMap, BitMap, FrozenBitMap

from airflow_delta.engine.errors import (
    ChecksumMismatchError,
    CorruptDeletionVectorError,
    InvalidZ85Error,
    UnsupportedFeatureError,
)
from airflow_delta.engine.model.actions import DeletionVectorDescriptor
from airflow_delta.engine.storage.fileio import FileIO
from airflow_delta.engine.storage.paths import encode_log_path, resolve_in_table

__all__ = [
    "DEFAULT_PACKING_TARGET_SIZE",
    "DV_FILE_FORMAT_VERSION",
    "ENCODED_UUID_LENGTH",
    "MAX_ROW_INDEX",
    "NATIVE_MAGIC",
    "PORTABLE_MAGIC",
    "RoaringBitmapArray",
    "RowIndexes",
    "decode_dv_file",
    "decode_uuid",
    "dv_absolute_path",
    "dv_descriptor_from_struct",
    "dv_descriptors_from_arrow",
    "dv_file_name",
    "dv_relative_path",
    "encode_dv_file",
    "encode_uuid",
    "inline_deletion_vector",
    "merge_deletion_vector",
    "read_deletion_vector",
    "read_deletion_vectors",
    "split_uuid_path",
    "write_deletion_vector",
    "write_deletion_vectors",
    "z85_decode",
    "z85_encode",
]

PORTABLE_MAGIC = 1681511377
NATIVE_MAGIC = 1681511376  # legacy format: read, never written
DV_FILE_FORMAT_VERSION = 1
ENCODED_UUID_LENGTH = 20
# Delta serializes every bucket from key 0 up to the largest key, so the size of a DV grows with
# its largest row index (12 bytes per 2**32 rows). Spark accepts indexes up to about 2**63 in
# principle but would need gigabytes for them; we cap row indexes at 2**48 - 1 (a DV of at most
# 65536 buckets), far above the row count of any parquet file.
MAX_ROW_INDEX = 2**48 - 1
_MAX_BUCKETS = (MAX_ROW_INDEX >> 32) + 1
# Spark's default for spark.databricks.delta.deletionVectors.packing.targetSize (2 MiB).
DEFAULT_PACKING_TARGET_SIZE = 2 * 1024 * 1024

_SIZE_FIELD = 4
_CHECKSUM_FIELD = 4
_DV_FILE_PREFIX = "deletion_vector_"
_RANDOM_PREFIX_CHARS = string.ascii_letters + string.digits  # Scala's Random.alphanumeric

# pyroaring's fastest constructor path takes an array.array of C unsigned ints.
if array.array("I").itemsize != 4:  # pragma: no cover - every supported platform has 4-byte ints
    raise ImportError("airflow_delta.engine.model.deletion_vectors needs a 4-byte C unsigned int")


# ---------------------------------------------------------------------------- Z85

_Z85_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_ENCODE = np.frombuffer(_Z85_ALPHABET, dtype=np.uint8)
_Z85_DECODE = np.full(256, 255, dtype=np.uint8)
_Z85_DECODE[_Z85_ENCODE] = np.arange(85, dtype=np.uint8)
_Z85_POWERS = np.array([85**4, 85**3, 85**2, 85, 1], dtype=np.uint64)


def z85_encode(data: bytes) -> str:
    """Z85 of ``data`` as Delta writes it: input that is not 4-byte aligned is padded with zero bytes.

    The padding is not recorded in the text; whoever decodes it must know the original
    length (``sizeInBytes`` for inline DVs, 16 for UUIDs).
    """
    padding = (-len(data)) % 4
    words = np.frombuffer(bytes(data) + b"\0" * padding, dtype=">u4").astype(np.uint64)
    digits = (words[:, None] // _Z85_POWERS) % 85
    return _Z85_ENCODE[digits].tobytes().decode("ascii")


def z85_decode(text: str, size: int | None = None) -> bytes:
    """Bytes of Z85 ``text``; with ``size``, the zero padding of unaligned data is dropped.

    Raises :class:`InvalidZ85Error` for a length that is not a multiple of 5, characters outside
    the Z85 alphabet, a 5-character group above 2**32 - 1, or a ``size`` the text cannot hold.
    """
    if len(text) % 5:
        raise InvalidZ85Error(f"Z85 text must be a multiple of 5 characters long, got {len(text)}: {text!r}")
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError as exc:
        raise InvalidZ85Error(f"Z85 text contains a non-ASCII character at position {exc.start}: {text!r}") from exc
    codes = _Z85_DECODE[np.frombuffer(raw, dtype=np.uint8)]
    bad = np.flatnonzero(codes == 255)
    if bad.size:
        pos = int(bad[0])
        raise InvalidZ85Error(f"{text[pos]!r} at position {pos} is not a Z85 character: {text!r}")
    words = codes.reshape(-1, 5).astype(np.uint64) @ _Z85_POWERS
    overflow = np.flatnonzero(words > 0xFFFFFFFF)
    if overflow.size:
        pos = int(overflow[0]) * 5
        raise InvalidZ85Error(f"Z85 group {text[pos:pos + 5]!r} at position {pos} exceeds 32 bits: {text!r}")
    out = words.astype(">u4").tobytes()
    if size is None:
        return out
    if not len(out) - 3 <= size <= len(out):
        raise InvalidZ85Error(f"Z85 text of {len(text)} characters holds {len(out)} bytes, not {size}: {text!r}")
    return out[:size]


def encode_uuid(value: uuid.UUID) -> str:
    """The 20-character Z85 form of a UUID (its 16 bytes, most significant first) used in ``u`` DVs."""
    return z85_encode(value.bytes)


def decode_uuid(text: str) -> uuid.UUID:
    """Inverse of :func:`encode_uuid`."""
    if len(text) != ENCODED_UUID_LENGTH:
        raise InvalidZ85Error(f"an encoded UUID has {ENCODED_UUID_LENGTH} characters, got {len(text)}: {text!r}")
    return uuid.UUID(bytes=z85_decode(text))


# ----------------------------------------------------------- RoaringBitmapArray

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


# ------------------------------------------------------------ descriptors, paths


def dv_descriptor_from_struct(row: Mapping[str, Any]) -> DeletionVectorDescriptor:
    """A descriptor from a ``deletionVector`` struct (Arrow row as dict, or the JSON object)."""
    try:
        offset = row.get("offset")
        return DeletionVectorDescriptor(
            storage_type=str(row["storageType"]),
            path_or_inline_dv=str(row["pathOrInlineDv"]),
            size_in_bytes=int(row["sizeInBytes"]),
            cardinality=int(row["cardinality"]),
            offset=int(offset) if offset is not None else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptDeletionVectorError(f"descriptor {dict(row)!r}", f"missing or invalid field: {exc}") from exc


def dv_descriptors_from_arrow(column: pa.Array | pa.ChunkedArray) -> list[DeletionVectorDescriptor | None]:
    """Descriptors of a ``deletion_vector`` struct column (None where the file has no DV)."""
    return [dv_descriptor_from_struct(row) if row is not None else None for row in column.to_pylist()]


def split_uuid_path(path_or_inline_dv: str) -> tuple[str, uuid.UUID]:
    """``(random prefix, uuid)`` of a ``u`` descriptor's ``pathOrInlineDv``."""
    if len(path_or_inline_dv) < ENCODED_UUID_LENGTH:
        raise CorruptDeletionVectorError(
            f"descriptor u{path_or_inline_dv}", f"needs at least {ENCODED_UUID_LENGTH} characters (the encoded UUID)"
        )
    cut = len(path_or_inline_dv) - ENCODED_UUID_LENGTH
    try:
        return path_or_inline_dv[:cut], decode_uuid(path_or_inline_dv[cut:])
    except InvalidZ85Error as exc:
        raise CorruptDeletionVectorError(f"descriptor u{path_or_inline_dv}", str(exc)) from exc


def dv_file_name(file_id: uuid.UUID) -> str:
    return f"{_DV_FILE_PREFIX}{file_id}.bin"


def dv_relative_path(dv: DeletionVectorDescriptor) -> str:
    """Path of a ``u`` DV's file relative to the table root: ``[<prefix>/]deletion_vector_<uuid>.bin``."""
    if dv.storage_type != "u":
        raise ValueError(f"only 'u' deletion vectors have a table-relative path, not {dv.storage_type!r}")
    prefix, file_id = split_uuid_path(dv.path_or_inline_dv)
    return posixpath.join(prefix, dv_file_name(file_id)) if prefix else dv_file_name(file_id)


def dv_absolute_path(root: str, dv: DeletionVectorDescriptor) -> str:
    """Storage path (FileIO form) of an on-disk DV, refusing any that lies outside ``root``."""
    if dv.storage_type == "u":
        # The prefix is literal text, not URL-encoded: escape it so resolve_in_table's decoding is a no-op.
        return resolve_in_table(root, encode_log_path(dv_relative_path(dv)))
    if dv.storage_type == "p":
        if not (dv.path_or_inline_dv.startswith("/") or urlsplit(dv.path_or_inline_dv).scheme):
            raise CorruptDeletionVectorError(f"descriptor {dv.unique_id}", "a 'p' deletion vector needs an absolute path")
        return resolve_in_table(root, dv.path_or_inline_dv)
    if dv.storage_type == "i":
        raise ValueError("an inline deletion vector has no file")
    raise UnsupportedFeatureError([f"deletion vector storage type {dv.storage_type!r}"], access="read")


# ------------------------------------------------------------------ reading


def _validate_descriptor(dv: DeletionVectorDescriptor) -> None:
    if dv.storage_type not in ("u", "i", "p"):
        raise UnsupportedFeatureError([f"deletion vector storage type {dv.storage_type!r}"], access="read")
    if dv.size_in_bytes < 0 or dv.cardinality < 0 or (dv.offset is not None and dv.offset < 0):
        raise CorruptDeletionVectorError(_describe(dv), "negative size, cardinality or offset")


def _describe(dv: DeletionVectorDescriptor) -> str:
    if dv.storage_type == "i":
        return f"inline descriptor (cardinality {dv.cardinality}, {dv.size_in_bytes} bytes)"
    return f"descriptor {dv.unique_id}"


def _check_rows(bitmap: RoaringBitmapArray, dv: DeletionVectorDescriptor, source: str, num_records: int | None) -> None:
    if bitmap.cardinality != dv.cardinality:
        raise CorruptDeletionVectorError(
            source, f"holds {bitmap.cardinality} rows but its descriptor says cardinality {dv.cardinality}"
        )
    if num_records is not None and bitmap and bitmap.max >= num_records:  # type: ignore[operator]
        raise CorruptDeletionVectorError(
            source, f"deletes row {bitmap.max}, but the data file has only {num_records} records"
        )


def _frame_payload(blob: bytes, blob_start: int, dv: DeletionVectorDescriptor, path: str) -> bytes:
    """The bitmap bytes of the DV at ``dv.offset`` in a DV file, of which ``blob`` holds bytes from ``blob_start``."""
    offset = dv.offset if dv.offset is not None else 0
    source = f"{path} (offset {offset})"
    if blob_start == 0 and blob[:1] != bytes([DV_FILE_FORMAT_VERSION]):
        found = blob[0] if blob else "nothing"
        raise CorruptDeletionVectorError(path, f"file format version is {found}, expected {DV_FILE_FORMAT_VERSION}")
    at = offset - blob_start
    end = at + _SIZE_FIELD + dv.size_in_bytes + _CHECKSUM_FIELD
    if end > len(blob):
        raise CorruptDeletionVectorError(
            source, f"truncated: the DV needs bytes up to {offset + end - at}, the file has {blob_start + len(blob)}"
        )
    (size,) = struct.unpack_from(">i", blob, at)
    if size != dv.size_in_bytes:
        raise CorruptDeletionVectorError(source, f"stored size {size} differs from the descriptor's sizeInBytes {dv.size_in_bytes}")
    payload = blob[at + _SIZE_FIELD : at + _SIZE_FIELD + size]
    (expected,) = struct.unpack_from(">I", blob, at + _SIZE_FIELD + size)
    actual = zlib.crc32(payload)
    if expected != actual:
        raise ChecksumMismatchError(source, f"CRC-32 {expected:#010x}", f"{actual:#010x}")
    return payload


def _read_file(io: FileIO, path: str, start: int | None = None, length: int | None = None) -> bytes:
    try:
        if start is None or length is None:
            return io.read_bytes(path)
        return io.read_range(path, start, length)
    except FileNotFoundError as exc:
        raise CorruptDeletionVectorError(path, "the deletion vector file does not exist") from exc


def _decode_inline(dv: DeletionVectorDescriptor, num_records: int | None) -> RoaringBitmapArray:
    source = _describe(dv)
    try:
        data = z85_decode(dv.path_or_inline_dv, dv.size_in_bytes)
    except InvalidZ85Error as exc:
        raise CorruptDeletionVectorError(source, str(exc)) from exc
    bitmap = RoaringBitmapArray.deserialize(data, source)
    _check_rows(bitmap, dv, source, num_records)
    return bitmap


def read_deletion_vector(
    io: FileIO, root: str, dv: DeletionVectorDescriptor, *, num_records: int | None = None
) -> RoaringBitmapArray:
    """The deleted rows ``dv`` describes, checked against its CRC and cardinality.

    ``num_records`` (the data file's ``numRecords``), when given, must exceed every deleted row.
    """
    _validate_descriptor(dv)
    if dv.cardinality == 0:  # Delta's EMPTY descriptor: inline, "", 0 bytes
        return RoaringBitmapArray()
    if dv.storage_type == "i":
        return _decode_inline(dv, num_records)
    path = dv_absolute_path(root, dv)
    offset = dv.offset if dv.offset is not None else 0
    frame = _SIZE_FIELD + dv.size_in_bytes + _CHECKSUM_FIELD
    # Spark's first DV in a file sits right after the version byte: read that byte too and check it.
    start = 0 if offset == 1 else offset
    blob = _read_file(io, path, start, offset - start + frame)
    payload = _frame_payload(blob, start, dv, path)
    source = f"{path} (offset {offset})"
    bitmap = RoaringBitmapArray.deserialize(payload, source)
    _check_rows(bitmap, dv, source, num_records)
    return bitmap


def read_deletion_vectors(
    io: FileIO, root: str, dvs: Sequence[DeletionVectorDescriptor | None], *, max_workers: int = 8
) -> list[RoaringBitmapArray | None]:
    """:func:`read_deletion_vector` for many descriptors, reading each DV file once.

    Spark packs the DVs of many data files into one file; a scan over those files should not
    open it once per data file. Distinct files are fetched by up to ``max_workers`` threads
    (object stores are latency-bound). Entries that are None stay None.
    """
    result: list[RoaringBitmapArray | None] = [None] * len(dvs)
    by_file: dict[str, list[int]] = {}
    for i, dv in enumerate(dvs):
        if dv is None:
            continue
        _validate_descriptor(dv)
        if dv.cardinality == 0:
            result[i] = RoaringBitmapArray()
        elif dv.storage_type == "i":
            result[i] = _decode_inline(dv, None)
        else:
            by_file.setdefault(dv_absolute_path(root, dv), []).append(i)

    def load(path: str) -> list[RoaringBitmapArray]:
        positions = by_file[path]
        if len(positions) == 1:  # a range read of just this DV
            return [read_deletion_vector(io, root, dvs[positions[0]])]  # type: ignore[arg-type]
        blob = _read_file(io, path)
        decoded: dict[tuple[int | None, int, int], RoaringBitmapArray] = {}
        out = []
        for i in positions:
            dv = dvs[i]
            assert dv is not None
            key = (dv.offset, dv.size_in_bytes, dv.cardinality)
            if key not in decoded:
                source = f"{path} (offset {dv.offset or 0})"
                bitmap = RoaringBitmapArray.deserialize(_frame_payload(blob, 0, dv, path), source)
                _check_rows(bitmap, dv, source, None)
                decoded[key] = bitmap
            out.append(decoded[key])
        return out

    paths = list(by_file)
    if len(paths) > 1 and max_workers > 1:
        with ThreadPoolExecutor(max_workers=min(max_workers, len(paths))) as pool:
            loaded = list(pool.map(load, paths))
    else:
        loaded = [load(path) for path in paths]
    for path, bitmaps in zip(paths, loaded, strict=True):
        for i, bitmap in zip(by_file[path], bitmaps, strict=True):
            result[i] = bitmap
    return result


def decode_dv_file(data: bytes, source: str = "<deletion vector file>") -> list[tuple[int, RoaringBitmapArray]]:
    """Every DV in a DV file as ``(offset, bitmap)``, walking the frames from the version byte on."""
    if data[:1] != bytes([DV_FILE_FORMAT_VERSION]):
        raise CorruptDeletionVectorError(source, f"file format version is {data[:1]!r}, expected {DV_FILE_FORMAT_VERSION}")
    out: list[tuple[int, RoaringBitmapArray]] = []
    pos = 1
    while pos < len(data):
        if pos + _SIZE_FIELD > len(data):
            raise CorruptDeletionVectorError(source, f"truncated size field at byte {pos}")
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 0:
            raise CorruptDeletionVectorError(source, f"negative DV size {size} at byte {pos}")
        probe = DeletionVectorDescriptor("u", "", size, 0, pos)
        payload = _frame_payload(data, 0, probe, source)
        out.append((pos, RoaringBitmapArray.deserialize(payload, f"{source} (offset {pos})")))
        pos += _SIZE_FIELD + size + _CHECKSUM_FIELD
    return out


# ------------------------------------------------------------------ writing


def encode_dv_file(payloads: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """A DV file holding ``payloads`` (serialized bitmaps) and the offset of each one's size field."""
    parts = [bytes([DV_FILE_FORMAT_VERSION])]
    offsets = []
    pos = 1
    for payload in payloads:
        if pos + _SIZE_FIELD + len(payload) > 2**31 - 1:
            # Descriptors hold offset and sizeInBytes as 32-bit ints.
            raise ValueError("deletion vectors beyond 2 GiB cannot be addressed; write them into several files")
        offsets.append(pos)
        parts.append(struct.pack(">i", len(payload)))
        parts.append(payload)
        parts.append(struct.pack(">I", zlib.crc32(payload)))
        pos += _SIZE_FIELD + len(payload) + _CHECKSUM_FIELD
    return b"".join(parts), offsets


def inline_deletion_vector(rows: RowIndexes) -> DeletionVectorDescriptor:
    """An ``i`` descriptor carrying ``rows`` in the log itself (for small DVs)."""
    bitmap = _non_empty(rows)
    payload = bitmap.serialize()
    return DeletionVectorDescriptor("i", z85_encode(payload), len(payload), bitmap.cardinality)


def _non_empty(rows: RowIndexes, num_records: int | None = None) -> RoaringBitmapArray:
    bitmap = RoaringBitmapArray.from_indices(rows)
    if not bitmap:
        raise ValueError("no rows to delete: leave the file without a deletion vector (or with its current one)")
    if num_records is not None and bitmap.max >= num_records:  # type: ignore[operator]
        raise ValueError(f"row {bitmap.max} cannot be deleted: the data file has {num_records} records")
    return bitmap


def _random_prefix(length: int) -> str:
    if length < 0:
        raise ValueError(f"random_prefix_length must be >= 0, got {length}")
    return "".join(random.choices(_RANDOM_PREFIX_CHARS, k=length))


def _write_dv_file(io: FileIO, root: str, payloads: Sequence[bytes], random_prefix_length: int) -> tuple[str, list[int]]:
    """Write one new UUID-named DV file; returns its ``pathOrInlineDv`` and the offset of each payload."""
    prefix = _random_prefix(random_prefix_length)
    file_id = uuid.uuid4()
    encoded = prefix + encode_uuid(file_id)
    relative = posixpath.join(prefix, dv_file_name(file_id)) if prefix else dv_file_name(file_id)
    path = resolve_in_table(root, encode_log_path(relative))
    data, offsets = encode_dv_file(payloads)
    io.write_bytes(path, data)
    return encoded, offsets


def write_deletion_vector(
    io: FileIO,
    root: str,
    rows: RowIndexes,
    *,
    random_prefix_length: int = 0,
    inline: bool = False,
    num_records: int | None = None,
) -> DeletionVectorDescriptor:
    """Store ``rows`` as a new DV and return its descriptor.

    By default a new ``deletion_vector_<uuid>.bin`` file (storage type ``u``, offset 1) under
    ``root``, inside a random alphanumeric directory of ``random_prefix_length`` characters
    when that is non-zero (Delta does this when ``delta.randomizeFilePrefixes`` is set).
    ``inline=True`` puts the bitmap into the descriptor instead (``i``). Empty ``rows`` are
    refused: a file with nothing deleted carries no DV.
    """
    bitmap = _non_empty(rows, num_records)
    if inline:
        return inline_deletion_vector(bitmap)
    payload = bitmap.serialize()
    encoded, offsets = _write_dv_file(io, root, [payload], random_prefix_length)
    return DeletionVectorDescriptor("u", encoded, len(payload), bitmap.cardinality, offsets[0])


def write_deletion_vectors(
    io: FileIO,
    root: str,
    row_sets: Sequence[RowIndexes],
    *,
    random_prefix_length: int = 0,
    target_file_size: int = DEFAULT_PACKING_TARGET_SIZE,
) -> list[DeletionVectorDescriptor]:
    """Store several DVs, packed into as few files as ``target_file_size`` allows (as Spark does).

    Returns one descriptor per entry of ``row_sets``, in order; DVs sharing a file differ in
    ``offset``. A DV larger than the target gets a file of its own.
    """
    bitmaps = [_non_empty(rows) for rows in row_sets]
    payloads = [b.serialize() for b in bitmaps]
    descriptors: list[DeletionVectorDescriptor] = []
    start = 0
    while start < len(payloads):
        # Fill a bin up to the target size; a bin always takes at least one DV.
        end, size = start + 1, 1 + len(payloads[start]) + _SIZE_FIELD + _CHECKSUM_FIELD
        while end < len(payloads) and size + len(payloads[end]) + _SIZE_FIELD + _CHECKSUM_FIELD <= target_file_size:
            size += len(payloads[end]) + _SIZE_FIELD + _CHECKSUM_FIELD
            end += 1
        encoded, offsets = _write_dv_file(io, root, payloads[start:end], random_prefix_length)
        for bitmap, payload, offset in zip(bitmaps[start:end], payloads[start:end], offsets, strict=True):
            descriptors.append(DeletionVectorDescriptor("u", encoded, len(payload), bitmap.cardinality, offset))
        start = end
    return descriptors


def merge_deletion_vector(
    io: FileIO,
    root: str,
    existing: DeletionVectorDescriptor | None,
    new_rows: RowIndexes,
    *,
    random_prefix_length: int = 0,
    inline: bool = False,
    num_records: int | None = None,
) -> tuple[RoaringBitmapArray, DeletionVectorDescriptor]:
    """The DV that replaces ``existing`` on a file once ``new_rows`` are deleted too.

    Returns the union of old and new deleted rows and the descriptor of a newly written DV for
    it; the transaction then removes ``(path, existing)`` and adds ``(path, new descriptor)``.
    When every new row was already deleted, nothing is written and ``existing`` is returned
    unchanged (callers can skip the remove/add pair).
    """
    old = read_deletion_vector(io, root, existing, num_records=num_records) if existing is not None else RoaringBitmapArray()
    added = RoaringBitmapArray.from_indices(new_rows)
    merged = old.union(added)
    if existing is not None and merged.cardinality == old.cardinality:
        return old, existing
    descriptor = write_deletion_vector(
        io, root, merged, random_prefix_length=random_prefix_length, inline=inline, num_records=num_records
    )
    return merged, descriptor
