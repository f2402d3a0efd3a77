"""The operators on tables in object stores: moto's S3 server and Azurite, from a task.

Each test runs once per store (the ``object_store`` fixture). The operators reach the
table only through Airflow connections given as ``AIRFLOW_CONN_*`` variables: a ``delta``
connection carrying the storage options, or naming an Airflow ``aws`` / ``wasb``
connection (``storage_conn_id``) that the hook maps to them. After every operator,
delta-rs, reading from the same server with its own client, must read exactly the rows
an independent model of the table says are there.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable, InvalidArgumentError, ObjectStoreFileIO
from airflow_delta.hooks.delta import DeltaHook
from airflow_delta.operators.dml import DeltaDeleteOperator
from airflow_delta.operators.maintenance import CheckpointOperator, OptimizeOperator, VacuumOperator
from tests.airflow_layer import SCHEMA, context, set_connection, tiny_job_driver_conf
from tests.object_store_helpers import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    MOTO_KEY_ID,
    MOTO_REGION,
    MOTO_SECRET,
    ObjectStoreServer,
)
from tests.oracles import read_with_deltars

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("airflow_home")]


def _make_table(server: ObjectStoreServer, rows: int = 20) -> tuple[str, list[dict[str, Any]]]:
    """A table partitioned by ``part`` (a/b) with deletion vectors, written in two appends."""
    uri = server.uri()
    table = DeltaTable.create(uri, SCHEMA, partition_by=["part"], storage_options=server.storage_options,
                              properties={"delta.enableDeletionVectors": "true"})
    data = [{"id": i, "part": "ab"[i % 2], "value": f"v{i}"} for i in range(rows)]
    table.append(pa.Table.from_pylist(data[: rows // 2], schema=SCHEMA))
    table.append(pa.Table.from_pylist(data[rows // 2 :], schema=SCHEMA))
    return uri, data


def _assert_deltars_reads(server: ObjectStoreServer, uri: str, expected: list[dict[str, Any]]) -> None:
    theirs = read_with_deltars(uri, storage_options=server.storage_options)
    assert sorted(r["id"] for r in theirs) == sorted(r["id"] for r in expected)
    assert sorted(theirs, key=lambda r: r["id"]) == sorted(expected, key=lambda r: r["id"])


def _table_keys(server: ObjectStoreServer, uri: str) -> set[str]:
    prefix = server.key_of(uri) + "/"
    return {key[len(prefix):] for key in server.keys(prefix)}


def _native_connection(server: ObjectStoreServer) -> dict[str, Any]:
    """The Airflow connection a user of the amazon / microsoft-azure provider has for this server."""
    if server.kind == "s3":
        return {"conn_type": "aws", "login": MOTO_KEY_ID, "password": MOTO_SECRET,
                "extra": {"region_name": MOTO_REGION, "endpoint_url": server.endpoint}}
    return {"conn_type": "wasb", "extra": {"connection_string": (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={server.endpoint};")}}


def test_delete_optimize_vacuum_and_checkpoint_operators_on_an_object_store(
    object_store: ObjectStoreServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = object_store
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "local[2]"})
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": {
        "spark_conn_id": "spark_local", "storage_options": server.storage_options, "spark_conf": tiny_job_driver_conf()}})
    uri, rows = _make_table(server)

    # DELETE in the worker (deletion vectors), then on Spark local mode through the hook.
    result = DeltaDeleteOperator(task_id="d1", table=uri, predicate="id = 3", execution="worker").execute(context())
    assert (result["version"], result["metrics"]["numDeletedRows"]) == (3, 1)
    rows = [r for r in rows if r["id"] != 3]
    _assert_deltars_reads(server, uri, rows)
    result = DeltaDeleteOperator(
        task_id="d2", table=uri, predicate="part = 'a' AND id >= 10", execution="spark", use_deletion_vectors=False
    ).execute(context(task_id="d2"))
    assert (result["version"], result["metrics"]["numDeletedRows"]) == (4, 5)
    rows = [r for r in rows if not (r["part"] == "a" and r["id"] >= 10)]
    _assert_deltars_reads(server, uri, rows)

    # OPTIMIZE in the worker: every partition's files (DVs applied) into one.
    result = OptimizeOperator(task_id="o", table=uri).execute(context(task_id="o"))
    assert (result["execution"], result["version"]) == ("worker", 5)
    assert len(DeltaTable(uri, server.storage_options).snapshot().add_actions) == 2
    _assert_deltars_reads(server, uri, rows)

    # VACUUM: the files OPTIMIZE and the rewriting DELETE removed, and the DV files, go.
    tombstoned = {p for p in DeltaTable(uri, server.storage_options).snapshot().tombstones.column("path").to_pylist()}
    assert tombstoned <= _table_keys(server, uri)
    result = VacuumOperator(
        task_id="v", table=uri, retention=timedelta(0), enforce_retention_duration=False
    ).execute(context(task_id="v"))
    assert result["metrics"]["numDeletedFiles"] >= len(tombstoned) and (result["start_version"], result["end_version"]) == (6, 7)
    keys = _table_keys(server, uri)
    assert not tombstoned & keys
    assert not any(k.startswith("deletion_vector_") for k in keys), "the DV files of removed files are vacuumed"
    _assert_deltars_reads(server, uri, rows)

    # CHECKPOINT of the latest version: written where delta-rs and we both start from it.
    result = CheckpointOperator(task_id="c", table=uri).execute(context(task_id="c"))
    assert result["version"] == 7
    assert f"_delta_log/{7:020d}.checkpoint.parquet" in _table_keys(server, uri)
    assert DeltaTable(uri, server.storage_options).snapshot().log_segment.checkpoint_version == 7
    _assert_deltars_reads(server, uri, rows)


def test_operators_reach_the_store_through_an_aws_or_wasb_connection(
    object_store: ObjectStoreServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = object_store
    uri, rows = _make_table(server)
    set_connection(monkeypatch, "store", _native_connection(server))
    # The delta connection names the storage connection...
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"storage_conn_id": "store"}})
    result = DeltaDeleteOperator(task_id="d", table=uri, predicate="id < 4", execution="worker").execute(context())
    assert result["metrics"]["numDeletedRows"] == 4
    rows = [r for r in rows if r["id"] >= 4]
    _assert_deltars_reads(server, uri, rows)
    # ...or the operator does, over a delta connection that holds nothing about storage.
    set_connection(monkeypatch, "delta_bare", {"conn_type": "delta"})
    result = CheckpointOperator(
        task_id="c", table=uri, delta_conn_id="delta_bare", storage_conn_id="store"
    ).execute(context(task_id="c"))
    assert result["version"] == 3
    _assert_deltars_reads(server, uri, rows)


def test_the_hook_maps_a_gcp_connection_and_refuses_other_types(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key, other_key = tmp_path / "sa.json", tmp_path / "other.json"
    set_connection(monkeypatch, "gcp", {"conn_type": "google_cloud_platform", "extra": {"key_path": str(key)}})
    set_connection(monkeypatch, "delta_gcs", {"conn_type": "delta", "extra": {"storage_conn_id": "gcp"}})
    hook = DeltaHook("delta_gcs")
    assert hook.settings.storage_options == {"GOOGLE_SERVICE_ACCOUNT": str(key)}
    assert isinstance(hook.table("gs://bucket/t").location.io, ObjectStoreFileIO)
    # The delta connection's own storage options win, key by key.
    set_connection(monkeypatch, "delta_gcs", {"conn_type": "delta", "extra": {
        "storage_conn_id": "gcp", "storage_options": {"GOOGLE_SERVICE_ACCOUNT": str(other_key), "max_retries": "2"}}})
    assert DeltaHook("delta_gcs").settings.storage_options == {"GOOGLE_SERVICE_ACCOUNT": str(other_key), "max_retries": "2"}

    set_connection(monkeypatch, "pg", {"conn_type": "postgres", "host": "db"})
    with pytest.raises(InvalidArgumentError, match=r"connection 'pg' conn_type.*aws, wasb, adls, google_cloud_platform"):
        _ = DeltaHook("delta_default", storage_conn_id="pg").settings
