"""FileIO: the only place the engine touches storage.

The kernel (log replay, conflict rules, planning) never calls ``os`` or ``pyarrow.fs``
directly; it goes through a :class:`FileIO`. That keeps storage pluggable: the local
implementation below gives a truly atomic create-if-absent, and object stores plug in
their conditional writes (``storage/object_store.py``).

Paths handed to a FileIO are absolute, in the filesystem's own form (what
``pyarrow.fs.FileSystem.from_uri`` returns as the path part).
"""

from __future__ import annotations

import copy
import errno
import os
import posixpath
import stat
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs

from airflow_delta.engine.errors import (
    AtomicWriteError,
    CommitNotSupportedError,
    DeltaError,
    InvalidArgumentError,
    InvalidPathError,
    PathOutsideTableError,
)


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
    def list_dir(self, path: str, *, not_files: list[str] | None = None) -> list[FileInfo]:
        """Files (not directories) directly under ``path``; empty when it does not exist.

        ``not_files``, when given, receives the names of the other entries: directories,
        and on local storage symbolic links that lead to no file (dangling, or in a loop),
        so that a caller to whom such a name means something (a commit) can refuse it
        instead of never knowing it was there.
        """
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=False)
        files = []
        try:
            infos = self.filesystem.get_file_info(selector)
        except FileNotFoundError:  # removed while being listed (allow_not_found covers only before)
            return []
        for info in infos:
            if info.type == pafs.FileType.File:
                files.append(FileInfo(info.path, info.size or 0, _mtime_ms(info)))
            elif not_files is not None:
                not_files.append(info.base_name)
        return files

    def list_dir_after(self, path: str, start_after: str, *, not_files: list[str] | None = None) -> list[FileInfo]:
        """:meth:`list_dir`, keeping only the names that sort after ``start_after`` (``not_files`` too).

        Object stores list from that name on (a ``start-after`` key), so a caller that wants
        the tail of a long directory (the log after its last checkpoint) pays for the tail only.
        """
        others: list[str] = []
        files = [f for f in self.list_dir(path, not_files=others) if f.name > start_after]
        if not_files is not None:
            not_files.extend(name for name in others if name > start_after)
        return files

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
        with self.open_input_file(path) as f:
            f.seek(offset)
            return f.read(length)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.filesystem.open_input_file(path)

    def read_small_file(self, path: str, expected_size: int) -> bytes | None:
        """The whole content of the file at ``path``, read at once, when it is no larger than
        ``expected_size`` bytes (what the log says it holds); None when this storage does not
        read that way or the file turns out larger (then open it with :meth:`open_input_file`).

        A reader of thousands of small files (a compaction) then parses each from memory: one
        read instead of a read per footer and column chunk. The size is only a hint: a file that
        is shorter than the log says comes back as it is, and its footer tells the reader so.
        """
        return None

    def check_inside(self, paths: Sequence[str]) -> None:
        """Refuse paths whose real location is outside the table (links); nothing to check on object stores."""

    def uri(self, path: str) -> str:
        """``path`` as a URI another client can open: the path itself here (local and pyarrow paths);
        object stores add their scheme (``s3://bucket/key``)."""
        return path

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
            "(local storage, or s3://, az://, abfss://, gs:// through ObjectStoreFileIO)"
        )

    @contextmanager
    def atomic_output(self, path: str) -> Iterator[Any]:
        """A writable file that appears at ``path`` only once complete (temp files, checkpoints).

        Generic storage: buffered in memory and uploaded in one request on success,
        because a stream closed after a failure would publish a truncated object.
        """
        sink = pa.BufferOutputStream()
        yield sink
        self.write_bytes(path, sink.getvalue().to_pybytes())

    def delete(self, path: str) -> None:
        self.filesystem.delete_file(path)

    def delete_many(self, paths: Sequence[str]) -> None:
        """Remove several files; object stores override it with batched requests."""
        for path in paths:
            self.delete(path)

    def open_output_stream(self, path: str) -> pa.NativeFile:
        parent = posixpath.dirname(path)
        if parent:
            self.mkdirs(parent)
        return self.filesystem.open_output_stream(path)


class LocalFileIO(FileIO):
    """Local (POSIX) storage with an atomic create-if-absent, confined to a table's real root.

    ``put_if_absent`` writes a hidden temporary file beside the target, fsyncs it,
    then ``os.link``s it into place. ``link`` fails with EEXIST when the target exists,
    so two writers can never both create the same commit, and a rename that can
    overwrite is never used. A crash leaves at most a hidden temp file, which readers
    ignore (its name does not parse as a log file).

    Confinement: with a ``table_root`` (every table opened through
    :class:`~airflow_delta.engine.storage.location.TableLocation` gets one), every path
    must be below the root, and the *real* location of what is touched must be below
    the root's real location, symbolic links resolved; otherwise
    :class:`PathOutsideTableError`, before anything is read, written or deleted. The root
    itself may be a symbolic link (it is resolved once). The checks are made on what was
    actually opened where that is cheap:

    * reads (every data and log file goes through them) resolve each directory once and
      cache it, then ``lstat`` the file: a link is resolved and must stay inside;
    * writes walk from the root one directory descriptor at a time (creating missing
      directories), check each directory's real path before creating anything in it,
      and create files with ``O_NOFOLLOW`` relative to that descriptor (temporary files
      included); a file name that is a symbolic link is never written through;
    * deletes unlink relative to a checked directory descriptor, and ``unlink`` removes a
      symbolic link itself, never its target;
    * listings check the directory's real path (cached per directory: metadata only);
    * a loop of symbolic links met on the way (ELOOP) is an :class:`InvalidPathError`
      naming the link, never a bare ``OSError``.

    Without a ``table_root`` (tests, tools that work on loose files) paths are used as given.
    """

    def __init__(self, table_root: str | None = None) -> None:
        super().__init__(pafs.LocalFileSystem())
        self._table_root = posixpath.normpath(os.path.abspath(table_root)) if table_root else None
        self._real_root: str | None = None
        self._directories_inside: dict[str, bool] = {}

    # ------------------------------------------------------------ confinement
    @property
    def table_root(self) -> str | None:
        """The root this FileIO is confined to (None: not confined)."""
        return self._table_root

    def confined_to(self, table_root: str) -> LocalFileIO:
        """This FileIO confined to ``table_root``: itself when unconfined (bound in place) or
        already bound there, else a copy bound to the new root."""
        root = posixpath.normpath(os.path.abspath(table_root))
        if self._table_root == root:
            return self
        if self._table_root is None:
            self._table_root = root
            return self
        bound = copy.copy(self)
        bound._table_root, bound._real_root, bound._directories_inside = root, None, {}
        return bound

    def _root_real(self) -> str:
        if self._real_root is not None:
            return self._real_root
        assert self._table_root is not None
        real = os.path.realpath(self._table_root)
        if os.path.isdir(real):  # a root not created yet is resolved again once it exists
            self._real_root = real
        return real

    def _parts(self, path: str) -> list[str]:
        """``path``'s components below the root, refusing a path that is not below it."""
        root = self._table_root
        assert root is not None
        normalized = posixpath.normpath(path)
        for base in (root, self._root_real()):
            if normalized == base:
                return []
            prefix = base.rstrip("/") + "/"
            if normalized.startswith(prefix):
                return normalized[len(prefix):].split("/")
        raise PathOutsideTableError(path, root)

    def _require_inside(self, real: str, path: str, checked: str | None = None) -> None:
        """Refuse ``path`` unless ``real`` (the real location of ``checked``, default ``path``) is inside."""
        real_root = self._root_real()
        if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
            what = "its real location" if checked in (None, path) else f"the real location of {checked!r}"
            raise PathOutsideTableError(
                path, self._table_root or "", f"{what} is {real!r}: a symbolic link leads out of the table"
            )

    def _check_directory(self, path: str, target: str | None = None) -> None:
        """Refuse a directory whose real location is outside the root (cached); ``target``: the file wanted in it."""
        if self._table_root is None or self._directories_inside.get(path):
            return
        self._parts(path)
        self._require_inside(os.path.realpath(path), target or path, path)
        _refuse_loop(path, target or path)
        self._directories_inside[path] = True

    def _open_directory(self, parts: list[str], *, create: bool, target: str | None = None) -> int:
        """A descriptor of the directory ``parts`` below the root, each level checked before use.

        ``target`` is the file the caller is after, for the message.
        """
        root = self._table_root
        assert root is not None
        try:
            if create:
                os.makedirs(root, exist_ok=True)
            fd = os.open(root, _DIR_FLAGS)
        except OSError:
            _refuse_loop(root, target or root)
            raise
        try:
            for depth, name in enumerate(parts, 1):
                if create:
                    try:
                        os.mkdir(name, dir_fd=fd)
                    except FileExistsError:
                        pass
                directory = posixpath.join(root, *parts[:depth])
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    # A link to a file or to nothing: still refused as what it is if it leads out.
                    self._require_inside(os.path.realpath(directory), target or directory, directory)
                    _refuse_loop(directory, target or directory)
                    raise
                os.close(fd)
                fd = child
                # Before anything is created in it: a linked directory must really be inside.
                self._require_inside(_descriptor_path(fd), target or directory, directory)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_parent(self, path: str, *, create: bool) -> tuple[int, str]:
        """(descriptor of ``path``'s directory, file name); the directory is created when asked."""
        if self._table_root is None:
            directory, name = os.path.split(os.path.abspath(path))
            if create:
                os.makedirs(directory, exist_ok=True)
            return os.open(directory, _DIR_FLAGS), name
        parts = self._parts(path)
        if not parts:
            raise IsADirectoryError(f"{path!r} is the table root, not a file")
        return self._open_directory(parts[:-1], create=create, target=path), parts[-1]

    def _create(self, dir_fd: int, name: str, path: str, flags: int) -> int:
        try:
            return os.open(name, flags, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:  # O_NOFOLLOW: the name is a symbolic link
                raise
            self._require_inside(os.path.realpath(path), path)
            raise InvalidPathError(path, "it is a symbolic link, and the engine never writes through one") from None

    # ---------------------------------------------------------------- reading
    def open_input_file(self, path: str) -> pa.NativeFile:
        if self._table_root is None:
            return self.filesystem.open_input_file(path)
        self._check_readable(path)
        return self.filesystem.open_input_file(path)

    def read_small_file(self, path: str, expected_size: int) -> bytes | None:
        if self._table_root is None or not hasattr(os, "O_NOFOLLOW"):
            return None
        self._check_read_directory(path)
        try:
            # O_NOFOLLOW: a file name that is a link fails here (ELOOP) instead of being lstat-ed
            # first; such a file is left to open_input_file, which resolves and checks it.
            fd = os.open(path, _SMALL_READ_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None
            raise
        try:
            # One byte more than expected tells a file larger than the log says from one that is not.
            data = os.read(fd, expected_size + 1)
        finally:
            os.close(fd)
        return data if len(data) <= expected_size else None

    def _check_read_directory(self, path: str) -> None:
        """Refuse to read ``path`` if it is not below the root or its directory really lies outside."""
        directory = path[: path.rfind("/")]
        # A directory in the cache was checked, lexically and really; only the name is new.
        if not self._directories_inside.get(directory) or path.endswith(("/..", "/.")):
            self._parts(path)
            self._check_directory(directory or "/", path)

    def _check_readable(self, path: str) -> None:
        """Refuse to read ``path`` if its directory or the file itself (a link) really lies outside.

        The read path opens every data and log file, so this costs one ``lstat`` per file:
        directories are resolved once and cached. (A directory swapped for a link after
        that is not caught by reads; writes and deletes check what they open.)
        """
        self._check_read_directory(path)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return  # the open reports it
        if stat.S_ISLNK(mode):
            self._require_inside(os.path.realpath(path), path)
            _refuse_loop(path, path)

    def read_bytes(self, path: str) -> bytes:
        if self._table_root is None:
            return super().read_bytes(path)
        with self.open_input_file(path) as f:
            return f.read()

    def check_inside(self, paths: Sequence[str]) -> None:
        """Refuse (:class:`PathOutsideTableError`) any of ``paths`` that a read would refuse.

        For paths about to be committed (staged actions): each directory is resolved once,
        each existing file ``lstat``-ed; a file not there (yet) is left to the reader.
        """
        if self._table_root is None:
            return
        for path in paths:
            self._check_readable(path)

    def list_dir(self, path: str, *, not_files: list[str] | None = None) -> list[FileInfo]:
        self._check_directory(path)
        if not_files is None:
            return super().list_dir(path)
        # One readdir: pyarrow's listing drops links that lead nowhere without a word.
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        files = []
        for entry in entries:
            try:
                st = entry.stat()  # follows a link, as pyarrow's listing does
            except OSError:  # a link to nothing, or in a loop (ELOOP)
                st = None
            if st is not None and stat.S_ISREG(st.st_mode):
                files.append(FileInfo(entry.path, st.st_size, st.st_mtime_ns // 1_000_000))
            else:
                not_files.append(entry.name)
        return files

    def walk(self, path: str) -> Iterator[FileInfo]:
        """Every regular file below ``path``; symbolic links (to files or directories) are not followed."""
        self._check_directory(path)
        pending = [path]
        while pending:
            directory = pending.pop()
            try:
                entries = list(os.scandir(directory))
            except FileNotFoundError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    yield FileInfo(entry.path, st.st_size, st.st_mtime_ns // 1_000_000)

    def info(self, path: str) -> FileInfo | None:
        self._check_parent(path)
        return super().info(path)

    def exists(self, path: str) -> bool:
        self._check_parent(path)
        return super().exists(path)

    def is_dir(self, path: str) -> bool:
        self._check_parent(path)
        return super().is_dir(path)

    def _check_parent(self, path: str) -> None:
        """Metadata of ``path``: its directory must really be inside (the root itself is the user's choice)."""
        if self._table_root is not None and self._parts(path):
            self._check_directory(posixpath.dirname(posixpath.normpath(path)))

    # ---------------------------------------------------------------- writing
    def mkdirs(self, path: str) -> None:
        if self._table_root is None:
            os.makedirs(path, exist_ok=True)
            return
        os.close(self._open_directory(self._parts(path), create=True))

    def put_if_absent(self, path: str, data: bytes) -> bool:
        dir_fd, name = self._open_parent(path, create=True)
        try:
            tmp = _temp_name(name)
            fd = self._create(dir_fd, tmp, path, _NEW_FILE_FLAGS)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                try:
                    os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                except FileExistsError:
                    return False
                _fsync_fd(dir_fd)
                return True
            finally:
                _unlink_quietly(tmp, dir_fd)
        finally:
            os.close(dir_fd)

    def write_bytes(self, path: str, data: bytes) -> None:
        # Write-then-rename so a reader never sees a half-written file (checkpoints,
        # _last_checkpoint, data files); overwriting is the intent here.
        with self.atomic_output(path) as out:
            out.write(data)

    @contextmanager
    def atomic_output(self, path: str) -> Iterator[BinaryIO]:
        """A writable file that appears at ``path`` (replacing it) only once complete.

        Written to a hidden ``.<name>.<uuid>.tmp`` beside the target, inside the table's
        real root (readers and log cleanup leave such names alone), fsynced, then renamed
        into place. If another process deleted the temporary file meanwhile,
        :class:`AtomicWriteError` says so and nothing is published; on any failure the
        temporary file is removed.
        """
        dir_fd, name = self._open_parent(path, create=True)
        try:
            tmp = _temp_name(name)
            fd = self._create(dir_fd, tmp, path, _NEW_FILE_FLAGS)
            try:
                with os.fdopen(fd, "wb") as out:
                    yield out
                    out.flush()
                    os.fsync(out.fileno())
                # rename replaces a symbolic link named ``name`` instead of writing through it
                try:
                    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                except FileNotFoundError:
                    raise AtomicWriteError(path, tmp, "vanished before it could be moved into place") from None
            except BaseException:
                _unlink_quietly(tmp, dir_fd)
                raise
        finally:
            os.close(dir_fd)

    def open_output_stream(self, path: str) -> pa.NativeFile:
        dir_fd, name = self._open_parent(path, create=True)
        try:
            fd = self._create(dir_fd, name, path, _NEW_FILE_FLAGS & ~os.O_EXCL | os.O_TRUNC)
        finally:
            os.close(dir_fd)
        return pa.PythonFile(os.fdopen(fd, "wb"), mode="w")

    def delete(self, path: str) -> None:
        """Remove ``path``; a symbolic link is removed itself, never what it points to."""
        dir_fd, name = self._open_parent(path, create=False)
        try:
            os.unlink(name, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
# Reads of a whole small file: never through a link (such a name takes the checked open).
_SMALL_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_F_GETPATH = 50  # macOS fcntl: the path of an open descriptor


_PROC_FD = os.path.isdir("/proc/self/fd")


def _descriptor_path(fd: int, fallback: str | None = None) -> str:
    """The real path of what ``fd`` has open, as the kernel knows it (no race with a renamed link)."""
    if _PROC_FD:
        return os.readlink(f"/proc/self/fd/{fd}")
    if sys.platform == "darwin":
        import fcntl

        return fcntl.fcntl(fd, _F_GETPATH, bytes(1024)).rstrip(b"\0").decode()
    if fallback is None:
        raise OSError(errno.ENOTSUP, "cannot tell the path of an open directory on this platform")
    return os.path.realpath(fallback)


def _refuse_loop(path: str, target: str) -> None:
    """Raise :class:`InvalidPathError` when ``path`` cannot be resolved because symbolic links loop (ELOOP).

    Resolving a loop fails with an untyped ``OSError`` deep inside pyarrow or ``os``; the
    caller is told which link to fix instead. Anything else (a path not there yet) is the
    caller's to handle.
    """
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            where = "it" if path == target else repr(path)
            raise InvalidPathError(
                target, f"{where} is reached through a loop of symbolic links (ELOOP); remove or repoint the link"
            ) from None


def _temp_name(name: str) -> str:
    return f".{name}.{uuid.uuid4().hex}.tmp"


def _unlink_quietly(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _fsync_fd(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError:
        pass


def _mtime_ms(info: pafs.FileInfo) -> int:
    mtime_ns = info.mtime_ns
    return int(mtime_ns // 1_000_000) if mtime_ns is not None else 0


def _local_path_of_file_uri(table_uri: str) -> str:
    """The local path of a ``file:`` URI in each form Hadoop and Spark write: ``file:///data/t``,
    ``file://localhost/data/t`` and ``file:/data/t`` (one slash, as Spark and the engine's symlink
    manifests write it); anything else is a path already."""
    lowered = table_uri[:5].lower()
    if lowered != "file:":
        return table_uri
    rest = table_uri[len("file:"):]
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        if authority not in ("", "localhost"):
            raise InvalidArgumentError(
                "table_uri", table_uri, "a file: URI of this machine (file:///path or file:/path), not of another host"
            )
        return slash + path
    if not rest.startswith("/"):
        raise InvalidArgumentError("table_uri", table_uri, "an absolute file: URI (file:///path or file:/path)")
    return rest


def resolve_table_uri(table_uri: str, storage_options: Mapping[str, Any] | None = None) -> tuple[FileIO, str]:
    """Return the FileIO for a local path or a ``pyarrow.fs`` URI, and the table root in that FileIO's form.

    Local paths (and ``file://`` URIs) get :class:`LocalFileIO`. Object-store URIs (``s3://``,
    ``az://``, ``abfss://``, ``gs://``...) are resolved by
    :meth:`~airflow_delta.engine.storage.location.TableLocation.from_uri` to an
    ``ObjectStoreFileIO`` before they reach this function; any other scheme (``hdfs://``...)
    goes through ``pyarrow.fs.FileSystem.from_uri``, reads only (no atomic create-if-absent).
    """
    if "://" not in table_uri or table_uri[:7].lower() == "file://":
        local = _local_path_of_file_uri(table_uri)
        root = os.path.abspath(os.path.expanduser(local)).rstrip("/") or "/"
        return LocalFileIO(root), root
    if storage_options:
        scheme = table_uri.split("://", 1)[0].lower()
        raise DeltaError(
            f"storage_options are not supported for scheme {scheme!r}; they configure object stores: "
            "pass an s3://, s3a://, az://, abfss:// or gs:// URI, or a local path without options"
        )
    filesystem, root = pafs.FileSystem.from_uri(table_uri)
    return FileIO(filesystem), root.rstrip("/")
