"""Import rules that import-linter cannot see: code outside the ``airflow_delta`` package.

``make test`` runs import-linter on the package itself (pyproject.toml,
``[tool.importlinter]``). The example DAGs, benchmarks and the engine's own modules are
checked here, from their source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import airflow_delta.engine as engine

REPO = Path(__file__).resolve().parents[1]
ENGINE = REPO / "airflow_delta" / "engine"


def engine_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every ``airflow_delta.engine...`` import in a file, nested ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("airflow_delta.engine"):
            found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name, []) for a in node.names if a.name.startswith("airflow_delta.engine"))
    return found


OUTSIDE = sorted([*REPO.glob("dags_examples/**/*.py"), *REPO.glob("benchmarks/**/*.py")])


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: str(p.relative_to(REPO)))
def test_example_dags_and_benchmarks_use_only_the_public_api(path: Path) -> None:
    for line, module, names in engine_imports(path):
        assert module == "airflow_delta.engine", f"{path.name}:{line} imports the engine internal {module}"
        unknown = set(names) - set(engine.__all__)
        assert not unknown, f"{path.name}:{line} imports {sorted(unknown)}, which the public API does not export"


def test_outside_code_was_found() -> None:
    assert any(p.parent.name == "dags_examples" for p in OUTSIDE)
    assert any(p.parent.name == "benchmarks" for p in OUTSIDE)


def test_no_engine_module_imports_the_public_api_package() -> None:
    # The public API imports every layer; an engine module importing it would close a cycle.
    offenders = [
        f"{p.relative_to(REPO)}:{line}"
        for p in ENGINE.rglob("*.py")
        if p != ENGINE / "__init__.py"
        for line, module, _ in engine_imports(p)
        if module == "airflow_delta.engine"
    ]
    assert offenders == []


def test_every_public_name_resolves() -> None:
    for name in engine.__all__:
        assert getattr(engine, name) is not None, name


def test_every_error_class_is_public() -> None:
    import inspect

    from airflow_delta.engine import errors

    classes = {
        name
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, engine.DeltaError) and obj.__module__ == errors.__name__
    }
    assert classes - set(engine.__all__) == set()
