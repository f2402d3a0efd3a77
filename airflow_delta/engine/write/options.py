"""Typed options of commits and writes, in place of ``**kwargs``.

They are plain frozen values: the facade's verbs take them, the Spark programs and the
Airflow operators build them from their arguments, and a typo is an error at once
instead of an option silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_delta.engine.errors import InvalidTransactionError
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
        if self.isolation_level is not None:
            level = IsolationLevel.parse(self.isolation_level)
            if level is IsolationLevel.SNAPSHOT_ISOLATION:
                raise InvalidTransactionError(
                    "SnapshotIsolation cannot be asked for: it is used automatically when a transaction only "
                    "rearranges data (dataChange=false); choose Serializable or WriteSerializable"
                )
        if not isinstance(self.retry, RetryPolicy):
            raise InvalidTransactionError(f"retry must be a RetryPolicy, got {type(self.retry).__name__}")


@dataclass(frozen=True, slots=True)
class AppTransaction:
    """An idempotent write's identity: the ``txn`` action ``(app_id, version)``.

    A table that already records ``version`` or later for ``app_id`` refuses the write
    with :class:`~airflow_delta.engine.errors.TransactionAlreadyCommittedError`.
    """

    app_id: str
    version: int

    def __post_init__(self) -> None:
        if not isinstance(self.app_id, str) or not self.app_id:
            raise InvalidTransactionError("AppTransaction.app_id must be a non-empty string")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 0:
            raise InvalidTransactionError(f"AppTransaction.version must be an integer >= 0, got {self.version!r}")


@dataclass(frozen=True, slots=True)
class WriterOptions:
    """How data files are written.

    ``target_file_size``: bytes per file (default ``delta.targetFileSize``, else 128 MiB),
    from the in-memory size of the rows.
    """

    target_file_size: int | None = None

    def __post_init__(self) -> None:
        size = self.target_file_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
            raise InvalidTransactionError(f"target_file_size must be a positive number of bytes, got {size!r}")


__all__ = ["AppTransaction", "CommitOptions", "WriterOptions"]
