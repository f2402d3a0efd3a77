"""Build small Delta logs by hand, for tests: commits, classic / multi-part / V2 checkpoints.

The checkpoint writers here follow the protocol's "Checkpoint Schema" section and are
deliberately independent of ``airflow_delta.engine.checkpoint.writer``, so the readers are
tested against a second implementation.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_STRING = json.dumps({
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}},
    ],
})


def log_dir(root: str) -> str:
    return os.path.join(root, "_delta_log")


def commit_file(root: str, version: int) -> str:
    return os.path.join(log_dir(root), f"{version:020d}.json")


def protocol(reader: int = 1, writer: int = 2, reader_features: Sequence[str] | None = None,
             writer_features: Sequence[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"minReaderVersion": reader, "minWriterVersion": writer}
    if reader_features is not None:
        body["readerFeatures"] = list(reader_features)
    if writer_features is not None:
        body["writerFeatures"] = list(writer_features)
    return {"protocol": body}


def metadata(partition_columns: Sequence[str] = (), configuration: Mapping[str, str] | None = None,
             table_id: str = "00000000-0000-0000-0000-000000000001", schema_string: str = SCHEMA_STRING) -> dict[str, Any]:
    return {"metaData": {
        "id": table_id,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string,
        "partitionColumns": list(partition_columns),
        "configuration": dict(configuration or {}),
        "createdTime": 1_700_000_000_000,
    }}


def dv(path_or_inline: str, offset: int | None = None, storage: str = "u", cardinality: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {"storageType": storage, "pathOrInlineDv": path_or_inline, "sizeInBytes": 10, "cardinality": cardinality}
    if offset is not None:
        out["offset"] = offset
    return out


def add(path: str, *, size: int = 100, partition_values: Mapping[str, str | None] | None = None,
        deletion_vector: Mapping[str, Any] | None = None, stats: str | None = None,
        tags: Mapping[str, str] | None = None, modification_time: int = 1_700_000_000_000,
        data_change: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "path": path,
        "partitionValues": dict(partition_values or {}),
        "size": size,
        "modificationTime": modification_time,
        "dataChange": data_change,
    }
    if stats is not None:
        body["stats"] = stats
    if tags is not None:
        body["tags"] = dict(tags)
    if deletion_vector is not None:
        body["deletionVector"] = dict(deletion_vector)
    return {"add": body}


def remove(path: str, *, deletion_vector: Mapping[str, Any] | None = None, deletion_timestamp: int = 1_700_000_000_000,
           size: int | None = None, partition_values: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"path": path, "deletionTimestamp": deletion_timestamp, "dataChange": True}
    if size is not None:
        body["size"] = size
        body["extendedFileMetadata"] = True
        body["partitionValues"] = dict(partition_values or {})
    if deletion_vector is not None:
        body["deletionVector"] = dict(deletion_vector)
    return {"remove": body}


def txn(app_id: str, version: int) -> dict[str, Any]:
    return {"txn": {"appId": app_id, "version": version, "lastUpdated": 1_700_000_000_000}}


def domain(name: str, configuration: str, removed: bool = False) -> dict[str, Any]:
    return {"domainMetadata": {"domain": name, "configuration": configuration, "removed": removed}}


def commit_info(operation: str = "WRITE", **extra: Any) -> dict[str, Any]:
    return {"commitInfo": {"timestamp": 1_700_000_000_000, "operation": operation, **extra}}


def write_commit(root: str, version: int, actions: Iterable[Mapping[str, Any]], *, mtime_ms: int | None = None) -> str:
    os.makedirs(log_dir(root), exist_ok=True)
    path = commit_file(root, version)
    with open(path, "w") as out:
        for action in actions:
            out.write(json.dumps(action) + "\n")
    if mtime_ms is not None:
        set_mtime(path, mtime_ms)
    return path


def set_mtime(path: str, mtime_ms: int) -> None:
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


def write_raw(root: str, name: str, data: bytes | str) -> str:
    os.makedirs(log_dir(root), exist_ok=True)
    path = os.path.join(log_dir(root), name)
    with open(path, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)
    return path


# ------------------------------------------------------------------ checkpoints (spec schema)

_MAP = pa.map_(pa.string(), pa.string())
_DV = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
                 ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())])
_ADD = pa.struct([("path", pa.string()), ("partitionValues", _MAP), ("size", pa.int64()),
                  ("modificationTime", pa.int64()), ("dataChange", pa.bool_()), ("stats", pa.string()),
                  ("tags", _MAP), ("deletionVector", _DV), ("baseRowId", pa.int64()),
                  ("defaultRowCommitVersion", pa.int64())])
_REMOVE = pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64()), ("dataChange", pa.bool_()),
                     ("extendedFileMetadata", pa.bool_()), ("partitionValues", _MAP), ("size", pa.int64()),
                     ("deletionVector", _DV)])
_PROTOCOL = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32()),
                       ("readerFeatures", pa.list_(pa.string())), ("writerFeatures", pa.list_(pa.string()))])
_METADATA = pa.struct([("id", pa.string()), ("name", pa.string()), ("description", pa.string()),
                       ("format", pa.struct([("provider", pa.string()), ("options", _MAP)])),
                       ("schemaString", pa.string()), ("partitionColumns", pa.list_(pa.string())),
                       ("createdTime", pa.int64()), ("configuration", _MAP)])
_TXN = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
_DOMAIN = pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())])
_CHECKPOINT_METADATA = pa.struct([("version", pa.int64()), ("tags", _MAP)])
_SIDECAR = pa.struct([("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64()), ("tags", _MAP)])

V1_SCHEMA = pa.schema([("txn", _TXN), ("add", _ADD), ("remove", _REMOVE), ("metaData", _METADATA),
                       ("protocol", _PROTOCOL), ("domainMetadata", _DOMAIN)])
V2_SCHEMA = pa.schema([*V1_SCHEMA, ("checkpointMetadata", _CHECKPOINT_METADATA), ("sidecar", _SIDECAR)])
SIDECAR_SCHEMA = pa.schema([("add", _ADD), ("remove", _REMOVE)])


def _fit(value: Any, typ: pa.DataType) -> Any:
    """A JSON action body shaped for ``pa.array(..., typ)``: maps as item lists, unknown keys dropped."""
    if value is None:
        return None
    if pa.types.is_map(typ):
        return list(value.items())
    if pa.types.is_struct(typ):
        return {f.name: _fit(value.get(f.name), f.type) for f in typ}
    if pa.types.is_list(typ):
        return list(value)
    return value


def checkpoint_table(actions: Sequence[Mapping[str, Any]], schema: pa.Schema = V1_SCHEMA) -> pa.Table:
    """One row per action (``{"add": {...}}`` etc.), each action in its own struct column."""
    columns: dict[str, list[Any]] = {f.name: [] for f in schema}
    for action in actions:
        (key, body), = action.items()
        for f in schema:
            columns[f.name].append(_fit(body, f.type) if f.name == key else None)
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in schema}, schema=schema)


def write_classic_checkpoint(root: str, version: int, actions: Sequence[Mapping[str, Any]], *, parts: int = 1) -> list[str]:
    """A classic (``parts == 1``) or multi-part checkpoint holding ``actions`` (already reconciled)."""
    os.makedirs(log_dir(root), exist_ok=True)
    table = checkpoint_table(actions)
    if parts == 1:
        path = os.path.join(log_dir(root), f"{version:020d}.checkpoint.parquet")
        pq.write_table(table, path)
        return [path]
    paths = []
    per_part = -(-table.num_rows // parts)
    for i in range(parts):
        path = os.path.join(log_dir(root), f"{version:020d}.checkpoint.{i + 1:010d}.{parts:010d}.parquet")
        pq.write_table(table.slice(i * per_part, per_part), path)
        paths.append(path)
    return paths


def write_v2_checkpoint(root: str, version: int, non_file: Sequence[Mapping[str, Any]],
                        file_actions: Sequence[Mapping[str, Any]], *, sidecars: int = 2, fmt: str = "json") -> str:
    """A UUID-named V2 checkpoint whose file actions live in ``sidecars`` sidecar files."""
    sidecar_dir = os.path.join(log_dir(root), "_sidecars")
    os.makedirs(sidecar_dir, exist_ok=True)
    refs = []
    per = -(-len(file_actions) // sidecars) if file_actions else 0
    for i in range(sidecars if file_actions else 0):
        chunk = file_actions[i * per:(i + 1) * per]
        name = f"{uuid.uuid4()}.parquet"
        path = os.path.join(sidecar_dir, name)
        pq.write_table(checkpoint_table(chunk, SIDECAR_SCHEMA), path)
        refs.append({"sidecar": {"path": name, "sizeInBytes": os.path.getsize(path), "modificationTime": 1, "tags": {}}})
    actions = [{"checkpointMetadata": {"version": version, "tags": {}}}, *non_file, *refs]
    name = f"{version:020d}.checkpoint.{uuid.uuid4()}.{fmt}"
    path = os.path.join(log_dir(root), name)
    if fmt == "json":
        with open(path, "w") as out:
            for action in actions:
                out.write(json.dumps(action) + "\n")
    else:
        pq.write_table(checkpoint_table(actions, V2_SCHEMA), path)
    return path


# ------------------------------------------------------------------ a dict-based oracle


def oracle_replay(commits: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Action Reconciliation in plain Python, one action at a time (the test's model)."""
    state: dict[str, Any] = {"protocol": None, "metaData": None, "txn": {}, "domains": {}, "files": {}}
    for actions in commits:
        for action in actions:
            (key, body), = action.items()
            if key in ("protocol", "metaData"):
                state[key] = body
            elif key == "txn":
                state["txn"][body["appId"]] = body["version"]
            elif key == "domainMetadata":
                state["domains"][body["domain"]] = body
            elif key in ("add", "remove"):
                state["files"][(body["path"], dv_unique_id(body.get("deletionVector")))] = (key, body)
    return state


def dv_unique_id(descriptor: Mapping[str, Any] | None) -> str | None:
    if not descriptor:
        return None
    out = f"{descriptor['storageType']}{descriptor['pathOrInlineDv']}"
    return f"{out}@{descriptor['offset']}" if descriptor.get("offset") is not None else out


def oracle_state_actions(state: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The reconciled state as checkpoint actions: (non-file actions, file actions)."""
    non_file: list[dict[str, Any]] = [{"protocol": state["protocol"]}, {"metaData": state["metaData"]}]
    non_file += [{"txn": {"appId": a, "version": v}} for a, v in sorted(state["txn"].items())]
    non_file += [{"domainMetadata": d} for _, d in sorted(state["domains"].items()) if not d.get("removed")]
    files = [{key: body} for key, body in state["files"].values()]
    return non_file, files
