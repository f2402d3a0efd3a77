"""``remove`` actions built from Arrow file actions, with exactly the table's partition columns."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from airflow_delta.engine.model.actions import FILE_ACTIONS_SCHEMA, DeletionVectorDescriptor, Metadata
from airflow_delta.engine.write.file_removes import (
    only_partition_columns,
    physical_partition_columns,
    removes_from_file_actions,
    staged_removes,
)

DV = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1, "sizeInBytes": 36, "cardinality": 2}


def schema_string(*names: str, physical: dict[str, str] | None = None) -> str:
    fields = []
    for name in names:
        metadata = {"delta.columnMapping.physicalName": physical[name]} if physical and name in physical else {}
        fields.append({"name": name, "type": "string", "nullable": True, "metadata": metadata})
    return json.dumps({"type": "struct", "fields": fields})


def file_actions(*rows: dict[str, Any]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"version": 1, "seq": i, "is_add": True, **row} for i, row in enumerate(rows)], schema=FILE_ACTIONS_SCHEMA
    )


def test_removes_carry_the_extended_file_metadata_of_each_file() -> None:
    files = file_actions(
        {"path": "p=a/f1.parquet", "partition_values": [("p", "a")], "size": 10, "stats": '{"numRecords":3}',
         "tags": [("k", "v")], "deletion_vector": DV, "base_row_id": 4, "default_row_commit_version": 1},
        {"path": "f2.parquet", "size": 20},
    )
    first, second = removes_from_file_actions(files, 123, data_change=False)
    assert (first.path, first.deletion_timestamp, first.data_change, first.extended_file_metadata) == (
        "p=a/f1.parquet", 123, False, True,
    )
    assert (first.partition_values, first.size, first.stats, first.tags) == ({"p": "a"}, 10, '{"numRecords":3}', {"k": "v"})
    assert first.deletion_vector == DeletionVectorDescriptor.from_json(DV)
    assert (first.base_row_id, first.default_row_commit_version) == (4, 1)
    # A file without partition values, tags or DV gets an empty map and no DV.
    assert (second.partition_values, second.tags, second.deletion_vector, second.data_change) == ({}, None, None, False)


def test_physical_partition_columns_follow_column_mapping() -> None:
    plain = Metadata(id="t", schema_string=schema_string("p", "q"), partition_columns=("p",))
    assert physical_partition_columns(plain) == ["p"]
    mapped = Metadata(
        id="t",
        schema_string=schema_string("p", "q", physical={"p": "col-1f2e"}),
        partition_columns=("p",),
        configuration={"delta.columnMapping.mode": "name"},
    )
    assert physical_partition_columns(mapped) == ["col-1f2e"]


def test_only_partition_columns_keeps_exactly_the_tables_columns() -> None:
    assert only_partition_columns({"p": "a", "extra": None}, ["p", "q"]) == {"p": "a", "q": None}
    assert only_partition_columns(None, []) == {}


def test_staged_removes_trim_partition_values_to_the_tables_columns() -> None:
    metadata = Metadata(id="t", schema_string=schema_string("p", "q"), partition_columns=("p",))
    # One map type for all files of a log: extra keys with null values come along.
    files = file_actions({"path": "p=a/f.parquet", "partition_values": [("p", "a"), ("old", None)], "size": 1})
    (remove,) = staged_removes(files, metadata, 99, data_change=True)
    assert remove.partition_values == {"p": "a"}
    assert (remove.deletion_timestamp, remove.data_change, remove.extended_file_metadata) == (99, True, True)
