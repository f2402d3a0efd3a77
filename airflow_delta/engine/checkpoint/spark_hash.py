"""Spark SQL's ``hash()`` of strings, vectorised, and the part it assigns a file action to.

Multi-part checkpoints must be clustered the way Spark's ``HashPartitioning`` does it,
so that racing writers produce identical parts.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

# Spark's HashPartitioning seed; multi-part checkpoints are clustered with it.
SPARK_HASH_SEED = 42

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    return _rotl(k1 * _C1, 15) * _C2


def _mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    h1 = _rotl(h1 ^ k1, 13)
    return h1 * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: np.ndarray, length: np.ndarray) -> np.ndarray:
    h1 = h1 ^ length.astype(np.uint32)
    h1 ^= h1 >> np.uint32(16)
    h1 *= np.uint32(0x85EBCA6B)
    h1 ^= h1 >> np.uint32(13)
    h1 *= np.uint32(0xC2B2AE35)
    h1 ^= h1 >> np.uint32(16)
    return h1


def spark_murmur3_strings(values: pa.Array | pa.ChunkedArray, seeds: np.ndarray | int = SPARK_HASH_SEED) -> np.ndarray:
    """Spark SQL's ``hash()`` of UTF-8 strings (Murmur3_x86_32, Spark's tail handling), vectorised.

    ``seeds`` chains the hash as Spark does for several columns; nulls keep their seed.
    Returns int32 hashes.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    values = values.cast(pa.large_string()) if not pa.types.is_large_string(values.type) else values
    n = len(values)
    seed_arr = np.full(n, seeds, dtype=np.int64) if np.isscalar(seeds) else np.asarray(seeds, dtype=np.int64)
    seed_u32 = (seed_arr & 0xFFFFFFFF).astype(np.uint32)
    if n == 0:
        return seed_u32.view(np.int32)
    _, offsets_buf, data_buf = values.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64, count=values.offset + n + 1)[values.offset :]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    valid = np.asarray(values.is_valid()) if values.null_count else np.ones(n, dtype=bool)
    h1 = seed_u32.copy()
    aligned = lengths - lengths % 4
    for block in range(0, int(aligned.max(initial=0)), 4):
        rows = np.nonzero(aligned > block)[0]
        pos = starts[rows] + block
        word = (
            data[pos].astype(np.uint32)
            | (data[pos + 1].astype(np.uint32) << np.uint32(8))
            | (data[pos + 2].astype(np.uint32) << np.uint32(16))
            | (data[pos + 3].astype(np.uint32) << np.uint32(24))
        )
        h1[rows] = _mix_h1(h1[rows], _mix_k1(word))
    for tail in range(3):
        rows = np.nonzero(lengths - aligned > tail)[0]
        # Spark feeds each trailing byte as a sign-extended int.
        byte = data[starts[rows] + aligned[rows] + tail].astype(np.int8).astype(np.int32).view(np.uint32)
        h1[rows] = _mix_h1(h1[rows], _mix_k1(byte))
    hashed = _fmix(h1, lengths)
    return np.where(valid, hashed, seed_u32).view(np.int32)


def spark_partition_ids(paths: pa.ChunkedArray | pa.Array, dv_ids: pa.ChunkedArray | pa.Array | None, num_parts: int) -> np.ndarray:
    """The 0-based part of each file action, keyed by ``path`` (and ``dv_ids`` when given), as Spark assigns it."""
    hashed = spark_murmur3_strings(paths)
    if dv_ids is not None:
        hashed = spark_murmur3_strings(dv_ids, hashed.astype(np.int64))
    return np.mod(hashed.astype(np.int64), num_parts)

