"""``airflow-delta convert PATH`` and ``airflow-delta manifest PATH``: real directories, oracle-checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_delta.cli import main
from tests.engine.operations.test_convert import PARTITION_SCHEMA, PARTITIONS, write_hive_dir
from tests.engine.operations.test_manifest import assert_manifests_match
from tests.oracles import assert_oracles_read


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_convert_then_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = write_hive_dir(tmp_path, PARTITIONS)

    code, out = _run(capsys, "convert", str(tmp_path), "--partition-schema", PARTITION_SCHEMA)
    assert code == 0
    assert f"converted {len(PARTITIONS)} parquet file(s) into version 0, partitioned by day, region, bucket" in out
    assert_oracles_read(tmp_path, expected)

    code, out = _run(capsys, "manifest", str(tmp_path))
    assert code == 0 and f"{len(PARTITIONS)} manifest(s) written listing {len(PARTITIONS)} file(s)" in out
    assert_manifests_match(tmp_path)


def test_convert_errors_are_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_hive_dir(tmp_path, PARTITIONS[:1])
    code, out = _run(capsys, "convert", str(tmp_path))  # partitioned directories, no schema given
    assert code == 1
    assert "no partition schema was given" in out and len(out.strip().splitlines()) == 1
    assert not (tmp_path / "_delta_log").exists()
