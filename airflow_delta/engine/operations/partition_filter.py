"""Selecting files by a predicate on partition columns alone, from their partition values.

DELETE (its metadata-only case) and OPTIMIZE (``WHERE``) both select whole files this
way: the predicate is evaluated once per file on the file's typed partition values,
never on its rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_delta.engine.expressions.arrow_values import evaluate
from airflow_delta.engine.model.arrow_numpy import bool_array, mask_to_numpy
from airflow_delta.engine.model.partition_values import parse_partition_values

if TYPE_CHECKING:
    from airflow_delta.engine.expressions import Predicate
    from airflow_delta.engine.read.snapshot import Snapshot

__all__ = ["partition_predicate_mask"]


def partition_predicate_mask(snapshot: Snapshot, files: pa.Table, predicate: Predicate) -> pa.Array:
    """Per row of ``files`` (file actions of ``snapshot``), whether ``predicate`` is TRUE on its partition values.

    ``predicate`` must reference partition columns only (the caller checks); a NULL
    result counts as false, as a WHERE clause treats it.
    """
    if files.num_rows == 0:
        return pa.nulls(0, pa.bool_())
    values = parse_partition_values(files.column("partition_values"), snapshot.metadata)
    if values.type.num_fields:
        table = pa.Table.from_struct_array(values)
    else:  # a predicate on no column at all ("1 = 1"): one placeholder column keeps the row count
        table = pa.table({"__delta_partition_placeholder": pa.nulls(files.num_rows)})
    # evaluate, not Table.filter(expression): that would import pyarrow.dataset and pandas.
    return bool_array(mask_to_numpy(evaluate(table, predicate.to_arrow(nulls_as_false=True))))
