"""What OPTIMIZE returns: :class:`OptimizeResult` and its per-partition plan.

Apart from the other operations' results (:mod:`.results`, which re-exports these two) so
that an OPTIMIZE defines only its own result classes: each frozen dataclass costs about a
millisecond to create at import, and a fresh process that compacts pays for every one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

_EMPTY_METRICS: Mapping[str, Any] = MappingProxyType({})


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


__all__ = ["OptimizeResult", "PartitionOptimizePlan"]
