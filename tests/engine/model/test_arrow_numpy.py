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
