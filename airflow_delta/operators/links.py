"""The task's link to the Spark application its job ran as (an Airflow extra link).

Every operator that submits a Spark job has it: the button opens the application in the
Spark history server when the ``delta`` connection names one (``spark_history_url``), or
its live UI otherwise (gone once the job ends; none when the job ran with the UI off).
A task whose job ran only in its driver process (a DELETE decided from the log, or whose
few rows were found in the driver) registered no application, and has no link.

Airflow computes the link in the worker when the task ends, from the operator that ran,
and keeps it as an XCom; the UI shows that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

__all__ = ["SparkApplicationLink"]


class SparkApplicationLink(BaseOperatorLink):
    """"Spark application": the history server's page of the task's last Spark application, or its live UI."""

    name = "Spark application"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        hook = getattr(operator, "_hook", None)
        if hook is None:
            return ""
        return hook.spark_application_url() or ""
