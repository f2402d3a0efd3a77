"""docs/operators.md's MERGE example and the operator's docstring say what the code and Delta do.

The example shows one upsert twice, as ``merge_sql`` and in the structured form: both
tasks must build the same MERGE (the structured form with its aliases). The multiple-match
rule is stated as docs/merge.md and Delta state it (whatever the clause conditions).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlglot

from airflow_delta.hooks.delta import DeltaHook
from airflow_delta.operators.dml import DeltaMergeOperator
from airflow_delta.spark.specs import MergeSpec, TaskIdentity

pytestmark = pytest.mark.usefixtures("airflow_home")

DOCS = Path(__file__).parents[2] / "docs"


def _example_dag_code() -> str:
    page = (DOCS / "operators.md").read_text(encoding="utf-8")
    block = page.split("**The structured form.**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    return block


def _normal(sql: str | None) -> str | None:
    return None if sql is None else sqlglot.parse_one(sql, read="spark").sql(dialect="spark")


def _shape(spec: MergeSpec) -> list[tuple[object, ...]]:
    return [
        (c.kind, _normal(c.condition), {k: _normal(v) for k, v in (c.assignments or {}).items()}, c.star)
        for c in spec.clauses
    ]


def test_the_structured_example_builds_the_same_merge_as_its_sql_form() -> None:
    namespace: dict[str, object] = {}
    exec(compile(_example_dag_code(), "docs/operators.md", "exec"), namespace)  # the docs' own DAG
    dag = next(v for v in namespace.values() if hasattr(v, "task_dict"))
    tasks = dag.task_dict  # type: ignore[attr-defined]
    identity = TaskIdentity("dag", "t", "run")
    by_sql = tasks["upsert_sql"].build_spec(identity, DeltaHook())
    structured = tasks["upsert_structured"].build_spec(identity, DeltaHook())
    assert isinstance(tasks["upsert_structured"], DeltaMergeOperator)

    assert (structured.source_alias, structured.target_alias) == (by_sql.source_alias, by_sql.target_alias) == ("s", "t")
    assert _normal(structured.on) == _normal(by_sql.on)
    assert _shape(structured) == _shape(by_sql)


def test_the_multiple_match_rule_is_stated_as_delta_states_it() -> None:
    operators = (DOCS / "operators.md").read_text(encoding="utf-8")
    docstring = re.sub(r"\s+", " ", DeltaMergeOperator.__doc__ or "")
    for text in (re.sub(r"\s+", " ", operators), docstring):
        assert "whatever the clause conditions" in text
        assert "unconditional DELETE" in text and "insert-only" in text
        assert "that a clause modifies" not in text
