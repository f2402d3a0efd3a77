"""Delta log actions as immutable objects, and the Arrow layout of file actions.

Single actions that a snapshot holds one of (protocol, metadata, ...) are frozen
dataclasses. File actions (add/remove), of which a table may hold millions, are never
turned into Python objects on the read path: replay keeps them as an Arrow table of
:data:`FILE_ACTIONS_SCHEMA`. :class:`AddFile` / :class:`RemoveFile` exist for the write
path, where a transaction stages a handful of them.

``to_json()`` returns the action's body in the log's camelCase field names;
``from_json()`` accepts the same (unknown fields are ignored, as the protocol asks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from airflow_delta.engine.errors import InvalidLogError
from airflow_delta.engine.model import log_json
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.model.schema import parse_schema_json

EMPTY_MAP: Mapping[str, str] = MappingProxyType({})


def _frozen_map(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value)) if value else EMPTY_MAP


# ------------------------------------------------------------- action body shapes
#
# The protocol gives every field of every action a type. A body that breaks it is a
# corrupt log, never something to read around: a ``configuration`` list or a
# ``lastUpdated`` string would otherwise surface later as a crash far from the file at
# fault, or be silently misread. Non-file actions are a handful per commit, so they are
# checked one by one here; add/remove rows are checked vectorised by the log readers.

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# kind, required. Kinds: "str", "int" (int64), "count" (int64 >= 0), "bool", "strs" (a
# list of strings), "str_map" (an object of string or null values), "format".
_BODY_RULES: dict[str, dict[str, tuple[str, bool]]] = {
    "protocol": {
        "minReaderVersion": ("count", True), "minWriterVersion": ("count", True),
        "readerFeatures": ("strs", False), "writerFeatures": ("strs", False),
    },
    "metaData": {
        # schemaString may be absent from a metaData that a later one completes (Delta Live
        # Tables writes such a version 0); the metaData a snapshot uses must have it.
        "id": ("str", True), "schemaString": ("str", False), "partitionColumns": ("strs", False),
        "configuration": ("str_map", False), "format": ("format", False), "name": ("str", False),
        "description": ("str", False), "createdTime": ("int", False),
    },
    "txn": {"appId": ("str", True), "version": ("int", True), "lastUpdated": ("int", False)},
    "domainMetadata": {"domain": ("str", True), "configuration": ("str", True), "removed": ("bool", True)},
    "cdc": {
        "path": ("str", True), "partitionValues": ("str_map", True), "size": ("count", True),
        "dataChange": ("bool", True), "tags": ("str_map", False),
    },
    "checkpointMetadata": {"version": ("count", True), "tags": ("str_map", False)},
    "sidecar": {
        "path": ("str", True), "sizeInBytes": ("count", True), "modificationTime": ("int", True),
        "tags": ("str_map", False),
    },
    # commitInfo is free-form (engine-specific); only what the protocol itself reads is typed.
    "commitInfo": {"inCommitTimestamp": ("int", False)},
}


# Every action key the protocol defines: a line of the log holds exactly one of them.
LOG_ACTION_KEYS = frozenset({"add", "remove", *_BODY_RULES})


def _shape_error(kind: str, value: Any) -> str | None:
    """Why ``value`` is not of ``kind`` (None when it is)."""
    if kind == "str":
        return None if isinstance(value, str) else "expected a string"
    if kind == "bool":
        return None if isinstance(value, bool) else "expected true or false"
    if kind in ("int", "count"):
        if not isinstance(value, int) or isinstance(value, bool):
            return "expected an integer"
        if not INT64_MIN <= value <= INT64_MAX:
            return "out of the range of a 64-bit integer"
        return "expected a non-negative integer" if kind == "count" and value < 0 else None
    if kind == "strs":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "expected a JSON array of strings"
        return None
    if kind == "str_map":
        if not isinstance(value, Mapping) or not all(v is None or isinstance(v, str) for v in value.values()):
            return "expected a JSON object whose values are strings"
        return None
    if kind == "format":
        if not isinstance(value, Mapping):
            return "expected an object with 'provider' and 'options'"
        provider, options = value.get("provider"), value.get("options")
        if provider is not None and not isinstance(provider, str):
            return "'provider' must be a string"
        if options is not None and _shape_error("str_map", options):
            return "'options' must be a JSON object whose values are strings"
        return None
    raise AssertionError(kind)


def action_body_error(key: str, body: Any) -> str | None:
    """Why the body of a ``key`` action breaks the protocol's schema, or None if it does not.

    Unknown action keys are not checked (the protocol asks readers to ignore them).
    """
    rules = _BODY_RULES.get(key)
    if rules is None:
        return None
    if not isinstance(body, Mapping):
        return f"a {key} action must be a JSON object, found {type(body).__name__}"
    for name, (kind, required) in rules.items():
        value = body.get(name)
        if value is None:
            if required:
                return f"field {name!r} is missing (required by the protocol)"
            continue
        reason = _shape_error(kind, value)
        if reason is not None:
            shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
            return f"field {name!r} is {shown}: {reason}"
    return None


def check_action_body(key: str, body: Any) -> None:
    """Raise :class:`InvalidLogError` when :func:`action_body_error` finds a fault."""
    reason = action_body_error(key, body)
    if reason is not None:
        raise InvalidLogError(f"invalid {key} action: {reason}")


@dataclass(frozen=True, slots=True)
class Protocol:
    """The ``protocol`` action: the minimum reader and writer versions and (reader 3, writer 7) the table features."""

    min_reader_version: int
    min_writer_version: int
    reader_features: frozenset[str] | None = None
    writer_features: frozenset[str] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Protocol:
        check_action_body("protocol", d)
        try:
            rf = d.get("readerFeatures")
            wf = d.get("writerFeatures")
            return cls(
                int(d["minReaderVersion"]),
                int(d["minWriterVersion"]),
                frozenset(rf) if rf is not None else None,
                frozenset(wf) if wf is not None else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidLogError(f"invalid protocol action {dict(d)!r}: {exc}") from exc

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "minReaderVersion": self.min_reader_version,
            "minWriterVersion": self.min_writer_version,
        }
        if self.reader_features is not None:
            out["readerFeatures"] = sorted(self.reader_features)
        if self.writer_features is not None:
            out["writerFeatures"] = sorted(self.writer_features)
        return out

    def has_reader_feature(self, name: str) -> bool:
        return self.reader_features is not None and name in self.reader_features

    def has_writer_feature(self, name: str) -> bool:
        return self.writer_features is not None and name in self.writer_features


@dataclass(frozen=True, slots=True)
class Format:
    """The ``format`` of a ``metaData`` action: always ``parquet``, with its options."""

    provider: str = "parquet"
    options: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)


@dataclass(frozen=True, slots=True)
class Metadata:
    """The ``metaData`` action: the table's id, schema, partition columns and properties."""

    id: str
    schema_string: str
    partition_columns: tuple[str, ...] = ()
    configuration: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    format: Format = field(default_factory=Format)
    name: str | None = None
    description: str | None = None
    created_time: int | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Metadata:
        check_action_body("metaData", d)
        if d.get("schemaString") is None:
            raise InvalidLogError("invalid metaData action: it has no schemaString, so the table has no schema")
        parse_schema_json(d["schemaString"])  # its shape, once, for every walk of the schema that follows
        try:
            fmt = d.get("format") or {}
            return cls(
                id=str(d["id"]),
                schema_string=str(d["schemaString"]),
                partition_columns=tuple(d.get("partitionColumns") or ()),
                configuration=_frozen_map({k: v for k, v in (d.get("configuration") or {}).items() if v is not None}),
                format=Format(fmt.get("provider") or "parquet", _frozen_map(fmt.get("options"))),
                name=d.get("name"),
                description=d.get("description"),
                created_time=d.get("createdTime"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidLogError(f"invalid metaData action: {exc}") from exc

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "format": {"provider": self.format.provider, "options": dict(self.format.options)},
            "schemaString": self.schema_string,
            "partitionColumns": list(self.partition_columns),
            "configuration": dict(self.configuration),
        }
        if self.name is not None:
            out["name"] = self.name
        if self.description is not None:
            out["description"] = self.description
        if self.created_time is not None:
            out["createdTime"] = self.created_time
        return out

    @property
    def schema_json(self) -> dict[str, Any]:
        return log_json.loads(self.schema_string)


@dataclass(frozen=True, slots=True)
class SetTransaction:
    """The ``txn`` action: the last version an application committed (idempotent writes)."""

    app_id: str
    version: int
    last_updated: int | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SetTransaction:
        check_action_body("txn", d)
        return cls(str(d["appId"]), int(d["version"]), d.get("lastUpdated"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"appId": self.app_id, "version": self.version}
        if self.last_updated is not None:
            out["lastUpdated"] = self.last_updated
        return out


@dataclass(frozen=True, slots=True)
class DomainMetadata:
    """The ``domainMetadata`` action: one domain's configuration, or its removal."""

    domain: str
    configuration: str
    removed: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DomainMetadata:
        check_action_body("domainMetadata", d)
        return cls(str(d["domain"]), str(d.get("configuration") or ""), bool(d.get("removed", False)))

    def to_json(self) -> dict[str, Any]:
        return {"domain": self.domain, "configuration": self.configuration, "removed": self.removed}


@dataclass(frozen=True, slots=True)
class DeletionVectorDescriptor:
    """Where a deletion vector lives: ``storage_type`` is ``u`` (UUID-named file), ``i`` (inline) or ``p`` (path)."""

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DeletionVectorDescriptor:
        off = d.get("offset")
        return cls(
            str(d["storageType"]),
            str(d["pathOrInlineDv"]),
            int(d["sizeInBytes"]),
            int(d["cardinality"]),
            int(off) if off is not None else None,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
            "sizeInBytes": self.size_in_bytes,
            "cardinality": self.cardinality,
        }
        if self.offset is not None:
            out["offset"] = self.offset
        return out

    @property
    def unique_id(self) -> str:
        """The DV's identity as the spec derives it: storage type, path-or-inline, and ``@offset`` if any."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return f"{base}@{self.offset}" if self.offset is not None else base


@dataclass(frozen=True, slots=True)
class AddFile:
    """The ``add`` action: a data file now in the table, with its statistics and deletion vector."""

    path: str  # URI-encoded, as written to the log
    partition_values: Mapping[str, str | None]
    size: int
    modification_time: int
    data_change: bool = True
    stats: str | None = None
    tags: Mapping[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AddFile:
        dv = d.get("deletionVector")
        return cls(
            path=str(d["path"]),
            partition_values=_frozen_map(d.get("partitionValues")),
            size=int(d["size"]),
            modification_time=int(d["modificationTime"]),
            data_change=bool(d.get("dataChange", True)),
            stats=d.get("stats"),
            tags=_frozen_map(d.get("tags")) if d.get("tags") else None,
            deletion_vector=DeletionVectorDescriptor.from_json(dv) if dv else None,
            base_row_id=d.get("baseRowId"),
            default_row_commit_version=d.get("defaultRowCommitVersion"),
            clustering_provider=d.get("clusteringProvider"),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": self.data_change,
        }
        if self.stats is not None:
            out["stats"] = self.stats
        if self.tags:
            out["tags"] = dict(self.tags)
        if self.deletion_vector is not None:
            out["deletionVector"] = self.deletion_vector.to_json()
        if self.base_row_id is not None:
            out["baseRowId"] = self.base_row_id
        if self.default_row_commit_version is not None:
            out["defaultRowCommitVersion"] = self.default_row_commit_version
        if self.clustering_provider is not None:
            out["clusteringProvider"] = self.clustering_provider
        return out

    @property
    def dv_unique_id(self) -> str | None:
        return self.deletion_vector.unique_id if self.deletion_vector is not None else None

    def remove(self, deletion_timestamp: int, data_change: bool = True) -> RemoveFile:
        """The ``remove`` that logically deletes exactly this file (same path and DV)."""
        return RemoveFile(
            path=self.path,
            deletion_timestamp=deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=self.partition_values,
            size=self.size,
            stats=self.stats,
            tags=self.tags,
            deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
        )


@dataclass(frozen=True, slots=True)
class RemoveFile:
    """The ``remove`` action: a data file (with its deletion vector) no longer in the table."""

    path: str
    deletion_timestamp: int | None = None
    data_change: bool = True
    extended_file_metadata: bool | None = None
    partition_values: Mapping[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: Mapping[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RemoveFile:
        dv = d.get("deletionVector")
        pv = d.get("partitionValues")
        return cls(
            path=str(d["path"]),
            deletion_timestamp=d.get("deletionTimestamp"),
            data_change=bool(d.get("dataChange", True)),
            extended_file_metadata=d.get("extendedFileMetadata"),
            partition_values=_frozen_map(pv) if pv is not None else None,
            size=d.get("size"),
            stats=d.get("stats"),
            tags=_frozen_map(d.get("tags")) if d.get("tags") else None,
            deletion_vector=DeletionVectorDescriptor.from_json(dv) if dv else None,
            base_row_id=d.get("baseRowId"),
            default_row_commit_version=d.get("defaultRowCommitVersion"),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "dataChange": self.data_change}
        if self.deletion_timestamp is not None:
            out["deletionTimestamp"] = self.deletion_timestamp
        if self.extended_file_metadata is not None:
            out["extendedFileMetadata"] = self.extended_file_metadata
        if self.partition_values is not None:
            out["partitionValues"] = dict(self.partition_values)
        if self.size is not None:
            out["size"] = self.size
        if self.stats is not None:
            out["stats"] = self.stats
        if self.tags:
            out["tags"] = dict(self.tags)
        if self.deletion_vector is not None:
            out["deletionVector"] = self.deletion_vector.to_json()
        if self.base_row_id is not None:
            out["baseRowId"] = self.base_row_id
        if self.default_row_commit_version is not None:
            out["defaultRowCommitVersion"] = self.default_row_commit_version
        return out

    @property
    def dv_unique_id(self) -> str | None:
        return self.deletion_vector.unique_id if self.deletion_vector is not None else None


@dataclass(frozen=True, slots=True)
class AddCDCFile:
    """The ``cdc`` action: a Change Data Feed file the commit wrote."""

    path: str
    partition_values: Mapping[str, str | None]
    size: int
    data_change: bool = False
    tags: Mapping[str, str] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AddCDCFile:
        return cls(
            path=d["path"],
            partition_values=dict(d.get("partitionValues") or {}),
            size=int(d["size"]),
            data_change=bool(d.get("dataChange", False)),
            tags=dict(d["tags"]) if d.get("tags") else None,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "dataChange": self.data_change,
        }
        if self.tags:
            out["tags"] = dict(self.tags)
        return out


Action = Protocol | Metadata | SetTransaction | DomainMetadata | AddFile | RemoveFile | AddCDCFile

# Key of each action in a log line, e.g. {"add": {...}}.
ACTION_KEYS: Mapping[type, str] = MappingProxyType(
    {
        Protocol: "protocol",
        Metadata: "metaData",
        SetTransaction: "txn",
        DomainMetadata: "domainMetadata",
        AddFile: "add",
        RemoveFile: "remove",
        AddCDCFile: "cdc",
    }
)


def action_to_line(action: Action) -> str:
    """One newline-free JSON line for ``action``, as it goes into a commit file."""
    return json_text({ACTION_KEYS[type(action)]: action.to_json()})


# --------------------------------------------------------------------------
# The Arrow layout of file actions after log parsing (commits and checkpoints alike).
# Replay reconciles rows of this schema; a snapshot's live files and tombstones are
# tables of it. ``path`` is still URI-encoded here (decoding is done once, on output).
# ``seq`` orders actions across the whole segment: a larger seq is a later action.

DELETION_VECTOR_TYPE = pa.struct(
    [
        pa.field("storageType", pa.string()),
        pa.field("pathOrInlineDv", pa.string()),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32()),
        pa.field("cardinality", pa.int64()),
    ]
)

STRING_MAP_TYPE = pa.map_(pa.string(), pa.string())

FILE_ACTIONS_SCHEMA = pa.schema(
    [
        pa.field("version", pa.int64(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("is_add", pa.bool_(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("dv_id", pa.string()),  # DeletionVectorDescriptor.unique_id, null without a DV
        pa.field("partition_values", STRING_MAP_TYPE),  # physical column names as keys
        pa.field("size", pa.int64()),
        pa.field("modification_time", pa.int64()),
        pa.field("data_change", pa.bool_()),
        pa.field("stats", pa.string()),
        pa.field("tags", STRING_MAP_TYPE),
        pa.field("deletion_vector", DELETION_VECTOR_TYPE),
        pa.field("base_row_id", pa.int64()),
        pa.field("default_row_commit_version", pa.int64()),
        pa.field("clustering_provider", pa.string()),
        pa.field("deletion_timestamp", pa.int64()),
        pa.field("extended_file_metadata", pa.bool_()),
    ]
)
