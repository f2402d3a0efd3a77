"""Turning paths found in (or staged for) the log into storage paths, never leaving the table root.

Paths in ``add``/``remove``/``cdc`` actions, ``p``-type deletion vectors and sidecars are
URI-encoded and either relative to the table root or absolute URIs. Everything that
resolves such a path goes through :func:`resolve_in_table`: the reader when it opens a
file, and the transaction when a path is staged, so a path that a reader would refuse
never reaches the log. It refuses, with :class:`InvalidPathError`, what is not a path
naming a file (empty, NUL, a raw backslash, a malformed ``%`` escape, a trailing ``/``,
a URI query or fragment, a ``file:`` URI on another host), and, with
:class:`PathOutsideTableError`, any that escapes the root (``..`` segments, another bucket,
another directory).

This is the lexical rule. On local storage the FileIO adds the physical one: the real
location of every file it opens, writes or deletes (symbolic links resolved) must be
below the real table root (see :class:`~airflow_delta.engine.storage.fileio.LocalFileIO`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from urllib.parse import quote, unquote, urlsplit

from airflow_delta.engine.errors import InvalidPathError, PathOutsideTableError

# A '%' must start an escape of two hex digits (RFC 3986); Spark's URI parsing refuses anything else.
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_RAW_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# An absolute URI starts with an RFC 3986 scheme of two characters at least (so that a
# Windows drive letter is not one): ``s3://``, ``file:///``, Hadoop's ``file:/``. Matched
# on the encoded form, where a colon in a relative name is still ``%3A``.
URI_SCHEME = r"^[A-Za-z][A-Za-z0-9+.\-]+:"
# Decoded paths that are not plainly a file below the root, which a join keeps inside:
# empty, absolute, a trailing ``/``, a NUL or backslash, a ``.`` or ``..`` segment.
NEEDS_FULL_CHECK = r"^$|^/|/$|[\\\x00-\x1f\x7f]|(^|/)\.\.?(/|$)"
# The same on the encoded form (for paths that are Python strings), with every path that has a ``%`` escape flagged too, so
# that what an escape hides (``%2E%2E``, ``%00``, ``%2F``) is checked after decoding.
PATHS_TO_CHECK = f"{NEEDS_FULL_CHECK}|[%?#]|{URI_SCHEME}"
_SPECIAL_CHARACTER = re.compile(r"[\\\x00-\x1f\x7f%?#]")


def decode_log_path(path: str) -> str:
    """Percent-decode a path as stored in the log (``a%20b`` -> ``a b``).

    Raises :class:`InvalidPathError` for a malformed escape (``%zz``, a lone ``%``) or
    escapes that do not decode as UTF-8: there is no file such a path could name.
    """
    return _decode_strict(path, path)


def encode_log_path(relative_path: str) -> str:
    """Percent-encode a relative path for the log; ``/`` and ``=`` stay readable as Spark writes them."""
    return quote(relative_path, safe="/=:@+-_.~!$&'()*,;")


def _decode_strict(encoded: str, original: str) -> str:
    """Percent-decode ``encoded``, refusing malformed escapes and escapes that are not UTF-8."""
    if "%" not in encoded:
        return encoded
    if _BAD_ESCAPE.search(encoded):
        raise InvalidPathError(original, "a '%' that does not start a two-hex-digit escape (write '%25' for '%')")
    try:
        return unquote(encoded, errors="strict")
    except UnicodeDecodeError as exc:
        raise InvalidPathError(original, f"its % escapes do not decode as UTF-8 ({exc.reason})") from None


def _check_shape(log_path: object) -> str:
    if not isinstance(log_path, str):
        raise InvalidPathError(repr(log_path), f"a path must be a string, not {type(log_path).__name__}")
    if not log_path:
        raise InvalidPathError(log_path, "the path is empty")
    if "\x00" in log_path:
        raise InvalidPathError(log_path, "it contains a NUL character")
    if _RAW_CONTROL.search(log_path):
        # URI parsers drop tabs and newlines silently, so the path read would not be the one named.
        raise InvalidPathError(log_path, "it contains a raw control character (percent-encode it, e.g. '%0A')")
    if "\\" in log_path:
        # Not a URI character; Windows readers would take it as a separator ("..\\x").
        raise InvalidPathError(log_path, "it contains a raw backslash (encode it as '%5C')")
    if log_path.endswith("/"):
        raise InvalidPathError(log_path, "it ends with '/', so it names a directory, not a file")
    # Every escape of the whole string must decode (as the reader decodes it before anything else).
    _decode_strict(log_path, log_path)
    return log_path


def resolve_in_table(table_root: str, log_path: str) -> str:
    """Absolute storage path (FileIO form) for ``log_path``, which must name a file below ``table_root``.

    ``table_root`` is the root as the FileIO sees it (no scheme, no trailing slash).
    Raises :class:`InvalidPathError` for a malformed path and :class:`PathOutsideTableError`
    for one that escapes the root.
    """
    _check_shape(log_path)
    # The scheme is found on the encoded form: a relative name such as "ab%3Acd.parquet"
    # decodes to "ab:cd.parquet", which is a file name, not a URI with scheme "ab".
    # The same scheme test as the vectorised one (urlsplit alone would also take " file:/x").
    if re.match(URI_SCHEME, log_path):
        parts = urlsplit(log_path)
        if parts.query or parts.fragment or "?" in log_path or "#" in log_path:
            raise InvalidPathError(log_path, "an absolute URI with a query or fragment ('?', '#') names no file")
        path = _decode_strict(parts.path, log_path)
        if parts.scheme.lower() == "file":
            if parts.netloc not in ("", "localhost"):
                raise PathOutsideTableError(log_path, table_root, f"a file: URI on host {parts.netloc!r}")
            candidate = path
        else:
            # Absolute URI on an object store: compare its bucket and path with the root's.
            candidate = _decode_strict(parts.netloc, log_path) + path
    else:
        decoded = _decode_strict(log_path, log_path)
        candidate = decoded if decoded.startswith("/") else posixpath.join(table_root, decoded)
    if "\x00" in candidate:
        raise InvalidPathError(log_path, "it decodes to a NUL character ('%00')")
    normalized = posixpath.normpath(candidate)
    root = posixpath.normpath(table_root).rstrip("/")
    if not normalized.startswith(root + "/"):
        if normalized == root or normalized == root + "/" or (not root and normalized == "/"):
            raise InvalidPathError(log_path, "it names the table root itself, not a file below it")
        raise PathOutsideTableError(log_path, table_root)
    return normalized


def check_log_paths(table_root: str, paths: Iterable[str], where: str) -> list[str]:
    """Refuse, as the reader would, any path that is malformed or leaves ``table_root``; return their storage paths.

    The rule of :func:`resolve_in_table`, applied to many paths at once: cheap tests per
    path (a superset of ``PATHS_TO_CHECK``) find those that need the full check. A plain
    relative path (no escape, no ``.``/``..`` segment, no empty segment) is its own decoded
    and normalized form, so its storage path is the root joined with it: the path
    :func:`resolve_in_table` returns. ``where`` names the actions for the message
    ("a staged add action", ...). Staged actions are Python objects already; building an
    Arrow array of their paths would cost more (and import pandas) than this match.
    """
    prefix = posixpath.normpath(table_root).rstrip("/") + "/"
    special = _SPECIAL_CHARACTER.search
    resolved = []
    for value in paths:
        if not isinstance(value, str):
            raise InvalidPathError(repr(value), f"a path must be a string, not {type(value).__name__}", where)
        # A superset of PATHS_TO_CHECK, in cheap tests (a regex of alternatives is slow per string).
        if value and value[0] not in "/." and value[-1] != "/" and "/." not in value and ":" not in value \
                and "//" not in value and not special(value):
            resolved.append(prefix + value)
            continue
        try:
            resolved.append(resolve_in_table(table_root, value))
        except InvalidPathError as exc:
            raise InvalidPathError(exc.path, exc.reason, where) from None
        except PathOutsideTableError as exc:
            raise PathOutsideTableError(exc.path, exc.table_uri, exc.reason or where) from None
    return resolved


def relative_to_table(table_root: str, absolute_path: str) -> str:
    """The path of a file below the table root, relative to it (refusing anything outside)."""
    normalized = posixpath.normpath(absolute_path)
    root = posixpath.normpath(table_root).rstrip("/")
    if not normalized.startswith(root + "/"):
        raise PathOutsideTableError(absolute_path, table_root)
    return normalized[len(root) + 1 :]
