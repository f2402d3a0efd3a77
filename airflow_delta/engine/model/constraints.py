"""Write-time constraints: NOT NULL, column invariants and CHECK constraints.

A writer must refuse rows that break any of them before it commits (PROTOCOL.md,
"Column Invariants" and "CHECK Constraints"). Where the two differ from plain SQL we
follow the protocol and the reference implementations (Delta Spark, delta-rs):

* an invariant that evaluates to ``false`` *or* ``NULL`` rejects the row (the spec
  says so explicitly);
* a CHECK constraint must evaluate to ``true`` for every row, so ``NULL`` rejects the
  row as well. (SQL's CHECK would let ``NULL`` pass; Delta does not, and a table that
  Spark refuses to write must not become writable through us.)

Expressions are Spark SQL strings; they are evaluated vectorised through
:func:`airflow_delta.engine.expressions.parse_predicate` (``.to_arrow()``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import ConstraintViolationError, InvalidFilterError, InvalidLogError
from airflow_delta.engine.model.actions import Metadata, Protocol
from airflow_delta.engine.model.table_features import writer_features

CHECK_CONSTRAINT_PREFIX = "delta.constraints."
INVARIANTS_KEY = "delta.invariants"


@dataclass(frozen=True, slots=True)
class Constraint:
    """One boolean SQL expression every written row must satisfy.

    ``name`` is how errors refer to it (``CHECK constraint positive_id``,
    ``invariant on a.b``); ``expression`` is the Spark SQL text.
    """

    name: str
    expression: str
    kind: str  # "check" or "invariant"


def check_constraints_of(configuration: Mapping[str, str]) -> tuple[Constraint, ...]:
    """CHECK constraints stored as ``delta.constraints.<name>`` properties, in name order."""
    found = []
    for key in sorted(configuration):
        if key.lower().startswith(CHECK_CONSTRAINT_PREFIX):
            name = key[len(CHECK_CONSTRAINT_PREFIX):]
            found.append(Constraint(f"CHECK constraint {name}", configuration[key], "check"))
    return tuple(found)


def invariants_of(schema_json: Mapping[str, Any]) -> tuple[Constraint, ...]:
    """Column invariants (``delta.invariants`` field metadata), for top-level and nested struct fields."""
    found = []
    for path, field in _struct_fields(schema_json, ()):
        raw = (field.get("metadata") or {}).get(INVARIANTS_KEY)
        if raw is None:
            continue
        column = ".".join(path)
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else raw
            expression = parsed["expression"]["expression"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidLogError(
                f"column {column!r} has an unreadable {INVARIANTS_KEY} value {raw!r}: expected "
                '{"expression": {"expression": "<SQL>"}}'
            ) from exc
        found.append(Constraint(f"invariant on {column}", str(expression), "invariant"))
    return tuple(found)


def table_constraints(protocol: Protocol, metadata: Metadata) -> tuple[Constraint, ...]:
    """The CHECK constraints and invariants a write to this table must enforce.

    Each is enforced only where the protocol supports its feature (writer version 2+
    for invariants, 3+ for CHECK constraints, or the table feature on writer version 7),
    as the protocol prescribes.
    """
    supported = writer_features(protocol)
    out: list[Constraint] = []
    if "invariants" in supported:
        out.extend(invariants_of(metadata.schema_json))
    if "checkConstraints" in supported:
        out.extend(check_constraints_of(metadata.configuration))
    return tuple(out)


def _struct_fields(schema_json: Mapping[str, Any], prefix: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], dict]]:
    """(path, field) for every field reachable through structs only (not inside arrays or maps)."""
    for field in schema_json.get("fields", []):
        path = (*prefix, field["name"])
        yield path, field
        if isinstance(field.get("type"), dict) and field["type"].get("type") == "struct":
            yield from _struct_fields(field["type"], path)


# ----------------------------------------------------------------- enforcement


def enforce_constraints(data: pa.Table, constraints: tuple[Constraint, ...], schema: pa.Schema) -> None:
    """Raise :class:`ConstraintViolationError` if any row fails a constraint (false or NULL).

    ``data`` has the table's logical column names; ``schema`` is the table's logical
    Arrow schema the expressions are resolved against.
    """
    if not constraints:
        return
    # Loaded here, not at import: sqlglot and pyarrow.dataset (which pulls in pandas) are
    # only needed once there are constraints to evaluate.
    import pyarrow.dataset as ds

    from airflow_delta.engine.expressions import parse_predicate

    dataset = ds.dataset(data)
    for constraint in constraints:
        try:
            predicate = parse_predicate(constraint.expression, schema)
        except InvalidFilterError as exc:
            raise InvalidLogError(
                f"{constraint.name} ({constraint.expression}) cannot be evaluated against the table schema: {exc}"
            ) from exc
        result = dataset.to_table(columns={"ok": predicate.to_arrow()}).column("ok")
        if pa.types.is_null(result.type):  # e.g. a constraint that is the NULL literal
            result = result.cast(pa.bool_())
        if not pa.types.is_boolean(result.type):
            raise InvalidLogError(f"{constraint.name} ({constraint.expression}) is not a boolean expression")
        failing = pc.invert(pc.fill_null(result, False))
        count = pc.sum(failing).as_py() or 0
        if count:
            columns = [c for c in predicate.columns if c in data.column_names] or data.column_names
            example = _first_row(data.select(columns).filter(failing))
            raise ConstraintViolationError(constraint.name, constraint.expression, count, example)


def _first_row(table: pa.Table) -> dict[str, Any] | None:
    if table.num_rows == 0:
        return None
    return table.slice(0, 1).to_pylist()[0]


def enforce_not_null(data: pa.Table, schema: pa.Schema) -> None:
    """Raise :class:`ConstraintViolationError` for NULLs where ``schema`` says NOT NULL.

    Checks top-level columns, struct fields (only where the enclosing struct is not
    null: a NULL struct has no fields), array elements (``containsNull=false``) and map
    values (``valueContainsNull=false``). ``data`` must already have the schema's
    column types (see ``writer.conform_to_schema``), nested field order included.
    """
    for field in schema:
        if field.name not in data.column_names:
            continue
        column = data.column(field.name)
        for path, count, mask in _not_null_violations(column, field, field.name, row_aligned=True):
            example = _first_row(data.select([field.name]).filter(mask)) if mask is not None else None
            raise ConstraintViolationError(f"NOT NULL constraint on {path}", f"{path} IS NOT NULL", count, example)


def _not_null_violations(
    values: pa.ChunkedArray | pa.Array, field: pa.Field, path: str, *, row_aligned: bool
) -> Iterator[tuple[str, int, pa.ChunkedArray | pa.Array | None]]:
    """Yield (column path, violation count, row mask or None) for the first NOT NULL breach found.

    Nested struct fields are visited "flattened": null where the field or any enclosing
    struct is null, so a breach is a null beyond the enclosing struct's own nulls.
    ``row_aligned`` says ``values`` has one entry per table row (not so inside lists and
    maps), which is when a row mask can point at an example row.
    """
    if not field.nullable and values.null_count:
        mask = pc.is_null(values) if row_aligned else None
        yield path, values.null_count, mask
        return
    t = field.type
    if pa.types.is_struct(t):
        chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
        parent_nulls = values.null_count
        for i in range(t.num_fields):
            child_field = t.field(i)
            # flatten() applies the parent's validity to the child: null where either is null.
            flattened = pa.chunked_array([c.flatten()[i] for c in chunks], type=values.type.field(i).type)
            if not child_field.nullable and flattened.null_count > parent_nulls:
                parent_valid = pc.is_valid(values)
                mask = pc.and_(parent_valid, pc.is_null(flattened))
                count = pc.sum(mask).as_py() or 0
                if count:
                    yield f"{path}.{child_field.name}", count, mask if row_aligned else None
                    return
            yield from _not_null_violations(
                flattened, child_field.with_nullable(True), f"{path}.{child_field.name}", row_aligned=row_aligned
            )
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        items = pc.list_flatten(values)
        element = t.value_field
        if not element.nullable and items.null_count:
            yield f"{path}[]", items.null_count, None
            return
        yield from _not_null_violations(items, element.with_nullable(True), f"{path}[]", row_aligned=False)
    elif pa.types.is_map(t) and not t.item_field.nullable:
        # Only the values inside this (possibly sliced) array's offsets.
        chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
        nulls = 0
        for c in chunks:
            if len(c):
                start, end = c.offsets[0].as_py(), c.offsets[-1].as_py()
                nulls += c.items.slice(start, end - start).null_count
        if nulls:
            yield f"{path}.value", nulls, None

