"""Values the writer supplies on Spark: identity values, generated columns, column defaults.

The engine reads the rules from the table's metadata
(:func:`~airflow_delta.engine.identity_columns`, :func:`~airflow_delta.engine.generated_columns`,
:func:`~airflow_delta.engine.column_default_expressions`); the expressions are Spark SQL,
so Spark evaluates them here, as Delta's writers do:

* a generated column that a row does not give is computed from its generation expression
  over the row's written values; one it gives must equal it (``column <=> expression``),
  or the write fails as Delta's CHECK constraint "Generated Column" fails it
  (:class:`~airflow_delta.engine.ConstraintViolationError`), before anything is committed;
* an identity column an INSERT leaves out gets values ``first_value + step * n``: ``n`` is
  unique per row (the rows are numbered once, on a local checkpoint, so a recomputed
  partition cannot number them again differently), with gaps as Delta's per-partition
  generator has them; the furthest value becomes the new high-water mark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import StructType

from airflow_delta.engine import ConstraintViolationError, IdentityColumn

__all__ = ["DEFAULT_KEYWORD", "GENERATED_CONSTRAINT", "check_generated", "is_default_keyword", "with_generated", "with_identity_values"]

# The SQL keyword an assignment gives to ask for the column's default.
DEFAULT_KEYWORD = "DEFAULT"
# The name Delta gives the constraint that checks a given generated value.
GENERATED_CONSTRAINT = "CHECK constraint Generated Column"

# The identity numbering column (a job-internal name).
_SEQUENCE = "__airflow_delta_identity_sequence"
# monotonically_increasing_id(): the partition index above these bits, the row within it below.
_ROW_BITS = 33


def is_default_keyword(expression: str) -> bool:
    """Whether an assignment's value is the ``DEFAULT`` keyword."""
    return expression.strip().upper() == DEFAULT_KEYWORD


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def with_generated(
    frame: DataFrame, generated: Mapping[str, str], schema: StructType, given: Mapping[str, Column]
) -> DataFrame:
    """``frame`` with each generated column computed from its expression where ``given[column]`` is not TRUE.

    ``given[column]`` says per row whether the row's own value for the column stands (the
    clause assigned it); a column absent from ``given`` is computed in every row. The
    expressions see the row's written values (the other columns of ``frame``).
    """
    if not generated:
        return frame
    types = {f.name: f.dataType for f in schema.fields}
    replaced = {}
    for name, expression in generated.items():
        computed = F.expr(expression).cast(types[name])
        keep = given.get(name)
        replaced[name] = computed if keep is None else F.when(keep, F.col(_quoted(name))).otherwise(computed)
    return frame.withColumns(replaced)


def check_generated(frame: DataFrame, generated: Mapping[str, str], schema: StructType, given: Mapping[str, Column]) -> None:
    """Fail as Delta does when a row's given generated value differs from its expression (``NOT (column <=> expression)``).

    Only the rows where ``given[column]`` is TRUE are checked (the others were computed).
    Raises :class:`ConstraintViolationError` with the count and one offending row.
    """
    types = {f.name: f.dataType for f in schema.fields}
    for name, keep in given.items():
        expression = generated.get(name)
        if expression is None:
            continue
        differs = keep & ~F.col(_quoted(name)).eqNullSafe(F.expr(expression).cast(types[name]))
        bad = frame.where(F.coalesce(differs, F.lit(False)))
        example = bad.select(*[F.col(_quoted(f.name)) for f in schema.fields]).limit(1).collect()
        if example:
            raise ConstraintViolationError(
                GENERATED_CONSTRAINT,
                f"{_quoted(name)} <=> {expression}",
                bad.count(),
                {key: _shown(value) for key, value in example[0].asDict().items()},
            )


def _shown(value: object) -> object:
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


def with_identity_values(
    frame: DataFrame, columns: Sequence[IdentityColumn], generate: Column
) -> tuple[DataFrame, dict[str, int]]:
    """``frame`` with new values for ``columns`` in the rows where ``generate`` is TRUE; and each column's furthest new value.

    The frame is numbered and locally checkpointed first (one pass): the numbers, and so
    the values, are fixed before anything reads them. A row's number is its partition's
    offset (the rows of the partitions before it) plus its index in its partition.
    The dict is empty when no row generates.
    """
    numbered = frame.withColumn(_SEQUENCE, F.monotonically_increasing_id()).localCheckpoint(
        eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK
    )
    mask = (1 << _ROW_BITS) - 1
    partition = F.shiftright(F.col(_SEQUENCE), _ROW_BITS)
    row = F.col(_SEQUENCE).bitwiseAND(F.lit(mask))
    sizes = numbered.groupBy(partition.alias("p")).agg(
        (F.max(row) + 1).alias("rows"),
        F.max(F.when(F.coalesce(generate, F.lit(False)), row)).alias("last_generated"),
    ).collect()
    offsets: dict[int, int] = {}
    offset = 0
    last_number: int | None = None
    for entry in sorted(sizes, key=lambda r: int(r["p"])):
        offsets[int(entry["p"])] = offset
        if entry["last_generated"] is not None:
            number = offset + int(entry["last_generated"])
            last_number = number if last_number is None else max(last_number, number)
        offset += int(entry["rows"])
    if last_number is None:
        return numbered.drop(_SEQUENCE), {}
    offset_map = F.create_map(*[F.lit(v) for pair in offsets.items() for v in pair])
    number = F.element_at(offset_map, partition) + row
    values = {
        c.name: F.when(F.coalesce(generate, F.lit(False)), F.lit(c.first_value) + number * F.lit(c.step)).otherwise(
            F.col(_quoted(c.name))
        )
        for c in columns
    }
    furthest = {c.name: c.value(last_number) for c in columns}  # also fails on a long overflow, before writing
    return numbered.withColumns(values).drop(_SEQUENCE), furthest
