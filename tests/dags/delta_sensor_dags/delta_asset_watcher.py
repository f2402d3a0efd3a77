"""A DAG scheduled by a Delta table's commits, through ``AssetWatcher`` and ``DeltaTableCommitTrigger``."""

from __future__ import annotations

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_delta.triggers.delta import DeltaTableCommitTrigger

EVENTS_TABLE = "/data/delta/events"

events = Asset(
    name="delta_events",
    uri=f"file://{EVENTS_TABLE}",
    watchers=[
        AssetWatcher(
            name="delta_events_writes",
            trigger=DeltaTableCommitTrigger(
                table_uri=EVENTS_TABLE, operations=["WRITE", "MERGE"], partition="p = 'a'", poll_interval=30
            ),
        )
    ],
)

with DAG(dag_id="delta_events_consumer", schedule=[events], tags=["delta", "test"]) as dag:

    @task
    def report(**context: object) -> None:
        print(context["triggering_asset_events"])

    report()
