"""Shipping the engine to Spark: the ``py_files`` zip and the executors' requirements.

The Spark programs import ``airflow_delta.engine`` on the driver and on the executors,
which may have no airflow-delta installed. ``spark-submit --py-files`` puts a zip on
their ``sys.path``; :func:`engine_py_files` builds that zip from the installed package,
so that the code Spark runs is exactly the code the operator imported.

The zip is named by the SHA-256 of what it holds and cached, so that a worker builds it
once per release (not once per task), and so that a cluster that caches ``py_files`` by
name never runs a stale engine. Stdlib only: the operators call this in the worker.

Next to each source the zip holds its bytecode for the worker's Python (``module.pyc``,
checked against the source's hash, PEP 552), because Python never caches the bytecode of
modules it imports from a zip: without it every driver and Python worker compiles the
engine again (about 0.3 s of CPU). An interpreter of another Python version rejects that
bytecode by its magic number and compiles the source, as it would without it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import tempfile
import zipfile
from pathlib import Path

__all__ = ["CACHE_DIR_ENV", "EXECUTOR_REQUIREMENTS", "default_cache_dir", "engine_py_files", "py_files_zip"]

CACHE_DIR_ENV = "AIRFLOW_DELTA_CACHE"

EXECUTOR_REQUIREMENTS: tuple[str, ...] = (
    # What `import airflow_delta.engine` and the per-file work (reading a file with its DV
    # applied, writing parquet with statistics) import. The ranges are pyproject.toml's.
    "pyarrow>=18",
    "pyroaring>=1.0",
    # sqlglot: writing data files to a table with CHECK constraints parses them
    # (engine/model/constraints.py), and that check runs where the file is written.
    "sqlglot>=26",
    # numpy: the engine builds Arrow arrays from numpy buffers everywhere.
    "numpy>=1.26",
    # obstore: tables on S3, Azure or GCS are read and written on executors through the
    # engine's ObjectStoreFileIO (loaded only for those URIs; local tables do not need it).
    "obstore>=0.8",
)
"""The Python packages an executor needs besides the zip (pip requirement strings)."""

# Bumped when the zip's layout changes, so that a new layout never reuses an old name.
_LAYOUT_VERSION = b"airflow-delta py_files layout 2: sources and hash-checked bytecode\n"
# The bytecode's version: the worker's Python (a zip's name depends on it too).
_BYTECODE_MAGIC = importlib.util.MAGIC_NUMBER
# PEP 552 flags: the pyc is hash-based and its source hash is checked when it is loaded.
_CHECKED_HASH_FLAGS = 0b11
# Zip's earliest representable time: every entry gets it, so the bytes depend only on the sources.
_FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_SHIPPED_SUBPACKAGES = ("engine", "spark")


def default_cache_dir() -> Path:
    """The worker's cache of what jobs reuse (the py_files zip, the driver JVM's class archive):
    ``$AIRFLOW_DELTA_CACHE``, else ``~/.cache/airflow-delta``."""
    configured = os.environ.get(CACHE_DIR_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "airflow-delta"


def _is_source(relative: Path) -> bool:
    """A module source to ship: no bytecode caches, no tests, nothing but ``.py``."""
    parts = relative.parts
    if "__pycache__" in parts or "tests" in parts or "test" in parts:
        return False
    name = parts[-1]
    return name.endswith(".py") and not name.startswith("test_") and name != "conftest.py"


def _sources(package_dir: Path) -> list[tuple[str, Path]]:
    """``(name in the zip, file)`` for every shipped source, sorted by name."""
    package_name = package_dir.name
    found: list[tuple[str, Path]] = [(f"{package_name}/__init__.py", package_dir / "__init__.py")]
    for subpackage in _SHIPPED_SUBPACKAGES:
        root = package_dir / subpackage
        for path in root.rglob("*.py"):
            relative = path.relative_to(package_dir)
            if path.is_file() and _is_source(relative):
                found.append((f"{package_name}/{relative.as_posix()}", path))
    return sorted(found)


def _content_digest(sources: list[tuple[str, bytes]]) -> str:
    # Length-prefixed names and bodies: no two different trees can hash the same stream.
    digest = hashlib.sha256(_LAYOUT_VERSION + _BYTECODE_MAGIC)
    for name, body in sources:
        encoded = name.encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "big") + encoded)
        digest.update(len(body).to_bytes(8, "big") + body)
    return digest.hexdigest()


def _bytecode(name: str, source: bytes) -> bytes:
    """``source``'s ``.pyc`` (PEP 552 checked-hash layout) for this interpreter; tracebacks show ``name``."""
    code = compile(source, name, "exec", dont_inherit=True)
    header = _BYTECODE_MAGIC + _CHECKED_HASH_FLAGS.to_bytes(4, "little") + importlib.util.source_hash(source)
    return header + marshal.dumps(code)


def _with_bytecode(sources: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """Each source followed by its bytecode, ``module.pyc`` next to ``module.py`` where zipimport looks first."""
    entries: list[tuple[str, bytes]] = []
    for name, body in sources:
        entries += [(name, body), (f"{name}c", _bytecode(name, body))]
    return entries


def _write_zip(target: Path, sources: list[tuple[str, bytes]]) -> None:
    with zipfile.ZipFile(target, "w") as archive:
        for name, body in _with_bytecode(sources):
            entry = zipfile.ZipInfo(name, date_time=_FIXED_ZIP_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.create_system = 3  # Unix, whatever the builder runs on
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, body)


def py_files_zip(package_dir: Path, cache_dir: Path) -> Path:
    """The zip of ``package_dir``'s shipped sources, in ``cache_dir``, built if absent.

    ``package_dir`` is a package directory laid out like ``airflow_delta``. The file is
    ``<package>-py-files-<sha256>.zip``, the hash taken over the names and bytes of the
    sources: an unchanged tree finds its zip and builds nothing. A build writes a
    temporary file in ``cache_dir`` and renames it into place, so a reader never sees a
    partial zip; two processes building at once each rename a complete, identical file.
    """
    package_dir = Path(package_dir)
    if not (package_dir / "__init__.py").is_file():
        raise FileNotFoundError(f"{package_dir} is not a package directory: it has no __init__.py")
    sources = [(name, path.read_bytes()) for name, path in _sources(package_dir)]
    digest = _content_digest(sources)
    cache_dir = Path(cache_dir)
    final = cache_dir / f"{package_dir.name}-py-files-{digest}.zip"
    if final.is_file():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    descriptor, temporary_name = tempfile.mkstemp(dir=cache_dir, prefix=f".{final.name}.", suffix=".tmp")
    temporary = Path(temporary_name)
    try:
        os.close(descriptor)
        _write_zip(temporary, sources)
        # mkstemp makes the file private; Spark may read the cache as another local user.
        temporary.chmod(0o644)
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temporary, final)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return final


def engine_py_files(cache_dir: Path | None = None) -> Path:
    """The ``--py-files`` zip of the installed ``airflow_delta`` (its ``__init__``, the
    engine and the Spark programs), cached in ``cache_dir`` (default:
    ``$AIRFLOW_DELTA_CACHE``, else ``~/.cache/airflow-delta``)."""
    installed_package = Path(__file__).resolve().parent.parent
    return py_files_zip(installed_package, default_cache_dir() if cache_dir is None else Path(cache_dir))
