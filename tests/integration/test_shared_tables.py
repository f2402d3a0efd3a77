"""Every shared Delta table, read by our engine and cross-checked with delta-rs.

``SPEC`` gives each table under the shared directory (every directory holding a
``_delta_log``, nested ones included) one explicit expected outcome:

* :class:`SameAsDeltaRs`: delta-rs's ``to_pyarrow_table()`` reads it, and our
  ``snapshot().to_arrow()`` must hold exactly the same rows (as a multiset), the same
  column names and equal types (up to :func:`normalise_type`), with the same version
  and the same live files.
* :class:`SameAsExpectedFile`: delta-rs's pyarrow path cannot read it (deletion vectors,
  V2 checkpoints, out-of-range INT96) or misreads it (one column-mapped table); our rows must equal the hand-checked file in
  ``tests/integration/expected/`` (see ``test_expected_rows.py``); version and live files are
  still compared with delta-rs, which can load the log.
* :class:`DataFilesMissing`: the corpus holds only the log (the data files were never
  checked in). Version and live files must equal delta-rs; reading rows must raise
  ``DataFileNotFoundError`` naming a missing file.
* :class:`Raises`: opening a snapshot must raise the given ``DeltaError`` subclass with a
  message naming the reason (a feature we do not implement, a broken protocol).

``test_spec_covers_every_table`` fails when a table is added to or removed from the
corpus without a decision here. Time travel: every reconstructable version of every
multi-version table is compared with ``deltalake.DeltaTable(path, version=v)``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.errors import (
    DataFileNotFoundError,
    DeltaError,
    InvalidLogError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from tests.conftest import shared_tables_dir
from tests.integration.test_expected_rows import canonical_rows, load_expectation

deltalake = pytest.importorskip("deltalake")


# ------------------------------------------------------------------ the spec


@dataclass(frozen=True)
class SameAsDeltaRs:
    note: str = ""


@dataclass(frozen=True)
class SameAsExpectedFile:
    note: str


@dataclass(frozen=True)
class DataFilesMissing:
    note: str


@dataclass(frozen=True)
class Raises:
    error: type[DeltaError]
    match: str
    note: str


Outcome = SameAsDeltaRs | SameAsExpectedFile | DataFilesMissing | Raises

SPEC: dict[str, Outcome] = {
    "COVID-19_NYT": SameAsDeltaRs("1.1M rows in 8 files, one commit"),
    "cdc_ict_table": SameAsDeltaRs("in-commit timestamps + change data feed, partitioned"),
    "cdf-table": SameAsDeltaRs("CDF with cdc files beside adds, date partitions"),
    "cdf-table-non-partitioned": SameAsDeltaRs("CDF, not partitioned"),
    "cdf-table-with-cdc-and-dvs": SameAsExpectedFile("deletion vectors (delta-rs pyarrow path refuses them)"),
    "checkpoint-cdf-table": SameAsDeltaRs("log starts at a classic checkpoint (v3); no commits before it"),
    "checkpoint-v2-table": SameAsExpectedFile("V2 checkpoints with sidecars (delta-rs pyarrow path refuses v2Checkpoint)"),
    "checkpoint_with_partitions": DataFilesMissing("log only; commit 0 is gone, the checkpoint at v2 is the only start"),
    "checkpoints": DataFilesMissing("log only; 13 commits, no checkpoint"),
    "checkpoints_vacuumed": DataFilesMissing("log only; commits 0-4 cleaned up, checkpoints at 5 and 10"),
    "concurrent_workers": SameAsDeltaRs("empty table, protocol 1/1"),
    "delta-0.2.0": SameAsDeltaRs("very old writer, checkpoint at v3"),
    "delta-0.8-empty": SameAsDeltaRs("all rows deleted"),
    "delta-0.8.0": SameAsDeltaRs(),
    "delta-0.8.0-date": SameAsDeltaRs("date column"),
    "delta-0.8.0-null-partition": SameAsDeltaRs("null partition value"),
    "delta-0.8.0-numeric-partition": SameAsDeltaRs("numeric partition columns"),
    "delta-0.8.0-partitioned": SameAsDeltaRs("three partition columns"),
    "delta-0.8.0-special-partition": SameAsDeltaRs("partition values with '/' and ' ' (double-encoded paths)"),
    "delta-1.2.1-only-struct-stats": SameAsDeltaRs("checkpoint with stats_parsed only (writeStatsAsJson=false)"),
    "delta-2.2.0-partitioned-types": SameAsDeltaRs("typed partition columns"),
    "delta-checkpoint-stats-optional": SameAsDeltaRs("checkpoint without JSON stats"),
    "delta-live-table": SameAsDeltaRs("DLT table, reader 2 / writer 5, no files"),
    "delta-stats-optional": SameAsDeltaRs("adds without stats"),
    "golden/data-reader-array-primitives": SameAsDeltaRs("nested table dir; arrays of every primitive"),
    "http_requests": SameAsDeltaRs("timestamps, partitioned by date"),
    "issue-2152": SameAsDeltaRs("empty table, writer 6"),
    "issue_1374": SameAsDeltaRs("checkpoint at v1 beside commits"),
    "latest_not_checkpointed": DataFilesMissing("log only; a commit after the last checkpoint"),
    "partition-type-primitives": SameAsDeltaRs("string partitions of several kinds"),
    "python-0.25.5-checkpoint": SameAsDeltaRs("delta-rs checkpoint at v0"),
    "simple_commit": SameAsDeltaRs("metadata-only table"),
    "simple_table": SameAsDeltaRs("DELETE/UPDATE/MERGE history; a stray .tmp dir in _delta_log"),
    "simple_table_features": Raises(
        UnsupportedFeatureError, "minReaderVersion 5",
        "reader version 5 (unknown) with readerFeatures incl. 'blahabl'; delta-rs calls the protocol invalid",
    ),
    "simple_table_with_cdc": SameAsDeltaRs("CDF enabled, UPDATE"),
    "simple_table_with_checkpoint": SameAsDeltaRs("classic checkpoint at v10"),
    "spark-shredded-variant-preview-delta": Raises(
        UnsupportedFeatureError, "variantShredding-preview", "variant shredding is not implemented (delta-rs refuses too)",
    ),
    "spark-variant-checkpoint": SameAsDeltaRs(
        "variant columns (top level and nested), read unshredded as struct<metadata, value> binaries"
    ),
    "spark-variant-stable-feature-checkpoint": DataFilesMissing("log only; stable variantType feature"),
    "table-with-domain-metadata": DataFilesMissing("log only: a single checkpoint at v108, domain metadata, row tracking"),
    "table-with-dv-small": SameAsExpectedFile("one deletion vector"),
    "table-without-dv-small": SameAsDeltaRs(),
    "table_failed_last_checkpoint_update": SameAsDeltaRs("_last_checkpoint points at v1 but a checkpoint at v3 exists"),
    "table_with_column_mapping": SameAsExpectedFile(
        "column mapping 'name', names with spaces, mapped partition column; delta-rs's pyarrow path returns "
        "nulls for 'Super Name' (its DataFusion path agrees with the expected file)"
    ),
    "table_with_deletion_logs": SameAsExpectedFile("deletion vectors over 21 commits, checkpoints at 10 and 20"),
    "table_with_edge_timestamps": SameAsExpectedFile("INT96 timestamps in 9999 (delta-rs overflows)"),
    "table_with_liquid_clustering": SameAsExpectedFile("deletionVectors reader feature, row tracking, clustering"),
    "table_with_null_stats_in_notnull_struct": SameAsDeltaRs("null stats for a non-null struct"),
    "table_with_partitioning_mapping": SameAsExpectedFile("column mapping enabled later, partition column renamed"),
    "with_checkpoint_no_last_checkpoint": DataFilesMissing("log only; checkpoint at v2 without _last_checkpoint"),
}


# Versions whose outcome differs from the table's latest one.
VERSION_SPEC: dict[tuple[str, int], Outcome] = {
    ("delta-live-table", 0): Raises(
        InvalidLogError, "schemaString",
        "the v0 metaData action has no schemaString (DLT setup); delta-rs cannot load v0 either",
    ),
}


def discover_tables(root: Path) -> list[str]:
    """Every directory below ``root`` that holds a ``_delta_log`` (relative, '/'-separated)."""
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        if "_delta_log" in dirnames:
            found.append(Path(dirpath).relative_to(root).as_posix())
            dirnames.remove("_delta_log")
    return sorted(found)


# ------------------------------------------------------------------ normalisation


def normalise_type(t: pa.DataType) -> pa.DataType:
    """Arrow types that hold the same Delta values map to one type.

    Deliberately narrow: string widths/views, binary widths/views, list layouts and the list
    item field's name, dictionary encoding (delta-rs may dictionary-encode partition
    columns), and field nullability, which Arrow readers set inconsistently.
    """
    if pa.types.is_dictionary(t):
        return normalise_type(t.value_type)
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return pa.list_(pa.field("element", normalise_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, normalise_type(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(normalise_type(t.key_type), normalise_type(t.item_type))
    return t


def normalise_schema(schema: pa.Schema) -> pa.Schema:
    """Names and normalised types only (field metadata such as column mapping keys dropped)."""
    return pa.schema([pa.field(f.name, normalise_type(f.type)) for f in schema])


def normalise(table: pa.Table) -> pa.Table:
    return table.cast(normalise_schema(table.schema))


def _is_flat(schema: pa.Schema) -> bool:
    return not any(pa.types.is_nested(f.type) for f in schema)


def assert_same_rows(ours: pa.Table, theirs: pa.Table) -> None:
    """Same column names (any order), equal normalised types, and equal rows as a multiset."""
    assert sorted(ours.column_names) == sorted(theirs.column_names)
    theirs = theirs.select(ours.column_names)
    ours, theirs = normalise(ours), normalise(theirs)
    assert ours.schema == theirs.schema
    assert ours.num_rows == theirs.num_rows
    if ours.num_columns == 0:
        return
    if _is_flat(ours.schema):
        keys = [(name, "ascending") for name in ours.column_names]
        assert ours.sort_by(keys).equals(theirs.sort_by(keys))
    else:
        # Nested columns cannot be sort keys; compare Python values in a canonical order instead.
        def rows(t: pa.Table) -> list[str]:
            return sorted(repr(r) for r in t.to_pylist())

        assert rows(ours) == rows(theirs)


# ------------------------------------------------------------------ helpers


def ours_file_uris(table_dir: Path, files: pa.Table) -> set[str]:
    return {f"{table_dir}/{p}" for p in files.column("path").to_pylist()}


def _by_path(paths: list[str], values: list[Any]) -> dict[str, Any]:
    return dict(zip(paths, values, strict=True))


def assert_same_files(table_dir: Path, ours_files: pa.Table, theirs: Any, partition_columns: tuple[str, ...]) -> None:
    """Live file set (decoded paths), and per file size and partition values, equal delta-rs's.

    Record counts are compared in ``test_shared_table_num_records`` (delta-rs misses some there).
    """
    assert ours_file_uris(table_dir, ours_files) == set(theirs.file_uris())
    actions = pa.table(theirs.get_add_actions(flatten=True))
    # delta-rs reports the log's (URI-encoded) path here; decode it to key on our decoded paths.
    theirs_paths = [unquote(p) for p in actions.column("path").to_pylist()]
    ours_paths = ours_files.column("path").to_pylist()
    assert _by_path(ours_paths, ours_files.column("size").to_pylist()) == _by_path(
        theirs_paths, actions.column("size_bytes").to_pylist()
    )
    for name in partition_columns:
        ours_values = pc.struct_field(ours_files.column("partition_values"), name).to_pylist()
        theirs_values = actions.column(f"partition.{name}").to_pylist()
        assert _by_path(ours_paths, ours_values) == _by_path(theirs_paths, theirs_values), name


def _missing_data_file(table_dir: Path, files: pa.Table) -> list[str]:
    return [p for p in files.column("path").to_pylist() if not (table_dir / p).exists()]


_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.[^/]*)?\.(parquet|json)$")


def reconstructable_versions(table_dir: Path) -> list[int]:
    """Versions the log can rebuild: from commit 0 (or the oldest checkpoint) to the latest commit."""
    names = os.listdir(table_dir / "_delta_log")
    commits = sorted(int(m.group(1)) for n in names if (m := _COMMIT.match(n)))
    checkpoints = sorted(int(m.group(1)) for n in names if (m := _CHECKPOINT.match(n)))
    latest = max(commits + checkpoints)
    starts = ([0] if 0 in commits else []) + checkpoints
    earliest = min(starts)
    # Every version from the earliest start on needs its commit (or a checkpoint at it).
    return [v for v in range(earliest, latest + 1) if v in commits or v in checkpoints]


def _delta_rs(table_dir: Path, version: int | None = None) -> Any:
    return deltalake.DeltaTable(str(table_dir), version=version) if version is not None else deltalake.DeltaTable(str(table_dir))


# ------------------------------------------------------------------ tests


def test_spec_covers_every_table(shared_tables: Path) -> None:
    assert discover_tables(shared_tables) == sorted(SPEC)


def check_outcome(table_dir: Path, outcome: Outcome, version: int | None = None) -> None:
    table = DeltaTable(str(table_dir))
    if isinstance(outcome, Raises):
        with pytest.raises(outcome.error, match=re.escape(outcome.match)) as info:
            table.snapshot(version=version)
        assert type(info.value) is outcome.error
        return

    theirs = _delta_rs(table_dir, version)
    snapshot = table.snapshot(version=version)
    assert snapshot.version == theirs.version()
    assert normalise_schema(snapshot.schema) == normalise_schema(pa.schema(theirs.schema().to_arrow()))
    assert snapshot.partition_columns == tuple(theirs.metadata().partition_columns)
    files = snapshot.files()
    assert_same_files(table_dir, files, theirs, snapshot.partition_columns)

    if isinstance(outcome, SameAsDeltaRs):
        assert_same_rows(snapshot.to_arrow(), pa.table(theirs.to_pyarrow_table()))
    elif isinstance(outcome, SameAsExpectedFile):
        if version is None or version == load_expectation(table_dir.name)["version"]:
            expected = load_expectation(table_dir.name)
            data = snapshot.to_arrow()
            assert data.column_names == [f["name"] for f in expected["schema"]]
            assert canonical_rows(data, expected["schema"]) == expected["rows"]
        # Older versions' rows are checked by digest in test_expected_rows.py.
    elif isinstance(outcome, DataFilesMissing):
        missing = _missing_data_file(table_dir, files)
        if not missing:  # e.g. a version before any data was written
            counts = files.column("num_records")
            data = snapshot.to_arrow()
            if counts.null_count == 0:
                assert data.num_rows == (pc.sum(counts).as_py() or 0)
            return
        with pytest.raises(DataFileNotFoundError) as info:
            snapshot.to_arrow()
        assert type(info.value) is DataFileNotFoundError
        assert any(os.path.basename(m) in str(info.value) for m in missing), str(info.value)


@pytest.mark.parametrize("name", sorted(SPEC))
def test_shared_table_latest(shared_tables: Path, name: str) -> None:
    check_outcome(shared_tables / name, SPEC[name])


def _time_travel_cases() -> list[Any]:
    root = shared_tables_dir()
    if not root.is_dir():
        return []
    cases = []
    for name in sorted(SPEC):
        versions = reconstructable_versions(root / name)
        if len(versions) > 1:
            cases.extend(pytest.param(name, v, id=f"{name}@v{v}") for v in versions)
    return cases


@pytest.mark.parametrize(("name", "version"), _time_travel_cases())
def test_shared_table_time_travel(shared_tables: Path, name: str, version: int) -> None:
    check_outcome(shared_tables / name, VERSION_SPEC.get((name, version), SPEC[name]), version=version)


# Checkpoints written with delta.checkpoint.writeStatsAsJson=false carry stats only as the
# typed ``add.stats_parsed`` column, which the protocol lets readers use. delta-rs 1.6.6 reads
# it in delta-checkpoint-stats-optional but not in delta-1.2.1-only-struct-stats (nulls), so
# there the counts are checked against the checkpoint by hand instead.
_DELTA_RS_MISSES_STRUCT_STATS = {"delta-1.2.1-only-struct-stats"}


@pytest.mark.parametrize("name", sorted(n for n, o in SPEC.items() if not isinstance(o, Raises)))
def test_shared_table_num_records(shared_tables: Path, name: str) -> None:
    """numRecords per live file equals delta-rs's."""
    table_dir = shared_tables / name
    files = DeltaTable(str(table_dir)).snapshot().files()
    ours = _by_path(files.column("path").to_pylist(), files.column("num_records").to_pylist())
    actions = pa.table(_delta_rs(table_dir).get_add_actions(flatten=True))
    if "num_records" not in actions.column_names:
        assert all(v is None for v in ours.values())
        return
    theirs = _by_path([unquote(p) for p in actions.column("path").to_pylist()], actions.column("num_records").to_pylist())
    assert ours.keys() == theirs.keys()
    if name in _DELTA_RS_MISSES_STRUCT_STATS:
        theirs = {p: v for p, v in theirs.items() if v is not None}
        ours = {p: ours[p] for p in theirs}
    assert ours == theirs


@pytest.mark.parametrize(
    "name",
    [
        # delta-rs drops these stats too, so the expectation is read from the checkpoint by hand.
        "delta-1.2.1-only-struct-stats",
        "delta-checkpoint-stats-optional",
    ],
)
def test_struct_only_checkpoint_stats_give_num_records(shared_tables: Path, name: str) -> None:
    import pyarrow.parquet as pq

    table_dir = shared_tables / name
    snapshot = DeltaTable(str(table_dir)).snapshot()
    (checkpoint,) = snapshot.log_segment.checkpoint_files
    adds = pq.read_table(checkpoint.path, columns=["add"]).column("add").combine_chunks()
    adds = adds.filter(pc.is_valid(adds))
    from_checkpoint = _by_path(
        [unquote(p) for p in pc.struct_field(adds, "path").to_pylist()],
        pc.struct_field(pc.struct_field(adds, "stats_parsed"), "numRecords").to_pylist(),
    )
    assert any(v is not None for v in from_checkpoint.values())
    ours = _by_path(snapshot.files().column("path").to_pylist(), snapshot.files().column("num_records").to_pylist())
    live_from_checkpoint = {p: v for p, v in from_checkpoint.items() if p in ours}
    assert live_from_checkpoint
    assert {p: ours[p] for p in live_from_checkpoint} == live_from_checkpoint


def test_invalid_metadata_error_names_the_commit_file(shared_tables: Path) -> None:
    with pytest.raises(InvalidLogError) as info:
        DeltaTable(str(shared_tables / "delta-live-table")).snapshot(version=0)
    assert "00000000000000000000.json" in str(info.value)


def _in_commit_timestamps(table_dir: Path) -> dict[int, int]:
    """commitInfo.inCommitTimestamp of every commit, read off the JSON by hand."""
    import json

    out = {}
    for name in os.listdir(table_dir / "_delta_log"):
        if m := _COMMIT.match(name):
            for line in (table_dir / "_delta_log" / name).read_text().splitlines():
                if line.startswith('{"commitInfo"'):
                    out[int(m.group(1))] = json.loads(line)["commitInfo"]["inCommitTimestamp"]
    return out


def test_in_commit_timestamps_are_the_commit_timestamps(shared_tables: Path) -> None:
    """cdc_ict_table enables in-commit timestamps from v0: each version's timestamp is its ICT.

    (Its v1 ICT is deliberately a year before v0's, breaking monotonicity; time travel by a
    timestamp is only checked where the ICTs do increase.)
    """
    table_dir = shared_tables / "cdc_ict_table"
    icts = _in_commit_timestamps(table_dir)
    table = DeltaTable(str(table_dir))
    assert {v: table.snapshot(version=v).timestamp for v in icts} == icts
    for version in (2, 3):
        assert table.snapshot(timestamp=icts[version]).version == version
    assert table.snapshot(timestamp=icts[3] - 1).version == 2
    # After the latest commit is refused (a later commit could still land before that instant).
    with pytest.raises(VersionNotFoundError):
        table.snapshot(timestamp=icts[3] + 1)
    assert [e["timestamp"] for e in table.history()] == [icts[v] for v in sorted(icts, reverse=True)]


# Filters: our SQL (Spark dialect) against delta-rs's DataFusion SQL over the same table.
# DataFusion folds unquoted identifiers to lower case, hence its own spelling per case.
FILTER_CASES: list[tuple[str, str, str]] = [
    ("http_requests", "date = '2023-04-14'", "date = '2023-04-14'"),
    (
        "http_requests",
        "EdgeStartTimestamp >= TIMESTAMP '2023-04-14 00:00:00' AND EdgeResponseBytes > 1000",
        "\"EdgeStartTimestamp\" >= TIMESTAMP '2023-04-14T00:00:00Z' AND \"EdgeResponseBytes\" > 1000",
    ),
    ("delta-2.2.0-partitioned-types", "c1 > 4 OR c2 IS NULL", "c1 > 4 OR c2 IS NULL"),
    (
        "partition-type-primitives",
        "year = '2020' AND is_active = 'true' AND category <> 'B'",
        "year = '2020' AND is_active = 'true' AND category <> 'B'",
    ),
    ("partition-type-primitives", "id BETWEEN 3 AND 12 AND NOT (event_date = '2023-01-01')", "id BETWEEN 3 AND 12 AND NOT (event_date = '2023-01-01')"),
    ("table-with-dv-small", "value BETWEEN 0 AND 4", "value BETWEEN 0 AND 4"),
    ("table_with_deletion_logs", "age > 30 AND company LIKE 'A%'", "age > 30 AND company LIKE 'A%'"),
    ("checkpoint-v2-table", "id IN (1, 5, 44) OR name = 'x'", "id IN (1, 5, 44) OR name = 'x'"),
    ("delta-0.8.0-null-partition", "k IS NULL", "k IS NULL"),
    ("cdf-table-with-cdc-and-dvs", "id < 12 AND comment <> ''", "id < 12 AND comment <> ''"),
    # A leading column named like a SQL command keyword (COMMENT) must still parse as a predicate.
    ("cdf-table-with-cdc-and-dvs", "comment <> '' AND id < 12", "comment <> '' AND id < 12"),
]


@pytest.mark.parametrize(("name", "ours_sql", "datafusion_sql"), FILTER_CASES, ids=[f"{c[0]}:{c[1]}" for c in FILTER_CASES])
def test_filtered_read_matches_delta_rs_sql(shared_tables: Path, name: str, ours_sql: str, datafusion_sql: str) -> None:
    table_dir = shared_tables / name
    snapshot = DeltaTable(str(table_dir)).snapshot()
    ours = snapshot.to_arrow(filter=ours_sql)
    reader = deltalake.QueryBuilder().register("t", _delta_rs(table_dir)).execute(f"SELECT * FROM t WHERE {datafusion_sql}")
    assert_same_rows(ours, pa.table(reader.read_all()))


PROJECTION_CASES: list[tuple[str, list[str]]] = [
    ("delta-0.8.0-partitioned", ["day", "value"]),  # a partition column first, out of table order
    ("http_requests", ["EdgeResponseBytes", "date"]),
    ("golden/data-reader-array-primitives", ["as_array_string", "as_array_big_decimal"]),
    ("delta-2.2.0-partitioned-types", ["c2"]),  # only a partition column
    ("spark-variant-checkpoint", ["map_of_variants", "id"]),
]


@pytest.mark.parametrize(("name", "columns"), PROJECTION_CASES, ids=[c[0] for c in PROJECTION_CASES])
def test_projection_matches_delta_rs(shared_tables: Path, name: str, columns: list[str]) -> None:
    table_dir = shared_tables / name
    ours = DeltaTable(str(table_dir)).snapshot().to_arrow(columns=columns)
    # Output keeps the table's column order, whatever order the caller asked in.
    schema_order = [n for n in DeltaTable(str(table_dir)).snapshot().schema.names if n in columns]
    assert ours.column_names == schema_order
    assert_same_rows(ours, pa.table(_delta_rs(table_dir).to_pyarrow_table(columns=columns)))
