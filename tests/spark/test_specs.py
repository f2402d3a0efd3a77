"""The job specifications: JSON round trips, refusals that name their field, stable app ids."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine import InvalidArgumentError
from airflow_delta.spark.specs import (
    SPEC_VERSION,
    DeleteSpec,
    ExecutionOptions,
    MergeClause,
    MergeSource,
    MergeSpec,
    TableRef,
    TaskIdentity,
    UpdateSpec,
    spec_from_json,
)

# ---------------------------------------------------------------------------------------
# Strategies: every spec they generate is valid.

texts = st.text(min_size=1, max_size=20).filter(lambda text: text.strip() != "")
identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
table_refs = st.builds(
    TableRef,
    uri=texts,
    version=st.none() | st.integers(min_value=0, max_value=2**63 - 1),
    storage_options=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
)
identities = st.builds(
    TaskIdentity, dag_id=texts, task_id=texts, run_id=texts, map_index=st.integers(min_value=-1, max_value=10**6)
)


@st.composite
def execution_options(draw: st.DrawFn) -> ExecutionOptions:
    initial = draw(st.floats(min_value=0, max_value=1e6, allow_nan=False))
    return ExecutionOptions(
        max_attempts=draw(st.integers(min_value=1, max_value=100)),
        backoff_initial_seconds=initial,
        backoff_max_seconds=draw(st.floats(min_value=initial, max_value=2e6, allow_nan=False)),
        backoff_multiplier=draw(st.floats(min_value=1, max_value=10, allow_nan=False)),
        use_deletion_vectors=draw(st.none() | st.booleans()),
    )


def distinct_columns(min_size: int = 1) -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(identifiers, texts, min_size=min_size, max_size=4).filter(
        lambda columns: len({name.casefold() for name in columns}) == len(columns)
    )


leaf_sources = st.builds(MergeSource, delta=table_refs) | st.builds(MergeSource, parquet=texts)
sources = leaf_sources | st.builds(
    MergeSource,
    query=texts,
    views=st.dictionaries(identifiers, leaf_sources, max_size=3).filter(
        lambda views: len({name.casefold() for name in views}) == len(views)
    ),
)


@st.composite
def clause_lists(draw: st.DrawFn) -> list[MergeClause]:
    """Clauses of every kind, each group's unconditional clause (if any) last in it."""
    groups: list[list[MergeClause]] = []
    for kinds in (
        ("matched_update", "matched_delete"),
        ("not_matched_insert",),
        ("not_matched_by_source_update", "not_matched_by_source_delete"),
    ):
        group: list[MergeClause] = []
        count = draw(st.integers(min_value=0, max_value=3))
        for position in range(count):
            kind = draw(st.sampled_from(kinds))
            last = position == count - 1
            condition = draw(st.none() | texts) if last else draw(texts)
            star = kind in ("matched_update", "not_matched_insert") and draw(st.booleans())
            assignments = None if star or kind.endswith("_delete") else draw(distinct_columns())
            group.append(MergeClause(kind=kind, condition=condition, assignments=assignments, star=star))
        groups.append(group)
    if not any(groups):
        groups[0].append(MergeClause(kind="matched_delete"))
    # Groups may be interleaved in any way: the spec keeps each group's own order.
    labels = draw(st.permutations([index for index, group in enumerate(groups) for _ in group]))
    remaining = [iter(group) for group in groups]
    return [next(remaining[index]) for index in labels]


delete_specs = st.builds(
    DeleteSpec, table=table_refs, predicate=st.none() | texts, identity=identities, options=execution_options()
)
update_specs = st.builds(
    UpdateSpec,
    table=table_refs,
    set=distinct_columns(),
    predicate=st.none() | texts,
    identity=identities,
    options=execution_options(),
)
merge_specs = st.builds(
    MergeSpec,
    target=table_refs,
    source=sources,
    on=texts,
    clauses=clause_lists(),
    identity=identities,
    source_alias=st.just("s"),
    target_alias=st.just("t"),
    schema_evolution=st.booleans(),
    options=execution_options(),
)


@settings(max_examples=60)
@given(spec=st.one_of(delete_specs, update_specs, merge_specs))
def test_json_round_trip(spec: DeleteSpec | UpdateSpec | MergeSpec) -> None:
    text = spec.to_json()
    assert type(spec).from_json(text) == spec
    assert spec_from_json(text) == spec
    assert spec_from_json(text.encode()) == spec
    assert json.loads(text)["specVersion"] == SPEC_VERSION
    assert spec_from_json(text).to_json() == text  # one spec, one text


@settings(max_examples=30)
@given(clauses=clause_lists())
def test_merge_clauses_are_grouped_in_deltas_order_keeping_each_groups_order(clauses: list[MergeClause]) -> None:
    spec = MergeSpec(
        target=TableRef("t"), source=MergeSource(parquet="p"), on="t.k = s.k", clauses=clauses, identity=IDENTITY
    )
    order = ("WHEN MATCHED", "WHEN NOT MATCHED", "WHEN NOT MATCHED BY SOURCE")
    assert [order.index(clause.group) for clause in spec.clauses] == sorted(
        order.index(clause.group) for clause in clauses
    )
    for group in order:
        assert [c for c in spec.clauses if c.group == group] == [c for c in clauses if c.group == group]


# ---------------------------------------------------------------------------------------
# Refusals: each names the field to fix.

IDENTITY = TaskIdentity("dag", "task", "run")
TABLE = TableRef("/tmp/table")
UPDATE = MergeClause(kind="matched_update", star=True)


def merge(**changes: Any) -> MergeSpec:
    arguments: dict[str, Any] = {
        "target": TABLE,
        "source": MergeSource(parquet="/tmp/source"),
        "on": "t.k = s.k",
        "clauses": [UPDATE],
        "identity": IDENTITY,
    }
    return MergeSpec(**{**arguments, **changes})


REFUSED: list[tuple[str, Callable[[], object], str]] = [
    ("TableRef.uri", lambda: TableRef(""), "non-blank"),
    ("TableRef.uri", lambda: TableRef(None), "non-blank"),  # type: ignore[arg-type]
    ("TableRef.version", lambda: TableRef("t", version=-1), ">= 0"),
    ("TableRef.version", lambda: TableRef("t", version=True), ">= 0"),
    ("TableRef.version", lambda: TableRef("t", version="3"), ">= 0"),  # type: ignore[arg-type]
    ("TableRef.storage_options", lambda: TableRef("t", storage_options={"k": 1}), "str -> str"),  # type: ignore[dict-item]
    ("TableRef.storage_options", lambda: TableRef("t", storage_options=[]), "str -> str"),  # type: ignore[arg-type]
    ("TaskIdentity.dag_id", lambda: TaskIdentity(" ", "t", "r"), "non-blank"),
    ("TaskIdentity.task_id", lambda: TaskIdentity("d", "", "r"), "non-blank"),
    ("TaskIdentity.run_id", lambda: TaskIdentity("d", "t", None), "non-blank"),  # type: ignore[arg-type]
    ("TaskIdentity.map_index", lambda: TaskIdentity("d", "t", "r", -2), ">= -1"),
    ("ExecutionOptions.max_attempts", lambda: ExecutionOptions(max_attempts=0), ">= 1"),
    ("ExecutionOptions.max_attempts", lambda: ExecutionOptions(max_attempts=2.0), ">= 1"),  # type: ignore[arg-type]
    ("ExecutionOptions.backoff_initial_seconds", lambda: ExecutionOptions(backoff_initial_seconds=-1), ">= 0"),
    ("ExecutionOptions.backoff_max_seconds", lambda: ExecutionOptions(backoff_max_seconds=float("inf")), "finite"),
    ("ExecutionOptions.backoff_max_seconds", lambda: ExecutionOptions(backoff_max_seconds=0.5), "at least"),
    ("ExecutionOptions.backoff_multiplier", lambda: ExecutionOptions(backoff_multiplier=0.5), ">= 1"),
    ("ExecutionOptions.use_deletion_vectors", lambda: ExecutionOptions(use_deletion_vectors=1), "True or False"),  # type: ignore[arg-type]
    ("DeleteSpec.table", lambda: DeleteSpec("t", None, IDENTITY), "TableRef"),  # type: ignore[arg-type]
    ("DeleteSpec.predicate", lambda: DeleteSpec(TABLE, "", IDENTITY), "non-blank"),
    ("DeleteSpec.identity", lambda: DeleteSpec(TABLE, None, None), "TaskIdentity"),  # type: ignore[arg-type]
    ("DeleteSpec.options", lambda: DeleteSpec(TABLE, None, IDENTITY, {}), "ExecutionOptions"),  # type: ignore[arg-type]
    ("UpdateSpec.set", lambda: UpdateSpec(TABLE, {}, None, IDENTITY), "at least one"),
    ("UpdateSpec.set", lambda: UpdateSpec(TABLE, {"a": "1", "A": "2"}, None, IDENTITY), "same column"),
    ("UpdateSpec.set['a']", lambda: UpdateSpec(TABLE, {"a": " "}, None, IDENTITY), "non-blank"),
    ("UpdateSpec.set", lambda: UpdateSpec(TABLE, {"": "1"}, None, IDENTITY), "not blank"),
    # a struct and one of its fields (names ignoring case): Delta's conflicting SET
    ("UpdateSpec.set", lambda: UpdateSpec(TABLE, {"a": "1", "A.b": "2"}, None, IDENTITY), "'a' and 'A.b' conflict"),
    ("UpdateSpec.set['a..b']", lambda: UpdateSpec(TABLE, {"a..b": "1"}, None, IDENTITY), "no empty name"),
    (
        "MergeClause.assignments",
        lambda: MergeClause(kind="matched_update", assignments={"s.x.y": "1", "s.x": "2"}),
        "'s.x.y' and 's.x' conflict",
    ),
    (
        "MergeClause.assignments",
        lambda: MergeClause(kind="not_matched_insert", assignments={"id": "1", "address.city": "'Oslo'"}),
        "top-level columns in an INSERT",
    ),
    ("UpdateSpec.predicate", lambda: UpdateSpec(TABLE, {"a": "1"}, 3, IDENTITY), "non-blank"),  # type: ignore[arg-type]
    ("MergeSource", lambda: MergeSource(), "exactly one of"),
    ("MergeSource", lambda: MergeSource(delta=TABLE, parquet="p"), "exactly one of"),
    ("MergeSource.delta", lambda: MergeSource(delta="t"), "TableRef"),  # type: ignore[arg-type]
    ("MergeSource.parquet", lambda: MergeSource(parquet=""), "non-blank"),
    ("MergeSource.views", lambda: MergeSource(parquet="p", views={"v": MergeSource(parquet="p")}), "query"),
    ("MergeSource.views", lambda: MergeSource(query="q", views={"1v": MergeSource(parquet="p")}), "identifier"),
    (
        "MergeSource.views",
        lambda: MergeSource(query="q", views={"v": MergeSource(parquet="p"), "V": MergeSource(parquet="p")}),
        "distinct",
    ),
    (
        "MergeSource.views['v']",
        lambda: MergeSource(query="q", views={"v": MergeSource(query="q")}),
        "not another query",
    ),
    ("MergeClause.kind", lambda: MergeClause(kind="matched_insert"), "one of"),  # type: ignore[arg-type]
    ("MergeClause.kind", lambda: MergeClause(kind=["matched_delete"]), "one of"),  # type: ignore[arg-type]
    ("MergeClause.condition", lambda: MergeClause(kind="matched_delete", condition=""), "non-blank"),
    ("MergeClause.star", lambda: MergeClause(kind="matched_update", star="yes"), "True or False"),  # type: ignore[arg-type]
    ("MergeClause.assignments", lambda: MergeClause(kind="matched_update"), "exactly one of"),
    (
        "MergeClause.assignments",
        lambda: MergeClause(kind="not_matched_insert", assignments={"a": "1"}, star=True),
        "exactly one of",
    ),
    ("MergeClause.assignments", lambda: MergeClause(kind="matched_update", assignments={}), "at least one"),
    (
        "MergeClause.assignments",
        lambda: MergeClause(kind="not_matched_insert", assignments={"a": "1", "A": "1"}),
        "same column",
    ),
    ("MergeClause.assignments", lambda: MergeClause(kind="matched_delete", assignments={"a": "1"}), "a DELETE assigns"),
    ("MergeClause.star", lambda: MergeClause(kind="not_matched_by_source_delete", star=True), "a DELETE assigns"),
    ("MergeClause.star", lambda: MergeClause(kind="not_matched_by_source_update", star=True), "no source row"),
    ("MergeClause.assignments", lambda: MergeClause(kind="not_matched_by_source_update"), "exactly one of"),
    ("MergeSpec.target", lambda: merge(target=None), "TableRef"),
    ("MergeSpec.source", lambda: merge(source=TABLE), "MergeSource"),
    ("MergeSpec.on", lambda: merge(on=""), "non-blank"),
    ("MergeSpec.source_alias", lambda: merge(source_alias="s rc"), "identifier"),
    ("MergeSpec.target_alias", lambda: merge(source_alias="x", target_alias="X"), "different"),
    ("MergeSpec.schema_evolution", lambda: merge(schema_evolution=None), "True or False"),
    ("MergeSpec.identity", lambda: merge(identity=("d", "t", "r")), "TaskIdentity"),
    ("MergeSpec.options", lambda: merge(options=None), "ExecutionOptions"),
    ("MergeSpec.clauses", lambda: merge(clauses=[]), "at least one"),
    ("MergeSpec.clauses", lambda: merge(clauses=UPDATE), "at least one"),
    ("MergeSpec.clauses[0]", lambda: merge(clauses=[{"kind": "matched_delete"}]), "MergeClause"),
    (
        "MergeSpec.clauses[0].condition",
        lambda: merge(clauses=[UPDATE, MergeClause(kind="matched_delete", condition="s.gone")]),
        "only the last WHEN MATCHED clause",
    ),
    (
        "MergeSpec.clauses[1].condition",
        lambda: merge(
            clauses=[
                MergeClause(kind="not_matched_by_source_delete"),
                MergeClause(kind="not_matched_insert", star=True),  # another group: fine
                MergeClause(kind="not_matched_insert", star=True),
            ]
        ),
        "only the last WHEN NOT MATCHED clause",
    ),
]


@pytest.mark.parametrize(
    ("field_name", "build", "expected"), REFUSED, ids=[f"{i}-{r[0]}" for i, r in enumerate(REFUSED)]
)
def test_invalid_fields_are_refused_by_name(field_name: str, build: Callable[[], object], expected: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        build()
    assert raised.value.argument == field_name
    assert str(raised.value).startswith(f"{field_name}=")
    assert expected in str(raised.value)


def test_an_unconditional_clause_last_in_each_group_is_accepted() -> None:
    spec = merge(
        clauses=[
            MergeClause(kind="matched_delete", condition="s.deleted"),
            MergeClause(kind="matched_update", star=True),
            MergeClause(kind="not_matched_insert", condition="s.k > 0", star=True),
            MergeClause(kind="not_matched_insert", assignments={"k": "s.k"}),
            MergeClause(kind="not_matched_by_source_update", condition="t.v > 0", assignments={"v": "0"}),
            MergeClause(kind="not_matched_by_source_delete"),
        ]
    )
    assert len(spec.clauses) == 6


def test_specs_copy_the_dicts_they_are_given() -> None:
    columns = {"a": "1"}
    spec = UpdateSpec(TABLE, columns, None, IDENTITY)
    columns["b"] = "2"
    assert spec.set == {"a": "1"}


# ---------------------------------------------------------------------------------------
# JSON refusals: versions, unknown keys, missing keys, wrong operation.

VALID_DELETE = json.loads(DeleteSpec(TABLE, "x > 1", IDENTITY).to_json())
VALID_MERGE = json.loads(
    merge(source=MergeSource(query="SELECT * FROM v", views={"v": MergeSource(delta=TABLE)})).to_json()
)


def changed(document: dict[str, Any], path: list[Any], value: Any) -> str:
    copy = json.loads(json.dumps(document))
    holder = copy
    for step in path[:-1]:
        holder = holder[step]
    if value is KeyError:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    return json.dumps(copy)


JSON_REFUSED: list[tuple[str, str, str]] = [
    ("not json", "spec", "a JSON document"),
    ("[]", "spec", "a JSON object"),
    (changed(VALID_DELETE, ["specVersion"], 2), "spec.specVersion", "reads no other"),
    (changed(VALID_DELETE, ["specVersion"], True), "spec.specVersion", "reads no other"),
    (changed(VALID_DELETE, ["specVersion"], 1.0), "spec.specVersion", "reads no other"),
    (changed(VALID_DELETE, ["operation"], ["delete"]), "spec.operation", "one of"),
    (changed(VALID_DELETE, ["specVersion"], KeyError), "spec.specVersion", "required"),
    (changed(VALID_DELETE, ["operation"], "drop"), "spec.operation", "one of"),
    (changed(VALID_DELETE, ["where"], "x > 1"), "spec.where", "unknown keys are refused"),
    (changed(VALID_DELETE, ["table", "versionAsOf"], 3), "spec.table.versionAsOf", "unknown keys"),
    (changed(VALID_DELETE, ["identity", "tryNumber"], 1), "spec.identity.tryNumber", "unknown keys"),
    (changed(VALID_DELETE, ["options", "retries"], 1), "spec.options.retries", "unknown keys"),
    (changed(VALID_DELETE, ["table"], KeyError), "spec.table", "required"),
    (changed(VALID_DELETE, ["table", "uri"], KeyError), "spec.table.uri", "required"),
    (changed(VALID_DELETE, ["identity", "runId"], KeyError), "spec.identity.runId", "required"),
    (changed(VALID_DELETE, ["table"], "t"), "spec.table", "a JSON object"),
    (changed(VALID_DELETE, ["table", "version"], "1"), "TableRef.version", ">= 0"),
    (changed(VALID_MERGE, ["clauses", 0, "then"], "x"), "spec.clauses[0].then", "unknown keys"),
    (changed(VALID_MERGE, ["clauses"], {}), "spec.clauses", "a JSON array"),
    (changed(VALID_MERGE, ["source", "views", "v", "format"], "csv"), "spec.source.views.v.format", "unknown keys"),
    (changed(VALID_MERGE, ["source", "views"], []), "spec.source.views", "a JSON object"),
    # A misspelt key is named as unknown, not reported as the key it was meant to be.
    (changed(VALID_MERGE, ["source"], {"parquett": "p"}), "spec.source.parquett", "unknown keys"),
    (
        changed(VALID_DELETE, ["identity"], {"dag_id": "d", "taskId": "t", "runId": "r"}),
        "spec.identity.dag_id",
        "unknown",
    ),
    (changed(VALID_MERGE, ["source", "query"], KeyError), "MergeSource", "exactly one of"),
]


@pytest.mark.parametrize(("text", "field_name", "expected"), JSON_REFUSED)
def test_invalid_json_is_refused_by_key(text: str, field_name: str, expected: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        spec_from_json(text)
    assert raised.value.argument == field_name
    assert expected in str(raised.value)


def test_a_spec_type_refuses_another_operations_json() -> None:
    with pytest.raises(InvalidArgumentError, match="'merge' for this spec type") as raised:
        MergeSpec.from_json(json.dumps(VALID_DELETE))
    assert raised.value.argument == "spec.operation"


def test_optional_keys_take_their_defaults() -> None:
    minimal = {
        "specVersion": SPEC_VERSION,
        "operation": "delete",
        "table": {"uri": "t"},
        "identity": {"dagId": "d", "taskId": "t", "runId": "r"},
    }
    assert DeleteSpec.from_json(json.dumps(minimal)) == DeleteSpec(TableRef("t"), None, TaskIdentity("d", "t", "r"))


# ---------------------------------------------------------------------------------------
# app_id: stable across processes, distinct for distinct identities.

APP_ID_IDENTITIES = [
    TaskIdentity("dag", "task", "manual__2026-01-01T00:00:00+00:00"),
    TaskIdentity("dag", "task", "manual__2026-01-01T00:00:00+00:00", 0),
    TaskIdentity("dag", "task", "manual__2026-01-01T00:00:00+00:00", 1),
    TaskIdentity("dag", "task2", "manual__2026-01-01T00:00:00+00:00"),
    TaskIdentity("dag2", "task", "manual__2026-01-01T00:00:00+00:00"),
    TaskIdentity("a:b", "c", "r"),
    TaskIdentity("a", "b:c", "r"),
    TaskIdentity("dåg", "tâsk", "rün"),
]


def test_app_id_is_stable_across_processes() -> None:
    here = [identity.app_id for identity in APP_ID_IDENTITIES]
    program = (
        "import json, sys\n"
        "from airflow_delta.spark.specs import TaskIdentity\n"
        "for fields in json.loads(sys.stdin.read()):\n"
        "    print(TaskIdentity(*fields).app_id)\n"
    )
    fields = [[i.dag_id, i.task_id, i.run_id, i.map_index] for i in APP_ID_IDENTITIES]
    # A different hash seed in the child: a salted hash() would give another answer.
    result = subprocess.run(
        [sys.executable, "-c", program],
        input=json.dumps(fields),
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert result.stdout.split() == here


def test_app_ids_are_prefixed_and_distinct() -> None:
    app_ids = [identity.app_id for identity in APP_ID_IDENTITIES]
    assert len(set(app_ids)) == len(app_ids)
    assert all(app_id.startswith("airflow-delta:") for app_id in app_ids)
    # A fixed known value: changing the derivation would break exactly-once for runs in flight.
    assert TaskIdentity("d", "t", "r").app_id == (
        "airflow-delta:6481285a0582a2a2ab6379e3fc50c34d305a32003ec261e34c0c03188865198d"
    )


@settings(max_examples=50)
@given(first=identities, second=identities)
def test_app_id_differs_exactly_when_identities_differ(first: TaskIdentity, second: TaskIdentity) -> None:
    assert (first.app_id == second.app_id) == (first == second)


def test_specs_import_neither_pyspark_nor_airflow() -> None:
    # The operators import the specs in the Airflow worker and the job on the driver: neither
    # side may pay for (or depend on) the other's framework.
    program = (
        "import sys\n"
        "import airflow_delta.spark.specs\n"
        "print(sorted({n.split('.')[0] for n in sys.modules} & {'pyspark', 'airflow', 'py4j', 'sqlglot'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
