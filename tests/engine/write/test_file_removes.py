"""``remove`` actions built from Arrow file actions, with exactly the table's partition columns."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import InvalidPathError, PathOutsideTableError
from airflow_delta.engine.model.actions import FILE_ACTIONS_SCHEMA, DeletionVectorDescriptor, Metadata, RemoveFile
from airflow_delta.engine.model.committed_actions import CommittedActions
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.read.crc import EMPTY_STATE, deleted_records_histogram, file_size_histogram, next_checksum
from airflow_delta.engine.storage.paths import check_log_paths, decode_log_path
from airflow_delta.engine.write import file_removes
from airflow_delta.engine.write.file_removes import (
    only_partition_columns,
    physical_partition_columns,
    remove_json_line,
    removes_from_file_actions,
    stage_remove_batch,
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


# ------------------------------------------------------------ removes staged as columns

_ROOT = "/tables/t"
_PARTITION_COLUMNS = ("p", 'q"\\é😀')
_BATCH_METADATA = Metadata(id="t", schema_string=schema_string("v", *_PARTITION_COLUMNS), partition_columns=_PARTITION_COLUMNS)
# Partition keys of file actions: the table's columns, and others (extra keys in one map type of a log).
_KEY = st.sampled_from([*_PARTITION_COLUMNS, "old", "\n"])
_PATH = st.lists(st.sampled_from(["a", "/", ".", "%", "%2", "%41", ":", '"', "\\", "\n", "é", "😀", " ", "=", "?"]), max_size=8).map("".join)
# Paths a reader takes (most examples), with escapes, quotes and non-ASCII to encode.
_SAFE_PATH = st.lists(st.sampled_from(["a", "%41", "%C3%A9", "%25", '"', "'", "é", "😀", " ", "=", "/"]), max_size=6).map("".join)
_SIZE = st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
_FILE_ROW = st.fixed_dictionaries({
    "path": _SAFE_PATH.map(lambda p: f"p=a/{p}.parquet") | _PATH,
    "partition_values": st.none() | st.lists(st.tuples(_KEY, st.none() | _TEXT), max_size=4),
    "size": _SIZE,
    "stats": st.none() | _TEXT,
    "tags": st.none() | st.lists(st.tuples(_TEXT, _TEXT), max_size=2),
    "deletion_vector": st.none() | st.just(DV) | st.just({**DV, "storageType": None}),
    "base_row_id": _SIZE,
    "default_row_commit_version": _SIZE,
})


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(_FILE_ROW, min_size=1, max_size=5), data_change=st.booleans())
def test_a_batch_of_removes_is_the_objects_line_for_line(rows: list[dict[str, Any]], data_change: bool) -> None:
    """The column-wise builder writes, checks and counts exactly what the remove objects give: each
    line is the generic encoder's text of the remove's JSON (quotes, backslashes, control, astral and
    non-ASCII characters, duplicate and extra partition keys, tags, DVs, nulls anywhere), a path a
    reader refuses is refused with the same error, and the keys, JSON objects and sizes are the objects'."""
    files = file_actions(*rows)
    removes = staged_removes(files, _BATCH_METADATA, 77, data_change=data_change)
    try:
        check_log_paths(_ROOT, [r.path for r in removes], "a staged remove action")
    except (InvalidPathError, PathOutsideTableError) as exc:
        with pytest.raises(type(exc)) as refused:
            stage_remove_batch(files, _BATCH_METADATA, 77, data_change=data_change, table_root=_ROOT, where="a staged remove action")
        assert str(refused.value) == str(exc)
        return
    batch = stage_remove_batch(files, _BATCH_METADATA, 77, data_change=data_change, table_root=_ROOT, where="a staged remove action")
    assert batch is not None
    assert batch.blob.to_pybytes().decode().split("\n") == [json_text({"remove": r.to_json()}) for r in removes]
    assert batch.json_objects() == [{"remove": r.to_json()} for r in removes]
    assert batch.decoded == [decode_log_path(r.path) for r in removes]
    assert [batch.dv_ids.get(i) for i in range(len(removes))] == [r.dv_unique_id for r in removes]
    assert batch.paths == [r.path for r in removes] and len(batch) == len(removes)
    sizes = batch.remove_sizes()
    assert (None if sizes is None else sizes.tolist()) == (
        None if any(r.size is None for r in removes) else [r.size for r in removes]
    )
    assert batch.remove_deletion_vectors() == [r.deletion_vector.to_json() for r in removes if r.deletion_vector]


def test_a_batch_is_not_built_for_columns_of_another_type_or_too_much_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns the builder does not encode (a size as text), or more text than one Arrow string
    array holds, leave the removes to the objects."""
    files = pa.table({"path": ["a.parquet"], "size": ["10"]})
    assert stage_remove_batch(files, _BATCH_METADATA, 1, data_change=True, table_root=_ROOT, where="w") is None
    files = file_actions({"path": "p=a/f.parquet", "stats": '{"numRecords":1}'})
    assert stage_remove_batch(files, _BATCH_METADATA, 1, data_change=True, table_root=_ROOT, where="w") is not None
    monkeypatch.setattr(file_removes, "_MAX_BATCH_TEXT", 600)
    assert stage_remove_batch(files, _BATCH_METADATA, 1, data_change=True, table_root=_ROOT, where="w") is None


def test_committed_actions_count_a_batch_from_its_columns() -> None:
    """The .crc after a commit with a batch of removes is the one its JSON objects give."""
    files = file_actions(
        {"path": "p=a/f1.parquet", "partition_values": [("p", "a")], "size": 10, "deletion_vector": DV},
        {"path": "p=a/f2.parquet", "partition_values": [("p", "a")], "size": 5},
    )
    batch = stage_remove_batch(files, _BATCH_METADATA, 3, data_change=True, table_root=_ROOT, where="w")
    assert batch is not None
    previous = {
        **EMPTY_STATE, "numFiles": 3, "tableSizeBytes": 100, "numDeletionVectorsOpt": 1, "numDeletedRecordsOpt": 2,
        "metadata": _BATCH_METADATA.to_json(), "protocol": {"minReaderVersion": 3, "minWriterVersion": 7},
        "fileSizeHistogram": file_size_histogram([10, 5, 85]),
        "deletedRecordCountsHistogramOpt": deleted_records_histogram([2, 0, 0]),
    }
    info = {"commitInfo": {"txnId": "x", "operation": "DELETE"}}
    lazy = next_checksum(previous, CommittedActions([info, batch]))
    assert lazy == next_checksum(previous, [info, *batch.json_objects()])
    assert lazy is not None and (lazy["numFiles"], lazy["tableSizeBytes"], lazy["numDeletionVectorsOpt"]) == (1, 85, 0)
    assert list(CommittedActions([info, batch])) == [info, *batch.json_objects()]
