"""Arrow <-> numpy without pandas: building Arrow arrays and scalars from buffers, and back.

pyarrow imports pandas (when installed; ~55 MB resident) the first time a Python or numpy
object is converted: ``pa.array(ndarray)``, ``pa.scalar``, ``Array.to_numpy``, a Python
scalar argument to a compute function. The hot paths of log replay convert through these
helpers instead, so that loading a snapshot does not pull pandas in. They know nothing of
Delta: plain int64/int32/string/boolean arrays and masks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

__all__ = [
    "bool_array",
    "bool_scalar",
    "int32_array",
    "int64_array",
    "int64_to_numpy",
    "mask_to_numpy",
    "string_array",
    "string_scalar",
]


def int64_array(values: np.ndarray) -> pa.Array:
    """An int64 Arrow array over (a contiguous copy of) ``values``, no nulls."""
    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def int32_array(values: np.ndarray) -> pa.Array:
    """An int32 Arrow array over (a contiguous copy of) ``values``, no nulls."""
    data = np.ascontiguousarray(values, dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), len(data), [None, pa.py_buffer(data)])


def string_array(values: Sequence[str]) -> pa.Array:
    """A string Arrow array of Python strings, no nulls."""
    encoded = [v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def bool_array(values: np.ndarray) -> pa.BooleanArray:
    """A boolean Arrow array of ``values``, no nulls."""
    values = np.asarray(values, dtype=bool)
    bits = np.packbits(values, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])


def bool_scalar(value: bool) -> pa.BooleanScalar:
    return bool_array(np.array([value]))[0]


def string_scalar(value: str | None) -> pa.StringScalar:
    if value is None:
        return pa.nulls(1, pa.string())[0]
    data = value.encode()
    offsets = np.array([0, len(data)], dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])[0]


def mask_to_numpy(mask: pa.BooleanArray | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow array as a numpy bool array; nulls count as False."""
    if isinstance(mask, pa.ChunkedArray):
        if mask.num_chunks == 0:
            return np.zeros(0, dtype=bool)
        return np.concatenate([mask_to_numpy(c) for c in mask.chunks])
    n = len(mask)
    if n == 0:
        return np.zeros(0, dtype=bool)
    validity, data = mask.buffers()[:2]

    def bits(buf: pa.Buffer) -> np.ndarray:
        raw = np.frombuffer(buf, dtype=np.uint8)
        return np.unpackbits(raw, bitorder="little", count=mask.offset + n)[mask.offset:].astype(bool)

    out = bits(data)
    if validity is not None and mask.null_count:
        out &= bits(validity)
    return out


def int64_to_numpy(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An int64 Arrow array without nulls as numpy (zero-copy for one chunk)."""
    if isinstance(arr, pa.ChunkedArray):
        if arr.num_chunks == 1:
            return int64_to_numpy(arr.chunk(0))
        return np.concatenate([int64_to_numpy(c) for c in arr.chunks]) if arr.num_chunks else np.zeros(0, np.int64)
    if arr.type != pa.int64() or arr.null_count:
        raise ValueError("expected int64 values without nulls")
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + len(arr)]
