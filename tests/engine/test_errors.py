"""Every error is a DeltaError and says whether a retry can help; the table below is the decision."""

from __future__ import annotations

import inspect

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from airflow_delta.engine import errors
from airflow_delta.engine.errors import CommitNotSupportedError, DeltaError
from airflow_delta.engine.storage.fileio import FileIO

# Deciding retryability is part of adding an error class: a new class missing here fails
# test_every_error_class_has_a_retry_decision.
RETRYABLE = {
    # conflicts with a concurrent writer: planning again on the newer snapshot can succeed
    "ConcurrentModificationError": True,
    "ProtocolChangedException": True,
    "MetadataChangedException": True,
    "ConcurrentTransactionException": True,
    "ConcurrentAppendException": True,
    "ConcurrentDeleteReadException": True,
    "ConcurrentDeleteDeleteException": True,
    # contention, storage failures, a transaction older than the log: a new attempt can land
    "CommitFailedError": True,
    # everything else fails again the same way
    "DeltaError": False,
    "TableNotFoundError": False,
    "TableAlreadyExistsError": False,
    "VersionNotFoundError": False,
    "InvalidLogError": False,
    "LogNotContiguousError": False,
    "MissingProtocolError": False,
    "MissingMetadataError": False,
    "CorruptCommitError": False,
    "CorruptCheckpointError": False,
    "ChecksumMismatchError": False,
    "PathOutsideTableError": False,
    # maintenance: a shorter retention or vacuumed files stay so on a retry
    "RetentionTooShortError": False,
    "RewriteProcessError": True,
    "VacuumLiteNotPossibleError": False,
    "RestoreFilesMissingError": False,
    # the parquet directory must be fixed first (a stray file, a type clash, a bad partition directory)
    "ConvertSourceError": False,
    # the table has deletion vectors or column mapping: manifests stay impossible until it does not
    "ManifestNotSupportedError": False,
    "UnsupportedFeatureError": False,
    "InvalidFilterError": False,
    "SchemaMismatchError": False,
    "InvalidTablePropertyError": False,
    "ConstraintViolationError": False,
    "AppendOnlyViolationError": False,
    "MultipleSourceRowsMatchedError": False,  # the same source matches the same rows again
    "CommitNotSupportedError": False,
    "TransactionAlreadyCommittedError": False,  # the work is done already
    "CorruptDeletionVectorError": False,
    "InvalidZ85Error": False,
    "InvalidTransactionError": False,
    "InvalidSchemaError": False,
    "UnknownTablePropertyError": False,
    "DataFileNotFoundError": False,
    "CorruptDataFileError": False,
    "InvalidTimestampError": False,
    "DeletionVectorsNotEnabledError": False,
    "RowIndexOutOfRangeError": False,
    "LogTooLargeError": False,  # the same load in the same process runs out of memory again
    "InvalidPathError": False,  # the same path is refused again
    "InvalidArgumentError": False,  # a bad argument stays bad

    # the log moved past the commit's version: nothing written, a new transaction can land
    "LogMovedPastCommitError": True,
    # written but maybe invisible: a blind retry could duplicate it
    "CommitOutcomeUnknownError": False,
    # a temporary file vanished before it was published: nothing written, try again
    "AtomicWriteError": True,
    # object stores: credentials, a missing bucket, a bad request fail the same way again
    "StorageAccessError": False,
    # throttling, 5xx, connection failures that outlasted the FileIO's retries: later can succeed
    "StorageUnavailableError": True,
    # Spark refused the job's input (a missing path, an unknown column): the same input fails again
    "SparkAnalysisError": False,
    # a forked child of a process that used obstore: every request in this process would hang
    "ObjectStoreForkError": False,
    # enabling row tracking needs Delta's backfill: the same commit is refused again
    "RowTrackingBackfillError": False,
    # a value for a GENERATED ALWAYS identity column, an UPDATE of one: the same write is refused again
    "IdentityColumnWriteError": False,
    # pyspark and pyspark-client of different releases in one folder: only a reinstall fixes it
    "MixedPySparkError": False,
}


def error_classes() -> dict[str, type[DeltaError]]:
    return {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, DeltaError) and cls.__module__ == errors.__name__
    }


def test_every_error_class_has_a_retry_decision() -> None:
    assert set(error_classes()) == set(RETRYABLE)


@pytest.mark.parametrize("name", sorted(RETRYABLE))
def test_retryable_is_what_was_decided(name: str) -> None:
    cls = error_classes()[name]
    assert cls.retryable is RETRYABLE[name]
    assert isinstance(cls.retryable, bool)


def test_conflicts_carry_the_winner_and_are_retryable() -> None:
    exc = errors.ConcurrentAppendException(
        "files were added", winning_version=7, winning_operation="WRITE", conflicting=["p=a"]
    )
    assert exc.retryable and exc.winning_version == 7 and exc.winning_operation == "WRITE"
    assert "version 7" in str(exc) and "'p=a'" in str(exc)


def test_storage_without_atomic_create_raises_a_delta_error_that_says_what_to_do(tmp_path: object) -> None:
    io = FileIO(pafs.LocalFileSystem())
    with pytest.raises(CommitNotSupportedError, match="conditional writes") as info:
        io.put_if_absent(f"{tmp_path}/x.json", b"{}")
    assert isinstance(info.value, DeltaError) and not info.value.retryable


def test_a_commit_refused_by_storage_is_final(table_path: str) -> None:
    from airflow_delta.engine import DeltaTable

    DeltaTable.create(table_path, pa.schema([("a", pa.int64())]))
    table = DeltaTable(table_path, io=FileIO(pafs.LocalFileSystem()))
    with pytest.raises(DeltaError) as info:
        table.append(pa.table({"a": [1]}))
    assert type(info.value) is CommitNotSupportedError and info.value.retryable is False
