"""The documentation stays honest: every public provider class has its own heading, every
argument of it is on its page and in its docstring, every relative link resolves, every
page is in the index, and the DAGs the docs show are valid DAG files.

The classes come from ``get_provider_info()``'s modules, so a new operator, sensor,
trigger or hook fails here until it is documented.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from airflow.sdk import BaseHook, BaseOperator
from airflow.triggers.base import BaseTrigger

from airflow_delta.provider import get_provider_info

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
LINKED_PAGES = [*PAGES, REPO_ROOT / "README.md"]

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_EXEC_MARKER = "<!-- docs-test: exec -->"


# --------------------------------------------------------------------------- reading markdown


@dataclass(frozen=True)
class Heading:
    page: Path
    level: int
    text: str
    line: int


def prose_lines(page: Path) -> Iterator[tuple[int, str]]:
    """``(index, line)`` of the lines outside fenced code blocks."""
    fenced = False
    for index, line in enumerate(page.read_text(encoding="utf-8").splitlines()):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield index, line


def headings(page: Path) -> list[Heading]:
    found = []
    for index, line in prose_lines(page):
        match = _HEADING.match(line)
        if match:
            found.append(Heading(page, len(match.group(1)), match.group(2), index))
    return found


def section(heading: Heading) -> str:
    """The heading's text and everything under it, up to the next heading of its level or higher."""
    lines = heading.page.read_text(encoding="utf-8").splitlines()
    end = len(lines)
    for other in headings(heading.page):
        if other.line > heading.line and other.level <= heading.level:
            end = other.line
            break
    return "\n".join(lines[heading.line : end])


def github_anchor(text: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for heading in headings(page):
        anchor = github_anchor(heading.text)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        result.add(anchor if count == 0 else f"{anchor}-{count}")
    return result


# --------------------------------------------------------------------------- the provider's classes


def provider_classes() -> list[type]:
    """Every public hook, operator, sensor and trigger class the provider's modules define."""
    info = get_provider_info()
    modules = [
        module for kind in ("hooks", "operators", "sensors", "triggers") for entry in info[kind]
        for module in entry["python-modules"]
    ]
    found = []
    for name in modules:
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if (
                inspect.isclass(value)
                and value.__module__ == name
                and not attribute.startswith("_")
                and issubclass(value, (BaseOperator, BaseHook, BaseTrigger))
            ):
                found.append(value)
    return sorted(found, key=lambda cls: cls.__name__)


def init_parameters(cls: type) -> list[str]:
    """The named ``__init__`` parameters of ``cls`` and of its airflow-delta base classes."""
    names: list[str] = []
    for klass in cls.__mro__:
        if not klass.__module__.startswith("airflow_delta"):
            break
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for parameter in inspect.signature(init).parameters.values():
            if parameter.name == "self" or parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                continue
            if parameter.name not in names:
                names.append(parameter.name)
    return names


CLASSES = provider_classes()


def test_the_provider_has_the_documented_classes() -> None:
    # Guards the discovery itself: an empty or partial list would make the tests below vacuous.
    assert {cls.__name__ for cls in CLASSES} >= {
        "DeltaDeleteOperator", "DeltaUpdateOperator", "DeltaMergeOperator", "VacuumOperator", "OptimizeOperator",
        "CheckpointOperator", "RestoreOperator", "DeltaCommitConflictSensor", "DeltaPartitionSensor",
        "DeltaCommitConflictTrigger", "DeltaTableCommitTrigger", "DeltaHook",
    }


def class_heading(cls: type) -> Heading:
    word = re.compile(rf"\b{re.escape(cls.__name__)}\b")
    # Page titles (level 1) may name several classes; the class's own section is below them.
    found = [h for page in PAGES for h in headings(page) if h.level >= 2 and word.search(h.text)]
    assert len(found) == 1, (
        f"{cls.__name__} needs exactly one section heading naming it in docs/, found "
        f"{[(h.page.name, h.text) for h in found]}"
    )
    return found[0]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_class_has_a_heading_and_its_section_names_every_argument(cls: type) -> None:
    heading = class_heading(cls)
    text = section(heading)
    missing = [name for name in init_parameters(cls) if f"`{name}`" not in text]
    assert not missing, f"{heading.page.name} '{heading.text}' does not mention {missing} of {cls.__name__}"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_argument_has_a_param_line_in_the_docstring(cls: type) -> None:
    doc = inspect.getdoc(cls) or ""
    missing = [name for name in init_parameters(cls) if not re.search(rf":param {re.escape(name)}:", doc)]
    assert not missing, f"{cls.__name__}'s docstring lacks :param: for {missing}"


# --------------------------------------------------------------------------- links and the index


def relative_links(page: Path) -> Iterator[tuple[int, str]]:
    for index, line in prose_lines(page):
        for match in _LINK.finditer(_INLINE_CODE.sub("", line)):
            target = match.group(1)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                yield index + 1, target


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for line, target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"line {line}: {target} (no {resolved})")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"line {line}: {target} (no heading with anchor #{anchor} in {resolved.name})")
    assert not broken, f"{page.name}:\n" + "\n".join(broken)


def test_the_link_checker_catches_a_broken_anchor(tmp_path: Path) -> None:
    # The checker's own parts, on a page with one good and one bad link.
    page = tmp_path / "page.md"
    page.write_text("# The `delta` connection\n\n[a](#the-delta-connection) [b](#missing)\n```\n# not a heading\n```\n")
    assert anchors(page) == {"the-delta-connection"}
    assert [target for _, target in relative_links(page)] == ["#the-delta-connection", "#missing"]


def test_the_docs_index_links_every_page() -> None:
    index = DOCS / "README.md"
    linked = {(index.parent / target.partition("#")[0]).resolve() for _, target in relative_links(index)}
    missing = [str(page.relative_to(DOCS)) for page in PAGES if page != index and page.resolve() not in linked]
    assert not missing, f"docs/README.md does not link {missing}"


# --------------------------------------------------------------------------- DAGs shown in the docs


def marked_code_blocks() -> list[tuple[Path, int, str]]:
    """The python blocks right after a ``<!-- docs-test: exec -->`` line: complete DAG files."""
    blocks = []
    for page in LINKED_PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            if line.strip() != _EXEC_MARKER:
                continue
            assert lines[index + 1].strip() == "```python", f"{page.name}:{index + 1}: the marker must precede a python block"
            end = next(i for i in range(index + 2, len(lines)) if lines[i].strip() == "```")
            blocks.append((page, index + 3, "\n".join(lines[index + 2 : end])))
    return blocks


EXEC_BLOCKS = marked_code_blocks()


def test_the_docs_show_dags_that_are_checked() -> None:
    pages = {page.name for page, _, _ in EXEC_BLOCKS}
    assert {"README.md", "getting-started.md"} <= pages


@pytest.mark.parametrize(
    "page,line,code", EXEC_BLOCKS, ids=[f"{p.relative_to(REPO_ROOT)}:{n}" for p, n, _ in EXEC_BLOCKS]
)
def test_a_dag_the_docs_show_is_a_valid_dag_file(
    page: Path, line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Parsed as the DAG processor parses a DAG file: an unknown or invalid operator argument
    # (InvalidArgumentError at parse time, a typo in a keyword) is an import error here.
    from airflow.dag_processing.dagbag import DagBag

    for key in [key for key in os.environ if key.startswith("AIRFLOW")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow_home"))
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    dags_folder = tmp_path / "dags"
    dags_folder.mkdir()
    (dags_folder / f"{page.stem.replace('-', '_')}_{line}.py").write_text(code, encoding="utf-8")

    bag = DagBag(dag_folder=str(dags_folder))

    assert bag.import_errors == {}, f"{page.name}:{line}"
    assert bag.dags, f"{page.name}:{line} defines no DAG"
    for dag in bag.dags.values():
        assert dag.tasks, f"{page.name}:{line}: DAG {dag.dag_id} has no task"
