"""Where a Spark application's time went: its jobs and stages, from Spark event logs.

``python -m benchmarks._spark_stages DIR [--top N]`` prints, for every event log in ``DIR``
(``spark.eventLog.dir``; ``benchmarks/delta_spark.py`` writes them with
``BENCH_DELTA_SPARK_EVENT_LOG=DIR``; Spark 4's rolling ``eventlog_v2_*`` directories and
zstd-compressed files included): the application's name and wall time from its start
to its end, the sum of its jobs' wall times, and its ``N`` longest stages (default 12)
with their task count, wall time, the tasks' executor run and CPU time summed, and the
bytes they read (input, shuffle) and wrote (shuffle).
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _accumulated(info: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in info.get("Accumulables", []):
        name, value = item.get("Name"), item.get("Value")
        if isinstance(name, str) and isinstance(value, (int, str)) and str(value).lstrip("-").isdigit():
            out[name] = int(value)
    return out


def _lines(path: Path) -> Iterator[str]:
    """The event lines of one log: a file, or a rolling ``eventlog_v2_*`` directory's ``events_*`` files in order."""
    parts = sorted(path.glob("events_*"), key=lambda p: int(p.name.split("_")[1])) if path.is_dir() else [path]
    for part in parts:
        if part.suffix == ".zstd":
            import zstandard

            with part.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as reader:
                yield from io.TextIOWrapper(reader, encoding="utf-8")
        else:
            with part.open(encoding="utf-8") as text:
                yield from text


def summarize(path: Path, top: int) -> list[str]:
    app_name, app_start, app_end = path.name, None, None
    stages: list[dict[str, Any]] = []
    job_ms = 0
    job_starts: dict[int, int] = {}
    for line in _lines(path):
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerApplicationStart":
            app_name, app_start = event.get("App Name", app_name), event.get("Timestamp")
        elif kind == "SparkListenerApplicationEnd":
            app_end = event.get("Timestamp")
        elif kind == "SparkListenerJobStart":
            job_starts[event["Job ID"]] = event.get("Submission Time", 0)
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in job_starts:
            job_ms += event.get("Completion Time", 0) - job_starts[event["Job ID"]]
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            metrics = _accumulated(info)
            stages.append({
                "id": info["Stage ID"], "name": info.get("Stage Name", ""), "tasks": info.get("Number of Tasks", 0),
                "ms": (info.get("Completion Time") or 0) - (info.get("Submission Time") or 0),
                "run_ms": metrics.get("internal.metrics.executorRunTime", 0),
                "cpu_ms": metrics.get("internal.metrics.executorCpuTime", 0) // 1_000_000,
                "input_mb": metrics.get("internal.metrics.input.bytesRead", 0) / 2**20,
                "shuffle_read_mb": (metrics.get("internal.metrics.shuffle.read.remoteBytesRead", 0)
                                    + metrics.get("internal.metrics.shuffle.read.localBytesRead", 0)) / 2**20,
                "shuffle_write_mb": metrics.get("internal.metrics.shuffle.write.bytesWritten", 0) / 2**20,
            })
    wall = f"{(app_end - app_start) / 1000:.1f} s" if app_start and app_end else "?"
    lines = [f"## {app_name} ({path.name}): application {wall}, jobs {job_ms / 1000:.1f} s, {len(stages)} stages, "
             f"stage wall {sum(s['ms'] for s in stages) / 1000:.1f} s, executor run "
             f"{sum(s['run_ms'] for s in stages) / 1000:.1f} s, CPU {sum(s['cpu_ms'] for s in stages) / 1000:.1f} s"]
    lines.append(f"{'stage':>5} {'tasks':>5} {'wall s':>7} {'run s':>7} {'cpu s':>7} {'in MB':>7} {'shR MB':>7} {'shW MB':>7}  name")
    for stage in sorted(stages, key=lambda s: -s["ms"])[:top]:
        lines.append(
            f"{stage['id']:>5} {stage['tasks']:>5} {stage['ms'] / 1000:7.1f} {stage['run_ms'] / 1000:7.1f} "
            f"{stage['cpu_ms'] / 1000:7.1f} {stage['input_mb']:7.1f} {stage['shuffle_read_mb']:7.1f} "
            f"{stage['shuffle_write_mb']:7.1f}  {stage['name'][:70]}"
        )
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m benchmarks._spark_stages DIR [--top N]", file=sys.stderr)
        return 2
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 12
    logs = sorted((p for p in Path(argv[0]).iterdir() if not p.name.startswith(".")), key=lambda p: p.stat().st_mtime)
    for path in logs:
        print("\n".join(summarize(path, top)), end="\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
