"""Typed options of commits and writes, in place of ``**kwargs``.

They are plain frozen values: the facade's verbs take them, the Spark programs and the
Airflow operators build them from their arguments, and a typo is an error at once
instead of an option silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_delta.engine.errors import InvalidTransactionError
from airflow_delta.engine.model.arguments import check_instance, check_int, check_str
from airflow_delta.engine.model.commit_info import ENGINE_INFO
from airflow_delta.engine.write.conflicts import IsolationLevel
from airflow_delta.engine.write.retry import RetryPolicy


@dataclass(frozen=True, slots=True)
class CommitOptions:
    """How a transaction commits.

    ``isolation_level``: Serializable or WriteSerializable (default: the table's
    ``delta.isolationLevel``); SnapshotIsolation is chosen automatically for
    dataChange=false rewrites. ``retry``: attempts and backoff when another writer takes
    the version. ``engine_info`` goes into commitInfo. ``seed`` makes the backoff jitter
    reproducible.
    """

    isolation_level: str | IsolationLevel | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    engine_info: str = ENGINE_INFO
    seed: int | None = None

    def __post_init__(self) -> None:
        check_instance("CommitOptions.isolation_level", self.isolation_level, (str, IsolationLevel), optional=True)
        check_instance("CommitOptions.retry", self.retry, RetryPolicy)
        check_str("CommitOptions.engine_info", self.engine_info, non_empty=True)
        check_int("CommitOptions.seed", self.seed, optional=True)
        if self.isolation_level is not None:
            level = IsolationLevel.parse(self.isolation_level)
            if level is IsolationLevel.SNAPSHOT_ISOLATION:
                raise InvalidTransactionError(
                    "SnapshotIsolation cannot be asked for: it is used automatically when a transaction only "
                    "rearranges data (dataChange=false); choose Serializable or WriteSerializable"
                )


@dataclass(frozen=True, slots=True)
class AppTransaction:
    """An idempotent write's identity: the ``txn`` action ``(app_id, version)``.

    A table that already records ``version`` or later for ``app_id`` refuses the write
    with :class:`~airflow_delta.engine.errors.TransactionAlreadyCommittedError`.
    """

    app_id: str
    version: int

    def __post_init__(self) -> None:
        check_str("AppTransaction.app_id", self.app_id, non_empty=True)
        check_int("AppTransaction.version", self.version, minimum=0)


@dataclass(frozen=True, slots=True)
class WriterOptions:
    """How data files are written.

    ``target_file_size``: bytes per file (default ``delta.targetFileSize``, else 128 MiB),
    from the in-memory size of the rows.
    """

    target_file_size: int | None = None

    def __post_init__(self) -> None:
        check_int("WriterOptions.target_file_size", self.target_file_size, minimum=1, optional=True)


__all__ = ["AppTransaction", "CommitOptions", "WriterOptions"]
