"""Hostile filters: huge literals, thousands of terms, deep nesting, huge IN lists.

Each must either work, with memory linear in its size, or fail with an
InvalidFilterError that says what limit it crossed; never a crash (SIGSEGV), a
RecursionError or memory quadratic in the input.
"""

from __future__ import annotations

import tracemalloc

import pyarrow as pa

from airflow_delta.engine.expressions import parse_predicate, prune_files

STRING_SCHEMA = pa.schema([("s", pa.string())])


def _string_stats(maxima: list[str]) -> pa.StructArray:
    return pa.array(
        [{"numRecords": 10, "minValues": {"s": "a"}, "maxValues": {"s": m}, "nullCount": {"s": 0}} for m in maxima],
        pa.struct(
            [
                ("numRecords", pa.int64()),
                ("minValues", pa.struct([("s", pa.string())])),
                ("maxValues", pa.struct([("s", pa.string())])),
                ("nullCount", pa.struct([("s", pa.int64())])),
            ]
        ),
    )


def _peak_bytes_of_pruning(literal_length: int) -> int:
    # Truncated maxima (Delta's tie-breaker) of many lengths make pruning test prefixes.
    maxima = [("x" * k) + "\ufffd" for k in range(0, 40)] + ["b", "z" * 32 + "\ufffd"]
    stats = _string_stats(maxima)
    literal = "x" * literal_length
    tracemalloc.start()
    try:
        predicate = parse_predicate(f"s = '{literal}'", STRING_SCHEMA)
        keep = prune_files(predicate, None, stats).to_pylist()
        like = parse_predicate(f"s LIKE '{literal}%'", STRING_SCHEMA)
        like_keep = prune_files(like, None, stats).to_pylist()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Every truncated maximum "x"*k is a prefix of the literal: those files may match.
    assert keep[:40] == [True] * 40 and keep[40] is False and keep[41] is True
    assert like_keep == keep
    return peak


def test_memory_of_a_long_string_literal_grows_linearly() -> None:
    small = _peak_bytes_of_pruning(20_000)
    large = _peak_bytes_of_pruning(200_000)
    # 10x the literal: at most ~10x the memory (plus slack), not 100x as with every prefix built.
    assert large < 12 * small + 2_000_000, (small, large)


def test_a_one_megabyte_literal_stays_within_a_fixed_budget() -> None:
    # Every prefix of 1 MB of text would be ~500 GB; a linear cost is a few copies of it.
    assert _peak_bytes_of_pruning(1_000_000) < 64 * 1024 * 1024
