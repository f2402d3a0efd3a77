"""The JSON commit readers: one commit as dicts, and the vectorised bulk reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import CorruptCommitError
from airflow_delta.engine.model.actions import FILE_ACTIONS_SCHEMA
from airflow_delta.engine.read import commit_reader as cr
from airflow_delta.engine.read.commit_reader import (
    parse_log_bytes,
    partition_keys_of,
    read_commit_actions,
    read_commits,
    struct_to_map,
)
from airflow_delta.engine.read.listing import list_log_segment
from airflow_delta.engine.storage.fileio import FileInfo, LocalFileIO
from tests.engine.read import log_builders as b

IO = LocalFileIO()


def _lines(*actions: dict) -> bytes:
    return b"".join(json.dumps(a).encode() + b"\n" for a in actions)


def _rows(table: pa.Table) -> list[dict]:
    return table.to_pylist()


def test_read_commit_actions(table_path: str) -> None:
    b.write_commit(table_path, 0, [b.commit_info(), b.protocol(), b.metadata(), b.add("a")])
    actions = read_commit_actions(IO, table_path, 0)
    assert [next(iter(a)) for a in actions] == ["commitInfo", "protocol", "metaData", "add"]


def test_read_commit_actions_names_the_corrupt_line(table_path: str) -> None:
    path = b.write_raw(table_path, f"{0:020d}.json", _lines(b.commit_info(), b.protocol()) + b'{"add": {"path": \n')
    with pytest.raises(CorruptCommitError) as err:
        read_commit_actions(IO, table_path, 0)
    assert err.value.file == path and err.value.line == 3
    assert f"{path}, line 3" in str(err.value)


def test_bulk_versions_seq_and_fields() -> None:
    c0 = _lines(b.commit_info(), b.protocol(), b.metadata(["part"]),
                b.add("part=x/a%20b.parquet", size=10, partition_values={"part": "x"}, stats='{"numRecords":3}',
                      tags={"k": "v"}))
    c1 = _lines(b.remove("part=x/a%20b.parquet", deletion_timestamp=5),
                b.add("c", size=20, partition_values={"part": None}, deletion_vector=b.dv("abc", offset=4)))
    parsed = parse_log_bytes([c0, c1], ["c0", "c1"], [0, 1], seq_start=100)
    rows = _rows(parsed.file_actions)
    assert parsed.file_actions.schema == FILE_ACTIONS_SCHEMA
    assert [(r["version"], r["seq"], r["is_add"], r["path"]) for r in rows] == [
        (0, 103, True, "part=x/a%20b.parquet"),  # paths stay encoded
        (1, 104, False, "part=x/a%20b.parquet"),
        (1, 105, True, "c"),
    ]
    assert rows[0]["partition_values"] == [("part", "x")]
    assert rows[0]["tags"] == [("k", "v")]
    assert rows[0]["stats"] == '{"numRecords":3}'
    assert rows[0]["size"] == 10 and rows[0]["data_change"] is True and rows[0]["dv_id"] is None
    assert rows[1]["deletion_timestamp"] == 5 and rows[1]["partition_values"] is None
    assert rows[2]["partition_values"] == [("part", None)]  # a null partition value is kept
    assert rows[2]["dv_id"] == "uabc@4"
    assert rows[2]["deletion_vector"] == {"storageType": "u", "pathOrInlineDv": "abc", "offset": 4,
                                          "sizeInBytes": 10, "cardinality": 1}
    assert [(a.version, a.seq, a.key) for a in parsed.actions] == [
        (0, 100, "commitInfo"), (0, 101, "protocol"), (0, 102, "metaData")]
    assert parsed.num_lines == 6


def test_date_like_partition_values_stay_strings() -> None:
    # pyarrow's JSON inference would read these as timestamps; they must round-trip exactly.
    values = ["2024-01-01", "2024-01-01 10:00:00", "1", "__HIVE_DEFAULT_PARTITION__"]
    data = _lines(*[b.add(f"f{i}", partition_values={"d": v, "other": v}, tags={"t": v}) for i, v in enumerate(values)])
    for keys in ([], ["d"]):  # declared or not
        rows = _rows(parse_log_bytes([data], ["c"], [0], partition_keys=keys).file_actions)
        assert [dict(r["partition_values"]) for r in rows] == [{"d": v, "other": v} for v in values]
        assert [dict(r["tags"]) for r in rows] == [{"t": v} for v in values]


def test_partition_keys_from_metadata_include_physical_names() -> None:
    schema = json.dumps({"type": "struct", "fields": [
        {"name": "p", "type": "string", "nullable": True,
         "metadata": {"delta.columnMapping.physicalName": "col-123"}},
        {"name": "x", "type": "long", "nullable": True, "metadata": {}},
    ]})
    assert partition_keys_of(b.metadata(["p"], schema_string=schema)["metaData"]) == {"p", "col-123"}
    assert partition_keys_of(b.metadata()["metaData"]) == set()


def test_unusual_formatting_and_types_fall_back_to_exact_parse() -> None:
    data = (
        b'{ "add" : {"path": "spaced", "partitionValues": {}, "size": 1, "modificationTime": 2, "dataChange": true}}\n'
        b'{"add": {"partitionValues": {"n": "1"}, "path": "reordered", "size": 1, "modificationTime": 2, "dataChange": true}}\n'
        b"\n"
        b'{"remove": {"path": "r", "dataChange": false}}\r\n'
    )
    rows = _rows(parse_log_bytes([data], ["c"], [3]).file_actions)
    assert [(r["path"], r["is_add"], r["seq"]) for r in rows] == [("spaced", True, 0), ("reordered", True, 1), ("r", False, 3)]
    assert rows[1]["partition_values"] == [("n", "1")]


def test_unknown_actions_and_fields_are_ignored() -> None:
    data = _lines(
        {"futureAction": {"x": 1}},
        {"cdc": {"path": "_change_data/x", "partitionValues": {}, "size": 1, "dataChange": False}},
        {"add": {"path": "a", "partitionValues": {}, "size": 1, "modificationTime": 2, "dataChange": True,
                 "someNewField": {"nested": [1, 2]}}},
    )
    parsed = parse_log_bytes([data], ["c"], [0])
    assert [r["path"] for r in _rows(parsed.file_actions)] == ["a"]
    assert [a.key for a in parsed.actions] == ["futureAction", "cdc"]


def test_files_without_trailing_newline_do_not_merge() -> None:
    c0 = _lines(b.add("a")).rstrip(b"\n")
    c1 = _lines(b.add("b")).rstrip(b"\n")
    rows = _rows(parse_log_bytes([c0, c1], ["c0", "c1"], [0, 1]).file_actions)
    assert [(r["path"], r["version"]) for r in rows] == [("a", 0), ("b", 1)]


@pytest.mark.parametrize("bad", [b'{"add": {"path": "x", "size": }}', b'{"remove": tru', b'{"metaData": {', b"[1, 2]"])
def test_corrupt_line_is_named(bad: bytes) -> None:
    good = _lines(b.commit_info(), b.add("a"))
    with pytest.raises(CorruptCommitError) as err:
        parse_log_bytes([good, good + bad + b"\n" + good], ["first.json", "second.json"], [0, 1])
    assert (err.value.file, err.value.line) == ("second.json", 3)


def test_add_without_path_is_corrupt() -> None:
    with pytest.raises(CorruptCommitError) as err:
        parse_log_bytes([b'{"add": {"size": 1}}\n'], ["c.json"], [0])
    assert err.value.line == 1 and "path" in str(err.value)


def test_metadata_only_read_skips_file_actions() -> None:
    parsed = parse_log_bytes([_lines(b.protocol(), b.add("a"), b.add("b"))], ["c"], [0], file_actions=False)
    assert parsed.file_actions.num_rows == 0 and [a.key for a in parsed.actions] == ["protocol"]


def test_read_commits_from_disk(table_path: str) -> None:
    for v in range(12):  # more than the sequential threshold: read in parallel
        b.write_commit(table_path, v, [b.commit_info(), *([b.protocol(), b.metadata()] if v == 0 else []), b.add(f"f{v}")])
    seg = list_log_segment(IO, table_path)
    parsed = read_commits(IO, seg.commit_files, list(range(12)))
    assert parsed.file_actions.column("path").to_pylist() == [f"f{v}" for v in range(12)]
    assert parsed.file_actions.column("version").to_pylist() == list(range(12))


def test_struct_to_map() -> None:
    arr = pa.array([{"a": "1", "b": None}, None, {"a": None, "b": "2"}], pa.struct([("a", pa.string()), ("b", pa.string())]))
    assert struct_to_map(arr, keep_null_values=True).to_pylist() == [[("a", "1"), ("b", None)], None, [("a", None), ("b", "2")]]
    assert struct_to_map(arr, keep_null_values=False).to_pylist() == [[("a", "1")], None, [("b", "2")]]
    empty = pa.array([{}, None], pa.struct([]))
    assert struct_to_map(empty, keep_null_values=True).to_pylist() == [[], None]


def test_slow_and_fast_paths_agree() -> None:
    actions = [b.add(f"p={i % 3}/f{i}", size=i, partition_values={"p": str(i % 3)}, tags={"i": str(i)},
                     deletion_vector=b.dv(f"dv{i}", offset=i if i % 2 else None) if i % 4 == 0 else None)
               for i in range(20)]
    actions += [b.remove(f"p=0/f{i}", size=i, partition_values={"p": "0"}) for i in range(0, 20, 3)]
    fast = parse_log_bytes([_lines(*actions)], ["c"], [7]).file_actions
    slow = _rows_from_dicts([(7, i, next(iter(a)), next(iter(a.values()))) for i, a in enumerate(actions)])
    assert fast.to_pylist() == slow.to_pylist()


def _rows_from_dicts(rows: list[tuple[int, int, str, dict]]) -> pa.Table:
    """FILE_ACTIONS rows built from parsed JSON dicts, one by one: an independent oracle."""
    def pairs(value: dict | None, keep_nulls: bool) -> list | None:
        return None if value is None else [(k, v) for k, v in value.items() if keep_nulls or v is not None]

    records = []
    for version, seq, key, body in rows:
        dv = body.get("deletionVector")
        dv_id = None
        if dv is not None:
            dv_id = f"{dv['storageType']}{dv['pathOrInlineDv']}" + (f"@{dv['offset']}" if dv.get("offset") is not None else "")
        records.append({
            "version": version, "seq": seq, "is_add": key == "add", "path": body["path"], "dv_id": dv_id,
            "partition_values": pairs(body.get("partitionValues"), True), "size": body.get("size"),
            "modification_time": body.get("modificationTime"), "data_change": body.get("dataChange"),
            "stats": body.get("stats"), "tags": pairs(body.get("tags"), False),
            "deletion_vector": None if dv is None else {k: dv.get(k) for k in FILE_ACTIONS_SCHEMA.field("deletion_vector").type.names},
            "base_row_id": body.get("baseRowId"), "default_row_commit_version": body.get("defaultRowCommitVersion"),
            "clustering_provider": body.get("clusteringProvider"), "deletion_timestamp": body.get("deletionTimestamp"),
            "extended_file_metadata": body.get("extendedFileMetadata"),
        })
    return pa.Table.from_pylist(records, schema=FILE_ACTIONS_SCHEMA)


def test_read_commits_when_listed_sizes_are_wrong(table_path: str) -> None:
    paths = [b.write_commit(table_path, v, [b.add(f"f{v}")]) for v in range(3)]
    for sizes in ([1, 1, 1], [0, 0, 0], [10**6] * 3):  # stale, unknown, too large
        files = [FileInfo(p, s, 0) for p, s in zip(paths, sizes, strict=True)]
        parsed = read_commits(IO, files, [0, 1, 2])
        assert parsed.file_actions.column("path").to_pylist() == ["f0", "f1", "f2"]


def test_commit_info_tags_do_not_disturb_file_tags() -> None:
    data = _lines(
        {"commitInfo": {"tags": {"restoresDeletedRows": "false"}, "operationMetrics": {"n": "1"}}},
        b.add("a", tags={"INSERTION_TIME": "1700000000000000"}),
        {"commitInfo": {"tags": {"x": 1}, "operationMetrics": {"n": 2}}},  # types differ from the first
        b.add("b"),
    )
    rows = _rows(parse_log_bytes([data], ["c"], [0]).file_actions)
    assert [(r["path"], r["tags"]) for r in rows] == [("a", [("INSERTION_TIME", "1700000000000000")]), ("b", None)]


# ------------------------------------------------------------------ chunked parsing


def test_chunked_parse_equals_one_parse() -> None:
    actions = [b.commit_info(), b.protocol(), b.metadata(["p"])]
    for i in range(40):
        actions.append(b.add(f"p={i % 3}/f{i}.parquet", size=i, partition_values={"p": str(i % 3)},
                             stats=f'{{"numRecords":{i}}}', tags={"k": str(i)} if i % 7 == 0 else None,
                             deletion_vector=b.dv(f"dv{i}", offset=i) if i % 5 == 0 else None))
        if i % 4 == 3:
            actions.append(b.remove(f"p={i % 3}/f{i - 1}.parquet"))
    data = _lines(*actions[:20]) + b"\n   \n" + _lines(*actions[20:])
    log = cr.split_log_lines([data, _lines(b.add("last.parquet"))], ["a.json", "b.json"], [3, 4])
    assert log is not None
    one = cr._parse_all_lines_chunked(log, 5, {"p"}, chunk_bytes=1 << 30)
    for chunk in (1, 100, 1000):
        assert cr._parse_all_lines_chunked(log, 5, {"p"}, chunk_bytes=chunk).to_pylist() == one.to_pylist()
    rows = one.to_pylist()
    assert len(rows) == 40 + 10 + 1 and rows[-1]["version"] == 4 and rows[0]["seq"] == 5 + 3
    assert rows[0]["tags"] == [("k", "0")] and rows[0]["dv_id"] == "udv0@0"


def test_empty_file_actions_has_the_file_actions_schema() -> None:
    assert cr.EMPTY_FILE_ACTIONS.schema == FILE_ACTIONS_SCHEMA and cr.EMPTY_FILE_ACTIONS.num_rows == 0


def test_lines_longer_than_a_parse_block() -> None:
    stats = json.dumps({"numRecords": 1, "minValues": {f"c{i}": "x" * 40 for i in range(40_000)}})  # ~2 MB
    data = _lines(b.protocol(), b.metadata(), b.add("big.parquet", stats=stats), b.add("small.parquet"))
    assert cr._read_json(pa.py_buffer(data), []).num_rows == 4  # the fast parse copes
    parsed = parse_log_bytes([data], ["0.json"], [0])
    assert parsed.file_actions.column("path").to_pylist() == ["big.parquet", "small.parquet"]
    assert parsed.file_actions.column("stats").to_pylist()[0] == stats


# ------------------------------------------------------------------ tags: map<string,string>, linear memory

_TAG_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8) | st.sampled_from(
    ['"', "\\", "{", "}", '"tags":{', ":", ",", "null", '\\"', "tags"]
)


@settings(max_examples=150, deadline=None)
@given(
    tags=st.lists(st.none() | st.dictionaries(_TAG_TEXT, st.none() | _TAG_TEXT, max_size=4), min_size=1, max_size=12),
    spaced=st.booleans(),
    nested_tags=st.booleans(),
)
def test_tags_read_exactly_as_json_says(tags: list[dict | None], spaced: bool, nested_tags: bool) -> None:
    """Any keys and values (quotes, escapes, braces, "tags" itself, nulls) come out as JSON decodes them."""
    actions = []
    for i, t in enumerate(tags):
        body = b.add(f"f{i}")["add"]
        if nested_tags and i % 2:  # an unknown field that holds a "tags" object of its own
            body = {"future": {"tags": {"not": "these"}}, **body}
        if t is not None:
            body["tags"] = t
        actions.append({"add" if i % 3 else "remove": body})
    sep = (", ", ": ") if spaced else (",", ":")
    data = b"".join(json.dumps(a, separators=sep, ensure_ascii=bool(len(tags) % 2)).encode() + b"\n" for a in actions)
    rows = parse_log_bytes([data], ["c"], [0]).file_actions.to_pylist()
    expected = [None if t is None else [(k, v) for k, v in t.items() if v is not None] for t in tags]
    assert [r["tags"] for r in rows] == expected


@pytest.mark.parametrize("tags", ['{"a": 1}', '{"a": {"b": "c"}}', '{"a": ["x"]}', '{"a": true}'])
def test_tags_with_non_string_values_are_corrupt(tags: str) -> None:
    line = b'{"add": {"path": "a", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true, "tags": ' \
        + tags.encode() + b"}}\n"
    with pytest.raises(CorruptCommitError) as err:
        parse_log_bytes([_lines(b.add("x")) + line], ["c.json"], [0])
    assert err.value.line == 2 and "tags" in str(err.value)


def test_ten_thousand_distinct_tag_keys_take_memory_linear_in_the_input() -> None:
    """Each add with its own tag key once made one struct column per key (4.4 GB for 1.4 MB);
    the pyarrow pool's peak must now stay a small multiple of the input."""
    code = (
        "import json, pyarrow as pa\n"
        "from airflow_delta.engine.read.commit_reader import parse_log_bytes\n"
        "n = 20000\n"
        "data = ''.join(json.dumps({'add': {'path': f'f{i}', 'partitionValues': {}, 'size': 1, 'modificationTime': 1,"
        " 'dataChange': True, 'tags': {f'key{i}': f'v{i}'}}}) + '\\n' for i in range(n)).encode()\n"
        "rows = parse_log_bytes([data], ['c'], [0]).file_actions\n"
        "assert rows.column('tags')[n - 1].as_py() == [(f'key{n - 1}', f'v{n - 1}')]\n"
        "print(len(data), pa.default_memory_pool().max_memory())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    size, peak = map(int, out.stdout.split())
    assert peak < 40 * size, (size, peak)  # quadratic would be 20,000 x 20,000 struct slots


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.dictionaries(_TAG_TEXT, st.none() | _TAG_TEXT, min_size=1, max_size=4), min_size=1, max_size=10))
def test_partition_values_with_keys_no_metadata_announced_are_read_whole(values: list[dict]) -> None:
    """Keys outside the announced partition columns: every row's map is read exactly (nulls kept)."""
    actions = [{"add": {**b.add(f"f{i}")["add"], "partitionValues": pv}} for i, pv in enumerate(values)]
    rows = parse_log_bytes([_lines(*actions)], ["c"], [0]).file_actions.to_pylist()
    assert [r["partition_values"] for r in rows] == [list(pv.items()) for pv in values]


def test_partition_values_of_announced_keys_must_be_strings() -> None:
    good = b.add("a", partition_values={"p": "1"})
    bad = {"add": {**good["add"], "partitionValues": {"p": 1}}}
    with pytest.raises(CorruptCommitError) as err:
        parse_log_bytes([_lines(b.metadata(partition_columns=["p"]), good, bad)], ["c.json"], [0])
    assert err.value.line == 3 and "partitionValues" in str(err.value)


def test_distinct_unannounced_partition_keys_take_memory_linear_in_the_input() -> None:
    code = (
        "import json, pyarrow as pa\n"
        "from airflow_delta.engine.read.commit_reader import parse_log_bytes\n"
        "n = 20000\n"
        "data = ''.join(json.dumps({'add': {'path': f'f{i}', 'partitionValues': {f'k{i}': f'v{i}', f'j{i}': None},"
        " 'size': 1, 'modificationTime': 1, 'dataChange': True}}) + '\\n' for i in range(n)).encode()\n"
        "rows = parse_log_bytes([data], ['c'], [0]).file_actions\n"
        "assert rows.column('partition_values')[n - 1].as_py() == [(f'k{n - 1}', f'v{n - 1}'), (f'j{n - 1}', None)]\n"
        "print(len(data), pa.default_memory_pool().max_memory())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    size, peak = map(int, out.stdout.split())
    assert peak < 40 * size, (size, peak)


@pytest.mark.parametrize("field", ["tags", "partitionValues"])
def test_a_map_that_gives_a_key_twice_is_corrupt(field: str) -> None:
    """JSON readers disagree on which of two values wins; the struct parse of announced keys refuses it too."""
    good = b.add("a", tags={"x": "1"}, partition_values={"p": "1"})
    bad = _lines(good).replace(f'"{field}": {{'.encode(), f'"{field}": {{"k": "1", "k": "2", '.encode())
    with pytest.raises(CorruptCommitError) as err:
        parse_log_bytes([_lines(good, good) + bad], ["c.json"], [0])
    assert err.value.line == 3 and field in str(err.value)


# ------------------------------------------------------------------ partitionValues: every line checked

_PV_KEYS = st.sampled_from(["p", "day", "da", "d", "x", "p2", "é", "a b", "\u00e9t\u00e9", "-", "[", "\U0001f600", ""])
_PV_VALUES = st.none() | st.text(max_size=3) | st.integers(-2, 2) | st.booleans() | st.just([1]) | st.just({"k": "v"})


def _deviates(pv: dict, announced: list[str]) -> bool:
    return any(k not in announced or not (v is None or isinstance(v, str)) for k, v in pv.items())


@settings(max_examples=300, deadline=None)
@given(announced=st.lists(_PV_KEYS, max_size=4, unique=True), pv=st.dictionaries(_PV_KEYS, _PV_VALUES, max_size=4),
       spaced=st.booleans(), ascii_only=st.booleans())
def test_partition_values_deviation_regex_finds_every_object_the_struct_would_misread(
    announced: list[str], pv: dict, spaced: bool, ascii_only: bool
) -> None:
    """The regex that decides whether a run of lines is read exactly matches every line whose
    partitionValues holds a key not announced or a value that is no string, however it is
    written; and, for objects written plainly, nothing else (so the fast path stays the rule)."""
    sep = (" , ", " : ") if spaced else (",", ":")
    line = json.dumps({"add": {"path": "a", "partitionValues": pv}}, separators=sep, ensure_ascii=ascii_only)
    regex = cr._partition_values_deviation(tuple(announced))
    matched = regex is None or pa.compute.match_substring_regex(pa.array([line], pa.large_string()), regex)[0].as_py()
    if _deviates(pv, announced):
        assert matched, (line, regex)
    elif not ascii_only or all(k.isascii() for k in pv):
        assert not matched, (line, regex)


@settings(max_examples=150, deadline=None)
@given(announced=st.lists(_PV_KEYS, max_size=3, unique=True),
       values=st.lists(st.dictionaries(_PV_KEYS, _PV_VALUES, max_size=3), min_size=1, max_size=8),
       bad_at=st.integers(0, 100), nested=st.booleans())
def test_every_partition_values_object_is_checked_or_read_whole(
    announced: list[str], values: list[dict], bad_at: int, nested: bool
) -> None:
    """Whatever metaData announces and wherever a line sits: a value that is no string is a
    CorruptCommitError naming its line; otherwise every key is read (none dropped unseen).
    ``nested``: each line also carries an unknown field holding a well-formed partitionValues
    object, which must not vouch for the real one."""
    actions = [b.metadata(partition_columns=announced)]
    for i, pv in enumerate(values):
        body = b.add(f"f{i}")["add"] if i % 2 else b.remove(f"f{i}", size=1)["remove"]
        body = {**({"future": {"partitionValues": {k: "x" for k in announced}}} if nested else {}), **body,
                "partitionValues": pv}
        actions.append({"add" if i % 2 else "remove": body})
    goods = [b.add(f"g{i}") for i in range(bad_at)]  # push the lines to any position
    data = _lines(*actions[:1], *goods, *actions[1:])
    broken = [i for i, pv in enumerate(values) if any(not (v is None or isinstance(v, str)) for v in pv.values())]
    if broken:
        with pytest.raises(CorruptCommitError) as err:
            parse_log_bytes([data], ["c.json"], [0])
        assert err.value.line == 2 + bad_at + broken[0] and "partitionValues" in str(err.value)
        return
    rows = parse_log_bytes([data], ["c.json"], [0]).file_actions.to_pylist()[bad_at:]
    # A key announced but absent reads as null, as the protocol's readers take it.
    read = [{k: v for k, v in r["partition_values"] if v is not None} for r in rows]
    assert read == [{k: v for k, v in pv.items() if v is not None} for pv in values]


@pytest.mark.parametrize("table", ["table_with_deletion_logs", "cdf-table-with-cdc-and-dvs", "checkpoints", "simple_table"])
def test_removes_only_read_matches_the_full_read(table: str, tmp_path: Path) -> None:
    # Lite VACUUM's reader: the removes of every commit, as the full parse gives them, adds unparsed.
    import shutil

    from airflow_delta.engine.read.commit_reader import read_commit_removes
    from airflow_delta.engine.read.listing import list_log
    from tests.conftest import shared_tables_dir

    root = tmp_path / table
    shutil.copytree(shared_tables_dir() / table, root)
    listing = list_log(IO, str(root))
    versions = sorted(listing.commits)
    files = [listing.commits[v] for v in versions]
    full = read_commits(IO, files, versions)
    removes = read_commit_removes(IO, files, versions)
    import pyarrow.compute as pc

    expected = full.file_actions.filter(pc.invert(full.file_actions.column("is_add")))
    assert removes.file_actions.select(["version", "path", "deletion_timestamp", "size", "deletion_vector"]).to_pylist() == (
        expected.select(["version", "path", "deletion_timestamp", "size", "deletion_vector"]).to_pylist()
    )
    assert [a.key for a in removes.actions] == [a.key for a in full.actions]


def test_removes_only_read_keeps_removes_written_with_unusual_spacing(tmp_path: Path) -> None:
    from airflow_delta.engine.read.commit_reader import read_commit_removes

    commit = tmp_path / "00000000000000000000.json"
    commit.write_bytes(
        b'{"add": {"path": "a", "partitionValues": {}, "size": 1, "modificationTime": 2, "dataChange": true}}\n'
        b'{ "remove" : {"path": "spaced", "dataChange": true, "deletionTimestamp": 5}}\n'
        b'{"remove": {"path": "plain", "dataChange": true, "deletionTimestamp": 6}}\n'
    )
    parsed = read_commit_removes(IO, IO.list_dir(str(tmp_path)), [0])
    rows = _rows(parsed.file_actions)
    assert sorted((r["path"], r["is_add"], r["deletion_timestamp"]) for r in rows) == [
        ("plain", False, 6), ("spaced", False, 5)
    ]
