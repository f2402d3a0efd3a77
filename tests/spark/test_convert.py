"""CONVERT TO DELTA with footers read on Spark executors (spark/convert.py).

The executors run the engine's per-file functions; the result must be the conversion the
worker's thread pool makes of a copy of the same directory, and both oracles must read
the rows pyarrow wrote. The session is the shared local[2] ``spark`` fixture.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from airflow_delta.engine import ConvertSourceError, DeltaTable
from airflow_delta.spark.convert import SparkFooterReader, run_convert
from tests.engine.operations.test_convert import PARTITION_SCHEMA, PARTITIONS, write_hive_dir
from tests.oracles import assert_oracles_read

pytestmark = pytest.mark.slow


def _adds(path: Path) -> dict[str, dict[str, Any]]:
    lines = (path / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    return {a["path"]: a for a in (json.loads(line).get("add") for line in lines) if a is not None}


def test_footers_read_on_executors_give_the_same_adds_as_the_worker(spark: Any, tmp_path: Path) -> None:
    on_spark, in_worker = tmp_path / "spark", tmp_path / "worker"
    expected = write_hive_dir(on_spark, PARTITIONS * 3)  # several files per partition directory
    shutil.copytree(on_spark, in_worker)

    reader = SparkFooterReader(spark, str(on_spark), local_below=0)
    result = DeltaTable.convert_to_delta(str(on_spark), PARTITION_SCHEMA, reader=reader)
    DeltaTable.convert_to_delta(str(in_worker), PARTITION_SCHEMA)

    assert reader.used_spark and result.num_files == len(PARTITIONS) * 3
    assert _adds(on_spark) == _adds(in_worker)
    assert_oracles_read(on_spark, expected)


def test_below_the_threshold_the_worker_reads_the_footers(spark: Any, tmp_path: Path) -> None:
    expected = write_hive_dir(tmp_path, PARTITIONS)
    reader = SparkFooterReader(spark, str(tmp_path), local_below=len(PARTITIONS))
    DeltaTable.convert_to_delta(str(tmp_path), PARTITION_SCHEMA, reader=reader)
    assert not reader.used_spark
    assert_oracles_read(tmp_path, expected)


def test_an_executors_error_reaches_the_driver_as_its_engine_class_and_nothing_is_written(
    spark: Any, tmp_path: Path
) -> None:
    write_hive_dir(tmp_path, PARTITIONS[:2])
    (tmp_path / "day=2024-01-01" / "region=eu" / "bucket=1" / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ConvertSourceError, match=r"broken\.parquet"):
        run_convert(spark, str(tmp_path), PARTITION_SCHEMA, local_below=0)
    assert not (tmp_path / "_delta_log").exists()
