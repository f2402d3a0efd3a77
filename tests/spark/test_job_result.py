"""JobResult: its JSON round trip and its reconstruction from a commit in the log."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_delta.engine import DeltaTable, InvalidArgumentError
from airflow_delta.spark.job_result import TAG_APP_ID, TAG_ATTEMPTS, JobResult, find_job_commit

_metric_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=20)


@given(
    version=st.none() | st.integers(min_value=0, max_value=2**40),
    read_version=st.integers(min_value=0, max_value=2**40),
    operation=st.sampled_from(["DELETE", "UPDATE", "MERGE"]),
    metrics=st.dictionaries(_metric_names, st.integers(min_value=0, max_value=2**62), max_size=8),
    attempts=st.integers(min_value=1, max_value=100),
)
def test_json_round_trip(version, read_version, operation, metrics, attempts) -> None:
    result = JobResult(version, read_version, operation, metrics, attempts)
    assert JobResult.from_json(result.to_json()) == result


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"version": -1}, "JobResult.version"),
        ({"read_version": None}, "JobResult.read_version"),
        ({"operation": ""}, "JobResult.operation"),
        ({"attempts": 0}, "JobResult.attempts"),
        ({"metrics": {"numDeletedRows": "3"}}, "JobResult.metrics"),
    ],
)
def test_bad_fields_are_refused_by_name(kwargs: dict, argument: str) -> None:
    fields = {"version": 1, "read_version": 0, "operation": "DELETE", "metrics": {}, "attempts": 1} | kwargs
    with pytest.raises(InvalidArgumentError) as info:
        JobResult(**fields)
    assert info.value.argument == argument


def test_unknown_json_keys_are_refused() -> None:
    text = JobResult(1, 0, "DELETE").to_json().replace('"attempts"', '"attempt"')
    with pytest.raises(InvalidArgumentError):
        JobResult.from_json(text)


def test_result_is_rebuilt_from_the_tagged_commit(table_path: str) -> None:
    table = DeltaTable.create(table_path, pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))
    with table.transaction() as txn:
        txn.remove_files(txn.read_files())
        txn.commit(
            "DELETE",
            {"predicate": []},
            {"numDeletedRows": 3, "numRemovedFiles": 1},
            tags={TAG_APP_ID: "airflow-delta:abc", TAG_ATTEMPTS: "2"},
        )
    table.append(pa.table({"id": [4]}))  # a later commit of another writer
    found = find_job_commit(table, "airflow-delta:abc")
    assert found == JobResult(2, 1, "DELETE", {"numDeletedRows": 3, "numRemovedFiles": 1}, 2)
    assert find_job_commit(table, "airflow-delta:other") is None
