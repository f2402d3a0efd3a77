"""``make demo-fleet``: the fleet maintenance DAG on a handful of local tables with different needs.

1. builds six tables under ``--dir`` (default ``.demo-fleet/lake``; ``scripts/fleet_tables.py``
   says what each one needs: compaction, a deletion-vector purge, a VACUUM, a checkpoint,
   nothing, and one with a corrupt log);
2. runs ``dags_examples/delta_fleet_maintenance.py`` with ``airflow dags test`` in an Airflow
   of its own (``--dir``/airflow, SQLite), the maintenance history at ``--dir``/history;
3. prints the plan's decision for every table, then the health before and after and the
   history's rows, and checks that every table's rows are unchanged.

It exits non-zero when the DAG run fails or a table's rows changed. The "Delta tables" page
shows the same history: ``airflow api-server`` with ``AIRFLOW__DELTA__MAINTENANCE_HISTORY_URI``
set to the history printed at the end (docs/fleet.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from airflow_delta.engine import fleet_health, read_history, resolve_fleet
from scripts.airflow_cli import AirflowCli, output_tail
from scripts.fleet_tables import build_fleet

DAG_ID = "delta_fleet_maintenance"


def _rows(path: str) -> list[dict]:
    from airflow_delta.engine import DeltaTable

    return sorted(DeltaTable(path).snapshot().to_arrow().to_pylist(), key=lambda r: r["id"])


def _line(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['status']}: {r['reason'][:70]}"
    return (f"v{r['version']:<3} {r['num_files']:>3} files ({r['small_files']} small), "
            f"{r['files_with_deletion_vectors']} with DVs, {r['vacuumable_files']} vacuumable, "
            f"{r['commits_since_checkpoint']} commits since checkpoint")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=".demo-fleet", type=Path)
    args = parser.parse_args(argv)
    base = args.dir.resolve()
    shutil.rmtree(base, ignore_errors=True)
    lake, history = base / "lake", str(base / "history")
    tables = build_fleet(lake)
    uris = resolve_fleet(prefix=str(lake))
    before = {r.table: r.to_dict() for r in fleet_health(uris)}
    rows = {name: _rows(path) for name, path in tables.items() if name != "broken/orphan"}

    connection = {"conn_type": "delta", "extra": {"maintenance_history_uri": history}}
    airflow = AirflowCli(base / "airflow", env_vars={"AIRFLOW_CONN_DELTA_DEFAULT": json.dumps(connection)})
    airflow.migrate()
    print(f"running {DAG_ID} on {lake} ...", flush=True)
    result, run = airflow.test_dag(DAG_ID, {"prefix": str(lake)})
    (base / "airflow-dags-test.log").write_text(result.stdout + result.stderr)
    if run["state"] != "success":
        print(output_tail(result, 80))
        print(f"the DAG run ended {run['state']}")
        return 1

    print("\nplan:")
    for d in run["xcoms"]["plan"]["decisions"]:
        name = Path(d["table"]).relative_to(lake)
        print(f"  {'CHOSEN ' if d['chosen'] else 'skipped'} {d['operation'] or '-':<10} {name!s:<15} {d['reason']}")
    after = {r.table: r.to_dict() for r in fleet_health(uris)}
    print("\nhealth before -> after:")
    for uri in uris:
        name = str(Path(uri).relative_to(lake))
        print(f"  {name:<15} {_line(before[uri])}\n  {'':<15} {_line(after[uri])}")
    print(f"\nmaintenance history ({history}):")
    for r in read_history(history):
        if r["operation"] != "HEALTH":
            print(f"  {r['operation']:<10} {r['status']:<8} v{r['version']} {r['duration_ms']:>6} ms "
                  f"{Path(r['table_uri']).relative_to(lake)}: {r['reason']}")
    changed = [name for name, expected in rows.items() if _rows(tables[name]) != expected]
    if changed:
        print(f"rows changed in {changed}")
        return 1
    print("\nevery table's rows are unchanged; the DAG's log: " + str(base / "airflow-dags-test.log"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
