"""ConvertToDeltaOperator and GenerateSymlinkManifestOperator on real directories, in the worker and on Spark (local mode, real spark-submit)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowSkipException

from airflow_delta.engine import DeltaTable, InvalidArgumentError
from airflow_delta.operators.convert import ConvertToDeltaOperator, GenerateSymlinkManifestOperator
from airflow_delta.operators.retry import DeltaNonRetryableError
from airflow_delta.provider import get_provider_info
from tests.airflow_layer import context, make_table
from tests.engine.operations.test_convert import PARTITION_SCHEMA, PARTITIONS, write_hive_dir
from tests.engine.operations.test_manifest import assert_manifests_match, written_manifests
from tests.oracles import assert_oracles_read

pytestmark = pytest.mark.usefixtures("airflow_home")


@pytest.mark.parametrize("operator", [ConvertToDeltaOperator, GenerateSymlinkManifestOperator])
def test_every_parameter_is_documented_and_the_provider_lists_the_module(operator: type) -> None:
    documented = set(re.findall(r":param (\w+):", operator.__doc__ or ""))
    parameters = set(inspect.signature(operator.__init__).parameters) - {"self", "kwargs"}
    assert parameters <= documented | {"table", "delta_conn_id"}
    modules = [m for entry in get_provider_info()["operators"] for m in entry["python-modules"]]
    assert "airflow_delta.operators.convert" in modules


def test_convert_operator_converts_and_returns_the_result(tmp_path: Path) -> None:
    expected = write_hive_dir(tmp_path, PARTITIONS)
    operator = ConvertToDeltaOperator(task_id="c", table=str(tmp_path), partition_schema=PARTITION_SCHEMA)
    result = operator.execute(context())
    assert result["version"] == 0 and result["numFiles"] == len(PARTITIONS) and result["execution"] == "worker"
    assert result["partitionColumns"] == ["day", "region", "bucket"]
    assert_oracles_read(tmp_path, expected)


@pytest.mark.slow
@pytest.mark.usefixtures("local_spark")
def test_convert_operator_auto_above_the_threshold_reads_footers_on_spark(tmp_path: Path) -> None:
    expected = write_hive_dir(tmp_path, PARTITIONS)
    operator = ConvertToDeltaOperator(
        task_id="c", table=str(tmp_path), partition_schema=PARTITION_SCHEMA, worker_threshold_files=0
    )
    result = operator.execute(context())
    assert result["execution"] == "spark"
    assert (result["version"], result["numFiles"]) == (0, len(PARTITIONS))
    assert result["metrics"] == {"numConvertedFiles": len(PARTITIONS)}
    assert result["partitionColumns"] == ["day", "region", "bucket"]
    assert_oracles_read(tmp_path, expected)


def test_convert_operator_on_a_delta_table_fails_or_skips_as_asked(tmp_path: Path) -> None:
    write_hive_dir(tmp_path, PARTITIONS[:1])
    DeltaTable.convert_to_delta(str(tmp_path), PARTITION_SCHEMA)
    with pytest.raises(DeltaNonRetryableError, match="already exists"):
        ConvertToDeltaOperator(task_id="c", table=str(tmp_path), partition_schema=PARTITION_SCHEMA).execute(context())
    with pytest.raises(AirflowSkipException):
        ConvertToDeltaOperator(
            task_id="c", table=str(tmp_path), partition_schema=PARTITION_SCHEMA, if_delta="skip"
        ).execute(context())


def test_convert_operator_refuses_bad_arguments_when_the_dag_is_parsed() -> None:
    with pytest.raises(InvalidArgumentError, match="if_delta"):
        ConvertToDeltaOperator(task_id="c", table="/t", if_delta="overwrite")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="parallelism"):
        ConvertToDeltaOperator(task_id="c", table="/t", parallelism=0)
    with pytest.raises(InvalidArgumentError, match="execution"):
        ConvertToDeltaOperator(task_id="c", table="/t", execution="cluster")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="worker_threshold_files"):
        ConvertToDeltaOperator(task_id="c", table="/t", worker_threshold_files=-1)


def test_a_stray_file_fails_the_task_without_retry(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": [1]}), tmp_path / "f.parquet")
    (tmp_path / "README").write_text("not parquet")
    with pytest.raises(DeltaNonRetryableError, match=r"README.*not a parquet file"):
        ConvertToDeltaOperator(task_id="c", table=str(tmp_path)).execute(context())
    assert not (tmp_path / "_delta_log").exists()


def test_manifest_operator_writes_the_manifests_and_returns_counts(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    make_table(path)
    result = GenerateSymlinkManifestOperator(task_id="m", table=path).execute(context())
    assert result["mode"] == "full"
    assert result["manifests_written"] == len(written_manifests(Path(path))) == 2
    assert result["num_data_files"] == len(DeltaTable(path).snapshot().file_uris())
    assert_manifests_match(Path(path))


def test_manifest_operator_on_a_table_with_deletion_vectors_fails_without_retry(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    make_table(path, dvs=True)
    DeltaTable(path).delete("id = 1")
    with pytest.raises(DeltaNonRetryableError, match="deletion vectors"):
        GenerateSymlinkManifestOperator(task_id="m", table=path).execute(context())
