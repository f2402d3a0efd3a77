"""What the operations return: the version committed and Delta's metrics for it.

Plain values with no dependencies, so that importing them (the public API does) costs
nothing; the operations themselves load their heavier dependencies when they run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

# Defined in their own module so that OPTIMIZE does not create the other results' classes
# (each frozen dataclass costs about a millisecond at import); re-exported here.
from airflow_delta.engine.operations.optimize_result import OptimizeResult, PartitionOptimizePlan

_EMPTY_METRICS: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append committed: the new ``version`` and Delta's WRITE metrics
    (``numFiles``, ``numOutputRows``, ``numOutputBytes``)."""

    version: int
    metrics: Mapping[str, int] = field(default_factory=lambda: _EMPTY_METRICS)


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """What a DELETE did.

    ``version`` is the version committed, or None when no row matched and nothing was
    committed (``read_version`` is then the table's state). ``metrics`` are the
    ``operationMetrics`` of the commit under Delta's names, as integers.
    """

    version: int | None
    read_version: int
    metrics: Mapping[str, int] = field(default_factory=lambda: _EMPTY_METRICS)

    @property
    def num_deleted_rows(self) -> int:
        return int(self.metrics.get("numDeletedRows", 0))


@dataclass(frozen=True, slots=True)
class VacuumResult:
    """What a VACUUM found (dry run) or did.

    ``metrics`` are Delta's: ``numFilesToDelete`` and ``sizeOfDataToDelete`` (VACUUM START),
    ``numDeletedFiles`` and ``numVacuumedDirectories`` (VACUUM END; 0 in a dry run).
    ``start_version`` / ``end_version`` are the VACUUM START / END commits (None in a dry
    run). The full file list is never held here: ``sample_paths`` has a few, and
    ``file_list_path`` names the file it was written to, if one was asked for.
    ``skipped_outside_root`` counts paths that resolved outside the table (never deleted).
    """

    mode: str
    dry_run: bool
    retention_ms: int
    delete_before_ms: int
    metrics: Mapping[str, int] = field(default_factory=lambda: _EMPTY_METRICS)
    start_version: int | None = None
    end_version: int | None = None
    sample_paths: tuple[str, ...] = ()
    file_list_path: str | None = None
    skipped_outside_root: int = 0

    @property
    def num_files_to_delete(self) -> int:
        return int(self.metrics.get("numFilesToDelete", 0))

    @property
    def size_of_data_to_delete(self) -> int:
        return int(self.metrics.get("sizeOfDataToDelete", 0))

    @property
    def num_deleted_files(self) -> int:
        return int(self.metrics.get("numDeletedFiles", 0))


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What a RESTORE committed: ``version`` (None when the table already equals the target), the
    ``restored_version`` and Delta's metrics (``tableSizeAfterRestore``, ``numOfFilesAfterRestore``,
    ``numRemovedFiles``, ``numRestoredFiles``, ``removedFilesSize``, ``restoredFilesSize``)."""

    version: int | None
    read_version: int
    restored_version: int
    metrics: Mapping[str, int] = field(default_factory=lambda: _EMPTY_METRICS)


@dataclass(frozen=True, slots=True)
class CheckpointRunResult:
    """What ``DeltaTable.checkpoint`` wrote: the ``version`` checkpointed, its ``kind`` (``classic``,
    ``multi-part`` or ``v2``), the checkpoint ``files`` (parts, top-level file and sidecars), their
    total ``size_in_bytes``, and the log files that the cleanup after it deleted."""

    version: int
    kind: str
    files: tuple[str, ...]
    size_in_bytes: int
    cleaned_log_files: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SizeBucket:
    """One bar of the file-size distribution: files with ``lower <= size < upper`` bytes (``upper`` None: no bound)."""

    lower: int
    upper: int | None
    files: int
    bytes: int


@dataclass(frozen=True, slots=True)
class HealthReport:
    """A table's state as maintenance sees it (``DeltaTable.health()``); every field is a plain value.

    Files: ``num_files``, ``size_in_bytes``, ``small_files`` (smaller than half of
    ``target_file_size``, as Delta's auto compaction counts them) and ``small_file_ratio``,
    ``size_histogram``, ``partitions_with_most_small_files`` (partition path, small files).
    Deletion vectors: ``files_with_deletion_vectors``, ``deleted_rows``, ``total_rows``
    (from statistics; None when a file has none), ``files_above_purge_ratio`` (deleted
    rows over ``max_deleted_rows_ratio``). Tombstones: ``tombstones``, ``tombstone_bytes``,
    ``oldest_tombstone_ms`` (removed files whose file no completed VACUUM has deleted, as
    ``_last_vacuum_info`` tells; the state keeps the others until a checkpoint drops
    them), and those already past ``delta.deletedFileRetentionDuration``
    (``vacuumable_tombstones``, ``vacuumable_bytes``: the files, and their bytes, that a
    lite VACUUM dry run plans now, DV files included; a full one also finds orphans). Log:
    ``commits_since_checkpoint``, ``last_checkpoint_version``, ``log_files``,
    ``log_size_in_bytes``. Protocol: ``min_reader_version``, ``min_writer_version``,
    ``reader_features``, ``writer_features``. Gains: ``files_after_optimize``; when
    OPTIMIZE is recommended, ``last_optimize_version`` and ``small_files_since_optimize``
    (None when none of the last 100 commits is an OPTIMIZE) say how many small files came
    after the last one. ``recommendations``: short sentences, most useful first. What
    compaction and a DV purge would rewrite: ``small_file_bytes``, ``bytes_above_purge_ratio``.
    """

    table_root: str
    version: int
    num_files: int
    size_in_bytes: int
    target_file_size: int
    small_files: int
    small_file_ratio: float
    size_histogram: tuple[SizeBucket, ...]
    partitions_with_most_small_files: tuple[tuple[str, int], ...]
    files_with_deletion_vectors: int
    deletion_vector_coverage: float
    deleted_rows: int
    total_rows: int | None
    max_deleted_rows_ratio: float
    files_above_purge_ratio: int
    tombstones: int
    tombstone_bytes: int
    oldest_tombstone_ms: int | None
    vacuumable_tombstones: int
    vacuumable_bytes: int
    commits_since_checkpoint: int
    last_checkpoint_version: int | None
    log_files: int
    log_size_in_bytes: int
    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...]
    writer_features: tuple[str, ...]
    files_after_optimize: int
    recommendations: tuple[str, ...]
    last_optimize_version: int | None = None
    small_files_since_optimize: int | None = None
    small_file_bytes: int = 0
    bytes_above_purge_ratio: int = 0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: buckets as dicts, tuples as lists."""
        out: dict[str, object] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "size_histogram":
                value = [{"lower": b.lower, "upper": b.upper, "files": b.files, "bytes": b.bytes} for b in value]
            elif name == "partitions_with_most_small_files":
                value = [{"partition": p, "small_files": n} for p, n in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out


__all__ = [
    "DELETE_METRIC_NAMES",
    "AppendResult",
    "CheckpointRunResult",
    "DeleteResult",
    "HealthReport",
    "OptimizeResult",
    "PartitionOptimizePlan",
    "RestoreResult",
    "SizeBucket",
    "VacuumResult",
]


# DELETE's operationMetrics, in the order Spark writes them (readers do not care; diffs do):
# the in-worker DELETE and the Spark job write the same names.
DELETE_METRIC_NAMES: tuple[str, ...] = (
    "numRemovedFiles",
    "numRemovedBytes",
    "numCopiedRows",
    "numDeletionVectorsAdded",
    "numDeletionVectorsRemoved",
    "numAddedChangeFiles",
    "executionTimeMs",
    "numDeletionVectorsUpdated",
    "numDeletedRows",
    "scanTimeMs",
    "numAddedFiles",
    "numAddedBytes",
    "rewriteTimeMs",
)
