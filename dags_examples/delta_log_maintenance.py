"""Delta log maintenance: checkpoint a table when its log has grown, then clean up expired log files.

Trigger with a ``table_uri`` (a local path, ``file://`` URI or a pyarrow.fs URI), e.g.::

    airflow dags test delta_log_maintenance -c '{"table_uri": "/data/events"}'

Tasks, in order:

1. ``inspect_table``: the table's latest version, live files and bytes, protocol
   features and how many commits were made since its last checkpoint;
2. ``checkpoint_if_due``: writes a checkpoint of that version when more than
   ``checkpoint_threshold`` commits follow the last checkpoint (readers replay those
   commits one JSON file at a time on every load);
3. ``cleanup_expired_log``: deletes commits, checkpoints and ``.crc`` files older than
   the log retention (``log_retention``, else the table's ``delta.logRetentionDuration``,
   30 days by default), always keeping a checkpoint every retained version can be read from;
4. ``report``: one summary of what was done.

Every task calls the airflow_delta engine directly. Engine errors (table not found, a
protocol feature the engine does not support, an invalid interval) are typed
``DeltaError`` subclasses and fail the task with a message that says what to fix.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.compute as pc
from airflow.sdk import Param, dag, get_current_context, task

from airflow_delta.engine import DeltaTable, parse_interval, reader_features, writer_features

# A plain name: Airflow imports DAG files under a generated module name.
log = logging.getLogger("delta_log_maintenance")


def _params() -> dict[str, Any]:
    """This run's params: the DAG's defaults, overridden by the trigger's conf."""
    return dict(get_current_context()["params"])


def _retention_override(params: dict[str, Any]) -> timedelta | None:
    """The ``log_retention`` param as a duration, or None to use the table's own ``delta.logRetentionDuration``."""
    value = params.get("log_retention")
    if value is None or not str(value).strip():
        return None
    return parse_interval("log_retention", str(value))  # InvalidTablePropertyError says what a valid one looks like


@dag(
    dag_id="delta_log_maintenance",
    schedule=None,
    start_date=datetime(2025, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["delta", "maintenance"],
    doc_md=__doc__,
    params={
        "table_uri": Param(
            type="string",
            minLength=1,
            title="Table URI",
            description="The Delta table: a local path, file:// URI or a URI pyarrow.fs understands.",
        ),
        "log_retention": Param(
            None,
            type=["null", "string"],
            title="Log retention",
            description=(
                "How long to keep log files, e.g. 'interval 30 days'. "
                "Empty: the table's delta.logRetentionDuration (30 days by default)."
            ),
        ),
        "checkpoint_threshold": Param(
            10,
            type="integer",
            minimum=0,
            title="Checkpoint threshold",
            description="Write a checkpoint when more than this many commits follow the last checkpoint.",
        ),
    },
)
def delta_log_maintenance() -> None:
    # multiple_outputs=False: a returned dict is one XCom, not one per key.
    @task(multiple_outputs=False)
    def inspect_table() -> dict[str, Any]:
        """State of the latest version: what the following tasks decide on, and what the report shows."""
        params = _params()
        retention = _retention_override(params)  # a bad interval fails here, before anything is written
        table = DeltaTable(params["table_uri"])
        snapshot = table.snapshot()
        segment = snapshot.log_segment
        sizes = snapshot.add_actions.column("size")
        return {
            "version": snapshot.version,
            "num_files": snapshot.num_files,
            "size_bytes": int(pc.sum(sizes).as_py() or 0),
            "min_reader_version": snapshot.protocol.min_reader_version,
            "min_writer_version": snapshot.protocol.min_writer_version,
            "reader_features": sorted(reader_features(snapshot.protocol)),
            "writer_features": sorted(writer_features(snapshot.protocol)),
            "last_checkpoint_version": segment.checkpoint_version,
            "commits_since_checkpoint": len(segment.commit_versions),
            "log_retention_seconds": int(
                (snapshot.properties.log_retention if retention is None else retention).total_seconds()
            ),
        }

    @task
    def checkpoint_if_due(inspected: dict[str, Any]) -> int | None:
        """Checkpoint the inspected version if enough commits follow the last checkpoint; the version written, or None."""
        params = _params()
        threshold = int(params["checkpoint_threshold"])
        pending = inspected["commits_since_checkpoint"]
        if pending <= threshold:
            log.info("%d commits since the last checkpoint (threshold %d): no checkpoint needed", pending, threshold)
            return None
        version = DeltaTable(params["table_uri"]).checkpoint(inspected["version"]).version
        log.info("wrote a checkpoint of version %d (%d commits since the last one)", version, pending)
        return version

    @task
    def cleanup_expired_log(checkpointed: int | None) -> list[str]:
        """Delete expired log files; runs after the checkpoint so cleanup can anchor on it. Names deleted."""
        params = _params()
        table = DeltaTable(params["table_uri"])
        deleted = table.cleanup_log(retention=_retention_override(params))
        prefix = f"{table.log_dir}/"
        names = [path.removeprefix(prefix) for path in deleted]
        log.info("deleted %d expired log files%s", len(names), f": {names}" if names else "")
        return names

    @task(multiple_outputs=False)
    def report(inspected: dict[str, Any], checkpointed: int | None, deleted: list[str]) -> dict[str, Any]:
        """One summary of the run, logged and returned as XCom."""
        summary = {
            **inspected,
            "checkpoint_written": checkpointed,
            "log_files_deleted": len(deleted),
        }
        log.info(
            "version %d, %d files (%d bytes), reader features %s, writer features %s; "
            "checkpoint written: %s; expired log files deleted: %d",
            inspected["version"],
            inspected["num_files"],
            inspected["size_bytes"],
            inspected["reader_features"] or "none",
            inspected["writer_features"] or "none",
            "none" if checkpointed is None else f"version {checkpointed}",
            len(deleted),
        )
        return summary

    inspected = inspect_table()
    checkpointed = checkpoint_if_due(inspected)
    deleted = cleanup_expired_log(checkpointed)
    report(inspected, checkpointed, deleted)


delta_log_maintenance()
