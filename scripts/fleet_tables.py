"""A handful of Delta tables with different maintenance needs, built through the engine, for
``make demo-fleet`` (``scripts/demo_fleet.py``) and the fleet DAG's test.

- ``sales/orders``: many small files in a few partitions (OPTIMIZE compacts them);
- ``sales/refunds``: deletion vectors that delete a third of a file's rows (OPTIMIZE purges them);
- ``events/clicks``: compacted already, its old files past a one-second retention (VACUUM deletes them;
  OPTIMIZE is cooling down);
- ``events/audit``: a long log and no checkpoint (CHECKPOINT), one small file per commit;
- ``ref/countries``: one well-sized file: nothing to do;
- ``broken/orphan``: a ``_delta_log`` with a corrupt commit: reported unreadable, the rest go on.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa

from airflow_delta.engine import DeltaTable, OptimizeOptions

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("amount", pa.float64())])
NO_AUTO_CHECKPOINT = {"delta.checkpointInterval": "1000"}


def _rows(first: int, count: int, day: str) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table({"id": ids, "day": [day] * count, "amount": [i * 0.5 for i in ids]}, schema=SCHEMA)


def build_fleet(root: Path, *, small_files: int = 24) -> dict[str, str]:
    """Build the tables under ``root``; returns ``{name: path}``."""
    paths = {name: str(root / name) for name in
             ("sales/orders", "sales/refunds", "events/clicks", "events/audit", "ref/countries", "broken/orphan")}
    for path in paths.values():
        Path(path).mkdir(parents=True)

    orders = DeltaTable.create(paths["sales/orders"], SCHEMA, partition_by=["day"], properties=NO_AUTO_CHECKPOINT)
    for i in range(small_files):
        orders.append(_rows(100 * i, 50, f"2024-01-0{1 + i % 3}"))

    refunds = DeltaTable.create(paths["sales/refunds"], SCHEMA,
                                properties={**NO_AUTO_CHECKPOINT, "delta.enableDeletionVectors": "true"})
    refunds.append(_rows(0, 300, "2024-01-01"))
    refunds.delete("id < 100")

    clicks = DeltaTable.create(paths["events/clicks"], SCHEMA,
                               properties={**NO_AUTO_CHECKPOINT, "delta.deletedFileRetentionDuration": "interval 1 seconds"})
    for i in range(6):
        clicks.append(_rows(100 * i, 20, "2024-01-01"))
    clicks.optimize(OptimizeOptions())

    audit = DeltaTable.create(paths["events/audit"], SCHEMA, properties=NO_AUTO_CHECKPOINT)
    for i in range(14):
        audit.append(_rows(i, 1, "2024-01-01"))

    countries = DeltaTable.create(paths["ref/countries"], SCHEMA, properties=NO_AUTO_CHECKPOINT)
    countries.append(_rows(0, 10, "2024-01-01"))

    log = Path(paths["broken/orphan"]) / "_delta_log"
    log.mkdir()
    (log / "00000000000000000000.json").write_text('{"commitInfo": {"operation": "WRITE"\n')
    time.sleep(1.5)  # the compacted files of events/clicks pass their one-second retention
    return paths
