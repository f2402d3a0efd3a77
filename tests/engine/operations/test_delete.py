"""DELETE in the embedded engine (engine/dml.py): deletion vectors, rewrites, conflicts.

Every state is read back twice: by our scan and by delta-rs (through its SQL engine,
``deltalake.QueryBuilder``: ``to_pyarrow_table`` refuses tables with deletion vectors).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeleteResult, DeltaTable
from airflow_delta.engine.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentModificationError,
    DeletionVectorsNotEnabledError,
    InvalidFilterError,
)
from airflow_delta.engine.operations.delete import matching_row_indexes, matching_rows

deltalake = pytest.importorskip("deltalake")

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("p", pa.string())])
DV = {"delta.enableDeletionVectors": "true"}


def delete_where(t: DeltaTable, predicate: str, **options: Any) -> int:
    """The table version after a DELETE: the one it committed, or the one it read when no row matched."""
    result: DeleteResult = t.delete(predicate, **options)
    return result.version if result.version is not None else result.read_version


def make_rows(ids: list[int], part: str) -> pa.Table:
    return pa.table(
        {"id": ids, "s": [None if i % 4 == 3 else f"s{i % 5}" for i in ids], "p": [part] * len(ids)}, schema=SCHEMA
    )


def make_table(path: str, properties: dict[str, str] | None = None) -> DeltaTable:
    """Partitions a (two files) and b (one file), ids 0..59."""
    t = DeltaTable.create(path, SCHEMA, partition_by=["p"], properties=properties)
    t.append(make_rows(list(range(0, 20)), "a"))
    t.append(make_rows(list(range(20, 40)), "a"))
    t.append(make_rows(list(range(40, 60)), "b"))
    return t


def ours(t: DeltaTable) -> list[tuple[Any, ...]]:
    data = t.snapshot().to_arrow()
    return sorted(zip(*(data.column(c).to_pylist() for c in SCHEMA.names), strict=True), key=repr)


def theirs(t: DeltaTable) -> list[tuple[Any, ...]]:
    dt = deltalake.DeltaTable(t.root)
    data = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT id, s, p FROM t").read_all())
    return sorted(zip(*(data.column(c).to_pylist() for c in SCHEMA.names), strict=True), key=repr)


def expected_rows(kept: list[int]) -> list[tuple[Any, ...]]:
    rows = [make_rows([i], "a" if i < 40 else "b").to_pylist()[0] for i in kept]
    return sorted(((r["id"], r["s"], r["p"]) for r in rows), key=repr)


def commit(t: DeltaTable, version: int) -> list[dict[str, Any]]:
    text = Path(t.root, "_delta_log", f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


def both_agree(t: DeltaTable, kept: list[int]) -> None:
    expected = expected_rows(kept)
    assert ours(t) == expected
    assert theirs(t) == expected


# ------------------------------------------------------------------ deletion vectors


def test_rounds_of_deletes_merge_deletion_vectors(table_path: str) -> None:
    t = make_table(table_path, DV)
    kept = list(range(60))
    rounds = [
        ("id % 7 = 0", lambda i: i % 7 == 0),
        ("id % 7 = 0 OR id % 5 = 1", lambda i: i % 7 == 0 or i % 5 == 1),  # overlaps round 1
        ("s = 's2' AND id > 30", lambda i: i % 4 != 3 and i % 5 == 2 and i > 30),
    ]
    previous_dvs: dict[str, dict[str, Any]] = {}
    for number, (predicate, matches) in enumerate(rounds):
        before = set(kept)
        kept = [i for i in kept if not matches(i)]
        result = t.delete(predicate)
        assert result.version == 3 + number + 1
        assert result.num_deleted_rows == len(before) - len(kept)  # never double counted
        both_agree(t, kept)
        lines = commit(t, result.version)
        info = lines[0]["commitInfo"]
        assert info["operation"] == "DELETE" and info["isBlindAppend"] is False
        assert info["operationParameters"] == {"predicate": json.dumps([predicate])}
        assert info["operationMetrics"]["numDeletedRows"] == str(result.num_deleted_rows)
        adds = [x["add"] for x in lines if "add" in x]
        removes = {x["remove"]["path"]: x["remove"] for x in lines if "remove" in x}
        assert adds and len({a["deletionVector"]["pathOrInlineDv"] for a in adds}) == 1  # one packed DV file
        metrics = info["operationMetrics"]
        had_dv = sum(1 for a in adds if a["path"] in previous_dvs)
        assert int(metrics["numDeletionVectorsUpdated"]) == had_dv
        assert int(metrics["numDeletionVectorsAdded"]) == len(adds) - had_dv
        for add in adds:
            stats = json.loads(add["stats"])
            assert stats["numRecords"] == 20 and stats["tightBounds"] is False
            assert removes[add["path"]].get("deletionVector") == previous_dvs.get(add["path"])
            previous_dvs[add["path"]] = add["deletionVector"]
    # The first round added DVs to all three files, later rounds updated them.
    assert commit(t, 5)[0]["commitInfo"]["operationMetrics"]["numDeletionVectorsAdded"] == "0"


def test_whole_files_are_removed_not_deletion_vectored(table_path: str) -> None:
    t = make_table(table_path, DV)
    t.delete("id % 2 = 0")  # every file gets a DV
    result = t.delete("id < 20 OR p = 'b'")  # the first file and the b file lose every row
    lines = commit(t, result.version)  # type: ignore[arg-type]
    removes = [x["remove"] for x in lines if "remove" in x]
    adds = [x["add"] for x in lines if "add" in x]
    assert len(removes) == 2 and adds == []
    assert all(r["deletionVector"]["cardinality"] == 10 for r in removes)  # with their old DVs
    assert result.metrics["numRemovedFiles"] == 2 and result.metrics["numDeletionVectorsRemoved"] == 2
    assert result.num_deleted_rows == 20
    both_agree(t, [i for i in range(20, 40) if i % 2])


def test_partition_predicates_delete_whole_files_without_reading_them(table_path: str) -> None:
    t = make_table(table_path, DV)
    b_file = t.snapshot().files("p = 'b'").column("path")[0].as_py()
    os.remove(Path(t.root, b_file))  # a metadata-only delete never opens the file
    result = t.delete("p = 'b'")
    assert result.metrics["numRemovedFiles"] == 1 and result.num_deleted_rows == 20
    both_agree(t, list(range(40)))


def test_delete_without_predicate_empties_the_table(table_path: str) -> None:
    t = make_table(table_path, DV)
    t.delete("id = 3")
    result = t.delete(None)
    assert result.num_deleted_rows == 59 and result.metrics["numRemovedFiles"] == 3
    info = commit(t, result.version)[0]["commitInfo"]  # type: ignore[arg-type]
    assert info["operationParameters"] == {"predicate": "[]"}
    both_agree(t, [])


def test_no_matching_row_commits_nothing(table_path: str) -> None:
    t = make_table(table_path, DV)
    assert delete_where(t, "id > 1000") == 3
    result = t.delete("s = 'nope'")  # files may match by stats, no row does
    assert result.version is None and result.read_version == 3 and result.num_deleted_rows == 0
    assert t.version() == 3


def test_null_predicate_results_keep_the_row(table_path: str) -> None:
    t = make_table(table_path, DV)
    t.delete("s <> 's1'")  # rows with s NULL are neither equal nor unequal: they stay
    kept = [i for i in range(60) if i % 4 == 3 or i % 5 == 1]
    both_agree(t, kept)


def test_forcing_deletion_vectors_needs_the_property(table_path: str) -> None:
    t = make_table(table_path)
    with pytest.raises(DeletionVectorsNotEnabledError, match=r"delta\.enableDeletionVectors=true"):
        t.delete("id = 1", use_deletion_vectors=True)
    assert t.version() == 3


def test_invalid_predicates_are_refused_before_anything_is_written(table_path: str) -> None:
    t = make_table(table_path, DV)
    with pytest.raises(InvalidFilterError):
        t.delete("no_such_column = 1")
    assert t.version() == 3 and not [n for n in os.listdir(t.root) if n.startswith("deletion_vector_")]


# ------------------------------------------------------------------ rewriting (no DVs)


def test_tables_without_deletion_vectors_get_files_rewritten(table_path: str) -> None:
    t = make_table(table_path)
    before = set(t.snapshot().files().column("path").to_pylist())
    result = t.delete("id % 3 = 0 AND p = 'a'")
    lines = commit(t, result.version)  # type: ignore[arg-type]
    removed = {x["remove"]["path"] for x in lines if "remove" in x}
    adds = [x["add"] for x in lines if "add" in x]
    assert len(removed) == 2 and removed < before
    assert adds and all("deletionVector" not in a and a["path"] not in before for a in adds)
    assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == 40 - 14
    assert result.metrics["numCopiedRows"] == 26 and result.metrics["numDeletedRows"] == 14
    assert result.metrics["numAddedFiles"] == len(adds) and result.metrics["numRemovedFiles"] == 2
    kept = [i for i in range(60) if not (i % 3 == 0 and i < 40)]
    both_agree(t, kept)
    # No deletion vectors anywhere: delta-rs's plain reader takes the table too.
    plain = deltalake.DeltaTable(t.root).to_pyarrow_table()
    assert sorted(plain.column("id").to_pylist()) == kept
    assert t.snapshot().protocol.min_reader_version == 1


def test_rewrite_removes_files_that_lose_every_row_without_writing(table_path: str) -> None:
    t = make_table(table_path)
    result = t.delete("id >= 20 AND id < 40")
    assert result.metrics["numAddedFiles"] == 0 and result.metrics["numRemovedFiles"] == 1
    both_agree(t, [i for i in range(60) if not 20 <= i < 40])


def test_rewrite_honours_existing_deletion_vectors(table_path: str) -> None:
    """A table that had DVs and turned them off: rewritten files drop the DV'd rows too."""
    t = make_table(table_path, DV)
    t.delete("id % 2 = 0")
    result = t.delete("id % 3 = 0", use_deletion_vectors=False)
    assert result.metrics["numDeletionVectorsRemoved"] == 3
    assert t.snapshot().add_actions.column("deletion_vector").null_count == t.snapshot().num_files
    both_agree(t, [i for i in range(60) if i % 2 and i % 3])


# ------------------------------------------------------------------ helpers for one file


def test_matching_row_indexes_are_physical_positions(table_path: str) -> None:
    t = make_table(table_path, DV)
    t.delete("id = 21")
    snapshot = t.snapshot()
    second = snapshot.files("id >= 20 AND id < 40").column("path")[0].as_py()
    hits = matching_row_indexes(snapshot, second, "id > 19 AND id < 24")
    assert hits.tolist() == [0, 1, 2, 3]  # the DV'd row 1 (id 21) included: positions in the file
    files = snapshot.plan_files("p = 'a'")
    live = matching_rows(snapshot, files, "id > 19 AND id < 24", apply_deletion_vectors=True)
    assert sorted(len(x) for x in live) == [0, 3]


# ------------------------------------------------------------------ concurrency


def test_delete_conflicts_with_an_append_into_the_partition_it_read(table_path: str) -> None:
    t = make_table(table_path, {**DV, "delta.isolationLevel": "Serializable"})
    read = t.snapshot()
    t.append(make_rows([1, 2], "a"))  # lands between the DELETE's read and its commit
    with pytest.raises(ConcurrentAppendException) as info:
        t.delete("p = 'a' AND id < 10", snapshot=read)
    assert info.value.winning_version == 4 and info.value.conflicting == [{"p": "a"}]
    assert t.version() == 4
    # Rows the DELETE's filter cannot match (per the new file's statistics) do not conflict.
    read = t.snapshot()
    t.append(make_rows([100, 101], "a"))
    assert delete_where(t, "p = 'a' AND id < 10", snapshot=read) == 6


def test_delete_rebases_over_appends_it_cannot_have_matched(table_path: str) -> None:
    t = make_table(table_path, {**DV, "delta.isolationLevel": "Serializable"})
    read = t.snapshot()
    t.append(make_rows([100, 101], "b"))  # another partition
    assert delete_where(t, "p = 'a' AND id < 10", snapshot=read) == 5
    assert sorted(t.snapshot().to_arrow().column("id").to_pylist()) == [*range(10, 60), 100, 101]


def test_write_serializable_delete_keeps_a_concurrent_blind_append(table_path: str) -> None:
    t = make_table(table_path, DV)  # WriteSerializable by default
    read = t.snapshot()
    t.append(make_rows([5, 6], "a"))  # blind append into the partition the DELETE reads
    t.delete("p = 'a' AND id < 10", snapshot=read)
    # The DELETE is ordered before the append, as WriteSerializable allows: the new rows stay.
    assert sorted(t.snapshot().to_arrow().column("id").to_pylist()) == [5, 6, *range(10, 60)]


def test_concurrent_deletes_of_the_same_file(table_path: str) -> None:
    t = make_table(table_path, DV)
    read = t.snapshot()
    t.delete("id < 20")  # removes the first file outright
    with pytest.raises(ConcurrentDeleteReadException) as info:
        t.delete("id = 5", snapshot=read)  # read that file; Delta checks reads before deletes
    assert info.value.winning_operation == "DELETE"
    read = t.snapshot()
    t.delete("id = 25")  # gives the second file a DV: its add may match the loser's read
    with pytest.raises(ConcurrentModificationError):
        t.delete("id = 26", snapshot=read)
    both_agree(t, [i for i in range(20, 60) if i != 25])


# ------------------------------------------------------------------ property test

# (sql, python) pairs over id (int), s (string, NULL when id % 4 == 3), p (partition);
# python returns True / False / None (SQL's unknown).
_ATOMS = st.one_of(
    st.integers(-5, 65).map(lambda k: (f"id < {k}", lambda r, k=k: r["id"] < k)),
    st.integers(-5, 65).map(lambda k: (f"id >= {k}", lambda r, k=k: r["id"] >= k)),
    st.tuples(st.integers(2, 6), st.integers(0, 5)).map(
        lambda mr: (f"id % {mr[0]} = {mr[1]}", lambda r, m=mr[0], x=mr[1]: r["id"] % m == x)
    ),
    st.sampled_from(["s0", "s1", "s4", "zz"]).map(
        lambda v: (f"s = '{v}'", lambda r, v=v: None if r["s"] is None else r["s"] == v)
    ),
    st.just(("s IS NULL", lambda r: r["s"] is None)),
    st.sampled_from(["a", "b"]).map(lambda v: (f"p = '{v}'", lambda r, v=v: r["p"] == v)),
)


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


_PREDICATES = st.recursive(
    _ATOMS,
    lambda inner: st.tuples(inner, inner, st.booleans()).map(
        lambda t: (
            f"({t[0][0]}) {'AND' if t[2] else 'OR'} ({t[1][0]})",
            (lambda r, f=t[0][1], g=t[1][1], both=t[2]: (_and if both else _or)(f(r), g(r))),
        )
    ),
    max_leaves=3,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ids=st.lists(st.integers(0, 60), min_size=1, max_size=40),
    predicates=st.lists(_PREDICATES, min_size=1, max_size=3),
    use_dvs=st.booleans(),
)
def test_random_deletes_equal_filtering_the_rows(
    tmp_path_factory: pytest.TempPathFactory, ids: list[int], predicates: list[Any], use_dvs: bool
) -> None:
    path = str(tmp_path_factory.mktemp("dml"))
    t = DeltaTable.create(path, SCHEMA, partition_by=["p"], properties=DV if use_dvs else None)
    data = pa.concat_tables([make_rows([i for i in ids if i % 2], "a"), make_rows([i for i in ids if i % 2 == 0], "b")])
    # Two appends: partitions get several files, some with the same ids.
    t.append(data.slice(0, data.num_rows // 2))
    t.append(data.slice(data.num_rows // 2))
    remaining = data.to_pylist()
    for sql, matches in predicates:
        result = t.delete(sql)
        survivors = [r for r in remaining if matches(r) is not True]
        assert result.num_deleted_rows == len(remaining) - len(survivors)
        remaining = survivors
        expected = sorted(((r["id"], r["s"], r["p"]) for r in remaining), key=repr)
        assert ours(t) == expected
    assert theirs(t) == sorted(((r["id"], r["s"], r["p"]) for r in remaining), key=repr)
    if not use_dvs:
        assert t.snapshot().add_actions.column("deletion_vector").null_count == t.snapshot().num_files
    np.testing.assert_equal(len(remaining), t.snapshot().to_arrow().num_rows)


# ------------------------------------------------------------------ other writers' tables, column mapping


def test_deleting_from_a_table_spark_wrote_merges_with_its_deletion_vector(shared_tables: Path, tmp_path: Path) -> None:
    import shutil

    target = tmp_path / "table-with-dv-small"
    shutil.copytree(shared_tables / "table-with-dv-small", target)  # a scratch copy; the original stays untouched
    t = DeltaTable(str(target))
    assert sorted(t.snapshot().to_arrow().column("value").to_pylist()) == list(range(1, 9))  # Spark deleted 0 and 9
    result = t.delete("value IN (5, 9)")  # 9 is already deleted by Spark's DV
    assert result.num_deleted_rows == 1 and result.metrics["numDeletionVectorsUpdated"] == 1
    lines = commit(t, result.version)  # type: ignore[arg-type]
    (remove,) = [x["remove"] for x in lines if "remove" in x]
    (add,) = [x["add"] for x in lines if "add" in x]
    assert remove["deletionVector"]["pathOrInlineDv"] == "vBn[lx{q8@P<9BNH/isA"  # Spark's DV goes
    assert add["deletionVector"]["cardinality"] == 3 and add["tags"] == remove["tags"]
    assert sorted(t.snapshot().to_arrow().column("value").to_pylist()) == [1, 2, 3, 4, 6, 7, 8]
    dt = deltalake.DeltaTable(str(target))
    got = pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT value FROM t").read_all())
    assert sorted(got.column("value").to_pylist()) == [1, 2, 3, 4, 6, 7, 8]


def test_delete_on_a_column_mapped_table(table_path: str) -> None:
    t = DeltaTable.create(
        table_path,
        SCHEMA,
        partition_by=["p"],
        properties={**DV, "delta.columnMapping.mode": "name"},
    )
    t.append(make_rows(list(range(20)), "a"))
    t.append(make_rows(list(range(40, 50)), "b"))
    t.delete("s = 's1' OR (p = 'b' AND id > 45)")
    t.delete("id < 3")
    kept = [i for i in [*range(20), *range(40, 50)] if not (i % 4 != 3 and i % 5 == 1) and not i > 45 and i >= 3]
    both_agree(t, kept)


def test_actions_carry_exactly_the_physical_partition_columns(table_path: str) -> None:
    t = DeltaTable.create(table_path, SCHEMA, partition_by=["p"], properties={**DV, "delta.columnMapping.mode": "name"})
    t.append(make_rows(list(range(10)), "a"))
    t.append(make_rows(list(range(10, 20)), "b"))
    physical = next(iter(t.snapshot().add_actions.column("partition_values")[0].as_py()))[0]
    assert physical.startswith("col-")
    v1 = t.delete("id = 1").version
    v2 = t.delete("p = 'b'").version
    for version in (v1, v2):
        for line in commit(t, version):  # type: ignore[arg-type]
            action = line.get("add") or line.get("remove")
            if action is not None:
                assert list(action["partitionValues"]) == [physical]


def test_row_counts_of_files_without_statistics_come_from_their_footers(table_path: str) -> None:
    from airflow_delta.engine.model.actions import AddFile

    t = make_table(table_path, DV)
    extra = DeltaTable.create(str(Path(table_path).parent / "scratch"), SCHEMA, partition_by=["p"])
    extra.append(make_rows([70, 71, 72], "c"))
    (row,) = extra.snapshot().add_actions.to_pylist()
    os.makedirs(Path(t.root, "p=c"), exist_ok=True)
    os.replace(Path(extra.root, row["path"]), Path(t.root, row["path"]))
    with t.transaction() as txn:
        txn.add(AddFile(row["path"], {"p": "c"}, row["size"], row["modification_time"]))  # no stats
        txn.commit("WRITE")
    t.delete("id = 71")
    both_agree_ids = sorted(t.snapshot().to_arrow().column("id").to_pylist())
    assert both_agree_ids == [*range(60), 70, 72]
    result = t.delete(None)
    assert result.num_deleted_rows == 62
    assert theirs(t) == []


def test_delta_table_delete_shortcut(table_path: str) -> None:
    table = DeltaTable.create(table_path, pa.schema([("id", pa.int64())]), properties={"delta.enableDeletionVectors": "true"})
    table.append(pa.table({"id": list(range(10))}))
    result = table.delete("id % 2 = 0")
    assert result.version == 2 and result.num_deleted_rows == 5
    assert sorted(table.snapshot().to_arrow()["id"].to_pylist()) == [1, 3, 5, 7, 9]


def test_stage_delete_stages_without_committing(table_path: str) -> None:
    from airflow_delta.engine import stage_delete

    t = make_table(table_path, DV)
    with t.transaction() as txn:
        txn.set_app_transaction("job-1", 1)
        metrics = stage_delete(txn, "p = 'b' OR id = 3")
        assert t.version() == 3  # staged only
        assert metrics["numDeletedRows"] == 21 and metrics["numRemovedFiles"] == 1
        assert metrics["numDeletionVectorsAdded"] == 1
        version = txn.commit("DELETE", {"predicate": ["p = 'b' OR id = 3"]}, metrics, tags={"job": "1"})
    assert version == 4 and t.snapshot().transaction_version("job-1") == 1
    info = commit(t, version)[0]["commitInfo"]  # type: ignore[arg-type]
    assert info["tags"] == {"job": "1"} and info["operationMetrics"]["numDeletedRows"] == "21"
    both_agree(t, [i for i in range(40) if i != 3])
    with t.transaction() as txn:
        assert stage_delete(txn, "id > 1000")["numDeletedRows"] == 0
        assert not txn.has_staged_actions
