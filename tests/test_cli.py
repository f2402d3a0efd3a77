"""``airflow-delta`` on real shared tables: the printed output and the exit codes.

Numbers the output must show are taken from delta-rs (an independent reader of the same
log) or read off the logs by hand, never from our own engine.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.cli import align, build_parser, delta_type_name, format_ms, human_bytes, main

deltalake = pytest.importorskip("deltalake")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def _field(out: str, label: str) -> str:
    """The value printed after ``label`` on its describe line (labels are left-aligned)."""
    m = re.search(rf"^  {re.escape(label)}\s{{2,}}(.*)$", out, re.MULTILINE)
    assert m, f"no {label!r} line in:\n{out}"
    return m.group(1)


# ------------------------------------------------------------------ formatting helpers


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 * 1024**3, "5.0 GiB"), (None, "?")],
)
def test_human_bytes(n: int | None, text: str) -> None:
    assert human_bytes(n) == text


def test_delta_type_name() -> None:
    nested = {"type": "map", "keyType": "string", "valueType": {"type": "array", "elementType": "variant", "containsNull": True}}
    assert delta_type_name(nested) == "map<string, array<variant>>"
    assert delta_type_name({"type": "struct", "fields": [{"name": "a"}, {"name": "b"}]}) == "struct<a, b>"
    assert delta_type_name("decimal(8,5)") == "decimal(8,5)"


def test_align_pads_columns_and_right_aligns_numbers() -> None:
    lines = align([["a", "1"], ["long", "100"]], indent="  ", right=[1])
    assert lines == ["  a       1", "  long  100"]


# ------------------------------------------------------------------ describe


def test_describe_simple_table(shared_tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(shared_tables / "simple_table")
    theirs = deltalake.DeltaTable(path)
    code, out = _run(capsys, "describe", path)
    assert code == 0
    assert out.splitlines()[0] == path
    assert _field(out, "version").startswith(f"{theirs.version()} (committed ")
    sizes = pa.table(theirs.get_add_actions(flatten=True)).column("size_bytes").to_pylist()
    assert _field(out, "files") == f"{len(theirs.file_uris())}, {human_bytes(sum(sizes))}"
    # No stats in this table's log: the row count comes from the parquet footers.
    assert _field(out, "rows") == f"{theirs.to_pyarrow_table().num_rows} (from parquet footers)"
    assert _field(out, "partitioned by") == "none"
    assert _field(out, "columns") == "1: id long"
    assert _field(out, "protocol") == "reader 1, writer 2 (implies appendOnly, invariants)"
    assert _field(out, "checkpoint") == "none (5 commits replayed)"
    assert _field(out, "deletion vectors") == "none"
    # The last five commits, newest first, with their operations (read off the log).
    history = re.findall(r"^\s+v(\d+)\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\s+(\S.*)$", out, re.MULTILINE)
    assert history == [("4", "DELETE"), ("3", "UPDATE"), ("2", "WRITE"), ("1", "MERGE"), ("0", "WRITE")]


def test_describe_deletion_vectors(shared_tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "describe", str(shared_tables / "table-with-dv-small"))
    assert code == 0
    # One file of 10 rows (stats numRecords) with a DV of cardinality 2.
    assert _field(out, "rows") == "8 (from file statistics)"
    assert _field(out, "deletion vectors") == "1 file, 2 rows deleted"
    assert _field(out, "protocol") == "reader 3 (deletionVectors), writer 7 (deletionVectors)"
    assert "delta.enableDeletionVectors=true" in _field(out, "properties")


def test_describe_partitions_and_checkpoint(shared_tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(
        capsys, "describe", str(shared_tables / "delta-0.8.0-partitioned"), str(shared_tables / "checkpoint-v2-table")
    )
    assert code == 0
    partitioned, v2 = out.split("\n\n")
    # Six adds with six distinct (year, month, day) triples in the single commit.
    assert _field(partitioned, "partitioned by") == "year, month, day: 6 distinct partitions"
    assert _field(partitioned, "rows") == "7 (from parquet footers)"  # no stats in this log
    # V2 checkpoint at 8 (the newest, per _last_checkpoint too), then commit 9.
    assert re.fullmatch(r"v8 \(v2, [\d.]+ (B|KiB)\), 1 commit since", _field(v2, "checkpoint"))
    assert "delta.checkpointPolicy=v2" in v2
    assert _field(v2, "columns") == "3: id long, name string, created_at timestamp"


def test_describe_continues_after_a_broken_table(shared_tables: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nothing-here")
    unsupported = str(shared_tables / "simple_table_features")
    good = str(shared_tables / "delta-0.8.0")
    code, out = _run(capsys, "describe", missing, unsupported, good)
    assert code == 1
    lines = out.splitlines()
    assert re.fullmatch(rf"{re.escape(missing)}: error: TableNotFoundError: no Delta table at .*", lines[0])
    assert lines[2].startswith(f"{unsupported}: error: UnsupportedFeatureError: cannot read this table")
    assert "minReaderVersion 5" in lines[2]
    assert lines[4] == good
    assert _field("\n".join(lines[4:]), "version").startswith("1 (committed ")


def test_make_demo_tables(shared_tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = ["simple_table", "delta-0.8.0-partitioned", "table-with-dv-small", "checkpoint-v2-table"]
    code, out = _run(capsys, "describe", *(str(shared_tables / n) for n in names))
    assert code == 0
    assert "error" not in out
    assert out.count("\n  history") == 4


# ------------------------------------------------------------------ history and files


def test_history_limit(shared_tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "history", str(shared_tables / "simple_table"), "--limit", "2")
    assert code == 0
    lines = out.splitlines()
    assert re.match(r"version\s+timestamp\s+operation\s+parameters$", lines[0])
    # Without in-commit timestamps a commit's timestamp is its file's modification time (the
    # protocol's definition; the commitInfo's own timestamp is the writer's clock, not the commit's).
    commit = shared_tables / "simple_table" / "_delta_log" / f"{4:020d}.json"
    when = format_ms(commit.stat().st_mtime_ns // 1_000_000)
    assert re.match(rf"\s*v4  {when}  DELETE\s+predicate=", lines[1]), lines[1]
    assert re.match(r"\s*v3\s+.*UPDATE", lines[2])
    assert lines[3] == "2 commits"


def test_files_with_filter(shared_tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(shared_tables / "delta-0.8.0-partitioned")
    code, out = _run(capsys, "files", path)
    assert code == 0
    assert out.splitlines()[-1].startswith("6 files, ")
    code, out = _run(capsys, "files", path, "--filter", "month = '2'")
    assert code == 0
    lines = out.splitlines()
    # Two of the six partitions have month=2 (year=2020/month=2/day=3 and day=5).
    assert lines[-1].startswith("2 files matching \"month = '2'\", ")
    assert all("month=2" in line for line in lines[1:-1])
    assert len(lines) == 4


def test_files_shows_deletion_vectors(shared_tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "files", str(shared_tables / "table_with_deletion_logs"))
    assert code == 0
    header, row, total = out.splitlines()
    assert header.split() == ["path", "size", "rows", "deleted"]
    # One live file of 100 records (stats) whose DV deletes 2 of them; see expected/table_with_deletion_logs.json.
    assert row.startswith("part-00000-cb251d5e-b665-437a-a9a7-fbfc5137c77d.c000.snappy.parquet")
    assert row.split()[-2:] == ["100", "2"]
    assert total.startswith("1 file, ")


def test_describe_log_only_table(shared_tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """describe reads only the log: a table whose data files are gone is still described."""
    code, out = _run(capsys, "describe", str(shared_tables / "checkpoint_with_partitions"))
    assert code == 0
    # Two adds without stats whose files do not exist: no footers to count either.
    assert _field(out, "rows") == "unknown (no file statistics)"
    assert _field(out, "partitioned by") == "color: 2 distinct partitions"
    assert _field(out, "checkpoint").startswith("v2 (classic, ")


def test_files_reports_a_bad_filter(shared_tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "files", str(shared_tables / "delta-0.8.0-partitioned"), "--filter", "no_such_column = 1")
    assert code == 1
    assert out.startswith(f"{shared_tables / 'delta-0.8.0-partitioned'}: error: InvalidFilterError: ")
    assert len(out.splitlines()) == 1


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["describe"], ["history", "x", "--limit", "0"], ["bogus"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
    capsys.readouterr()
    assert build_parser().prog == "airflow-delta"


def test_history_of_commits_without_an_operation(shared_tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # delta-rs 0.4 wrote commits 1 and 2 of this table with a commitInfo holding only timestamp
    # and clientVersion, no operation (commit 0 is gone).
    code, out = _run(capsys, "history", str(shared_tables / "checkpoint_with_partitions"))
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == ["v2", "v1"]
    assert all(line.rstrip().endswith("(not recorded)") for line in lines[1:-1])
    assert lines[-1] == "2 commits"
