"""``MERGE INTO ... USING ... ON ... WHEN ...`` text -> :class:`~airflow_delta.spark.specs.MergeSpec`.

DAG authors who run MERGE in Databricks notebooks or with delta-spark write it as SQL;
this turns that text into the structured spec the Spark job runs, with sqlglot's Spark
dialect, so that conditions, SET values and INSERT values stay Spark SQL (they are
rendered back in the Spark dialect and evaluated by Spark in the job).

Names in the text are not looked up in a catalog (the job has none): the target's name
is only a name (the table is ``target``, a :class:`TableRef`), and a source name in
``USING name`` or inside a ``USING (subquery)`` must be one of ``sources``, which maps
it to a Delta table or a parquet path. Without an alias, a table is referred to by its
own name, as in Spark (``MERGE INTO events USING updates ON events.id = updates.id``).

``MERGE WITH SCHEMA EVOLUTION INTO`` (Databricks' syntax) turns on schema evolution.

Whatever the spec cannot express is refused with an :class:`InvalidArgumentError` naming
``sql`` and saying what to write instead: another statement, ``DEFAULT`` values, ``SET *
EXCEPT``, assignments to source columns, struct fields in an INSERT's column list, an
INSERT in a MATCHED clause. ``UPDATE SET t.address.city = s.city`` assigns a field of a
struct (``MergeClause.assignments`` key ``address.city``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from airflow_delta.engine import InvalidArgumentError
from airflow_delta.spark.column_paths import format_column_path, set_target_paths
from airflow_delta.spark.specs import (
    ExecutionOptions,
    MergeClause,
    MergeClauseKind,
    MergeSource,
    MergeSpec,
    TableRef,
    TaskIdentity,
)
from airflow_delta.spark.sql_columns import SparkSqlText

__all__ = ["merge_spec_from_sql"]

_DIALECT = SparkSqlText  # Spark SQL that Spark runs again (parse_json kept)
# sqlglot does not parse Databricks' ``MERGE WITH SCHEMA EVOLUTION INTO``; it is read here
# and the statement parsed without it.
_WITH_SCHEMA_EVOLUTION = re.compile(r"\A\s*MERGE\s+WITH\s+SCHEMA\s+EVOLUTION\s+INTO\b", re.IGNORECASE)


def merge_spec_from_sql(
    sql: str,
    *,
    target: TableRef,
    identity: TaskIdentity,
    sources: Mapping[str, MergeSource] | None = None,
    schema_evolution: bool = False,
    options: ExecutionOptions | None = None,
) -> MergeSpec:
    """The :class:`MergeSpec` of one ``MERGE INTO`` statement in Spark SQL.

    ``sources`` maps each table name the statement reads (``USING name``, or the tables
    of a ``USING (subquery)``) to a Delta table or parquet path; names match ignoring
    case, as Spark's do. ``schema_evolution`` is on when given or when the text says
    ``MERGE WITH SCHEMA EVOLUTION INTO``.
    """
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidArgumentError("sql", sql, "the text of one MERGE INTO statement")
    sources = dict(sources or {})
    for name, source in sources.items():
        if not isinstance(name, str) or not isinstance(source, MergeSource):
            raise InvalidArgumentError("sources", sources, "a dict of table name -> MergeSource")
    evolution_in_text = _WITH_SCHEMA_EVOLUTION.match(sql)
    if evolution_in_text:
        sql = "MERGE INTO" + sql[evolution_in_text.end():]
    merge = _parse_merge(sql)

    target_alias = _alias_or_name(merge.this, "the target")
    source_expr = merge.args.get("using")
    if isinstance(source_expr, exp.Table):
        source_alias = _alias_or_name(source_expr, "the source")
        source = _named_source(sources, source_expr)
    elif isinstance(source_expr, exp.Subquery):
        source_alias = source_expr.alias or "source"
        query = source_expr.this
        source = MergeSource(query=query.sql(dialect=_DIALECT), views=_views_of(query, sources))
    else:
        raise InvalidArgumentError("sql", sql, "USING a table name or a (subquery)")
    if source_alias.casefold() == target_alias.casefold():
        raise InvalidArgumentError(
            "sql", sql, f"different names for the target and the source (both are {target_alias!r}): give one an alias"
        )
    on = merge.args.get("on")
    if on is None or merge.args.get("using_cond"):
        raise InvalidArgumentError("sql", sql, "an ON condition (ON target.key = source.key ...)")
    whens = merge.args.get("whens")
    when_list = whens.expressions if whens is not None else []
    clauses = tuple(_clause(when, target_alias, source_alias, index) for index, when in enumerate(when_list))
    return MergeSpec(
        target=target,
        source=source,
        on=on.sql(dialect=_DIALECT),
        clauses=clauses,
        identity=identity,
        source_alias=source_alias,
        target_alias=target_alias,
        schema_evolution=bool(schema_evolution or evolution_in_text),
        options=options if options is not None else ExecutionOptions(),
    )


def _parse_merge(sql: str) -> exp.Merge:
    try:
        statements = [s for s in sqlglot.parse(sql, read=_DIALECT) if s is not None]
    except ParseError as exc:
        raise InvalidArgumentError("sql", sql, f"valid Spark SQL MERGE INTO text ({_first_line(exc)})") from None
    except SqlglotError as exc:
        raise InvalidArgumentError("sql", sql, f"valid Spark SQL MERGE INTO text ({exc})") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Merge):
        kinds = [type(s).__name__.upper() for s in statements]
        raise InvalidArgumentError("sql", sql, f"exactly one MERGE INTO statement, not {kinds}")
    return statements[0]


def _first_line(exc: ParseError) -> str:
    # sqlglot's message repeats the statement with terminal underlining; the first line says it.
    return str(exc).splitlines()[0]


def _alias_or_name(table: exp.Expression, role: str) -> str:
    if not isinstance(table, exp.Table):
        raise InvalidArgumentError("sql", table.sql(dialect=_DIALECT), f"a table name as {role}")
    return table.alias or table.name


def _named_source(sources: Mapping[str, MergeSource], table: exp.Table) -> MergeSource:
    name = _table_name(table)
    found = {key.casefold(): value for key, value in sources.items()}.get(name.casefold())
    if found is None:
        raise InvalidArgumentError(
            "sources", sorted(sources), f"a MergeSource for {name!r}, the table the MERGE reads (USING {name})"
        )
    return found


def _table_name(table: exp.Table) -> str:
    if table.args.get("db") is not None or table.args.get("catalog") is not None:
        raise InvalidArgumentError(
            "sql", table.sql(dialect=_DIALECT), "a plain table name that `sources` maps (no database or catalog)"
        )
    return table.name


def _views_of(query: exp.Expression, sources: Mapping[str, MergeSource]) -> dict[str, MergeSource]:
    """The tables a USING subquery reads, each mapped to its source (CTE names are not tables)."""
    ctes = {cte.alias.casefold() for cte in query.find_all(exp.CTE)}
    by_name = {key.casefold(): (key, value) for key, value in sources.items()}
    views: dict[str, MergeSource] = {}
    for table in query.find_all(exp.Table):
        name = _table_name(table)
        if name.casefold() in ctes:
            continue
        entry = by_name.get(name.casefold())
        if entry is None:
            raise InvalidArgumentError(
                "sources", sorted(sources), f"a MergeSource for {name!r}, a table the USING subquery reads"
            )
        views[entry[0]] = entry[1]
    return views


def _clause(when: exp.When, target_alias: str, source_alias: str, index: int) -> MergeClause:
    matched = bool(when.args.get("matched"))
    by_source = bool(when.args.get("source"))
    condition_expr = when.args.get("condition")
    condition = condition_expr.sql(dialect=_DIALECT) if condition_expr is not None else None
    then = when.args.get("then")
    where = f"WHEN clause {index + 1}"
    group = "WHEN MATCHED" if matched else ("WHEN NOT MATCHED BY SOURCE" if by_source else "WHEN NOT MATCHED")
    if isinstance(then, exp.Var) and then.name.upper() == "DELETE":
        if not matched and not by_source:
            raise InvalidArgumentError("sql", then.sql(), f"INSERT in {where} ({group}): there is no target row to delete")
        kind: MergeClauseKind = "matched_delete" if matched else "not_matched_by_source_delete"
        return MergeClause(kind, condition)
    if isinstance(then, exp.Update):
        if not matched and not by_source:
            raise InvalidArgumentError("sql", then.sql(), f"INSERT in {where} ({group}): there is no target row to update")
        kind = "matched_update" if matched else "not_matched_by_source_update"
        items = then.expressions
        if len(items) == 1 and isinstance(items[0], exp.Star):
            _plain_star(items[0], where)
            return MergeClause(kind, condition, star=True)
        assignments: dict[str, str] = {}
        for item in items:
            if not isinstance(item, exp.EQ):
                raise InvalidArgumentError("sql", item.sql(dialect=_DIALECT), f"column = expression in {where}")
            column = _assigned_column(item.this, (target_alias, source_alias), where, field_allowed=True)
            _check_value(item.expression, where)
            if column in assignments:
                raise InvalidArgumentError("sql", column, f"each column assigned once in {where}")
            assignments[column] = item.expression.sql(dialect=_DIALECT)
        set_target_paths("sql", assignments)  # t.a with t.a.b, or a field twice: Delta's conflicting SET
        return MergeClause(kind, condition, assignments=assignments)
    if isinstance(then, exp.Insert):
        if matched or by_source:
            raise InvalidArgumentError(
                "sql", then.sql(dialect=_DIALECT), f"UPDATE or DELETE in {where} ({group}): INSERT is for WHEN NOT MATCHED"
            )
        columns = then.this
        if isinstance(columns, exp.Star):
            _plain_star(columns, where)
            return MergeClause("not_matched_insert", condition, star=True)
        values = then.expression
        if not isinstance(columns, exp.Tuple) or not isinstance(values, exp.Tuple):
            raise InvalidArgumentError("sql", then.sql(dialect=_DIALECT), f"INSERT (columns) VALUES (values) in {where}")
        if len(columns.expressions) != len(values.expressions):
            raise InvalidArgumentError(
                "sql",
                then.sql(dialect=_DIALECT),
                f"as many VALUES as columns in {where} ({len(columns.expressions)} columns, "
                f"{len(values.expressions)} values)",
            )
        inserted: dict[str, str] = {}
        for column_expr, value in zip(columns.expressions, values.expressions, strict=True):
            column = _assigned_column(column_expr, (target_alias, source_alias), where, field_allowed=False)
            _check_value(value, where)
            if column in inserted:
                raise InvalidArgumentError("sql", column, f"each column listed once in {where}")
            inserted[column] = value.sql(dialect=_DIALECT)
        return MergeClause("not_matched_insert", condition, assignments=inserted)
    shown = then.sql(dialect=_DIALECT) if isinstance(then, exp.Expression) else then
    raise InvalidArgumentError("sql", shown, f"UPDATE SET, DELETE or INSERT after THEN in {where}")


def _plain_star(star: exp.Star, where: str) -> None:
    if star.args.get("except_") or star.args.get("except") or star.args.get("replace") or star.args.get("rename"):
        raise InvalidArgumentError(
            "sql", star.sql(dialect=_DIALECT), f"a plain * in {where} (no EXCEPT/REPLACE): list the columns instead"
        )


def _assigned_column(column: exp.Expression, aliases: tuple[str, str], where: str, *, field_allowed: bool) -> str:
    """The target column (or, with ``field_allowed``, struct field) an UPDATE SET or INSERT names, as a column path.

    ``t.address.city`` and ``address.city`` both name the field ``city`` of the target's
    struct ``address`` (a leading name equal to the target's alias is the alias, as Spark
    resolves it). A path that starts with the source's alias is refused (write ``t.s.x``
    for a target struct named like the source); any other leading name is a target
    column, and the job says so when the target has none.
    """
    target_alias, source_alias = aliases
    names = _dotted_names(column)
    if names is None:
        raise InvalidArgumentError(
            "sql", column.sql(dialect=_DIALECT), f"a target column or struct field on the left of {where}"
        )
    if len(names) > 1 and names[0].casefold() == target_alias.casefold():
        names = names[1:]
    elif len(names) > 1 and names[0].casefold() == source_alias.casefold():
        raise InvalidArgumentError(
            "sql", column.sql(dialect=_DIALECT), f"a column of the target ({target_alias}) on the left of {where}"
        )
    if len(names) > 1 and not field_allowed:
        # Delta: "Nested field is not supported in the INSERT clause of MERGE operation".
        raise InvalidArgumentError(
            "sql",
            column.sql(dialect=_DIALECT),
            f"a top-level column of the target ({target_alias}) in {where}: an INSERT names neither a struct "
            "field nor another table's column; insert a whole struct, "
            "e.g. INSERT (id, address) VALUES (s.id, named_struct('city', s.city, 'zip', s.zip))",
        )
    return format_column_path(names)


def _dotted_names(node: exp.Expression) -> list[str] | None:
    """The names of ``a.b.c...`` (sqlglot's Column holds up to four; longer paths nest in Dot); None for other expressions."""
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier):
        return [part.name for part in node.parts]
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Identifier):
        head = _dotted_names(node.this)
        return None if head is None else [*head, node.expression.name]
    return None


def _check_value(value: exp.Expression, where: str) -> None:
    if isinstance(value, exp.Var) and value.name.upper() == "DEFAULT":
        raise InvalidArgumentError("sql", "DEFAULT", f"an expression in {where}: column defaults are not supported")
