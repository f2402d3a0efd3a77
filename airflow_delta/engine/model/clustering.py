"""Liquid clustering (PROTOCOL.md "Clustered Table"): the clustering columns and how files record being clustered.

A table is clustered when its protocol lists the ``clustering`` writer feature (or
``liquid``, the preview spelling of early Delta 3 tables, whose domain is
``delta.liquid``). Its clustering columns are in the ``delta.clustering`` domain as
physical column paths (``{"clusteringColumns": [["a"], ["s", "b"]]}``); writers keep the
domain and write statistics for those columns.

OPTIMIZE clusters such a table as Delta's ``ClusteringStrategy`` does: the files it writes
form one "ZCube", recorded in their ``tags`` (``ZCUBE_ID``, ``ZCUBE_ZORDER_BY``: the
logical clustering columns as JSON) and ``clusteringProvider: "liquid"``. A later
OPTIMIZE (ours or Delta's) leaves a lone ZCube alone and reclusters only files outside
it, unless it is a full one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from airflow_delta.engine.errors import InvalidTransactionError
from airflow_delta.engine.model.actions import DomainMetadata, Metadata, Protocol
from airflow_delta.engine.model.column_mapping import ColumnMapping
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.model.table_features import writer_features

CLUSTERING_FEATURES = frozenset({"clustering", "liquid"})
CLUSTERING_DOMAIN = "delta.clustering"
PREVIEW_CLUSTERING_DOMAIN = "delta.liquid"
CLUSTERING_PROVIDER = "liquid"  # Delta's ClusteredTableUtils.clusteringProvider
ZCUBE_ID_TAG = "ZCUBE_ID"
ZCUBE_ZORDER_BY_TAG = "ZCUBE_ZORDER_BY"
# The order of a clustered table's rows: the Hilbert curve of the range ids over several
# columns (Delta's MultiDimClustering "hilbert"), the values themselves over one (a plain
# sort; Delta orders by range id there, which leaves neighbouring files overlapping
# within a range). ZORDER is the Z-order of OPTIMIZE ZORDER BY.
HILBERT = "hilbert"
LINEAR = "linear"
ZORDER = "zorder"
# Delta's DELTA_OPTIMIZE_CLUSTERING_MIN_CUBE_SIZE: 100 x the 1 GiB OPTIMIZE file size. A
# ZCube this large takes no new data; smaller ones are reclustered with new files.
MIN_CUBE_SIZE = 100 * 1024 * 1024 * 1024
# Delta's DeltaSQLConf.DELTA_NUM_CLUSTERING_COLUMNS_LIMIT.
MAX_CLUSTERING_COLUMNS = 4


def is_clustered(protocol: Protocol) -> bool:
    """Whether the table is a clustered table (the ``clustering`` or preview ``liquid`` writer feature)."""
    return bool(writer_features(protocol) & CLUSTERING_FEATURES)


def clustering_domain_name(protocol: Protocol) -> str:
    return CLUSTERING_DOMAIN if "clustering" in writer_features(protocol) else PREVIEW_CLUSTERING_DOMAIN


def physical_clustering_paths(protocol: Protocol, domains: Mapping[str, DomainMetadata]) -> list[list[str]]:
    """The clustering columns as the domain stores them: physical name paths (empty when none)."""
    if not is_clustered(protocol):
        return []
    domain = domains.get(clustering_domain_name(protocol))
    if domain is None or domain.removed:
        return []
    try:
        entries = json.loads(domain.configuration).get("clusteringColumns", [])
    except (ValueError, AttributeError):
        entries = None
    paths: list[list[str]] = []
    for entry in entries if isinstance(entries, list) else [None]:
        # Delta writes [["a"], ["s", "b"]]; the protocol's example a flat ["a"]; the preview
        # [{"physicalName": ["a"]}].
        if isinstance(entry, dict):
            entry = entry.get("physicalName")
        if isinstance(entry, str):
            entry = [entry]
        if not isinstance(entry, list) or not entry or not all(isinstance(part, str) for part in entry):
            raise InvalidTransactionError(
                f"the {clustering_domain_name(protocol)!r} domain's configuration {domain.configuration!r} does not "
                "list clustering columns as Delta writes them"
            )
        paths.append(list(entry))
    return paths


def clustering_columns(protocol: Protocol, metadata: Metadata, domains: Mapping[str, DomainMetadata]) -> tuple[str, ...]:
    """The logical clustering column names (nested ones dotted), in the domain's order."""
    paths = physical_clustering_paths(protocol, domains)
    if not paths:
        return ()
    mapping = ColumnMapping.from_metadata(metadata, protocol)
    schema = json.loads(metadata.schema_string)
    return tuple(".".join(_logical_path(schema, path, mapping.enabled)) for path in paths)


def _logical_path(schema: Mapping[str, object], physical: Sequence[str], mapped: bool) -> list[str]:
    fields = schema.get("fields", [])
    out: list[str] = []
    for part in physical:
        found = None
        for field in fields if isinstance(fields, list) else []:
            meta = field.get("metadata") or {}
            name = meta.get("delta.columnMapping.physicalName", field["name"]) if mapped else field["name"]
            if name == part:
                found = field
                break
        if found is None:
            raise InvalidTransactionError(
                f"clustering column {'.'.join(physical)!r} is not a column of the table; the clustering domain "
                "and the schema disagree"
            )
        out.append(found["name"])
        kind = found.get("type")
        fields = kind.get("fields", []) if isinstance(kind, dict) else []
    return out


def clustering_domain(name: str, physical_paths: Sequence[Sequence[str]]) -> DomainMetadata:
    """The clustering domain action ``name`` (:func:`clustering_domain_name`) listing ``physical_paths``, as Delta writes it."""
    if name == PREVIEW_CLUSTERING_DOMAIN:
        columns: list[object] = [{"physicalName": list(p)} for p in physical_paths]
    else:
        columns = [list(p) for p in physical_paths]
    return DomainMetadata(name, json_text({"clusteringColumns": columns, "domainName": name}))


def curve(columns: Sequence[str]) -> str:
    """The space-filling curve Delta clusters ``columns`` by."""
    return HILBERT if len(columns) > 1 else LINEAR


def zcube_tags(zcube_id: str, columns: Sequence[str]) -> dict[str, str]:
    """The ``tags`` that make a file part of ZCube ``zcube_id`` clustered by ``columns`` (Delta's ZCubeInfo)."""
    return {ZCUBE_ID_TAG: zcube_id, ZCUBE_ZORDER_BY_TAG: json_text(list(columns))}


def zcube_of(tags: Mapping[str, str] | None) -> tuple[str, tuple[str, ...]] | None:
    """The ZCube (id, clustering columns) a file's tags place it in; None when unclustered."""
    if not tags or ZCUBE_ID_TAG not in tags or ZCUBE_ZORDER_BY_TAG not in tags:
        return None
    try:
        columns = json.loads(tags[ZCUBE_ZORDER_BY_TAG])
    except ValueError:
        return None
    if not isinstance(columns, list):
        return None
    return tags[ZCUBE_ID_TAG], tuple(str(c) for c in columns)
