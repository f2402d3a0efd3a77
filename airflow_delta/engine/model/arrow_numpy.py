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
from pyarrow._acero import AggregateNodeOptions, Declaration, HashJoinNodeOptions, TableSourceNodeOptions

__all__ = [
    "binary_array",
    "bool_array",
    "bool_scalar",
    "combined",
    "empty_table",
    "group_row_indices",
    "indices_to_numpy",
    "inner_hash_join",
    "int32_array",
    "int64_array",
    "int64_scalar",
    "int64_to_numpy",
    "mask_to_numpy",
    "null_scalar",
    "offsets_to_numpy",
    "string_array",
    "string_scalar",
]


def int64_array(values: np.ndarray) -> pa.Array:
    """An int64 Arrow array over (a contiguous copy of) ``values``, no nulls."""
    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def int32_array(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """An int32 Arrow array over (a contiguous copy of) ``values``; null where ``valid`` is False."""
    data = np.ascontiguousarray(values, dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), len(data), [_validity(valid), pa.py_buffer(data)])


def _validity(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None or bool(np.all(valid)):
        return None
    return pa.py_buffer(np.packbits(np.asarray(valid, dtype=bool), bitorder="little"))


def string_array(values: Sequence[str | None]) -> pa.Array:
    """A string Arrow array of Python strings (None is null)."""
    return _binary_like(pa.string(), [None if v is None else v.encode() for v in values])


def binary_array(values: Sequence[bytes | None]) -> pa.Array:
    """A binary Arrow array of Python bytes (None is null)."""
    return _binary_like(pa.binary(), list(values))


def _binary_like(arrow_type: pa.DataType, encoded: list[bytes | None]) -> pa.Array:
    valid = np.fromiter((e is not None for e in encoded), dtype=bool, count=len(encoded))
    present = [e if e is not None else b"" for e in encoded]
    offsets = np.zeros(len(present) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in present], out=offsets[1:])
    return pa.Array.from_buffers(
        arrow_type, len(present), [_validity(valid), pa.py_buffer(offsets), pa.py_buffer(b"".join(present))]
    )


def int64_scalar(value: int) -> pa.Int64Scalar:
    return int64_array(np.array([value]))[0]


def null_scalar(arrow_type: pa.DataType) -> pa.Scalar:
    """A null scalar of ``arrow_type`` (``pa.scalar(None, t)`` would import pandas)."""
    return pa.nulls(1, arrow_type)[0]


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


def offsets_to_numpy(arr: pa.ListArray | pa.MapArray | pa.StringArray) -> np.ndarray:
    """The ``len(arr) + 1`` offsets of a list, map or string array as int64 numpy (absolute, not rebased)."""
    dtype = np.int64 if pa.types.is_large_list(arr.type) or pa.types.is_large_string(arr.type) else np.int32
    raw = np.frombuffer(arr.buffers()[1], dtype=dtype)
    return raw[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)


def indices_to_numpy(arr: pa.Array, null_value: int = -1) -> np.ndarray:
    """An integer Arrow array (dictionary indices, say) as int64 numpy; nulls become ``null_value``."""
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    dtype = _NUMPY_INT[arr.type.id]
    out = np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset:arr.offset + len(arr)].astype(np.int64)
    if arr.null_count:
        out[~mask_to_numpy(arr.is_valid())] = null_value
    return out


_NUMPY_INT = {
    pa.int8().id: np.int8, pa.int16().id: np.int16, pa.int32().id: np.int32, pa.int64().id: np.int64,
    pa.uint8().id: np.uint8, pa.uint16().id: np.uint16, pa.uint32().id: np.uint32, pa.uint64().id: np.uint64,
}


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` without rows (``Schema.empty_table()`` imports pandas)."""
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


def combined(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One array of a column's chunks (``combine_chunks`` of zero chunks imports pandas)."""
    if isinstance(column, pa.Array):
        return column
    if column.num_chunks == 1:
        return column.chunk(0)
    if column.num_chunks == 0:
        return pa.nulls(0, column.type)
    return column.combine_chunks()


def group_row_indices(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """One row per distinct combination of ``keys`` in ``table`` (nulls are a group), with
    ``__row_list``: the positions of its rows in ``table``, ascending.

    ``Table.group_by(keys).aggregate([("__row", "list")])`` through the same Acero plan
    (``pyarrow.acero``, which ``group_by`` uses, imports ``pyarrow.dataset`` and pandas).
    """
    indexed = table.select(list(keys)).append_column("__row", int64_array(np.arange(table.num_rows, dtype=np.int64)))
    plan = Declaration.from_sequence([
        Declaration("table_source", TableSourceNodeOptions(indexed)),
        Declaration("aggregate", AggregateNodeOptions([(["__row"], "hash_list", None, "__row_list")], keys=list(keys))),
    ])
    return plan.to_table(use_threads=False)


def inner_hash_join(
    probe: pa.Table, build: pa.Table, keys: Sequence[str], probe_output: Sequence[str], build_output: Sequence[str]
) -> pa.Table:
    """``probe.join(build, keys, join_type="inner")`` keeping ``probe_output`` and ``build_output``
    columns, through the same Acero plan without importing ``pyarrow.acero`` (which imports
    ``pyarrow.dataset`` and pandas). The hash table is built from ``build``; NULL keys never
    match; rows come in no particular order (threads)."""
    options = HashJoinNodeOptions("inner", list(keys), list(keys), left_output=list(probe_output),
                                  right_output=list(build_output))
    plan = Declaration("hashjoin", options, inputs=[
        Declaration("table_source", TableSourceNodeOptions(probe)),
        Declaration("table_source", TableSourceNodeOptions(build)),
    ])
    return plan.to_table(use_threads=True)
