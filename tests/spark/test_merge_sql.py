"""MERGE INTO text -> MergeSpec: what each statement becomes, and what is refused (typed, naming ``sql``)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_delta.engine import InvalidArgumentError
from airflow_delta.spark.merge_sql import merge_spec_from_sql
from airflow_delta.spark.specs import ExecutionOptions, MergeClause, MergeSource, MergeSpec, TableRef, TaskIdentity

TARGET = TableRef(uri="/data/events")
IDENTITY = TaskIdentity("dag", "task", "run")
UPDATES = MergeSource(parquet="/data/updates.parquet")
DIM = MergeSource(delta=TableRef(uri="/data/dim", version=3))
SOURCES = {"updates": UPDATES, "dim": DIM}


def parse(sql: str, **kwargs: Any) -> MergeSpec:
    return merge_spec_from_sql(sql, target=TARGET, identity=IDENTITY, sources=SOURCES, **kwargs)


# (statement, expected: (source, source_alias, target_alias, on, clauses, schema_evolution))
CASES: list[tuple[str, tuple[MergeSource, str, str, str, tuple[MergeClause, ...], bool]]] = [
    (
        "MERGE INTO events t USING updates s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        (
            UPDATES,
            "s",
            "t",
            "t.id = s.id",
            (MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)),
            False,
        ),
    ),
    (
        # no aliases: the tables' own names qualify columns, as in Spark
        "merge into events using UPDATES on events.id = updates.id when matched then delete",
        (UPDATES, "UPDATES", "events", "events.id = updates.id", (MergeClause("matched_delete"),), False),
    ),
    (
        # every clause kind, conditions, CASE, qualified and unqualified SET columns, BY TARGET
        """MERGE INTO events AS t USING updates AS s ON t.id = s.id AND t.dt = '2024-01-01'
           WHEN MATCHED AND s.op = 'D' THEN DELETE
           WHEN MATCHED THEN UPDATE SET t.v = s.v + 1, w = CASE WHEN s.x > 0 THEN 'p' ELSE NULL END
           WHEN NOT MATCHED BY TARGET AND s.op <> 'D' THEN INSERT (id, v) VALUES (s.id, CAST(s.v AS BIGINT))
           WHEN NOT MATCHED BY SOURCE AND t.v > 3 THEN DELETE
           WHEN NOT MATCHED BY SOURCE THEN UPDATE SET v = 0""",
        (
            UPDATES,
            "s",
            "t",
            "t.id = s.id AND t.dt = '2024-01-01'",
            (
                MergeClause("matched_delete", "s.op = 'D'"),
                MergeClause(
                    "matched_update", assignments={"v": "s.v + 1", "w": "CASE WHEN s.x > 0 THEN 'p' ELSE NULL END"}
                ),
                MergeClause("not_matched_insert", "s.op <> 'D'", assignments={"id": "s.id", "v": "CAST(s.v AS BIGINT)"}),
                MergeClause("not_matched_by_source_delete", "t.v > 3"),
                MergeClause("not_matched_by_source_update", assignments={"v": "0"}),
            ),
            False,
        ),
    ),
    (
        # groups interleaved in the text are kept in Delta's order, each group in text order
        """MERGE INTO events t USING updates s ON t.id = s.id
           WHEN NOT MATCHED BY SOURCE THEN DELETE
           WHEN NOT MATCHED AND s.a = 1 THEN INSERT *
           WHEN MATCHED AND s.a = 2 THEN DELETE
           WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)
           WHEN MATCHED THEN UPDATE SET v = s.v""",
        (
            UPDATES,
            "s",
            "t",
            "t.id = s.id",
            (
                MergeClause("matched_delete", "s.a = 2"),
                MergeClause("matched_update", assignments={"v": "s.v"}),
                MergeClause("not_matched_insert", "s.a = 1", star=True),
                MergeClause("not_matched_insert", assignments={"id": "s.id"}),
                MergeClause("not_matched_by_source_delete"),
            ),
            False,
        ),
    ),
    (
        # a subquery source over two named tables (one in a CTE); the query stays Spark SQL
        """MERGE INTO events t USING (WITH d AS (SELECT * FROM dim WHERE live) SELECT u.id, d.name FROM updates u
           JOIN d ON u.k = d.k) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET name = s.name""",
        (
            MergeSource(
                query="WITH d AS (SELECT * FROM dim WHERE live) SELECT u.id, d.name FROM updates AS u JOIN d ON u.k = d.k",
                views={"updates": UPDATES, "dim": DIM},
            ),
            "s",
            "t",
            "t.id = s.id",
            (MergeClause("matched_update", assignments={"name": "s.name"}),),
            False,
        ),
    ),
    (
        "MERGE WITH SCHEMA EVOLUTION INTO events t USING dim s ON t.id = s.id WHEN NOT MATCHED THEN INSERT *",
        (DIM, "s", "t", "t.id = s.id", (MergeClause("not_matched_insert", star=True),), True),
    ),
    (
        # quoted identifiers survive, in Spark's backticks
        "MERGE INTO events t USING updates s ON t.`my id` = s.id WHEN MATCHED THEN UPDATE SET `my col` = s.`x y`",
        (UPDATES, "s", "t", "t.`my id` = s.id", (MergeClause("matched_update", assignments={"my col": "s.`x y`"}),), False),
    ),
    (
        # struct fields: with or without the target's alias (any case), deeper than sqlglot's four-part Column, quoted
        """MERGE INTO events t USING updates s ON t.id = s.id WHEN MATCHED THEN UPDATE SET
           t.address.city = s.city, address.geo.lat = 1, T.a.b.c.d = 2, t.`x.y`.z = 3""",
        (
            UPDATES,
            "s",
            "t",
            "t.id = s.id",
            (
                MergeClause(
                    "matched_update",
                    assignments={"address.city": "s.city", "address.geo.lat": "1", "a.b.c.d": "2", "`x.y`.z": "3"},
                ),
            ),
            False,
        ),
    ),
    (
        # Spark's variant functions stay as Spark spells them (sqlglot's Spark dialect drops parse_json)
        "MERGE INTO events t USING updates s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = parse_json(s.j) "
        "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, to_json(parse_json(s.j)))",
        (
            UPDATES,
            "s",
            "t",
            "t.id = s.id",
            (
                MergeClause("matched_update", assignments={"v": "PARSE_JSON(s.j)"}),
                MergeClause("not_matched_insert", assignments={"id": "s.id", "v": "TO_JSON(PARSE_JSON(s.j))"}),
            ),
            False,
        ),
    ),
]


@pytest.mark.parametrize(("sql", "expected"), CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_statements_become_specs(sql: str, expected: tuple[Any, ...]) -> None:
    source, source_alias, target_alias, on, clauses, evolution = expected
    spec = parse(sql)
    assert spec.source == source
    assert (spec.source_alias, spec.target_alias, spec.on) == (source_alias, target_alias, on)
    assert spec.clauses == clauses
    assert spec.schema_evolution is evolution
    assert (spec.target, spec.identity) == (TARGET, IDENTITY)
    # what the operator sends is what the job reads
    assert MergeSpec.from_json(spec.to_json()) == spec


def test_options_and_schema_evolution_argument_pass_through() -> None:
    options = ExecutionOptions(max_attempts=7, use_deletion_vectors=False)
    spec = parse("MERGE INTO e USING updates s ON e.id = s.id WHEN MATCHED THEN DELETE", schema_evolution=True, options=options)
    assert spec.options == options
    assert spec.schema_evolution is True


REFUSALS = [
    ("", "sql", "one MERGE INTO statement"),
    ("SELECT 1", "sql", "exactly one MERGE INTO statement"),
    ("MERGE INTO e USING updates s ON e.id = s.id WHEN MATCHED THEN DELETE; SELECT 1", "sql", "exactly one MERGE"),
    ("MERGE INTO e USING updates s ON WHEN MATCHED THEN DELETE", "sql", "an ON condition"),
    ("MERGE INTO e USING updates s ON e.id = WHEN MATCHED THEN DELETE", "sql", "valid Spark SQL"),
    ("MERGE INTO e USING nowhere s ON e.id = s.id WHEN MATCHED THEN DELETE", "sources", "'nowhere'"),
    ("MERGE INTO e USING db.updates s ON e.id = s.id WHEN MATCHED THEN DELETE", "sql", "no database or catalog"),
    ("MERGE INTO e USING (SELECT * FROM other) s ON e.id = s.id WHEN MATCHED THEN DELETE", "sources", "'other'"),
    ("MERGE INTO e USING updates ON e.id = updates.id", "sql", "valid Spark SQL"),
    ("MERGE INTO e USING updates e ON e.id = e.id WHEN MATCHED THEN DELETE", "sql", "give one an alias"),
    ("MERGE INTO e USING updates s ON e.id = s.id WHEN MATCHED THEN INSERT *", "sql", "INSERT is for WHEN NOT MATCHED"),
    ("MERGE INTO e USING updates s ON e.id = s.id WHEN NOT MATCHED THEN DELETE", "sql", "no target row to delete"),
    ("MERGE INTO e USING updates s ON e.id = s.id WHEN NOT MATCHED THEN UPDATE SET v = 1", "sql", "no target row"),
    ("MERGE INTO e USING updates s ON e.id = s.id WHEN MATCHED THEN UPDATE SET s.v = 1", "sql", "a column of the target"),
    ("MERGE INTO e USING updates s ON e.id = s.id WHEN MATCHED THEN UPDATE SET s.st.f = 1", "sql", "a column of the target"),
    ("MERGE INTO e USING updates s ON e.id = s.id WHEN MATCHED THEN UPDATE SET e.st = s.st, ST.f = 1", "sql", "conflict"),
    (
        "MERGE INTO e USING updates s ON e.id = s.id WHEN NOT MATCHED THEN INSERT (id, e.st.f) VALUES (s.id, 1)",
        "sql",
        "neither a struct field",
    ),
    ("MERGE INTO e USING updates s ON e.id = s.id WHEN NOT MATCHED THEN INSERT (id, st.f) VALUES (s.id, 1)", "sql", "e.g."),
    ("MERGE INTO e USING updates s ON e.id = s.id WHEN MATCHED THEN UPDATE SET * EXCEPT (v)", "sql", "a plain *"),
    ("MERGE INTO e USING updates s ON e.id = s.id WHEN NOT MATCHED THEN INSERT (a, b) VALUES (1)", "sql", "as many VALUES"),
    ("MERGE INTO e USING updates s ON e.id = s.id WHEN NOT MATCHED THEN INSERT (a) VALUES (DEFAULT)", "sql", "defaults"),
    (
        # Spark resolves names ignoring case: v and V are one column
        "MERGE INTO e USING updates s ON e.id = s.id WHEN MATCHED THEN UPDATE SET v = 1, V = 2",
        "sql",
        "assigned once",
    ),
    (
        "MERGE INTO e USING updates s ON e.id = s.id WHEN MATCHED THEN DELETE WHEN MATCHED AND s.v = 1 THEN DELETE",
        "MergeSpec.clauses[0].condition",
        "only the last WHEN MATCHED clause may omit it",
    ),
    (
        "MERGE INTO e USING updates s ON e.id = s.id WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *",
        "MergeClause.star",
        "no source row for UPDATE SET *",  # sqlglot reads it; the spec refuses it
    ),
]


@pytest.mark.parametrize(("sql", "argument", "says"), REFUSALS, ids=[f"refusal{i}" for i in range(len(REFUSALS))])
def test_refusals_are_typed_and_say_what_to_fix(sql: str, argument: str, says: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        parse(sql)
    assert caught.value.argument == argument
    assert says in str(caught.value)
    assert caught.value.retryable is False
