"""How Delta errors fail an Airflow task: retry a conflict, fail at once on anything else.

The classes live in :mod:`airflow_delta.hooks.task_errors`, below the operators and the
sensors, which both raise them; this module is their public name for DAG authors
(``retry_policy=DELTA_RETRY_POLICY``), kept so that DAGs and serialized policies go on
naming ``airflow_delta.operators.retry``.
"""

from __future__ import annotations

from airflow_delta.hooks.task_errors import DELTA_RETRY_POLICY, DeltaNonRetryableError, DeltaRetryableError, task_error

__all__ = ["DELTA_RETRY_POLICY", "DeltaNonRetryableError", "DeltaRetryableError", "task_error"]
