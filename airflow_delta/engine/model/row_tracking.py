"""Row tracking (PROTOCOL.md "Row Tracking"): fresh row IDs, row commit versions, materialized columns.

When the ``rowTracking`` writer feature is supported (and ``delta.rowTrackingSuspended``
is not set), every ``add`` of a commit carries ``baseRowId`` and
``defaultRowCommitVersion``: a new file gets fresh IDs above the table's high-water mark
(``delta.rowTracking`` domain, updated in the same commit) and the version it is
committed at; a re-committed file (same path, e.g. a new deletion vector) keeps the
values of the add it replaces. The assignment happens per commit attempt, so a rebase
after a lost race assigns again from the winner's high-water mark.

When row tracking is enabled (``delta.enableRowTracking=true``) the *stable* row ID and
row commit version of a row survive copies: a row copied into a new file (a rewrite,
OPTIMIZE, a DML that rewrites its file) carries them in two hidden columns of the data
file, named in the table configuration; a row an UPDATE or MERGE changed keeps its ID
and gets a null commit version, i.e. the new file's ``defaultRowCommitVersion``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from airflow_delta.engine.errors import InvalidTransactionError
from airflow_delta.engine.model.actions import AddFile, DomainMetadata, Metadata
from airflow_delta.engine.model.arrow_numpy import int64_array
from airflow_delta.engine.model.json_text import json_text

ROW_TRACKING_FEATURE = "rowTracking"
ROW_TRACKING_DOMAIN = "delta.rowTracking"
ENABLE_PROPERTY = "delta.enableRowTracking"
SUSPENDED_PROPERTY = "delta.rowTrackingSuspended"
ROW_ID_COLUMN_PROPERTY = "delta.rowTracking.materializedRowIdColumnName"
ROW_COMMIT_VERSION_COLUMN_PROPERTY = "delta.rowTracking.materializedRowCommitVersionColumnName"
MISSING_HIGH_WATER_MARK = -1

# The names reading code gives the stable values of a table's rows (Delta's
# ``_metadata.row_id`` / ``_metadata.row_commit_version``), next to the data columns.
ROW_ID = "_delta_row_id"
ROW_COMMIT_VERSION = "_delta_row_commit_version"


def _true(configuration: Mapping[str, str], key: str) -> bool:
    return str(configuration.get(key, "")).strip().lower() == "true"


def is_supported(writer_features: frozenset[str], metadata: Metadata) -> bool:
    """Whether a commit must assign row IDs: the feature is listed and assignment not suspended."""
    return ROW_TRACKING_FEATURE in writer_features and not _true(metadata.configuration, SUSPENDED_PROPERTY)


def is_enabled(metadata: Metadata) -> bool:
    """Whether rows' stable IDs and commit versions must be preserved (``delta.enableRowTracking``)."""
    return is_enabled_configuration(metadata.configuration)


def keeps_row_ids(metadata: Metadata) -> bool:
    """Whether rewrites of this table must carry rows' stable IDs and commit versions (row tracking enabled)."""
    return is_enabled(metadata)


def is_enabled_configuration(configuration: Mapping[str, str]) -> bool:
    return _true(configuration, ENABLE_PROPERTY)


# MaterializedColumns are named tuples, not frozen dataclasses: as immutable, a quarter of the
# cost to create at import (a frozen dataclass compiles six methods, ~1 ms), which every
# process that opens a table pays; nothing compares them to other types or copies them.
class MaterializedColumns(NamedTuple):
    """The hidden data-file columns that keep copied rows' stable row IDs and commit versions."""

    row_id: str
    row_commit_version: str


def materialized_columns(metadata: Metadata) -> MaterializedColumns | None:
    """The materialized column names of a table with row tracking enabled, else None."""
    if not is_enabled(metadata):
        return None
    row_id = metadata.configuration.get(ROW_ID_COLUMN_PROPERTY)
    commit_version = metadata.configuration.get(ROW_COMMIT_VERSION_COLUMN_PROPERTY)
    if not row_id or not commit_version:
        raise InvalidTransactionError(
            f"the table has {ENABLE_PROPERTY}=true but no {ROW_ID_COLUMN_PROPERTY} / "
            f"{ROW_COMMIT_VERSION_COLUMN_PROPERTY} in its configuration, so rows cannot keep their IDs; "
            "the table was enabled by a writer that did not follow the protocol"
        )
    return MaterializedColumns(row_id, commit_version)


def new_materialized_column_properties() -> dict[str, str]:
    """Configuration naming fresh materialized columns for a new table, spelled as Delta names them."""
    return {
        ROW_COMMIT_VERSION_COLUMN_PROPERTY: f"_row-commit-version-col-{uuid.uuid4()}",
        ROW_ID_COLUMN_PROPERTY: f"_row-id-col-{uuid.uuid4()}",
    }


def high_water_mark(domains: Mapping[str, DomainMetadata] | Sequence[DomainMetadata]) -> int:
    """The ``rowIdHighWaterMark`` of the ``delta.rowTracking`` domain (-1 when none was assigned yet)."""
    found = domains.get(ROW_TRACKING_DOMAIN) if isinstance(domains, Mapping) else next(
        (d for d in reversed(list(domains)) if d.domain == ROW_TRACKING_DOMAIN), None
    )
    if found is None or found.removed:
        return MISSING_HIGH_WATER_MARK
    try:
        return int(json.loads(found.configuration)["rowIdHighWaterMark"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidTransactionError(
            f"the {ROW_TRACKING_DOMAIN} domain's configuration {found.configuration!r} has no integer "
            f"rowIdHighWaterMark ({exc})"
        ) from None


def high_water_mark_domain(value: int) -> DomainMetadata:
    """The ``delta.rowTracking`` domain action recording ``value``, as Delta writes it."""
    return DomainMetadata(ROW_TRACKING_DOMAIN, json_text({"rowIdHighWaterMark": value, "domainName": ROW_TRACKING_DOMAIN}))


def _physical_records(add: AddFile) -> int:
    try:
        count = json.loads(add.stats)["numRecords"] if add.stats else None
    except (ValueError, TypeError, KeyError):
        count = None
    if not isinstance(count, int) or count < 0:
        raise InvalidTransactionError(
            f"add {add.path!r} has no numRecords statistic, which a row-tracking table needs to assign its "
            "row IDs; write the file with statistics"
        )
    return count


def assign_row_tracking(adds: Sequence[AddFile], high_water_mark: int, version: int) -> tuple[list[AddFile], int]:
    """``adds`` with fresh ``baseRowId`` above ``high_water_mark`` and ``defaultRowCommitVersion`` = ``version``.

    Only adds without a value get one (a re-committed file keeps the values of the add
    it replaces). Returns the adds and the new high-water mark (unchanged when no fresh
    ID was assigned). Each new file reserves as many IDs as it stores rows (numRecords,
    deleted rows included), as the default row ID is ``baseRowId`` plus the row's position.
    """
    mark = high_water_mark
    out: list[AddFile] = []
    for add in adds:
        changes: dict[str, int] = {}
        if add.base_row_id is None:
            changes["base_row_id"] = mark + 1
            mark += _physical_records(add)
        if add.default_row_commit_version is None:
            changes["default_row_commit_version"] = version
        out.append(replace(add, **changes) if changes else add)
    return out, mark


def stable_values(
    default: int | None, positions: np.ndarray, materialized: pa.Array | pa.ChunkedArray | None, *, per_row: bool
) -> pa.Array:
    """Stable row IDs (``per_row``: ``default`` plus the row's position) or commit versions of rows of one file.

    ``materialized`` is the file's materialized column for these rows (None when the file
    has none): its non-null values win, as the reader requirements say.
    """
    if default is None:
        base = pa.nulls(len(positions), pa.int64())
    elif per_row:
        base = int64_array(np.asarray(positions, dtype=np.int64) + np.int64(default))
    else:
        base = int64_array(np.full(len(positions), default, dtype=np.int64))
    if materialized is None:
        return base
    import pyarrow.compute as pc

    values = materialized.combine_chunks() if isinstance(materialized, pa.ChunkedArray) else materialized
    return pc.coalesce(values.cast(pa.int64()), base)
