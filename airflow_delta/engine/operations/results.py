"""What the operations return: the version committed and Delta's metrics for it.

Plain values with no dependencies, so that importing them (the public API does) costs
nothing; the operations themselves load their heavier dependencies when they run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

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
class PartitionOptimizePlan:
    """What OPTIMIZE does, or would do, in one partition.

    ``partition_values``: logical column name -> the value as the log writes it (None
    for null). ``files_in`` / ``bytes_in``: the files rewritten and their size.
    ``files_out`` / ``bytes_out``: the files written and their size; in a dry run an
    estimate (one file per bin, or one per ``max_file_size`` of a Z-order bin; bytes in
    minus the share of rows deletion vectors delete).
    """

    partition_values: Mapping[str, str | None]
    num_bins: int
    files_in: int
    bytes_in: int
    files_out: int
    bytes_out: int


@dataclass(frozen=True, slots=True)
class OptimizeResult:
    """What an OPTIMIZE did (or, with ``dry_run``, would do).

    ``versions``: one committed version per batch, in order (empty for a dry run or when
    nothing needed rewriting). ``metrics``: Delta's ``OptimizeMetrics`` under its names
    (``numFilesAdded``, ``numFilesRemoved``, ``filesAdded`` / ``filesRemoved`` with
    ``min``, ``max``, ``avg``, ``totalFiles``, ``totalSize``, ``partitionsOptimized``,
    ``zOrderStats``, ``numBatches``, ``totalConsideredFiles``, ``totalFilesSkipped``,
    ``preserveInsertionOrder``, ``deletionVectorStats``, ...); each commit's
    ``operationMetrics`` are Delta's log metrics for that batch. ``plan``: per partition.
    """

    versions: tuple[int, ...]
    read_version: int
    metrics: Mapping[str, Any] = field(default_factory=lambda: _EMPTY_METRICS)
    plan: tuple[PartitionOptimizePlan, ...] = ()
    dry_run: bool = False

    @property
    def version(self) -> int | None:
        """The last version committed, or None when nothing was."""
        return self.versions[-1] if self.versions else None


__all__ = ["AppendResult", "DeleteResult", "OptimizeResult", "PartitionOptimizePlan"]
