"""The files a write created, so that a write that fails leaves none of them behind.

Every write path records each file it is about to create (data files, DV files,
checkpoint parts and sidecars) in a :class:`WrittenFiles` *before* creating it, so that a
file cut short by the failure is covered too. A failure then removes them:
:meth:`WrittenFiles.removed_on_failure` around a step undoes that step's files, and a
transaction that aborts or fails to commit undoes all of its own. Once a commit lands,
the files belong to the table and the record is cleared.

Removal is best effort and never raises: the error that made the write fail is the one
the caller must see. Removal never follows a symlink (it unlinks the name it was given),
and a file recorded with a fingerprint (its size and modification time right after we
wrote it) is left alone when another writer has replaced it since, as happens with
checkpoint files whose names are not unique to one writer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_delta.engine.storage.fileio import FileIO

log = logging.getLogger(__name__)

__all__ = ["WrittenFiles"]


class _Written:
    # A plain slotted class, not a dataclass: nothing compares or prints it, and a dataclass
    # costs about a millisecond to create at import, which every writing task pays.
    __slots__ = ("fingerprint", "path")

    def __init__(self, path: str, fingerprint: tuple[int, int] | None) -> None:
        self.path = path
        self.fingerprint = fingerprint  # (size, modification ms) once written; None: ours alone


class WrittenFiles:
    """The files one write (a transaction, a checkpoint) created and would remove on failure."""

    def __init__(self, io: FileIO) -> None:
        self.io = io
        self._files: list[_Written] = []

    def __len__(self) -> int:
        return len(self._files)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self._files)

    def record(self, path: str) -> None:
        """``path`` is about to be created under a name unique to this write (a UUID name)."""
        self._files.append(_Written(path, None))

    def record_shared_name(self, path: str) -> None:
        """``path`` was just written under a name other writers may write too (a checkpoint part).

        Its size and modification time now are kept: on failure it is removed only while it
        is still the file we wrote, never a racing writer's identical copy.
        """
        info = self.io.info(path)
        if info is not None:
            self._files.append(_Written(path, (info.size, info.modification_time)))

    def forget(self) -> None:
        """The files are the table's now (their commit landed): never remove them."""
        self._files.clear()

    @contextmanager
    def removed_on_failure(self) -> Iterator[WrittenFiles]:
        """Remove the files recorded inside the block if the block raises; re-raise."""
        start = len(self._files)
        try:
            yield self
        except BaseException:
            self._remove(self._files[start:])
            del self._files[start:]
            raise

    def remove_all(self) -> list[str]:
        """Remove every recorded file (best effort); returns the paths removed."""
        removed = self._remove(self._files)
        self._files.clear()
        return removed

    def _remove(self, files: list[_Written]) -> list[str]:
        removed = []
        for written in reversed(files):
            try:
                if written.fingerprint is not None:
                    info = self.io.info(written.path)
                    if info is None or (info.size, info.modification_time) != written.fingerprint:
                        continue  # replaced by another writer since: theirs to keep
                self.io.delete(written.path)
                removed.append(written.path)
            except FileNotFoundError:
                continue  # never created (the failure came first)
            except Exception as exc:
                log.warning("could not remove %s after a failed write: %s; it is an orphan for VACUUM", written.path, exc)
        return removed
