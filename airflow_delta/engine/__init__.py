"""The Delta transaction-log engine: reads, replays and commits ``_delta_log``.

It imports neither Airflow nor Spark. Protocol knowledge (log layout, replay, conflict
rules) lives here; storage goes through :mod:`airflow_delta.engine.storage.fileio`.
"""

from airflow_delta.engine.errors import DeltaError
from airflow_delta.engine.table import DeltaTable

__all__ = ["DeltaError", "DeltaTable"]
