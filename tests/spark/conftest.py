"""One SparkSession for the PySpark tests of a pytest worker (local mode, small, quiet and cheap to run)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    # Executors must run this interpreter: it has pyarrow, pyroaring and the engine.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from airflow_delta.spark.session import job_session

    session = job_session(
        "airflow-delta-tests",
        {
            "spark.master": "local[2]",
            # One shuffle partition, as the jobs size it for their kilobytes themselves
            # (session.size_shuffle_partitions): each partition more is a task more per stage.
            "spark.sql.shuffle.partitions": "1",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.driver.memory": "1g",
            "spark.sql.session.timeZone": "UTC",
            "spark.pyspark.python": sys.executable,
            # Test data is a few rows: generating and compiling Java for every query plan
            # (whole-stage codegen) costs more CPU than interpreting it.
            "spark.sql.codegen.wholeStage": "false",
            # Nor for each expression (projections, predicates, orderings): interpreted, as
            # Spark falls back to when code generation fails (CodegenObjectFactoryMode).
            "spark.sql.codegen.factoryMode": "NO_CODEGEN",
            # The C1 compiler only, and the serial collector: C2's compilations and the
            # parallel GC's threads cost CPU that jobs of kilobytes never earn back. Measured
            # again over the longer modules (test_native_scan, test_column_values and
            # test_changes_cdf in one session): 348 s with C1 only, 666 s with C2 on.
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
