"""How a commit that lost the race for its version is retried: attempts and backoff."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_delta.engine.model.arguments import check_int, check_number

if TYPE_CHECKING:
    import random

DEFAULT_MAX_ATTEMPTS = 100
DEFAULT_INITIAL_BACKOFF = 0.002  # seconds
DEFAULT_MAX_BACKOFF = 1.0  # seconds


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often, and how patiently, a commit that lost a race is retried.

    ``max_attempts`` counts every attempt to write the commit file, the first one
    included. Between attempts the transaction sleeps a random time in
    ``[0, min(max_backoff, initial_backoff * 2 ** (n - 1))]`` after the n-th lost attempt
    ("full jitter"), so writers that collided do not collide again in lockstep.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    initial_backoff: float = DEFAULT_INITIAL_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF

    def __post_init__(self) -> None:
        check_int("RetryPolicy.max_attempts", self.max_attempts, minimum=1)
        check_number("RetryPolicy.initial_backoff", self.initial_backoff, minimum=0)
        check_number("RetryPolicy.max_backoff", self.max_backoff, minimum=0)

    def backoff(self, lost_attempts: int, rng: random.Random) -> float:
        ceiling = min(self.max_backoff, self.initial_backoff * (2 ** max(lost_attempts - 1, 0)))
        return rng.uniform(0.0, ceiling) if ceiling > 0 else 0.0


__all__ = ["DEFAULT_INITIAL_BACKOFF", "DEFAULT_MAX_ATTEMPTS", "DEFAULT_MAX_BACKOFF", "RetryPolicy"]
