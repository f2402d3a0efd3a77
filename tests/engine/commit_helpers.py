"""Reading a table's commit files directly, for tests that assert on what was written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def commit_actions(table_path: str, version: int = 0) -> list[dict[str, Any]]:
    """The actions of commit ``version``, one dict per line, as written."""
    text = Path(table_path, "_delta_log", f"{version:020d}.json").read_text()
    # Lines end at "\n" only: commits are raw UTF-8, and str.splitlines would also split
    # inside a string value at U+0085, U+2028, ...
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def single_action(actions: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The body of the one action of kind ``key`` (``"protocol"``, ``"metaData"``, ...) in ``actions``."""
    (found,) = [a[key] for a in actions if key in a]
    return found
