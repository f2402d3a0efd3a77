"""Action Reconciliation: unit rules, a model-based property over random logs, delta-rs cross-checks."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import (
    InvalidLogError,
    MissingMetadataError,
    MissingProtocolError,
    UnsupportedFeatureError,
)
from airflow_delta.engine.model.actions import FILE_ACTIONS_SCHEMA
from airflow_delta.engine.read.listing import list_log_segment
from airflow_delta.engine.read.replay import ReplayResult, reconcile_files, replay
from airflow_delta.engine.storage.fileio import LocalFileIO
from airflow_delta.engine.storage.paths import decode_log_path
from tests.engine.read import log_builders as b

IO = LocalFileIO()
START = [b.protocol(), b.metadata()]


def _replay(root: str, version: int | None = None) -> ReplayResult:
    return replay(IO, list_log_segment(IO, root, version))


def _live(result: ReplayResult) -> dict[tuple[str, str | None], int]:
    return {(r["path"], r["dv_id"]): r["size"] for r in result.add_actions.to_pylist()}


def _tombstones(result: ReplayResult) -> set[tuple[str, str | None]]:
    return {(r["path"], r["dv_id"]) for r in result.tombstones.to_pylist()}


def _write_log(root: str, commits: Sequence[Sequence[Mapping[str, Any]]]) -> None:
    for v, actions in enumerate(commits):
        b.write_commit(root, v, actions)


# ------------------------------------------------------------------ unit rules


def test_latest_protocol_and_metadata_win(table_path: str) -> None:
    _write_log(table_path, [
        START,
        [b.metadata(configuration={"delta.appendOnly": "true"}, table_id="second")],
        [b.protocol(1, 3)],
    ])
    result = _replay(table_path)
    assert result.metadata.id == "second" and result.metadata.configuration == {"delta.appendOnly": "true"}
    assert (result.protocol.min_reader_version, result.protocol.min_writer_version) == (1, 3)
    old = _replay(table_path, 0)
    assert old.metadata.id != "second" and old.protocol.min_writer_version == 2


def test_txn_latest_per_app(table_path: str) -> None:
    _write_log(table_path, [[*START, b.txn("a", 1), b.txn("b", 9)], [b.txn("a", 2)], [b.txn("a", 0)]])
    txns = _replay(table_path).transactions
    assert {k: t.version for k, t in txns.items()} == {"a": 0, "b": 9}  # versions may go down


def test_domain_metadata_tombstones(table_path: str) -> None:
    _write_log(table_path, [
        [*START, b.domain("x", "1"), b.domain("y", "1")],
        [b.domain("x", "2"), b.domain("y", "1", removed=True)],
        [b.domain("z", "3")],
    ])
    domains = _replay(table_path).domain_metadata
    assert {k: d.configuration for k, d in domains.items()} == {"x": "2", "z": "3"}
    _write_log(table_path, [[*START], [b.domain("q", "1")], [b.domain("q", "1", removed=True)], [b.domain("q", "again")]])
    assert _replay(table_path, 2).domain_metadata == {}
    assert _replay(table_path, 3).domain_metadata["q"].configuration == "again"


def test_add_remove_and_readd(table_path: str) -> None:
    _write_log(table_path, [
        [*START, b.add("a", size=1), b.add("b", size=2)],
        [b.remove("a")],
        [b.add("b", size=22)],  # re-adding a live file updates its metadata
        [b.add("a", size=11)],  # a removed file can come back
    ])
    assert _live(_replay(table_path, 1)) == {("b", None): 2}
    assert _tombstones(_replay(table_path, 1)) == {("a", None)}
    final = _replay(table_path)
    assert _live(final) == {("a", None): 11, ("b", None): 22}
    assert _tombstones(final) == set()


def test_deletion_vector_updates_are_distinct_logical_files(table_path: str) -> None:
    dv1, dv2 = b.dv("one"), b.dv("two", offset=7)
    _write_log(table_path, [
        [*START, b.add("f", size=1)],
        [b.remove("f"), b.add("f", size=2, deletion_vector=dv1)],
        [b.add("f", size=3, deletion_vector=dv2), b.remove("f", deletion_vector=dv1)],  # order within a commit is free
    ])
    result = _replay(table_path)
    assert _live(result) == {("f", "utwo@7"): 3}
    assert _tombstones(result) == {("f", None), ("f", "uone")}


def test_within_a_commit_line_order_decides(table_path: str) -> None:
    # Not a valid commit per the spec (one file, two actions), but replay is deterministic.
    _write_log(table_path, [[*START, b.add("f", size=1), b.remove("f")], [b.remove("g"), b.add("g", size=2)]])
    result = _replay(table_path)
    assert _live(result) == {("g", None): 2} and _tombstones(result) == {("f", None)}


def test_live_adds_are_unique_by_path(table_path: str) -> None:
    # A non-compliant log adds one path under two DVs: the newest (path, dv) add wins.
    _write_log(table_path, [[*START, b.add("f", size=1, deletion_vector=b.dv("a"))], [b.add("f", size=2, deletion_vector=b.dv("b"))]])
    assert _live(_replay(table_path)) == {("f", "ub"): 2}


def test_paths_are_keys_as_written(table_path: str) -> None:
    _write_log(table_path, [[*START, b.add("a%20b", size=1), b.add("c", size=2)], [b.remove("a%20b")]])
    assert _live(_replay(table_path)) == {("c", None): 2}


def test_missing_protocol_and_metadata(table_path: str, tmp_path: Path) -> None:
    _write_log(table_path, [[b.metadata(), b.add("a")]])
    with pytest.raises(MissingProtocolError, match="no protocol action"):
        _replay(table_path)
    other = str(tmp_path / "other")
    _write_log(other, [[b.protocol(), b.add("a")]])
    with pytest.raises(MissingMetadataError, match="no metaData action"):
        _replay(other)


def test_invalid_txn_is_reported(table_path: str) -> None:
    _write_log(table_path, [[*START, {"txn": {"version": 1}}]])
    with pytest.raises(InvalidLogError, match="txn"):
        _replay(table_path)


def test_reader_gate(table_path: str) -> None:
    _write_log(table_path, [[b.protocol(3, 7, ["someFutureFeature"], ["someFutureFeature"]), b.metadata()]])
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        _replay(table_path)
    _write_log(table_path, [[b.protocol(4, 7), b.metadata()]])
    with pytest.raises(UnsupportedFeatureError):
        _replay(table_path)


def test_checkpoint_then_commits(table_path: str) -> None:
    _write_log(table_path, [[*START, b.add("a", size=1), b.add("b", size=2), b.add("c", size=3)], [b.remove("b")]])
    b.write_classic_checkpoint(table_path, 1, [*START, b.add("a", size=1), b.add("c", size=3), b.remove("b")])
    b.write_commit(table_path, 2, [b.add("b", size=20), b.remove("a")])
    result = _replay(table_path)
    assert _live(result) == {("b", None): 20, ("c", None): 3}
    assert _tombstones(result) == {("a", None)}
    assert result.add_actions.schema == FILE_ACTIONS_SCHEMA


def test_metadata_only_replay(table_path: str) -> None:
    _write_log(table_path, [[*START, b.add("a"), b.txn("t", 3)]])
    result = replay(IO, list_log_segment(IO, table_path), file_actions=False)
    assert result.add_actions.num_rows == 0 and result.transactions["t"].version == 3


def test_reconcile_files_accepts_any_order() -> None:
    rows = [(2, True, "a"), (0, True, "a"), (1, False, "a"), (3, True, "b")]
    table = pa.Table.from_pylist(
        [{"version": 0, "seq": s, "is_add": add, "path": p} for s, add, p in rows], schema=FILE_ACTIONS_SCHEMA)
    adds, tombstones = reconcile_files(table)
    assert adds.column("seq").to_pylist() == [2, 3] and tombstones.num_rows == 0


# ------------------------------------------------------------------ model-based property

PATHS = [f"p={i % 2}/f{i}.parquet" for i in range(5)] + ["p=1/sp%20ace.parquet"]
DVS = [None, b.dv("alpha"), b.dv("beta", offset=3), b.dv("inline", storage="i")]


@st.composite
def random_logs(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """Valid logs: each commit touches a path at most once (a DV update is one remove + one add)."""
    live: dict[str, dict | None] = {}
    size = iter(range(1, 10_000))
    commits: list[list[dict[str, Any]]] = [[b.commit_info(), *START]]
    for _ in range(draw(st.integers(1, 8))):
        actions: list[dict[str, Any]] = [b.commit_info()]
        for path in draw(st.lists(st.sampled_from(PATHS), unique=True, max_size=4)):
            pv = {"p": path[2]}
            if path not in live:
                op = draw(st.sampled_from(["add", "add", "remove_unknown"]))
                dv = draw(st.sampled_from(DVS))
                if op == "add":
                    actions.append(b.add(path, size=next(size), partition_values=pv, deletion_vector=dv))
                    live[path] = dv
                else:
                    actions.append(b.remove(path, deletion_vector=dv))
            else:
                dv = live[path]
                op = draw(st.sampled_from(["remove", "readd", "dv_update"]))
                if op == "remove":
                    actions.append(b.remove(path, deletion_vector=dv, size=1, partition_values=pv))
                    del live[path]
                elif op == "readd":
                    actions.append(b.add(path, size=next(size), partition_values=pv, deletion_vector=dv))
                else:
                    new = draw(st.sampled_from([d for d in DVS if d != dv]))
                    pair = [b.remove(path, deletion_vector=dv), b.add(path, size=next(size), partition_values=pv, deletion_vector=new)]
                    actions.extend(pair if draw(st.booleans()) else pair[::-1])
                    live[path] = new
        if draw(st.booleans()):
            actions.append(b.txn(draw(st.sampled_from(["app1", "app2"])), draw(st.integers(0, 50))))
        if draw(st.booleans()):
            actions.append(b.domain(draw(st.sampled_from(["d1", "d2"])), str(draw(st.integers(0, 9))), removed=draw(st.booleans())))
        if draw(st.integers(0, 5)) == 0:
            actions.append(b.metadata(configuration={"k": str(draw(st.integers(0, 9)))}))
        commits.append(actions)
    return commits


def _expected(commits: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    state = b.oracle_replay(commits)
    live = {k: body["size"] for k, (key, body) in state["files"].items() if key == "add"}
    dead = {k for k, (key, _) in state["files"].items() if key == "remove"}
    domains = {k: d["configuration"] for k, d in state["domains"].items() if not d.get("removed")}
    return {"live": live, "dead": dead, "txn": state["txn"], "domains": domains,
            "config": state["metaData"]["configuration"]}


def _observed(result: ReplayResult) -> dict[str, Any]:
    return {"live": _live(result), "dead": _tombstones(result),
            "txn": {k: t.version for k, t in result.transactions.items()},
            "domains": {k: d.configuration for k, d in result.domain_metadata.items()},
            "config": dict(result.metadata.configuration)}


def _checkpoint(root: str, commits: Sequence[Sequence[Mapping[str, Any]]], version: int, kind: str) -> None:
    non_file, files = b.oracle_state_actions(b.oracle_replay(commits[: version + 1]))
    if kind == "classic":
        b.write_classic_checkpoint(root, version, non_file + files)
    elif kind == "multipart":
        b.write_classic_checkpoint(root, version, non_file + files, parts=3)
    else:
        b.write_v2_checkpoint(root, version, non_file, files, sidecars=2, fmt="json")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commits=random_logs(), data=st.data())
def test_replay_matches_model_however_the_log_is_cut(commits: list[list[dict[str, Any]]], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "t")
        _write_log(root, commits)
        latest = len(commits) - 1
        expected = _expected(commits)
        assert _observed(_replay(root)) == expected  # JSON only
        # Every intermediate version agrees with the model too (time travel).
        at = data.draw(st.integers(0, latest), label="time travel")
        assert _observed(_replay(root, at)) == _expected(commits[: at + 1])
        # Cut the log with a checkpoint of each kind, then drop the JSON it covers.
        cut = data.draw(st.integers(0, latest), label="cut")
        kind = data.draw(st.sampled_from(["classic", "multipart", "v2"]), label="kind")
        _checkpoint(root, commits, cut, kind)
        assert _observed(_replay(root)) == expected
        for v in range(cut):
            os.remove(b.commit_file(root, v))
        assert _observed(_replay(root)) == expected
        shutil.rmtree(root)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commits=random_logs(), data=st.data())
def test_checkpoints_written_by_the_engine_round_trip(commits: list[list[dict[str, Any]]], data: st.DataObject) -> None:
    checkpoints = pytest.importorskip("airflow_delta.engine.checkpoint.writer")
    from airflow_delta.engine.read.snapshot import load_snapshot

    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "t")
        _write_log(root, commits)
        cut = data.draw(st.integers(0, len(commits) - 1), label="cut")
        part_size = data.draw(st.sampled_from([None, 3]), label="part_size")
        checkpoints.write_checkpoint(load_snapshot(IO, root, cut), part_size=part_size, now_ms=0)
        assert list_log_segment(IO, root).checkpoint_version == cut
        assert _observed(_replay(root)) == _expected(commits)


# ------------------------------------------------------------------ delta-rs cross-check

SHARED = [
    "simple_table", "delta-0.8.0-partitioned", "delta-0.8.0-special-partition", "delta-0.8.0-null-partition",
    "table-with-dv-small", "checkpoint-v2-table", "table_failed_last_checkpoint_update",
    "with_checkpoint_no_last_checkpoint", "latest_not_checkpointed", "checkpoints_vacuumed",
    "table-with-domain-metadata", "python-0.25.5-checkpoint", "table_with_deletion_logs",
    "checkpoint_with_partitions", "table_with_column_mapping", "delta-2.2.0-partitioned-types",
    "cdf-table-with-cdc-and-dvs", "table_with_liquid_clustering", "delta-checkpoint-stats-optional",
]


@pytest.mark.parametrize("name", SHARED)
def test_add_actions_match_delta_rs(shared_tables: Path, name: str) -> None:
    deltalake = pytest.importorskip("deltalake")
    root = str(shared_tables / name)
    ours = _replay(root)
    theirs = deltalake.DeltaTable(root)
    assert ours.version == theirs.version()
    expected = pa.table(theirs.get_add_actions(flatten=True)).to_pylist()
    assert sorted((decode_log_path(r["path"]), r["size"]) for r in ours.add_actions.to_pylist()) == sorted(
        (decode_log_path(r["path"]), r["size_bytes"]) for r in expected)
    assert ours.metadata.id == theirs.metadata().id
    assert ours.protocol.min_reader_version == theirs.protocol().min_reader_version


def test_invalid_metadata_names_the_file(table_path: str) -> None:
    bad = b.metadata()
    del bad["metaData"]["schemaString"]
    _write_log(table_path, [[b.protocol(), bad]])
    with pytest.raises(InvalidLogError, match=r"00000000000000000000\.json"):
        _replay(table_path)


def test_restrict_map_keys_keeps_only_named_keys_including_sliced_and_null_maps() -> None:
    import pyarrow as pa

    from airflow_delta.engine.read.replay import restrict_map_keys

    full = pa.array(
        [[("x", "0")], [("p", "a"), ("q", None)], None, [("q", None), ("p", None)], [("p", "c")]],
        pa.map_(pa.string(), pa.string()),
    )
    for source, expected in [
        (full, [[], [("p", "a")], None, [("p", None)], [("p", "c")]]),
        (full.slice(1, 3), [[("p", "a")], None, [("p", None)]]),
        (pa.chunked_array([full.slice(0, 2), full.slice(3)]), [[], [("p", "a")], [("p", None)], [("p", "c")]]),
    ]:
        assert restrict_map_keys(source, ["p"]).to_pylist() == expected


def test_column_mapped_partition_values_carry_only_physical_keys(tmp_path) -> None:
    import pyarrow as pa

    from airflow_delta.engine import DeltaTable

    table = DeltaTable.create(
        str(tmp_path / "t"),
        pa.schema([("p", pa.string()), ("x", pa.int64())]),
        partition_by=["p"],
        properties={"delta.columnMapping.mode": "name"},
    )
    table.append(pa.table({"p": ["a", None], "x": [1, 2]}))
    snapshot = table.snapshot()
    physical = snapshot.metadata.schema_json["fields"][0]["metadata"]["delta.columnMapping.physicalName"]
    values = sorted(snapshot.add_actions.column("partition_values").to_pylist(), key=str)
    assert values == sorted([[(physical, "a")], [(physical, None)]], key=str)
    assert sorted(snapshot.files().column("partition_values").to_pylist(), key=str) == sorted([{"p": "a"}, {"p": None}], key=str)


# ------------------------------------------------------------------ the state of a few files


def test_the_state_of_files_named_agrees_with_the_whole_state_for_those_files(tmp_path: Path) -> None:
    """Lite VACUUM asks about a few removed files only: their state (re-added under another
    spelling of the path or not), and every file with a DV, must be exactly the full replay's,
    while plain adds of other files are not parsed."""
    from airflow_delta.engine.read.snapshot import load_snapshot, relative_paths

    root = str(tmp_path)
    pv = {"part": "a"}
    others = [b.add(f"part=a/other-{i}.parquet", partition_values=pv) for i in range(20)]
    b.write_commit(root, 0, [b.protocol(3, 7, ["deletionVectors"], ["deletionVectors"]),
                             b.metadata(["part"], {"delta.enableDeletionVectors": "true"}), *others,
                             *(b.add(f"part=a/{n}", partition_values=pv) for n in ("f1.parquet", "f2.parquet",
                                                                                  "f3.parquet", "x%20y.parquet")),
                             b.add("part=a/dv.parquet", partition_values=pv, deletion_vector=b.dv("ab^-aa")),
                             b.add("part=a/moved/f4.parquet", partition_values=pv)])
    b.write_commit(root, 1, [b.remove(f"part=a/{n}") for n in ("f1.parquet", "f2.parquet", "f3.parquet",
                                                               "x%20y.parquet", "moved/f4.parquet")])
    # Re-added: f1 by its absolute URI, "x y" percent-encoded, f4 without spaces in its line.
    b.write_commit(root, 2, [b.add(f"file://{root}/part=a/f1.parquet", partition_values=pv),
                             b.add("part=a/x%20y.parquet", partition_values=pv)])
    with open(b.commit_file(root, 2), "a") as out:
        out.write('{"add":{"path":"part=a/moved/f4.parquet","partitionValues":{"part":"a"},"size":1,'
                  '"modificationTime":1,"dataChange":true}}\n')
    names = pa.array(["f1.parquet", "f2.parquet", "f3.parquet", "x y.parquet", "f4.parquet"])

    def relative(actions: pa.Table) -> set[str]:
        return set(relative_paths(root, actions.column("path")).to_pylist())

    adds, tombstones = load_snapshot(LocalFileIO(), root).file_state_of_names(names)
    full = load_snapshot(LocalFileIO(), root)
    wanted = {"part=a/f1.parquet", "part=a/f2.parquet", "part=a/f3.parquet", "part=a/x y.parquet",
              "part=a/moved/f4.parquet", "part=a/dv.parquet"}
    assert relative(adds) == relative(full.add_actions) & wanted == {
        "part=a/f1.parquet", "part=a/x y.parquet", "part=a/moved/f4.parquet", "part=a/dv.parquet"}
    assert relative(tombstones) & wanted == relative(full.tombstones) & wanted
    assert {"part=a/f2.parquet", "part=a/f3.parquet"} <= relative(tombstones)
    assert not relative(adds) & {f"part=a/other-{i}.parquet" for i in range(20)}  # not parsed
    # Once the whole state is loaded, that is the answer.
    assert relative(full.file_state_of_names(names)[0]) == relative(full.add_actions)


def test_removes_of_versions_are_the_commits_own_removes_parsed_once(tmp_path: Path) -> None:
    """Lite VACUUM takes the removes of its commit range from the snapshot's read of the log:
    the same rows (a remove with unusual spacing and one with a DV included) and the same
    ``cdc`` actions as reading those commits again, only the range asked for; None once the
    state is loaded (the commit lines are dropped then)."""
    from airflow_delta.engine.read.commit_reader import read_commit_removes
    from airflow_delta.engine.read.listing import list_log
    from airflow_delta.engine.read.snapshot import load_snapshot

    root = str(tmp_path)
    b.write_commit(root, 0, [b.protocol(3, 7, ["deletionVectors"], ["deletionVectors"]),
                             b.metadata([], {"delta.enableDeletionVectors": "true"}),
                             *(b.add(f"f{i}.parquet") for i in range(6))])
    b.write_commit(root, 1, [b.remove("f0.parquet", deletion_timestamp=5), b.add("f6.parquet")])
    b.write_commit(root, 2, [b.remove("f1.parquet", deletion_timestamp=6, deletion_vector=b.dv("ab^-aa")),
                             {"cdc": {"path": "_change_data/c.parquet", "partitionValues": {}, "size": 3,
                                      "dataChange": False}}])
    with open(b.commit_file(root, 2), "a") as out:
        out.write('{ "remove" : {"path":"f2.parquet","deletionTimestamp":7,"dataChange":true}}\n')
    b.write_commit(root, 3, [b.remove("f3.parquet", deletion_timestamp=8)])
    listing = list_log(LocalFileIO(), root)

    def rows(parsed: Any) -> list[tuple[Any, ...]]:
        removes = parsed.file_actions.filter(pa.compute.invert(parsed.file_actions.column("is_add")))
        return sorted(zip(*(removes.column(c).to_pylist() for c in ("version", "path", "dv_id", "deletion_timestamp")),
                          strict=True))

    snapshot = load_snapshot(LocalFileIO(), root)
    for start, end in ((1, 2), (2, 3), (0, 3)):
        ours = snapshot.removes_of_versions(start, end)
        assert ours is not None
        read = read_commit_removes(LocalFileIO(), [listing.commits[v] for v in range(start, end + 1)],
                                   list(range(start, end + 1)))
        assert rows(ours) == rows(read)
        assert [(a.version, dict(a.body)) for a in ours.actions if a.key == "cdc"] == [
            (a.version, dict(a.body)) for a in read.actions if a.key == "cdc"]
    assert {r[1] for r in rows(snapshot.removes_of_versions(1, 2))} == {"f0.parquet", "f1.parquet", "f2.parquet"}
    assert snapshot.removes_of_versions(3, 4) is None  # commit 4 is not in the snapshot
    # Sharing the parse leaves the answer about a few files exact.
    adds, tombstones = snapshot.file_state_of_names(pa.array(["f0.parquet", "f2.parquet", "f6.parquet"]))
    assert set(adds.column("path").to_pylist()) == {"f6.parquet"}
    assert {"f0.parquet", "f2.parquet"} <= set(tombstones.column("path").to_pylist())
    snapshot.add_actions  # noqa: B018  # the whole state: the lines are dropped
    assert snapshot.removes_of_versions(1, 2) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(alphabet="ab/=.", max_size=8)), max_size=12), st.integers(0, 3))
def test_last_components_are_what_a_regex_replace_leaves(paths: list[str | None], skip: int) -> None:
    # The lite VACUUM's file names of plain add lines: the same as replacing ``^.*/``, nulls kept,
    # also for a sliced array (an offset into its buffers).
    import pyarrow.compute as pc

    from airflow_delta.engine.read.replay import _last_components

    array = pa.array(["x/skipped"] * skip + paths, pa.large_string()).slice(skip)
    assert _last_components(array).to_pylist() == pc.replace_substring_regex(array, r"^.*/", "").to_pylist()
