"""Provider metadata for Airflow's ``apache_airflow_provider`` entry point.

The ``delta`` connection's own fields are declared here (``conn-fields``, stored in the
connection's extra) as Airflow 3 providers declare them, so the UI and the API show them
without importing the hook.
"""

from __future__ import annotations

from typing import Any

from airflow_delta import __version__

_INTEGRATION = "Delta Lake"

# The ``delta`` connection's fields and form behaviour, declared once: the provider info
# carries them for the UI and API, and ``DeltaHook`` builds its form and behaviour from them.
DELTA_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["host", "port", "schema", "login", "password", "extra"],
    "relabeling": {},
    "placeholders": {
        "storage_options": '{"AWS_REGION": "eu-west-1"}',
        "spark_conn_id": "spark_default",
        "spark_conf": '{"spark.executor.memory": "4g"}',
        "deploy_mode": "client",
        "storage_conn_id": "aws_default",
        "spark_history_url": "http://spark-history:18080",
        "test_location": "s3://bucket/tables/",
    },
}
DELTA_CONNECTION_FIELDS: dict[str, dict[str, Any]] = {
    "storage_options": {
        "label": "Storage options",
        "description": "JSON object: storage options of the table root (credentials, region, endpoint).",
        "schema": {"type": ["object", "null"]},
    },
    "spark_conn_id": {
        "label": "Spark connection id",
        "description": "The Spark connection the DML jobs are submitted to (default spark_default).",
        "schema": {"type": ["string", "null"], "default": "spark_default"},
    },
    "spark_conf": {
        "label": "Default Spark conf",
        "description": "JSON object of Spark conf for every job; an operator's conf overrides it.",
        "schema": {"type": ["object", "null"]},
    },
    "deploy_mode": {
        "label": "Deploy mode",
        "description": "client or cluster (empty: the Spark connection's). Standalone masters: client only.",
        "schema": {"type": ["string", "null"], "enum": ["client", "cluster"]},
    },
    "maintenance_history_uri": {
        "label": "Maintenance history table",
        "description": "URI of the Delta table the maintenance operators append a record of each run to "
        "(created on first use); empty: Airflow's [delta] maintenance_history_uri, else no history.",
        "schema": {"type": ["string", "null"]},
    },
    "storage_conn_id": {
        "label": "Storage connection id",
        "description": "An aws, wasb, adls or google_cloud_platform connection whose credentials reach "
        "the table's object store (Storage options override what it gives).",
        "schema": {"type": ["string", "null"]},
    },
    "spark_history_url": {
        "label": "Spark history server URL",
        "description": "Where the tasks' Spark application links point (empty: the application's live UI).",
        "schema": {"type": ["string", "null"]},
    },
    "test_location": {
        "label": "Test location",
        "description": "A table or folder URI the Test button lists with the storage options (optional).",
        "schema": {"type": ["string", "null"]},
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-delta",
        "name": "Delta Lake maintenance",
        "description": "Delta Lake DELETE/UPDATE/MERGE and table maintenance on plain Apache Spark.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://delta.io/",
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": _INTEGRATION, "python-modules": ["airflow_delta.hooks.delta"]}],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_delta.operators.convert",
                    "airflow_delta.operators.dml",
                    "airflow_delta.operators.fleet",
                    "airflow_delta.operators.maintenance",
                    "airflow_delta.operators.retry",
                ],
            }
        ],
        "extra-links": ["airflow_delta.operators.links.SparkApplicationLink"],
        "sensors": [{"integration-name": _INTEGRATION, "python-modules": ["airflow_delta.sensors.delta"]}],
        "triggers": [{"integration-name": _INTEGRATION, "python-modules": ["airflow_delta.triggers.delta"]}],
        "connection-types": [
            {
                "hook-class-name": "airflow_delta.hooks.delta.DeltaHook",
                "hook-name": "Delta Lake",
                "connection-type": "delta",
                "ui-field-behaviour": DELTA_UI_FIELD_BEHAVIOUR,
                "conn-fields": DELTA_CONNECTION_FIELDS,
            }
        ],
        # The "Delta tables" page of the Airflow UI (docs/fleet.md).
        "plugins": [{"name": "delta_tables", "plugin-class": "airflow_delta.plugins.delta_tables.DeltaTablesPlugin"}],
        "config": {
            "delta": {
                "description": "airflow-delta: lake maintenance (docs/fleet.md).",
                "options": {
                    "maintenance_history_uri": {
                        "description": "URI of the Delta table that maintenance runs and fleet health checks are "
                        "recorded in, and the \"Delta tables\" page reads. A delta connection's "
                        "maintenance_history_uri extra takes precedence.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "s3://lake/_airflow_delta/maintenance_history",
                        "default": "",
                    },
                },
            }
        },
    }
