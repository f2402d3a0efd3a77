"""Columns whose values the writer supplies: identity columns, generated columns, column defaults.

What Delta keeps in a column's metadata and the rules writers follow (PROTOCOL.md
"Identity Columns", "Generated Columns", "Default Columns"; for behaviour Delta's
``IdentityColumn``, ``GeneratedColumn`` and ``ColumnWithDefaultExprUtils``):

* An identity column has ``delta.identity.start``, ``delta.identity.step`` (never 0) and
  ``delta.identity.allowExplicitInsert`` (false: ``GENERATED ALWAYS``, true: ``BY
  DEFAULT``), and once values were generated ``delta.identity.highWaterMark``, the value
  furthest in the step's direction ever generated. New values are
  ``highWaterMark + step * k`` (``start + step * k`` before any), ``k >= 0``, unique within a
  write; the write records its own furthest value as the new high-water mark in the
  same commit (a metadata update, tagged :data:`~.commit_info.IDENTITY_COMMIT_TAG` when it is the only
  change, so that concurrent commits without a metadata update do not conflict with it).
* A generated column has ``delta.generationExpression``, a Spark SQL expression over the
  row's other columns; every written row must hold ``column <=> expression``.
* A column default is ``CURRENT_DEFAULT``, a Spark SQL expression used for INSERTs that
  leave the column out or say ``DEFAULT``.

Expressions are Spark SQL: the engine never evaluates them (only Spark does, in the Spark
programs). This module only reads the metadata and does the high-water-mark arithmetic.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from airflow_delta.engine.errors import InvalidLogError
from airflow_delta.engine.model.actions import Metadata
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.model.schema import PHYSICAL_NAME_KEY, parse_schema_json

IDENTITY_START_KEY = "delta.identity.start"
IDENTITY_STEP_KEY = "delta.identity.step"
IDENTITY_HIGH_WATER_MARK_KEY = "delta.identity.highWaterMark"
IDENTITY_ALLOW_EXPLICIT_INSERT_KEY = "delta.identity.allowExplicitInsert"
GENERATION_EXPRESSION_KEY = "delta.generationExpression"
CURRENT_DEFAULT_KEY = "CURRENT_DEFAULT"

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class IdentityColumn:
    """One identity column as the table's metadata defines it (top-level columns only, as in Delta)."""

    name: str
    physical_name: str
    start: int
    step: int
    high_water_mark: int | None
    allow_explicit_insert: bool

    @property
    def generated_always(self) -> bool:
        return not self.allow_explicit_insert

    @property
    def first_value(self) -> int:
        """The first value a write may generate: one step past the high-water mark, else ``start``."""
        if self.high_water_mark is None:
            return self.start
        return _checked(self.high_water_mark + self.step, self.name)

    def value(self, offset: int) -> int:
        """The ``offset``-th value after :attr:`first_value` (``offset >= 0``); a long overflow is an error."""
        return _checked(self.first_value + self.step * offset, self.name)

    def furthest(self, values: list[int]) -> int:
        """The value furthest in the step's direction among ``values`` (not empty)."""
        return max(values) if self.step > 0 else min(values)

    def next_high_water_mark(self, candidate: int) -> int | None:
        """The high-water mark after a write whose furthest generated value is ``candidate``; None: unchanged.

        Delta's ``updateToValidHighWaterMark``: the candidate is rounded to the next value
        of the sequence ``start + step * n``; a candidate before ``start`` changes nothing
        (unless the recorded mark itself lies before ``start``, which the new one
        replaces); the mark never moves backwards.
        """
        positive = self.step > 0

        def before(a: int, b: int) -> bool:
            return a < b if positive else a > b

        candidate_before_start = before(candidate, self.start)
        rounded = round_to_next(self.start, self.step, candidate)
        new = rounded
        if self.high_water_mark is not None and before(rounded, self.high_water_mark):
            new = self.high_water_mark
        bad_existing = self.high_water_mark is not None and before(self.high_water_mark, self.start)
        if bad_existing or (not candidate_before_start and new != self.high_water_mark):
            return new
        return None


def round_to_next(start: int, step: int, value: int) -> int:
    """``value`` rounded to the next value of ``start + step * n`` in the step's direction (Delta's ``roundToNext``)."""
    offset = value - start
    if _java_rem(offset, step) == 0:
        return value
    quotient = _java_div(offset, step)
    multiple = quotient + 1 if (offset > 0) == (step > 0) and offset != 0 else quotient
    return start + step * multiple


def _java_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, as the JVM's ``/`` on longs."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _java_rem(a: int, b: int) -> int:
    return a - b * _java_div(a, b)


def _checked(value: int, column: str) -> int:
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise InvalidLogError(f"identity column {column!r} would overflow a long with the value {value}")
    return value


def _top_fields(schema_json: Mapping[str, Any] | str) -> list[Mapping[str, Any]]:
    return list(parse_schema_json(schema_json).get("fields", []))


def identity_columns(schema_json: Mapping[str, Any] | str) -> tuple[IdentityColumn, ...]:
    """The table's identity columns, in schema order; metadata that is half there is an :class:`InvalidLogError`."""
    out = []
    for field in _top_fields(schema_json):
        meta = field.get("metadata") or {}
        keys = (IDENTITY_START_KEY, IDENTITY_STEP_KEY, IDENTITY_ALLOW_EXPLICIT_INSERT_KEY)
        present = [key in meta for key in keys]
        if not any(present):
            continue
        name = str(field["name"])
        if not all(present):
            raise InvalidLogError(
                f"identity column {name!r} lacks {[k for k, p in zip(keys, present, strict=True) if not p]} in its metadata"
            )
        try:
            start, step = int(meta[IDENTITY_START_KEY]), int(meta[IDENTITY_STEP_KEY])
            mark = meta.get(IDENTITY_HIGH_WATER_MARK_KEY)
            high_water_mark = None if mark is None else int(mark)
        except (TypeError, ValueError) as exc:
            raise InvalidLogError(f"identity column {name!r} has unreadable identity metadata: {exc}") from exc
        if step == 0:
            raise InvalidLogError(f"identity column {name!r} has step 0 (Delta: IDENTITY column step cannot be 0)")
        allow = meta[IDENTITY_ALLOW_EXPLICIT_INSERT_KEY]
        out.append(
            IdentityColumn(
                name=name,
                physical_name=str(meta.get(PHYSICAL_NAME_KEY, name)),
                start=start,
                step=step,
                high_water_mark=high_water_mark,
                allow_explicit_insert=allow is True or str(allow).lower() == "true",
            )
        )
    return tuple(out)


def generated_columns(schema_json: Mapping[str, Any] | str) -> dict[str, str]:
    """``{column: generation expression}`` of the table's generated columns, in schema order."""
    return {
        str(f["name"]): str((f.get("metadata") or {})[GENERATION_EXPRESSION_KEY])
        for f in _top_fields(schema_json)
        if GENERATION_EXPRESSION_KEY in (f.get("metadata") or {})
    }


def column_default_expressions(schema_json: Mapping[str, Any] | str) -> dict[str, str]:
    """``{column: CURRENT_DEFAULT expression}`` of the columns that have a default."""
    return {
        str(f["name"]): str((f.get("metadata") or {})[CURRENT_DEFAULT_KEY])
        for f in _top_fields(schema_json)
        if CURRENT_DEFAULT_KEY in (f.get("metadata") or {})
    }


def with_identity_high_water_marks(metadata: Metadata, candidates: Mapping[str, int]) -> Metadata:
    """``metadata`` with each identity column's high-water mark moved for ``candidates`` (column -> furthest value written).

    Columns are named as in the schema; a candidate that moves nothing (see
    :meth:`IdentityColumn.next_high_water_mark`) leaves its column alone, and ``metadata``
    itself comes back when nothing moved.
    """
    if not candidates:
        return metadata
    columns = {c.name: c for c in identity_columns(metadata.schema_string)}
    schema = json.loads(metadata.schema_string)
    changed = False
    for field in schema.get("fields", []):
        column = columns.get(field.get("name"))
        if column is None or column.name not in candidates:
            continue
        mark = column.next_high_water_mark(int(candidates[column.name]))
        if mark is not None:
            field["metadata"] = {**(field.get("metadata") or {}), IDENTITY_HIGH_WATER_MARK_KEY: mark}
            changed = True
    if not changed:
        return metadata
    return replace(metadata, schema_string=json_text(schema))


def without_identity_high_water_marks(schema_json: Mapping[str, Any] | str) -> dict[str, Any]:
    """The schema with every ``delta.identity.highWaterMark`` removed: what two metadata compare on
    to tell an identity-only update (:data:`~.commit_info.IDENTITY_COMMIT_TAG`) from any other."""
    schema = json.loads(json.dumps(parse_schema_json(schema_json)))
    for field in schema.get("fields", []):
        meta = field.get("metadata")
        if meta and IDENTITY_HIGH_WATER_MARK_KEY in meta:
            field["metadata"] = {k: v for k, v in meta.items() if k != IDENTITY_HIGH_WATER_MARK_KEY}
    return schema


def is_identity_only_update(before: Metadata, after: Metadata) -> bool:
    """Whether ``after`` differs from ``before`` in identity high-water marks only (and does differ)."""
    if before == after or before.schema_string == after.schema_string:
        return False
    same_rest = (
        before.id == after.id
        and before.partition_columns == after.partition_columns
        and dict(before.configuration) == dict(after.configuration)
        and before.format == after.format
        and before.name == after.name
        and before.description == after.description
    )
    return same_rest and without_identity_high_water_marks(before.schema_string) == without_identity_high_water_marks(
        after.schema_string
    )


def with_merged_high_water_marks(restored: Metadata, latest: Metadata) -> Metadata:
    """``restored`` with the high-water marks of ``latest`` merged in (Delta's ``copySchemaWithMergedHighWaterMarks``).

    RESTORE brings back an older schema, but identity values generated since must never
    be generated again: each identity column (matched by physical name) keeps the mark
    furthest in its step's direction.
    """
    marks = {c.physical_name: c.high_water_mark for c in identity_columns(latest.schema_string) if c.high_water_mark is not None}
    by_name = {c.name: marks[c.physical_name] for c in identity_columns(restored.schema_string) if c.physical_name in marks}
    return with_identity_high_water_marks(restored, by_name)
