"""CONVERT TO DELTA of 10,000 parquet files (100 Hive partitions of 100 files): ours vs delta-rs.

Input (built once with pyarrow, cached under ``benchmarks/.data/convert``): 10,000 small
parquet files in ``part=p000`` .. ``part=p099``, 100 rows each (an int64, a double and a
string column). Each timed run is a fresh interpreter (imports included) on a fresh copy
whose files are hard links of the input and which has no ``_delta_log`` yet (``setup``,
untimed): ours is ``DeltaTable.convert_to_delta(path, "part STRING")`` (footers read on 8
threads, statistics from the footers), delta-rs ``convert_to_deltalake(path,
partition_by=..., partition_strategy="hive")`` (statistics too). Both sides assert the
number of files in version 0.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks._harness import Case, data_dir

PARTITIONS = 100
FILES_PER_PARTITION = 100
ROWS_PER_FILE = 100
_SCRATCH = Path(tempfile.gettempdir()) / "airflow-delta-bench-convert"


def _build(target: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    for p in range(PARTITIONS):
        directory = tmp / f"part=p{p:03d}"
        directory.mkdir(parents=True)
        for f in range(FILES_PER_PARTITION):
            start = (p * FILES_PER_PARTITION + f) * ROWS_PER_FILE
            ids = list(range(start, start + ROWS_PER_FILE))
            pq.write_table(
                pa.table({"id": ids, "value": [i * 0.5 for i in ids], "name": [f"n{i % 97}" for i in ids]}),
                directory / f"part-{f:05d}.parquet",
            )
    tmp.rename(target)


def cases() -> list[Case]:
    source = data_dir("convert") / "parquet"
    if not source.exists():
        print(f"building {PARTITIONS * FILES_PER_PARTITION:,} parquet files (once; cached in {source})",
              file=sys.stderr, flush=True)
        _build(source)
    files = PARTITIONS * FILES_PER_PARTITION
    print(f"# input: {files:,} parquet files of {ROWS_PER_FILE} rows in {PARTITIONS} Hive partitions", flush=True)
    return [Case(f"convert {files:,} files", ours="ours_convert", theirs="delta_rs_convert",
                 args=(str(source),), repeat=3, fresh=True, setup="fresh_copy")]


def fresh_copy(source: str) -> list[str]:
    """Untimed, before each run: the parquet directory again, hard-linked, with no _delta_log."""
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    for directory, _, names in os.walk(source):
        relative = Path(directory).relative_to(source)
        (_SCRATCH / relative).mkdir(parents=True, exist_ok=True)
        for name in names:
            os.link(Path(directory, name), _SCRATCH / relative / name)
    return [str(_SCRATCH)]


def ours_convert(path: str) -> dict[str, int]:
    from airflow_delta.engine import DeltaTable

    result = DeltaTable.convert_to_delta(path, "part STRING")
    assert result.num_files == PARTITIONS * FILES_PER_PARTITION, result
    return {"files": result.num_files}


def delta_rs_convert(path: str) -> dict[str, int]:
    import pyarrow as pa
    from deltalake import DeltaTable, Schema, convert_to_deltalake

    convert_to_deltalake(path, partition_by=Schema.from_arrow(pa.schema([("part", pa.string())])),
                         partition_strategy="hive")
    files = len(DeltaTable(path).file_uris())
    assert files == PARTITIONS * FILES_PER_PARTITION, files
    return {"files": files}
