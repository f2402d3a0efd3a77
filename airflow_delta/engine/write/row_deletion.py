"""Deleting rows of live files through deletion vectors: what ``Transaction.delete_rows`` stages.

The row sets asked for are merged with each file's current DV; the new DVs are written
at once, and the ``remove``/``add`` pairs that swap them in are returned for the
transaction to stage (see :func:`stage_row_deletion`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import (
    CorruptDeletionVectorError,
    DeletionVectorsNotEnabledError,
    InvalidTransactionError,
    RowIndexOutOfRangeError,
)
from airflow_delta.engine.model.actions import AddFile, DeletionVectorDescriptor, Metadata, RemoveFile
from airflow_delta.engine.model.arrow_numpy import bool_scalar, combined, string_array
from airflow_delta.engine.model.deletion_vector_files import (
    DEFAULT_PACKING_TARGET_SIZE,
    dv_descriptor_from_struct,
    read_deletion_vectors,
    write_deletion_vectors,
)
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.model.roaring_bitmap import RoaringBitmapArray
from airflow_delta.engine.read.row_groups import physical_row_count, physical_row_counts
from airflow_delta.engine.read.snapshot import relative_paths
from airflow_delta.engine.storage.paths import decode_log_path, resolve_in_table
from airflow_delta.engine.storage.written_files import WrittenFiles
from airflow_delta.engine.write.file_removes import staged_removes

if TYPE_CHECKING:
    from airflow_delta.engine.model.roaring_bitmap import RoaringBitmapArray
    from airflow_delta.engine.read.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class RowDeletion:
    """What :meth:`Transaction.delete_rows` staged, counted as Delta's DELETE metrics count it.

    ``num_deleted_rows`` counts only rows that were not deleted before (the union of old
    and new deleted rows, minus the old). A file that lost its last row is removed
    (``removed_paths``, ``num_removed_files``/``num_removed_bytes``); a file that keeps
    rows gets a new DV: ``added`` when it had none, ``updated`` when it replaces one.
    ``num_deletion_vectors_removed`` counts the DVs of files removed outright.
    """

    num_deleted_rows: int = 0
    num_removed_files: int = 0
    num_removed_bytes: int = 0
    num_deletion_vectors_added: int = 0
    num_deletion_vectors_updated: int = 0
    num_deletion_vectors_removed: int = 0
    removed_paths: tuple[str, ...] = ()
    removes: tuple[RemoveFile, ...] = ()
    adds: tuple[AddFile, ...] = ()


def stage_row_deletion(
    snapshot: Snapshot,
    metadata: Metadata,
    deletes: Mapping[str, Any],
    *,
    table_uri: str,
    already_removed: Collection[str],
    deletion_timestamp: int | None,
    clock: Callable[[], int],
    target_dv_file_size: int | None = None,
    written: WrittenFiles | None = None,
) -> RowDeletion:
    """Write the new DVs for ``deletes`` and return the actions that swap them in (not staged yet).

    ``metadata`` is what the transaction commits against (its staged metadata, else the
    snapshot's); ``already_removed`` holds the decoded paths the transaction removes
    already; ``clock`` gives the deletion timestamp (ms) when ``deletion_timestamp`` is
    None. See :meth:`Transaction.delete_rows` for the rules and the errors raised.
    """

    props = TableProperties.from_configuration(metadata.configuration)
    if not props.enable_deletion_vectors:
        raise DeletionVectorsNotEnabledError(table_uri)
    if not deletes:
        return RowDeletion()
    files = live_files_by_path(snapshot, list(deletes))

    # One pass over the touched files: row sets, physical row counts, existing DVs.
    rows_list = files.to_pylist()
    for key, row in zip(files.column("key").to_pylist(), rows_list, strict=True):
        if decode_log_path(row["path"]) in already_removed:
            raise InvalidTransactionError(
                f"file {key!r} is already removed in this transaction; pass all of its rows to one "
                "delete_rows() call"
            )
    # Whether a file loses its last row is decided on the rows it stores (its footer), never on the
    # numRecords statistic: a statistic that says too few would remove rows nobody deleted.
    num_records = physical_row_counts(
        snapshot.io, [resolve_in_table(snapshot.table_root, row["path"]) for row in rows_list]
    )
    new_rows: list[RoaringBitmapArray] = []
    existing: list[DeletionVectorDescriptor | None] = []
    for key, row, records in zip(files.column("key").to_pylist(), rows_list, num_records, strict=True):
        bitmap = RoaringBitmapArray.from_indices(deletes[key])
        if bitmap and bitmap.max >= records:  # type: ignore[operator]
            raise RowIndexOutOfRangeError(key, int(bitmap.max), records)  # type: ignore[arg-type]
        dv = row.get("deletion_vector")
        existing.append(dv_descriptor_from_struct(dv) if dv and dv.get("storageType") else None)
        new_rows.append(bitmap)
    old_rows = read_deletion_vectors(snapshot.io, snapshot.table_root, existing)
    for key, old, records in zip(files.column("key").to_pylist(), old_rows, num_records, strict=True):
        if old and old.max >= records:  # type: ignore[operator]
            raise CorruptDeletionVectorError(
                f"the deletion vector of {key!r}",
                f"deletes row {old.max}, but the data file stores only {records} rows; the log is corrupt",
            )

    ts = deletion_timestamp if deletion_timestamp is not None else clock()
    removes = staged_removes(files.drop_columns(["key"]), metadata, ts, data_change=True)
    removed: list[RemoveFile] = []
    removed_paths: list[str] = []
    to_write: list[tuple[int, RoaringBitmapArray]] = []
    deleted_rows = removed_bytes = dvs_removed = 0
    for i, (new, old) in enumerate(zip(new_rows, old_rows, strict=True)):
        old = old if old is not None else RoaringBitmapArray()
        merged = old.union(new)
        added = merged.cardinality - old.cardinality
        if added == 0:
            continue  # every row was deleted already: leave the file as it is
        deleted_rows += added
        removed.append(removes[i])
        if merged.cardinality >= num_records[i]:
            removed_bytes += int(rows_list[i].get("size") or 0)
            dvs_removed += existing[i] is not None
            removed_paths.append(decode_log_path(rows_list[i]["path"]))
        else:
            to_write.append((i, merged))
    descriptors = write_deletion_vectors(
        snapshot.io,
        snapshot.table_root,
        [merged for _, merged in to_write],
        random_prefix_length=props.random_prefix_length if props.randomize_file_prefixes else 0,
        target_file_size=target_dv_file_size or DEFAULT_PACKING_TARGET_SIZE,
        written=written,
    ) if to_write else []
    staged_adds: list[AddFile] = []
    for (i, _), descriptor in zip(to_write, descriptors, strict=True):
        row = rows_list[i]
        tags = row.get("tags")
        staged_adds.append(
            AddFile(
                path=row["path"],
                partition_values=removes[i].partition_values or {},
                size=int(row["size"]),
                modification_time=int(row["modification_time"]),
                data_change=True,
                stats=_stats_with_wide_bounds(row.get("stats"), num_records[i]),
                tags=dict(tags) if tags else None,
                deletion_vector=descriptor,
                base_row_id=row.get("base_row_id"),
                default_row_commit_version=row.get("default_row_commit_version"),
                clustering_provider=row.get("clustering_provider"),
            )
        )
    updated = sum(existing[i] is not None for i, _ in to_write)
    return RowDeletion(
        num_deleted_rows=deleted_rows,
        num_removed_files=len(removed_paths),
        num_removed_bytes=removed_bytes,
        num_deletion_vectors_added=len(to_write) - updated,
        num_deletion_vectors_updated=updated,
        num_deletion_vectors_removed=dvs_removed,
        removed_paths=tuple(removed_paths),
        removes=tuple(removed),
        adds=tuple(staged_adds),
    )


def live_files_by_path(snapshot: Snapshot, keys: Sequence[str]) -> pa.Table:
    """The live files (``FILE_ACTIONS_SCHEMA``) named by ``keys``, plus a ``key`` column: the caller's name for each.

    A key may be the log path (URI-encoded, as :meth:`Transaction.read_files` returns
    it) or the decoded path relative to the root (as ``snapshot.files()`` returns it).
    """

    live: pa.Table = snapshot.add_actions
    wanted = string_array(list(keys))
    log_paths = combined(live.column("path"))
    relative = relative_paths(snapshot.table_root, log_paths)
    by_log = pc.fill_null(pc.is_in(log_paths, value_set=wanted), bool_scalar(False))
    by_relative = pc.fill_null(pc.is_in(relative, value_set=wanted), bool_scalar(False))
    mask = pc.or_(by_log, by_relative)
    found = live.filter(mask)
    found_log = log_paths.filter(mask).to_pylist()
    found_relative = relative.filter(mask).to_pylist()
    names = set(keys)
    key_of: list[str] = []
    seen: set[str] = set()
    for log_path, rel in zip(found_log, found_relative, strict=True):
        key = log_path if log_path in names else rel
        if key in seen:
            raise InvalidTransactionError(f"{key!r} names more than one live file; pass log paths instead")
        seen.add(key)
        key_of.append(key)
    missing = [k for k in keys if k not in seen]
    if missing:
        raise InvalidTransactionError(
            f"{missing[0]!r} is not a live file of version {snapshot.version}"
            + (f" ({len(missing) - 1} more are not either)" if len(missing) > 1 else "")
            + "; use the paths snapshot.files() or Transaction.read_files() return"
        )
    return found.append_column("key", string_array(key_of))


def num_records_of(snapshot: Snapshot, row: Mapping[str, Any]) -> int:
    """The data file's physical row count, from its parquet footer (the ``numRecords`` statistic may lie)."""
    return physical_row_count(snapshot.io, resolve_in_table(snapshot.table_root, row["path"]))


def _stats_with_wide_bounds(stats: str | None, num_records: int) -> str:
    """Statistics of a file that just got a DV: unchanged, but ``tightBounds: false`` and ``numRecords`` exact.

    Rows the DV hides may hold the min/max values, so the bounds are only wide bounds
    now (spec, Per-file Statistics). ``numRecords`` must be there for any file with a DV
    and be the physical row count: it is set to ``num_records`` (the footer's), so that
    readers computing live rows as numRecords minus the DV's cardinality get them right
    even when the old statistic lied. Every other value keeps its exact JSON text
    (re-encoding would turn a 38-digit decimal bound into a float).
    """
    try:
        fields = _top_level_json_fields(stats) if stats else []
    except (ValueError, IndexError) as exc:
        raise InvalidTransactionError(f"file statistics are not valid JSON ({exc}): {stats[:80]!r}") from exc
    fields = [("numRecords", str(int(num_records)))] + [
        (k, v) for k, v in fields if k not in ("numRecords", "tightBounds")
    ] + [("tightBounds", "false")]
    return "{" + ",".join(f"{json_text(k)}:{v}" for k, v in fields) + "}"


def _top_level_json_fields(text: str) -> list[tuple[str, str]]:
    """``(key, raw value text)`` of each member of a JSON object, in order."""
    decoder = json.JSONDecoder()
    ws = " \t\n\r"
    pos = len(text) - len(text.lstrip(ws))
    if text[pos : pos + 1] != "{":
        raise InvalidTransactionError(f"file statistics are not a JSON object: {text[:80]!r}")
    pos += 1
    out: list[tuple[str, str]] = []
    while True:
        while pos < len(text) and text[pos] in ws:
            pos += 1
        if text[pos : pos + 1] == "}":
            return out
        key, pos = decoder.raw_decode(text, pos)
        while text[pos] in ws:
            pos += 1
        if text[pos] != ":":
            raise InvalidTransactionError(f"file statistics are not valid JSON: {text[:80]!r}")
        pos += 1
        while text[pos] in ws:
            pos += 1
        _, end = decoder.raw_decode(text, pos)
        out.append((str(key), text[pos:end]))
        pos = end
        while text[pos] in ws:
            pos += 1
        if text[pos] == ",":
            pos += 1
        elif text[pos] != "}":
            raise InvalidTransactionError(f"file statistics are not valid JSON: {text[:80]!r}")


__all__ = ["RowDeletion", "live_files_by_path", "num_records_of", "stage_row_deletion"]
