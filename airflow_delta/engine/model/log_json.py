"""Parsing JSON that comes from the log (actions, ``schemaString``, ``_last_checkpoint``).

Python's :mod:`json` recurses once per nesting level, so a hostile document of a few
thousand ``[`` raises :class:`RecursionError`, which callers do not expect from a
parser. :func:`loads` reports it as a :class:`ValueError` (what every caller already
handles as "not valid JSON") saying what is wrong, so each caller's own typed error
names the file and line.
"""

from __future__ import annotations

import json
import re
from typing import Any


class JsonNestingError(ValueError):
    """A JSON document nests arrays/objects deeper than the parser can follow."""


class JsonSurrogateError(ValueError):
    """A JSON string holds a ``\\uD800``-``\\uDFFF`` escape that is not half of a pair: no UTF-8 text can hold it."""


# A surrogate escape anywhere: only then is the parsed document checked for unpaired ones.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def loads(data: str | bytes | bytearray) -> Any:
    """:func:`json.loads`, with excessive nesting raised as :class:`JsonNestingError` and
    unpaired surrogate escapes as :class:`JsonSurrogateError` (both ``ValueError``)."""
    try:
        document = json.loads(data)
    except RecursionError:
        raise JsonNestingError(
            "JSON nested too deeply to parse (Delta actions nest a few levels only); the content is corrupt or hostile"
        ) from None
    pattern = _SURROGATE_ESCAPE if isinstance(data, str) else _SURROGATE_ESCAPE_BYTES
    if pattern.search(data):  # type: ignore[arg-type]
        try:
            json.dumps(document, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise JsonSurrogateError(
                "a JSON string holds an unpaired surrogate escape (\\uD800-\\uDFFF), which no UTF-8 text can hold"
            ) from None
    return document
