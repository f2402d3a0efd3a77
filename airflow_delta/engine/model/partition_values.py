"""Partition values (protocol appendix "Partition Value Serialization"): parsing and writing them.

The log stores partition values as strings keyed by physical column name.
:func:`parse_partition_values` turns a whole column of such maps into typed Arrow in one
vectorised pass (:func:`parse_partition_strings` for one column of strings), and
:func:`serialize_partition_value` writes one value the way Spark and delta-rs read it.
:func:`java_float_string` prints floats as Java does, and :func:`decimal_string` decimals at
their scale (all 38 digits), for partition values and statistics.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import struct
from decimal import Decimal, localcontext
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import (
    InvalidLogError,
    SchemaMismatchError,
)
from airflow_delta.engine.model.arrow_numpy import (
    binary_array,
    bool_scalar,
    combined,
    indices_to_numpy,
    int32_array,
    int64_array,
    mask_to_numpy,
    null_scalar,
    offsets_to_numpy,
    string_array,
    string_scalar,
)
from airflow_delta.engine.model.column_mapping import ColumnMapping

if TYPE_CHECKING:
    from airflow_delta.engine.model.actions import Metadata, Protocol


def partition_schema(metadata: Metadata) -> pa.Schema:
    """The partition columns as an Arrow schema: logical names, table types, partition order."""
    logical = ColumnMapping.from_schema(metadata.schema_string, "none").logical_schema
    fields = []
    for name in metadata.partition_columns:
        index = logical.get_field_index(name)
        if index < 0:
            raise InvalidLogError(f"partition column {name!r} is not in the table schema")
        fields.append(logical.field(index))
    return pa.schema(fields)


def parse_partition_values(
    pv: pa.Array | pa.ChunkedArray, metadata: Metadata, protocol: Protocol | None = None
) -> pa.StructArray:
    """Typed partition values of many files at once.

    ``pv`` is the ``partitionValues`` column of file actions (``map<string, string>``
    keyed by physical column names). The result has one struct field per partition
    column (logical names, table types); a missing key, a JSON null and an empty string
    are all null, as the protocol says. With ``protocol``, a column mapping mode the
    protocol does not support is ignored (keys are then the logical names).
    """
    schema = partition_schema(metadata)
    mapping = ColumnMapping.from_metadata(metadata, protocol)
    pv = combined(pv)
    if not pa.types.is_map(pv.type):
        raise TypeError(f"partition values must be a map<string, string> array, got {pv.type}")
    arrays = []
    lookup = _MapLookup(pv) if len(schema) else None
    for f in schema:
        assert lookup is not None
        raw = lookup.values_of(mapping.physical_name(f.name))
        arrays.append(parse_partition_strings(raw, f.type, column=f.name))
    if not arrays:
        # A struct without fields still has one (empty, valid) entry per file.
        return pa.StructArray.from_buffers(pa.struct([]), len(pv), [None])
    return pa.StructArray.from_arrays(arrays, fields=list(schema))


class _MapLookup:
    """Value of one key in every map of a ``map<string, string>`` array (null when absent).

    Works on the flattened entries with one comparison per key, which is far faster
    than ``pc.map_lookup`` on many small maps; the first entry wins on duplicate keys.
    Values come back dictionary-encoded (partition values repeat across files), with a
    dictionary of just that key's distinct values.
    """

    def __init__(self, maps: pa.MapArray) -> None:
        self.offsets = offsets_to_numpy(maps)
        start, end = int(self.offsets[0]), int(self.offsets[-1])
        self.length = len(maps)
        self.keys = maps.keys.slice(start, end - start)
        items = maps.items.slice(start, end - start)
        if not pa.types.is_string(items.type):
            items = items.cast(pa.string())
        encoded = items.dictionary_encode()
        self.dictionary = encoded.dictionary
        # Dictionary code of each entry's value; -1 for a JSON null.
        self.codes = indices_to_numpy(encoded.indices, null_value=-1)

    def values_of(self, key: str) -> pa.DictionaryArray:
        hits = np.flatnonzero(mask_to_numpy(pc.equal(self.keys, string_scalar(key))))
        # The map (row) each matching entry belongs to; null maps have no entries.
        parents = np.searchsorted(self.offsets[1:] - self.offsets[0], hits, side="right")
        codes = np.full(self.length, -1, dtype=np.int64)
        # Assign in reverse so that, for a duplicated key, the first entry is the one that stays.
        codes[parents[::-1]] = self.codes[hits[::-1]]
        valid = codes >= 0
        if not valid.any():
            return pa.DictionaryArray.from_arrays(pa.nulls(self.length, pa.int32()), string_array([]))
        # The distinct codes in use, sorted (np.unique would import numpy.ma, ~30 ms).
        used = np.flatnonzero(np.bincount(codes[valid], minlength=len(self.dictionary)))
        remap = np.zeros(len(self.dictionary), dtype=np.int64)
        remap[used] = np.arange(len(used))
        indices = int32_array(np.where(valid, remap[np.maximum(codes, 0)], 0), valid=valid)
        return pa.DictionaryArray.from_arrays(indices, self.dictionary.take(int64_array(used)))


# A time of day followed by a zone designator ("...T10:00:00.5Z", "... 10:00:00+02:00").
_ZONE_SUFFIX = r"[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d*)?)?(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$"
_ESCAPED_BINARY = re.compile(r"^(?:\\u[0-9A-Fa-f]{4})+$")


def parse_partition_strings(values: pa.Array, arrow_type: pa.DataType, column: str = "?") -> pa.Array:
    """Serialised partition values (strings, possibly null) to ``arrow_type``, vectorised.

    Files far outnumber distinct partition values, so long inputs are dictionary-encoded
    and only the distinct strings are parsed.
    """
    if pa.types.is_dictionary(values.type):
        return _parse_strings(values.dictionary.cast(pa.string()), arrow_type, column).take(values.indices)
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        values = values.cast(pa.string())
    if len(values) > _DICTIONARY_THRESHOLD:
        encoded = values.dictionary_encode()
        if len(encoded.dictionary) * 2 < len(values):
            return _parse_strings(encoded.dictionary, arrow_type, column).take(encoded.indices)
    return _parse_strings(values, arrow_type, column)


_DICTIONARY_THRESHOLD = 256


def _parse_strings(values: pa.Array, arrow_type: pa.DataType, column: str) -> pa.Array:
    # Empty string means null for every type.
    values = pc.if_else(pc.equal(values, string_scalar("").cast(values.type)), null_scalar(values.type), values)
    try:
        if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
            return values.cast(arrow_type)
        if pa.types.is_timestamp(arrow_type):
            return _parse_timestamps(values, arrow_type)
        if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
            return _parse_binary(values).cast(arrow_type)
        if pa.types.is_null(arrow_type):
            return pa.nulls(len(values))
        if pa.types.is_boolean(arrow_type):
            # Only the protocol's spelling; Arrow would also take "1"/"0".
            lowered = pc.utf8_lower(values)
            bad = pc.and_(pc.is_valid(lowered), pc.invert(pc.is_in(lowered, string_array(["true", "false"]))))
            if pc.any(bad).as_py():
                raise pa.ArrowInvalid("boolean partition values must be 'true' or 'false'")
            return pc.equal(lowered, string_scalar("true"))
        if (
            pa.types.is_integer(arrow_type)
            or pa.types.is_floating(arrow_type)
            or pa.types.is_decimal(arrow_type)
            or pa.types.is_date(arrow_type)
        ):
            return values.cast(arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidLogError(
            f"partition values of column {column!r} cannot be read as {arrow_type}: {exc}"
        ) from exc
    raise InvalidLogError(f"partition column {column!r} has type {arrow_type}, which cannot be a partition column")


def _parse_timestamps(values: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    # Arrow's parser takes "YYYY-MM-DD HH:MM:SS[.f{1,6}]" with " " or "T"; cut finer fractions.
    values = pc.replace_substring_regex(values, r"(\.\d{6})\d+", r"\1")
    naive_type = pa.timestamp("us")
    zoned = pc.fill_null(pc.match_substring_regex(values, _ZONE_SUFFIX), bool_scalar(False))
    if not pc.any(zoned).as_py():
        parsed = values.cast(naive_type)
    else:
        # "...Z" / "...+01:00": parse as instants (converted to UTC), the rest as UTC wall clock.
        null = null_scalar(values.type)
        with_zone = pc.if_else(zoned, values, null).cast(pa.timestamp("us", tz="UTC"))
        without_zone = pc.if_else(zoned, null, values).cast(naive_type)
        parsed = pc.coalesce(with_zone.cast(naive_type), without_zone)
    # Naive strings in a ``timestamp`` column are read as UTC: the writer's time zone is
    # not recorded, and Spark and delta-rs both write (and read) UTC.
    return parsed.cast(arrow_type)


def _parse_binary(values: pa.Array) -> pa.Array:
    # The partition value is the bytes as text (Spark: the bytes decoded as UTF-8, which
    # the JSON log escapes as \u0001 for control characters). delta-rs instead writes
    # literal "\u00XX" escapes per byte; recognise that form too. Distinct values are few,
    # so decode the dictionary, not every row.
    encoded = values.dictionary_encode()
    dictionary = encoded.dictionary.to_pylist()
    decoded = [_binary_from_text(s) for s in dictionary]
    return pc.take(binary_array(decoded), encoded.indices)


def _binary_from_text(text: str) -> bytes:
    if _ESCAPED_BINARY.match(text):
        codes = [int(text[i + 2 : i + 6], 16) for i in range(0, len(text), 6)]
        if all(c <= 0xFF for c in codes):
            return bytes(codes)
    return text.encode("utf-8")


# ---------------------------------------------------------------- serialisation (write path)


def serialize_partition_value(value: Any, arrow_type: pa.DataType) -> str | None:
    """The string a partition value is stored as in the log (``None`` for a null value).

    Formats follow the protocol and what Spark writes: integers in decimal, floats as
    Java prints them (``1.0``, ``1.0E10``, ``NaN``, ``Infinity``), decimals in plain
    notation with exactly ``scale`` digits, dates ``YYYY-MM-DD``, timestamps adjusted to
    UTC in ISO 8601 (``1970-01-01T00:00:00.000000Z``, the protocol's recommendation),
    timestamp_ntz ``1970-01-01 00:00:00.000000``, booleans ``true``/``false``, binary as
    its UTF-8 text (``\\u00XX`` escapes per byte when it is not valid UTF-8). An empty
    string is null: the protocol reads an empty partition value as null.
    """
    if isinstance(value, pa.Scalar):
        value = value.as_py()
    if value is None:
        return None
    t = arrow_type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        if not isinstance(value, str):
            raise TypeError(f"a string partition column takes str values, not {type(value).__name__}")
        return value or None
    if pa.types.is_boolean(t):
        return "true" if value else "false"
    if pa.types.is_integer(t):
        return str(int(value))
    if pa.types.is_floating(t):
        return java_float_string(float(value), single=not pa.types.is_float64(t))
    if pa.types.is_decimal(t):
        return decimal_string(value, t.scale)
    if pa.types.is_date(t):
        if isinstance(value, dt.datetime):
            value = value.date()
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if pa.types.is_timestamp(t):
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            value = dt.datetime(value.year, value.month, value.day)
        if t.tz is not None:
            if value.tzinfo is not None:
                value = value.astimezone(dt.UTC)
            return _timestamp_text(value, "T") + "Z"
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return _timestamp_text(value, " ")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t):
        data = bytes(value)
        if not data:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "".join(f"\\u{b:04X}" for b in data)
    raise SchemaMismatchError(f"a column of type {arrow_type} cannot be a partition column")


def _timestamp_text(value: dt.datetime, separator: str) -> str:
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}{separator}"
        f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}"
    )


def quantize_decimal(value: Decimal | int | str, scale: int) -> Decimal:
    """``value`` rounded (half-even) to ``scale`` fractional digits, exactly.

    Python's default decimal context keeps 28 significant digits and refuses to quantize
    beyond them, but Delta decimals have up to 38 (and values we are handed may have more).
    The context here is sized from the value itself, so no digit is ever lost to it.
    """
    number = value if isinstance(value, Decimal) else Decimal(value)
    if not number.is_finite():
        raise ValueError(f"{number} is not a finite decimal")
    with localcontext() as context:
        # Digits left of the point, plus the scale, plus room for a carry from rounding.
        context.prec = max(28, number.adjusted() + 1 + max(scale, 0) + 2)
        context.Emax = max(context.Emax, number.adjusted() + 2)
        context.Emin = min(context.Emin, -max(scale, 0) - 2)
        return number.quantize(Decimal(1).scaleb(-scale))


def decimal_string(value: Decimal | int | str, scale: int) -> str:
    """A decimal of ``scale`` as Spark writes it in partition values and statistics: plain
    notation with exactly ``scale`` fractional digits (``1.50``), whatever its digit count."""
    return format(quantize_decimal(value, max(scale, 0)), "f")


def java_float_string(x: float, single: bool = False) -> str:
    """``x`` as Java's ``Double.toString`` (or ``Float.toString`` when ``single``) prints it."""
    if single:
        x = _to_float32(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    digits, exponent = _shortest_digits(x, single)
    sign = "-" if x < 0 else ""
    if 1e-3 <= abs(x) < 1e7:
        if exponent >= 0:
            integer = digits[: exponent + 1].ljust(exponent + 1, "0")
            fraction = digits[exponent + 1 :] or "0"
        else:
            integer = "0"
            fraction = "0" * (-exponent - 1) + digits
        return f"{sign}{integer}.{fraction}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


_FLOAT32_MAX = 3.4028234663852886e38


def _to_float32(x: float) -> float:
    if math.isfinite(x) and abs(x) > _FLOAT32_MAX:
        # Beyond float32 range: round-to-nearest may still land on the max; compare halfway.
        if abs(x) >= 3.4028235677973366e38:
            return math.copysign(math.inf, x)
        return math.copysign(_FLOAT32_MAX, x)
    return float(struct.unpack("f", struct.pack("f", x))[0])


def _shortest_digits(x: float, single: bool) -> tuple[str, int]:
    """Shortest round-tripping significant digits of ``|x|`` and its decimal exponent (d.ddd times 10^e)."""
    x = abs(x)
    text = repr(x)
    if single:
        # The fewest digits that read back to the same float32.
        for precision in range(1, 10):
            candidate = f"{x:.{precision - 1}e}"
            if _to_float32(float(candidate)) == x:
                text = candidate
                break
    _sign, digit_tuple, exp = Decimal(text).normalize().as_tuple()
    digits = "".join(str(d) for d in digit_tuple)
    return digits, int(exp) + len(digits) - 1
