"""Independent readers that decide what a table holds: delta-rs and delta-kernel-rs.

Tests compare our engine's results with these, never with our own code. Both return the
table's rows as a list of dicts sorted by every column, so two readers can be compared
with ``==`` whatever order they return files in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa


def _sort(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: [(value is None, repr(value)) for value in row.values()])


def _sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return _sort(table.to_pylist())


def _file_uri(path: str | Path) -> str:
    return Path(path).resolve().as_uri() + "/"


def read_with_deltars(
    path: str | Path, version: int | None = None, storage_options: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The rows delta-rs (``deltalake``) reads, deletion vectors applied.

    Through delta-rs's query engine: its ``to_pyarrow_table`` refuses tables with DVs.
    ``storage_options`` (delta-rs's keys) for a table on an object store.
    """
    import deltalake

    table = deltalake.DeltaTable(str(path), version=version, storage_options=storage_options)
    reader = deltalake.QueryBuilder().register("t", table).execute("SELECT * FROM t")
    return _sorted_rows(pa.table(reader.read_all()))


def read_with_kernel(path: str | Path) -> list[dict[str, Any]]:
    """The rows delta-kernel-rs reads (PyPI ``delta-kernel-rust-sharing-wrapper``), DVs applied."""
    import delta_kernel_rust_sharing_wrapper as kernel

    uri = _file_uri(path)
    engine = kernel.PythonInterface(uri)
    snapshot = kernel.Table(uri).snapshot(engine)
    reader = kernel.ScanBuilder(snapshot).build().execute(engine)
    return _sorted_rows(reader.read_all())


def kernel_version(path: str | Path) -> int:
    """The latest version delta-kernel-rs sees."""
    import delta_kernel_rust_sharing_wrapper as kernel

    uri = _file_uri(path)
    return kernel.Table(uri).snapshot(kernel.PythonInterface(uri)).version()


def assert_oracles_read(path: str | Path, expected_rows: list[dict[str, Any]]) -> None:
    """Both independent readers read exactly ``expected_rows`` (order ignored)."""
    expected = _sort(expected_rows)
    assert read_with_deltars(path) == expected, "delta-rs reads other rows"
    assert read_with_kernel(path) == expected, "delta-kernel-rs reads other rows"
