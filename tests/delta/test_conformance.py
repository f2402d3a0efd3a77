"""Conformance with Delta Lake on Spark (issue 17, items 1-3).

1. Delta reads every version of what our engine's operations write, with the rows our
   engine, delta-rs and delta-kernel-rs read; DESCRIBE HISTORY/DETAIL parse; Delta's
   VACUUM DRY RUN after our operations lists no file a retained version needs;
   table_changes returns the change rows our DELETE wrote.
2. Delta carries on after us (append, DELETE, MERGE, OPTIMIZE, checkpoints) and we read
   the result.
3. We read every version of a table Delta writes with its table features.

The tables are small and the tests share one Delta session per worker (the fixture), so
their cost is a few Spark statements each. Item 1/2 runs on one table per variant:
deletion vectors + CDF with classic checkpoints, copy-on-write + CDF, column mapping
``name`` with DVs, and column mapping ``id`` with V2 checkpoints (docs/compatibility.md,
"Checked against Delta Lake 4.4").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest

from airflow_delta.engine import CheckpointOptions, DeltaTable, OptimizeOptions
from tests.delta_lake import DeltaLakeSession, sorted_rows, table_ref
from tests.oracles import read_with_deltars, read_with_kernel

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("part", pa.string()),
    ]
)


def _rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {"id": ids, "name": [f"n{i}" for i in ids], "part": ["a" if i % 3 else "b" for i in ids]}, schema=SCHEMA
    )


def _our_operations(path: str, properties: dict[str, str]) -> tuple[DeltaTable, str]:
    """Our engine's verbs one after the other: versions 0..8; the checkpoint's kind."""
    table = DeltaTable.create(path, SCHEMA, partition_by=["part"], properties=properties)
    for start in (0, 30, 60):
        table.append(_rows(start, 30))  # small files for OPTIMIZE
    table.delete("id % 10 = 1")
    table.delete("part = 'b' AND id > 80")
    table.optimize(OptimizeOptions())
    table.optimize(OptimizeOptions(zorder_by=("id", "name")))
    table.restore(version=4)
    return table, table.checkpoint().kind


VARIANTS = {
    "dv-cdf": {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
    # Without DVs our DELETEs rewrite files; CDF so table_changes is checked here too.
    "copy-on-write": {"delta.enableDeletionVectors": "false", "delta.enableChangeDataFeed": "true"},
    "column-mapping-name": {"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name"},
    # One table for two variants (CI time): column mapping by field id, and V2 checkpoints
    # (ours in _our_operations and after Delta, Delta's with its checkpoint interval 4).
    "column-mapping-id-v2-checkpoint": {"delta.columnMapping.mode": "id", "delta.checkpointPolicy": "v2"},
}


@dataclass
class Observed:
    """What Delta, delta-rs, kernel and our engine saw of one variant's table (the fixture's record)."""

    properties: dict[str, str]
    path: str
    our_checkpoint_kind: str = ""
    ours_last: int = -1
    ours_by_version: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    theirs_by_version: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    deltars: list[dict[str, Any]] = field(default_factory=list)
    kernel: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    live: set[Path] = field(default_factory=set)
    num_live_files: int = -1
    vacuum_listed: set[Path] = field(default_factory=set)
    default_dry: list[Path] = field(default_factory=list)
    cdf_deleted: list[int] | None = None
    delta_checkpoints: list[str] = field(default_factory=list)
    theirs_after_delta: list[dict[str, Any]] = field(default_factory=list)
    ours_after_delta: list[dict[str, Any]] = field(default_factory=list)
    our_checkpoint_kind_after_delta: str = ""
    theirs_final: list[dict[str, Any]] = field(default_factory=list)
    ours_final: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture(scope="module")
def observed(delta_lake: DeltaLakeSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Observed]:
    """The four variants' tables through items 1 and 2 in one pass: each step runs for all four
    before the next, so the reads of all tables are one request each (CI time); the test of
    each variant then asserts on its record."""
    root = tmp_path_factory.mktemp("conformance")
    variants = {name: Observed(dict(props), str(root / name)) for name, props in VARIANTS.items()}
    tables = {}
    for name, seen in variants.items():
        table, seen.our_checkpoint_kind = _our_operations(seen.path, seen.properties)
        tables[name] = table
        seen.ours_last = table.version()
        seen.ours_by_version = {v: sorted_rows(table.snapshot(v).to_arrow()) for v in range(seen.ours_last + 1)}
        seen.deltars, seen.kernel = read_with_deltars(seen.path), read_with_kernel(seen.path)
        seen.num_live_files = table.snapshot().files().num_rows
        seen.live = {_local(Path(seen.path, p)) for p in table.snapshot().files().column("path").to_pylist()}

    # 1. Every version of every table in one request (one Spark job per schema).
    reads = [(seen.path, v) for seen in variants.values() for v in range(seen.ours_last + 1)]
    for (path, version), rows in zip(reads, delta_lake.read_many(reads), strict=True):
        next(s for s in variants.values() if s.path == path).theirs_by_version[version] = sorted_rows(rows)
    for seen in variants.values():
        seen.history = delta_lake.history(seen.path)
        seen.detail = delta_lake.detail(seen.path)

    # Delta's VACUUM (no retention check, so every tombstone is a candidate); then with the default retention.
    delta_lake.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    try:
        for seen in variants.values():
            dry = delta_lake.sql(f"VACUUM {table_ref(seen.path)} RETAIN 0 HOURS DRY RUN")
            seen.vacuum_listed = {_local(row["path"]) for row in dry}
    finally:  # the session is shared: leave Delta's safety check on for the next test
        delta_lake.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = true")
    for seen in variants.values():
        seen.default_dry = [_local(row["path"]) for row in delta_lake.sql(f"VACUUM {table_ref(seen.path)} DRY RUN")]

    # table_changes of our first DELETE (version 4) of every CDF table, in one statement.
    cdf = [seen for seen in variants.values() if seen.properties.get("delta.enableChangeDataFeed") == "true"]
    changes = delta_lake.sql(
        " UNION ALL ".join(
            f"SELECT {index} AS side, id, _change_type FROM table_changes_by_path('{seen.path}', 4, 4)"
            for index, seen in enumerate(cdf)
        )
    )
    for index, seen in enumerate(cdf):
        seen.cdf_deleted = sorted(r["id"] for r in changes if r["side"] == index and r["_change_type"] == "delete")

    # 2. Delta carries on after us.
    for seen in variants.values():
        ref = table_ref(seen.path)
        # Interval 4: of Delta's five commits (versions 9-13) only 12 is a multiple of 4,
        # so Delta writes exactly one checkpoint (each costs a job and a state rebuild).
        delta_lake.sql(f"ALTER TABLE {ref} SET TBLPROPERTIES ('delta.checkpointInterval' = '4')")
        delta_lake.sql(f"INSERT INTO {ref} VALUES (1000, 'd', 'a'), (1001, 'd', 'b')")
        delta_lake.sql(f"DELETE FROM {ref} WHERE id < 5")
        delta_lake.sql(
            f"MERGE INTO {ref} t USING (SELECT 1000L AS id, 'merged' AS name, 'a' AS part UNION ALL "
            "SELECT 2000L, 'new', 'b') s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET name = s.name WHEN NOT MATCHED THEN INSERT *"
        )
        delta_lake.sql(f"OPTIMIZE {ref}")
        seen.delta_checkpoints = [
            p.name
            for p in Path(seen.path, "_delta_log").glob("[0-9]*.checkpoint*")
            if int(p.name[:20]) > seen.ours_last
        ]
    paths = [seen.path for seen in variants.values()]
    for seen, rows in zip(variants.values(), delta_lake.read_many(paths), strict=True):
        seen.theirs_after_delta = sorted_rows(rows)
        after = DeltaTable(seen.path)
        seen.ours_after_delta = sorted_rows(after.snapshot().to_arrow())
        # And we carry on after Delta: a DELETE and a checkpoint of ours, Delta reads them.
        after.delete("id = 2000")
        seen.our_checkpoint_kind_after_delta = after.checkpoint(options=CheckpointOptions()).kind
        seen.ours_final = sorted_rows(after.snapshot().to_arrow())
    for seen, rows in zip(variants.values(), delta_lake.read_many(paths), strict=True):
        seen.theirs_final = sorted_rows(rows)
    return variants


@pytest.mark.slow  # the module's fixture runs about 60 Delta requests
# The first variant's test sets up all four (about four tests' time, within the timeout of one).
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_delta_reads_our_operations_and_carries_on(observed: dict[str, Observed], variant: str) -> None:
    seen = observed[variant]
    properties = seen.properties
    checkpoint_kind = "v2" if properties.get("delta.checkpointPolicy") == "v2" else "classic"
    assert seen.our_checkpoint_kind == checkpoint_kind
    # Delta reads every version as our engine does; the latest also delta-rs and kernel.
    assert sorted(seen.theirs_by_version) == list(range(seen.ours_last + 1))
    for version in range(seen.ours_last + 1):
        assert seen.theirs_by_version[version] == seen.ours_by_version[version], f"version {version}"
    assert seen.deltars == seen.ours_by_version[seen.ours_last], "delta-rs"
    assert seen.kernel == seen.ours_by_version[seen.ours_last], "delta-kernel-rs"

    history = seen.history
    assert [h["version"] for h in history] == list(range(seen.ours_last, -1, -1))
    assert [h["operation"] for h in reversed(history)][:7] == [
        "CREATE TABLE",
        "WRITE",
        "WRITE",
        "WRITE",
        "DELETE",
        "DELETE",
        "OPTIMIZE",
    ]
    assert history[0]["operation"] == "RESTORE"
    assert seen.detail["partitionColumns"] == ["part"]
    assert seen.detail["numFiles"] == seen.num_live_files

    # Delta's VACUUM must not list a file the latest version needs.
    assert seen.vacuum_listed, "our RESTORE and OPTIMIZE left tombstones for Delta to vacuum"
    assert not seen.vacuum_listed & seen.live
    # With the default retention Delta lists no file. It does list the `_change_data`
    # directories: CDC files belong to no snapshot, so Delta counts their directories as
    # empty (its real VACUUM then fails to delete them quietly; the files are too young).
    assert [p for p in seen.default_dry if not p.is_dir()] == []
    assert all(p.is_relative_to(Path(seen.path).resolve() / "_change_data") for p in seen.default_dry)

    if properties.get("delta.enableChangeDataFeed") == "true":
        assert seen.cdf_deleted == [i for i in range(90) if i % 10 == 1]
    else:
        assert seen.cdf_deleted is None

    # 2. Delta checkpointed (interval 4) in the table's kind: V2 (a UUID-named top-level file) or classic.
    theirs = seen.delta_checkpoints
    v2_named = [name for name in theirs if re.fullmatch(r"\d{20}\.checkpoint\.[0-9a-f-]{36}\.(json|parquet)", name)]
    assert theirs and len(v2_named) == (len(theirs) if checkpoint_kind == "v2" else 0), theirs
    expected = seen.theirs_after_delta
    assert seen.ours_after_delta == expected
    ids = {row["id"] for row in expected}
    assert {1000, 1001, 2000} <= ids and not ids & set(range(5))
    assert {r["name"] for r in expected if r["id"] == 1000} == {"merged"}
    # We carried on after Delta (DELETE, checkpoint); Delta reads it.
    assert seen.our_checkpoint_kind_after_delta == checkpoint_kind
    assert seen.theirs_final == seen.ours_final
    assert 2000 not in {row["id"] for row in seen.ours_final}


def _local(path: str | Path) -> Path:
    """A path or ``file:`` URI as a resolved local path (Delta's VACUUM lists URIs)."""
    text = str(path)
    text = text.removeprefix("file://").removeprefix("file:")
    return Path(unquote(text)).resolve()


DELTA_FEATURES = {
    "delta.enableDeletionVectors": "true",
    "delta.enableChangeDataFeed": "true",
    "delta.columnMapping.mode": "name",
    "delta.enableRowTracking": "true",
    "delta.enableInCommitTimestamps": "true",
    "delta.checkpointPolicy": "v2",
    "delta.enableTypeWidening": "true",
    "delta.checkpointInterval": "3",
    "delta.feature.allowColumnDefaults": "supported",
}


def test_we_read_every_version_of_a_table_delta_writes_with_its_features(
    delta_lake: DeltaLakeSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "theirs")
    ref = table_ref(path)
    properties = ", ".join(f"'{k}' = '{v}'" for k, v in DELTA_FEATURES.items())
    delta_lake.sql(
        f"CREATE TABLE {ref} ("
        " uid BIGINT GENERATED ALWAYS AS IDENTITY,"
        " id INT NOT NULL,"
        " name STRING DEFAULT 'none',"
        " ts TIMESTAMP_NTZ,"
        " day DATE GENERATED ALWAYS AS (CAST(ts AS DATE)),"
        " amount SMALLINT"
        f") USING delta CLUSTER BY (id) TBLPROPERTIES ({properties})"
    )
    delta_lake.sql(f"ALTER TABLE {ref} ADD CONSTRAINT positive CHECK (id > 0)")
    for batch in range(3):
        values = ", ".join(
            f"({batch * 10 + i}, 'n{i}', TIMESTAMP_NTZ'2024-01-0{1 + i % 3} 10:00:00', {i})" for i in range(1, 10)
        )
        delta_lake.sql(f"INSERT INTO {ref} (id, name, ts, amount) VALUES {values}")
    delta_lake.sql(f"INSERT INTO {ref} (id, ts) VALUES (100, TIMESTAMP_NTZ'2024-02-01 00:00:00')")
    delta_lake.sql(f"DELETE FROM {ref} WHERE id % 4 = 0")
    delta_lake.sql(f"UPDATE {ref} SET name = 'upd' WHERE id % 5 = 0")
    delta_lake.sql(f"ALTER TABLE {ref} ALTER COLUMN amount TYPE INT")
    delta_lake.sql(
        f"MERGE INTO {ref} t USING (SELECT 3 AS id, 'm' AS name UNION ALL SELECT 200, 'new') s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET name = s.name WHEN NOT MATCHED THEN INSERT (id, name) VALUES (s.id, s.name)"
    )
    delta_lake.sql(f"ALTER TABLE {ref} RENAME COLUMN name TO label")
    delta_lake.sql(f"OPTIMIZE {ref}")

    table = DeltaTable(path)
    latest = table.version()
    assert latest >= 10
    # A version whose commit changes no row (no file action with dataChange, the schema as
    # before: ADD CONSTRAINT, OPTIMIZE) has the rows of the version before it: Delta's read of
    # that one is its expected rows, so Delta reads only the versions its operations changed.
    same_rows = [v for v in range(1, latest + 1) if _changes_no_row(Path(path), v)]
    assert len(same_rows) == 2, same_rows  # the constraint and OPTIMIZE
    # One request; Delta's versions of each schema (the rename and the widening start new ones) one job.
    theirs_by_version = delta_lake.read_versions(path, [v for v in range(latest + 1) if v not in same_rows])
    for version in range(latest + 1):
        theirs = sorted_rows(theirs_by_version[max(v for v in theirs_by_version if v <= version)])
        assert sorted_rows(table.snapshot(version).to_arrow()) == theirs, f"version {version}"
    protocol = table.snapshot().protocol
    for feature in (
        "deletionVectors",
        "columnMapping",
        "rowTracking",
        "domainMetadata",
        "clustering",
        "identityColumns",
        "generatedColumns",
        "checkConstraints",
        "typeWidening",
        "timestampNtz",
        "v2Checkpoint",
        "inCommitTimestamp",
        "changeDataFeed",
        "allowColumnDefaults",
    ):
        assert feature in (protocol.writer_features or ()), feature


def _changes_no_row(path: Path, version: int) -> bool:
    """Whether Delta's commit ``version`` leaves the rows as they were, read from the log
    itself: no file action with ``dataChange`` and the schema of the version before
    (Delta's own OPTIMIZE and ALTER TABLE ... ADD CONSTRAINT)."""
    log = path / "_delta_log"

    def actions(v: int) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (log / f"{v:020d}.json").read_text().splitlines() if line.strip()]

    def schema(action: dict[str, Any]) -> Any:
        return json.loads(action["metaData"]["schemaString"])

    for action in actions(version):
        if any(kind in action and action[kind].get("dataChange", True) for kind in ("add", "remove", "cdc")):
            return False
        if "metaData" in action:
            previous = next(schema(a) for v in range(version - 1, -1, -1) for a in actions(v) if "metaData" in a)
            if schema(action) != previous:
                return False
    return True
