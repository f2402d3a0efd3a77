"""SQL filter strings: parsed with sqlglot (Spark dialect), bound to a table schema.

A DAG author writes a filter such as ``"dt = '2024-01-01' AND id > 10"``.
:func:`parse_predicate` parses it with sqlglot, resolves every column against the
table's Arrow schema (case-insensitively, like Spark; backticks and nested ``a.b``),
coerces literals to the column types and checks the types, so that mistakes surface
as :class:`InvalidFilterError` before any data is read. The result, :class:`Predicate`,
is an immutable bound expression tree with two uses:

* :meth:`Predicate.to_arrow` - a ``pyarrow.compute.Expression`` row filter with SQL's
  three-valued logic (a comparison with NULL is NULL, and NULL rows are filtered out);
* :func:`prune_files` - file skipping over N files at once: partition predicates are
  evaluated exactly on the typed partition values, data-column predicates
  conservatively on the ``minValues`` / ``maxValues`` / ``nullCount`` statistics. A file
  is dropped only when no row in it can satisfy the predicate.

Semantics follow Spark SQL (without ANSI mode), so that a DELETE run here and a Spark
job evaluating the same string select the same rows:

* NaN (``float`` / ``double``), as in Spark's "NaN Semantics": ``NaN = NaN`` is true,
  NaN is greater than every other value (``+Infinity`` included), and NaN is a value,
  not NULL. This holds for ``= != <> < <= > >= <=>``, ``IN`` / ``NOT IN`` and
  ``BETWEEN``, also between two columns and in constant expressions; so the non-null
  values are totally ordered and ``NOT (x < v)`` is exactly ``x >= v``. NaN is written
  ``CAST('NaN' AS DOUBLE)`` or ``'NaN'`` next to a float column (also ``'Infinity'``,
  ``'-Inf'``, ..., any letter case). ``CAST`` of a float: NaN -> 0 and infinities
  saturate for integer types, NULL for decimals (as is any value that does not fit),
  ``'NaN'`` / ``'Infinity'`` as strings.
* decimal ``+ - * /`` are exact, in Spark's result types (``price * 1.1`` is
  ``decimal(p + 3, s + 1)``; a quotient is rounded half away from zero to scale
  ``max(6, s1 + p2 + 1)``); integer operands count as ``decimal(3|5|10|20, 0)``, integer
  literals with their own number of digits. Division by zero is NULL. ``CAST`` to a
  decimal with fewer decimals rounds half away from zero, NULL when it does not fit.
  Casts of literals follow the same rules as casts of columns (``CAST(2.5 AS INT)`` is 2).
* :func:`prune_files` is sound for these rules: min/max statistics never include NaN
  (Spark records a NaN maximum, read as unknown; parquet footers and delta-rs leave NaN
  out), so for a float column a file is kept for ``>``, ``>=``, ``!=`` and any
  comparison with NaN whenever it has a non-null value.

Deliberate differences from Spark (documented, not accidental):

* strings without a zone compared with a ``timestamp`` column are read as UTC (Spark
  uses the session time zone; there is no session here); ``timestamp`` vs
  ``timestamp_ntz`` compares wall clocks as UTC;
* a string column compared with a number is an error (Spark would cast the string);
  quote the number;
* decimal arithmetic whose Spark result precision would exceed 38 (where Spark cuts the
  scale and rounds, e.g. ``decimal(38,18) * 1.1``) and decimal ``%`` are computed in
  double;
* ``CAST(double AS DECIMAL(p, s))`` rounds the double's exact binary value (0.15 is
  0.1499..., giving 0.1), where Spark rounds its shortest decimal form (giving 0.2);
* non-deterministic functions (``current_date()``, ``rand()``) are refused: a filter
  used to skip files must mean the same thing every time it is evaluated.

:meth:`Predicate.to_arrow` is meant for data already in memory (``Table.filter``, a
dataset over in-memory tables). Do not pass it as ``filter=`` to a pyarrow scan of
parquet files: pyarrow prunes row groups with footer statistics that leave NaN out, and
would drop NaN rows that the expression accepts.

The package's modules: :mod:`.tree` (the immutable bound nodes), :mod:`.sql_types` and
:mod:`.literals` (Spark's type and literal rules), :mod:`.binding` (sqlglot to the tree,
:func:`parse_predicate`), :mod:`.predicate` (:class:`Predicate`, :func:`references_only`),
:mod:`.arrow` (the tree as a ``pyarrow.compute`` expression), :mod:`.pruning`
(:func:`prune_files`) and :mod:`.limits` (how large and deeply nested a filter may be:
beyond ``MAX_FILTER_NESTING`` levels of parentheses and NOT, ``MAX_FILTER_DEPTH`` levels
of nested operators or ``MAX_FILTER_NODES`` terms, :class:`InvalidFilterError` says which
limit and how to restructure the filter; long value lists belong in ``IN (...)``).
"""

from airflow_delta.engine.expressions.binding import parse_predicate
from airflow_delta.engine.expressions.predicate import Predicate, references_only
from airflow_delta.engine.expressions.pruning import prune_files

__all__ = ["Predicate", "parse_predicate", "prune_files", "references_only"]
