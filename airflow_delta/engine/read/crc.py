"""Version checksum (``.crc``) files: a summary of the table state at one version.

``<version>.crc`` sits beside the commit and records ``tableSizeBytes``, ``numFiles``,
``numMetadata``, ``numProtocol``, ``metadata``, ``protocol`` and optional fields (see
the protocol's "Version Checksum File"). Writers should produce one per commit, only
after the commit exists, and must never overwrite one.

We compute it either

* incrementally: the previous version's ``.crc`` plus this commit's actions (cheap,
  the common case after our own commits); this is refused (None) whenever the commit
  could re-add a file already in the table, because then the counts are not knowable
  without the state; or
* from a snapshot that is already loaded (a full reconciliation, vectorised).

Both ways also keep Spark's two histograms exact: ``fileSizeHistogram`` (files and
bytes per size bin, Spark's bins; older Spark names it ``histogramOpt``) and
``deletedRecordCountsHistogramOpt`` (files per deleted-rows bin). ``allFiles`` is left
out. ``setTransactions`` is left out while ``delta.setTransactionRetentionDuration``
is set, as Spark does: expired identifiers then vanish from the state with the clock,
and Spark fails the validation of a ``.crc`` that still lists them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc

from airflow_delta.engine.errors import CommitNotSupportedError, CorruptCommitError
from airflow_delta.engine.model import log_json
from airflow_delta.engine.model.actions import DomainMetadata, Metadata, Protocol, SetTransaction
from airflow_delta.engine.model.arrow_numpy import combined, indices_to_numpy
from airflow_delta.engine.model.committed_actions import CommittedActions
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.storage.fileio import FileIO

if TYPE_CHECKING:
    from airflow_delta.engine.read.snapshot import Snapshot

log = logging.getLogger(__name__)

# Fields compared by validate_version_checksum (all required ones plus the optional
# sets when both sides have them).
_REQUIRED = ("tableSizeBytes", "numFiles", "numMetadata", "numProtocol", "metadata", "protocol")


_MB = 1 << 20
# Spark's file-size bins (FileSizeHistogram): each is the inclusive start of a bin; the
# last bin is open-ended. Checked against Spark-written .crc files in the tests.
FILE_SIZE_BIN_BOUNDARIES: tuple[int, ...] = (
    0,
    *(8192 << k for k in range(11)),  # 8 KiB .. 8 MiB
    *(m * _MB for m in range(12, 41, 4)),
    *(m * _MB for m in range(48, 121, 8)),
    *(m * _MB for m in range(124, 145, 4)),
    *(m * _MB for m in range(160, 577, 16)),
    *(m * _MB for m in range(640, 1409, 64)),
    *(m * _MB for m in range(1536, 2049, 128)),
    *(m * _MB for m in range(2304, 4097, 256)),
    *((8 << k) * 1024 * _MB for k in range(6)),  # 8 GiB .. 256 GiB
)
# Deleted-rows bins of deletedRecordCountsHistogramOpt (protocol, "Deleted Record Counts
# Histogram Schema"): [0], [1,9], [10,99], ..., [10^7, 2^31-2], [2^31-1, inf).
DELETED_RECORD_BIN_BOUNDARIES: tuple[int, ...] = (0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 2**31 - 1)
_TXN_RETENTION_KEY = "delta.setTransactionRetentionDuration"


def _bins(values: Any, boundaries: Sequence[int]) -> np.ndarray:
    return np.searchsorted(np.asarray(boundaries, dtype=np.int64), np.asarray(values, dtype=np.int64), side="right") - 1


def file_size_histogram(sizes: Any, boundaries: Sequence[int] = FILE_SIZE_BIN_BOUNDARIES) -> dict[str, list[int]]:
    bins = _bins(sizes, boundaries)
    total = np.zeros(len(boundaries), dtype=np.int64)
    np.add.at(total, bins, np.asarray(sizes, dtype=np.int64))  # integer sums: exact at any size
    return {
        "sortedBinBoundaries": list(boundaries),
        "fileCounts": np.bincount(bins, minlength=len(boundaries)).astype(np.int64).tolist(),
        "totalBytes": total.tolist(),
    }


def deleted_records_histogram(cardinalities: Any) -> dict[str, list[int]]:
    bins = _bins(cardinalities, DELETED_RECORD_BIN_BOUNDARIES)
    return {"deletedRecordCounts": np.bincount(bins, minlength=len(DELETED_RECORD_BIN_BOUNDARIES)).astype(np.int64).tolist()}


def _txn_retention_set(*metadata: Mapping[str, Any] | None) -> bool:
    return any(m is not None and _TXN_RETENTION_KEY in (m.get("configuration") or {}) for m in metadata)


def crc_path(root: str, version: int) -> str:
    return f"{root}/_delta_log/{version:020d}.crc"


def read_version_checksum(io: FileIO, root: str, version: int) -> dict[str, Any] | None:
    """The parsed ``.crc`` of ``version``, or None if it is missing or not a JSON object."""
    try:
        raw = io.read_bytes(crc_path(root, version))
    except (FileNotFoundError, OSError):
        return None
    try:
        document = log_json.loads(raw)
    except ValueError:
        log.warning("ignoring unparsable %s", crc_path(root, version))
        return None
    return document if isinstance(document, dict) else None


def write_version_checksum(io: FileIO, root: str, version: int, checksum: Mapping[str, Any]) -> bool:
    """Create the ``.crc`` of ``version``; False (and nothing written) if one already exists."""
    path = crc_path(root, version)
    data = json_text(dict(checksum)).encode("utf-8")
    try:
        return io.put_if_absent(path, data)
    except CommitNotSupportedError:
        # No atomic create on this storage: a racing writer would write the same content.
        if io.exists(path):
            return False
        io.write_bytes(path, data)
        return True


def _ict_enabled(metadata: Mapping[str, Any]) -> bool:
    return TableProperties.for_reading(Metadata.from_json(metadata).configuration).enable_in_commit_timestamps


def checksum_from_snapshot(snapshot: Snapshot) -> dict[str, Any]:
    """The version checksum of a loaded snapshot (full reconciliation)."""
    adds = snapshot.add_actions
    size = pc.sum(adds.column("size")).as_py() if adds.num_rows else 0
    dv = adds.column("deletion_vector")
    num_dvs = adds.num_rows - dv.null_count if adds.num_rows else 0
    deleted = pc.sum(pc.struct_field(dv, "cardinality")).as_py() if num_dvs else 0
    checksum: dict[str, Any] = {}
    commit_info = getattr(snapshot, "commit_info", None) or {}
    if commit_info.get("txnId") is not None:
        checksum["txnId"] = commit_info["txnId"]
    checksum |= {
        "tableSizeBytes": int(size or 0),
        "numFiles": adds.num_rows,
        "numMetadata": 1,
        "numProtocol": 1,
    }
    if snapshot.properties.enable_in_commit_timestamps:
        checksum["inCommitTimestampOpt"] = snapshot.timestamp
    if _TXN_RETENTION_KEY not in snapshot.metadata.configuration:
        checksum["setTransactions"] = [t.to_json() for _, t in sorted(snapshot.transactions.items())]
    checksum["domainMetadata"] = [
        d.to_json() for _, d in sorted(snapshot.domain_metadata.items()) if not d.removed
    ]
    checksum["metadata"] = snapshot.metadata.to_json()
    checksum["protocol"] = snapshot.protocol.to_json()
    checksum["numDeletionVectorsOpt"] = num_dvs
    checksum["numDeletedRecordsOpt"] = int(deleted or 0)
    checksum["fileSizeHistogram"] = file_size_histogram(indices_to_numpy(combined(adds.column("size")), 0))
    cardinalities = indices_to_numpy(combined(pc.struct_field(dv, "cardinality")), 0) if adds.num_rows else []
    checksum["deletedRecordCountsHistogramOpt"] = deleted_records_histogram(cardinalities)
    return checksum


EMPTY_STATE: Mapping[str, Any] = {
    "tableSizeBytes": 0,
    "numFiles": 0,
    "setTransactions": [],
    "domainMetadata": [],
    "numDeletionVectorsOpt": 0,
    "numDeletedRecordsOpt": 0,
    "fileSizeHistogram": file_size_histogram([]),
    "deletedRecordCountsHistogramOpt": deleted_records_histogram([]),
}


def next_checksum(previous: Mapping[str, Any], actions: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The checksum after applying one commit's ``actions`` to ``previous``; None if not derivable.

    ``previous`` is the prior version's checksum (or :data:`EMPTY_STATE` for version 0).
    Not derivable when a remove lacks its ``size``, or when an ``add`` may re-add a file
    that is already live (``dataChange=false`` in a commit without removes, or a
    duplicate key in the commit): counting it would double it.
    """
    # The removes a transaction kept as columns (an OPTIMIZE's thousands) are counted from them;
    # every other action is a JSON object.
    columns = actions.remove_columns if isinstance(actions, CommittedActions) else []
    if isinstance(actions, CommittedActions):
        actions = actions.other_actions
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    num_removes = len(removes) + sum(len(c) for c in columns)
    commit_info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None) or {}
    if any(not a.get("dataChange", True) for a in adds) and not num_removes:
        return None
    keys = [(a.get("path"), _dv_key(a)) for a in adds]
    if len(set(keys)) != len(keys):
        return None
    column_sizes = [c.remove_sizes() for c in columns]
    if any(r.get("size") is None for r in removes) or any(sizes is None for sizes in column_sizes):
        return None
    try:
        removed_sizes = np.concatenate(
            [np.array([int(r["size"]) for r in removes], dtype=np.int64), *column_sizes]  # type: ignore[list-item]
        )
        num_files = int(previous["numFiles"]) + len(adds) - num_removes
        size = int(previous["tableSizeBytes"]) + sum(int(a["size"]) for a in adds) - sum(removed_sizes.tolist())
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if num_files < 0 or size < 0:
        return None

    metadata = next((a["metaData"] for a in actions if "metaData" in a), previous.get("metadata"))
    protocol = next((a["protocol"] for a in actions if "protocol" in a), previous.get("protocol"))
    if metadata is None or protocol is None:
        return None
    metadata = Metadata.from_json(metadata).to_json()
    protocol = Protocol.from_json(protocol).to_json()

    checksum: dict[str, Any] = {}
    if commit_info.get("txnId") is not None:
        checksum["txnId"] = commit_info["txnId"]
    checksum.update({"tableSizeBytes": size, "numFiles": num_files, "numMetadata": 1, "numProtocol": 1})
    if _ict_enabled(metadata):
        ict = commit_info.get("inCommitTimestamp")
        if ict is None:
            return None
        checksum["inCommitTimestampOpt"] = int(ict)

    txns = [a["txn"] for a in actions if "txn" in a]
    if previous.get("setTransactions") is not None and not _txn_retention_set(previous.get("metadata"), metadata):
        by_app = {t["appId"]: SetTransaction.from_json(t) for t in previous["setTransactions"]}
        for t in txns:
            by_app[t["appId"]] = SetTransaction.from_json(t)
        checksum["setTransactions"] = [by_app[k].to_json() for k in sorted(by_app)]
    domains = [a["domainMetadata"] for a in actions if "domainMetadata" in a]
    if previous.get("domainMetadata") is not None:
        by_name = {d["domain"]: DomainMetadata.from_json(d) for d in previous["domainMetadata"]}
        for d in domains:
            dm = DomainMetadata.from_json(d)
            if dm.removed:
                by_name.pop(dm.domain, None)
            else:
                by_name[dm.domain] = dm
        checksum["domainMetadata"] = [by_name[k].to_json() for k in sorted(by_name)]
    checksum["metadata"] = metadata
    checksum["protocol"] = protocol

    column_dvs = [dv for c in columns for dv in c.remove_deletion_vectors()]
    rm_dvs = [r["deletionVector"] for r in removes if r.get("deletionVector")] + column_dvs
    if previous.get("numDeletionVectorsOpt") is not None and previous.get("numDeletedRecordsOpt") is not None:
        add_dvs = [a["deletionVector"] for a in adds if a.get("deletionVector")]
        checksum["numDeletionVectorsOpt"] = int(previous["numDeletionVectorsOpt"]) + len(add_dvs) - len(rm_dvs)
        checksum["numDeletedRecordsOpt"] = (
            int(previous["numDeletedRecordsOpt"])
            + sum(int(d.get("cardinality", 0)) for d in add_dvs)
            - sum(int(d.get("cardinality", 0)) for d in rm_dvs)
        )
    histogram = _updated_size_histogram(previous, adds, removed_sizes)
    if histogram is not None:
        checksum["fileSizeHistogram"] = histogram
    # A remove without a deletion vector counts in the histogram's first bin (0 rows deleted).
    removed_cardinalities = (
        [_cardinality(r) for r in removes]
        + [int(dv.get("cardinality", 0)) for dv in column_dvs]
        + [0] * (num_removes - len(removes) - len(column_dvs))
    )
    deleted_histogram = _updated_deleted_records_histogram(previous, adds, removed_cardinalities)
    if deleted_histogram is not None:
        checksum["deletedRecordCountsHistogramOpt"] = deleted_histogram
    return checksum


def _updated_size_histogram(
    previous: Mapping[str, Any], adds: Sequence[Mapping[str, Any]], removed_sizes: np.ndarray
) -> dict[str, list[int]] | None:
    old = previous.get("fileSizeHistogram") or previous.get("histogramOpt")
    if not isinstance(old, Mapping):
        return None
    try:
        boundaries = [int(b) for b in old["sortedBinBoundaries"]]
        counts = np.asarray(old["fileCounts"], dtype=np.int64)
        total = np.asarray(old["totalBytes"], dtype=np.int64)
    except (KeyError, TypeError, ValueError):
        return None
    if not boundaries or len(counts) != len(boundaries) or len(total) != len(boundaries):
        return None
    added = file_size_histogram([int(a["size"]) for a in adds], boundaries)
    removed = file_size_histogram(removed_sizes, boundaries)
    counts = counts + np.asarray(added["fileCounts"]) - np.asarray(removed["fileCounts"])
    total = total + np.asarray(added["totalBytes"]) - np.asarray(removed["totalBytes"])
    if (counts < 0).any() or (total < 0).any():
        return None
    return {"sortedBinBoundaries": boundaries, "fileCounts": counts.tolist(), "totalBytes": total.tolist()}


def _updated_deleted_records_histogram(
    previous: Mapping[str, Any], adds: Sequence[Mapping[str, Any]], removed_cardinalities: Sequence[int]
) -> dict[str, list[int]] | None:
    old = previous.get("deletedRecordCountsHistogramOpt")
    if not isinstance(old, Mapping) or len(old.get("deletedRecordCounts") or ()) != len(DELETED_RECORD_BIN_BOUNDARIES):
        return None
    counts = (
        np.asarray(old["deletedRecordCounts"], dtype=np.int64)
        + np.asarray(deleted_records_histogram([_cardinality(a) for a in adds])["deletedRecordCounts"])
        - np.asarray(deleted_records_histogram(removed_cardinalities)["deletedRecordCounts"])
    )
    if (counts < 0).any():
        return None
    return {"deletedRecordCounts": counts.tolist()}


def _cardinality(action: Mapping[str, Any]) -> int:
    """The rows the action's deletion vector deletes (0 without one)."""
    return int((action.get("deletionVector") or {}).get("cardinality", 0))


def _dv_key(action: Mapping[str, Any]) -> str | None:
    dv = action.get("deletionVector")
    if not dv:
        return None
    base = f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}"
    return f"{base}@{dv['offset']}" if dv.get("offset") is not None else base


def read_commit_json(io: FileIO, root: str, version: int) -> list[dict[str, Any]]:
    """One commit file's actions (a few lines; used when the caller did not pass them)."""
    path = f"{root}/_delta_log/{version:020d}.json"
    actions = []
    for number, line in enumerate(io.read_bytes(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            actions.append(log_json.loads(line))
        except ValueError as exc:
            raise CorruptCommitError(path, number, str(exc)) from exc
    return actions


def write_checksum_after_commit(
    io: FileIO,
    root: str,
    version: int,
    *,
    actions: Sequence[Mapping[str, Any]] | None = None,
    snapshot: Snapshot | None = None,
) -> dict[str, Any] | None:
    """Write the ``.crc`` of a just-committed ``version`` when it is cheap; returns what was written.

    Incremental from ``version - 1``'s ``.crc`` (or from nothing at version 0), else
    from ``snapshot`` if the caller already holds it at this version; otherwise skipped.
    """
    if io.exists(crc_path(root, version)):
        return None
    checksum = None
    previous = EMPTY_STATE if version == 0 else read_version_checksum(io, root, version - 1)
    if previous is not None:
        commit_actions = actions if actions is not None else read_commit_json(io, root, version)
        checksum = next_checksum(previous, commit_actions)
    if checksum is None and snapshot is not None and snapshot.version == version:
        checksum = checksum_from_snapshot(snapshot)
    if checksum is None:
        return None
    return checksum if write_version_checksum(io, root, version, checksum) else None


def validate_version_checksum(snapshot: Snapshot, checksum: Mapping[str, Any]) -> list[str]:
    """Fields where ``checksum`` disagrees with ``snapshot`` (empty when they agree)."""
    expected = checksum_from_snapshot(snapshot)
    problems = []
    for key in _REQUIRED:
        if key in ("metadata", "protocol"):
            same = _normalised(key, checksum.get(key)) == _normalised(key, expected[key])
        else:
            same = checksum.get(key) == expected[key]
        if not same:
            problems.append(f"{key}: recorded {checksum.get(key)!r}, computed {expected[key]!r}")
    for key in ("setTransactions", "domainMetadata"):
        if checksum.get(key) is not None and key in expected and _as_set(key, checksum[key]) != _as_set(key, expected[key]):
            problems.append(f"{key}: recorded {checksum[key]!r}, computed {expected[key]!r}")
    recorded = checksum.get("fileSizeHistogram") or checksum.get("histogramOpt")
    if isinstance(recorded, Mapping) and recorded.get("sortedBinBoundaries"):
        sizes = indices_to_numpy(combined(snapshot.add_actions.column("size")), 0)
        computed = file_size_histogram(sizes, [int(b) for b in recorded["sortedBinBoundaries"]])
        if dict(recorded) != computed:
            problems.append(f"fileSizeHistogram: recorded {dict(recorded)!r}, computed {computed!r}")
    return problems


def _normalised(key: str, value: Any) -> Any:
    if value is None:
        return None
    return Metadata.from_json(value) if key == "metadata" else Protocol.from_json(value)


def _as_set(key: str, values: Sequence[Mapping[str, Any]]) -> set[tuple[Any, ...]]:
    if key == "setTransactions":
        return {(v["appId"], int(v["version"])) for v in values}
    return {(v["domain"], v.get("configuration")) for v in values if not v.get("removed")}
