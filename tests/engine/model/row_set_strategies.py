"""Hypothesis strategies for sets of row indexes (deletion vectors), shared by the DV test modules."""

from __future__ import annotations

from hypothesis import strategies as st

_low = st.integers(0, 2**32 - 1)
row_sets = st.one_of(
    st.sets(st.integers(0, 5000), max_size=300),  # one dense bucket
    st.sets(st.builds(lambda k, v: (k << 32) | v, st.integers(0, 4), _low), max_size=200),  # several buckets
    st.sets(st.integers(0, 2**40), max_size=5),  # sparse, far apart (up to 256 buckets)
    st.builds(  # runs (bitset and run containers) plus stragglers in a far bucket
        lambda start, length, extra: set(range(start, start + length)) | extra,
        st.integers(0, 2**32 - 70_000),
        st.integers(0, 70_000),
        st.sets(st.builds(lambda v: (3 << 32) | v, _low), max_size=20),
    ),
)
