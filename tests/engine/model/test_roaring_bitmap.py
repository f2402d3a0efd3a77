"""RoaringBitmapArray: building, set algebra, and the portable and legacy byte formats.

CRoaring's own 64-bit portable decoder (``pyroaring.BitMap64``) is the independent oracle for
our bytes; Spark-written payloads pin the container choices.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap64

from airflow_delta.engine.errors import CorruptDeletionVectorError
from airflow_delta.engine.model.actions import DeletionVectorDescriptor
from airflow_delta.engine.model.deletion_vector_files import read_deletion_vector
from airflow_delta.engine.model.roaring_bitmap import MAX_ROW_INDEX, NATIVE_MAGIC, PORTABLE_MAGIC, RoaringBitmapArray
from airflow_delta.engine.storage.fileio import LocalFileIO
from tests.engine.model.row_set_strategies import row_sets

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(row_sets)
def test_bitmap_array_round_trips_and_is_portable(rows: set[int]) -> None:
    expected = np.array(sorted(rows), dtype=np.uint64)
    shuffled = list(rows) + list(rows)[:5]
    random.shuffle(shuffled)
    bitmap = RoaringBitmapArray.from_indices(np.array(shuffled, dtype=np.uint64))
    np.testing.assert_array_equal(bitmap.to_numpy(), expected)
    assert bitmap.cardinality == len(rows) == len(bitmap)
    assert bitmap.to_numpy().dtype == np.uint64
    for row in list(rows)[:10]:
        assert row in bitmap
    if rows:
        assert bitmap.max == max(rows)
    data = bitmap.serialize()
    assert struct.unpack_from("<iq", data) == (PORTABLE_MAGIC, (max(rows) >> 32) + 1 if rows else 0)
    # CRoaring's own 64-bit portable decoder agrees with our bytes.
    assert list(BitMap64.deserialize(data[4:])) == sorted(rows)
    again = RoaringBitmapArray.deserialize(data)
    assert again == bitmap
    assert again.serialize() == data
    # The encoding is canonical: building from a list, in another order, gives the same bytes.
    assert RoaringBitmapArray.from_indices(sorted(rows, reverse=True)).serialize() == data


@FAST
@given(row_sets, row_sets)
def test_union_is_set_union_with_canonical_bytes(left: set[int], right: set[int]) -> None:
    a = RoaringBitmapArray.from_indices(sorted(left))
    b = RoaringBitmapArray.from_indices(np.array(sorted(right), dtype=np.uint64))
    merged = a.union(b)
    assert merged.to_numpy().tolist() == sorted(left | right)
    assert merged == (b | a)
    assert merged.serialize() == RoaringBitmapArray.from_indices(sorted(left | right)).serialize()
    assert a.difference(b).to_numpy().tolist() == sorted(left - right)


@FAST
@given(st.sets(st.integers(0, 300), max_size=100), st.integers(0, 250), st.integers(0, 100))
def test_keep_mask_marks_exactly_the_surviving_rows(rows: set[int], start: int, num_rows: int) -> None:
    mask = RoaringBitmapArray.from_indices(sorted(rows)).keep_mask(num_rows, start)
    expected = ~np.isin(np.arange(start, start + num_rows), np.array(sorted(rows), dtype=np.int64))
    np.testing.assert_array_equal(mask, expected)


@pytest.mark.parametrize(("start", "stop"), [(0, 0), (0, 10), (5, 70_000), (2**32 - 3, 2**32 + 4), (7, 3 * 2**32 + 9)])
def test_from_range_equals_the_materialised_range(start: int, stop: int) -> None:
    bitmap = RoaringBitmapArray.from_range(start, stop)
    assert bitmap.cardinality == max(0, stop - start)
    if stop - start < 10_000_000:
        assert bitmap == RoaringBitmapArray.from_indices(np.arange(start, stop, dtype=np.uint64))
        assert bitmap.serialize() == RoaringBitmapArray.from_indices(np.arange(start, stop, dtype=np.uint64)).serialize()
    assert RoaringBitmapArray.deserialize(bitmap.serialize()) == bitmap


def test_largest_row_index_round_trips() -> None:
    bitmap = RoaringBitmapArray.from_indices([0, MAX_ROW_INDEX])
    data = bitmap.serialize()
    assert bitmap.bucket_count == 2**16
    assert len(data) == 12 + 12 * 2**16 + 2 * 10  # a one-value bucket is 10 bytes longer than an empty one
    assert RoaringBitmapArray.deserialize(data).to_numpy().tolist() == [0, MAX_ROW_INDEX]
    # A (sparse) DV from elsewhere may use keys we refuse to write densely; reading it still works.
    far = struct.pack("<iq", PORTABLE_MAGIC, 1) + struct.pack("<I", 2**31 - 1) + data[-18:]
    read = RoaringBitmapArray.deserialize(far)
    assert read.to_numpy().tolist() == [((2**31 - 1) << 32) | (MAX_ROW_INDEX & 0xFFFFFFFF)]
    with pytest.raises(ValueError, match="cannot serialize"):
        read.serialize()


def test_from_indices_accepts_arrow_ranges_and_iterables() -> None:
    expected = [1, 2, 3, 2**33]
    for given_rows in (pa.array(expected, pa.int64()), pa.chunked_array([[1, 2], [3, 2**33]]), iter(expected), tuple(expected)):
        assert RoaringBitmapArray.from_indices(given_rows).to_numpy().tolist() == expected
    assert RoaringBitmapArray.from_indices(range(0, 10, 3)).to_numpy().tolist() == [0, 3, 6, 9]
    assert list(RoaringBitmapArray.from_indices(expected)) == expected
    assert RoaringBitmapArray.from_indices(expected).to_arrow().to_pylist() == expected


# Payloads of two Spark-written DVs (cdf-table-with-cdc-and-dvs): three rows tie between an array
# and a run container and Spark keeps the array; rows 0-4 and 6 are cheaper as runs.
_SPARK_0_1_2 = bytes.fromhex("d1d33964" "0100000000000000" "00000000" "3a30000001000000" "00000200" "10000000" "000001000200")
_SPARK_0_TO_4_AND_6 = bytes.fromhex("d1d33964" "0100000000000000" "00000000" "3b300000" "01" "00000500" "0200" "00000400" "06000000")


def test_container_choice_matches_spark_however_the_set_was_built() -> None:
    assert RoaringBitmapArray.from_indices([2, 0, 1]).serialize() == _SPARK_0_1_2
    assert RoaringBitmapArray.from_range(0, 3).serialize() == _SPARK_0_1_2
    assert RoaringBitmapArray.from_indices([0, 1]).union([2]).serialize() == _SPARK_0_1_2
    assert RoaringBitmapArray.from_range(0, 4).difference(RoaringBitmapArray.from_indices([3])).serialize() == _SPARK_0_1_2
    assert RoaringBitmapArray.from_indices([6, 0, 1, 2, 3, 4]).serialize() == _SPARK_0_TO_4_AND_6
    assert RoaringBitmapArray.from_range(0, 5).union([6]).serialize() == _SPARK_0_TO_4_AND_6
    assert RoaringBitmapArray.deserialize(_SPARK_0_TO_4_AND_6).to_numpy().tolist() == [0, 1, 2, 3, 4, 6]


def test_to_numpy_is_cached_and_read_only() -> None:
    bitmap = RoaringBitmapArray.from_indices([5, 1])
    rows = bitmap.to_numpy()
    assert rows is bitmap.to_numpy() and not rows.flags.writeable
    with pytest.raises(ValueError):
        rows[0] = 9


def test_empty_bitmap_layout() -> None:
    empty = RoaringBitmapArray()
    assert empty.serialize() == struct.pack("<iq", PORTABLE_MAGIC, 0)
    assert RoaringBitmapArray.deserialize(empty.serialize()) == empty
    assert not empty and empty.cardinality == 0 and empty.max is None
    assert empty.to_numpy().dtype == np.uint64 and empty.to_numpy().size == 0
    assert RoaringBitmapArray.from_indices(np.array([], dtype=np.int64)) == empty
    assert 0 not in empty and -1 not in empty and "x" not in empty


def test_empty_buckets_are_written_densely_like_delta() -> None:
    # Only key 2 is used: Delta writes buckets 0 and 1 as empty bitmaps before it.
    data = RoaringBitmapArray.from_indices([(2 << 32) | 7]).serialize()
    empty_bucket = struct.pack("<II", 12346, 0)
    head = struct.pack("<iq", PORTABLE_MAGIC, 3) + struct.pack("<I", 0) + empty_bucket + struct.pack("<I", 1) + empty_bucket
    assert data.startswith(head + struct.pack("<I", 2))
    # A sparse input (gap at key 1) is read, and written back densely, as Delta does.
    bucket = data[len(head) + 4 :]
    sparse = struct.pack("<iq", PORTABLE_MAGIC, 1) + struct.pack("<I", 2) + bucket
    assert RoaringBitmapArray.deserialize(sparse).serialize() == data
    # A trailing empty bucket that was read is kept, so re-serialising gives the same bytes.
    trailing = struct.pack("<iq", PORTABLE_MAGIC, 4) + data[12:] + struct.pack("<I", 3) + empty_bucket
    read = RoaringBitmapArray.deserialize(trailing)
    assert read.to_numpy().tolist() == [(2 << 32) | 7]
    assert read.bucket_count == 4
    assert read.serialize() == trailing


def test_reads_the_legacy_native_format() -> None:
    from pyroaring import BitMap

    low0, low1 = BitMap([1, 5]).serialize(), BitMap([2]).serialize()
    native = struct.pack("<ii", NATIVE_MAGIC, 2) + struct.pack("<i", len(low0)) + low0 + struct.pack("<i", len(low1)) + low1
    assert RoaringBitmapArray.deserialize(native).to_numpy().tolist() == [1, 5, (1 << 32) | 2]
    bad_size = native[:8] + struct.pack("<i", len(low0) + 1) + native[12:]
    with pytest.raises(CorruptDeletionVectorError, match="declares"):
        RoaringBitmapArray.deserialize(bad_size)


def test_reads_the_protocol_inline_example() -> None:
    # PROTOCOL.md's "JSON Example 3 - Inline": legacy layout with big-endian framing.
    dv = DeletionVectorDescriptor("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", 40, 6)
    bitmap = read_deletion_vector(LocalFileIO(), "/nonexistent", dv)
    assert bitmap.to_numpy().tolist() == [3, 4, 7, 11, 18, 29]


def _valid_bytes() -> bytes:
    return RoaringBitmapArray.from_indices([0, 1, 2, 3, 4, 6, 70_000, (1 << 32) | 9, *range(100_000, 105_000)]).serialize()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b"\x00\x00\x00\x00" + b[4:], "unknown RoaringBitmapArray magic"),
        (lambda b: b[:3], "too few"),
        (lambda b: b[:10], "no room for the bucket count"),
        (lambda b: b[:4] + struct.pack("<q", -1) + b[12:], "bucket count -1"),
        (lambda b: b[:4] + struct.pack("<q", 10**9) + b[12:], "bucket count 1000000000"),
        (lambda b: b[:12] + struct.pack("<I", 2**31) + b[16:], "most significant bit"),
        (lambda b: b[:16] + b"\x01\x02\x03\x04" + b[20:], "bad 32-bit Roaring cookie"),
        (lambda b: b + b"\x00", "unexpected bytes after the bitmap"),
        (lambda b: b[:-1], "truncated"),
    ],
)
def test_bitmap_array_errors(mutate: Any, message: str) -> None:
    with pytest.raises(CorruptDeletionVectorError, match=message):
        RoaringBitmapArray.deserialize(mutate(_valid_bytes()), "test-bytes")


def test_bucket_keys_must_ascend() -> None:
    one = RoaringBitmapArray.from_indices([5]).serialize()[16:]
    data = struct.pack("<iq", PORTABLE_MAGIC, 2) + struct.pack("<I", 3) + one + struct.pack("<I", 3) + one
    with pytest.raises(CorruptDeletionVectorError, match="strictly ascending"):
        RoaringBitmapArray.deserialize(data)


@FAST
@given(st.data())
def test_every_truncation_and_corruption_is_a_typed_error(data: st.DataObject) -> None:
    valid = _valid_bytes()
    cut = data.draw(st.integers(0, len(valid) - 1))
    with pytest.raises(CorruptDeletionVectorError):
        RoaringBitmapArray.deserialize(valid[:cut])
    flipped = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 4))):
        flipped[data.draw(st.integers(0, len(valid) - 1))] ^= data.draw(st.integers(1, 255))
    try:
        RoaringBitmapArray.deserialize(bytes(flipped))
    except CorruptDeletionVectorError:
        pass  # corruption detected; any other exception type fails the test


@pytest.mark.parametrize(
    ("rows", "message"),
    [([-1, 2], ">= 0"), (np.array([1.5]), "integers"), ([MAX_ROW_INDEX + 1], "larger than"), (pa.array([1, None]), "nulls")],
)
def test_from_indices_rejects_invalid_rows(rows: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RoaringBitmapArray.from_indices(rows)
