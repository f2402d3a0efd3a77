"""Checking the arguments of the public API where they come in, once.

Every public verb and option object checks the type and range of its Python arguments
with these helpers before doing any work, so that a bad argument is an
:class:`~airflow_delta.engine.errors.InvalidArgumentError` naming the argument, the value
and what is accepted, and never a ``TypeError`` or ``ValueError`` from deep inside (or,
worse, a wrong result: ``version="1"`` compared as a string, ``True`` taken for 1).

``bool`` is refused wherever an integer is expected: it is an ``int`` subclass in Python,
but ``max_attempts=True`` is a mistake, not one attempt. Filter *strings* are only checked
to be strings here; their content is the filter parser's to judge.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.engine.model.actions import DeletionVectorDescriptor

__all__ = [
    "check_bool",
    "check_file_action",
    "check_instance",
    "check_instances",
    "check_int",
    "check_number",
    "check_row_indexes",
    "check_str",
    "check_str_mapping",
    "check_str_sequence",
    "check_timestamp",
]

T = TypeVar("T")

def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(
    name: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    optional: bool = False,
) -> int | None:
    """``value`` as an ``int`` within ``[minimum, maximum]`` (None allowed when ``optional``)."""
    if value is None and optional:
        return None
    bounds = _bounds_text(minimum, maximum)
    if not _is_int(value):
        expected = "an integer" + (f" {bounds}" if bounds else "") + (" or None" if optional else "")
        raise InvalidArgumentError(name, value, f"pass {expected}")
    number = int(value)  # type: ignore[call-overload]
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise InvalidArgumentError(name, value, f"pass an integer {bounds}")
    return number


def _bounds_text(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"between {minimum} and {maximum}"
    if minimum is not None:
        return f">= {minimum}"
    if maximum is not None:
        return f"<= {maximum}"
    return ""


def check_number(name: str, value: object, *, minimum: float | None = None, optional: bool = False) -> float | None:
    """``value`` as a finite ``float`` (ints accepted) of at least ``minimum``."""
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(name, value, "pass a number" + (" or None" if optional else ""))
    number = float(value)
    if not math.isfinite(number) or (minimum is not None and number < minimum):
        raise InvalidArgumentError(name, value, f"it must be a finite number{' >= ' + str(minimum) if minimum is not None else ''}")
    return number


def check_bool(name: str, value: object, *, optional: bool = False) -> bool | None:
    """``value`` as a ``bool`` (not a truthy string such as ``"false"``)."""
    if value is None and optional:
        return None
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(name, value, "pass True or False" + (" (or None)" if optional else ""))
    return bool(value)


def check_str(name: str, value: object, *, non_empty: bool = False, optional: bool = False) -> str | None:
    """``value`` as a ``str`` (non-empty when asked)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(name, value, "pass a string" + (" or None" if optional else ""))
    if non_empty and not value.strip():
        raise InvalidArgumentError(name, value, "pass a non-empty string")
    return value


def check_instance(name: str, value: object, cls: type[T] | tuple[type, ...], *, optional: bool = False) -> T:
    """``value`` if it is an instance of ``cls`` (None allowed when ``optional``)."""
    if value is None and optional:
        return value  # type: ignore[return-value]
    if not isinstance(value, cls):
        names = " or ".join(c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,)))
        raise InvalidArgumentError(name, value, f"pass a {names}" + (" or None" if optional else ""))
    return value  # type: ignore[return-value]


def check_instances(name: str, values: object, cls: type[T]) -> list[T]:
    """Every item of the iterable ``values`` as an instance of ``cls`` (a list)."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise InvalidArgumentError(name, values, f"pass an iterable of {cls.__name__}")
    items = list(values)
    for i, item in enumerate(items):
        if not isinstance(item, cls):
            raise InvalidArgumentError(f"{name}[{i}]", item, f"every item must be a {cls.__name__}")
    return items


def check_str_sequence(name: str, value: object, *, optional: bool = False, allow_single: bool = False) -> tuple[str, ...] | None:
    """``value`` as a tuple of strings; a lone string is one item only when ``allow_single``."""
    if value is None and optional:
        return None
    if isinstance(value, str) and allow_single:
        return (value,)
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(name, value, "pass a list of strings" + (" or None" if optional else ""))
    items = tuple(value)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise InvalidArgumentError(f"{name}[{i}]", item, "every item must be a string")
    return items


def check_str_mapping(
    name: str, value: object, *, optional: bool = False, none_values: bool = False
) -> dict[str, str | None] | None:
    """``value`` as a dict of string keys to string values (None values when ``none_values``)."""
    if value is None and optional:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(name, value, "pass a mapping of strings to strings" + (" or None" if optional else ""))
    out: dict[str, str | None] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise InvalidArgumentError(f"{name} key", key, "every key must be a string")
        if not (isinstance(item, str) or (item is None and none_values)):
            raise InvalidArgumentError(
                f"{name}[{key!r}]", item, "every value must be a string" + (" or None" if none_values else "")
            )
        out[key] = item
    return out


def check_timestamp(name: str, value: object, *, optional: bool = False) -> Any:
    """``value`` if it can name a point in time: a datetime, a date, a string, or epoch milliseconds."""
    if value is None and optional:
        return None
    if isinstance(value, (dt.datetime, dt.date, str)) or _is_int(value):
        return value
    raise InvalidArgumentError(
        name, value, "pass a datetime, an ISO-8601 string or epoch milliseconds (int)" + (" or None" if optional else "")
    )


def check_row_indexes(name: str, value: object) -> np.ndarray | pa.Array | pa.ChunkedArray | Any:
    """Row positions to delete: integers >= 0 as an iterable, a range, or a numpy / Arrow integer array.

    Returns a value ``RoaringBitmapArray.from_indices`` accepts (the value itself, or a
    1-D int64/uint64 numpy array). Floats (even 1.0), bools, strings, nulls, nested lists
    and negative numbers are refused here, with the argument named.
    """
    # Imported here, not with the module: every verb checks its arguments with this module,
    # and only a DV delete needs the bitmaps (pyroaring).
    from airflow_delta.engine.model.roaring_bitmap import MAX_ROW_INDEX, RoaringBitmapArray

    if isinstance(value, RoaringBitmapArray):
        return value
    if isinstance(value, range):
        if len(value) and min(value[0], value[-1]) < 0:
            raise InvalidArgumentError(name, value, "row positions are 0-based: every one must be >= 0")
        return value
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        if not pa.types.is_integer(value.type):
            raise InvalidArgumentError(name, value, f"pass integer row positions, not an Arrow array of {value.type}")
        if value.null_count:
            raise InvalidArgumentError(name, value, "row positions must not contain nulls")
        array = value.to_numpy() if isinstance(value, pa.Array) else value.combine_chunks().to_numpy()
    elif isinstance(value, np.ndarray):
        array = value
    elif isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(name, value, "pass an iterable of integer row positions (list, range, numpy or Arrow array)")
    else:
        items = value if isinstance(value, Sequence) else list(value)
        # The item types, collected in C (map and set), not by a Python loop over the rows.
        for item_type in set(map(type, items)) - {int}:
            if not issubclass(item_type, (int, np.integer)) or issubclass(item_type, (bool, np.bool_)):
                bad = next(item for item in items if type(item) is item_type)
                raise InvalidArgumentError(name, bad, "every row position must be an integer (0-based position in the file)")
        try:
            array = np.asarray(items, dtype=np.int64) if items else np.empty(0, dtype=np.int64)
        except OverflowError:
            array = np.asarray([int(i) for i in items], dtype=object)
    if array.dtype == object:
        raise InvalidArgumentError(name, value, f"row positions must be between 0 and {MAX_ROW_INDEX}")
    if array.ndim != 1:
        raise InvalidArgumentError(name, value, f"pass a flat list of row positions, not an array of shape {array.shape}")
    if array.dtype.kind not in "iu":
        raise InvalidArgumentError(name, value, f"pass integer row positions, not an array of {array.dtype}")
    if array.size and array.dtype.kind == "i" and int(array.min()) < 0:
        raise InvalidArgumentError(name, int(array.min()), "row positions are 0-based: every one must be >= 0")
    if array.size and int(array.max()) > MAX_ROW_INDEX:
        raise InvalidArgumentError(name, int(array.max()), f"row positions must be at most {MAX_ROW_INDEX}")
    return array


# The fields of the file actions a caller may stage, by kind. Checked when an action is
# staged, so that a wrongly typed field never reaches the log (json would write
# ``"size":"12"`` or ``"path":7`` without complaint, and every later read would fail).
_INT, _OPT_INT, _STR, _OPT_STR, _BOOL, _OPT_BOOL = "int", "int?", "str", "str?", "bool", "bool?"
_VALUES, _OPT_VALUES, _OPT_TAGS, _OPT_DV = "values", "values?", "tags?", "dv?"
_FILE_ACTION_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "AddFile": (
        ("path", _STR), ("partition_values", _VALUES), ("size", _INT), ("modification_time", _INT),
        ("data_change", _BOOL), ("stats", _OPT_STR), ("tags", _OPT_TAGS), ("deletion_vector", _OPT_DV),
        ("base_row_id", _OPT_INT), ("default_row_commit_version", _OPT_INT), ("clustering_provider", _OPT_STR),
    ),
    "RemoveFile": (
        ("path", _STR), ("deletion_timestamp", _OPT_INT), ("data_change", _BOOL),
        ("extended_file_metadata", _OPT_BOOL), ("partition_values", _OPT_VALUES), ("size", _OPT_INT),
        ("stats", _OPT_STR), ("tags", _OPT_TAGS), ("deletion_vector", _OPT_DV), ("base_row_id", _OPT_INT),
        ("default_row_commit_version", _OPT_INT),
    ),
    "AddCDCFile": (
        ("path", _STR), ("partition_values", _VALUES), ("size", _INT), ("data_change", _BOOL), ("tags", _OPT_TAGS),
    ),
}


def _plain_strings(mapping: object) -> bool:
    return isinstance(mapping, Mapping) and all(
        type(k) is str and (v is None or type(v) is str) for k, v in mapping.items()
    )


def _looks_valid(action: Any, spec: tuple[tuple[str, str], ...]) -> bool:
    """The common case in one pass of exact type tests, cheap enough for 100,000 actions a commit."""
    for field_name, kind in spec:
        value = getattr(action, field_name)
        if value is None:
            if not kind.endswith("?"):
                return False
            continue
        base = kind.rstrip("?")
        if base == "int":
            if type(value) is not int or value < 0:
                return False
        elif base == "str":
            if type(value) is not str:
                return False
        elif base == "bool":
            if type(value) is not bool:
                return False
        elif base in ("values", "tags"):
            if not _plain_strings(value):
                return False
        elif type(value) is not DeletionVectorDescriptor:
            return False
    return True


def _add_looks_valid(a: Any) -> bool:
    """:func:`_looks_valid` for ``AddFile``, spelled out: commits stage adds by the hundred thousand."""
    return (
        type(a.path) is str
        and type(a.size) is int
        and a.size >= 0
        and type(a.modification_time) is int
        and a.modification_time >= 0
        and type(a.data_change) is bool
        and (a.stats is None or type(a.stats) is str)
        and _plain_strings(a.partition_values)
        and (a.tags is None or _plain_strings(a.tags))
        and (a.deletion_vector is None or type(a.deletion_vector) is DeletionVectorDescriptor)
        and (a.base_row_id is None or (type(a.base_row_id) is int and a.base_row_id >= 0))
        and (
            a.default_row_commit_version is None
            or (type(a.default_row_commit_version) is int and a.default_row_commit_version >= 0)
        )
        and (a.clustering_provider is None or type(a.clustering_provider) is str)
    )


def check_file_action(name: str, action: Any) -> Any:
    """``action`` (an ``AddFile``, ``RemoveFile`` or ``AddCDCFile``) if every field has its protocol type."""
    kind = type(action).__name__
    spec = _FILE_ACTION_FIELDS[kind]
    if _add_looks_valid(action) if kind == "AddFile" else _looks_valid(action, spec):
        return action
    # Something is off: the detailed checks below name the field and what it accepts.
    for field_name, kind in spec:
        label = f"{name}.{field_name}"
        value = getattr(action, field_name)
        optional = kind.endswith("?")
        base = kind.rstrip("?")
        if base == "int":
            check_int(label, value, minimum=0, optional=optional)
        elif base == "str":
            # path contents are the path rule's (storage/paths.py: InvalidPathError, PathOutsideTableError)
            check_str(label, value, optional=optional)
        elif base == "bool":
            check_bool(label, value, optional=optional)
        elif base in ("values", "tags"):
            check_str_mapping(label, value, optional=optional, none_values=True)
        elif base == "dv":
            check_instance(label, value, DeletionVectorDescriptor, optional=optional)
        if not _looks_valid(action, ((field_name, kind),)):
            # Accepted by the checks above, but not a plain Python value the log's JSON can hold
            # (a numpy integer, a str subclass): refused rather than written oddly or not at all.
            raise InvalidArgumentError(label, value, "pass a plain Python int, str, bool or dict of str")
    return action
