"""Actions that break the protocol's schema are CorruptCommitError / CorruptCheckpointError naming
where they are, never skipped or misread (issue 10, items 4 and 9).

The malformed inputs are generated per action type and per field from the protocol's field
types (hypothesis), and each is hidden at a random line among valid actions of a later file,
so a test passes only if the error names exactly that file and line.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import CorruptCheckpointError, CorruptCommitError, InvalidLogError
from airflow_delta.engine.read.commit_reader import parse_commit_bytes, parse_log_bytes
from airflow_delta.engine.read.snapshot import load_snapshot
from airflow_delta.engine.storage.fileio import LocalFileIO
from tests.engine.read import log_builders as b

IO = LocalFileIO()

# JSON values of every kind; each field's wrong values are the kinds its type does not allow.
_KINDS: dict[str, Any] = {
    "string": st.text(max_size=5),
    "integer": st.integers(-10, 10),
    "float": st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    "boolean": st.booleans(),
    "array": st.lists(st.integers(0, 3), max_size=3),
    "object": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3), max_size=2),
}
_ALLOWED = {"str": {"string"}, "int": {"integer"}, "bool": {"boolean"}, "map": {"object"}, "dv": {"object"},
            "strs": {"array"}}

# The protocol's add/remove fields: type, required.
FILE_ACTION_FIELDS = {
    "add": {
        "path": ("str", True), "partitionValues": ("map", True), "size": ("int", True),
        "modificationTime": ("int", True), "dataChange": ("bool", True), "stats": ("str", False),
        "tags": ("map", False), "deletionVector": ("dv", False), "baseRowId": ("int", False),
        "defaultRowCommitVersion": ("int", False), "clusteringProvider": ("str", False),
    },
    "remove": {
        "path": ("str", True), "dataChange": ("bool", True), "deletionTimestamp": ("int", False),
        "extendedFileMetadata": ("bool", False), "partitionValues": ("map", False), "size": ("int", False),
        "stats": ("str", False), "tags": ("map", False), "deletionVector": ("dv", False),
        "baseRowId": ("int", False), "defaultRowCommitVersion": ("int", False),
    },
}


def _good(key: str, i: int) -> dict[str, Any]:
    if key == "add":
        return b.add(f"f{i}.parquet", tags={"t": str(i)}, deletion_vector=b.dv(f"d{i}") if i % 2 else None)
    return b.remove(f"f{i}.parquet", size=i)


def _bad_values(kind: str) -> st.SearchStrategy[Any]:
    """Values a field of ``kind`` must refuse: other JSON kinds, out-of-range numbers, broken maps/DVs."""
    options = [s for name, s in _KINDS.items() if name not in _ALLOWED[kind]]
    if kind == "strs":  # an array, but not of strings
        options.append(st.lists(st.integers(0, 3) | st.none(), min_size=1, max_size=3))
    if kind == "int":
        options.append(st.sampled_from([10**30, -(10**30), 2**63]))
    if kind == "map":  # an object, but not of strings
        options.append(st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3) | st.booleans(), min_size=1, max_size=2))
    if kind == "dv":  # an object, but not a complete descriptor
        complete = b.dv("abc")
        options.append(st.sampled_from(sorted(complete)).map(lambda k: {f: v for f, v in complete.items() if f != k}))
        options.append(st.sampled_from(["x", "", "U"]).map(lambda s: {**complete, "storageType": s}))
        options.append(st.sampled_from([-1, 2**31]).map(lambda n: {**complete, "sizeInBytes": n}))
        options.append(st.just({}))
    return st.one_of(options)


@st.composite
def malformed_file_action(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """An add or remove whose body breaks the protocol in one field (wrong type, missing, out of range)."""
    key = draw(st.sampled_from(["add", "remove"]))
    body = dict(_good(key, 1)[key])
    field = draw(st.sampled_from(sorted(FILE_ACTION_FIELDS[key])))
    kind, required = FILE_ACTION_FIELDS[key][field]
    if required and draw(st.booleans()):
        body.pop(field, None)
        if draw(st.booleans()):
            body[field] = None
    else:
        body[field] = draw(_bad_values(kind))
    if field == "size" and not draw(st.booleans()):
        body[field] = draw(st.integers(-(10**6), -1))
    return field, {key: body}


def _lines(actions: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(a).encode() + b"\n" for a in actions)


def _assert_named(bad_line: bytes, position: int, n: int) -> CorruptCommitError:
    """Hide ``bad_line`` at ``position`` among ``n`` valid file actions of a second file."""
    first = _lines([b.protocol(), b.metadata(), *[_good("add", i) for i in range(5)]])
    goods = [_lines([_good("add" if i % 3 else "remove", i)]) for i in range(n)]
    second = b"".join(goods[:position]) + bad_line.rstrip(b"\n") + b"\n" + b"".join(goods[position:])
    with pytest.raises(CorruptCommitError) as err:
        parse_log_bytes([first, second], ["00.json", "01.json"], [0, 1])
    assert (err.value.file, err.value.line) == ("01.json", position + 1), str(err.value)
    return err.value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(malformed=malformed_file_action(), position=st.integers(0, 40), extra=st.integers(0, 40))
# Found by this test: a non-string partition value under a key no metaData announced, on a line
# that the reader's sample of 64 lines for such keys skipped, was dropped unseen (now every line is checked).
@example(malformed=("partitionValues", {"remove": {
    "path": "f1.parquet", "deletionTimestamp": 1700000000000, "dataChange": True, "size": 1, "extendedFileMetadata": True,
    "partitionValues": {"a": 0}}}), position=27, extra=33)
@example(malformed=("tags", {"add": {**_good("add", 1)["add"], "tags": {"a": True}}}), position=38, extra=23)
def test_every_malformed_file_action_is_named_by_file_and_line(malformed: tuple[str, dict], position: int, extra: int) -> None:
    field, action = malformed
    err = _assert_named(json.dumps(action).encode(), position, position + extra)
    assert field in str(err)


@pytest.mark.parametrize(("line", "says"), [
    (b'{"add": [1,2]}', "array"),
    (b'{"add": null}', "null"),
    (b'{"add": 7}', "number"),
    (b'{"remove": "x"}', "string"),
    # written with unusual spacing, so not recognised as a file line by its prefix
    (b'{ "add" : [1,2]}', "expected a JSON object"),
    (b'{ "remove": null}', "expected a JSON object"),
    (b'{"add": {"path": "a", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true, '
     b'"deletionVector": "abc"}}', "deletionVector"),
    (b'{"add": {"path": "a", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true, '
     b'"deletionVector": {"pathOrInlineDv": "abc", "sizeInBytes": 1, "cardinality": 1}}}', "storageType"),
    (b'{"add": {"path": "a", "partitionValues": {}, "size": 1000000000000000000000000000000, '
     b'"modificationTime": 1, "dataChange": true}}', "int64"),
    (b'{"add": {"path": "a", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true, '
     b'"stats": {"numRecords": 1}}}', "stats"),
    (b'{"add": {"path": "a", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true}, '
     b'"remove": {"path": "a", "dataChange": true}}', "2 actions"),
])
def test_malformed_file_action_examples(line: bytes, says: str) -> None:
    err = _assert_named(line, 3, 8)
    assert says in str(err)


# ------------------------------------------------------------------ non-file actions

NON_FILE_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "protocol": {"minReaderVersion": ("int", True), "minWriterVersion": ("int", True),
                 "readerFeatures": ("strs", False), "writerFeatures": ("strs", False)},
    "metaData": {"id": ("str", True), "schemaString": ("str", False), "partitionColumns": ("strs", False),
                 "configuration": ("map", False), "format": ("format", False), "name": ("str", False),
                 "description": ("str", False), "createdTime": ("int", False)},
    "txn": {"appId": ("str", True), "version": ("int", True), "lastUpdated": ("int", False)},
    "domainMetadata": {"domain": ("str", True), "configuration": ("str", True), "removed": ("bool", True)},
}


def _good_non_file(key: str) -> dict[str, Any]:
    return {"protocol": b.protocol(), "metaData": b.metadata(), "txn": {"txn": {"appId": "a", "version": 1, "lastUpdated": 5}},
            "domainMetadata": b.domain("d", "{}")}[key]


@st.composite
def malformed_non_file_action(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(st.sampled_from(sorted(NON_FILE_FIELDS)))
    body = dict(_good_non_file(key)[key])
    field = draw(st.sampled_from(sorted(NON_FILE_FIELDS[key])))
    kind, required = NON_FILE_FIELDS[key][field]
    if required and draw(st.booleans()):
        body.pop(field, None)
        return {key: body}
    if kind == "format":
        non_objects = st.one_of([s for name, s in _KINDS.items() if name != "object"])
        value = draw(st.one_of(non_objects, st.just({"provider": 1}), st.just({"options": {"a": 1}})))
    else:
        value = draw(_bad_values(kind))
    body[field] = value
    return {key: body}


@settings(max_examples=200, deadline=None)
@given(action=malformed_non_file_action(), position=st.integers(0, 20))
def test_every_malformed_non_file_action_is_named_by_file_and_line(action: dict, position: int) -> None:
    err = _assert_named(json.dumps(action).encode(), position, position + 5)
    assert next(iter(action)) in str(err)


@pytest.mark.parametrize(("body", "says"), [
    ({"metaData": {**b.metadata()["metaData"], "configuration": ["a", "b"]}}, "configuration"),
    ({"metaData": {**b.metadata()["metaData"], "configuration": {"delta.appendOnly": True}}}, "configuration"),
    ({"metaData": {**b.metadata()["metaData"], "format": "parquet"}}, "format"),
    ({"txn": {"appId": "a", "version": 1, "lastUpdated": "yesterday"}}, "lastUpdated"),
    ({"txn": {"appId": "a", "version": 10**30}}, "64-bit"),
    ({"protocol": {"minReaderVersion": "1", "minWriterVersion": 2}}, "minReaderVersion"),
    ({"metaData": [1, 2]}, "metaData"),
])
def test_malformed_non_file_action_examples(body: dict, says: str) -> None:
    err = _assert_named(json.dumps(body).encode(), 2, 4)
    assert says in str(err)


def test_unknown_actions_stay_ignored() -> None:
    data = _lines([b.protocol(), b.metadata(), {"someFutureAction": [1, 2]}, {"other": "x"}, b.add("a")])
    parsed = parse_log_bytes([data], ["c"], [0])
    assert [r["path"] for r in parsed.file_actions.to_pylist()] == ["a"]


# ------------------------------------------------------------------ bytes and nesting


@pytest.mark.parametrize("line", [
    b'{"add": {"path": "a\xff", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true}}',
    b'{"commitInfo": {"operation": "WRITE\xc3\x28"}}',
    b'{"remove": {"path": "\xed\xa0\x80", "dataChange": true}}',  # an encoded surrogate is not UTF-8
])
def test_invalid_utf8_is_named_by_line(line: bytes) -> None:
    err = _assert_named(line, 4, 9)
    assert "UTF-8" in str(err)


@pytest.mark.parametrize("line", [
    b'{"commitInfo": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
    b'{"txn": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}",
    b'{ "add": {"path": "a", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
])
def test_deeply_nested_json_is_a_corrupt_commit(line: bytes) -> None:
    err = _assert_named(line, 1, 3)
    assert "nested too deeply" in str(err)


def test_deep_nesting_inside_an_add_is_ignored_like_any_unknown_field() -> None:
    # pyarrow's parser is iterative, and unknown fields are ignored: the add itself is valid.
    line = b'{"add": {"path": "a", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true, "x": ' \
        + b"[" * 100_000 + b"]" * 100_000 + b"}}\n"
    rows = parse_log_bytes([line], ["c"], [0]).file_actions.to_pylist()
    assert [r["path"] for r in rows] == ["a"]


# ------------------------------------------------------------------ whole tables


def test_a_dv_that_is_a_string_does_not_bring_deleted_rows_back(table_path: str) -> None:
    b.write_commit(table_path, 0, [b.protocol(3, 7, ["deletionVectors"], ["deletionVectors"]), b.metadata(), b.add("a.parquet")])
    path = b.write_commit(table_path, 1, [b.remove("a.parquet"), b.commit_info()])
    with open(path, "a") as out:
        out.write('{"add": {"path": "a.parquet", "partitionValues": {}, "size": 1, "modificationTime": 1, '
                  '"dataChange": true, "deletionVector": "u1234"}}\n')
    with pytest.raises(CorruptCommitError) as err:
        load_snapshot(IO, table_path).add_actions  # noqa: B018
    assert err.value.file.endswith("00000000000000000001.json") and err.value.line == 3


@pytest.mark.parametrize(("field", "values", "typ"), [
    ("size", ["1", "2"], pa.string()),
    ("dataChange", ["true", "false"], pa.string()),
    ("path", [1, 2], pa.int64()),
    ("deletionVector", ["abc", "def"], pa.string()),
    ("partitionValues", [[("a", 1)], [("a", 2)]], pa.map_(pa.string(), pa.int64())),
    ("stats", [{"numRecords": 1}, {"numRecords": 2}], pa.struct([("numRecords", pa.int64())])),
])
def test_checkpoint_column_of_the_wrong_type_is_corrupt(table_path: str, field: str, values: list, typ: pa.DataType) -> None:
    _write_checkpoint_with(table_path, [b.protocol(), b.metadata(), b.add("a"), b.add("b")], "add", field,
                           pa.array([None, None, *values], typ))
    with pytest.raises(CorruptCheckpointError) as err:
        _ = load_snapshot(IO, table_path).add_actions
    assert field in str(err.value) and "row 2" in str(err.value)


def _write_checkpoint_with(table_path: str, actions: list[dict], column: str, field: str, values: pa.Array) -> None:
    """A version-0 checkpoint of ``actions`` whose ``column.field`` is replaced by ``values``."""
    table = b.checkpoint_table(actions)
    struct = table.column(column).combine_chunks()
    children = {f.name: struct.field(f.name) for f in struct.type}
    children[field] = values
    replaced = pa.StructArray.from_arrays(list(children.values()), names=list(children), mask=struct.is_null())
    table = table.set_column(table.schema.get_field_index(column), column, replaced)
    os.makedirs(b.log_dir(table_path), exist_ok=True)
    pq.write_table(table, os.path.join(b.log_dir(table_path), f"{0:020d}.checkpoint.parquet"))
    b.write_commit(table_path, 1, [b.commit_info()])


@pytest.mark.parametrize(("column", "field", "values"), [
    ("metaData", "configuration", pa.array([None, [("delta.appendOnly", 1)], None], pa.map_(pa.string(), pa.int64()))),
    ("metaData", "partitionColumns", pa.array([None, "a", None], pa.string())),
    ("protocol", "minReaderVersion", pa.array(["1", None, None], pa.string())),
    ("txn", "lastUpdated", pa.array([None, None, "yesterday"], pa.string())),
])
def test_checkpoint_non_file_column_of_the_wrong_type_is_corrupt(
    table_path: str, column: str, field: str, values: pa.Array
) -> None:
    _write_checkpoint_with(table_path, [b.protocol(), b.metadata(), b.txn("app", 3)], column, field, values)
    with pytest.raises(CorruptCheckpointError) as err:
        load_snapshot(IO, table_path)
    assert column in str(err.value) and field in str(err.value)


@pytest.mark.parametrize("dv", [
    {"storageType": None, "pathOrInlineDv": "abc", "offset": None, "sizeInBytes": 1, "cardinality": 1},
    {"storageType": "x", "pathOrInlineDv": "abc", "offset": None, "sizeInBytes": 1, "cardinality": 1},
    {"storageType": "u", "pathOrInlineDv": None, "offset": None, "sizeInBytes": 1, "cardinality": 1},
    {"storageType": "u", "pathOrInlineDv": "abc", "offset": None, "sizeInBytes": -1, "cardinality": 1},
])
def test_checkpoint_incomplete_dv_is_corrupt(table_path: str, dv: dict) -> None:
    b.write_classic_checkpoint(table_path, 0, [b.protocol(), b.metadata(), b.add("a", deletion_vector=dv)])
    b.write_commit(table_path, 1, [b.commit_info()])
    with pytest.raises(CorruptCheckpointError) as err:
        _ = load_snapshot(IO, table_path).add_actions
    assert "deletionVector" in str(err.value)


def test_checkpoint_all_null_dv_struct_is_no_dv(table_path: str) -> None:
    empty = {"storageType": None, "pathOrInlineDv": None, "offset": None, "sizeInBytes": None, "cardinality": None}
    b.write_classic_checkpoint(table_path, 0, [b.protocol(), b.metadata(), b.add("a", deletion_vector=empty)])
    b.write_commit(table_path, 1, [b.commit_info()])
    assert load_snapshot(IO, table_path).add_actions.column("dv_id").to_pylist() == [None]


def test_checkpoint_metadata_of_wrong_types_is_refused(table_path: str) -> None:
    meta = b.metadata()["metaData"]
    b.write_classic_checkpoint(table_path, 0, [b.protocol(), {"metaData": {**meta, "schemaString": '{"type": "struct", "fields": 7}'}}])
    b.write_commit(table_path, 1, [b.commit_info()])
    with pytest.raises(InvalidLogError, match="fields"):
        load_snapshot(IO, table_path)


@pytest.mark.parametrize(("column", "values"), [
    ("add", pa.array([None, None, "a.parquet"], pa.string())),
    ("add", pa.array([None, None, {"size": 1}], pa.struct([("size", pa.int64())]))),
    ("metaData", pa.array([None, "x", None], pa.string())),
    ("protocol", pa.array([{"v": 1}, None, None], pa.struct([("v", pa.int64())]))),
])
def test_checkpoint_action_column_that_is_not_the_protocols_struct_is_corrupt(
    table_path: str, column: str, values: pa.Array
) -> None:
    # Read as "no such actions", a broken add column would empty the table.
    table = b.checkpoint_table([b.protocol(), b.metadata(), b.add("a")])
    table = table.set_column(table.schema.get_field_index(column), column, values)
    os.makedirs(b.log_dir(table_path), exist_ok=True)
    pq.write_table(table, os.path.join(b.log_dir(table_path), f"{0:020d}.checkpoint.parquet"))
    b.write_commit(table_path, 1, [b.commit_info()])
    with pytest.raises(CorruptCheckpointError, match=f"its '{column}' column"):
        _ = load_snapshot(IO, table_path).add_actions


@pytest.mark.parametrize("line", [
    rb'{"add": {"path": "a\ud800", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true}}',
    rb'{"commitInfo": {"operation": "\udc00"}}',
    rb'{"metaData": {"id": "\ud800x", "schemaString": "{}"}}',
])
def test_unpaired_surrogate_escapes_are_named_by_line(line: bytes) -> None:
    err = _assert_named(line, 2, 5)
    assert "surrogate" in str(err)


def test_surrogate_pairs_are_read() -> None:
    line = rb'{"add": {"path": "\ud83d\ude00", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true}}'
    assert parse_log_bytes([line + b"\n"], ["c"], [0]).file_actions.column("path").to_pylist() == ["\U0001f600"]


# Arrow types a checkpoint column may be written with, and the protocol types each can hold.
_ARROW_KINDS: dict[str, tuple[pa.DataType, Any, set[str]]] = {
    "string": (pa.string(), "x", {"str"}),
    "int64": (pa.int64(), 7, {"int"}),
    "float64": (pa.float64(), 1.5, set()),
    "bool": (pa.bool_(), True, {"bool"}),
    "list": (pa.list_(pa.string()), ["x"], set()),
    "int_map": (pa.map_(pa.string(), pa.int64()), [("k", 1)], set()),
    "struct": (pa.struct([("z", pa.int64())]), {"z": 1}, set()),
}


@st.composite
def malformed_checkpoint_column(draw: st.DrawFn) -> tuple[str, str, pa.Array]:
    """An add/remove field of a checkpoint written with a type the protocol's type cannot hold,
    or a required field left null in the second action row."""
    key = draw(st.sampled_from(["add", "remove"]))
    field = draw(st.sampled_from(sorted(f for f in FILE_ACTION_FIELDS[key] if f != "path")))
    kind, required = FILE_ACTION_FIELDS[key][field]
    if required and draw(st.booleans()):
        typ = b.V1_SCHEMA.field(key).type.field(field).type
        good = b.checkpoint_table([b.protocol(), b.metadata(), _good(key, 0), _good(key, 1)]).column(key).combine_chunks()
        return key, field, pa.concat_arrays([good.field(field).slice(0, 3), pa.nulls(1, typ)])
    wrong = draw(st.sampled_from(sorted(name for name, (_, _, holds) in _ARROW_KINDS.items() if kind not in holds)))
    typ, value, _ = _ARROW_KINDS[wrong]
    return key, field, pa.array([None, None, value, value], typ)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(malformed=malformed_checkpoint_column())
def test_every_checkpoint_column_of_a_wrong_type_is_corrupt(tmp_path_factory: pytest.TempPathFactory,
                                                             malformed: tuple[str, str, pa.Array]) -> None:
    key, field, values = malformed
    table_path = str(tmp_path_factory.mktemp("checkpoint"))
    _write_checkpoint_with(table_path, [b.protocol(), b.metadata(), _good(key, 0), _good(key, 1)], key, field, values)
    snapshot = load_snapshot(IO, table_path)
    with pytest.raises(CorruptCheckpointError) as err:
        _ = snapshot.add_actions if key == "add" else snapshot.tombstones
    assert field in str(err.value) and ("row 2" in str(err.value) or "row 3" in str(err.value)), str(err.value)


_ADD_BODY = '"add": {"path": "a", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true}'


@pytest.mark.parametrize("line", [
    '{"commitInfo": {}, ' + _ADD_BODY + "}",
    '{"metaData": {"id": "x"}, "txn": {"appId": "a", "version": 1}}',
    "{" + _ADD_BODY + ', "remove": {"path": "a", "dataChange": true}}',
])
def test_a_line_with_several_actions_is_corrupt(line: str) -> None:
    err = _assert_named(line.encode(), 2, 4)
    assert "actions" in str(err)
    with pytest.raises(CorruptCommitError, match="actions"):
        parse_commit_bytes(b'{"commitInfo": {}}\n' + line.encode() + b"\n", "c.json")
