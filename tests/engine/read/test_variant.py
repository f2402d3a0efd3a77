"""Reading the variant type (protocol "Variant Data Type", "Variant data in Parquet").

Unshredded variants are exposed raw, as delta-rs does: ``struct<metadata: binary not
null, value: binary not null>`` at every nesting level (top level, array elements, struct
fields, map values). Spark writes the parquet group as ``value`` then ``metadata``; the
scan reorders. Expected rows come from delta-rs where it can read a table, and always
from reading the data files directly with pyarrow (an independent derivation).
Shredded variants (``variantShredding``) stay refused.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine.errors import CorruptDataFileError, DataFileNotFoundError, UnsupportedFeatureError
from airflow_delta.engine.model.actions import AddFile, Metadata, Protocol, action_to_line
from airflow_delta.engine.model.schema import VARIANT_TYPE, arrow_to_delta_schema, schema_to_arrow
from airflow_delta.engine.model.stats_parse import parse_stats, stats_type
from airflow_delta.engine.model.table_features import check_readable, check_writable
from airflow_delta.engine.table import DeltaTable

VARIANT = pa.struct([pa.field("metadata", pa.binary(), nullable=False), pa.field("value", pa.binary(), nullable=False)])
# Spark's parquet field order for an unshredded variant.
SPARK_VARIANT = pa.struct([pa.field("value", pa.binary(), nullable=False), pa.field("metadata", pa.binary(), nullable=False)])

# Variant binary encoding of a few values (parquet-format VariantEncoding.md): an empty
# metadata dictionary, and primitive values (header byte = type id << 2).
EMPTY_METADATA = b"\x01\x00\x00"
INT8_42 = b"\x0c\x2a"
TRUE = b"\x04"
NULL = b"\x00"

EXPECTED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("v", VARIANT),
        pa.field("array_of_variants", pa.list_(pa.field("element", VARIANT))),
        pa.field("struct_of_variants", pa.struct([pa.field("v", VARIANT)])),
        pa.field("map_of_variants", pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", VARIANT))),
        pa.field("array_of_struct_of_variants", pa.list_(pa.field("element", pa.struct([pa.field("v", VARIANT)])))),
        pa.field("struct_of_array_of_variants", pa.struct([pa.field("v", pa.list_(pa.field("element", VARIANT)))])),
    ]
)


def _sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=repr)


def _direct_rows(root: Path, relative_paths: list[str]) -> list[dict[str, Any]]:
    """Rows of the data files read with pyarrow alone, variant structs rebuilt in
    (metadata, value) key order so that ``repr`` sorting matches ours."""

    def normalise(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {"value", "metadata"}:
                return {"metadata": value["metadata"], "value": value["value"]}
            return {k: normalise(v) for k, v in value.items()}
        if isinstance(value, list):
            return [normalise(v) for v in value]
        if isinstance(value, tuple):
            return tuple(normalise(v) for v in value)
        return value

    rows: list[dict[str, Any]] = []
    for relative in relative_paths:
        assert (root / relative).is_file(), relative
        rows.extend(normalise(r) for r in pq.read_table(root / relative).to_pylist())
    return rows


def test_variant_type_constant_is_delta_rs_layout() -> None:
    assert VARIANT_TYPE == VARIANT


# ------------------------------------------------------------------ shared tables


def test_variant_checkpoint_table_matches_delta_rs_and_the_files(shared_tables: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    root = shared_tables / "spark-variant-checkpoint"
    snapshot = DeltaTable(str(root)).snapshot()
    assert "variantType-preview" in snapshot.protocol.reader_features
    assert snapshot.schema.remove_metadata() == EXPECTED_SCHEMA

    ours = snapshot.to_arrow()
    theirs = deltalake.DeltaTable(str(root)).to_pyarrow_table()
    # Exactly delta-rs's types: field order and nullability inside the variant struct too.
    assert ours.schema.remove_metadata() == theirs.schema
    assert ours.num_rows == 102
    assert _sorted_rows(ours.to_pylist()) == _sorted_rows(theirs.to_pylist())

    direct = _direct_rows(root, snapshot.files().column("path").to_pylist())
    assert _sorted_rows(ours.to_pylist()) == _sorted_rows(direct)


def test_variant_checkpoint_table_nested_values(shared_tables: Path) -> None:
    snapshot = DeltaTable(str(shared_tables / "spark-variant-checkpoint")).snapshot()
    rows = snapshot.to_arrow(filter="id = 1").to_pylist()
    assert len(rows) == 2  # id 1 from the CTAS and from the append at v2
    row = rows[0]
    variant = row["v"]
    assert set(variant) == {"metadata", "value"}
    assert isinstance(variant["metadata"], bytes) and isinstance(variant["value"], bytes)
    # Spark's test data: the same value everywhere, nulls inside arrays and maps kept.
    assert row["array_of_variants"] == [variant, None, variant, None, variant]
    assert row["struct_of_variants"] == {"v": variant}
    assert row["map_of_variants"] == [("1", variant), ("nullKey", None)]
    assert row["array_of_struct_of_variants"] == [{"v": variant}, {"v": None}, None, {"v": variant}, None, {"v": variant}]
    assert row["struct_of_array_of_variants"] == {"v": [None, variant]}
    # Projection to a variant column alone.
    assert snapshot.to_arrow(columns=["v"]).schema.field("v").type == VARIANT


def test_variant_stable_feature_table_opens_and_decodes_percent_paths(shared_tables: Path) -> None:
    """The corpus holds only this table's log (no data files, which is also why delta-rs
    fails with FileNotFoundError). The log encodes ``%`` as ``%25``; the file Spark wrote
    is named with a literal ``%``, and that is the name we look for."""
    deltalake = pytest.importorskip("deltalake")
    root = shared_tables / "spark-variant-stable-feature-checkpoint"
    snapshot = DeltaTable(str(root)).snapshot()
    assert snapshot.protocol.reader_features == frozenset({"variantType"})
    assert snapshot.schema.remove_metadata() == EXPECTED_SCHEMA
    theirs = deltalake.DeltaTable(str(root))
    assert snapshot.version == theirs.version() == 1
    assert snapshot.schema.remove_metadata() == pa.schema(theirs.schema().to_arrow())

    paths = snapshot.files().column("path").to_pylist()
    assert all(p.startswith("test%file%prefix-part-") for p in paths)
    assert sorted(str(root / p) for p in paths) == sorted(theirs.file_uris())
    assert all("%25" in p for p in snapshot.add_actions.column("path").to_pylist())
    assert not any((root / p).exists() for p in paths)

    with pytest.raises(DataFileNotFoundError, match=r"test%file%prefix-part-"):
        snapshot.to_arrow()


def _unshredded_copy_of_shredded_preview_table(shared_tables: Path, tmp_path: Path) -> Path:
    """``spark-shredded-variant-preview-delta`` with its protocol reduced to ``variantType``.

    Its data files are real Spark files holding *unshredded* variants under names with a
    literal ``%`` (``%25`` in the log): exactly what the stable-feature table's missing
    files would look like. Only the JSON commits are copied (the checkpoint repeats the
    old protocol); the protocol line and the shredding property are rewritten.
    """
    source = shared_tables / "spark-shredded-variant-preview-delta"
    root = tmp_path / "variant-percent-paths"
    (root / "_delta_log").mkdir(parents=True)
    for data_file in source.glob("*.parquet"):
        assert "%" in data_file.name
        shutil.copy(data_file, root / data_file.name)
    for commit in sorted((source / "_delta_log").glob("*.json")):
        lines = []
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "protocol" in action:
                action["protocol"]["readerFeatures"] = ["variantType"]
                action["protocol"]["writerFeatures"] = ["variantType", "appendOnly", "invariants"]
            if "metaData" in action:
                action["metaData"]["configuration"].pop("delta.enableVariantShredding")
            lines.append(json.dumps(action, separators=(",", ":")))
        (root / "_delta_log" / commit.name).write_text("\n".join(lines) + "\n")
    return root


def test_percent_named_spark_files_are_read(shared_tables: Path, tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    root = _unshredded_copy_of_shredded_preview_table(shared_tables, tmp_path)
    snapshot = DeltaTable(str(root)).snapshot()
    assert snapshot.version == 2
    paths = snapshot.files().column("path").to_pylist()
    assert len(paths) == 4 and all(p.startswith("test%file%prefix-") for p in paths)

    ours = snapshot.to_arrow()
    assert ours.schema.remove_metadata() == EXPECTED_SCHEMA
    assert ours.num_rows == 102
    assert _sorted_rows(ours.to_pylist()) == _sorted_rows(_direct_rows(root, paths))
    theirs = deltalake.DeltaTable(str(root)).to_pyarrow_table()
    assert _sorted_rows(ours.to_pylist()) == _sorted_rows(theirs.to_pylist())


def test_shredded_variant_table_is_refused(shared_tables: Path) -> None:
    with pytest.raises(UnsupportedFeatureError, match="variantShredding-preview") as info:
        DeltaTable(str(shared_tables / "spark-shredded-variant-preview-delta")).snapshot()
    assert info.value.features == ["variantShredding-preview"] and info.value.access == "read"


@pytest.mark.parametrize("feature", ["variantShredding", "variantShredding-preview"])
def test_protocol_gate_reads_variant_but_not_shredding(feature: str) -> None:
    for name in ("variantType", "variantType-preview"):
        check_readable(Protocol(3, 7, frozenset({name}), frozenset({name})))
    with pytest.raises(UnsupportedFeatureError, match=feature):
        check_readable(Protocol(3, 7, frozenset({"variantType", feature}), frozenset({"variantType", feature})))


def test_unshredded_variant_tables_are_writable(shared_tables: Path) -> None:
    snapshot = DeltaTable(str(shared_tables / "spark-variant-checkpoint")).snapshot()
    check_writable(snapshot.protocol, snapshot.metadata)
    shredded = Protocol(3, 7, frozenset({"variantType", "variantShredding"}), frozenset({"variantType", "variantShredding"}))
    with pytest.raises(UnsupportedFeatureError, match="variantShredding"):
        check_writable(shredded, snapshot.metadata)


def test_engine_delete_keeps_the_variant_table_protocol(shared_tables: Path, tmp_path: Path) -> None:
    path = tmp_path / "t"
    shutil.copytree(shared_tables / "spark-variant-checkpoint", path)
    before = DeltaTable(str(path)).snapshot()
    DeltaTable(str(path)).delete("id >= 95")
    after = DeltaTable(str(path)).snapshot()
    assert after.version == before.version + 1
    assert after.protocol == before.protocol  # variantType-preview stays; no feature is added behind the user's back
    assert sorted(after.to_arrow().column("id").to_pylist()) == sorted(i for i in before.to_arrow().column("id").to_pylist() if i < 95)


# ------------------------------------------------------------------ schema and stats


def test_arrow_struct_of_two_binaries_stays_a_struct() -> None:
    # Arrow cannot tell a variant from a user struct of the same shape; keep what was given.
    delta = arrow_to_delta_schema(pa.schema([pa.field("v", VARIANT)]))
    assert delta["fields"][0]["type"] == {
        "type": "struct",
        "fields": [
            {"name": "metadata", "type": "binary", "nullable": False, "metadata": {}},
            {"name": "value", "type": "binary", "nullable": False, "metadata": {}},
        ],
    }


def test_variant_nested_in_map_keys_and_values_maps_to_the_struct() -> None:
    schema = schema_to_arrow(
        {
            "type": "struct",
            "fields": [
                {
                    "name": "m",
                    "type": {"type": "map", "keyType": "string", "valueType": {"type": "variant"}, "valueContainsNull": False},
                    "nullable": False,
                    "metadata": {},
                }
            ],
        }
    )
    assert schema.field("m").type == pa.map_(pa.string(), pa.field("value", VARIANT, nullable=False))


def test_stats_of_variant_columns_have_null_counts_only(shared_tables: Path) -> None:
    snapshot = DeltaTable(str(shared_tables / "spark-variant-checkpoint")).snapshot()
    t = stats_type(snapshot.metadata)
    assert t.field("minValues").type == pa.struct([pa.field("id", pa.int64())])
    assert t.field("maxValues").type == pa.struct([pa.field("id", pa.int64())])
    assert t.field("nullCount").type.field("v").type == pa.int64()
    assert t.field("nullCount").type.field("struct_of_variants").type == pa.struct([pa.field("v", pa.int64())])

    stats = snapshot.files(stats=True).column("stats").to_pylist()
    assert sorted(s["maxValues"]["id"] for s in stats) == [0, 1, 49, 99]
    assert all(s["nullCount"]["v"] == 0 and s["nullCount"]["struct_of_variants"] == {"v": 0} for s in stats)


def test_z85_variant_min_max_stats_are_ignored(shared_tables: Path) -> None:
    # Shredding writers may put Z85-encoded variant bounds in minValues/maxValues (protocol
    # "Statistics for Variant Columns"); we keep no variant bounds and must not fail on them.
    metadata = DeltaTable(str(shared_tables / "spark-variant-checkpoint")).snapshot().metadata
    document = {
        "numRecords": 3,
        "minValues": {"id": 1, "v": "0S&u501fk+ze0(tB98CpzF6vU0rJl95HpNdvjbtatpi(cu0wW^cTu"},
        "maxValues": {"id": 7, "v": "0S&u500&]LC42A9vqZe}wb#-i1}-a+cT!xdbWhT9cTx}7v<+K"},
        "nullCount": {"id": 0, "v": 2},
    }
    parsed = parse_stats(pa.array([json.dumps(document), None]), metadata).to_pylist()
    assert parsed[0]["minValues"] == {"id": 1} and parsed[0]["maxValues"] == {"id": 7}
    assert parsed[0]["nullCount"]["v"] == 2
    assert parsed[1] is None


# ------------------------------------------------------------------ hand-written tables


def _write_table(root: Path, fields: list[dict[str, Any]], data: pa.Table, **configuration: str) -> DeltaTable:
    pq.write_table(data, root / "part-0.parquet")
    protocol = Protocol(3, 7, frozenset({"variantType", "columnMapping"}), frozenset({"variantType", "columnMapping"}))
    metadata = Metadata(
        id="variant-test",
        schema_string=json.dumps({"type": "struct", "fields": fields}),
        configuration=configuration,
    )
    add = AddFile("part-0.parquet", {}, os.path.getsize(root / "part-0.parquet"), 0)
    log = root / "_delta_log"
    log.mkdir()
    (log / "00000000000000000000.json").write_text(
        "\n".join(action_to_line(a) for a in (protocol, metadata, add)) + "\n"
    )
    return DeltaTable(str(root))


def _variant_array(values: list[tuple[bytes, bytes] | None], layout: pa.StructType = SPARK_VARIANT) -> pa.StructArray:
    """Variants as stored: (value, metadata) pairs in ``layout``'s field order; None = null."""
    rows = [None if v is None else {"value": v[0], "metadata": v[1]} for v in values]
    return pa.array(rows, type=layout)


def test_variants_under_column_mapping_name_mode(tmp_path: Path) -> None:
    fields = [
        {"name": "id", "type": "long", "nullable": True,
         "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-id"}},
        {"name": "v", "type": "variant", "nullable": True,
         "metadata": {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-v"}},
        {"name": "s", "type": {"type": "struct", "fields": [
            {"name": "inner", "type": "variant", "nullable": True,
             "metadata": {"delta.columnMapping.id": 4, "delta.columnMapping.physicalName": "col-inner"}}]},
         "nullable": True,
         "metadata": {"delta.columnMapping.id": 3, "delta.columnMapping.physicalName": "col-s"}},
    ]
    variants = _variant_array([(INT8_42, EMPTY_METADATA), None, (TRUE, EMPTY_METADATA)])
    inner = _variant_array([(NULL, EMPTY_METADATA), (TRUE, EMPTY_METADATA), None])
    data = pa.table(
        {
            "col-id": pa.array([1, 2, 3], pa.int64()),
            "col-v": variants,
            "col-s": pa.StructArray.from_arrays([inner], names=["col-inner"]),
        }
    )
    table = _write_table(tmp_path, fields, data, **{"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "4"})
    out = table.snapshot().to_arrow()
    assert out.schema.field("v").type == VARIANT
    assert out.to_pylist() == [
        {"id": 1, "v": {"metadata": EMPTY_METADATA, "value": INT8_42}, "s": {"inner": {"metadata": EMPTY_METADATA, "value": NULL}}},
        {"id": 2, "v": None, "s": {"inner": {"metadata": EMPTY_METADATA, "value": TRUE}}},
        {"id": 3, "v": {"metadata": EMPTY_METADATA, "value": TRUE}, "s": {"inner": None}},
    ]


def test_variant_already_in_table_order_is_read_as_is(tmp_path: Path) -> None:
    fields = [{"name": "v", "type": "variant", "nullable": True, "metadata": {}}]
    data = pa.table({"v": _variant_array([(INT8_42, EMPTY_METADATA), None], layout=VARIANT)})
    out = _write_table(tmp_path, fields, data).snapshot().to_arrow()
    assert out.column("v").to_pylist() == [{"metadata": EMPTY_METADATA, "value": INT8_42}, None]


def test_shredded_file_in_a_table_without_shredding_is_corrupt(tmp_path: Path) -> None:
    # Reading only `value` of a shredded variant would silently drop the typed part.
    shredded = pa.StructArray.from_arrays(
        [pa.array([EMPTY_METADATA]), pa.array([None], pa.binary()), pa.array([42], pa.int8())],
        names=["metadata", "value", "typed_value"],
    )
    fields = [{"name": "v", "type": "variant", "nullable": True, "metadata": {}}]
    table = _write_table(tmp_path, fields, pa.table({"v": shredded}))
    with pytest.raises(CorruptDataFileError, match="typed_value"):
        table.snapshot().to_arrow()


def test_variant_without_metadata_field_is_corrupt(tmp_path: Path) -> None:
    fields = [{"name": "a", "type": {"type": "array", "elementType": "variant", "containsNull": True},
               "nullable": True, "metadata": {}}]
    half = pa.array([[{"value": INT8_42}]], pa.list_(pa.struct([pa.field("value", pa.binary())])))
    table = _write_table(tmp_path, fields, pa.table({"a": half}))
    with pytest.raises(CorruptDataFileError, match="lacks its metadata field"):
        table.snapshot().to_arrow()
