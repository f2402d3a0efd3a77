"""``airflow-delta``: look at Delta tables from a shell.

* ``airflow-delta describe PATH...``: what a table is (version, size, rows, layout,
  protocol, properties, checkpoint, deletion vectors, recent history). Reads only the
  log, never data files, so it stays quick on big tables.
* ``airflow-delta history PATH [--limit N]``: the commit history, newest first.
* ``airflow-delta files PATH [--filter SQL]``: the live data files, optionally pruned by
  a SQL predicate over partition values and statistics.
* ``airflow-delta health PATH [--json] [--png FILE]``: the maintenance report
  (``DeltaTable.health()``): small files and their distribution, deletion vectors,
  tombstones awaiting vacuum, the log, the protocol, what maintenance would gain and
  recommendations; ``--png`` writes the file-size distribution as a bar chart.

A table that cannot be read prints one line, ``PATH: error: <ErrorClass>: <message>``, and
the command moves on to the next table; the exit code is 1 when any table failed, 2 for a
usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine import DeltaError, DeltaTable, reader_features, size_histogram_png, writer_features

if TYPE_CHECKING:
    from airflow_delta.engine import HealthReport, Snapshot

HISTORY_IN_DESCRIBE = 5
MAX_PROPERTIES_SHOWN = 12
MAX_COLUMNS_SHOWN = 10
# Files without stats whose parquet footers describe may read to count rows (a footer is a
# small ranged read; beyond this many, describe says "unknown" rather than get slow).
MAX_FOOTERS_READ = 100

# Properties a user wants to see first, in this order; other delta.* keys follow.
_KEY_PROPERTIES = (
    "delta.appendOnly",
    "delta.enableDeletionVectors",
    "delta.columnMapping.mode",
    "delta.enableChangeDataFeed",
    "delta.enableInCommitTimestamps",
    "delta.enableRowTracking",
    "delta.checkpointPolicy",
    "delta.checkpointInterval",
    "delta.logRetentionDuration",
    "delta.deletedFileRetentionDuration",
    "delta.isolationLevel",
)
# Long internal names (materialised row-tracking columns, ICT enablement) are noise here.
_HIDDEN_PROPERTY_PREFIXES = ("delta.rowTracking.materialized", "delta.inCommitTimestampEnablement")


# ------------------------------------------------------------------ formatting


def human_bytes(n: int | None) -> str:
    """``1536`` -> ``1.5 KiB``; bytes below 1 KiB are shown exactly."""
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def format_count(n: int) -> str:
    return f"{n:,}"


def format_ms(ms: int | None) -> str:
    if ms is None:
        return "?"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def align(rows: Sequence[Sequence[str]], indent: str = "", right: Iterable[int] = ()) -> list[str]:
    """Rows of cells as lines with aligned columns; columns in ``right`` are right-aligned."""
    if not rows:
        return []
    right_cols = set(right)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.rjust(w) if i in right_cols else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _error_line(path: str, exc: BaseException) -> str:
    message = " ".join(str(exc).split())  # one line, whatever the error text holds
    kind = type(exc).__name__ if isinstance(exc, DeltaError | OSError) else f"internal error {type(exc).__name__}"
    return f"{path}: error: {kind}: {message}"


# ------------------------------------------------------------------ describe


def _features(names: Iterable[str], *, implied: bool) -> str:
    """`` (a, b)``; for legacy protocol versions, which imply features rather than list them, `` (implies a, b)``."""
    listed = sorted(names)
    if not listed:
        return ""
    return f" ({'implies ' if implied else ''}{', '.join(listed)})"


def _footer_row_counts(snapshot: Snapshot, paths: Sequence[str]) -> int | None:
    """Sum of row counts in the parquet footers of ``paths`` (decoded, relative); None if any is unreadable."""
    total = 0
    for path in paths:
        try:
            with snapshot.io.open_input_file(snapshot.data_file_path(path)) as f:
                total += pq.ParquetFile(f).metadata.num_rows
        except (OSError, pa.ArrowException, DeltaError):
            return None
    return total


def _rows_line(snapshot: Snapshot, files: pa.Table) -> str:
    """Live rows: numRecords from the stats (parquet footers for files without stats, when few)
    minus the rows deletion vectors remove."""
    if files.num_rows == 0:
        return "0"
    records = files.column("num_records")
    deleted = pc.sum(pc.struct_field(files.column("deletion_vector"), "cardinality")).as_py() or 0
    from_stats = pc.sum(records).as_py() or 0
    missing = records.null_count
    if missing == 0:
        return f"{format_count(from_stats - deleted)} (from file statistics)"
    if missing <= MAX_FOOTERS_READ:
        no_stats = pc.filter(files.column("path"), pc.is_null(records)).to_pylist()
        from_footers = _footer_row_counts(snapshot, no_stats)
        if from_footers is not None:
            source = "parquet footers" if missing == files.num_rows else "file statistics and parquet footers"
            return f"{format_count(from_stats + from_footers - deleted)} (from {source})"
    if missing == files.num_rows:
        return "unknown (no file statistics)"
    return f"at least {format_count(from_stats - deleted)} ({missing} of {files.num_rows} files have no statistics)"


def _partitions_line(partition_columns: Sequence[str], files: pa.Table) -> str:
    if not partition_columns:
        return "none"
    values = files.column("partition_values").combine_chunks()
    if isinstance(values, pa.ChunkedArray):  # no chunks at all: an empty table
        distinct = 0
    else:
        flat = pa.Table.from_struct_array(values) if len(values) else None
        distinct = flat.group_by(flat.column_names).aggregate([]).num_rows if flat is not None else 0
    plural = "partition" if distinct == 1 else "partitions"
    return f"{', '.join(partition_columns)}: {format_count(distinct)} distinct {plural}"


def delta_type_name(t: Any) -> str:
    """A Delta schema type as Delta users write it: ``long``, ``array<string>``, ``struct<a, b>``."""
    if isinstance(t, str):
        return t
    kind = t.get("type")
    if kind == "array":
        return f"array<{delta_type_name(t.get('elementType'))}>"
    if kind == "map":
        return f"map<{delta_type_name(t.get('keyType'))}, {delta_type_name(t.get('valueType'))}>"
    if kind == "struct":
        return "struct<" + ", ".join(str(f.get("name")) for f in t.get("fields", [])) + ">"
    return str(kind)


def _columns_line(schema_json: Mapping[str, Any]) -> str:
    fields = list(schema_json.get("fields", []))
    shown = [f"{f['name']} {delta_type_name(f['type'])}" for f in fields[:MAX_COLUMNS_SHOWN]]
    more = f", ... {len(fields) - MAX_COLUMNS_SHOWN} more" if len(fields) > MAX_COLUMNS_SHOWN else ""
    return f"{len(fields)}: " + ", ".join(shown) + more


def _properties_lines(configuration: Mapping[str, str]) -> list[str]:
    keys = [k for k in _KEY_PROPERTIES if k in configuration]
    keys += sorted(
        k for k in configuration
        if k not in keys and k.startswith("delta.") and not k.startswith(_HIDDEN_PROPERTY_PREFIXES)
    )
    lines = [f"{k}={configuration[k]}" for k in keys[:MAX_PROPERTIES_SHOWN]]
    if len(keys) > MAX_PROPERTIES_SHOWN:
        lines.append(f"... {len(keys) - MAX_PROPERTIES_SHOWN} more")
    return lines or ["none"]


def _checkpoint_line(snapshot: Snapshot) -> str:
    segment = snapshot.log_segment
    if segment.checkpoint_version is None:
        count = len(segment.commit_files)
        return f"none ({count} commit{'s' if count != 1 else ''} replayed)"
    kind = segment.checkpoint_kind or "classic"
    files = segment.checkpoint_files
    detail = f"{len(files)} parts" if kind == "multipart" else human_bytes(sum(f.size for f in files))
    since = len(segment.commit_files)
    return f"v{segment.checkpoint_version} ({kind}, {detail}), {since} commit{'s' if since != 1 else ''} since"


def _dv_line(files: pa.Table) -> str:
    dv = files.column("deletion_vector")
    with_dv = pc.sum(pc.is_valid(dv)).as_py() or 0
    if with_dv == 0:
        return "none"
    deleted = pc.sum(pc.struct_field(dv, "cardinality")).as_py() or 0
    return f"{format_count(with_dv)} file{'s' if with_dv != 1 else ''}, {format_count(deleted)} rows deleted"


def _history_rows(entries: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for e in entries:
        # history() sets "timestamp" to the commit timestamp (in-commit timestamp where enabled).
        rows.append([f"v{e.get('version', '?')}", format_ms(e.get("timestamp")), str(e.get("operation") or "(not recorded)")])
    return rows


def describe_lines(table: DeltaTable, path: str) -> list[str]:
    snapshot = table.snapshot()
    files = snapshot.files()
    protocol = snapshot.protocol
    metadata = snapshot.metadata
    total_bytes = pc.sum(files.column("size")).as_py() or 0
    name = f" ({metadata.name})" if metadata.name else ""

    fields: list[tuple[str, str]] = [
        ("version", f"{snapshot.version} (committed {format_ms(snapshot.timestamp)})"),
        ("files", f"{format_count(files.num_rows)}, {human_bytes(total_bytes)}"),
        ("rows", _rows_line(snapshot, files)),
        ("columns", _columns_line(metadata.schema_json)),
        ("partitioned by", _partitions_line(snapshot.partition_columns, files)),
        (
            "protocol",
            f"reader {protocol.min_reader_version}"
            f"{_features(reader_features(protocol), implied=protocol.min_reader_version < 3)}, "
            f"writer {protocol.min_writer_version}"
            f"{_features(writer_features(protocol), implied=protocol.min_writer_version < 7)}",
        ),
    ]
    properties = _properties_lines(metadata.configuration)
    fields.append(("properties", properties[0]))
    fields.extend(("", p) for p in properties[1:])
    fields.append(("checkpoint", _checkpoint_line(snapshot)))
    fields.append(("deletion vectors", _dv_line(files)))

    history = table.history(limit=HISTORY_IN_DESCRIBE)
    fields.append(("history", "" if history else "none"))
    lines = [f"{path}{name}"]
    lines += align([[label, value] for label, value in fields], indent="  ")
    lines += align(_history_rows(history), indent="    ", right=[0])
    return lines


def cmd_describe(paths: Sequence[str], out: TextIO) -> int:
    failed = 0
    for i, path in enumerate(paths):
        if i:
            print(file=out)
        try:
            lines = describe_lines(DeltaTable(path), path)
        except Exception as exc:  # one bad table must not stop the others
            failed += 1
            print(_error_line(path, exc), file=out)
            continue
        print("\n".join(lines), file=out)
    return 1 if failed else 0


# ------------------------------------------------------------------ history


def _brief(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), sort_keys=True)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cmd_history(path: str, limit: int | None, out: TextIO) -> int:
    try:
        entries = DeltaTable(path).history(limit=limit)
    except Exception as exc:
        print(_error_line(path, exc), file=out)
        return 1
    rows = [["version", "timestamp", "operation", "parameters"]]
    for e, base in zip(entries, _history_rows(entries), strict=True):
        params = e.get("operationParameters") or {}
        shown = ", ".join(f"{k}={_brief(v, 40)}" for k, v in params.items() if v is not None)
        rows.append([*base, _brief(shown, 80) if shown else ""])
    print("\n".join(align(rows, right=[0])), file=out)
    print(f"{len(entries)} commit{'s' if len(entries) != 1 else ''}", file=out)
    return 0


# ------------------------------------------------------------------ files


def _partition_text(value: Mapping[str, Any] | None) -> str:
    if not value:
        return ""
    return ", ".join(f"{k}={'null' if v is None else v}" for k, v in value.items())


def cmd_files(path: str, filter_sql: str | None, out: TextIO) -> int:
    try:
        snapshot = DeltaTable(path).snapshot()
        files = snapshot.files(filter=filter_sql)
    except Exception as exc:
        print(_error_line(path, exc), file=out)
        return 1
    partitioned = bool(snapshot.partition_columns)
    header = ["path", "size", "rows", "deleted"] + (["partition"] if partitioned else [])
    rows = [header]
    columns: dict[str, list[Any]] = {
        name: files.column(name).to_pylist() for name in ("path", "size", "num_records", "partition_values")
    }
    cardinalities = pc.struct_field(files.column("deletion_vector"), "cardinality").to_pylist()
    for i in range(files.num_rows):
        records = columns["num_records"][i]
        row = [
            columns["path"][i],
            human_bytes(columns["size"][i]),
            format_count(records) if records is not None else "?",
            format_count(cardinalities[i]) if cardinalities[i] is not None else "",
        ]
        if partitioned:
            row.append(_partition_text(columns["partition_values"][i]))
        rows.append(row)
    print("\n".join(align(rows, right=[1, 2, 3])), file=out)
    total = pc.sum(files.column("size")).as_py() or 0
    where = f" matching {filter_sql!r}" if filter_sql else ""
    print(f"{format_count(files.num_rows)} file{'s' if files.num_rows != 1 else ''}{where}, {human_bytes(total)}", file=out)
    return 0


# ------------------------------------------------------------------ health


def _bucket_label(lower: int, upper: int | None) -> str:
    return f">= {human_bytes(lower)}" if upper is None else f"{human_bytes(lower)} - {human_bytes(upper)}"


def health_lines(report: HealthReport, path: str) -> list[str]:
    """The report as text: a summary block, the size distribution, partitions, recommendations."""
    total_rows = "?" if report.total_rows is None else format_count(report.total_rows)
    summary = [
        ["version", str(report.version)],
        ["files", f"{format_count(report.num_files)} ({human_bytes(report.size_in_bytes)})"],
        [
            "small files",
            f"{format_count(report.small_files)} ({report.small_file_ratio:.0%}) below half the target "
            f"{human_bytes(report.target_file_size)}",
        ],
        ["after optimize", f"about {format_count(report.files_after_optimize)} files"],
        [
            "deletion vectors",
            f"{format_count(report.files_with_deletion_vectors)} files ({report.deletion_vector_coverage:.0%}), "
            f"{format_count(report.deleted_rows)} of {total_rows} rows deleted, "
            f"{format_count(report.files_above_purge_ratio)} above the {report.max_deleted_rows_ratio:g} purge ratio",
        ],
        [
            "tombstones",
            f"{format_count(report.tombstones)} ({human_bytes(report.tombstone_bytes)}), oldest "
            f"{format_ms(report.oldest_tombstone_ms) if report.oldest_tombstone_ms is not None else '-'}; "
            f"VACUUM would delete {format_count(report.vacuumable_tombstones)} ({human_bytes(report.vacuumable_bytes)})",
        ],
        [
            "log",
            f"{format_count(report.log_files)} files ({human_bytes(report.log_size_in_bytes)}), "
            f"{report.commits_since_checkpoint} commits "
            + ("and no checkpoint" if report.last_checkpoint_version is None
               else f"since the checkpoint of version {report.last_checkpoint_version}"),
        ],
        [
            "protocol",
            f"reader {report.min_reader_version}{_features(report.reader_features, implied=False)}, "
            f"writer {report.min_writer_version}{_features(report.writer_features, implied=False)}",
        ],
    ]
    lines = [path, *align(summary, indent="  ")]
    lines.append("  file sizes")
    peak = max((b.files for b in report.size_histogram), default=0)
    rows = []
    for bucket in report.size_histogram:
        bar = "#" * (round(30 * bucket.files / peak) if peak else 0)
        rows.append([_bucket_label(bucket.lower, bucket.upper), format_count(bucket.files), bar])
    lines += align(rows, indent="    ", right=[1])
    if report.partitions_with_most_small_files:
        lines.append("  partitions with the most small files")
        lines += align([[p or "(unpartitioned)", format_count(n)] for p, n in report.partitions_with_most_small_files],
                       indent="    ", right=[1])
    lines.append("  recommendations")
    lines += [f"    - {r}" for r in report.recommendations] or ["    none: nothing to gain"]
    return lines


def cmd_health(path: str, as_json: bool, png: str | None, out: TextIO) -> int:
    try:
        report = DeltaTable(path).health()
        if png is not None:
            with open(png, "wb") as image:
                image.write(size_histogram_png(report))
    except Exception as exc:
        print(_error_line(path, exc), file=out)
        return 1
    if as_json:
        print(json.dumps(report.to_dict(), indent=2), file=out)
    else:
        print("\n".join(health_lines(report, path)), file=out)
    return 0


def cmd_convert(path: str, partition_schema: str | None, no_statistics: bool, out: TextIO) -> int:
    try:
        result = DeltaTable.convert_to_delta(path, partition_schema, collect_stats=not no_statistics)
    except Exception as exc:
        print(_error_line(path, exc), file=out)
        return 1
    partitioned = ", ".join(result.partition_columns) or "nothing"
    print(f"{path}: converted {format_count(result.num_files)} parquet file(s) into version 0, "
          f"partitioned by {partitioned}", file=out)
    return 0


def cmd_manifest(path: str, out: TextIO) -> int:
    try:
        result = DeltaTable(path).generate_symlink_manifest()
    except Exception as exc:
        print(_error_line(path, exc), file=out)
        return 1
    print(f"{path}: {len(result.written)} manifest(s) written listing {format_count(result.num_data_files)} "
          f"file(s), {len(result.deleted)} stale manifest(s) removed", file=out)
    return 0


# ------------------------------------------------------------------ entry point


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="airflow-delta", description="Inspect Delta Lake tables.")
    sub = parser.add_subparsers(dest="command", required=True)
    describe = sub.add_parser("describe", help="summarise one or more tables")
    describe.add_argument("paths", nargs="+", metavar="PATH", help="table path or URI")
    history = sub.add_parser("history", help="commit history, newest first")
    history.add_argument("path", metavar="PATH")
    history.add_argument("--limit", type=_positive_int, default=None, metavar="N", help="show the newest N commits")
    files = sub.add_parser("files", help="live data files of the latest version")
    files.add_argument("path", metavar="PATH")
    files.add_argument("--filter", dest="filter_sql", default=None, metavar="SQL", help="SQL predicate, e.g. \"year = 2024\"")
    health = sub.add_parser("health", help="maintenance report: small files, DVs, tombstones, log, recommendations")
    health.add_argument("path", metavar="PATH")
    health.add_argument("--json", dest="as_json", action="store_true", help="print the report as JSON")
    health.add_argument("--png", default=None, metavar="FILE", help="write the file-size distribution as a PNG")
    convert = sub.add_parser("convert", help="CONVERT TO DELTA: a parquet directory becomes version 0 of a Delta table")
    convert.add_argument("path", metavar="PATH")
    convert.add_argument("--partition-schema", default=None, metavar="DDL",
                         help="Hive partition columns in directory order, e.g. \"year INT, region STRING\"")
    convert.add_argument("--no-statistics", action="store_true", help="write no per-file statistics")
    manifest = sub.add_parser("manifest", help="generate the _symlink_format_manifest/ for Presto, Trino, Athena")
    manifest.add_argument("path", metavar="PATH")
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    stream = out if out is not None else sys.stdout
    commands: dict[str, Callable[[], int]] = {
        "describe": lambda: cmd_describe(args.paths, stream),
        "history": lambda: cmd_history(args.path, args.limit, stream),
        "files": lambda: cmd_files(args.path, args.filter_sql, stream),
        "health": lambda: cmd_health(args.path, args.as_json, args.png, stream),
        "convert": lambda: cmd_convert(args.path, args.partition_schema, args.no_statistics, stream),
        "manifest": lambda: cmd_manifest(args.path, stream),
    }
    try:
        return commands[args.command]()
    except BrokenPipeError:
        # The reader went away (`airflow-delta describe ... | head`): stop quietly, and keep
        # Python from complaining again when it flushes stdout at exit.
        if out is None:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
