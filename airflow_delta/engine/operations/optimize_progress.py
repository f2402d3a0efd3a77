"""What earlier tries of one OPTIMIZE already committed, read back from the log.

An OPTIMIZE that runs under an application id (an Airflow task instance) tags every
batch it commits with :data:`OPTIMIZE_APP_ID_TAG` (the appId) and
:data:`OPTIMIZE_BATCH_TAG` (``"k/n"``: batch k of the n its plan has, counting those
of earlier tries), and its first batch carries ``txn(appId, 1)``. Only the first: every
batch is committed on the snapshot the plan read, so a ``txn`` on a later batch would
conflict with the first one's (Delta's rule for a concurrent commit of the same appId).
A late commit of another try is kept out by the files instead: the batch removes files
that the other try rewrote already, which is a ``ConcurrentDeleteReadException``.

A try that starts after another try of the same application committed some batches
resumes instead of starting over; this module finds those batches:

- the snapshot's ``txn`` for the appId says whether any was committed (nothing is read
  when none was);
- the commits are then read newest first until batch 1 (or until the log ends: log
  cleanup removed the oldest, whose files are then not known any more);
- their add and remove actions are parsed together, as Arrow.

``complete`` says the newest batch was the last of its plan: the OPTIMIZE finished, and
a retry returns its result without rewriting anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.model.actions import FILE_ACTIONS_SCHEMA
from airflow_delta.engine.model.arrow_numpy import mask_to_numpy
from airflow_delta.engine.model.column_mapping import ColumnMapping
from airflow_delta.engine.read.commit_reader import LogAction, parse_log_bytes
from airflow_delta.engine.read.listing import commit_path

if TYPE_CHECKING:
    from airflow_delta.engine.read.snapshot import Snapshot
    from airflow_delta.engine.storage.location import TableLocation

__all__ = ["OPTIMIZE_APP_ID_TAG", "OPTIMIZE_BATCH_TAG", "EarlierBatches", "batch_tag", "find_earlier_batches"]

OPTIMIZE_BATCH_TAG = "airflowDelta.optimizeBatch"
"""``commitInfo.tags`` key of an OPTIMIZE batch committed under an appId: ``"k/n"``, batch k of n."""
OPTIMIZE_APP_ID_TAG = "airflowDelta.appId"
"""``commitInfo.tags`` key of the appId; the same key the Spark jobs tag their commits with."""


def batch_tag(batch: int, of: int) -> str:
    return f"{batch}/{of}"


@dataclass(frozen=True)
class EarlierBatches:
    """The batches an application's earlier tries of one OPTIMIZE committed.

    ``last_batch``: the number of the newest batch (the next one continues from it);
    ``versions``: the commits found for the batches, ascending (fewer than
    ``last_batch`` when log cleanup removed some); ``added`` / ``removed``: their file
    actions (``FILE_ACTIONS_SCHEMA``); ``complete``: the newest batch was the last of
    its plan.
    """

    app_id: str
    last_batch: int
    versions: tuple[int, ...]
    added: pa.Table
    removed: pa.Table
    complete: bool

    @property
    def removed_bytes(self) -> int:
        return int(pc.sum(self.removed.column("size")).as_py() or 0)

    @property
    def added_paths(self) -> pa.Array:
        return self.added.column("path").combine_chunks()

    @property
    def deletion_vectors_removed(self) -> int:
        return self.removed.num_rows - self.removed.column("deletion_vector").null_count

    @property
    def deletion_vector_rows_removed(self) -> int:
        cardinality = pc.struct_field(self.removed.column("deletion_vector").combine_chunks(), "cardinality")
        return int(pc.sum(cardinality).as_py() or 0)


def find_earlier_batches(location: TableLocation, snapshot: Snapshot, app_id: str) -> EarlierBatches | None:
    """The batches ``app_id`` committed up to ``snapshot``; None when it committed none (see the module docstring)."""
    if snapshot.transaction_version(app_id) is None:
        return None
    found: list[tuple[int, bytes, str]] = []
    numbers: list[tuple[int, int]] = []  # (k, n) of each batch found, newest first
    version = snapshot.version
    # One commit at a time, newest first, parsing only its non-file actions, until batch 1.
    while version >= 0:
        path = commit_path(location.root, version)
        try:
            data = location.io.read_bytes(path)
        except FileNotFoundError:
            break  # log cleanup took the rest
        batch = _batch_of(parse_log_bytes([data], [path], [version], file_actions=False).actions, app_id)
        if batch is not None:
            found.append((version, data, path))
            numbers.append(batch)
            if batch[0] <= 1:
                break
        version -= 1
    found.reverse()
    if found:
        mapping = ColumnMapping.from_metadata(snapshot.metadata, snapshot.protocol)
        keys = [mapping.physical_name(c) for c in snapshot.partition_columns]
        actions = parse_log_bytes(
            [d for _, d, _ in found], [p for _, _, p in found], [v for v, _, _ in found], partition_keys=keys
        ).file_actions
    else:
        actions = FILE_ACTIONS_SCHEMA.empty_table()
    is_add = mask_to_numpy(actions.column("is_add").combine_chunks()) if actions.num_rows else np.zeros(0, dtype=bool)
    newest = numbers[0] if numbers else (1, 0)  # the txn says batch 1 committed, its commit is gone
    return EarlierBatches(
        app_id=app_id,
        last_batch=newest[0],
        versions=tuple(v for v, _, _ in found),
        added=actions.filter(pa.array(is_add, pa.bool_())),
        removed=actions.filter(pa.array(~is_add, pa.bool_())),
        complete=newest[0] == newest[1],
    )


def _batch_of(actions: Sequence[LogAction], app_id: str) -> tuple[int, int] | None:
    """``(k, n)`` when the commit of ``actions`` is batch k of n of ``app_id``'s OPTIMIZE, else None."""
    for action in actions:
        if action.key != "commitInfo":
            continue
        tags = action.body.get("tags")
        if not isinstance(tags, dict) or tags.get(OPTIMIZE_APP_ID_TAG) != app_id:
            return None
        batch, _, of = str(tags.get(OPTIMIZE_BATCH_TAG, "")).partition("/")
        return (int(batch), int(of)) if batch.isdigit() and of.isdigit() else None
    return None
