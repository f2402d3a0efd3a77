"""Commit history and timestamps: ``history()`` and timestamp -> version for time travel.

The timestamp of a commit is the modification time of its JSON file, except where
in-commit timestamps are enabled (``delta.enableInCommitTimestamps``): then versions at
or after ``delta.inCommitTimestampEnablementVersion`` (all versions, if that property
is absent) use ``commitInfo.inCommitTimestamp``, as the protocol recommends. Which
regime applies is decided by the latest table metadata.

File modification times are not guaranteed to increase with the version (clock skew,
copied tables), so, like Delta, we make them monotonic before searching: a commit's
timestamp is raised to one millisecond after its predecessor's when needed. In-commit
timestamps get the same treatment for the search: the spec defines each as at least one
millisecond after the previous commit's, so a non-compliant log (an ICT earlier than its
predecessor's) is read as a compliant writer would have written it. ``history()`` and
``Snapshot.timestamp`` still report what each commit recorded.

Time travel by timestamp selects the latest version whose commit timestamp is <= the
requested one. A timestamp before the earliest reconstructable commit, or after the
latest commit, raises :class:`VersionNotFoundError`: the first cannot be served, and the
second is refused (as Delta does) because a later commit could still land at or before
that instant, so the answer would not be repeatable. Use ``version=None`` for "latest".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from airflow_delta.engine.errors import DeltaError, InvalidTimestampError, TableNotFoundError, VersionNotFoundError
from airflow_delta.engine.model import log_json
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.read.commit_reader import parse_commit_bytes, read_files_bytes
from airflow_delta.engine.read.listing import LogListing, list_log, segment_from_listing
from airflow_delta.engine.read.replay import replay_metadata
from airflow_delta.engine.storage.fileio import FileIO

TimestampLike = datetime | date | str | int
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# ------------------------------------------------------------------ inputs


def to_epoch_ms(timestamp: TimestampLike) -> int:
    """Epoch milliseconds of a datetime (naive = UTC), a date, an ISO-8601 string or an int (ms)."""
    if isinstance(timestamp, bool):
        raise InvalidTimestampError(timestamp, "a boolean is not a timestamp")
    if isinstance(timestamp, int):
        return timestamp
    if isinstance(timestamp, str):
        text = timestamp.strip()
        try:
            parsed: datetime | date = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidTimestampError(timestamp, "expected ISO-8601, e.g. '2024-05-01T12:00:00Z'") from None
        timestamp = parsed
    if isinstance(timestamp, datetime):
        aware = timestamp if timestamp.tzinfo is not None else timestamp.replace(tzinfo=UTC)
        return (aware - _EPOCH) // timedelta(milliseconds=1)
    if isinstance(timestamp, date):
        return (datetime(timestamp.year, timestamp.month, timestamp.day, tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)
    raise InvalidTimestampError(timestamp, "expected a datetime, an ISO-8601 string or epoch milliseconds")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


# ------------------------------------------------------------------ commit timestamps


def uses_in_commit_timestamp(properties: TableProperties, version: int) -> bool:
    if not properties.enable_in_commit_timestamps:
        return False
    start = properties.in_commit_timestamp_enablement_version
    return start is None or version >= start


def commit_timestamp(
    version: int, modification_time: int, commit_info: Mapping[str, Any] | None, properties: TableProperties
) -> int:
    """The timestamp (ms) of one commit under the table's timestamp regime."""
    if uses_in_commit_timestamp(properties, version) and commit_info is not None:
        ict = commit_info.get("inCommitTimestamp")
        if isinstance(ict, int) and not isinstance(ict, bool):
            return ict
    return modification_time


def monotonic_timestamps(raw_ms: Sequence[int]) -> np.ndarray:
    """``t[i] = max(raw[i], t[i-1] + 1)``, vectorised: ``i + cummax(raw[j] - j)``."""
    raw = np.asarray(raw_ms, dtype=np.int64)
    if raw.size == 0:
        return raw
    idx = np.arange(raw.size, dtype=np.int64)
    return np.maximum.accumulate(raw - idx) + idx


def extract_commit_info(data: bytes, file: str) -> dict[str, Any] | None:
    """The ``commitInfo`` of a commit's bytes, parsing only its line when it can be found."""
    start = 0 if data.startswith(b'{"commitInfo"') else data.find(b'\n{"commitInfo"')
    if start >= 0:
        if data[start:start + 1] == b"\n":
            start += 1
        end = data.find(b"\n", start)
        line = data[start:] if end < 0 else data[start:end]
        try:
            body = log_json.loads(line).get("commitInfo")
            if isinstance(body, dict):
                return body
        except (ValueError, AttributeError):
            pass  # fall through to the full parse, which names the bad line
    for action in parse_commit_bytes(data, file):
        body = action.get("commitInfo")
        if isinstance(body, dict):
            return body
    return None


def latest_properties(io: FileIO, root: str, listing: LogListing | None = None) -> TableProperties:
    """Table properties of the latest version (metadata-only replay; no file actions parsed)."""

    listing = listing if listing is not None else list_log(io, root)
    segment = segment_from_listing(listing)
    state = replay_metadata(io, segment, check_protocol=False)
    return TableProperties.for_reading(state.metadata.configuration)


# ------------------------------------------------------------------ history


def read_history(io: FileIO, root: str, limit: int | None = None) -> list[dict[str, Any]]:
    """``commitInfo`` of each commit, newest first, each with ``version`` and ``timestamp`` (ms).

    Commits without a ``commitInfo`` still appear, with just those two keys. Only
    commits whose JSON file still exists (after log cleanup) are listed.
    """
    listing = list_log(io, root)
    if listing.latest_version is None:

        raise TableNotFoundError(root)
    try:
        properties = latest_properties(io, root, listing)
    except DeltaError:
        properties = TableProperties()  # a damaged log still has a readable history
    versions = sorted(listing.commits, reverse=True)
    if limit is not None:
        versions = versions[: max(0, limit)]
    files = [listing.commits[v] for v in versions]
    contents = read_files_bytes(io, [f.path for f in files])
    out: list[dict[str, Any]] = []
    for version, info, data in zip(versions, files, contents, strict=True):
        commit_info = extract_commit_info(data, info.path)
        entry: dict[str, Any] = dict(commit_info) if commit_info else {}
        entry["version"] = version
        entry["timestamp"] = commit_timestamp(version, info.modification_time, commit_info, properties)
        out.append(entry)
    return out


# ------------------------------------------------------------------ timestamp -> version


def read_commit_infos(io: FileIO, paths: Sequence[str], head_bytes: int = 8192) -> list[dict[str, Any] | None]:
    """``commitInfo`` of several commits, reading only the head of each file where it can.

    With in-commit timestamps the spec puts ``commitInfo`` first in every commit, so its
    line is nearly always within the first few KB; otherwise the whole file is read.
    Reads overlap on remote storage.
    """
    def one(path: str) -> dict[str, Any] | None:
        with io.open_input_file(path) as f:
            head = f.read(head_bytes)
            if head.startswith(b'{"commitInfo"') and b"\n" in head:
                info = extract_commit_info(head[: head.index(b"\n")], path)
                if info is not None:
                    return info
            data = head + f.read()
        return extract_commit_info(data, path)

    if len(paths) <= 8 or isinstance(io.filesystem, pafs.LocalFileSystem):
        return [one(p) for p in paths]
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(one, paths))


def version_at_timestamp(
    io: FileIO, root: str, timestamp: TimestampLike, listing: LogListing | None = None,
    properties: TableProperties | None = None,
) -> int:
    """The latest version whose commit timestamp is <= ``timestamp`` (see the module doc).

    ``properties``: the table properties of the listing's latest version when the caller
    has them (a loaded snapshot of that version), which saves a metadata replay.

    Timestamps are made monotonic first, as a writer following the spec would have
    written them: file modification times always (Delta does the same), and in-commit
    timestamps too, which the spec defines as at least one millisecond after the previous
    commit's (a non-compliant log may break that). The latter requires every commit's
    ``commitInfo`` in the in-commit-timestamp range (only the head of each file is read):
    a binary search over a sequence that may not be sorted can return a wrong version.
    """
    requested = to_epoch_ms(timestamp)
    listing = listing if listing is not None else list_log(io, root)
    latest = listing.latest_version
    earliest = listing.earliest_reconstructable()
    if latest is None:

        raise TableNotFoundError(root)
    # Versions that can be rebuilt and whose commit time we know.
    versions = [v for v in sorted(listing.commits) if earliest is not None and v >= earliest]
    mtimes = {v: listing.commits[v].modification_time for v in versions}
    if earliest is not None and earliest not in listing.commits:
        cp = listing.best_checkpoint(earliest)
        if cp is not None:  # history cleaned up, only the checkpoint remains
            versions.insert(0, earliest)
            mtimes[earliest] = cp.files[0].modification_time
    if not versions:
        raise VersionNotFoundError(timestamp, earliest, latest, "no commit timestamps are available")
    if properties is None:
        properties = latest_properties(io, root, listing)

    def file_times(vs: Sequence[int]) -> np.ndarray:
        return monotonic_timestamps([mtimes[v] for v in vs])

    def in_commit_times(vs: Sequence[int]) -> np.ndarray:
        with_file = [v for v in vs if v in listing.commits]
        infos = dict(zip(with_file, read_commit_infos(io, [listing.commits[v].path for v in with_file]), strict=True))
        raw = [commit_timestamp(v, mtimes[v], infos.get(v), properties) for v in vs]
        return monotonic_timestamps(raw)

    if properties.enable_in_commit_timestamps:
        start = properties.in_commit_timestamp_enablement_version or 0
        start_ts = properties.in_commit_timestamp_enablement_timestamp
        ict_versions = [v for v in versions if v >= start]
        ict_times = in_commit_times(ict_versions)
        if start_ts is None or requested >= start_ts:
            candidates, times = ict_versions, ict_times
        else:
            candidates = [v for v in versions if v < start]
            times = file_times(candidates)
        latest_ts = int(ict_times[-1]) if versions[-1] >= start else int(file_times(versions)[-1])
    else:
        candidates, times = versions, file_times(versions)
        latest_ts = int(times[-1])

    if requested > latest_ts:
        raise VersionNotFoundError(
            timestamp, earliest, latest,
            f"it is after the latest commit (version {versions[-1]} at {_iso(latest_ts)}); "
            "load the latest version instead",
        )
    pos = int(np.searchsorted(times, requested, side="right")) - 1 if candidates else -1
    if pos < 0:
        first = versions[0]
        first_ts = int(times[0]) if candidates and candidates[0] == first else mtimes[first]
        raise VersionNotFoundError(
            timestamp, earliest, latest,
            f"it is before the earliest available commit (version {first} at {_iso(first_ts)})",
        )
    return candidates[pos]


def timestamp_of_version(io: FileIO, root: str, version: int) -> int:
    """Commit timestamp (ms) of one version, under the latest timestamp regime."""
    listing = list_log(io, root)
    segment = segment_from_listing(listing, version)
    properties = latest_properties(io, root, listing)
    info = segment.latest_commit_file
    if info is None:
        return segment.checkpoint_files[0].modification_time
    commit_info = extract_commit_info(io.read_bytes(info.path), info.path)
    return commit_timestamp(version, info.modification_time, commit_info, properties)
