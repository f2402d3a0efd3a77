"""Deletion vector files and descriptors: where a DV's bytes live, reading and writing them.

Descriptors in ``add``/``remove`` actions say where the serialized
:class:`~airflow_delta.engine.model.roaring_bitmap.RoaringBitmapArray` is:

* ``u``: in ``<root>/<random prefix>/deletion_vector_<uuid>.bin``; ``pathOrInlineDv`` is the
  prefix followed by the UUID in 20 Z85 characters;
* ``i``: inline, ``pathOrInlineDv`` is the Z85 of the serialized bitmap;
* ``p``: in the file at an absolute (URL-encoded) URI.

A DV file is a format-version byte (1), then per DV: its size (4 bytes, big-endian), the
serialized bitmap, and the CRC-32 of the bitmap (4 bytes, big-endian). A descriptor's
``offset`` points at the size field, and ``sizeInBytes`` counts only the bitmap. DV files are
framed as Spark frames them, and packed as Spark packs them (:func:`write_deletion_vectors`);
reads check each DV's CRC and its cardinality against the descriptor.
"""

from __future__ import annotations

import posixpath
import random
import string
import struct
import uuid
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa

from airflow_delta.engine.errors import (
    ChecksumMismatchError,
    CorruptDeletionVectorError,
    InvalidZ85Error,
    UnsupportedFeatureError,
)
from airflow_delta.engine.model.actions import DeletionVectorDescriptor
from airflow_delta.engine.model.roaring_bitmap import RoaringBitmapArray, RowIndexes
from airflow_delta.engine.model.z85 import ENCODED_UUID_LENGTH, decode_uuid, encode_uuid, z85_decode, z85_encode
from airflow_delta.engine.storage.fileio import FileIO
from airflow_delta.engine.storage.paths import encode_log_path, resolve_in_table
from airflow_delta.engine.storage.written_files import WrittenFiles

__all__ = [
    "DEFAULT_PACKING_TARGET_SIZE",
    "DV_FILE_FORMAT_VERSION",
    "decode_dv_file",
    "dv_absolute_path",
    "dv_descriptor_from_struct",
    "dv_descriptors_from_arrow",
    "dv_file_name",
    "dv_relative_path",
    "encode_dv_file",
    "inline_deletion_vector",
    "merge_deletion_vector",
    "read_deletion_vector",
    "read_deletion_vectors",
    "split_uuid_path",
    "write_deletion_vector",
    "write_deletion_vectors",
]

DV_FILE_FORMAT_VERSION = 1
# Spark's default for spark.databricks.delta.deletionVectors.packing.targetSize (2 MiB).
DEFAULT_PACKING_TARGET_SIZE = 2 * 1024 * 1024

_SIZE_FIELD = 4
_CHECKSUM_FIELD = 4
_DV_FILE_PREFIX = "deletion_vector_"
_RANDOM_PREFIX_CHARS = string.ascii_letters + string.digits  # Scala's Random.alphanumeric


# ------------------------------------------------------------ descriptors, paths


def dv_descriptor_from_struct(row: Mapping[str, Any]) -> DeletionVectorDescriptor:
    """A descriptor from a ``deletionVector`` struct (Arrow row as dict, or the JSON object)."""
    try:
        offset = row.get("offset")
        return DeletionVectorDescriptor(
            storage_type=str(row["storageType"]),
            path_or_inline_dv=str(row["pathOrInlineDv"]),
            size_in_bytes=int(row["sizeInBytes"]),
            cardinality=int(row["cardinality"]),
            offset=int(offset) if offset is not None else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptDeletionVectorError(f"descriptor {dict(row)!r}", f"missing or invalid field: {exc}") from exc


def dv_descriptors_from_arrow(column: pa.Array | pa.ChunkedArray) -> list[DeletionVectorDescriptor | None]:
    """Descriptors of a ``deletion_vector`` struct column (None where the file has no DV)."""
    return [dv_descriptor_from_struct(row) if row is not None else None for row in column.to_pylist()]


def split_uuid_path(path_or_inline_dv: str) -> tuple[str, uuid.UUID]:
    """``(random prefix, uuid)`` of a ``u`` descriptor's ``pathOrInlineDv``."""
    if len(path_or_inline_dv) < ENCODED_UUID_LENGTH:
        raise CorruptDeletionVectorError(
            f"descriptor u{path_or_inline_dv}", f"needs at least {ENCODED_UUID_LENGTH} characters (the encoded UUID)"
        )
    cut = len(path_or_inline_dv) - ENCODED_UUID_LENGTH
    try:
        return path_or_inline_dv[:cut], decode_uuid(path_or_inline_dv[cut:])
    except InvalidZ85Error as exc:
        raise CorruptDeletionVectorError(f"descriptor u{path_or_inline_dv}", str(exc)) from exc


def dv_file_name(file_id: uuid.UUID) -> str:
    return f"{_DV_FILE_PREFIX}{file_id}.bin"


def dv_relative_path(dv: DeletionVectorDescriptor) -> str:
    """Path of a ``u`` DV's file relative to the table root: ``[<prefix>/]deletion_vector_<uuid>.bin``."""
    if dv.storage_type != "u":
        raise ValueError(f"only 'u' deletion vectors have a table-relative path, not {dv.storage_type!r}")
    prefix, file_id = split_uuid_path(dv.path_or_inline_dv)
    return posixpath.join(prefix, dv_file_name(file_id)) if prefix else dv_file_name(file_id)


def dv_absolute_path(root: str, dv: DeletionVectorDescriptor) -> str:
    """Storage path (FileIO form) of an on-disk DV, refusing any that lies outside ``root``."""
    if dv.storage_type == "u":
        # The prefix is literal text, not URL-encoded: escape it so resolve_in_table's decoding is a no-op.
        return resolve_in_table(root, encode_log_path(dv_relative_path(dv)))
    if dv.storage_type == "p":
        if not (dv.path_or_inline_dv.startswith("/") or urlsplit(dv.path_or_inline_dv).scheme):
            raise CorruptDeletionVectorError(f"descriptor {dv.unique_id}", "a 'p' deletion vector needs an absolute path")
        return resolve_in_table(root, dv.path_or_inline_dv)
    if dv.storage_type == "i":
        raise ValueError("an inline deletion vector has no file")
    raise UnsupportedFeatureError([f"deletion vector storage type {dv.storage_type!r}"], access="read")


# ------------------------------------------------------------------ reading


def _validate_descriptor(dv: DeletionVectorDescriptor) -> None:
    if dv.storage_type not in ("u", "i", "p"):
        raise UnsupportedFeatureError([f"deletion vector storage type {dv.storage_type!r}"], access="read")
    if dv.size_in_bytes < 0 or dv.cardinality < 0 or (dv.offset is not None and dv.offset < 0):
        raise CorruptDeletionVectorError(_describe(dv), "negative size, cardinality or offset")


def _describe(dv: DeletionVectorDescriptor) -> str:
    if dv.storage_type == "i":
        return f"inline descriptor (cardinality {dv.cardinality}, {dv.size_in_bytes} bytes)"
    return f"descriptor {dv.unique_id}"


def _check_rows(bitmap: RoaringBitmapArray, dv: DeletionVectorDescriptor, source: str, num_records: int | None) -> None:
    if bitmap.cardinality != dv.cardinality:
        raise CorruptDeletionVectorError(
            source, f"holds {bitmap.cardinality} rows but its descriptor says cardinality {dv.cardinality}"
        )
    if num_records is not None and bitmap and bitmap.max >= num_records:  # type: ignore[operator]
        raise CorruptDeletionVectorError(
            source, f"deletes row {bitmap.max}, but the data file has only {num_records} records"
        )


def _frame_payload(blob: bytes, blob_start: int, dv: DeletionVectorDescriptor, path: str) -> bytes:
    """The bitmap bytes of the DV at ``dv.offset`` in a DV file, of which ``blob`` holds bytes from ``blob_start``."""
    offset = dv.offset if dv.offset is not None else 0
    source = f"{path} (offset {offset})"
    if blob_start == 0 and blob[:1] != bytes([DV_FILE_FORMAT_VERSION]):
        found = blob[0] if blob else "nothing"
        raise CorruptDeletionVectorError(path, f"file format version is {found}, expected {DV_FILE_FORMAT_VERSION}")
    at = offset - blob_start
    end = at + _SIZE_FIELD + dv.size_in_bytes + _CHECKSUM_FIELD
    if end > len(blob):
        raise CorruptDeletionVectorError(
            source, f"truncated: the DV needs bytes up to {offset + end - at}, the file has {blob_start + len(blob)}"
        )
    (size,) = struct.unpack_from(">i", blob, at)
    if size != dv.size_in_bytes:
        raise CorruptDeletionVectorError(source, f"stored size {size} differs from the descriptor's sizeInBytes {dv.size_in_bytes}")
    payload = blob[at + _SIZE_FIELD : at + _SIZE_FIELD + size]
    (expected,) = struct.unpack_from(">I", blob, at + _SIZE_FIELD + size)
    actual = zlib.crc32(payload)
    if expected != actual:
        raise ChecksumMismatchError(source, f"CRC-32 {expected:#010x}", f"{actual:#010x}")
    return payload


def _read_file(io: FileIO, path: str, start: int | None = None, length: int | None = None) -> bytes:
    try:
        if start is None or length is None:
            return io.read_bytes(path)
        return io.read_range(path, start, length)
    except FileNotFoundError as exc:
        raise CorruptDeletionVectorError(path, "the deletion vector file does not exist") from exc
    except OSError:
        if io.is_dir(path):
            raise CorruptDeletionVectorError(
                path, "the deletion vector path is a directory, not a file; the DV descriptor in the log names the wrong path"
            ) from None
        raise


def _decode_inline(dv: DeletionVectorDescriptor, num_records: int | None) -> RoaringBitmapArray:
    source = _describe(dv)
    try:
        data = z85_decode(dv.path_or_inline_dv, dv.size_in_bytes)
    except InvalidZ85Error as exc:
        raise CorruptDeletionVectorError(source, str(exc)) from exc
    bitmap = RoaringBitmapArray.deserialize(data, source)
    _check_rows(bitmap, dv, source, num_records)
    return bitmap


def read_deletion_vector(
    io: FileIO, root: str, dv: DeletionVectorDescriptor, *, num_records: int | None = None
) -> RoaringBitmapArray:
    """The deleted rows ``dv`` describes, checked against its CRC and cardinality.

    ``num_records`` (the rows the data file stores: its parquet footer's count, not the ``numRecords``
    statistic, which may lie), when given, must exceed every deleted row.
    """
    _validate_descriptor(dv)
    if dv.cardinality == 0:  # Delta's EMPTY descriptor: inline, "", 0 bytes
        return RoaringBitmapArray()
    if dv.storage_type == "i":
        return _decode_inline(dv, num_records)
    path = dv_absolute_path(root, dv)
    offset = dv.offset if dv.offset is not None else 0
    frame = _SIZE_FIELD + dv.size_in_bytes + _CHECKSUM_FIELD
    # Spark's first DV in a file sits right after the version byte: read that byte too and check it.
    start = 0 if offset == 1 else offset
    blob = _read_file(io, path, start, offset - start + frame)
    payload = _frame_payload(blob, start, dv, path)
    source = f"{path} (offset {offset})"
    bitmap = RoaringBitmapArray.deserialize(payload, source)
    _check_rows(bitmap, dv, source, num_records)
    return bitmap


def read_deletion_vectors(
    io: FileIO, root: str, dvs: Sequence[DeletionVectorDescriptor | None], *, max_workers: int = 8
) -> list[RoaringBitmapArray | None]:
    """:func:`read_deletion_vector` for many descriptors, reading each DV file once.

    Spark packs the DVs of many data files into one file; a scan over those files should not
    open it once per data file. Distinct files are fetched by up to ``max_workers`` threads
    (object stores are latency-bound). Entries that are None stay None.
    """
    result: list[RoaringBitmapArray | None] = [None] * len(dvs)
    by_file: dict[str, list[int]] = {}
    for i, dv in enumerate(dvs):
        if dv is None:
            continue
        _validate_descriptor(dv)
        if dv.cardinality == 0:
            result[i] = RoaringBitmapArray()
        elif dv.storage_type == "i":
            result[i] = _decode_inline(dv, None)
        else:
            by_file.setdefault(dv_absolute_path(root, dv), []).append(i)

    def load(path: str) -> list[RoaringBitmapArray]:
        positions = by_file[path]
        if len(positions) == 1:  # a range read of just this DV
            return [read_deletion_vector(io, root, dvs[positions[0]])]  # type: ignore[arg-type]
        blob = _read_file(io, path)
        decoded: dict[tuple[int | None, int, int], RoaringBitmapArray] = {}
        out = []
        for i in positions:
            dv = dvs[i]
            assert dv is not None
            key = (dv.offset, dv.size_in_bytes, dv.cardinality)
            if key not in decoded:
                source = f"{path} (offset {dv.offset or 0})"
                bitmap = RoaringBitmapArray.deserialize(_frame_payload(blob, 0, dv, path), source)
                _check_rows(bitmap, dv, source, None)
                decoded[key] = bitmap
            out.append(decoded[key])
        return out

    paths = list(by_file)
    if len(paths) > 1 and max_workers > 1:
        with ThreadPoolExecutor(max_workers=min(max_workers, len(paths))) as pool:
            loaded = list(pool.map(load, paths))
    else:
        loaded = [load(path) for path in paths]
    for path, bitmaps in zip(paths, loaded, strict=True):
        for i, bitmap in zip(by_file[path], bitmaps, strict=True):
            result[i] = bitmap
    return result


def decode_dv_file(data: bytes, source: str = "<deletion vector file>") -> list[tuple[int, RoaringBitmapArray]]:
    """Every DV in a DV file as ``(offset, bitmap)``, walking the frames from the version byte on."""
    if data[:1] != bytes([DV_FILE_FORMAT_VERSION]):
        raise CorruptDeletionVectorError(source, f"file format version is {data[:1]!r}, expected {DV_FILE_FORMAT_VERSION}")
    out: list[tuple[int, RoaringBitmapArray]] = []
    pos = 1
    while pos < len(data):
        if pos + _SIZE_FIELD > len(data):
            raise CorruptDeletionVectorError(source, f"truncated size field at byte {pos}")
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 0:
            raise CorruptDeletionVectorError(source, f"negative DV size {size} at byte {pos}")
        probe = DeletionVectorDescriptor("u", "", size, 0, pos)
        payload = _frame_payload(data, 0, probe, source)
        out.append((pos, RoaringBitmapArray.deserialize(payload, f"{source} (offset {pos})")))
        pos += _SIZE_FIELD + size + _CHECKSUM_FIELD
    return out


# ------------------------------------------------------------------ writing


def encode_dv_file(payloads: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """A DV file holding ``payloads`` (serialized bitmaps) and the offset of each one's size field."""
    parts = [bytes([DV_FILE_FORMAT_VERSION])]
    offsets = []
    pos = 1
    for payload in payloads:
        if pos + _SIZE_FIELD + len(payload) > 2**31 - 1:
            # Descriptors hold offset and sizeInBytes as 32-bit ints.
            raise ValueError("deletion vectors beyond 2 GiB cannot be addressed; write them into several files")
        offsets.append(pos)
        parts.append(struct.pack(">i", len(payload)))
        parts.append(payload)
        parts.append(struct.pack(">I", zlib.crc32(payload)))
        pos += _SIZE_FIELD + len(payload) + _CHECKSUM_FIELD
    return b"".join(parts), offsets


def inline_deletion_vector(rows: RowIndexes) -> DeletionVectorDescriptor:
    """An ``i`` descriptor carrying ``rows`` in the log itself (for small DVs)."""
    bitmap = _non_empty(rows)
    payload = bitmap.serialize()
    return DeletionVectorDescriptor("i", z85_encode(payload), len(payload), bitmap.cardinality)


def _non_empty(rows: RowIndexes, num_records: int | None = None) -> RoaringBitmapArray:
    bitmap = RoaringBitmapArray.from_indices(rows)
    if not bitmap:
        raise ValueError("no rows to delete: leave the file without a deletion vector (or with its current one)")
    if num_records is not None and bitmap.max >= num_records:  # type: ignore[operator]
        raise ValueError(f"row {bitmap.max} cannot be deleted: the data file has {num_records} records")
    return bitmap


def _random_prefix(length: int) -> str:
    if length < 0:
        raise ValueError(f"random_prefix_length must be >= 0, got {length}")
    return "".join(random.choices(_RANDOM_PREFIX_CHARS, k=length))


def _write_dv_file(
    io: FileIO, root: str, payloads: Sequence[bytes], random_prefix_length: int, written: WrittenFiles | None
) -> tuple[str, list[int]]:
    """Write one new UUID-named DV file; returns its ``pathOrInlineDv`` and the offset of each payload."""
    prefix = _random_prefix(random_prefix_length)
    file_id = uuid.uuid4()
    encoded = prefix + encode_uuid(file_id)
    relative = posixpath.join(prefix, dv_file_name(file_id)) if prefix else dv_file_name(file_id)
    path = resolve_in_table(root, encode_log_path(relative))
    data, offsets = encode_dv_file(payloads)
    if written is not None:
        written.record(path)
    io.write_bytes(path, data)
    return encoded, offsets


def write_deletion_vector(
    io: FileIO,
    root: str,
    rows: RowIndexes,
    *,
    random_prefix_length: int = 0,
    inline: bool = False,
    num_records: int | None = None,
    written: WrittenFiles | None = None,
) -> DeletionVectorDescriptor:
    """Store ``rows`` as a new DV and return its descriptor.

    By default a new ``deletion_vector_<uuid>.bin`` file (storage type ``u``, offset 1) under
    ``root``, inside a random alphanumeric directory of ``random_prefix_length`` characters
    when that is non-zero (Delta does this when ``delta.randomizeFilePrefixes`` is set).
    ``inline=True`` puts the bitmap into the descriptor instead (``i``). Empty ``rows`` are
    refused: a file with nothing deleted carries no DV.
    """
    bitmap = _non_empty(rows, num_records)
    if inline:
        return inline_deletion_vector(bitmap)
    payload = bitmap.serialize()
    encoded, offsets = _write_dv_file(io, root, [payload], random_prefix_length, written)
    return DeletionVectorDescriptor("u", encoded, len(payload), bitmap.cardinality, offsets[0])


def write_deletion_vectors(
    io: FileIO,
    root: str,
    row_sets: Sequence[RowIndexes],
    *,
    random_prefix_length: int = 0,
    target_file_size: int = DEFAULT_PACKING_TARGET_SIZE,
    written: WrittenFiles | None = None,
) -> list[DeletionVectorDescriptor]:
    """Store several DVs, packed into as few files as ``target_file_size`` allows (as Spark does).

    Returns one descriptor per entry of ``row_sets``, in order; DVs sharing a file differ in
    ``offset``. A DV larger than the target gets a file of its own. If writing fails, the
    DV files written so far are removed; ``written`` records them for the caller.
    """
    files = written if written is not None else WrittenFiles(io)
    with files.removed_on_failure():
        return _write_packed(io, root, row_sets, random_prefix_length, target_file_size, files)


def _write_packed(
    io: FileIO,
    root: str,
    row_sets: Sequence[RowIndexes],
    random_prefix_length: int,
    target_file_size: int,
    written: WrittenFiles,
) -> list[DeletionVectorDescriptor]:
    bitmaps = [_non_empty(rows) for rows in row_sets]
    payloads = [b.serialize() for b in bitmaps]
    descriptors: list[DeletionVectorDescriptor] = []
    start = 0
    while start < len(payloads):
        # Fill a bin up to the target size; a bin always takes at least one DV.
        end, size = start + 1, 1 + len(payloads[start]) + _SIZE_FIELD + _CHECKSUM_FIELD
        while end < len(payloads) and size + len(payloads[end]) + _SIZE_FIELD + _CHECKSUM_FIELD <= target_file_size:
            size += len(payloads[end]) + _SIZE_FIELD + _CHECKSUM_FIELD
            end += 1
        encoded, offsets = _write_dv_file(io, root, payloads[start:end], random_prefix_length, written)
        for bitmap, payload, offset in zip(bitmaps[start:end], payloads[start:end], offsets, strict=True):
            descriptors.append(DeletionVectorDescriptor("u", encoded, len(payload), bitmap.cardinality, offset))
        start = end
    return descriptors


def merge_deletion_vector(
    io: FileIO,
    root: str,
    existing: DeletionVectorDescriptor | None,
    new_rows: RowIndexes,
    *,
    random_prefix_length: int = 0,
    inline: bool = False,
    num_records: int | None = None,
) -> tuple[RoaringBitmapArray, DeletionVectorDescriptor]:
    """The DV that replaces ``existing`` on a file once ``new_rows`` are deleted too.

    Returns the union of old and new deleted rows and the descriptor of a newly written DV for
    it; the transaction then removes ``(path, existing)`` and adds ``(path, new descriptor)``.
    When every new row was already deleted, nothing is written and ``existing`` is returned
    unchanged (callers can skip the remove/add pair).
    """
    old = read_deletion_vector(io, root, existing, num_records=num_records) if existing is not None else RoaringBitmapArray()
    added = RoaringBitmapArray.from_indices(new_rows)
    merged = old.union(added)
    if existing is not None and merged.cardinality == old.cardinality:
        return old, existing
    descriptor = write_deletion_vector(
        io, root, merged, random_prefix_length=random_prefix_length, inline=inline, num_records=num_records
    )
    return merged, descriptor
