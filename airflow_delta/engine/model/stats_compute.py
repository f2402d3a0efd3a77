"""Computing per-file statistics: the ``stats`` JSON Delta writes for a data file.

:func:`compute_stats` computes it from the rows of a file we write, as Delta does;
:func:`stats_from_parquet_metadata` derives it from the parquet footer of a file written
elsewhere (e.g. by Spark executors), leaving out what a footer cannot vouch for. Statistics
cover the columns :func:`~airflow_delta.engine.model.stats_columns.indexed_columns` picks, keyed
by physical names. Strings are cut to a 32-character prefix for the minimum and to a prefix plus
a tie-breaker (U+FFFD) for the maximum, so the maximum stays an upper bound. Timestamps are
written truncated to milliseconds. This module does not parse statistics (that is
:mod:`~airflow_delta.engine.model.stats_parse`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from decimal import InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.model.actions import Metadata
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.model.partition_values import decimal_string, java_float_string
from airflow_delta.engine.model.stats_columns import StatsField, indexed_columns

__all__ = [
    "STRING_PREFIX_LENGTH",
    "compute_stats",
    "stats_from_parquet_metadata",
    "truncate_max_string",
    "truncate_min_string",
]

# Delta's default ``spark.databricks.delta.stats.truncateLength`` ... the prefix length
# Delta keeps of string min/max values (DATA_SKIPPING_STRING_PREFIX_LENGTH).
STRING_PREFIX_LENGTH = 32
_TIE_BREAKER = "\ufffd"


# =========================================================================== computing

_NUM_RECORDS = "numRecords"


class _Raw:
    """A JSON fragment already rendered (numbers keep their exact text, e.g. ``1.50``)."""

    # A plain slotted class, not a dataclass (about a millisecond to create at import):
    # it is only ever recognised by type and read.
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _render(value: Any) -> str:
    if isinstance(value, _Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json_text(k)}:{_render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json_text(value)


def truncate_min_string(value: str, length: int = STRING_PREFIX_LENGTH) -> str:
    """A lower bound of ``value``: its first ``length`` characters."""
    return value[:length]


def truncate_max_string(value: str, length: int = STRING_PREFIX_LENGTH) -> str:
    """An upper bound of ``value`` no much longer than ``length`` characters.

    As Delta: keep the prefix, then every following character that is not below the
    tie-breaker U+FFFD, then append U+FFFD. Characters compare by code point, which is
    the UTF-8 byte order Spark compares strings in.
    """
    if len(value) <= length:
        return value
    end = length
    while end < len(value) and value[end] >= _TIE_BREAKER:
        end += 1
    return value[:end] + _TIE_BREAKER


def _format_timestamp(micros: int, with_zone: bool) -> str | None:
    millis = micros // 1000  # floor: truncate toward the past, also before 1970
    try:
        value = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=millis)
    except OverflowError:
        return None
    text = f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond // 1000:03d}"
    return text + "Z" if with_zone else text


def _render_bound(value: Any, field: StatsField, is_max: bool) -> Any | None:
    """A min/max value as it goes into the JSON, or None to leave the bound out."""
    t = field.arrow_type
    assert t is not None
    if value is None:
        return None
    if pa.types.is_integer(t):
        return _Raw(str(int(value)))
    if pa.types.is_floating(t):
        number = float(value)
        if not math.isfinite(number):
            return None
        if number == 0:
            # parquet-format's rule for float statistics: a zero maximum is +0.0 and a zero
            # minimum is -0.0, whichever zero the rows hold, because -0.0 == +0.0 but readers
            # that order floats totally (delta-rs) would skip a file whose max is -0.0 for
            # "x = 0.0".
            number = 0.0 if is_max else -0.0
        return _Raw(java_float_string(number, single=pa.types.is_float32(t)))
    if pa.types.is_decimal(t):
        return _Raw(decimal_string(value, t.scale))
    if pa.types.is_string(t):
        return truncate_max_string(value) if is_max else truncate_min_string(value)
    if pa.types.is_date(t):
        return value.isoformat()
    if pa.types.is_timestamp(t):
        return _format_timestamp(int(value), with_zone=t.tz is not None)
    return None


def compute_stats(
    data: pa.Table,
    metadata: Metadata,
    *,
    num_indexed_cols: int | None = None,
    stats_columns: Sequence[str] | None = None,
    tight_bounds: bool | None = None,
) -> str:
    """The ``stats`` JSON Delta writes for a data file holding ``data`` (logical names).

    Indexed columns follow ``delta.dataSkippingStatsColumns`` /
    ``delta.dataSkippingNumIndexedCols`` unless overridden. Keys are physical names
    under column mapping. ``tight_bounds`` adds the ``tightBounds`` flag (writers of
    tables with deletion vectors set it to true for new files).
    """
    fields = indexed_columns(metadata, num_indexed_cols=num_indexed_cols, stats_columns=stats_columns)
    num_records = data.num_rows
    out: dict[str, Any] = {_NUM_RECORDS: num_records}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    _collect(fields, _columns_of(data), num_records, mins, maxs, nulls)
    if mins:
        out["minValues"] = mins
    if maxs:
        out["maxValues"] = maxs
    if nulls:
        out["nullCount"] = nulls
    if tight_bounds is not None:
        out["tightBounds"] = bool(tight_bounds)
    return _render(out)


def _columns_of(data: pa.Table) -> dict[str, pa.ChunkedArray]:
    return {name: data.column(i) for i, name in enumerate(data.column_names)}


def _lookup(columns: Mapping[str, pa.ChunkedArray], name: str) -> pa.ChunkedArray | None:
    if name in columns:
        return columns[name]
    folded = [v for k, v in columns.items() if k.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None


def _struct_children(column: pa.ChunkedArray) -> dict[str, pa.ChunkedArray]:
    t = column.type
    out = {}
    for i in range(t.num_fields):
        # struct_field carries the parent's nulls into the child, as Spark's a.b does.
        chunks = [pc.struct_field(chunk, [i]) for chunk in column.chunks]
        out[t.field(i).name] = pa.chunked_array(chunks, type=t.field(i).type)
    return out


def _put_nested(
    name: str, parents: tuple[dict[str, Any], ...], children: tuple[dict[str, Any], ...]
) -> None:
    """Attach a struct column's min/max/nullCount dicts to its parents', leaving out empty ones."""
    for parent, child in zip(parents, children, strict=True):
        if child:
            parent[name] = child


def _collect(
    fields: Sequence[StatsField],
    columns: Mapping[str, pa.ChunkedArray] | None,
    num_records: int,
    mins: dict[str, Any],
    maxs: dict[str, Any],
    nulls: dict[str, Any],
) -> None:
    for f in fields:
        column = _lookup(columns, f.logical) if columns is not None else None
        if f.is_struct:
            assert f.children is not None
            children = _struct_children(column) if column is not None and pa.types.is_struct(column.type) else None
            cmin: dict[str, Any] = {}
            cmax: dict[str, Any] = {}
            cnull: dict[str, Any] = {}
            _collect(f.children, children, num_records, cmin, cmax, cnull)
            _put_nested(f.physical, (mins, maxs, nulls), (cmin, cmax, cnull))
            continue
        if column is None:
            # A column missing from the data is all null in this file.
            nulls[f.physical] = num_records
            continue
        nulls[f.physical] = column.null_count
        if not f.has_min_max or column.null_count == len(column):
            continue
        low, high = _min_max(column, f)
        if low is not None:
            mins[f.physical] = low
        if high is not None:
            maxs[f.physical] = high


def _min_max(column: pa.ChunkedArray, f: StatsField) -> tuple[Any, Any]:
    t = f.arrow_type
    assert t is not None
    values = column
    if not column.type.equals(t):
        try:
            values = column.cast(t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None, None
    has_nan = False
    if pa.types.is_floating(t):
        has_nan = bool(pc.any(pc.is_nan(values)).as_py())
    result = pc.min_max(values)
    low, high = result["min"], result["max"]
    if pa.types.is_timestamp(t):
        low_value = low.cast(pa.int64()).as_py() if low.is_valid else None
        high_value = high.cast(pa.int64()).as_py() if high.is_valid else None
        # Normalise to microseconds before truncating to milliseconds.
        factor = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": None}[t.unit]
        if factor is None:
            low_value = None if low_value is None else low_value // 1000
            high_value = None if high_value is None else high_value // 1000
        else:
            low_value = None if low_value is None else low_value * factor
            high_value = None if high_value is None else high_value * factor
    else:
        low_value, high_value = low.as_py(), high.as_py()
        if pa.types.is_floating(t) and low_value is not None and math.isnan(low_value):
            low_value = high_value = None  # every value is NaN
    rendered_low = _render_bound(low_value, f, is_max=False)
    # NaN is the largest value for Spark (its min/max aggregates order NaN above every
    # number), so the minimum is the smallest other value, as Spark writes it. A maximum
    # computed without NaN would let a reader skip a file whose NaN rows match "x > v".
    # Spark writes the maximum as the string "NaN" instead; we leave it out, because
    # delta-rs's pyarrow dataset reads a "NaN" maximum as a bound and skips the file for
    # "x = v" (tests/integration/test_written_values_interop.py). An all-NaN column has
    # neither bound. Either way no reader can skip a file holding a matching row.
    rendered_high = None if has_nan else _render_bound(high_value, f, is_max=True)
    return rendered_low, rendered_high


# =========================================================================== parquet footers


def stats_from_parquet_metadata(
    parquet_metadata: pq.FileMetaData,
    metadata: Metadata,
    *,
    num_indexed_cols: int | None = None,
    stats_columns: Sequence[str] | None = None,
) -> str:
    """Statistics for a data file written elsewhere (e.g. by Spark executors), from its footer.

    ``numRecords`` is exact. Per column, a statistic is written only when every row group
    vouches for it: a row group without statistics makes the column's min/max (or null
    count) unknown and it is left out. Left out on purpose: INT96 timestamps (their
    footer order is undefined), float/double maxima (footers ignore NaN, which Spark
    ranks above every number), and null counts of arrays and maps (footers count leaf
    values, not rows).
    """
    fields = indexed_columns(metadata, num_indexed_cols=num_indexed_cols, stats_columns=stats_columns)
    num_records = int(parquet_metadata.num_rows)
    by_path: dict[tuple[str, ...], int] = {}
    if parquet_metadata.num_row_groups:
        first = parquet_metadata.row_group(0)
        for i in range(first.num_columns):
            by_path[tuple(first.column(i).path_in_schema.split("."))] = i
    out: dict[str, Any] = {_NUM_RECORDS: num_records}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    _footer_collect(fields, (), (), parquet_metadata, by_path, mins, maxs, nulls)
    if mins:
        out["minValues"] = mins
    if maxs:
        out["maxValues"] = maxs
    if nulls:
        out["nullCount"] = nulls
    return _render(out)


def _footer_collect(
    fields: Sequence[StatsField],
    physical_prefix: tuple[str, ...],
    logical_prefix: tuple[str, ...],
    md: pq.FileMetaData,
    by_path: Mapping[tuple[str, ...], int],
    mins: dict[str, Any],
    maxs: dict[str, Any],
    nulls: dict[str, Any],
) -> None:
    for f in fields:
        ppath, lpath = (*physical_prefix, f.physical), (*logical_prefix, f.logical)
        if f.is_struct:
            assert f.children is not None
            cmin: dict[str, Any] = {}
            cmax: dict[str, Any] = {}
            cnull: dict[str, Any] = {}
            _footer_collect(f.children, ppath, lpath, md, by_path, cmin, cmax, cnull)
            _put_nested(f.physical, (mins, maxs, nulls), (cmin, cmax, cnull))
            continue
        index = by_path.get(ppath, by_path.get(lpath))
        if index is None:
            if md.num_row_groups == 0 or not any(p[: len(ppath)] == ppath or p[: len(lpath)] == lpath for p in by_path):
                # Not in the file at all: every row is null in this column.
                nulls[f.physical] = int(md.num_rows)
            continue
        null_count, low, high = _footer_column(md, index, f)
        if null_count is not None:
            nulls[f.physical] = null_count
        if low is not None:
            mins[f.physical] = low
        if high is not None:
            maxs[f.physical] = high


def _footer_column(md: pq.FileMetaData, index: int, f: StatsField) -> tuple[int | None, Any, Any]:
    null_total: int | None = 0
    lows: list[Any] = []
    highs: list[Any] = []
    bounds_known = f.has_min_max
    for g in range(md.num_row_groups):
        chunk = md.row_group(g).column(index)
        if chunk.physical_type == "INT96":
            bounds_known = False
        stats = chunk.statistics if chunk.is_stats_set else None
        if stats is None:
            null_total = None
            bounds_known = False
            continue
        if null_total is not None:
            null_total = null_total + stats.null_count if stats.has_null_count else None
        rows = md.row_group(g).num_rows
        if stats.has_min_max:
            lows.append(stats.min)
            highs.append(stats.max)
        elif not (stats.has_null_count and stats.null_count >= rows):
            bounds_known = False  # values present but no bounds recorded
    if not bounds_known or not lows:
        return null_total, None, None
    try:
        low = _footer_bound(min(lows), f, is_max=False)
        high = None if pa.types.is_floating(f.arrow_type) else _footer_bound(max(highs), f, is_max=True)
    except (TypeError, ValueError, InvalidOperation, OverflowError):
        return null_total, None, None
    return null_total, low, high


def _footer_bound(value: Any, f: StatsField, is_max: bool) -> Any:
    t = f.arrow_type
    assert t is not None
    if isinstance(value, bytes):
        if not pa.types.is_string(t):
            return None
        value = value.decode("utf-8")
    if pa.types.is_timestamp(t):
        if not isinstance(value, dt.datetime):
            return None
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        micros = (value - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
        return _render_bound(micros, f, is_max)
    if pa.types.is_date(t) and not isinstance(value, dt.date):
        return None
    if pa.types.is_floating(t) and isinstance(value, float) and math.isnan(value):
        return None
    return _render_bound(value, f, is_max)
