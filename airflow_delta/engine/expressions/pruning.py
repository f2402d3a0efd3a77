"""File skipping: which of N files may hold a row matching a predicate.

Partition predicates are evaluated exactly on the typed partition values, data-column
predicates conservatively on the ``minValues`` / ``maxValues`` / ``nullCount`` statistics.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import InvalidFilterError
from airflow_delta.engine.expressions.arrow import _to_arrow
from airflow_delta.engine.expressions.arrow_values import FALSE, TRUE, arrow_array, arrow_scalar, evaluate
from airflow_delta.engine.expressions.limits import MAX_FILTER_DEPTH
from airflow_delta.engine.expressions.predicate import Predicate
from airflow_delta.engine.expressions.sql_types import _is_string
from airflow_delta.engine.expressions.tree import (
    _BOOL,
    _FLIPPED,
    _NEGATED,
    And,
    Cast,
    ColumnRef,
    Compare,
    InList,
    IsNull,
    Like,
    Literal,
    Node,
    Not,
    Or,
    _column_refs,
    _is_nan_literal,
)

_ZERO = arrow_scalar(0, pa.int64())  # a literal 0 without pa.scalar (which imports pandas)


def prune_files(
    predicate: Predicate,
    partition_values: pa.StructArray | pa.ChunkedArray | None,
    stats: pa.StructArray | pa.ChunkedArray | None,
    partition_columns: Sequence[str] = (),
) -> pa.BooleanArray:
    """Which of N files may hold a row matching ``predicate`` (True = keep; never null).

    ``partition_values``: typed partition values, one struct row per file, logical names.
    ``stats``: parsed statistics (:func:`airflow_delta.engine.model.stats_parse.parse_stats`), one row
    per file; a missing statistic, or a null row, means "may match". The result is
    conservative: a file is False only if provably none of its rows satisfies the filter.
    """
    pv = _combine(partition_values)
    st = _combine(stats)
    lengths = {len(a) for a in (pv, st) if a is not None}
    if len(lengths) > 1:
        raise ValueError(f"partition_values and stats describe different numbers of files: {sorted(lengths)}")
    if not lengths:
        raise ValueError("prune_files needs partition_values or stats to know the number of files")
    pruner = _Pruner(lengths.pop(), pv, st, partition_columns)
    try:
        return pruner.may_match(predicate.root, negated=False)
    except RecursionError:
        # Bound filters are at most MAX_FILTER_DEPTH deep; a tree built by hand may not be.
        raise InvalidFilterError(predicate.sql, f"it nests operators too deeply (at most {MAX_FILTER_DEPTH} levels)") from None


def _combine(array: pa.Array | pa.ChunkedArray | None) -> pa.StructArray | None:
    if array is None:
        return None
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks else pa.nulls(0, array.type)
    return array


_ONE_MS = arrow_scalar(dt.timedelta(milliseconds=1), pa.duration("us"))
# Delta appends this character to a truncated string maximum; it is never part of a
# prefix the bound guarantees.
_ZERO = arrow_scalar(0, pa.int64())
_TIE_BREAKER = "\ufffd"


@dataclass(frozen=True)
class _ColumnStats:
    """Statistics of one data column for N files, cast to the type the predicate compares in."""

    min: pa.Array | None
    max: pa.Array | None
    # Strings: the maximum with Delta's tie-breaker stripped, a prefix of the true max
    # (or more) when the writer truncated it.
    max_prefix: pa.Array | None
    not_all_null: pa.Array  # False where every row of the file is NULL in this column
    null_count: pa.Array | None
    num_records: pa.Array | None
    base_type: pa.DataType


class _Pruner:
    def __init__(
        self,
        n: int,
        partition_values: pa.StructArray | None,
        stats: pa.StructArray | None,
        partition_columns: Sequence[str],
    ) -> None:
        self.n = n
        self.stats = stats
        self._stats_cache: dict[Node, _ColumnStats | None] = {}
        self.partition_table: pa.Table | None = None
        self.partition_names: dict[str, str] = {}
        if partition_values is not None and pa.types.is_struct(partition_values.type):
            self.partition_table = pa.Table.from_struct_array(partition_values)
            wanted = {c.casefold() for c in partition_columns}
            for name in self.partition_table.column_names:
                if not wanted or name.casefold() in wanted:
                    self.partition_names[name.casefold()] = name

    # -------------------------------------------------------------- helpers
    def _all(self, value: bool) -> pa.BooleanArray:
        return pa.nulls(self.n, _BOOL).fill_null(TRUE if value else FALSE)

    def _is_partition_only(self, node: Node) -> bool:
        if not self.partition_names:  # no partition column: nothing to walk (a 10,000-term filter is walked once per term)
            return False
        refs = list(_column_refs(node))
        return bool(refs) and self.partition_table is not None and all(
            len(r.path) == 1 and r.path[0].casefold() in self.partition_names for r in refs
        )

    def _evaluate_on_partitions(self, node: Node) -> pa.Array:
        assert self.partition_table is not None
        table = self.partition_table
        # Columns are looked up by the schema's exact names; rename case variants.
        renames = {}
        for ref in _column_refs(node):
            actual = self.partition_names[ref.path[0].casefold()]
            renames[actual] = ref.path[0]
        table = table.select(list(renames)).rename_columns(list(renames.values()))
        result = evaluate(table, _to_arrow(node))
        return result.combine_chunks() if isinstance(result, pa.ChunkedArray) else result

    # -------------------------------------------------------------- main recursion
    def may_match(self, node: Node, negated: bool) -> pa.BooleanArray:
        if isinstance(node, Literal):
            value = node.value
            if value is None:
                return self._all(False)
            return self._all(bool(value) != negated)
        if self._is_partition_only(node):
            exact = self._evaluate_on_partitions(node)
            if negated:
                exact = pc.invert(exact)
            return exact.fill_null(FALSE)
        if isinstance(node, Not):
            return self.may_match(node.term, not negated)
        if isinstance(node, And | Or):
            conjunction = isinstance(node, And) != negated
            combine = pc.and_ if conjunction else pc.or_
            # Null-propagating and_ / or_: a file at False (AND) or True (OR), or null, stays
            # so whatever the other terms say. Once no file can change, the remaining terms
            # are not looked at: a 10,000-term OR whose first term keeps every file is one term.
            out = self.may_match(node.terms[0], negated)
            for term in node.terms[1:]:
                if not _any_equal(out, conjunction):
                    break
                out = combine(out, self.may_match(term, negated))
            return out
        if self.stats is None:
            return self._all(True)
        keep = self._leaf(node, negated)
        return keep if keep is not None else self._all(True)

    def _leaf(self, node: Node, negated: bool) -> pa.BooleanArray | None:
        if isinstance(node, Compare):
            return self._compare_leaf(node, negated)
        if isinstance(node, IsNull):
            stats = self._column_stats(node.operand)
            if stats is None:
                return None
            if not negated:
                # IS NULL: impossible only if the file has no null in the column.
                return _keep(pc.greater(stats.null_count, _ZERO)) if stats.null_count is not None else None
            return stats.not_all_null
        if isinstance(node, InList):
            return self._in_leaf(node, negated)
        if isinstance(node, Like):
            return self._like_leaf(node, negated)
        if isinstance(node, ColumnRef | Cast) and pa.types.is_boolean(node.type):
            # A boolean column used as a condition: "flag" is "flag = true".
            return self._compare_leaf(Compare("=", node, Literal(True, _BOOL)), negated)
        return None

    def _column_stats(self, node: Node) -> _ColumnStats | None:
        """Statistics of the column under ``node`` (a column, or a column through implicit casts).

        Computed once per operand: a filter of thousands of terms on a few columns reads
        each column's statistics once.
        """
        if node not in self._stats_cache:
            self._stats_cache[node] = self._compute_column_stats(node)
        return self._stats_cache[node]

    def _compute_column_stats(self, node: Node) -> _ColumnStats | None:
        casts: list[pa.DataType] = []
        while isinstance(node, Cast) and node.implicit:
            casts.append(node.type)
            node = node.operand
        if not isinstance(node, ColumnRef):
            return None
        assert self.stats is not None
        base = node.type
        raw_min = _stat_field(self.stats, ("minValues", *node.path))
        raw_max = _stat_field(self.stats, ("maxValues", *node.path))
        null_count = _stat_field(self.stats, ("nullCount", *node.path))
        num_records = self._num_records()
        if null_count is not None and not pa.types.is_integer(null_count.type):
            null_count = None
        if null_count is not None and self._impossible_records is not None:
            # A numRecords that is itself impossible leaves every count unknown: null
            # counts can no longer be checked against it (bounds stay usable).
            null_count = _unknown_where(null_count, self._impossible_records)
        try:
            raw_min, raw_max = _cast_chain(raw_min, base, ()), _cast_chain(raw_max, base, ())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            raw_min = raw_max = None
        contradicted = self._contradicted(raw_min, raw_max, null_count, num_records)
        if contradicted is not None:
            # Statistics that contradict themselves are unknown, all of this column's.
            raw_min, raw_max, null_count = (_unknown_where(a, contradicted) for a in (raw_min, raw_max, null_count))
        if raw_max is not None and pa.types.is_timestamp(raw_max.type):
            # Timestamps in statistics are truncated to milliseconds: the true maximum may
            # be up to 999 microseconds later.
            raw_max = pc.add(raw_max, _ONE_MS)
        max_prefix = None
        if raw_max is not None and _is_string(raw_max.type):
            max_prefix = pc.utf8_rtrim(raw_max, characters=_TIE_BREAKER)
        try:
            lo, hi = _cast_chain(raw_min, base, casts), _cast_chain(raw_max, base, casts)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            lo = hi = None
        if null_count is not None and num_records is not None:
            # "Every row is NULL" rests on numRecords, which may be wrong: believe it only with
            # at least one null and no bound (a bound is a non-null value the writer saw).
            all_null = pc.and_(pc.equal(null_count, num_records), pc.greater(null_count, _ZERO))
            for bound in (raw_min, raw_max):
                if bound is not None:
                    all_null = pc.and_(all_null, pc.is_null(bound))
            not_all_null = _keep(pc.invert(all_null))
        else:
            not_all_null = self._all(True)
        return _ColumnStats(lo, hi, max_prefix, not_all_null, null_count, num_records, base)

    @property
    def _impossible_records(self) -> pa.BooleanArray | None:
        """Files whose ``numRecords`` is negative."""
        assert self.stats is not None
        num_records = _stat_field(self.stats, ("numRecords",))
        if num_records is None or not pa.types.is_integer(num_records.type):
            return None
        return pc.less(num_records, _ZERO).fill_null(FALSE)

    def _num_records(self) -> pa.Array | None:
        """``numRecords`` per file; a negative count contradicts itself and is unknown."""
        assert self.stats is not None
        num_records = _stat_field(self.stats, ("numRecords",))
        impossible = self._impossible_records
        if num_records is None or impossible is None:
            return None
        return _unknown_where(num_records, impossible)

    def _contradicted(
        self, lo: pa.Array | None, hi: pa.Array | None, null_count: pa.Array | None, num_records: pa.Array | None
    ) -> pa.BooleanArray | None:
        """Files whose statistics of one column contradict themselves (True = do not trust them).

        A file is skipped only when trustworthy statistics prove that no row can match:
        min > max, a negative null count, more nulls than records, or bounds on a column
        whose every value is null cannot all be true, so none of them is believed.
        """
        flags: list[pa.Array] = []
        if lo is not None and hi is not None:
            flags.append(pc.greater(lo, hi))
        if null_count is not None:
            flags.append(pc.less(null_count, _ZERO))
            if num_records is not None:
                flags.append(pc.greater(null_count, num_records))
                all_null = pc.equal(null_count, num_records)
                for bound in (lo, hi):
                    if bound is not None:
                        flags.append(pc.and_(all_null, pc.is_valid(bound)))
        if not flags:
            return None
        result = flags[0].fill_null(FALSE)
        for flag in flags[1:]:
            result = pc.or_(result, flag.fill_null(FALSE))
        return result

    def _compare_leaf(self, node: Compare, negated: bool) -> pa.BooleanArray | None:
        op, left, right = node.op, node.left, node.right
        if isinstance(left, Literal) and not isinstance(right, Literal):
            left, right = right, left
            op = _FLIPPED[op]
        if not isinstance(right, Literal):
            return None
        stats = self._column_stats(left)
        if stats is None:
            return None
        value = right.value
        if op == "<=>":
            if value is None:  # x <=> NULL is x IS NULL
                return self._leaf(IsNull(left), negated)
            if negated:  # NOT (x <=> v): x IS NULL OR x != v
                is_null = _keep(pc.greater(stats.null_count, _ZERO)) if stats.null_count is not None else self._all(True)
                return pc.or_(is_null, self._range_check("!=", stats, right))
            return self._range_check("=", stats, right)
        if value is None:
            return self._all(False)  # comparing with NULL is never true
        if negated:
            # With Spark's NaN semantics the non-null values of every type are totally
            # ordered (NaN above everything, NaN = NaN), so NOT (x < v) is x >= v exactly.
            op = _NEGATED[op]
        return self._range_check(op, stats, right)

    def _range_check(self, op: str, stats: _ColumnStats, lit: Literal) -> pa.BooleanArray:
        keep = stats.not_all_null
        if _is_nan_literal(lit):
            # Bounds never include NaN, so they cannot say whether a file holds one (x = NaN)
            # or anything below it (x < NaN): any file with a non-null value may match.
            return keep
        if pa.types.is_floating(stats.base_type) and op in (">", ">=", "!="):
            # NaN is above every number and unequal to it, and min/max statistics leave
            # NaN out (Spark records a NaN maximum, read as unknown; parquet footers and
            # delta-rs skip NaN): any file with a non-null value may hold a NaN row.
            return keep
        scalar = arrow_scalar(lit.value, lit.type)
        lo, hi = stats.min, stats.max
        if op in ("=", "<", "<=") and lo is not None:
            fn = pc.less if op == "<" else pc.less_equal
            keep = pc.and_(keep, _keep(fn(lo, scalar)))
        if op in ("=", ">", ">="):
            keep = pc.and_(keep, self._max_allows(stats, lit, strict=(op == ">")))
        if op == "!=":
            # Only numbers, dates and exact types can prove "every value equals v": string
            # bounds may be truncated prefixes, timestamp bounds are truncated to
            # milliseconds (floats, which may hide NaN, returned above).
            exact = not (_is_string(stats.base_type) or pa.types.is_timestamp(stats.base_type))
            if exact and lo is not None and hi is not None and not pa.types.is_floating(lit.type):
                all_equal = pc.and_(pc.equal(lo, scalar), pc.equal(hi, scalar)).fill_null(FALSE)
                keep = pc.and_(keep, pc.invert(all_equal))
        return keep

    def _max_allows(self, stats: _ColumnStats, lit: Literal, strict: bool) -> pa.BooleanArray:
        """Files whose maximum does not rule out a value >= (or >) ``lit``."""
        if stats.max is None:
            return self._all(True)
        scalar = arrow_scalar(lit.value, lit.type)
        fn = pc.greater if strict else pc.greater_equal
        keep = _keep(fn(stats.max, scalar))
        if stats.max_prefix is not None and isinstance(lit.value, str):
            # A truncated maximum p stands for some string starting with p: it can reach
            # lit only if p is a prefix of lit.
            keep = pc.or_(keep, _prefix_of(stats.max_prefix, lit.value))
        return keep

    def _in_leaf(self, node: InList, negated: bool) -> pa.BooleanArray | None:
        stats = self._column_stats(node.operand)
        if stats is None:
            return None
        values = _sorted_values(node.values, node.operand.type)
        if negated:
            if node.has_null:
                return self._all(False)  # x NOT IN (..., NULL) is never true
            keep = stats.not_all_null
            # x NOT IN (...) is false on every row only if every value of the file is one
            # of the list: provable for exact types whose bounds are equal (see "!=").
            base = stats.base_type
            exact = not (_is_string(base) or pa.types.is_timestamp(base) or pa.types.is_floating(base))
            if exact and stats.min is not None and stats.max is not None and len(values):
                listed = pc.is_in(stats.min, value_set=values)
                all_listed = pc.and_(pc.equal(stats.min, stats.max), listed).fill_null(FALSE)
                keep = pc.and_(keep, pc.invert(all_listed))
            return keep
        if not len(values):
            return self._all(False)
        if pa.types.is_floating(values.type) and pc.any(pc.is_nan(values)).as_py():
            return stats.not_all_null  # as for x = NaN: bounds cannot rule a NaN out
        return pc.and_(stats.not_all_null, _any_value_within(values, stats))

    def _like_leaf(self, node: Like, negated: bool) -> pa.BooleanArray | None:
        if node.ignore_case:
            return None
        stats = self._column_stats(node.operand)
        if stats is None or not _is_string(stats.base_type):
            return None
        prefix, rest = _like_prefix(node.pattern)
        keep = stats.not_all_null
        if negated:
            if prefix and rest == "%" and stats.min is not None and stats.max_prefix is not None:
                # Every value starts with the prefix iff both bounds do.
                both = pc.and_(pc.starts_with(stats.min, prefix), pc.starts_with(stats.max_prefix, prefix)).fill_null(FALSE)
                keep = pc.and_(keep, pc.invert(both))
            return keep
        if not prefix:
            return keep
        lit = Literal(prefix, pa.string())
        keep = pc.and_(keep, self._max_allows(stats, lit, strict=False))
        if stats.min is not None:
            below = pc.or_(pc.less_equal(stats.min, prefix), pc.starts_with(stats.min, prefix))
            keep = pc.and_(keep, _keep(below))
        return keep


def _any_equal(keep: pa.Array | pa.ChunkedArray, value: bool) -> bool:
    """Whether any file of ``keep`` is ``value`` (nulls are neither), from the array's counts
    where it has them: one check per term of a long AND / OR, without a compute call."""
    if isinstance(keep, pa.BooleanArray):
        return (keep.true_count if value else keep.false_count) > 0
    return bool(pc.any(pc.equal(keep, TRUE if value else FALSE)).as_py())


def _sorted_values(values: Sequence[object], value_type: pa.DataType) -> pa.Array:
    array = arrow_array(list(values), value_type)
    return array.take(pc.sort_indices(array))


def _any_value_within(values: pa.Array, stats: _ColumnStats) -> pa.BooleanArray:
    """Per file: may one of the sorted ``values`` lie within the file's [min, max]?

    One binary search per file (numpy ``searchsorted``), so a list of V values over N
    files costs O((V + N) log V), not O(V * N). The smallest value >= min is the only
    candidate: it is in range iff it is <= max. A string maximum may be a truncated
    prefix p (see ``_max_allows``): then a value starting with p may also match, and the
    values starting with p are one contiguous run of the sorted list.
    """
    n_values = len(values)
    sorted_np = _searchable(values)
    # A missing bound does not limit: the smallest (largest) value stands in for it.
    low = stats.min.fill_null(values[0]) if stats.min is not None else pa.repeat(values[0], _num_files(stats))
    first = np.searchsorted(sorted_np, _searchable(low.cast(values.type)), side="left")
    in_list = _flags(first < n_values)
    candidate = values.take(_positions(np.minimum(first, n_values - 1)))
    found = pc.and_(in_list, _keep(pc.less_equal(candidate, stats.max))) if stats.max is not None else in_list
    if stats.max_prefix is not None and _is_string(values.type):
        prefix = stats.max_prefix.cast(values.type)
        start = pc.max_element_wise(low, prefix.fill_null(values[0]))
        first = np.searchsorted(sorted_np, _searchable(start.cast(values.type)), side="left")
        candidate = values.take(_positions(np.minimum(first, n_values - 1)))
        found = pc.or_(found, pc.and_(_flags(first < n_values), _starts_with(candidate, prefix)))
    return found


def _searchable(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``array`` (no nulls) as numpy values that order as the Arrow values do, without pandas
    (``to_numpy`` of Arrow arrays loads it): fixed-width numbers and temporals straight from
    their buffer (a temporal's integer ticks order as it does), anything else as objects."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    t = array.type
    if array.null_count == 0 and (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)):
        if pa.types.is_floating(t):
            dtype = np.dtype(f"float{t.bit_width}")
        elif pa.types.is_unsigned_integer(t):
            dtype = np.dtype(f"uint{t.bit_width}")
        else:
            dtype = np.dtype(f"int{t.bit_width}")
        return np.frombuffer(array.buffers()[1], dtype=dtype, count=array.offset + len(array))[array.offset :]
    values = np.empty(len(array), dtype=object)
    values[:] = array.to_pylist()
    return values


def _positions(indices: np.ndarray) -> pa.Array:
    """Take indices as Arrow, built from the buffer (``pa.array`` of numpy imports pandas)."""
    return pa.Array.from_buffers(pa.int64(), len(indices), [None, pa.py_buffer(np.ascontiguousarray(indices, np.int64))])


def _flags(mask: np.ndarray) -> pa.BooleanArray:
    """A numpy boolean mask as Arrow, from packed bits (no pandas)."""
    bits = pa.py_buffer(np.packbits(mask, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, bits])


_FF = arrow_scalar(b"\xff", pa.binary())
_EMPTY_BYTES = arrow_scalar(b"", pa.binary())


def _starts_with(strings: pa.Array, prefixes: pa.Array) -> pa.BooleanArray:
    """Per row: does ``strings[i]`` start with ``prefixes[i]``? (false where either is null)

    The strings starting with p are exactly those in [p, p + 0xFF) in UTF-8 byte order,
    as no UTF-8 byte is 0xFF.
    """
    as_bytes, prefix_bytes = strings.cast(pa.binary()), prefixes.cast(pa.binary())
    above = pc.binary_join_element_wise(prefix_bytes, _FF, _EMPTY_BYTES)
    return pc.and_(pc.greater_equal(as_bytes, prefix_bytes), pc.less(as_bytes, above)).fill_null(FALSE)


def _num_files(stats: _ColumnStats) -> int:
    return len(stats.not_all_null)


def _unknown_where(array: pa.Array | None, mask: pa.BooleanArray) -> pa.Array | None:
    """``array`` with the rows where ``mask`` is True set to null (unknown)."""
    if array is None:
        return None
    return pc.if_else(mask, arrow_scalar(None, array.type), array)


def _keep(mask: pa.Array) -> pa.BooleanArray:
    """Unknown (null) comparisons keep the file."""
    return mask.fill_null(TRUE)


def _prefix_of(prefixes: pa.Array, text: str) -> pa.BooleanArray:
    """For each string p in ``prefixes``: is ``text`` starting with p?

    Only the prefixes of ``text`` as long as some p can match, so those are the only ones
    built: their total size is at most the total size of ``prefixes`` (never every prefix
    of a long literal, which would be quadratic in its length).
    """
    prefixes = prefixes.cast(pa.string())
    lengths = pc.unique(pc.utf8_length(prefixes).drop_null()).to_numpy(zero_copy_only=False)
    candidates = arrow_array([text[:k] for k in sorted(lengths.tolist()) if k <= len(text)], pa.string())
    return pc.is_in(prefixes, value_set=candidates).fill_null(FALSE)


def _stat_field(stats: pa.StructArray, path: Sequence[str]) -> pa.Array | None:
    current: pa.Array = stats
    for name in path:
        if not pa.types.is_struct(current.type):
            return None
        index = current.type.get_field_index(name)
        if index < 0:
            folded = [i for i in range(current.type.num_fields) if current.type.field(i).name.casefold() == name.casefold()]
            if len(folded) != 1:
                return None
            index = folded[0]
        # struct_field keeps the parent's nulls: no stats row means no statistic.
        current = pc.struct_field(current, [index])
    return current


def _cast_chain(array: pa.Array | None, base: pa.DataType, casts: Sequence[pa.DataType]) -> pa.Array | None:
    if array is None:
        return None
    if not array.type.equals(base) and not pa.types.is_null(array.type):
        array = array.cast(base)
    for target in reversed(casts):
        array = array.cast(target)
    return array


_LIKE_WILDCARDS = frozenset("%_")


def _like_prefix(pattern: str) -> tuple[str, str]:
    """The literal prefix of a LIKE pattern and the rest of the pattern after it."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
            continue
        if ch in _LIKE_WILDCARDS:
            break
        out.append(ch)
        i += 1
    return "".join(out), pattern[i:]
