"""The sqlglot-free reader of simple filters gives exactly the tree sqlglot's reader gives, or steps aside.

The oracle is the general reader (:func:`~airflow_delta.engine.expressions.sql_binding.bind_sql`,
sqlglot's Spark dialect): for every generated filter, either both readers bind it to equal
trees, or the simple reader returns None (and the filter goes to sqlglot, which reports any
error). Filters made only of the simple shapes must be read by the simple reader whenever
they bind at all, so the fast path is really taken.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import InvalidFilterError
from airflow_delta.engine.expressions import parse_predicate
from airflow_delta.engine.expressions.simple_filter import bind_simple_filter
from airflow_delta.engine.expressions.sql_binding import bind_sql
from airflow_delta.engine.expressions.tree import Node

REPO = Path(__file__).resolve().parents[3]

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("small", pa.int8()),
        ("n", pa.int32()),
        ("ratio", pa.float64()),
        ("f", pa.float32()),
        ("price", pa.decimal128(10, 2)),
        ("part", pa.string()),
        ("Name", pa.string()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", "UTC")),
        ("flag", pa.bool_()),
        ("odd col", pa.int64()),
        ("s", pa.struct([("a", pa.int32()), ("b", pa.string())])),
    ]
)

_COLUMNS = ["id", "small", "n", "ratio", "f", "price", "part", "name", "NAME", "day", "ts", "flag", "`odd col`", "s.a", "s.b", "S.A", "`s`.`b`", "missing"]
_NUMBERS = st.one_of(
    st.integers(min_value=0, max_value=10**20).map(str),
    st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False).map(str),
    st.sampled_from(["0", "127", "128", "32768", "2147483648", "1.50", "0.005", "99999999999999999999"]),
)
_STRINGS = st.one_of(
    st.sampled_from(["2024-01-01", "2024-02-30", "2024-01-01 10:00:00", "NaN", "Infinity", "12", "1.5", "abc", "p3", "", "true"]),
    st.text(alphabet="ab1-: .", max_size=8),
).map(lambda text: f"'{text}'")
_LITERALS = st.one_of(_NUMBERS, _NUMBERS.map(lambda n: f"-{n}"), _NUMBERS.map(lambda n: f"- {n}"), _STRINGS, st.sampled_from(["NULL", "TRUE", "false", "null"]))
_OPERANDS = st.one_of(st.sampled_from(_COLUMNS), _LITERALS)
_OPS = st.sampled_from(["=", "==", "!=", "<>", "<", "<=", ">", ">=", "<=>"])


def _in_list(operand: str, items: list[str], negated: bool) -> str:
    return f"{operand} {'NOT IN' if negated else 'IN'} ({', '.join(items)})"


_ATOMS = st.one_of(
    st.builds(lambda left, op, right: f"{left} {op} {right}", _OPERANDS, _OPS, _OPERANDS),
    st.builds(lambda operand, negated: f"{operand} IS {'NOT ' if negated else ''}NULL", _OPERANDS, st.booleans()),
    # Short lists, and lists long enough (>= 32 values) to be read by regular expression.
    st.builds(_in_list, st.sampled_from(_COLUMNS), st.lists(_OPERANDS, min_size=1, max_size=4), st.booleans()),
    st.builds(_in_list, st.sampled_from(["id", "part", "price", "ratio"]), st.lists(_LITERALS, min_size=32, max_size=40), st.booleans()),
    st.sampled_from(["flag", "s.a", "NULL", "TRUE", "1"]),
)
_FILTERS = st.recursive(
    _ATOMS,
    lambda inner: st.one_of(
        st.builds(lambda a, b, op: f"{a} {op} {b}", inner, inner, st.sampled_from(["AND", "OR", "and", "Or"])),
        inner.map(lambda a: f"({a})"),
        inner.map(lambda a: f"NOT {a}"),
        inner.map(lambda a: f"not ({a})"),
    ),
    max_leaves=8,
)


def _same(fast: Node | None, oracle: Node) -> bool:
    """Equal trees, compared by their full repr: values with their exact form (Decimal('1.50')),
    types, flags; and NaN equal to NaN, which ``==`` on the dataclasses would not say."""
    return repr(fast) == repr(oracle)


def _sqlglot(sql: str) -> Node | InvalidFilterError:
    try:
        return bind_sql(sql, SCHEMA)
    except InvalidFilterError as exc:
        return exc


@settings(max_examples=400, deadline=None)
@given(_FILTERS)
def test_simple_reader_agrees_with_sqlglot(sql: str) -> None:
    fast = bind_simple_filter(sql, SCHEMA)
    oracle = _sqlglot(sql)
    if isinstance(oracle, InvalidFilterError):
        assert fast is None, (sql, fast, oracle)
    else:
        # Every generated shape is a simple one: the fast reader must take it, and agree.
        assert _same(fast, oracle), (sql, fast, oracle)


@pytest.mark.parametrize(
    "sql",
    [
        "id = 7654321",
        "part = 'p3'",
        "id = 1 OR id = 2 OR id = 3",
        "NOT (flag OR NOT flag) AND s.a IS NOT NULL",
        "price IN (1, 2.5, '3') AND day >= '2024-01-01'",
        "ratio = 'NaN' OR ratio > -1.5",
        "`odd col` <=> NULL",
    ],
)
def test_common_filters_take_the_fast_reader(sql: str) -> None:
    fast = bind_simple_filter(sql, SCHEMA)
    assert fast is not None and _same(fast, bind_sql(sql, SCHEMA))


@pytest.mark.parametrize(
    "sql",
    [
        "lower(part) = 'a'",  # functions
        "id + 1 = 2",  # arithmetic
        "id BETWEEN 1 AND 3",
        "part LIKE 'p%'",
        "id = 1e3",  # Spark's other number forms
        "id = 1L",
        "part = 'it''s'",  # quotes and escapes inside strings
        "part = 'a\\'b'",
        'part = "p3"',
        "id = 1 -- a comment",
        "id = 1 /* a comment */",
        "CAST(id AS STRING) = '1'",
        "flag IS TRUE",
        "s . a = 1",  # a field path only when written tight
        "s.a.= 1",
        "id = 1; DROP TABLE t",
        "nope = 1",  # binding errors: sqlglot's reader words them
        "part OR flag",
        "",
    ],
)
def test_other_filters_fall_back_to_sqlglot(sql: str) -> None:
    assert bind_simple_filter(sql, SCHEMA) is None


def test_parse_predicate_reports_errors_in_sqlglot_words() -> None:
    # The simple shape with an unknown column: the message is the general reader's.
    with pytest.raises(InvalidFilterError, match=r"column 'nope' does not exist in the table; available columns: id, small"):
        parse_predicate("nope = 1", SCHEMA)
    with pytest.raises(InvalidFilterError, match="not a condition"):
        parse_predicate("part OR flag", SCHEMA)


def _sqlglot_words() -> list[str]:
    """Every word sqlglot's Spark dialect treats as a keyword or a function without parentheses."""
    from sqlglot.dialects.spark import Spark

    words = {key for key in Spark.Tokenizer.KEYWORDS if key.replace("_", "").isalnum() and not key[0].isdigit()}
    words |= {str(name).upper() for name in Spark.Parser.NO_PAREN_FUNCTIONS}
    words |= {token.name for token in Spark.Parser.NO_PAREN_FUNCTIONS}
    words |= set(Spark.Parser.FUNCTIONS)  # names of functions, here without parentheses
    return sorted(w for w in words if w.isidentifier())


def test_a_column_named_like_a_keyword_means_what_sqlglot_reads() -> None:
    # For each keyword, a table with a column of that name: the fast reader either steps
    # aside or binds exactly what sqlglot binds (a column, where sqlglot reads a column).
    words = _sqlglot_words()
    assert len(words) > 100, words
    read_fast = 0
    for word in words:
        schema = pa.schema([(word.lower(), pa.int64()), ("flag", pa.bool_())])
        for sql in (f"{word} = 1", f"{word} IS NOT NULL", f"1 < {word.lower()}", f"flag AND {word} IN (1, 2)", f"NOT {word} = 1 OR flag"):
            fast = bind_simple_filter(sql, schema)
            if fast is None:
                continue
            read_fast += 1
            try:
                oracle = bind_sql(sql, schema)
            except InvalidFilterError as exc:
                raise AssertionError(f"{sql!r}: the fast reader bound {fast}, sqlglot refuses it: {exc}") from None
            assert _same(fast, oracle), (sql, fast, oracle)
    assert read_fast > 0  # plain words (not keywords) still take the fast reader


def test_import_and_simple_filters_do_not_load_sqlglot() -> None:
    child = (
        "import json, sys\n"
        "import airflow_delta.engine\n"
        "from airflow_delta.engine.expressions import parse_predicate\n"
        "import pyarrow as pa\n"
        "after_import = sorted(m for m in ('sqlglot', 'pandas', 'airflow_delta.engine.operations.vacuum') if m in sys.modules)\n"
        "parse_predicate(\"id = 1 OR part IN ('a', 'b')\", pa.schema([('id', pa.int64()), ('part', pa.string())]))\n"
        "after_simple = sorted(m for m in ('sqlglot', 'pandas') if m in sys.modules)\n"
        "parse_predicate(\"lower(part) = 'a'\", pa.schema([('part', pa.string())]))\n"
        "after_function = 'sqlglot' in sys.modules\n"
        "print(json.dumps([after_import, after_simple, after_function]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after_import, after_simple, after_function = json.loads(proc.stdout.strip().splitlines()[-1])
    assert after_import == [] and after_simple == []
    assert after_function is True  # a function call goes through sqlglot
