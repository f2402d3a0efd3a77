from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from airflow_delta.engine.model.actions import (
    AddFile,
    DeletionVectorDescriptor,
    Metadata,
    Protocol,
    RemoveFile,
    action_to_line,
)


def test_protocol_round_trip_and_features() -> None:
    raw = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors", "appendOnly"]}
    p = Protocol.from_json(raw)
    assert p.has_reader_feature("deletionVectors") and not p.has_reader_feature("columnMapping")
    assert p.to_json() == {**raw, "writerFeatures": ["appendOnly", "deletionVectors"]}
    assert "readerFeatures" not in Protocol(1, 2).to_json()


def test_metadata_drops_null_configuration_values() -> None:
    m = Metadata.from_json(
        {"id": "x", "format": {"provider": "parquet"}, "schemaString": "{\"type\":\"struct\",\"fields\":[]}", "partitionColumns": ["a"], "configuration": {"k": None, "delta.appendOnly": "true"}}
    )
    assert dict(m.configuration) == {"delta.appendOnly": "true"}
    assert m.partition_columns == ("a",)


def test_dv_unique_id_includes_offset() -> None:
    assert DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 34, 2, 1).unique_id == "uab^-aqEH.-t@S}K{vb[*k^@1"
    assert DeletionVectorDescriptor("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", 40, 6).unique_id.startswith("iwi5b")


@given(
    path=st.text(min_size=1, max_size=30),
    size=st.integers(min_value=0, max_value=2**62),
    pv=st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.none(), st.text(max_size=5)), max_size=3),
    with_dv=st.booleans(),
)
def test_add_remove_lines_round_trip(path: str, size: int, pv: dict, with_dv: bool) -> None:
    dv = DeletionVectorDescriptor("u", "vBn[lx{q8@P<9BNH/isA", 36, 5, 1) if with_dv else None
    add = AddFile(path, pv, size, 1700000000000, True, '{"numRecords":1}', None, dv)
    line = action_to_line(add)
    assert "\n" not in line
    assert AddFile.from_json(json.loads(line)["add"]) == add
    remove = add.remove(1700000000001)
    back = RemoveFile.from_json(json.loads(action_to_line(remove))["remove"])
    assert back == remove and back.dv_unique_id == add.dv_unique_id
