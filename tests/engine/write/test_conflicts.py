"""Delta's conflict rules, one winning commit at a time.

Modelled on the cases of Delta's OptimisticTransactionSuite and
ConflictCheckerPredicateEliminationUnitSuite: append vs append in disjoint partitions
commits, delete vs append in the same partition conflicts, and so on, per isolation
level. Winning commits are built from log JSON, as they are read from ``_delta_log``.

Read predicates here are partition equalities evaluated by a small matcher; the
transaction tests cover the real SQL predicates (helper D's expression engine).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationError,
    ConcurrentTransactionException,
    CorruptCommitError,
    InvalidTablePropertyError,
    MetadataChangedException,
    ProtocolChangedException,
    TransactionAlreadyCommittedError,
)
from airflow_delta.engine.model.actions import Protocol
from airflow_delta.engine.write.conflicts import (
    IsolationLevel,
    TransactionFootprint,
    WinningCommit,
    added_files_to_check,
    check_winning_commit,
    decode_paths,
)

READ_PROTOCOL = Protocol(1, 2)
SERIALIZABLE = IsolationLevel.SERIALIZABLE
WRITE_SERIALIZABLE = IsolationLevel.WRITE_SERIALIZABLE
SNAPSHOT = IsolationLevel.SNAPSHOT_ISOLATION


def partition_matcher(predicates: Sequence[Any], added: pa.Table) -> pa.BooleanArray:
    """Predicates are ``{column: value}`` equalities on partition values."""
    out = []
    for pv in added.column("partition_values").to_pylist():
        values = dict(pv or [])
        out.append(any(all(values.get(k) == v for k, v in p.items()) for p in predicates))
    return pa.array(out, pa.bool_())


def add(path: str, part: str | None = None, data_change: bool = True) -> dict[str, Any]:
    pv = {"p": part} if part is not None else {}
    return {"add": {"path": path, "partitionValues": pv, "size": 10, "modificationTime": 1, "dataChange": data_change}}


def remove(path: str, part: str | None = None, data_change: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"path": path, "deletionTimestamp": 1, "dataChange": data_change}
    if part is not None:
        body["partitionValues"] = {"p": part}
    return {"remove": body}


def commit_info(operation: str, blind: bool) -> dict[str, Any]:
    return {"commitInfo": {"timestamp": 1, "operation": operation, "isBlindAppend": blind}}


def winner(*actions: dict[str, Any], version: int = 5) -> WinningCommit:
    return WinningCommit.from_actions(version, actions)


def blind_append(*parts: str, version: int = 5) -> WinningCommit:
    return winner(commit_info("WRITE", True), *[add(f"p={p}/f{i}.parquet", p) for i, p in enumerate(parts)], version=version)


def rewrite_append(*parts: str, version: int = 5) -> WinningCommit:
    """A non-blind commit that adds files (e.g. the insert half of a MERGE)."""
    return winner(commit_info("MERGE", False), *[add(f"p={p}/m{i}.parquet", p) for i, p in enumerate(parts)], version=version)


def footprint(**kwargs: Any) -> TransactionFootprint:
    read_paths = kwargs.pop("read_paths", ())
    kwargs.setdefault("read_version", 4)
    kwargs.setdefault("partitioned", True)
    return TransactionFootprint(read_paths=pa.array(list(read_paths), pa.string()), **kwargs)


def check(fp: TransactionFootprint, w: WinningCommit, level: IsolationLevel = WRITE_SERIALIZABLE) -> None:
    check_winning_commit(fp, w, level, partition_matcher, READ_PROTOCOL)


def delete_in(part: str, *paths: str, **kwargs: Any) -> TransactionFootprint:
    """A DELETE that read partition ``part`` (these files) and removes them."""
    return footprint(read_predicates=({"p": part},), read_paths=paths, removed_paths=frozenset(paths), **kwargs)


# ------------------------------------------------------------------ protocol / metadata


def test_winner_protocol_change_aborts() -> None:
    w = winner(commit_info("UPGRADE PROTOCOL", False), {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["appendOnly"]}})
    with pytest.raises(ProtocolChangedException) as info:
        check(footprint(is_blind_append=True), w)
    assert info.value.winning_version == 5
    assert info.value.winning_operation == "UPGRADE PROTOCOL"


def test_winner_recommitting_same_protocol_is_not_a_change() -> None:
    w = winner(commit_info("WRITE", True), {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
    check(footprint(is_blind_append=True), w)


def test_both_changing_protocol_conflicts_even_when_identical() -> None:
    w = winner(commit_info("UPGRADE PROTOCOL", False), {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
    with pytest.raises(ProtocolChangedException):
        check(footprint(changes_protocol=True), w)


def test_winner_metadata_change_aborts_even_a_blind_append() -> None:
    w = winner(
        commit_info("SET TBLPROPERTIES", False),
        {"metaData": {"id": "t", "schemaString": '{"type":"struct","fields":[]}', "partitionColumns": [], "configuration": {}, "format": {"provider": "parquet"}}},
    )
    with pytest.raises(MetadataChangedException) as info:
        check(footprint(is_blind_append=True), w, SNAPSHOT)
    assert info.value.winning_operation == "SET TBLPROPERTIES"


def test_metadata_is_checked_before_file_conflicts() -> None:
    w = winner(
        commit_info("REPLACE TABLE", False),
        {"metaData": {"id": "t", "schemaString": "{\"type\":\"struct\",\"fields\":[]}", "configuration": {}}},
        remove("p=1/a.parquet", "1"),
    )
    with pytest.raises(MetadataChangedException):
        check(delete_in("1", "p=1/a.parquet"), w)


# ------------------------------------------------------------------ domains / app ids


def test_same_domain_conflicts_and_names_it() -> None:
    w = winner(commit_info("CLUSTER BY", False), {"domainMetadata": {"domain": "app.x", "configuration": "{}", "removed": False}})
    with pytest.raises(ConcurrentTransactionException) as info:
        check(footprint(domains=frozenset({"app.x"})), w)
    assert info.value.conflicting == ["app.x"]


def test_different_domains_do_not_conflict() -> None:
    w = winner(commit_info("X", False), {"domainMetadata": {"domain": "app.y", "configuration": "{}", "removed": False}})
    check(footprint(domains=frozenset({"app.x"}), is_blind_append=True), w)


def test_winner_txn_for_an_app_id_we_read_conflicts() -> None:
    w = winner(commit_info("STREAMING UPDATE", True), {"txn": {"appId": "job-1", "version": 3}}, add("p=1/x.parquet", "1"))
    with pytest.raises(ConcurrentTransactionException) as info:
        check(footprint(read_app_ids=frozenset({"job-1"}), is_blind_append=True), w)
    assert info.value.conflicting == ["job-1"]


def test_winner_txn_for_other_app_ids_is_fine() -> None:
    w = winner(commit_info("STREAMING UPDATE", True), {"txn": {"appId": "job-2", "version": 3}})
    check(footprint(read_app_ids=frozenset({"job-1"}), app_transactions={"job-1": 7}, is_blind_append=True), w)


def test_winner_already_committed_our_idempotent_write() -> None:
    w = winner(commit_info("WRITE", True), {"txn": {"appId": "job-1", "version": 7}})
    with pytest.raises(TransactionAlreadyCommittedError) as info:
        check(footprint(app_transactions={"job-1": 7}, is_blind_append=True), w)
    assert info.value.committed_version == 7


def test_winner_with_older_txn_version_of_our_app_is_a_concurrent_instance() -> None:
    w = winner(commit_info("WRITE", True), {"txn": {"appId": "job-1", "version": 6}})
    with pytest.raises(ConcurrentTransactionException):
        check(footprint(app_transactions={"job-1": 7}, is_blind_append=True), w)


# ------------------------------------------------------------------ appends


@pytest.mark.parametrize("level", list(IsolationLevel))
def test_blind_append_vs_blind_append_never_conflicts(level: IsolationLevel) -> None:
    check(footprint(is_blind_append=True), blind_append("1", "2"), level)
    check(footprint(is_blind_append=True), rewrite_append("1"), level)


@pytest.mark.parametrize("level", [SERIALIZABLE, WRITE_SERIALIZABLE])
def test_append_to_disjoint_partition_is_fine(level: IsolationLevel) -> None:
    check(delete_in("1", "p=1/a.parquet"), rewrite_append("2"), level)


@pytest.mark.parametrize("level", [SERIALIZABLE, WRITE_SERIALIZABLE])
def test_delete_vs_concurrent_non_blind_add_in_same_partition_conflicts(level: IsolationLevel) -> None:
    with pytest.raises(ConcurrentAppendException) as info:
        check(delete_in("1", "p=1/a.parquet"), rewrite_append("2", "1"), level)
    assert info.value.conflicting == [{"p": "1"}]
    assert info.value.winning_operation == "MERGE"


def test_write_serializable_ignores_blind_appends_serializable_does_not() -> None:
    fp = delete_in("1", "p=1/a.parquet")
    check(fp, blind_append("1"), WRITE_SERIALIZABLE)
    with pytest.raises(ConcurrentAppendException):
        check(fp, blind_append("1"), SERIALIZABLE)


def test_write_serializable_counts_blind_appends_when_we_change_metadata() -> None:
    fp = delete_in("1", "p=1/a.parquet", changes_metadata=True)
    with pytest.raises(ConcurrentAppendException):
        check(fp, blind_append("1"), WRITE_SERIALIZABLE)


def test_snapshot_isolation_ignores_every_concurrent_add() -> None:
    compaction = footprint(read_predicates=({"p": "1"},), read_paths=("p=1/a.parquet",), removed_paths=frozenset({"p=1/a.parquet"}))
    check(compaction, rewrite_append("1"), SNAPSHOT)
    check(compaction, blind_append("1"), SNAPSHOT)


def test_read_whole_table_conflicts_with_any_counted_add() -> None:
    fp = footprint(read_whole_table=True)
    with pytest.raises(ConcurrentAppendException):
        check(fp, rewrite_append("9"))
    check(fp, blind_append("9"), WRITE_SERIALIZABLE)  # blind appends are still invisible here


def test_unpartitioned_non_blind_transaction_depends_on_every_file() -> None:
    fp = footprint(partitioned=False, removed_paths=frozenset({"a.parquet"}))
    w = winner(commit_info("MERGE", False), add("new.parquet"))
    with pytest.raises(ConcurrentAppendException) as info:
        check(fp, w)
    assert info.value.conflicting == ["new.parquet"]


def test_partitioned_transaction_without_reads_does_not_see_adds() -> None:
    fp = footprint(removed_paths=frozenset({"p=1/a.parquet"}))
    check(fp, rewrite_append("1"))


def test_winner_without_commit_info_is_not_a_blind_append() -> None:
    w = winner(add("p=1/x.parquet", "1"))
    assert not w.is_blind_append
    with pytest.raises(ConcurrentAppendException):
        check(delete_in("1", "p=1/a.parquet"), w, WRITE_SERIALIZABLE)


def test_compaction_winner_adds_count_as_data_for_a_reader_of_that_partition() -> None:
    # OPTIMIZE is not a blind append, so its (dataChange=false) adds are "changed data"
    # added files to Delta's checker, and a DELETE that read the partition conflicts.
    w = winner(commit_info("OPTIMIZE", False), remove("p=1/a.parquet", "1", False), add("p=1/big.parquet", "1", False))
    with pytest.raises(ConcurrentAppendException):
        check(delete_in("1", "p=1/b.parquet"), w)


def test_added_files_to_check_per_level() -> None:
    blind = blind_append("1")
    assert added_files_to_check(blind, SERIALIZABLE, False).num_rows == 1
    assert added_files_to_check(blind, WRITE_SERIALIZABLE, False).num_rows == 0
    assert added_files_to_check(blind, WRITE_SERIALIZABLE, True).num_rows == 1
    assert added_files_to_check(rewrite_append("1"), SNAPSHOT, True).num_rows == 0


# ------------------------------------------------------------------ deletes


def test_winner_removing_a_file_we_read_conflicts() -> None:
    w = winner(commit_info("DELETE", False), remove("p=1/a.parquet", "1"))
    fp = footprint(read_predicates=({"p": "1"},), read_paths=("p=1/a.parquet", "p=1/b.parquet"))
    with pytest.raises(ConcurrentDeleteReadException) as info:
        check(fp, w, SNAPSHOT)
    assert info.value.conflicting == ["p=1/a.parquet"]
    assert info.value.winning_version == 5


def test_winner_removing_other_files_is_fine() -> None:
    w = winner(commit_info("DELETE", False), remove("p=2/z.parquet", "2"))
    check(delete_in("1", "p=1/a.parquet"), w)


def test_paths_are_compared_decoded() -> None:
    w = winner(commit_info("DELETE", False), remove("p=1/a%20b.parquet", "1"))
    fp = footprint(read_paths=("p=1/a b.parquet",))
    with pytest.raises(ConcurrentDeleteReadException):
        check(fp, w)


def test_any_remove_conflicts_with_a_whole_table_read() -> None:
    w = winner(commit_info("DELETE", False), remove("p=7/q.parquet", "7"))
    with pytest.raises(ConcurrentDeleteReadException):
        check(footprint(read_whole_table=True), w, SNAPSHOT)


def test_removing_the_same_file_twice_conflicts() -> None:
    w = winner(commit_info("DELETE", False), remove("p=1/a.parquet", "1"))
    fp = footprint(removed_paths=frozenset({"p=1/a.parquet"}))
    with pytest.raises(ConcurrentDeleteDeleteException) as info:
        check(fp, w, SNAPSHOT)
    assert info.value.conflicting == ["p=1/a.parquet"]


def test_delete_read_is_reported_before_delete_delete() -> None:
    w = winner(commit_info("OPTIMIZE", False), remove("p=1/a.parquet", "1", False))
    with pytest.raises(ConcurrentDeleteReadException):
        check(delete_in("1", "p=1/a.parquet"), w, SNAPSHOT)


def test_conflicts_share_the_base_class_and_say_what_won() -> None:
    w = winner(commit_info("DELETE", False), remove("p=1/a.parquet", "1"), version=12)
    with pytest.raises(ConcurrentModificationError) as info:
        check(footprint(removed_paths=frozenset({"p=1/a.parquet"})), w)
    assert "version 12" in str(info.value) and "DELETE" in str(info.value)


# ------------------------------------------------------------------ parsing / helpers


def test_winning_commit_from_bytes_reads_every_action_kind() -> None:
    lines = [
        commit_info("WRITE", False) | {},
        {"txn": {"appId": "a", "version": 1}},
        {"domainMetadata": {"domain": "d", "configuration": "{}", "removed": False}},
        add("p=1/x.parquet", "1"),
        remove("p=1/y%3A.parquet", "1"),
    ]
    data = ("\n".join(json.dumps(line) for line in lines) + "\n").encode()
    w = WinningCommit.from_bytes(3, data, "x.json", modification_time=99)
    assert w.version == 3 and w.operation == "WRITE" and w.modification_time == 99
    assert [t.app_id for t in w.transactions] == ["a"]
    assert [d.domain for d in w.domains] == ["d"]
    assert w.added_files.column("path").to_pylist() == ["p=1/x.parquet"]
    assert w.removed_paths == ("p=1/y:.parquet",)


def test_corrupt_winning_commit_names_file_and_line() -> None:
    with pytest.raises(CorruptCommitError) as info:
        WinningCommit.from_bytes(3, b'{"commitInfo":{}}\n{not json\n', "_delta_log/3.json")
    assert info.value.line == 2


def test_isolation_level_parse() -> None:
    assert IsolationLevel.parse("writeserializable") is WRITE_SERIALIZABLE
    assert IsolationLevel.parse(SNAPSHOT) is SNAPSHOT
    with pytest.raises(InvalidTablePropertyError):
        IsolationLevel.parse("ReadCommitted")


def test_decode_paths_only_touches_encoded_values() -> None:
    out = decode_paths(pa.chunked_array([["a.parquet", "b%20c.parquet", None]]))
    assert out.to_pylist() == ["a.parquet", "b c.parquet", None]


# ------------------------------------------------------------------ properties

parts = st.sampled_from(["1", "2", "3"])
file_actions = st.lists(
    st.one_of(
        st.builds(lambda p, i, dc: add(f"p={p}/w{i}.parquet", p, dc), parts, st.integers(0, 50), st.booleans()),
        st.builds(lambda p, i, dc: remove(f"p={p}/r{i}.parquet", p, dc), parts, st.integers(0, 50), st.booleans()),
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(actions=file_actions, blind=st.booleans(), level=st.sampled_from(list(IsolationLevel)))
def test_blind_append_only_conflicts_on_protocol_metadata_txn_or_domains(
    actions: list[dict[str, Any]], blind: bool, level: IsolationLevel
) -> None:
    # A blind append reads nothing, so no file-level change of a winner can invalidate it.
    check(footprint(is_blind_append=True), winner(commit_info("X", blind), *actions), level)


@settings(max_examples=150, deadline=None)
@given(actions=file_actions, blind=st.booleans(), read=parts, level=st.sampled_from(list(IsolationLevel)))
def test_conflict_iff_rules_say_so(actions: list[dict[str, Any]], blind: bool, read: str, level: IsolationLevel) -> None:
    # Our transaction read partition `read` (file p=<read>/r0.parquet) and removes that file.
    ours = f"p={read}/r0.parquet"
    fp = delete_in(read, ours)
    w = winner(commit_info("X", blind), *actions)
    added_parts = [a["add"]["partitionValues"]["p"] for a in actions if "add" in a]
    removed = {a["remove"]["path"] for a in actions if "remove" in a}
    counts_adds = level is SERIALIZABLE or (level is WRITE_SERIALIZABLE and not blind)
    if counts_adds and read in added_parts:
        expected: type[Exception] | None = ConcurrentAppendException
    elif ours in removed:
        expected = ConcurrentDeleteReadException
    else:
        expected = None
    if expected is None:
        check(fp, w, level)
    else:
        with pytest.raises(expected):
            check(fp, w, level)


def delta_file_rules(
    fp: TransactionFootprint, winner_actions: list[dict[str, Any]], winner_blind: bool, level: IsolationLevel
) -> type[Exception] | None:
    """Delta's ConflictChecker file checks, written out rule by rule, as the reference.

    checkForAddedFilesThatShouldHaveBeenReadByCurrentTxn (added files counted per level,
    then getFirstFileMatchingPartitionPredicates), checkForDeletedFilesAgainstCurrentTxnReadFiles,
    checkForDeletedFilesAgainstCurrentTxnDeletedFiles, in that order.
    """
    adds = [a["add"] for a in winner_actions if "add" in a]
    removes = [a["remove"]["path"] for a in winner_actions if "remove" in a]
    if level is SNAPSHOT:
        counted: list[dict[str, Any]] = []
    elif level is WRITE_SERIALIZABLE and not fp.changes_metadata:
        counted = [] if winner_blind else adds
    else:
        counted = adds
    if not fp.is_blind_append:
        if fp.read_whole_table or not fp.partitioned:
            hit = bool(counted)
        else:
            hit = any(a["partitionValues"].get("p") == pred["p"] for pred in fp.read_predicates for a in counted)
        if hit:
            return ConcurrentAppendException
    read = set(fp.read_paths.to_pylist())
    if any(r in read for r in removes) or (removes and fp.read_whole_table):
        return ConcurrentDeleteReadException
    if any(r in fp.removed_paths for r in removes):
        return ConcurrentDeleteDeleteException
    return None


pool = [f"p={p}/f{i}.parquet" for p in "123" for i in range(2)]


@st.composite
def footprints_and_winners(draw: st.DrawFn) -> tuple[TransactionFootprint, list[dict[str, Any]], bool]:
    partitioned = draw(st.booleans())
    blind = draw(st.booleans())
    if blind:  # a blind append read nothing and removes nothing
        fp = footprint(partitioned=partitioned, is_blind_append=True, changes_metadata=draw(st.booleans()))
    else:
        predicates = tuple({"p": p} for p in draw(st.sets(parts))) if partitioned else ()
        fp = footprint(
            partitioned=partitioned,
            read_predicates=predicates,
            read_whole_table=draw(st.booleans()),
            read_paths=sorted(draw(st.sets(st.sampled_from(pool)))),
            removed_paths=frozenset(draw(st.sets(st.sampled_from(pool)))),
            changes_metadata=draw(st.booleans()),
        )
    adds = [
        add(f"p={p}/w{i}.parquet" if partitioned else f"w{i}.parquet", p if partitioned else None, dc)
        for i, (p, dc) in enumerate(draw(st.lists(st.tuples(parts, st.booleans()), max_size=4)))
    ]
    removes = [remove(path, path[2] if partitioned else None, dc) for path, dc in draw(
        st.lists(st.tuples(st.sampled_from(pool), st.booleans()), max_size=3, unique_by=lambda t: t[0])
    )]
    return fp, adds + removes, draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(case=footprints_and_winners(), level=st.sampled_from(list(IsolationLevel)))
def test_file_checks_agree_with_a_rule_by_rule_model_of_delta(
    case: tuple[TransactionFootprint, list[dict[str, Any]], bool], level: IsolationLevel
) -> None:
    fp, actions, blind = case
    expected = delta_file_rules(fp, actions, blind, level)
    w = winner(commit_info("X", blind), *actions)
    if expected is None:
        check(fp, w, level)
    else:
        with pytest.raises(expected):
            check(fp, w, level)


@pytest.mark.parametrize("line", [
    b'{"add": {"path": "a", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true, "deletionVector": "x"}}',
    b'{"add": [1, 2]}',
    b'{"txn": {"appId": "a", "version": 1, "lastUpdated": "now"}}',
    b'{"commitInfo": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
    b'{"commitInfo": {"operation": "\xff"}}',
])
def test_a_winning_commit_that_breaks_the_protocol_is_a_corrupt_commit(line: bytes) -> None:
    data = b'{"commitInfo": {"operation": "WRITE"}}\n' + line + b"\n"
    with pytest.raises(CorruptCommitError) as err:
        WinningCommit.from_bytes(3, data, "00000000000000000003.json")
    assert (err.value.file, err.value.line) == ("00000000000000000003.json", 2)
