"""Where a SQL condition is TRUE on the rows of an Arrow table (:func:`condition_mask`)."""

from __future__ import annotations

import pyarrow as pa

from airflow_delta.engine.expressions.arrow_values import evaluate
from airflow_delta.engine.expressions.binding import parse_predicate


def condition_mask(rows: pa.Table, condition: str) -> pa.Array:
    """A boolean array, TRUE where ``condition`` (SQL over ``rows``' columns) is TRUE; NULL counts as FALSE.

    The condition is bound to ``rows.schema`` as the engine's DELETE binds its predicate
    (:class:`~airflow_delta.engine.InvalidFilterError` for one that does not fit), and
    evaluated with the same Arrow expressions.
    """
    predicate = parse_predicate(condition, rows.schema)
    mask = evaluate(rows, predicate.to_arrow(nulls_as_false=True))
    if mask.type != pa.bool_():
        mask = mask.cast(pa.bool_())
    return mask.fill_null(False) if mask.null_count else mask
