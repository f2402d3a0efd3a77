"""``TableLocation``: where a table lives, as a value that every layer can be handed.

Lower layers (reading, committing, checkpoints, log cleanup) receive a location, never
the :class:`~airflow_delta.engine.table.DeltaTable` facade, so that nothing below the
facade imports it and storage can be swapped (a FileIO with conditional writes for an
object store, ``storage/object_store.py``) without touching them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.engine.storage.fileio import FileIO, LocalFileIO, resolve_table_uri
from airflow_delta.engine.storage.uri_schemes import is_object_store_uri


@dataclass(frozen=True)
class TableLocation:
    """A table's storage: the FileIO, the root in that FileIO's path form, and the URI the user gave.

    ``root`` has no trailing slash; the log is ``f"{root}/_delta_log"``. ``uri`` is kept
    as given, for messages that the user must recognise. A :class:`LocalFileIO` is confined
    to ``root``: nothing whose real location is outside it is read, written or deleted.
    """

    io: FileIO
    root: str
    uri: str

    def __post_init__(self) -> None:
        if not isinstance(self.io, FileIO):
            raise InvalidArgumentError("TableLocation.io", self.io, "pass a FileIO (LocalFileIO for local paths)")
        for name in ("root", "uri"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidArgumentError(f"TableLocation.{name}", value, "pass a non-empty string")
        # Nothing outside the root: a local FileIO handed in unconfined (``DeltaTable(uri,
        # io=...)``) is bound to this root, so every layer below gets the symlink checks.
        if isinstance(self.io, LocalFileIO):
            object.__setattr__(self, "io", self.io.confined_to(self.root))

    @classmethod
    def from_uri(cls, table_uri: str, storage_options: Mapping[str, Any] | None = None) -> TableLocation:
        """Resolve a table URI to its FileIO and root: object stores (``s3://``, ``s3a://``, ``az://``,
        ``abfss://``, ``gs://``...) to an :class:`ObjectStoreFileIO` configured by ``storage_options``
        (delta-rs's keys), local paths and ``file://`` to a :class:`LocalFileIO`, other pyarrow.fs
        URIs to a read-only :class:`FileIO`."""
        if not isinstance(table_uri, str) or not table_uri.strip():
            raise InvalidArgumentError("table_uri", table_uri, "pass a non-empty path or URI string")
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise InvalidArgumentError("storage_options", storage_options, "pass a mapping of option names to values, or None")
        if "\x00" in table_uri:
            # No file system or object store names a path with a NUL byte; the OS would
            # refuse it later with an untyped ValueError.
            raise InvalidArgumentError("table_uri", table_uri, "a path or URI without NUL bytes")
        if is_object_store_uri(table_uri):
            # Imported here: obstore is needed only where a table on an object store is
            # opened, so an executor working on a local table runs without it; the URI
            # parser and storage options likewise load only for such a table.
            from airflow_delta.engine.storage.object_store import ObjectStoreFileIO
            from airflow_delta.engine.storage.options import parse_object_store_uri

            parsed = parse_object_store_uri(table_uri)
            return cls(ObjectStoreFileIO(parsed, storage_options), parsed.root, table_uri)
        io, root = resolve_table_uri(table_uri, storage_options)
        return cls(io, root, table_uri)

    @property
    def log_dir(self) -> str:
        return f"{self.root}/_delta_log"

    def __str__(self) -> str:
        return self.uri
