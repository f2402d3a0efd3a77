"""Delta Lake's side of ``benchmarks/delta_spark.py``: one SQL statement in a fresh Spark-with-Delta process.

Run by the Delta venv's Python (``.cache/delta-venv``, PySpark 4.2 with delta-spark 4.4),
never imported by the product's venv: it imports only PySpark and the standard library.
Its one argument is a JSON object::

    {"jars_dir": ..., "work_dir": ..., "driver_memory": "2g", "conf": {...},
     "statement": "DELETE FROM delta.`/t` WHERE ...", "table": "/t", "history": true}

It starts a ``local[2]`` session with Delta's jars and Delta's own defaults (only the
driver's memory, the UI and the conf the case names are set), runs the statement, collects
its result, and prints one JSON line last on stdout: the statement's wall time in this
process (``statementMs``, session start excluded), the result's row count, OPTIMIZE's own
start-to-end time from its result row (``commandMs``), and, when the
statement committed, the newest ``DESCRIBE HISTORY`` entry's ``operation`` and
``operationMetrics`` (where Delta writes ``executionTimeMs``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def _session(config: dict[str, Any]) -> Any:
    from pyspark.sql import SparkSession

    work = Path(config["work_dir"])
    jars = sorted(str(p) for p in Path(config["jars_dir"]).glob("*.jar"))
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("delta-spark-benchmark")
        .config("spark.jars", ",".join(jars))
        .config("spark.jars.ivy", str(work / "ivy"))  # every jar is local: nothing is resolved
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .config("spark.local.dir", str(work / "spark-local"))
        .config("spark.driver.memory", config["driver_memory"])
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in (config.get("conf") or {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    config = json.loads(sys.argv[1])
    spark = _session(config)
    try:
        started = time.perf_counter()
        rows = spark.sql(config["statement"]).collect()
        statement_ms = round((time.perf_counter() - started) * 1000)
        answer: dict[str, Any] = {"statementMs": statement_ms, "resultRows": len(rows)}
        # OPTIMIZE's result row carries its own start and end (OptimizeMetrics), not in the history.
        result_metrics = rows[0].asDict(recursive=True).get("metrics") if len(rows) == 1 else None
        if isinstance(result_metrics, dict) and result_metrics.get("startTimeMs") and result_metrics.get("endTimeMs"):
            answer["commandMs"] = int(result_metrics["endTimeMs"]) - int(result_metrics["startTimeMs"])
        if config.get("history"):
            table = "delta.`" + config["table"].replace("`", "``") + "`"
            latest = spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").collect()[0]
            answer["operation"] = latest["operation"]
            answer["operationMetrics"] = dict(latest["operationMetrics"] or {})
    finally:
        spark.stop()
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
