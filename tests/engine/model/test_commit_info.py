"""The ``commitInfo`` action: its fields, and operation parameters and metrics encoded as Delta writes them."""

from __future__ import annotations

from airflow_delta.engine.model.commit_info import (
    ENGINE_INFO,
    build_commit_info,
    encode_operation_metrics,
    encode_operation_parameters,
)


def test_operation_parameter_and_metric_encoding() -> None:
    assert encode_operation_parameters({"a": "s", "b": [1, "x"], "c": {"k": 1}, "d": None, "e": 3}) == {
        "a": "s", "b": '[1,"x"]', "c": '{"k":1}', "d": None, "e": 3,
    }
    assert encode_operation_parameters({"auto": True, "ratio": 0.5, "n": float("nan")}) == {
        "auto": True, "ratio": 0.5, "n": "NaN",
    }
    assert encode_operation_metrics({"n": 3, "f": False, "s": "7"}) == {"n": "3", "f": "false", "s": "7"}



def test_build_commit_info_writes_every_field_in_deltas_order() -> None:
    info = build_commit_info(
        "WRITE",
        {"mode": "Append", "partitionBy": ["p"]},
        {"numFiles": 2, "ok": True},
        timestamp=1_000,
        in_commit_timestamp=1_001,
        read_version=3,
        isolation_level="Serializable",
        is_blind_append=False,
        user_metadata="nightly load",
        tags={"team": "data"},
        engine_info=ENGINE_INFO,
        txn_id="txn-1",
    )
    assert list(info) == [
        "inCommitTimestamp", "timestamp", "operation", "operationParameters", "readVersion", "isolationLevel",
        "isBlindAppend", "operationMetrics", "userMetadata", "tags", "engineInfo", "txnId",
    ]
    assert info["inCommitTimestamp"] == 1_001 and info["timestamp"] == 1_000 and info["readVersion"] == 3
    assert info["operationParameters"] == {"mode": "Append", "partitionBy": '["p"]'}
    assert info["operationMetrics"] == {"numFiles": "2", "ok": "true"}
    assert (info["userMetadata"], info["tags"], info["txnId"]) == ("nightly load", {"team": "data"}, "txn-1")


def test_build_commit_info_of_a_table_creation_leaves_out_what_does_not_apply() -> None:
    info = build_commit_info(
        "CREATE TABLE",
        None,
        None,
        timestamp=5,
        in_commit_timestamp=None,
        read_version=-1,
        isolation_level="WriteSerializable",
        is_blind_append=True,
        user_metadata=None,
        tags={},
        engine_info=ENGINE_INFO,
        txn_id="txn-2",
    )
    assert list(info) == [
        "timestamp", "operation", "operationParameters", "isolationLevel", "isBlindAppend", "operationMetrics",
        "engineInfo", "txnId",
    ]
    assert info["operationParameters"] == {} and info["operationMetrics"] == {}
