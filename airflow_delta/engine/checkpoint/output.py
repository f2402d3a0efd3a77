"""Writing checkpoint files so that no reader ever sees an incomplete one, and what was written."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta.engine.storage.fileio import FileIO


@contextmanager
def atomic_file(io: FileIO, path: str) -> Iterator[Any]:
    """A writable file that appears at ``path`` only once complete (see :meth:`FileIO.atomic_output`).

    Local storage: a hidden ``.<name>.<uuid>.tmp`` beside the target, fsynced and renamed
    (readers ignore the hidden name, so a crash leaves nothing they would pick up; a
    temporary file deleted meanwhile is an :class:`AtomicWriteError`), created inside the
    table's real root only. Other storage: buffered in memory and uploaded in
    one request on success, because a stream closed after a failure would publish a
    truncated object.
    """
    with io.atomic_output(path) as out:
        yield out


@dataclass
class WrittenFile:
    path: str
    size: int
    modification_time: int
    rows: int


def write_parquet(
    io: FileIO, path: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch], *, batch_rows: int
) -> WrittenFile:
    """Write ``batches`` to ``path`` atomically, ``batch_rows`` rows per row group at most."""
    rows = 0
    # An empty part still gets a valid file: the writer writes schema and footer on close.
    with atomic_file(io, path) as out, pq.ParquetWriter(
        out, schema, compression="snappy", write_statistics=False
    ) as writer:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            writer.write_batch(batch, row_group_size=batch_rows)
            rows += batch.num_rows
    info = io.info(path)
    size = info.size if info is not None else 0
    mtime = info.modification_time if info is not None else int(time.time() * 1000)
    return WrittenFile(path, size, mtime, rows)


@dataclass(frozen=True)
class CheckpointResult:
    """What one checkpoint write produced; ``last_checkpoint`` is the ``_last_checkpoint`` body."""

    version: int
    kind: str  # "classic", "multi-part" or "v2"
    files: tuple[str, ...]
    sidecars: tuple[str, ...] = ()
    last_checkpoint: Mapping[str, Any] = field(default_factory=dict)


def chain_batches(*iterables: Any) -> Iterator[pa.RecordBatch]:
    """The batches of each iterable in turn (lazily, so nothing is held twice)."""
    for iterable in iterables:
        yield from iterable
