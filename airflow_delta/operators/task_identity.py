"""The task instance an operator runs for, as the Spark layer's :class:`TaskIdentity`.

Every operator that commits exactly once per task instance (DML, OPTIMIZE, RESTORE)
derives its ``txn`` appId and commit tags from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_delta.spark.specs import TaskIdentity

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["task_identity"]


def task_identity(context: Context) -> TaskIdentity:
    """The dag, task, run and map index of the task instance in ``context`` (map index -1 when unmapped)."""
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    return TaskIdentity(
        dag_id=ti.dag_id,
        task_id=ti.task_id,
        run_id=context["run_id"],
        map_index=-1 if map_index is None else int(map_index),
    )
