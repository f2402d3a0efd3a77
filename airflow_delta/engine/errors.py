"""Every error the engine raises, under one base class, :class:`DeltaError`.

Each error says what went wrong *and* what the caller can do about it, including
whether running the operation again can help (:attr:`DeltaError.retryable`). Errors that
come from the log name the file (and line) that is at fault; conflict errors carry
the winning commit's version, its operation and what it touched, so a DAG author can
read why a task failed without opening the log.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar


class DeltaError(Exception):
    """Base class of every error raised by :mod:`airflow_delta.engine`.

    ``retryable`` says whether running the whole operation again, from a fresh snapshot
    of the table, can succeed: True for conflicts with concurrent writers and for
    commits that storage or contention kept from landing; False for bad input, tables
    or features we cannot handle, and broken logs, where a retry only fails again. The
    Airflow layer turns it into a task retry or an immediate failure.
    """

    retryable: ClassVar[bool] = False


# --------------------------------------------------------------------------- table


class TableNotFoundError(DeltaError):
    """The path holds no Delta table (no ``_delta_log`` with any commit or checkpoint)."""

    def __init__(self, table_uri: str, detail: str = "") -> None:
        self.table_uri = table_uri
        msg = f"no Delta table at {table_uri!r}: there is no _delta_log with a commit or checkpoint"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg + "; check the path, or create the table first")


class TableAlreadyExistsError(DeltaError):
    """``DeltaTable.create`` was asked to create a table where one exists."""

    def __init__(self, table_uri: str) -> None:
        self.table_uri = table_uri
        super().__init__(f"a Delta table already exists at {table_uri!r}; open it instead of creating it")


class VersionNotFoundError(DeltaError):
    """Time travel asked for a version (or timestamp) the log cannot reconstruct."""

    def __init__(self, requested: object, earliest: int | None, latest: int | None, detail: str = "") -> None:
        self.requested = requested
        self.earliest = earliest
        self.latest = latest
        msg = f"cannot load the table at {requested!r}: reconstructable versions are {earliest}..{latest}"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class InvalidLogError(DeltaError):
    """The transaction log breaks the protocol; the message names the offending file."""


class LogNotContiguousError(InvalidLogError):
    """Commit versions in the log have a gap, so no snapshot can be built across it."""

    def __init__(self, table_uri: str, missing: Sequence[int]) -> None:
        self.table_uri = table_uri
        self.missing = list(missing)
        shown = ", ".join(str(v) for v in self.missing[:10])
        more = "" if len(self.missing) <= 10 else f" and {len(self.missing) - 10} more"
        super().__init__(
            f"the _delta_log of {table_uri!r} is not contiguous: commit(s) {shown}{more} are missing "
            "and no checkpoint covers them"
        )


class MissingProtocolError(InvalidLogError):
    """No ``protocol`` action was found while replaying the log up to the requested version."""


class MissingMetadataError(InvalidLogError):
    """No ``metaData`` action was found while replaying the log up to the requested version."""


class CorruptCommitError(InvalidLogError):
    """A commit file is not valid newline-delimited JSON of Delta actions."""

    def __init__(self, file: str, line: int | None, reason: str) -> None:
        self.file = file
        self.line = line
        where = f"{file}, line {line}" if line is not None else file
        super().__init__(f"corrupt commit {where}: {reason}")


class CorruptCheckpointError(InvalidLogError):
    """A checkpoint file (or one of its parts or sidecars) cannot be read."""

    def __init__(self, file: str, reason: str) -> None:
        self.file = file
        super().__init__(f"corrupt checkpoint {file}: {reason}")


class ChecksumMismatchError(DeltaError):
    """Stored bytes do not match their recorded checksum (deletion vector CRC, ``_last_checkpoint``)."""

    def __init__(self, file: str, expected: object, actual: object) -> None:
        self.file = file
        self.expected = expected
        self.actual = actual
        super().__init__(f"checksum mismatch in {file}: expected {expected}, computed {actual}")


class PathOutsideTableError(DeltaError):
    """A path (from the log or from a caller) resolves outside the table root; it is never touched."""

    def __init__(self, path: str, table_uri: str, reason: str | None = None) -> None:
        self.path = path
        self.table_uri = table_uri
        self.reason = reason
        detail = f" ({reason})" if reason else ""
        super().__init__(f"refusing path {path!r}: it is outside the table root {table_uri!r}{detail}")


# --------------------------------------------------------------------- protocol


class UnsupportedFeatureError(DeltaError):
    """The table uses a protocol version or table feature this engine does not implement.

    Raised instead of reading (or writing) the table wrongly.
    """

    def __init__(self, features: Sequence[str], *, access: str, detail: str = "") -> None:
        self.features = sorted(features)
        self.access = access  # "read" or "write"
        msg = f"cannot {access} this table: it requires {', '.join(self.features)}, which airflow-delta does not implement"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class RowTrackingBackfillError(UnsupportedFeatureError):
    """A commit would enable row tracking (``delta.enableRowTracking=true``) on a table whose files have no row IDs.

    Enabling it there first needs a backfill commit giving every existing file a
    ``baseRowId`` (PROTOCOL.md "Row Tracking", Enablement), which Delta's
    ``ALTER TABLE ... SET TBLPROPERTIES`` does and airflow-delta does not. Not retryable.
    """

    def __init__(self, table_uri: str, files_without_row_ids: int) -> None:
        self.table_uri = table_uri
        self.files_without_row_ids = files_without_row_ids
        super().__init__(
            ["rowTracking"], access="write",
            detail=f"enabling row tracking on {table_uri!r} needs a backfill of row IDs for its "
            f"{files_without_row_ids} existing file(s) without baseRowId; run ALTER TABLE ... SET TBLPROPERTIES "
            "('delta.enableRowTracking' = 'true') with Delta Lake, or create the table with it",
        )


class MixedPySparkError(DeltaError):
    """The PySpark that runs a job is two releases in one folder: its Python files and its jars differ.

    pip installs ``pyspark`` and ``pyspark-client`` (which the apache-spark provider
    requires) into the same ``pyspark/`` folder; when their versions differ, the one
    written second wins file by file, and Python code of one Spark calls the JVM of the
    other (a MERGE then fails with ``Py4JException: Constructor ... does not exist``).
    No retry can fix it: the message says which pip command does.
    """

    def __init__(self, location: str, python_version: str, jvm_version: str, fix_version: str) -> None:
        self.location = location
        self.python_version = python_version
        self.jvm_version = jvm_version
        self.fix_version = fix_version
        super().__init__(
            f"the PySpark at {location} is mixed: its Python files say Spark {python_version} but its jars "
            f"are Spark {jvm_version} (pip wrote pyspark and pyspark-client of different versions into the "
            f"same pyspark/ folder); make both the same release with: "
            f'pip install --force-reinstall --no-deps "pyspark=={fix_version}" "pyspark-client=={fix_version}"'
        )


# ----------------------------------------------------------------- user input


class InvalidFilterError(DeltaError):
    """A SQL filter string cannot be parsed or does not fit the table's schema."""

    def __init__(self, filter_sql: str, reason: str) -> None:
        self.filter_sql = filter_sql
        super().__init__(f"invalid filter {filter_sql!r}: {reason}")


class SparkAnalysisError(DeltaError):
    """Spark refused a job's SQL or input before running it: a path that does not exist, an
    unknown column, SQL that does not parse, a type mismatch (Spark's analysis errors, and
    its errors of SQLSTATE class 42 or 22).

    The message is Spark's own, whole (error class in brackets, SQLSTATE), with the job's
    internal columns left out of Spark's suggestions. The same input fails again, so it is
    not retryable. :attr:`spark_error_class` is Spark's error class (``PATH_NOT_FOUND``,
    ``UNRESOLVED_COLUMN.WITH_SUGGESTION``, ``PARSE_SYNTAX_ERROR``...), read from the message.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)

    @property
    def spark_error_class(self) -> str | None:
        found = _SPARK_ERROR_CLASS.search(str(self))
        return found.group(1) if found else None


_SPARK_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\]")


class SchemaMismatchError(DeltaError):
    """Data handed to a write does not match the table schema."""


class InvalidTablePropertyError(DeltaError):
    """A ``delta.*`` table property has a value the protocol does not allow."""

    def __init__(self, key: str, value: object, expected: str) -> None:
        self.key = key
        self.value = value
        super().__init__(f"table property {key}={value!r} is invalid: expected {expected}")


class ConstraintViolationError(DeltaError):
    """Rows to be written break a CHECK constraint, a column invariant or NOT NULL."""

    def __init__(self, constraint: str, expression: str, violating_rows: int, example: Mapping[str, Any] | None = None) -> None:
        self.constraint = constraint
        self.expression = expression
        self.violating_rows = violating_rows
        self.example = dict(example) if example is not None else None
        msg = f"{violating_rows} row(s) violate {constraint} ({expression})"
        if self.example is not None:
            msg += f"; for example {self.example}"
        super().__init__(msg)


class IdentityColumnWriteError(DeltaError):
    """A write gives a value Delta refuses for an identity column: an INSERT with a value for a
    ``GENERATED ALWAYS AS IDENTITY`` column (Delta: DELTA_IDENTITY_COLUMNS_EXPLICIT_INSERT_NOT_SUPPORTED),
    or an UPDATE of any identity column (DELTA_IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED).

    The same statement fails again: not retryable.
    """

    def __init__(self, column: str, operation: str) -> None:
        self.column = column
        self.operation = operation  # "insert" or "update"
        if operation == "update":
            msg = f"UPDATE on IDENTITY column {column!r} is not supported (Delta refuses it too): leave it out of SET"
        else:
            msg = (
                f"providing values for GENERATED ALWAYS AS IDENTITY column {column!r} is not supported: leave it "
                "out of the inserted columns (or INSERT *) and its values are generated"
            )
        super().__init__(msg)


class AppendOnlyViolationError(DeltaError):
    """A transaction removes data from a table with ``delta.appendOnly=true``."""


class MultipleSourceRowsMatchedError(DeltaError):
    """A MERGE found target rows that more than one source row matches on the ON condition.

    Delta refuses such a MERGE (unless its only WHEN MATCHED clause is an unconditional
    DELETE): which source row should update or delete the target row is ambiguous. The
    same source fails again, so it is not retryable.
    """

    def __init__(self, target_rows: int, example: Mapping[str, Any] | None = None) -> None:
        self.target_rows = target_rows
        self.example = dict(example) if example is not None else None
        msg = (
            f"cannot MERGE: {target_rows} target row(s) match more than one source row on the ON condition, "
            "so which source row updates or deletes them is ambiguous"
        )
        if self.example is not None:
            msg += f" (for example the target row {self.example})"
        super().__init__(
            msg + "; deduplicate the source (one row per key), or make the ON condition match at most one "
            "source row per target row"
        )


# ---------------------------------------------------------------- commits


class CommitFailedError(DeltaError):
    """A commit could not be written (storage failure, or retries exhausted). Nothing was committed
    unless the message says that a version may have been written (it names the txnId to look for)."""

    # Contention, a storage hiccup, or a transaction older than the log: a new attempt
    # on the latest snapshot can land.
    retryable = True


class CommitNotSupportedError(DeltaError):
    """The storage behind a table cannot do the atomic create-if-absent that commits need.

    Committing without it could let two writers both believe they wrote the same
    version, so the engine refuses; reading still works. Use storage with conditional
    writes: local disk, S3, Azure Blob / ADLS Gen2 or GCS (``docs/storage.md``).
    """


class TransactionAlreadyCommittedError(DeltaError):
    """An idempotent write (``txn`` appId, version) was already committed by an earlier attempt."""

    def __init__(self, app_id: str, version: int, committed_version: int) -> None:
        self.app_id = app_id
        self.version = version
        self.committed_version = committed_version
        super().__init__(
            f"application {app_id!r} already committed transaction version {committed_version} "
            f"(this attempt is version {version}); nothing was written again"
        )


class ConcurrentModificationError(DeltaError):
    """Base of the logical conflicts found between our transaction and a winning commit.

    ``winning_version`` is the commit that won, ``winning_operation`` its commitInfo
    operation, and ``conflicting`` what overlapped: file paths, partition values,
    app ids or domain names, depending on the rule.
    """

    # Planning the operation again on the snapshot that includes the winner can succeed
    # (Delta's own advice for these exceptions).
    retryable = True

    def __init__(
        self,
        message: str,
        *,
        winning_version: int,
        winning_operation: str | None,
        conflicting: Sequence[Any] = (),
    ) -> None:
        self.winning_version = winning_version
        self.winning_operation = winning_operation
        self.conflicting = list(conflicting)
        op = winning_operation or "unknown operation"
        detail = ""
        if self.conflicting:
            shown = ", ".join(repr(c) for c in self.conflicting[:5])
            more = "" if len(self.conflicting) <= 5 else f" and {len(self.conflicting) - 5} more"
            detail = f"; conflicting: {shown}{more}"
        super().__init__(f"{message} (winning commit: version {winning_version}, {op}{detail})")


# Names follow Delta's own exceptions so that people who know Delta recognise them.
class ProtocolChangedException(ConcurrentModificationError):  # noqa: N818
    """A concurrent commit changed the table protocol."""


class MetadataChangedException(ConcurrentModificationError):  # noqa: N818
    """A concurrent commit changed the table metadata (schema, properties, partitioning)."""


class ConcurrentTransactionException(ConcurrentModificationError):  # noqa: N818
    """A concurrent commit wrote the same ``txn`` appId or the same domain."""


class ConcurrentAppendException(ConcurrentModificationError):  # noqa: N818
    """A concurrent commit added files that this transaction's reads would have seen."""


class ConcurrentDeleteReadException(ConcurrentModificationError):  # noqa: N818
    """A concurrent commit removed a file this transaction read."""


class ConcurrentDeleteDeleteException(ConcurrentModificationError):  # noqa: N818
    """A concurrent commit removed a file this transaction also removes."""


# ------------------------------------------------------------- deletion vectors


class CorruptDeletionVectorError(DeltaError):
    """A deletion vector (file, inline data or descriptor) is not in the protocol's format.

    ``source`` names the DV file, or the inline descriptor, so the offending action can be found.
    """

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"corrupt deletion vector {source}: {reason}")


class InvalidZ85Error(DeltaError):
    """A string is not valid Z85 (the Base85 variant Delta uses for inline DVs and DV UUIDs)."""


class InvalidTransactionError(DeltaError):
    """The actions staged in a transaction break the protocol or the transaction's own rules.

    For example two actions for the same file, partition values that do not match the
    table's partition columns, a change to a system-controlled metadata domain, or a
    transaction left without ``commit()``. Nothing was written.
    """


# ---------------------------------------------------------------- table creation


class InvalidSchemaError(DeltaError):
    """A schema (or partitioning) given to create a table breaks Delta's rules."""


class UnknownTablePropertyError(InvalidTablePropertyError):
    """A ``delta.*`` property that Delta does not define (most often a typo)."""

    def __init__(self, key: str, value: object, valid: Sequence[str]) -> None:
        self.valid = list(valid)
        DeltaError.__init__(
            self,
            f"unknown table property {key}={value!r}: Delta defines no such property. Valid delta.* properties are: "
            + ", ".join(self.valid)
            + ". Keys outside the delta. namespace are kept as user metadata.",
        )
        self.key = key
        self.value = value


class DataFileNotFoundError(DeltaError):
    """A data file that should be added to the table does not exist in storage."""


class CorruptDataFileError(DeltaError):
    """A data file the log references cannot be read as the table says it should be.

    For example its parquet is unreadable, it lacks the field ids ``id`` column mapping
    resolves by, a column holds values of a type the table's type cannot hold, or a
    deletion vector names rows past the end of the file.
    """

    def __init__(self, file: str, reason: str) -> None:
        self.file = file
        super().__init__(f"cannot read data file {file}: {reason}")


class InvalidTimestampError(DeltaError, ValueError):
    """A time-travel timestamp is neither a datetime, an ISO-8601 string nor epoch milliseconds."""

    def __init__(self, value: object, reason: str) -> None:
        self.value = value
        super().__init__(f"invalid timestamp {value!r}: {reason}")


# ------------------------------------------------------------ row-level deletes


class DeletionVectorsNotEnabledError(InvalidTransactionError):
    """Rows were to be deleted through deletion vectors on a table that does not enable them."""

    def __init__(self, table_uri: str) -> None:
        self.table_uri = table_uri
        super().__init__(
            f"{table_uri!r} does not enable deletion vectors; set the table property "
            "delta.enableDeletionVectors=true first (it upgrades the table protocol to the "
            "deletionVectors feature), or rewrite the files without the deleted rows instead"
        )


class RowIndexOutOfRangeError(InvalidTransactionError):
    """A row index to delete is not a row of the data file (it has ``num_records`` rows, 0-based)."""

    def __init__(self, path: str, row_index: int, num_records: int) -> None:
        self.path = path
        self.row_index = row_index
        self.num_records = num_records
        super().__init__(
            f"cannot delete row {row_index} of {path!r}: the data file has {num_records} records "
            f"(row indexes are 0-based positions in the file, so at most {num_records - 1})"
        )


# --- logparse ---


class LogTooLargeError(DeltaError):
    """Loading a table's transaction log ran out of this process's memory.

    Raised instead of a bare ``MemoryError`` from numpy or pyarrow. Running the same load
    in the same process fails the same way, so it is not retryable: give the process more
    memory, or checkpoint the table (a checkpoint is read in bounded batches) so that
    fewer JSON commits have to be replayed.
    """

    def __init__(self, table_root: str, stage: str) -> None:
        self.table_root = table_root
        self.stage = stage
        super().__init__(
            f"the transaction log of {table_root!r} is too large for this process's memory (out of memory while "
            f"{stage}); run with more memory, or write a checkpoint so fewer commits are replayed"
        )


# --- paths ---


class InvalidPathError(DeltaError):
    """A file path in an action (staged, or found in the log) is not a valid Delta path.

    Paths in ``add``/``remove``/``cdc`` actions, ``p`` deletion vectors and sidecars are
    URI-encoded and name a file below the table root; an empty path, a NUL byte, a raw
    backslash, a malformed ``%`` escape, a trailing ``/`` or a query/fragment in a URI is
    refused the same way when a path is staged and when it is read back. Local storage also
    raises it for a file name that is a symbolic link inside the table: the engine never
    writes through a link (one leading out is a :class:`PathOutsideTableError`).
    """

    def __init__(self, path: str, reason: str, where: str | None = None) -> None:
        self.path = path
        self.reason = reason
        self.where = where
        location = f" in {where}" if where else ""
        super().__init__(
            f"invalid file path {path!r}{location}: {reason}; a path in the log is a URI-encoded path "
            "relative to the table root (or an absolute URI inside it) naming a file, e.g. "
            "'part=a/part-00000.parquet'"
        )


# --- writes ---


class InvalidArgumentError(DeltaError):
    """A public API argument has the wrong type or is out of range.

    The message names the argument, the value given and what is accepted, so the caller
    knows what to fix; ``argument`` and ``value`` are kept for programs.
    """

    def __init__(self, argument: str, value: object, expected: str) -> None:
        self.argument = argument
        self.value = value
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{argument}={shown} ({type(value).__name__}) is not accepted: {expected}")


# --- commit ---


class LogMovedPastCommitError(CommitFailedError):
    """The log has moved past the version a commit would land at; nothing was written.

    Metadata cleanup (or a newer checkpoint) made ``version`` part of history that readers
    no longer replay: a commit written there would be invisible, and the commits it must
    be checked against for conflicts may be gone. ``listing_behind``: the cause is a
    listing of the log that hides versions this writer has seen (the message says so
    rather than blaming cleanup). Retrying the whole operation on the latest snapshot can
    succeed.
    """

    def __init__(self, table_uri: str, version: int, reason: str, *, listing_behind: bool = False) -> None:
        self.table_uri = table_uri
        self.version = version
        self.listing_behind = listing_behind
        why = (
            "the store's listing must show every log file once it is written (list-after-write consistency); "
            "check for a cache or a replica in front of the store, or for a process deleting log files"
            if listing_behind
            else "this one is older than the log retention, or a log cleanup ran with a clock ahead of this writer"
        )
        super().__init__(
            f"cannot commit version {version} of {table_uri!r}: {reason}. Nothing was written; "
            f"start a new transaction on the latest version ({why})"
        )


class CommitOutcomeUnknownError(DeltaError):
    """A commit file was written, but the log moved past it at the same moment: whether readers see it is unknown.

    Retrying blindly could write the same rows twice, so this is not retryable: check the
    table for the transaction's data (``txn_id`` is in its commitInfo) first.
    """

    def __init__(self, table_uri: str, version: int, txn_id: str, reason: str) -> None:
        self.table_uri = table_uri
        self.version = version
        self.txn_id = txn_id
        super().__init__(
            f"version {version} of {table_uri!r} was written by transaction {txn_id!r}, but {reason}, so "
            "readers may never see it. Check whether the table holds this transaction's changes before "
            "running it again"
        )


class AtomicWriteError(DeltaError):
    """A file written through a hidden temporary file could not be moved into place (the temporary vanished).

    Nothing was published at the target path; another process deleted the temporary
    file. Running the operation again can succeed.
    """

    retryable = True

    def __init__(self, path: str, temporary: str, reason: str) -> None:
        self.path = path
        self.temporary = temporary
        super().__init__(
            f"could not publish {path}: its temporary file {temporary} {reason}; nothing was written at {path}. "
            "Another process deleted it (a log cleanup that removes temporary files of live writers?); retry"
        )


# ------------------------------------------------------------------ object storage


class StorageAccessError(DeltaError):
    """An object store refused a request in a way no retry fixes: credentials, permissions,
    a bucket or container that does not exist, a malformed request or configuration.

    ``store`` names the store (``s3``, ``azure``, ``gcs``) and ``location`` the bucket or
    container and key; the message says what to fix.
    """

    def __init__(self, store: str, location: str, reason: str, fix: str) -> None:
        self.store = store
        self.location = location
        self.reason = reason
        super().__init__(f"{store} refused access to {location}: {reason}; {fix}")


class StorageUnavailableError(DeltaError, OSError):
    """An object store kept failing with transient errors (throttling, 5xx, timeouts, connection
    resets) after every retry the FileIO made with backoff.

    It is an :class:`OSError` too, so a commit that meets it is reported as a storage failure
    whose outcome is checked, never as a conflict. Running the operation again later can succeed.
    """

    retryable = True

    def __init__(self, store: str, location: str, reason: str) -> None:
        self.store = store
        self.location = location
        self.reason = reason
        OSError.__init__(
            self,
            f"{store} did not complete a request for {location} after retries with backoff: {reason}; "
            "the store is throttling, failing or unreachable: run the operation again later",
        )


class ObjectStoreForkError(DeltaError):
    """An object-store table was used in a process forked from one that had used an object store.

    obstore runs its requests on one I/O runtime per process, whose threads do not survive
    ``fork()``: a request in the child would wait forever. The engine refuses it at once
    instead. Not retryable in the same process: start workers with the ``spawn`` or
    ``forkserver`` method, or open object-store tables only after the fork.
    """

    def __init__(self, location: str, parent_pid: int, pid: int) -> None:
        self.location = location
        self.parent_pid = parent_pid
        self.pid = pid
        super().__init__(
            f"cannot reach {location} from process {pid}: it was forked from process {parent_pid}, which had used an "
            "object store, and obstore's I/O runtime does not survive fork() (a request would hang). Start worker "
            "processes with the 'spawn' or 'forkserver' method (multiprocessing.get_context('spawn')), or use "
            "object-store tables only in the processes that fork, not in the parent"
        )


class RewriteProcessError(DeltaError):
    """A process forked to rewrite part of an OPTIMIZE ended without its results.

    It was killed (by the out-of-memory killer, or by hand) or failed in a way that could
    not be carried back as its own error. Nothing was committed and every file written for
    the run was removed. Running it again can succeed; if the process was killed for memory,
    a smaller ``max_file_size`` makes each bin fit.
    """

    retryable = True


# ------------------------------------------------------------------ across processes


def error_from_report(class_name: str, message: str) -> DeltaError:
    """The error a report names (its class name and message), for errors that crossed a process boundary as text.

    A Spark executor's error reaches the driver, and a job's error reaches the Airflow
    worker, as text; this rebuilds it as the named class, so the caller can catch it by
    class and read its ``retryable``. The instance carries the message only (not the
    attributes its constructor would set). A name that is not an engine error class
    gives a plain :class:`DeltaError`.
    """
    cls = globals().get(class_name)
    if not (isinstance(cls, type) and issubclass(cls, DeltaError)):
        cls = DeltaError
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    return error


# ----------------------------------------------------------------- maintenance


class RetentionTooShortError(DeltaError):
    """VACUUM was asked to keep removed files for less than the table's ``delta.deletedFileRetentionDuration``.

    Shorter retention can delete files that readers of older versions, or writers still
    committing, need; it is refused unless the caller opts out explicitly.
    """

    def __init__(self, requested_ms: int, default_ms: int) -> None:
        self.requested_ms = requested_ms
        self.default_ms = default_ms
        super().__init__(
            f"refusing to vacuum with a retention of {requested_ms} ms, shorter than the table's "
            f"delta.deletedFileRetentionDuration of {default_ms} ms: time travel to older versions and "
            "concurrent writers may still need those files; pass a longer retention, or "
            "enforce_retention_duration=False if you are sure"
        )


class VacuumLiteNotPossibleError(DeltaError):
    """A lite VACUUM would need commits that log cleanup has deleted (Delta's ``DELTA_CANNOT_VACUUM_LITE``).

    Lite mode finds its files in the commits since the last VACUUM (``_delta_log/_last_vacuum_info``);
    when some of them are gone, files they removed would never be found. Running again
    cannot help; a full VACUUM lists the table instead, and records where the next lite
    one may start.
    """

    def __init__(self, table_root: str, first_needed: int, earliest_commit: int | None) -> None:
        self.table_root = table_root
        self.first_needed = first_needed
        self.earliest_commit = earliest_commit
        have = f"the earliest commit left is {earliest_commit}" if earliest_commit is not None else "no commit file is left"
        super().__init__(
            f"VACUUM lite of {table_root} needs the commits from version {first_needed} on to find every removed file, "
            f"but {have} (log cleanup deleted the others); run VACUUM with mode='full' once, then lite works again"
        )


class RestoreFilesMissingError(DeltaError):
    """RESTORE needs data or deletion vector files of the target version that no longer exist (vacuumed)."""

    def __init__(self, version: int, missing: Sequence[str], total: int) -> None:
        self.version = version
        self.missing = list(missing)
        self.total = total
        shown = ", ".join(repr(p) for p in self.missing)
        more = f" and {total - len(self.missing)} more" if total > len(self.missing) else ""
        super().__init__(
            f"cannot restore version {version}: {total} file(s) it needs are gone, probably vacuumed: "
            f"{shown}{more}; nothing was committed; restore a newer version whose files still exist"
        )


# ------------------------------------------------------- convert and manifests


class ConvertSourceError(DeltaError):
    """CONVERT TO DELTA refused a directory as it is: a file that is not parquet, file schemas
    that cannot be merged, or directories that do not match the partition schema.

    Not retryable: the message names the file or directory and what to change.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot convert {path!r} to Delta: {reason}")


class ManifestNotSupportedError(DeltaError):
    """Symlink manifests cannot describe this table (deletion vectors, column mapping), as in Delta.

    Presto, Trino and Athena read every row of each listed file, so a file with a deletion
    vector would show deleted rows, and column-mapped physical names would not match the
    schema they know. Not retryable until the table no longer has them.
    """

    def __init__(self, table_uri: str, reason: str) -> None:
        self.table_uri = table_uri
        self.reason = reason
        super().__init__(f"cannot generate symlink manifests for {table_uri!r}: {reason}")
