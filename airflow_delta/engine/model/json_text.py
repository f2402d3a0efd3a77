"""The JSON Delta writes: compact, and raw UTF-8 as Spark writes it.

Spark (Jackson) writes non-ASCII characters as their UTF-8 bytes, never as ``\\u``
escapes. Readers are not equally good at escapes: arrow-rs (delta-rs, delta-kernel-rs)
decodes an escaped surrogate pair wrongly, so a character at U+10000 or above written as
``\\ud83d\\ude00`` comes back as something else in a partition value or a statistic, and
file skipping then goes wrong. Every log line, ``.crc``, ``_last_checkpoint`` and stats
string we write goes through :func:`json_text`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from airflow_delta.engine.errors import InvalidArgumentError

__all__ = ["json_text", "utf8_bytes"]


# One encoder for every call without ``default``: json.dumps builds a new one per call otherwise
# (a commit of 10,000 files serialises 10,000 lines).
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def json_text(value: Any, *, default: Callable[[Any], Any] | None = None) -> str:
    """``value`` as compact JSON text with every non-ASCII character kept as itself."""
    if default is None:
        return _COMPACT.encode(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=default)


def utf8_bytes(text: str, what: str) -> bytes:
    """``text`` as UTF-8, or :class:`InvalidArgumentError` when it holds a lone surrogate.

    A Python string can hold a lone surrogate (from ``surrogateescape`` decoding, or
    ``"\\ud800"`` typed in); UTF-8 cannot, and no Delta reader would accept its escape.
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise InvalidArgumentError(
            what,
            bad,
            f"a string written to the Delta log holds the lone surrogate {bad!r} at character {exc.start}, "
            "which UTF-8 cannot encode; pass valid Unicode text (decode bytes with errors='strict' or 'replace')",
        ) from exc
