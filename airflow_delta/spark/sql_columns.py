"""Which columns a Spark SQL condition names, decided by sqlglot alone (no pyspark, no JVM).

The operators (in the Airflow worker) and the DELETE program's driver (before it decides
whether it needs a SparkSession at all) both ask whether a predicate reads partition
columns only, which makes a DELETE metadata-only. Neither may pay for Spark's analyzer to
know that, so the answer comes from the SQL text; the engine's own parser then decides
the delete, and anything either of them cannot read goes to Spark, which reports the
error or evaluates it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlglot
from sqlglot import exp

__all__ = ["references_only"]


def references_only(predicate: str, columns: Sequence[str]) -> bool:
    """Whether a Spark SQL predicate refers to no column outside ``columns`` (compared ignoring case, as Spark does).

    A predicate sqlglot cannot parse is not decided here (False): Spark will say what is wrong.
    """
    try:
        tree = sqlglot.parse_one(predicate, read="spark")
    except sqlglot.errors.ParseError:
        return False
    allowed = {column.casefold() for column in columns}
    # ``t.c`` (an alias) and ``s.f`` (a struct field) both count by whichever part is a column.
    return all(any(part.name.casefold() in allowed for part in column.parts) for column in tree.find_all(exp.Column))
