"""How large and how deeply nested a filter may be, and running a parser that recurses.

A filter is user input: its size must not decide whether the process survives. sqlglot
parses by recursive descent, about 30 Python frames per level of parentheses or NOT, so
legal SQL such as 50 nested parentheses exceeds Python's default recursion limit of
1000; and a pyarrow expression nested 10,000 levels deep overflows the C stack
(SIGSEGV). The limits below are explicit, and every filter within them is handled:

* :data:`MAX_FILTER_NESTING` levels of parentheses, NOT and function calls in the SQL
  text. sqlglot runs in a worker thread with a stack and a recursion limit sized for
  this many levels; deeper text is an :class:`InvalidFilterError`.
* :data:`MAX_FILTER_DEPTH` levels of operators inside operators in the bound filter.
  Parentheses, NOT NOT pairs and chains of AND / OR (``a OR b OR c`` is one OR of three
  terms) do not count: only operands of different operators nested in each other do,
  e.g. ``a AND (b OR (c AND ...))`` or ``lower(lower(...))``.
* :data:`MAX_FILTER_NODES` nodes in the bound filter. An ``IN`` list counts as one node
  however many values it has, and ``x = 1 OR x = 2 OR ...`` is folded into one ``IN``:
  write long lists of values as ``x IN (...)``.

The bound tree is at most :data:`MAX_FILTER_DEPTH` deep, and AND / OR of many terms are
turned into balanced pyarrow trees, so that evaluating a filter never recurses deeply.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

MAX_FILTER_NESTING = 1000
MAX_FILTER_DEPTH = 64
MAX_FILTER_NODES = 50_000

# sqlglot needs up to ~30 frames per level of nesting (measured: NOT (...) is the
# deepest); the rest is headroom for the caller's frames and our binder.
_FRAMES_PER_LEVEL = 40
_RECURSION_LIMIT = _FRAMES_PER_LEVEL * MAX_FILTER_NESTING + 5_000
# Python frames of 3.11+ mostly live off the C stack, but calls through C (class
# instantiation, descriptors) do not: give the worker a stack that cannot overflow.
_STACK_BYTES = 256 * 1024 * 1024

_T = TypeVar("_T")

# sqlglot spends at least ~20 frames per level of parentheses (measured: 2,240 levels of
# plain parentheses parse, 2,250 do not): text nested deeper than this many levels cannot
# parse within the recursion limit, and is refused without trying (see binding.py).
_MIN_FRAMES_PER_PARENTHESIS = 16
UNPARSEABLE_PARENTHESES = _RECURSION_LIMIT // _MIN_FRAMES_PER_PARENTHESIS

# What can hold a parenthesis that is not one: quoted strings and identifiers (with
# their escapes and doubled quotes) and comments, matched whole and skipped.
_NOT_PARENTHESES = re.compile(r"""'(?:\\.|''|[^'\\])*'|"(?:\\.|""|[^"\\])*"|`(?:``|[^`])*`|--[^\n]*|/\*.*?\*/|[()]""", re.S)


def parentheses_deeper_than(sql: str, levels: int) -> bool:
    """Whether the parentheses of ``sql`` nest more than ``levels`` deep, outside quotes and comments.

    Text with at most ``levels`` opening parentheses in all is not scanned.
    """
    if sql.count("(") <= levels:
        return False
    depth = 0
    for match in _NOT_PARENTHESES.finditer(sql):
        token = match.group()
        if token == "(":
            depth += 1
            if depth > levels:
                return True
        elif token == ")":
            depth = max(0, depth - 1)
    return False


_limit_lock = threading.Lock()
_deep_calls = 0
_saved_limit = 0


def run_with_deep_recursion(function: Callable[[], _T]) -> _T:
    """``function()`` in a worker thread with a large stack and a raised recursion limit.

    The recursion limit is process-wide: it is raised while at least one such call runs
    and restored after the last one ends. Exceptions are re-raised in the caller.
    """
    global _deep_calls, _saved_limit
    outcome: list[_T] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            outcome.append(function())
        except BaseException as exc:  # re-raised in the calling thread
            failure.append(exc)

    with _limit_lock:
        if _deep_calls == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, _RECURSION_LIMIT))
        _deep_calls += 1
        # The stack size is read when a thread starts: start it while it is set.
        previous_stack = threading.stack_size(_STACK_BYTES)
        try:
            worker = threading.Thread(target=work, name="airflow-delta-filter-parser", daemon=True)
            worker.start()
        except BaseException:
            _deep_calls -= 1
            if _deep_calls == 0:
                sys.setrecursionlimit(_saved_limit)
            raise
        finally:
            threading.stack_size(previous_stack)
    try:
        worker.join()
    finally:
        with _limit_lock:
            _deep_calls -= 1
            if _deep_calls == 0:
                sys.setrecursionlimit(_saved_limit)
    if failure:
        raise failure[0]
    return outcome[0]
