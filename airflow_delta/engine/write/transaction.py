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

Files the transaction wrote itself (data files of its operations, DV files of
:meth:`Transaction.delete_rows`, recorded in :attr:`Transaction.written_files`) are
removed when it aborts or its commit fails for certain; they stay when the commit landed
or may have (a write whose outcome storage did not report), because then the log may
reference them. Files written by others and only staged here (``add``) are never removed.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from airflow_delta.engine.errors import (
    AppendOnlyViolationError,
    CommitFailedError,
    CommitNotSupportedError,
    CommitOutcomeUnknownError,
    ConcurrentModificationError,
    InvalidArgumentError,
    InvalidPathError,
    InvalidTransactionError,
    LogMovedPastCommitError,
    PathOutsideTableError,
    RowTrackingBackfillError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TransactionAlreadyCommittedError,
)
from airflow_delta.engine.model import row_tracking
from airflow_delta.engine.model import table_features as protocol_gate
from airflow_delta.engine.model.actions import (
    ACTION_KEYS,
    Action,
    AddCDCFile,
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from airflow_delta.engine.model.arguments import (
    check_bool,
    check_file_action,
    check_instance,
    check_instances,
    check_int,
    check_row_indexes,
    check_str,
    check_str_mapping,
    check_str_sequence,
)
from airflow_delta.engine.model.arrow_numpy import string_array
from airflow_delta.engine.model.commit_info import (
    ENGINE_INFO,
    IDENTITY_COMMIT_TAG,
    build_commit_info,
    encode_operation_metrics,
    encode_operation_parameters,
)
from airflow_delta.engine.model.committed_actions import CommittedActions
from airflow_delta.engine.model.json_text import json_text, utf8_bytes
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.read.listing import CommitFrontier, LogListing, commit_frontier, commit_path, list_log
from airflow_delta.engine.read.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.storage.location import TableLocation
from airflow_delta.engine.storage.paths import check_log_paths, decode_log_path, resolve_in_table
from airflow_delta.engine.storage.written_files import WrittenFiles
from airflow_delta.engine.write.committer import Committed, Committer, FileIOCommitter, RetryableFailure
from airflow_delta.engine.write.conflicts import (
    IsolationLevel,
    TransactionFootprint,
    WinningCommit,
    check_winning_commit,
    decode_paths,
)
from airflow_delta.engine.write.file_matching import files_may_match
from airflow_delta.engine.write.file_removes import (
    RemoveBatch,
    physical_partition_columns,
    remove_json_line,
    removes_from_file_actions,
    stage_remove_batch,
    staged_removes,
)
from airflow_delta.engine.write.options import CommitOptions
from airflow_delta.engine.write.retry import RetryPolicy

if TYPE_CHECKING:
    import random

    from airflow_delta.engine.write.row_deletion import RowDeletion

# Work after a successful commit (.crc file, automatic checkpoint, log cleanup): the
# caller (the facade) passes it in, so the transaction never reaches up for it. It gets
# the committed version and the commit's actions as written.
PostCommitHook = Callable[[int, Sequence[Mapping[str, Any]]], None]

log = logging.getLogger(__name__)

# Operations that replace data wholesale: on a CDF table their removes and adds are the
# change (old rows deleted, new rows inserted), so they need no cdc actions. RESTORE too:
# Delta writes no change data for it, and readers see its files come and go.
_REPLACING_OPERATIONS = frozenset(
    {"WRITE", "RESTORE", "CREATE OR REPLACE TABLE", "REPLACE TABLE", "CREATE OR REPLACE TABLE AS SELECT", "REPLACE TABLE AS SELECT"}
)

# The operations whose DeltaOperations.Operation has changesData=true in Delta
# (DeltaOperations.scala); at WriteSerializable they are never downgraded to
# SnapshotIsolation, even when they commit no dataChange=true file action.
_DATA_CHANGING_OPERATIONS = frozenset(
    {
        "WRITE", "STREAMING UPDATE", "DELETE", "TRUNCATE", "CONVERT", "MERGE", "UPDATE", "RESTORE", "CLONE",
        "CREATE TABLE AS SELECT", "REPLACE TABLE", "REPLACE TABLE AS SELECT", "CREATE OR REPLACE TABLE",
        "CREATE OR REPLACE TABLE AS SELECT",
    }
)

_ICT_VERSION_KEY = "delta.inCommitTimestampEnablementVersion"
_ICT_TIMESTAMP_KEY = "delta.inCommitTimestampEnablementTimestamp"



class _CommitPlan(NamedTuple):
    """What a commit writes and checks, decided once before its first attempt.

    A named tuple, not a frozen dataclass: as immutable, and a quarter of the cost to
    create at import (a frozen dataclass compiles six methods), which every committing process pays.
    """

    operation: str
    operation_parameters: Mapping[str, Any] | None
    operation_metrics: Mapping[str, Any] | None
    user_metadata: str | None
    tags: Mapping[str, str] | None
    protocol: Protocol
    metadata: Metadata
    read_protocol: Protocol | None
    write_protocol: bool
    write_metadata: bool
    isolation: IsolationLevel
    is_blind_append: bool
    footprint: TransactionFootprint
    ict_enabled: bool
    enables_ict: bool
    matcher: Callable[[Sequence[Any], pa.Table], pa.BooleanArray]
    # Row tracking supported: each attempt assigns fresh row IDs above this high-water
    # mark (the snapshot's) or a newer winner's, and its version as defaultRowCommitVersion.
    assigns_row_ids: bool = False
    read_high_water_mark: int = row_tracking.MISSING_HIGH_WATER_MARK


class _Race:
    """The state of the attempts of one commit: where it tries next and what it learned.

    A plain slotted class, not a dataclass (about a millisecond to create at import).
    """

    __slots__ = (
        "attempt_version", "frontiers", "in_flight", "lost", "next_version", "previous_ts", "storage_error", "unresolved",
    )

    def __init__(self, attempt_version: int, previous_ts: int | None) -> None:
        self.attempt_version = attempt_version
        self.previous_ts = previous_ts  # in-commit timestamp (or file time) the next commit must exceed
        self.next_version = 0
        self.lost = 0
        # A version this transaction's write may have landed in (the write reported an
        # error) that has not been read back yet; attempts only move past a version after
        # reading it, so there is at most one.
        self.unresolved: int | None = None
        self.storage_error: BaseException | None = None
        # A commit write is under way: if it raises, whether it landed is unknown.
        self.in_flight = False
        # The log as checked before each attempt, by version: an attempt that reported an
        # error but landed is confirmed against it when it is found.
        self.frontiers: dict[int, CommitFrontier] = {}

    @property
    def may_have_landed(self) -> bool:
        """Whether this transaction's commit may be in the log, so its files must stay."""
        return self.in_flight or self.unresolved is not None


# ------------------------------------------------------------------ the transaction


class Transaction:
    """An optimistic transaction on the table at ``location``; see the module docstring.

    ``snapshot`` is the state to read from and commit against (default: the latest, or
    none for a table that does not exist yet). ``options`` sets the isolation level
    (default: the table's ``delta.isolationLevel``, WriteSerializable; a transaction
    whose actions are only ``dataChange=false`` file actions is checked at
    SnapshotIsolation, as Delta does: at WriteSerializable only for an operation that
    does not change data), retries and commitInfo's engineInfo.
    ``committer`` writes the commit file (default: the FileIO's put-if-absent).
    ``post_commit`` runs after a successful commit; its failures are logged, never
    raised, because the commit has landed.
    """

    def __init__(
        self,
        location: TableLocation,
        *,
        snapshot: Snapshot | None = None,
        options: CommitOptions | None = None,
        committer: Committer | None = None,
        post_commit: PostCommitHook | None = None,
    ) -> None:
        check_instance("location", location, TableLocation)
        check_instance("snapshot", snapshot, Snapshot, optional=True)
        check_instance("options", options, CommitOptions, optional=True)
        if committer is not None and not callable(getattr(committer, "commit", None)):
            raise InvalidArgumentError("committer", committer, "pass an object with commit(version, payload), or None")
        if post_commit is not None and not callable(post_commit):
            raise InvalidArgumentError("post_commit", post_commit, "pass a callable (version, actions) -> None, or None")
        options = options if options is not None else CommitOptions()
        self.location = location
        self.retry: RetryPolicy = options.retry
        self.engine_info = options.engine_info
        self.txn_id = str(uuid.uuid4())
        self._seed = options.seed
        self._rng: random.Random | None = None  # made on the first backoff (see _commit)
        self._committer: Committer = committer if committer is not None else FileIOCommitter(location)
        self._post_commit = post_commit
        self._requested_isolation = (
            IsolationLevel.parse(options.isolation_level) if options.isolation_level is not None else None
        )
        self.snapshot: Snapshot | None = snapshot if snapshot is not None else _load_latest(location)
        self.read_version: int = self.snapshot.version if self.snapshot is not None else -1

        self._adds: list[AddFile] = []
        # In staging order: single removes, and the removes of remove_files() as batches (columns
        # and their log lines, encoded when staged: no object per file for an OPTIMIZE's thousands).
        self._removes: list[RemoveFile | RemoveBatch] = []
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
        # The committed payload's actions as JSON objects, for the post-commit hook (None: parse the payload).
        self._committed_actions: list[dict[str, Any] | RemoveBatch] | None = None
        self._serialized_actions: list[dict[str, Any] | RemoveBatch] | None = None
        # The files this transaction wrote: removed if it aborts or its commit fails.
        self.written_files = WrittenFiles(location.io)
        self._race: _Race | None = None

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
        """Discard everything staged and remove the files this transaction wrote; nothing is committed."""
        if self._state == "open":
            self._state = "aborted"
            self.written_files.remove_all()

    # ---------------------------------------------------------------- reading
    @property
    def metadata(self) -> Metadata:
        """The metadata this transaction commits against (staged, else the snapshot's)."""
        if self._metadata is not None:
            return self._metadata
        if self.snapshot is None:
            raise InvalidTransactionError(
                f"{self.location.uri!r} has no table yet: stage its metadata with set_metadata() first"
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
        check_str("filter", filter, optional=True)
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
            if "path" not in paths.column_names:
                raise InvalidArgumentError("paths", paths, "pass a table with a 'path' column (from read_files() or files())")
            arr = paths.column("path")
            if "is_add" not in paths.column_names:  # snapshot.files(): decoded already
                self._read_path_chunks.append(arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr)
                return
        elif isinstance(paths, (pa.Array, pa.ChunkedArray)):
            if not pa.types.is_string(paths.type) and not pa.types.is_large_string(paths.type):
                raise InvalidArgumentError("paths", paths, f"pass an array of string paths, not of {paths.type}")
            arr = paths
        else:
            arr = string_array(list(check_str_sequence("paths", paths)))
        self._read_path_chunks.append(decode_paths(arr))

    def read_app_transaction(self, app_id: str) -> int | None:
        """The last version ``app_id`` committed (``txn`` action), recorded as read; None if never."""
        self._ensure_open()
        check_str("app_id", app_id, non_empty=True)
        self._read_app_ids.add(app_id)
        if self.snapshot is None:
            return None
        txn = self.snapshot.transactions.get(app_id)
        return txn.version if txn is not None else None

    # ---------------------------------------------------------------- staging
    # Every file action is checked when it is staged, with the reader's own path rule, so
    # that a path a reader would refuse never reaches the log (see _check_staged_paths).
    def add(self, action: AddFile) -> None:
        self._ensure_open()
        action = check_file_action("action", check_instance("action", action, AddFile))
        self._check_staged_paths("add", [action])
        self._adds.append(action)

    def add_files(self, actions: Iterable[AddFile], *, written_for_this_commit: bool = False) -> None:
        """Stage ``add`` actions.

        ``written_for_this_commit``: the files were written for this commit alone (by
        :func:`~.data_files.write_data_files` in another process, e.g. Spark executors), so
        they are removed, like the files the transaction writes itself, when the commit
        certainly does not land. Leave it False for files that exist on their own.
        """
        self._ensure_open()
        check_bool("written_for_this_commit", written_for_this_commit)
        staged = check_instances("actions", actions, AddFile)
        for i, add in enumerate(staged):
            check_file_action(f"actions[{i}]", add)
        self._check_staged_paths("add", staged)
        if written_for_this_commit:
            for add in staged:
                self.written_files.record(resolve_in_table(self.location.root, add.path))
        self._adds.extend(staged)

    def remove(self, action: RemoveFile) -> None:
        self._ensure_open()
        action = check_file_action("action", check_instance("action", action, RemoveFile))
        self._check_staged_paths("remove", [action])
        self._removes.append(action)

    def remove_files(self, files: pa.Table, *, data_change: bool = True, deletion_timestamp: int | None = None) -> None:
        """Stage a ``remove`` for each row of ``files`` (``FILE_ACTIONS_SCHEMA``, e.g. from :meth:`read_files`).

        With the schema's column types the removes are kept as columns (a :class:`RemoveBatch`:
        no object per file for an OPTIMIZE's thousands); the log gets the same lines either way.
        """
        self._ensure_open()
        check_instance("files", files, pa.Table)
        if "path" not in files.column_names:
            raise InvalidArgumentError("files", files, "pass file actions with a 'path' column, e.g. from read_files()")
        check_bool("data_change", data_change)
        deletion_timestamp = check_int("deletion_timestamp", deletion_timestamp, minimum=0, optional=True)
        ts = deletion_timestamp if deletion_timestamp is not None else _now_ms()
        if not files.num_rows:
            return
        # Column-wise when the columns allow it (the same lines, checks and keys as the objects).
        batch = stage_remove_batch(
            files, self.metadata, ts, data_change=data_change, table_root=self.location.root,
            where="a staged remove action",
        )
        if batch is not None:
            generic = list(batch.generic.values())
            if generic:
                self._check_staged_paths("remove", generic)  # their deletion vectors' paths
            self._removes.append(batch)
            return
        removes = staged_removes(files, self.metadata, ts, data_change=data_change)
        self._check_staged_paths("remove", removes)
        self._removes.extend(removes)

    def _remove_keys(self) -> Iterable[tuple[str, str, str | None]]:
        """(log path, decoded path, DV unique id) of every staged remove, in staging order."""
        for entry in self._removes:
            yield from _entry_keys(entry)

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
        :class:`RowIndexOutOfRangeError` for a row index past the rows the file stores
        (its parquet footer's count; the ``numRecords`` statistic may lie, so whether a file
        lost its last row is decided on the footer too), and
        :class:`InvalidTransactionError` for a path that is not a
        live file or that this transaction already removes.
        """
        self._ensure_open()
        check_instance("deletes", deletes, Mapping)
        rows_by_path = {
            check_str("deletes key", path, non_empty=True): check_row_indexes(f"deletes[{path!r}]", rows)
            for path, rows in deletes.items()
        }
        deletion_timestamp = check_int("deletion_timestamp", deletion_timestamp, minimum=0, optional=True)
        check_int("target_dv_file_size", target_dv_file_size, minimum=1, optional=True)
        # Loaded on the first DV delete, not with the module: the other writers (appends,
        # OPTIMIZE) commit through this class without ever staging a deletion vector.
        from airflow_delta.engine.write.row_deletion import stage_row_deletion

        summary = stage_row_deletion(
            self._require_snapshot(),
            self.metadata,
            rows_by_path,
            table_uri=self.location.uri,
            already_removed={decoded for _, decoded, _ in self._remove_keys()},
            deletion_timestamp=deletion_timestamp,
            clock=_now_ms,
            target_dv_file_size=target_dv_file_size,
            written=self.written_files,
        )
        self._check_staged_paths("remove", summary.removes)
        self._check_staged_paths("add", summary.adds)
        self._removes.extend(summary.removes)
        self._adds.extend(summary.adds)
        return summary

    def add_cdc(self, action: AddCDCFile, *, written_for_this_commit: bool = False) -> None:
        """Stage a ``cdc`` action (change data of this commit, e.g. from :func:`~.data_files.write_change_data_files`).

        ``written_for_this_commit`` as in :meth:`add_files`: the file is removed when the
        commit certainly does not land.
        """
        self._ensure_open()
        check_bool("written_for_this_commit", written_for_this_commit)
        action = check_file_action("action", check_instance("action", action, AddCDCFile))
        self._check_staged_paths("cdc", [action])
        if written_for_this_commit:
            self.written_files.record(resolve_in_table(self.location.root, action.path))
        self._cdc.append(action)

    def _check_staged_paths(self, kind: str, actions: Sequence[AddFile | RemoveFile | AddCDCFile]) -> None:
        """Refuse (before staging anything) a file or DV path that a reader of the log would refuse.

        Raises :class:`InvalidPathError` for a malformed path (empty, NUL, raw backslash,
        bad ``%`` escape, trailing ``/``) and :class:`PathOutsideTableError` for one that
        leaves the table root (``..`` segments, an absolute URI elsewhere) or, on local
        storage, whose real location does (a linked directory or file).
        """
        root = self.location.root
        where = f"a staged {kind} action"
        storage_paths = check_log_paths(root, (a.path for a in actions), where)
        for action in actions:
            dv = getattr(action, "deletion_vector", None)
            if dv is None or dv.storage_type == "i":
                continue
            # Loaded here, not with the module: only a staged action with an on-disk DV needs the
            # DV file code (random, zlib, Z85), which a commit without DVs (OPTIMIZE's) never imports.
            from airflow_delta.engine.model.deletion_vector_files import dv_absolute_path

            try:
                storage_paths.append(dv_absolute_path(root, dv))
            except InvalidPathError as exc:
                raise InvalidPathError(exc.path, exc.reason, f"the deletion vector of a staged {kind} of "
                                       f"{action.path!r}") from None
            except PathOutsideTableError as exc:
                raise PathOutsideTableError(exc.path, exc.table_uri, f"the deletion vector of a staged {kind} of "
                                            f"{action.path!r}") from None
        # Physically too (local storage): no file that readers will open is reached through a
        # link leading out of the table. Removed files are never read again, so not checked.
        if kind != "remove":
            self.location.io.check_inside(storage_paths)

    def set_metadata(self, metadata: Metadata) -> None:
        self._ensure_open()
        self._metadata = check_instance("metadata", metadata, Metadata)

    def set_properties(self, properties: Mapping[str, str | None]) -> None:
        """Stage new metadata with ``properties`` set (``None`` unsets a key).

        ``delta.*`` keys are validated and spelled as Delta does (the writer's rules);
        ``delta.feature.<name>=supported`` adds a table feature to the protocol instead
        of being stored, as in Delta. Features the new values need are added at commit.
        """

        self._ensure_open()
        check_str_mapping("properties", properties, none_values=True)
        base = self.metadata
        configuration = dict(base.configuration)
        # Loaded here: only a commit that sets properties validates them (most commit none).
        from airflow_delta.engine.model.property_validation import normalize_properties

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
        self._protocol = check_instance("protocol", protocol, Protocol)

    def set_app_transaction(self, app_id: str, version: int) -> None:
        """Make this commit idempotent for ``(app_id, version)``.

        Raises :class:`TransactionAlreadyCommittedError` right away when the snapshot
        shows ``app_id`` already committed ``version`` or later, so the caller can skip
        its work; the same check runs against every winning commit at commit time.
        """
        self._ensure_open()
        check_str("app_id", app_id, non_empty=True)
        check_int("version", version, minimum=0)
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
        check_str("domain", domain, non_empty=True)
        check_instance("configuration", configuration, (str, Mapping))
        check_bool("removed", removed)
        check_bool("system", system)
        if domain == row_tracking.ROW_TRACKING_DOMAIN:
            raise InvalidTransactionError(
                f"the {domain!r} domain (the row ID high-water mark) is assigned by the commit itself; "
                "it cannot be staged"
            )
        if domain.startswith("delta.") and not system:
            raise InvalidTransactionError(
                f"domain {domain!r} is system-controlled (its name starts with 'delta.'); users may not change it"
            )
        try:
            text = configuration if isinstance(configuration, str) else json_text(configuration)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                "configuration", configuration, f"pass a JSON string or a mapping of JSON values ({exc})"
            ) from exc
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
        check_str("operation", operation, non_empty=True)
        check_instance("operation_parameters", operation_parameters, Mapping, optional=True)
        check_instance("operation_metrics", operation_metrics, Mapping, optional=True)
        check_str("user_metadata", user_metadata, optional=True)
        check_str_mapping("tags", tags, optional=True)
        try:
            version = self._commit(operation, operation_parameters, operation_metrics, user_metadata, tags)
        except BaseException as exc:
            self._state = "failed"
            # A commit that landed but may be invisible (CommitOutcomeUnknownError) still
            # references its files: they stay.
            outcome_unknown = isinstance(exc, CommitOutcomeUnknownError)
            if not outcome_unknown and (self._race is None or not self._race.may_have_landed):
                # Certainly not in the log: nothing references the files we wrote.
                self.written_files.remove_all()
            raise
        self._state = "committed"
        self.committed_version = version
        self.written_files.forget()
        if self._post_commit is not None:
            actions: Sequence[Mapping[str, Any]] | None = None
            if self._committed_actions is not None:
                # Batches of removes stay columns: the .crc hook counts them without an object per file.
                actions = CommittedActions(self._committed_actions)
            if actions is None:
                actions = [json.loads(line) for line in self._committed_payload.split(b"\n") if line]  # bytes: no 4x str
            try:
                self._post_commit(version, actions)
            except Exception as exc:
                log.warning(
                    "version %d of %s was committed, but the post-commit hook failed: %s", version, self.location, exc
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
        """Plan the commit once, then attempt versions until one lands, a rule conflicts, or attempts run out."""
        plan = self._plan_commit(operation, operation_parameters, operation_metrics, user_metadata, tags)
        race = _Race(
            attempt_version=self.read_version + 1,
            previous_ts=self._read_commit_timestamp(file_time=plan.enables_ict) if plan.ict_enabled else None,
        )
        self._race = race
        while True:
            self.attempts += 1
            payload = self._payload(plan, race.attempt_version, race.previous_ts)
            self._committed_payload, self._committed_actions = payload, self._serialized_actions
            # Checked before every attempt, as late as possible: the log must not have
            # moved past the version this attempt writes.
            frontier = race.frontiers[race.attempt_version] = self._check_frontier(race.attempt_version)
            race.in_flight = True
            try:
                response = self._committer.commit(race.attempt_version, payload)
            except CommitNotSupportedError:
                race.in_flight = False  # refused before anything was written
                raise
            race.in_flight = False
            if isinstance(response, Committed):
                self._confirm_not_shadowed(frontier, written_now=True)
                return response.version
            race.storage_error = None
            if isinstance(response, RetryableFailure):
                # The write may or may not have happened; the txnId in our commitInfo
                # tells, when the version is read back below.
                race.storage_error = response.error
                race.unresolved = race.attempt_version
            race.lost += 1
            if self.attempts < self.retry.max_attempts:
                # Sleep *before* catching up with the winners, so the attempt that follows
                # targets the newest version rather than one that aged during the sleep.
                if self._rng is None:
                    # Imported here: only a commit that lost a race draws a backoff, and most
                    # processes never lose one (random with its hashing costs ~1 ms to import).
                    import random

                    self._rng = random.Random(self._seed)
                delay = self.retry.backoff(race.lost, self._rng)
                if delay > 0:
                    time.sleep(delay)
            landed = self._catch_up(plan, race)
            if landed is not None:
                return landed
            if self.attempts >= self.retry.max_attempts:
                raise self._gave_up(plan, race)
            race.attempt_version = race.next_version

    def _plan_commit(
        self,
        operation: str,
        operation_parameters: Mapping[str, Any] | None,
        operation_metrics: Mapping[str, Any] | None,
        user_metadata: str | None,
        tags: Mapping[str, str] | None,
    ) -> _CommitPlan:
        """Everything about the commit that does not depend on the version it lands at; validates the actions."""
        read_protocol = self.snapshot.protocol if self.snapshot is not None else None
        read_metadata = self.snapshot.metadata if self.snapshot is not None else None
        metadata = self._row_tracking_metadata(self.metadata, read_metadata)
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
        removed_paths = self._validate_actions(operation, metadata, protocol, read_metadata or metadata)
        if write_metadata and read_metadata is not None:
            # Imported here: only a commit that writes metadata asks (a writer that stages files
            # alone, such as OPTIMIZE, never needs the identity-column code).
            from airflow_delta.engine.model.column_defaults import is_identity_only_update

            identity_only = is_identity_only_update(read_metadata, metadata)
        else:
            identity_only = False
        if identity_only:
            # Delta tags a commit whose only metadata change is identity high-water marks,
            # so that concurrent writers that change no metadata need not conflict with it.
            tags = {**(tags or {}), IDENTITY_COMMIT_TAG: "true"}

        isolation = self._isolation_level(operation, metadata, write_protocol, write_metadata)
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
            removed_paths=removed_paths,  # decoded once, when staged
            domains=frozenset(self._domains),
            changes_protocol=write_protocol and read_protocol is not None,
            changes_metadata=write_metadata and read_metadata is not None,
            is_blind_append=is_blind_append,
        )
        ict_enabled = TableProperties.from_configuration(metadata.configuration).enable_in_commit_timestamps
        enables_ict = ict_enabled and read_metadata is not None and not (
            TableProperties.from_configuration(read_metadata.configuration).enable_in_commit_timestamps
        )
        matcher_metadata = read_metadata or metadata

        def matcher(predicates: Sequence[Any], added: pa.Table) -> pa.BooleanArray:
            return files_may_match(predicates, added, matcher_metadata)

        assigns_row_ids = row_tracking.is_supported(protocol_gate.writer_features(protocol), metadata)
        return _CommitPlan(
            assigns_row_ids=assigns_row_ids,
            read_high_water_mark=(
                row_tracking.high_water_mark(self.snapshot.domain_metadata)
                if assigns_row_ids and self.snapshot is not None
                else row_tracking.MISSING_HIGH_WATER_MARK
            ),
            operation=operation,
            operation_parameters=operation_parameters,
            operation_metrics=operation_metrics,
            user_metadata=user_metadata,
            tags=tags,
            protocol=protocol,
            metadata=metadata,
            read_protocol=read_protocol,
            write_protocol=write_protocol,
            write_metadata=write_metadata,
            isolation=isolation,
            is_blind_append=is_blind_append,
            footprint=footprint,
            ict_enabled=ict_enabled,
            enables_ict=enables_ict,
            matcher=matcher,
        )

    def _payload(self, plan: _CommitPlan, version: int, previous_ts: int | None) -> bytes:
        """The commit file's bytes for an attempt at ``version`` (its timestamps are the attempt's own)."""
        now = _now_ms()
        ict = max(now, previous_ts + 1) if previous_ts is not None else (now if plan.ict_enabled else None)
        commit_metadata = plan.metadata
        if plan.enables_ict:
            assert ict is not None
            commit_metadata = replace(
                plan.metadata,
                configuration={
                    **dict(plan.metadata.configuration),
                    _ICT_VERSION_KEY: str(version),
                    _ICT_TIMESTAMP_KEY: str(ict),
                },
            )
        adds, row_domains = self._row_tracked_adds(plan, version)
        return self._serialize(
            plan.operation, plan.operation_parameters, plan.operation_metrics, plan.user_metadata, plan.tags,
            now=now, ict=ict, isolation=plan.isolation, is_blind_append=plan.is_blind_append,
            protocol=plan.protocol if plan.write_protocol else None,
            metadata=commit_metadata if (plan.write_metadata or plan.enables_ict) else None,
            adds=adds, extra_domains=row_domains,
        )

    def _row_tracked_adds(self, plan: _CommitPlan, version: int) -> tuple[Sequence[AddFile], list[DomainMetadata]]:
        """The adds of an attempt at ``version`` with row IDs and commit versions, and the high-water mark domain.

        Assigned per attempt from the newest high-water mark (a winner's, after a lost race),
        so fresh IDs never overlap those a concurrent writer committed.
        """
        if not plan.assigns_row_ids:
            return self._adds, []
        mark = plan.read_high_water_mark
        for winner in self.winning_commits:
            winner_mark = row_tracking.high_water_mark(winner.domains)
            if winner_mark != row_tracking.MISSING_HIGH_WATER_MARK:
                mark = max(mark, winner_mark)
        adds, new_mark = row_tracking.assign_row_tracking(self._adds, mark, version)
        return adds, ([row_tracking.high_water_mark_domain(new_mark)] if new_mark != mark else [])

    def _row_tracking_metadata(self, metadata: Metadata, read_metadata: Metadata | None) -> Metadata:
        """``metadata``, with materialized column names when this commit enables row tracking.

        Enabling it on a table whose files have no ``baseRowId`` needs a backfill of every
        file (Delta's ALTER TABLE does it); that is refused rather than done halfway.
        """
        if not row_tracking.is_enabled(metadata) or (
            read_metadata is not None and row_tracking.is_enabled(read_metadata)
        ):
            return metadata
        if self.snapshot is not None:
            files = self.snapshot.add_actions
            if files.num_rows and files.column("base_row_id").null_count:
                raise RowTrackingBackfillError(self.location.uri, files.column("base_row_id").null_count)
        if all(key in metadata.configuration for key in (
            row_tracking.ROW_ID_COLUMN_PROPERTY, row_tracking.ROW_COMMIT_VERSION_COLUMN_PROPERTY
        )):
            return metadata
        configuration = {**row_tracking.new_materialized_column_properties(), **dict(metadata.configuration)}
        staged = replace(metadata, configuration=configuration)
        if self._metadata is not None:
            self._metadata = staged
        return staged

    def _catch_up(self, plan: _CommitPlan, race: _Race) -> int | None:
        """Read and check every winner from the version just lost; the version if one of them is ours.

        Sets ``race.next_version`` to the first version nobody holds yet (or one that could
        not be read, to be attempted again). Raises the conflict error a winner causes.
        """
        race.next_version = race.attempt_version
        while True:
            try:
                found = self._read_commit(race.next_version, with_mtime=plan.ict_enabled)
            except OSError as exc:
                # This version cannot be checked now. The next attempt targets it
                # again: put-if-absent never overwrites, and a taken version is read
                # (and its txnId compared) before anything moves past it.
                race.storage_error = exc
                return None
            if found is None:
                return None
            winner, winner_bytes = found
            if winner.txn_id == self.txn_id:
                # An attempt that reported an error did land. It may be an earlier
                # attempt than the last one (a write that timed out but completed
                # later), with another timestamp and in-commit timestamp: the
                # post-commit hook must see what is in the log.
                self._committed_payload, self._committed_actions = winner_bytes, None
                if race.next_version in race.frontiers:
                    self._confirm_not_shadowed(race.frontiers[race.next_version], written_now=False)
                return race.next_version
            if race.next_version == race.unresolved:
                race.unresolved = None  # another writer's commit: ours did not land there
            if self.read_version < 0:
                raise TableAlreadyExistsError(self.location.uri)  # another creator won version 0
            check_winning_commit(plan.footprint, winner, plan.isolation, plan.matcher, plan.read_protocol or plan.protocol)
            self.winning_commits.append(winner)
            if plan.ict_enabled:
                race.previous_ts = _winner_timestamp(winner, plan.enables_ict, race.previous_ts)
            race.next_version += 1

    def _gave_up(self, plan: _CommitPlan, race: _Race) -> CommitFailedError:
        """The error once the attempts are used up: why, and whether our write may have landed after all."""
        if race.storage_error is not None:
            reason = f"storage error at version {race.next_version}: {race.storage_error}"
        else:
            last = self.winning_commits[-1] if self.winning_commits else None
            reason = f"version {race.attempt_version} was taken" + (
                f" (latest winner: version {last.version}, {last.operation})" if last else ""
            )
        if race.unresolved is not None:
            reason += (
                f"; version {race.unresolved} may have been written by this transaction all the same, "
                f"which it was if its commitInfo.txnId is {self.txn_id!r}: check before retrying"
            )
        advice = (
            "The storage kept failing; retry once it is healthy"
            if race.storage_error is not None
            else "No logical conflict was found; raise max_attempts (or the backoff) "
            "if the table has this many concurrent writers"
        )
        error = CommitFailedError(
            f"gave up committing {plan.operation!r} to {self.location.uri!r} after {self.attempts} attempt(s): "
            f"{reason}. {advice}"
        )
        error.__cause__ = race.storage_error
        return error

    def _check_frontier(self, version: int) -> CommitFrontier:
        """Refuse an attempt at ``version`` once the log has moved past it; nothing is written then.

        Metadata cleanup deletes commits behind a newer checkpoint, oldest first. A
        version it deleted is free on disk again, but writing it would "succeed"
        invisibly (readers start from the newer checkpoint), and the commits this one
        must be checked against are gone. One listing per attempt.
        """
        try:
            frontier = commit_frontier(list_log(self.location.io, self.location.root), version)
        except OSError as exc:
            raise CommitFailedError(
                f"could not list the log of {self.location.uri!r} before committing version {version}: {exc}. "
                "Nothing was written; retry once the storage is healthy"
            ) from exc
        if frontier.moved_past is not None:
            if self.read_version < 0:
                raise TableAlreadyExistsError(self.location.uri)
            raise LogMovedPastCommitError(
                self.location.uri, version, frontier.moved_past, listing_behind=frontier.listing_behind
            )
        return frontier

    def _confirm_not_shadowed(self, frontier: CommitFrontier, *, written_now: bool) -> None:
        """After our commit file landed: make sure the log did not move past it between the check and the write.

        A cleanup can delete an older writer's commit at our version (so that put-if-absent
        succeeds) only behind a checkpoint past our version, which exists before our write,
        and a checkpoint made from our commit is written after it. So one listing after the
        write decides, whatever order the cleanup deletes in (ours goes oldest first, a
        foreign one such as delta-rs may not): our commit still listed and no checkpoint past
        it, or every checkpoint past it written after it (modification times), is confirmed;
        a checkpoint past it written before it is a lost commit. When the times tie (coarse
        storage clocks) or the listing fails, the file of ``version - 1`` listed before the
        write decides as before: a cleanup that deletes oldest first cannot have deleted a
        commit at our version while it remains. If our version itself was listed, the write
        could only succeed because a cleanup deleted that commit: ours is below the log's
        start, is deleted again, and nothing was written. (``written_now`` is False for a
        write found by its txnId after it reported an error: what was listed there may be
        that write.) See docs/concurrency.md for what remains.
        """
        io, version = self.location.io, frontier.version
        path = commit_path(self.location.root, version)
        if frontier.target_listed and written_now:
            try:
                io.delete(path)
            except OSError:
                raise CommitOutcomeUnknownError(
                    self.location.uri, version, self.txn_id,
                    "a log cleanup removed the commit that held this version just before, and the write "
                    "could not be undone",
                ) from None
            raise LogMovedPastCommitError(
                self.location.uri, version,
                "a log cleanup removed the commit at this version while this transaction wrote its own, which "
                "readers would never replay (it was deleted again)",
            )
        try:
            listing: LogListing | None = list_log(io, self.location.root)
        except OSError:
            listing = None
        if listing is not None:
            ours = listing.commits.get(version)
            if ours is None:
                raise CommitOutcomeUnknownError(
                    self.location.uri, version, self.txn_id,
                    "a log cleanup removed it right after it was written and the log may now start past it",
                )
            ahead = [cp for cp in listing.checkpoints if cp.version > version]
            # A checkpoint can anchor a cleanup once its last file is written.
            earlier = [cp.version for cp in ahead if max(f.modification_time for f in cp.files) < ours.modification_time]
            # A commit past ours that is older than ours was written while another commit held
            # our version: put-if-absent found it free only because a cleanup had removed that
            # one. This holds even when the checkpoint that anchored the cleanup was written
            # again after our commit (same version, new time, built without ours).
            earlier_commits = sorted(v for v, info in listing.commits.items()
                                     if v > version and info.modification_time < ours.modification_time)
            if (earlier or earlier_commits) and version == 0 and written_now:
                # A checkpoint or commit past version 0 before our version 0 existed: another
                # table was there and its version 0 was cleaned up. Ours is removed again.
                self._remove_own_commit(path)
                raise TableAlreadyExistsError(self.location.uri)
            if earlier:
                raise CommitOutcomeUnknownError(
                    self.location.uri, version, self.txn_id,
                    f"the checkpoint of version {earlier[0]} was written before it, so a log cleanup may have "
                    "removed another commit at this version just before",
                )
            if earlier_commits:
                raise CommitOutcomeUnknownError(
                    self.location.uri, version, self.txn_id,
                    f"commit {earlier_commits[0]} was written before it, so a log cleanup removed another commit "
                    "at this version just before, and readers may start past it",
                )
            started = [min(f.modification_time for f in cp.files) for cp in ahead]
            if all(begun > ours.modification_time for begun in started):
                return  # no checkpoint past ours, or each was written after it
        if frontier.predecessor is not None:
            try:
                if io.exists(frontier.predecessor):
                    return
            except OSError:
                pass
        elif version == 0:
            return  # a new table: no cleanup can be ahead of its first commit
        if listing is None and self._replayed_from_log(version):
            return  # (with a listing, a checkpoint past our commit was seen above)
        raise CommitOutcomeUnknownError(
            self.location.uri, version, self.txn_id,
            "a log cleanup removed the files before it at the same time and the log may now start past it",
        )

    def _remove_own_commit(self, path: str) -> None:
        """Delete the commit file this transaction just wrote (only if it still holds our bytes)."""
        try:
            if self.location.io.read_bytes(path) == self._committed_payload:
                self.location.io.delete(path)
        except FileNotFoundError:
            return
        except OSError:
            raise CommitOutcomeUnknownError(
                self.location.uri, 0, self.txn_id,
                "it landed below another table's checkpoint and could not be removed again",
            ) from None

    def _replayed_from_log(self, version: int) -> bool:
        """Readers replay our commit at ``version``: it is still listed and no checkpoint is newer.

        A checkpoint of ``version`` itself was made from our commit: an older writer's
        commit at this version could only have gone with a newer checkpoint, and the
        newest checkpoint never goes away.
        """
        try:
            listing = list_log(self.location.io, self.location.root)
        except OSError:
            return False
        # _last_checkpoint is not consulted: it counts only when the checkpoint it names
        # is listed, and then that checkpoint is already among these.
        newest_checkpoint = listing.checkpoints[-1].version if listing.checkpoints else -1
        return version in listing.commits and newest_checkpoint <= version

    def _validate_actions(
        self, operation: str, metadata: Metadata, protocol: Protocol, read_metadata: Metadata
    ) -> frozenset[str]:
        """Refuse staged actions no valid commit holds; returns the removes' decoded paths."""
        # A file is its (decoded path, DV id); the keys without a DV are kept as bare paths, so
        # that a batch of removes (thousands, rarely with DVs) is checked as one set of strings.
        seen_adds: set[tuple[str, str | None]] = set()
        for add in self._adds:
            key = (decode_log_path(add.path), add.dv_unique_id)
            if key in seen_adds:
                raise InvalidTransactionError(f"file {add.path!r} is added twice in one commit")
            seen_adds.add(key)
        added_plain = {path for path, dv_id in seen_adds if dv_id is None}
        removed_plain: set[str] = set()
        removed_with_dv: set[tuple[str, str]] = set()
        for entry in self._removes:
            if isinstance(entry, RemoveBatch) and not entry.dv_ids:
                # The file by file check below runs only to name a duplicate.
                batch_paths = set(entry.decoded)
                if len(batch_paths) == len(entry) and removed_plain.isdisjoint(batch_paths) and (
                    added_plain.isdisjoint(batch_paths)
                ):
                    removed_plain |= batch_paths
                    continue
            for path, decoded, dv_id in _entry_keys(entry):
                if dv_id is None:
                    seen = decoded in removed_plain
                    removed_plain.add(decoded)
                else:
                    seen = (decoded, dv_id) in removed_with_dv
                    removed_with_dv.add((decoded, dv_id))
                if seen:
                    raise InvalidTransactionError(f"file {path!r} is removed twice in one commit")
                if (decoded, dv_id) in seen_adds:
                    raise InvalidTransactionError(
                        f"file {path!r} (same deletion vector) is both added and removed in one commit"
                    )
        removed_paths = frozenset(removed_plain)
        if removed_with_dv:
            removed_paths |= {path for path, _ in removed_with_dv}

        expected = set(physical_partition_columns(metadata))
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
            changed = [entry for entry in self._removes if entry.data_change]  # a batch has one flag
            if changed:
                count = sum(len(e) if isinstance(e, RemoveBatch) else 1 for e in changed)
                first = changed[0].paths[0] if isinstance(changed[0], RemoveBatch) else changed[0].path
                raise AppendOnlyViolationError(
                    f"the table is append-only (delta.appendOnly=true) and this commit removes data from "
                    f"{count} file(s), e.g. {first!r}; only dataChange=false rewrites are allowed. "
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
            removes_data = any(r.data_change for r in self._removes)  # a batch has one flag
            adds_data = [a.path for a in self._adds if a.data_change]
            if removes_data and adds_data and operation.upper() not in _REPLACING_OPERATIONS:
                raise InvalidTransactionError(
                    f"the table has delta.enableChangeDataFeed=true and this {operation} commit rewrites data "
                    f"(removes files and adds {adds_data[0]!r}) without cdc actions; stage the change data "
                    "with add_cdc()"
                )
        return removed_paths

    def _isolation_level(
        self, operation: str, metadata: Metadata, write_protocol: bool, write_metadata: bool
    ) -> IsolationLevel:
        if self._requested_isolation is not None:
            level = self._requested_isolation
        else:
            level = IsolationLevel.parse(TableProperties.from_configuration(metadata.configuration).isolation_level)
        has_non_file_actions = write_protocol or write_metadata or bool(self._app_transactions) or bool(self._domains)
        data_changed = any(a.data_change for a in self._adds) or any(r.data_change for r in self._removes)
        if has_non_file_actions or data_changed:
            return level
        # Delta's OptimisticTransaction.canDowngradeToSnapshotIsolation: a transaction
        # whose file actions are all dataChange=false (or that has none) is checked at
        # SnapshotIsolation -- at Serializable always; at WriteSerializable only if its
        # operation does not change data (DeltaOperations' changesData: OPTIMIZE does,
        # DELETE/WRITE/MERGE/... do not downgrade). So a DELETE that matched no file
        # still conflicts with a non-blind winner adding files where it read.
        if level is IsolationLevel.WRITE_SERIALIZABLE and operation in _DATA_CHANGING_OPERATIONS:
            return level
        return IsolationLevel.SNAPSHOT_ISOLATION

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
        adds: Sequence[AddFile],
        extra_domains: Sequence[DomainMetadata] = (),
    ) -> bytes:
        info = build_commit_info(
            operation,
            operation_parameters,
            operation_metrics,
            timestamp=now,
            in_commit_timestamp=ict,
            read_version=self.read_version,
            isolation_level=isolation.value,
            is_blind_append=is_blind_append,
            user_metadata=user_metadata,
            tags=tags,
            engine_info=self.engine_info,
            txn_id=self.txn_id,
        )
        # Each line is encoded as it is made: a str holding one astral character takes 4 bytes per
        # character, so joining the lines first would hold the commit at up to 4x its UTF-8 size.
        def encoded(text: str) -> bytes:
            return utf8_bytes(text, "commit content")

        # The JSON objects are kept beside the bytes: the post-commit hook reads them, not the bytes again
        # (a batch of removes stands for its objects until the hook asks for them).
        actions: list[Action | RemoveBatch] = [
            *([protocol] if protocol is not None else []), *([metadata] if metadata is not None else []),
            *self._app_transactions.values(), *self._domains.values(), *extra_domains, *self._removes, *adds, *self._cdc,
        ]
        objects: list[dict[str, Any] | RemoveBatch] = [
            {"commitInfo": info},
            *(a if isinstance(a, RemoveBatch) else {ACTION_KEYS[type(a)]: a.to_json()} for a in actions),
        ]
        lines: list[bytes | pa.Buffer] = [encoded(json_text(objects[0]))]  # bytes.join takes a buffer as bytes
        # A remove's line is put together from its fields (many per commit; the same text); a batch's
        # lines were encoded when it was staged, joined by newlines as here.
        partitions_seen: dict[int, str] = {}
        lines += [
            a.blob if isinstance(a, RemoveBatch)
            else encoded(remove_json_line(a, partitions_seen) if type(a) is RemoveFile else json_text(o))
            for a, o in zip(actions, objects[1:], strict=True)
        ]
        lines.append(b"")
        self._serialized_actions = objects
        return b"\n".join(lines)

    def _read_winner(self, version: int, with_mtime: bool = False) -> WinningCommit | None:
        found = self._read_commit(version, with_mtime)
        return found[0] if found is not None else None

    def _read_commit(self, version: int, with_mtime: bool = False) -> tuple[WinningCommit, bytes] | None:
        """Commit ``version`` summarised for conflict checks, with its bytes; None if it does not exist."""
        path = commit_path(self.location.root, version)
        try:
            data = self.location.io.read_bytes(path)
        except FileNotFoundError:
            return None
        mtime = None
        if with_mtime:
            info = self.location.io.info(path)
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
            raise TableNotFoundError(self.location.uri, "a transaction on a new table has nothing to read")
        return self.snapshot

    def _ensure_open(self) -> None:
        if self._state != "open":
            raise InvalidTransactionError(f"this transaction is already {self._state}; start a new one")


# ------------------------------------------------------------------ helpers


def _entry_keys(entry: RemoveFile | RemoveBatch) -> Iterable[tuple[str, str, str | None]]:
    """(log path, decoded path, DV unique id) of a staged remove, or of each remove of a batch."""
    if isinstance(entry, RemoveBatch):
        dv_ids = entry.dv_ids
        return ((path, decoded, dv_ids.get(i)) for i, (path, decoded) in enumerate(zip(entry.paths, entry.decoded, strict=True)))
    return ((entry.path, decode_log_path(entry.path), entry.dv_unique_id),)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _load_latest(location: TableLocation) -> Snapshot | None:
    try:
        return load_snapshot(location.io, location.root)
    except TableNotFoundError:
        return None


def _concat(chunks: list[pa.Array]) -> pa.Array:
    if not chunks:
        return pa.nulls(0, pa.string())
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


__all__ = [
    "ENGINE_INFO",
    "ConcurrentModificationError",
    "IsolationLevel",
    "PostCommitHook",
    "Transaction",
    "encode_operation_metrics",
    "encode_operation_parameters",
    "files_may_match",
    "removes_from_file_actions",
]
