"""The "Delta tables" page of the Airflow UI, as a plugin: its app and its entry in the UI's navigation.

An Airflow 3.1+ plugin: a FastAPI app mounted on the api-server at ``/delta-tables``
(:mod:`airflow_delta.plugins.delta_tables_app`) and an external view that puts it in the
UI's navigation (Browse > Delta tables).

Airflow loads every plugin in every process that loads plugins, task processes included,
so this module imports nothing heavy: the app, and with it FastAPI, Airflow's API security
and the engine, is imported when the api-server asks for ``fastapi_apps``.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/delta-tables"


class _AppsOnFirstUse:
    """``fastapi_apps`` of the plugin, built when first read (by the api-server), then kept."""

    def __init__(self) -> None:
        self._apps: list[dict[str, Any]] | None = None

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        if self._apps is None:
            from airflow_delta.plugins.delta_tables_app import app

            self._apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Delta tables"}]
        return self._apps


class DeltaTablesPlugin(AirflowPlugin):
    """The "Delta tables" page: the app, and its entry in the UI's Browse menu."""

    name = "delta_tables"
    fastapi_apps = _AppsOnFirstUse()  # type: ignore[assignment]  # a list when read
    external_views = [{
        "name": "Delta tables",
        "href": "delta-tables/",
        "destination": "nav",
        "category": "browse",
        "url_route": "delta-tables",
    }]


__all__ = ["URL_PREFIX", "DeltaTablesPlugin"]
