"""A mixed PySpark (Python files of one release over another's jars) is refused at job start, typed and non-retryable.

The mixed installations are made on purpose, cheaply: a copy of the installed PySpark
whose entries are links to the real ones except ``version.py``, which says another
release, as pip leaves the folder when it writes ``pyspark-client`` over a different
``pyspark``. Two places check: the hook before ``spark-submit`` (the Spark it runs), and
the job's driver once its JVM runs (the PySpark it imported, against the JVM's version).
"""

from __future__ import annotations

import re
from pathlib import Path

import pyspark
import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_delta.engine import DeltaTable, MixedPySparkError
from airflow_delta.operators.dml import DeltaMergeOperator
from airflow_delta.operators.retry import DeltaNonRetryableError
from airflow_delta.spark.installation import check_spark_home, fix_version, spark_home_versions
from tests.airflow_layer import SCHEMA, airflow_home, context, make_table, set_connection  # noqa: F401  (airflow_home: the fixture)

pytestmark = pytest.mark.usefixtures("airflow_home")

INSTALLED = Path(pyspark.__file__).parent
OTHER_RELEASE = "4.3.0"
PIP_FIX = re.escape(f'pip install --force-reinstall --no-deps "pyspark=={pyspark.__version__}" "pyspark-client==')


def mixed_pyspark_copy(parent: Path, python_version: str = OTHER_RELEASE) -> Path:
    """``parent/pyspark``: the installed PySpark's entries as links, with a version.py saying ``python_version``."""
    copy = parent / "pyspark"
    copy.mkdir(parents=True)
    for entry in INSTALLED.iterdir():
        if entry.name not in ("version.py", "__pycache__"):
            (copy / entry.name).symlink_to(entry)
    (copy / "version.py").write_text(f'__version__: str = "{python_version}"\n', encoding="utf-8")
    return copy


def test_the_installed_pyspark_is_one_release() -> None:
    python_version, jars_version = spark_home_versions(INSTALLED)

    assert python_version == jars_version == pyspark.__version__
    check_spark_home(INSTALLED)  # nothing raised


def test_a_mixed_copy_is_refused_with_the_pip_command_that_fixes_it(tmp_path: Path) -> None:
    copy = mixed_pyspark_copy(tmp_path)

    with pytest.raises(MixedPySparkError) as raised:
        check_spark_home(copy)

    error = raised.value
    assert not error.retryable
    assert (error.python_version, error.jvm_version) == (OTHER_RELEASE, pyspark.__version__)
    assert str(copy) in str(error) and f"Spark {OTHER_RELEASE}" in str(error)
    assert re.search(PIP_FIX, str(error)), str(error)
    assert error.fix_version == fix_version(pyspark.__version__)


def test_a_folder_without_jars_or_python_is_not_judged(tmp_path: Path) -> None:
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "spark-core_2.13-4.1.0.jar").touch()
    check_spark_home(tmp_path)  # a cluster's Spark without python/: nothing to compare

    assert spark_home_versions(tmp_path) == (None, "4.1.0")


def _merge_operator(tmp_path: Path, table_path: str) -> DeltaMergeOperator:
    import pyarrow as pa

    make_table(table_path)
    source_path = str(tmp_path / "source")
    DeltaTable.create(source_path, SCHEMA).append(
        pa.Table.from_pylist([{"id": 1, "part": "b", "value": "new"}], schema=SCHEMA)
    )
    return DeltaMergeOperator(
        task_id="m",
        table=table_path,
        source={"delta": {"uri": source_path}},
        on="t.id = s.id",
        source_alias="s",
        target_alias="t",
        clauses=[{"kind": "matched_update", "assignments": {"value": "s.value"}}],
        execution="spark",  # the check is at spark-submit and in the job's driver; "auto" runs this in the worker
    )


def _local_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "local[2]"})
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local"}})


@pytest.mark.slow
def test_the_hook_refuses_a_mixed_spark_home_before_spark_submit_and_the_task_fails_at_once(
    tmp_path: Path, table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _local_spark(monkeypatch)
    monkeypatch.setenv("SPARK_HOME", str(mixed_pyspark_copy(tmp_path / "mixed")))
    operator = _merge_operator(tmp_path, table_path)

    with pytest.raises(DeltaNonRetryableError) as raised:
        operator.execute(context(task_id="m"))

    assert isinstance(raised.value, AirflowFailException)  # no retry, whatever the task's retries
    assert isinstance(raised.value.delta_error, MixedPySparkError)
    assert re.search(PIP_FIX, str(raised.value)), str(raised.value)
    submit_hook = operator._hook._submit_hook if operator._hook is not None else None
    assert submit_hook is not None and submit_hook._submit_sp is None  # spark-submit never started
    assert DeltaTable(table_path).version() == 2


@pytest.mark.slow
def test_the_driver_refuses_a_pyspark_that_is_not_its_jvms_release(
    tmp_path: Path, table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker's Spark is consistent (the hook's check passes); the driver imports a PySpark
    # whose Python says another release than the JVM it starts: what a mixed venv's driver does.
    _local_spark(monkeypatch)
    mixed_pyspark_copy(tmp_path / "mixed")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mixed"))
    operator = _merge_operator(tmp_path, table_path)

    with pytest.raises(DeltaNonRetryableError) as raised:
        operator.execute(context(task_id="m"))

    assert isinstance(raised.value.delta_error, MixedPySparkError)
    message = str(raised.value)
    assert f"Python files say Spark {OTHER_RELEASE} but its jars are Spark {pyspark.__version__}" in message
    assert re.search(PIP_FIX, message), message
    assert DeltaTable(table_path).version() == 2
