"""Fixtures of the Airflow layer's tests (shared with tests/operators)."""

from tests.airflow_layer import airflow_home  # noqa: F401
