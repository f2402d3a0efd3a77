"""Schemas, metadata and log readers shared by the schema, column mapping and partition value tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_delta.engine.model.actions import Metadata

# The example schema of the protocol's appendix "Schema Serialization Format".
SPEC_EXAMPLE = {
    "type": "struct",
    "fields": [
        {"name": "a", "type": "integer", "nullable": False, "metadata": {}},
        {
            "name": "b",
            "type": {"type": "struct", "fields": [{"name": "d", "type": "integer", "nullable": False, "metadata": {}}]},
            "nullable": True,
            "metadata": {},
        },
        {"name": "c", "type": {"type": "array", "elementType": "integer", "containsNull": False}, "nullable": True, "metadata": {}},
        {
            "name": "e",
            "type": {
                "type": "array",
                "elementType": {
                    "type": "struct",
                    "fields": [{"name": "d", "type": "integer", "nullable": False, "metadata": {}}],
                },
                "containsNull": True,
            },
            "nullable": True,
            "metadata": {},
        },
        {
            "name": "f",
            "type": {"type": "map", "keyType": "string", "valueType": "string", "valueContainsNull": True},
            "nullable": True,
            "metadata": {},
        },
    ],
}


def _field(name: str, t: Any, nullable: bool = True, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "type": t, "nullable": nullable, "metadata": metadata or {}}


def _metadata(fields: list[dict[str, Any]], partition_columns: tuple[str, ...] = (), **configuration: str) -> Metadata:
    return Metadata(
        id="test",
        schema_string=json.dumps({"type": "struct", "fields": fields}),
        partition_columns=partition_columns,
        configuration=configuration,
    )


def _log_metadata(table: Path) -> Metadata:
    found = None
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            if line.strip() and "metaData" in json.loads(line):
                found = Metadata.from_json(json.loads(line)["metaData"])
    assert found is not None
    return found


def _log_partition_values(table: Path) -> pa.Array:
    rows = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action:
                rows.append(list(action["add"]["partitionValues"].items()))
    return pa.array(rows, type=pa.map_(pa.string(), pa.string()))
