"""The py_files zip: importable on its own, deterministic, cached by content, built atomically."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import tomllib
import zipfile
from pathlib import Path

import pytest

import airflow_delta
from airflow_delta.spark import packaging
from airflow_delta.spark.packaging import EXECUTOR_REQUIREMENTS, engine_py_files, py_files_zip

INSTALLED_PACKAGE = Path(airflow_delta.__file__).resolve().parent
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def run_with_only_zip(zip_path: Path, cwd: Path, program: str) -> str:
    """``program``'s stdout in a fresh interpreter importing airflow_delta from the zip alone
    (the venv's site-packages stay: they stand for the executors' installed requirements)."""
    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=cwd,
        env={"PYTHONPATH": str(zip_path), "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def built_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The installed package's zip, built once for the module's tests that only read it (a build compiles every source)."""
    return engine_py_files(tmp_path_factory.mktemp("py-files"))


# One interpreter importing the engine from the zip alone, for two tests: what the imports
# pulled in (by distribution), and the modules zipimport compiled from source on the way.
_IMPORT_REPORT = (
    "import importlib.metadata, json, sys, zipimport\n"
    "before = set(sys.modules)  # what the interpreter's start-up (site, .pth files) loaded\n"
    "compiled = []\n"
    "original = zipimport._compile_source\n"
    "def recording(pathname, source):\n"
    "    compiled.append(pathname)\n"
    "    return original(pathname, source)\n"
    "zipimport._compile_source = recording\n"
    "import airflow_delta, airflow_delta.engine, airflow_delta.spark.specs, airflow_delta.spark.packaging\n"
    "# The public API loads its names on first use: what the executors use, loaded here.\n"
    "from airflow_delta.engine import DeltaTable, TableContext, read_live_rows, write_checkpoint\n"
    "owners = importlib.metadata.packages_distributions()\n"
    "imported = {name.split('.')[0] for name in set(sys.modules) - before}\n"
    "distributions = sorted({d.lower() for name in imported for d in owners.get(name, [])})\n"
    "print(json.dumps({'file': airflow_delta.__file__, 'engine': airflow_delta.engine.__file__,\n"
    "                  'DeltaTable': hasattr(airflow_delta.engine, 'DeltaTable'), 'distributions': distributions,\n"
    "                  'compiled': compiled}))\n"
)


@pytest.fixture(scope="module")
def import_report(built_zip: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return json.loads(run_with_only_zip(built_zip, tmp_path_factory.mktemp("cwd"), _IMPORT_REPORT))


def copied_package(tmp_path: Path) -> Path:
    copy = tmp_path / "tree" / "airflow_delta"
    shutil.copytree(INSTALLED_PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_the_zip_alone_provides_the_engine_and_the_spark_programs(built_zip: Path, import_report: dict) -> None:
    zip_path, report = built_zip, import_report
    # Loaded from the zip's bytecode (a module's file is then its .pyc).
    assert report["file"] == f"{zip_path}/airflow_delta/__init__.pyc"
    assert report["engine"] == f"{zip_path}/airflow_delta/engine/__init__.pyc"
    assert report["DeltaTable"]
    # Whatever importing the engine pulls in, the executors' requirements name it.
    required = {requirement.split(">")[0].split("=")[0].split("<")[0] for requirement in EXECUTOR_REQUIREMENTS}
    assert set(report["distributions"]) - {"airflow-delta", "airflow_delta"} <= required
    assert "pyarrow" in report["distributions"]


def test_the_zip_holds_sources_and_their_bytecode_in_a_fixed_order_and_time(built_zip: Path) -> None:
    with zipfile.ZipFile(built_zip) as archive:
        entries = archive.infolist()
        assert archive.testzip() is None
    names = [entry.filename for entry in entries]
    assert names == sorted(names)
    assert "airflow_delta/__init__.py" in names
    assert "airflow_delta/engine/__init__.py" in names
    assert "airflow_delta/spark/specs.py" in names
    assert "airflow_delta/spark/packaging.py" in names
    sources = [name for name in names if name.endswith(".py")]
    assert [name for name in names if not name.endswith(".py")] == [f"{name}c" for name in sources]
    assert all("__pycache__" not in name for name in names)
    assert all(name.startswith(("airflow_delta/engine/", "airflow_delta/spark/")) for name in names[2:])
    assert {entry.date_time for entry in entries} == {(1980, 1, 1, 0, 0, 0)}
    shipped = {
        f"airflow_delta/{path.relative_to(INSTALLED_PACKAGE).as_posix()}"
        for sub in ("engine", "spark")
        for path in (INSTALLED_PACKAGE / sub).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert set(sources) == shipped | {"airflow_delta/__init__.py"}


def test_a_driver_of_the_workers_python_imports_the_zip_without_compiling_it(import_report: dict) -> None:
    assert (import_report["compiled"], import_report["DeltaTable"]) == ([], True)


def test_another_pythons_interpreter_compiles_the_sources_of_the_zip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built_zip: Path
) -> None:
    # Bytecode of another Python version (its magic number differs): the interpreter
    # rejects it and compiles the sources next to it, as with a zip of sources only.
    mine = built_zip
    other_python = bytes([packaging.importlib.util.MAGIC_NUMBER[0] ^ 0xFF]) + packaging.importlib.util.MAGIC_NUMBER[1:]
    monkeypatch.setattr(packaging, "_BYTECODE_MAGIC", other_python)
    zip_path = engine_py_files(tmp_path / "cache")
    assert zip_path.name != mine.name  # the bytecode's Python is part of the name

    report = json.loads(run_with_only_zip(zip_path, tmp_path, _IMPORT_REPORT))

    assert report["DeltaTable"]
    assert f"{zip_path}/airflow_delta/engine/__init__.py" in report["compiled"]


def test_builds_are_byte_identical_and_reused_when_nothing_changed(tmp_path: Path, built_zip: Path) -> None:
    first = built_zip
    before = first.stat()
    again = engine_py_files(first.parent)
    assert again == first
    assert (again.stat().st_ino, again.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    elsewhere = engine_py_files(tmp_path / "two")
    assert elsewhere.name == first.name
    assert elsewhere.read_bytes() == first.read_bytes()
    assert [path.name for path in first.parent.iterdir()] == [first.name]  # no temporary left


def test_the_name_changes_when_a_shipped_source_changes(tmp_path: Path, built_zip: Path) -> None:
    package = copied_package(tmp_path)
    cache = tmp_path / "cache"
    original = py_files_zip(package, cache)
    assert original.name == built_zip.name  # the copy is the same tree

    (package / "cli.py").write_text("# not shipped\n")
    (package / "engine" / "__pycache__").mkdir()
    (package / "engine" / "__pycache__" / "errors.cpython-311.pyc").write_bytes(b"\0")
    assert py_files_zip(package, cache) == original

    errors = package / "engine" / "errors.py"
    errors.write_text(errors.read_text() + "\n# changed\n")
    changed = py_files_zip(package, cache)
    assert changed != original
    assert original.exists()  # a build never removes another version's zip
    with zipfile.ZipFile(changed) as archive:
        assert archive.read("airflow_delta/engine/errors.py").endswith(b"# changed\n")

    (package / "spark" / "new_module.py").write_text("VALUE = 1\n")
    assert py_files_zip(package, cache) not in (original, changed)


def test_concurrent_builders_leave_one_complete_zip(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    results: list[Path] = []
    failures: list[BaseException] = []

    def build() -> None:
        try:
            results.append(engine_py_files(cache))
        except BaseException as error:  # reported below, not lost in the thread
            failures.append(error)

    builders = [threading.Thread(target=build) for _ in range(4)]
    for builder in builders:
        builder.start()
    for builder in builders:
        builder.join()
    assert not failures
    assert len(set(results)) == 1
    assert [path.name for path in cache.iterdir()] == [results[0].name]
    with zipfile.ZipFile(results[0]) as archive:
        assert archive.testzip() is None


def test_a_failed_build_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(target: Path, sources: list[tuple[str, bytes]]) -> None:
        target.write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(packaging, "_write_zip", broken)
    with pytest.raises(OSError, match="disk full"):
        engine_py_files(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_cache_directory_defaults_to_the_environment_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built_zip: Path
) -> None:
    # The built zip copied into both directories first: found there, no build (a zip of
    # another directory would be a build elsewhere, whose parent the assertions refuse).
    configured, home_cache = tmp_path / "configured", tmp_path / "home" / ".cache" / "airflow-delta"
    for directory in (configured, home_cache):
        directory.mkdir(parents=True)
        shutil.copy(built_zip, directory)
    monkeypatch.setenv("AIRFLOW_DELTA_CACHE", str(configured))
    assert engine_py_files() == configured / built_zip.name
    monkeypatch.delenv("AIRFLOW_DELTA_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert engine_py_files() == home_cache / built_zip.name


def test_a_directory_without_a_package_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no __init__\.py"):
        py_files_zip(tmp_path, tmp_path / "cache")


def test_executor_requirements_use_pyprojects_ranges() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    ranges = {requirement.split(">")[0].split("<")[0].split("=")[0]: requirement for requirement in declared}
    for requirement in EXECUTOR_REQUIREMENTS:
        name = requirement.split(">")[0].split("<")[0].split("=")[0]
        if name in ranges:
            assert requirement == ranges[name]
    names = {requirement.split(">")[0] for requirement in EXECUTOR_REQUIREMENTS}
    assert {"pyarrow", "pyroaring"} <= names
    assert not names & {"apache-airflow", "pyspark", "apache-airflow-providers-apache-spark"}


def test_packaging_imports_the_stdlib_only() -> None:
    program = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import airflow_delta.spark.packaging\n"
        "loaded = {name.split('.')[0] for name in set(sys.modules) - before}\n"
        "print(sorted(loaded - set(sys.stdlib_module_names) - {'airflow_delta'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
