"""``ALTER TABLE ... CLUSTER BY (columns)`` / ``CLUSTER BY NONE``: change a table's clustering columns.

Delta's ``AlterTableClusterByDeltaCommand``: at most four columns, each with min/max
statistics; a partitioned table cannot be clustered; ``CLUSTER BY NONE`` on a table that is
not clustered does nothing. A table that is not clustered yet gets the ``clustering``
feature. The commit (operation ``CLUSTER BY``) writes only the clustering domain with the
columns' physical names; no file is rewritten (the next OPTIMIZE clusters by the new
columns, reclustering files of the old ones only with ``full=True``).
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_delta.engine.errors import InvalidArgumentError, TableNotFoundError
from airflow_delta.engine.model import clustering
from airflow_delta.engine.model.column_mapping import ColumnMapping
from airflow_delta.engine.model.stats_columns import indexed_columns
from airflow_delta.engine.read.snapshot import Snapshot
from airflow_delta.engine.storage.location import TableLocation
from airflow_delta.engine.write.options import CommitOptions
from airflow_delta.engine.write.transaction import PostCommitHook, Transaction


def cluster_by(
    location: TableLocation,
    snapshot: Snapshot | None,
    columns: Sequence[str],
    *,
    commit: CommitOptions | None = None,
    post_commit: PostCommitHook | None = None,
) -> int | None:
    """Set the clustering columns of the table (empty: none); the committed version, None when nothing changed."""
    if snapshot is None:
        raise TableNotFoundError(location.uri, "CLUSTER BY needs an existing table")
    names = _checked_columns(snapshot, columns)
    clustered = clustering.is_clustered(snapshot.protocol)
    if not names and not clustered:
        return None  # Delta skips CLUSTER BY NONE on a table that is not clustered
    old = clustering.clustering_columns(snapshot.protocol, snapshot.metadata, snapshot.domain_metadata)
    mapping = ColumnMapping.from_metadata(snapshot.metadata, snapshot.protocol)
    with Transaction(location, snapshot=snapshot, options=commit, post_commit=post_commit) as txn:
        if not clustered:
            txn.set_properties({"delta.feature.clustering": "supported"})
        name = clustering.clustering_domain_name(snapshot.protocol) if clustered else clustering.CLUSTERING_DOMAIN
        domain = clustering.clustering_domain(name, [[mapping.physical_name(n)] for n in names])
        txn.set_domain_metadata(domain.domain, domain.configuration, system=True)
        return txn.commit(
            "CLUSTER BY", {"oldClusteringColumns": ",".join(old), "newClusteringColumns": ",".join(names)}
        )


def _checked_columns(snapshot: Snapshot, columns: Sequence[str]) -> list[str]:
    if snapshot.partition_columns and columns:
        raise InvalidArgumentError(
            "columns", list(columns),
            f"no clustering columns: the table is partitioned by {list(snapshot.partition_columns)}, and a table is "
            "either partitioned or clustered (Delta refuses both at once)",
        )
    if len(columns) > clustering.MAX_CLUSTERING_COLUMNS:
        raise InvalidArgumentError(
            "columns", list(columns), f"at most {clustering.MAX_CLUSTERING_COLUMNS} clustering columns, as Delta allows"
        )
    by_name = {name.casefold(): name for name in snapshot.schema.names}
    with_stats = {f.logical.casefold() for f in indexed_columns(snapshot.metadata) if f.has_min_max}
    resolved: list[str] = []
    for column in columns:
        name = by_name.get(column.casefold())
        if name is None:
            raise InvalidArgumentError(
                "columns", list(columns), f"top-level columns of the table; {column!r} is not one of {snapshot.schema.names}"
            )
        if name.casefold() not in with_stats:
            raise InvalidArgumentError(
                "columns", list(columns),
                f"columns with min/max statistics: the table collects none for {name!r} "
                "(delta.dataSkippingNumIndexedCols / delta.dataSkippingStatsColumns); Delta requires them too",
            )
        if name in resolved:
            raise InvalidArgumentError("columns", list(columns), "each column once")
        resolved.append(name)
    return resolved
