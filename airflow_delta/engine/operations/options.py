"""Typed options of the maintenance verbs (plain values; the facade imports them at no extra cost)."""

from __future__ import annotations

from dataclasses import dataclass

from airflow_delta.engine.checkpoint.writer import CHECKPOINT_KINDS
from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.engine.model.arguments import check_bool, check_int


@dataclass(frozen=True, slots=True)
class CheckpointOptions:
    """How ``DeltaTable.checkpoint`` writes and what it does after.

    ``kind``: None follows the table (``delta.checkpointPolicy``; multi-part only for
    states larger than a part), or force ``classic``, ``multi-part`` (``parts`` parts, at
    least 2) or ``v2`` where the protocol allows it. ``cleanup_log``: delete expired log
    files afterwards per ``delta.logRetentionDuration`` (when ``delta.enableExpiredLogCleanup``).
    """

    kind: str | None = None
    parts: int = 2
    cleanup_log: bool = True

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in CHECKPOINT_KINDS:
            raise InvalidArgumentError(
                "CheckpointOptions.kind", self.kind, f"pass None or one of {', '.join(CHECKPOINT_KINDS)}"
            )
        check_int("CheckpointOptions.parts", self.parts, minimum=2)
        check_bool("CheckpointOptions.cleanup_log", self.cleanup_log)


__all__ = ["CHECKPOINT_KINDS", "CheckpointOptions"]
