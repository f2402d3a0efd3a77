"""Which files a read predicate may match: partition values and statistics, conservatively."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from airflow_delta.engine.expressions import parse_predicate
from airflow_delta.engine.model.actions import FILE_ACTIONS_SCHEMA, Metadata
from airflow_delta.engine.model.schema import arrow_to_delta_schema
from airflow_delta.engine.write.file_matching import files_may_match

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
METADATA = Metadata(id="t", schema_string=json.dumps(arrow_to_delta_schema(SCHEMA)), partition_columns=("p",))


def stats(low: int, high: int) -> str:
    return json.dumps({"numRecords": 2, "minValues": {"id": low}, "maxValues": {"id": high}, "nullCount": {"id": 0}})


def file_actions(rows: list[tuple[str, str | None]]) -> pa.Table:
    """One add per (partition value, stats JSON)."""
    records: list[dict[str, Any]] = [
        {"version": 1, "seq": i, "is_add": True, "path": f"p={p}/f{i}.parquet", "partition_values": [("p", p)], "stats": s}
        for i, (p, s) in enumerate(rows)
    ]
    return pa.Table.from_pylist(records, schema=FILE_ACTIONS_SCHEMA)


FILES = file_actions([("a", stats(1, 5)), ("b", stats(1, 5)), ("a", stats(100, 200)), ("a", None)])


def test_partition_values_and_statistics_rule_files_out() -> None:
    predicate = parse_predicate("p = 'a' AND id < 10", SCHEMA)
    # The file without statistics may hold any id, so it may match.
    assert files_may_match([predicate], FILES, METADATA).to_pylist() == [True, False, False, True]


def test_a_file_may_match_if_any_predicate_may() -> None:
    predicates = [parse_predicate("p = 'b'", SCHEMA), parse_predicate("id > 150", SCHEMA)]
    assert files_may_match(predicates, FILES, METADATA).to_pylist() == [False, True, True, True]


def test_no_predicate_matches_nothing_and_no_file_gives_an_empty_mask() -> None:
    assert files_may_match([], FILES, METADATA).to_pylist() == [False] * 4
    assert files_may_match([parse_predicate("id = 1", SCHEMA)], FILES.slice(0, 0), METADATA).to_pylist() == []
