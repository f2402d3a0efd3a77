"""Deletion vector files and descriptors: writing, reading, packing, merging, errors, real tables.

Spark-written DV files in the shared tables are the oracle for bit-exact encoding; delta-rs's
DataFusion scan (which applies DVs) is the oracle for the rows a table holds.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import (
    ChecksumMismatchError,
    CorruptDeletionVectorError,
    PathOutsideTableError,
    UnsupportedFeatureError,
)
from airflow_delta.engine.model.actions import DELETION_VECTOR_TYPE, DeletionVectorDescriptor
from airflow_delta.engine.model.deletion_vector_files import (
    decode_dv_file,
    dv_absolute_path,
    dv_descriptor_from_struct,
    dv_descriptors_from_arrow,
    encode_dv_file,
    inline_deletion_vector,
    merge_deletion_vector,
    read_deletion_vector,
    read_deletion_vectors,
    split_uuid_path,
    write_deletion_vector,
    write_deletion_vectors,
)
from airflow_delta.engine.model.roaring_bitmap import RoaringBitmapArray
from airflow_delta.engine.model.z85 import decode_uuid, encode_uuid, z85_decode
from airflow_delta.engine.storage.fileio import LocalFileIO
from tests.engine.model.row_set_strategies import row_sets

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# ------------------------------------------------------------------- DV files


@FAST
@given(st.lists(row_sets.filter(bool), min_size=1, max_size=5))
def test_dv_file_with_several_dvs_round_trips(sets: list[set[int]]) -> None:
    payloads = [RoaringBitmapArray.from_indices(sorted(s)).serialize() for s in sets]
    data, offsets = encode_dv_file(payloads)
    assert data[0] == 1 and offsets[0] == 1
    for payload, offset in zip(payloads, offsets, strict=True):
        assert struct.unpack_from(">i", data, offset)[0] == len(payload)
        assert data[offset + 4 : offset + 4 + len(payload)] == payload
        assert struct.unpack_from(">I", data, offset + 4 + len(payload))[0] == zlib.crc32(payload)
    decoded = decode_dv_file(data)
    assert [off for off, _ in decoded] == offsets
    assert [bm.to_numpy().tolist() for _, bm in decoded] == [sorted(s) for s in sets]


def test_write_deletion_vector_writes_a_uuid_named_file(table_path: str) -> None:
    io = LocalFileIO()
    dv = write_deletion_vector(io, table_path, np.array([9, 0, 4], dtype=np.int64))
    assert (dv.storage_type, dv.offset, dv.cardinality) == ("u", 1, 3)
    assert len(dv.path_or_inline_dv) == 20
    path = Path(table_path) / f"deletion_vector_{decode_uuid(dv.path_or_inline_dv)}.bin"
    assert dv_absolute_path(table_path, dv) == str(path)
    blob = path.read_bytes()
    assert len(blob) == 1 + 4 + dv.size_in_bytes + 4
    assert blob[5 : 5 + dv.size_in_bytes] == RoaringBitmapArray.from_indices([0, 4, 9]).serialize()
    assert read_deletion_vector(io, table_path, dv).to_numpy().tolist() == [0, 4, 9]


def test_write_with_random_prefix_directory(table_path: str) -> None:
    io = LocalFileIO()
    dv = write_deletion_vector(io, table_path, [1, 2], random_prefix_length=3)
    prefix, file_id = split_uuid_path(dv.path_or_inline_dv)
    assert len(prefix) == 3 and prefix.isalnum() and prefix.isascii()
    assert (Path(table_path) / prefix / f"deletion_vector_{file_id}.bin").is_file()
    assert read_deletion_vector(io, table_path, dv).to_numpy().tolist() == [1, 2]


def test_inline_option_writes_no_file(table_path: str) -> None:
    io = LocalFileIO()
    dv = write_deletion_vector(io, table_path, [3, 4, 7], inline=True)
    assert dv.storage_type == "i" and dv.offset is None
    assert os.listdir(table_path) == []
    payload = RoaringBitmapArray.from_indices([3, 4, 7]).serialize()
    assert dv.size_in_bytes == len(payload) and z85_decode(dv.path_or_inline_dv, dv.size_in_bytes) == payload
    assert dv == inline_deletion_vector([7, 3, 4])
    assert read_deletion_vector(io, table_path, dv).to_numpy().tolist() == [3, 4, 7]


def test_write_deletion_vectors_packs_one_file_with_distinct_offsets(table_path: str) -> None:
    io = LocalFileIO()
    sets = [[0, 1], [5], list(range(0, 10_000, 3)), [2**32 + 1]]
    dvs = write_deletion_vectors(io, table_path, sets)
    assert len({dv.path_or_inline_dv for dv in dvs}) == 1
    assert len(os.listdir(table_path)) == 1
    offsets = [dv.offset for dv in dvs]
    assert offsets[0] == 1 and len(set(offsets)) == 4
    for dv, rows in zip(dvs, sets, strict=True):
        assert read_deletion_vector(io, table_path, dv).to_numpy().tolist() == sorted(rows)
    batch = read_deletion_vectors(io, table_path, [dvs[2], None, dvs[0], dvs[3], dvs[0]])
    assert [b.to_numpy().tolist() if b is not None else None for b in batch] == [sorted(sets[2]), None, [0, 1], [2**32 + 1], [0, 1]]


def test_batch_read_mixes_storage_types_and_files(table_path: str) -> None:
    io = LocalFileIO()
    packed = write_deletion_vectors(io, table_path, [[1], [2, 3]])
    single = write_deletion_vector(io, table_path, [4], random_prefix_length=2)
    inline = inline_deletion_vector([5, 6])
    empty = DeletionVectorDescriptor("i", "", 0, 0)
    absolute = DeletionVectorDescriptor("p", "file://" + dv_absolute_path(table_path, single), single.size_in_bytes, 1, 1)
    dvs = [packed[1], None, single, inline, empty, packed[0], absolute]
    expected = [[2, 3], None, [4], [5, 6], [], [1], [4]]
    for workers in (1, 8):
        got = read_deletion_vectors(io, table_path, dvs, max_workers=workers)
        assert [b.to_numpy().tolist() if b is not None else None for b in got] == expected
    # Two descriptors of one frame must each match it: a wrong cardinality is not hidden by a shared read.
    lying = DeletionVectorDescriptor("u", packed[0].path_or_inline_dv, packed[0].size_in_bytes, 2, packed[0].offset)
    with pytest.raises(CorruptDeletionVectorError, match="cardinality 2"):
        read_deletion_vectors(io, table_path, [packed[0], lying])


@FAST
@given(row_sets, row_sets, st.booleans())
def test_merge_holds_old_and_new_rows(old: set[int], new: set[int], inline: bool) -> None:
    import tempfile

    io = LocalFileIO()
    with tempfile.TemporaryDirectory() as root:
        existing = write_deletion_vector(io, root, sorted(old)) if old else None
        if not old and not new:
            with pytest.raises(ValueError):
                merge_deletion_vector(io, root, existing, [])
            return
        merged, dv = merge_deletion_vector(io, root, existing, np.array(sorted(new), dtype=np.uint64), inline=inline)
        assert merged.to_numpy().tolist() == sorted(old | new)
        if existing is not None and new <= old:
            assert dv is existing
        else:
            assert dv.storage_type == ("i" if inline else "u") and dv.cardinality == len(old | new)
        assert read_deletion_vector(io, root, dv) == merged


def test_packing_target_splits_files(table_path: str) -> None:
    io = LocalFileIO()
    dvs = write_deletion_vectors(io, table_path, [[i] for i in range(6)], target_file_size=100)
    files = {dv.path_or_inline_dv for dv in dvs}
    assert 1 < len(files) < 6
    assert read_deletion_vectors(io, table_path, dvs) == [RoaringBitmapArray.from_indices([i]) for i in range(6)]


def test_empty_row_sets_are_refused(table_path: str) -> None:
    with pytest.raises(ValueError, match="no rows to delete"):
        write_deletion_vector(LocalFileIO(), table_path, [])
    with pytest.raises(ValueError, match="no rows to delete"):
        write_deletion_vectors(LocalFileIO(), table_path, [[1], []])
    with pytest.raises(ValueError, match="has 3 records"):
        write_deletion_vector(LocalFileIO(), table_path, [3], num_records=3)
    assert os.listdir(table_path) == []


def test_empty_descriptor_reads_as_empty_without_io() -> None:
    empty = DeletionVectorDescriptor("i", "", 0, 0)  # Spark's DeletionVectorDescriptor.EMPTY
    assert read_deletion_vector(LocalFileIO(), "/nonexistent", empty) == RoaringBitmapArray()


def test_merge_deletion_vector(table_path: str) -> None:
    io = LocalFileIO()
    merged, first = merge_deletion_vector(io, table_path, None, [4, 1])
    assert merged.to_numpy().tolist() == [1, 4] and first.cardinality == 2
    merged, second = merge_deletion_vector(io, table_path, first, np.array([2, 4]), num_records=10)
    assert merged.to_numpy().tolist() == [1, 2, 4]
    assert second.cardinality == 3 and second.unique_id != first.unique_id
    assert read_deletion_vector(io, table_path, first).to_numpy().tolist() == [1, 4]  # the old DV stays readable
    assert read_deletion_vector(io, table_path, second).to_numpy().tolist() == [1, 2, 4]
    files_before = sorted(os.listdir(table_path))
    unchanged, same = merge_deletion_vector(io, table_path, second, [1, 2])
    assert same is second and unchanged.to_numpy().tolist() == [1, 2, 4]
    assert sorted(os.listdir(table_path)) == files_before
    merged, inline = merge_deletion_vector(io, table_path, second, [0], inline=True)
    assert inline.storage_type == "i" and merged.to_numpy().tolist() == [0, 1, 2, 4]


def test_absolute_path_descriptors(table_path: str) -> None:
    io = LocalFileIO()
    u = write_deletion_vector(io, table_path, [6, 8])
    absolute = dv_absolute_path(table_path, u)
    for uri in (absolute, "file://" + absolute, "file:" + absolute):
        p = DeletionVectorDescriptor("p", uri, u.size_in_bytes, u.cardinality, u.offset)
        assert read_deletion_vector(io, table_path, p).to_numpy().tolist() == [6, 8]
    relative = DeletionVectorDescriptor("p", os.path.basename(absolute), u.size_in_bytes, u.cardinality, u.offset)
    with pytest.raises(CorruptDeletionVectorError, match="needs an absolute path"):
        read_deletion_vector(io, table_path, relative)


# ----------------------------------------------------------- DV file errors


def _written(table_path: str, rows: list[int] | None = None) -> tuple[LocalFileIO, DeletionVectorDescriptor, Path]:
    io = LocalFileIO()
    dv = write_deletion_vector(io, table_path, rows or [1, 2, 3])
    return io, dv, Path(dv_absolute_path(table_path, dv))


def test_bad_crc_raises_checksum_mismatch_naming_the_file(table_path: str) -> None:
    io, dv, path = _written(table_path)
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(ChecksumMismatchError) as excinfo:
        read_deletion_vector(io, table_path, dv)
    assert str(path) in str(excinfo.value) and str(path) in excinfo.value.file
    # A flipped payload byte is caught by the same check.
    blob[-1] ^= 0xFF
    blob[10] ^= 0x01
    path.write_bytes(bytes(blob))
    with pytest.raises(ChecksumMismatchError):
        read_deletion_vectors(io, table_path, [dv, dv])


@pytest.mark.parametrize(
    ("damage", "error", "message"),
    [
        (lambda b: b[:-2], CorruptDeletionVectorError, "truncated"),
        (lambda b: b"\x02" + b[1:], CorruptDeletionVectorError, "format version is 2"),
        (lambda b: b[:1] + struct.pack(">i", 7) + b[5:], CorruptDeletionVectorError, "stored size 7"),
    ],
)
def test_damaged_dv_files(table_path: str, damage: Any, error: type[Exception], message: str) -> None:
    io, dv, path = _written(table_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(error, match=message):
        read_deletion_vector(io, table_path, dv)


def test_missing_dv_file(table_path: str) -> None:
    io, dv, path = _written(table_path)
    path.unlink()
    with pytest.raises(CorruptDeletionVectorError, match="does not exist"):
        read_deletion_vector(io, table_path, dv)


def test_cardinality_mismatch(table_path: str) -> None:
    io, dv, _ = _written(table_path)
    lying = DeletionVectorDescriptor(dv.storage_type, dv.path_or_inline_dv, dv.size_in_bytes, 4, dv.offset)
    with pytest.raises(CorruptDeletionVectorError, match="holds 3 rows but its descriptor says cardinality 4"):
        read_deletion_vector(io, table_path, lying)
    inline = inline_deletion_vector([1, 2])
    with pytest.raises(CorruptDeletionVectorError, match="cardinality 5"):
        read_deletion_vector(io, table_path, DeletionVectorDescriptor("i", inline.path_or_inline_dv, inline.size_in_bytes, 5))
    with pytest.raises(CorruptDeletionVectorError, match="only 3 records"):
        read_deletion_vector(io, table_path, dv, num_records=3)


def test_path_escapes_are_refused(table_path: str) -> None:
    io = LocalFileIO()
    outside = os.path.dirname(table_path)
    escaping_u = DeletionVectorDescriptor("u", "../" + encode_uuid(uuid.uuid4()), 34, 1, 1)
    escaping_p = DeletionVectorDescriptor("p", f"file://{outside}/deletion_vector_x.bin", 34, 1, 1)
    other_bucket = DeletionVectorDescriptor("p", "s3://elsewhere/deletion_vector_x.bin", 34, 1, 1)
    for dv in (escaping_u, escaping_p, other_bucket):
        with pytest.raises(PathOutsideTableError):
            read_deletion_vector(io, table_path, dv)
        with pytest.raises(PathOutsideTableError):
            read_deletion_vectors(io, table_path, [dv])


def test_unknown_storage_type_and_bad_inline_data() -> None:
    io = LocalFileIO()
    with pytest.raises(UnsupportedFeatureError, match="storage type 'r'"):
        read_deletion_vector(io, "/t", DeletionVectorDescriptor("r", "dv.bin", 34, 1, 1))
    with pytest.raises(CorruptDeletionVectorError, match="not a Z85 character"):
        read_deletion_vector(io, "/t", DeletionVectorDescriptor("i", "Hell\"", 4, 1))
    with pytest.raises(CorruptDeletionVectorError, match="negative"):
        read_deletion_vector(io, "/t", DeletionVectorDescriptor("u", encode_uuid(uuid.uuid4()), -1, 1, 1))


def test_descriptors_from_arrow_structs() -> None:
    rows = [
        {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4, "sizeInBytes": 40, "cardinality": 6},
        None,
        {"storageType": "i", "pathOrInlineDv": "wi5b=", "offset": None, "sizeInBytes": 4, "cardinality": 1},
    ]
    column = pa.array(rows, type=DELETION_VECTOR_TYPE)
    assert dv_descriptors_from_arrow(column) == [
        DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 40, 6, 4),
        None,
        DeletionVectorDescriptor("i", "wi5b=", 4, 1, None),
    ]
    with pytest.raises(CorruptDeletionVectorError, match="missing or invalid field"):
        dv_descriptor_from_struct({"storageType": "u"})


# ------------------------------------------------------------- shared tables

_DV_TABLES = ["table-with-dv-small", "table_with_deletion_logs", "cdf-table-with-cdc-and-dvs"]


def _json_actions(table: Path, up_to: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    for name in sorted(os.listdir(table / "_delta_log")):
        if len(name) != 25 or not name.endswith(".json") or not name[:20].isdigit():
            continue  # commits only (V2 checkpoints are JSON too)
        version = int(name[:20])
        if up_to is not None and version > up_to:
            break
        for line in (table / "_delta_log" / name).read_text().splitlines():
            if line.strip():
                yield version, json.loads(line)


def _all_descriptors(table: Path) -> list[DeletionVectorDescriptor]:
    """Every DV a shared table references, from its JSON commits and its checkpoints."""
    found: dict[str, DeletionVectorDescriptor] = {}
    v2_checkpoints = [json.loads(line) for p in (table / "_delta_log").glob("*.checkpoint.*.json") for line in p.read_text().splitlines() if line.strip()]
    for action in [a for _, a in _json_actions(table)] + v2_checkpoints:
        for kind in ("add", "remove"):
            if kind in action and action[kind].get("deletionVector"):
                dv = DeletionVectorDescriptor.from_json(action[kind]["deletionVector"])
                found[dv.unique_id] = dv
    checkpoints = [p for p in (table / "_delta_log").rglob("*.parquet") if ".checkpoint" in p.name or p.parent.name == "_sidecars"]
    for path in checkpoints:
        parquet = pq.ParquetFile(path)
        if "add" not in parquet.schema_arrow.names:
            continue
        adds = parquet.read(columns=["add"]).column("add").combine_chunks()
        if "deletionVector" in [f.name for f in adds.type]:
            for dv in dv_descriptors_from_arrow(adds.field("deletionVector")):
                if dv is not None:
                    found[dv.unique_id] = dv
    return list(found.values())


def test_the_checked_tables_are_all_shared_tables_that_use_dvs(shared_tables: Path) -> None:
    # Tables like simple_table_features enable the feature without using it; they have no descriptor.
    using = sorted(t.name for t in shared_tables.iterdir() if (t / "_delta_log").is_dir() and _all_descriptors(t))
    assert using == sorted(_DV_TABLES)


@pytest.mark.parametrize("table_name", _DV_TABLES)
def test_every_spark_dv_decodes_and_reencodes_bit_exactly(shared_tables: Path, table_name: str) -> None:
    table = shared_tables / table_name
    io = LocalFileIO()
    descriptors = _all_descriptors(table)
    assert descriptors
    bitmaps = read_deletion_vectors(io, str(table), descriptors)
    for dv, bitmap in zip(descriptors, bitmaps, strict=True):
        assert bitmap is not None and bitmap.cardinality == dv.cardinality
        assert read_deletion_vector(io, str(table), dv) == bitmap
        path = Path(dv_absolute_path(str(table), dv))
        blob = path.read_bytes()
        assert dv.offset is not None
        original = blob[dv.offset + 4 : dv.offset + 4 + dv.size_in_bytes]
        assert bitmap.serialize() == original
        assert RoaringBitmapArray.from_indices(bitmap.to_numpy()).serialize() == original
    # Every DV file, walked frame by frame, re-encodes to the same bytes.
    for path in table.glob("deletion_vector_*.bin"):
        blob = path.read_bytes()
        frames = decode_dv_file(blob, str(path))
        assert encode_dv_file([bm.serialize() for _, bm in frames]) == (blob, [off for off, _ in frames])


def _rows_by_hand(table: Path, version: int, io: LocalFileIO) -> list[tuple[Any, ...]]:
    """Rows of ``version``: JSON replay, parquet files read directly, our DVs applied."""
    live: dict[tuple[str, str | None], dict[str, Any]] = {}
    schema: list[str] = []
    for _, action in _json_actions(table, version):
        if "metaData" in action:
            schema = [f["name"] for f in json.loads(action["metaData"]["schemaString"])["fields"]]
        for kind in ("add", "remove"):
            if kind in action:
                body = action[kind]
                dv = body.get("deletionVector")
                key = (body["path"], DeletionVectorDescriptor.from_json(dv).unique_id if dv else None)
                if kind == "add":
                    live[key] = body
                else:
                    live.pop(key, None)
    rows: list[tuple[Any, ...]] = []
    for (path, _), add in live.items():
        data = pq.read_table(table / path, columns=schema)
        if add.get("deletionVector"):
            dv = DeletionVectorDescriptor.from_json(add["deletionVector"])
            num_records = json.loads(add["stats"])["numRecords"]
            assert num_records == data.num_rows
            mask = read_deletion_vector(io, str(table), dv, num_records=num_records).keep_mask(data.num_rows)
            data = data.filter(pa.array(mask))
            assert data.num_rows == num_records - dv.cardinality
        rows.extend(zip(*(data.column(c).to_pylist() for c in schema), strict=True))
    return sorted(rows, key=repr)


def _rows_by_delta_rs(table: Path, version: int, columns: list[str]) -> list[tuple[Any, ...]]:
    deltalake = pytest.importorskip("deltalake")
    dt = deltalake.DeltaTable(str(table), version=version)
    result = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all())
    return sorted(zip(*(result.column(c).to_pylist() for c in columns), strict=True), key=repr)


@pytest.mark.parametrize("table_name", _DV_TABLES)
def test_rows_left_after_our_dvs_match_delta_rs_at_every_version(shared_tables: Path, table_name: str) -> None:
    table = shared_tables / table_name
    io = LocalFileIO()
    versions = sorted({v for v, _ in _json_actions(table)})
    checked_with_dv = 0
    for version in versions:
        ours = _rows_by_hand(table, version, io)
        columns = [
            f["name"]
            for v, a in _json_actions(table, version)
            if "metaData" in a
            for f in json.loads(a["metaData"]["schemaString"])["fields"]
        ]
        columns = list(dict.fromkeys(columns))
        assert ours == _rows_by_delta_rs(table, version, columns), f"{table_name} v{version}"
        checked_with_dv += any("deletionVector" in a.get("add", {}) for _, a in _json_actions(table, version))
    assert checked_with_dv > 0


# ------------------------------------------------------------ end to end


def _commit_table_with_dvs(root: str, dvs: list[DeletionVectorDescriptor | None], files: list[str]) -> None:
    """Version 0 of a DV table, written by hand: protocol, metaData, one add per file with its DV."""
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    actions: list[dict[str, Any]] = [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema),
                      "partitionColumns": [], "configuration": {"delta.enableDeletionVectors": "true"}, "createdTime": 1700000000000}},
    ]
    for name, dv in zip(files, dvs, strict=True):
        add: dict[str, Any] = {"path": name, "partitionValues": {}, "size": os.path.getsize(os.path.join(root, name)),
                               "modificationTime": 1700000000000, "dataChange": True, "stats": json.dumps({"numRecords": 100})}
        if dv is not None:
            add["deletionVector"] = dv.to_json()
        actions.append({"add": add})
    os.makedirs(os.path.join(root, "_delta_log"))
    with open(os.path.join(root, "_delta_log", f"{0:020d}.json"), "w") as out:
        out.write("\n".join(json.dumps(a) for a in actions) + "\n")


def test_delta_rs_reads_a_table_with_dvs_we_wrote(table_path: str) -> None:
    deltalake = pytest.importorskip("deltalake")
    io = LocalFileIO()
    files = []
    for i in range(7):
        name = f"part-{i:05d}.parquet"
        pq.write_table(pa.table({"id": pa.array(range(i * 100, i * 100 + 100), pa.int64())}), os.path.join(table_path, name))
        files.append(name)
    packed = write_deletion_vectors(io, table_path, [[10, 11, 12], [50], list(range(0, 100, 2))])
    dvs: list[DeletionVectorDescriptor | None] = [
        write_deletion_vector(io, table_path, [0, 5, 99], random_prefix_length=2),
        write_deletion_vector(io, table_path, [1, 2, 3], inline=True),
        *packed,
        None,
    ]
    on_disk = write_deletion_vector(io, table_path, [7, 8])
    dvs.append(DeletionVectorDescriptor("p", "file://" + dv_absolute_path(table_path, on_disk), on_disk.size_in_bytes, 2, 1))
    deleted = {0, 5, 99, 101, 102, 103, 210, 211, 212, 350, *range(400, 500, 2), 607, 608}
    _commit_table_with_dvs(table_path, dvs, files)
    dt = deltalake.DeltaTable(table_path)
    result = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT id FROM t").read_all())
    assert sorted(result.column("id").to_pylist()) == sorted(set(range(700)) - deleted)
    from airflow_delta.engine.table import DeltaTable

    assert sorted(DeltaTable(table_path).snapshot().to_arrow().column("id").to_pylist()) == sorted(set(range(700)) - deleted)


def test_deletes_committed_through_our_writer_and_transaction_read_back(table_path: str) -> None:
    """Two DELETE rounds done by us (DV files + remove/add commits); delta-rs and our scan agree."""
    deltalake = pytest.importorskip("deltalake")
    from airflow_delta.engine.model.actions import AddFile
    from airflow_delta.engine.storage.paths import decode_log_path
    from airflow_delta.engine.table import DeltaTable

    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    table = DeltaTable.create(table_path, schema, properties={"delta.enableDeletionVectors": "true"})
    for start in (0, 1000, 2000):
        ids = pa.array(range(start, start + 1000), pa.int64())
        table.append(pa.table({"id": ids, "name": pa.array([f"n{i}" for i in ids.to_pylist()])}))
    rounds = [lambda ids: ids % 7 == 0, lambda ids: (ids % 5 == 0) | (ids % 7 == 0)]
    for number, matches in enumerate(rounds):
        with table.transaction() as txn:
            files = txn.read_files()
            changed = []
            for row in files.to_pylist():
                ids = pq.read_table(os.path.join(table_path, decode_log_path(row["path"])), columns=["id"]).column("id").to_numpy()
                existing = dv_descriptor_from_struct(row["deletion_vector"]) if row["deletion_vector"] else None
                _, dv = merge_deletion_vector(
                    table.io, table.root, existing, np.flatnonzero(matches(ids)),
                    random_prefix_length=number, num_records=len(ids),
                )
                if dv is existing:
                    continue
                changed.append(row)
                txn.add(AddFile(
                    path=row["path"], partition_values={}, size=row["size"], modification_time=row["modification_time"],
                    data_change=True, stats=row["stats"], deletion_vector=dv,
                ))
            assert changed
            txn.remove_files(pa.Table.from_pylist(changed, schema=files.schema))
            txn.commit("DELETE")
    expected = [i for i in range(3000) if i % 5 and i % 7]
    dt = deltalake.DeltaTable(table_path)
    result = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT id, name FROM t").read_all())
    assert sorted(result.column("id").to_pylist()) == expected
    assert sorted(result.column("name").to_pylist()) == sorted(f"n{i}" for i in expected)
    snapshot = table.snapshot()
    live = snapshot.add_actions
    assert live.num_rows == 3 and live.column("deletion_vector").null_count == 0
    assert sorted(snapshot.to_arrow().column("id").to_pylist()) == expected


@pytest.mark.parametrize("storage", ["u", "p"])
def test_a_dv_path_that_is_a_directory_is_a_corrupt_dv(table_path: str, storage: str) -> None:
    file_id = uuid.uuid4()
    u = DeletionVectorDescriptor("u", encode_uuid(file_id), 34, 1, 1)
    directory = dv_absolute_path(table_path, u)
    os.makedirs(directory)
    dv = u if storage == "u" else DeletionVectorDescriptor("p", "file://" + directory, 34, 1, 1)
    io = LocalFileIO()
    with pytest.raises(CorruptDeletionVectorError, match="is a directory"):
        read_deletion_vector(io, table_path, dv)
    with pytest.raises(CorruptDeletionVectorError, match="is a directory"):
        read_deletion_vectors(io, table_path, [dv, dv])
