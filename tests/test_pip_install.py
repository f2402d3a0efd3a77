"""The documented install, as a user does it: the built wheel and Airflow 3.3.2 pip-installed
into a fresh venv (plain pip, not uv), then one MERGE through the operator on Spark local mode.

pip installs ``pyspark`` and ``pyspark-client`` (required by the apache-spark provider)
into the same ``pyspark/`` folder, writing one over the other; only the same release of
both leaves a consistent PySpark, and ``pip check`` cannot tell. This test is the one
place the suite installs with pip: uv (``make``) happens to avoid the overwrite.

Cost. The venv is new every run (that is the point), and pip resolves and installs every
dependency in it, with ``--no-compile``: pip's default byte-compiles every module of every
package (about 14,000 files, 40-60 s of CPU, the largest part of the install) while the test
imports a small part of them once; what the test proves (the resolution, the one ``pyspark/``
folder, a MERGE) does not depend on bytecode. What is not repeated is the network. pip's HTTP cache never fills on these machines (the registry's proxy sends no
caching headers, so pip stores nothing in ``~/.cache/pip/http``), so without help every run
downloaded about 160 MB and fetched about 150 index pages. The first run on a machine has
pip fill a wheelhouse, ``~/.cache/airflow-delta-tests/pip-wheelhouse-<key>`` (the wheels of
every dependency and of the build backend, about 600 MB, mostly PySpark, whose sdist pip
builds once into its own wheel cache); later runs install from it with ``--no-index
--find-links``, so pip resolves from those wheels without the network. The key covers what
decides the resolution (this Python, the package's dependencies and build requirements, the
Airflow pin, the constraints), so a change to any of them fills a new wheelhouse, which
replaces the old one. The constraints are ``requirements.lock``'s pins, as a constraints
file: without them pip backtracked through about 30 releases of fastapi and cadwyn, each
one downloaded. PySpark and pyspark-client are left out of the constraints: the package's
own pins decide them, as for a user. The time each step took, wall and CPU (its processes'),
is printed (``-s`` or the report's captured output).

The MERGE gets a class-archive cache of its own (``AIRFLOW_DELTA_CACHE``) and sets the
driver's JVM options itself, so no class archive is used or written: a new PySpark install
keys a new archive, and the background job that writes it after the first Spark job
(``airflow_delta/hooks/driver_jvm.py``) would outlive the test, cost a Spark job's CPU every
run and, in the shared cache, replace the archive of the suite's own PySpark.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import textwrap
import time
import tomllib
import uuid
import venv
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
AIRFLOW_PIN = "apache-airflow==3.3.2"
STEP_TIMEOUT = 1500
# The two packages that share `pyspark/`: pinned by pyproject.toml, never by the constraints.
OWN_PINS = {"pyspark", "pyspark-client"}
WHEELHOUSE_PREFIX = "pip-wheelhouse-"

MERGE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import pyarrow as pa
    from airflow_delta.engine import DeltaTable
    from airflow_delta.operators.dml import DeltaMergeOperator

    root = sys.argv[1]
    schema = pa.schema([("id", pa.int64()), ("value", pa.string())])
    target = DeltaTable.create(f"{root}/target", schema)
    target.append(pa.Table.from_pylist([{"id": 1, "value": "a"}, {"id": 2, "value": "b"}], schema=schema))
    source = DeltaTable.create(f"{root}/source", schema)
    source.append(pa.Table.from_pylist([{"id": 2, "value": "B"}, {"id": 3, "value": "c"}], schema=schema))

    class TaskInstance:
        dag_id, task_id, map_index = "pip_install", "merge", -1

    operator = DeltaMergeOperator(
        task_id="merge",
        table=f"{root}/target",
        merge_sql=(
            "MERGE INTO t USING s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET value = s.value WHEN NOT MATCHED THEN INSERT *"
        ),
        sources={"s": {"delta": {"uri": f"{root}/source"}}},
        execution="spark",  # a mixed PySpark breaks the Spark job; the worker path would not show it
    )
    result = operator.execute({"ti": TaskInstance(), "run_id": "manual__1"})
    rows = sorted(DeltaTable(f"{root}/target").snapshot().to_arrow().to_pylist(), key=lambda r: r["id"])
    print("MERGE_RESULT " + json.dumps({"result": result, "rows": rows}))
    """
)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(args: list[str], *, timings: dict[str, float], step: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    started, cpu = time.monotonic(), _children_cpu()
    result = subprocess.run(args, capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False, **kwargs)  # type: ignore[call-overload]
    timings[step] = round(time.monotonic() - started, 1)
    timings[f"{step} (CPU)"] = round(_children_cpu() - cpu, 1)
    assert result.returncode == 0, f"{step} failed ({' '.join(args)}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def lock_constraints() -> str:
    """``requirements.lock``'s pins as pip constraints (no extras), without :data:`OWN_PINS`."""
    pins = []
    for line in (REPO_ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        found = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^]]*\])?==(\S+)", line)
        if found and found[1].lower().replace("_", "-") not in OWN_PINS:
            pins.append(f"{found[1]}=={found[2]}")
    return "\n".join(pins) + "\n"


def wheelhouse_key(constraints: str) -> str:
    """What decides pip's resolution: this Python, the package's dependencies and build requirements, the pins."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    decided_by = {
        "python": [sys.implementation.cache_tag, sys.platform, os.uname().machine],
        "dependencies": project["project"]["dependencies"],
        "build": project["build-system"]["requires"],
        "airflow": AIRFLOW_PIN,
        "constraints": constraints,
    }
    return hashlib.sha256(json.dumps(decided_by, sort_keys=True).encode()).hexdigest()[:16]


def wheelhouse_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-delta-tests"


def fill_wheelhouse(python: str, env: dict[str, str], constraints_file: Path, key: str, timings: dict[str, float]) -> Path:
    """The wheelhouse of ``key``, filled by pip from the index when this machine has none yet.

    pip builds every requirement into wheels (PySpark's sdist once into its wheel cache), in
    a directory of its own that is renamed into place when complete, so a run that is
    killed, or two that fill at once, leave no half-filled wheelhouse. The complete one
    replaces the wheelhouses of other keys.
    """
    root = wheelhouse_root()
    wheelhouse = root / f"{WHEELHOUSE_PREFIX}{key}"
    if wheelhouse.is_dir():
        return wheelhouse
    root.mkdir(parents=True, exist_ok=True)
    filling = root / f".{WHEELHOUSE_PREFIX}{key}.{uuid.uuid4().hex}.tmp"
    try:
        _run(
            [python, "-m", "pip", "wheel", "--disable-pip-version-check", "--quiet", "-w", str(filling),
             "-c", str(constraints_file), str(REPO_ROOT), AIRFLOW_PIN, *_build_requirements()],
            timings=timings, step="fill the wheelhouse (once per machine)", env=env,
        )
        for own in filling.glob("airflow_delta-*.whl"):
            own.unlink()  # built fresh by every run, from the checkout
        try:
            filling.rename(wheelhouse)
        except OSError:
            if not wheelhouse.is_dir():
                raise  # not a concurrent run's complete wheelhouse in the way
    finally:
        shutil.rmtree(filling, ignore_errors=True)
    for other in root.glob(f"{WHEELHOUSE_PREFIX}*"):
        if other != wheelhouse:
            shutil.rmtree(other, ignore_errors=True)
    return wheelhouse


def _build_requirements() -> list[str]:
    return list(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]["requires"])


@pytest.mark.slow
@pytest.mark.timeout(STEP_TIMEOUT * 3)
def test_the_wheel_pip_installed_with_airflow_runs_a_merge(tmp_path: Path) -> None:
    timings: dict[str, float] = {}
    env_dir = tmp_path / "venv"
    started = time.monotonic()
    venv.EnvBuilder(with_pip=True).create(env_dir)
    timings["create the venv"] = round(time.monotonic() - started, 1)
    python = str(env_dir / "bin" / "python")
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(Path.home()), "PYTHONDONTWRITEBYTECODE": "1"}
    if os.environ.get("XDG_CACHE_HOME"):
        env["XDG_CACHE_HOME"] = os.environ["XDG_CACHE_HOME"]  # pip's cache, as the caller's
    constraints = lock_constraints()
    constraints_file = tmp_path / "constraints.txt"
    constraints_file.write_text(constraints, encoding="utf-8")
    wheelhouse = fill_wheelhouse(python, env, constraints_file, wheelhouse_key(constraints), timings)
    offline = ["--no-index", "--find-links", str(wheelhouse)]

    wheel_dir = tmp_path / "dist"
    _run(
        [python, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", *offline, "-w", str(wheel_dir),
         str(REPO_ROOT)],
        timings=timings, step="build the wheel", env=env,
    )
    (wheel,) = wheel_dir.glob("airflow_delta-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names  # the Apache-2.0 text ships
    assert "License-Expression: Apache-2.0" in metadata
    assert "Project-URL: Documentation, " in metadata

    _run(
        [python, "-m", "pip", "install", "--no-compile", "--disable-pip-version-check", "--quiet", *offline,
         "-c", str(constraints_file), str(wheel), AIRFLOW_PIN],
        timings=timings, step="pip install", env=env,
    )
    _run([python, "-m", "pip", "check"], timings=timings, step="pip check", env=env)

    versions = _run(
        [python, "-c", textwrap.dedent(
            """
            import json
            from importlib import metadata
            import pyspark
            from airflow_delta.spark.installation import spark_home_versions
            from pathlib import Path
            print(json.dumps({
                "pyspark": metadata.version("pyspark"),
                "pyspark-client": metadata.version("pyspark-client"),
                "imported": pyspark.__version__,
                "home": spark_home_versions(Path(pyspark.__file__).parent),
            }))
            """
        )],
        timings=timings, step="read versions", env=env,
    )
    found = json.loads(versions.stdout.strip().splitlines()[-1])
    release = found["pyspark"]
    assert release.startswith("4.2."), found
    assert found["pyspark-client"] == found["imported"] == release and found["home"] == [release, release], found

    home = tmp_path / "airflow_home"
    home.mkdir()
    merge_env = {
        **env,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_DELTA_DEFAULT": json.dumps(
            {
                "conn_type": "delta",
                "extra": {
                    "spark_conn_id": "spark_local",
                    "spark_conf": {
                        "spark.ui.enabled": "false",
                        # Options of the driver's own: no class archive is used or written (see above).
                        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                    },
                },
            }
        ),
        "AIRFLOW_DELTA_CACHE": str(tmp_path / "airflow-delta-cache"),
    }
    script = tmp_path / "merge.py"
    script.write_text(MERGE_SCRIPT, encoding="utf-8")
    tables = tmp_path / "tables"
    tables.mkdir()
    merged = _run([python, str(script), str(tables)], timings=timings, step="one MERGE", env=merge_env, cwd=tmp_path)
    print("pip install test timings (s):", json.dumps(timings))

    line = next(x for x in merged.stdout.splitlines() if x.startswith("MERGE_RESULT "))
    outcome = json.loads(line.split(" ", 1)[1])
    assert outcome["rows"] == [{"id": 1, "value": "a"}, {"id": 2, "value": "B"}, {"id": 3, "value": "c"}]
    assert outcome["result"]["operation"] == "MERGE" and outcome["result"]["version"] == 2
    metrics = outcome["result"]["metrics"]
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (1, 1)
