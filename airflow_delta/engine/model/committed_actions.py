"""A commit's actions as JSON objects, with its many ``remove`` actions kept as columns until read.

The post-commit hook gets the actions a transaction committed. An OPTIMIZE commits
thousands of removes, and what follows the commit (the ``.crc``) needs only their count,
sizes and deletion vectors: building a dict per remove would cost more than all the rest.
:class:`CommittedActions` is the sequence of JSON objects (read it like a list: the
objects of the removes are built the first time something reads them one by one), and
its :attr:`~CommittedActions.remove_columns` let a reader that knows it take the totals
from the columns.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, overload

import numpy as np

__all__ = ["CommittedActions", "RemoveColumns"]


class RemoveColumns(Protocol):
    """``remove`` actions held as columns (one commit's, in log order)."""

    def __len__(self) -> int: ...

    def json_objects(self) -> list[dict[str, Any]]:
        """``{"remove": ...}`` of every row, exactly what the log line holds."""
        ...

    def remove_sizes(self) -> np.ndarray | None:
        """Every remove's ``size`` (int64), or None when one has none."""
        ...

    def remove_deletion_vectors(self) -> list[Mapping[str, Any]]:
        """The ``deletionVector`` JSON of the removes that carry one, in order."""
        ...


class CommittedActions(Sequence[Mapping[str, Any]]):
    """The actions of one commit in log order: JSON objects, and :class:`RemoveColumns` standing for theirs."""

    def __init__(self, parts: Sequence[Mapping[str, Any] | RemoveColumns]) -> None:
        self._parts = list(parts)
        self._objects: list[Mapping[str, Any]] | None = None

    @property
    def objects(self) -> list[Mapping[str, Any]]:
        """Every action as a JSON object (the removes' built on first use)."""
        if self._objects is None:
            self._objects = [
                o for part in self._parts for o in (part.json_objects() if _is_columns(part) else (part,))  # type: ignore[union-attr]
            ]
        return self._objects

    @property
    def other_actions(self) -> list[Mapping[str, Any]]:
        """The actions given as JSON objects: all but the :attr:`remove_columns` (which hold only removes)."""
        return [part for part in self._parts if not _is_columns(part)]  # type: ignore[misc]

    @property
    def remove_columns(self) -> list[RemoveColumns]:
        return [part for part in self._parts if _is_columns(part)]  # type: ignore[misc]

    def __len__(self) -> int:
        return sum(len(part) if _is_columns(part) else 1 for part in self._parts)

    @overload
    def __getitem__(self, index: int) -> Mapping[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[Mapping[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> Mapping[str, Any] | list[Mapping[str, Any]]:
        return self.objects[index]

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return iter(self.objects)


def _is_columns(part: object) -> bool:
    return not isinstance(part, Mapping)
