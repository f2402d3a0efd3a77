"""How a commit that lost the race for its version is retried: attempts and backoff."""

from __future__ import annotations

import random
from dataclasses import dataclass

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
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0:
            raise ValueError("initial_backoff and max_backoff must be >= 0 seconds")

    def backoff(self, lost_attempts: int, rng: random.Random) -> float:
        ceiling = min(self.max_backoff, self.initial_backoff * (2 ** max(lost_attempts - 1, 0)))
        return rng.uniform(0.0, ceiling) if ceiling > 0 else 0.0


__all__ = ["DEFAULT_INITIAL_BACKOFF", "DEFAULT_MAX_ATTEMPTS", "DEFAULT_MAX_BACKOFF", "RetryPolicy"]
