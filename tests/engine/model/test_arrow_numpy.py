"""Arrow <-> numpy without pandas: the buffer-built arrays and scalars, checked against pyarrow."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.model import arrow_numpy as an


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.booleans()), max_size=70), start=st.integers(0, 70))
def test_mask_to_numpy_matches_pyarrow(values: list[bool | None], start: int) -> None:
    arr = pa.array(values, pa.bool_()).slice(min(start, len(values)))
    expected = [bool(v) for v in arr.to_pylist()]  # nulls count as False
    assert an.mask_to_numpy(arr).tolist() == expected
    assert an.mask_to_numpy(pa.chunked_array([arr, arr], pa.bool_())).tolist() == expected * 2
    assert an.bool_array(np.array(expected, dtype=bool)).to_pylist() == expected


def test_buffer_built_arrays() -> None:
    assert an.int64_array(np.arange(3)).to_pylist() == [0, 1, 2]
    assert an.int64_to_numpy(pa.chunked_array([an.int64_array(np.arange(5)).slice(2)])).tolist() == [2, 3, 4]
    assert an.int32_array(np.array([1, 2])).type == pa.int32()
    assert an.string_array(["a", "", "é"]).to_pylist() == ["a", "", "é"]
    assert an.string_scalar("x").as_py() == "x" and an.string_scalar(None).as_py() is None
    assert an.bool_scalar(True).as_py() is True
    with pytest.raises(ValueError):
        an.int64_to_numpy(pa.array([1, None]))


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.text()), max_size=40))
def test_nullable_string_and_binary_arrays_match_pyarrow(values: list[str | None]) -> None:
    assert an.string_array(values).equals(pa.array(values, pa.string()))
    raw = [None if v is None else v.encode() for v in values]
    assert an.binary_array(raw).equals(pa.array(raw, pa.binary()))


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), max_size=70),
       start=st.integers(0, 70), dictionary=st.booleans())
def test_offsets_and_indices_to_numpy(values: list[int | None], start: int, dictionary: bool) -> None:
    arr = pa.array(values, pa.int32()).slice(min(start, len(values)))
    expected = [-1 if v is None else v for v in arr.to_pylist()]
    assert an.indices_to_numpy(arr, null_value=-1).tolist() == expected
    lists = pa.array([[1] * (abs(v or 0) % 5) for v in values], pa.list_(pa.int64())).slice(min(start, len(values)))
    offsets = an.offsets_to_numpy(lists)
    assert np.diff(offsets).tolist() == [len(x) for x in lists.to_pylist()]
    valid = np.array([v is not None for v in values], dtype=bool)
    built = an.int32_array(np.array([v or 0 for v in values]), valid=valid)
    assert built.to_pylist() == [v if v is not None else None for v in values]


@pytest.mark.parametrize("arrow_type", [pa.int64(), pa.string(), pa.timestamp("us", tz="UTC"), pa.struct([("a", pa.int32())])])
def test_null_scalar_empty_table_and_combined(arrow_type: pa.DataType) -> None:
    assert an.null_scalar(arrow_type).equals(pa.scalar(None, arrow_type))
    schema = pa.schema([("x", arrow_type)])
    assert an.empty_table(schema).equals(schema.empty_table())
    assert an.combined(pa.chunked_array([], arrow_type)).equals(pa.array([], arrow_type))
    two = pa.chunked_array([pa.nulls(2, arrow_type), pa.nulls(1, arrow_type)])
    assert an.combined(two).equals(two.combine_chunks())
    assert an.int64_scalar(7).as_py() == 7
