"""The engine's append on tables whose column values the writer supplies (identity, generated, defaults)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import (
    DeltaTable,
    IdentityColumnWriteError,
    SchemaMismatchError,
    identity_columns,
    writer_features,
)
from tests.oracles import read_with_deltars


def _last_commit(path: Path) -> list[dict]:
    latest = sorted((path / "_delta_log").glob("*.json"))[-1]
    return [json.loads(line) for line in latest.read_text().splitlines() if line]


def _identity_table(path: Path, start: int, step: int, *, always: bool = True) -> DeltaTable:
    meta = {
        "delta.identity.start": str(start),
        "delta.identity.step": str(step),
        "delta.identity.allowExplicitInsert": "false" if always else "true",
    }
    return DeltaTable.create(str(path), pa.schema([pa.field("id", pa.int64(), metadata=meta), pa.field("x", pa.string())]))


def test_append_generates_identity_values_from_the_shared_table(shared_tables: Path, tmp_path: Path) -> None:
    path = tmp_path / "t"
    shutil.copytree(shared_tables / "checkpoint-v2-table", path)
    table = DeltaTable(str(path))
    before = table.snapshot()
    mark = identity_columns(before.metadata.schema_string)[0].high_water_mark
    rows = pa.table({"name": ["a", "b", "c"], "created_at": pa.array([None] * 3, pa.timestamp("us", tz="UTC"))})
    table.append(rows)
    after = table.snapshot()
    assert identity_columns(after.metadata.schema_string)[0].high_water_mark == mark + 3
    commit = _last_commit(path)
    info = next(a["commitInfo"] for a in commit if "commitInfo" in a)
    assert info["tags"]["delta.identity.schemaUpdate"] == "true"
    assert info["isBlindAppend"] is True
    # delta-rs reads the new rows with the generated values, and every id is unique
    ids = [row["id"] for row in read_with_deltars(path)]
    assert sorted(i for i in ids if i > mark) == [mark + 1, mark + 2, mark + 3]
    assert len(ids) == len(set(ids))


def test_append_refuses_values_for_generated_always(shared_tables: Path, tmp_path: Path) -> None:
    path = tmp_path / "t"
    shutil.copytree(shared_tables / "checkpoint-v2-table", path)
    table = DeltaTable(str(path))
    rows = table.snapshot().to_arrow().slice(0, 1)
    files = sorted(p.name for p in path.iterdir())
    with pytest.raises(IdentityColumnWriteError, match="GENERATED ALWAYS AS IDENTITY column 'id'"):
        table.append(rows)
    assert sorted(p.name for p in path.iterdir()) == files
    assert table.snapshot().version == 9


def test_negative_step_and_by_default(tmp_path: Path) -> None:
    table = _identity_table(tmp_path / "neg", 0, -3)
    table.append(pa.table({"x": ["a", "b"]}))
    table.append(pa.RecordBatchReader.from_batches(pa.schema([("x", pa.string())]), [pa.record_batch({"x": ["c"]})]))
    ids = sorted(table.snapshot().to_arrow().column("id").to_pylist())
    assert ids == [-6, -3, 0]
    assert identity_columns(table.snapshot().metadata.schema_string)[0].high_water_mark == -6
    by_default = _identity_table(tmp_path / "bd", 1, 1, always=False)
    by_default.append(pa.table({"id": [100], "x": ["given"]}))  # an explicit value is kept, no mark moves
    assert by_default.snapshot().to_arrow().column("id").to_pylist() == [100]
    assert identity_columns(by_default.snapshot().metadata.schema_string)[0].high_water_mark is None


def test_append_refuses_what_needs_spark(tmp_path: Path) -> None:
    generated = pa.schema(
        [
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("d", pa.date32(), metadata={"delta.generationExpression": "CAST(ts AS DATE)"}),
        ]
    )
    table = DeltaTable.create(str(tmp_path / "g"), generated)
    assert "generatedColumns" in writer_features(table.snapshot().protocol)  # writer version 4
    with pytest.raises(SchemaMismatchError, match="generation"):
        table.append(pa.table({"ts": pa.array([0], pa.timestamp("us", tz="UTC")), "d": pa.array([0], pa.date32())}))
    defaults = pa.schema([pa.field("x", pa.string()), pa.field("n", pa.int32(), metadata={"CURRENT_DEFAULT": "42"})])
    with_default = DeltaTable.create(str(tmp_path / "d"), defaults)
    with pytest.raises(SchemaMismatchError, match="DEFAULT 42"):
        with_default.append(pa.table({"x": ["a"]}))
    with_default.append(pa.table({"x": ["a"], "n": pa.array([1], pa.int32())}))
    assert with_default.snapshot().to_arrow().num_rows == 1
