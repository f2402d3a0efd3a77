"""CONVERT TO DELTA: a directory of parquet files, optionally Hive-partitioned, becomes a Delta table.

Delta's ``ConvertToDeltaCommand``, file by file:

1. :func:`plan_convert` lists the directory (never following links, skipping hidden
   ``_``/``.`` paths as Delta does, except ``<partition column>=`` directories) and reads
   each file's partition values from its directories, which must match the partition
   schema exactly (``year=2024/region=eu`` for ``year INT, region STRING``), Hive's
   ``%XX`` escapes and ``__HIVE_DEFAULT_PARTITION__`` (null) included. A directory that
   already holds a Delta table is refused.
2. Each file's parquet footer gives its schema (:func:`read_parquet_schema`); the schemas
   are merged as Spark merges parquet schemas (union of columns by name, one type per
   column) and made nullable; the partition columns follow. Then each footer gives the
   file's ``add`` with statistics (:func:`convert_file`, the engine's
   :func:`add_file_from_parquet`). Both per-file steps run on a bounded thread pool, or
   anywhere a :class:`FooterReader` sends them (the Spark backend runs them on executors).
3. Version 0 (commitInfo ``CONVERT``, protocol, metaData, every ``add``) is committed in one
   atomic step. On local storage the commit is written into a hidden staging directory
   that is then renamed to ``_delta_log``: until that rename there is no ``_delta_log`` at
   all, so a failed or killed conversion leaves none behind. On object stores the
   put-if-absent of ``00000000000000000000.json`` is the only write under ``_delta_log``.
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta.engine.errors import (
    ConvertSourceError,
    DeltaError,
    InvalidArgumentError,
    InvalidLogError,
    TableAlreadyExistsError,
)
from airflow_delta.engine.model import row_tracking
from airflow_delta.engine.model.actions import AddFile, Metadata
from airflow_delta.engine.model.arrow_numpy import string_array
from airflow_delta.engine.model.json_text import json_text, utf8_bytes
from airflow_delta.engine.model.partition_values import parse_partition_strings, serialize_partition_value
from airflow_delta.engine.model.schema import delta_type_to_arrow
from airflow_delta.engine.model.table_features import writer_features
from airflow_delta.engine.operations.create import new_table_commit_info, new_table_state, table_exists
from airflow_delta.engine.read.listing import commit_path
from airflow_delta.engine.storage.fileio import FileIO, LocalFileIO
from airflow_delta.engine.storage.location import TableLocation

log = logging.getLogger(__name__)

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
STAGING_PREFIX = ".airflow-delta-convert-"
CONVERT_OPERATION = "CONVERT"
# Delta's primitive type names, and the SQL spellings Spark's DDL parser also takes.
_TYPE_NAMES = {
    "string": "string", "varchar": "string", "char": "string",
    "int": "integer", "integer": "integer", "long": "long", "bigint": "long",
    "short": "short", "smallint": "short", "byte": "byte", "tinyint": "byte",
    "float": "float", "real": "float", "double": "double", "boolean": "boolean", "bool": "boolean",
    "date": "date", "timestamp": "timestamp", "timestamp_ltz": "timestamp", "timestamp_ntz": "timestamp_ntz",
    "binary": "binary",
}
_DDL_COLUMN = re.compile(r"^\s*`?([^`\s]+)`?\s+([A-Za-z_]+)\s*(\(\s*\d+\s*(?:,\s*\d+\s*)?\))?\s*$")
_HIVE_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_MAX_FILES_PER_TASK = 256


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One parquet file to convert: its plain path relative to the root, size, and partition directory values.

    ``partition_values`` are the directory names' values, unescaped, in partition schema
    order (None for ``__HIVE_DEFAULT_PARTITION__``); :class:`ConvertPlan` normalises them.
    """

    relative_path: str
    size: int
    partition_values: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class ConvertPlan:
    """What a conversion will commit: the files, the partition schema and each file's log partition values."""

    location: TableLocation
    partition_schema: pa.Schema
    files: tuple[SourceFile, ...]
    # Per file, partition column -> the value as the log writes it (normalised through its type).
    log_partition_values: tuple[Mapping[str, str | None], ...] = field(repr=False)

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return tuple(self.partition_schema.names)


class FooterReader(Protocol):
    """Runs the per-file footer work of a conversion: locally on threads, or on Spark executors."""

    def schemas(self, plan: ConvertPlan) -> list[pa.Schema]:
        """Each file's parquet schema (:func:`read_parquet_schema`), in ``plan.files`` order."""
        ...

    def add_files(self, plan: ConvertPlan, metadata: Metadata) -> list[AddFile]:
        """Each file's ``add`` (:func:`convert_file`), in ``plan.files`` order."""
        ...


@dataclass(frozen=True, slots=True)
class ConvertResult:
    """The committed version 0: ``num_files`` converted, the table's schema and partition columns, metrics."""

    version: int
    num_files: int
    schema: pa.Schema
    partition_columns: tuple[str, ...]
    metrics: Mapping[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "numFiles": self.num_files,
            "partitionColumns": list(self.partition_columns),
            "schema": self.schema.to_string(show_schema_metadata=False),
            "metrics": dict(self.metrics),
        }


# ------------------------------------------------------------------ partition schema


def parse_partition_schema(spec: str | pa.Schema | Mapping[str, str] | None) -> pa.Schema:
    """The partition schema: ``"year INT, region STRING"`` (Spark DDL), a pyarrow schema, or ``{name: type}``."""
    if spec is None:
        return pa.schema([])
    if isinstance(spec, pa.Schema):
        return pa.schema([pa.field(f.name, f.type) for f in spec])
    if isinstance(spec, Mapping):
        return pa.schema([pa.field(str(k), _type_from_name(str(v), str(k))) for k, v in spec.items()])
    if not isinstance(spec, str):
        raise InvalidArgumentError(
            "partition_schema", spec, "pass a DDL string such as 'year INT, region STRING', a pyarrow schema or a mapping"
        )
    fields = []
    for part in _split_top_level(spec):
        match = _DDL_COLUMN.match(part)
        if match is None:
            raise InvalidArgumentError(
                "partition_schema", spec, f"each column is '<name> <type>', as in 'year INT, region STRING' (got {part!r})"
            )
        name, type_name, args = match.groups()
        fields.append(pa.field(name, _type_from_name(type_name + (args or ""), name)))
    if not fields:
        raise InvalidArgumentError("partition_schema", spec, "name at least one column, or pass None")
    return pa.schema(fields)


def _split_top_level(spec: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in spec:  # a schema string: a few dozen characters
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _type_from_name(type_name: str, column: str) -> pa.DataType:
    normalized = re.sub(r"\s+", "", type_name.lower())
    delta_name = _TYPE_NAMES.get(normalized, normalized if normalized.startswith("decimal") else None)
    if delta_name is None:
        raise InvalidArgumentError(
            "partition_schema", type_name,
            f"column {column!r}: use a primitive type (STRING, INT, BIGINT, SMALLINT, TINYINT, FLOAT, DOUBLE, "
            "BOOLEAN, DATE, TIMESTAMP, TIMESTAMP_NTZ, BINARY, DECIMAL(p,s))",
        )
    try:
        return delta_type_to_arrow(delta_name)
    except DeltaError as exc:
        raise InvalidArgumentError("partition_schema", type_name, f"column {column!r}: {exc}") from exc


# ------------------------------------------------------------------ planning


def plan_convert(location: TableLocation, partition_schema: pa.Schema) -> ConvertPlan:
    """List the parquet files below the root and read their partition values; refuse what cannot be converted."""
    if location.io.info(location.root) is not None:
        raise ConvertSourceError(location.uri, "it is a file, not a directory; pass the directory that holds it")
    if table_exists(location.io, location.root):
        raise TableAlreadyExistsError(location.uri)
    root = posixpath.normpath(location.root)
    columns = tuple(partition_schema.names)
    lowered = [c.lower() for c in columns]
    if len(set(lowered)) != len(lowered):
        raise InvalidArgumentError("partition_schema", columns, "name each partition column once")
    files: list[SourceFile] = []
    for info in location.io.walk(location.root):
        relative = posixpath.normpath(info.path)[len(root) + 1 :]
        parts = relative.split("/")
        if _is_hidden(parts, lowered):
            continue
        files.append(SourceFile(relative, info.size, _partition_dirs(location, relative, parts[:-1], columns)))
    if not files:
        raise ConvertSourceError(
            location.uri, "there are no parquet files to convert (hidden _ and . paths are skipped); "
            "check the path, or create an empty table with DeltaTable.create"
        )
    files.sort(key=lambda f: f.relative_path)
    return ConvertPlan(location, partition_schema, tuple(files), _log_partition_values(location, files, partition_schema))


def _is_hidden(parts: Sequence[str], partition_columns: Sequence[str]) -> bool:
    """Delta's rule: a ``_`` or ``.`` component hides the path, except a partition directory."""
    for part in parts:
        if part.startswith(("_", ".")):
            name = _unescape(part.split("=", 1)[0]).lower() if "=" in part else None
            if name not in partition_columns:
                return True
    return False


def _partition_dirs(
    location: TableLocation, relative: str, dirs: Sequence[str], columns: Sequence[str]
) -> tuple[str | None, ...]:
    if not columns:
        if any("=" in d for d in dirs):
            raise ConvertSourceError(
                f"{location.uri}/{relative}",
                f"it is in the partition directory {'/'.join(dirs)!r} but no partition schema was given; pass "
                "partition_schema (e.g. 'year INT, region STRING') naming the partition columns in directory order",
            )
        return ()
    expected = "/".join(f"{c}=..." for c in columns)
    if len(dirs) != len(columns) or not all("=" in d for d in dirs):
        raise ConvertSourceError(
            f"{location.uri}/{relative}",
            f"expected {len(columns)} partition director{'y' if len(columns) == 1 else 'ies'} {expected} (the "
            f"partition schema), found {'/'.join(dirs) or 'none'!r}; move the file, or fix the partition schema",
        )
    values: list[str | None] = []
    for directory, column in zip(dirs, columns, strict=True):
        name, raw = directory.split("=", 1)
        if _unescape(name).lower() != column.lower():
            raise ConvertSourceError(
                f"{location.uri}/{relative}",
                f"directory {directory!r} is not partition column {column!r}; expected {expected} in this order",
            )
        value = _unescape(raw)
        values.append(None if value in (HIVE_NULL, "") else value)
    return tuple(values)


def _unescape(text: str) -> str:
    """Hive's ``unescapePathName``: ``%XX`` back to the character."""
    return _HIVE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text) if "%" in text else text


def _log_partition_values(
    location: TableLocation, files: Sequence[SourceFile], partition_schema: pa.Schema
) -> tuple[Mapping[str, str | None], ...]:
    """Each file's partition values as the log writes them, parsed through the column's type once per distinct value."""
    if not len(partition_schema):
        return tuple({} for _ in files)
    normalized: list[dict[str | None, str | None]] = []
    for i, f in enumerate(partition_schema):
        distinct = sorted({file.partition_values[i] for file in files} - {None})
        try:
            typed = parse_partition_strings(string_array(distinct), f.type, f.name)
        except InvalidLogError as exc:
            raise ConvertSourceError(
                location.uri,
                f"partition directory values {distinct[:5]} of column {f.name!r} are not all of type {f.type} "
                f"({exc}); fix the partition schema's type",
            ) from exc
        bad = [d for d, v in zip(distinct, typed.to_pylist(), strict=True) if v is None]
        if bad:
            raise ConvertSourceError(
                location.uri, f"partition directory value(s) {bad[:5]} of column {f.name!r} cannot be read as {f.type}"
            )
        mapping: dict[str | None, str | None] = {None: None}
        for raw, value in zip(distinct, typed.to_pylist(), strict=True):
            mapping[raw] = serialize_partition_value(value, f.type)
        normalized.append(mapping)
    names = partition_schema.names
    by_dirs: dict[tuple[str | None, ...], Mapping[str, str | None]] = {}
    for file in files:
        if file.partition_values not in by_dirs:
            by_dirs[file.partition_values] = {
                name: normalized[i][raw] for i, (name, raw) in enumerate(zip(names, file.partition_values, strict=True))
            }
    return tuple(by_dirs[file.partition_values] for file in files)


# ------------------------------------------------------------------ per-file work (threads or executors)


def read_parquet_schema(io: FileIO, root: str, relative_path: str) -> pa.Schema:
    """A file's schema from its parquet footer; a file that is not parquet is a :class:`ConvertSourceError`."""
    try:
        with io.open_input_file(f"{root}/{relative_path}") as f:
            return pq.read_schema(f)
    except (pa.ArrowInvalid, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise ConvertSourceError(
            f"{root}/{relative_path}",
            f"it is not a parquet file ({exc}); remove or move it (or give it a name starting with _ or . to have "
            "it skipped), then convert again",
        ) from exc


def convert_file(io: FileIO, root: str, source: SourceFile, partition_values: Mapping[str, str | None],
                 metadata: Metadata, collect_stats: bool = True) -> AddFile:
    """One file's ``add`` action: size and modification time from storage, statistics from the footer."""
    from airflow_delta.engine.write.data_files import add_file_from_parquet

    try:
        add = add_file_from_parquet(io, root, source.relative_path, partition_values, metadata)
    except (pa.ArrowInvalid, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise ConvertSourceError(f"{root}/{source.relative_path}", f"its parquet footer cannot be read ({exc})") from exc
    return add if collect_stats else replace(add, stats=None)


class ThreadPoolFooterReader:
    """Footers read on a bounded pool of threads in this process (the default backend)."""

    def __init__(self, parallelism: int = 8, collect_stats: bool = True) -> None:
        self.parallelism = parallelism
        self.collect_stats = collect_stats

    def _map(self, fn: Callable[[int], Any], count: int) -> list[Any]:
        # Chunks of files per task, not one future per file: with 100,000 files the futures
        # themselves would cost more than a footer read.
        size = max(1, min(_MAX_FILES_PER_TASK, -(-count // (self.parallelism * 4))))
        chunks = [range(start, min(start + size, count)) for start in range(0, count, size)]
        with ThreadPoolExecutor(max_workers=max(1, min(self.parallelism, len(chunks)))) as pool:
            return [item for chunk in pool.map(lambda c: [fn(i) for i in c], chunks) for item in chunk]

    def schemas(self, plan: ConvertPlan) -> list[pa.Schema]:
        io, root = plan.location.io, plan.location.root
        return self._map(lambda i: read_parquet_schema(io, root, plan.files[i].relative_path), len(plan.files))

    def add_files(self, plan: ConvertPlan, metadata: Metadata) -> list[AddFile]:
        io, root = plan.location.io, plan.location.root
        return self._map(
            lambda i: convert_file(io, root, plan.files[i], plan.log_partition_values[i], metadata, self.collect_stats),
            len(plan.files),
        )


# ------------------------------------------------------------------ schema


def merge_file_schemas(plan: ConvertPlan, schemas: Sequence[pa.Schema]) -> pa.Schema:
    """The table schema: the files' columns merged by name (one type each), nullable, then the partition columns."""
    distinct: dict[pa.Schema, str] = {}
    for source, schema in zip(plan.files, schemas, strict=True):
        distinct.setdefault(schema.remove_metadata(), source.relative_path)
    merged: pa.Schema | None = None
    merged_from: dict[str, str] = {}
    for schema, path in distinct.items():
        if merged is None:
            merged, merged_from = schema, {name: path for name in schema.names}
            continue
        for f in schema:
            if f.name in merged.names and not merged.field(f.name).type.equals(f.type):
                raise ConvertSourceError(
                    plan.location.uri,
                    f"column {f.name!r} is {merged.field(f.name).type} in {merged_from[f.name]!r} but {f.type} in "
                    f"{path!r}; rewrite the files so that each column has one type",
                )
        merged = pa.unify_schemas([merged, schema])
        for name in schema.names:
            merged_from.setdefault(name, path)
    assert merged is not None
    data_fields = [pa.field(f.name, f.type, nullable=True) for f in merged]
    data_lower = {f.name.lower() for f in data_fields}
    clash = [c for c in plan.partition_columns if c.lower() in data_lower]
    if clash:
        raise ConvertSourceError(
            plan.location.uri,
            f"partition column(s) {clash} are also columns inside the data files; a partition column's value must "
            "come from its directory only: drop it from the partition schema or from the files",
        )
    return pa.schema(data_fields + [pa.field(f.name, f.type, nullable=True) for f in plan.partition_schema])


# ------------------------------------------------------------------ the conversion


def convert_to_delta(
    location: TableLocation,
    partition_schema: str | pa.Schema | Mapping[str, str] | None = None,
    *,
    properties: Mapping[str, str] | None = None,
    name: str | None = None,
    description: str | None = None,
    collect_stats: bool = True,
    parallelism: int = 8,
    reader: FooterReader | None = None,
    post_commit: Callable[[int, Sequence[Mapping[str, Any]]], None] | None = None,
) -> ConvertResult:
    """Convert the parquet files below ``location`` into a Delta table; returns version 0's result."""
    _check_convert_properties(properties)
    plan = plan_convert(location, parse_partition_schema(partition_schema))
    reader = reader if reader is not None else ThreadPoolFooterReader(parallelism, collect_stats)
    schema = merge_file_schemas(plan, reader.schemas(plan))
    protocol, metadata, _ = new_table_state(schema, plan.partition_columns, properties, name, description)
    adds = reader.add_files(plan, metadata)
    if not collect_stats:
        adds = [replace(a, stats=None) for a in adds]
    row_ids: list[dict[str, Any]] = []
    if row_tracking.is_supported(writer_features(protocol), metadata):
        # Version 0 assigns the files' row IDs as any commit would (they need numRecords).
        adds, mark = row_tracking.assign_row_tracking(adds, row_tracking.MISSING_HIGH_WATER_MARK, 0)
        if mark != row_tracking.MISSING_HIGH_WATER_MARK:
            row_ids.append({"domainMetadata": row_tracking.high_water_mark_domain(mark).to_json()})
    commit_info = new_table_commit_info(
        metadata,
        CONVERT_OPERATION,
        {
            "numFiles": len(adds),
            "partitionedBy": json_text(list(plan.partition_columns)),
            "collectStats": collect_stats,
            "sourceFormat": "parquet",
        },
        {"numConvertedFiles": len(adds)},
        is_blind_append=False,
    )
    actions: list[dict[str, Any]] = [
        {"commitInfo": commit_info}, {"protocol": protocol.to_json()}, {"metaData": metadata.to_json()},
    ]
    actions.extend(row_ids)
    actions.extend({"add": a.to_json()} for a in adds)
    body = utf8_bytes("".join(json_text(a) + "\n" for a in actions), "CONVERT TO DELTA")
    publish_version_zero(location, body)
    log.info("converted %d parquet file(s) at %s into a Delta table", len(adds), location.uri)
    if post_commit is not None:
        post_commit(0, actions)
    return ConvertResult(
        version=0, num_files=len(adds), schema=schema, partition_columns=plan.partition_columns,
        metrics={"numConvertedFiles": len(adds)},
    )


def _check_convert_properties(properties: Mapping[str, str] | None) -> None:
    """Refuse properties that would make version 0 describe the files wrongly.

    Column mapping would give the columns physical names the files do not have (every value
    would read as null); a CHECK constraint or invariant would claim rows that were never
    checked. Both can be added once the table exists.
    """
    for key, value in (properties or {}).items():
        lowered = str(key).lower()
        if lowered == "delta.columnmapping.mode" and str(value).strip().lower() != "none":
            raise InvalidArgumentError(
                "properties", {key: value},
                "CONVERT keeps the files' column names: convert without column mapping, then enable it",
            )
        if lowered.startswith("delta.constraints."):
            raise InvalidArgumentError(
                "properties", {key: value},
                "CONVERT does not check existing rows: convert first, then add the constraint (rows are checked then)",
            )


def publish_version_zero(location: TableLocation, body: bytes) -> None:
    """Make ``body`` version 0 in one atomic step, leaving no ``_delta_log`` if it does not happen.

    Local storage: the commit goes into a hidden staging directory below the root, which
    one ``rename`` turns into ``_delta_log`` (refused by the kernel when a non-empty
    ``_delta_log`` appeared meanwhile). Elsewhere, and when an empty ``_delta_log`` is
    already there: put-if-absent of the commit file.
    """
    io, root = location.io, location.root
    log_dir = f"{root}/_delta_log"
    if not isinstance(io, LocalFileIO) or io.is_dir(log_dir):
        if not io.put_if_absent(commit_path(root, 0), body):
            raise TableAlreadyExistsError(location.uri)
        return
    staging = f"{root}/{STAGING_PREFIX}{uuid.uuid4().hex}"
    staged_commit = f"{staging}/{posixpath.basename(commit_path(root, 0))}"
    try:
        if not io.put_if_absent(staged_commit, body):  # a fresh name: cannot exist
            raise TableAlreadyExistsError(location.uri)
        try:
            os.rename(staging, log_dir)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise TableAlreadyExistsError(location.uri) from exc
            raise
    finally:
        _remove_staging(io, staging, staged_commit)


def _remove_staging(io: FileIO, staging: str, staged_commit: str) -> None:
    """Remove the staging directory if it is still there (the rename did not happen)."""
    if not io.is_dir(staging):
        return
    try:
        io.delete(staged_commit)
    except FileNotFoundError:
        pass
    try:
        os.rmdir(staging)
    except OSError:
        log.warning("could not remove the staging directory %s of a failed conversion", staging)


__all__ = [
    "ConvertPlan",
    "ConvertResult",
    "FooterReader",
    "SourceFile",
    "ThreadPoolFooterReader",
    "convert_file",
    "convert_to_delta",
    "merge_file_schemas",
    "parse_partition_schema",
    "plan_convert",
    "publish_version_zero",
    "read_parquet_schema",
]
