"""The driver's plan: statements checked by Spark's analyzer, the columns a predicate reads, candidate files."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable, InvalidFilterError
from airflow_delta.spark.plan import check_predicate, is_partition_predicate, predicate_columns, read_candidates

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("Region", pa.string()), ("day", pa.string()), ("note", pa.string())])


@pytest.fixture
def context(table_path: str):
    table = DeltaTable.create(table_path, SCHEMA, ["Region", "day"])
    table.append(pa.table({"id": [1, 2], "Region": ["eu", "us"], "day": ["d1", "d2"], "note": ["a", "b"]}, schema=SCHEMA))
    return table.context()


@pytest.mark.parametrize(
    ("predicate", "columns", "partition_only"),
    [
        ("region = 'eu'", ["Region"], True),  # Spark resolves names ignoring case
        ("day = 'd1' AND upper(REGION) LIKE 'E%'", ["Region", "day"], True),
        ("id > 1 OR day = 'd1'", ["id", "day"], False),
        ("coalesce(note, day) = 'x'", ["day", "note"], False),
        ("1 = 1", [], True),
    ],
)
def test_predicate_columns_and_partition_only(spark, context, predicate, columns, partition_only) -> None:
    assert predicate_columns(spark, context, predicate) == columns
    assert is_partition_predicate(spark, context, predicate) is partition_only


@pytest.mark.parametrize("predicate", ["nope = 1", "id +", "id", "note"])
def test_bad_predicates_are_invalid_filters(spark, context, predicate) -> None:
    with pytest.raises(InvalidFilterError) as info:
        check_predicate(spark, context, predicate)
    assert predicate in str(info.value)


def test_candidates_are_pruned_and_fall_back_to_the_whole_table(spark, table_path: str, context) -> None:
    table = DeltaTable(table_path)
    table.append(pa.table({"id": [3], "Region": ["eu"], "day": ["d3"], "note": ["c"]}, schema=SCHEMA))
    with table.transaction() as txn:
        files, engine_filter = read_candidates(txn, "Region = 'eu'")
        assert files.num_rows == 2 and engine_filter == "Region = 'eu'"
        assert all(path.startswith("Region=eu/") for path in files.column("path").to_pylist())
        # A Spark function the engine's parser does not know: every file, no engine filter.
        files, engine_filter = read_candidates(txn, "levenshtein(note, 'a') = 0")
        assert files.num_rows == 3 and engine_filter is None
