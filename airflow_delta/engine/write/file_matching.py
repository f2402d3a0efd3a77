"""Which files a read predicate may match: the file-level test behind conflict checks."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import DeltaError
from airflow_delta.engine.model.actions import Metadata
from airflow_delta.engine.model.arrow_numpy import bool_array, bool_scalar
from airflow_delta.engine.model.partition_values import parse_partition_values
from airflow_delta.engine.model.stats_parse import parse_stats

log = logging.getLogger(__name__)


def files_may_match(predicates: Sequence[Any], files: pa.Table, metadata: Metadata) -> pa.BooleanArray:
    """For each row of ``files`` (``partition_values`` map with physical keys, ``stats`` JSON), may any predicate match?

    Conservative: anything that cannot be evaluated (no statistics, a module that is
    not available, stats that do not parse) counts as a possible match.
    """
    n = files.num_rows
    everything = bool_array(np.ones(n, dtype=bool))
    if n == 0 or not predicates:
        return everything if predicates else bool_array(np.zeros(n, dtype=bool))
    try:
        from airflow_delta.engine.expressions import prune_files
    except ImportError:  # pragma: no cover - before the expression engine exists
        log.debug("expressions/schema modules unavailable; every added file counts as matching")
        return everything
    try:
        partition_values = parse_partition_values(files.column("partition_values").combine_chunks(), metadata)
    except (DeltaError, pa.ArrowException, ValueError, KeyError) as exc:
        log.debug("partition values unusable for conflict checks (%s); every file counts as matching", exc)
        return everything
    stats = None
    if "stats" in files.column_names and files.column("stats").null_count < n:
        try:

            stats = parse_stats(files.column("stats").combine_chunks(), metadata)
        except (ImportError, DeltaError, pa.ArrowException, ValueError, KeyError) as exc:
            log.debug("statistics unusable for conflict checks (%s); partition values only", exc)
            stats = None
    mask: pa.Array | None = None
    try:
        for predicate in predicates:
            m = prune_files(predicate, partition_values, stats, tuple(metadata.partition_columns))
            mask = m if mask is None else pc.or_(mask, m)
    except (DeltaError, pa.ArrowException, ValueError, KeyError) as exc:
        log.debug("could not evaluate read predicates on files (%s); every file counts as matching", exc)
        return everything
    assert mask is not None
    return pc.fill_null(mask, bool_scalar(True))  # a Python True would import pandas


__all__ = ["files_may_match"]
