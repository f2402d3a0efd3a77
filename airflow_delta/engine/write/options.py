"""Typed options of commits and writes, in place of ``**kwargs``.

They are plain frozen values: the facade's verbs take them, the Spark programs and the
Airflow operators build them from their arguments, and a typo is an error at once
instead of an option silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_delta.engine.errors import InvalidArgumentError, InvalidTransactionError
from airflow_delta.engine.model.arguments import (
    check_bool,
    check_instance,
    check_int,
    check_number,
    check_str,
    check_str_sequence,
)
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


# Delta's spark.databricks.delta.optimize.maxFileSize and minFileSize (both 1 GiB) and
# maxDeletedRowsRatio (0.05).
OPTIMIZE_DEFAULT_FILE_SIZE = 1 << 30
OPTIMIZE_DEFAULT_MAX_DELETED_ROWS_RATIO = 0.05


@dataclass(frozen=True, slots=True)
class OptimizeOptions:
    """What an OPTIMIZE rewrites, and how much of it in one run.

    ``where``: a SQL predicate on partition columns only (Delta refuses others).
    ``zorder_by``: data columns with statistics to Z-order by (every file of each
    selected partition is rewritten, as in Delta). ``target_file_size`` stands for both
    ``max_file_size`` and ``min_file_size`` when they are not given; its default is
    ``delta.targetFileSize``, else Delta's 1 GiB. Files smaller than ``min_file_size`` are
    compacted into bins of up to ``max_file_size`` bytes per partition; a file whose
    deletion vector deletes more than ``max_deleted_rows_ratio`` of its rows is rewritten
    without them (REORG ... APPLY (PURGE) is ``max_deleted_rows_ratio=0``).
    ``max_files`` / ``max_bytes``: the run's budget of input files and bytes; bins that
    do not fit are left for the next run. ``batch_size``: bytes of input per commit
    (default: one commit), so a failure or conflict loses at most one batch.
    ``dry_run``: plan only, write and commit nothing.

    On a clustered table (liquid clustering) OPTIMIZE clusters by the table's clustering
    columns, incrementally: files already clustered into a ZCube are left alone, the
    others are clustered together (Delta's OPTIMIZE). ``full``: recluster every file
    (Delta's OPTIMIZE FULL; clustered tables only). ``zorder_by`` and ``where`` are
    refused there, as Delta refuses them.
    """

    where: str | None = None
    zorder_by: tuple[str, ...] = ()
    target_file_size: int | None = None
    min_file_size: int | None = None
    max_file_size: int | None = None
    max_deleted_rows_ratio: float = OPTIMIZE_DEFAULT_MAX_DELETED_ROWS_RATIO
    max_files: int | None = None
    max_bytes: int | None = None
    batch_size: int | None = None
    dry_run: bool = False
    full: bool = False

    def __post_init__(self) -> None:
        check_str("OptimizeOptions.where", self.where, non_empty=True, optional=True)
        zorder = check_str_sequence("OptimizeOptions.zorder_by", self.zorder_by, allow_single=True)
        object.__setattr__(self, "zorder_by", tuple(zorder or ()))
        folded = [c.casefold() for c in self.zorder_by]
        if len(set(folded)) != len(folded):
            raise InvalidArgumentError("OptimizeOptions.zorder_by", self.zorder_by, "each column once")
        for name in ("target_file_size", "min_file_size", "max_file_size", "max_files", "max_bytes", "batch_size"):
            check_int(f"OptimizeOptions.{name}", getattr(self, name), minimum=1, optional=True)
        check_number("OptimizeOptions.max_deleted_rows_ratio", self.max_deleted_rows_ratio, minimum=0)
        if self.max_deleted_rows_ratio > 1:
            raise InvalidArgumentError(
                "OptimizeOptions.max_deleted_rows_ratio", self.max_deleted_rows_ratio, "a ratio between 0 and 1"
            )
        check_bool("OptimizeOptions.dry_run", self.dry_run)
        check_bool("OptimizeOptions.full", self.full)
        if self.min_file_size is not None and self.max_file_size is not None and self.min_file_size > self.max_file_size:
            raise InvalidArgumentError(
                "OptimizeOptions.min_file_size",
                self.min_file_size,
                f"at most max_file_size ({self.max_file_size}): files that small are compacted into files up to max_file_size",
            )

    def file_sizes(self, table_target_file_size: int | None) -> tuple[int, int]:
        """``(min_file_size, max_file_size)`` in bytes, defaults resolved against the table's ``delta.targetFileSize``."""
        target = self.target_file_size or table_target_file_size or OPTIMIZE_DEFAULT_FILE_SIZE
        max_size = self.max_file_size or max(target, self.min_file_size or 0)
        min_size = self.min_file_size or max_size
        return min_size, max_size


__all__ = ["AppTransaction", "CommitOptions", "OptimizeOptions", "WriterOptions"]
