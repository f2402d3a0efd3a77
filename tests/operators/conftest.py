"""Fixtures of the Airflow layer's tests (shared with tests/hooks)."""

from tests.airflow_layer import airflow_home  # noqa: F401
