"""Delta Lake as the oracle for identity, generated and default columns and variants (issue 18).

Delta creates the table (the ``delta_lake`` fixture, tests/delta_lake.py) with an identity
column (``GENERATED ALWAYS`` step 1, ``BY DEFAULT`` step -3), a date partition generated
from a timestamp, a column with a default and an unshredded variant; our DELETE (the
engine), UPDATE and MERGE (the Spark programs) and OPTIMIZE (the engine) run on one copy,
Delta's same statements on another, and Delta reads both. The rows must agree except for
the identity values of inserted rows, which are Delta's free choice within its rules
(unique, on ``start + step * n``, past the high-water mark, the mark the furthest value
generated: ``IdentityColumn``'s ``updateToValidHighWaterMark``). Then Delta writes to our
table again, and its identity values must not collide with ours.
"""

from __future__ import annotations

import datetime as dt
import itertools
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable, identity_columns
from airflow_delta.spark.merge import run_merge
from airflow_delta.spark.merge_sql import merge_spec_from_sql
from airflow_delta.spark.specs import ExecutionOptions, MergeSource, TableRef, TaskIdentity, UpdateSpec
from airflow_delta.spark.update import run_update

pytestmark = pytest.mark.slow

_numbers = itertools.count()
_OPTIONS = ExecutionOptions(backoff_initial_seconds=0.0, backoff_max_seconds=0.0)
UTC = dt.UTC


def _identity() -> TaskIdentity:
    return TaskIdentity("dag", f"column-values-delta-{next(_numbers)}", "run")


def _mark(path: str) -> int | None:
    return identity_columns(DeltaTable(path).snapshot().metadata.schema_string)[0].high_water_mark


def _rows(delta_lake: Any, *paths: str) -> dict[str, dict[str, Any]] | tuple[dict[str, dict[str, Any]], ...]:
    """``k`` -> the row as Delta reads it, the variant as Delta's JSON; for several tables a
    tuple of those, read in one statement (one Spark job)."""
    rows = delta_lake.sql(
        " UNION ALL ".join(
            f"SELECT {index} AS side, id, k, ts, d, n, to_json(v) AS v FROM delta.`{path}`"
            for index, path in enumerate(paths)
        )
    )
    sides: tuple[dict[str, dict[str, Any]], ...] = tuple({} for _ in paths)
    for row in rows:
        by_key = sides[row.pop("side")]
        assert row["k"] not in by_key, row
        by_key[row["k"]] = row
    return sides if len(paths) > 1 else sides[0]


def _on_sequence(value: int, start: int, step: int, past: int | None) -> bool:
    """Whether ``value`` is one of ``start + step * n`` (n >= 0), beyond ``past`` in the step's direction."""
    beyond = past is None or (value - past) * step > 0
    return (value - start) % abs(step) == 0 and (value - start) * step >= 0 and beyond


# The MERGE's clauses, the same text for Delta and for us: the matched row gets a new
# timestamp (so a new generated date) and variant; inserted rows leave out n (its default)
# and the identity column. (Delta 4.4's MERGE refuses the DEFAULT keyword in SET and INSERT
# values, DELTA_MERGE_UNRESOLVED_EXPRESSION; its UPDATE takes it, used below.)
_MERGE_CLAUSES = (
    "ON t.k = s.k "
    "WHEN MATCHED THEN UPDATE SET ts = s.ts, v = parse_json(s.j) "
    "WHEN NOT MATCHED AND s.k = 'x' THEN INSERT (k, ts) VALUES (s.k, s.ts) "
    "WHEN NOT MATCHED THEN INSERT (k, ts, v) VALUES (s.k, s.ts, parse_json(s.j))"
)


@pytest.mark.parametrize(
    ("generated", "start", "step"),
    [("ALWAYS", 1, 1), ("BY DEFAULT", 0, -3)],
    ids=["always-step-1", "by-default-step-minus-3"],
)
def test_column_values_match_delta_through_our_operations(
    delta_lake: Any, spark: Any, tmp_path: Path, generated: str, start: int, step: int
) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    delta_lake.sql(
        f"CREATE TABLE delta.`{ours}` (id BIGINT GENERATED {generated} AS IDENTITY (START WITH {start} INCREMENT BY {step}), "
        "k STRING, ts TIMESTAMP, d DATE GENERATED ALWAYS AS (CAST(ts AS DATE)), n INT DEFAULT 42, v VARIANT) "
        "USING delta PARTITIONED BY (d) TBLPROPERTIES ('delta.feature.allowColumnDefaults' = 'supported')"
    )
    delta_lake.sql(
        f"INSERT INTO delta.`{ours}` (k, ts, n, v) VALUES "
        """('a', TIMESTAMP'2026-03-01 23:30:00', 1, parse_json('{"a": 1, "b": [1, "x"]}')), """
        "('b', TIMESTAMP'2026-03-01 10:00:00', 2, parse_json('[1.5, null]')), "
        """('c', TIMESTAMP'2026-03-02 00:30:00', 3, parse_json('{"c": {"d": "e"}}'))"""
    )
    delta_lake.sql(
        f"INSERT INTO delta.`{ours}` (k, ts, v) VALUES "
        "('d', TIMESTAMP'2026-03-02 12:00:00', parse_json('7')), ('e', TIMESTAMP'2026-03-03 08:00:00', NULL)"
    )
    shutil.copytree(ours, theirs)
    mark_before = _mark(ours)
    old_ids = {k: r["id"] for k, r in _rows(delta_lake, ours).items()}
    source = str(tmp_path / "source.parquet")
    pq.write_table(
        pa.table(
            {
                "k": ["c", "x", "y", "z"],
                "ts": pa.array([dt.datetime(2026, 3, d, 5, tzinfo=UTC) for d in (5, 6, 6, 7)], pa.timestamp("us", "UTC")),
                "j": ['{"m": 1}', '{"x": 2}', '"y"', "[3]"],
            }
        ),
        source,
    )

    # Ours: DELETE (the engine), UPDATE and MERGE (the Spark programs), OPTIMIZE (the engine).
    table = DeltaTable(ours)
    table.delete("k = 'b'")
    update_set = {"ts": "ts + INTERVAL 1 DAY", "n": "DEFAULT", "v": """parse_json('{"u": true}')"""}
    run_update(spark, UpdateSpec(TableRef(ours), update_set, "k = 'a'", _identity(), _OPTIONS))
    run_merge(
        spark,
        merge_spec_from_sql(
            f"MERGE INTO t USING s {_MERGE_CLAUSES}", target=TableRef(ours), identity=_identity(),
            sources={"s": MergeSource(parquet=source)}, options=_OPTIONS,
        ),
    )
    assert table.optimize().version is not None
    # Delta's.
    delta_lake.sql(f"DELETE FROM delta.`{theirs}` WHERE k = 'b'")
    assignments = ", ".join(f"{column} = {value}" for column, value in update_set.items())
    delta_lake.sql(f"UPDATE delta.`{theirs}` SET {assignments} WHERE k = 'a'")
    delta_lake.sql(f"MERGE INTO delta.`{theirs}` t USING parquet.`{source}` s {_MERGE_CLAUSES}")
    delta_lake.sql(f"OPTIMIZE delta.`{theirs}`")

    ours_rows, theirs_rows = _rows(delta_lake, ours, theirs)
    without_id = {k: {c: v for c, v in r.items() if c != "id"} for k, r in ours_rows.items()}
    assert without_id == {k: {c: v for c, v in r.items() if c != "id"} for k, r in theirs_rows.items()}
    # Generated dates, defaults and variants as Delta computes them (spelled out, so a wrong Delta fails too).
    assert {k: r["d"] for k, r in ours_rows.items()} == {
        "a": dt.date(2026, 3, 2), "c": dt.date(2026, 3, 5), "d": dt.date(2026, 3, 2), "e": dt.date(2026, 3, 3),
        "x": dt.date(2026, 3, 6), "y": dt.date(2026, 3, 6), "z": dt.date(2026, 3, 7),
    }
    assert {k: r["n"] for k, r in ours_rows.items()} == {"a": 42, "c": 3, "d": 42, "e": 42, "x": 42, "y": 42, "z": 42}
    assert {k: r["v"] for k, r in ours_rows.items()} == {
        "a": '{"u":true}', "c": '{"m":1}', "d": "7", "e": None, "x": None, "y": '"y"', "z": "[3]",
    }

    # Identity: kept rows keep their values; inserted rows get new unique values on the
    # sequence past the old mark (which ones is each writer's choice); the mark is the furthest.
    for rows, path in ((ours_rows, ours), (theirs_rows, theirs)):
        assert {k: rows[k]["id"] for k in "acde"} == {k: old_ids[k] for k in "acde"}
        new = [rows[k]["id"] for k in "xyz"]
        assert len(set(new)) == 3 and not set(new) & set(old_ids.values())
        assert all(_on_sequence(value, start, step, mark_before) for value in new), (new, mark_before)
        assert _mark(path) == (max(new) if step > 0 else min(new))

    # Delta writes our table again: its identity values go past our mark, no collision.
    mark_ours = _mark(ours)
    delta_lake.sql(
        f"INSERT INTO delta.`{ours}` (k, ts) VALUES ('after1', TIMESTAMP'2026-04-01 01:00:00'), "
        "('after2', TIMESTAMP'2026-04-02 01:00:00')"
    )
    after = _rows(delta_lake, ours)
    assert len({r["id"] for r in after.values()}) == len(after) == len(ours_rows) + 2
    assert all(_on_sequence(after[k]["id"], start, step, mark_ours) for k in ("after1", "after2"))
    assert (after["after1"]["d"], after["after1"]["n"]) == (dt.date(2026, 4, 1), 42)
    assert {k: r for k, r in after.items() if not k.startswith("after")} == ours_rows
