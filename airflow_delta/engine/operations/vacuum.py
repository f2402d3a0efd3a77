"""VACUUM: deleting the files that no retained version of a table needs.

The rules are those of Delta's ``VacuumCommand``:

* A file is *retained* when a live ``add`` references it, or a tombstone (``remove``)
  whose ``deletionTimestamp`` is later than ``now - retention`` (a version inside the
  retention window may still read it), or when it is the deletion vector file of either.
* The retention defaults to ``delta.deletedFileRetentionDuration`` (7 days); a shorter
  one is refused (:class:`RetentionTooShortError`) unless the caller turns the check off.
* ``full`` lists the table directory recursively and deletes every file that is not
  retained and was last modified before ``now - retention``: expired tombstones and also
  orphans no commit ever referenced (files of writers that died before committing). The
  modification-time test is what keeps the files of a concurrent writer that has not
  committed yet: they are younger than the retention.
* ``lite`` reads the log only, no listing: the files of expired tombstones (and their
  DV files) that are not retained. It cannot see orphans, nor tombstones that a
  checkpoint already dropped; ``full`` finds those.
* Hidden paths are skipped as Delta skips them: a path component that starts with ``_``
  or ``.`` (``_delta_log``, ``_SUCCESS``, ``.part-0.crc``, our ``.<name>.tmp`` files),
  except partition directories (``<partition column>=...``, whatever the column's first
  character), ``_change_data`` and ``_delta_index``.

Nothing outside the table root is ever deleted: paths in the log are resolved by the one
path rule (:func:`relative_paths`, a ``../x`` in the log is a :class:`PathOutsideTableError`
before anything is deleted), listing never follows symbolic links, and the confined
:class:`LocalFileIO` refuses to delete through a link that leads out (counted in
``skipped_outside_root``, never deleted).

A real run records ``VACUUM START`` (parameters ``retentionCheckEnabled``,
``specifiedRetentionMillis``, ``defaultRetentionMillis``; metrics ``numFilesToDelete``,
``sizeOfDataToDelete``) before deleting and ``VACUUM END`` (``status``; metrics
``numDeletedFiles``, ``numVacuumedDirectories``) after, commitInfo-only commits as Delta
writes them. Deletes run on a bounded thread pool.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.checkpoint.maintenance import check_log_maintenance_supported, live_tombstones
from airflow_delta.engine.errors import (
    InvalidArgumentError,
    PathOutsideTableError,
    RetentionTooShortError,
    UnsupportedFeatureError,
    VacuumLiteNotPossibleError,
    VersionNotFoundError,
)
from airflow_delta.engine.model.arrow_numpy import (
    bool_array,
    combined,
    int64_array,
    int64_scalar,
    int64_to_numpy,
    mask_to_numpy,
    string_array,
)
from airflow_delta.engine.model.column_mapping import ColumnMapping
from airflow_delta.engine.model.deletion_vector_files import dv_file_name, split_uuid_path
from airflow_delta.engine.model.table_features import check_writable
from airflow_delta.engine.operations.results import VacuumResult
from airflow_delta.engine.read.commit_reader import read_commit_removes
from airflow_delta.engine.read.history import commit_timestamp, read_commit_infos, version_at_timestamp
from airflow_delta.engine.read.listing import LogListing, list_log, log_dir
from airflow_delta.engine.read.snapshot import Snapshot, relative_paths
from airflow_delta.engine.storage.fileio import FileInfo, FileIO, LocalFileIO

if TYPE_CHECKING:  # a dry run opens no transaction: the commit path is not imported for it
    from airflow_delta.engine.write.transaction import Transaction

log = logging.getLogger(__name__)

VACUUM_MODES = ("full", "lite")
# Paths kept in a result; the whole list goes to the task log at DEBUG or to a file.
SAMPLE_PATHS = 10
# Paths one delete task handles; the pool runs at most ``parallelism`` tasks at once.
DELETE_CHUNK = 256
# Paths one batched delete carries on object stores (S3's DeleteObjects takes up to 1000 keys).
DELETE_BATCH = 1000
# Names that start with "_" or "." but are data, not hidden (Delta's rule).
NOT_HIDDEN_PREFIXES = ("_change_data", "_delta_index")


@dataclass(frozen=True)
class VacuumPlan:
    """What a vacuum would delete: paths relative to the root, their sizes, and how many directories were listed."""

    paths: pa.Array  # string, relative to the table root, decoded
    sizes: np.ndarray  # int64 bytes
    directories_scanned: int
    # Delta's latestCommitVersionOutsideOfRetentionWindow: the last commit at or before the
    # retention's start, recorded in _last_vacuum_info once the files are deleted (None: none).
    latest_version_outside_retention: int | None = None

    @property
    def total_bytes(self) -> int:
        return int(self.sizes.sum()) if self.sizes.size else 0


# ------------------------------------------------------------------ retained files


def partition_dir_prefixes(snapshot: Snapshot) -> tuple[str, ...]:
    """``"<physical partition column>="``: directory names that are data even when they start with ``_``."""
    mapping = ColumnMapping.from_metadata(snapshot.metadata, snapshot.protocol)
    return tuple(f"{mapping.physical_name(c)}=" for c in snapshot.metadata.partition_columns)


def is_hidden_name(name: str, partition_prefixes: tuple[str, ...]) -> bool:
    """Delta's rule for one path component: hidden when it starts with ``_`` or ``.``, unless it is
    a partition directory, ``_change_data`` or ``_delta_index``."""
    return name[:1] in ("_", ".") and not name.startswith(NOT_HIDDEN_PREFIXES) and not name.startswith(
        partition_prefixes
    )


def dv_file_paths(root: str, deletion_vectors: pa.Array | pa.ChunkedArray) -> list[str]:
    """Relative paths of the DV files (``u`` and ``p`` storage) that ``deletion_vectors`` name, each once."""
    return pc.unique(dv_file_paths_by_row(root, deletion_vectors)[0]).to_pylist()


def dv_file_paths_by_row(root: str, deletion_vectors: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """The relative DV file path of each row whose DV is on disk (``u`` or ``p``), and those rows' indices."""
    dvs = combined(deletion_vectors)
    if len(dvs) == 0 or dvs.null_count == len(dvs):
        return string_array([]), np.zeros(0, dtype=np.int64)
    storage = pc.fill_null(pc.struct_field(dvs, "storageType"), "")
    on_disk = pc.or_(pc.equal(storage, "u"), pc.equal(storage, "p"))
    rows = np.flatnonzero(mask_to_numpy(on_disk))
    keys = pc.binary_join_element_wise(storage.filter(on_disk), pc.struct_field(dvs, "pathOrInlineDv").filter(on_disk), ":")
    distinct = pc.unique(keys)  # packed DV files are shared by many rows: resolve each file once
    is_uuid = mask_to_numpy(pc.starts_with(distinct, "u:"))
    resolved = np.empty(len(distinct), dtype=object)
    uuid_paths = []
    for key in distinct.filter(bool_array(is_uuid)).to_pylist():
        prefix, file_id = split_uuid_path(key[2:])
        uuid_paths.append(posixpath.join(prefix, dv_file_name(file_id)) if prefix else dv_file_name(file_id))
    resolved[is_uuid] = uuid_paths
    absolute = pc.utf8_slice_codeunits(distinct.filter(bool_array(~is_uuid)), 2)
    resolved[~is_uuid] = relative_paths(root, absolute).cast(pa.string()).to_pylist() if len(absolute) else []
    index = pc.index_in(keys, value_set=distinct)
    return string_array(list(resolved)).take(index), rows


def retained_paths(snapshot: Snapshot, delete_before_ms: int) -> pa.Array:
    """Relative paths of every file a retained version may read: live adds, unexpired tombstones, their DV files."""
    return _retained_paths(snapshot.table_root, snapshot.add_actions, snapshot.tombstones, delete_before_ms)


def retained_among(snapshot: Snapshot, delete_before_ms: int, candidates: pa.Array) -> pa.Array:
    """Which of ``candidates`` (relative paths) a retained version may read, as a boolean mask.

    The same answer as testing them against :func:`retained_paths`, from the file state of
    the files with the candidates' names only (and every file with a DV, whose DV file may
    be a candidate): a log of 100,000 adds of which a few were removed parses the few.
    """
    names = pc.struct_field(pc.extract_regex(candidates, r"(?P<name>[^/]*)$"), "name")
    adds, tombstones = snapshot.file_state_of_names(names)
    retained = _retained_paths(snapshot.table_root, adds, tombstones, delete_before_ms)
    return pc.is_in(candidates, value_set=retained)


def _retained_paths(root: str, adds: pa.Table, tombstones: pa.Table, delete_before_ms: int) -> pa.Array:
    tombstones = unexpired_tombstones(tombstones, delete_before_ms)
    parts = [relative_paths(root, adds.column("path")), relative_paths(root, tombstones.column("path"))]
    dvs = dv_file_paths(root, adds.column("deletion_vector")) + dv_file_paths(
        root, tombstones.column("deletion_vector")
    )
    parts.append(string_array(dvs))
    return pc.unique(pa.concat_arrays([p.cast(pa.string()) for p in parts]))


def unexpired_tombstones(tombstones: pa.Table, delete_before_ms: int) -> pa.Table:
    """Tombstones removed after ``delete_before_ms`` (the rule checkpoints keep tombstones by)."""
    return live_tombstones(tombstones, 0, delete_before_ms)


def expired_tombstones(tombstones: pa.Table, delete_before_ms: int) -> pa.Table:
    """The other tombstones: removed at or before ``delete_before_ms`` (no timestamp counts as epoch 0)."""
    ts = pc.fill_null(tombstones.column("deletion_timestamp"), int64_scalar(0))
    return tombstones.filter(pc.less_equal(ts, int64_scalar(delete_before_ms)))


# ------------------------------------------------------------------ listing


@dataclass
class _Listing:
    """Non-hidden files below the root; ``sizes``/``mtimes`` are None where not known yet (local listing)."""

    paths: list[str]
    sizes: list[int] | None
    mtimes: list[int] | None
    directories: int


# The listing's public name: another backend (Spark) builds one and hands it to planning.
TableListing = _Listing

ListFiles = Callable[[FileIO, str, tuple[str, ...], int], _Listing]
"""How :func:`plan_full` lists a table: ``(io, root, partition_prefixes, parallelism) -> listing``
(default :func:`list_table_files`). Another backend lists elsewhere; the rules stay here."""


def list_top_level(io: FileIO, root: str, partition_prefixes: tuple[str, ...]) -> tuple[_Listing, list[str]]:
    """The non-hidden files directly under ``root`` (one directory counted) and its non-hidden sub-directories.

    The first step of a listing that another backend spreads out: each returned
    directory is then listed with :func:`list_table_files` ``(..., under=directory)``, and
    :func:`merge_listings` joins the pieces into what :func:`list_table_files` gives.
    """
    if isinstance(io, LocalFileIO):
        names, dirs = _local_entries(root)
        files = [n for n in names if not is_hidden_name(n, partition_prefixes)]
        top = _Listing(files, None, None, 1)
    else:
        infos, dirs = _fileio_entries(io, root, "")
        kept = [f for f in infos if not is_hidden_name(f.path.rsplit("/", 1)[-1], partition_prefixes)]
        top = _Listing([f.path[len(root) + 1:] for f in kept], [f.size for f in kept],
                       [f.modification_time for f in kept], 1)
    return top, [d for d in dirs if not is_hidden_name(d, partition_prefixes)]


def merge_listings(listings: Sequence[_Listing]) -> _Listing:
    """One listing of several disjoint pieces; sizes and times are known in all of them or in none."""
    known = [piece.sizes is not None for piece in listings]
    if any(known) and not all(known):
        raise InvalidArgumentError(
            "listings", f"{len(listings)} pieces", "pieces all listed from one storage: with sizes in all or in none"
        )
    merged = _Listing([], [] if all(known) else None, [] if all(known) else None, 0)
    for piece in listings:
        merged.paths += piece.paths
        merged.directories += piece.directories
        if merged.sizes is not None and merged.mtimes is not None:
            merged.sizes += piece.sizes or []
            merged.mtimes += piece.mtimes or []
    return merged


def list_table_files(
    io: FileIO, root: str, partition_prefixes: tuple[str, ...], parallelism: int = 8, under: str = ""
) -> _Listing:
    """Every non-hidden file below ``root`` (or only below its sub-directory ``under``), relative to
    ``root``; hidden directories are not entered (``under`` itself is not checked: its caller chose it).

    Symbolic links are not followed (a link to a directory outside the table would
    otherwise bring outside files into the plan). On local storage only names are read
    here (the directory entry's type needs no ``stat``); sizes and times are read later
    for the few files that are candidates (:func:`_stat_candidates`). Other storage
    (object stores) is listed through the FileIO, one directory level at a time, the
    directories of a level listed on at most ``parallelism`` threads; each listing
    carries sizes and modification times.
    """
    if isinstance(io, LocalFileIO):
        return _list_local(root, partition_prefixes, under)
    listing = _Listing([], [], [], 0)
    assert listing.sizes is not None and listing.mtimes is not None
    level = [under]
    with ThreadPoolExecutor(max_workers=max(1, parallelism), thread_name_prefix="vacuum-list") as pool:
        while level:
            listing.directories += len(level)
            entries = list(pool.map(lambda relative_dir: _fileio_entries(io, root, relative_dir), level))
            level = []
            for files, dirs in entries:
                for file in files:
                    name = file.path.rsplit("/", 1)[-1]
                    if not is_hidden_name(name, partition_prefixes):
                        listing.paths.append(file.path[len(root) + 1:])
                        listing.sizes.append(file.size)
                        listing.mtimes.append(file.modification_time)
                level += [d for d in dirs if not is_hidden_name(d.rsplit("/", 1)[-1], partition_prefixes)]
    return listing


def _fileio_entries(io: FileIO, root: str, relative_dir: str) -> tuple[list[FileInfo], list[str]]:
    """(files, sub-directories relative to ``root``) of one directory, listed through the FileIO."""
    directory = f"{root}/{relative_dir}" if relative_dir else root
    subdirs: list[str] = []
    files = io.list_dir(directory, not_files=subdirs)
    prefix = f"{relative_dir}/" if relative_dir else ""
    return files, [prefix + name for name in subdirs]


def _list_local(root: str, partition_prefixes: tuple[str, ...], under: str = "") -> _Listing:
    """Names of the non-hidden regular files below a local ``root`` (no sizes or times yet)."""
    listing = _Listing([], None, None, 0)
    pending = [under]
    while pending:
        relative_dir = pending.pop()
        listing.directories += 1
        directory = f"{root}/{relative_dir}" if relative_dir else root
        prefix = f"{relative_dir}/" if relative_dir else ""
        files, dirs = _local_entries(directory)
        listing.paths += [prefix + n for n in files if not is_hidden_name(n, partition_prefixes)]
        pending += [prefix + d for d in dirs if not is_hidden_name(d, partition_prefixes)]
    return listing


def _local_entries(directory: str) -> tuple[list[str], list[str]]:
    """Names of the regular files and of the directories in ``directory``; links are neither."""
    try:
        with os.scandir(directory) as entries:
            files, dirs = [], []
            for entry in entries:
                # is_dir/is_file without following links read the entry's type: no stat call.
                if entry.is_dir(follow_symlinks=False):
                    dirs.append(entry.name)
                elif entry.is_file(follow_symlinks=False):
                    files.append(entry.name)
            return files, dirs
    except (FileNotFoundError, NotADirectoryError):
        return [], []


def _stat_candidates(root: str, relative: list[str], parallelism: int) -> tuple[np.ndarray, np.ndarray]:
    """Sizes and modification times (ms) of local files, without following links; a file gone
    meanwhile gets mtime ``int64 max`` (never old enough to delete)."""

    never = np.iinfo(np.int64).max

    def stat_chunk(chunk: Sequence[str]) -> list[tuple[int, int]]:
        out = []
        for path in chunk:
            try:
                st = os.lstat(f"{root}/{path}")
                out.append((st.st_size, st.st_mtime_ns // 1_000_000))
            except FileNotFoundError:
                out.append((0, never))
        return out

    if not relative:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    chunks = [relative[i : i + DELETE_CHUNK] for i in range(0, len(relative), DELETE_CHUNK)]
    with ThreadPoolExecutor(max_workers=min(parallelism, len(chunks)), thread_name_prefix="vacuum-stat") as pool:
        stats = [pair for chunk in pool.map(stat_chunk, chunks) for pair in chunk]
    values = np.array(stats, dtype=np.int64).reshape(-1, 2)
    return values[:, 0], values[:, 1]


# ------------------------------------------------------------------ planning


def _not_hidden(paths: pa.Array, partition_prefixes: tuple[str, ...]) -> np.ndarray:
    """Mask of paths none of whose components is hidden (a log may name ``_delta_log/...``; never deleted)."""
    if len(paths) == 0:
        return np.zeros(0, dtype=bool)
    components = pc.split_pattern(paths, "/")
    flat = pc.list_flatten(components)
    starts_hidden = pc.or_(pc.starts_with(flat, "_"), pc.starts_with(flat, "."))
    for prefix in (*NOT_HIDDEN_PREFIXES, *partition_prefixes):
        starts_hidden = pc.and_(starts_hidden, pc.invert(pc.starts_with(flat, prefix)))
    parents = pc.list_parent_indices(components)
    hidden_rows = int64_to_numpy(parents.filter(starts_hidden)) if len(flat) else np.zeros(0, dtype=np.int64)
    mask = np.ones(len(paths), dtype=bool)
    mask[hidden_rows] = False
    return mask


def plan_full(
    snapshot: Snapshot, delete_before_ms: int, parallelism: int = 8, list_files: ListFiles | None = None
) -> VacuumPlan:
    """Files below the root that are neither retained nor younger than the retention (orphans included).

    ``list_files`` lists the table (default :func:`list_table_files`, in this process); it
    is called after ``snapshot`` was read, as the listing must be, and whatever lists,
    the retention, retained-path and hidden-path rules are these.
    """
    prefixes = partition_dir_prefixes(snapshot)
    lister = list_table_files if list_files is None else list_files
    listing = lister(snapshot.io, snapshot.table_root, prefixes, parallelism)
    paths = string_array(listing.paths)
    unretained = ~mask_to_numpy(pc.is_in(paths, value_set=retained_paths(snapshot, delete_before_ms)))
    candidates = paths.filter(bool_array(unretained))
    if listing.sizes is None:  # local: stat only the candidates
        sizes, mtimes = _stat_candidates(snapshot.table_root, candidates.to_pylist(), parallelism)
    else:
        sizes = np.asarray(listing.sizes, dtype=np.int64)[unretained]
        mtimes = np.asarray(listing.mtimes, dtype=np.int64)[unretained]
    old = mtimes < delete_before_ms
    return VacuumPlan(candidates.filter(bool_array(old)), sizes[old], listing.directories)


# ------------------------------------------------------------------ lite: the commits since the last vacuum

LAST_VACUUM_INFO = "_last_vacuum_info"
LAST_VACUUM_INFO_KEY = "latestCommitVersionOutsideOfRetentionWindow"


def read_last_vacuum_info(snapshot: Snapshot) -> int | None:
    """The last vacuum's ``latestCommitVersionOutsideOfRetentionWindow`` from ``_delta_log/_last_vacuum_info``.

    Delta's file, read as Delta reads it: missing, unreadable or without the field means
    "no vacuum recorded" (lite then starts at the earliest commit).
    """
    try:
        data = json.loads(snapshot.io.read_bytes(f"{log_dir(snapshot.table_root)}/{LAST_VACUUM_INFO}"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("vacuum: ignoring an unreadable %s: %s", LAST_VACUUM_INFO, exc)
        return None
    value = data.get(LAST_VACUUM_INFO_KEY) if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def write_last_vacuum_info(snapshot: Snapshot, version: int) -> None:
    """Record that every file removed at or before commit ``version`` has been vacuumed.

    The file Delta writes after a VACUUM (overwritten, not a commit): Delta's lite VACUUM
    and ours start after it. It only moves forward, and a failure to write it is logged,
    never raised: the next lite VACUUM then re-reads more commits, and deletes nothing
    that a retained version needs.
    """
    previous = read_last_vacuum_info(snapshot)
    if previous is not None and previous >= version:
        return
    try:
        snapshot.io.write_bytes(
            f"{log_dir(snapshot.table_root)}/{LAST_VACUUM_INFO}", json.dumps({LAST_VACUUM_INFO_KEY: version}).encode()
        )
    except Exception:
        log.warning("vacuum: could not write %s (the next lite VACUUM reads more commits)", LAST_VACUUM_INFO,
                    exc_info=True)


def latest_version_outside_retention(snapshot: Snapshot, delete_before_ms: int, listing: LogListing) -> int | None:
    """The last commit at or before ``delete_before_ms`` (Delta's ``getActiveCommitAtTime`` that may
    return the latest commit), at most the snapshot's version; None when every commit is younger."""
    if delete_before_ms >= snapshot.timestamp:
        return snapshot.version
    # The snapshot's properties serve when it is the listing's latest version (no second replay).
    properties = snapshot.properties if listing.latest_version == snapshot.version else None
    try:
        version = version_at_timestamp(snapshot.io, snapshot.table_root, delete_before_ms, listing=listing,
                                       properties=properties)
    except VersionNotFoundError:
        return None
    return min(version, snapshot.version)


def _removed_in_commits(snapshot: Snapshot, listing: LogListing, start: int, end: int) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(paths relative to the root, sizes, times) of what commits ``start..end`` removed: the files of
    ``remove`` actions and their DV files (at the remove's ``deletionTimestamp``, 0 when absent),
    and the change data files of ``cdc`` actions (time 0: they expire with their commit), as
    Delta's lite VACUUM gathers them."""
    # The snapshot's own parse when it read those commits (no checkpoint in between): no second read.
    parsed = snapshot.removes_of_versions(start, end)
    if parsed is None:
        files = [listing.commits[v] for v in range(start, end + 1)]
        prefixes = tuple(p[:-1] for p in partition_dir_prefixes(snapshot))
        parsed = read_commit_removes(snapshot.io, files, list(range(start, end + 1)), partition_keys=prefixes)
    removes = parsed.file_actions.filter(pc.invert(parsed.file_actions.column("is_add")))
    times = int64_to_numpy(pc.fill_null(removes.column("deletion_timestamp"), int64_scalar(0)))
    sizes = int64_to_numpy(pc.fill_null(removes.column("size"), int64_scalar(0)))
    dv_paths, dv_rows = dv_file_paths_by_row(snapshot.table_root, removes.column("deletion_vector"))
    cdc = [a.body for a in parsed.actions if a.key == "cdc"]
    paths = pa.concat_arrays([
        relative_paths(snapshot.table_root, removes.column("path")).cast(pa.string()),
        dv_paths,
        relative_paths(snapshot.table_root, string_array([c.get("path", "") for c in cdc])).cast(pa.string()),
    ])
    # DV files' sizes are not in the log (only each DV's slice of them): -1 until read (_with_dv_file_sizes).
    all_sizes = np.concatenate([
        sizes, np.full(len(dv_paths), -1, dtype=np.int64), np.array([int(c.get("size") or 0) for c in cdc], dtype=np.int64)
    ])
    all_times = np.concatenate([times, times[dv_rows], np.zeros(len(cdc), dtype=np.int64)])
    return paths, all_sizes, all_times


def plan_lite(snapshot: Snapshot, delete_before_ms: int, listing: LogListing | None = None) -> VacuumPlan:
    """What Delta's lite VACUUM deletes: files removed by the commits since the last vacuum (its
    ``_last_vacuum_info``) up to the last commit outside the retention, older than the retention,
    that no retained version needs. No listing of the data; a file once vacuumed is not planned again.

    ``listing``: a whole listing of the log made after the snapshot was loaded (default: one now).
    Raises :class:`VacuumLiteNotPossibleError` when log cleanup deleted commits it needs.
    """
    listing = listing if listing is not None else list_log(snapshot.io, snapshot.table_root)
    end = latest_version_outside_retention(snapshot, delete_before_ms, listing)
    empty = VacuumPlan(string_array([]), np.zeros(0, dtype=np.int64), 0, end)
    if end is None:
        return empty
    last = read_last_vacuum_info(snapshot)
    # Delta starts at min(snapshot version, last + 1), reading the latest commit again when
    # no commit followed the last vacuum; ours starts after it (end <= the snapshot's version).
    start = 0 if last is None else last + 1
    commits = [v for v in listing.commits if v <= snapshot.version]
    earliest = min(commits) if commits else None
    if start > end:
        return empty
    if earliest is None or start < earliest or any(v not in listing.commits for v in range(start, end + 1)):
        raise VacuumLiteNotPossibleError(snapshot.table_root, start, earliest)
    paths, sizes, times = _removed_in_commits(snapshot, listing, start, end)
    old = times < delete_before_ms
    paths, sizes = paths.filter(bool_array(old)), sizes[old]
    # One entry per path (a file removed twice, with and without a DV, appears twice).
    unique = pc.unique(paths)
    first = int64_to_numpy(pc.index_in(unique, value_set=paths).cast(pa.int64()))
    paths, sizes = unique, sizes[first]
    delete = ~mask_to_numpy(retained_among(snapshot, delete_before_ms, paths))
    delete &= _not_hidden(paths, partition_dir_prefixes(snapshot))
    paths = paths.filter(bool_array(delete))
    return VacuumPlan(paths, _with_dv_file_sizes(snapshot, paths, sizes[delete]), 0, end)


def tombstones_not_vacuumed(snapshot: Snapshot, listing: LogListing | None = None) -> pa.Table:
    """The snapshot's tombstones whose files no completed VACUUM has deleted, as ``_last_vacuum_info`` tells.

    A tombstone stays in the state until a checkpoint drops it past the retention, also
    after a VACUUM deleted its file. A VACUUM that completed recorded the last commit outside
    its retention, L, and deleted the files removed by commits up to L (lite reads exactly
    those; a full one deleted them too): tombstones of commits up to L are gone. Rows of a
    checkpoint carry the checkpoint's version C; when C > L, a checkpoint row was removed by
    L at the latest when its ``deletionTimestamp`` is not after commit L's timestamp. When
    commit L is no longer listed that cannot be told, and such rows are kept (counted).
    """
    tombstones = snapshot.tombstones
    last = read_last_vacuum_info(snapshot)
    if last is None or tombstones.num_rows == 0:
        return tombstones
    versions = int64_to_numpy(tombstones.column("version"))
    gone = versions <= last
    checkpoint = snapshot.log_segment.checkpoint_version
    if checkpoint is not None and checkpoint > last:
        listing = listing if listing is not None else list_log(snapshot.io, snapshot.table_root)
        info = listing.commits.get(last)
        if info is not None:
            commit_info = read_commit_infos(snapshot.io, [info.path])[0]
            last_ms = commit_timestamp(last, info.modification_time, commit_info, snapshot.properties)
            removed = int64_to_numpy(pc.fill_null(tombstones.column("deletion_timestamp"), int64_scalar(0)))
            gone |= (versions == checkpoint) & (removed <= last_ms)
    return tombstones.filter(bool_array(~gone)) if gone.any() else tombstones


def _with_dv_file_sizes(snapshot: Snapshot, paths: pa.Array, sizes: np.ndarray) -> np.ndarray:
    """``sizes`` with the entries of DV files (-1: not in the log) read from storage; 0 for a file gone.

    One metadata read per DV file the plan deletes (a DML commit writes one, shared by its
    DVs), so the bytes agree with what a full VACUUM, which lists them, reports.
    """
    unknown = np.flatnonzero(sizes < 0)
    if not len(unknown):
        return sizes
    sizes = sizes.copy()
    for i, relative in zip(unknown, paths.take(int64_array(unknown)).to_pylist(), strict=True):
        info = snapshot.io.info(f"{snapshot.table_root}/{relative}")
        sizes[i] = info.size if info is not None else 0
    return sizes


def plan_lite_from_state(
    snapshot: Snapshot, delete_before_ms: int, tombstones: pa.Table | None = None
) -> VacuumPlan:
    """The expired tombstones still in the snapshot's state (and their DV files) that no retained
    version needs: what lite would find when it cannot read the commits (the health report's
    fallback). ``tombstones``: those to consider (default: all the state's; the health report
    passes :func:`tombstones_not_vacuumed`)."""
    root = snapshot.table_root
    expired = expired_tombstones(snapshot.tombstones if tombstones is None else tombstones, delete_before_ms)
    data_paths = relative_paths(root, expired.column("path")).cast(pa.string())
    data_sizes = int64_to_numpy(pc.fill_null(expired.column("size"), int64_scalar(0)))
    dv_paths = string_array(dv_file_paths(root, expired.column("deletion_vector")))
    paths = pa.concat_arrays([data_paths, dv_paths])
    sizes = np.concatenate([data_sizes, np.full(len(dv_paths), -1, dtype=np.int64)])
    unique = pc.unique(paths)
    first = int64_to_numpy(pc.index_in(unique, value_set=paths).cast(pa.int64()))
    paths, sizes = unique, sizes[first]
    delete = ~mask_to_numpy(pc.is_in(paths, value_set=retained_paths(snapshot, delete_before_ms)))
    delete &= _not_hidden(paths, partition_dir_prefixes(snapshot))
    paths = paths.filter(bool_array(delete))
    return VacuumPlan(paths, _with_dv_file_sizes(snapshot, paths, sizes[delete]), 0)


# ------------------------------------------------------------------ deleting


def delete_files(io: FileIO, root: str, relative: Sequence[str], parallelism: int) -> tuple[int, int]:
    """Delete ``relative`` paths on at most ``parallelism`` threads; returns (deleted, refused as outside the root).

    Local storage deletes file by file: a file already gone (a concurrent vacuum) is
    neither an error nor counted, and a path whose real location is outside the root is
    refused and counted. Other storage deletes through :meth:`FileIO.delete_many`, in
    batches of :data:`DELETE_BATCH` paths (one DeleteObjects request each on S3); object
    stores report no difference between deleting an object and one already gone, so every
    path of a completed batch is counted. Paths are joined to the root after the lexical
    path rule (:func:`relative_paths`) has refused any that leave it, and the object-store
    FileIO refuses any key outside its bucket.
    """
    if not relative:
        return 0, 0
    if not isinstance(io, LocalFileIO):
        batches = [relative[i : i + DELETE_BATCH] for i in range(0, len(relative), DELETE_BATCH)]

        def delete_batch(batch: Sequence[str]) -> int:
            io.delete_many([f"{root}/{path}" for path in batch])
            return len(batch)

        with ThreadPoolExecutor(max_workers=min(parallelism, len(batches)), thread_name_prefix="vacuum") as pool:
            return sum(pool.map(delete_batch, batches)), 0

    def delete_chunk(chunk: Sequence[str]) -> tuple[int, int]:
        deleted = refused = 0
        for path in chunk:
            try:
                io.delete(f"{root}/{path}")
                deleted += 1
            except FileNotFoundError:
                pass
            except PathOutsideTableError as exc:
                refused += 1
                log.warning("vacuum: not deleting %s: %s", path, exc)
        return deleted, refused

    chunks = [relative[i : i + DELETE_CHUNK] for i in range(0, len(relative), DELETE_CHUNK)]
    with ThreadPoolExecutor(max_workers=min(parallelism, len(chunks)), thread_name_prefix="vacuum") as pool:
        results = list(pool.map(delete_chunk, chunks))
    return sum(r[0] for r in results), sum(r[1] for r in results)


def _write_file_list(path: str, relative: Sequence[str]) -> None:
    """The plan's paths, one per line, to a local file that appears only when complete."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as out:
            out.writelines(line + "\n" for line in relative)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


# ------------------------------------------------------------------ the operation


def _record_last_vacuum(snapshot: Snapshot, plan: VacuumPlan, delete_before_ms: int) -> None:
    """After a completed run, ``_last_vacuum_info`` as Delta writes it, so that the next lite VACUUM
    (ours or Delta's) reads only the commits after this one's retention boundary. A full run
    records it too (Delta writes none then): it deleted everything a lite run would have."""
    end = plan.latest_version_outside_retention
    if end is None and plan.directories_scanned:  # full: find the boundary now
        try:
            end = latest_version_outside_retention(snapshot, delete_before_ms, list_log(snapshot.io, snapshot.table_root))
        except Exception:
            log.warning("vacuum: could not find the last commit outside the retention", exc_info=True)
            return
    if end is not None:
        write_last_vacuum_info(snapshot, end)


def _can_commit(snapshot: Snapshot) -> bool:
    """Whether this engine may commit to the table. VACUUM's commits hold only commitInfo, but a
    table with a writer feature we do not implement (change data feed, ...) refuses every commit:
    its files are still vacuumed, without the VACUUM START / END record (optional in Delta too)."""
    try:
        check_writable(snapshot.protocol, snapshot.metadata)
    except UnsupportedFeatureError as exc:
        log.warning("vacuum of %s: not recording VACUUM START / END: %s", snapshot.table_root, exc)
        return False
    return True



def vacuum(
    snapshot: Snapshot,
    open_transaction: Callable[[], Transaction],
    *,
    retention_ms: int | None,
    enforce_retention_duration: bool,
    mode: str,
    dry_run: bool,
    now_ms: int | None,
    parallelism: int,
    file_list_path: str | None,
    list_files: ListFiles | None = None,
) -> VacuumResult:
    """Plan and (unless ``dry_run``) run a vacuum of ``snapshot``'s table; see the module docstring."""
    check_log_maintenance_supported(snapshot.protocol)  # reader and writer features: vacuumProtocolCheck
    default_ms = int(snapshot.properties.deleted_file_retention.total_seconds() * 1000)
    effective_ms = default_ms if retention_ms is None else retention_ms
    if enforce_retention_duration and effective_ms < default_ms:
        raise RetentionTooShortError(effective_ms, default_ms)
    if effective_ms > default_ms:
        log.warning(
            "vacuum of %s: the retention asked for (%d ms) is longer than the table's "
            "delta.deletedFileRetentionDuration (%d ms): checkpoints keep only the tombstones the table's "
            "retention keeps, so versions older than that may lose files all the same; to keep time "
            "travel longer, raise delta.deletedFileRetentionDuration", snapshot.table_root, effective_ms, default_ms,
        )
    now = int(time.time() * 1000) if now_ms is None else now_ms
    delete_before = now - effective_ms
    if mode == "full":
        plan = plan_full(snapshot, delete_before, parallelism, list_files)
    else:
        plan = plan_lite(snapshot, delete_before)
    relative = plan.paths.to_pylist()
    if file_list_path is not None:
        _write_file_list(file_list_path, relative)
    if log.isEnabledFor(logging.DEBUG):
        for path in relative:
            log.debug("vacuum %s: %s", "would delete" if dry_run else "deletes", path)
    log.info(
        "vacuum (%s, dry_run=%s) of %s: %d files, %d bytes not needed by versions after %d",
        mode, dry_run, snapshot.table_root, len(relative), plan.total_bytes, delete_before,
    )
    metrics = {"numFilesToDelete": len(relative), "sizeOfDataToDelete": plan.total_bytes}
    common = {
        "mode": mode,
        "retention_ms": effective_ms,
        "delete_before_ms": delete_before,
        "sample_paths": tuple(relative[:SAMPLE_PATHS]),
        "file_list_path": file_list_path,
    }
    if dry_run:
        return VacuumResult(
            dry_run=True, metrics={**metrics, "numDeletedFiles": 0, "numVacuumedDirectories": plan.directories_scanned},
            **common,
        )

    parameters = {
        "retentionCheckEnabled": enforce_retention_duration,
        "specifiedRetentionMillis": retention_ms,
        "defaultRetentionMillis": default_ms,
    }
    if retention_ms is None:
        del parameters["specifiedRetentionMillis"]
    record = _can_commit(snapshot)
    start_version = end_version = None
    if record:
        with open_transaction() as txn:
            start_version = txn.commit("VACUUM START", parameters, metrics)
    deleted = refused = 0
    status = "FAILED"
    try:
        deleted, refused = delete_files(snapshot.io, snapshot.table_root, relative, parallelism)
        status = "COMPLETED"
        _record_last_vacuum(snapshot, plan, delete_before)
    finally:
        end_metrics = {"numDeletedFiles": deleted, "numVacuumedDirectories": plan.directories_scanned}
        if record:
            with open_transaction() as txn:
                end_version = txn.commit("VACUUM END", {"status": status}, end_metrics)
    return VacuumResult(
        dry_run=False,
        metrics={**metrics, **end_metrics},
        start_version=start_version,
        end_version=end_version,
        skipped_outside_root=refused,
        **common,
    )


__all__ = [
    "VACUUM_MODES",
    "ListFiles",
    "TableListing",
    "VacuumPlan",
    "delete_files",
    "dv_file_paths",
    "dv_file_paths_by_row",
    "expired_tombstones",
    "is_hidden_name",
    "list_table_files",
    "list_top_level",
    "merge_listings",
    "plan_full",
    "plan_lite",
    "plan_lite_from_state",
    "read_last_vacuum_info",
    "retained_among",
    "retained_paths",
    "tombstones_not_vacuumed",
    "unexpired_tombstones",
    "vacuum",
]
