"""SET targets as column paths: ``address.city``, ```odd.name`.x``, checked without Spark.

UPDATE's ``set`` and MERGE's ``assignments`` are keyed by the column they assign, which may
be a field of a struct, written as Delta's and Spark's APIs take it
(``UnresolvedAttribute.quotedString``): names joined by dots, a name holding a dot or a
backtick quoted with backticks (a backtick inside doubled). The specs check the paths
when they are built (the operators build them in the Airflow worker, which has no Spark),
and the job resolves them against the table's schema
(:mod:`airflow_delta.spark.nested_assignments`). Stdlib only: the specs import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from airflow_delta.engine import InvalidArgumentError

__all__ = ["conflicting_paths", "format_column_path", "parse_column_path", "set_target_paths"]

def parse_column_path(text: str, *, argument: str) -> tuple[str, ...]:
    """The names of ``text``'s path, outermost first: ``a.`b.c`.d`` -> ``("a", "b.c", "d")``.

    Raises :class:`InvalidArgumentError` naming ``argument`` for an empty name (``a..b``,
    a leading or trailing dot) or an unclosed backtick.
    """
    names: list[str] = []
    current: list[str] = []
    quoted = False  # the current name was written in backticks (so it may be empty of dots, not of text)
    position, length = 0, len(text)
    while position < length:
        char = text[position]
        if char == "`":
            closing = position + 1
            while True:
                closing = text.find("`", closing)
                if closing < 0:
                    raise InvalidArgumentError(argument, text, "a column path whose backticks are closed (`name`)")
                if text[closing + 1 : closing + 2] != "`":
                    break
                closing += 2  # a doubled backtick is one backtick of the name
            if current:
                raise InvalidArgumentError(argument, text, "a column path whose quoted names are whole (`a`.b, not x`a`)")
            current.append(text[position + 1 : closing].replace("``", "`"))
            quoted = True
            position = closing + 1
            if position < length and text[position] != ".":
                raise InvalidArgumentError(argument, text, "a column path whose quoted names are whole (`a`.b, not `a`x)")
        elif char == ".":
            names.append(_name(text, current, quoted, argument))
            current, quoted = [], False
            position += 1
        else:
            current.append(char)
            position += 1
    names.append(_name(text, current, quoted, argument))
    return tuple(names)


def _name(text: str, chars: list[str], quoted: bool, argument: str) -> str:
    name = "".join(chars)
    if not quoted:
        name = name.strip()
    if not name:
        raise InvalidArgumentError(
            argument, text, "a column or a struct field path such as address.city (no empty name between dots)"
        )
    return name


def format_column_path(names: Sequence[str]) -> str:
    """``names`` as one path text that :func:`parse_column_path` reads back; names without a dot or a backtick stay unquoted."""
    return ".".join(name if _reads_back_unquoted(name) else "`" + name.replace("`", "``") + "`" for name in names)


def _reads_back_unquoted(name: str) -> bool:
    # Quoted only where it must be: a name with spaces inside (`my col`) stays as users write it.
    return "." not in name and "`" not in name and name == name.strip()


def conflicting_paths(paths: Iterable[Sequence[str]]) -> list[str] | None:
    """The first two paths that assign the same value twice, as texts; None when there are none.

    As Delta (``DELTA_CONFLICT_SET_COLUMN``): a path conflicts with an equal one and with
    any path inside it (``a`` and ``a.b``; ``a.b`` and ``a.b.c``), names compared ignoring
    case as Spark resolves them. Paths that only share a struct (``a.b`` and ``a.c``) combine.
    """
    seen: dict[tuple[str, ...], Sequence[str]] = {}
    for path in paths:
        folded = tuple(name.casefold() for name in path)
        for other_folded, other in seen.items():
            shorter = min(len(folded), len(other_folded))
            if folded[:shorter] == other_folded[:shorter]:
                return [format_column_path(other), format_column_path(path)]
        seen[folded] = path
    return None


def set_target_paths(argument: str, assignments: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """The column path of each SET target key, refusing two that conflict (see :func:`conflicting_paths`).

    Raises :class:`InvalidArgumentError` naming ``argument`` (or ``argument[key]`` for a
    malformed path).
    """
    paths = {key: parse_column_path(key, argument=f"{argument}[{key!r}]") for key in assignments}
    conflict = conflicting_paths(paths.values())
    if conflict is not None:
        raise InvalidArgumentError(
            argument,
            dict(assignments),
            f"each column or struct field assigned once: {conflict[0]!r} and {conflict[1]!r} conflict "
            "(a struct and one of its fields cannot both be SET; SET several fields of one struct instead)",
        )
    return paths
