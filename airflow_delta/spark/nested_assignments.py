"""SET targets resolved against a table's schema, and the struct values a field SET builds.

UPDATE and MERGE's ``WHEN MATCHED ... UPDATE SET`` may assign a field of a struct
(``SET address.city = 'Oslo'``). As Delta's ``UpdateExpressionsSupport
.generateUpdateExpressions`` does it:

- names are matched ignoring case (Spark's default resolution) and the written struct
  takes the schema's own names;
- a struct with assigned fields is rebuilt field by field (``named_struct``): assigned
  fields take their values, the others keep theirs, so several SETs into one struct
  combine, at any depth;
- a NULL struct with a field SET becomes a struct whose other fields are NULL (Delta
  builds the struct unconditionally, it does not keep the NULL);
- only struct fields can be addressed: a path through an array, a map or an atomic
  column is refused (Delta's ``DELTA_UNSUPPORTED_FIELD_UPDATE_NON_STRUCT``), as is a
  name the schema does not have (``DELTA_MISSING_SET_COLUMN``) and a struct SET beside
  one of its own fields (``DELTA_CONFLICT_SET_COLUMN``, checked on the paths by
  :func:`~airflow_delta.spark.column_paths.set_target_paths`, as the specs check them).

The value of an assigned field is cast to the field's type by the caller (UPDATE: Spark's
store assignment, ``Dataset.to``; MERGE: the cast it applies to whole columns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Union

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import StructField, StructType

from airflow_delta.engine import InvalidArgumentError
from airflow_delta.spark.column_paths import format_column_path, set_target_paths

__all__ = ["Assigned", "SetTree", "assigned_leaves", "assigned_value", "resolve_set_targets"]


@dataclass(frozen=True)
class Assigned:
    """One SET: its key as the caller wrote it (for error messages) and its Spark SQL expression."""

    key: str
    expression: str


# A schema field name -> its SET, or the SETs of the fields inside that struct.
SetTree = dict[str, Union[Assigned, "SetTree"]]


def resolve_set_targets(schema: StructType, assignments: Mapping[str, str], *, argument: str) -> SetTree:
    """``assignments`` (column path -> expression) as a tree keyed by ``schema``'s own names.

    Raises :class:`InvalidArgumentError` naming ``argument[key]`` for a name the schema
    does not have, a path through something other than a struct, and two paths that
    conflict (a struct and one of its fields, or one field twice).
    """
    paths = set_target_paths(argument, assignments)
    tree: SetTree = {}
    for key, path in paths.items():
        node, struct, walked = tree, schema, []
        for depth, name in enumerate(path):
            field = _field_named(struct, name)
            if field is None:
                where = f"a column of the table, one of {struct.names}" if not walked else (
                    f"a field of the struct {format_column_path(walked)}, one of "
                    f"{[format_column_path([*walked, n]) for n in struct.names]}"
                )
                raise InvalidArgumentError(f"{argument}[{key!r}]", key, where)
            walked.append(field.name)
            if depth == len(path) - 1:
                node[field.name] = Assigned(key, assignments[key])
                break
            if not isinstance(field.dataType, StructType):
                raise InvalidArgumentError(
                    f"{argument}[{key!r}]",
                    key,
                    f"a path through struct columns only: {format_column_path(walked)} is "
                    f"{field.dataType.simpleString()}, whose fields cannot be SET one by one (only a struct's "
                    "can); assign it whole, e.g. an array of structs with transform(...)",
                )
            child = node.setdefault(field.name, {})
            assert isinstance(child, dict)  # a SET of the struct itself conflicts, refused above
            node, struct = child, field.dataType
    return tree


def _field_named(struct: StructType, name: str) -> StructField | None:
    folded = name.casefold()
    return next((field for field in struct.fields if field.name.casefold() == folded), None)


def assigned_leaves(schema: StructType, tree: SetTree) -> Iterator[tuple[Assigned, StructField]]:
    """Each SET of ``tree`` with the schema field it assigns (a top-level column or a nested field)."""
    for field in schema.fields:
        target = tree.get(field.name)
        if isinstance(target, Assigned):
            yield target, field
        elif target is not None:
            assert isinstance(field.dataType, StructType)  # resolve_set_targets walks structs only
            yield from assigned_leaves(field.dataType, target)


def assigned_value(
    field: StructField,
    target: Assigned | SetTree,
    current: Column,
    value: Callable[[Assigned, StructField], Column],
) -> Column:
    """The new value of ``field``: ``value(...)`` of its SET, or its struct rebuilt with its SET fields.

    ``current`` is the field's value before the statement (a field of it is kept where
    nothing is assigned); ``value`` turns a SET into the column written for a field
    (the caller's cast).
    """
    if isinstance(target, Assigned):
        return value(target, field)
    assert isinstance(field.dataType, StructType)
    children = [
        (
            assigned_value(child, target[child.name], current.getField(child.name), value)
            if child.name in target
            else current.getField(child.name)
        ).alias(child.name)
        for child in field.dataType.fields
    ]
    return F.struct(*children)
