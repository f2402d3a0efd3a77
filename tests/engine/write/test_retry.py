"""How a commit that lost the race for its version is retried: the retry policy and its backoff."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.engine.write.retry import RetryPolicy


@given(lost=st.integers(1, 40), initial=st.floats(0, 1), cap=st.floats(0, 5), seed=st.integers(0, 2**32))
def test_backoff_is_full_jitter_within_the_exponential_cap(lost: int, initial: float, cap: float, seed: int) -> None:
    policy = RetryPolicy(10, initial, cap)
    delay = policy.backoff(lost, random.Random(seed))
    assert 0.0 <= delay <= min(cap, initial * 2 ** (lost - 1))



def test_retry_policy_rejects_nonsense() -> None:
    with pytest.raises(InvalidArgumentError, match="max_attempts=0"):
        RetryPolicy(0)
    with pytest.raises(InvalidArgumentError, match=r"initial_backoff=-1\.0"):
        RetryPolicy(3, -1.0)

