"""Metadata builders and sample tables shared by the statistics test modules."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from airflow_delta.engine.model.actions import Metadata

UTC = dt.UTC


def _field(name: str, t: object, metadata: dict | None = None) -> dict:
    return {"name": name, "type": t, "nullable": True, "metadata": metadata or {}}


def _metadata(fields: list[dict], partition_columns: tuple[str, ...] = (), configuration: dict | None = None) -> Metadata:
    return Metadata(
        id="t",
        schema_string=json.dumps({"type": "struct", "fields": fields}),
        partition_columns=partition_columns,
        configuration=configuration or {},
    )


def _log_actions(table_dir: Path) -> tuple[Metadata, list[dict]]:
    metadata = None
    adds = []
    for path in sorted((table_dir / "_delta_log").glob("*.json")):
        for line in path.read_text().splitlines():
            action = json.loads(line)
            if "metaData" in action:
                metadata = Metadata.from_json(action["metaData"])
            if "add" in action:
                adds.append(action["add"])
    assert metadata is not None
    return metadata, adds


ALL_TYPES = _metadata(
    [
        _field("i", "integer"),
        _field("l", "long"),
        _field("f", "float"),
        _field("d", "double"),
        _field("dec", "decimal(8,5)"),
        _field("s", "string"),
        _field("b", "boolean"),
        _field("bin", "binary"),
        _field("dt", "date"),
        _field("ts", "timestamp"),
        _field("ntz", "timestamp_ntz"),
        _field("st", {"type": "struct", "fields": [_field("x", "short"), _field("arr", {"type": "array", "elementType": "long", "containsNull": True})]}),
        _field("m", {"type": "map", "keyType": "string", "valueType": "string", "valueContainsNull": True}),
        _field("p", "string"),
    ],
    partition_columns=("p",),
)
