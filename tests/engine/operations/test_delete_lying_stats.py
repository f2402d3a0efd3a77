"""A ``numRecords`` statistic that lies never drops data (issue 10, item 3).

Every decision that drops rows (remove a whole file instead of writing a DV, "all rows
deleted", DELETE's row metrics, the range of a DV) counts the rows of the file itself.
Each case below rewrites the log so that the statistics of every file claim a wrong
``numRecords`` (too small, too large, zero, negative, missing, not a number), then runs one
operation and checks the rows left (ours and both independent readers), and the metrics.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaTable
from airflow_delta.engine.errors import CorruptDataFileError, CorruptDeletionVectorError
from tests.oracles import assert_oracles_read

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("p", pa.string())])
DV = {"delta.enableDeletionVectors": "true"}
ROWS_PER_FILE = 10


def _row(i: int) -> dict[str, Any]:
    # One NULL per file in ``s``: with numRecords 1 the statistics would say "all NULL".
    return {"id": i, "s": None if i % ROWS_PER_FILE == 7 else f"x{i}", "p": "a" if i < ROWS_PER_FILE else "b"}


ALL_ROWS = [_row(i) for i in range(2 * ROWS_PER_FILE)]

_MISSING = object()
LIES: dict[str, object] = {
    "too_small": 1,
    "zero": 0,
    "negative": -5,
    "too_large": 1000,
    "missing": _MISSING,
    "not_a_number": "ten",
}
# delta-rs refuses to read a table whose numRecords is not an integer: no oracle for those.
UNREADABLE_BY_ORACLES = {"not_a_number"}


def _oracles_agree(t: DeltaTable, lie: str, expected: list[dict[str, Any]]) -> None:
    if lie not in UNREADABLE_BY_ORACLES:
        assert_oracles_read(t.root, expected)


def _lying_table(path: str, lie: object, properties: dict[str, str] | None) -> DeltaTable:
    """Two files of 10 rows (partitions a and b); every add's stats then claim ``numRecords = lie``."""
    t = DeltaTable.create(path, SCHEMA, partition_by=["p"], properties=properties)
    for part in ("a", "b"):
        t.append(pa.Table.from_pylist([r for r in ALL_ROWS if r["p"] == part], schema=SCHEMA))
    for commit in sorted(Path(path, "_delta_log").glob("*.json")):
        lines = []
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                stats = json.loads(action["add"]["stats"])
                assert stats["numRecords"] == ROWS_PER_FILE
                if lie is _MISSING:
                    del stats["numRecords"]
                else:
                    stats["numRecords"] = lie
                action["add"]["stats"] = json.dumps(stats)
            lines.append(json.dumps(action))
        commit.write_text("\n".join(lines) + "\n")
    return DeltaTable(path)


def _ours(t: DeltaTable, predicate: str | None = None) -> list[dict[str, Any]]:
    return sorted(t.snapshot().to_arrow(filter=predicate).to_pylist(), key=lambda r: r["id"])


def _expect(keep: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    return [r for r in ALL_ROWS if keep(r)]


# (name, table properties, delete options, predicate, rows it deletes, files it removes whole)
DELETES: list[tuple[str, dict[str, str] | None, dict[str, Any], str, Callable[[dict[str, Any]], bool], int]] = [
    ("dv_one_row", DV, {}, "id = 3", lambda r: r["id"] == 3, 0),
    ("dv_all_but_one_row", DV, {}, "id < 9", lambda r: r["id"] < 9, 0),
    ("dv_every_row_of_a_file", DV, {}, "id < 10", lambda r: r["id"] < 10, 1),
    ("dv_rows_of_both_files", DV, {}, "id % 10 = 4", lambda r: r["id"] % 10 == 4, 0),
    ("rewrite_one_row", None, {}, "id = 3", lambda r: r["id"] == 3, 1),
    ("rewrite_forced_on_dv_table", DV, {"use_deletion_vectors": False}, "id = 12", lambda r: r["id"] == 12, 1),
    ("partition_only", DV, {}, "p = 'a'", lambda r: r["p"] == "a", 1),
    ("partition_only_no_dv", None, {}, "p = 'b'", lambda r: r["p"] == "b", 1),
    ("null_safe_on_all_null_claim", DV, {}, "s <=> 'x5'", lambda r: r["s"] == "x5", 0),
]


@pytest.mark.parametrize("lie", list(LIES), ids=list(LIES))
@pytest.mark.parametrize("case", DELETES, ids=[c[0] for c in DELETES])
def test_delete_counts_rows_of_the_file_not_its_statistics(table_path: str, lie: str, case: tuple[Any, ...]) -> None:
    _, properties, options, predicate, deleted, removed_whole = case
    t = _lying_table(table_path, LIES[lie], properties)
    result = t.delete(predicate, **options)
    expected = _expect(lambda r: not deleted(r))
    assert _ours(t) == expected
    _oracles_agree(t, lie, expected)
    num_deleted = len(ALL_ROWS) - len(expected)
    assert result.num_deleted_rows == num_deleted
    assert result.metrics["numRemovedFiles"] == removed_whole
    if not options and properties == DV and removed_whole == 0:
        assert result.metrics["numCopiedRows"] == 0
        touched = {r["p"] for r in ALL_ROWS if deleted(r)}
        assert result.metrics["numDeletionVectorsAdded"] == len(touched)
    if properties is None or options:
        # A rewrite copies every other row of the files it touched.
        touched = {r["p"] for r in ALL_ROWS if deleted(r)}
        copied = sum(1 for r in expected if r["p"] in touched)
        assert result.metrics["numCopiedRows"] == (copied if "partition" not in case[0] else 0)


@pytest.mark.parametrize("lie", list(LIES), ids=list(LIES))
def test_partition_delete_of_files_with_deletion_vectors_counts_their_live_rows(table_path: str, lie: str) -> None:
    t = _lying_table(table_path, LIES[lie], DV)
    assert t.delete("id % 10 IN (1, 2)").num_deleted_rows == 4  # a DV on each file, 2 rows each
    result = t.delete("p = 'a'")  # metadata only: 10 stored rows - 2 deleted
    assert result.num_deleted_rows == 8 and result.metrics["numRemovedFiles"] == 1
    assert result.metrics["numDeletionVectorsRemoved"] == 1
    expected = _expect(lambda r: r["p"] == "b" and r["id"] % 10 not in (1, 2))
    assert _ours(t) == expected
    _oracles_agree(t, lie, expected)


def test_a_deletion_vector_past_the_end_of_its_file_is_corruption_not_a_removal(table_path: str) -> None:
    t = _lying_table(table_path, 1, DV)
    t.delete("id IN (8, 9)")
    a_file = next(Path(t.root).glob("p=a/*.parquet"))
    # The file now stores 5 rows, and its DV deletes rows 8 and 9: the log and the file disagree.
    pq.write_table(pa.Table.from_pylist(ALL_ROWS[:5], schema=SCHEMA).drop_columns(["p"]), a_file)
    with pytest.raises(CorruptDeletionVectorError, match="stores only 5 rows"):
        t.delete("id = 0")
    with pytest.raises(CorruptDataFileError, match="only 5 rows"):
        t.snapshot().to_arrow()


@pytest.mark.parametrize("lie", list(LIES), ids=list(LIES))
def test_a_new_deletion_vector_records_the_files_true_row_count(table_path: str, lie: str) -> None:
    t = _lying_table(table_path, LIES[lie], DV)
    result = t.delete("id = 3")
    commit = Path(t.root, "_delta_log", f"{result.version:020d}.json").read_text()
    adds = [json.loads(line)["add"] for line in commit.splitlines() if '"add"' in line]
    assert len(adds) == 1
    stats = json.loads(adds[0]["stats"])
    assert stats["numRecords"] == ROWS_PER_FILE and stats["tightBounds"] is False
    assert adds[0]["deletionVector"]["cardinality"] == 1
    # A second delete merges with the DV and still counts the footer's rows.
    second = t.delete("id <= 8")
    assert second.num_deleted_rows == 8 and second.metrics["numRemovedFiles"] == 0
    third = t.delete("id = 9")
    assert third.num_deleted_rows == 1 and third.metrics["numRemovedFiles"] == 1
    expected = _expect(lambda r: r["p"] == "b")
    assert _ours(t) == expected
    _oracles_agree(t, lie, expected)


READS: list[tuple[str | None, Callable[[dict[str, Any]], bool]]] = [
    (None, lambda r: True),
    ("id = 6", lambda r: r["id"] == 6),
    ("s = 'x3'", lambda r: r["s"] == "x3"),
    ("s IS NOT NULL", lambda r: r["s"] is not None),
    ("s IS NULL", lambda r: r["s"] is None),
    ("NOT (s IS NULL) AND id > 12", lambda r: r["s"] is not None and r["id"] > 12),
    ("s LIKE 'x1%'", lambda r: r["s"] is not None and r["s"].startswith("x1")),
    ("s != 'x0'", lambda r: r["s"] is not None and r["s"] != "x0"),
]


@pytest.mark.parametrize("lie", list(LIES), ids=list(LIES))
def test_to_arrow_loses_no_row_to_lying_statistics(table_path: str, lie: str) -> None:
    t = _lying_table(table_path, LIES[lie], DV)
    for predicate, keep in READS:
        assert _ours(t, predicate) == _expect(keep), predicate
    t.delete("id = 2")  # with a DV in place too
    for predicate, keep in READS:
        assert _ours(t, predicate) == _expect(lambda r, keep=keep: keep(r) and r["id"] != 2), predicate


def test_a_rewrite_reads_in_full_only_files_whose_stored_rows_match(table_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow_delta.engine.operations.delete as delete_module

    t = _lying_table(table_path, _MISSING, None)
    for part in ("a", "b"):  # two more files per partition whose statistics cannot rule "id = 3" out
        t.append(pa.Table.from_pylist([dict(_row(i), p=part) for i in range(100, 103)], schema=SCHEMA))
    read_in_full: list[str] = []
    real_read_data = delete_module.read_data

    def spy(snapshot: Any, files: pa.Table, *args: Any, **kwargs: Any) -> pa.Table:
        read_in_full.extend(files.column("path").to_pylist())
        return real_read_data(snapshot, files, *args, **kwargs)

    monkeypatch.setattr(delete_module, "read_data", spy)
    result = t.delete("id = 3 OR s = 'x101'", use_deletion_vectors=False)
    assert result.num_deleted_rows == 3 and result.metrics["numRemovedFiles"] == 3
    assert len(read_in_full) == 3 and all(path.startswith(("p=a/", "p=b/")) for path in read_in_full)
    expected = sorted(
        [r for r in ALL_ROWS if r["id"] != 3] + [dict(_row(i), p=p) for p in ("a", "b") for i in (100, 102)],
        key=lambda r: (r["id"], r["p"]),
    )
    assert sorted(t.snapshot().to_arrow().to_pylist(), key=lambda r: (r["id"], r["p"])) == expected


def _set_dv_cardinality(path: str, cardinality: int) -> None:
    """Rewrite the ``cardinality`` of every deletion vector descriptor in the log (a lying descriptor)."""
    for commit in sorted(Path(path, "_delta_log").glob("*.json")):
        lines = []
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                if action.get(kind, {}).get("deletionVector"):
                    action[kind]["deletionVector"]["cardinality"] = cardinality
            lines.append(json.dumps(action))
        commit.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("predicate", ["p = 'a'", None, "1 = 1"])
@pytest.mark.parametrize("corruption", ["past_the_end", "cardinality_too_large", "cardinality_too_small"])
def test_a_whole_file_delete_counts_the_rows_of_the_deletion_vector_itself(
    table_path: str, predicate: str | None, corruption: str
) -> None:
    """Removing whole files (partition or no predicate) counts the rows their DVs really delete.

    The DV descriptor's ``cardinality`` is the log's claim, as ``numRecords`` is: a DV that
    deletes rows past the end of its file, or whose descriptor claims another cardinality,
    is corruption, as it is to a read and to a predicate delete, never a wrong (even
    negative) ``numDeletedRows`` committed.
    """
    t = _lying_table(table_path, ROWS_PER_FILE, DV)
    t.delete("id IN (8, 9)")  # a DV of 2 rows on the file of partition a
    if corruption == "past_the_end":
        a_file = next(Path(t.root).glob("p=a/*.parquet"))
        pq.write_table(pa.Table.from_pylist(ALL_ROWS[:5], schema=SCHEMA).drop_columns(["p"]), a_file)
    else:
        _set_dv_cardinality(table_path, 1000 if corruption == "cardinality_too_large" else 1)
    version = DeltaTable(table_path).version()
    with pytest.raises(CorruptDeletionVectorError):
        DeltaTable(table_path).delete(predicate)
    assert DeltaTable(table_path).version() == version  # nothing committed


def test_a_whole_file_delete_of_an_intact_deletion_vector_counts_its_live_rows(table_path: str) -> None:
    t = _lying_table(table_path, 1, DV)
    t.delete("id IN (8, 9)")
    result = t.delete()  # both files removed whole: 8 + 10 live rows, whatever numRecords says
    assert result.num_deleted_rows == 18 and result.metrics["numRemovedFiles"] == 2
    assert result.metrics["numDeletionVectorsRemoved"] == 1
