"""Symlink format manifests, checked against the live files delta-rs lists.

What a manifest must hold is decided independently of our code: delta-rs's add actions
(paths and partition values) of the same version, grouped by a partition directory built
here with Hive's escaping. Every live file is listed exactly once, in its partition's
manifest, and nothing else is under ``_symlink_format_manifest/``.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import (
    SYMLINK_MANIFEST_PROPERTY,
    DeltaTable,
    ManifestNotSupportedError,
    OptimizeOptions,
)

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
MANIFESTS = "_symlink_format_manifest"
ENABLED = {SYMLINK_MANIFEST_PROPERTY: "true"}


def _hive_dir(column: str, value: Any) -> str:
    if value is None:
        return f"{column}=__HIVE_DEFAULT_PARTITION__"
    special = set('"#%\'*/:=?\\{[]^') | {chr(c) for c in range(0x20)} | {"\x7f"}
    return f"{column}=" + "".join(f"%{ord(c):02X}" if c in special else c for c in str(value))


def expected_manifests(path: Path) -> dict[str, list[str]]:
    """Partition directory -> sorted ``file:`` URIs of its live files, from delta-rs."""
    table = deltalake.DeltaTable(str(path))
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    columns = table.metadata().partition_columns
    out: dict[str, list[str]] = {}
    for add, uri in zip(adds, _uris_by_path(table, adds), strict=True):
        key = "/".join(_hive_dir(c, add[f"partition.{c}"]) for c in columns)
        out.setdefault(key, []).append(uri)
    if not columns:
        out.setdefault("", [])
    return {k: sorted(v) for k, v in out.items()}


def _uris_by_path(table: deltalake.DeltaTable, adds: list[dict[str, Any]]) -> list[str]:
    root = Path(table.table_uri.removeprefix("file://")).resolve()
    return ["file:" + str(root / unquote(add["path"])) for add in adds]  # the log path is URI-encoded


def written_manifests(path: Path) -> dict[str, list[str]]:
    """Partition directory -> sorted lines of its manifest; fails on any other file below the manifest root."""
    out = {}
    base = path / MANIFESTS
    for file in base.rglob("*"):
        if file.is_dir():
            continue
        assert file.name == "manifest", f"unexpected file {file} under {MANIFESTS}"
        relative = str(file.parent.relative_to(base))
        lines = file.read_text().splitlines()
        assert len(lines) == len(set(lines)), f"a file is listed twice in {file}"
        out["" if relative == "." else relative] = sorted(lines)
    return out


def assert_manifests_match(path: Path) -> None:
    assert written_manifests(path) == expected_manifests(path)


def _append(table: DeltaTable, ids: list[int], parts: list[str | None]) -> None:
    table.append(pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array(parts, pa.string())}, schema=SCHEMA))


def test_on_demand_every_live_file_is_listed_once_in_its_partitions_manifest(tmp_path: Path) -> None:
    t = DeltaTable.create(str(tmp_path), SCHEMA, partition_by=["p"])
    _append(t, [1, 2, 3, 4], ["a", "b", None, "x y/z%"])
    _append(t, [5, 6], ["a", "b"])
    t.delete("id = 2")  # rewrites b's first file
    assert not (tmp_path / MANIFESTS).exists()  # the property is not set: no manifests after commits

    result = t.generate_symlink_manifest()

    assert result.mode == "full" and result.num_data_files == 5
    assert_manifests_match(tmp_path)
    assert sorted(written_manifests(tmp_path)) == ["p=__HIVE_DEFAULT_PARTITION__", "p=a", "p=b", "p=x y%2Fz%25"]


def test_full_generation_removes_manifests_of_partitions_without_files(tmp_path: Path) -> None:
    t = DeltaTable.create(str(tmp_path), SCHEMA, partition_by=["p"])
    _append(t, [1, 2], ["a", "b"])
    t.generate_symlink_manifest()
    t.delete("p = 'a'")
    stale = tmp_path / MANIFESTS / "p=zz" / "manifest"
    stale.parent.mkdir()
    stale.write_text("file:/nowhere.parquet\n")

    result = t.generate_symlink_manifest()

    assert sorted(result.deleted) == [f"{MANIFESTS}/p=a/manifest", f"{MANIFESTS}/p=zz/manifest"]
    assert_manifests_match(tmp_path)


def test_with_the_property_every_commit_updates_the_manifests_and_emptied_partitions_lose_theirs(tmp_path: Path) -> None:
    t = DeltaTable.create(str(tmp_path), SCHEMA, partition_by=["p"], properties=ENABLED)
    _append(t, [1, 2, 3], ["a", "b", None])
    assert_manifests_match(tmp_path)
    _append(t, [4, 5], ["a", "c"])
    assert_manifests_match(tmp_path)
    t.delete("p = 'b'")
    assert not (tmp_path / MANIFESTS / "p=b" / "manifest").exists()
    assert_manifests_match(tmp_path)
    t.delete("id = 1")  # copy-on-write of a's first file: its manifest loses one file
    assert_manifests_match(tmp_path)
    t.optimize(OptimizeOptions())  # a's two files (one rewritten) become one: dataChange=false commits count too
    assert_manifests_match(tmp_path)
    t.delete()
    assert written_manifests(tmp_path) == {}


def test_an_unpartitioned_table_has_one_manifest_at_the_root_even_when_empty(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64())])
    t = DeltaTable.create(str(tmp_path), schema, properties=ENABLED)
    assert written_manifests(tmp_path) == {"": []}
    t.append(pa.table({"id": [1, 2]}, schema=schema))
    t.append(pa.table({"id": [3]}, schema=schema))
    assert_manifests_match(tmp_path)
    assert len(written_manifests(tmp_path)[""]) == 2


def test_a_converted_table_with_the_property_gets_its_manifests_with_version_0(tmp_path: Path) -> None:
    for part in ("a", "b"):
        (tmp_path / f"p={part}").mkdir()
        pq.write_table(pa.table({"id": [1]}), tmp_path / f"p={part}" / "f.parquet")
    DeltaTable.convert_to_delta(str(tmp_path), "p STRING", properties=ENABLED)
    assert_manifests_match(tmp_path)
    assert sorted(written_manifests(tmp_path)) == ["p=a", "p=b"]


def test_tables_with_deletion_vectors_are_refused_as_delta_refuses_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t = DeltaTable.create(
        str(tmp_path), SCHEMA, partition_by=["p"], properties={**ENABLED, "delta.enableDeletionVectors": "true"}
    )
    _append(t, [1, 2, 3], ["a", "a", "b"])
    before = written_manifests(tmp_path)
    assert before == expected_manifests(tmp_path)  # no DV yet: manifests are fine

    with caplog.at_level(logging.ERROR):
        result = t.delete("id = 1")  # a DV: the commit stands, the manifests are not touched
    assert result.version is not None
    assert "symlink manifests" in caplog.text
    assert written_manifests(tmp_path) == before
    with pytest.raises(ManifestNotSupportedError, match="deletion vectors") as info:
        t.generate_symlink_manifest()
    assert not info.value.retryable


def test_tables_with_column_mapping_are_refused(tmp_path: Path) -> None:
    t = DeltaTable.create(str(tmp_path), SCHEMA, partition_by=["p"], properties={"delta.columnMapping.mode": "name"})
    _append(t, [1], ["a"])
    with pytest.raises(ManifestNotSupportedError, match="column mapping"):
        t.generate_symlink_manifest()
    assert not (tmp_path / MANIFESTS).exists()


PARTS = st.sampled_from(["a", "b", None, "x y/z", "é=1"])
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(PARTS, min_size=1, max_size=4)),
        st.tuples(st.just("delete_partition"), PARTS),
        st.tuples(st.just("delete_rows"), st.integers(0, 30)),
        st.tuples(st.just("optimize"), st.none()),
    ),
    min_size=1,
    max_size=6,
)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=OPERATIONS)
def test_random_partitioned_histories_keep_manifests_exact_after_every_commit(
    operations: list[tuple[str, Any]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory)
        t = DeltaTable.create(directory, SCHEMA, partition_by=["p"], properties=ENABLED)
        next_id = 0
        for kind, argument in operations:
            if kind == "append":
                _append(t, list(range(next_id, next_id + len(argument))), argument)
                next_id += len(argument)
            elif kind == "delete_partition":
                t.delete("p IS NULL" if argument is None else f"p = '{argument}'")
            elif kind == "delete_rows":
                t.delete(f"id < {argument}")
            else:
                t.optimize(OptimizeOptions())
            assert_manifests_match(path)
