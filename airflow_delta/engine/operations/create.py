"""Creating a table: validating user properties and schema, choosing the protocol, version 0.

:func:`create_table` writes version 0 (commitInfo, protocol, metaData) with
put-if-absent, so two concurrent creators cannot both win, choosing the smallest
protocol the schema and properties need (:func:`.protocol.minimal_protocol`).
Properties are validated by :mod:`airflow_delta.engine.model.property_validation`.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from airflow_delta.engine.errors import (
    CommitOutcomeUnknownError,
    DeltaError,
    InvalidFilterError,
    InvalidSchemaError,
    InvalidTablePropertyError,
    TableAlreadyExistsError,
)
from airflow_delta.engine.model import row_tracking
from airflow_delta.engine.model.actions import Metadata, Protocol
from airflow_delta.engine.model.commit_info import ENGINE_INFO, encode_operation_metrics, encode_operation_parameters
from airflow_delta.engine.model.constraints import CHECK_CONSTRAINT_PREFIX
from airflow_delta.engine.model.json_text import json_text, utf8_bytes
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.model.property_validation import (
    COLUMN_MAPPING_ID,
    COLUMN_MAPPING_MAX_ID,
    COLUMN_MAPPING_PHYSICAL_NAME,
    normalize_properties,
)
from airflow_delta.engine.model.schema import arrow_to_delta_schema, schema_to_arrow
from airflow_delta.engine.model.table_features import (
    check_writable,
    minimal_protocol,
    required_features,
)
from airflow_delta.engine.read.listing import commit_path, list_log
from airflow_delta.engine.read.snapshot import load_snapshot
from airflow_delta.engine.storage.fileio import FileIO
from airflow_delta.engine.storage.location import TableLocation
from airflow_delta.engine.write.transaction import PostCommitHook

log = logging.getLogger(__name__)

# Characters parquet (and therefore Delta without column mapping) refuses in column names.
_INVALID_NAME_CHARS = frozenset(" ,;{}()\n\t=")
_LOG_FILE = re.compile(r"^\d{20}\.(json|checkpoint\..+)$")


def _check_schema(schema_json: Mapping[str, Any], column_mapping: bool) -> None:
    """Column names must be unique ignoring case; without column mapping parquet's character rules apply."""
    if not schema_json.get("fields"):
        raise InvalidSchemaError("a Delta table needs at least one column")

    def walk(t: Any, prefix: str) -> None:
        if not isinstance(t, dict):
            return
        kind = t.get("type")
        if kind == "struct":
            seen: dict[str, str] = {}
            for f in t.get("fields", []):
                name = f["name"]
                path = f"{prefix}{name}"
                if name.lower() in seen:
                    raise InvalidSchemaError(
                        f"columns {prefix}{seen[name.lower()]!s} and {path} differ only in case; Delta column "
                        "names must be unique regardless of case"
                    )
                seen[name.lower()] = name
                if not column_mapping and (bad := sorted(set(name) & _INVALID_NAME_CHARS)):
                    raise InvalidSchemaError(
                        f"column name {path!r} contains {''.join(bad)!r}, which parquet column names cannot hold; "
                        "rename it, or create the table with delta.columnMapping.mode=name"
                    )
                walk(f["type"], f"{path}.")
        elif kind == "array":
            walk(t["elementType"], f"{prefix}element.")
        elif kind == "map":
            walk(t["keyType"], f"{prefix}key.")
            walk(t["valueType"], f"{prefix}value.")

    walk(schema_json, "")


def _check_partition_columns(schema_json: Mapping[str, Any], partition_by: Sequence[str]) -> tuple[str, ...]:
    """Partition columns must be distinct top-level primitive columns, and not all of them."""
    by_lower = {f["name"].lower(): f for f in schema_json["fields"]}
    out: list[str] = []
    for requested in partition_by:
        field_json = by_lower.get(str(requested).lower())
        if field_json is None:
            raise InvalidSchemaError(
                f"partition column {requested!r} is not a top-level column of the schema "
                f"({', '.join(f['name'] for f in schema_json['fields'])})"
            )
        if not isinstance(field_json["type"], str):
            raise InvalidSchemaError(
                f"cannot partition by {field_json['name']!r}: it is a {field_json['type']['type']}, and partition "
                "columns must be of a primitive type"
            )
        if field_json["type"] in ("variant", "void"):
            raise InvalidSchemaError(f"cannot partition by {field_json['name']!r} of type {field_json['type']}")
        if field_json["name"] in out:
            raise InvalidSchemaError(f"partition column {field_json['name']!r} is listed twice")
        out.append(field_json["name"])
    if out and len(out) == len(schema_json["fields"]):
        raise InvalidSchemaError("cannot partition by every column: a table needs at least one data column")
    return tuple(out)


def _copy_with_each_field(schema_json: Mapping[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """A copy of ``schema_json`` in which ``change`` saw every field, nested ones too, in pre-order
    (a struct field before the fields of its type; array elements and map keys and values descended into)."""
    schema = json.loads(json.dumps(schema_json))

    def walk(t: Any) -> None:
        if not isinstance(t, dict):
            return
        kind = t.get("type")
        if kind == "struct":
            for f in t.get("fields", []):
                change(f)
                walk(f["type"])
        elif kind == "array":
            walk(t["elementType"])
        elif kind == "map":
            walk(t["keyType"])
            walk(t["valueType"])

    walk(schema)
    return schema


def _without_column_mapping(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (metadata or {}).items() if not k.startswith("delta.columnMapping.")}


def assign_column_mapping(schema_json: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """A copy of ``schema_json`` with an id and a ``col-<uuid>`` physical name on every (nested) field.

    Ids are 1, 2, ... in pre-order (a struct before its fields), as Delta assigns them;
    returns the schema and the largest id (``delta.columnMapping.maxColumnId``).
    """
    next_id = 0

    def assign(f: dict[str, Any]) -> None:
        nonlocal next_id
        next_id += 1
        meta = _without_column_mapping(f.get("metadata"))
        meta[COLUMN_MAPPING_ID] = next_id
        meta[COLUMN_MAPPING_PHYSICAL_NAME] = f"col-{uuid.uuid4()}"
        f["metadata"] = meta

    schema = _copy_with_each_field(schema_json, assign)
    return schema, next_id


def _strip_column_mapping(schema_json: Mapping[str, Any]) -> dict[str, Any]:
    def strip(f: dict[str, Any]) -> None:
        f["metadata"] = _without_column_mapping(f.get("metadata"))

    return _copy_with_each_field(schema_json, strip)


# ------------------------------------------------------------------- create_table


def create_table(
    location: TableLocation,
    schema: pa.Schema,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    name: str | None = None,
    description: str | None = None,
    *,
    post_commit: PostCommitHook | None = None,
) -> int:
    """Create an empty table: commit version 0 with commitInfo, protocol and metaData; returns 0.

    Raises :class:`TableAlreadyExistsError` when the log already has a commit or
    checkpoint, or when a concurrent creator wins the put-if-absent of version 0.
    ``post_commit`` gets version 0 and its actions once it has landed.
    """
    if isinstance(partition_by, str):
        partition_by = [partition_by]
    if _table_exists(location.io, location.root):
        raise TableAlreadyExistsError(location.uri)
    protocol, metadata, user_properties = new_table_state(schema, partition_by, properties, name, description)
    commit_info = new_table_commit_info(
        metadata,
        "CREATE TABLE",
        {
            "isManaged": "false",
            "description": description,
            "partitionBy": json_text(list(metadata.partition_columns)),
            "properties": json_text(user_properties),
        },
        {},
        is_blind_append=True,
    )
    actions = [{"commitInfo": commit_info}, {"protocol": protocol.to_json()}, {"metaData": metadata.to_json()}]
    body = utf8_bytes("".join(json_text(a) + "\n" for a in actions), "table creation")
    if not location.io.put_if_absent(commit_path(location.root, 0), body):
        raise TableAlreadyExistsError(location.uri)
    _confirm_created(location, body, metadata.id, commit_info["txnId"])
    if post_commit is not None:
        post_commit(0, actions)
    return 0


def new_table_state(
    schema: pa.Schema,
    partition_by: Sequence[str],
    properties: Mapping[str, str] | None,
    name: str | None,
    description: str | None,
) -> tuple[Protocol, Metadata, dict[str, str]]:
    """The protocol and metaData of a new table, checked; and the properties the user asked for.

    Shared by CREATE TABLE and CONVERT TO DELTA, the two ways version 0 is written.
    """
    props = normalize_properties(properties)
    configuration = dict(props.configuration)
    mode = TableProperties.from_configuration(configuration).column_mapping_mode
    schema_json = _strip_column_mapping(arrow_to_delta_schema(schema))
    _check_schema(schema_json, column_mapping=mode != "none")
    partition_columns = _check_partition_columns(schema_json, partition_by)
    _check_constraint_expressions(configuration, schema_to_arrow(schema_json))
    if mode != "none":
        schema_json, max_id = assign_column_mapping(schema_json)
        configuration[COLUMN_MAPPING_MAX_ID] = str(max_id)
    if row_tracking.is_enabled_configuration(configuration):
        # Named once, at creation, as Delta does: copies of rows keep their IDs in them.
        configuration = {**row_tracking.new_materialized_column_properties(), **configuration}
    protocol = minimal_protocol(
        required_features(schema_json, configuration) | props.features,
        props.min_reader_version,
        props.min_writer_version,
        table_features=bool(props.features),
    )
    metadata = Metadata(
        id=str(uuid.uuid4()),
        schema_string=json_text(schema_json),
        partition_columns=partition_columns,
        configuration=configuration,
        name=name,
        description=description,
        created_time=_now_ms(),
    )
    check_writable(protocol, metadata)
    user_properties = {k: v for k, v in configuration.items() if k != COLUMN_MAPPING_MAX_ID}
    return protocol, metadata, user_properties


def new_table_commit_info(
    metadata: Metadata,
    operation: str,
    operation_parameters: Mapping[str, Any],
    operation_metrics: Mapping[str, Any],
    *,
    is_blind_append: bool,
) -> dict[str, Any]:
    """The commitInfo of a version 0, timed at the metadata's creation (in-commit timestamp when enabled)."""
    now = metadata.created_time if metadata.created_time is not None else _now_ms()
    commit_info: dict[str, Any] = {}
    if TableProperties.from_configuration(metadata.configuration).enable_in_commit_timestamps:
        # In-commit timestamps: the commitInfo (first action) carries the commit time.
        commit_info["inCommitTimestamp"] = now
    commit_info.update(
        {
            "timestamp": now,
            "operation": operation,
            "operationParameters": encode_operation_parameters(operation_parameters),
            "isolationLevel": "Serializable",
            "isBlindAppend": is_blind_append,
            "operationMetrics": encode_operation_metrics(operation_metrics),
            "engineInfo": ENGINE_INFO,
            "txnId": str(uuid.uuid4()),
        }
    )
    return commit_info


def _check_constraint_expressions(configuration: Mapping[str, str], schema: pa.Schema) -> None:
    """Every CHECK constraint must parse and refer only to existing columns."""
    checks = {k: v for k, v in configuration.items() if k.startswith(CHECK_CONSTRAINT_PREFIX)}
    if not checks:
        return
    from airflow_delta.engine.expressions import parse_predicate

    for key, sql in checks.items():
        try:
            parse_predicate(sql, schema)
        except InvalidFilterError as exc:
            raise InvalidTablePropertyError(key, sql, f"a boolean SQL expression over the table's columns ({exc})") from exc


def _confirm_created(location: TableLocation, body: bytes, table_id: str, txn_id: str) -> None:
    """After version 0 landed: make sure it is not the version 0 of a table that was already there.

    The listing before the write found no log. If another table was created, committed,
    checkpointed and had its version 0 cleaned up in between, put-if-absent found version
    0 free and ours sits below that table's checkpoint, where no reader looks. That can
    only be so when a checkpoint past version 0 is now listed; a checkpoint of a table
    built on our version 0 (a fast writer) carries our table id.
    """
    io, root = location.io, location.root
    try:
        listing = list_log(io, root)
    except OSError:
        listing = None
    newest_checkpoint = listing.checkpoints[-1].version if listing is not None and listing.checkpoints else 0
    if listing is not None and newest_checkpoint == 0 and 0 in listing.commits:
        return  # readers replay our version 0: no checkpoint is ahead of it
    try:
        same_table = load_snapshot(io, root).metadata.id == table_id
    except (DeltaError, OSError) as exc:
        # Writers may already build on our version 0: never delete it unless we know.
        raise CommitOutcomeUnknownError(
            location.uri, 0, txn_id,
            f"a checkpoint past version 0 appeared while the table was being created and the table could not be "
            f"read to tell whether it was made from this version 0 ({exc})",
        ) from exc
    if same_table:
        return
    path = commit_path(root, 0)
    try:
        if io.read_bytes(path) == body:
            io.delete(path)
    except FileNotFoundError:
        pass  # already gone: nothing of ours remains
    except OSError:
        raise CommitOutcomeUnknownError(
            location.uri, 0, txn_id,
            "another table was created and its version 0 cleaned up while this one was being created, and the "
            "version 0 written here could not be removed again",
        ) from None
    raise TableAlreadyExistsError(location.uri)


def _table_exists(io: FileIO, root: str) -> bool:
    return any(_LOG_FILE.match(f.name) for f in io.list_dir(f"{root}/_delta_log"))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def table_exists(io: FileIO, root: str) -> bool:
    """Whether ``root`` already holds a Delta table: its ``_delta_log`` lists a commit or checkpoint."""
    return _table_exists(io, root)
