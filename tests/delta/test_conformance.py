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

import re
from pathlib import Path
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


def _assert_every_version_reads_alike(delta_lake: DeltaLakeSession, path: str, table: DeltaTable) -> None:
    """Delta reads every version as our engine does; the latest also as delta-rs and kernel."""
    latest = table.version()
    theirs = delta_lake.read_versions(path, range(latest + 1))  # one request, one Spark job
    for version in range(latest + 1):
        ours = sorted_rows(table.snapshot(version).to_arrow())
        assert sorted_rows(theirs[version]) == ours, f"version {version}"
    ours = sorted_rows(table.snapshot().to_arrow())
    assert read_with_deltars(path) == ours, "delta-rs"
    assert read_with_kernel(path) == ours, "delta-kernel-rs"


def _our_operations(path: str, properties: dict[str, str]) -> DeltaTable:
    """Our engine's verbs one after the other: versions 0..8."""
    table = DeltaTable.create(path, SCHEMA, partition_by=["part"], properties=properties)
    for start in (0, 30, 60):
        table.append(_rows(start, 30))  # small files for OPTIMIZE
    table.delete("id % 10 = 1")
    table.delete("part = 'b' AND id > 80")
    table.optimize(OptimizeOptions())
    table.optimize(OptimizeOptions(zorder_by=("id", "name")))
    table.restore(version=4)
    checkpoint = table.checkpoint()
    assert checkpoint.kind == ("v2" if properties.get("delta.checkpointPolicy") == "v2" else "classic")
    return table


@pytest.mark.parametrize(
    "properties",
    [
        pytest.param({"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}, id="dv-cdf"),
        # Without DVs our DELETEs rewrite files; CDF so table_changes is checked here too.
        pytest.param(
            {"delta.enableDeletionVectors": "false", "delta.enableChangeDataFeed": "true"}, id="copy-on-write"
        ),
        pytest.param(
            {"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name"}, id="column-mapping-name"
        ),
        # One table for two variants (CI time): column mapping by field id, and V2 checkpoints
        # (ours in _our_operations and after Delta, Delta's with its checkpoint interval 2).
        pytest.param(
            {"delta.columnMapping.mode": "id", "delta.checkpointPolicy": "v2"}, id="column-mapping-id-v2-checkpoint"
        ),
    ],
)
def test_delta_reads_our_operations_and_carries_on(
    delta_lake: DeltaLakeSession, tmp_path: Path, properties: dict[str, str]
) -> None:
    path = str(tmp_path / "t")
    table = _our_operations(path, properties)
    _assert_every_version_reads_alike(delta_lake, path, table)

    history = delta_lake.history(path)
    assert [h["version"] for h in history] == list(range(table.version(), -1, -1))
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
    detail = delta_lake.detail(path)
    assert detail["partitionColumns"] == ["part"]
    assert detail["numFiles"] == table.snapshot().files().num_rows

    # Delta's VACUUM (no retention check, so every tombstone is a candidate) must not list a
    # file the latest version needs; with the default retention it lists nothing we wrote recently.
    live = {_local(Path(path, p)) for p in table.snapshot().files().column("path").to_pylist()}
    delta_lake.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    try:
        dry = delta_lake.sql(f"VACUUM {table_ref(path)} RETAIN 0 HOURS DRY RUN")
    finally:  # the session is shared: leave Delta's safety check on for the next test
        delta_lake.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = true")
    listed = {_local(row["path"]) for row in dry}
    assert listed, "our RESTORE and OPTIMIZE left tombstones for Delta to vacuum"
    assert not listed & live
    # With the default retention Delta lists no file. It does list the `_change_data`
    # directories: CDC files belong to no snapshot, so Delta counts their directories as
    # empty (its real VACUUM then fails to delete them quietly; the files are too young).
    default_dry = [_local(row["path"]) for row in delta_lake.sql(f"VACUUM {table_ref(path)} DRY RUN")]
    assert [p for p in default_dry if not p.is_dir()] == []
    assert all(p.is_relative_to(Path(path).resolve() / "_change_data") for p in default_dry)

    if properties.get("delta.enableChangeDataFeed") == "true":
        changes = delta_lake.sql(f"SELECT id, name, part, _change_type FROM table_changes_by_path('{path}', 4, 4)")
        deleted = sorted(r["id"] for r in changes if r["_change_type"] == "delete")
        assert deleted == [i for i in range(90) if i % 10 == 1]

    # 2. Delta carries on after us.
    ours_last = table.version()
    ref = table_ref(path)
    delta_lake.sql(f"ALTER TABLE {ref} SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    delta_lake.sql(f"INSERT INTO {ref} VALUES (1000, 'd', 'a'), (1001, 'd', 'b')")
    delta_lake.sql(f"DELETE FROM {ref} WHERE id < 5")
    delta_lake.sql(
        f"MERGE INTO {ref} t USING (SELECT 1000L AS id, 'merged' AS name, 'a' AS part UNION ALL "
        "SELECT 2000L, 'new', 'b') s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET name = s.name WHEN NOT MATCHED THEN INSERT *"
    )
    delta_lake.sql(f"OPTIMIZE {ref}")
    # Delta checkpointed (interval 2) in the table's kind: V2 (a UUID-named top-level file) or classic.
    theirs = [p.name for p in Path(path, "_delta_log").glob("[0-9]*.checkpoint*") if int(p.name[:20]) > ours_last]
    v2_named = [name for name in theirs if re.fullmatch(r"\d{20}\.checkpoint\.[0-9a-f-]{36}\.(json|parquet)", name)]
    assert theirs and len(v2_named) == (len(theirs) if properties.get("delta.checkpointPolicy") == "v2" else 0), theirs
    expected = sorted_rows(delta_lake.read(path))
    after = DeltaTable(path)
    assert sorted_rows(after.snapshot().to_arrow()) == expected
    ids = {row["id"] for row in expected}
    assert {1000, 1001, 2000} <= ids and not ids & set(range(5))
    assert {r["name"] for r in expected if r["id"] == 1000} == {"merged"}
    # And we carry on after Delta: a DELETE and a checkpoint of ours, Delta reads them.
    after.delete("id = 2000")
    checkpoint = after.checkpoint(options=CheckpointOptions())
    assert checkpoint.kind == ("v2" if properties.get("delta.checkpointPolicy") == "v2" else "classic")
    assert sorted_rows(delta_lake.read(path)) == sorted_rows(after.snapshot().to_arrow())


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
    # One request; Delta's versions of each schema (the rename and the widening start new ones) one job.
    theirs_by_version = delta_lake.read_versions(path, range(latest + 1))
    for version in range(latest + 1):
        theirs = sorted_rows(theirs_by_version[version])
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
