"""Spark's Murmur3 string hash, which assigns file actions to the parts of a multi-part checkpoint."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from airflow_delta.engine.checkpoint.spark_hash import spark_murmur3_strings, spark_partition_ids


def test_murmur3_matches_spark_sql_hash() -> None:
    # Values from Spark's documentation of pyspark.sql.functions.hash.
    abc = spark_murmur3_strings(pa.array(["ABC"]))
    assert abc.tolist() == [-757602832]
    assert spark_murmur3_strings(pa.array(["DEF"]), abc.astype(np.int64)).tolist() == [599895104]
    # A null keeps the seed (Spark skips null columns).
    assert spark_murmur3_strings(pa.array([None], pa.string())).tolist() == [42]



def test_partition_ids_are_the_non_negative_hash_modulo_the_part_count() -> None:
    # hash("ABC") = -757602832: Spark's pmod gives 3 of 5, not -2.
    paths = pa.array(["ABC", "ABC"])
    assert spark_partition_ids(paths, None, 5).tolist() == [3, 3]
    # With a DV id the path's hash seeds the DV id's hash: hash("ABC", "DEF") = 599895104, 4 of 5.
    assert spark_partition_ids(paths, pa.array(["DEF", None], pa.string()), 5).tolist() == [4, 3]
    many = pa.array([f"part-{i}.parquet" for i in range(200)])
    ids = spark_partition_ids(many, None, 7)
    assert ids.min() >= 0 and ids.max() < 7 and len(set(ids.tolist())) == 7
