"""Parsing JSON that comes from the log (actions, ``schemaString``, ``_last_checkpoint``).

Python's :mod:`json` recurses once per nesting level, so a hostile document of a few
thousand ``[`` raises :class:`RecursionError`, which callers do not expect from a
parser. :func:`loads` reports it as a :class:`ValueError` (what every caller already
handles as "not valid JSON") saying what is wrong, so each caller's own typed error
names the file and line.
"""

from __future__ import annotations

import json
from typing import Any


class JsonNestingError(ValueError):
    """A JSON document nests arrays/objects deeper than the parser can follow."""


def loads(data: str | bytes | bytearray) -> Any:
    """:func:`json.loads`, with excessive nesting raised as :class:`JsonNestingError`."""
    try:
        return json.loads(data)
    except RecursionError:
        raise JsonNestingError(
            "JSON nested too deeply to parse (Delta actions nest a few levels only); the content is corrupt or hostile"
        ) from None
