"""Writing checkpoints: classic, multi-part and V2 (UUID-named with sidecars), and ``_last_checkpoint``.

A checkpoint is the reconciled state of one table version written as parquet, one
action per row, each action type in its own struct column (see the protocol's
"Checkpoints" and "Checkpoint Schema" sections). It is built from a
:class:`~airflow_delta.engine.read.snapshot.Snapshot`: the non-file actions (protocol,
metadata, txn, domain metadata) come from its objects, the file actions from its
Arrow tables ``add_actions`` and ``tombstones`` (rows of ``FILE_ACTIONS_SCHEMA``).
File actions are streamed into a ``ParquetWriter`` one record batch at a time; each
batch's ``add`` struct is assembled from the snapshot's own column buffers, so the
state is never copied as a whole.

This module holds the entry points; the parts are in :mod:`airflow_delta.engine.checkpoint`
(schema, rows, parsed stats columns, Spark's hash, classic/multi-part, V2, ``_last_checkpoint``).

Order of writes, so that no reader ever takes an incomplete checkpoint as complete:

1. every parquet file (parts, sidecars) is written to a hidden temporary name and
   renamed into place (local storage), or uploaded in one request (object stores);
2. for V2, the top-level UUID-named file is written only after all its sidecars;
3. ``_last_checkpoint`` is rewritten last, and never moved back to an older version.

Deciding *when* to checkpoint (every ``delta.checkpointInterval`` versions, after a
commit) is post-commit work, in :mod:`airflow_delta.engine.operations.post_commit`.
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa

from airflow_delta.engine.checkpoint.classic import DEFAULT_PART_SIZE, write_classic
from airflow_delta.engine.checkpoint.last_checkpoint import (
    LAST_CHECKPOINT_NAME,
    canonicalize_json,
    json_checksum,
    names_present_checkpoint,
    read_last_checkpoint,
    write_last_checkpoint,
)
from airflow_delta.engine.checkpoint.maintenance import (
    LOG_MAINTENANCE_WRITER_FEATURES,
    check_log_maintenance_supported,
    live_tombstones,
    should_checkpoint,
)
from airflow_delta.engine.checkpoint.output import CheckpointResult
from airflow_delta.engine.checkpoint.parsed_columns import parsed_columns_layout
from airflow_delta.engine.checkpoint.rows import AddColumnLayout, NullCache
from airflow_delta.engine.checkpoint.schema import add_type, checkpoint_schema
from airflow_delta.engine.checkpoint.spark_hash import spark_murmur3_strings
from airflow_delta.engine.checkpoint.v2 import DEFAULT_SIDECAR_SIZE, write_v2
from airflow_delta.engine.errors import InvalidArgumentError, InvalidLogError
from airflow_delta.engine.model.actions import DomainMetadata, SetTransaction
from airflow_delta.engine.model.arguments import check_bool, check_instance, check_int, check_str
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.read.snapshot import Snapshot
from airflow_delta.engine.storage.fileio import FileIO
from airflow_delta.engine.storage.written_files import WrittenFiles

log = logging.getLogger(__name__)

# Rows per record batch (and parquet row group) streamed to the writer; read at each
# write, so it can be lowered for a run.
WRITE_BATCH_ROWS = 128 * 1024


# ----------------------------------------------------------------- the writer


def _sorted_transactions(snapshot: Snapshot) -> list[SetTransaction]:
    return [snapshot.transactions[k] for k in sorted(snapshot.transactions)]


def _sorted_domains(snapshot: Snapshot) -> list[DomainMetadata]:
    return [d for k, d in sorted(snapshot.domain_metadata.items()) if not d.removed]


CHECKPOINT_KINDS = ("classic", "multi-part", "v2")


def _uses_v2(snapshot: Snapshot, kind: str | None = None) -> bool:
    props: TableProperties = snapshot.properties
    if kind is not None:
        _check_forced_kind(snapshot, kind)
        return kind == "v2"
    if props.checkpoint_policy != "v2":
        return False
    if not (snapshot.protocol.has_reader_feature("v2Checkpoint") and snapshot.protocol.has_writer_feature("v2Checkpoint")):
        log.warning(
            "delta.checkpointPolicy=v2 but the protocol lacks the v2Checkpoint feature; writing a classic checkpoint"
        )
        return False
    return True


def _check_forced_kind(snapshot: Snapshot, kind: str) -> None:
    """A forced kind must be one the protocol allows: V2 needs the ``v2Checkpoint`` feature, which in
    turn forbids multi-part checkpoints; ``delta.checkpointPolicy=v2`` asks for V2 checkpoints only."""
    if kind not in CHECKPOINT_KINDS:
        raise InvalidArgumentError("kind", kind, f"pass one of {', '.join(CHECKPOINT_KINDS)}, or None for the table's policy")
    v2_supported = snapshot.protocol.has_reader_feature("v2Checkpoint") and snapshot.protocol.has_writer_feature(
        "v2Checkpoint"
    )
    if kind == "v2" and not v2_supported:
        raise InvalidArgumentError(
            "kind", kind, "the table's protocol lacks the v2Checkpoint feature; set delta.checkpointPolicy=v2 first"
        )
    if kind == "multi-part" and snapshot.protocol.has_writer_feature("v2Checkpoint"):
        raise InvalidArgumentError("kind", kind, "multi-part checkpoints are forbidden once v2Checkpoint is supported")
    if kind != "v2" and snapshot.properties.checkpoint_policy == "v2":
        raise InvalidArgumentError(
            "kind", kind, "delta.checkpointPolicy=v2 allows V2 checkpoints only; force 'v2' or change the policy"
        )


def _require_commit_written(snapshot: Snapshot) -> None:
    """A checkpoint may only follow its version's commit (protocol, "Checkpoints").

    The commit must exist now, or the version must already be checkpointed (its commit
    was then written and later cleaned up, as in tables Spark has trimmed).
    """
    version = snapshot.version
    if snapshot.log_segment.checkpoint_version == version:
        return
    commit = f"{snapshot.table_root}/_delta_log/{version:020d}.json"
    if snapshot.io.info(commit) is None:
        raise InvalidLogError(
            f"no commit file {commit}: refusing to checkpoint version {version}, whose commit is not "
            "(or no longer) in the log; load a fresh snapshot of the table and checkpoint that"
        )


def write_checkpoint(
    snapshot: Snapshot,
    *,
    part_size: int | None = DEFAULT_PART_SIZE,
    sidecar_size: int = DEFAULT_SIDECAR_SIZE,
    v2_format: str = "parquet",
    v2_classic_compat: bool = True,
    now_ms: int | None = None,
    update_last_checkpoint: bool = True,
    kind: str | None = None,
    num_parts: int | None = None,
) -> CheckpointResult:
    """Write a checkpoint of ``snapshot`` and then ``_last_checkpoint``.

    ``kind`` forces ``classic``, ``multi-part`` (in ``num_parts`` parts, default 2) or ``v2``
    where the protocol allows it (:class:`InvalidArgumentError` otherwise); None follows
    the table's policy as below.

    * ``delta.checkpointPolicy=v2`` (with the ``v2Checkpoint`` feature): a UUID-named
      top-level file (``v2_format`` ``parquet`` or ``json``) whose file actions live in
      ``_delta_log/_sidecars`` parquet files of at most ``sidecar_size`` actions; with
      ``v2_classic_compat`` also a classic-named V2 checkpoint referencing the same
      sidecars, so that clients without V2 support find the protocol and fail cleanly.
    * otherwise a classic checkpoint, or a multi-part one when the state holds more
      than ``part_size`` actions (parts clustered by Spark's hash of the file key, as
      the protocol requires, so part sizes are about, not exactly, ``part_size``).
    """
    check_instance("snapshot", snapshot, Snapshot)
    check_int("part_size", part_size, minimum=1, optional=True)
    check_int("sidecar_size", sidecar_size, minimum=1)
    if v2_format not in ("parquet", "json"):
        raise InvalidArgumentError("v2_format", v2_format, "pass 'parquet' or 'json'")
    check_bool("v2_classic_compat", v2_classic_compat)
    check_int("now_ms", now_ms, minimum=0, optional=True)
    check_bool("update_last_checkpoint", update_last_checkpoint)
    check_str("kind", kind, optional=True)
    check_int("num_parts", num_parts, minimum=1, optional=True)
    use_v2 = _uses_v2(snapshot, kind)
    if kind == "classic":
        part_size, num_parts = None, 1
    elif kind == "multi-part":
        num_parts = num_parts or 2
    elif kind is None:
        num_parts = None
    io: FileIO = snapshot.io
    root: str = snapshot.table_root
    props: TableProperties = snapshot.properties
    now = int(time.time() * 1000) if now_ms is None else now_ms
    _require_commit_written(snapshot)

    adds: pa.Table = snapshot.add_actions
    removes = live_tombstones(snapshot.tombstones, int(props.deleted_file_retention.total_seconds() * 1000), now)
    pv_type, pv_parse, st_type, st_parse = parsed_columns_layout(snapshot.metadata, props)
    # Never drop the JSON stats unless the struct form carries them.
    stats_as_json = props.checkpoint_write_stats_as_json or st_parse is None
    layout = AddColumnLayout(
        add_type(stats_as_json=stats_as_json, partition_values_parsed=pv_type, stats_parsed=st_type),
        stats_as_json,
        pv_parse,
        st_parse,
    )
    txns = _sorted_transactions(snapshot)
    domains = _sorted_domains(snapshot)
    nulls = NullCache()
    batch_rows = WRITE_BATCH_ROWS

    # A checkpoint that fails part-way removes what it wrote (parts, sidecars, top-level
    # files): a stray part or sidecar is at best clutter, at worst an anchor for cleanup.
    written = WrittenFiles(io)
    with written.removed_on_failure():
        if use_v2:
            result = write_v2(
                snapshot, layout, adds, removes, txns, domains, nulls,
                batch_rows=batch_rows, sidecar_size=sidecar_size, file_format=v2_format,
                classic_compat=v2_classic_compat, written=written,
            )
        else:
            result = write_classic(
                snapshot, layout, adds, removes, txns, domains, nulls,
                part_size=part_size, batch_rows=batch_rows, written=written, num_parts=num_parts,
            )

    if update_last_checkpoint:
        written_doc = write_last_checkpoint(io, root, result.last_checkpoint)
        result = CheckpointResult(result.version, result.kind, result.files, result.sidecars, written_doc)
    return result


# --------------------------------------------------------------- table-level API


def create_checkpoint(snapshot: Snapshot) -> int:
    """Checkpoint ``snapshot``'s version after checking that we may; returns the version checkpointed."""
    check_log_maintenance_supported(snapshot.protocol)
    write_checkpoint(snapshot)
    return snapshot.version


__all__ = [
    "CHECKPOINT_KINDS",
    "DEFAULT_PART_SIZE",
    "DEFAULT_SIDECAR_SIZE",
    "LAST_CHECKPOINT_NAME",
    "LOG_MAINTENANCE_WRITER_FEATURES",
    "WRITE_BATCH_ROWS",
    "CheckpointResult",
    "canonicalize_json",
    "check_log_maintenance_supported",
    "checkpoint_schema",
    "create_checkpoint",
    "json_checksum",
    "live_tombstones",
    "names_present_checkpoint",
    "read_last_checkpoint",
    "should_checkpoint",
    "spark_murmur3_strings",
    "write_checkpoint",
    "write_last_checkpoint",
]
