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


def read_change_feed_with_deltars(path: str | Path, version: int) -> list[dict[str, Any]]:
    """The change feed delta-rs reads for one commit (``load_cdf``), without its commit columns.

    delta-rs 1.6 refuses change data of column-mapped tables: use :func:`read_change_files`.
    """
    import deltalake

    reader = deltalake.DeltaTable(str(path)).load_cdf(starting_version=version, ending_version=version)
    table = pa.table(reader.read_all())
    return _sorted_rows(table.drop_columns(["_commit_version", "_commit_timestamp"]))


def read_change_files(path: str | Path, version: int) -> list[dict[str, Any]]:
    """The rows of one commit's ``cdc`` files read as plain parquet, following PROTOCOL.md alone.

    Physical column names become logical ones by the schema's
    ``delta.columnMapping.physicalName``; partition values come from the action (as the
    log's strings: the tests that use this have string partition columns).
    """
    import json
    from urllib.parse import unquote

    import pyarrow.parquet as pq

    log = Path(path) / "_delta_log"
    schema: dict[str, Any] = {}
    for commit in sorted(log.glob("*.json")):
        if int(commit.stem) > version:
            break
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "metaData" in action:
                schema = json.loads(action["metaData"]["schemaString"])
    logical = {
        (f.get("metadata") or {}).get("delta.columnMapping.physicalName", f["name"]): f["name"] for f in schema["fields"]
    }
    rows: list[dict[str, Any]] = []
    for line in (log / f"{version:020d}.json").read_text().splitlines():
        cdc = json.loads(line).get("cdc")
        if cdc is None:
            continue
        data = pq.read_table(Path(path) / unquote(cdc["path"]))
        partition = {logical[k]: v for k, v in cdc["partitionValues"].items()}
        for row in data.to_pylist():
            rows.append({logical.get(k, k): v for k, v in row.items()} | partition)
    order = [f["name"] for f in schema["fields"]] + ["_change_type"]
    return _sort([{name: row[name] for name in order} for row in rows])
