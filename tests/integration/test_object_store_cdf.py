"""Change data on object stores: the engine's DELETE writes its cdc files through the store's FileIO.

Runs on moto's S3 server and on Azurite (the ``object_store`` fixture); delta-rs reads
the change feed and the table over the same server.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from tests.object_store_helpers import ObjectStoreServer
from tests.oracles import read_with_deltars

deltalake = pytest.importorskip("deltalake")

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


@pytest.mark.parametrize("dvs", ["true", "false"], ids=["deletion-vectors", "rewrite"])
def test_delete_change_data_on_an_object_store(object_store: ObjectStoreServer, dvs: str) -> None:
    options = object_store.storage_options
    table = DeltaTable.create(
        object_store.uri(), SCHEMA, partition_by=["p"], storage_options=options,
        properties={"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": dvs},
    )
    table.append(pa.table({"id": list(range(12)), "p": ["a", "b", "c"] * 4}, schema=SCHEMA))
    result = table.delete("id % 4 = 1")
    assert result.version is not None and result.metrics["numAddedChangeFiles"] == 3
    feed = pa.table(
        deltalake.DeltaTable(table.table_uri, storage_options=options)
        .load_cdf(starting_version=result.version, ending_version=result.version)
        .read_all()
    )
    changes: list[dict[str, Any]] = feed.select(["id", "p", "_change_type"]).to_pylist()
    assert sorted(changes, key=lambda row: row["id"]) == [
        {"id": i, "p": "abc"[i % 3], "_change_type": "delete"} for i in (1, 5, 9)
    ]
    expected = [{"id": i, "p": "abc"[i % 3]} for i in range(12) if i % 4 != 1]
    assert sorted(read_with_deltars(table.table_uri, storage_options=options), key=lambda row: row["id"]) == expected
