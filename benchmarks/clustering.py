"""OPTIMIZE of a liquid-clustered table: time, and how much less the files' min/max boxes overlap after it.

Input (built once, cached under ``benchmarks/.data/clustering``): 2,000,000 rows (``a``,
``b``, ``c`` uniform random int64, a short string) appended by our engine in 100 files of
20,000 rows to a table with the ``clustering`` feature; two copies, clustered by ``a``
alone and by ``(a, b, c)``.

Cases, each run a fresh process (imports included) on a fresh copy (data files
hard-linked, log copied; untimed ``setup``), 8 MiB target files:

* ours: ``DeltaTable.optimize()``, which clusters by the table's clustering columns
  (a range-id order for one column, the Hilbert curve for three);
* delta-rs, the peer: ``optimize.z_order(columns)`` on the same copy (delta-rs has no
  liquid clustering; Z-order is its multi-column layout).

Each side returns the overlap of its output: per file, how many other files' min/max
boxes over the clustering columns meet its own (a query bounded on those columns must
read every file whose box meets the query's), averaged over the files; ``summarize``
prints it before and after for both sides.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._harness import Case, Result, data_dir
from benchmarks.delete import _link_copy

ROWS = 2_000_000
FILES = 100
TARGET = 8 << 20
LAYOUTS = {"one": ["a"], "three": ["a", "b", "c"]}


def _build(target: Path, columns: list[str]) -> None:
    import numpy as np
    import pyarrow as pa

    from airflow_delta.engine import DeltaTable

    tmp = target.with_name(target.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    schema = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.int64()), ("s", pa.string())])
    table = DeltaTable.create(str(tmp), schema, properties={"delta.feature.clustering": "supported"})
    with table.transaction() as txn:
        txn.set_domain_metadata(
            "delta.clustering", {"clusteringColumns": [[c] for c in columns], "domainName": "delta.clustering"}, system=True
        )
        txn.commit("CLUSTER BY", {"clusteringColumns": json.dumps(columns)})
    rng = np.random.default_rng(0)
    per_file = ROWS // FILES
    strings = pa.array([f"s{i % 1000}" for i in range(per_file)])
    for _ in range(FILES):
        table.append(
            pa.table(
                {
                    "a": rng.integers(0, 1 << 40, per_file), "b": rng.integers(0, 1 << 40, per_file),
                    "c": rng.integers(0, 1 << 40, per_file), "s": strings,
                },
                schema=schema,
            )
        )
    tmp.rename(target)


def cases() -> list[Case]:
    base = data_dir("clustering")
    out = []
    for name, columns in LAYOUTS.items():
        path = base / name
        if not path.exists():
            print(f"building the {ROWS:,}-row table clustered by {columns} (once; cached in {base})", file=sys.stderr, flush=True)
            _build(path, columns)
        out.append(
            Case(f"cluster {ROWS:,} rows by {', '.join(columns)}", ours="ours_optimize", theirs="delta_rs_zorder",
                 args=(str(path), columns), repeat=2, fresh=True, setup="fresh_copy")
        )
    return out


_SCRATCH = Path(tempfile.gettempdir()) / "airflow-delta-bench-clustering"


def fresh_copy(source: str, columns: list[str]) -> list[Any]:
    """Untimed, before each run: a new copy of the table (hard-linked data files) for the run to optimize."""
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    _link_copy(Path(source), _SCRATCH)
    return [str(_SCRATCH), columns]


def overlap(path: str, columns: list[str]) -> float:
    """Mean number of other live files whose min/max box over ``columns`` meets a file's box (delta-rs lists the stats)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pydict()
    boxes = list(zip(*([*zip(actions[f"min.{c}"], actions[f"max.{c}"], strict=True)] for c in columns), strict=True))
    if len(boxes) < 2:
        return 0.0
    meeting = sum(
        1 for x, y in itertools.permutations(boxes, 2) if all(p[0] <= q[1] and q[0] <= p[1] for p, q in zip(x, y, strict=True))
    )
    return meeting / len(boxes)


def ours_optimize(path: str, columns: list[str]) -> dict[str, Any]:
    from airflow_delta.engine import DeltaTable, OptimizeOptions

    before = overlap(path, columns)
    result = DeltaTable(path).optimize(OptimizeOptions(max_file_size=TARGET))
    assert result.metrics["numFilesRemoved"] == FILES, dict(result.metrics)
    return {"files": result.metrics["numFilesAdded"], "before": before, "after": overlap(path, columns)}


def delta_rs_zorder(path: str, columns: list[str]) -> dict[str, Any]:
    from deltalake import DeltaTable

    before = overlap(path, columns)
    # delta-rs refuses to write the clustering feature: it Z-orders a copy whose protocol
    # lists only what it knows (the data files and their statistics are the same).
    plain = _SCRATCH.with_name(_SCRATCH.name + "-plain")
    shutil.rmtree(plain, ignore_errors=True)
    _strip_clustering(Path(path), plain)
    metrics = DeltaTable(str(plain)).optimize.z_order(columns, target_size=TARGET)
    assert metrics["numFilesRemoved"] == FILES, metrics
    return {"files": metrics["numFilesAdded"], "before": before, "after": overlap(str(plain), columns)}


def _strip_clustering(source: Path, target: Path) -> None:
    _link_copy(source, target)
    log = target / "_delta_log"
    for derived in [*log.glob("*.checkpoint*.parquet"), *log.glob("*.crc"), log / "_last_checkpoint"]:
        derived.unlink(missing_ok=True)  # they repeat the protocol: the JSON commits alone are the table
    for commit in sorted(log.glob("*.json")):
        lines = []
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "protocol" in action:
                action["protocol"] = {"minReaderVersion": 1, "minWriterVersion": 2}
            if "domainMetadata" in action:
                continue
            lines.append(json.dumps(action))
        commit.unlink()  # hard links share the source's bytes: write a new file
        commit.write_text("\n".join(lines) + "\n")


def summarize(results: list[Result]) -> None:
    for r in results:
        ours = r.ours.detail
        theirs = r.theirs.detail if r.theirs is not None else {}
        print(
            f"# {r.case.name}: box overlap {ours.get('before', float('nan')):.1f} -> ours {ours.get('after', float('nan')):.2f} "
            f"({ours.get('files')} files), delta-rs Z-order {theirs.get('after', float('nan')):.2f} ({theirs.get('files')} files)",
            flush=True,
        )
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    shutil.rmtree(_SCRATCH.with_name(_SCRATCH.name + "-plain"), ignore_errors=True)
