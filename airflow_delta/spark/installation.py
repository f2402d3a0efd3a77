"""Whether a PySpark installation is one Spark release: its Python files and its jars agree.

pip installs ``pyspark`` and ``pyspark-client`` (which the apache-spark provider requires)
into the same ``pyspark/`` folder. Of two different versions the one written second wins
file by file: ``pyspark/version.py`` and the Python code then belong to one release, the
jars to another, and PySpark's calls into the JVM fail deep inside a job (a MERGE's
``Py4JException: Constructor ... UserDefinedPythonFunction(...) does not exist``) while
``pip check`` sees nothing. The hook checks the Spark it runs before ``spark-submit``
(:func:`check_spark_home`, files only, no import), the job's driver checks again once its
JVM runs (:func:`check_session`); both raise :class:`~airflow_delta.engine.MixedPySparkError`,
which names the pip command that fixes it.

Only the standard library at import time: the Airflow side imports this module.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_delta.engine import MixedPySparkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_session", "check_spark_home", "fix_version", "spark_home_versions"]

_VERSION_ASSIGNMENT = re.compile(r"""^__version__(?:\s*:\s*str)?\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_SPARK_CORE_JAR = re.compile(r"^spark-core_[0-9.]+-(?P<version>.+)\.jar$")


def _python_version(spark_home: Path) -> str | None:
    # pip's PySpark is the package folder itself; a Spark distribution keeps it under python/.
    for version_file in (spark_home / "version.py", spark_home / "python" / "pyspark" / "version.py"):
        try:
            text = version_file.read_text(encoding="utf-8")
        except OSError:
            continue
        found = _VERSION_ASSIGNMENT.search(text)
        if found:
            return found.group(1)
    return None


def _jars_version(spark_home: Path) -> str | None:
    try:
        names = [entry.name for entry in (spark_home / "jars").iterdir()]
    except OSError:
        return None
    versions = sorted({m["version"] for m in map(_SPARK_CORE_JAR.match, names) if m})
    return versions[0] if len(versions) == 1 else (", ".join(versions) or None)


def spark_home_versions(spark_home: str | Path) -> tuple[str | None, str | None]:
    """The Spark release of the installation's Python files (``version.py``) and of its jars
    (``jars/spark-core_*-VERSION.jar``); None for what the folder does not have."""
    home = Path(spark_home)
    return _python_version(home), _jars_version(home)


def fix_version(jvm_version: str) -> str:
    """The release both packages should be: pyspark-client's when it is installed (its newest
    release is what both can agree on), else the jars'."""
    try:
        return metadata.version("pyspark-client")
    except metadata.PackageNotFoundError:
        return jvm_version


def check_spark_home(spark_home: str | Path) -> None:
    """Raise :class:`MixedPySparkError` when the installation's Python files and jars are of different releases.

    A folder without one of the two (a cluster's Spark without Python, a client-only
    PySpark) is not judged: there is nothing to compare.
    """
    python_version, jars_version = spark_home_versions(spark_home)
    if python_version is None or jars_version is None or python_version == jars_version:
        return
    raise MixedPySparkError(str(spark_home), python_version, jars_version, fix_version(jars_version))


def check_session(session: SparkSession) -> None:
    """In a job's driver: raise :class:`MixedPySparkError` when the imported PySpark is not the JVM's release."""
    import pyspark

    python_version, jvm_version = pyspark.__version__, session.version
    if python_version != jvm_version:
        location = str(Path(pyspark.__file__).parent)
        raise MixedPySparkError(location, python_version, jvm_version, fix_version(jvm_version))
