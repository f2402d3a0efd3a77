"""The committer: writes one commit file and reports what happened, nothing more.

A transaction decides *what* to commit and at which version; the committer only
attempts the atomic create-if-absent of ``_delta_log/<version>.json`` and reports one
of three outcomes:

- :class:`Committed`: the file is ours;
- :class:`Conflicted`: another writer holds that version (the transaction reads it,
  checks Delta's conflict rules, and tries the next version);
- :class:`RetryableFailure`: the storage failed and the write may or may not have
  happened (the transaction reads the version back and looks for its own txnId).

Keeping this behind a small interface is what lets object stores plug in: a committer
over S3's ``If-None-Match: *`` or a catalog's commit API reports the same three outcomes.
Errors that no retry can fix (a FileIO without atomic create) are raised, not reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from airflow_delta.engine.errors import CommitNotSupportedError
from airflow_delta.engine.model.arguments import check_instance
from airflow_delta.engine.read.listing import commit_path
from airflow_delta.engine.storage.location import TableLocation


@dataclass(frozen=True, slots=True)
class Committed:
    """The commit file of ``version`` was written by this attempt."""

    version: int


@dataclass(frozen=True, slots=True)
class Conflicted:
    """Another writer already holds ``version``; nothing was written."""

    version: int


@dataclass(frozen=True, slots=True)
class RetryableFailure:
    """The storage failed while writing ``version``; the write may have landed all the same."""

    version: int
    error: OSError


CommitResponse = Committed | Conflicted | RetryableFailure


class Committer(Protocol):
    """Writes the commit file of one version atomically, if no other writer has it."""

    def commit(self, version: int, payload: bytes) -> CommitResponse: ...


class FileIOCommitter:
    """The committer over a FileIO's ``put_if_absent`` (atomic on local storage)."""

    def __init__(self, location: TableLocation) -> None:
        self.location = check_instance("location", location, TableLocation)

    def commit(self, version: int, payload: bytes) -> CommitResponse:
        path = commit_path(self.location.root, version)
        try:
            written = self.location.io.put_if_absent(path, payload)
        except CommitNotSupportedError:
            raise
        except OSError as exc:
            return RetryableFailure(version, exc)
        return Committed(version) if written else Conflicted(version)


__all__ = ["CommitResponse", "Committed", "Committer", "Conflicted", "FileIOCommitter", "RetryableFailure"]
