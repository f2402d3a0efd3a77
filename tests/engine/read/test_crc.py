"""Version checksum (``.crc``) files: incremental and full computation, checked against Spark's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.model.actions import Metadata, Protocol
from airflow_delta.engine.read import crc
from airflow_delta.engine.read.snapshot import load_snapshot
from airflow_delta.engine.storage.fileio import LocalFileIO

IO = LocalFileIO()

SPARK_CRC_TABLES = ["cdf-table-with-cdc-and-dvs", "table_with_deletion_logs", "checkpoint-v2-table", "simple_table_with_cdc"]


def commit_versions(root: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(f"{root}/_delta_log") if n[:20].isdigit() and n.endswith(".json")
                  and len(n) == 25)


def same_state(ours: dict[str, Any], spark: dict[str, Any]) -> None:
    for key in ("tableSizeBytes", "numFiles", "numMetadata", "numProtocol", "txnId"):
        if key in spark:
            assert ours.get(key) == spark[key], key
    for key in ("numDeletionVectorsOpt", "numDeletedRecordsOpt"):
        if key in spark:
            assert ours[key] == spark[key], key
    assert Metadata.from_json(ours["metadata"]) == Metadata.from_json(spark["metadata"])
    assert Protocol.from_json(ours["protocol"]) == Protocol.from_json(spark["protocol"])
    assert sorted((t["appId"], t["version"]) for t in ours["setTransactions"]) == sorted(
        (t["appId"], t["version"]) for t in spark.get("setTransactions", [])
    )
    assert sorted((d["domain"], d["configuration"]) for d in ours["domainMetadata"]) == sorted(
        (d["domain"], d["configuration"]) for d in spark.get("domainMetadata", [])
    )
    # Spark writes the file-size histogram as "histogramOpt" (older releases) or under the
    # protocol's name "fileSizeHistogram"; we write the protocol's name.
    spark_histogram = spark.get("fileSizeHistogram") or spark.get("histogramOpt")
    if spark_histogram is not None:
        assert ours["fileSizeHistogram"] == spark_histogram
    if "deletedRecordCountsHistogramOpt" in spark:
        assert ours["deletedRecordCountsHistogramOpt"] == spark["deletedRecordCountsHistogramOpt"]


@pytest.mark.parametrize("name", SPARK_CRC_TABLES)
def test_incremental_chain_matches_sparks_crc_files(shared_tables: Path, name: str) -> None:
    root = str(shared_tables / name)
    state: dict[str, Any] | None = dict(crc.EMPTY_STATE)
    compared = 0
    for version in commit_versions(root):
        assert state is not None
        state = crc.next_checksum(state, crc.read_commit_json(IO, root, version))
        spark = crc.read_version_checksum(IO, root, version)
        assert state is not None, f"version {version} not derivable"
        if spark is not None:
            same_state(state, spark)
            compared += 1
    assert compared >= 3


@pytest.mark.parametrize("name", SPARK_CRC_TABLES)
def test_checksum_from_snapshot_validates_against_sparks_crc(shared_tables: Path, name: str) -> None:
    root = str(shared_tables / name)
    versions = commit_versions(root)
    for version in versions[::6] + versions[-1:]:  # a sample keeps the test fast
        spark = crc.read_version_checksum(IO, root, version)
        if spark is None:
            continue
        snapshot = load_snapshot(IO, root, version)
        assert crc.validate_version_checksum(snapshot, spark) == []
        same_state(crc.checksum_from_snapshot(snapshot), spark)


def test_validation_reports_a_tampered_checksum(shared_tables: Path) -> None:
    root = str(shared_tables / "table_with_deletion_logs")
    snapshot = load_snapshot(IO, root)
    spark = crc.read_version_checksum(IO, root, snapshot.version)
    assert spark is not None
    problems = crc.validate_version_checksum(snapshot, dict(spark, numFiles=spark["numFiles"] + 1))
    assert len(problems) == 1 and problems[0].startswith("numFiles")


def test_in_commit_timestamp_comes_from_the_commit(shared_tables: Path) -> None:
    root = str(shared_tables / "cdc_ict_table")
    state: dict[str, Any] | None = dict(crc.EMPTY_STATE)
    for version in commit_versions(root):
        actions = crc.read_commit_json(IO, root, version)
        assert state is not None
        state = crc.next_checksum(state, actions)
        assert state is not None
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        assert state["inCommitTimestampOpt"] == info["inCommitTimestamp"]


def _meta(config: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}}, "schemaString": '{"type":"struct","fields":[]}',
                         "partitionColumns": [], "configuration": config or {}}}


PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["domainMetadata"]}}


def _add(path: str, size: int, data_change: bool = True) -> dict[str, Any]:
    return {"add": {"path": path, "partitionValues": {}, "size": size, "modificationTime": 1, "dataChange": data_change}}


def _remove(path: str, size: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"path": path, "deletionTimestamp": 5, "dataChange": True}
    if size is not None:
        body["size"] = size
    return {"remove": body}


def test_incremental_updates_counts_txns_and_domains() -> None:
    v0 = crc.next_checksum(crc.EMPTY_STATE, [PROTOCOL, _meta(), _add("a", 10), _add("b", 5)])
    assert v0 is not None and (v0["numFiles"], v0["tableSizeBytes"]) == (2, 15)
    v1 = crc.next_checksum(
        v0,
        [
            _remove("a", 10),
            _add("c", 7),
            {"txn": {"appId": "app", "version": 3}},
            {"domainMetadata": {"domain": "d1", "configuration": "{}", "removed": False}},
        ],
    )
    assert v1 is not None and (v1["numFiles"], v1["tableSizeBytes"]) == (2, 12)
    assert v1["setTransactions"] == [{"appId": "app", "version": 3}]
    assert [d["domain"] for d in v1["domainMetadata"]] == ["d1"]
    v2 = crc.next_checksum(
        v1,
        [{"txn": {"appId": "app", "version": 4}}, {"domainMetadata": {"domain": "d1", "configuration": "{}", "removed": True}}],
    )
    assert v2 is not None and v2["setTransactions"] == [{"appId": "app", "version": 4}] and v2["domainMetadata"] == []


def test_incremental_refuses_what_it_cannot_know() -> None:
    v0 = crc.next_checksum(crc.EMPTY_STATE, [PROTOCOL, _meta(), _add("a", 10)])
    assert v0 is not None
    # Re-adding a live file (metadata update) without a remove: the count would double.
    assert crc.next_checksum(v0, [_add("a", 10, data_change=False)]) is None
    # A remove without its size: tableSizeBytes is unknowable.
    assert crc.next_checksum(v0, [_remove("a", None)]) is None
    # The same file twice in one commit.
    assert crc.next_checksum(v0, [_add("x", 1), _add("x", 1)]) is None
    # Compaction (dataChange=false adds with removes) is fine.
    assert crc.next_checksum(v0, [_remove("a", 10), _add("z", 9, data_change=False)]) is not None


def test_crc_files_are_never_overwritten(table_path: str) -> None:
    assert crc.write_version_checksum(IO, table_path, 0, {"numFiles": 1})
    assert not crc.write_version_checksum(IO, table_path, 0, {"numFiles": 2})
    assert crc.read_version_checksum(IO, table_path, 0) == {"numFiles": 1}


def _write_commit(root: str, version: int, actions: list[dict[str, Any]]) -> None:
    os.makedirs(f"{root}/_delta_log", exist_ok=True)
    Path(f"{root}/_delta_log/{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_after_commit_is_incremental_from_snapshot_or_skipped(table_path: str) -> None:
    _write_commit(table_path, 0, [PROTOCOL, _meta(), _add("a", 10)])
    assert crc.write_checksum_after_commit(IO, table_path, 0) is not None
    _write_commit(table_path, 1, [_add("b", 1)])
    assert crc.write_checksum_after_commit(IO, table_path, 1)["numFiles"] == 2
    # Without the previous .crc and without a loaded snapshot: skipped (too costly).
    os.remove(crc.crc_path(table_path, 1))
    _write_commit(table_path, 2, [_add("c", 1)])
    assert crc.write_checksum_after_commit(IO, table_path, 2) is None
    assert not os.path.exists(crc.crc_path(table_path, 2))
    # With the snapshot at hand: computed from it.
    written = crc.write_checksum_after_commit(IO, table_path, 2, snapshot=load_snapshot(IO, table_path))
    assert written is not None and written["numFiles"] == 3 and written["tableSizeBytes"] == 12


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 1000)),
        st.tuples(st.just("remove"), st.integers(0, 50)),
        st.tuples(st.just("txn"), st.sampled_from(["a", "b"]), st.integers(0, 9)),
        st.tuples(st.just("domain"), st.sampled_from(["d1", "d2"]), st.booleans()),
        st.tuples(st.just("dv"), st.integers(0, 50), st.integers(1, 9)),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commits=st.lists(ops, min_size=1, max_size=6))
def test_incremental_chain_equals_full_reconciliation(tmp_path_factory: pytest.TempPathFactory, commits: list) -> None:
    root = str(tmp_path_factory.mktemp("crc"))
    _write_commit(root, 0, [PROTOCOL, _meta({"delta.enableDeletionVectors": "true"})])
    state = crc.next_checksum(crc.EMPTY_STATE, crc.read_commit_json(IO, root, 0))
    live: dict[str, tuple[int, dict[str, Any] | None]] = {}
    counter = 0
    for version, commit in enumerate(commits, start=1):
        actions: list[dict[str, Any]] = [{"commitInfo": {"operation": "TEST"}}]
        touched: set[str] = set()
        for op in commit:
            if op[0] == "add":
                counter += 1
                path = f"f{counter}"
                actions.append(_add(path, op[1]))
                live[path] = (op[1], None)
                touched.add(path)
            elif op[0] in ("remove", "dv") and live:
                path = sorted(live)[op[1] % len(live)]
                if path in touched:
                    continue
                size, dv = live.pop(path)
                rm = _remove(path, size)
                if dv:
                    rm["remove"]["deletionVector"] = dv
                actions.append(rm)
                touched.add(path)
                if op[0] == "dv":  # replace the file's DV: remove + add of the same path
                    new_dv = {"storageType": "i", "pathOrInlineDv": f"x{counter}{path}", "sizeInBytes": 4,
                              "cardinality": op[2]}
                    counter += 1
                    add = _add(path, size)
                    add["add"]["deletionVector"] = new_dv
                    actions.append(add)
                    live[path] = (size, new_dv)
            elif op[0] == "txn":
                actions.append({"txn": {"appId": op[1], "version": op[2]}})
            elif op[0] == "domain":
                actions.append({"domainMetadata": {"domain": op[1], "configuration": "c", "removed": op[2]}})
        # At most one action per appId / domain per commit, as the protocol requires.
        seen: set[tuple[str, str]] = set()
        unique = []
        for action in reversed(actions):
            key = ("txn", action["txn"]["appId"]) if "txn" in action else (
                ("domain", action["domainMetadata"]["domain"]) if "domainMetadata" in action else None
            )
            if key is not None and key in seen:
                continue
            if key is not None:
                seen.add(key)
            unique.append(action)
        actions = list(reversed(unique))
        _write_commit(root, version, actions)
        assert state is not None
        state = crc.next_checksum(state, actions)
    assert state is not None
    snapshot = load_snapshot(IO, root)
    full = crc.checksum_from_snapshot(snapshot)
    for key in ("tableSizeBytes", "numFiles", "numDeletionVectorsOpt", "numDeletedRecordsOpt"):
        assert state[key] == full[key], key
    assert state["setTransactions"] == full["setTransactions"]
    assert state["fileSizeHistogram"] == full["fileSizeHistogram"]
    assert state["deletedRecordCountsHistogramOpt"] == full["deletedRecordCountsHistogramOpt"]
    assert [(d["domain"], d["configuration"]) for d in state["domainMetadata"]] == [
        (d["domain"], d["configuration"]) for d in full["domainMetadata"]
    ]


def test_histograms_use_sparks_bins(shared_tables: Path) -> None:
    spark = crc.read_version_checksum(IO, str(shared_tables / "cdf-table-with-cdc-and-dvs"), 25)
    assert spark is not None
    assert list(crc.FILE_SIZE_BIN_BOUNDARIES) == spark["histogramOpt"]["sortedBinBoundaries"]
    v0 = crc.next_checksum(crc.EMPTY_STATE, [PROTOCOL, _meta(), _add("a", 0), _add("b", 8191), _add("c", 8192), _add("d", 2**40)])
    assert v0 is not None
    histogram = v0["fileSizeHistogram"]
    assert histogram["fileCounts"][:3] == [2, 1, 0] and histogram["fileCounts"][-1] == 1
    assert histogram["totalBytes"][:2] == [8191, 8192] and histogram["totalBytes"][-1] == 2**40
    dv = {"storageType": "i", "pathOrInlineDv": "x", "sizeInBytes": 4}
    adds = [_add(p, 1) for p in "efg"]
    for add, cardinality in zip(adds, (9, 10, 2147483647), strict=True):
        add["add"]["deletionVector"] = dict(dv, pathOrInlineDv=add["add"]["path"], cardinality=cardinality)
    v1 = crc.next_checksum(v0, adds)
    assert v1 is not None
    assert v1["deletedRecordCountsHistogramOpt"]["deletedRecordCounts"] == [4, 1, 1, 0, 0, 0, 0, 0, 0, 1]


def test_no_set_transactions_when_they_can_expire(table_path: str) -> None:
    # With delta.setTransactionRetentionDuration set, Spark drops expired txns from its state
    # and would fail to validate a .crc listing them; like Spark, we leave the list out.
    retention = {"delta.setTransactionRetentionDuration": "interval 1 days"}
    v0 = crc.next_checksum(crc.EMPTY_STATE, [PROTOCOL, _meta(retention), {"txn": {"appId": "a", "version": 1, "lastUpdated": 5}}])
    assert v0 is not None and "setTransactions" not in v0
    plain = crc.next_checksum(crc.EMPTY_STATE, [PROTOCOL, _meta(), {"txn": {"appId": "a", "version": 1, "lastUpdated": 5}}])
    assert plain is not None and plain["setTransactions"] == [{"appId": "a", "version": 1, "lastUpdated": 5}]
    # Turned on later: the list is dropped from then on.
    v1 = crc.next_checksum(plain, [_meta(retention)])
    assert v1 is not None and "setTransactions" not in v1
    _write_commit(table_path, 0, [PROTOCOL, _meta(retention), {"txn": {"appId": "a", "version": 1, "lastUpdated": 5}}])
    assert "setTransactions" not in crc.checksum_from_snapshot(load_snapshot(IO, table_path))


def test_validation_reports_a_wrong_histogram(shared_tables: Path) -> None:
    root = str(shared_tables / "cdf-table-with-cdc-and-dvs")
    snapshot = load_snapshot(IO, root)
    spark = crc.read_version_checksum(IO, root, snapshot.version)
    assert spark is not None and crc.validate_version_checksum(snapshot, spark) == []
    histogram = dict(spark["histogramOpt"], fileCounts=[0, *spark["histogramOpt"]["fileCounts"][1:]])
    problems = crc.validate_version_checksum(snapshot, dict(spark, histogramOpt=histogram))
    assert len(problems) == 1 and problems[0].startswith("fileSizeHistogram")


@pytest.mark.parametrize("name", ["cdf-table-with-cdc-and-dvs", "table_with_deletion_logs"])
def test_incremental_from_sparks_previous_crc_matches_sparks_next(shared_tables: Path, name: str) -> None:
    # Continuing a chain Spark started: its legacy "histogramOpt" is carried forward exactly.
    root = str(shared_tables / name)
    compared = 0
    for version in commit_versions(root)[1:]:
        previous = crc.read_version_checksum(IO, root, version - 1)
        spark = crc.read_version_checksum(IO, root, version)
        if previous is None or spark is None:
            continue
        ours = crc.next_checksum(previous, crc.read_commit_json(IO, root, version))
        assert ours is not None, version
        for key in ("numDeletionVectorsOpt", "numDeletedRecordsOpt", "deletedRecordCountsHistogramOpt"):
            if key not in previous:  # not derivable from a .crc without it: left out, never guessed
                assert key not in ours
                spark = {k: v for k, v in spark.items() if k != key}
        assert "setTransactions" not in spark or "setTransactions" in ours
        same_state(dict(ours, setTransactions=ours.get("setTransactions", []), domainMetadata=ours.get("domainMetadata", [])), spark)
        compared += 1
    assert compared >= 5
