"""``airflow-delta health PATH``: the printed report, ``--json``, ``--png`` and errors.

Figures are checked against delta-rs's view of the table, not against our engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.cli import main
from airflow_delta.engine import DeltaTable

deltalake = pytest.importorskip("deltalake")

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


@pytest.fixture
def table(table_path: str) -> DeltaTable:
    table = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    for p in ("a", "a", "b"):
        table.append(pa.table({"id": pa.array(range(10), pa.int64()), "p": [p] * 10}, schema=SCHEMA))
    table.delete("id = 3 AND p = 'b'")
    return table


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_health_prints_the_report(table: DeltaTable, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "health", table.root)
    assert code == 0
    adds = pa.table(deltalake.DeltaTable(table.root).get_add_actions(flatten=True))
    assert f"  files             {adds.num_rows} (" in out
    assert "3 (100%) below half the target 128.0 MiB" in out
    assert "1 files (33%), 1 of 30 rows deleted, 1 above the 0.05 purge ratio" in out
    assert "5 commits and no checkpoint" in out
    assert "    p=a  2" in out and "    p=b  1" in out
    assert "OPTIMIZE: 3 small files; compaction would leave about 2 files instead of 3" in out


def test_health_json_and_png(table: DeltaTable, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    png = tmp_path / "sizes.png"
    code, out = _run(capsys, "health", table.root, "--json", "--png", str(png))
    assert code == 0
    report = json.loads(out)
    assert report["num_files"] == 3 and report["deleted_rows"] == 1
    assert sum(b["files"] for b in report["size_histogram"]) == 3
    assert report["partitions_with_most_small_files"][0] == {"partition": "p=a", "small_files": 2}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_health_of_a_missing_table_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "health", str(tmp_path / "nothing"))
    assert code == 1
    assert out.startswith(f"{tmp_path / 'nothing'}: error: TableNotFoundError:") and out.count("\n") == 1
