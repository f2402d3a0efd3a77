"""Assets and OpenLineage of the operators (``airflow_delta/operators/lineage.py``).

The end-to-end test runs ``tests/dags/lineage_dags/delta_lineage.py`` under the real
``airflow dags test`` with the OpenLineage provider's file transport: the asset events
are read from Airflow's metadata database, the OpenLineage events from the transport's
file, the ``spark-submit`` command line from the task log, and what a commit wrote from
delta-rs. The other tests run operators in this process with Airflow's own
``OutletEventAccessors``, as the task runner hands them to ``execute``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from airflow.providers.openlineage.extractors import OperatorLineage
from airflow.sdk import DAG, Asset, AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.hooks.delta import DeltaHook
from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaMergeOperator, DeltaUpdateOperator
from airflow_delta.operators.lineage import openlineage_dataset_name, output_statistics, table_asset_uri
from airflow_delta.operators.maintenance import CheckpointOperator, OptimizeOperator, RestoreOperator, VacuumOperator
from airflow_delta.spark.specs import DeleteSpec, TableRef, TaskIdentity
from tests.airflow_layer import context, make_table, migrated_airflow, set_connection, tiny_job_driver_conf
from tests.oracles import assert_oracles_read

REPO_ROOT = Path(__file__).resolve().parents[2]
LINEAGE_DAGS = REPO_ROOT / "tests" / "dags" / "lineage_dags"


def _written_by_commit(path: str | Path, version: int) -> dict[str, int]:
    """Rows, bytes and files the commit ``version`` added, as delta-rs sees the table."""
    before = {
        row["path"]
        for row in pa.table(deltalake.DeltaTable(str(path), version=version - 1).get_add_actions()).to_pylist()
    }
    added = [
        row
        for row in pa.table(deltalake.DeltaTable(str(path), version=version).get_add_actions(flatten=True)).to_pylist()
        if row["path"] not in before
    ]
    return {
        "rowCount": sum(row["num_records"] for row in added),
        "size": sum(row["size_bytes"] for row in added),
        "fileCount": len(added),
    }


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("table", "uri", "namespace", "name"),
    [
        ("s3://lake/events/", "s3://lake/events", "s3://lake", "events"),
        ("s3a://lake/db/events", "s3://lake/db/events", "s3://lake", "db/events"),
        ("gs://bucket/events", "gs://bucket/events", "gs://bucket", "events"),
        (
            "abfss://data@acct.dfs.core.windows.net/events",
            "abfss://data@acct.dfs.core.windows.net/events",
            "abfss://data@acct.dfs.core.windows.net",
            "events",
        ),
        ("/lake/events/", "file:///lake/events", "file", "/lake/events"),
        ("file:/lake/events", "file:///lake/events", "file", "/lake/events"),
        ("file:///lake/my%20events", "file:///lake/my%20events", "file", "/lake/my events"),
    ],
)
def test_object_store_and_local_tables_get_airflow_asset_uris_and_openlineage_names(
    table: str, uri: str, namespace: str, name: str
) -> None:
    assert table_asset_uri(table) == uri
    assert Asset(uri=uri).uri == uri  # Airflow's URI rules keep it as it is
    assert openlineage_dataset_name(table) == (namespace, name)


@settings(max_examples=60, deadline=None)
@given(
    segments=st.lists(
        st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1).filter(
            lambda segment: segment not in (".", "..")
        ),
        min_size=1,
        max_size=4,
    )
)
def test_every_spelling_of_a_local_table_is_one_stable_asset(segments: list[str]) -> None:
    path = "/" + "/".join(segments)
    spellings = [path, path + "/", "file:" + Path(path).as_uri()[len("file:") :], Path(path).as_uri() + "/"]

    uris = {table_asset_uri(spelling) for spelling in spellings}

    assert len(uris) == 1
    (uri,) = uris
    assert Asset(uri=uri).uri == uri  # no part of the path read as a query or fragment
    assert openlineage_dataset_name(path) == ("file", os.path.normpath(path))


def test_a_relative_path_is_the_asset_of_its_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert table_asset_uri("lake/events") == table_asset_uri(str(tmp_path / "lake" / "events"))


def test_output_statistics_take_delta_metric_names_of_each_operation() -> None:
    delete = {"numCopiedRows": 4, "numAddedBytes": 747, "numAddedFiles": 1, "numDeletedRows": 1}
    update = {"numCopiedRows": 4, "numUpdatedRows": 2, "numAddedBytes": 900, "numAddedFiles": 2}
    merge = {"numOutputRows": 7, "numTargetRowsCopied": 3, "numTargetBytesAdded": 1200, "numTargetFilesAdded": 2}
    restore = {"numRestoredFiles": 3, "restoredFilesSize": 2048, "numRemovedFiles": 1}

    assert output_statistics(delete) == {"rowCount": 4, "size": 747, "fileCount": 1}
    assert output_statistics(update) == {"rowCount": 6, "size": 900, "fileCount": 2}
    assert output_statistics(merge) == {"rowCount": 7, "size": 1200, "fileCount": 2}
    assert output_statistics(restore) == {"size": 2048, "fileCount": 3}  # RESTORE does not count rows
    assert output_statistics({}) == {}
    assert output_statistics({"numAddedBytes": "747", "numAddedFiles": True}) == {}  # not counts: left out


# --------------------------------------------------------------------------- default outlets


def test_operators_that_change_data_have_the_table_as_outlet_and_the_others_none() -> None:
    table = "s3a://lake/events/"
    with DAG(dag_id="outlets", schedule=None):
        changing = [
            DeltaDeleteOperator(task_id="delete", table=table),
            DeltaUpdateOperator(task_id="update", table=table, set={"value": "'x'"}),
            DeltaMergeOperator(task_id="merge", table=table, merge_sql="MERGE INTO t USING s ON t.id = s.id"),
            RestoreOperator(task_id="restore", table=table, version=1),
        ]
        keeping = [
            OptimizeOperator(task_id="optimize", table=table),
            VacuumOperator(task_id="vacuum", table=table),
            CheckpointOperator(task_id="checkpoint", table=table),
        ]
        templated = DeltaDeleteOperator(task_id="templated", table="{{ dag_run.conf['table'] }}")
        mine = Asset(uri="s3://lake/reports/daily")
        given = DeltaDeleteOperator(task_id="given", table=table, outlets=[mine])
        none = DeltaDeleteOperator(task_id="none", table=table, outlets=[])

    for operator in changing:
        assert operator.outlets == [Asset(uri="s3://lake/events")], operator.task_id
    for operator in keeping:
        assert operator.outlets == [], operator.task_id
    assert templated.outlets == [AssetAlias(name="delta-table:outlets.templated")]
    assert given.outlets == [mine]
    assert none.outlets == []


# --------------------------------------------------------------------------- in-process runs



def _run(operator: Any, task_id: str) -> tuple[dict[str, Any], OutletEventAccessors]:
    events = OutletEventAccessors()
    result = operator.execute({**context(task_id=task_id), "outlet_events": events})
    return result, events


@pytest.mark.usefixtures("no_spark")
def test_a_delete_records_its_commit_on_the_asset_and_lineage_with_what_it_wrote(table_path: str) -> None:
    rows = make_table(table_path)
    operator = DeltaDeleteOperator(
        task_id="d", table=table_path, predicate="id IN (3, 5)", execution="worker", use_deletion_vectors=False
    )

    result, events = _run(operator, "d")

    extra = events[Asset(uri=table_asset_uri(table_path))].extra
    assert extra == {
        "table_uri": table_path,
        "operation": "DELETE",
        "committed": True,
        "version": 3,
        "read_version": 2,
        "metrics": result["metrics"],
    }
    assert result["metrics"]["numDeletedRows"] == 2
    assert_oracles_read(table_path, [row for row in rows if row["id"] not in (3, 5)])

    lineage = operator.get_openlineage_facets_on_complete(None)
    (source,) = lineage.inputs
    (output,) = lineage.outputs
    assert (source.namespace, source.name) == (output.namespace, output.name) == ("file", table_path)
    statistics = output.outputFacets["outputStatistics"]
    assert {"rowCount": statistics.rowCount, "size": statistics.size, "fileCount": statistics.fileCount} == (
        _written_by_commit(table_path, 3)
    )
    assert statistics.rowCount > 0  # the files' other rows were copied
    schema = [(field.name, field.type) for field in output.facets["schema"].fields]
    assert [name for name, _ in schema] == deltalake.DeltaTable(table_path).schema().to_arrow().names


@pytest.mark.usefixtures("no_spark")
def test_a_delete_that_matches_nothing_marks_its_event_not_committed_and_has_no_output(table_path: str) -> None:
    make_table(table_path)
    operator = DeltaDeleteOperator(task_id="d", table=table_path, predicate="id > 1000", execution="worker")

    _, events = _run(operator, "d")

    extra = events[Asset(uri=table_asset_uri(table_path))].extra
    assert (extra["committed"], extra["version"], extra["read_version"]) == (False, None, 2)
    lineage = operator.get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("file", table_path)]
    assert lineage.outputs == []


@pytest.mark.usefixtures("no_spark")
def test_a_templated_table_resolves_its_alias_to_the_table_asset(table_path: str) -> None:
    make_table(table_path)
    with DAG(dag_id="dag", schedule=None):
        operator = DeltaDeleteOperator(task_id="d", table="{{ params.table }}", predicate="part = 'b'")
    operator.table = table_path  # what rendering the template gives

    _, events = _run(operator, "d")

    (alias_event,) = events[AssetAlias(name="delta-table:dag.d")].asset_alias_events
    assert alias_event.dest_asset_key.uri == table_asset_uri(table_path)
    assert (alias_event.extra["committed"], alias_event.extra["version"]) == (True, 3)


@pytest.mark.usefixtures("no_spark")
def test_a_mapped_delete_records_its_table_through_the_alias_given_in_partial(table_path: str) -> None:
    make_table(table_path)
    alias = AssetAlias(name="delta-table:dag.d")
    with DAG(dag_id="dag", schedule=None):
        mapped = DeltaDeleteOperator.partial(task_id="d", predicate="part = 'b'", outlets=[alias]).expand(
            table=[table_path]
        )
    assert mapped.outlets == [alias]  # what Airflow knows of the task before it runs
    # What the task runner builds for map index 0: the operator with its expanded table.
    with DAG(dag_id="dag", schedule=None):
        operator = DeltaDeleteOperator(task_id="d", predicate="part = 'b'", table=table_path, outlets=mapped.outlets)

    _, events = _run(operator, "d")

    (alias_event,) = events[alias].asset_alias_events
    assert alias_event.dest_asset_key.uri == table_asset_uri(table_path)
    assert alias_event.extra["version"] == 3


@pytest.mark.usefixtures("no_spark")
def test_a_user_outlet_of_the_same_table_gets_the_extra_and_other_outlets_are_left_alone(table_path: str) -> None:
    make_table(table_path)
    table_outlet = Asset(uri=table_asset_uri(table_path), name="events")
    report = Asset(uri="s3://lake/reports/daily")
    operator = RestoreOperator(task_id="r", table=table_path, version=1, outlets=[table_outlet, report])

    _, events = _run(operator, "r")

    assert events[table_outlet].extra["operation"] == "RESTORE"
    assert events[table_outlet].extra["version"] == 3
    assert events[report].extra == {}


def test_a_vacuum_with_an_outlet_records_its_end_commit_and_a_checkpoint_no_commit(
    no_spark: None, table_path: str
) -> None:
    make_table(table_path)
    table_outlet = Asset(uri=table_asset_uri(table_path))
    vacuum = VacuumOperator(task_id="v", table=table_path, outlets=[table_outlet])
    checkpoint = CheckpointOperator(task_id="c", table=table_path, outlets=[table_outlet])

    vacuumed, vacuum_events = _run(vacuum, "v")
    checkpointed, checkpoint_events = _run(checkpoint, "c")

    extra = vacuum_events[table_outlet].extra
    assert (extra["version"], extra["read_version"]) == (vacuumed["end_version"], vacuumed["start_version"])
    assert extra["committed"] is True
    assert deltalake.DeltaTable(table_path).history(1)[0]["operation"] == "VACUUM END"
    extra = checkpoint_events[table_outlet].extra
    assert (extra["committed"], extra["version"], extra["read_version"]) == (False, None, checkpointed["version"])


def test_broken_results_or_tables_never_fail_lineage(no_spark: None, tmp_path: Path) -> None:
    operator = DeltaDeleteOperator(task_id="d", table=str(tmp_path / "missing"))
    # Never executed: no result at all.
    assert operator.get_openlineage_facets_on_complete(None).outputs == []
    # A commit whose metrics are missing, of a table that is not there (no schema to read).
    operator._delta_result = {"version": 7, "read_version": 6, "operation": "DELETE"}
    lineage = operator.get_openlineage_facets_on_complete(None)
    (output,) = lineage.outputs
    assert output.outputFacets == {} and output.facets == {}
    # Metrics that are not a mapping, and a MERGE source that is not one: an empty lineage, no error.
    operator._delta_result = {"version": 7, "metrics": ["not", "metrics"]}
    assert isinstance(operator.get_openlineage_facets_on_complete(None), OperatorLineage)
    merge = DeltaMergeOperator(
        task_id="m",
        table=str(tmp_path / "missing"),
        merge_sql="MERGE INTO t USING s ON t.id = s.id",
        sources={"s": {"no such kind": "x"}},
    )
    merge._delta_result = {"version": 1, "metrics": {"numOutputRows": 1}}
    assert merge.get_openlineage_facets_on_complete(None) == OperatorLineage()


def test_merge_sources_are_lineage_inputs(no_spark: None, tmp_path: Path) -> None:
    merge = DeltaMergeOperator(
        task_id="m",
        table="s3://lake/customers",
        source={
            "query": "SELECT * FROM a JOIN b USING (id)",
            "views": {"a": {"parquet": "gs://landing/a/"}, "b": {"delta": {"uri": "s3a://lake/b"}}},
        },
        on="target.id = source.id",
        clauses=[{"kind": "matched_update", "star": True}],
    )
    merge._delta_result = {"version": None, "read_version": 4, "operation": "MERGE", "metrics": {}}

    lineage = merge.get_openlineage_facets_on_complete(None)

    assert {(d.namespace, d.name) for d in lineage.inputs} == {
        ("s3://lake", "customers"),
        ("gs://landing", "a"),
        ("s3://lake", "b"),
    }


def test_spark_openlineage_conf_reaches_the_spark_submit_command_unchanged(
    airflow_home: Path, monkeypatch: pytest.MonkeyPatch, table_path: str
) -> None:
    set_connection(monkeypatch, "spark_local", {"conn_type": "spark", "host": "local[2]"})
    set_connection(monkeypatch, "delta_default", {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local"}})
    hook = DeltaHook()
    spec = DeleteSpec(table=TableRef(uri=table_path), predicate="id = 1", identity=TaskIdentity("d", "t", "r"))
    conf = {"spark.openlineage.parentJobName": "d.t", "spark.openlineage.transport.type": "console"}

    command = hook.spark_submit_hook(spec, conf=conf)._build_spark_submit_command("job.py")

    pairs = {command[i + 1] for i, part in enumerate(command) if part == "--conf"}
    assert {"spark.openlineage.parentJobName=d.t", "spark.openlineage.transport.type=console"} <= pairs


# --------------------------------------------------------------------------- airflow dags test


@pytest.mark.slow
def test_a_dag_run_records_asset_events_openlineage_and_passes_spark_conf(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    table = tmp_path / "events"
    rows = make_table(table)
    lineage_file = tmp_path / "openlineage.jsonl"
    airflow = migrated_airflow(
        tmp_path_factory,
        LINEAGE_DAGS,
        {
            "AIRFLOW__OPENLINEAGE__NAMESPACE": "lineage-test",
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                {"type": "file", "log_file_path": str(lineage_file), "append": True}
            ),
            "AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO": "True",
            "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_DELTA_DEFAULT": json.dumps(
                {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local", "spark_conf": tiny_job_driver_conf()}}
            ),
            "LINEAGE_TABLE": str(table),
        },
        logging_level="INFO",  # the task log, with the Spark-Submit command line, in the output
    )
    home = airflow.home

    run = replace(airflow, timeout=420).run("dags", "test", "delta_lineage", "--conf", json.dumps({"table": str(table)}))

    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-5000:]
    assert_oracles_read(table, [row for row in rows if row["part"] != "a" and row["id"] != 3])
    # Asset events, from the metadata database: one per task, all on the table's asset.
    with sqlite3.connect(home / "airflow.db") as db:
        events = {
            task_id: (uri, json.loads(extra))
            for uri, task_id, extra in db.execute(
                "SELECT a.uri, e.source_task_id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id"
            )
        }
    uri = table_asset_uri(str(table))
    assert {task: event[0] for task, event in events.items()} == dict.fromkeys(
        ("delete_partition", "delete_nothing", "delete_on_spark"), uri
    )
    partition, nothing, on_spark = (
        events[task][1] for task in ("delete_partition", "delete_nothing", "delete_on_spark")
    )
    assert (partition["committed"], partition["version"], partition["read_version"]) == (True, 3, 2)
    assert partition["metrics"]["numDeletedRows"] == 10
    assert (nothing["committed"], nothing["version"], nothing["read_version"]) == (False, None, 3)
    assert (on_spark["committed"], on_spark["version"], on_spark["read_version"]) == (True, 4, 3)
    assert on_spark["metrics"]["numDeletedRows"] == 1
    # The user's spark.openlineage conf and the injected parent job conf, on the command line.
    (command,) = [line for line in output.splitlines() if "Spark-Submit cmd:" in line]
    assert "--conf spark.openlineage.columnLineage.datasetLineageEnabled=true" in command
    assert "--conf spark.openlineage.parentJobName=delta_lineage.delete_on_spark" in command
    assert "--conf spark.openlineage.parentJobNamespace=lineage-test" in command
    # OpenLineage COMPLETE events, from the provider's listener through the file transport.
    completed = {
        event["job"]["name"]: event
        for event in map(json.loads, lineage_file.read_text().splitlines())
        if event["eventType"] == "COMPLETE"
    }
    for task, version in (("delete_partition", 3), ("delete_on_spark", 4)):
        event = completed[f"delta_lineage.{task}"]
        assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [("file", str(table))]
        (written,) = event["outputs"]
        assert (written["namespace"], written["name"]) == ("file", str(table))
        statistics = {
            key: written["outputFacets"]["outputStatistics"][key] for key in ("rowCount", "size", "fileCount")
        }
        assert statistics == _written_by_commit(table, version), task
        assert [f["name"] for f in written["facets"]["schema"]["fields"]] == ["id", "part", "value"]
    assert completed["delta_lineage.delete_nothing"]["outputs"] == []


@pytest.mark.usefixtures("no_spark")
def test_an_openlineage_conf_injection_that_fails_leaves_the_task_running_with_the_user_conf(
    table_path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rows = make_table(table_path)
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO", "True")
    user_conf = {"spark.openlineage.columnLineage.datasetLineageEnabled": "true"}
    operator = DeltaDeleteOperator(
        task_id="d", table=table_path, predicate="part = 'a'", execution="worker", conf=dict(user_conf)
    )

    # The test harness's task instance lacks what OpenLineage's parent-job macros read.
    result, _ = _run(operator, "d")

    assert result["version"] == 3
    assert operator.conf == user_conf
    assert "OpenLineage Spark conf could not be injected" in caplog.text
    assert_oracles_read(table_path, [row for row in rows if row["part"] != "a"])


def test_openlineage_is_not_imported_when_no_spark_conf_injection_is_asked_for(tmp_path: Path) -> None:
    # Its Spark helpers import the whole OpenLineage client (about 0.6 s of every Spark task).
    # One fresh interpreter (an Airflow import) for both cases: first not asked for, then, in the
    # same process, asked for through the environment (Airflow's conf reads it at every lookup).
    program = (
        "import json, os, sys\n"
        "from airflow_delta.operators.dml import DeltaDeleteOperator\n"
        "def report():\n"
        "    operator = DeltaDeleteOperator(task_id='d', table='/tmp/t', predicate='id = 1', conf={'k': 'v'})\n"
        "    operator._inject_openlineage_spark_conf({})\n"
        "    loaded = sorted(name for name in sys.modules if name.startswith('airflow.providers.openlineage'))\n"
        "    return {'conf': operator.conf, 'openlineage': loaded}\n"
        "not_asked = report()\n"
        "os.environ['AIRFLOW__OPENLINEAGE__SPARK_INJECT_TRANSPORT_INFO'] = 'True'\n"
        "print(json.dumps({'not_asked': not_asked, 'asked': report()}))\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = str(tmp_path)

    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])

    not_asked = report["not_asked"]
    assert not_asked["conf"] == {"k": "v"}
    # (Airflow's configuration reads the provider's package info; nothing of its client.)
    assert [name for name in not_asked["openlineage"] if name.startswith("airflow.providers.openlineage.")] == [
        "airflow.providers.openlineage.get_provider_info"
    ]
    # The counterpart: asked for, the helpers are imported (and inject what they can).
    assert "airflow.providers.openlineage.utils.spark" in report["asked"]["openlineage"]
