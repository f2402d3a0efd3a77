"""An OPTIMIZE meets a concurrent DELETE on its partition and ends correctly, under ``airflow dags test``.

The DAG (``tests/dags/delta_conflict_dags/delta_optimize_meets_delete.py``) makes the
conflict happen on every run: the DELETE commits after the sensor's judgement and before
the OPTIMIZE's first try commits from that judged version. The test shows the conflict
in the task log and the try count, the retry's commit in the log of the table, and the
rows with delta-rs and delta-kernel-rs.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaTable
from scripts.airflow_cli import AirflowCli, output_tail
from tests.airflow_layer import migrated_airflow
from tests.oracles import assert_oracles_read

DAGS_FOLDER = Path(__file__).resolve().parent / "delta_conflict_dags"
DAG_ID = "delta_optimize_meets_delete"
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> AirflowCli:
    return migrated_airflow(tmp_path_factory, DAGS_FOLDER, logging_level="INFO")


@pytest.mark.slow
def test_optimize_retries_after_meeting_a_concurrent_delete_and_loses_no_row(
    airflow: AirflowCli, tmp_path: Path
) -> None:
    path = tmp_path / "events"
    table = DeltaTable.create(
        str(path), SCHEMA, partition_by=["part"], properties={"delta.enableDeletionVectors": "true"}
    )
    rows = [{"id": i, "part": "ab"[i % 2]} for i in range(60)]
    for start in range(0, 60, 10):  # six small files per partition
        table.append(pa.Table.from_pylist(rows[start : start + 10], schema=SCHEMA))
    read_version = table.version()
    table.append(pa.Table.from_pylist([{"id": 100, "part": "b"}], schema=SCHEMA))  # harmless to partition a
    rows.append({"id": 100, "part": "b"})

    result, run = airflow.test_dag(DAG_ID, {"table_uri": str(path), "read_version": read_version, "partition": "a",
                                            "delete": "id % 3 = 0"})

    assert result.returncode == 0, output_tail(result)
    assert run["state"] == "success"
    assert run["tasks"] == dict.fromkeys(["wait_until_safe", "concurrent_delete", "optimize_partition"], "success")
    judged = run["xcoms"]["wait_until_safe"]
    assert judged["safe_version"] == read_version + 1 and judged["num_waited_out"] == 0  # the append is harmless
    delete_version = run["xcoms"]["concurrent_delete"]["version"]
    assert delete_version == read_version + 2
    # The first try met the DELETE: the engine refused its commit, the retry policy retried it.
    output = result.stdout + result.stderr
    assert "ConcurrentDeleteReadException" in output or "ConcurrentDeleteRead" in output, output_tail(result, 200)
    assert "DeltaRetryableError" in output
    assert run["tries"]["optimize_partition"] == 2
    optimized = run["xcoms"]["optimize_partition"]
    assert optimized["try_number"] == 2 and optimized["read_version"] == delete_version
    history = {entry["version"]: entry for entry in deltalake.DeltaTable(str(path)).history()}
    assert history[delete_version]["operation"] == "DELETE"
    assert [history[v]["operation"] for v in optimized["versions"]] == ["OPTIMIZE"]
    assert max(history) == optimized["versions"][-1]  # the refused try committed nothing

    expected = [r for r in rows if not (r["part"] == "a" and r["id"] % 3 == 0)]
    assert_oracles_read(path, expected)
    # Partition a is one file now, and no file of the refused try is left behind.
    live = {Path(uri) for uri in deltalake.DeltaTable(str(path)).file_uris()}
    assert len([p for p in live if "part=a" in str(p)]) == 1
    on_disk = set(path.rglob("*.parquet"))
    assert on_disk == live | _removed_in_log(path)


def _removed_in_log(path: Path) -> set[Path]:
    """The data files the commits remove, read from the JSON commits themselves."""
    removed = set()
    for commit in (path / "_delta_log").glob("*.json"):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "remove" in action:
                removed.add(path / unquote(action["remove"]["path"]))
    return removed
