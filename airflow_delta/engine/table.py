"""``DeltaTable``: the entry point to a table, for reading and for writing.

It is a thin facade. Each verb delegates to the module that owns the subject, so that
protocol knowledge stays in small modules: log replay in :mod:`.snapshot` and
:mod:`.log`, commits in :mod:`.transaction`, checkpoints in :mod:`.checkpoints`,
cleanup in :mod:`.log_cleanup`, the embedded writer in :mod:`.writer`, DELETE in
:mod:`.dml`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_delta.engine.storage.fileio import FileIO, resolve_table_uri

if TYPE_CHECKING:
    from airflow_delta.engine.operations.delete import DeleteResult
    from airflow_delta.engine.read.snapshot import Snapshot
    from airflow_delta.engine.write.transaction import Transaction


class DeltaTable:
    """A Delta table at ``table_uri`` (a local path, ``file://`` or a pyarrow.fs URI)."""

    def __init__(self, table_uri: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.table_uri = table_uri
        self.storage_options = dict(storage_options) if storage_options else None
        self.io: FileIO
        self.io, self.root = resolve_table_uri(table_uri, storage_options)

    @property
    def log_dir(self) -> str:
        return f"{self.root}/_delta_log"

    def __repr__(self) -> str:
        return f"DeltaTable({self.table_uri!r})"

    # ------------------------------------------------------------------ reading
    def snapshot(self, version: int | None = None, timestamp: datetime | str | int | None = None) -> Snapshot:
        """The table as of the latest version, a given ``version``, or a ``timestamp``.

        A timestamp selects the latest version committed at or before it (commit
        timestamps, or in-commit timestamps where the table enables them).
        """
        from airflow_delta.engine.read.snapshot import load_snapshot

        return load_snapshot(self.io, self.root, version=version, timestamp=timestamp)

    def version(self) -> int:
        """The latest committed version, found by listing the log (no replay)."""
        from airflow_delta.engine.read.listing import latest_version

        return latest_version(self.io, self.root)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """commitInfo of each commit, newest first, each with its ``version``."""
        from airflow_delta.engine.read.history import read_history

        return read_history(self.io, self.root, limit=limit)

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

        table = cls(table_uri, storage_options)
        create_table(table, schema, partition_by=partition_by, properties=properties, name=name, description=description)
        return table

    def append(self, data: pa.Table | pa.RecordBatchReader, **options: Any) -> int:
        """Append rows as new parquet files in one commit; returns the committed version."""
        from airflow_delta.engine.write.data_files import append

        return append(self, data, **options)

    def delete(self, predicate: str | None = None, **options: Any) -> DeleteResult:
        """``DELETE FROM table [WHERE predicate]`` in one commit (deletion vectors where the table enables them)."""
        from airflow_delta.engine.operations.delete import delete

        return delete(self, predicate, **options)

    def transaction(self, isolation_level: str | None = None, **options: Any) -> Transaction:
        """A low-level optimistic transaction on the latest snapshot; use as a context manager."""
        from airflow_delta.engine.write.transaction import Transaction

        return Transaction(self, isolation_level=isolation_level, **options)

    def checkpoint(self, version: int | None = None) -> int:
        """Write a checkpoint of ``version`` (default: latest); returns the version checkpointed."""
        from airflow_delta.engine.checkpoint.writer import create_checkpoint

        return create_checkpoint(self, version=version)

    def cleanup_log(self, **options: Any) -> list[str]:
        """Delete expired log files per ``delta.logRetentionDuration``; returns what was removed."""
        from airflow_delta.engine.operations.log_cleanup import cleanup_log

        return cleanup_log(self, **options)
