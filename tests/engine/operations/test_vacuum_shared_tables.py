"""A dry-run VACUUM of every shared table (Spark-, delta-rs- and kernel-written), compared with
delta-rs's own full dry run. Dry runs only: the shared tables are never modified.

Every file we plan, delta-rs plans too. delta-rs plans more in three cases, each checked to be
a delta-rs difference and not a file we miss: hidden files (``.part-....crc``: Delta never
deletes names starting with ``.``), tombstones whose files do not exist (delta-rs reports them
from the log; we delete what we listed), and deletion vector files that a live ``add`` still
references (deleting one would make the table unreadable; ``table-with-dv-small``).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote

import pytest

from airflow_delta.engine import DeltaError, DeltaTable, UnsupportedFeatureError
from airflow_delta.engine.operations.vacuum import dv_file_paths
from tests.conftest import shared_tables_dir

deltalake = pytest.importorskip("deltalake")

TABLES = sorted(p.parent for p in shared_tables_dir().glob("*/_delta_log")) if shared_tables_dir().is_dir() else []


def _plan(root: Path, listing: Path) -> set[str]:
    DeltaTable(str(root)).vacuum(
        retention=timedelta(0), enforce_retention_duration=False, dry_run=True, file_list_path=str(listing)
    )
    return set(listing.read_text().splitlines())


@pytest.mark.parametrize("root", TABLES, ids=[p.name for p in TABLES])
def test_a_dry_run_plans_what_delta_rs_plans_except_what_a_reader_needs(root: Path, tmp_path: Path) -> None:
    try:
        ours = _plan(root, tmp_path / "plan.txt")
    except UnsupportedFeatureError:  # a protocol we do not implement: refused, not guessed at
        return
    try:
        theirs_uris = deltalake.DeltaTable(str(root)).vacuum(
            retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True
        )
    except Exception:
        pytest.skip("delta-rs cannot vacuum this table")
    theirs = {unquote(u.removeprefix(f"{root}/")) for u in theirs_uris}
    assert ours <= theirs, f"planned although delta-rs keeps them: {sorted(ours - theirs)[:5]}"
    live_dv_files = set(dv_file_paths(str(root), DeltaTable(str(root)).snapshot().add_actions.column("deletion_vector")))
    for path in theirs - ours:
        name = path.rsplit("/", 1)[-1]
        assert name.startswith(".") or not (root / path).exists() or path in live_dv_files, path


def test_a_live_deletion_vector_file_is_never_planned(shared_tables: Path, tmp_path: Path) -> None:
    root = shared_tables / "table-with-dv-small"
    dv_file = "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"
    assert (root / dv_file).exists()
    # The one live file's DV (delta-rs 1.6's full vacuum lists it as unreferenced).
    assert dv_file not in _plan(root, tmp_path / "plan.txt")


def test_a_table_we_cannot_read_is_refused(shared_tables: Path) -> None:
    with pytest.raises(DeltaError, match="minReaderVersion 5"):
        DeltaTable(str(shared_tables / "simple_table_features")).vacuum(dry_run=True)
