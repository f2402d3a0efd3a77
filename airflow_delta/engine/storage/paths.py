"""Turning paths found in the log into storage paths, without ever leaving the table root.

Paths in ``add``/``remove``/``cdc`` actions (and ``p``-type deletion vectors) are
URI-encoded and either relative to the table root or absolute URIs. Everything that
resolves a path from the log goes through :func:`resolve_in_table`, which refuses any
path that escapes the root (``..`` segments, another bucket, another directory).
"""

from __future__ import annotations

import posixpath
from urllib.parse import quote, unquote, urlsplit

from airflow_delta.engine.errors import PathOutsideTableError


def decode_log_path(path: str) -> str:
    """Percent-decode a path as stored in the log (``a%20b`` -> ``a b``)."""
    return unquote(path)


def encode_log_path(relative_path: str) -> str:
    """Percent-encode a relative path for the log; ``/`` and ``=`` stay readable as Spark writes them."""
    return quote(relative_path, safe="/=:@+-_.~!$&'()*,;")


def resolve_in_table(table_root: str, log_path: str) -> str:
    """Absolute storage path (FileIO form) for ``log_path``, which must lie inside ``table_root``.

    ``table_root`` is the root as the FileIO sees it (no scheme, no trailing slash).
    """
    # The scheme is found on the encoded form: a relative name such as "ab%3Acd.parquet"
    # decodes to "ab:cd.parquet", which is a file name, not a URI with scheme "ab".
    parts = urlsplit(log_path)
    if parts.scheme and len(parts.scheme) > 1:  # a one-letter "scheme" is a Windows drive
        # Absolute URI: compare its path (and bucket) with the root's.
        path = decode_log_path(parts.path)
        candidate = path if parts.scheme == "file" else decode_log_path(parts.netloc) + path
    else:
        decoded = decode_log_path(log_path)
        candidate = decoded if decoded.startswith("/") else posixpath.join(table_root, decoded)
    normalized = posixpath.normpath(candidate)
    root = posixpath.normpath(table_root)
    if normalized != root and not normalized.startswith(root.rstrip("/") + "/"):
        raise PathOutsideTableError(log_path, table_root)
    return normalized


def relative_to_table(table_root: str, absolute_path: str) -> str:
    """The path of a file below the table root, relative to it (refusing anything outside)."""
    normalized = posixpath.normpath(absolute_path)
    root = posixpath.normpath(table_root).rstrip("/")
    if not normalized.startswith(root + "/"):
        raise PathOutsideTableError(absolute_path, table_root)
    return normalized[len(root) + 1 :]
