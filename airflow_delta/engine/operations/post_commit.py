"""Post-commit work: the ``.crc`` file, symlink manifests, automatic checkpoints and log cleanup.

A transaction reports what it committed; what follows is the caller's business, as in
delta-kernel-rs. The :class:`~airflow_delta.engine.table.DeltaTable` facade hands
:func:`run_post_commit` (bound to the table's location) to every transaction it opens.
Nothing here raises: the commit has already succeeded, so a failure only leaves a
checksum or checkpoint missing until a later commit writes one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_delta.engine.checkpoint.maintenance import check_log_maintenance_supported, should_checkpoint
from airflow_delta.engine.errors import InvalidLogError
from airflow_delta.engine.model.actions import Metadata
from airflow_delta.engine.model.committed_actions import CommittedActions
from airflow_delta.engine.model.properties import TableProperties, symlink_manifest_enabled
from airflow_delta.engine.read import crc
from airflow_delta.engine.read.listing import list_log_segment
from airflow_delta.engine.read.replay import replay_metadata
from airflow_delta.engine.read.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.storage.location import TableLocation

log = logging.getLogger(__name__)

# The checkpoint writer and log cleanup are imported where they are used: most commits
# need neither, and a short task (one OPTIMIZE, one DELETE) would otherwise load both on
# its only commit.


def run_post_commit(
    location: TableLocation,
    version_or_snapshot: int | Snapshot,
    actions: Sequence[Mapping[str, Any]] | None = None,
    *,
    now_ms: int | None = None,
) -> None:
    """After ``version`` committed: its ``.crc`` file, the symlink manifests it changed (when
    ``delta.compatibility.symlinkFormatManifest.enabled``), a checkpoint when due, then log cleanup.

    ``version_or_snapshot`` is the committed version, or the snapshot at it when the
    caller already has one (then nothing is re-read). ``actions`` are the commit's
    actions as JSON objects, if the caller has them. Failures are logged, never raised.
    """
    snapshot = None if isinstance(version_or_snapshot, int) else version_or_snapshot
    version = version_or_snapshot if isinstance(version_or_snapshot, int) else version_or_snapshot.version
    try:
        crc.write_checksum_after_commit(location.io, location.root, version, actions=actions, snapshot=snapshot)
    except Exception:
        log.warning("post-commit: could not write the .crc file of version %d", version, exc_info=True)
    try:
        metadata = snapshot.metadata if snapshot is not None else _metadata_at(location, version, actions)
    except Exception:
        log.warning("post-commit: could not read the table's metadata at version %d", version, exc_info=True)
        return
    if metadata is not None and symlink_manifest_enabled(metadata.configuration):
        snapshot = _symlink_manifests(location, version, snapshot, actions)
    try:
        properties = (
            snapshot.properties if snapshot is not None
            else None if metadata is None else TableProperties.from_configuration(metadata.configuration)
        )
        if properties is None or not should_checkpoint(version, properties):
            return
        if snapshot is None:
            snapshot = load_snapshot(location.io, location.root, version)
            try:  # the state is loaded now: seed the .crc chain if it was not derivable
                crc.write_checksum_after_commit(location.io, location.root, version, actions=actions, snapshot=snapshot)
            except Exception:
                log.warning("post-commit: could not write the .crc file of version %d", version, exc_info=True)
        check_log_maintenance_supported(snapshot.protocol)
        from airflow_delta.engine.checkpoint.writer import write_checkpoint

        write_checkpoint(snapshot, now_ms=now_ms)
    except Exception:
        log.warning("post-commit: could not checkpoint version %d", version, exc_info=True)
        return
    if snapshot.properties.enable_expired_log_cleanup:
        try:
            from airflow_delta.engine.operations.log_cleanup import cleanup_log

            cleanup_log(location, snapshot, now=now_ms)
        except Exception:
            log.warning("post-commit: log cleanup after checkpoint %d failed", version, exc_info=True)


def _symlink_manifests(
    location: TableLocation, version: int, snapshot: Snapshot | None, actions: Sequence[Mapping[str, Any]] | None
) -> Snapshot | None:
    """Regenerate the manifests the commit changed; returns the snapshot it loaded, for the checkpoint.

    Like the other steps it never raises: a table that cannot have manifests (deletion
    vectors, column mapping) is logged as an error, the commit stands.
    """
    try:
        if snapshot is None:
            snapshot = load_snapshot(location.io, location.root, version)
        # Imported here: only a table with the manifest property set needs the manifest writer
        # (inside the try, like the checkpoint writer below: the commit stands whatever fails,
        # and the failure is logged with its traceback).
        from airflow_delta.engine.operations.manifest import manifests_after_commit

        manifests_after_commit(location, snapshot, actions)
    except Exception:
        log.error("post-commit: could not update the symlink manifests after version %d", version, exc_info=True)
    return snapshot


def _metadata_at(location: TableLocation, version: int, actions: Sequence[Mapping[str, Any]] | None) -> Metadata | None:
    """The table's metaData at ``version`` without a full replay when cheaply known.

    The commit's own metaData, else the version's ``.crc``, else a replay of the
    non-file actions only; None if the log cannot be replayed.
    """
    # Only removes are kept as columns: the metaData, if any, is among the other actions.
    for action in actions.other_actions if isinstance(actions, CommittedActions) else actions or ():
        if "metaData" in action:
            return Metadata.from_json(action["metaData"])
    checksum = crc.read_version_checksum(location.io, location.root, version)
    if checksum is not None and isinstance(checksum.get("metadata"), Mapping):
        return Metadata.from_json(checksum["metadata"])
    try:
        state = replay_metadata(location.io, list_log_segment(location.io, location.root, version))
    except InvalidLogError:
        return None
    return state.metadata


__all__ = ["run_post_commit"]
