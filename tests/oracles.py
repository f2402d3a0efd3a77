"""Independent readers that decide what a table holds: delta-rs and delta-kernel-rs.

Tests compare our engine's results with these, never with our own code. Both return the
table's rows as a list of dicts sorted by every column, so two readers can be compared
with ``==`` whatever order they return files in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


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


# Row tracking has no independent reader among delta-rs and delta-kernel-rs: this one follows
# PROTOCOL.md's reader requirements alone (JSON commits replayed, files read with pyarrow).


def _commits(path: str | Path) -> list[tuple[int, list[dict[str, Any]]]]:
    log = Path(path) / "_delta_log"
    out = []
    for file in sorted(log.glob("*.json")):
        out.append((int(file.name.split(".")[0]), [json.loads(line) for line in file.read_text().splitlines() if line]))
    return out


def reference_row_tracking(path: str | Path) -> dict[int, tuple[int, int]]:
    """``id`` -> (stable row ID, stable row commit version) of every live row, from the log and files alone.

    Tables without deletion vectors: live files are the adds not removed since.
    """
    live: dict[str, dict[str, Any]] = {}
    configuration: dict[str, str] = {}
    for _version, actions in _commits(path):
        for action in actions:
            if "metaData" in action:
                configuration = action["metaData"]["configuration"]
            elif "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    row_id_column = configuration["delta.rowTracking.materializedRowIdColumnName"]
    version_column = configuration["delta.rowTracking.materializedRowCommitVersionColumnName"]
    rows: dict[int, tuple[int, int]] = {}
    for file_path, add in live.items():
        assert add.get("deletionVector") is None
        data = pq.read_table(Path(path) / file_path)
        ids = data.column("id").to_pylist()
        stored_ids = data.column(row_id_column).to_pylist() if row_id_column in data.column_names else [None] * len(ids)
        stored_versions = (
            data.column(version_column).to_pylist() if version_column in data.column_names else [None] * len(ids)
        )
        for position, value in enumerate(ids):
            row_id = stored_ids[position] if stored_ids[position] is not None else add["baseRowId"] + position
            version = stored_versions[position] if stored_versions[position] is not None else add["defaultRowCommitVersion"]
            rows[value] = (row_id, version)
    return rows


def high_water_mark(path: str | Path) -> int | None:
    mark = None
    for _version, actions in _commits(path):
        for action in actions:
            domain = action.get("domainMetadata")
            if domain and domain["domain"] == "delta.rowTracking":
                mark = json.loads(domain["configuration"])["rowIdHighWaterMark"]
    return mark
