"""What log maintenance may touch, without the checkpoint writer: the writer features under
which checkpoints, log cleanup and VACUUM are allowed, and which tombstones are still live.

Kept apart from :mod:`.writer` (which re-exports them) so that VACUUM, which needs only
these rules, does not import the checkpoint writer and its parquet output.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import UnsupportedFeatureError
from airflow_delta.engine.model.actions import Protocol
from airflow_delta.engine.model.arrow_numpy import int64_scalar
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.model.table_features import check_readable, writer_features

# Writer features whose tables we may checkpoint and clean up: they constrain data
# writes, or they are carried in actions and fields a checkpoint copies (baseRowId,
# defaultRowCommitVersion, clusteringProvider, domainMetadata, deletionVector). Any
# other writer feature (catalogManaged, one added after this
# was written) may change what a checkpoint must hold or what cleanup may delete.
LOG_MAINTENANCE_WRITER_FEATURES: frozenset[str] = frozenset(
    {
        "appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
        "columnMapping", "identityColumns", "deletionVectors", "rowTracking", "timestampNtz",
        "domainMetadata", "v2Checkpoint", "icebergCompatV1", "icebergCompatV2", "clustering",
        "liquid", "vacuumProtocolCheck", "typeWidening", "typeWidening-preview", "inCommitTimestamp",
        "allowColumnDefaults", "variantType", "variantType-preview", "variantShredding",
        "variantShredding-preview",
        # Governs only which history cleanup may delete (operations/log_cleanup.py).
        "checkpointProtection",
    }
)


def should_checkpoint(version: int, properties: TableProperties) -> bool:
    """Automatic checkpoints: every ``delta.checkpointInterval`` versions, never at version 0.

    Here, not beside the checkpoint writer, so that a commit's post-commit hook can ask
    without loading the writer (and log cleanup) when no checkpoint is due.
    """
    return version > 0 and version % properties.checkpoint_interval == 0


def check_log_maintenance_supported(protocol: Protocol) -> None:
    """Refuse to checkpoint or clean up a table we cannot read, or with a writer feature that may govern either."""

    check_readable(protocol)
    unknown = writer_features(protocol) - LOG_MAINTENANCE_WRITER_FEATURES
    if unknown:
        raise UnsupportedFeatureError(
            sorted(unknown), access="write", detail="checkpoints and log cleanup are refused for these features"
        )


def live_tombstones(tombstones: pa.Table, retention_ms: int, now_ms: int) -> pa.Table:
    """Tombstones that have not expired: ``deletionTimestamp`` later than now minus the retention.

    A remove without a timestamp counts as removed at epoch 0 (long expired).
    """
    if tombstones.num_rows == 0:
        return tombstones
    ts = pc.fill_null(tombstones.column("deletion_timestamp"), int64_scalar(0))
    return tombstones.filter(pc.greater(ts, int64_scalar(now_ms - retention_ms)))


__all__ = ["LOG_MAINTENANCE_WRITER_FEATURES", "check_log_maintenance_supported", "live_tombstones", "should_checkpoint"]
