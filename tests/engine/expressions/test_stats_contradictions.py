"""Statistics that contradict themselves are unknown for pruning (issue 10, item 3).

A file is skipped only when trustworthy statistics prove that no row can match. min >
max, a negative count, more nulls than records, bounds on an all-null column, or a value
that does not parse for the column type cannot be trusted: the column's statistics are
then unknown, and a contradiction in numRecords makes all count-based reasoning unknown.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.expressions import parse_predicate, prune_files
from airflow_delta.engine.model.actions import Metadata
from airflow_delta.engine.model.schema import schema_to_arrow
from airflow_delta.engine.model.stats_parse import parse_stats


def _metadata(fields: list[tuple[str, str]]) -> Metadata:
    schema = {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]}
    return Metadata(id="t", schema_string=json.dumps(schema))


METADATA = _metadata([("id", "long"), ("d", "date")])
SCHEMA = schema_to_arrow(METADATA.schema_string)
# The file the statistics describe: 6 is in it, and so is a NULL.
ROWS = pa.table({"id": pa.array([5, 6, None], pa.int64()), "d": pa.array([dt.date(2024, 1, 5), None, None], pa.date32())})

CONTRADICTIONS: dict[str, dict[str, Any]] = {
    "min above max": {"numRecords": 3, "minValues": {"id": 7}, "maxValues": {"id": 5}, "nullCount": {"id": 1}},
    "more nulls than records": {"numRecords": 3, "minValues": {"id": 100}, "maxValues": {"id": 200}, "nullCount": {"id": 4}},
    "negative null count": {"numRecords": 3, "minValues": {"id": 100}, "maxValues": {"id": 200}, "nullCount": {"id": -1}},
    "bounds on an all-null column": {"numRecords": 3, "minValues": {"id": 5}, "maxValues": {"id": 6}, "nullCount": {"id": 3}},
    "negative record count": {"numRecords": -1, "minValues": {"id": 5}, "maxValues": {"id": 6}, "nullCount": {"id": -1}},
    "negative record count, plausible nulls": {"numRecords": -3, "nullCount": {"id": 0, "d": 0}},
    "record count that does not parse": {"numRecords": "three", "nullCount": {"id": 0, "d": 0}},
    "minimum that does not parse": {"numRecords": 3, "minValues": {"id": "abc"}, "maxValues": {"id": 3}, "nullCount": {"id": 1}},
    "maximum of the wrong type": {"numRecords": 3, "minValues": {"id": 10}, "maxValues": {"id": 1.5}, "nullCount": {"id": 1}},
    "date minimum that is not a date": {"numRecords": 3, "minValues": {"d": "2024-02-30"}, "maxValues": {"d": "2024-01-01"}, "nullCount": {"d": 2}},
    "date bounds on an all-null column": {"numRecords": 3, "minValues": {"d": "2030-01-01"}, "maxValues": {"d": "2030-01-02"}, "nullCount": {"d": 3}},
}

PREDICATES = [
    "id = 6",
    "id IN (6, 60)",
    "id > 5",
    "id <= 6 AND id >= 6",
    "id BETWEEN 6 AND 6",
    "id <=> 6",
    "NOT (id != 6)",
    "id NOT IN (1, 2)",
    "id IS NULL",
    "id IS NOT NULL",
    "d = '2024-01-05'",
    "d IS NULL",
    "d > '2024-01-01'",
]


def _matches(sql: str, rows: pa.Table) -> bool:
    return rows.filter(parse_predicate(sql, rows.schema).to_arrow()).num_rows > 0


@pytest.mark.parametrize("case", list(CONTRADICTIONS))
@pytest.mark.parametrize("sql", PREDICATES)
def test_a_file_whose_statistics_contradict_themselves_is_kept(case: str, sql: str) -> None:
    assert _matches(sql, ROWS)
    stats = parse_stats([json.dumps(CONTRADICTIONS[case])], METADATA)
    assert prune_files(parse_predicate(sql, SCHEMA), None, stats).to_pylist() == [True]


@pytest.mark.parametrize(
    ("sql", "stats"),
    [
        ("id = 6", {"numRecords": 3, "minValues": {"id": 7}, "maxValues": {"id": 9}, "nullCount": {"id": 0}}),
        ("id IS NULL", {"numRecords": 3, "minValues": {"id": 7}, "maxValues": {"id": 9}, "nullCount": {"id": 0}}),
        ("id IS NOT NULL", {"numRecords": 3, "nullCount": {"id": 3}}),
        # Only the contradicting column is unknown: d's honest bounds still prune.
        ("d = '2024-01-05'", {"numRecords": 3, "minValues": {"id": 7, "d": "2025-01-01"}, "maxValues": {"id": 5, "d": "2025-02-01"}}),
        # A negative record count leaves bounds usable.
        ("id = 6", {"numRecords": -1, "minValues": {"id": 7}, "maxValues": {"id": 9}}),
    ],
)
def test_consistent_statistics_still_prune(sql: str, stats: dict[str, Any]) -> None:
    parsed = parse_stats([json.dumps(stats)], METADATA)
    assert prune_files(parse_predicate(sql, SCHEMA), None, parsed).to_pylist() == [False]


def test_a_zero_record_count_alone_does_not_prune() -> None:
    # numRecords may lie (issue 10, item 3): "no rows" taken from it alone could drop a file
    # that has rows, so a file with no bounds is read.
    parsed = parse_stats([json.dumps({"numRecords": 0, "nullCount": {"id": 0}})], METADATA)
    assert prune_files(parse_predicate("id = 6", SCHEMA), None, parsed).to_pylist() == [True]


@pytest.mark.parametrize("case", ["min above max", "bounds on an all-null column", "more nulls than records", "minimum that does not parse"])
def test_reading_and_deleting_through_lying_statistics_find_the_row(case: str, tmp_path: Path) -> None:
    table = DeltaTable.create(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([5, 6, None], pa.int64())}))
    commit = tmp_path / "t" / "_delta_log" / "00000000000000000001.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    for action in actions:
        if "add" in action:
            stats = {k: v for k, v in CONTRADICTIONS[case].items() if k != "d"}
            action["add"]["stats"] = json.dumps(stats)
    commit.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    assert table.snapshot().to_arrow(filter="id = 6").column("id").to_pylist() == [6]
    assert table.delete("id = 6").num_deleted_rows == 1
    assert sorted(table.snapshot().to_arrow().column("id").to_pylist(), key=str) == [5, None]


# --------------------------------------------------------------------------- property

_VALUES = st.one_of(st.none(), st.integers(-5, 5))
_CORRUPTIONS = ["none", "swap", "too_many_nulls", "negative_nulls", "negative_records", "bounds_when_all_null", "garbage_min", "garbage_records"]
_TEMPLATES = [
    "id = {a}",
    "id != {a}",
    "id < {a}",
    "id <= {a}",
    "id > {a}",
    "id >= {a}",
    "id IS NULL",
    "id IS NOT NULL",
    "id IN ({a}, {b})",
    "id NOT IN ({a}, {b})",
    "NOT (id = {a})",
    "id BETWEEN {a} AND {b}",
    "id <=> {a}",
    "NOT (id <=> {a})",
    "id = {a} OR id IS NULL",
    "NOT (id > {a} AND id < {b})",
]


def _stats_document(values: list[int | None], corruption: str, lie: int) -> dict[str, Any] | None:
    """Truthful statistics of ``values``, then made to contradict themselves (or not, for "none")."""
    present = [v for v in values if v is not None]
    doc: dict[str, Any] = {"numRecords": len(values), "nullCount": {"id": len(values) - len(present)}}
    if present:
        doc["minValues"], doc["maxValues"] = {"id": min(present)}, {"id": max(present)}
    if corruption == "swap":
        if not present or min(present) == max(present):
            return None
        doc["minValues"], doc["maxValues"] = doc["maxValues"], doc["minValues"]
    elif corruption == "too_many_nulls":
        doc["nullCount"]["id"] = len(values) + 1 + abs(lie)
        doc["minValues"], doc["maxValues"] = {"id": lie}, {"id": lie}
    elif corruption == "negative_nulls":
        doc["nullCount"]["id"] = -1 - abs(lie)
        doc["minValues"], doc["maxValues"] = {"id": lie}, {"id": lie}
    elif corruption == "negative_records":
        doc["numRecords"] = -1 - abs(lie)
        doc["nullCount"]["id"] = 0 if lie % 2 else doc["numRecords"]
    elif corruption == "bounds_when_all_null":
        doc["nullCount"]["id"] = len(values)
        doc["minValues"], doc["maxValues"] = {"id": lie}, {"id": lie}
    elif corruption == "garbage_min":
        doc["minValues"], doc["maxValues"] = {"id": "x"}, {"id": lie}
    elif corruption == "garbage_records":
        doc["numRecords"] = "many"
        doc["nullCount"]["id"] = 0
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=st.lists(st.tuples(st.lists(_VALUES, min_size=1, max_size=5), st.sampled_from(_CORRUPTIONS), st.integers(-5, 5)), min_size=1, max_size=6),
    template=st.sampled_from(_TEMPLATES),
    a=st.integers(-6, 6),
    b=st.integers(-6, 6),
)
def test_pruning_never_drops_a_file_with_a_matching_row(
    files: list[tuple[list[int | None], str, int]], template: str, a: int, b: int
) -> None:
    schema = pa.schema([("id", pa.int64())])
    sql = template.format(a=a, b=b)
    predicate = parse_predicate(sql, schema)
    documents = [_stats_document(values, corruption, lie) for values, corruption, lie in files]
    keep = prune_files(predicate, None, parse_stats([json.dumps(d) if d is not None else None for d in documents], METADATA))
    # Which files hold a matching row: one scan over every file's rows, each tagged with its file.
    rows = pa.table({
        "id": pa.array([v for values, _, _ in files for v in values], pa.int64()),
        "file": pa.array([i for i, (values, _, _) in enumerate(files) for _ in values], pa.int64()),
    })
    matching = set(ds.dataset(rows).to_table(filter=predicate.to_arrow()).column("file").to_pylist())
    for i, ((values, corruption, _), kept) in enumerate(zip(files, keep.to_pylist(), strict=True)):
        assert kept or i not in matching, (sql, values, corruption)
