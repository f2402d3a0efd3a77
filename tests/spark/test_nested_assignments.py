"""UPDATE and MERGE SET of struct fields, as Delta does them, read back by delta-rs and delta-kernel-rs.

The expected rows come from a plain Python model of Delta's rule
(``UpdateExpressionsSupport.generateUpdateExpressions``): a struct with SET fields is
rebuilt with its other fields kept, a NULL struct becomes a struct whose unset fields
are NULL, and every SET reads the row's old values.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import ConstraintViolationError, DeltaTable, InvalidArgumentError
from airflow_delta.spark.merge import run_merge
from airflow_delta.spark.merge_sql import merge_spec_from_sql
from airflow_delta.spark.specs import (
    ExecutionOptions,
    MergeClause,
    MergeSource,
    MergeSpec,
    TableRef,
    TaskIdentity,
    UpdateSpec,
)
from airflow_delta.spark.update import run_update
from tests.oracles import assert_oracles_read

pytestmark = pytest.mark.slow

GEO = pa.struct([("lat", pa.float64()), ("lon", pa.float64())])
ADDRESS = pa.struct([("city", pa.string()), ("zip", pa.int32()), ("geo", GEO)])
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("address", ADDRESS),
        ("tags", pa.list_(pa.struct([("k", pa.string())]))),
        ("attrs", pa.map_(pa.string(), pa.string())),
    ]
)
Row = dict[str, Any]
_tasks = itertools.count()


def _identity() -> TaskIdentity:
    return TaskIdentity("nested", f"task-{next(_tasks)}", "run")


def _options(**options: Any) -> ExecutionOptions:
    return ExecutionOptions(backoff_initial_seconds=0.0, backoff_max_seconds=0.0, **options)


def _row(i: int) -> Row:
    """Every shape a SET meets: a whole address, a NULL address, a NULL geo inside one, NULL fields."""
    if i % 5 == 4:
        address = None
    else:
        geo = None if i % 5 == 3 else {"lat": float(i), "lon": -float(i)}
        address = {"city": None if i % 5 == 2 else f"c{i}", "zip": 1000 + i, "geo": geo}
    return {"id": i, "address": address, "tags": [{"k": f"t{i}"}], "attrs": [("a", str(i))]}


ROWS = [_row(i) for i in range(12)]


def _create(path: Path, *, dvs: bool, column_mapping: bool, schema: pa.Schema = SCHEMA, rows: Sequence[Row] = ROWS) -> DeltaTable:
    properties = {"delta.enableDeletionVectors": "true" if dvs else "false"}
    if column_mapping:
        properties["delta.columnMapping.mode"] = "name"
    table = DeltaTable.create(str(path), schema, [], properties)
    half = len(rows) // 2  # two files: a statement touches some rows of each
    for part in (rows[:half], rows[half:]):
        table.append(pa.Table.from_pylist(list(part), schema))
    return table


# ---------------------------------------------------------------------------------------
# The model: Delta's nested SET on plain Python rows

FIELDS = {(): ["id", "address", "tags", "attrs"], ("address",): ["city", "zip", "geo"], ("address", "geo"): ["lat", "lon"]}


def _set(row: Row, path: tuple[str, ...], value: Any) -> None:
    """Assign ``value`` at ``path`` of ``row``, turning a NULL struct on the way into one of NULL fields."""
    node = row
    for depth, name in enumerate(path[:-1]):
        if node[name] is None:
            node[name] = dict.fromkeys(FIELDS[path[: depth + 1]])
        node = node[name]
    node[path[-1]] = value


def _get(row: Row, *path: str) -> Any:
    value: Any = row
    for name in path:
        value = None if value is None else value[name]
    return value


def model_update(row: Row, sets: Sequence[tuple[tuple[str, ...], Callable[[Row], Any]]]) -> Row:
    new = copy.deepcopy(row)
    for path, value in [(path, fn(row)) for path, fn in sets]:  # every value from the old row
        _set(new, path, value)
    return new


def _plus(a: Any, b: float) -> Any:
    return None if a is None else a + b


# (SET, predicate, model of the SETs by lower-case path, model of the predicate)
UPDATES: list[tuple[dict[str, str], str | None, list[tuple[tuple[str, ...], Callable[[Row], Any]]], Callable[[Row], Any]]] = [
    ({"address.city": "'Oslo'"}, "id % 3 = 0", [(("address", "city"), lambda r: "Oslo")], lambda r: r["id"] % 3 == 0),
    (
        # several fields of one struct combine, names match ignoring case, two levels deep, a bigint into an int field
        {"ADDRESS.Zip": "id * 10", "address.GEO.lat": "1.5"},
        "id > 4",
        [(("address", "zip"), lambda r: r["id"] * 10), (("address", "geo", "lat"), lambda r: 1.5)],
        lambda r: r["id"] > 4,
    ),
    (
        # values read the old row, including the fields being set
        {"address.geo.lon": "address.geo.lat + 1", "address.city": "upper(address.city)", "address.geo.lat": "address.geo.lon"},
        None,
        [
            (("address", "geo", "lon"), lambda r: _plus(_get(r, "address", "geo", "lat"), 1)),
            (("address", "city"), lambda r: None if _get(r, "address", "city") is None else _get(r, "address", "city").upper()),
            (("address", "geo", "lat"), lambda r: _get(r, "address", "geo", "lon")),
        ],
        lambda r: True,
    ),
    (
        # a whole inner struct beside a top-level column; the predicate reads a nested field (NULL: left alone)
        {"address.geo": "named_struct('lat', 0.0D, 'lon', 0.5D)", "id": "id + 100"},
        "address.zip < 1008",
        [(("address", "geo"), lambda r: {"lat": 0.0, "lon": 0.5}), (("id",), lambda r: r["id"] + 100)],
        lambda r: None if _get(r, "address", "zip") is None else _get(r, "address", "zip") < 1008,
    ),
]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(statement=st.sampled_from(range(len(UPDATES))), dvs=st.booleans(), column_mapping=st.booleans(), in_driver=st.booleans())
def test_update_of_struct_fields_keeps_the_other_fields(
    spark: Any, tmp_path_factory: Any, statement: int, dvs: bool, column_mapping: bool, in_driver: bool
) -> None:
    assignments, predicate, sets, matches = UPDATES[statement]
    path = tmp_path_factory.mktemp("nested-update") / "t"
    _create(path, dvs=dvs, column_mapping=column_mapping)
    options = _options() if in_driver else _options(driver_max_bytes=0)
    result = run_update(spark, UpdateSpec(TableRef(str(path)), assignments, predicate, _identity(), options))
    expected = [model_update(r, sets) if matches(r) is True else r for r in ROWS]
    assert result.metrics["numUpdatedRows"] == sum(1 for r in ROWS if matches(r) is True)
    assert_oracles_read(path, expected)


def test_a_null_struct_with_a_field_set_becomes_a_struct_of_nulls(spark: Any, tmp_path: Path) -> None:
    # Delta builds the struct whatever it was: the NULL address of row 4 becomes {city: 'X', zip: NULL, geo: NULL}.
    # Column mapping: the rewritten file holds the nested fields' physical names, or the readers would see NULLs.
    _create(tmp_path / "t", dvs=False, column_mapping=True)
    run_update(spark, UpdateSpec(TableRef(str(tmp_path / "t")), {"address.city": "'X'"}, "id = 4", _identity(), _options()))
    expected = [r | {"address": {"city": "X", "zip": None, "geo": None}} if r["id"] == 4 else r for r in ROWS]
    assert_oracles_read(tmp_path / "t", expected)


@pytest.mark.parametrize(
    ("assignments", "argument", "says"),
    [
        ({"address.country": "'NO'"}, "UpdateSpec.set['address.country']", "a field of the struct address, one of"),
        ({"address.geo.alt": "1"}, "UpdateSpec.set['address.geo.alt']", "address.geo.lon"),
        ({"nowhere.x": "1"}, "UpdateSpec.set['nowhere.x']", "a column of the table"),
        ({"tags.k": "'x'"}, "UpdateSpec.set['tags.k']", "tags is array<struct<k:string>>"),
        ({"attrs.a": "'x'"}, "UpdateSpec.set['attrs.a']", "attrs is map<string,string>"),
        ({"id.x": "1"}, "UpdateSpec.set['id.x']", "id is bigint"),
        ({"address.zip": "'abc'"}, "UpdateSpec.set['address.zip']", "address.zip (int)"),  # store assignment
        ({"address.geo": "named_struct('lat', 'far')"}, "UpdateSpec.set['address.geo']", "address.geo"),
    ],
)
def test_bad_nested_sets_fail_before_any_write(spark: Any, tmp_path: Path, assignments: dict[str, str], argument: str, says: str) -> None:
    table = _create(tmp_path / "t", dvs=True, column_mapping=False, rows=ROWS[:2])
    with pytest.raises(InvalidArgumentError) as caught:
        run_update(spark, UpdateSpec(TableRef(str(tmp_path / "t")), assignments, None, _identity(), _options()))
    assert caught.value.argument == argument
    assert says in str(caught.value)
    assert table.version() == 2


def test_a_value_that_overflows_its_field_fails_and_commits_nothing(spark: Any, tmp_path: Path) -> None:
    table = _create(tmp_path / "t", dvs=False, column_mapping=False, rows=ROWS[:2])
    files_before = {p.name for p in (tmp_path / "t").iterdir() if p.suffix == ".parquet"}
    with pytest.raises(InvalidArgumentError, match="CAST_OVERFLOW"):
        spec = UpdateSpec(TableRef(str(tmp_path / "t")), {"address.zip": "3000000000 + id"}, None, _identity(), _options())
        run_update(spark, spec)
    assert table.version() == 2
    assert {p.name for p in (tmp_path / "t").iterdir() if p.suffix == ".parquet"} == files_before
    assert_oracles_read(tmp_path / "t", ROWS[:2])


def test_not_null_fields_are_checked_inside_the_rebuilt_struct(spark: Any, tmp_path: Path) -> None:
    # city NOT NULL: setting zip of a NULL address would build {city: NULL, zip: 1}, which Delta refuses.
    inner = pa.struct([pa.field("city", pa.string(), nullable=False), ("zip", pa.int32())])
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("address", inner)])
    rows = [{"id": 1, "address": {"city": "a", "zip": 1}}, {"id": 2, "address": None}]
    table = _create(tmp_path / "t", dvs=True, column_mapping=False, schema=schema, rows=rows)
    spec = UpdateSpec(TableRef(str(tmp_path / "t")), {"address.zip": "7"}, "id = 1", _identity(), _options())
    run_update(spark, spec)
    with pytest.raises(ConstraintViolationError, match=r"address\.city"):
        run_update(spark, UpdateSpec(TableRef(str(tmp_path / "t")), {"address.zip": "7"}, "id = 2", _identity(), _options()))
    # A whole struct with a NULL in its NOT NULL field reaches the same check (not an analyzer error).
    whole = {"address": "named_struct('city', CAST(NULL AS STRING), 'zip', 1)"}
    with pytest.raises(ConstraintViolationError, match=r"address\.city"):
        run_update(spark, UpdateSpec(TableRef(str(tmp_path / "t")), whole, "id = 1", _identity(), _options()))
    assert table.version() == 3
    assert_oracles_read(tmp_path / "t", [{"id": 1, "address": {"city": "a", "zip": 7}}, rows[1]])


# ---------------------------------------------------------------------------------------
# MERGE

SOURCE_SCHEMA = pa.schema([("id", pa.int64()), ("city", pa.string()), ("lat", pa.float64())])
SOURCE_ROWS = [
    {"id": 0, "city": "s0", "lat": 0.25},
    {"id": 3, "city": None, "lat": 3.25},  # matched, city NULL: deleted
    {"id": 4, "city": "s4", "lat": 4.25},  # matched with a NULL address: built from NULLs
    {"id": 8, "city": "s8", "lat": None},
    {"id": 50, "city": "s50", "lat": 50.25},  # not matched: inserted
]


def _constant(value: Any) -> Callable[[Row], Any]:
    return lambda _row: value


def model_merge(target: Sequence[Row], source: Sequence[Row]) -> list[Row]:
    """The MERGE of :data:`MERGE_CLAUSES` on plain rows."""
    by_id = {s["id"]: s for s in source}
    out = []
    for row in target:
        s = by_id.get(row["id"])
        if s is not None and s["city"] is None:
            continue  # WHEN MATCHED AND s.city IS NULL THEN DELETE
        if s is not None:
            out.append(model_update(row, [(("address", "city"), _constant(s["city"])), (("address", "geo", "lat"), _constant(s["lat"]))]))
        elif row["id"] % 2 == 1:
            out.append(model_update(row, [(("address", "zip"), _constant(-1))]))  # NOT MATCHED BY SOURCE
        else:
            out.append(row)
    target_ids = {r["id"] for r in target}
    for s in source:
        if s["id"] not in target_ids:
            address = {"city": s["city"], "zip": 0, "geo": {"lat": s["lat"], "lon": None}}
            out.append({"id": s["id"], "address": address, "tags": None, "attrs": None})
    return out


MERGE_SQL = """
    MERGE INTO people t USING updates s ON t.id = s.id
    WHEN MATCHED AND s.city IS NULL THEN DELETE
    WHEN MATCHED THEN UPDATE SET t.address.city = s.city, Address.GEO.lat = s.lat
    WHEN NOT MATCHED THEN INSERT (id, address)
        VALUES (s.id, named_struct('city', s.city, 'zip', 0, 'geo', named_struct('lat', s.lat, 'lon', CAST(NULL AS DOUBLE))))
    WHEN NOT MATCHED BY SOURCE AND t.id % 2 = 1 THEN UPDATE SET t.address.zip = -1
"""


@pytest.mark.parametrize(("dvs", "column_mapping", "as_sql"), [(True, False, True), (False, True, False)])
def test_merge_sets_struct_fields_as_delta_does(spark: Any, tmp_path: Path, dvs: bool, column_mapping: bool, as_sql: bool) -> None:
    target = tmp_path / "t"
    _create(target, dvs=dvs, column_mapping=column_mapping)
    pq.write_table(pa.Table.from_pylist(SOURCE_ROWS, SOURCE_SCHEMA), tmp_path / "s.parquet")
    source = MergeSource(parquet=str(tmp_path / "s.parquet"))
    if as_sql:
        spec = merge_spec_from_sql(
            MERGE_SQL, target=TableRef(str(target)), sources={"updates": source}, identity=_identity(), options=_options()
        )
    else:
        insert = "named_struct('city', s.city, 'zip', 0, 'geo', named_struct('lat', s.lat, 'lon', CAST(NULL AS DOUBLE)))"
        clauses = (
            MergeClause("matched_delete", "s.city IS NULL"),
            MergeClause("matched_update", assignments={"address.city": "s.city", "Address.GEO.lat": "s.lat"}),
            MergeClause("not_matched_insert", assignments={"id": "s.id", "address": insert}),
            MergeClause("not_matched_by_source_update", "t.id % 2 = 1", assignments={"address.zip": "-1"}),
        )
        spec = MergeSpec(
            target=TableRef(str(target)), source=source, on="t.id = s.id", clauses=clauses, identity=_identity(),
            source_alias="s", target_alias="t", options=_options(),
        )
    result = run_merge(spark, spec)
    assert result.metrics["numTargetRowsMatchedUpdated"] == 3
    assert result.metrics["numTargetRowsInserted"] == 1
    assert_oracles_read(target, model_merge(ROWS, SOURCE_ROWS))


@pytest.mark.parametrize(
    ("assignments", "says"),
    [
        ({"address.country": "s.city"}, "a field of the struct address"),
        ({"tags.k": "s.city"}, "tags is array<struct<k:string>>"),
    ],
)
def test_merge_refuses_fields_the_target_cannot_set(spark: Any, tmp_path: Path, assignments: dict[str, str], says: str) -> None:
    table = _create(tmp_path / "t", dvs=True, column_mapping=False, rows=ROWS[:2])
    pq.write_table(pa.Table.from_pylist(SOURCE_ROWS, SOURCE_SCHEMA), tmp_path / "s.parquet")
    spec = MergeSpec(
        target=TableRef(str(tmp_path / "t")), source=MergeSource(parquet=str(tmp_path / "s.parquet")), on="t.id = s.id",
        clauses=(MergeClause("matched_update", assignments=assignments),), identity=_identity(),
        source_alias="s", target_alias="t", options=_options(),
    )
    with pytest.raises(InvalidArgumentError) as caught:
        run_merge(spark, spec)
    assert caught.value.argument == f"MergeSpec.clauses[0].assignments[{next(iter(assignments))!r}]"
    assert says in str(caught.value)
    assert table.version() == 2
