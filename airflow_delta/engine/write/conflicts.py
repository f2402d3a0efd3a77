"""Delta's conflict rules: may a transaction still commit after another one won the race?

A transaction reads snapshot ``r`` and tries to write version ``r + 1``. When another
writer got there first, every winning commit between the read version and the version
we attempt is checked here, one at a time and in version order, against a summary of
what our transaction read and what it writes (:class:`TransactionFootprint`). No logical
conflict means the transaction can be rebased onto the winner and retried; a conflict
raises one of the :class:`ConcurrentModificationError` subclasses, carrying the
winner's version, operation and what overlapped.

The checks, in the order Delta's ``ConflictChecker`` runs them:

1. protocol: the winner changed the protocol -> :class:`ProtocolChangedException`
2. metadata: the winner changed the metadata -> :class:`MetadataChangedException`, unless
   its only change is identity high-water marks (commitInfo tag ``delta.identity.schemaUpdate``)
   and our transaction changes no metadata
3. domains: both commits write the same metadata domain -> :class:`ConcurrentTransactionException`
4. app ids: the winner wrote a ``txn`` for an appId we read or write ->
   :class:`ConcurrentTransactionException` (or :class:`TransactionAlreadyCommittedError`
   when the winner already committed our idempotent write)
5. appends: the winner added files our reads would have seen -> :class:`ConcurrentAppendException`;
   which added files count depends on the isolation level (see :func:`added_files_to_check`)
6. delete/read: the winner removed a file we read -> :class:`ConcurrentDeleteReadException`
7. delete/delete: the winner removed a file we also remove -> :class:`ConcurrentDeleteDeleteException`

``docs/concurrency.md`` has the full matrix.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    InvalidTablePropertyError,
    MetadataChangedException,
    ProtocolChangedException,
    TransactionAlreadyCommittedError,
)
from airflow_delta.engine.model.actions import STRING_MAP_TYPE, DomainMetadata, Metadata, Protocol, SetTransaction
from airflow_delta.engine.model.arrow_numpy import bool_scalar, string_array
from airflow_delta.engine.model.commit_info import IDENTITY_COMMIT_TAG
from airflow_delta.engine.read.commit_reader import parse_commit_bytes
from airflow_delta.engine.storage.paths import decode_log_path

log = logging.getLogger(__name__)


class IsolationLevel(enum.StrEnum):
    """Delta's isolation levels, spelled as Delta writes them into ``commitInfo.isolationLevel``."""

    SERIALIZABLE = "Serializable"
    WRITE_SERIALIZABLE = "WriteSerializable"
    # Only for transactions that rearrange data without changing it (OPTIMIZE, ...):
    # then no concurrently added file can change what they wrote.
    SNAPSHOT_ISOLATION = "SnapshotIsolation"

    @classmethod
    def parse(cls, value: str | IsolationLevel) -> IsolationLevel:
        if isinstance(value, IsolationLevel):
            return value
        for level in cls:
            if level.value.lower() == str(value).strip().lower():
                return level
        raise InvalidTablePropertyError(
            "isolation_level", value, "one of Serializable, WriteSerializable, SnapshotIsolation"
        )


# --------------------------------------------------------------------------- winners


# Arrow layout of a winning commit's added files, enough to evaluate read predicates on.
ADDED_FILES_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("partition_values", STRING_MAP_TYPE),
        pa.field("stats", pa.string()),
        pa.field("data_change", pa.bool_()),
    ]
)


# WinningCommit and TransactionFootprint are named tuples, not frozen dataclasses: as
# immutable, and a quarter of the cost to create at import (a frozen dataclass compiles six
# methods, ~1 ms), which every process that commits pays.
class WinningCommit(NamedTuple):
    """What one winning commit did, as conflict checking needs it.

    ``added_files`` is an Arrow table of :data:`ADDED_FILES_SCHEMA` (paths still URI-encoded
    as in the log); ``removed_paths`` are decoded paths.
    """

    version: int
    commit_info: Mapping[str, Any] | None
    protocol: Protocol | None
    metadata: Metadata | None
    transactions: tuple[SetTransaction, ...]
    domains: tuple[DomainMetadata, ...]
    added_files: pa.Table
    removed_paths: tuple[str, ...]
    removed_partition_values: tuple[Mapping[str, str | None] | None, ...]
    modification_time: int | None = None

    @property
    def operation(self) -> str | None:
        return None if self.commit_info is None else self.commit_info.get("operation")

    @property
    def is_blind_append(self) -> bool:
        # A commit without commitInfo (or without the flag) is not known to be a blind
        # append, so its added files are treated as data changes, as Delta does.
        return bool(self.commit_info is not None and self.commit_info.get("isBlindAppend") is True)

    @property
    def in_commit_timestamp(self) -> int | None:
        if self.commit_info is None:
            return None
        value = self.commit_info.get("inCommitTimestamp")
        return int(value) if value is not None else None

    @property
    def identity_only_metadata_update(self) -> bool:
        """Whether the winner tagged its metadata update as identity high-water marks only."""
        tags = None if self.commit_info is None else self.commit_info.get("tags")
        return isinstance(tags, Mapping) and str(tags.get(IDENTITY_COMMIT_TAG, "")).lower() == "true"

    @property
    def txn_id(self) -> str | None:
        return None if self.commit_info is None else self.commit_info.get("txnId")

    @classmethod
    def from_actions(
        cls, version: int, actions: Iterable[Mapping[str, Any]], modification_time: int | None = None
    ) -> WinningCommit:
        """Summarise one commit from its parsed JSON lines (one ``{"<action>": {...}}`` each)."""
        commit_info: Mapping[str, Any] | None = None
        protocol: Protocol | None = None
        metadata: Metadata | None = None
        txns: list[SetTransaction] = []
        domains: list[DomainMetadata] = []
        add_paths: list[str] = []
        add_pvs: list[list[tuple[str, str | None]] | None] = []
        add_stats: list[str | None] = []
        add_data_change: list[bool] = []
        removed: list[str] = []
        removed_pvs: list[Mapping[str, str | None] | None] = []
        for action in actions:
            if "add" in action:
                add = action["add"]
                add_paths.append(str(add["path"]))
                pv = add.get("partitionValues")
                add_pvs.append(list(pv.items()) if pv is not None else None)
                add_stats.append(add.get("stats"))
                add_data_change.append(bool(add.get("dataChange", True)))
            elif "remove" in action:
                rm = action["remove"]
                removed.append(decode_log_path(str(rm["path"])))
                removed_pvs.append(rm.get("partitionValues"))
            elif "commitInfo" in action:
                commit_info = action["commitInfo"]
            elif "protocol" in action:
                protocol = Protocol.from_json(action["protocol"])
            elif "metaData" in action:
                metadata = Metadata.from_json(action["metaData"])
            elif "txn" in action:
                txns.append(SetTransaction.from_json(action["txn"]))
            elif "domainMetadata" in action:
                domains.append(DomainMetadata.from_json(action["domainMetadata"]))
        added = pa.table(
            {
                "path": pa.array(add_paths, pa.string()),
                "partition_values": pa.array(add_pvs, STRING_MAP_TYPE),
                "stats": pa.array(add_stats, pa.string()),
                "data_change": pa.array(add_data_change, pa.bool_()),
            },
            schema=ADDED_FILES_SCHEMA,
        )
        return cls(
            version=version,
            commit_info=commit_info,
            protocol=protocol,
            metadata=metadata,
            transactions=tuple(txns),
            domains=tuple(domains),
            added_files=added,
            removed_paths=tuple(removed),
            removed_partition_values=tuple(removed_pvs),
            modification_time=modification_time,
        )

    @classmethod
    def from_bytes(cls, version: int, data: bytes, file: str, modification_time: int | None = None) -> WinningCommit:
        # The log side's parser: invalid UTF-8, deep nesting and actions that break the
        # protocol's schema are CorruptCommitError naming the line.
        return cls.from_actions(version, parse_commit_bytes(data, file), modification_time)


# ------------------------------------------------------------------------ our side


# Decides which of a winner's added files (ADDED_FILES_SCHEMA rows) the given read
# predicates may have matched; True = may match (conservative).
AddedFilesMatcher = Callable[[Sequence[Any], pa.Table], pa.BooleanArray]


_NO_PATHS = pa.nulls(0, pa.string())  # Arrow arrays are immutable: one empty default serves all


class TransactionFootprint(NamedTuple):
    """What the current transaction read and what it is about to write.

    ``read_predicates`` are the filters the transaction read the table with (opaque to
    this module; the ``matcher`` evaluates them). ``read_paths`` are the decoded paths of
    the files it read. ``read_whole_table`` is set by an unfiltered read.
    """

    read_version: int
    partitioned: bool
    read_predicates: tuple[Any, ...] = ()
    read_whole_table: bool = False
    read_paths: pa.Array = _NO_PATHS
    read_app_ids: frozenset[str] = frozenset()
    app_transactions: Mapping[str, int] = MappingProxyType({})
    removed_paths: frozenset[str] = frozenset()
    domains: frozenset[str] = frozenset()
    changes_protocol: bool = False
    changes_metadata: bool = False
    is_blind_append: bool = False


def added_files_to_check(
    winner: WinningCommit, isolation_level: IsolationLevel, changes_metadata: bool
) -> pa.Table:
    """The winner's added files that our reads must not have missed, per isolation level.

    - Serializable: every added file.
    - WriteSerializable: every added file, except those of a blind append (a commit
      that only added files without reading the table), unless our transaction changes
      the metadata, in which case blind appends count too.
    - SnapshotIsolation: none.
    """
    if isolation_level is IsolationLevel.SNAPSHOT_ISOLATION:
        return winner.added_files.slice(0, 0)
    if isolation_level is IsolationLevel.WRITE_SERIALIZABLE and not changes_metadata and winner.is_blind_append:
        return winner.added_files.slice(0, 0)
    return winner.added_files


def check_winning_commit(
    footprint: TransactionFootprint,
    winner: WinningCommit,
    isolation_level: IsolationLevel,
    matcher: AddedFilesMatcher,
    read_protocol: Protocol,
) -> None:
    """Raise the conflict Delta would raise between our transaction and ``winner``; None if none."""
    _check_protocol(footprint, winner, read_protocol)
    _check_metadata(footprint, winner)
    _check_domains(footprint, winner)
    _check_app_ids(footprint, winner)
    _check_appends(footprint, winner, isolation_level, matcher)
    _check_delete_read(footprint, winner)
    _check_delete_delete(footprint, winner)


def _conflict_kwargs(winner: WinningCommit, conflicting: Sequence[Any] = ()) -> dict[str, Any]:
    return {"winning_version": winner.version, "winning_operation": winner.operation, "conflicting": conflicting}


def _check_protocol(footprint: TransactionFootprint, winner: WinningCommit, read_protocol: Protocol) -> None:
    if winner.protocol is None:
        return
    if footprint.changes_protocol:
        raise ProtocolChangedException(
            "a concurrent commit changed the protocol while this transaction changes it too; "
            "reload the table and retry the operation",
            **_conflict_kwargs(winner),
        )
    # Delta lets some protocol upgrades through after re-validating every feature
    # requirement against the new protocol. We cannot re-validate staged actions against
    # features added behind our back (e.g. row tracking wants row ids on every add),
    # so any real change of the protocol aborts; a re-commit of the same protocol does not.
    if winner.protocol != read_protocol:
        raise ProtocolChangedException(
            "a concurrent commit changed the table protocol; reload the table and retry the operation",
            **_conflict_kwargs(winner, [winner.protocol.to_json()]),
        )


def _check_metadata(footprint: TransactionFootprint, winner: WinningCommit) -> None:
    if winner.metadata is None:
        return
    # Delta's ConflictChecker.checkNoMetadataUpdates: a winner whose only metadata change
    # is identity high-water marks (tagged so) does not conflict with a transaction that
    # changes no metadata; the new marks are the winner's, ours are untouched.
    if winner.identity_only_metadata_update and not footprint.changes_metadata:
        return
    what = (
        "a concurrent commit moved the identity columns' high-water marks while this transaction changes the "
        "metadata too (both generated identity values, or this one changes the schema or properties)"
        if winner.identity_only_metadata_update
        else "a concurrent commit changed the table metadata (schema, partitioning or properties)"
    )
    raise MetadataChangedException(f"{what}; reload the table and retry the operation", **_conflict_kwargs(winner))


def _check_domains(footprint: TransactionFootprint, winner: WinningCommit) -> None:
    overlap = sorted(footprint.domains & {d.domain for d in winner.domains})
    if overlap:
        raise ConcurrentTransactionException(
            "a concurrent commit wrote the same metadata domain(s); reload the table and retry",
            **_conflict_kwargs(winner, overlap),
        )


def _check_app_ids(footprint: TransactionFootprint, winner: WinningCommit) -> None:
    for txn in winner.transactions:
        ours = footprint.app_transactions.get(txn.app_id)
        if ours is not None and txn.version >= ours:
            # Another attempt of the same idempotent write already landed.
            raise TransactionAlreadyCommittedError(txn.app_id, ours, txn.version)
    overlap = sorted(
        {t.app_id for t in winner.transactions} & (footprint.read_app_ids | set(footprint.app_transactions))
    )
    if overlap:
        raise ConcurrentTransactionException(
            "a concurrent commit wrote a transaction for the same application id (another instance of "
            "the same job?); make sure only one writer per appId runs at a time",
            **_conflict_kwargs(winner, overlap),
        )


def _check_appends(
    footprint: TransactionFootprint,
    winner: WinningCommit,
    isolation_level: IsolationLevel,
    matcher: AddedFilesMatcher,
) -> None:
    candidates = added_files_to_check(winner, isolation_level, footprint.changes_metadata)
    if candidates.num_rows == 0 or footprint.is_blind_append:
        return
    if footprint.read_whole_table or (not footprint.partitioned and not footprint.read_predicates):
        # Delta: an unfiltered read, or any non-blind-append transaction on an
        # unpartitioned table, depends on every file.
        matching = candidates
    elif not footprint.read_predicates:
        return
    else:
        mask = matcher(footprint.read_predicates, candidates)
        matching = candidates.filter(mask)
    if matching.num_rows == 0:
        return
    raise ConcurrentAppendException(
        "a concurrent commit added files that this transaction's reads would have matched; "
        "reload the table and retry the operation",
        **_conflict_kwargs(winner, _describe_files(matching, footprint.partitioned)),
    )


def _describe_files(files: pa.Table, partitioned: bool) -> list[Any]:
    if not partitioned:
        return [decode_log_path(p) for p in files.column("path").to_pylist()]
    seen: list[dict[str, str | None]] = []
    for pv in files.column("partition_values").to_pylist():
        as_dict = dict(pv or [])
        if as_dict not in seen:
            seen.append(as_dict)
    return seen


def _check_delete_read(footprint: TransactionFootprint, winner: WinningCommit) -> None:
    if not winner.removed_paths:
        return
    if len(footprint.read_paths):
        removed = string_array(list(winner.removed_paths))
        hits = footprint.read_paths.filter(pc.is_in(footprint.read_paths, value_set=removed))
        if len(hits):
            raise ConcurrentDeleteReadException(
                "a concurrent commit removed file(s) this transaction read; reload the table and retry the operation",
                **_conflict_kwargs(winner, sorted(set(hits.to_pylist()))),
            )
    if footprint.read_whole_table:
        raise ConcurrentDeleteReadException(
            "a concurrent commit removed files while this transaction read the whole table; "
            "reload the table and retry the operation",
            **_conflict_kwargs(winner, sorted(set(winner.removed_paths))),
        )


def _check_delete_delete(footprint: TransactionFootprint, winner: WinningCommit) -> None:
    if not footprint.removed_paths or not winner.removed_paths:
        return
    overlap = sorted(footprint.removed_paths.intersection(winner.removed_paths))
    if overlap:
        raise ConcurrentDeleteDeleteException(
            "a concurrent commit removed file(s) this transaction also removes; reload the table and retry",
            **_conflict_kwargs(winner, overlap),
        )


# ------------------------------------------------------------------ path helpers


def decode_paths(paths: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Percent-decode log paths, vectorised: only the (rare) paths holding ``%`` go through Python."""
    if isinstance(paths, pa.ChunkedArray):
        paths = paths.combine_chunks()
    paths = paths.cast(pa.string())
    if len(paths) == 0:
        return paths
    encoded = pc.fill_null(pc.match_substring(paths, "%"), bool_scalar(False))
    if not pc.any(encoded).as_py():
        return paths
    values = paths.to_pylist()
    flags = encoded.to_pylist()
    return string_array([decode_log_path(v) if f and v is not None else v for v, f in zip(values, flags, strict=True)])
