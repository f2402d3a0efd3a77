"""Naming the fleet: a list of table URIs, a prefix to discover Delta tables under, or a callable.

Discovery lists directories one level at a time through the engine's FileIO (local, and
object stores with delimited listings), down to ``max_depth`` levels below the prefix. A
directory that holds ``_delta_log`` is a table: it is reported and never descended into,
so a table's partitions and data files are never listed. Nothing outside the prefix is
read: the local FileIO is confined to it (a symbolic link that leads out is skipped).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_delta.engine.errors import DeltaError, InvalidArgumentError
from airflow_delta.engine.model.arguments import check_int, check_str, check_str_sequence
from airflow_delta.engine.storage.location import TableLocation

DEFAULT_DISCOVERY_DEPTH = 3
"""How many directory levels below the prefix discovery looks (the prefix itself is level 0)."""

DELTA_LOG_DIR = "_delta_log"


@dataclass(frozen=True)
class DiscoveryResult:
    """The tables found under a prefix (URIs, sorted), and the directories that could not be listed with why."""

    prefix: str
    tables: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...] = field(default=())
    directories_listed: int = 0


def discover_tables(
    prefix: str, storage_options: Mapping[str, Any] | None = None, *, max_depth: int = DEFAULT_DISCOVERY_DEPTH
) -> DiscoveryResult:
    """Every Delta table at or below ``prefix`` (a local path or an object-store URI), at most ``max_depth`` levels down.

    A directory is a table when it has a ``_delta_log`` sub-directory; its own sub-directories
    are not listed. Hidden directories (a name starting with ``.``) are skipped. A directory
    that cannot be listed (permissions, a link out of the prefix) is reported in ``skipped``.
    """
    check_str("prefix", prefix, non_empty=True)
    check_int("max_depth", max_depth, minimum=0)
    location = TableLocation.from_uri(prefix, storage_options)
    io, root = location.io, location.root
    tables: list[str] = []
    skipped: list[tuple[str, str]] = []
    listed = 0
    level = [root]
    for depth in range(max_depth + 1):
        below: list[str] = []
        for directory in level:
            names: list[str] = []
            try:
                io.list_dir(directory, not_files=names)
            except (DeltaError, OSError) as error:
                skipped.append((io.uri(directory), str(error)))
                continue
            listed += 1
            if DELTA_LOG_DIR in names:
                tables.append(io.uri(directory))
                continue
            if depth < max_depth:
                below.extend(posixpath.join(directory, n) for n in sorted(names) if not n.startswith("."))
        level = below
        if not level:
            break
    return DiscoveryResult(prefix, tuple(sorted(tables)), tuple(skipped), listed)


def resolve_fleet(
    *,
    tables: Iterable[str] | None = None,
    prefix: str | None = None,
    tables_callable: Callable[[], Iterable[str]] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    max_depth: int = DEFAULT_DISCOVERY_DEPTH,
) -> tuple[str, ...]:
    """The fleet's table URIs, in order and without duplicates, from exactly one source: a list
    of URIs, a prefix (:func:`discover_tables`), or a callable returning URIs."""
    given = [name for name, v in (("tables", tables), ("prefix", prefix), ("tables_callable", tables_callable))
             if v is not None]
    if len(given) != 1:
        raise InvalidArgumentError(
            "tables", given or None, "name the fleet one way: tables=[...], prefix='...' or tables_callable=..."
        )
    if prefix is not None:
        return discover_tables(prefix, storage_options, max_depth=max_depth).tables
    if tables_callable is not None:
        if not callable(tables_callable):
            raise InvalidArgumentError("tables_callable", tables_callable, "pass a callable that returns table URIs")
        tables = tables_callable()
        if isinstance(tables, (str, bytes)) or not isinstance(tables, Iterable):
            raise InvalidArgumentError("tables_callable", tables, "the callable must return an iterable of URI strings")
        tables = list(tables)
    names = check_str_sequence("tables", tables) or ()
    for uri in names:
        check_str("tables", uri, non_empty=True)
    return tuple(dict.fromkeys(names))


__all__ = ["DEFAULT_DISCOVERY_DEPTH", "DiscoveryResult", "discover_tables", "resolve_fleet"]
