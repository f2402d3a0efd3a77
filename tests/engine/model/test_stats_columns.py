"""Which columns statistics cover: indexed columns from the table properties or overrides."""

from __future__ import annotations

from airflow_delta.engine.model.stats_columns import indexed_columns, leaf_paths
from tests.engine.model.stats_builders import _field, _metadata


def test_stats_columns_property_wins_over_num_indexed_cols() -> None:
    metadata = _metadata(
        [_field("a", "long"), _field("b", "long"), _field("`odd.name`", "long")],
        configuration={"delta.dataSkippingStatsColumns": "b", "delta.dataSkippingNumIndexedCols": "1"},
    )
    assert leaf_paths(indexed_columns(metadata)) == [("b",)]
    assert leaf_paths(indexed_columns(metadata, num_indexed_cols=1)) == [("a",)]
    assert leaf_paths(indexed_columns(metadata, stats_columns=["```odd.name```"])) == [("`odd.name`",)]
