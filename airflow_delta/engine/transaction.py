"""Optimistic transactions: read a snapshot, stage actions, commit ``read_version + 1``.

A :class:`Transaction` records what it read (filters through :meth:`Transaction.read_files`,
specific files, the whole table, application transaction ids), stages actions, and on
:meth:`Transaction.commit` writes ``_delta_log/<read_version + 1>.json`` with the
FileIO's atomic put-if-absent. When another writer got that version first, each
winning commit is checked with Delta's conflict rules (:mod:`.conflicts`); without a
logical conflict the transaction is rebased onto the winner (in-commit timestamp
recomputed, protocol and metadata unchanged) and retried, with exponential backoff and
full jitter, up to ``max_attempts``.

Leaving a ``with table.transaction() as txn:`` block never commits by itself: a commit
needs an operation name, so it is always an explicit ``txn.commit("WRITE", ...)``. An
exception inside the block discards the staged actions; leaving the block normally
with staged but uncommitted actions raises :class:`InvalidTransactionError`, because
that is almost certainly a forgotten ``commit()``.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta import __version__
from airflow_delta.engine import protocol as protocol_gate
from airflow_delta.engine.actions import (
    AddCDCFile,
    AddFile,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    action_to_line,
)
from airflow_delta.engine.conflicts import (
    IsolationLevel,
    TransactionFootprint,
    WinningCommit,
    check_winning_commit,
    decode_paths,
)
from airflow_delta.engine.errors import (
    AppendOnlyViolationError,
    CommitFailedError,
    ConcurrentModificationError,
    DeletionVectorsNotEnabledError,
    DeltaError,
    InvalidTransactionError,
    RowIndexOutOfRangeError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TransactionAlreadyCommittedError,
)
from airflow_delta.engine.fs import CommitNotSupportedError
from airflow_delta.engine.paths import decode_log_path
from airflow_delta.engine.table_properties import TableProperties

if TYPE_CHECKING:
    from airflow_delta.engine.snapshot import Snapshot
    from airflow_delta.engine.table import DeltaTable

log = logging.getLogger(__name__)

ENGINE_INFO = f"airflow-delta/{__version__}"

# Operations that replace data wholesale: on a CDF table their removes and adds are the
# change (old rows deleted, new rows inserted), so they need no cdc actions.
_REPLACING_OPERATIONS = frozenset(
    {"WRITE", "CREATE OR REPLACE TABLE", "REPLACE TABLE", "CREATE OR REPLACE TABLE AS SELECT", "REPLACE TABLE AS SELECT"}
)

_ICT_VERSION_KEY = "delta.inCommitTimestampEnablementVersion"
_ICT_TIMESTAMP_KEY = "delta.inCommitTimestampEnablementTimestamp"


DEFAULT_MAX_ATTEMPTS = 100
DEFAULT_INITIAL_BACKOFF = 0.002  # seconds
DEFAULT_MAX_BACKOFF = 1.0  # seconds


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often, and how patiently, a commit that lost a race is retried.

    ``max_attempts`` counts every attempt to write the commit file, the first one
    included. Between attempts the transaction sleeps a random time in
    ``[0, min(max_backoff, initial_backoff * 2 ** (n - 1))]`` after the n-th lost attempt
    ("full jitter"), so writers that collided do not collide again in lockstep.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    initial_backoff: float = DEFAULT_INITIAL_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0:
            raise ValueError("initial_backoff and max_backoff must be >= 0 seconds")

    def backoff(self, lost_attempts: int, rng: random.Random) -> float:
        ceiling = min(self.max_backoff, self.initial_backoff * (2 ** max(lost_attempts - 1, 0)))
        return rng.uniform(0.0, ceiling) if ceiling > 0 else 0.0


def commit_path(root: str, version: int) -> str:
    return f"{root}/_delta_log/{version:020d}.json"


def encode_operation_parameters(parameters: Mapping[str, Any] | None) -> dict[str, str | bool | int | float | None]:
    """``operationParameters`` as Delta writes them.

    Delta serialises each value as the raw JSON of what the operation passed: strings stay
    strings, ``None`` is null, booleans and numbers stay JSON scalars (OPTIMIZE's
    ``"auto":true``). Lists and maps become JSON *text* (``"partitionBy":"[\"day\"]"``), as
    Delta's operations pre-encode them, because Spark reads the values back as strings and
    accepts scalars but not arrays or objects. Non-finite floats, which JSON cannot hold,
    become their text too.
    """
    out: dict[str, str | bool | int | float | None] = {}
    for key, value in (parameters or {}).items():
        json_scalar = isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value))
        if value is None or json_scalar:
            out[str(key)] = value
        else:
            out[str(key)] = json.dumps(value, separators=(",", ":"), default=str)
    return out


def encode_operation_metrics(metrics: Mapping[str, Any] | None) -> dict[str, str]:
    """``operationMetrics`` as Delta writes them: every value a string (``"3"``, ``"true"``)."""
    out: dict[str, str] = {}
    for key, value in (metrics or {}).items():
        if isinstance(value, bool):
            out[str(key)] = "true" if value else "false"
        else:
            out[str(key)] = str(value)
    return out


@dataclass(frozen=True, slots=True)
class RowDeletion:
    """What :meth:`Transaction.delete_rows` staged, counted as Delta's DELETE metrics count it.

    ``num_deleted_rows`` counts only rows that were not deleted before (the union of old
    and new deleted rows, minus the old). A file that lost its last row is removed
    (``removed_paths``, ``num_removed_files``/``num_removed_bytes``); a file that keeps
    rows gets a new DV: ``added`` when it had none, ``updated`` when it replaces one.
    ``num_deletion_vectors_removed`` counts the DVs of files removed outright.
    """

    num_deleted_rows: int = 0
    num_removed_files: int = 0
    num_removed_bytes: int = 0
    num_deletion_vectors_added: int = 0
    num_deletion_vectors_updated: int = 0
    num_deletion_vectors_removed: int = 0
    removed_paths: tuple[str, ...] = ()
    removes: tuple[RemoveFile, ...] = ()
    adds: tuple[AddFile, ...] = ()


# ------------------------------------------------------------------ the transaction


class Transaction:
    """An optimistic transaction on one table; see the module docstring.

    ``isolation_level`` defaults to the table's ``delta.isolationLevel``
    (WriteSerializable). A transaction whose actions are only ``dataChange=false`` file
    actions (OPTIMIZE and other rearrangements) is checked at SnapshotIsolation, as
    Delta does. Options: ``max_attempts``, ``initial_backoff``, ``max_backoff`` (see
    :class:`RetryPolicy`), ``snapshot`` (a snapshot already loaded, to read from),
    ``engine_info`` and ``seed`` (for the jitter).
    """

    def __init__(
        self,
        table: DeltaTable,
        isolation_level: str | IsolationLevel | None = None,
        *,
        snapshot: Snapshot | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        initial_backoff: float = DEFAULT_INITIAL_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        engine_info: str = ENGINE_INFO,
        seed: int | None = None,
    ) -> None:
        self.table = table
        self.retry = RetryPolicy(max_attempts, initial_backoff, max_backoff)
        self.engine_info = engine_info
        self.txn_id = str(uuid.uuid4())
        self._rng = random.Random(seed)
        self._requested_isolation = IsolationLevel.parse(isolation_level) if isolation_level is not None else None
        if self._requested_isolation is IsolationLevel.SNAPSHOT_ISOLATION:
            raise InvalidTransactionError(
                "SnapshotIsolation cannot be asked for: it is used automatically when a transaction only "
                "rearranges data (dataChange=false); choose Serializable or WriteSerializable"
            )
        self.snapshot: Snapshot | None = snapshot if snapshot is not None else _load_latest(table)
        self.read_version: int = self.snapshot.version if self.snapshot is not None else -1

        self._adds: list[AddFile] = []
        self._removes: list[RemoveFile] = []
        self._cdc: list[AddCDCFile] = []
        self._metadata: Metadata | None = None
        self._protocol: Protocol | None = None
        self._app_transactions: dict[str, SetTransaction] = {}
        self._domains: dict[str, DomainMetadata] = {}
        self._extra_features: set[str] = set()  # delta.feature.<name> asked for explicitly

        self._read_predicates: list[Any] = []
        self._read_whole_table = False
        self._read_path_chunks: list[pa.Array] = []
        self._read_app_ids: set[str] = set()

        self._state = "open"  # open -> committed | failed | aborted
        self.committed_version: int | None = None
        self.attempts = 0
        self.winning_commits: list[WinningCommit] = []
        self.isolation_level: IsolationLevel | None = None
        self._committed_payload = b""

    # ------------------------------------------------------------ context manager
    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._state != "open":
            return
        if exc_type is not None:
            self.abort()
            return
        if self.has_staged_actions:
            self.abort()
            raise InvalidTransactionError(
                "the transaction block ended with staged actions but without commit(); nothing was written. "
                "Call txn.commit(operation, ...) inside the block"
            )
        self.abort()

    def abort(self) -> None:
        """Discard everything staged; nothing is written. Data files already written stay orphaned for VACUUM."""
        if self._state == "open":
            self._state = "aborted"

    # ---------------------------------------------------------------- reading
    @property
    def metadata(self) -> Metadata:
        """The metadata this transaction commits against (staged, else the snapshot's)."""
        if self._metadata is not None:
            return self._metadata
        if self.snapshot is None:
            raise InvalidTransactionError(
                f"{self.table.table_uri!r} has no table yet: stage its metadata with set_metadata() first"
            )
        return self.snapshot.metadata

    @property
    def protocol(self) -> Protocol | None:
        if self._protocol is not None:
            return self._protocol
        return self.snapshot.protocol if self.snapshot is not None else None

    @property
    def has_staged_actions(self) -> bool:
        return bool(
            self._adds or self._removes or self._cdc or self._metadata is not None or self._protocol is not None
            or self._app_transactions or self._domains or self._extra_features
        )

    def read_files(self, filter: str | None = None) -> pa.Table:
        """Live files (``FILE_ACTIONS_SCHEMA`` rows) that may hold rows matching ``filter``, recorded as read.

        Pruning uses partition values and file statistics and is conservative: a file
        is returned unless its partition values or stats prove that no row matches.
        The filter is remembered, so a concurrent commit that adds a file the filter
        may match, or removes one of the returned files, conflicts with this one.
        ``filter=None`` reads (and depends on) the whole table.
        """
        self._ensure_open()
        snapshot = self._require_snapshot()
        files: pa.Table = snapshot.add_actions
        if filter is None:
            # Any concurrent remove conflicts with a whole-table read, so the paths
            # themselves need not be remembered.
            self._read_whole_table = True
            return files
        from airflow_delta.engine.expressions import parse_predicate

        predicate = parse_predicate(filter, snapshot.schema)
        mask = files_may_match([predicate], files, snapshot.metadata)
        matched = files.filter(mask)
        self._read_predicates.append(predicate)
        self._read_path_chunks.append(decode_paths(matched.column("path")))
        return matched

    def read_whole_table(self) -> None:
        """Declare that this transaction depends on the entire table (any concurrent change conflicts)."""
        self._ensure_open()
        self._read_whole_table = True

    def mark_files_read(self, paths: Iterable[str] | pa.Array | pa.ChunkedArray | pa.Table) -> None:
        """Record specific files as read.

        ``paths`` are log paths as written in the log (URI-encoded, e.g. the ``path`` of
        ``read_files()`` / ``snapshot.add_actions`` rows), or a table with a ``path``
        column: file-action rows (encoded) or ``snapshot.files()`` rows, whose paths are
        already decoded and are not decoded a second time.
        """
        self._ensure_open()
        if isinstance(paths, pa.Table):
            arr = paths.column("path")
            if "is_add" not in paths.column_names:  # snapshot.files(): decoded already
                self._read_path_chunks.append(arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr)
                return
        elif isinstance(paths, (pa.Array, pa.ChunkedArray)):
            arr = paths
        else:
            arr = pa.array(list(paths), pa.string())
        self._read_path_chunks.append(decode_paths(arr))

    def read_app_transaction(self, app_id: str) -> int | None:
        """The last version ``app_id`` committed (``txn`` action), recorded as read; None if never."""
        self._ensure_open()
        self._read_app_ids.add(app_id)
        if self.snapshot is None:
            return None
        txn = self.snapshot.transactions.get(app_id)
        return txn.version if txn is not None else None

    # ---------------------------------------------------------------- staging
    def add(self, action: AddFile) -> None:
        self._ensure_open()
        self._adds.append(action)

    def add_files(self, actions: Iterable[AddFile]) -> None:
        self._ensure_open()
        self._adds.extend(actions)

    def remove(self, action: RemoveFile) -> None:
        self._ensure_open()
        self._removes.append(action)

    def remove_files(self, files: pa.Table, *, data_change: bool = True, deletion_timestamp: int | None = None) -> None:
        """Stage a ``remove`` for each row of ``files`` (``FILE_ACTIONS_SCHEMA``, e.g. from :meth:`read_files`)."""
        self._ensure_open()
        ts = deletion_timestamp if deletion_timestamp is not None else _now_ms()
        partition_columns = _physical_partition_columns(self.metadata)
        self._removes.extend(
            replace(r, partition_values=_only_partition_columns(r.partition_values, partition_columns))
            for r in removes_from_file_actions(files, ts, data_change=data_change)
        )

    def delete_rows(
        self,
        deletes: Mapping[str, Any],
        *,
        deletion_timestamp: int | None = None,
        target_dv_file_size: int | None = None,
    ) -> RowDeletion:
        """Stage the deletion of rows of live files through deletion vectors (DVs).

        ``deletes`` maps a live file's path (the decoded path relative to the table
        root, as ``snapshot.files()`` gives it, or the log path of :meth:`read_files`)
        to the 0-based row indexes to delete in that data file (any iterable of ints, a
        numpy/Arrow integer array or a ``RoaringBitmapArray``). For each file the new
        rows are merged with the rows its current DV already deletes, then:

        * every row is now deleted: the file is removed outright (``remove`` with its
          old DV, no new DV);
        * some rows remain: ``remove`` of ``(path, old DV)`` and ``add`` of the same
          path with the new DV and the old statistics marked ``tightBounds: false``
          (min/max may now be wider than the remaining rows, as Delta writes them);
        * nothing new is deleted: nothing is staged for the file.

        The new DVs are written at once, packed into as few DV files as
        ``target_dv_file_size`` allows (in a random prefix directory when
        ``delta.randomizeFilePrefixes`` is set). The files are not recorded as read
        here (record what the rows were chosen from with :meth:`read_files` or
        :meth:`mark_files_read`); a concurrent commit that removes one of them conflicts
        through the staged ``remove`` (:class:`ConcurrentDeleteDeleteException`).

        Raises :class:`DeletionVectorsNotEnabledError` unless the table (or metadata
        staged in this transaction) sets ``delta.enableDeletionVectors=true``,
        :class:`RowIndexOutOfRangeError` for a row index past the file's
        ``numRecords``, and :class:`InvalidTransactionError` for a path that is not a
        live file or that this transaction already removes.
        """
        from airflow_delta.engine.deletion_vectors import (
            DEFAULT_PACKING_TARGET_SIZE,
            RoaringBitmapArray,
            dv_descriptor_from_struct,
            read_deletion_vectors,
            write_deletion_vectors,
        )

        self._ensure_open()
        snapshot = self._require_snapshot()
        props = TableProperties.from_configuration(self.metadata.configuration)
        if not props.enable_deletion_vectors:
            raise DeletionVectorsNotEnabledError(self.table.table_uri)
        if not deletes:
            return RowDeletion()
        files = _live_files_by_path(snapshot, list(deletes))
        already_removed = {decode_log_path(r.path) for r in self._removes}

        # One pass over the touched files: row sets, numRecords, existing DVs.
        rows_list = files.to_pylist()
        new_rows: list[RoaringBitmapArray] = []
        num_records: list[int] = []
        existing: list[DeletionVectorDescriptor | None] = []
        for key, row in zip(files.column("key").to_pylist(), rows_list, strict=True):
            if decode_log_path(row["path"]) in already_removed:
                raise InvalidTransactionError(
                    f"file {key!r} is already removed in this transaction; pass all of its rows to one "
                    "delete_rows() call"
                )
            bitmap = RoaringBitmapArray.from_indices(deletes[key])
            records = _num_records_of(snapshot, row)
            if bitmap and bitmap.max >= records:  # type: ignore[operator]
                raise RowIndexOutOfRangeError(key, int(bitmap.max), records)  # type: ignore[arg-type]
            dv = row.get("deletion_vector")
            existing.append(dv_descriptor_from_struct(dv) if dv and dv.get("storageType") else None)
            new_rows.append(bitmap)
            num_records.append(records)
        old_rows = read_deletion_vectors(snapshot.io, snapshot.table_root, existing)

        ts = deletion_timestamp if deletion_timestamp is not None else _now_ms()
        partition_columns = _physical_partition_columns(self.metadata)
        removes = [
            replace(r, partition_values=_only_partition_columns(r.partition_values, partition_columns))
            for r in removes_from_file_actions(files.drop_columns(["key"]), ts, data_change=True)
        ]
        staged_removes: list[RemoveFile] = []
        removed_paths: list[str] = []
        to_write: list[tuple[int, RoaringBitmapArray]] = []
        deleted_rows = removed_bytes = dvs_removed = 0
        for i, (new, old) in enumerate(zip(new_rows, old_rows, strict=True)):
            old = old if old is not None else RoaringBitmapArray()
            merged = old.union(new)
            added = merged.cardinality - old.cardinality
            if added == 0:
                continue  # every row was deleted already: leave the file as it is
            deleted_rows += added
            staged_removes.append(removes[i])
            if merged.cardinality >= num_records[i]:
                removed_bytes += int(rows_list[i].get("size") or 0)
                dvs_removed += existing[i] is not None
                removed_paths.append(decode_log_path(rows_list[i]["path"]))
            else:
                to_write.append((i, merged))
        descriptors = write_deletion_vectors(
            snapshot.io,
            snapshot.table_root,
            [merged for _, merged in to_write],
            random_prefix_length=props.random_prefix_length if props.randomize_file_prefixes else 0,
            target_file_size=target_dv_file_size or DEFAULT_PACKING_TARGET_SIZE,
        ) if to_write else []
        staged_adds: list[AddFile] = []
        for (i, _), descriptor in zip(to_write, descriptors, strict=True):
            row = rows_list[i]
            tags = row.get("tags")
            staged_adds.append(
                AddFile(
                    path=row["path"],
                    partition_values=removes[i].partition_values or {},
                    size=int(row["size"]),
                    modification_time=int(row["modification_time"]),
                    data_change=True,
                    stats=_stats_with_wide_bounds(row.get("stats"), num_records[i]),
                    tags=dict(tags) if tags else None,
                    deletion_vector=descriptor,
                    base_row_id=row.get("base_row_id"),
                    default_row_commit_version=row.get("default_row_commit_version"),
                    clustering_provider=row.get("clustering_provider"),
                )
            )
        updated = sum(existing[i] is not None for i, _ in to_write)
        summary = RowDeletion(
            num_deleted_rows=deleted_rows,
            num_removed_files=len(removed_paths),
            num_removed_bytes=removed_bytes,
            num_deletion_vectors_added=len(to_write) - updated,
            num_deletion_vectors_updated=updated,
            num_deletion_vectors_removed=dvs_removed,
            removed_paths=tuple(removed_paths),
            removes=tuple(staged_removes),
            adds=tuple(staged_adds),
        )
        self._removes.extend(summary.removes)
        self._adds.extend(summary.adds)
        return summary

    def add_cdc(self, action: AddCDCFile) -> None:
        self._ensure_open()
        self._cdc.append(action)

    def set_metadata(self, metadata: Metadata) -> None:
        self._ensure_open()
        self._metadata = metadata

    def set_properties(self, properties: Mapping[str, str | None]) -> None:
        """Stage new metadata with ``properties`` set (``None`` unsets a key).

        ``delta.*`` keys are validated and spelled as Delta does (the writer's rules);
        ``delta.feature.<name>=supported`` adds a table feature to the protocol instead
        of being stored, as in Delta. Features the new values need are added at commit.
        """
        from airflow_delta.engine.create import normalize_properties

        base = self.metadata
        configuration = dict(base.configuration)
        normalized = normalize_properties({k: v for k, v in properties.items() if v is not None})
        if normalized.min_reader_version is not None or normalized.min_writer_version is not None:
            raise InvalidTransactionError(
                "delta.minReaderVersion/minWriterVersion are not table properties of an existing table; "
                "use set_protocol() or delta.feature.<name>=supported"
            )
        for key, value in properties.items():
            if value is None:
                configuration.pop(key, None)
        configuration.update(normalized.configuration)
        TableProperties.from_configuration(configuration)
        self._extra_features |= normalized.features
        self.set_metadata(replace(base, configuration=configuration))

    def set_protocol(self, protocol: Protocol) -> None:
        self._ensure_open()
        self._protocol = protocol

    def set_app_transaction(self, app_id: str, version: int) -> None:
        """Make this commit idempotent for ``(app_id, version)``.

        Raises :class:`TransactionAlreadyCommittedError` right away when the snapshot
        shows ``app_id`` already committed ``version`` or later, so the caller can skip
        its work; the same check runs against every winning commit at commit time.
        """
        self._ensure_open()
        self._read_app_ids.add(app_id)
        if self.snapshot is not None:
            existing = self.snapshot.transactions.get(app_id)
            if existing is not None and existing.version >= version:
                raise TransactionAlreadyCommittedError(app_id, version, existing.version)
        self._app_transactions[app_id] = SetTransaction(app_id, int(version), _now_ms())

    def set_domain_metadata(
        self, domain: str, configuration: str | Mapping[str, Any], *, removed: bool = False, system: bool = False
    ) -> None:
        """Stage a ``domainMetadata`` action. ``delta.*`` domains are system-controlled and need ``system=True``."""
        self._ensure_open()
        if domain.startswith("delta.") and not system:
            raise InvalidTransactionError(
                f"domain {domain!r} is system-controlled (its name starts with 'delta.'); users may not change it"
            )
        text = configuration if isinstance(configuration, str) else json.dumps(configuration, separators=(",", ":"))
        self._domains[domain] = DomainMetadata(domain, text, removed)

    # ---------------------------------------------------------------- commit
    def commit(
        self,
        operation: str,
        operation_parameters: Mapping[str, Any] | None = None,
        operation_metrics: Mapping[str, Any] | None = None,
        *,
        user_metadata: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> int:
        """Commit the staged actions; returns the version written.

        Raises a :class:`ConcurrentModificationError` subclass on a logical conflict,
        :class:`TransactionAlreadyCommittedError` when an idempotent write already
        landed, and :class:`CommitFailedError` when the attempts run out or storage fails.
        Either way the transaction is finished afterwards.
        """
        self._ensure_open()
        try:
            version = self._commit(operation, operation_parameters, operation_metrics, user_metadata, tags)
        except BaseException:
            self._state = "failed"
            raise
        self._state = "committed"
        self.committed_version = version
        run_post_commit(
            self.table,
            version,
            [json.loads(line) for line in self._committed_payload.decode("utf-8").splitlines() if line],
        )
        return version

    # ------------------------------------------------------------- internals
    def _commit(
        self,
        operation: str,
        operation_parameters: Mapping[str, Any] | None,
        operation_metrics: Mapping[str, Any] | None,
        user_metadata: str | None,
        tags: Mapping[str, str] | None,
    ) -> int:
        read_protocol = self.snapshot.protocol if self.snapshot is not None else None
        read_metadata = self.snapshot.metadata if self.snapshot is not None else None
        metadata = self.metadata
        base_protocol = self._protocol or read_protocol or Protocol(1, 2)
        features = (
            protocol_gate.required_features(
                metadata.schema_json, metadata.configuration, writes_domains=bool(self._domains)
            )
            | self._extra_features
        )
        protocol = protocol_gate.upgrade_protocol(base_protocol, features)
        if read_protocol is not None and self._protocol is not None:
            _refuse_protocol_downgrade(read_protocol, protocol)
        protocol_gate.check_writable(protocol, metadata)
        write_protocol = read_protocol is None or self._protocol is not None or protocol != read_protocol
        write_metadata = read_metadata is None or self._metadata is not None
        if read_metadata is not None and write_metadata and metadata.id != read_metadata.id:
            raise InvalidTransactionError(
                f"the staged metadata has table id {metadata.id!r}, the table's is {read_metadata.id!r}; "
                "a transaction cannot replace the table identity"
            )
        self._validate_actions(operation, metadata, protocol, read_metadata or metadata)

        isolation = self._isolation_level(metadata, write_protocol, write_metadata)
        self.isolation_level = isolation
        is_blind_append = self._is_blind_append()
        footprint = TransactionFootprint(
            read_version=self.read_version,
            partitioned=bool((read_metadata or metadata).partition_columns),
            read_predicates=tuple(self._read_predicates),
            read_whole_table=self._read_whole_table,
            read_paths=_concat(self._read_path_chunks),
            read_app_ids=frozenset(self._read_app_ids),
            app_transactions={a: t.version for a, t in self._app_transactions.items()},
            removed_paths=frozenset(decode_log_path(r.path) for r in self._removes),
            domains=frozenset(self._domains),
            changes_protocol=write_protocol and read_protocol is not None,
            changes_metadata=write_metadata and read_metadata is not None,
            is_blind_append=is_blind_append,
        )
        ict_enabled = TableProperties.from_configuration(metadata.configuration).enable_in_commit_timestamps
        enables_ict = ict_enabled and read_metadata is not None and not (
            TableProperties.from_configuration(read_metadata.configuration).enable_in_commit_timestamps
        )
        previous_ts = self._read_commit_timestamp(file_time=enables_ict) if ict_enabled else None
        matcher_metadata = read_metadata or metadata

        def matcher(predicates: Sequence[Any], added: pa.Table) -> pa.BooleanArray:
            return files_may_match(predicates, added, matcher_metadata)

        self._check_read_version_still_logged()
        attempt_version = self.read_version + 1
        lost = 0
        # A version this transaction's write may have landed in (the write reported an
        # error) that has not been read back yet; attempts only move past a version after
        # reading it, so there is at most one.
        unresolved: int | None = None
        while True:
            self.attempts += 1
            now = _now_ms()
            ict = max(now, previous_ts + 1) if previous_ts is not None else (now if ict_enabled else None)
            commit_metadata = metadata
            if enables_ict:
                assert ict is not None
                commit_metadata = replace(
                    metadata,
                    configuration={
                        **dict(metadata.configuration),
                        _ICT_VERSION_KEY: str(attempt_version),
                        _ICT_TIMESTAMP_KEY: str(ict),
                    },
                )
            payload = self._serialize(
                operation, operation_parameters, operation_metrics, user_metadata, tags,
                now=now, ict=ict, isolation=isolation, is_blind_append=is_blind_append,
                protocol=protocol if write_protocol else None,
                metadata=commit_metadata if (write_metadata or enables_ict) else None,
            )
            path = commit_path(self.table.root, attempt_version)
            self._committed_payload = payload
            storage_error: BaseException | None = None
            try:
                if self.table.io.put_if_absent(path, payload):
                    return attempt_version
            except CommitNotSupportedError:
                raise
            except OSError as exc:
                # The write may or may not have happened; the txnId in our commitInfo
                # tells, when the version is read back below.
                storage_error = exc
                unresolved = attempt_version
            lost += 1
            if self.attempts < self.retry.max_attempts:
                # Sleep *before* catching up with the winners, so the attempt that follows
                # targets the newest version rather than one that aged during the sleep.
                delay = self.retry.backoff(lost, self._rng)
                if delay > 0:
                    time.sleep(delay)
            next_version = attempt_version
            while True:
                try:
                    found = self._read_commit(next_version, with_mtime=ict_enabled)
                except OSError as exc:
                    # This version cannot be checked now. The next attempt targets it
                    # again: put-if-absent never overwrites, and a taken version is read
                    # (and its txnId compared) before anything moves past it.
                    storage_error = exc
                    break
                if found is None:
                    break
                winner, winner_bytes = found
                if winner.txn_id == self.txn_id:
                    # An attempt that reported an error did land. It may be an earlier
                    # attempt than the last one (a write that timed out but completed
                    # later), with another timestamp and in-commit timestamp: the
                    # post-commit hook must see what is in the log.
                    self._committed_payload = winner_bytes
                    return next_version
                if next_version == unresolved:
                    unresolved = None  # another writer's commit: ours did not land there
                if self.read_version < 0:
                    raise TableAlreadyExistsError(self.table.table_uri)  # another creator won version 0
                check_winning_commit(footprint, winner, isolation, matcher, read_protocol or protocol)
                self.winning_commits.append(winner)
                if ict_enabled:
                    previous_ts = _winner_timestamp(winner, enables_ict, previous_ts)
                next_version += 1
            if self.attempts >= self.retry.max_attempts:
                if storage_error is not None:
                    reason = f"storage error at version {next_version}: {storage_error}"
                else:
                    last = self.winning_commits[-1] if self.winning_commits else None
                    reason = f"version {attempt_version} was taken" + (
                        f" (latest winner: version {last.version}, {last.operation})" if last else ""
                    )
                if unresolved is not None:
                    reason += (
                        f"; version {unresolved} may have been written by this transaction all the same, "
                        f"which it was if its commitInfo.txnId is {self.txn_id!r}: check before retrying"
                    )
                advice = (
                    "The storage kept failing; retry once it is healthy"
                    if storage_error is not None
                    else "No logical conflict was found; raise max_attempts (or the backoff) "
                    "if the table has this many concurrent writers"
                )
                raise CommitFailedError(
                    f"gave up committing {operation!r} to {self.table.table_uri!r} after {self.attempts} attempt(s): "
                    f"{reason}. {advice}"
                ) from storage_error
            attempt_version = next_version

    def _check_read_version_still_logged(self) -> None:
        """Refuse to commit after metadata cleanup deleted the version this transaction read.

        Cleanup deletes the oldest log files first, and only versions before a
        checkpoint. While the newest file of the snapshot's log segment exists, no later
        commit has been deleted, so ``read_version + 1`` is either free or a winner we
        can read. Once it is gone, ``read_version + 1`` may be a deleted commit: writing
        it would succeed invisibly (readers start from the newer checkpoint), and the
        commits to check for conflicts are lost. One existence check per commit.
        """
        if self.snapshot is None:
            return
        segment = self.snapshot.log_segment
        if segment.latest_commit_file is not None:
            newest = commit_path(self.table.root, self.read_version)
        elif segment.checkpoint_files:
            newest = segment.checkpoint_files[0].path
        else:
            return
        try:
            still_there = self.table.io.exists(newest)
        except OSError as exc:
            raise CommitFailedError(
                f"could not check that version {self.read_version} of {self.table.table_uri!r} is still in the log: "
                f"{exc}. Nothing was written; retry once the storage is healthy"
            ) from exc
        if not still_there:
            raise CommitFailedError(
                f"this transaction read version {self.read_version} of {self.table.table_uri!r}, and metadata "
                "cleanup has since cleaned up the log past it (the transaction is older than the log "
                "retention), so the commits after it cannot be checked for conflicts. Nothing was written; "
                "start a new transaction on the latest version"
            )

    def _validate_actions(self, operation: str, metadata: Metadata, protocol: Protocol, read_metadata: Metadata) -> None:
        seen_adds: set[tuple[str, str | None]] = set()
        for add in self._adds:
            key = (decode_log_path(add.path), add.dv_unique_id)
            if key in seen_adds:
                raise InvalidTransactionError(f"file {add.path!r} is added twice in one commit")
            seen_adds.add(key)
        seen_removes: set[tuple[str, str | None]] = set()
        for rm in self._removes:
            key = (decode_log_path(rm.path), rm.dv_unique_id)
            if key in seen_removes:
                raise InvalidTransactionError(f"file {rm.path!r} is removed twice in one commit")
            if key in seen_adds:
                raise InvalidTransactionError(
                    f"file {rm.path!r} (same deletion vector) is both added and removed in one commit"
                )
            seen_removes.add(key)

        expected = set(_physical_partition_columns(metadata))
        for add in self._adds:
            if set(add.partition_values) != expected:
                raise InvalidTransactionError(
                    f"add {add.path!r} has partition values for {sorted(add.partition_values)}, "
                    f"the table is partitioned by {sorted(expected)} (physical names)"
                )

        with_dv = [a.path for a in self._adds if a.deletion_vector is not None]
        if with_dv and "deletionVectors" not in protocol_gate.writer_features(protocol):
            raise InvalidTransactionError(
                f"add {with_dv[0]!r} carries a deletion vector, but the table does not support the deletionVectors "
                "feature; set delta.enableDeletionVectors=true first"
            )

        read_props = TableProperties.from_configuration(read_metadata.configuration)
        if read_props.append_only and "appendOnly" in protocol_gate.writer_features(protocol):
            changed = [r.path for r in self._removes if r.data_change]
            if changed:
                raise AppendOnlyViolationError(
                    f"the table is append-only (delta.appendOnly=true) and this commit removes data from "
                    f"{len(changed)} file(s), e.g. {changed[0]!r}; only dataChange=false rewrites are allowed. "
                    "Set delta.appendOnly=false first if the data must really go"
                )

        # Change Data Feed: adding new files or removing whole files needs no cdc actions
        # (the change is exactly those files' rows), and neither does replacing the table
        # or a partition (every old row deleted, every new row inserted). A commit that
        # removes files and adds rewritten ones for any other operation (UPDATE, DELETE
        # or MERGE rewriting files, deletion vector updates) would make readers report
        # untouched rows as deleted and re-inserted, so it must carry its cdc files.
        props = TableProperties.from_configuration(metadata.configuration)
        if props.enable_change_data_feed and "changeDataFeed" in protocol_gate.writer_features(protocol) and not self._cdc:
            removes_data = any(r.data_change for r in self._removes)
            adds_data = [a.path for a in self._adds if a.data_change]
            if removes_data and adds_data and operation.upper() not in _REPLACING_OPERATIONS:
                raise InvalidTransactionError(
                    f"the table has delta.enableChangeDataFeed=true and this {operation} commit rewrites data "
                    f"(removes files and adds {adds_data[0]!r}) without cdc actions; stage the change data "
                    "with add_cdc()"
                )

    def _isolation_level(self, metadata: Metadata, write_protocol: bool, write_metadata: bool) -> IsolationLevel:
        has_non_file_actions = write_protocol or write_metadata or bool(self._app_transactions) or bool(self._domains)
        data_changed = any(a.data_change for a in self._adds) or any(r.data_change for r in self._removes)
        if not has_non_file_actions and not data_changed:
            # Rearranging data (OPTIMIZE, ...) cannot be invalidated by files added
            # concurrently, so Delta checks it at snapshot isolation whatever the level.
            return IsolationLevel.SNAPSHOT_ISOLATION
        if self._requested_isolation is not None:
            return self._requested_isolation
        return IsolationLevel.parse(TableProperties.from_configuration(metadata.configuration).isolation_level)

    def _is_blind_append(self) -> bool:
        depends_on_files = bool(self._read_predicates) or self._read_whole_table or any(
            len(c) for c in self._read_path_chunks
        )
        only_adds = not self._removes and not self._cdc
        return only_adds and not depends_on_files

    def _serialize(
        self,
        operation: str,
        operation_parameters: Mapping[str, Any] | None,
        operation_metrics: Mapping[str, Any] | None,
        user_metadata: str | None,
        tags: Mapping[str, str] | None,
        *,
        now: int,
        ict: int | None,
        isolation: IsolationLevel,
        is_blind_append: bool,
        protocol: Protocol | None,
        metadata: Metadata | None,
    ) -> bytes:
        info: dict[str, Any] = {}
        if ict is not None:
            info["inCommitTimestamp"] = ict  # must be the first field read by ICT-aware readers
        info["timestamp"] = now
        info["operation"] = operation
        info["operationParameters"] = encode_operation_parameters(operation_parameters)
        if self.read_version >= 0:
            info["readVersion"] = self.read_version
        info["isolationLevel"] = isolation.value
        info["isBlindAppend"] = is_blind_append
        info["operationMetrics"] = encode_operation_metrics(operation_metrics)
        if user_metadata is not None:
            info["userMetadata"] = user_metadata
        if tags:
            info["tags"] = dict(tags)
        info["engineInfo"] = self.engine_info
        info["txnId"] = self.txn_id
        lines = [json.dumps({"commitInfo": info}, separators=(",", ":"))]
        if protocol is not None:
            lines.append(action_to_line(protocol))
        if metadata is not None:
            lines.append(action_to_line(metadata))
        lines.extend(action_to_line(t) for t in self._app_transactions.values())
        lines.extend(action_to_line(d) for d in self._domains.values())
        lines.extend(action_to_line(r) for r in self._removes)
        lines.extend(action_to_line(a) for a in self._adds)
        lines.extend(action_to_line(c) for c in self._cdc)
        return ("\n".join(lines) + "\n").encode("utf-8")

    def _read_winner(self, version: int, with_mtime: bool = False) -> WinningCommit | None:
        found = self._read_commit(version, with_mtime)
        return found[0] if found is not None else None

    def _read_commit(self, version: int, with_mtime: bool = False) -> tuple[WinningCommit, bytes] | None:
        """Commit ``version`` summarised for conflict checks, with its bytes; None if it does not exist."""
        path = commit_path(self.table.root, version)
        try:
            data = self.table.io.read_bytes(path)
        except FileNotFoundError:
            return None
        mtime = None
        if with_mtime:
            info = self.table.io.info(path)
            mtime = info.modification_time if info is not None else None
        return WinningCommit.from_bytes(version, data, path, mtime), data

    def _read_commit_timestamp(self, file_time: bool) -> int | None:
        """Timestamp of the commit we read (for ICT ordering): its in-commit timestamp, else its file time.

        ``file_time``: the commit that switches ICT on must follow the previous commit's
        file modification time (spec rule 5), whatever that commit's commitInfo says.
        """
        if self.snapshot is None:
            return None
        winner = self._read_winner(self.read_version, with_mtime=True)
        if winner is not None:
            if winner.in_commit_timestamp is not None and not file_time:
                return winner.in_commit_timestamp
            if winner.modification_time is not None:
                return winner.modification_time
        return int(self.snapshot.timestamp)

    def _require_snapshot(self) -> Snapshot:
        if self.snapshot is None:
            raise TableNotFoundError(self.table.table_uri, "a transaction on a new table has nothing to read")
        return self.snapshot

    def _ensure_open(self) -> None:
        if self._state != "open":
            raise InvalidTransactionError(f"this transaction is already {self._state}; start a new one")


# ------------------------------------------------------------------ helpers


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _load_latest(table: DeltaTable) -> Snapshot | None:
    try:
        return table.snapshot()
    except TableNotFoundError:
        return None


def _concat(chunks: list[pa.Array]) -> pa.Array:
    if not chunks:
        return pa.array([], pa.string())
    return pa.concat_arrays([c.cast(pa.string()) for c in chunks])


def _winner_timestamp(winner: WinningCommit, enables_ict: bool, previous: int | None) -> int | None:
    # When our commit switches ICT on, the winners before it have no ICT: our timestamp
    # must then exceed their file times (spec, In-Commit Timestamps, rule 5).
    value = winner.in_commit_timestamp
    if value is None or enables_ict:
        value = winner.modification_time if winner.modification_time is not None else value
    if value is None:
        return previous
    return value if previous is None else max(value, previous)


def _refuse_protocol_downgrade(read: Protocol, new: Protocol) -> None:
    """The spec forbids removing a supported feature or lowering a protocol version."""
    dropped = (protocol_gate.reader_features(read) - protocol_gate.reader_features(new)) | (
        protocol_gate.writer_features(read) - protocol_gate.writer_features(new)
    )
    lowered = new.min_reader_version < read.min_reader_version or new.min_writer_version < read.min_writer_version
    if dropped or lowered:
        detail = f"it drops {sorted(dropped)}" if dropped else "it lowers a protocol version"
        raise InvalidTransactionError(
            f"the staged protocol {new.to_json()} would downgrade the table's {read.to_json()}: {detail}; "
            "table features cannot be removed by a commit"
        )


def _physical_partition_columns(metadata: Metadata) -> list[str]:
    mode = TableProperties.from_configuration(metadata.configuration).column_mapping_mode
    if mode == "none" or not metadata.partition_columns:
        return list(metadata.partition_columns)
    physical: dict[str, str] = {}
    for f in metadata.schema_json.get("fields", []):
        name = f.get("name")
        physical[name] = (f.get("metadata") or {}).get("delta.columnMapping.physicalName", name)
    return [physical.get(c, c) for c in metadata.partition_columns]


def files_may_match(predicates: Sequence[Any], files: pa.Table, metadata: Metadata) -> pa.BooleanArray:
    """For each row of ``files`` (``partition_values`` map with physical keys, ``stats`` JSON), may any predicate match?

    Conservative: anything that cannot be evaluated (no statistics, a module that is
    not available, stats that do not parse) counts as a possible match.
    """
    n = files.num_rows
    everything = pa.array([True] * n, pa.bool_())
    if n == 0 or not predicates:
        return everything if predicates else pa.array([False] * n, pa.bool_())
    try:
        from airflow_delta.engine.expressions import prune_files
        from airflow_delta.engine.schema import parse_partition_values
    except ImportError:  # pragma: no cover - before the expression engine exists
        log.debug("expressions/schema modules unavailable; every added file counts as matching")
        return everything
    try:
        partition_values = parse_partition_values(files.column("partition_values").combine_chunks(), metadata)
    except (DeltaError, pa.ArrowException, ValueError, KeyError) as exc:
        log.debug("partition values unusable for conflict checks (%s); every file counts as matching", exc)
        return everything
    stats = None
    if "stats" in files.column_names and files.column("stats").null_count < n:
        try:
            from airflow_delta.engine.stats import parse_stats

            stats = parse_stats(files.column("stats").combine_chunks(), metadata)
        except (ImportError, DeltaError, pa.ArrowException, ValueError, KeyError) as exc:
            log.debug("statistics unusable for conflict checks (%s); partition values only", exc)
            stats = None
    mask: pa.Array | None = None
    try:
        for predicate in predicates:
            m = prune_files(predicate, partition_values, stats, tuple(metadata.partition_columns))
            mask = m if mask is None else pc.or_(mask, m)
    except (DeltaError, pa.ArrowException, ValueError, KeyError) as exc:
        log.debug("could not evaluate read predicates on files (%s); every file counts as matching", exc)
        return everything
    assert mask is not None
    return pc.fill_null(mask, True)


def removes_from_file_actions(files: pa.Table, deletion_timestamp: int, *, data_change: bool = True) -> list[RemoveFile]:
    """``remove`` actions for ``FILE_ACTIONS_SCHEMA`` rows, carrying what Delta puts in extended file metadata."""
    out: list[RemoveFile] = []
    for row in files.to_pylist():
        dv = row.get("deletion_vector")
        pv = row.get("partition_values")
        tags = row.get("tags")
        out.append(
            RemoveFile(
                path=row["path"],
                deletion_timestamp=deletion_timestamp,
                data_change=data_change,
                extended_file_metadata=True,
                partition_values=dict(pv) if pv is not None else {},
                size=row.get("size"),
                stats=row.get("stats"),
                tags=dict(tags) if tags else None,
                deletion_vector=DeletionVectorDescriptor.from_json(dv) if dv and dv.get("storageType") else None,
                base_row_id=row.get("base_row_id"),
                default_row_commit_version=row.get("default_row_commit_version"),
            )
        )
    return out


def _live_files_by_path(snapshot: Snapshot, keys: Sequence[str]) -> pa.Table:
    """The live files (``FILE_ACTIONS_SCHEMA``) named by ``keys``, plus a ``key`` column: the caller's name for each.

    A key may be the log path (URI-encoded, as :meth:`Transaction.read_files` returns
    it) or the decoded path relative to the root (as ``snapshot.files()`` returns it).
    """
    from airflow_delta.engine.snapshot import relative_paths

    live: pa.Table = snapshot.add_actions
    wanted = pa.array(list(keys), pa.string())
    log_paths = live.column("path").combine_chunks() if live.num_rows else pa.array([], pa.string())
    relative = relative_paths(snapshot.table_root, log_paths)
    by_log = pc.fill_null(pc.is_in(log_paths, value_set=wanted), False)
    by_relative = pc.fill_null(pc.is_in(relative, value_set=wanted), False)
    mask = pc.or_(by_log, by_relative)
    found = live.filter(mask)
    found_log = log_paths.filter(mask).to_pylist()
    found_relative = relative.filter(mask).to_pylist()
    names = set(keys)
    key_of: list[str] = []
    seen: set[str] = set()
    for log_path, rel in zip(found_log, found_relative, strict=True):
        key = log_path if log_path in names else rel
        if key in seen:
            raise InvalidTransactionError(f"{key!r} names more than one live file; pass log paths instead")
        seen.add(key)
        key_of.append(key)
    missing = [k for k in keys if k not in seen]
    if missing:
        raise InvalidTransactionError(
            f"{missing[0]!r} is not a live file of version {snapshot.version}"
            + (f" ({len(missing) - 1} more are not either)" if len(missing) > 1 else "")
            + "; use the paths snapshot.files() or Transaction.read_files() return"
        )
    return found.append_column("key", pa.array(key_of, pa.string()))


def _num_records_of(snapshot: Snapshot, row: Mapping[str, Any]) -> int:
    """The data file's physical row count: ``numRecords`` from its stats, else its parquet footer."""
    stats = row.get("stats")
    if stats:
        value = json.loads(stats).get("numRecords")
        if value is not None:
            return int(value)
    import pyarrow.parquet as pq

    from airflow_delta.engine.paths import resolve_in_table

    with snapshot.io.open_input_file(resolve_in_table(snapshot.table_root, row["path"])) as f:
        return int(pq.ParquetFile(f).metadata.num_rows)


def _only_partition_columns(values: Mapping[str, str | None] | None, columns: Sequence[str]) -> dict[str, str | None]:
    """A file's ``partitionValues`` with exactly the table's (physical) partition columns as keys.

    The Arrow form of file actions may carry extra keys with null values (one map type
    for all files of a log); the actions we write must not.
    """
    given = dict(values or {})
    return {c: given.get(c) for c in columns}


def _stats_with_wide_bounds(stats: str | None, num_records: int) -> str:
    """Statistics of a file that just got a DV: unchanged, but ``tightBounds: false``.

    Rows the DV hides may hold the min/max values, so the bounds are only wide bounds
    now (spec, Per-file Statistics); ``numRecords`` stays the physical row count, and
    must be there for any file with a DV. Every other value keeps its exact JSON text
    (re-encoding would turn a 38-digit decimal bound into a float).
    """
    try:
        fields = _top_level_json_fields(stats) if stats else []
    except (ValueError, IndexError) as exc:
        raise InvalidTransactionError(f"file statistics are not valid JSON ({exc}): {stats[:80]!r}") from exc
    if not any(key == "numRecords" for key, _ in fields):
        fields.insert(0, ("numRecords", str(int(num_records))))
    fields = [(k, v) for k, v in fields if k != "tightBounds"] + [("tightBounds", "false")]
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields) + "}"


def _top_level_json_fields(text: str) -> list[tuple[str, str]]:
    """``(key, raw value text)`` of each member of a JSON object, in order."""
    decoder = json.JSONDecoder()
    ws = " \t\n\r"
    pos = len(text) - len(text.lstrip(ws))
    if text[pos : pos + 1] != "{":
        raise InvalidTransactionError(f"file statistics are not a JSON object: {text[:80]!r}")
    pos += 1
    out: list[tuple[str, str]] = []
    while True:
        while pos < len(text) and text[pos] in ws:
            pos += 1
        if text[pos : pos + 1] == "}":
            return out
        key, pos = decoder.raw_decode(text, pos)
        while text[pos] in ws:
            pos += 1
        if text[pos] != ":":
            raise InvalidTransactionError(f"file statistics are not valid JSON: {text[:80]!r}")
        pos += 1
        while text[pos] in ws:
            pos += 1
        _, end = decoder.raw_decode(text, pos)
        out.append((str(key), text[pos:end]))
        pos = end
        while text[pos] in ws:
            pos += 1
        if text[pos] == ",":
            pos += 1
        elif text[pos] != "}":
            raise InvalidTransactionError(f"file statistics are not valid JSON: {text[:80]!r}")


def run_post_commit(table: DeltaTable, version: int, actions: Sequence[Mapping[str, Any]]) -> None:
    """The post-commit hook (.crc file, automatic checkpoint, log cleanup) after ``version`` committed.

    The commit already happened, so a failure here is logged, never raised: the table
    stays correct, only a checkpoint or checksum is missing until the next commit.
    """
    from airflow_delta.engine.checkpoints import post_commit

    try:
        post_commit(table, version, actions=list(actions))
    except Exception as exc:
        log.warning("version %d of %s was committed, but the post-commit hook failed: %s", version, table.table_uri, exc)


__all__ = [
    "ENGINE_INFO",
    "ConcurrentModificationError",
    "IsolationLevel",
    "RetryPolicy",
    "RowDeletion",
    "Transaction",
    "encode_operation_metrics",
    "encode_operation_parameters",
    "files_may_match",
    "removes_from_file_actions",
    "run_post_commit",
]
