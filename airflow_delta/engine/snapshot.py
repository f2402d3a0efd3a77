"""``Snapshot``: one immutable version of a table, and :func:`load_snapshot`.

Loading lists the log once, replays the segment (:mod:`.log.replay`) and checks the
reader feature gate. File actions stay Arrow (``FILE_ACTIONS_SCHEMA``); statistics stay
JSON strings until :meth:`Snapshot.files` or a filter needs them, so loading a snapshot
for its metadata never pays for parsing stats.

Reading follows pyiceberg's shape: :meth:`Snapshot.plan_files` prunes the live files
with a filter (partition values, then statistics), :meth:`Snapshot.to_arrow` reads the
planned files (deletion vectors applied) and filters their rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.actions import DomainMetadata, Metadata, Protocol, SetTransaction
from airflow_delta.engine.errors import DeltaError
from airflow_delta.engine.fs import FileIO
from airflow_delta.engine.log.listing import LogSegment, list_log, list_log_and_segment
from airflow_delta.engine.log.replay import replay
from airflow_delta.engine.paths import decode_log_path, relative_to_table, resolve_in_table
from airflow_delta.engine.table_properties import TableProperties

if TYPE_CHECKING:
    from airflow_delta.engine.history import TimestampLike


@dataclass(frozen=True, eq=False)
class Snapshot:
    """The state of a table at one version. Immutable; cheap derived values are cached."""

    table_root: str
    io: FileIO
    version: int
    protocol: Protocol
    metadata: Metadata
    properties: TableProperties
    timestamp: int  # ms since the epoch: commit (or in-commit) timestamp of ``version``
    log_segment: LogSegment
    transactions: Mapping[str, SetTransaction]
    domain_metadata: Mapping[str, DomainMetadata]  # live domains (tombstones excluded)
    add_actions: pa.Table  # FILE_ACTIONS_SCHEMA: the live files, URI-encoded paths
    tombstones: pa.Table  # FILE_ACTIONS_SCHEMA: removes that are still tombstones
    commit_info: Mapping[str, Any] | None = None  # commitInfo of ``version``, if its JSON exists

    def __repr__(self) -> str:
        return f"Snapshot({self.table_root!r}, version={self.version}, files={self.add_actions.num_rows})"

    # ------------------------------------------------------------------ metadata
    @cached_property
    def schema(self) -> pa.Schema:
        """The table schema as Arrow, with logical column names."""
        from airflow_delta.engine.schema import schema_to_arrow

        return schema_to_arrow(self.metadata.schema_string)

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.metadata.partition_columns

    @property
    def num_files(self) -> int:
        return self.add_actions.num_rows

    def transaction_version(self, app_id: str) -> int | None:
        """The last ``txn`` version committed by ``app_id``, if any."""
        txn = self.transactions.get(app_id)
        return txn.version if txn is not None else None

    # ------------------------------------------------------------------ files
    @cached_property
    def _partition_values(self) -> pa.StructArray:
        from airflow_delta.engine.schema import parse_partition_values

        return parse_partition_values(self.add_actions.column("partition_values"), self.metadata)

    @cached_property
    def _stats(self) -> pa.StructArray:
        from airflow_delta.engine.stats import parse_stats

        return parse_stats(self.add_actions.column("stats").combine_chunks(), self.metadata)

    def _predicate(self, filter: str) -> Any:
        from airflow_delta.engine.expressions import parse_predicate

        return parse_predicate(filter, self.schema)

    def _file_mask(self, filter: str) -> pa.BooleanArray:
        from airflow_delta.engine.expressions import prune_files, references_only

        predicate = self._predicate(filter)
        stats = None if references_only(predicate, self.partition_columns) else self._stats
        return prune_files(predicate, self._partition_values, stats, self.partition_columns)

    def plan_files(self, filter: str | None = None) -> pa.Table:
        """The live file actions (``FILE_ACTIONS_SCHEMA``) that :meth:`to_arrow` would read."""
        if filter is None or self.add_actions.num_rows == 0:
            return self.add_actions
        return self.add_actions.filter(self._file_mask(filter))

    def files(self, filter: str | None = None) -> pa.Table:
        """One row per live file (after pruning by ``filter``), in user-facing form.

        Columns: ``path`` (decoded, relative to the root), ``partition_values`` (typed
        struct, logical names), ``size``, ``modification_time``, ``num_records``,
        ``stats`` (typed struct), ``deletion_vector``, ``tags``.
        """
        if filter is None or self.add_actions.num_rows == 0:
            actions, pv, stats = self.add_actions, self._partition_values, self._stats
        else:
            mask = self._file_mask(filter)
            actions = self.add_actions.filter(mask)
            pv, stats = self._partition_values.filter(mask), self._stats.filter(mask)
        if stats.type.get_field_index("numRecords") >= 0:
            num_records = pc.struct_field(stats, "numRecords").cast(pa.int64())
        else:
            num_records = pa.nulls(len(stats), pa.int64())
        return pa.table({
            "path": relative_paths(self.table_root, actions.column("path")),
            "partition_values": pv,
            "size": actions.column("size"),
            "modification_time": actions.column("modification_time"),
            "num_records": num_records,
            "stats": stats,
            "deletion_vector": actions.column("deletion_vector"),
            "tags": actions.column("tags"),
        })

    def to_arrow(self, columns: Sequence[str] | None = None, filter: str | None = None) -> pa.Table:
        """The table's rows (deletion vectors applied), optionally projected and filtered."""
        from airflow_delta.engine.scan import read_data

        files = self.plan_files(filter)
        row_filter = self._predicate(filter).to_arrow() if filter is not None else None
        return read_data(self, files, columns=columns, row_filter=row_filter)


def decode_paths(paths: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Percent-decode log paths; only the (usually few) paths containing ``%`` go through Python."""
    if isinstance(paths, pa.ChunkedArray):
        paths = paths.combine_chunks() if paths.num_chunks != 1 else paths.chunk(0)
    if len(paths) == 0:
        return paths
    encoded = pc.fill_null(pc.match_substring(paths, "%"), False)
    idx = np.flatnonzero(encoded.to_numpy(zero_copy_only=False))
    if idx.size == 0:
        return paths
    decoded = [decode_log_path(p) for p in paths.take(pa.array(idx)).to_pylist()]
    out = np.asarray(paths.to_pylist(), dtype=object)
    out[idx] = decoded
    return pa.array(out, pa.string())


def relative_paths(table_root: str, paths: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Decoded paths relative to the root; the (rare) absolute URIs in a log are made relative."""
    decoded = decode_paths(paths)
    if len(decoded) == 0:
        return decoded
    absolute = pc.or_(pc.starts_with(decoded, "/"), pc.match_substring(decoded, "://"))
    idx = np.flatnonzero(pc.fill_null(absolute, False).to_numpy(zero_copy_only=False))
    if idx.size == 0:
        return decoded
    encoded = paths.combine_chunks() if isinstance(paths, pa.ChunkedArray) else paths
    out = np.asarray(decoded.to_pylist(), dtype=object)
    for i, log_path in zip(idx.tolist(), encoded.take(pa.array(idx)).to_pylist(), strict=True):
        out[i] = relative_to_table(table_root, resolve_in_table(table_root, log_path))
    return pa.array(out, pa.string())


def load_snapshot(
    io: FileIO,
    root: str,
    version: int | None = None,
    timestamp: TimestampLike | None = None,
) -> Snapshot:
    """The table at ``root`` as of the latest version, a ``version``, or a ``timestamp``."""
    from airflow_delta.engine.history import commit_timestamp, extract_commit_info, version_at_timestamp

    if version is not None and timestamp is not None:
        raise DeltaError("pass either version or timestamp, not both")
    if timestamp is not None:
        version = version_at_timestamp(io, root, timestamp, listing=list_log(io, root))
    _, segment = list_log_and_segment(io, root, version)
    state = replay(io, segment)
    properties = TableProperties.from_configuration(state.metadata.configuration)
    commit_info = state.commit_infos.get(segment.version)
    if commit_info is None and segment.latest_commit_file is not None and segment.version == segment.checkpoint_version:
        # Replay started from this version's checkpoint, which keeps no commitInfo.
        info = segment.latest_commit_file
        commit_info = extract_commit_info(io.read_bytes(info.path), info.path)
    if segment.latest_commit_file is not None:
        mtime = segment.latest_commit_file.modification_time
    else:  # only the checkpoint of this version is left
        mtime = segment.checkpoint_files[0].modification_time
    return Snapshot(
        table_root=root,
        io=io,
        version=segment.version,
        protocol=state.protocol,
        metadata=state.metadata,
        properties=properties,
        timestamp=commit_timestamp(segment.version, mtime, commit_info, properties),
        log_segment=segment,
        transactions=state.transactions,
        domain_metadata=state.domain_metadata,
        add_actions=state.add_actions,
        tombstones=state.tombstones,
        commit_info=commit_info,
    )
