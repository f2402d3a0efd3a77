"""A small Spark job that loads the classes a DML job's driver loads, for the driver class archive.

The hook runs it in the background, with ``-XX:ArchiveClassesAtExit``, when a worker has
no archive yet for its Spark and Java (:mod:`airflow_delta.hooks.driver_jvm`): a session,
Parquet written and read, a join, an aggregate and a sort, as the DELETE/UPDATE/MERGE
jobs do, on a few rows. Its only argument is a scratch directory it may write to.
"""

from __future__ import annotations

import sys


def main(scratch: str) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("airflow-delta driver class archive").getOrCreate()
    try:
        rows = spark.range(64).selectExpr("id", "id % 7 AS key", "CAST(id AS STRING) AS name")
        rows.write.mode("overwrite").parquet(scratch)
        read_back = spark.read.parquet(scratch)
        joined = read_back.join(rows.selectExpr("id", "name AS other"), "id", "left_outer")
        joined.where("key > 1").groupBy("key").count().orderBy("key").collect()
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
