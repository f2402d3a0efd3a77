"""``load_snapshot`` / ``Snapshot``: version and timestamp loading, the owned fields, delegation."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.errors import (
    CorruptCheckpointError,
    CorruptCommitError,
    DeltaError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from airflow_delta.engine.model.actions import FILE_ACTIONS_SCHEMA
from airflow_delta.engine.read.snapshot import decode_paths, load_snapshot, relative_paths
from airflow_delta.engine.storage.fileio import LocalFileIO
from tests.engine.read import log_builders as b

IO = LocalFileIO()
T0 = 1_700_000_000_000


def _table(root: str) -> None:
    b.write_commit(root, 0, [b.commit_info(), b.protocol(), b.metadata(["part"]),
                             b.add("part=a/f%201.parquet", size=1, partition_values={"part": "a"}),
                             b.txn("app", 1), b.domain("dom", "cfg")], mtime_ms=T0)
    b.write_commit(root, 1, [b.commit_info("DELETE"), b.remove("part=a/f%201.parquet"),
                             b.add("part=b/f2.parquet", size=2, partition_values={"part": "b"})], mtime_ms=T0 + 1000)
    b.write_commit(root, 2, [b.txn("app", 2), b.domain("dom", "cfg", removed=True)], mtime_ms=T0 + 2000)


def test_latest(table_path: str) -> None:
    _table(table_path)
    snap = load_snapshot(IO, table_path)
    assert snap.version == 2 and snap.table_root == table_path and snap.io is IO
    assert snap.partition_columns == ("part",)
    assert snap.properties.checkpoint_interval == 10
    assert snap.timestamp == T0 + 2000
    assert snap.transactions["app"].version == 2 and snap.transaction_version("none") is None
    assert dict(snap.domain_metadata) == {}
    assert snap.add_actions.schema == FILE_ACTIONS_SCHEMA
    assert snap.add_actions.column("path").to_pylist() == ["part=b/f2.parquet"]
    assert snap.tombstones.column("path").to_pylist() == ["part=a/f%201.parquet"]
    assert snap.log_segment.version == 2 and snap.num_files == 1
    assert snap.commit_info is None  # version 2 has no commitInfo


def test_version_time_travel(table_path: str) -> None:
    _table(table_path)
    snap = load_snapshot(IO, table_path, version=0)
    assert snap.version == 0 and snap.timestamp == T0
    assert snap.add_actions.column("path").to_pylist() == ["part=a/f%201.parquet"]
    assert snap.domain_metadata["dom"].configuration == "cfg"
    assert snap.commit_info is not None and snap.commit_info["operation"] == "WRITE"
    with pytest.raises(VersionNotFoundError):
        load_snapshot(IO, table_path, version=3)


def test_timestamp_time_travel(table_path: str) -> None:
    _table(table_path)
    assert load_snapshot(IO, table_path, timestamp=T0 + 1500).version == 1
    assert load_snapshot(IO, table_path, timestamp="2023-11-14T22:13:21Z").version == 1  # T0 + 1000
    with pytest.raises(DeltaError, match="either version or timestamp"):
        load_snapshot(IO, table_path, version=1, timestamp=T0)


def test_snapshot_is_immutable(table_path: str) -> None:
    _table(table_path)
    snap = load_snapshot(IO, table_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.version = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        snap.transactions["x"] = None  # type: ignore[index]


def test_snapshot_at_checkpoint_version_keeps_commit_info(table_path: str) -> None:
    _table(table_path)
    b.write_classic_checkpoint(table_path, 1, [b.protocol(), b.metadata(["part"]), b.txn("app", 1),
                                               b.add("part=b/f2.parquet", size=2, partition_values={"part": "b"})])
    snap = load_snapshot(IO, table_path, version=1)
    assert snap.log_segment.checkpoint_version == 1
    assert snap.commit_info is not None and snap.commit_info["operation"] == "DELETE"


def test_in_commit_timestamp(table_path: str) -> None:
    config = {"delta.enableInCommitTimestamps": "true"}
    b.write_commit(table_path, 0, [
        {"commitInfo": {"inCommitTimestamp": 42_000, "operation": "CREATE"}},
        b.protocol(1, 7, writer_features=["inCommitTimestamp"]), b.metadata(configuration=config)], mtime_ms=T0)
    assert load_snapshot(IO, table_path).timestamp == 42_000


def test_reader_gate_is_enforced(table_path: str) -> None:
    b.write_commit(table_path, 0, [b.protocol(3, 7, ["unknownReaderFeature"], []), b.metadata()])
    with pytest.raises(UnsupportedFeatureError):
        load_snapshot(IO, table_path)


def test_decode_paths() -> None:
    paths = pa.chunked_array([["a/b.parquet", "x=1%2F2/sp%20ace.parquet", "%25.parquet"]])
    assert decode_paths(paths).to_pylist() == ["a/b.parquet", "x=1/2/sp ace.parquet", "%.parquet"]
    plain = pa.array(["a", "b"])
    assert decode_paths(plain) is plain


def test_delta_table_facade(table_path: str) -> None:
    _table(table_path)
    table = DeltaTable(table_path)
    assert table.version() == 2
    assert table.snapshot(1).version == 1
    assert [h["version"] for h in table.history()] == [2, 1, 0]


def test_schema_delegates_to_schema_module(table_path: str) -> None:
    pytest.importorskip("airflow_delta.engine.model.schema")
    _table(table_path)
    assert load_snapshot(IO, table_path).schema.names == ["id", "part"]


def test_files_and_plan_files(table_path: str) -> None:
    pytest.importorskip("airflow_delta.engine.model.stats_parse")
    pytest.importorskip("airflow_delta.engine.expressions")
    _table(table_path)
    snap = load_snapshot(IO, table_path, version=0)
    files = snap.files()
    assert files.column("path").to_pylist() == ["part=a/f 1.parquet"]
    assert files.column("partition_values").to_pylist() == [{"part": "a"}]
    assert snap.plan_files("part = 'zzz'").num_rows == 0
    assert snap.plan_files("part = 'a'").num_rows == 1


@pytest.mark.parametrize("name", ["simple_table", "delta-0.8.0-partitioned", "table-with-dv-small", "checkpoint-v2-table"])
def test_shared_tables_load(shared_tables: Path, name: str) -> None:
    deltalake = pytest.importorskip("deltalake")
    root = str(shared_tables / name)
    snap = DeltaTable(root).snapshot()
    theirs = deltalake.DeltaTable(root)
    assert snap.version == theirs.version()
    uris = sorted(os.path.normpath(u.removeprefix("file://")) for u in theirs.file_uris())
    ours = sorted(os.path.normpath(os.path.join(root, p)) for p in decode_paths(snap.add_actions.column("path")).to_pylist())
    assert ours == uris


def test_shared_domain_metadata_from_checkpoint_only(shared_tables: Path) -> None:
    snap = DeltaTable(str(shared_tables / "table-with-domain-metadata")).snapshot()
    assert snap.version == 108
    assert sorted(snap.domain_metadata) == ["com.databricks.liquid", "delta.clustering", "delta.rowTracking"]
    assert snap.timestamp > 0  # the checkpoint's mtime: no JSON commit is left


def test_relative_paths(tmp_path: Path) -> None:
    root = str(tmp_path)
    paths = pa.array(["a%20b.parquet", f"file://{root}/x=1/c.parquet", f"{root}/d.parquet"])
    assert relative_paths(root, paths).to_pylist() == ["a b.parquet", "x=1/c.parquet", "d.parquet"]


def test_relative_paths_of_hadoop_style_absolute_uris(tmp_path: Path) -> None:
    # Spark (Hadoop's Path.toUri) writes absolute paths as ``file:/root/...``, one slash;
    # a partition directory with a colon in its value is still relative.
    root = str(tmp_path)
    paths = pa.array([f"file:{root}/a.parquet", f"file:{root}/p=x%3Ay/b%20c.parquet", "ts=10%3A00/d.parquet"])
    assert relative_paths(root, paths).to_pylist() == ["a.parquet", "p=x:y/b c.parquet", "ts=10:00/d.parquet"]


class _CleanupDuringReadIO(LocalFileIO):
    """After the first listing, checkpoints version 2 and deletes commits 0-1, as a concurrent
    checkpoint + log cleanup would: the listing just taken is then stale."""

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = root
        self.pending = True

    def list_dir(self, path: str, **kwargs):  # type: ignore[no-untyped-def]
        infos = super().list_dir(path, **kwargs)
        if self.pending:
            self.pending = False
            b.write_classic_checkpoint(self.root, 2, [b.protocol(), b.metadata(["part"]), b.txn("app", 2),
                                                      b.add("part=b/f2.parquet", size=2, partition_values={"part": "b"})])
            for v in (0, 1):
                os.remove(b.commit_file(self.root, v))
        return infos


def test_commits_vanishing_during_load_are_retried(table_path: str) -> None:
    _table(table_path)
    snap = load_snapshot(_CleanupDuringReadIO(table_path), table_path)
    assert snap.version == 2 and snap.log_segment.checkpoint_version == 2
    assert snap.add_actions.column("path").to_pylist() == ["part=b/f2.parquet"]


# ------------------------------------------------------------------ corrupt checkpoints: fall back

_HISTORY: list[list[dict]] = [
    [b.commit_info(), b.protocol(), b.metadata(["part"]), b.txn("app", 0),
     b.add("part=a/f0.parquet", size=10, partition_values={"part": "a"}, stats='{"numRecords":1}')],
    [b.add("part=b/f1.parquet", size=11, partition_values={"part": "b"}), b.domain("dom", "1")],
    [b.remove("part=a/f0.parquet"), b.add("part=a/f2.parquet", size=12, partition_values={"part": "a"})],
    [b.txn("app", 3), b.add("part=c/f3.parquet", size=13, partition_values={"part": "c"})],
    [b.remove("part=b/f1.parquet"), b.domain("dom", "2")],
    [b.add("part=d/f5.parquet", size=15, partition_values={"part": "d"})],
    [b.remove("part=c/f3.parquet"), b.add("part=e/f6.parquet", size=16, partition_values={"part": "e"})],
]


def _reconciled(version: int) -> tuple[list[dict], list[dict]]:
    return b.oracle_state_actions(b.oracle_replay(_HISTORY[: version + 1]))


def _history_with_checkpoints(root: str, kinds: dict[int, str]) -> dict[int, list[str]]:
    """Commits 0..6 and a checkpoint of each version in ``kinds`` (classic, multipart,
    v2-json, v2-parquet): the files of each checkpoint."""
    for v, actions in enumerate(_HISTORY):
        b.write_commit(root, v, actions, mtime_ms=T0 + v * 1000)
    written: dict[int, list[str]] = {}
    for version, kind in kinds.items():
        non_file, files = _reconciled(version)
        if kind in ("classic", "multipart"):
            written[version] = b.write_classic_checkpoint(root, version, non_file + files,
                                                          parts=1 if kind == "classic" else 2)
        else:
            written[version] = [b.write_v2_checkpoint(root, version, non_file, files, sidecars=2,
                                                      fmt=kind.removeprefix("v2-"))]
    return written


def _state(snap: Any) -> tuple[Any, ...]:
    """What a snapshot says about the table, independent of where replay started."""
    def files(t: pa.Table) -> list[tuple[Any, ...]]:
        return sorted(zip(*(t.column(c).to_pylist() for c in ("path", "dv_id", "size", "partition_values", "stats")),
                          strict=True))

    txns = {app: t.version for app, t in snap.transactions.items()}  # (the test checkpoints drop lastUpdated)
    return (snap.version, snap.protocol, snap.metadata, txns, dict(snap.domain_metadata),
            files(snap.add_actions), [r[0] for r in files(snap.tombstones)])


def _truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def test_truncated_checkpoint_falls_back_to_an_older_one(table_path: str) -> None:
    written = _history_with_checkpoints(table_path, {3: "classic", 5: "classic"})
    before = _state(load_snapshot(IO, table_path))
    assert load_snapshot(IO, table_path).log_segment.checkpoint_version == 5
    _truncate(written[5][0])
    snap = load_snapshot(IO, table_path)
    assert snap.log_segment.checkpoint_version == 3
    assert _state(snap) == before
    _truncate(written[3][0])  # both bad: the JSON commits from version 0 rebuild it
    snap = load_snapshot(IO, table_path)
    assert snap.log_segment.checkpoint_version is None and _state(snap) == before


def test_truncated_checkpoint_without_json_history_is_a_typed_error(table_path: str) -> None:
    written = _history_with_checkpoints(table_path, {3: "classic", 5: "classic"})
    before = _state(load_snapshot(IO, table_path))
    for v in range(0, 6):
        os.remove(b.commit_file(table_path, v))
    assert _state(load_snapshot(IO, table_path)) == before  # still fine from checkpoint 5
    _truncate(written[5][0])
    with pytest.raises(CorruptCheckpointError) as err:
        load_snapshot(IO, table_path)
    assert err.value.file == written[5][0]
    assert "version 6 cannot be reconstructed" in str(err.value)
    with pytest.raises(CorruptCheckpointError, match="version 5 cannot be reconstructed"):
        load_snapshot(IO, table_path, version=5)


@pytest.mark.parametrize("kind", ["multipart", "v2-json", "v2-parquet"])
def test_corrupt_part_or_top_level_file_falls_back(table_path: str, kind: str) -> None:
    written = _history_with_checkpoints(table_path, {3: "classic", 5: kind})
    before = _state(load_snapshot(IO, table_path))
    assert load_snapshot(IO, table_path).log_segment.checkpoint_version == 5
    bad = written[5][-1]
    if bad.endswith(".json"):
        with open(bad, "a") as f:
            f.write('{"metaData": {"id": \n')  # a torn write
    else:
        _truncate(bad)
    snap = load_snapshot(IO, table_path)
    assert snap.log_segment.checkpoint_version == 3 and _state(snap) == before


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_bad_sidecar_falls_back(table_path: str, damage: str) -> None:
    written = _history_with_checkpoints(table_path, {3: "classic", 5: "v2-json"})
    before = _state(load_snapshot(IO, table_path))
    sidecar = sorted(Path(b.log_dir(table_path), "_sidecars").iterdir())[0]
    if damage == "missing":
        sidecar.unlink()
    else:
        _truncate(str(sidecar))
    # Sidecars hold only file actions: the metadata loads from the V2 checkpoint, and the
    # file state falls back when it is first needed.
    snap = load_snapshot(IO, table_path)
    assert snap.log_segment.checkpoint_version == 5  # the metadata came from it
    assert _state(snap) == before
    assert written[5]


def test_bad_sidecar_without_json_history_is_a_typed_error(table_path: str) -> None:
    _history_with_checkpoints(table_path, {5: "v2-parquet"})
    for v in range(0, 6):
        os.remove(b.commit_file(table_path, v))
    sidecar = sorted(Path(b.log_dir(table_path), "_sidecars").iterdir())[0]
    sidecar.unlink()
    snap = load_snapshot(IO, table_path)
    assert snap.version == 6 and snap.transactions["app"].version == 3  # metadata is intact
    with pytest.raises(CorruptCheckpointError) as err:
        _ = snap.add_actions
    assert err.value.file == str(sidecar) and "version 6 cannot be reconstructed" in str(err.value)


@pytest.mark.parametrize("hint", [
    '{"version": 9, "size": 4}',  # a checkpoint that does not exist
    '{"version": 5, "size": 4, "parts": 3}',  # the wrong number of parts
    '{"version": 5, "siz',  # torn
])
def test_last_checkpoint_pointing_at_missing_or_corrupt_checkpoint(table_path: str, hint: str) -> None:
    written = _history_with_checkpoints(table_path, {3: "classic", 5: "classic"})
    before = _state(load_snapshot(IO, table_path))
    b.write_raw(table_path, "_last_checkpoint", hint)
    assert _state(load_snapshot(IO, table_path)) == before
    _truncate(written[5][0])
    snap = load_snapshot(IO, table_path)
    assert snap.log_segment.checkpoint_version == 3 and _state(snap) == before


def test_metadata_does_not_need_the_file_actions(table_path: str) -> None:
    # A corrupt add line is only found when the file state is first used: loading the
    # snapshot for its metadata never parses file actions.
    b.write_commit(table_path, 0, [b.commit_info(), b.protocol(), b.metadata(), b.txn("app", 7)])
    b.write_raw(table_path, f"{1:020d}.json", '{"add": {"path": "x.parquet", "size": \n')
    snap = load_snapshot(IO, table_path)
    assert snap.version == 1 and snap.transactions["app"].version == 7 and snap.schema is not None
    with pytest.raises(CorruptCommitError):
        _ = snap.add_actions


def test_loading_does_not_import_pandas(table_path: str) -> None:
    # pyarrow imports pandas (~55 MB resident) on its first Python-object conversion;
    # replay converts through buffers so that a snapshot load stays without it.
    _history_with_checkpoints(table_path, {3: "classic"})
    b.write_commit(table_path, 7, [b.add("part=f/f7.parquet", size=17, partition_values={"part": "f"},
                                         deletion_vector=b.dv("abc", offset=1))])
    code = (
        "import sys\n"
        "from airflow_delta.engine.storage.fileio import LocalFileIO\n"
        "from airflow_delta.engine.read.snapshot import load_snapshot, decode_paths\n"
        f"snap = load_snapshot(LocalFileIO(), {table_path!r})\n"
        "assert snap.add_actions.num_rows == 4 and snap.tombstones.num_rows == 3\n"
        "decode_paths(snap.add_actions.column('path'))\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False", out.stderr


def test_column_mapping_mode_without_protocol_support_is_ignored(table_path: str) -> None:
    # The protocol: delta.columnMapping.mode is honoured only when the protocol supports
    # column mapping. Here it does not (reader version 1), so partition values are keyed by
    # the logical name, as the data columns are read by it.
    import json

    import pyarrow.parquet as pq

    def field(name: str, typ: str, fid: int) -> dict[str, Any]:
        return {"name": name, "type": typ, "nullable": True,
                "metadata": {"delta.columnMapping.id": fid, "delta.columnMapping.physicalName": f"col-{name}"}}

    schema = json.dumps({"type": "struct", "fields": [field("id", "long", 1), field("p", "string", 2)]})
    pq.write_table(pa.table({"id": [1]}), os.path.join(table_path, "f.parquet"))
    b.write_commit(table_path, 0, [
        b.protocol(1, 2),
        b.metadata(["p"], configuration={"delta.columnMapping.mode": "name"}, schema_string=schema),
        b.add("f.parquet", partition_values={"p": "P"}),
    ])
    snap = load_snapshot(IO, table_path)
    assert snap.files().column("partition_values").to_pylist() == [{"p": "P"}]
    assert snap.to_arrow().to_pylist() == [{"id": 1, "p": "P"}]


def test_expired_transaction_identifiers_are_ignored(table_path: str) -> None:
    # delta.setTransactionRetentionDuration: a snapshot ignores txn identifiers whose
    # lastUpdated is at or before now minus the retention; ones without lastUpdated stay.
    import time

    now = time.time_ns() // 1_000_000
    day = 86_400_000
    b.write_commit(
        table_path,
        0,
        [
            b.protocol(),
            b.metadata(configuration={"delta.setTransactionRetentionDuration": "interval 2 days"}),
            {"txn": {"appId": "old", "version": 3, "lastUpdated": now - 3 * day}},
            {"txn": {"appId": "recent", "version": 7, "lastUpdated": now - day}},
            {"txn": {"appId": "timeless", "version": 1}},
        ],
    )
    snapshot = DeltaTable(table_path).snapshot()
    assert sorted(snapshot.transactions) == ["recent", "timeless"]
    assert snapshot.transaction_version("old") is None


# ------------------------------------------------------------------ out of memory (issue 10, item 9)


def test_running_out_of_memory_while_loading_is_a_typed_error(table_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_delta.engine.errors import LogTooLargeError
    from airflow_delta.engine.read import commit_reader, replay

    b.write_commit(table_path, 0, [b.protocol(), b.metadata(), b.add("a")])
    b.write_commit(table_path, 1, [b.add("b")])
    # numpy's own MemoryError, raised where the log's bytes are split into lines
    with monkeypatch.context() as m:
        m.setattr(commit_reader, "_newline_positions", lambda raw: np.empty(1 << 62, dtype=np.uint8))
        with pytest.raises(LogTooLargeError) as err:
            load_snapshot(IO, table_path)
    assert not err.value.retryable and "too large for this process's memory" in str(err.value)
    assert table_path in str(err.value)
    # pyarrow's ArrowMemoryError, raised when the file actions are parsed (lazily, after the load)
    snapshot = load_snapshot(IO, table_path)
    with monkeypatch.context() as m:
        m.setattr(replay, "parse_file_actions", lambda *a, **k: pa.allocate_buffer(1 << 62))
        with pytest.raises(LogTooLargeError, match="add actions"):
            _ = snapshot.add_actions


def test_a_snapshot_whose_checkpoint_a_concurrent_cleanup_removed_still_reads(table_path: str) -> None:
    # The snapshot's metadata came from checkpoint 2; before its file actions are read, a
    # checkpoint of version 3 is written and a cleanup (clock in 2100) deletes checkpoint
    # 2 and commits 0..2. The file actions are rebuilt from a fresh listing, not reported
    # as a corrupt checkpoint.
    schema = pa.schema([("id", pa.int64())])
    table = DeltaTable.create(table_path, schema)
    for i in range(3):
        table.append(pa.table({"id": [i]}, schema=schema))
    table.checkpoint(2)
    table.append(pa.table({"id": [3]}, schema=schema))
    snapshot = table.snapshot()
    assert snapshot.version == 4 and snapshot.log_segment.checkpoint_version == 2
    table.checkpoint(3)
    deleted = table.cleanup_log(retention="interval 0 seconds", now=4_102_444_800_000)
    assert any(p.endswith(f"{2:020d}.checkpoint.parquet") for p in deleted)
    assert sorted(snapshot.to_arrow().column("id").to_pylist()) == [0, 1, 2, 3]


@pytest.mark.parametrize(("table", "filters"), [
    ("delta-0.8.0-partitioned", ["year = '2020'", "month > '1'", "value IS NOT NULL", "year = '2021' AND value > 'a'"]),
    ("delta-2.2.0-partitioned-types", ["c1 = 4", "c2 IN ('a', 'c')", "c3 > 5", "c1 = 4 OR c3 > 5"]),
    ("partition-type-primitives", ["is_active = 'true'", "id > 3", "category = 'A' AND id < 10"]),
    ("table-with-dv-small", ["value > 3"]),
])
@pytest.mark.parametrize("stats_first", [False, True])
@pytest.mark.parametrize("with_stats", [False, True])
def test_filtered_files_are_the_matching_rows_of_all_files(table: str, filters: list[str], stats_first: bool,
                                                           with_stats: bool) -> None:
    # files(filter) parses statistics only for the files a partition filter keeps (or none,
    # without stats=True), unless they were parsed already: either way each row equals that
    # file's row in files(), num_records whether read alone or with the statistics.
    from tests.conftest import shared_tables_dir

    path = shared_tables_dir() / table
    everything = load_snapshot(IO, str(path)).files(stats=with_stats)
    by_path = {row["path"]: row for row in everything.to_pylist()}
    for text in filters:
        snap = load_snapshot(IO, str(path))
        if stats_first:
            snap.files(stats=True)
        kept = snap.files(text, stats=with_stats)
        assert kept.schema == everything.schema, text
        mask = snap._file_mask(text)
        assert sorted(kept.column("path").to_pylist()) == sorted(
            everything.filter(mask).column("path").to_pylist()), text
        for row in kept.to_pylist():
            assert row == by_path[row["path"]], (text, row["path"])


_PATH_TEXT = st.lists(
    st.sampled_from(["%", "%2", "%20", "%3A", "%3a", "%C3%A9", "%e2%82%ac", "%FF", "%zz", "%%", "a", "/", "=", "é", "€", "0", "F"]),
    max_size=12,
).map("".join)


@given(paths=st.lists(_PATH_TEXT, min_size=1, max_size=20))
def test_decode_paths_is_the_strict_path_rule_for_every_path(paths: list[str]) -> None:
    # Vectorised percent-decoding equals the path rule of storage/paths.py: escapes and
    # multi-byte UTF-8 decoded as unquote does, plain paths untouched, and a stray '%' or
    # escapes that are not UTF-8 refused (InvalidPathError), never guessed at.
    from urllib.parse import unquote

    from airflow_delta.engine.errors import InvalidPathError
    from airflow_delta.engine.storage.paths import decode_log_path

    def strict(path: str) -> str | None:
        try:
            return decode_log_path(path)
        except InvalidPathError:
            return None

    expected = [strict(p) for p in paths]
    column = pa.chunked_array([pa.array(paths[: len(paths) // 2], pa.string()),
                               pa.array(paths[len(paths) // 2 :], pa.string())])
    if None in expected:
        with pytest.raises(InvalidPathError):
            decode_paths(column)
    else:
        assert decode_paths(column).to_pylist() == expected == [unquote(p) for p in paths]


@pytest.mark.parametrize(("name", "has_counts"), [
    ("simple_table", False), ("delta-0.8.0-partitioned", False), ("table-with-dv-small", True),
    ("checkpoint-v2-table", True), ("delta-1.2.1-only-struct-stats", True), ("http_requests", True),
])
def test_files_parse_statistics_only_when_asked(shared_tables: Path, name: str, has_counts: bool) -> None:
    """files() carries num_records (read alone) and no stats column; files(stats=True) adds the
    typed statistics, whose numRecords are the same counts; every other column is the same."""
    plain = load_snapshot(IO, str(shared_tables / name)).files()
    full = load_snapshot(IO, str(shared_tables / name)).files(stats=True)
    assert "stats" not in plain.column_names and full.column_names == [
        "path", "partition_values", "size", "modification_time", "num_records", "stats", "deletion_vector", "tags"]
    assert full.drop_columns(["stats"]).equals(plain)
    assert full.column("num_records").to_pylist() == [
        None if s is None else s["numRecords"] for s in full.column("stats").to_pylist()]
    assert plain.num_rows and any(n is not None for n in plain.column("num_records").to_pylist()) == has_counts


_HOSTILE_PATH_TEXT = st.lists(
    st.sampled_from(["a", "b.parquet", "/", ".", "..", "./", "../", "/.", "\\", "\x00", "\x1f", "\x7f", " ", "%", ":",
                     "s3:", "C:", "=", "é", "\t"]),
    max_size=6,
).map("".join)


@given(paths=st.lists(_HOSTILE_PATH_TEXT, min_size=1, max_size=8))
def test_the_byte_prescreen_of_paths_never_misses_one_the_full_rule_checks(paths: list[str]) -> None:
    """relative_paths skips the NEEDS_FULL_CHECK regex when a pass over the bytes finds nothing
    it could match: whenever the regex matches some path, the pre-screen must say so."""
    import re

    from airflow_delta.engine.read.snapshot import _may_need_full_check
    from airflow_delta.engine.storage.paths import NEEDS_FULL_CHECK

    if any(re.search(NEEDS_FULL_CHECK, p) for p in paths):
        assert _may_need_full_check(pa.array(paths, pa.string()))
