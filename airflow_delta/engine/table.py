"""``DeltaTable``: the entry point to a table, for reading and for writing.

A thin facade, in the manner of delta-rs's ``DeltaTable``: each verb checks its
arguments, makes one call into the layer that owns the subject, and returns a result
with its metrics. Options are typed objects (:class:`CommitOptions`,
:class:`WriterOptions`, :class:`AppTransaction`), never ``**kwargs``.

Each verb checks the types and ranges of its arguments first
(:mod:`~airflow_delta.engine.model.arguments`): a bad one is an
:class:`~airflow_delta.engine.errors.InvalidArgumentError`, before any I/O.

The facade is the top of the engine: no engine module imports it. It hands lower
layers values (a :class:`TableLocation`, a :class:`Snapshot`) and gives every
transaction it opens the post-commit hook (``.crc``, automatic checkpoint, log cleanup).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.engine.model.arguments import (
    check_bool,
    check_instance,
    check_int,
    check_number,
    check_str,
    check_str_mapping,
    check_str_sequence,
    check_timestamp,
)
from airflow_delta.engine.storage.fileio import FileIO
from airflow_delta.engine.storage.location import TableLocation

if TYPE_CHECKING:
    from airflow_delta.engine.operations.convert import ConvertResult, FooterReader
    from airflow_delta.engine.operations.manifest import ManifestResult
    from airflow_delta.engine.operations.optimize import BinRewriter
    from airflow_delta.engine.operations.optimize_result import OptimizeResult
    from airflow_delta.engine.operations.options import CheckpointOptions
    from airflow_delta.engine.operations.results import (
        AppendResult,
        CheckpointRunResult,
        DeleteResult,
        HealthReport,
        RestoreResult,
        VacuumResult,
    )
    from airflow_delta.engine.operations.vacuum import ListFiles
    from airflow_delta.engine.read.snapshot import Snapshot
    from airflow_delta.engine.read.table_context import TableContext
    from airflow_delta.engine.write.concurrent_commits import CommitConflict, CommitSummary
    from airflow_delta.engine.write.conflicts import IsolationLevel
    from airflow_delta.engine.write.options import AppTransaction, CommitOptions, OptimizeOptions, WriterOptions
    from airflow_delta.engine.write.transaction import Transaction

# The layers below are imported by the verbs that use them, not here: writing pulls in
# sqlglot, pyarrow.dataset and pandas (about a second without compiled bytecode), which
# a task that only reads, or only checkpoints, should not pay for, and a process that
# constructs a DeltaTable to vacuum or read needs neither the commit path nor the
# results of other verbs (``from airflow_delta.engine import DeltaTable`` imports this
# module alone with the storage layer). These imports point down the layers like every
# other; they are not there to break a cycle.


class DeltaTable:
    """A Delta table at ``table_uri`` (a local path, ``file://`` or a pyarrow.fs URI).

    ``io`` replaces the FileIO that the URI would get (a custom store, or one with
    conditional writes); the URI still decides the table root.
    """

    def __init__(
        self, table_uri: str, storage_options: Mapping[str, Any] | None = None, *, io: FileIO | None = None
    ) -> None:
        check_instance("io", io, FileIO, optional=True)
        location = TableLocation.from_uri(table_uri, storage_options)  # checks table_uri and storage_options
        self.table_uri = table_uri
        self.storage_options = dict(storage_options) if storage_options else None
        self.location = location if io is None else TableLocation(io, location.root, location.uri)

    @property
    def io(self) -> FileIO:
        return self.location.io

    @property
    def root(self) -> str:
        return self.location.root

    @property
    def log_dir(self) -> str:
        return self.location.log_dir

    def __repr__(self) -> str:
        return f"DeltaTable({self.table_uri!r})"

    # ------------------------------------------------------------------ reading
    def snapshot(self, version: int | None = None, timestamp: datetime | str | int | None = None) -> Snapshot:
        """The table as of the latest version, a given ``version``, or a ``timestamp``.

        A timestamp selects the latest version committed at or before it (commit
        timestamps, or in-commit timestamps where the table enables them).
        """
        check_int("version", version, minimum=0, optional=True)
        check_timestamp("timestamp", timestamp, optional=True)
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("timestamp", timestamp, "pass either version or timestamp, not both")
        from airflow_delta.engine.read.snapshot import load_snapshot

        return load_snapshot(self.io, self.root, version=version, timestamp=timestamp)

    def version(self) -> int:
        """The latest committed version, found by listing the log (no replay)."""
        from airflow_delta.engine.read.listing import latest_version

        return latest_version(self.io, self.root)

    def context(self, snapshot: Snapshot | None = None) -> TableContext:
        """``snapshot`` (default: the latest) as a picklable :class:`TableContext`, for per-file work in other processes."""
        from airflow_delta.engine.read.snapshot import Snapshot
        from airflow_delta.engine.read.table_context import TableContext

        check_instance("snapshot", snapshot, Snapshot, optional=True)
        snapshot = snapshot if snapshot is not None else self.snapshot()
        return TableContext.of(snapshot, self.table_uri, self.storage_options)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """commitInfo of each commit, newest first, each with its ``version``."""
        from airflow_delta.engine.read.history import read_history

        check_int("limit", limit, minimum=1, optional=True)
        return read_history(self.io, self.root, limit=limit)

    def commits_since(
        self, version: int | None = None, *, since: datetime | str | int | None = None
    ) -> list[CommitSummary]:
        """The commits after ``version``, oldest first, listing the log and reading only those commit files.

        ``since`` (a datetime, ISO-8601 string or epoch ms) starts instead (or also) at
        the first commit whose file was written at or after it. One of the two is needed.
        """
        from airflow_delta.engine.read.history import to_epoch_ms
        from airflow_delta.engine.write.concurrent_commits import commits_since

        check_int("version", version, minimum=-1, optional=True)
        check_timestamp("since", since, optional=True)
        if version is None and since is None:
            raise InvalidArgumentError("version", version, "pass a version, a since timestamp, or both")
        return commits_since(self.location, version, since_ms=None if since is None else to_epoch_ms(since))

    def conflicting_commits(
        self,
        read_version: int,
        predicate: str | None = None,
        *,
        isolation_level: str | IsolationLevel | None = None,
        changes_data: bool = True,
    ) -> list[CommitConflict]:
        """Each commit after ``read_version``, judged against work that reads ``predicate`` (None: the whole table).

        A commit conflicts exactly when a transaction that read ``predicate`` at
        ``read_version`` and then committed would raise; the verdict names the exception.
        ``changes_data=False`` is work that only rearranges data (OPTIMIZE-like). See
        :class:`ConflictWatch`, which keeps its place in the log between polls.
        """
        from airflow_delta.engine.write.concurrent_commits import conflicting_commits
        from airflow_delta.engine.write.conflicts import IsolationLevel

        check_instance("isolation_level", isolation_level, (str, IsolationLevel), optional=True)
        return conflicting_commits(
            self.location, read_version, predicate, isolation_level=isolation_level, changes_data=changes_data
        )

    # ------------------------------------------------------------------ writing
    @classmethod
    def create(
        cls,
        table_uri: str,
        schema: pa.Schema,
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        name: str | None = None,
        description: str | None = None,
    ) -> DeltaTable:
        """Create a new, empty table (version 0) and return it."""
        from airflow_delta.engine.operations.create import create_table

        check_instance("schema", schema, pa.Schema)
        partition_by = check_str_sequence("partition_by", partition_by, allow_single=True)
        check_str_mapping("properties", properties, optional=True)
        check_str("name", name, optional=True)
        check_str("description", description, optional=True)
        table = cls(table_uri, storage_options)
        create_table(
            table.location,
            schema,
            partition_by=partition_by,
            properties=properties,
            name=name,
            description=description,
            post_commit=table._post_commit,
        )
        return table

    def transaction(self, options: CommitOptions | None = None, *, snapshot: Snapshot | None = None) -> Transaction:
        """A low-level optimistic transaction on ``snapshot`` (default: the latest); use as a context manager."""
        from airflow_delta.engine.write.transaction import Transaction

        # Transaction checks options and snapshot.
        return Transaction(self.location, snapshot=snapshot, options=options, post_commit=self._post_commit)

    def append(
        self,
        data: pa.Table | pa.RecordBatchReader | pa.RecordBatch,
        *,
        writer: WriterOptions | None = None,
        commit: CommitOptions | None = None,
        app_transaction: AppTransaction | None = None,
        partition_by: Sequence[str] | None = None,
    ) -> AppendResult:
        """Append rows as new parquet files in one blind-append commit; returns the version and WRITE metrics."""
        from airflow_delta.engine.operations.append import append
        from airflow_delta.engine.write.options import AppTransaction, CommitOptions, WriterOptions

        check_instance("data", data, (pa.Table, pa.RecordBatchReader, pa.RecordBatch))
        check_instance("writer", writer, WriterOptions, optional=True)
        check_instance("commit", commit, CommitOptions, optional=True)
        check_instance("app_transaction", app_transaction, AppTransaction, optional=True)
        check_str_sequence("partition_by", partition_by, optional=True, allow_single=True)
        with self.transaction(commit) as txn:
            return append(txn, data, writer=writer, app_transaction=app_transaction, partition_by=partition_by)

    def delete(
        self,
        predicate: str | None = None,
        *,
        use_deletion_vectors: bool | None = None,
        writer: WriterOptions | None = None,
        commit: CommitOptions | None = None,
        snapshot: Snapshot | None = None,
    ) -> DeleteResult:
        """``DELETE FROM table [WHERE predicate]`` in one commit (deletion vectors where the table enables them).

        Returns the committed version (None when no row matched), the version read and
        Delta's DELETE metrics. ``snapshot`` reads from an older snapshot: concurrent
        commits since then are checked with Delta's conflict rules.
        """
        from airflow_delta.engine.operations.delete import delete
        from airflow_delta.engine.write.options import CommitOptions, WriterOptions

        check_str("predicate", predicate, optional=True)
        check_bool("use_deletion_vectors", use_deletion_vectors, optional=True)
        check_instance("writer", writer, WriterOptions, optional=True)
        check_instance("commit", commit, CommitOptions, optional=True)
        with self.transaction(commit, snapshot=snapshot) as txn:
            return delete(txn, predicate, use_deletion_vectors=use_deletion_vectors, writer=writer)

    def optimize(
        self,
        options: OptimizeOptions | None = None,
        *,
        commit: CommitOptions | None = None,
        snapshot: Snapshot | None = None,
        rewriter: BinRewriter | None = None,
        tags: Mapping[str, str] | None = None,
        app_id: str | None = None,
    ) -> OptimizeResult:
        """``OPTIMIZE table [WHERE partition predicate] [ZORDER BY (...)]``: compaction, Z-order, DV purge.

        One ``dataChange=false`` commit per batch (blind appends never conflict with it);
        ``options.dry_run`` returns the plan per partition and commits nothing.
        ``rewriter`` rewrites each batch's bins elsewhere (the Spark job passes one);
        ``tags`` go into each commit's ``commitInfo.tags``; ``app_id`` (a task's ``txn``
        appId) makes a retry resume the batches earlier tries committed, never redo them
        (docs/optimize.md).
        """
        from airflow_delta.engine.operations.optimize import optimize
        from airflow_delta.engine.read.snapshot import Snapshot
        from airflow_delta.engine.write.options import CommitOptions, OptimizeOptions

        check_instance("options", options, OptimizeOptions, optional=True)
        check_instance("commit", commit, CommitOptions, optional=True)
        check_instance("snapshot", snapshot, Snapshot, optional=True)
        if rewriter is not None and not callable(rewriter):
            raise InvalidArgumentError("rewriter", rewriter, "pass a callable (plan, bins) -> adds per bin, or None")
        check_str_mapping("tags", tags, optional=True)
        check_str("app_id", app_id, non_empty=True, optional=True)
        snapshot = snapshot if snapshot is not None else self.snapshot()
        return optimize(
            self.location, snapshot, options or OptimizeOptions(), commit=commit,
            post_commit=self._post_commit, rewriter=rewriter, tags=tags, app_id=app_id,
        )

    def cluster_by(self, columns: Sequence[str], *, commit: CommitOptions | None = None) -> int | None:
        """``ALTER TABLE ... CLUSTER BY (columns)`` (``()``: ``CLUSTER BY NONE``); the version, None if nothing changed.

        Delta's rules: at most four top-level columns with statistics, not on a partitioned
        table; a table that is not clustered gets the ``clustering`` feature. No file is
        rewritten (docs/optimize.md#clustered-tables).
        """
        from airflow_delta.engine.operations.cluster_by import cluster_by
        from airflow_delta.engine.write.options import CommitOptions

        names = check_str_sequence("columns", columns, allow_single=True)
        check_instance("commit", commit, CommitOptions, optional=True)
        return cluster_by(self.location, self.snapshot(), list(names or ()), commit=commit, post_commit=self._post_commit)

    def checkpoint(self, version: int | None = None, options: CheckpointOptions | None = None) -> CheckpointRunResult:
        """Write a checkpoint of ``version`` (default: latest), of the table's kind or ``options.kind``,
        then clean up the log per retention (``options.cleanup_log``); returns version, kind, files, size."""
        from airflow_delta.engine.operations.checkpoint_run import run_checkpoint
        from airflow_delta.engine.operations.options import CheckpointOptions

        check_int("version", version, minimum=0, optional=True)
        check_instance("options", options, CheckpointOptions, optional=True)
        return run_checkpoint(self.location, self.snapshot(version), options or CheckpointOptions())

    def cleanup_log(
        self,
        *,
        retention: timedelta | str | None = None,
        now: datetime | int | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Delete expired log files per ``delta.logRetentionDuration`` (or ``retention``); returns what was removed.

        ``now`` is the clock (datetime or epoch ms); ``dry_run`` returns what would go.
        """
        from airflow_delta.engine.operations.log_cleanup import cleanup_log

        check_instance("retention", retention, (timedelta, str), optional=True)
        if isinstance(retention, timedelta) and retention < timedelta(0):
            raise InvalidArgumentError("retention", retention, "pass a retention of zero or more")
        _check_now(now)
        check_bool("dry_run", dry_run)
        return cleanup_log(self.location, self.snapshot(), retention=retention, now=now, dry_run=dry_run)

    # ------------------------------------------------------------------ maintenance
    def vacuum(
        self,
        *,
        retention: timedelta | None = None,
        mode: str = "full",
        dry_run: bool = False,
        enforce_retention_duration: bool = True,
        now: datetime | int | None = None,
        parallelism: int = 8,
        file_list_path: str | None = None,
        list_files: ListFiles | None = None,
    ) -> VacuumResult:
        """Delete files no version within ``retention`` (default ``delta.deletedFileRetentionDuration``) needs.

        ``mode`` ``full`` lists the table (orphans too), ``lite`` reads the log only. A retention
        shorter than the table's is refused unless ``enforce_retention_duration=False``.
        ``now`` is the clock (datetime or epoch ms); ``file_list_path`` receives the paths.
        ``list_files`` lists the table for ``full`` elsewhere (the Spark backend's executors);
        planning and its safety rules stay the engine's.
        """
        from airflow_delta.engine.operations.vacuum import VACUUM_MODES, vacuum

        check_instance("retention", retention, timedelta, optional=True)
        if retention is not None and retention < timedelta(0):
            raise InvalidArgumentError("retention", retention, "pass a retention of zero or more")
        if mode not in VACUUM_MODES:
            raise InvalidArgumentError("mode", mode, f"pass one of {', '.join(VACUUM_MODES)}")
        check_bool("dry_run", dry_run)
        check_bool("enforce_retention_duration", enforce_retention_duration)
        now_ms = _check_now(now)
        check_int("parallelism", parallelism, minimum=1)
        check_str("file_list_path", file_list_path, non_empty=True, optional=True)
        if list_files is not None and not callable(list_files):
            raise InvalidArgumentError("list_files", list_files, "pass a callable (io, root, prefixes, parallelism) or None")
        return vacuum(
            self.snapshot(), self.transaction,
            retention_ms=None if retention is None else int(retention.total_seconds() * 1000),
            enforce_retention_duration=enforce_retention_duration, mode=mode, dry_run=dry_run,
            now_ms=now_ms, parallelism=parallelism, file_list_path=file_list_path, list_files=list_files,
        )

    def restore(
        self,
        version: int | None = None,
        timestamp: datetime | str | int | None = None,
        *,
        commit: CommitOptions | None = None,
        app_transaction: AppTransaction | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> RestoreResult:
        """``RESTORE TABLE TO VERSION AS OF version | TIMESTAMP AS OF timestamp`` in one commit.

        ``app_transaction`` makes the commit idempotent (a ``txn`` action; a table that
        already has it raises :class:`TransactionAlreadyCommittedError`); ``tags`` go into
        its ``commitInfo.tags``.
        """
        from airflow_delta.engine.operations.restore import restore
        from airflow_delta.engine.write.options import AppTransaction, CommitOptions

        check_int("version", version, minimum=0, optional=True)
        check_timestamp("timestamp", timestamp, optional=True)
        if (version is None) == (timestamp is None):
            raise InvalidArgumentError("version", version, "pass exactly one of version or timestamp")
        check_instance("commit", commit, CommitOptions, optional=True)
        check_instance("app_transaction", app_transaction, AppTransaction, optional=True)
        check_str_mapping("tags", tags, optional=True)
        target = self.snapshot(version=version, timestamp=timestamp)
        with self.transaction(commit) as txn:
            if app_transaction is not None:
                txn.set_app_transaction(app_transaction.app_id, app_transaction.version)
            return restore(txn, target, version=version, timestamp=timestamp, tags=tags)

    def health(
        self,
        *,
        now: datetime | int | None = None,
        target_file_size: int | None = None,
        max_deleted_rows_ratio: float = 0.05,
    ) -> HealthReport:
        """A report on the table's files, deletion vectors, tombstones, log and protocol, with recommendations.

        ``target_file_size`` defaults to ``delta.targetFileSize`` (else 128 MiB); a file whose
        deletion vector deletes more than ``max_deleted_rows_ratio`` of its rows needs a purge.
        """
        from airflow_delta.engine.operations.health import health_report

        now_ms = _check_now(now)
        check_int("target_file_size", target_file_size, minimum=1, optional=True)
        check_number("max_deleted_rows_ratio", max_deleted_rows_ratio, minimum=0)
        if max_deleted_rows_ratio > 1:
            raise InvalidArgumentError("max_deleted_rows_ratio", max_deleted_rows_ratio, "pass a ratio between 0 and 1")
        return health_report(
            self.snapshot(), now_ms=now_ms, target_file_size=target_file_size,
            max_deleted_rows_ratio=float(max_deleted_rows_ratio),
        )

    @classmethod
    def convert_to_delta(
        cls,
        table_uri: str,
        partition_schema: str | pa.Schema | Mapping[str, str] | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        properties: Mapping[str, str] | None = None,
        name: str | None = None,
        description: str | None = None,
        collect_stats: bool = True,
        parallelism: int = 8,
        reader: FooterReader | None = None,
    ) -> ConvertResult:
        """``CONVERT TO DELTA parquet.`<table_uri>` [PARTITIONED BY (partition_schema)]``: version 0 of a new table.

        ``partition_schema`` is Spark DDL (``"year INT, region STRING"``), a pyarrow schema or
        ``{name: type}``, in directory order. Footers are read on ``parallelism`` threads, or by
        ``reader`` (the Spark backend's). A directory that is already a Delta table raises
        :class:`TableAlreadyExistsError`; what cannot be converted, :class:`ConvertSourceError`.
        """
        from airflow_delta.engine.operations.convert import convert_to_delta

        check_str("table_uri", table_uri, non_empty=True)
        if partition_schema is not None and not isinstance(partition_schema, (str, pa.Schema, Mapping)):
            raise InvalidArgumentError(
                "partition_schema", partition_schema, "pass a DDL string, a pyarrow schema, a mapping or None"
            )
        check_str_mapping("properties", properties, optional=True)
        check_str("name", name, optional=True)
        check_str("description", description, optional=True)
        check_bool("collect_stats", collect_stats)
        check_int("parallelism", parallelism, minimum=1)
        if reader is not None and not all(callable(getattr(reader, m, None)) for m in ("schemas", "add_files")):
            raise InvalidArgumentError("reader", reader, "pass a FooterReader (schemas(plan), add_files(plan, metadata)) or None")
        table = cls(table_uri, storage_options)
        return convert_to_delta(
            table.location, partition_schema, properties=properties, name=name, description=description,
            collect_stats=collect_stats, parallelism=parallelism, reader=reader, post_commit=table._post_commit,
        )

    def generate_symlink_manifest(self) -> ManifestResult:
        """``GENERATE symlink_format_manifest FOR TABLE``: every partition's manifest of live files, stale ones removed.

        Raises :class:`ManifestNotSupportedError` for tables with deletion vectors or column mapping.
        """
        from airflow_delta.engine.operations.manifest import generate_symlink_manifest

        return generate_symlink_manifest(self.location, self.snapshot())

    # ------------------------------------------------------------------ internals
    def _post_commit(self, version: int, actions: Sequence[Mapping[str, Any]]) -> None:
        from airflow_delta.engine.operations.post_commit import run_post_commit

        run_post_commit(self.location, version, actions)


def _check_now(now: datetime | int | None) -> int | None:
    """``now`` (a datetime, naive meaning UTC, or epoch milliseconds) as epoch ms; None is the system clock."""
    check_instance("now", now, (datetime, int), optional=True)
    if isinstance(now, bool) or (isinstance(now, int) and now < 0):
        raise InvalidArgumentError("now", now, "pass a datetime or epoch milliseconds >= 0")
    if isinstance(now, datetime):
        # A naive datetime is UTC, as everywhere in the engine.
        return int((now if now.tzinfo is not None else now.replace(tzinfo=UTC)).timestamp() * 1000)
    return now
