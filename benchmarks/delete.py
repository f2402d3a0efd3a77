"""DELETE of one row in a 10-million-row table: our DV delete, our rewrite delete, delta-rs's delete.

Input (built once with delta-rs, cached under ``benchmarks/.data/delete``): 10,000,000 rows
(``id`` 0..9,999,999 in order, a double and a short string), written by
``deltalake.write_deltalake`` as delta-rs writes them: files of up to ~100 MB, each in
row groups of ~1M rows. Two logs share those data files:

* ``plain``: the table as delta-rs wrote it (no deletion vectors); our rewrite delete and
  delta-rs's delete (which rewrites the file) run on it;
* ``dv``: the same, plus a commit setting ``delta.enableDeletionVectors=true``; our DV
  delete runs on it.

Each timed run gets a fresh copy of its table (data files hard-linked, log copied; the
``setup`` step, untimed) and is one call in a new interpreter: the wall and CPU times are
the whole process's, imports included, as a user's script pays them. Each side deletes
``id = 7654321`` through the public API and returns the operation's own execution time
(ours ``executionTimeMs``; delta-rs ``execution_time_ms``), printed beside the wall time.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._harness import Case, Result, compile_engine_bytecode, data_dir

NUM_ROWS = 10_000_000
ROW_ID = 7_654_321
PREDICATE = f"id = {ROW_ID}"
_BUILD_BATCH = 1_000_000


def _build_plain(target: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)

    def batches() -> Any:
        for start in range(0, NUM_ROWS, _BUILD_BATCH):
            ids = pa.array(range(start, start + _BUILD_BATCH), pa.int64())
            yield pa.record_batch(
                {
                    "id": ids,
                    "value": pa.array([i * 0.5 for i in range(start, start + _BUILD_BATCH)], pa.float64()),
                    "name": pa.array([f"n{i % 10_000}" for i in range(start, start + _BUILD_BATCH)], pa.string()),
                }
            )

    schema = pa.schema([("id", pa.int64()), ("value", pa.float64()), ("name", pa.string())])
    write_deltalake(str(tmp), pa.RecordBatchReader.from_batches(schema, batches()), mode="overwrite")
    tmp.rename(target)


def _build_dv(plain: Path, target: Path) -> None:
    from airflow_delta.engine import DeltaTable

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    _link_copy(plain, tmp)
    with DeltaTable(str(tmp)).transaction() as txn:
        txn.set_properties({"delta.enableDeletionVectors": "true"})
        txn.commit("SET TBLPROPERTIES")
    tmp.rename(target)


def _link_copy(source: Path, target: Path) -> None:
    """``target``: the table at ``source`` with its data files hard-linked and its log copied."""
    for directory, _, names in os.walk(source):
        relative = Path(directory).relative_to(source)
        (target / relative).mkdir(parents=True, exist_ok=True)
        for name in names:
            src, dst = Path(directory, name), target / relative / name
            if relative.parts[:1] == ("_delta_log",):
                shutil.copy2(src, dst)
            else:
                os.link(src, dst)


def _describe(path: Path) -> str:
    import pyarrow.parquet as pq

    files = sorted(path.glob("*.parquet"))
    groups = [pq.ParquetFile(f).metadata.num_row_groups for f in files]
    return f"{len(files)} data files, {sum(groups)} row groups ({', '.join(map(str, groups))} per file)"


def cases() -> list[Case]:
    compile_engine_bytecode()  # fresh processes, mostly imports: measured as installed
    base = data_dir("delete")
    plain, dv = base / "plain", base / "dv"
    if not plain.exists():
        print(f"building the {NUM_ROWS:,}-row table with delta-rs (once; cached in {base})", file=sys.stderr, flush=True)
        _build_plain(plain)
    if not dv.exists():
        _build_dv(plain, dv)
    print(f"# input: {NUM_ROWS:,} rows written by delta-rs, {_describe(plain)}", flush=True)
    return [
        Case("dv delete 1 row", ours="ours_dv_delete", theirs="delta_rs_delete",
             args=(str(dv), str(plain)), repeat=3, fresh=True, setup="fresh_copies"),
        Case("rewrite delete 1 row", ours="ours_rewrite_delete", theirs="delta_rs_delete",
             args=(str(dv), str(plain)), repeat=3, fresh=True, setup="fresh_copies"),
    ]


_SCRATCH = Path(tempfile.gettempdir()) / "airflow-delta-bench-delete"


def fresh_copies(dv: str, plain: str) -> list[str]:
    """Untimed, before each run: new copies of both tables (hard-linked data files) for the run to modify."""
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    _link_copy(Path(dv), _SCRATCH / "dv")
    _link_copy(Path(plain), _SCRATCH / "plain")
    return [str(_SCRATCH / "dv"), str(_SCRATCH / "plain")]


def ours_dv_delete(dv: str, plain: str) -> dict[str, Any]:
    from airflow_delta.engine import DeltaTable

    result = DeltaTable(dv).delete(PREDICATE)
    assert result.num_deleted_rows == 1 and result.metrics["numDeletionVectorsAdded"] == 1, dict(result.metrics)
    return {"executionTimeMs": result.metrics["executionTimeMs"]}


def ours_rewrite_delete(dv: str, plain: str) -> dict[str, Any]:
    from airflow_delta.engine import DeltaTable

    result = DeltaTable(plain).delete(PREDICATE)
    assert result.num_deleted_rows == 1 and result.metrics["numAddedFiles"] >= 1, dict(result.metrics)
    return {"executionTimeMs": result.metrics["executionTimeMs"]}


def delta_rs_delete(dv: str, plain: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    metrics = DeltaTable(plain).delete(PREDICATE)
    assert metrics["num_deleted_rows"] == 1, metrics
    return {"executionTimeMs": metrics["execution_time_ms"]}


def summarize(results: list[Result]) -> None:
    by_name = {r.case.name: r for r in results}
    dv, rewrite = by_name["dv delete 1 row"], by_name["rewrite delete 1 row"]
    rs = dv.theirs
    assert rs is not None and rewrite.theirs is not None

    def ms(m: Any) -> str:
        return f"{m.detail.get('executionTimeMs', float('nan')):.0f} ms"

    print(f"# executionTimeMs: ours DV {ms(dv.ours)}, ours rewrite {ms(rewrite.ours)}, delta-rs {ms(rs)} / {ms(rewrite.theirs)}")
    exec_dv = dv.ours.detail["executionTimeMs"] or 1
    print(
        f"# DV delete speed-up: {rewrite.ours.detail['executionTimeMs'] / exec_dv:.1f}x over our rewrite, "
        f"{rs.detail['executionTimeMs'] / exec_dv:.1f}x over delta-rs (executionTimeMs); "
        f"{rewrite.ours.seconds / dv.ours.seconds:.1f}x and {rs.seconds / dv.ours.seconds:.1f}x in wall time "
        "of the whole process",
        flush=True,
    )
    shutil.rmtree(_SCRATCH, ignore_errors=True)


