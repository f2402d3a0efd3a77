"""The Delta transaction-log engine: reads, replays and commits ``_delta_log``.

It imports neither Airflow nor Spark. This module is its public API: the Spark
programs, the Airflow operators, the CLI, the example DAGs and users import from here,
never from the subpackages, whose layout may change.

Tables and their state
    :class:`DeltaTable` (the facade: ``snapshot``, ``history``, ``create``, ``append``,
    ``delete``, ``transaction``, ``checkpoint``, ``cleanup_log``, ``vacuum``, ``restore``,
    ``health``), :class:`Snapshot`
    (``files``, ``plan_files``, ``file_uris``, ``to_arrow``), :class:`TableProperties`.

Watching the log (schedulers, sensors)
    ``DeltaTable.commits_since`` (:class:`CommitSummary` per commit after a version,
    reading only those commit files), ``DeltaTable.conflicting_commits`` and
    :class:`ConflictWatch` (:class:`CommitConflict`: would a commit conflict with work
    planned at a read version, by the commit path's own rules).
OPTIMIZE
    ``DeltaTable.optimize`` with :class:`OptimizeOptions`, returning :class:`OptimizeResult`
    (per partition :class:`PartitionOptimizePlan`); for a driver that rewrites elsewhere,
    :func:`plan_optimize` (:class:`OptimizePlan` of :class:`OptimizeBin`) and
    :func:`rewrite_bin` (one bin's files rewritten, where they are read), and Delta's
    Z-value pieces :func:`range_bounds`, :func:`range_ids_from_bounds`, :func:`interleave_bits`
    (and :func:`curve_key`, the Hilbert index of a clustered table's OPTIMIZE)
    and :data:`ZORDER_NUM_RANGES`.

Committing
    :class:`Transaction`, :class:`CommitOptions`, :class:`RetryPolicy`,
    :class:`IsolationLevel`, :class:`AppTransaction`, the committer interface
    (:class:`Committer` reporting :class:`Committed`, :class:`Conflicted` or
    :class:`RetryableFailure`; :class:`FileIOCommitter`), :class:`PostCommitHook`.

Per-file work elsewhere (Spark executors), committed by a driver
    :class:`TableContext` (a snapshot's location, protocol and metadata as a picklable
    value; ``DeltaTable.context(snapshot)``), :func:`predicate_read_bytes` (what finding a
    predicate's rows reads, from the footers), :func:`read_live_rows` (one data file's live
    rows and their physical positions), :func:`row_tracking_values` (their stable row IDs
    and commit versions, on a table where :func:`keeps_row_ids`: rewrites carry them as
    :data:`ROW_ID_COLUMN` / :data:`ROW_COMMIT_VERSION_COLUMN` for :func:`write_data_files`
    to keep); for another reader of the same files
    :func:`local_data_file_paths`, :func:`typed_partition_values`, :func:`deleted_row_positions`;
    :class:`WriterOptions`, :func:`write_data_files`
    (takes a snapshot or a context), :func:`write_change_data_files` (Change Data Feed
    ``cdc`` files: the table's columns plus :data:`CHANGE_TYPE_COLUMN`),
    :func:`add_file_from_parquet`.

Results, each with Delta's metrics
    :class:`AppendResult`, :class:`DeleteResult`, :class:`CheckpointResult`; maintenance:
    :class:`VacuumResult`, :class:`RestoreResult`, :class:`CheckpointRunResult` (with
    :class:`CheckpointOptions`), :class:`HealthReport` (:class:`SizeBucket`,
    :func:`size_histogram_png`).

Actions
    :class:`AddFile`, :class:`RemoveFile`, :class:`AddCDCFile`, :class:`Metadata`,
    :class:`Protocol`, :class:`SetTransaction`, :class:`DomainMetadata`,
    :class:`DeletionVectorDescriptor`; :func:`reader_features`, :func:`writer_features`.

Storage
    :class:`TableLocation`, :class:`FileIO`, :class:`LocalFileIO`, :class:`FileInfo`;
    :class:`ObjectStoreFileIO` (``s3://``, ``s3a://``, ``az://``, ``abfss://``, ``gs://``, with
    delta-rs's storage option keys) and :func:`storage_options_from_airflow_connection`
    (an Airflow connection's fields as those options).

Convert-to-Delta and symlink manifests
    ``DeltaTable.convert_to_delta`` (a parquet directory, optionally Hive-partitioned, to
    version 0; :class:`ConvertResult`), its pieces for other backends (:func:`plan_convert`,
    :class:`ConvertPlan`, :class:`SourceFile`, :func:`read_parquet_schema`,
    :func:`convert_file`, :func:`merge_file_schemas`, :func:`parse_partition_schema`,
    :class:`FooterReader`, :class:`ThreadPoolFooterReader`), and
    ``DeltaTable.generate_symlink_manifest`` (:class:`ManifestResult`; regenerated after each
    commit under :data:`SYMLINK_MANIFEST_PROPERTY`).
    VACUUM's listing for other backends: :func:`list_top_level`, :func:`list_table_files`
    (``under`` a directory), :func:`merge_listings` into a :class:`TableListing`, handed to
    ``DeltaTable.vacuum(list_files=...)`` (a :data:`ListFiles`).

Maintaining a lake (the ``fleet`` layer, loaded on first use; docs/fleet.md)
    :func:`resolve_fleet` and :func:`discover_tables` (:class:`DiscoveryResult`) name the
    tables; :func:`fleet_health`, :func:`iter_fleet_health` and :func:`table_health_record`
    read one :class:`TableHealthRecord` per table from the log only; :func:`plan_maintenance`
    turns them into a :class:`MaintenancePlan` under a :class:`MaintenanceBudget` (each
    :class:`Decision` says why); :func:`append_history` and :func:`read_history` keep the
    maintenance history (:class:`MaintenanceRecord`, :data:`MAINTENANCE_HISTORY_SCHEMA`) in a
    Delta table.

Writer-supplied column values
    :func:`identity_columns` (:class:`IdentityColumn`: start, step, high-water mark, the
    values a write may generate), :func:`with_identity_high_water_marks` (the metadata a
    write that generated identity values commits), :func:`generated_columns` and
    :func:`column_default_expressions` (the Spark SQL texts Spark evaluates).

Checkpoints and properties
    :func:`write_checkpoint` (of a snapshot in hand), :func:`parse_interval`.

Errors
    :class:`DeltaError` and every subclass; each says whether a retry can help
    (:class:`LogTooLargeError`: a log too large for this process's memory;
    :class:`LogMovedPastCommitError`, :class:`CommitOutcomeUnknownError` and
    :class:`AtomicWriteError`: what a commit that could not land tells its caller). A bad
    argument to any public verb or option is an :class:`InvalidArgumentError`; a bad
    file path in an action is an :class:`InvalidPathError`.

:func:`condition_mask` evaluates a SQL condition on an Arrow table as the engine's DELETE does
(the worker's MERGE evaluates its clause conditions with it).

:func:`stage_delete` stages a DELETE in an open transaction without committing it (for a
caller that commits with its own appId, tags and retries: the Spark jobs).

Every public name is loaded on first use (PEP 562 ``__getattr__``): ``import
airflow_delta.engine`` imports none of the engine's modules, and ``from airflow_delta.engine
import X`` imports the module that defines ``X`` and what that module needs, nothing else.
A task that deletes a few rows in the worker pays only for what a DELETE uses; one that
vacuums, only for the snapshot and VACUUM. The writer's dependencies (pyarrow.dataset,
pandas), obstore (:class:`ObjectStoreFileIO`, needed only where a table on an object store
is opened), sqlglot (SQL filters of the common shapes are read without it,
``engine/expressions/simple_filter.py``) and the convert, manifest, OPTIMIZE, VACUUM and
fleet pieces load only where they are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_delta.engine.checkpoint.output import CheckpointResult
    from airflow_delta.engine.checkpoint.writer import write_checkpoint
    from airflow_delta.engine.errors import (
        AppendOnlyViolationError,
        AtomicWriteError,
        ChecksumMismatchError,
        CommitFailedError,
        CommitNotSupportedError,
        CommitOutcomeUnknownError,
        ConcurrentAppendException,
        ConcurrentDeleteDeleteException,
        ConcurrentDeleteReadException,
        ConcurrentModificationError,
        ConcurrentTransactionException,
        ConstraintViolationError,
        ConvertSourceError,
        CorruptCheckpointError,
        CorruptCommitError,
        CorruptDataFileError,
        CorruptDeletionVectorError,
        DataFileNotFoundError,
        DeletionVectorsNotEnabledError,
        DeltaError,
        IdentityColumnWriteError,
        InvalidArgumentError,
        InvalidFilterError,
        InvalidLogError,
        InvalidPathError,
        InvalidSchemaError,
        InvalidTablePropertyError,
        InvalidTimestampError,
        InvalidTransactionError,
        InvalidZ85Error,
        LogMovedPastCommitError,
        LogNotContiguousError,
        LogTooLargeError,
        ManifestNotSupportedError,
        MetadataChangedException,
        MissingMetadataError,
        MissingProtocolError,
        MixedPySparkError,
        MultipleSourceRowsMatchedError,
        ObjectStoreForkError,
        PathOutsideTableError,
        ProtocolChangedException,
        RestoreFilesMissingError,
        RetentionTooShortError,
        RewriteProcessError,
        RowIndexOutOfRangeError,
        RowTrackingBackfillError,
        SchemaMismatchError,
        SparkAnalysisError,
        StorageAccessError,
        StorageUnavailableError,
        TableAlreadyExistsError,
        TableNotFoundError,
        TransactionAlreadyCommittedError,
        UnknownTablePropertyError,
        UnsupportedFeatureError,
        VacuumLiteNotPossibleError,
        VersionNotFoundError,
        error_from_report,
    )
    from airflow_delta.engine.expressions.condition_mask import condition_mask
    from airflow_delta.engine.fleet.discovery import (
        DEFAULT_DISCOVERY_DEPTH,
        DiscoveryResult,
        discover_tables,
        resolve_fleet,
    )
    from airflow_delta.engine.fleet.health import (
        TableHealthRecord,
        fleet_health,
        iter_fleet_health,
        table_health_record,
    )
    from airflow_delta.engine.fleet.history import (
        MAINTENANCE_HISTORY_SCHEMA,
        MaintenanceRecord,
        append_history,
        latest_health,
        read_history,
    )
    from airflow_delta.engine.fleet.plan import (
        Decision,
        MaintenanceBudget,
        MaintenancePlan,
        plan_maintenance,
    )
    from airflow_delta.engine.model.actions import (
        AddCDCFile,
        AddFile,
        DeletionVectorDescriptor,
        DomainMetadata,
        Metadata,
        Protocol,
        RemoveFile,
        SetTransaction,
    )
    from airflow_delta.engine.model.arrow_numpy import (
        bool_array,
        combined,
        indices_to_numpy,
        inner_hash_join,
        int32_array,
        int64_array,
        int64_to_numpy,
        mask_to_numpy,
    )
    from airflow_delta.engine.model.column_defaults import (
        IdentityColumn,
        column_default_expressions,
        generated_columns,
        identity_columns,
        with_identity_high_water_marks,
    )
    from airflow_delta.engine.model.properties import (
        TableProperties,
        parse_interval,
    )
    from airflow_delta.engine.model.row_tracking import ROW_COMMIT_VERSION as ROW_COMMIT_VERSION_COLUMN
    from airflow_delta.engine.model.row_tracking import ROW_ID as ROW_ID_COLUMN
    from airflow_delta.engine.model.row_tracking import keeps_row_ids
    from airflow_delta.engine.model.table_features import (
        reader_features,
        writer_features,
    )
    from airflow_delta.engine.operations.convert import (
        ConvertPlan,
        ConvertResult,
        FooterReader,
        SourceFile,
        ThreadPoolFooterReader,
        convert_file,
        merge_file_schemas,
        parse_partition_schema,
        plan_convert,
        read_parquet_schema,
    )
    from airflow_delta.engine.operations.delete import stage_delete
    from airflow_delta.engine.operations.health import size_histogram_png
    from airflow_delta.engine.operations.manifest import (
        SYMLINK_MANIFEST_PROPERTY,
        ManifestResult,
    )
    from airflow_delta.engine.operations.optimize import (
        ZORDER_NUM_RANGES,
        OptimizeBin,
        OptimizePlan,
        curve_key,
        interleave_bits,
        plan_optimize,
        range_bounds,
        range_ids_from_bounds,
        rewrite_bin,
    )
    from airflow_delta.engine.operations.optimize_result import OptimizeResult, PartitionOptimizePlan
    from airflow_delta.engine.operations.options import CheckpointOptions
    from airflow_delta.engine.operations.results import (
        DELETE_METRIC_NAMES,
        AppendResult,
        CheckpointRunResult,
        DeleteResult,
        HealthReport,
        RestoreResult,
        SizeBucket,
        VacuumResult,
    )
    from airflow_delta.engine.operations.vacuum import (
        ListFiles,
        TableListing,
        list_table_files,
        list_top_level,
        merge_listings,
    )
    from airflow_delta.engine.read.snapshot import Snapshot
    from airflow_delta.engine.read.table_context import (
        TableContext,
        deleted_row_positions,
        local_data_file_paths,
        predicate_read_bytes,
        read_live_rows,
        row_tracking_values,
        split_by_row_groups,
        typed_partition_values,
    )
    from airflow_delta.engine.storage.fileio import (
        FileInfo,
        FileIO,
        LocalFileIO,
    )
    from airflow_delta.engine.storage.location import TableLocation
    from airflow_delta.engine.storage.object_store import ObjectStoreFileIO
    from airflow_delta.engine.storage.options import storage_options_from_airflow_connection
    from airflow_delta.engine.table import DeltaTable
    from airflow_delta.engine.write.committer import (
        Committed,
        Committer,
        Conflicted,
        FileIOCommitter,
        RetryableFailure,
    )
    from airflow_delta.engine.write.concurrent_commits import (
        CommitConflict,
        CommitSummary,
        ConflictWatch,
    )
    from airflow_delta.engine.write.conflicts import IsolationLevel
    from airflow_delta.engine.write.data_files import (
        CHANGE_TYPE_COLUMN,
        add_file_from_parquet,
        write_change_data_files,
        write_data_files,
    )
    from airflow_delta.engine.write.options import (
        AppTransaction,
        CommitOptions,
        OptimizeOptions,
        WriterOptions,
    )
    from airflow_delta.engine.write.retry import RetryPolicy
    from airflow_delta.engine.write.transaction import (
        PostCommitHook,
        Transaction,
    )

# Every public name is loaded on first use (PEP 562): ``from airflow_delta.engine import
# DeltaTable`` imports the facade and what it needs at import, not every layer. The
# names by the module that defines them; a public name that differs from the module's
# is in _RENAMED.
_PUBLIC_BY_MODULE: dict[str, tuple[str, ...]] = {
    "airflow_delta.engine.checkpoint.output": ("CheckpointResult",),
    "airflow_delta.engine.checkpoint.writer": ("write_checkpoint",),
    "airflow_delta.engine.errors": (
        "AppendOnlyViolationError", "AtomicWriteError", "ChecksumMismatchError", "CommitFailedError",
        "CommitNotSupportedError", "CommitOutcomeUnknownError", "ConcurrentAppendException",
        "ConcurrentDeleteDeleteException", "ConcurrentDeleteReadException", "ConcurrentModificationError",
        "ConcurrentTransactionException", "ConstraintViolationError", "ConvertSourceError", "CorruptCheckpointError",
        "CorruptCommitError", "CorruptDataFileError", "CorruptDeletionVectorError", "DataFileNotFoundError",
        "DeletionVectorsNotEnabledError", "DeltaError", "IdentityColumnWriteError", "InvalidArgumentError",
        "InvalidFilterError", "InvalidLogError", "InvalidPathError", "InvalidSchemaError",
        "InvalidTablePropertyError", "InvalidTimestampError", "InvalidTransactionError", "InvalidZ85Error",
        "LogMovedPastCommitError", "LogNotContiguousError", "LogTooLargeError", "ManifestNotSupportedError",
        "MetadataChangedException", "MissingMetadataError", "MissingProtocolError", "MixedPySparkError",
        "MultipleSourceRowsMatchedError", "ObjectStoreForkError", "PathOutsideTableError", "ProtocolChangedException",
        "RestoreFilesMissingError", "RetentionTooShortError", "RewriteProcessError", "RowIndexOutOfRangeError",
        "RowTrackingBackfillError", "SchemaMismatchError", "SparkAnalysisError", "StorageAccessError",
        "StorageUnavailableError", "TableAlreadyExistsError", "TableNotFoundError", "TransactionAlreadyCommittedError",
        "UnknownTablePropertyError", "UnsupportedFeatureError", "VacuumLiteNotPossibleError", "VersionNotFoundError",
        "error_from_report",
    ),
    "airflow_delta.engine.expressions.condition_mask": ("condition_mask",),
    "airflow_delta.engine.fleet.discovery": (
        "DEFAULT_DISCOVERY_DEPTH", "DiscoveryResult", "discover_tables", "resolve_fleet",
    ),
    "airflow_delta.engine.fleet.health": (
        "TableHealthRecord", "fleet_health", "iter_fleet_health", "table_health_record",
    ),
    "airflow_delta.engine.fleet.history": (
        "MAINTENANCE_HISTORY_SCHEMA", "MaintenanceRecord", "append_history", "latest_health", "read_history",
    ),
    "airflow_delta.engine.fleet.plan": ("Decision", "MaintenanceBudget", "MaintenancePlan", "plan_maintenance"),
    "airflow_delta.engine.model.actions": (
        "AddCDCFile", "AddFile", "DeletionVectorDescriptor", "DomainMetadata", "Metadata", "Protocol", "RemoveFile",
        "SetTransaction",
    ),
    "airflow_delta.engine.model.arrow_numpy": (
        "bool_array", "combined", "indices_to_numpy", "inner_hash_join", "int32_array", "int64_array",
        "int64_to_numpy", "mask_to_numpy",
    ),
    "airflow_delta.engine.model.column_defaults": (
        "IdentityColumn", "column_default_expressions", "generated_columns", "identity_columns",
        "with_identity_high_water_marks",
    ),
    "airflow_delta.engine.model.properties": ("TableProperties", "parse_interval"),
    "airflow_delta.engine.model.row_tracking": ("ROW_COMMIT_VERSION_COLUMN", "ROW_ID_COLUMN", "keeps_row_ids"),
    "airflow_delta.engine.model.table_features": ("reader_features", "writer_features"),
    "airflow_delta.engine.operations.convert": (
        "ConvertPlan", "ConvertResult", "FooterReader", "SourceFile", "ThreadPoolFooterReader", "convert_file",
        "merge_file_schemas", "parse_partition_schema", "plan_convert", "read_parquet_schema",
    ),
    "airflow_delta.engine.operations.delete": ("stage_delete",),
    "airflow_delta.engine.operations.health": ("size_histogram_png",),
    "airflow_delta.engine.operations.manifest": ("ManifestResult", "SYMLINK_MANIFEST_PROPERTY"),
    "airflow_delta.engine.operations.optimize": (
        "OptimizeBin", "OptimizePlan", "ZORDER_NUM_RANGES", "curve_key", "interleave_bits", "plan_optimize",
        "range_bounds", "range_ids_from_bounds", "rewrite_bin",
    ),
    "airflow_delta.engine.operations.options": ("CheckpointOptions",),
    "airflow_delta.engine.operations.optimize_result": ("OptimizeResult", "PartitionOptimizePlan"),
    "airflow_delta.engine.operations.results": (
        "AppendResult", "CheckpointRunResult", "DELETE_METRIC_NAMES", "DeleteResult", "HealthReport",
        "RestoreResult", "SizeBucket", "VacuumResult",
    ),
    "airflow_delta.engine.operations.vacuum": (
        "ListFiles", "TableListing", "list_table_files", "list_top_level", "merge_listings",
    ),
    "airflow_delta.engine.read.snapshot": ("Snapshot",),
    "airflow_delta.engine.read.table_context": (
        "TableContext", "deleted_row_positions", "local_data_file_paths", "predicate_read_bytes", "read_live_rows",
        "row_tracking_values", "split_by_row_groups", "typed_partition_values",
    ),
    "airflow_delta.engine.storage.fileio": ("FileIO", "FileInfo", "LocalFileIO"),
    "airflow_delta.engine.storage.location": ("TableLocation",),
    "airflow_delta.engine.storage.object_store": ("ObjectStoreFileIO",),
    "airflow_delta.engine.storage.options": ("storage_options_from_airflow_connection",),
    "airflow_delta.engine.table": ("DeltaTable",),
    "airflow_delta.engine.write.committer": (
        "Committed", "Committer", "Conflicted", "FileIOCommitter", "RetryableFailure",
    ),
    "airflow_delta.engine.write.concurrent_commits": ("CommitConflict", "CommitSummary", "ConflictWatch"),
    "airflow_delta.engine.write.conflicts": ("IsolationLevel",),
    "airflow_delta.engine.write.data_files": (
        "CHANGE_TYPE_COLUMN", "add_file_from_parquet", "write_change_data_files", "write_data_files",
    ),
    "airflow_delta.engine.write.options": ("AppTransaction", "CommitOptions", "OptimizeOptions", "WriterOptions"),
    "airflow_delta.engine.write.retry": ("RetryPolicy",),
    "airflow_delta.engine.write.transaction": ("PostCommitHook", "Transaction"),
}
_RENAMED = {"ROW_COMMIT_VERSION_COLUMN": "ROW_COMMIT_VERSION", "ROW_ID_COLUMN": "ROW_ID"}
_MODULE_OF = {name: module for module, names in _PUBLIC_BY_MODULE.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "CHANGE_TYPE_COLUMN",
    "DEFAULT_DISCOVERY_DEPTH",
    "DELETE_METRIC_NAMES",
    "MAINTENANCE_HISTORY_SCHEMA",
    "ROW_COMMIT_VERSION_COLUMN",
    "ROW_ID_COLUMN",
    "SYMLINK_MANIFEST_PROPERTY",
    "ZORDER_NUM_RANGES",
    "AddCDCFile",
    "AddFile",
    "AppTransaction",
    "AppendOnlyViolationError",
    "AppendResult",
    "AtomicWriteError",
    "CheckpointOptions",
    "CheckpointResult",
    "CheckpointRunResult",
    "ChecksumMismatchError",
    "CommitConflict",
    "CommitFailedError",
    "CommitNotSupportedError",
    "CommitOptions",
    "CommitOutcomeUnknownError",
    "CommitSummary",
    "Committed",
    "Committer",
    "ConcurrentAppendException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentDeleteReadException",
    "ConcurrentModificationError",
    "ConcurrentTransactionException",
    "ConflictWatch",
    "Conflicted",
    "ConstraintViolationError",
    "ConvertPlan",
    "ConvertResult",
    "ConvertSourceError",
    "CorruptCheckpointError",
    "CorruptCommitError",
    "CorruptDataFileError",
    "CorruptDeletionVectorError",
    "DataFileNotFoundError",
    "Decision",
    "DeleteResult",
    "DeletionVectorDescriptor",
    "DeletionVectorsNotEnabledError",
    "DeltaError",
    "DeltaTable",
    "DiscoveryResult",
    "DomainMetadata",
    "FileIO",
    "FileIOCommitter",
    "FileInfo",
    "FooterReader",
    "HealthReport",
    "IdentityColumn",
    "IdentityColumnWriteError",
    "InvalidArgumentError",
    "InvalidFilterError",
    "InvalidLogError",
    "InvalidPathError",
    "InvalidSchemaError",
    "InvalidTablePropertyError",
    "InvalidTimestampError",
    "InvalidTransactionError",
    "InvalidZ85Error",
    "IsolationLevel",
    "ListFiles",
    "LocalFileIO",
    "LogMovedPastCommitError",
    "LogNotContiguousError",
    "LogTooLargeError",
    "MaintenanceBudget",
    "MaintenancePlan",
    "MaintenanceRecord",
    "ManifestNotSupportedError",
    "ManifestResult",
    "Metadata",
    "MetadataChangedException",
    "MissingMetadataError",
    "MissingProtocolError",
    "MixedPySparkError",
    "MultipleSourceRowsMatchedError",
    "ObjectStoreFileIO",
    "ObjectStoreForkError",
    "OptimizeBin",
    "OptimizeOptions",
    "OptimizePlan",
    "OptimizeResult",
    "PartitionOptimizePlan",
    "PathOutsideTableError",
    "PostCommitHook",
    "Protocol",
    "ProtocolChangedException",
    "RemoveFile",
    "RestoreFilesMissingError",
    "RestoreResult",
    "RetentionTooShortError",
    "RetryPolicy",
    "RetryableFailure",
    "RewriteProcessError",
    "RowIndexOutOfRangeError",
    "RowTrackingBackfillError",
    "SchemaMismatchError",
    "SetTransaction",
    "SizeBucket",
    "Snapshot",
    "SourceFile",
    "SparkAnalysisError",
    "StorageAccessError",
    "StorageUnavailableError",
    "TableAlreadyExistsError",
    "TableContext",
    "TableHealthRecord",
    "TableListing",
    "TableLocation",
    "TableNotFoundError",
    "TableProperties",
    "ThreadPoolFooterReader",
    "Transaction",
    "TransactionAlreadyCommittedError",
    "UnknownTablePropertyError",
    "UnsupportedFeatureError",
    "VacuumLiteNotPossibleError",
    "VacuumResult",
    "VersionNotFoundError",
    "WriterOptions",
    "add_file_from_parquet",
    "append_history",
    "bool_array",
    "column_default_expressions",
    "combined",
    "condition_mask",
    "convert_file",
    "curve_key",
    "deleted_row_positions",
    "discover_tables",
    "error_from_report",
    "fleet_health",
    "generated_columns",
    "identity_columns",
    "indices_to_numpy",
    "inner_hash_join",
    "int32_array",
    "int64_array",
    "int64_to_numpy",
    "interleave_bits",
    "iter_fleet_health",
    "keeps_row_ids",
    "latest_health",
    "list_table_files",
    "list_top_level",
    "local_data_file_paths",
    "mask_to_numpy",
    "merge_file_schemas",
    "merge_listings",
    "parse_interval",
    "parse_partition_schema",
    "plan_convert",
    "plan_maintenance",
    "plan_optimize",
    "predicate_read_bytes",
    "range_bounds",
    "range_ids_from_bounds",
    "read_history",
    "read_live_rows",
    "read_parquet_schema",
    "reader_features",
    "resolve_fleet",
    "rewrite_bin",
    "row_tracking_values",
    "size_histogram_png",
    "split_by_row_groups",
    "stage_delete",
    "storage_options_from_airflow_connection",
    "table_health_record",
    "typed_partition_values",
    "with_identity_high_water_marks",
    "write_change_data_files",
    "write_checkpoint",
    "write_data_files",
    "writer_features",
]
