"""Provider metadata for Airflow's ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_delta import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-delta",
        "name": "Delta Lake maintenance",
        "description": "Delta Lake DELETE/UPDATE/MERGE and table maintenance on plain Apache Spark.",
        "versions": [__version__],
        "connection-types": [],
    }
