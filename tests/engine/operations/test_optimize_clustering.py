"""OPTIMIZE on liquid-clustered tables: Delta's ClusteringStrategy (ZCubes, incremental, full), the Hilbert curve.

What the table holds afterwards is read by delta-rs and delta-kernel-rs; the ZCube
bookkeeping is read from the log's JSON; the Hilbert index is checked against the
curve's defining properties (a bijection whose consecutive points are neighbours).
Delta Lake's own OPTIMIZE and DESCRIBE DETAIL check the same tables in
``tests/spark/test_clustering_delta.py`` once the Delta oracle is available.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_delta.engine import DeltaTable, InvalidArgumentError, OptimizeOptions
from airflow_delta.engine.operations.optimize import hilbert_transpose
from tests.conftest import shared_tables_dir
from tests.oracles import assert_oracles_read, read_with_deltars

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.int64()), ("s", pa.string())])


def _hilbert_integer(coordinates: list[int], bits: int) -> int:
    transposed = hilbert_transpose([np.array([c], np.uint32) for c in coordinates], bits)
    value = 0
    for bit in range(bits - 1, -1, -1):
        for axis in transposed:
            value = (value << 1) | int((int(axis[0]) >> bit) & 1)
    return value


@pytest.mark.parametrize(("dimensions", "bits"), [(2, 1), (2, 3), (3, 2), (4, 2), (2, 5)])
def test_hilbert_index_is_a_bijection_whose_consecutive_points_are_neighbours(dimensions: int, bits: int) -> None:
    side = 1 << bits
    points = list(itertools.product(range(side), repeat=dimensions))
    by_index = {_hilbert_integer(list(p), bits): p for p in points}
    assert sorted(by_index) == list(range(side**dimensions))
    for index in range(1, side**dimensions):
        step = [abs(x - y) for x, y in zip(by_index[index - 1], by_index[index], strict=True)]
        assert sorted(step)[-1] == 1 and sum(step) == 1, (index, by_index[index - 1], by_index[index])


@given(st.lists(st.tuples(st.integers(0, 1023), st.integers(0, 1023), st.integers(0, 1023)), min_size=1, max_size=50))
def test_the_vectorised_index_agrees_with_one_point_at_a_time(points: list[tuple[int, int, int]]) -> None:
    columns = [np.array([p[k] for p in points], np.uint32) for k in range(3)]
    together = hilbert_transpose(columns, 10)
    for row, point in enumerate(points):
        alone = hilbert_transpose([np.array([c], np.uint32) for c in point], 10)
        assert [int(t[row]) for t in together] == [int(a[0]) for a in alone]


# ------------------------------------------------------------------ OPTIMIZE of a clustered table


def _clustered_table(path: str, columns: list[str], *, appends: int = 6, rows: int = 400, seed: int = 0) -> DeltaTable:
    table = DeltaTable.create(path, SCHEMA, properties={"delta.feature.clustering": "supported"})
    with table.transaction() as txn:
        txn.set_domain_metadata(
            "delta.clustering", {"clusteringColumns": [[c] for c in columns], "domainName": "delta.clustering"}, system=True
        )
        txn.commit("CLUSTER BY")
    rng = np.random.default_rng(seed)
    for _ in range(appends):
        table.append(
            pa.table(
                {
                    "a": rng.integers(0, 10_000, rows), "b": rng.integers(0, 10_000, rows),
                    "c": rng.integers(0, 10_000, rows), "s": [f"r{i}" for i in range(rows)],
                },
                schema=SCHEMA,
            )
        )
    return table


def _last_actions(path: str) -> list[dict[str, Any]]:
    logs = sorted((Path(path) / "_delta_log").glob("*.json"))
    return [json.loads(line) for line in logs[-1].read_text().splitlines() if line]


def _all_rows(path: str) -> list[dict[str, Any]]:
    return read_with_deltars(path)


def overlap_depth(table: DeltaTable, columns: list[str]) -> float:
    """Mean number of other live files whose min/max box over ``columns`` meets a file's: lower is better clustered.

    A file's box is its [min, max] on every column; two boxes meet when their ranges meet
    on each column (a query bounded on all of them must read both).
    """
    stats = [json.loads(s) for s in table.snapshot().add_actions.column("stats").to_pylist()]
    boxes = [[(s["minValues"][c], s["maxValues"][c]) for c in columns] for s in stats]
    if len(boxes) < 2:
        return 0.0
    meeting = sum(
        1 for x, y in itertools.permutations(boxes, 2) if all(a[0] <= b[1] and b[0] <= a[1] for a, b in zip(x, y, strict=True))
    )
    return meeting / len(boxes)


@pytest.mark.parametrize("columns", [["a"], ["a", "b", "c"]])
def test_optimize_clusters_into_one_zcube_and_keeps_every_row(tmp_path: Path, columns: list[str]) -> None:
    path = str(tmp_path / "t")
    table = _clustered_table(path, columns)
    before_rows = _all_rows(path)
    before = overlap_depth(table, columns)
    result = table.optimize(OptimizeOptions(max_file_size=4_000))
    assert result.metrics["numFilesRemoved"] == 6 and result.metrics["numFilesAdded"] > 4
    assert_oracles_read(path, before_rows)
    actions = _last_actions(path)
    info = actions[0]["commitInfo"]
    assert json.loads(info["operationParameters"]["clusterBy"]) == columns
    assert json.loads(info["operationParameters"]["zOrderBy"]) == [] and info["operationParameters"]["isFull"] is False
    adds = [a["add"] for a in actions if "add" in a]
    assert {a["clusteringProvider"] for a in adds} == {"liquid"}
    assert len({a["tags"]["ZCUBE_ID"] for a in adds}) == 1
    assert {a["tags"]["ZCUBE_ZORDER_BY"] for a in adds} == {json.dumps(columns, separators=(",", ":"))}
    assert all(a["dataChange"] is False for a in adds)
    # The clustering domain is untouched; the files overlap less on every clustering column.
    domain = json.loads(table.snapshot().domain_metadata["delta.clustering"].configuration)
    assert domain["clusteringColumns"] == [[c] for c in columns]
    after = overlap_depth(table, columns)
    assert after < 0.6 * before, (before, after)


def test_optimize_is_incremental_and_full_reclusters_everything(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _clustered_table(path, ["a", "b"])
    table.optimize(OptimizeOptions(max_file_size=8_000))
    clustered = set(table.snapshot().add_actions.column("path").to_pylist())
    # One ZCube alone is as clustered as it gets: nothing to do.
    assert table.optimize().versions == ()
    table.append(pa.table({"a": [1], "b": [2], "c": [3], "s": ["new"]}, schema=SCHEMA))
    # The new file joins the small ZCube (Delta's ClusteringStrategy merges into cubes below its minimum size).
    result = table.optimize(OptimizeOptions(max_file_size=8_000))
    assert result.metrics["numFilesRemoved"] == len(clustered) + 1
    files = table.snapshot().add_actions
    cube = {dict(t)["ZCUBE_ID"] for t in files.column("tags").to_pylist()}
    assert len(cube) == 1
    full = table.optimize(OptimizeOptions(full=True, max_file_size=8_000))
    assert full.metrics["numFilesRemoved"] == files.num_rows
    assert json.loads(_last_actions(path)[0]["commitInfo"]["operationParameters"]["isFull"] and "true") is True


def test_files_clustered_by_other_columns_or_another_provider_are_left_alone(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _clustered_table(path, ["a", "b"], appends=2)
    table.optimize()
    # The clustering columns change: the old ZCube is clustered by other columns now.
    with table.transaction() as txn:
        txn.set_domain_metadata(
            "delta.clustering", {"clusteringColumns": [["c"]], "domainName": "delta.clustering"}, system=True
        )
        txn.commit("CLUSTER BY")
    assert table.optimize().versions == ()
    assert table.optimize(OptimizeOptions(full=True)).metrics["numFilesRemoved"] == 1


def test_zorder_where_and_full_are_refused_as_delta_refuses_them(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _clustered_table(path, ["a"], appends=2)
    with pytest.raises(InvalidArgumentError, match="clustered by"):
        table.optimize(OptimizeOptions(zorder_by=["b"]))
    with pytest.raises(InvalidArgumentError, match="partitions"):
        table.optimize(OptimizeOptions(where="a > 1"))
    plain = DeltaTable.create(str(tmp_path / "plain"), SCHEMA)
    with pytest.raises(InvalidArgumentError, match="clustering columns"):
        plain.optimize(OptimizeOptions(full=True))
    assert table.version() == 3


def test_dml_on_a_clustered_table_keeps_the_domain(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _clustered_table(path, ["a", "b"], appends=2, rows=20)
    rows = _all_rows(path)
    table.delete("a < 5000")
    table.restore(3)  # the version before the DELETE
    table.append(pa.table({"a": [1], "b": [2], "c": [3], "s": ["x"]}, schema=SCHEMA))
    snapshot = table.snapshot()
    assert json.loads(snapshot.domain_metadata["delta.clustering"].configuration)["clusteringColumns"] == [["a"], ["b"]]
    assert_oracles_read(path, [*rows, {"a": 1, "b": 2, "c": 3, "s": "x"}])


# ------------------------------------------------------------------ the shared tables


def _copy(name: str, tmp_path: Path) -> str:
    source = shared_tables_dir() / name
    if not source.exists():
        pytest.skip(f"{source} is not available")
    target = tmp_path / name
    shutil.copytree(source, target)
    return str(target)


def test_shared_liquid_table_takes_delete_append_and_optimize(tmp_path: Path) -> None:
    # Delta 3.0's preview spelling: writer feature "liquid", domain "delta.liquid".
    path = _copy("table_with_liquid_clustering", tmp_path)
    table = DeltaTable(path)
    table.delete("id % 3 = 0")
    table.append(pa.table({"id": pa.array([100, 101], pa.int64())}))
    expected = [{"id": i} for i in range(10) if i % 3] + [{"id": 100}, {"id": 101}]
    assert_oracles_read(path, expected)
    result = table.optimize()
    assert result.metrics["numFilesAdded"] == 1
    actions = _last_actions(path)
    assert json.loads(actions[0]["commitInfo"]["operationParameters"]["clusterBy"]) == ["id"]
    assert_oracles_read(path, expected)
    snapshot = table.snapshot()
    assert "delta.liquid" in snapshot.domain_metadata
    high_water_mark = json.loads(snapshot.domain_metadata["delta.rowTracking"].configuration)["rowIdHighWaterMark"]
    assert high_water_mark > 9


def test_shared_domain_metadata_table_takes_a_delete_and_an_append(tmp_path: Path) -> None:
    # Only its checkpoint is shared (no data files): a DELETE of every row and an append need none.
    path = _copy("table-with-domain-metadata", tmp_path)
    table = DeltaTable(path)
    table.delete()
    table.append(pa.table({"id": pa.array([1], pa.int64()), "name": ["x"], "department": ["d"]}))
    assert_oracles_read(path, [{"id": 1, "name": "x", "department": "d"}])
    snapshot = table.snapshot()
    assert snapshot.add_actions.column("base_row_id").to_pylist() == [436]  # above Databricks' mark of 435
    assert {"delta.clustering", "com.databricks.liquid"} <= set(snapshot.domain_metadata)
    assert table.optimize().versions != ()  # one unclustered file: it becomes a ZCube


# ------------------------------------------------------------------ ALTER TABLE CLUSTER BY


def test_cluster_by_makes_a_table_clustered_and_changes_its_columns(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA)
    table.append(pa.table({"a": [3, 1], "b": [1, 2], "c": [0, 0], "s": ["x", "y"]}, schema=SCHEMA))
    assert table.cluster_by([]) is None  # CLUSTER BY NONE on a table that is not clustered: nothing
    version = table.cluster_by(["b", "A"])
    snapshot = table.snapshot()
    assert version == 2 and "clustering" in snapshot.protocol.writer_features
    assert json.loads(snapshot.domain_metadata["delta.clustering"].configuration)["clusteringColumns"] == [["b"], ["a"]]
    info = _last_actions(path)[0]["commitInfo"]
    assert info["operation"] == "CLUSTER BY"
    assert info["operationParameters"] == {"oldClusteringColumns": "", "newClusteringColumns": "b,a"}
    table.optimize()
    table.cluster_by(["c"])
    assert table.optimize().versions == ()  # the old ZCube stays until a full OPTIMIZE
    assert table.optimize(OptimizeOptions(full=True)).metrics["numFilesRemoved"] == 1
    table.cluster_by([])
    assert json.loads(table.snapshot().domain_metadata["delta.clustering"].configuration)["clusteringColumns"] == []
    assert table.optimize().versions == ()  # no clustering columns: plain compaction of one file
    assert_oracles_read(path, [{"a": 3, "b": 1, "c": 0, "s": "x"}, {"a": 1, "b": 2, "c": 0, "s": "y"}])


def test_cluster_by_follows_deltas_rules(tmp_path: Path) -> None:
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA, properties={"delta.dataSkippingNumIndexedCols": "2"})
    with pytest.raises(InvalidArgumentError, match="at most 4"):
        table.cluster_by(["a", "b", "c", "s", "a"])
    with pytest.raises(InvalidArgumentError, match="statistics"):
        table.cluster_by(["c"])
    with pytest.raises(InvalidArgumentError, match="not one of"):
        table.cluster_by(["nope"])
    partitioned = DeltaTable.create(str(tmp_path / "p"), SCHEMA, partition_by=["s"])
    with pytest.raises(InvalidArgumentError, match="partitioned"):
        partitioned.cluster_by(["a"])
    assert table.version() == 0 and partitioned.version() == 0
