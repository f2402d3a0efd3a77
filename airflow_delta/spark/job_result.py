"""What a DML job did, as one small value: the JSON the job prints and the operator returns.

It is pyspark-free (the operators import it) and can be rebuilt from the table's log
alone: every commit of a job carries the task's identity and the attempt count in its
``commitInfo.tags`` (:data:`TAG_APP_ID`, :data:`TAG_ATTEMPTS`, ...), so the operator
finds the commit by the task's ``txn`` appId and reads the result back with
:meth:`JobResult.from_commit_info`, wherever the driver ran.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_delta.engine import InvalidArgumentError, InvalidLogError

if TYPE_CHECKING:
    from airflow_delta.engine import DeltaTable
    from airflow_delta.spark.specs import TaskIdentity

__all__ = [
    "TAG_APP_ID",
    "TAG_ATTEMPTS",
    "TAG_DAG_ID",
    "TAG_MAP_INDEX",
    "TAG_RUN_ID",
    "TAG_TASK_ID",
    "JobResult",
    "find_job_commit",
    "job_tags",
]

TAG_APP_ID = "airflowDelta.appId"
TAG_ATTEMPTS = "airflowDelta.attempts"
TAG_DAG_ID = "airflowDelta.dagId"
TAG_TASK_ID = "airflowDelta.taskId"
TAG_RUN_ID = "airflowDelta.runId"
TAG_MAP_INDEX = "airflowDelta.mapIndex"


def job_tags(identity: TaskIdentity, attempt: int) -> dict[str, str]:
    """The ``commitInfo.tags`` of a commit made for the task instance ``identity`` on its ``attempt``-th plan.

    Every commit a job or a worker-run operator makes for a task carries them: the
    appId finds the commit again, the rest says which task wrote it.
    """
    return {
        TAG_APP_ID: identity.app_id,
        TAG_ATTEMPTS: str(attempt),
        TAG_DAG_ID: identity.dag_id,
        TAG_TASK_ID: identity.task_id,
        TAG_RUN_ID: identity.run_id,
        TAG_MAP_INDEX: str(identity.map_index),
    }


@dataclass(frozen=True)
class JobResult:
    """The outcome of one DML job.

    ``version`` is the committed version, None when the job committed nothing (no row
    matched); ``read_version`` the snapshot its last attempt planned on; ``operation``
    Delta's name (DELETE, UPDATE, MERGE); ``metrics`` Delta's ``operationMetrics``
    (as ints); ``attempts`` how many times the job planned and ran the work (1 unless a
    logical conflict made it start again).
    """

    version: int | None
    read_version: int
    operation: str
    metrics: Mapping[str, int] = field(default_factory=dict)
    attempts: int = 1

    def __post_init__(self) -> None:
        if self.version is not None and (type(self.version) is not int or self.version < 0):
            raise InvalidArgumentError("JobResult.version", self.version, "an int >= 0, or None")
        if type(self.read_version) is not int or self.read_version < 0:
            raise InvalidArgumentError("JobResult.read_version", self.read_version, "an int >= 0")
        if not isinstance(self.operation, str) or not self.operation:
            raise InvalidArgumentError("JobResult.operation", self.operation, "Delta's operation name, e.g. 'DELETE'")
        if type(self.attempts) is not int or self.attempts < 1:
            raise InvalidArgumentError("JobResult.attempts", self.attempts, "an int >= 1")
        metrics = dict(self.metrics)
        if not all(isinstance(k, str) and type(v) is int for k, v in metrics.items()):
            raise InvalidArgumentError("JobResult.metrics", metrics, "a dict of metric name -> int")
        object.__setattr__(self, "metrics", metrics)

    def to_obj(self) -> dict[str, Any]:
        """The JSON object (camelCase keys, as the job prints it and the operator returns it)."""
        return {
            "version": self.version,
            "readVersion": self.read_version,
            "operation": self.operation,
            "metrics": dict(self.metrics),
            "attempts": self.attempts,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_obj(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_obj(cls, value: object) -> JobResult:
        keys = {"version", "readVersion", "operation", "metrics", "attempts"}
        if not isinstance(value, dict) or set(value) != keys:
            raise InvalidArgumentError("JobResult", value, f"a JSON object with exactly the keys {sorted(keys)}")
        metrics = value["metrics"]
        if not isinstance(metrics, dict):
            raise InvalidArgumentError("JobResult.metrics", metrics, "a JSON object of metric name -> int")
        return cls(value["version"], value["readVersion"], value["operation"], metrics, value["attempts"])

    @classmethod
    def from_json(cls, text: str | bytes) -> JobResult:
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as error:
            raise InvalidArgumentError("JobResult", text, f"a JSON document ({error})") from None
        return cls.from_obj(value)

    @classmethod
    def from_commit_info(cls, version: int, commit_info: Mapping[str, Any]) -> JobResult:
        """The result of the job that wrote ``commit_info`` (a ``commitInfo`` as ``DeltaTable.history`` gives it).

        Delta writes ``operationMetrics`` values as strings; they are read back as ints.
        A commit without the job's tags is refused: it was not written by a job.
        """
        tags = commit_info.get("tags") or {}
        if TAG_APP_ID not in tags:
            raise InvalidArgumentError(
                "commit_info", dict(commit_info), f"the commitInfo of a job's commit (tags with {TAG_APP_ID!r})"
            )
        try:
            metrics = {str(k): int(v) for k, v in (commit_info.get("operationMetrics") or {}).items()}
            attempts = int(tags.get(TAG_ATTEMPTS, 1))
            read_version = int(commit_info.get("readVersion", version - 1))
        except (TypeError, ValueError) as error:
            raise InvalidLogError(f"the commitInfo of version {version} is not a job's commit: {error}") from None
        return cls(version, read_version, str(commit_info.get("operation")), metrics, attempts)


def find_job_commit(table: DeltaTable, app_id: str, *, limit: int | None = None) -> JobResult | None:
    """The result of the commit the job with ``app_id`` wrote, found in the log's history; None if there is none.

    The history is searched newest first (``limit`` commits at most; None: all the log
    keeps). Call it when the snapshot's ``txn`` for ``app_id`` says that the job
    committed: log cleanup can have removed the commit itself, and then None comes back
    although the job did commit.
    """
    for info in table.history(limit=limit):
        tags = info.get("tags") or {}
        if tags.get(TAG_APP_ID) == app_id:
            return JobResult.from_commit_info(int(info["version"]), info)
    return None
