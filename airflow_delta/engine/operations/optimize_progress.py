"""What earlier tries of one OPTIMIZE already committed: the batches of its ``txn`` appId.

An OPTIMIZE that runs under an application id (an Airflow task instance) commits batch
``k`` with ``txn(appId, k)`` and the tag :data:`OPTIMIZE_BATCH_TAG` = ``"k/n"`` (``n``:
the batches of its plan, counting those of earlier tries). A try that starts after
another try of the same application committed some batches resumes instead of starting
over; this module reads back what those batches did, from the log alone:

- the snapshot's ``txn`` version for the appId says how many batches were committed
  (no commit is read when it is absent);
- the commits are then read newest first until every one of those batches is found
  (each is recognised by its ``txn`` action), or until the log ends (log cleanup removed
  the oldest: the batches still count, their files are simply not known any more);
- their add and remove actions are parsed together, as Arrow.

``complete`` says the last batch was the last of its plan: the OPTIMIZE finished, and a
retry returns its result without rewriting anything.
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

__all__ = ["OPTIMIZE_BATCH_TAG", "EarlierBatches", "batch_tag", "find_earlier_batches"]

OPTIMIZE_BATCH_TAG = "airflowDelta.optimizeBatch"
"""``commitInfo.tags`` key of an OPTIMIZE batch committed under an appId: ``"k/n"``, batch k of n."""


def batch_tag(batch: int, of: int) -> str:
    return f"{batch}/{of}"


@dataclass(frozen=True)
class EarlierBatches:
    """The batches an application's earlier tries of one OPTIMIZE committed.

    ``committed``: the application's ``txn`` version, the number of batches committed;
    ``versions``: the commits found for them, ascending (fewer than ``committed`` when
    log cleanup removed some); ``added`` / ``removed``: their file actions
    (``FILE_ACTIONS_SCHEMA``); ``complete``: the newest batch was the last of its plan.
    """

    app_id: str
    committed: int
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
    committed = snapshot.transaction_version(app_id)
    if not committed:
        return None
    found: list[tuple[int, bytes, str]] = []
    newest_batch_tag: str | None = None
    version = snapshot.version
    # One commit at a time, newest first, reading only non-file actions until a batch is found.
    while version >= 0 and len(found) < committed:
        path = commit_path(location.root, version)
        try:
            data = location.io.read_bytes(path)
        except FileNotFoundError:
            break  # log cleanup took the rest: the batches count, their files are unknown
        parsed = parse_log_bytes([data], [path], [version], file_actions=False)
        batch = _batch_of(parsed.actions, app_id)
        if batch is not None:
            if not found:
                newest_batch_tag = _tag_of(parsed.actions)
            found.append((version, data, path))
            if batch <= 1:
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
    return EarlierBatches(
        app_id=app_id,
        committed=committed,
        versions=tuple(v for v, _, _ in found),
        added=actions.filter(pa.array(is_add, pa.bool_())),
        removed=actions.filter(pa.array(~is_add, pa.bool_())),
        complete=_is_last(newest_batch_tag),
    )


def _batch_of(actions: Sequence[LogAction], app_id: str) -> int | None:
    for action in actions:
        if action.key == "txn" and action.body.get("appId") == app_id:
            version = action.body.get("version")
            return int(version) if isinstance(version, int) else None
    return None


def _tag_of(actions: Sequence[LogAction]) -> str | None:
    for action in actions:
        if action.key == "commitInfo":
            tags = action.body.get("tags") or {}
            value = tags.get(OPTIMIZE_BATCH_TAG) if isinstance(tags, dict) else None
            return value if isinstance(value, str) else None
    return None


def _is_last(tag: str | None) -> bool:
    """Whether ``"k/n"`` names the last batch of its plan; anything else (no tag, a foreign value) is not."""
    if tag is None:
        return False
    batch, _, of = tag.partition("/")
    return batch.isdigit() and of.isdigit() and int(batch) == int(of)
