"""OptimizeSpec (spark/specs.py): JSON round trips and the engine's checks on its fields."""

from __future__ import annotations

import json

import pytest

from airflow_delta.engine import InvalidArgumentError
from airflow_delta.spark.specs import OptimizeSpec, TableRef, TaskIdentity, spec_from_json

IDENTITY = TaskIdentity("dag", "task", "run")


def test_round_trip_and_layout() -> None:
    spec = OptimizeSpec(
        TableRef("/data/t", storage_options={"k": "v"}), IDENTITY, where="day >= '2024-01-01'",
        zorder_by=("a", "b"), max_file_size=1 << 28, max_files=1000, batch_size=1 << 30, dry_run=True,
    )
    text = spec.to_json()
    document = json.loads(text)
    assert document["operation"] == "optimize" and document["specVersion"] == 1
    assert document["zorderBy"] == ["a", "b"] and document["maxFileSize"] == 1 << 28 and document["dryRun"] is True
    assert spec_from_json(text) == spec == OptimizeSpec.from_json(text)
    assert OptimizeSpec.from_json(OptimizeSpec(TableRef("/t"), IDENTITY).to_json()).optimize_options().max_deleted_rows_ratio == 0.05


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"maxFileSize": 0}, "max_file_size"),
        ({"maxDeletedRowsRatio": 2}, "max_deleted_rows_ratio"),
        ({"zorderBy": "a"}, "spec.zorderBy"),
        ({"zOrderBy": ["a"]}, "spec.zOrderBy"),
        ({"table": {"uri": "/t", "version": 3}}, "OptimizeSpec.table.version"),
        ({"where": " "}, "OptimizeSpec.where"),
    ],
)
def test_bad_fields_are_refused_by_name(change: dict[str, object], field: str) -> None:
    document = json.loads(OptimizeSpec(TableRef("/t"), IDENTITY).to_json())
    document.update(change)
    with pytest.raises(InvalidArgumentError) as raised:
        spec_from_json(json.dumps(document))
    assert field in str(raised.value)
