"""The job specifications: what an operator asks a Spark program to do, as JSON.

The operators build these in the Airflow worker, ``spark-submit`` carries them to the
driver as one JSON argument, and the Spark programs read them back. They are the contract
between the two sides, so both sides validate them the same way: every object checks its
fields when it is made (in ``__post_init__``), and ``from_json`` refuses unknown
``specVersion`` values and unknown keys instead of ignoring them, because a key the driver
does not understand is a request it would silently not honour.

Bad input raises :class:`airflow_delta.engine.InvalidArgumentError` naming the field
(``MergeClause.assignments``, ``spec.target.storageOptions``) and what to fix. This module
imports only the stdlib and the engine's public API (for its errors): no pyspark, no
Airflow, so the operators can import it cheaply and the programs without Airflow.

JSON keys are camelCase, as in Delta's own log (``specVersion``, ``storageOptions``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from airflow_delta.engine import InvalidArgumentError
from airflow_delta.spark.column_paths import set_target_paths

if TYPE_CHECKING:
    from airflow_delta.engine import OptimizeOptions

__all__ = [
    "APP_ID_PREFIX",
    "DEFAULT_DRIVER_MAX_BYTES",
    "DEFAULT_DRIVER_SCAN_MAX_BYTES",
    "SPEC_VERSION",
    "ConvertSpec",
    "DeleteSpec",
    "ExecutionOptions",
    "MergeClause",
    "MergeClauseKind",
    "MergeSource",
    "MergeSpec",
    "OptimizeSpec",
    "Spec",
    "TableRef",
    "TaskIdentity",
    "UpdateSpec",
    "VacuumSpec",
    "spec_from_json",
    "sql_texts",
]

SPEC_VERSION = 1
"""The version of the JSON layout; a program refuses any other, so a newer operator never
talks to an older job (or the reverse) without saying so."""

APP_ID_PREFIX = "airflow-delta:"

MergeClauseKind = Literal[
    "matched_update",
    "matched_delete",
    "not_matched_insert",
    "not_matched_by_source_update",
    "not_matched_by_source_delete",
]

# Delta's clause groups, in the order MERGE evaluates them: WHEN MATCHED, WHEN NOT MATCHED
# [BY TARGET], WHEN NOT MATCHED BY SOURCE. Within a group the first clause whose condition
# holds wins, which is why only the last clause of a group may omit its condition.
_CLAUSE_GROUP: dict[str, str] = {
    "matched_update": "WHEN MATCHED",
    "matched_delete": "WHEN MATCHED",
    "not_matched_insert": "WHEN NOT MATCHED",
    "not_matched_by_source_update": "WHEN NOT MATCHED BY SOURCE",
    "not_matched_by_source_delete": "WHEN NOT MATCHED BY SOURCE",
}
_GROUP_ORDER = ("WHEN MATCHED", "WHEN NOT MATCHED", "WHEN NOT MATCHED BY SOURCE")

# A Spark SQL identifier usable unquoted as an alias or a temporary view name.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# ---------------------------------------------------------------------------------------
# Field checks: each names the field and says what is accepted.


def _check_text(name: str, value: object, *, optional: bool = False) -> None:
    """A non-blank string (SQL text, ids, URIs): blank text is always a mistake."""
    if value is None and optional:
        return
    if not isinstance(value, str) or not value.strip():
        expected = "a non-blank string" + (", or None" if optional else "")
        raise InvalidArgumentError(name, value, expected)


def _check_identifier(name: str, value: object) -> None:
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise InvalidArgumentError(name, value, "an identifier: letters, digits and _, not starting with a digit")


def _check_int(name: str, value: object, *, minimum: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    # bool is an int in Python, but True as a version or a count is a mistake.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(name, value, f"an int >= {minimum}" + (", or None" if optional else ""))


def _check_number(name: str, value: object, *, minimum: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise InvalidArgumentError(name, value, f"a finite number >= {minimum}")


def _check_bool(name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, bool):
        raise InvalidArgumentError(name, value, "True or False" + (", or None" if optional else ""))


def _check_str_dict(name: str, value: object, *, non_empty: bool, sql_values: bool) -> None:
    """A dict of str -> str; with ``sql_values`` the keys are column names and the values
    SQL expressions, so both must be non-blank and the keys distinct ignoring case (Spark
    resolves column names case-insensitively, so ``a`` and ``A`` would be one column set twice)."""
    expected = "a dict of str -> str" + (" with at least one entry" if non_empty else "")
    if not isinstance(value, dict) or (non_empty and not value):
        raise InvalidArgumentError(name, value, expected)
    seen: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise InvalidArgumentError(name, value, expected)
        if sql_values:
            _check_text(f"{name}[{key!r}]", item)
            if not key.strip():
                raise InvalidArgumentError(name, value, "column names that are not blank")
            folded = key.casefold()
            if folded in seen:
                raise InvalidArgumentError(
                    name, value, f"each column once: {seen[folded]!r} and {key!r} are the same column"
                )
            seen[folded] = key


def _check_instance(name: str, value: object, cls: type, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, cls):
        raise InvalidArgumentError(name, value, f"a {cls.__name__}" + (", or None" if optional else ""))


# ---------------------------------------------------------------------------------------
# Reading JSON objects: every key known, every required key present.


class _JsonObject:
    """One JSON object being read at ``path``, holding only the keys its reader knows.

    Unknown keys are refused before any field is read, so that a misspelt key is named as
    such rather than reported as the required key it was meant to be.
    """

    def __init__(self, path: str, value: object, keys: tuple[str, ...]) -> None:
        if not isinstance(value, dict):
            raise InvalidArgumentError(path, value, "a JSON object")
        self.path = path
        self._value: dict[str, Any] = value
        self.expect(keys)

    def expect(self, keys: tuple[str, ...]) -> None:
        unknown = sorted(set(self._value) - set(keys))
        if unknown:
            raise InvalidArgumentError(
                f"{self.path}.{unknown[0]}",
                self._value[unknown[0]],
                f"only the keys {sorted(keys)}: unknown keys are refused, not ignored",
            )

    def required(self, key: str) -> Any:
        if key not in self._value:
            raise InvalidArgumentError(f"{self.path}.{key}", None, "a value: the key is required")
        return self._value[key]

    def optional(self, key: str, default: Any = None) -> Any:
        return self._value.get(key, default)


def _load_document(text: str | bytes, operation: str | None) -> _JsonObject:
    try:
        value = json.loads(text)
    except (ValueError, TypeError) as error:
        raise InvalidArgumentError("spec", text, f"a JSON document ({error})") from None
    # Every key for now: the operation's reader narrows them (``expect``) once it is known.
    document = _JsonObject("spec", value, tuple(value) if isinstance(value, dict) else ())
    version = document.required("specVersion")
    if type(version) is not int or version != SPEC_VERSION:
        raise InvalidArgumentError(
            "spec.specVersion", version, f"{SPEC_VERSION}: this version of airflow-delta reads no other"
        )
    found = document.required("operation")
    if operation is not None and found != operation:
        raise InvalidArgumentError("spec.operation", found, f"{operation!r} for this spec type")
    return document


def _dump_document(operation: str, body: dict[str, Any]) -> str:
    # Sorted keys and no floats beyond JSON's: the same spec is always the same text.
    return json.dumps(
        {"specVersion": SPEC_VERSION, "operation": operation, **body},
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=False,
    )


# ---------------------------------------------------------------------------------------
# The pieces.


@dataclass(frozen=True)
class TableRef:
    """A Delta table: its URI, an optional version to read, and the storage options of
    its root (credentials, endpoints) in the engine's FileIO vocabulary."""

    uri: str
    version: int | None = None
    storage_options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_text("TableRef.uri", self.uri)
        _check_int("TableRef.version", self.version, minimum=0, optional=True)
        _check_str_dict("TableRef.storage_options", self.storage_options, non_empty=False, sql_values=False)
        # A copy, so a caller mutating its dict cannot change a frozen spec.
        object.__setattr__(self, "storage_options", dict(self.storage_options))

    def to_obj(self) -> dict[str, Any]:
        return {"uri": self.uri, "version": self.version, "storageOptions": dict(self.storage_options)}

    @classmethod
    def from_obj(cls, path: str, value: object) -> TableRef:
        obj = _JsonObject(path, value, ("uri", "version", "storageOptions"))
        return cls(
            uri=obj.required("uri"),
            version=obj.optional("version"),
            storage_options=obj.optional("storageOptions", {}),
        )


@dataclass(frozen=True)
class TaskIdentity:
    """The Airflow task instance a job works for: what makes its commit findable and once-only.

    ``map_index`` is -1 for an unmapped task, as in Airflow.
    """

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1

    def __post_init__(self) -> None:
        _check_text("TaskIdentity.dag_id", self.dag_id)
        _check_text("TaskIdentity.task_id", self.task_id)
        _check_text("TaskIdentity.run_id", self.run_id)
        _check_int("TaskIdentity.map_index", self.map_index, minimum=-1)

    @property
    def app_id(self) -> str:
        """The Delta ``txn`` appId of this task instance's commit.

        The job commits with ``SetTransaction(appId=app_id, version=1)``. Delta keeps the
        latest version per appId in every snapshot, so before submitting, a retry of the
        task sees that an earlier try already committed and returns that commit instead of
        applying the change again; and a late driver of an earlier try that commits after
        all fails the conflict check on the same appId. Every try of a task instance must
        therefore derive the same appId, in any process on any machine: it is a SHA-256 of
        the four fields (never Python's ``hash``, which is salted per process), encoded
        without ambiguity (JSON of a list, so ``("a:b", "c")`` and ``("a", "b:c")`` differ),
        and of a fixed length whatever the ids contain.
        """
        canonical = json.dumps([self.dag_id, self.task_id, self.run_id, self.map_index], separators=(",", ":"))
        return APP_ID_PREFIX + hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def to_obj(self) -> dict[str, Any]:
        return {"dagId": self.dag_id, "taskId": self.task_id, "runId": self.run_id, "mapIndex": self.map_index}

    @classmethod
    def from_obj(cls, path: str, value: object) -> TaskIdentity:
        obj = _JsonObject(path, value, ("dagId", "taskId", "runId", "mapIndex"))
        return cls(
            dag_id=obj.required("dagId"),
            task_id=obj.required("taskId"),
            run_id=obj.required("runId"),
            map_index=obj.optional("mapIndex", -1),
        )


DEFAULT_DRIVER_MAX_BYTES = 16 << 20
""":attr:`ExecutionOptions.driver_max_bytes` by default: candidate files below it are read in the driver."""

DEFAULT_DRIVER_SCAN_MAX_BYTES = 64 << 20
""":attr:`ExecutionOptions.driver_scan_max_bytes` by default: the engine finds a DV delete's rows in the driver up to it."""


READERS = ("auto", "engine", "spark")
""":attr:`ExecutionOptions.reader`'s values."""


@dataclass(frozen=True)
class ExecutionOptions:
    """How the job runs: attempts on logical conflicts, backoff between them, DVs, the target reader.

    ``max_attempts`` counts every attempt, the first included. The wait before attempt
    ``n + 1`` is ``min(backoff_initial_seconds * backoff_multiplier ** (n - 1),
    backoff_max_seconds)``. ``use_deletion_vectors`` None follows the table's
    ``delta.enableDeletionVectors``; False rewrites files even where DVs are enabled; True
    requires DVs and fails on a table that does not enable them.

    ``reader`` chooses who reads the target table's files on the executors: ``"spark"`` is
    Spark's own parquet reader (faster; local tables whose features it reads exactly, else
    the job fails with :class:`~airflow_delta.engine.InvalidArgumentError` saying why),
    ``"engine"`` the engine's reader in Python tasks (every table the engine reads), and
    ``"auto"`` Spark's for MERGE's target read (where it measured faster) when it reads the
    files exactly, the engine's elsewhere (see docs/design/spark-layer.md).
    ``driver_max_bytes``: candidate files totalling less are read in the driver (Spark SQL
    still evaluates the predicate). ``driver_scan_max_bytes``: a DELETE with deletion
    vectors whose predicate the engine evaluates exactly as Spark does finds its rows with
    the engine in the driver, with no Spark stage (and no SparkSession built), when the
    predicate's column chunks in the row groups whose statistics may match total at most
    this many compressed bytes (``airflow_delta.engine.predicate_read_bytes``); 0 turns it
    off. See docs/dml.md.
    """

    max_attempts: int = 3
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 30.0
    backoff_multiplier: float = 2.0
    use_deletion_vectors: bool | None = None
    driver_max_bytes: int = DEFAULT_DRIVER_MAX_BYTES
    reader: str = "auto"
    driver_scan_max_bytes: int = DEFAULT_DRIVER_SCAN_MAX_BYTES

    def __post_init__(self) -> None:
        if self.reader not in READERS:
            raise InvalidArgumentError("ExecutionOptions.reader", self.reader, f"one of {', '.join(READERS)}")
        _check_int("ExecutionOptions.max_attempts", self.max_attempts, minimum=1)
        _check_int("ExecutionOptions.driver_max_bytes", self.driver_max_bytes, minimum=0)
        _check_int("ExecutionOptions.driver_scan_max_bytes", self.driver_scan_max_bytes, minimum=0)
        _check_number("ExecutionOptions.backoff_initial_seconds", self.backoff_initial_seconds, minimum=0)
        _check_number("ExecutionOptions.backoff_max_seconds", self.backoff_max_seconds, minimum=0)
        _check_number("ExecutionOptions.backoff_multiplier", self.backoff_multiplier, minimum=1)
        if self.backoff_max_seconds < self.backoff_initial_seconds:
            raise InvalidArgumentError(
                "ExecutionOptions.backoff_max_seconds",
                self.backoff_max_seconds,
                f"at least backoff_initial_seconds ({self.backoff_initial_seconds})",
            )
        _check_bool("ExecutionOptions.use_deletion_vectors", self.use_deletion_vectors, optional=True)

    def to_obj(self) -> dict[str, Any]:
        return {
            "maxAttempts": self.max_attempts,
            "backoffInitialSeconds": self.backoff_initial_seconds,
            "backoffMaxSeconds": self.backoff_max_seconds,
            "backoffMultiplier": self.backoff_multiplier,
            "useDeletionVectors": self.use_deletion_vectors,
            "driverMaxBytes": self.driver_max_bytes,
            "reader": self.reader,
            "driverScanMaxBytes": self.driver_scan_max_bytes,
        }

    @classmethod
    def from_obj(cls, path: str, value: object) -> ExecutionOptions:
        keys = (
            "maxAttempts",
            "backoffInitialSeconds",
            "backoffMaxSeconds",
            "backoffMultiplier",
            "useDeletionVectors",
            "driverMaxBytes",
            "reader",
            "driverScanMaxBytes",
        )
        obj = _JsonObject(path, value, keys)
        defaults = cls()
        return cls(
            max_attempts=obj.optional("maxAttempts", defaults.max_attempts),
            backoff_initial_seconds=obj.optional("backoffInitialSeconds", defaults.backoff_initial_seconds),
            backoff_max_seconds=obj.optional("backoffMaxSeconds", defaults.backoff_max_seconds),
            backoff_multiplier=obj.optional("backoffMultiplier", defaults.backoff_multiplier),
            use_deletion_vectors=obj.optional("useDeletionVectors"),
            driver_max_bytes=obj.optional("driverMaxBytes", defaults.driver_max_bytes),
            reader=obj.optional("reader", defaults.reader),
            driver_scan_max_bytes=obj.optional("driverScanMaxBytes", defaults.driver_scan_max_bytes),
        )


def _options_from(obj: _JsonObject) -> ExecutionOptions:
    value = obj.optional("options")
    return ExecutionOptions() if value is None else ExecutionOptions.from_obj(f"{obj.path}.options", value)


@dataclass(frozen=True)
class DeleteSpec:
    """``DELETE FROM table [WHERE predicate]``: None deletes every row (an empty string
    is refused: it is more likely a template that rendered to nothing than a wish to
    delete everything). The predicate is Spark SQL; rows where it is NULL stay."""

    OPERATION: ClassVar[str] = "delete"

    table: TableRef
    predicate: str | None
    identity: TaskIdentity
    options: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        _check_instance("DeleteSpec.table", self.table, TableRef)
        _check_text("DeleteSpec.predicate", self.predicate, optional=True)
        _check_instance("DeleteSpec.identity", self.identity, TaskIdentity)
        _check_instance("DeleteSpec.options", self.options, ExecutionOptions)

    def to_json(self) -> str:
        return _dump_document(
            self.OPERATION,
            {
                "table": self.table.to_obj(),
                "predicate": self.predicate,
                "identity": self.identity.to_obj(),
                "options": self.options.to_obj(),
            },
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> DeleteSpec:
        return _delete_from(_load_document(text, cls.OPERATION))


def _delete_from(obj: _JsonObject) -> DeleteSpec:
    obj.expect(("specVersion", "operation", "table", "predicate", "identity", "options"))
    return DeleteSpec(
        table=TableRef.from_obj("spec.table", obj.required("table")),
        predicate=obj.optional("predicate"),
        identity=TaskIdentity.from_obj("spec.identity", obj.required("identity")),
        options=_options_from(obj),
    )


@dataclass(frozen=True)
class UpdateSpec:
    """``UPDATE table SET column = expression, ... [WHERE predicate]``.

    ``set`` maps a column, or a field of a struct column (``address.city``; backticks
    quote a name holding a dot), to a Spark SQL expression, cast to the column's or
    field's type by Spark's store-assignment rules when the job runs. Several fields of
    one struct combine; a struct and one of its own fields cannot both be set.
    """

    OPERATION: ClassVar[str] = "update"

    table: TableRef
    set: dict[str, str]
    predicate: str | None
    identity: TaskIdentity
    options: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        _check_instance("UpdateSpec.table", self.table, TableRef)
        _check_str_dict("UpdateSpec.set", self.set, non_empty=True, sql_values=True)
        set_target_paths("UpdateSpec.set", self.set)
        object.__setattr__(self, "set", dict(self.set))
        _check_text("UpdateSpec.predicate", self.predicate, optional=True)
        _check_instance("UpdateSpec.identity", self.identity, TaskIdentity)
        _check_instance("UpdateSpec.options", self.options, ExecutionOptions)

    def to_json(self) -> str:
        return _dump_document(
            self.OPERATION,
            {
                "table": self.table.to_obj(),
                "set": dict(self.set),
                "predicate": self.predicate,
                "identity": self.identity.to_obj(),
                "options": self.options.to_obj(),
            },
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> UpdateSpec:
        return _update_from(_load_document(text, cls.OPERATION))


def _update_from(obj: _JsonObject) -> UpdateSpec:
    obj.expect(("specVersion", "operation", "table", "set", "predicate", "identity", "options"))
    return UpdateSpec(
        table=TableRef.from_obj("spec.table", obj.required("table")),
        set=obj.required("set"),
        predicate=obj.optional("predicate"),
        identity=TaskIdentity.from_obj("spec.identity", obj.required("identity")),
        options=_options_from(obj),
    )


@dataclass(frozen=True)
class MergeSource:
    """The source of a MERGE: exactly one of a Delta table (optionally at a version, read
    through the engine), a parquet path, or a Spark SQL ``query``.

    A query reads its inputs through ``views``: each name becomes a temporary view of a
    Delta table or a parquet path (a view is itself a ``MergeSource`` without a query), so
    the query never needs a catalog or Delta jars.
    """

    delta: TableRef | None = None
    parquet: str | None = None
    query: str | None = None
    views: dict[str, MergeSource] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_instance("MergeSource.delta", self.delta, TableRef, optional=True)
        _check_text("MergeSource.parquet", self.parquet, optional=True)
        _check_text("MergeSource.query", self.query, optional=True)
        given = [name for name in ("delta", "parquet", "query") if getattr(self, name) is not None]
        if len(given) != 1:
            raise InvalidArgumentError(
                "MergeSource", given, "exactly one of delta (a TableRef), parquet (a path) or query (Spark SQL)"
            )
        if not isinstance(self.views, dict):
            raise InvalidArgumentError("MergeSource.views", self.views, "a dict of view name -> MergeSource")
        if self.views and self.query is None:
            raise InvalidArgumentError("MergeSource.views", self.views, "no views unless the source is a query")
        seen: set[str] = set()
        for name, view in self.views.items():
            _check_identifier("MergeSource.views", name)
            if name.casefold() in seen:
                raise InvalidArgumentError("MergeSource.views", name, "view names distinct ignoring case")
            seen.add(name.casefold())
            _check_instance(f"MergeSource.views[{name!r}]", view, MergeSource)
            if view.query is not None:
                raise InvalidArgumentError(
                    f"MergeSource.views[{name!r}]", view.query, "a Delta table or a parquet path, not another query"
                )
        object.__setattr__(self, "views", dict(self.views))

    def to_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        if self.delta is not None:
            obj["delta"] = self.delta.to_obj()
        if self.parquet is not None:
            obj["parquet"] = self.parquet
        if self.query is not None:
            obj["query"] = self.query
            obj["views"] = {name: view.to_obj() for name, view in self.views.items()}
        return obj

    @classmethod
    def from_obj(cls, path: str, value: object) -> MergeSource:
        obj = _JsonObject(path, value, ("delta", "parquet", "query", "views"))
        delta = obj.optional("delta")
        views = obj.optional("views", {})
        if not isinstance(views, dict):
            raise InvalidArgumentError(f"{path}.views", views, "a JSON object of view name -> source")
        return cls(
            delta=None if delta is None else TableRef.from_obj(f"{path}.delta", delta),
            parquet=obj.optional("parquet"),
            query=obj.optional("query"),
            views={name: cls.from_obj(f"{path}.views.{name}", view) for name, view in views.items()},
        )


@dataclass(frozen=True)
class MergeClause:
    """One ``WHEN ... THEN ...`` clause of a MERGE.

    ``assignments`` maps a target column to a Spark SQL expression over the source and
    target aliases (UPDATE SET, or INSERT's columns and values); an UPDATE may assign a
    field of a struct column (``address.city``, as in :class:`UpdateSpec`), an INSERT
    only whole columns; ``star`` is
    ``UPDATE SET *`` / ``INSERT *``. An UPDATE or INSERT takes exactly one of the two; a
    DELETE neither. WHEN NOT MATCHED BY SOURCE has no source row, so its UPDATE cannot be
    ``*`` (Delta has no such clause).
    """

    kind: MergeClauseKind
    condition: str | None = None
    assignments: dict[str, str] | None = None
    star: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in _CLAUSE_GROUP:
            raise InvalidArgumentError("MergeClause.kind", self.kind, f"one of {sorted(_CLAUSE_GROUP)}")
        _check_text("MergeClause.condition", self.condition, optional=True)
        _check_bool("MergeClause.star", self.star)
        if self.assignments is not None:
            _check_str_dict("MergeClause.assignments", self.assignments, non_empty=True, sql_values=True)
            paths = set_target_paths("MergeClause.assignments", self.assignments)
            nested = [key for key, path in paths.items() if len(path) > 1]
            if self.kind == "not_matched_insert" and nested:
                # Delta: "Nested field is not supported in the INSERT clause of MERGE operation".
                raise InvalidArgumentError(
                    "MergeClause.assignments",
                    self.assignments,
                    f"top-level columns in an INSERT ({nested} are struct fields): insert the whole struct, "
                    "e.g. address = named_struct('city', s.city, 'zip', s.zip)",
                )
            object.__setattr__(self, "assignments", dict(self.assignments))
        if self.kind.endswith("_delete"):
            if self.assignments is not None or self.star:
                raise InvalidArgumentError(
                    "MergeClause.assignments" if self.assignments is not None else "MergeClause.star",
                    self.assignments if self.assignments is not None else self.star,
                    f"nothing for {self.kind}: a DELETE assigns no columns",
                )
        elif self.kind == "not_matched_by_source_update" and self.star:
            raise InvalidArgumentError(
                "MergeClause.star",
                self.star,
                "False for not_matched_by_source_update: there is no source row for UPDATE SET *; give assignments",
            )
        elif (self.assignments is None) == (not self.star):
            raise InvalidArgumentError(
                "MergeClause.assignments",
                self.assignments,
                f"exactly one of assignments or star=True for {self.kind}",
            )

    @property
    def group(self) -> str:
        """The clause's group in Delta's words: WHEN MATCHED, WHEN NOT MATCHED, WHEN NOT MATCHED BY SOURCE."""
        return _CLAUSE_GROUP[self.kind]

    def to_obj(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "condition": self.condition,
            "assignments": None if self.assignments is None else dict(self.assignments),
            "star": self.star,
        }

    @classmethod
    def from_obj(cls, path: str, value: object) -> MergeClause:
        obj = _JsonObject(path, value, ("kind", "condition", "assignments", "star"))
        return cls(
            kind=obj.required("kind"),
            condition=obj.optional("condition"),
            assignments=obj.optional("assignments"),
            star=obj.optional("star", False),
        )


@dataclass(frozen=True, kw_only=True)
class MergeSpec:
    """``MERGE INTO target [AS target_alias] USING source [AS source_alias] ON on WHEN ...``.

    ``clauses`` are kept grouped in Delta's order (all WHEN MATCHED, then WHEN NOT
    MATCHED, then WHEN NOT MATCHED BY SOURCE), each group in the order given: clauses of
    different groups never compete for a row, so a caller may list them in any order,
    as with Delta's ``DeltaMergeBuilder``. Delta's rules are checked here: at least one
    clause, and only the last clause of a group may omit its condition (a clause after an
    unconditional one of its group could never run). ``schema_evolution`` lets
    ``UPDATE SET *`` and ``INSERT *`` add the source's new columns to the target.
    """

    OPERATION: ClassVar[str] = "merge"

    target: TableRef
    source: MergeSource
    on: str
    clauses: tuple[MergeClause, ...]
    identity: TaskIdentity
    source_alias: str = "source"
    target_alias: str = "target"
    schema_evolution: bool = False
    options: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        _check_instance("MergeSpec.target", self.target, TableRef)
        _check_instance("MergeSpec.source", self.source, MergeSource)
        _check_text("MergeSpec.on", self.on)
        _check_identifier("MergeSpec.source_alias", self.source_alias)
        _check_identifier("MergeSpec.target_alias", self.target_alias)
        if self.source_alias.casefold() == self.target_alias.casefold():
            raise InvalidArgumentError(
                "MergeSpec.target_alias", self.target_alias, "an alias different from source_alias (ignoring case)"
            )
        _check_bool("MergeSpec.schema_evolution", self.schema_evolution)
        _check_instance("MergeSpec.identity", self.identity, TaskIdentity)
        _check_instance("MergeSpec.options", self.options, ExecutionOptions)
        object.__setattr__(self, "clauses", self._checked_clauses(self.clauses))

    @staticmethod
    def _checked_clauses(clauses: object) -> tuple[MergeClause, ...]:
        if not isinstance(clauses, (list, tuple)) or not clauses:
            raise InvalidArgumentError(
                "MergeSpec.clauses", clauses, "a list of at least one MergeClause: a MERGE needs a WHEN clause"
            )
        unconditional_at: dict[str, int] = {}
        for index, clause in enumerate(clauses):
            _check_instance(f"MergeSpec.clauses[{index}]", clause, MergeClause)
            earlier = unconditional_at.get(clause.group)
            if earlier is not None:
                raise InvalidArgumentError(
                    f"MergeSpec.clauses[{earlier}].condition",
                    None,
                    f"a condition: only the last {clause.group} clause may omit it, "
                    f"and clauses[{index}] comes after it (it could never run)",
                )
            if clause.condition is None:
                unconditional_at[clause.group] = index
        return tuple(sorted(clauses, key=lambda clause: _GROUP_ORDER.index(clause.group)))

    def to_json(self) -> str:
        return _dump_document(
            self.OPERATION,
            {
                "target": self.target.to_obj(),
                "source": self.source.to_obj(),
                "sourceAlias": self.source_alias,
                "targetAlias": self.target_alias,
                "on": self.on,
                "clauses": [clause.to_obj() for clause in self.clauses],
                "schemaEvolution": self.schema_evolution,
                "identity": self.identity.to_obj(),
                "options": self.options.to_obj(),
            },
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> MergeSpec:
        return _merge_from(_load_document(text, cls.OPERATION))


def _merge_from(obj: _JsonObject) -> MergeSpec:
    obj.expect(
        (
            "specVersion",
            "operation",
            "target",
            "source",
            "sourceAlias",
            "targetAlias",
            "on",
            "clauses",
            "schemaEvolution",
            "identity",
            "options",
        )
    )
    clauses = obj.required("clauses")
    if not isinstance(clauses, list):
        raise InvalidArgumentError("spec.clauses", clauses, "a JSON array of clauses")
    return MergeSpec(
        target=TableRef.from_obj("spec.target", obj.required("target")),
        source=MergeSource.from_obj("spec.source", obj.required("source")),
        source_alias=obj.optional("sourceAlias", "source"),
        target_alias=obj.optional("targetAlias", "target"),
        on=obj.required("on"),
        clauses=tuple(MergeClause.from_obj(f"spec.clauses[{i}]", clause) for i, clause in enumerate(clauses)),
        schema_evolution=obj.optional("schemaEvolution", False),
        identity=TaskIdentity.from_obj("spec.identity", obj.required("identity")),
        options=_options_from(obj),
    )


def sql_texts(spec: Spec) -> Iterator[tuple[str, str, bool]]:
    """Each SQL text of ``spec``: (where it is, the text, whether it is a condition)."""
    if isinstance(spec, (DeleteSpec, UpdateSpec)) and spec.predicate is not None:
        yield "predicate", spec.predicate, True
    if isinstance(spec, UpdateSpec):
        for key, value in spec.set.items():
            yield f"UpdateSpec.set[{key!r}]", value, False
    if isinstance(spec, MergeSpec):
        yield "on", spec.on, True
        for i, clause in enumerate(spec.clauses):
            if clause.condition is not None:
                yield f"clauses[{i}].condition", clause.condition, True
            for key, value in (clause.assignments or {}).items():
                yield f"clauses[{i}].assignments[{key!r}]", value, False
        sources = [spec.source, *spec.source.views.values()]
        for source in sources:
            if source.query is not None:
                yield "source.query", source.query, False


def _default_max_deleted_rows_ratio() -> float:
    """The engine's default (:class:`OptimizeOptions`), read when an OPTIMIZE spec is built: the
    engine's write options import pyarrow and numpy, which a DAG file that imports the specs (to
    build a MERGE's clauses, say) does not need."""
    from airflow_delta.engine import OptimizeOptions

    return OptimizeOptions().max_deleted_rows_ratio


@dataclass(frozen=True)
class OptimizeSpec:
    """``OPTIMIZE table [WHERE partition predicate] [ZORDER BY (columns)]``, with DV purge.

    The fields are the engine's :class:`~airflow_delta.engine.OptimizeOptions` (checked by
    it: ``where`` on partition columns only, sizes and budget >= 1, the ratio in [0, 1]);
    the table is always optimized at its latest version, so ``table.version`` is refused.
    ``options.max_attempts`` bounds the re-plans after a conflict (a concurrent DELETE of
    a file being compacted); ``options.use_deletion_vectors`` has no meaning here.
    """

    OPERATION: ClassVar[str] = "optimize"

    table: TableRef
    identity: TaskIdentity
    where: str | None = None
    zorder_by: tuple[str, ...] = ()
    target_file_size: int | None = None
    min_file_size: int | None = None
    max_file_size: int | None = None
    max_deleted_rows_ratio: float = field(default_factory=_default_max_deleted_rows_ratio)
    max_files: int | None = None
    max_bytes: int | None = None
    batch_size: int | None = None
    dry_run: bool = False
    full: bool = False
    options: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        _check_instance("OptimizeSpec.table", self.table, TableRef)
        if self.table.version is not None:
            raise InvalidArgumentError(
                "OptimizeSpec.table.version", self.table.version, "None: OPTIMIZE rewrites the latest version only"
            )
        _check_instance("OptimizeSpec.identity", self.identity, TaskIdentity)
        _check_text("OptimizeSpec.where", self.where, optional=True)
        if isinstance(self.zorder_by, list):
            object.__setattr__(self, "zorder_by", tuple(self.zorder_by))
        _check_instance("OptimizeSpec.zorder_by", self.zorder_by, tuple)
        for index, column in enumerate(self.zorder_by):
            _check_text(f"OptimizeSpec.zorder_by[{index}]", column)
        _check_instance("OptimizeSpec.options", self.options, ExecutionOptions)
        self.optimize_options()  # the engine's checks, with the engine's messages

    def optimize_options(self) -> OptimizeOptions:
        """The engine's options for this spec."""
        from airflow_delta.engine import OptimizeOptions

        return OptimizeOptions(
            where=self.where,
            zorder_by=self.zorder_by,
            target_file_size=self.target_file_size,
            min_file_size=self.min_file_size,
            max_file_size=self.max_file_size,
            max_deleted_rows_ratio=self.max_deleted_rows_ratio,
            max_files=self.max_files,
            max_bytes=self.max_bytes,
            batch_size=self.batch_size,
            dry_run=self.dry_run,
            full=self.full,
        )

    def to_json(self) -> str:
        return _dump_document(
            self.OPERATION,
            {
                "table": self.table.to_obj(),
                "identity": self.identity.to_obj(),
                "where": self.where,
                "zorderBy": list(self.zorder_by),
                "targetFileSize": self.target_file_size,
                "minFileSize": self.min_file_size,
                "maxFileSize": self.max_file_size,
                "maxDeletedRowsRatio": self.max_deleted_rows_ratio,
                "maxFiles": self.max_files,
                "maxBytes": self.max_bytes,
                "batchSize": self.batch_size,
                "dryRun": self.dry_run,
                "full": self.full,
                "options": self.options.to_obj(),
            },
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> OptimizeSpec:
        return _optimize_from(_load_document(text, cls.OPERATION))


_OPTIMIZE_FIELDS = {
    "where": "where",
    "targetFileSize": "target_file_size",
    "minFileSize": "min_file_size",
    "maxFileSize": "max_file_size",
    "maxDeletedRowsRatio": "max_deleted_rows_ratio",
    "maxFiles": "max_files",
    "maxBytes": "max_bytes",
    "batchSize": "batch_size",
    "dryRun": "dry_run",
    "full": "full",
}


def _optimize_from(obj: _JsonObject) -> OptimizeSpec:
    obj.expect(("specVersion", "operation", "table", "identity", "zorderBy", "options", *_OPTIMIZE_FIELDS))
    zorder_by = obj.optional("zorderBy", [])
    if not isinstance(zorder_by, list):
        raise InvalidArgumentError("spec.zorderBy", zorder_by, "a JSON array of column names")
    present = {name: obj.optional(key) for key, name in _OPTIMIZE_FIELDS.items() if obj.optional(key) is not None}
    return OptimizeSpec(
        table=TableRef.from_obj("spec.table", obj.required("table")),
        identity=TaskIdentity.from_obj("spec.identity", obj.required("identity")),
        zorder_by=tuple(zorder_by),
        options=_options_from(obj),
        **present,
    )


@dataclass(frozen=True)
class VacuumSpec:
    """``VACUUM table [RETAIN n HOURS] [LITE | FULL] [DRY RUN]`` with the listing on executors.

    The fields are ``DeltaTable.vacuum``'s (checked by it again on the driver);
    ``retention_ms`` None takes ``delta.deletedFileRetentionDuration``. The table is
    vacuumed at its latest version, so ``table.version`` is refused. ``file_list_path`` is
    a file on the driver's machine (the worker's in client mode); None prints the list in
    the driver's log. ``options`` has no meaning here (VACUUM never conflicts).
    """

    OPERATION: ClassVar[str] = "vacuum"

    table: TableRef
    identity: TaskIdentity
    mode: Literal["full", "lite"] = "full"
    retention_ms: int | None = None
    enforce_retention_duration: bool = True
    dry_run: bool = False
    parallelism: int = 8
    file_list_path: str | None = None

    def __post_init__(self) -> None:
        _check_instance("VacuumSpec.table", self.table, TableRef)
        if self.table.version is not None:
            raise InvalidArgumentError(
                "VacuumSpec.table.version", self.table.version, "None: VACUUM works on the latest version only"
            )
        _check_instance("VacuumSpec.identity", self.identity, TaskIdentity)
        if self.mode not in ("full", "lite"):
            raise InvalidArgumentError("VacuumSpec.mode", self.mode, "'full' or 'lite'")
        _check_int("VacuumSpec.retention_ms", self.retention_ms, minimum=0, optional=True)
        _check_bool("VacuumSpec.enforce_retention_duration", self.enforce_retention_duration)
        _check_bool("VacuumSpec.dry_run", self.dry_run)
        _check_int("VacuumSpec.parallelism", self.parallelism, minimum=1)
        _check_text("VacuumSpec.file_list_path", self.file_list_path, optional=True)

    def to_json(self) -> str:
        return _dump_document(
            self.OPERATION,
            {
                "table": self.table.to_obj(),
                "identity": self.identity.to_obj(),
                "mode": self.mode,
                "retentionMillis": self.retention_ms,
                "enforceRetentionDuration": self.enforce_retention_duration,
                "dryRun": self.dry_run,
                "parallelism": self.parallelism,
                "fileListPath": self.file_list_path,
            },
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> VacuumSpec:
        return _vacuum_from(_load_document(text, cls.OPERATION))


_VACUUM_FIELDS = {
    "mode": "mode",
    "retentionMillis": "retention_ms",
    "enforceRetentionDuration": "enforce_retention_duration",
    "dryRun": "dry_run",
    "parallelism": "parallelism",
    "fileListPath": "file_list_path",
}


def _vacuum_from(obj: _JsonObject) -> VacuumSpec:
    obj.expect(("specVersion", "operation", "table", "identity", *_VACUUM_FIELDS))
    present = {name: obj.optional(key) for key, name in _VACUUM_FIELDS.items() if obj.optional(key) is not None}
    return VacuumSpec(
        table=TableRef.from_obj("spec.table", obj.required("table")),
        identity=TaskIdentity.from_obj("spec.identity", obj.required("identity")),
        **present,
    )


@dataclass(frozen=True)
class ConvertSpec:
    """``CONVERT TO DELTA parquet.`dir` [NO STATISTICS] [PARTITIONED BY (...)]`` with footers read on executors.

    ``partition_schema`` is Spark DDL (``"year INT, region STRING"``) or ``{name: type}``
    in directory order (the engine parses it on the driver); ``local_below`` is the file
    count up to which the driver's threads read the footers instead of a Spark stage.
    ``table.version`` is refused: the directory has no Delta version yet.
    """

    OPERATION: ClassVar[str] = "convert"

    table: TableRef
    identity: TaskIdentity
    partition_schema: str | dict[str, str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    collect_stats: bool = True
    local_below: int = 0

    def __post_init__(self) -> None:
        _check_instance("ConvertSpec.table", self.table, TableRef)
        if self.table.version is not None:
            raise InvalidArgumentError(
                "ConvertSpec.table.version", self.table.version, "None: a parquet directory has no Delta version"
            )
        _check_instance("ConvertSpec.identity", self.identity, TaskIdentity)
        if isinstance(self.partition_schema, dict):
            _check_str_dict("ConvertSpec.partition_schema", self.partition_schema, non_empty=True, sql_values=False)
        else:
            _check_text("ConvertSpec.partition_schema", self.partition_schema, optional=True)
        _check_str_dict("ConvertSpec.properties", self.properties, non_empty=False, sql_values=False)
        object.__setattr__(self, "properties", dict(self.properties))
        _check_bool("ConvertSpec.collect_stats", self.collect_stats)
        _check_int("ConvertSpec.local_below", self.local_below, minimum=0)

    def to_json(self) -> str:
        return _dump_document(
            self.OPERATION,
            {
                "table": self.table.to_obj(),
                "identity": self.identity.to_obj(),
                "partitionSchema": self.partition_schema,
                "properties": dict(self.properties),
                "collectStats": self.collect_stats,
                "localBelow": self.local_below,
            },
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> ConvertSpec:
        return _convert_from(_load_document(text, cls.OPERATION))


def _convert_from(obj: _JsonObject) -> ConvertSpec:
    keys = ("partitionSchema", "properties", "collectStats", "localBelow")
    obj.expect(("specVersion", "operation", "table", "identity", *keys))
    defaults = ConvertSpec(table=TableRef(uri="parse"), identity=TaskIdentity("parse", "parse", "parse"))
    return ConvertSpec(
        table=TableRef.from_obj("spec.table", obj.required("table")),
        identity=TaskIdentity.from_obj("spec.identity", obj.required("identity")),
        partition_schema=obj.optional("partitionSchema"),
        properties=obj.optional("properties", {}),
        collect_stats=obj.optional("collectStats", defaults.collect_stats),
        local_below=obj.optional("localBelow", defaults.local_below),
    )


Spec = DeleteSpec | UpdateSpec | MergeSpec | OptimizeSpec | VacuumSpec | ConvertSpec

_READERS: dict[str, Callable[[_JsonObject], Spec]] = {
    DeleteSpec.OPERATION: _delete_from,
    UpdateSpec.OPERATION: _update_from,
    MergeSpec.OPERATION: _merge_from,
    OptimizeSpec.OPERATION: _optimize_from,
    VacuumSpec.OPERATION: _vacuum_from,
    ConvertSpec.OPERATION: _convert_from,
}


def spec_from_json(text: str | bytes) -> Spec:
    """Any spec from its JSON, by its ``operation``: what the job program calls."""
    document = _load_document(text, None)
    operation = document.optional("operation")
    reader = _READERS.get(operation) if isinstance(operation, str) else None
    if reader is None:
        raise InvalidArgumentError("spec.operation", operation, f"one of {sorted(_READERS)}")
    return reader(document)
