"""``_last_checkpoint``: the protocol's JSON checksum, and writing and reading the hint."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine.checkpoint.last_checkpoint import (
    canonicalize_json,
    json_checksum,
    last_checkpoint_path,
    read_last_checkpoint,
    write_last_checkpoint,
)
from airflow_delta.engine.checkpoint.writer import write_checkpoint
from airflow_delta.engine.errors import InvalidLogError
from airflow_delta.engine.table import DeltaTable
from tests.engine.checkpoint.table_helpers import IO, make_partitioned_table, snapshot_of


def test_checksum_matches_the_protocols_example() -> None:
    document = json.loads(
        '{"k0":"\'v 0\'", "checksum": "adsaskfljadfkjadfkj", "k1":{"k2": 2, "k3": ["v3", [1, 2], '
        '{"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}'
    )
    assert canonicalize_json(document) == (
        '"k0"="%27v%200%27","k1"+"k2"=2,"k1"+"k3"+0="v3","k1"+"k3"+1+0=1,"k1"+"k3"+1+1=2,'
        '"k1"+"k3"+2+"k4"="v4","k1"+"k3"+2+"k5"+0="v5","k1"+"k3"+2+"k5"+1="v6","k1"+"k3"+2+"k5"+2="v7"'
    )
    assert json_checksum(document) == "6a92d155a59bf2eecbd4b4ec7fd1f875"



def test_checksum_matches_every_shared_last_checkpoint_that_has_one(shared_tables: Path) -> None:
    checked = 0
    for candidate in sorted(shared_tables.glob("*/_delta_log/_last_checkpoint")):
        document = json.loads(candidate.read_text())
        if "checksum" in document:
            assert json_checksum(document) == document["checksum"], candidate
            checked += 1
    assert checked >= 3  # Spark-written ones, including a V2 one with nested nonFileActions



def test_checksum_url_encoding_is_strict_and_sorts_by_utf8_bytes() -> None:
    # Reserved octets are %XX in uppercase, UTF-8 first; unreserved - . _ ~ stay as they are.
    assert canonicalize_json({"a b": "x/y>é-._~"}) == '"a%20b"="x%2Fy%3E%C3%A9-._~"'
    # Keys sort by the bytes of their canonical path, not by insertion order.
    assert canonicalize_json({"b": 1, "a": {"y": None, "x": True}}) == '"a"+"x"=true,"a"+"y"=null,"b"=1'
    # Empty objects and arrays contribute nothing.
    assert canonicalize_json({"tags": {}, "v": []}) == ""



def test_read_last_checkpoint_ignores_a_bad_checksum(table_path: str) -> None:
    make_partitioned_table(table_path, commits=2)
    write_checkpoint(snapshot_of(table_path))
    good = read_last_checkpoint(IO, table_path)
    assert good is not None and good["version"] == 2
    tampered = dict(good, version=1)
    Path(f"{table_path}/_delta_log/_last_checkpoint").write_text(json.dumps(tampered))
    assert read_last_checkpoint(IO, table_path) is None



def test_write_last_checkpoint_adds_the_checksum_and_never_moves_back(table_path: str) -> None:
    Path(table_path, "_delta_log").mkdir()
    assert last_checkpoint_path(table_path) == f"{table_path}/_delta_log/_last_checkpoint"
    assert read_last_checkpoint(IO, table_path) is None
    written = write_last_checkpoint(IO, table_path, {"version": 5, "size": 3, "parts": None, "checksum": "stale"})
    assert written == {"version": 5, "size": 3, "checksum": json_checksum({"version": 5, "size": 3})}
    assert json.loads(Path(last_checkpoint_path(table_path)).read_text()) == written == read_last_checkpoint(IO, table_path)
    # Not kept while no checkpoint of version 5 is in the log: a hint naming a missing
    # checkpoint is what the next write repairs.
    checkpoint_5 = Path(table_path, "_delta_log", f"{5:020d}.checkpoint.parquet")
    checkpoint_5.write_bytes(b"")
    assert write_last_checkpoint(IO, table_path, {"version": 4, "size": 1}) == written  # kept: it is newer
    checkpoint_5.unlink()
    moved = write_last_checkpoint(IO, table_path, {"version": 4, "size": 1})
    assert moved["version"] == 4 == read_last_checkpoint(IO, table_path)["version"]  # type: ignore[index]
    write_last_checkpoint(IO, table_path, written)
    repaired = write_last_checkpoint(IO, table_path, {"version": 4, "size": 1}, allow_older=True)
    assert read_last_checkpoint(IO, table_path) == repaired and repaired["version"] == 4


def test_an_unparsable_last_checkpoint_is_ignored(table_path: str) -> None:
    Path(table_path, "_delta_log").mkdir()
    Path(last_checkpoint_path(table_path)).write_text('{"version": 3, "size"')
    assert read_last_checkpoint(IO, table_path) is None
    Path(last_checkpoint_path(table_path)).write_text('{"size": 3}')
    assert read_last_checkpoint(IO, table_path) is None


# --------------------------------------------------------------- a corrupt hint (issue 10, item 9)

_DEEP = b'{"version": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def test_deeply_nested_hint_is_ignored_by_readers_and_rewritten_by_the_next_checkpoint(table_path: str) -> None:
    table = DeltaTable.create(table_path, pa.schema([("a", pa.int64())]), properties={"delta.checkpointInterval": "2"})
    Path(last_checkpoint_path(table_path)).write_bytes(_DEEP)
    assert read_last_checkpoint(IO, table_path) is None
    for version in range(1, 5):
        table.append(pa.table({"a": [version]}))
    # Automatic checkpoints kept going: the hint names the newest one again.
    assert read_last_checkpoint(IO, table_path)["version"] == 4
    assert DeltaTable(table_path).snapshot().num_files == 4


def test_a_directory_hint_is_ignored_by_readers_and_refused_loudly_by_writers(table_path: str) -> None:
    table = DeltaTable.create(table_path, pa.schema([("a", pa.int64())]))
    table.append(pa.table({"a": [1]}))
    os.makedirs(last_checkpoint_path(table_path))
    assert read_last_checkpoint(IO, table_path) is None
    assert DeltaTable(table_path).snapshot().num_files == 1  # readers list the log
    with pytest.raises(InvalidLogError, match="is a directory"):
        write_checkpoint(snapshot_of(table_path))
