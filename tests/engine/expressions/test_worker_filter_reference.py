"""What docs/operators.md says a worker DELETE evaluates, evaluated: every listed form, and
the error for anything else naming it as SQL writes it.

Each form is a predicate that holds for the one row of a table, read by the engine (the
same binder ``DeltaTable.delete`` uses), and its negation holds for none.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable, InvalidFilterError

SCHEMA = pa.schema(
    [("id", pa.int64()), ("s", pa.string()), ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
     ("f", pa.float64()), ("b", pa.bool_()), ("bin", pa.binary())]
)
ROW = {"id": 1, "s": " Ab ", "d": datetime.date(2024, 1, 2),
       "ts": datetime.datetime(2024, 1, 2, 3, tzinfo=datetime.UTC), "f": 1.5, "b": True, "bin": b"A"}

# One predicate per documented form (docs/operators.md, "What the worker evaluates"); each matches ROW.
DOCUMENTED = [
    "id = 1", "id == 1", "id != 2", "id <> 2", "id < 2", "id <= 1", "id > 0", "id >= 1", "id <=> 1",
    "id = 1 AND NOT (id = 2) OR id = 3",
    "s IS NOT NULL", "NOT (s IS NULL)", "b IS TRUE", "b IS NOT FALSE", "NOT (b IS FALSE)",
    "id IN (1, 2)", "id NOT IN (2, 3)", "id IN (id, 2)", "id BETWEEN 0 AND 2", "id NOT BETWEEN 5 AND 6",
    "s LIKE '%A%'", "s NOT LIKE 'x%'", "s ILIKE '%ab%'", "s LIKE '% Ab!%' ESCAPE '!' OR id = 1",
    "id + 1 = 2", "id - 1 = 0", "id * 2 = 2", "id / 1 = 1", "id % 2 = 1", "-id = -1",
    "lower(s) = ' ab '", "upper(s) = ' AB '", "trim(s) = 'Ab'", "TRIM(LEADING FROM s) = 'Ab '",
    "TRIM(TRAILING FROM s) = ' Ab'", "ltrim(s) = 'Ab '", "rtrim(s) = ' Ab'", "length(s) = 4",
    "coalesce(s, 'x') = ' Ab '", "abs(-id) = 1",
    "year(d) = 2024", "month(d) = 1", "day(d) = 2", "dayofmonth(d) = 2", "hour(ts) = 3",
    "CAST(id AS STRING) = '1'", "CAST(d AS TIMESTAMP) < ts", "CAST(b AS INT) = 1",
    "bin = X'41'", "d = DATE '2024-01-02'", "ts = TIMESTAMP '2024-01-02 03:00:00'", "b = TRUE", "f = 1.5",
]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> DeltaTable:
    path = str(tmp_path_factory.mktemp("reference") / "t")
    created = DeltaTable.create(path, SCHEMA)
    created.append(pa.Table.from_pylist([ROW], schema=SCHEMA))
    return DeltaTable(path)


@pytest.mark.parametrize("predicate", DOCUMENTED)
def test_every_documented_form_is_evaluated_in_the_worker(table: DeltaTable, predicate: str) -> None:
    assert table.snapshot().to_arrow(filter=predicate).num_rows == 1
    assert table.snapshot().to_arrow(filter=f"NOT ({predicate})").num_rows == 0


@pytest.mark.parametrize(
    ("predicate", "named"),
    [
        ("s || 'x' = 'a'", "the operator || (in \"s || 'x'\")"),
        ("id & 1 = 1", "the operator & (in 'id & 1')"),
        ("concat(s, 'x') = 'a'", "function concat() is not supported"),
    ],
)
def test_what_it_does_not_evaluate_is_named_as_written(table: DeltaTable, predicate: str, named: str) -> None:
    with pytest.raises(InvalidFilterError) as raised:
        table.snapshot().to_arrow(filter=predicate)
    assert named in str(raised.value)
    assert "dpipe" not in str(raised.value) and "bitwiseand" not in str(raised.value)


def test_the_reference_lists_what_this_test_evaluates() -> None:
    docs = (Path(__file__).parents[3] / "docs" / "operators.md").read_text(encoding="utf-8")
    reference = docs.split("**What the worker evaluates.**", 1)[1].split("\n\n", 2)[1]
    for token in ("<=>", "ILIKE", "ESCAPE", "BETWEEN", "IS [NOT] TRUE", "%", "dayofmonth", "hour", "CAST", "X'..'"):
        assert token in reference
