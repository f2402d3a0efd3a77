"""FileIO: the only place the engine touches storage.

The kernel (log replay, conflict rules, planning) never calls ``os`` or ``pyarrow.fs``
directly; it goes through a :class:`FileIO`. That keeps storage pluggable: the local
implementation below gives a truly atomic create-if-absent, and object stores with
conditional writes can plug in their own ``put_if_absent`` later.

Paths handed to a FileIO are absolute, in the filesystem's own form (what
``pyarrow.fs.FileSystem.from_uri`` returns as the path part).
"""

from __future__ import annotations

import os
import posixpath
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs

from airflow_delta.engine.errors import AtomicWriteError, CommitNotSupportedError, DeltaError


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One listed file: absolute path, size in bytes and modification time in epoch milliseconds."""

    path: str
    size: int
    modification_time: int

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


class FileIO:
    """Storage access over a :class:`pyarrow.fs.FileSystem`.

    Subclasses override :meth:`put_if_absent` when the storage offers an atomic
    conditional create; the generic implementation refuses to commit rather than
    risk two writers both "winning" the same version.
    """

    def __init__(self, filesystem: pafs.FileSystem) -> None:
        self.filesystem = filesystem

    # ---------------------------------------------------------------- reading
    def list_dir(self, path: str) -> list[FileInfo]:
        """Files (not directories) directly under ``path``; empty when it does not exist."""
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=False)
        return [
            FileInfo(info.path, info.size or 0, _mtime_ms(info))
            for info in self.filesystem.get_file_info(selector)
            if info.type == pafs.FileType.File
        ]

    def walk(self, path: str) -> Iterator[FileInfo]:
        """Every file below ``path``, recursively (used by vacuum planning)."""
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=True)
        for info in self.filesystem.get_file_info(selector):
            if info.type == pafs.FileType.File:
                yield FileInfo(info.path, info.size or 0, _mtime_ms(info))

    def info(self, path: str) -> FileInfo | None:
        info = self.filesystem.get_file_info(path)
        if info.type != pafs.FileType.File:
            return None
        return FileInfo(info.path, info.size or 0, _mtime_ms(info))

    def exists(self, path: str) -> bool:
        return self.filesystem.get_file_info(path).type != pafs.FileType.NotFound

    def is_dir(self, path: str) -> bool:
        return self.filesystem.get_file_info(path).type == pafs.FileType.Directory

    def read_bytes(self, path: str) -> bytes:
        with self.filesystem.open_input_stream(path) as stream:
            return stream.read()

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        with self.filesystem.open_input_file(path) as f:
            f.seek(offset)
            return f.read(length)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.filesystem.open_input_file(path)

    # ---------------------------------------------------------------- writing
    def mkdirs(self, path: str) -> None:
        self.filesystem.create_dir(path, recursive=True)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write (or overwrite) a file. Not for commits: use :meth:`put_if_absent`."""
        parent = posixpath.dirname(path)
        if parent:
            self.mkdirs(parent)
        with self.filesystem.open_output_stream(path) as out:
            out.write(data)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Atomically create ``path`` with ``data``; False if it already exists.

        Exactly one of several concurrent callers for the same path gets True, and no
        reader ever sees a partially written file.
        """
        raise CommitNotSupportedError(
            f"{type(self.filesystem).__name__} offers no atomic create-if-absent, so committing to it could "
            "lose a concurrent commit; reading works, but commit through a FileIO with conditional writes "
            "(local storage today)"
        )

    def delete(self, path: str) -> None:
        self.filesystem.delete_file(path)

    def open_output_stream(self, path: str) -> pa.NativeFile:
        parent = posixpath.dirname(path)
        if parent:
            self.mkdirs(parent)
        return self.filesystem.open_output_stream(path)


class LocalFileIO(FileIO):
    """Local (POSIX) storage with an atomic create-if-absent.

    ``put_if_absent`` writes a hidden temporary file beside the target, fsyncs it,
    then ``os.link``s it into place. ``link`` fails with EEXIST when the target exists,
    so two writers can never both create the same commit, and a rename that can
    overwrite is never used. A crash leaves at most a hidden temp file, which readers
    ignore (its name does not parse as a log file).
    """

    def __init__(self) -> None:
        super().__init__(pafs.LocalFileSystem())

    def put_if_absent(self, path: str, data: bytes) -> bool:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            _fsync_dir(directory)
            return True
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    def write_bytes(self, path: str, data: bytes) -> None:
        # Write-then-rename so a reader never sees a half-written file (checkpoints,
        # _last_checkpoint, data files); overwriting is the intent here.
        with self.atomic_output(path) as out:
            out.write(data)

    @contextmanager
    def atomic_output(self, path: str) -> Iterator[BinaryIO]:
        """A writable file that appears at ``path`` (replacing it) only once complete.

        Written to a hidden ``.<name>.<uuid>.tmp`` beside the target (readers and log
        cleanup leave such names alone), fsynced, then renamed into place. If another
        process deleted the temporary file meanwhile, :class:`AtomicWriteError` says so
        and nothing is published; on any failure the temporary file is removed.
        """
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as out:
                yield out
                out.flush()
                os.fsync(out.fileno())
            try:
                os.replace(tmp, path)
            except FileNotFoundError:
                if os.path.isdir(directory):
                    raise AtomicWriteError(path, tmp, "vanished before it could be moved into place") from None
                raise AtomicWriteError(path, tmp, f"lost its directory {directory}") from None
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _mtime_ms(info: pafs.FileInfo) -> int:
    mtime_ns = info.mtime_ns
    return int(mtime_ns // 1_000_000) if mtime_ns is not None else 0


def resolve_table_uri(table_uri: str, storage_options: Mapping[str, Any] | None = None) -> tuple[FileIO, str]:
    """Return the FileIO for a table URI or local path, and the table root in that FileIO's form.

    Local paths (and ``file://`` URIs) get :class:`LocalFileIO`; other schemes go through
    ``pyarrow.fs.FileSystem.from_uri`` with ``storage_options`` for credentials.
    """
    if "://" not in table_uri or table_uri.startswith("file://"):
        local = table_uri[len("file://"):] if table_uri.startswith("file://") else table_uri
        root = os.path.abspath(os.path.expanduser(local))
        return LocalFileIO(), root.rstrip("/") or "/"
    if storage_options:
        filesystem, root = _filesystem_with_options(table_uri, storage_options)
    else:
        filesystem, root = pafs.FileSystem.from_uri(table_uri)
    return FileIO(filesystem), root.rstrip("/")


def _filesystem_with_options(table_uri: str, storage_options: Mapping[str, Any]) -> tuple[pafs.FileSystem, str]:
    scheme, rest = table_uri.split("://", 1)
    scheme = scheme.lower()
    if scheme in ("s3", "s3a"):
        return pafs.S3FileSystem(**dict(storage_options)), rest
    if scheme in ("gs", "gcs"):
        return pafs.GcsFileSystem(**dict(storage_options)), rest
    raise DeltaError(
        f"storage_options are not supported for scheme {scheme!r}; pass a local path, or an s3:// or gs:// URI"
    )
