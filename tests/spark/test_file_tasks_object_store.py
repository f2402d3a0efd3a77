"""Spark executors reading and writing a table on an object store through the engine's FileIO.

No Hadoop connector is on the classpath: each executor unpickles a ``TableContext`` (URI
and delta-rs storage options) and reads the data files, deletion vectors applied, and
writes new ones through ``ObjectStoreFileIO`` (obstore). The driver commits; delta-rs,
given the same options, reads the result.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.spark.file_tasks import target_dataframe, write_dataframe
from tests.object_store_helpers import ObjectStoreServer
from tests.oracles import read_with_deltars

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()), pa.field("p", pa.string())])


def test_executors_read_and_write_a_table_on_an_object_store(spark, object_store: ObjectStoreServer) -> None:
    options = object_store.storage_options
    table = DeltaTable.create(object_store.uri(), SCHEMA, partition_by=["p"], storage_options=options,
                              properties={"delta.enableDeletionVectors": "true"})
    table.append(pa.Table.from_pylist([{"id": i, "name": f"n{i}", "p": "ab"[i % 2]} for i in range(40)], schema=SCHEMA))
    assert table.delete("id % 4 = 0").metrics["numDeletionVectorsAdded"] == 1  # all in partition a
    expected = [{"id": i, "name": f"n{i}", "p": "ab"[i % 2]} for i in range(40) if i % 4]

    snapshot = table.snapshot()
    frame = target_dataframe(spark, table.context(snapshot), snapshot.add_actions, columns=["id", "name", "p"])
    assert sorted(row["id"] for row in frame.collect()) == [r["id"] for r in expected]

    data = spark.createDataFrame([(i, f"n{i}", "ab"[i % 2]) for i in range(100, 110)], "id long, name string, p string")
    with table.transaction(snapshot=snapshot) as txn:
        adds = write_dataframe(table.context(snapshot), data)
        txn.add_files(adds, written_for_this_commit=True)
        txn.commit("WRITE")
    expected += [{"id": i, "name": f"n{i}", "p": "ab"[i % 2]} for i in range(100, 110)]
    theirs = read_with_deltars(table.table_uri, storage_options=options)
    assert sorted(theirs, key=lambda r: r["id"]) == sorted(expected, key=lambda r: r["id"])
