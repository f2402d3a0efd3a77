"""Assets and OpenLineage for the operators, in one place: :class:`DeltaLineageMixin`.

An operator takes it as its first base class (``class DeltaDeleteOperator(DeltaLineageMixin,
_DeltaDmlOperator)``) and gets:

- default ``outlets``: the table it changes, as an Airflow asset (:func:`table_asset`),
  for the operators whose commits change data (DELETE, UPDATE, MERGE, RESTORE). OPTIMIZE,
  VACUUM and CHECKPOINT change no row (Delta commits them with ``dataChange=false``, or
  commit nothing), so by default they have no outlet: an asset event from them would start
  downstream DAGs that have nothing new to read. A user-given ``outlets`` always wins;
- the asset event's extra, after the task's work: the committed version, the read version,
  the operation, its metrics and ``committed`` (:func:`asset_event_extra`), for the default
  outlet and for any user outlet that names the same table;
- ``get_openlineage_facets_on_complete``: the table as input and output dataset, MERGE's
  sources as inputs, output statistics from the commit's metrics and the table's schema.
  It never fails the task;
- the OpenLineage Spark conf injection of ``SparkSubmitOperator``
  (``[openlineage] spark_inject_parent_job_info`` and ``spark_inject_transport_info``) for
  the operators that submit Spark jobs (they have a ``conf``): the injected
  ``spark.openlineage.*`` conf goes to ``spark-submit`` with the user's, which wins.

Airflow records one event per asset outlet on every successful run and offers no way to
leave one out, so a run that committed nothing (a DELETE matching no row) still records
an event, with ``committed: false`` and ``version: null``: a consumer that only wants real
changes checks ``committed``. A skipped or failed task records none.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import Asset, AssetAlias

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context

    _OperatorBase = BaseOperator
else:
    _OperatorBase = object

__all__ = [
    "DeltaLineageMixin",
    "asset_event_extra",
    "openlineage_dataset_name",
    "output_statistics",
    "table_asset",
    "table_asset_uri",
]

log = logging.getLogger(__name__)

# Object-store schemes that name the same store under another spelling (Hadoop's s3a/s3n).
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}

# What a commit wrote, by the first metric present in Delta's names: rows, bytes and files
# added. DELETE and UPDATE write the rows they copy (and update); MERGE and WRITE count
# numOutputRows; RESTORE re-adds files.
_WRITTEN_BYTES = ("numAddedBytes", "numTargetBytesAdded", "numOutputBytes", "restoredFilesSize")
_WRITTEN_FILES = ("numAddedFiles", "numTargetFilesAdded", "numFiles", "numRestoredFiles")
_WRITTEN_ROWS_TOTAL = ("numOutputRows",)
_WRITTEN_ROWS_PARTS = ("numCopiedRows", "numUpdatedRows")


def _is_templated(uri: str) -> bool:
    return "{{" in uri or "{%" in uri


def table_asset_uri(table: str) -> str:
    """The stable asset URI of a table: the ``file://`` URI of the absolute path for a local
    table (percent-encoded, so ``#``, ``?`` and ``%`` in a path survive Airflow's URI rules),
    an object-store URI as given (``s3a://``/``s3n://`` as ``s3://``), no trailing slash.

    The same table always gets the same URI, however it was spelled (relative path,
    ``file:/x``, ``file:///x``, trailing slash), so that producers and consumers meet.
    """
    parsed = urllib.parse.urlsplit(table)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        path = urllib.parse.unquote(parsed.path) if scheme == "file" else table
        return Path(os.path.abspath(os.path.expanduser(path))).as_uri()
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    return urllib.parse.urlunsplit((scheme, parsed.netloc, parsed.path.rstrip("/"), "", ""))


def table_asset(table: str) -> Asset:
    """The Airflow asset of a Delta table (its URI by :func:`table_asset_uri`)."""
    return Asset(uri=table_asset_uri(table))


def openlineage_dataset_name(table: str) -> tuple[str, str]:
    """(namespace, name) of a table by OpenLineage's naming spec: ``file`` and the absolute
    path for a local table; ``scheme://authority`` and the path without its leading slash
    for an object store (``s3://bucket``, ``gs://bucket``,
    ``abfss://container@account.dfs.core.windows.net``)."""
    uri = table_asset_uri(table)
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme == "file":
        return "file", urllib.parse.unquote(parsed.path)
    return f"{parsed.scheme}://{parsed.netloc}", parsed.path.lstrip("/")


def _first_int(metrics: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = metrics.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def output_statistics(metrics: Mapping[str, Any]) -> dict[str, int]:
    """Rows, bytes and files a commit wrote, from its Delta metrics (``rowCount``, ``size``,
    ``fileCount`` as OpenLineage names them); what the metrics do not give is left out."""
    statistics: dict[str, int] = {}
    rows = _first_int(metrics, _WRITTEN_ROWS_TOTAL)
    if rows is None:
        parts = [_first_int(metrics, (name,)) for name in _WRITTEN_ROWS_PARTS]
        rows = sum(part for part in parts if part is not None) if any(p is not None for p in parts) else None
    for key, value in (
        ("rowCount", rows),
        ("size", _first_int(metrics, _WRITTEN_BYTES)),
        ("fileCount", _first_int(metrics, _WRITTEN_FILES)),
    ):
        if value is not None:
            statistics[key] = value
    return statistics


def asset_event_extra(table: str, operation: str, result: Mapping[str, Any], *, commits: bool = True) -> dict[str, Any]:
    """The asset event's extra for an operator's return value: JSON only, small.

    ``version`` is the commit (VACUUM: its END commit), None when nothing was committed;
    ``read_version`` the snapshot the operation read (VACUUM: its START commit). An
    operation that never commits (CHECKPOINT: ``commits=False``) read the version it
    returns and committed nothing.
    """
    if commits:
        version = result.get("version", result.get("end_version"))
        read_version = result.get("read_version", result.get("start_version"))
    else:
        version, read_version = None, result.get("version")
    metrics = result.get("metrics")
    return {
        "table_uri": table,
        "operation": str(result.get("operation") or operation),
        "committed": version is not None,
        "version": version,
        "read_version": read_version,
        "metrics": dict(metrics) if isinstance(metrics, Mapping) else {},
    }


class DeltaLineageMixin(_OperatorBase):
    """Default asset outlets, asset event extras, OpenLineage facets and Spark conf injection.

    A first base class of an operator that has ``table`` and ``delta_conn_id`` (and, to
    submit Spark jobs, ``conf``). See the module's docstring for what it does and why.
    """

    LINEAGE_OPERATION: ClassVar[str]
    """The operation's name in asset extras and lineage (``DELETE``, ``OPTIMIZE``...)."""
    CHANGES_DATA: ClassVar[bool] = True
    """Whether the operation's commits change rows: only those get a default outlet."""
    COMMITS: ClassVar[bool] = True
    """Whether the operation commits a version (CHECKPOINT does not)."""

    table: str
    delta_conn_id: str

    def __init__(self, **kwargs: Any) -> None:
        given_outlets = kwargs.get("outlets") is not None
        super().__init__(**kwargs)
        self._delta_result: dict[str, Any] | None = None
        if not given_outlets and self.CHANGES_DATA:
            self.outlets = [self._default_outlet()]

    def _default_outlet(self) -> Asset | AssetAlias:
        """The table's asset; a table URI that is a template is only known at run time, so an
        alias (``delta-table:<dag_id>.<task_id>``) stands for it and resolves to the asset."""
        if _is_templated(self.table):
            return AssetAlias(name=self._default_alias_name())
        return table_asset(self.table)

    def _default_alias_name(self) -> str:
        return f"delta-table:{self.dag_id}.{self.task_id}"

    # ------------------------------------------------------------------ execute
    def execute(self, context: Context) -> Any:
        self._delta_result = None
        if hasattr(self, "conf"):  # the operators that can submit Spark jobs
            self._inject_openlineage_spark_conf(context)
        result = super().execute(context)
        if isinstance(result, Mapping):
            self._delta_result = dict(result)
            self._record_asset_events(context, self._delta_result)
        return result

    def _inject_openlineage_spark_conf(self, context: Context) -> None:
        """As ``SparkSubmitOperator`` does: add the OpenLineage parent job and transport conf
        when the ``[openlineage]`` options ask for it; conf already given is kept as is."""
        from airflow.providers.common.compat.sdk import conf as airflow_conf

        spark_conf = dict(getattr(self, "conf", None) or {})
        try:
            inject_parent = airflow_conf.getboolean("openlineage", "spark_inject_parent_job_info", fallback=False)
            inject_transport = airflow_conf.getboolean("openlineage", "spark_inject_transport_info", fallback=False)
            if not (inject_parent or inject_transport):
                return  # the OpenLineage helpers import its whole client (about 0.6 s): only when asked for
            from airflow.providers.common.compat.openlineage.utils.spark import (
                inject_parent_job_information_into_spark_properties,
                inject_transport_information_into_spark_properties,
            )

            if inject_parent:
                spark_conf = inject_parent_job_information_into_spark_properties(spark_conf, context)
            if inject_transport:
                spark_conf = inject_transport_information_into_spark_properties(spark_conf, context)
        except Exception:  # lineage never fails the task: the job runs with the user's conf
            log.warning("OpenLineage Spark conf could not be injected; submitting without it", exc_info=True)
            return
        if spark_conf:
            self.conf = spark_conf

    def _record_asset_events(self, context: Context, result: Mapping[str, Any]) -> None:
        events = context.get("outlet_events")
        if events is None:  # an execute() outside a task run: nothing records events
            return
        uri = table_asset_uri(self.table)
        extra = asset_event_extra(self.table, self.LINEAGE_OPERATION, result, commits=self.COMMITS)
        for outlet in self._table_outlets(uri):
            if isinstance(outlet, AssetAlias):
                events[outlet].add(Asset(uri=uri), extra=extra)
            else:
                events[outlet].extra = extra

    def _table_outlets(self, uri: str) -> Iterator[Asset | AssetAlias]:
        """The outlets that stand for this table: its asset (by URI) and the default alias."""
        default_alias = self._default_alias_name()
        for outlet in self.outlets or ():
            is_table_asset = isinstance(outlet, Asset) and outlet.uri == uri
            if is_table_asset or (isinstance(outlet, AssetAlias) and outlet.name == default_alias):
                yield outlet

    # ------------------------------------------------------------------ OpenLineage
    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Input and output datasets of the finished task, for the OpenLineage provider.

        Never raises: whatever goes wrong is logged and an empty ``OperatorLineage``
        returned (None without the OpenLineage provider, which then never calls this).
        """
        try:
            from airflow.providers.openlineage.extractors import OperatorLineage
        except ImportError:
            return None
        try:
            return self._openlineage_facets(OperatorLineage)
        except Exception:
            log.warning("OpenLineage facets of %s could not be built", self.table, exc_info=True)
            return OperatorLineage()

    def _openlineage_facets(self, operator_lineage: type) -> Any:
        from airflow.providers.common.compat.openlineage.facet import (
            InputDataset,
            OutputDataset,
            OutputStatisticsOutputDatasetFacet,
        )

        result = self._delta_result or {}
        extra = asset_event_extra(self.table, self.LINEAGE_OPERATION, result, commits=self.COMMITS)
        namespace, name = openlineage_dataset_name(self.table)
        schema = self._schema_facet(extra["version"] if extra["committed"] else extra["read_version"])
        facets = {"schema": schema} if schema is not None else {}
        inputs = [InputDataset(namespace=namespace, name=name, facets=facets)]
        inputs += [InputDataset(namespace=ns, name=n) for ns, n in self._openlineage_source_names()]
        outputs = []
        if extra["committed"]:
            statistics = output_statistics(extra["metrics"])
            output_facets = {"outputStatistics": OutputStatisticsOutputDatasetFacet(**statistics)} if statistics else {}
            outputs.append(OutputDataset(namespace=namespace, name=name, facets=facets, outputFacets=output_facets))
        return operator_lineage(inputs=inputs, outputs=outputs)

    def _openlineage_source_names(self) -> list[tuple[str, str]]:
        """Other datasets the operation reads: MERGE's ``source`` or ``sources`` (and a query's views)."""
        from airflow_delta.spark.specs import MergeSource

        given = [getattr(self, "source", None), *(getattr(self, "sources", None) or {}).values()]
        names: list[tuple[str, str]] = []
        for index, value in enumerate(item for item in given if item is not None):
            source = value if isinstance(value, MergeSource) else MergeSource.from_obj(f"source {index}", value)
            for read in (source, *source.views.values()):
                path = read.delta.uri if read.delta is not None else read.parquet
                if path is not None:
                    names.append(openlineage_dataset_name(path))
        return names

    def _schema_facet(self, version: int | None) -> Any:
        """The table's schema at ``version`` (one log read), or None if it cannot be had."""
        if version is None:
            return None
        from airflow.providers.common.compat.openlineage.facet import SchemaDatasetFacet, SchemaDatasetFacetFields

        from airflow_delta.hooks.delta import DeltaHook

        try:
            # The hook the task ran with (its connections already looked up), else a new one.
            hook = getattr(self, "_hook", None) or DeltaHook(self.delta_conn_id)
            schema = hook.table(self.table).snapshot(version).schema
        except Exception:
            log.info("No schema facet for %s at version %s", self.table, version, exc_info=True)
            return None
        return SchemaDatasetFacet(
            fields=[SchemaDatasetFacetFields(name=field.name, type=str(field.type)) for field in schema]
        )
