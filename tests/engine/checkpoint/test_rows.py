"""Checkpoint rows: file actions streamed in batches, non-file actions, as the checkpoint schema requires them."""

from __future__ import annotations

import pyarrow as pa

from airflow_delta.engine.checkpoint.rows import (
    AddColumnLayout,
    NullCache,
    file_action_batches,
    non_file_json_actions,
    non_file_rows,
)
from airflow_delta.engine.checkpoint.schema import add_type, checkpoint_schema
from airflow_delta.engine.model.actions import DomainMetadata, Metadata, Protocol, SetTransaction
from tests.engine.checkpoint.table_helpers import make_partitioned_table, snapshot_of


def test_null_partition_value_maps_become_empty_maps() -> None:
    # partitionValues is required in checkpoints; a null map (from a sliced batch too) becomes {}.
    from airflow_delta.engine.checkpoint.rows import _empty_map_for_nulls

    maps = pa.array([[("a", "1")], None, [("b", None)], None], type=pa.map_(pa.string(), pa.string()))
    assert _empty_map_for_nulls(maps.slice(1, 3)).to_pylist() == [[], [("b", None)], []]
    assert _empty_map_for_nulls(maps).null_count == 0



def test_deletion_vectors_gain_sparks_null_max_row_index_in_sliced_batches() -> None:
    from airflow_delta.engine.checkpoint.rows import _checkpoint_dv
    from airflow_delta.engine.checkpoint.schema import CHECKPOINT_DV_TYPE
    from airflow_delta.engine.model.actions import DELETION_VECTOR_TYPE

    dv = {"storageType": "u", "pathOrInlineDv": "p", "offset": 1, "sizeInBytes": 3, "cardinality": 2}
    values = pa.array([None, dv, None, dict(dv, offset=None)], type=DELETION_VECTOR_TYPE)
    for part in (values.slice(1, 3), pa.chunked_array([values.slice(0, 2), values.slice(2)])):
        out = _checkpoint_dv(part)
        assert out.type == CHECKPOINT_DV_TYPE
        expected = [None if d is None else dict(d, maxRowIndex=None) for d in part.to_pylist()]
        assert out.to_pylist() == expected



def test_file_action_batches_put_adds_then_removes_in_their_own_columns(table_path: str) -> None:
    make_partitioned_table(table_path)  # live files and one tombstone
    snap = snapshot_of(table_path)
    layout = AddColumnLayout(add_type(), stats_as_json=True)
    schema = checkpoint_schema(layout.add)
    batches = list(
        file_action_batches(schema, layout, snap.add_actions, snap.tombstones, NullCache(), batch_rows=2)
    )
    assert all(b.schema == schema and 0 < b.num_rows <= 2 for b in batches)
    table = pa.Table.from_batches(batches)
    adds, removes = table.column("add"), table.column("remove")
    n_adds = snap.add_actions.num_rows
    assert adds.null_count == snap.tombstones.num_rows and removes.null_count == n_adds
    assert [a["path"] for a in adds.to_pylist()[:n_adds]] == snap.add_actions.column("path").to_pylist()
    assert [r["path"] for r in removes.to_pylist()[n_adds:]] == snap.tombstones.column("path").to_pylist()
    # A checkpoint restates the state: no action in it is a change.
    assert {a["dataChange"] for a in adds.drop_null().to_pylist()} == {False}
    assert {r["dataChange"] for r in removes.drop_null().to_pylist()} == {False}
    assert table.column("metaData").null_count == table.num_rows


def test_non_file_rows_and_json_actions_hold_the_same_actions_in_the_same_order() -> None:
    protocol = Protocol(3, 7, frozenset({"deletionVectors"}), frozenset({"deletionVectors", "v2Checkpoint"}))
    metadata = Metadata(id="t", schema_string='{"type":"struct","fields":[]}', configuration={"k": "v"})
    txns = [SetTransaction("app", 3, 10)]
    domains = [DomainMetadata("d", "{}")]
    sidecars = [{"path": "s.parquet", "sizeInBytes": 5, "modificationTime": 6}]
    checkpoint_metadata = {"version": 2, "tags": {"numOfAddFiles": "0"}}
    rows = non_file_rows(protocol, metadata, txns, domains, checkpoint_metadata, sidecars)
    actions = non_file_json_actions(protocol, metadata, txns, domains, checkpoint_metadata, sidecars)
    kinds = ["checkpointMetadata", "protocol", "metaData", "txn", "domainMetadata", "sidecar"]
    assert [next(iter(r)) for r in rows] == kinds == [next(iter(a)) for a in actions]
    # Rows fit the checkpoint schema (maps as item lists).
    table = pa.Table.from_pylist(rows, schema=checkpoint_schema(add_type(), v2=True))
    assert table.column("protocol").drop_null().to_pylist()[0]["writerFeatures"] == ["deletionVectors", "v2Checkpoint"]
    assert table.column("metaData").drop_null().to_pylist()[0]["configuration"] == [("k", "v")]
    assert actions[1] == {"protocol": protocol.to_json()} and actions[3] == {"txn": txns[0].to_json()}


def test_feature_lists_are_empty_not_null_for_table_features_protocols() -> None:
    metadata = Metadata(id="t", schema_string='{"type":"struct","fields":[]}')
    (features,) = [r["protocol"] for r in non_file_rows(Protocol(3, 7), metadata, [], []) if "protocol" in r]
    assert (features["readerFeatures"], features["writerFeatures"]) == ([], [])
    (legacy,) = [r["protocol"] for r in non_file_rows(Protocol(1, 2), metadata, [], []) if "protocol" in r]
    assert (legacy["readerFeatures"], legacy["writerFeatures"]) == (None, None)
