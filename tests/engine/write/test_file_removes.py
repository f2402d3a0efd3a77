"""``remove`` actions built from Arrow file actions, with exactly the table's partition columns."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.model.actions import FILE_ACTIONS_SCHEMA, DeletionVectorDescriptor, Metadata, RemoveFile
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.write.file_removes import (
    only_partition_columns,
    physical_partition_columns,
    remove_json_line,
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


# Text a log line must escape or keep: quotes, backslashes, control characters, non-ASCII, astral.
_TEXT = st.text(alphabet=st.sampled_from(['a', '"', "\\", "\n", "\x00", "\x1f", "\x7f", "é", "\u2028", "😀", "/", "%"]), max_size=12)
_OPTIONAL_INT = st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=300)
@given(
    path=_TEXT,
    data_change=st.booleans(),
    deletion_timestamp=_OPTIONAL_INT,
    extended=st.none() | st.booleans(),
    partition_values=st.none() | st.dictionaries(_TEXT, st.none() | _TEXT, max_size=3),
    size=_OPTIONAL_INT,
    stats=st.none() | _TEXT,
    tags=st.none() | st.dictionaries(_TEXT, _TEXT, max_size=2),
    with_dv=st.booleans(),
    base_row_id=_OPTIONAL_INT,
    commit_version=_OPTIONAL_INT,
)
def test_a_removes_log_line_is_the_generic_encoding_of_its_json(
    path: str, data_change: bool, deletion_timestamp: int | None, extended: bool | None,
    partition_values: dict[str, str | None] | None, size: int | None, stats: str | None,
    tags: dict[str, str] | None, with_dv: bool, base_row_id: int | None, commit_version: int | None,
) -> None:
    """The line built from a remove's fields is the text the generic encoder writes for its JSON
    object, whatever its strings hold and whichever optional fields it has."""
    remove = RemoveFile(
        path, deletion_timestamp, data_change, extended, partition_values, size, stats, tags,
        DeletionVectorDescriptor.from_json(DV) if with_dv else None, base_row_id, commit_version,
    )
    line = remove_json_line(remove)
    assert line == json_text({"remove": remove.to_json()})
    assert json.loads(line) == {"remove": remove.to_json()}
    # Within one serialisation, removes sharing a partition mapping reuse its encoding.
    seen: dict[int, str] = {}
    other = RemoveFile("other.parquet", partition_values=remove.partition_values)
    assert [remove_json_line(r, seen) for r in (remove, other, remove)] == [
        line, json_text({"remove": other.to_json()}), line
    ]
