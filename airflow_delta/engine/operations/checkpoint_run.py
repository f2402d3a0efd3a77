"""CHECKPOINT on demand: a checkpoint of one version, of the table's kind or a forced one, then log cleanup.

For tables whose automatic checkpoints were missed (a writer that never checkpoints, a
failed post-commit hook) and for a schedule that wants one at a known time. The cleanup
after it is the same as after an automatic checkpoint: per ``delta.logRetentionDuration``,
when ``delta.enableExpiredLogCleanup`` is on, anchored on a checkpoint read in full.
"""

from __future__ import annotations

from airflow_delta.engine.checkpoint.writer import check_log_maintenance_supported, write_checkpoint
from airflow_delta.engine.operations.log_cleanup import cleanup_log
from airflow_delta.engine.operations.options import CheckpointOptions
from airflow_delta.engine.operations.results import CheckpointRunResult
from airflow_delta.engine.read.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.storage.location import TableLocation


def run_checkpoint(location: TableLocation, snapshot: Snapshot, options: CheckpointOptions) -> CheckpointRunResult:
    """Checkpoint ``snapshot``'s version, then clean up the log; returns what was written and deleted."""
    check_log_maintenance_supported(snapshot.protocol)
    written = write_checkpoint(snapshot, kind=options.kind, num_parts=options.parts if options.kind == "multi-part" else None)
    files = (*written.files, *written.sidecars)
    size = 0
    for path in files:
        info = location.io.info(path)
        size += info.size if info is not None else 0
    cleaned: list[str] = []
    if options.cleanup_log:
        # Retention and the cleanup switch are the latest version's, not the checkpointed one's.
        latest = load_snapshot(location.io, location.root)
        if latest.properties.enable_expired_log_cleanup:
            cleaned = cleanup_log(location, latest)
    return CheckpointRunResult(written.version, written.kind, files, size, tuple(cleaned))


__all__ = ["run_checkpoint"]
