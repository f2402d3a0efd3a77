"""Reading a table's commit files directly, for tests that assert on what was written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def commit_actions(table_path: str, version: int = 0) -> list[dict[str, Any]]:
    """The actions of commit ``version``, one dict per line, as written."""
    data = Path(table_path, "_delta_log", f"{version:020d}.json").read_bytes()
    # Split on the newline byte: raw UTF-8 JSON carries U+0085/U+2028/U+2029 unescaped inside
    # strings, where str.splitlines would break a line.
    return [json.loads(line) for line in data.split(b"\n") if line.strip()]


def single_action(actions: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The body of the one action of kind ``key`` (``"protocol"``, ``"metaData"``, ...) in ``actions``."""
    (found,) = [a[key] for a in actions if key in a]
    return found
