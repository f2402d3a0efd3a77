"""How Delta errors fail an Airflow task: retry a conflict, fail at once on anything else.

Every engine error says whether running the operation again can help
(:attr:`airflow_delta.engine.DeltaError.retryable`). The operators turn it into one of two
task exceptions:

- :class:`DeltaRetryableError`, for conflicts with concurrent writers and commits that
  contention kept from landing. A retry plans again on the newest snapshot. The shipped
  :data:`DELTA_RETRY_POLICY` (Airflow 3.3's ``ExceptionRetryPolicy``) matches it;
- :class:`DeltaNonRetryableError`, an ``AirflowFailException``: an invalid expression,
  an unknown column, an unsupported table feature, a constraint violation, several source
  rows matching one target row. No retry can fix those, so the task fails at once,
  whatever its ``retries``, with the engine's message.

Both keep the engine error as ``delta_error`` (and as ``__cause__``) and its class name
as ``error_class``. The operators and the sensors raise them (so they live here, below
both); DAGs name them by their public module, :mod:`airflow_delta.operators.retry`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_delta.engine import DeltaError

__all__ = ["DELTA_RETRY_POLICY", "DeltaNonRetryableError", "DeltaRetryableError", "task_error"]


class DeltaRetryableError(AirflowException):
    """A Delta conflict (or a commit contention kept from landing) that a retry of the task can resolve."""

    def __init__(self, delta_error: DeltaError) -> None:
        self.delta_error = delta_error
        self.error_class = type(delta_error).__name__
        super().__init__(f"{self.error_class}: {delta_error} (retryable: a retry plans again on the newest snapshot)")


class DeltaNonRetryableError(AirflowFailException):
    """A Delta error no retry fixes; the task fails at once with the engine's message."""

    def __init__(self, delta_error: DeltaError) -> None:
        self.delta_error = delta_error
        self.error_class = type(delta_error).__name__
        super().__init__(f"{self.error_class}: {delta_error}")


def task_error(error: DeltaError) -> DeltaRetryableError | DeltaNonRetryableError:
    """The task exception for an engine error, by its ``retryable``."""
    return DeltaRetryableError(error) if error.retryable else DeltaNonRetryableError(error)


# Their public module: serialized retry policies and DAGs name them there (it re-exports them).
for _public in (DeltaRetryableError, DeltaNonRetryableError):
    _public.__module__ = "airflow_delta.operators.retry"

DELTA_RETRY_POLICY = ExceptionRetryPolicy(
    rules=[
        RetryRule(
            exception=DeltaRetryableError,
            action=RetryAction.RETRY,
            retry_delay=timedelta(seconds=30),
            reason="a concurrent writer won a conflict; retrying on the newest snapshot",
        ),
    ],
    default=RetryAction.DEFAULT,
)
"""Retries Delta conflicts after 30 s (within the task's ``retries``); any other failure
follows the task's ordinary retry settings. Non-retryable Delta errors never reach a
policy: they are ``AirflowFailException``s. Use as ``retry_policy=DELTA_RETRY_POLICY``."""
