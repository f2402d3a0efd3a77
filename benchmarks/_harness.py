"""The benchmark harness: run each side of a case in a fresh process, time it, measure peak memory.

A benchmark module (``benchmarks/<name>.py``) defines::

    def cases() -> list[Case]: ...

``cases()`` runs in the parent process once; it may build (and cache) data. Each
:class:`Case` names two module-level functions of that module, ``ours`` and (optionally)
``theirs`` (the delta-rs equivalent), and the positional ``args`` (JSON-serialisable)
to call them with. Each side runs in its own subprocess: one untimed warm-up call
(imports, caches), then ``repeat`` timed calls; we report the best time and the peak
resident set size of that process (``ru_maxrss``: interpreter and libraries included).
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import resource
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
DATA_DIR = BENCH_DIR / ".data"  # cached inputs (gitignored)
REPO_ROOT = BENCH_DIR.parent


@dataclass(frozen=True)
class Case:
    """One measurement: ``ours`` vs ``theirs`` (names of functions in the benchmark module)."""

    name: str
    ours: str
    theirs: str | None = None
    args: Sequence[Any] = field(default_factory=tuple)
    repeat: int = 3
    # fresh=True: every timed run is a new interpreter that calls the function once, so the
    # time includes importing the library (as a user's script or Airflow task pays it).
    fresh: bool = False
    # A module function run (untimed, in the parent) before each fresh run, returning that
    # run's args: e.g. a fresh copy of a table that the call modifies.
    setup: str | None = None
    # Extra environment of the measuring processes (e.g. an empty PYTHONPYCACHEPREFIX: no bytecode).
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Measurement:
    seconds: float  # best wall time of the timed runs
    cpu_seconds: float  # CPU time (all threads) of that same run: steadier than wall time on a busy machine
    peak_rss_mb: float
    detail: dict[str, Any] = field(default_factory=dict)  # what a fresh run's function returned (e.g. metrics)


@dataclass(frozen=True)
class Result:
    module: str
    case: Case
    ours: Measurement
    theirs: Measurement | None


def data_dir(name: str) -> Path:
    """A cache directory for one benchmark's inputs."""
    path = DATA_DIR / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def compile_engine_bytecode() -> None:
    """Bytecode of the engine as ``make`` (or an installed wheel) leaves it: current, so no
    fresh-process run pays for compiling (with PYTHONDONTWRITEBYTECODE set, an edited module
    would otherwise be compiled on every import, which delta-rs, a compiled extension, never pays)."""
    import compileall

    import airflow_delta

    compileall.compile_dir(Path(airflow_delta.__file__).parent, quiet=1)


def discover() -> list[str]:
    """Names of the benchmark modules in this package."""
    return sorted(m.name for m in pkgutil.iter_modules([str(BENCH_DIR)]) if not m.name.startswith("_"))


def measure(module: str, function: str, args: Sequence[Any], repeat: int) -> Measurement:
    """Run ``benchmarks.<module>.<function>(*args)`` in a fresh interpreter."""
    cmd = [sys.executable, "-m", "benchmarks._harness", module, function, json.dumps(list(args)), str(repeat)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{module}.{function} failed:\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return Measurement(out["seconds"], out["cpu_seconds"], out["peak_rss_mb"])


# The child of a fresh-process run: the clock starts after the benchmark module (stdlib
# only at import) is loaded, so the time covers importing the library and the call.
# CPU time counts the processes the call forked and waited for (an OPTIMIZE's second bin).
_FRESH_CHILD = """
import importlib, json, resource, sys, time
def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
fn = getattr(importlib.import_module("benchmarks." + sys.argv[1]), sys.argv[2])
start, start_cpu, start_children = time.perf_counter(), time.process_time(), children_cpu()
detail = fn(*json.loads(sys.argv[3]))
wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
children = children_cpu() - start_children
# VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec.
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
detail = detail if isinstance(detail, dict) else {}
if children:
    # A forked child's peak RSS includes the pages it shares with this process.
    detail = dict(detail, children_cpu_seconds=round(children, 3),
                  largest_child_peak_rss_mb=round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024))
print(json.dumps({"seconds": wall, "cpu_seconds": cpu + children, "peak_rss_mb": peak_kb / 1024, "detail": detail}))
"""


def _fresh_run(module: str, function: str, args: Sequence[Any], extra_env: Mapping[str, str]) -> Measurement:
    cmd = [sys.executable, "-c", _FRESH_CHILD, module, function, json.dumps(list(args))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    env.update(extra_env)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{module}.{function} failed:\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return Measurement(out["seconds"], out["cpu_seconds"], out["peak_rss_mb"], out["detail"])


def measure_fresh(mod: Any, module: str, case: Case) -> tuple[Measurement, Measurement | None]:
    """``repeat`` fresh interpreters per side, alternating ours and theirs (so that a busy
    moment of the machine hits both); the best wall time of each side, with its CPU time.
    ``case.setup`` (untimed, in the parent) gives each run its args."""

    def args() -> Sequence[Any]:
        return getattr(mod, case.setup)(*case.args) if case.setup else case.args

    ours: list[Measurement] = []
    theirs: list[Measurement] = []
    for _ in range(max(1, case.repeat)):
        ours.append(_fresh_run(module, case.ours, args(), case.env))
        if case.theirs:
            theirs.append(_fresh_run(module, case.theirs, args(), case.env))
    best_ours = min(ours, key=lambda m: m.seconds)
    best_theirs = min(theirs, key=lambda m: m.seconds) if theirs else None
    return best_ours, best_theirs


def run_module(module: str) -> list[Result]:
    mod = importlib.import_module(f"benchmarks.{module}")
    # A module may print what one case means as soon as it is measured (a long run stopped
    # early keeps the cases it finished), besides what its cases mean together (summarize).
    report_case = getattr(mod, "report_case", None)
    results = []
    for case in mod.cases():
        if case.fresh:
            ours, theirs = measure_fresh(mod, module, case)
        else:
            ours = measure(module, case.ours, case.args, case.repeat)
            theirs = measure(module, case.theirs, case.args, case.repeat) if case.theirs else None
        result = Result(module, case, ours, theirs)
        print_row(result)
        if report_case is not None:
            report_case(result)
        results.append(result)
    summarize = getattr(mod, "summarize", None)
    if summarize is not None:  # a module may print what its cases mean together (ratios between cases)
        summarize(results)
    return results


HEADER = (
    f"{'benchmark':<16} {'case':<30} {'ours s':>7} {'d-rs s':>7} {'ratio':>6}"
    f" {'ours cpu':>8} {'d-rs cpu':>8} {'ratio':>6} {'ours MB':>8} {'d-rs MB':>8}"
)


def _ratio(a: float, b: float | None) -> str:
    return f"{a / b:6.2f}" if b else f"{'-':>6}"


def print_row(r: Result) -> None:
    t = r.theirs
    print(
        f"{r.module:<16} {r.case.name:<30} {r.ours.seconds:7.3f} {t.seconds if t else float('nan'):7.3f}"
        f" {_ratio(r.ours.seconds, t.seconds if t else None)}"
        f" {r.ours.cpu_seconds:8.3f} {t.cpu_seconds if t else float('nan'):8.3f}"
        f" {_ratio(r.ours.cpu_seconds, t.cpu_seconds if t else None)}"
        f" {r.ours.peak_rss_mb:8.0f} {t.peak_rss_mb if t else float('nan'):8.0f}",
        flush=True,
    )


def main(argv: Sequence[str]) -> int:
    """``python -m benchmarks [name ...]``: run the named benchmark modules (default: all)."""
    names = list(argv) or discover()
    unknown = [n for n in names if n not in discover()]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(discover())}", file=sys.stderr)
        return 2
    print(HEADER, flush=True)
    for name in names:
        run_module(name)
    print("s = best wall seconds; cpu = CPU seconds of that run (all threads); ratio = ours / delta-rs "
          "(below 1: we are faster); MB = peak RSS of the measuring process", flush=True)
    return 0


def _child(module: str, function: str, args_json: str, repeat: int) -> None:
    fn = getattr(importlib.import_module(f"benchmarks.{module}"), function)
    args = json.loads(args_json)
    fn(*args)  # warm-up: imports, lazy initialisation
    best, best_cpu = float("inf"), float("inf")
    for _ in range(max(1, repeat)):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn(*args)
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        if wall < best:
            best, best_cpu = wall, cpu
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    print(json.dumps({"seconds": best, "cpu_seconds": best_cpu, "peak_rss_mb": peak_kb / 1024}))


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))


def use_isolated_airflow(airflow_home: str) -> None:
    """Point this process at its own Airflow (``airflow_home``, no inherited ``AIRFLOW*`` settings)
    with Spark local mode as ``spark_local`` and a ``delta_default`` connection that uses it:
    what the operator benchmarks run their operators against."""
    for key in [key for key in os.environ if key.startswith("AIRFLOW")]:
        del os.environ[key]
    os.environ["AIRFLOW_HOME"] = airflow_home
    os.environ["AIRFLOW_CONN_SPARK_LOCAL"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    os.environ["AIRFLOW_CONN_DELTA_DEFAULT"] = json.dumps(
        {"conn_type": "delta", "extra": {"spark_conn_id": "spark_local"}}
    )
