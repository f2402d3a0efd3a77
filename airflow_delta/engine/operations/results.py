"""What the operations return: the version committed and Delta's metrics for it.

Plain values with no dependencies, so that importing them (the public API does) costs
nothing; the operations themselves load their heavier dependencies when they run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

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


__all__ = ["AppendResult", "DeleteResult"]
