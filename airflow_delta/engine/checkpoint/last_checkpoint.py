"""``_last_checkpoint``: the hint naming the latest checkpoint, and its JSON checksum.

The checksum is the MD5 of the protocol's canonical form of the JSON object
(protocol, "JSON checksum"). A hint that does not parse or fails its checksum is
ignored, since readers must work without it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from airflow_delta.engine.errors import InvalidLogError
from airflow_delta.engine.model import log_json
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.read.listing import list_log
from airflow_delta.engine.storage.fileio import FileIO

log = logging.getLogger(__name__)

LAST_CHECKPOINT_NAME = "_last_checkpoint"
# nonFileActions / sidecarFiles are left out of _last_checkpoint above these counts.
LAST_CHECKPOINT_MAX_NON_FILE_ACTIONS = 1_000
LAST_CHECKPOINT_MAX_SIDECARS = 1_000


# ------------------------------------------------------------------ JSON checksum


def _url_encode(text: str) -> str:
    # The spec's strict form: every octet except A-Z a-z 0-9 - . _ ~ is %XX (uppercase).
    return quote(text.encode("utf-8"), safe="-._~")


def _canonical_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return f'"{_url_encode(value)}"'
    if isinstance(value, (int, float)):
        return json.dumps(value)
    raise TypeError(f"not a JSON value: {value!r}")


def _canonical_pairs(value: Any, path: str, out: list[tuple[bytes, str]]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            segment = f'"{_url_encode(str(key))}"'
            _canonical_pairs(item, f"{path}+{segment}" if path else segment, out)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _canonical_pairs(item, f"{path}+{index}" if path else str(index), out)
    else:
        out.append((path.encode("utf-8"), _canonical_scalar(value)))


def canonicalize_json(document: Mapping[str, Any]) -> str:
    """The protocol's canonical form of a ``_last_checkpoint`` object (top-level ``checksum`` ignored)."""
    pairs: list[tuple[bytes, str]] = []
    _canonical_pairs({k: v for k, v in document.items() if k != "checksum"}, "", pairs)
    pairs.sort(key=lambda pair: pair[0])
    return ",".join(f"{path.decode('utf-8')}={value}" for path, value in pairs)


def json_checksum(document: Mapping[str, Any]) -> str:
    """MD5 (hex) of :func:`canonicalize_json`: the ``checksum`` field of ``_last_checkpoint``."""
    return hashlib.md5(canonicalize_json(document).encode("utf-8")).hexdigest()


# --------------------------------------------------------------- _last_checkpoint


def last_checkpoint_path(root: str) -> str:
    return f"{root}/_delta_log/{LAST_CHECKPOINT_NAME}"


def read_last_checkpoint(io: FileIO, root: str) -> dict[str, Any] | None:
    """The parsed ``_last_checkpoint``, or None when it is missing, unparsable or fails its checksum.

    It is only a hint (readers must work without it), so a bad one is ignored, not raised.
    """
    path = last_checkpoint_path(root)
    try:
        raw = io.read_bytes(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("ignoring %s: it cannot be read (%s); readers list the log instead", path, exc)
        return None
    try:
        document = log_json.loads(raw)
    except ValueError as exc:  # not JSON, not UTF-8, or nested too deeply
        log.warning("ignoring unparsable %s (%s); it will be rewritten by the next checkpoint", path, exc)
        return None
    if not isinstance(document, dict) or not isinstance(document.get("version"), int):
        return None
    stored = document.get("checksum")
    if stored is not None and stored != json_checksum(document):
        log.warning("ignoring %s: its checksum does not match its content", path)
        return None
    return document


def write_last_checkpoint(
    io: FileIO, root: str, document: Mapping[str, Any], *, allow_older: bool = False
) -> dict[str, Any]:
    """Write ``_last_checkpoint`` (with its checksum) unless it already points at a newer checkpoint.

    A newer version is kept only while a complete checkpoint of it is in the log: a
    hint naming a missing one (a far-future version, a deleted checkpoint) is what
    this write repairs. Returns the document as written (or the newer one that was
    kept). ``allow_older``
    is for repairing a hint whose checkpoint no longer exists.
    """
    path = last_checkpoint_path(root)
    if io.is_dir(path):
        # Readers ignore it (a hint only), but no checkpoint could ever be recorded: say so.
        raise InvalidLogError(
            f"{path} is a directory, not the _last_checkpoint file, so checkpoints cannot be recorded; "
            "remove that directory (readers do not need it: they list the log)"
        )
    current = read_last_checkpoint(io, root)
    if not allow_older and current is not None and current["version"] > document["version"]:
        if names_present_checkpoint(io, root, current["version"]):
            return current
        log.warning(
            "%s names version %d, which has no complete checkpoint in the log; rewriting it to name version %d",
            path, current["version"], document["version"],
        )
    body = {k: v for k, v in document.items() if k != "checksum" and v is not None}
    body["checksum"] = json_checksum(body)
    io.write_bytes(path, json_text(body).encode("utf-8"))
    return body


def names_present_checkpoint(io: FileIO, root: str, version: int) -> bool:
    """Whether the log holds a complete checkpoint of ``version`` (by the reader's own listing rule)."""
    return any(cp.version == version for cp in list_log(io, root).checkpoints)
