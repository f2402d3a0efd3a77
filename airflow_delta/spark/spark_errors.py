"""Spark's own errors, as the jobs report them: whole, without the jobs' internal columns, typed.

Spark refuses bad input with an error class and a SQLSTATE (``[PATH_NOT_FOUND] Path does not
exist: ... SQLSTATE: 42K03``). The jobs add columns of their own to the frames Spark analyzes
(the target row's file and position, the source row's number, MERGE's bookkeeping), and
Spark's "did you mean" suggestions list them; a user never wrote them and cannot use them, so
they are taken out of the message. An error of Spark's analyzer, or any error whose SQLSTATE
says the input is wrong (class 42: syntax or access rule; class 22: data exception), fails
the same way on every retry: it becomes :class:`~airflow_delta.engine.SparkAnalysisError`
(not retryable) instead of a crash that the task's retries run again.
"""

from __future__ import annotations

import re

from pyspark.errors import AnalysisException, PySparkException

from airflow_delta.engine import SparkAnalysisError

__all__ = ["INTERNAL_COLUMNS", "INTERNAL_COLUMN_PREFIX", "input_error", "spark_error_text"]

INTERNAL_COLUMN_PREFIX = "__airflow_delta_"
"""Every internal column of the MERGE program and the native scan starts with it."""

INTERNAL_COLUMNS = frozenset({"_delta_file", "_delta_row", "_delta_zvalue", "_row_groups_start", "_row_groups_stop"})
"""The file tasks' and OPTIMIZE's internal columns (:mod:`~airflow_delta.spark.file_tasks`)."""

# SQLSTATE classes of errors in the input itself: no retry can change the outcome.
_INPUT_SQLSTATE_CLASSES = ("42", "22")

# Spark's suggestion list: "Did you mean one of the following? [`t`.`id`, `s`.`name`]".
_SUGGESTIONS = re.compile(r"(Did you mean one of the following\? \[)([^\]]*)(\])")


def _is_internal(reference: str) -> bool:
    """Whether a suggested reference (`` `t`.`_delta_file` ``, ``_delta_row``) names an internal column."""
    name = reference.strip().split("`.`")[-1].strip("` ").rsplit(".", 1)[-1]
    return name in INTERNAL_COLUMNS or name.startswith(INTERNAL_COLUMN_PREFIX)


def _without_internal(match: re.Match[str]) -> str:
    kept = [ref.strip() for ref in match.group(2).split(",") if ref.strip() and not _is_internal(ref)]
    return f"{match.group(1)}{', '.join(kept)}{match.group(3)}"


def spark_error_text(error: BaseException) -> str:
    """Spark's message for ``error``, whole, without the plan dump or the JVM stack that may follow it.

    The first line holds the error class, the message and the SQLSTATE; internal columns are
    taken out of its suggestions.
    """
    text = str(error).strip()
    first = text.splitlines()[0].strip() if text else type(error).__name__
    return _SUGGESTIONS.sub(_without_internal, first)


def input_error(error: BaseException) -> SparkAnalysisError | None:
    """The :class:`SparkAnalysisError` for a Spark error that bad input causes; None for any other error.

    Spark's analysis errors (``ParseException`` is one) always are; another PySpark error is
    when its SQLSTATE is of class 42 or 22.
    """
    if not isinstance(error, PySparkException):
        return None
    if not isinstance(error, AnalysisException):
        state = error.getSqlState() or ""
        if not state.startswith(_INPUT_SQLSTATE_CLASSES):
            return None
    return SparkAnalysisError(
        f"Spark refused the job's input: {spark_error_text(error)} (running it again fails the same way: "
        "fix the path, column or SQL text it names)"
    )
