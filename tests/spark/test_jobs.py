"""The programs' package: which PySpark a driver imports when spark-submit put a pyspark.zip first."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark

INSTALLED_PYSPARK = Path(pyspark.__file__).resolve().parent
OWN_ZIP = INSTALLED_PYSPARK / "python" / "lib" / "pyspark.zip"


def _driver_imports(path_first: list[str]) -> dict[str, object]:
    """What a fresh interpreter whose path starts with ``path_first`` (as spark-submit sets it) imports pyspark from."""
    program = (
        "import json, sys\n"
        "from airflow_delta.spark.jobs import prefer_installed_pyspark\n"
        "taken_off = prefer_installed_pyspark()\n"
        "import pyspark.sql\n"
        "print(json.dumps({'taken_off': taken_off, 'pyspark': pyspark.__file__,\n"
        "                  'zips': [entry for entry in sys.path if entry.endswith(('pyspark.zip', '-src.zip'))]}))\n"
    )
    # airflow_delta from this checkout; the zips ahead of it, as spark-submit's PYTHONPATH has them.
    checkout = str(Path(__file__).resolve().parents[2])
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join([*path_first, checkout])}
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_the_installed_pysparks_own_zip_gives_way_to_the_installed_package() -> None:
    py4j_zip = next((INSTALLED_PYSPARK / "python" / "lib").glob("py4j-*.zip"))
    report = _driver_imports([str(OWN_ZIP), str(py4j_zip)])

    assert report["taken_off"] is True
    assert report["pyspark"] == str(INSTALLED_PYSPARK / "__init__.py")
    assert report["zips"] == [str(py4j_zip)]  # only PySpark's own zip is taken off


def test_another_sparks_zip_stays_first(tmp_path: Path) -> None:
    # A cluster's SPARK_HOME: its pyspark.zip may be another release, so the driver keeps it.
    other_home = tmp_path / "spark-home" / "python" / "lib"
    other_home.mkdir(parents=True)
    other_zip = other_home / "pyspark.zip"
    shutil.copyfile(OWN_ZIP, other_zip)

    report = _driver_imports([str(other_zip)])

    assert report["taken_off"] is False
    assert report["pyspark"] == f"{other_zip}/pyspark/__init__.py"
    assert report["zips"] == [str(other_zip)]


def test_without_a_pyspark_zip_nothing_changes() -> None:
    report = _driver_imports([])

    assert report["taken_off"] is False
    assert report["pyspark"] == str(INSTALLED_PYSPARK / "__init__.py")
