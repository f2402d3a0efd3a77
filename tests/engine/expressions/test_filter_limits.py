"""Hostile filters: huge literals, thousands of terms, deep nesting, huge IN lists.

Each must either work, with memory linear in its size, or fail with an
InvalidFilterError that says what limit it crossed; never a crash (SIGSEGV), a
RecursionError or memory quadratic in the input.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import InvalidFilterError
from airflow_delta.engine.expressions import binder, binding, parse_predicate, prune_files, sql_binding
from airflow_delta.engine.expressions.arrow import _to_arrow
from airflow_delta.engine.expressions.limits import (
    MAX_FILTER_DEPTH,
    MAX_FILTER_NODES,
    UNPARSEABLE_PARENTHESES,
    parentheses_deeper_than,
)
from airflow_delta.engine.expressions.tree import And, InList, Node, Not, Or

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


# --------------------------------------------------------------------------- many terms (item 7)

INT_SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])
ROWS = pa.table({"id": pa.array([1, 5, None, 20_000], pa.int64()), "s": ["a", "v3", None, "q"]})


def _int_stats(ranges: list[tuple[int, int]]) -> pa.StructArray:
    return pa.array(
        [{"numRecords": 2, "minValues": {"id": lo}, "maxValues": {"id": hi}, "nullCount": {"id": 0}} for lo, hi in ranges],
        pa.struct(
            [
                ("numRecords", pa.int64()),
                ("minValues", pa.struct([("id", pa.int64())])),
                ("maxValues", pa.struct([("id", pa.int64())])),
                ("nullCount", pa.struct([("id", pa.int64())])),
            ]
        ),
    )


def test_ten_thousand_ored_equalities_become_one_in_list() -> None:
    sql = " OR ".join(f"id = {i}" for i in range(0, 20_000, 2))
    predicate = parse_predicate(sql, INT_SCHEMA)
    assert isinstance(predicate.root, InList) and len(predicate.root.values) == 10_000
    assert ROWS.filter(predicate.to_arrow()).column("id").to_pylist() == []
    assert prune_files(predicate, None, _int_stats([(1, 1), (3, 3), (4, 4), (20_001, 30_000)])).to_pylist() == [False, False, True, False]


def test_equalities_fold_only_per_operand_and_keep_three_valued_logic() -> None:
    predicate = parse_predicate("id = 1 OR s = 'q' OR id = 5 OR id IS NULL OR s = 'a'", INT_SCHEMA)
    assert isinstance(predicate.root, Or)
    kinds = [type(t).__name__ for t in predicate.root.terms]
    assert kinds == ["InList", "InList", "IsNull"]
    assert ROWS.filter(predicate.to_arrow()).column("id").to_pylist() == [1, 5, None, 20_000]
    # x = 1 OR x = 5 on a NULL x is NULL, not false: NOT of it keeps no NULL row.
    negated = parse_predicate("NOT (id = 1 OR id = 5)", INT_SCHEMA)
    assert ROWS.filter(negated.to_arrow()).column("id").to_pylist() == [20_000]


# Every 10,000-term filter below used to crash (SIGSEGV) in to_arrow() or delete(): each case
# runs in a fresh interpreter so that a crash fails its test instead of the run. The cases
# share one interpreter (one start and one import of the engine, not six); after a crash
# the remaining cases go on in a new one, so a crash still fails exactly its own case.
TERMS_SCHEMA = 'pa.schema([("id", pa.int64()), ("s", pa.string())])'
THREE_ROWS = 'pa.table({"id": pa.array([1, 5, 20_000], pa.int64()), "s": ["v3", "v4", "x"]})'

# Comparisons that cannot become an IN list: a deep pyarrow chain of these crashed with
# SIGSEGV in to_arrow() and delete().
UNFOLDABLE = """" OR ".join(f"(id = {i} AND s = 'w{i}')" if i % 2 else f"s = 'v{i}'" for i in range(10_000))"""

# Every kind of associative chain the binder keeps as one AND or OR of many terms, 10,000
# terms each (NOT of an OR becomes an AND). Each used to reach pyarrow, whose binding
# flattens nested AND / OR back into one 10,000-deep chain: SIGSEGV.
LONG_CHAINS = {
    "and_of_comparisons": '" AND ".join(f"id <> {i + 100}" for i in range(10_000))',
    "and_of_likes": '" AND ".join(f"s NOT LIKE \'%x{i}\'" for i in range(10_000))',
    "not_of_or": '"NOT (" + " OR ".join(f"s = \'{i}x\'" for i in range(10_000)) + ")"',
    "or_of_likes": '" OR ".join(f"s LIKE \'%x{i}\'" for i in range(10_000)) + " OR id = 5"',
    "and_of_ors": '" AND ".join(f"(id <> {i + 100} OR s = \'z\')" for i in range(5_000))',
}

# What each case prints, one JSON list per case: for the unfoldable OR, the rows it reads,
# the rows it deletes and the rows left; for the chains, the files kept, the rows read and
# the rows deleted.
_UNFOLDABLE_CASE = """
    rows = table.snapshot().to_arrow(filter=sql)
    lines = [str(sorted(rows.column("s").to_pylist())), str(table.delete(sql).num_deleted_rows),
             str(table.snapshot().to_arrow().column("s").to_pylist())]
"""
_CHAIN_CASE = """
    lines = [str(table.snapshot().files(sql).num_rows), str(sorted(table.snapshot().to_arrow(filter=sql).column("s").to_pylist())),
             str(table.delete(sql).num_deleted_rows)]
"""
LONG_FILTER_CASES = {"unfoldable": (UNFOLDABLE, _UNFOLDABLE_CASE), **{k: (v, _CHAIN_CASE) for k, v in LONG_CHAINS.items()}}


def _probe(cases: list[str], root: Path) -> str:
    """A program that runs ``cases`` in order, each on a table of its own, printing one JSON line per case done."""
    parts = ["import json", "import pyarrow as pa", "from airflow_delta.engine import DeltaTable"]
    for case in cases:
        sql, body = LONG_FILTER_CASES[case]
        parts.append(
            f"sql = {sql}\n"
            f"table = DeltaTable.create({str(root / case)!r}, {TERMS_SCHEMA})\n"
            f"table.append({THREE_ROWS})\n"
            + textwrap.dedent(body)
            + f"print(json.dumps([{case!r}, lines]), flush=True)"
        )
    return "\n".join(parts) + "\n"


@pytest.fixture(scope="module")
def long_filter_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str] | str]:
    """Per case: the lines it printed, or why its interpreter died (its exit code and stderr)."""
    root = tmp_path_factory.mktemp("long-filters")
    outcomes: dict[str, list[str] | str] = {}
    remaining = list(LONG_FILTER_CASES)
    while remaining:
        script = root / f"probe-{len(outcomes)}.py"
        script.write_text(_probe(remaining, root))
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, cwd=str(root), check=False)
        for line in done.stdout.splitlines():
            case, lines = json.loads(line)
            outcomes[case] = lines
        remaining = [case for case in remaining if case not in outcomes]
        if remaining:  # the interpreter died in remaining[0] (-11 was the SIGSEGV): the others go on in a new one
            outcomes[remaining.pop(0)] = f"exit {done.returncode}: {done.stderr[-2000:]}"
    return outcomes


def test_ten_thousand_unfoldable_terms_filter_read_and_delete_without_crashing(long_filter_outcomes: dict[str, list[str] | str]) -> None:
    assert long_filter_outcomes["unfoldable"] == ["['v4']", "1", "['v3', 'x']"]


@pytest.mark.parametrize("kind", sorted(LONG_CHAINS))
def test_ten_thousand_term_and_or_chains_of_every_kind_read_and_delete_without_crashing(
    long_filter_outcomes: dict[str, list[str] | str], kind: str
) -> None:
    matching = ["v4"] if kind == "or_of_likes" else ["v3", "v4", "x"]
    assert long_filter_outcomes[kind] == ["1", str(matching), str(len(matching))]


def test_too_many_terms_is_an_invalid_filter_that_says_to_use_in(monkeypatch: pytest.MonkeyPatch) -> None:
    assert MAX_FILTER_NODES == 50_000  # documented in limits.py; a smaller limit keeps this test fast
    monkeypatch.setattr(binding, "MAX_FILTER_NODES", 300)
    parse_predicate(" OR ".join(f"id > {i}" for i in range(99)), INT_SCHEMA)  # 99 * 3 + 1 nodes
    with pytest.raises(InvalidFilterError, match=r"more than 300 terms.*IN \("):
        parse_predicate(" OR ".join(f"id > {i}" for i in range(100)), INT_SCHEMA)
    # An IN list is one node however long, and so are folded equalities.
    parse_predicate(f"id IN ({', '.join(map(str, range(1000)))})", INT_SCHEMA)
    parse_predicate(" OR ".join(f"id = {i}" for i in range(1000)), INT_SCHEMA)


def test_balanced_and_or_evaluate_like_the_chain() -> None:
    # 1,001 terms with NULLs among the operands: the balanced tree's Kleene logic gives
    # the same true / false / NULL per row as the left-to-right chain.
    table = pa.table({"id": pa.array([0, 1, None, 7, 3], pa.int64()), "s": ["a", None, "b", "c", None]})
    for kind, combine in ((" OR ", pc.or_kleene), (" AND ", pc.and_kleene)):
        sql = kind.join(f"id {'>' if i % 3 else '!='} {i % 5}" if i % 2 else f"s != 'v{i % 7}'" for i in range(1001))
        predicate = parse_predicate(sql, table.schema)
        assert isinstance(predicate.root, Or | And)
        chain = _to_arrow(predicate.root.terms[0])
        for term in predicate.root.terms[1:]:
            chain = combine(chain, _to_arrow(term))
        evaluate = ds.dataset(table).to_table
        balanced = evaluate(columns={"r": predicate.to_arrow()}).column("r").to_pylist()
        assert balanced == evaluate(columns={"r": chain}).column("r").to_pylist()
        assert None in balanced or kind == " OR "


# --------------------------------------------------------------------------- deep nesting (item 9)

NEST_ROWS = pa.table({"id": pa.array([1, 2, None], pa.int64()), "s": ["a", "B", None]})


def _nested(kind: str, n: int) -> str:
    """A filter with ``n`` levels of one kind of nesting."""
    if kind == "parentheses":
        return "(" * n + "id = 1" + ")" * n
    if kind == "not":
        return "NOT " * n + "id = 1"
    if kind == "not_parenthesized":
        return "NOT (" * n + "id = 1" + ")" * n
    if kind == "and_or":
        # id != v AND (...) and id = v OR (...) are both (...) on the rows below.
        return "".join(f"id != {i + 3} AND (" if i % 2 else f"id = {i + 3} OR (" for i in range(n)) + "id = 1" + ")" * n
    if kind == "function":
        return "lower(" * n + "s" + ")" * n + " = 'a'"
    if kind == "arithmetic":
        return "(" * n + "id" + " + 0)" * n + " = 1"
    if kind == "negation":
        return "-(" * n + "id" + ")" * n + f" = {(-1) ** n}"
    if kind == "cast":
        return "CAST(" * n + "id" + " AS BIGINT)" * n + " = 1"
    if kind == "coalesce":
        return "coalesce(" * n + "id" + ", 0)" * n + " = 1"
    if kind == "between":
        return "(" * n + "id BETWEEN 1 AND 1" + ")" * n
    if kind == "in":
        return "(" * n + "id IN (1, 100)" + ")" * n
    raise AssertionError(kind)


# Kinds whose nesting disappears in the bound tree (parentheses, NOT NOT) work at any
# depth sqlglot can parse; the others up to MAX_FILTER_DEPTH.
COLLAPSING = ["parentheses", "not", "not_parenthesized", "between", "in"]
NESTING = ["and_or", "function", "arithmetic", "negation", "cast", "coalesce"]


@pytest.mark.parametrize("kind", COLLAPSING + NESTING)
@pytest.mark.parametrize("n", [1, 50, 60])
def test_deep_nesting_within_the_limits_is_evaluated(kind: str, n: int) -> None:
    predicate = parse_predicate(_nested(kind, n), NEST_ROWS.schema)
    expected = [2] if kind.startswith("not") and n % 2 else [1]
    assert NEST_ROWS.filter(predicate.to_arrow()).column("id").to_pylist() == expected
    # A file holding the matching row is kept.
    assert prune_files(predicate, None, _int_stats([(expected[0], expected[0])])).to_pylist() == [True]


@pytest.mark.parametrize("kind", COLLAPSING)
@pytest.mark.parametrize("n", [200, 1000])
def test_parentheses_and_stacked_nots_collapse_at_any_parseable_depth(kind: str, n: int) -> None:
    predicate = parse_predicate(_nested(kind, n), NEST_ROWS.schema)
    expected = [2] if kind.startswith("not") and n % 2 else [1]
    assert NEST_ROWS.filter(predicate.to_arrow()).column("id").to_pylist() == expected
    assert _tree_depth(predicate.root) <= 3


@pytest.mark.parametrize("kind", NESTING)
def test_nesting_beyond_the_depth_limit_is_an_invalid_filter(kind: str) -> None:
    with pytest.raises(InvalidFilterError, match=rf"more than {MAX_FILTER_DEPTH} levels deep"):
        parse_predicate(_nested(kind, MAX_FILTER_DEPTH + 10), NEST_ROWS.schema)


@pytest.mark.parametrize("kind", COLLAPSING + NESTING)
def test_nesting_beyond_what_can_be_parsed_is_an_invalid_filter_not_a_recursion_error(kind: str) -> None:
    with pytest.raises(InvalidFilterError, match="levels"):
        parse_predicate(_nested(kind, 5000), NEST_ROWS.schema)


def test_parentheses_inside_quotes_and_comments_are_not_nesting() -> None:
    # Text too deeply parenthesized to parse is refused before parsing; parentheses in a
    # string literal, a quoted name or a comment are text, not nesting.
    deep = "(" * (UNPARSEABLE_PARENTHESES + 1)
    assert parentheses_deeper_than(deep + "id = 1" + ")" * len(deep), UNPARSEABLE_PARENTHESES)
    schema = pa.schema([("s", pa.string()), (f"c{deep}", pa.int64())])
    sql = f"s = '{deep}' /* {deep} */ OR `c{deep}` = 1 -- {deep}"
    assert not parentheses_deeper_than(sql, UNPARSEABLE_PARENTHESES)
    rows = pa.table({"s": [deep, "x"], f"c{deep}": pa.array([0, 1], pa.int64())})
    assert rows.filter(parse_predicate(sql, schema).to_arrow()).column("s").to_pylist() == [deep, "x"]


def test_odd_and_even_stacks_of_not() -> None:
    assert NEST_ROWS.filter(parse_predicate(_nested("not", 200), NEST_ROWS.schema).to_arrow()).column("id").to_pylist() == [1]
    assert NEST_ROWS.filter(parse_predicate(_nested("not", 201), NEST_ROWS.schema).to_arrow()).column("id").to_pylist() == [2]


def _tree_depth(node: object) -> int:
    from airflow_delta.engine.expressions.tree import _children

    depth, stack = 0, [(node, 1)]
    while stack:
        current, level = stack.pop()
        depth = max(depth, level)
        stack.extend((child, level + 1) for child in _children(current))  # type: ignore[arg-type]
    return depth


# --------------------------------------------------------------------------- long IN lists (item 11)

IN_SCHEMA = pa.schema(
    [("id", pa.int64()), ("b", pa.int8()), ("x", pa.float64()), ("dec", pa.decimal128(10, 2)), ("s", pa.string()), ("d", pa.date32())]
)
_ITEMS = {
    "id": st.one_of(st.integers(-(10**20), 10**20).map(str), st.sampled_from(["NULL", "1.5", "-0", "- 7", "1e3", "007"])),
    "b": st.one_of(st.integers(-200, 200).map(str), st.just("NULL")),
    "x": st.one_of(st.integers(-1000, 1000).map(str), st.sampled_from(["1.25", "-2.5e1", ".5", "'NaN'", "'3'"])),
    "dec": st.one_of(st.integers(-999, 999).map(str), st.sampled_from(["1.25", "-3.5", "99999999.99", "0.001", "'4.5'"])),
    "s": st.one_of(st.text("ab é'\\", max_size=4).map(lambda t: "'" + t + "'"), st.just("NULL"), st.integers(0, 9).map(str)),
    "d": st.one_of(st.dates().map(lambda d: f"'{d.isoformat()}'"), st.just("'2024-02-30'")),
}


def _bind_outcome(bind: Callable[[], Node]) -> object:
    try:
        root = bind()
    except InvalidFilterError as exc:
        return ("error", str(exc))
    negated = isinstance(root, Not)
    if negated:
        root = root.term
    if isinstance(root, InList):  # values compared as a set (NaN included, by repr)
        return ("in", negated, root.operand, sorted(map(repr, root.values)), root.has_null)
    return ("other", negated, root)


@settings(max_examples=150, deadline=None)
@given(column=st.sampled_from(sorted(_ITEMS)), data=st.data(), negate=st.booleans())
def test_long_literal_lists_read_before_sqlglot_bind_as_sqlglot_reads_them(column: str, data: st.DataObject, negate: bool) -> None:
    items = data.draw(st.lists(_ITEMS[column], min_size=32, max_size=60))
    sql = f"{column} {'NOT IN' if negate else 'IN'} ({', '.join(items)})"
    fast = _bind_outcome(lambda: binding._parse_and_bind(sql, IN_SCHEMA).root)  # as parse_predicate reads it
    original = binder._MIN_EXTRACTED_LIST
    binder._MIN_EXTRACTED_LIST = 10**9  # every list through sqlglot's reader, value by value
    try:
        slow = _bind_outcome(lambda: sql_binding.bind_sql(sql, IN_SCHEMA))
    finally:
        binder._MIN_EXTRACTED_LIST = original
    assert fast == slow, sql


def test_in_lists_inside_quotes_comments_and_identifiers_are_left_alone() -> None:
    values = ", ".join(map(str, range(40)))
    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("x IN (1", pa.int64())])
    text, lists = binder._extract_in_lists(f"s = 'id IN ({values})' AND id IN ({values}) /* id IN ({values}) */")
    assert len(lists) == 1 and text.count(f"IN ({values})") == 2
    predicate = parse_predicate(f"s = 'id IN ({values})' OR id IN ({values}) -- id IN ({values})", schema)
    rows = pa.table({"id": pa.array([3, 50, 60], pa.int64()), "s": ["x", f"id IN ({values})", "y"], "x IN (1": [1, 2, 3]})
    assert rows.filter(predicate.to_arrow()).column("id").to_pylist() == [3, 50]


@settings(max_examples=200, deadline=None)
@given(
    ranges=st.lists(st.tuples(st.one_of(st.none(), st.integers(-50, 50)), st.one_of(st.none(), st.integers(-50, 50))), min_size=1, max_size=8),
    values=st.lists(st.integers(-60, 60), min_size=1, max_size=80),
    negate=st.booleans(),
)
def test_in_list_pruning_equals_pruning_value_by_value(ranges: list[tuple[int | None, int | None]], values: list[int], negate: bool) -> None:
    # The binary search over sorted values keeps exactly the files that one of the
    # values' own "x = v" tests keeps (and NOT IN drops only what every "x != v" drops).
    stats = pa.array(
        [{"numRecords": 5, "minValues": {"id": lo}, "maxValues": {"id": hi}, "nullCount": {"id": 1}} for lo, hi in ranges],
        _int_stats([(0, 0)]).type,
    )
    sql = f"id {'NOT IN' if negate else 'IN'} ({', '.join(map(str, values))})"
    together = prune_files(parse_predicate(sql, INT_SCHEMA), None, stats).to_pylist()
    one_by_one = [prune_files(parse_predicate(f"id {'!=' if negate else '='} {v}", INT_SCHEMA), None, stats).to_pylist() for v in values]
    combine = all if negate else any
    assert together == [combine(column) for column in zip(*one_by_one, strict=True)]


@settings(max_examples=100, deadline=None)
@given(
    maxima=st.lists(st.tuples(st.text("abc", max_size=3), st.text("abc", max_size=4), st.booleans()), min_size=1, max_size=6),
    values=st.lists(st.text("abc", max_size=5), min_size=1, max_size=40),
)
def test_string_in_list_pruning_equals_pruning_value_by_value(maxima: list[tuple[str, str, bool]], values: list[str]) -> None:
    # Including truncated maxima (Delta's tie-breaker), where a value starting with the
    # maximum's prefix may still be in the file.
    rows = [(lo, hi + ("\ufffd" if truncated else "")) for lo, hi, truncated in maxima]
    stats = pa.array(
        [{"numRecords": 5, "minValues": {"s": lo}, "maxValues": {"s": hi}, "nullCount": {"s": 0}} for lo, hi in rows],
        _string_stats(["a"]).type,
    )
    sql = f"s IN ({', '.join(repr(v).replace(chr(34), chr(39)) for v in values)})"
    together = prune_files(parse_predicate(sql, STRING_SCHEMA), None, stats).to_pylist()
    one_by_one = [prune_files(parse_predicate(f"s = '{v}'", STRING_SCHEMA), None, stats).to_pylist() for v in values]
    assert together == [any(column) for column in zip(*one_by_one, strict=True)]


def test_a_long_list_that_is_not_all_literals_is_declined_by_the_scan_and_bound_by_sqlglot() -> None:
    # Spaces around commas and minus signs, then one item that is not a literal: the
    # scan must give up on the list in one pass (no splitting of whitespace between
    # regular-expression parts, which is exponential in the number of items).
    items = ["-  1", " 5", "3 ", "- 4"] * 40
    assert binder._extract_in_lists(f"id IN ({',  '.join(items)}, id + 1)")[1] == {}
    predicate = parse_predicate(f"id IN ({',  '.join(items)}, id + 1)", INT_SCHEMA)
    assert ROWS.filter(predicate.to_arrow()).column("id").to_pylist() == [5]


@pytest.mark.parametrize("literal", [str, lambda i: f"'v{i}'"])
def test_a_200_000_value_in_list_never_reaches_sqlglot(literal: Callable[[int], str]) -> None:
    """Item 11: binding 200,000 values took ~45 s, because sqlglot built and the binder
    walked a node per value (quadratic in places). The list is now read by one
    regular-expression pass and coerced in one cast: sqlglot sees a placeholder, so the
    text it parses stays short whatever the list's length. Checked by what reaches
    sqlglot, not by timing (benchmarks/filter_in_list.py measures the time)."""
    n = 200_000
    column = "id" if literal is str else "s"
    sql = f"{column} IN (" + ", ".join(literal(i) for i in range(n)) + ")"
    text, lists = binder._extract_in_lists(sql)
    assert len(text) < 100 and len(lists) == 1, text
    (extracted,) = lists.values()
    assert sum(len(values) for values in extracted.kinds.values()) == n and not extracted.has_null
    predicate = parse_predicate(sql, IN_SCHEMA)
    assert isinstance(predicate.root, InList) and len(predicate.root.values) == n
