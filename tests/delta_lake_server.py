"""The Delta Lake side of tests/delta_lake.py: one Spark-with-Delta session serving requests.

Run by the Delta venv's Python (``.cache/delta-venv``, set up by
scripts/setup_delta_oracle.sh), never imported by the suite: it imports only PySpark,
pyarrow and the standard library. Requests come one JSON object per line on stdin,
answers go one JSON object per line to the protocol stream (the original stdout; the
JVM's and Spark's own output is sent to stderr so it cannot corrupt the protocol).

A request is ``{"op": "sql" | "read" | "read_many" | "history" | "detail" | "ping", ...}``; every
answer that carries rows names an Arrow IPC file it wrote in the work directory, so
types (timestamps, decimals, maps, variants as strings) arrive exactly as Spark has them.
An error answer carries Delta's/Spark's error class (condition) and the JVM exception's
class name.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def _protocol_stream() -> Any:
    """The original stdout for answers; fd 1 now goes to stderr (the JVM inherits that)."""
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(protocol_fd, "w", buffering=1)


def _session(config: dict[str, Any]) -> Any:
    from pyspark.sql import SparkSession

    work = Path(config["work_dir"])
    # Python UDFs (oracle_hold) run in workers of this very interpreter, which has PySpark.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    jars = sorted(str(p) for p in Path(config["jars_dir"]).glob("*.jar"))
    builder = (
        SparkSession.builder.master(config.get("master", "local[2]"))
        .appName(config.get("name", "delta-oracle"))
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.catalogImplementation", "in-memory")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .config("spark.local.dir", str(work / "spark-local"))
        .config("spark.driver.memory", config.get("driver_memory", "1g"))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(config.get("shuffle_partitions", 1)))
        .config("spark.default.parallelism", str(config.get("shuffle_partitions", 1)))
        # A scan of a few small files in one task, not one per core: each task more is a
        # closure serialised and a projection generated for a handful of rows.
        .config("spark.sql.leafNodeDefaultParallelism", str(config.get("shuffle_partitions", 1)))
        # No adaptive re-planning: its stage-by-stage re-optimisation costs more than it can
        # save on kilobytes, and results do not depend on it.
        .config("spark.sql.adaptive.enabled", "false")
        # The plan description Spark renders for every query's execution event: the short one.
        .config("spark.sql.ui.explainMode", "simple")
        # Delta rebuilds each snapshot's state with a shuffle into 50 partitions by default:
        # on a tiny test table that is 50 tasks (each compiling code) per version read.
        # A few partitions give the same state with a fraction of the tasks.
        .config("spark.databricks.delta.snapshotPartitions", str(config.get("shuffle_partitions", 1)))
        # VACUUM lists a table's directories in this many tasks (Spark's default: 10,000).
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", str(config.get("shuffle_partitions", 1)))
        # Test tables hold tens of rows: compiling Java for each new plan costs more than
        # interpreting it, and the results do not depend on it.
        .config("spark.sql.codegen.wholeStage", "false")
        # The same for every projection and encoder: Delta's state reconstruction and its
        # actions' encoders compile large generated classes (Janino) for a few rows each;
        # interpreted, they run at once. Results do not depend on it.
        .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
        # A JVM that serves a test session: the C1 compiler only (C2's compilations of
        # Catalyst cost more CPU than they save on tiny tables; the product's small jobs
        # do the same, docs/operators.md) and one GC thread on 2 cores; a young generation
        # of 256 MB, so the short-lived garbage of each statement dies in fewer collections.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmn256m")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # No Ivy: every jar is local; a stray package resolution must fail, not download.
        .config("spark.jars.ivy", str(work / "ivy"))
    )
    for key, value in (config.get("spark_conf") or {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(config.get("log_level", "WARN"))
    from pyspark.sql.types import BooleanType

    spark.udf.register("oracle_hold", _hold, BooleanType())
    return spark


HOLD_TIMEOUT_SECONDS = 300.0


def _hold(flag_dir: str, tag: str) -> bool:
    """``oracle_hold(dir, tag)`` in SQL: the first time, drop ``<tag>.held`` in ``dir`` and wait
    until the test drops ``<tag>.go`` (its concurrent commit is done); then, and on every
    later call, true at once. A test puts it in a statement's source filter to hold the
    statement between taking its snapshot and committing, for exactly as long as needed."""
    import time

    go = Path(flag_dir) / f"{tag}.go"
    if go.exists():
        return True
    (Path(flag_dir) / f"{tag}.held").touch()
    deadline = time.monotonic() + HOLD_TIMEOUT_SECONDS
    while not go.exists() and time.monotonic() < deadline:  # a lost test must not hang the session
        time.sleep(0.005)
    return True


def _quote_path(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def _nullable(data_type: Any) -> Any:
    """``data_type`` with every nested field nullable (map keys stay non-null)."""
    from pyspark.sql import types

    if isinstance(data_type, types.StructType):
        return types.StructType(
            [types.StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in data_type.fields]
        )
    if isinstance(data_type, types.ArrayType):
        return types.ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, types.MapType):
        return types.MapType(data_type.keyType, _nullable(data_type.valueType), True)
    return data_type


def _write_arrow(df: Any, out: Path) -> str:
    import pyarrow as pa
    from pyspark.sql import functions

    # Some of Delta's results declare nested fields non-null and still hold nulls (OPTIMIZE's
    # `metrics` struct: `zOrderStats`, `clusteringStats`), which Arrow refuses to convert.
    # Commands ran when spark.sql returned, so the cast re-runs nothing.
    columns = []
    for field in df.schema.fields:
        relaxed = _nullable(field.dataType)
        column = functions.col("`" + field.name.replace("`", "``") + "`")
        columns.append(column if relaxed == field.dataType else column.cast(relaxed).alias(field.name))
    table = df.select(columns).toArrow()
    with pa.OSFile(str(out), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return str(out)


READ_COLUMN = "__delta_oracle_read__"


def _read_many(spark: Any, reads: list[list[Any]], out: Path) -> list[dict[str, Any]]:
    """Several reads (``[path, version or None]``) in one Spark job per schema: each read's
    scan, tagged with its index in :data:`READ_COLUMN`, unioned with the others of the same
    schema (a rename or a widened type starts a new group). One Arrow file per group."""
    from pyspark.sql import functions

    frames: dict[str, Any] = {}
    members: dict[str, list[int]] = {}
    for index, (path, version) in enumerate(reads):
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", int(version))
        frame = reader.load(path)
        key = frame.schema.json()
        frame = frame.withColumn(READ_COLUMN, functions.lit(index))
        frames[key] = frame if key not in frames else frames[key].unionByName(frame)
        members.setdefault(key, []).append(index)
    return [
        {"arrow": _write_arrow(frame, out.with_suffix(f".{number}.arrow")), "reads": members[key]}
        for number, (key, frame) in enumerate(frames.items())
    ]


def _error(exc: BaseException) -> dict[str, Any]:
    """Delta's/Spark's names for an error: the condition and the JVM exception's class."""
    answer: dict[str, Any] = {
        "ok": False,
        "message": str(exc),
        "error_class": None,
        "exception_class": type(exc).__name__,
        "java_class": None,
        "traceback": traceback.format_exc(limit=5),
    }
    get_condition = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    if get_condition is not None:
        try:
            answer["error_class"] = get_condition()
        except Exception:  # a name we cannot get is reported as None
            pass
    origin = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
    if origin is not None:
        try:
            java_class = origin.getClass().getName()
            answer["java_class"] = java_class
            answer["exception_class"] = java_class.rsplit(".", 1)[-1]
            if answer["error_class"] is None:
                answer["error_class"] = origin.getErrorClass() if hasattr(origin, "getErrorClass") else None
        except Exception:
            pass
    return answer


def _serve(spark: Any, work: Path, stream: Any) -> None:
    counter = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        counter += 1
        out = work / f"result-{os.getpid()}-{counter}.arrow"
        try:
            if op == "ping":
                answer: dict[str, Any] = {"ok": True, "spark": spark.version}
            elif op == "stop":
                stream.write(json.dumps({"ok": True}) + "\n")
                return
            elif op == "sql":
                df = spark.sql(request["text"])
                answer = {"ok": True, "arrow": _write_arrow(df, out)}
            elif op == "read":
                reader = spark.read.format("delta")
                if request.get("version") is not None:
                    reader = reader.option("versionAsOf", int(request["version"]))
                answer = {"ok": True, "arrow": _write_arrow(reader.load(request["path"]), out)}
            elif op == "read_many":
                answer = {"ok": True, "groups": _read_many(spark, request["reads"], out)}
            elif op == "history":
                df = spark.sql(f"DESCRIBE HISTORY {_quote_path(request['path'])}")
                answer = {"ok": True, "arrow": _write_arrow(df, out)}
            elif op == "detail":
                df = spark.sql(f"DESCRIBE DETAIL {_quote_path(request['path'])}")
                answer = {"ok": True, "arrow": _write_arrow(df, out)}
            else:
                answer = {"ok": False, "message": f"unknown op {op!r}", "exception_class": "ValueError"}
        except Exception as exc:  # every error goes back to the test
            answer = _error(exc)
        answer["id"] = request.get("id")  # the client skips answers to requests it gave up on
        stream.write(json.dumps(answer) + "\n")


def main() -> None:
    stream = _protocol_stream()
    config = json.loads(sys.argv[1])
    work = Path(config["work_dir"])
    work.mkdir(parents=True, exist_ok=True)
    try:
        spark = _session(config)
    except Exception as exc:
        stream.write(json.dumps(_error(exc)) + "\n")
        return
    stream.write(json.dumps({"ok": True, "spark": spark.version}) + "\n")
    try:
        _serve(spark, work, stream)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
