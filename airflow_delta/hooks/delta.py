"""``DeltaHook``: the ``delta`` connection, engine tables, and the DML jobs on Spark.

The connection holds what every task on a table needs: the storage options of the table
root, the Spark connection to submit to, default Spark conf and the deploy mode. The hook
turns a table URI into an engine :class:`~airflow_delta.engine.DeltaTable`, an operation's
spec (:mod:`airflow_delta.spark.specs`) into a ``spark-submit`` of the DML program around
the apache-spark provider's :class:`SparkSubmitHook`, and a task instance's appId back into
the result of its commit, read from the ``_delta_log``.

The result never comes from the driver's output: the job's commit carries the task
instance's identity (a ``txn`` action with its appId, commitInfo tags), so the hook finds
the same result wherever the driver ran, and a retry finds an earlier try's commit. The
driver's output serves only to re-raise the engine's error class
(``AIRFLOW_DELTA_ERROR {...}``) and, on failure, to put the driver log's tail in the task
log.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from airflow_delta.engine import (
    DeltaError,
    InvalidArgumentError,
    error_from_report,
    storage_options_from_airflow_connection,
)
from airflow_delta.hooks.driver_jvm import worker_driver_class_archive, worker_spark_home
from airflow_delta.hooks.spark_output import (
    DEFAULT_TASK_LOG_LEVEL,
    ERROR_MARKER,
    RESULT_MARKER,
    SPARK_LOG_LEVELS,
    SparkApplication,
    _first_json_document,
    _path_with_spark_submit,
)
from airflow_delta.provider import DELTA_CONNECTION_FIELDS, DELTA_UI_FIELD_BEHAVIOUR
from airflow_delta.spark.installation import check_spark_home
from airflow_delta.spark.job_result import TAG_APP_ID, JobResult
from airflow_delta.spark.jobs import (
    DML_PROGRAM,
    SMALL_JOB_CONF,
    SMALL_JOB_DRIVER_JAVA_OPTIONS,
)
from airflow_delta.spark.packaging import engine_py_files
from airflow_delta.spark.specs import Spec

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_delta.engine import DeltaTable, Snapshot
    from airflow_delta.hooks.dml_submit import _DmlSubmitHook

# numpy, pyarrow and the engine's table layers are imported where a task uses them, not
# here: a DAG file that builds this provider's operators imports this module, and is
# parsed by the DAG processor and again in every task process.

__all__ = [
    "CONN_TYPE",
    "DEFAULT_CONN_ID",
    "ERROR_MARKER",
    "RESULT_MARKER",
    "SMALL_JOB_DRIVER_JAVA_OPTIONS",
    "DeltaConnectionSettings",
    "DeltaHook",
    "DeltaSparkJobError",
    "SparkApplication",
    "check_table_uri",
    "error_from_line",
    "files_summary",
]

CONN_TYPE = "delta"
DEFAULT_CONN_ID = "delta_default"

DEPLOY_MODES = ("client", "cluster")
# Airflow connection types whose credentials the hook maps to storage options.
STORAGE_CONN_TYPES = ("aws", "wasb", "adls", "google_cloud_platform")
# The history is read newest first in growing windows: the commit a retry looks for is
# almost always among the newest few, and a table with a long log is never read whole.
_FIRST_HISTORY_WINDOW = 16


def files_summary(files: pa.Table) -> str:
    """``"N file(s), B bytes in P partition(s)"`` for a table of files (``Snapshot.files``), for the task log."""
    import pyarrow as pa
    import pyarrow.compute as pc

    size = int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0
    values = files.column("partition_values").combine_chunks()
    if values.type.num_fields == 0:
        partitions = 1 if files.num_rows else 0
    else:
        partitions = _distinct_rows(pa.Table.from_struct_array(values))
    return f"{files.num_rows} file(s), {size} bytes in {partitions} partition(s)"


def _distinct_rows(table: pa.Table) -> int:
    """How many distinct rows ``table`` has, nulls equal to each other.

    Not ``Table.group_by``: it loads Acero, whose import pulls in ``pyarrow.dataset`` and
    pandas (about a second of every task's start, for one log line). Each column is
    dictionary-encoded and the rows of codes are counted by numpy.
    """
    import numpy as np
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return 0
    codes = []
    for column in table.columns:
        indices = pc.dictionary_encode(column.combine_chunks(), null_encoding="encode").indices
        codes.append(np.frombuffer(indices.buffers()[1], dtype=np.int32)[indices.offset:indices.offset + len(indices)])
    return len(np.unique(np.stack(codes, axis=1), axis=0))


class DeltaSparkJobError(AirflowException):
    """The Spark job failed without reporting a Delta error (a crash, a killed driver, a Spark error).

    The message ends with the tail of the driver log. Whether a retry helps is unknown,
    so the task's ordinary retry settings decide.
    """


def error_from_line(line: str) -> DeltaError:
    """The engine error an ``AIRFLOW_DELTA_ERROR {"class": ..., "message": ...}`` line reports.

    Rebuilt by the engine's :func:`~airflow_delta.engine.error_from_report`: the named
    engine class with exactly the job's message; an unknown name (a newer job than this
    worker) or an unreadable line gives a plain :class:`DeltaError`.
    """
    payload = line.split(ERROR_MARKER, 1)[1].strip()
    try:
        report = _first_json_document(payload)
        name = str(report["class"])
        message = str(report["message"])
    except (ValueError, KeyError, TypeError):
        name, message = "DeltaError", f"the Spark job reported an unreadable error: {payload}"
    return error_from_report(name, message)


@dataclass(frozen=True)
class DeltaConnectionSettings:
    """What a ``delta`` connection holds (all optional).

    ``storage_options`` are the table root's (passed to the engine and to the job);
    ``spark_conn_id`` the apache-spark connection to submit to; ``spark_conf`` default
    Spark conf of every job; ``deploy_mode`` overrides the Spark connection's;
    ``storage_conn_id`` an Airflow ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``
    connection whose credentials the hook maps to storage options (``storage_options``
    given here win over the mapped ones, key by key); ``maintenance_history_uri`` the Delta
    table the maintenance operators record their runs in (docs/fleet.md);
    ``spark_log_level`` the lowest level of Spark's own log lines (``INFO``, ``WARN``, ...)
    that a client-mode job on a local or standalone master copies into the task log (default
    ``WARN``; every line still reaches the failure tail); the job's progress is logged at
    most every :data:`PROGRESS_INTERVAL_SECONDS` per stage whatever the level;
    ``spark_history_url`` the Spark history server's base URL, where the tasks' links to their
    Spark applications point; ``test_location`` a table or folder URI that
    :meth:`DeltaHook.test_connection` lists with the storage options.
    """

    storage_options: dict[str, str] = field(default_factory=dict)
    spark_conn_id: str = "spark_default"
    spark_conf: dict[str, str] = field(default_factory=dict)
    deploy_mode: str | None = None
    storage_conn_id: str | None = None
    maintenance_history_uri: str | None = None
    spark_log_level: str = DEFAULT_TASK_LOG_LEVEL
    spark_history_url: str | None = None
    test_location: str | None = None

    @classmethod
    def from_extra(cls, conn_id: str, extra: Mapping[str, Any]) -> DeltaConnectionSettings:
        def where(key: str) -> str:
            return f"connection {conn_id!r} extra {key}"

        def json_object(key: str) -> dict[str, str]:
            value = extra.get(key)
            if value is None or value == "":
                return {}
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    raise InvalidArgumentError(where(key), value, "a JSON object of string keys and values") from None
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise InvalidArgumentError(where(key), value, "a JSON object of string keys and values")
            return {k: v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}

        spark_conn_id = extra.get("spark_conn_id") or "spark_default"
        if not isinstance(spark_conn_id, str):
            raise InvalidArgumentError(where("spark_conn_id"), spark_conn_id, "the id of a Spark connection")
        deploy_mode = extra.get("deploy_mode") or None
        if deploy_mode is not None and deploy_mode not in DEPLOY_MODES:
            raise InvalidArgumentError(where("deploy_mode"), deploy_mode, "client, cluster, or empty")
        spark_log_level = str(extra.get("spark_log_level") or DEFAULT_TASK_LOG_LEVEL).upper()
        if spark_log_level not in SPARK_LOG_LEVELS:
            raise InvalidArgumentError(where("spark_log_level"), extra.get("spark_log_level"), ", ".join(SPARK_LOG_LEVELS))
        storage_conn_id = extra.get("storage_conn_id") or None
        if storage_conn_id is not None and not isinstance(storage_conn_id, str):
            raise InvalidArgumentError(where("storage_conn_id"), storage_conn_id, "the id of an aws, wasb, adls or gcp connection")
        history = extra.get("maintenance_history_uri") or None
        if history is not None and not isinstance(history, str):
            raise InvalidArgumentError(where("maintenance_history_uri"), history, "the URI of the history table")
        spark_history_url = extra.get("spark_history_url") or None
        if spark_history_url is not None and (
            not isinstance(spark_history_url, str) or not spark_history_url.startswith(("http://", "https://"))
        ):
            raise InvalidArgumentError(
                where("spark_history_url"), spark_history_url, "the http(s) URL of the Spark history server"
            )
        test_location = extra.get("test_location") or None
        if test_location is not None and not isinstance(test_location, str):
            raise InvalidArgumentError(where("test_location"), test_location, "a table or folder URI")
        return cls(
            storage_options=json_object("storage_options"),
            spark_conn_id=spark_conn_id,
            spark_conf=json_object("spark_conf"),
            deploy_mode=deploy_mode,
            storage_conn_id=storage_conn_id,
            maintenance_history_uri=history,
            spark_log_level=spark_log_level,
            spark_history_url=spark_history_url,
            test_location=test_location,
        )


def check_table_uri(argument: str, uri: object) -> str:
    """``uri`` if it is absolute: a URI with a scheme (``s3://``, ``file:///``, ``file:/``) or an absolute path.

    A relative path would resolve against the current directory of whichever worker (or
    triggerer, or Spark driver) runs the task, which no DAG controls: it is refused with an
    :class:`~airflow_delta.engine.InvalidArgumentError` naming ``argument``.
    """
    if isinstance(uri, str) and ("://" not in uri and uri[:5].lower() != "file:" and not os.path.isabs(uri)):
        raise InvalidArgumentError(
            argument,
            uri,
            "an absolute path or a URI (/data/events, file:///data/events, s3://bucket/events): a relative path "
            "would resolve against the current directory of whichever worker runs the task",
        )
    return uri  # type: ignore[return-value]  # anything else is the engine's to check


def _missing_connection(argument: str, conn_id: str, conn_type: str) -> InvalidArgumentError:
    """The error for a connection that is named but not defined (a typo, or one not created yet)."""
    return InvalidArgumentError(
        argument,
        conn_id,
        f"the id of a defined Airflow connection of type {conn_type}; no connection {conn_id!r} exists: "
        f"fix the id, or create it (Admin > Connections, `airflow connections add`, or AIRFLOW_CONN_{conn_id.upper()})",
    )


def _missing_default_spark_connection(delta_conn_id: str, conn_id: str) -> InvalidArgumentError:
    """The error for a job with no Spark connection named, when the default one is not defined either."""
    return InvalidArgumentError(
        "spark_conn_id",
        conn_id,
        f"no spark_conn_id is set (neither in the extra of the delta connection {delta_conn_id!r} nor by the "
        f"caller), so Spark jobs go to the default Spark connection {conn_id!r}, and no connection {conn_id!r} "
        "exists: create it (for Spark local mode, "
        f"AIRFLOW_CONN_{conn_id.upper()}='{{\"conn_type\": \"spark\", \"host\": \"local[2]\"}}', or Admin > "
        "Connections, or `airflow connections add`), or set spark_conn_id in the delta connection's extra to a "
        "Spark connection that exists",
    )


class DeltaHook(BaseHook):
    """Interact with Delta tables through the ``delta`` connection.

    :param delta_conn_id: The ``delta`` connection. When it is the default id and does not
        exist, the defaults apply: no storage options, ``spark_default``, no extra conf.
    :param spark_conn_id: Overrides the connection's Spark connection.
    :param deploy_mode: Overrides the connection's deploy mode (``client`` or ``cluster``).
    :param storage_conn_id: Overrides the connection's storage connection: an Airflow
        ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform`` connection mapped to
        storage options (``docs/storage.md``); the ``delta`` connection's own
        ``storage_options`` win over what it gives.
    """

    conn_name_attr = "delta_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Delta Lake"

    # The DML program spark-submit runs: the installed one, so that the driver runs the
    # code the operator imported (the same code ships to the executors as py_files).
    DML_APPLICATION: ClassVar[Path] = Path(DML_PROGRAM).resolve()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The standard fields a ``delta`` connection does not use are hidden (as the provider info declares)."""
        return {key.replace("-", "_"): copy.deepcopy(value) for key, value in DELTA_UI_FIELD_BEHAVIOUR.items()}

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The ``delta`` connection's own fields, stored in its extra (as the provider info declares them)."""
        from flask_appbuilder.fieldwidgets import BS3TextAreaFieldWidget, BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import StringField, TextAreaField
        from wtforms.validators import Optional, any_of

        json_fields = {"storage_options", "spark_conf"}  # JSON objects: a text area each
        widgets: dict[str, Any] = {}
        for name, declared in DELTA_CONNECTION_FIELDS.items():
            kind, widget = (TextAreaField, BS3TextAreaFieldWidget) if name in json_fields else (StringField, BS3TextFieldWidget)
            validators = [Optional(), any_of(list(DEPLOY_MODES))] if name == "deploy_mode" else [Optional()]
            widgets[name] = kind(
                lazy_gettext(declared["label"]), widget=widget(), description=declared["description"], validators=validators
            )
        return widgets

    def __init__(
        self,
        delta_conn_id: str = DEFAULT_CONN_ID,
        *,
        spark_conn_id: str | None = None,
        deploy_mode: str | None = None,
        storage_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        if deploy_mode is not None and deploy_mode not in DEPLOY_MODES:
            raise InvalidArgumentError("deploy_mode", deploy_mode, "client, cluster, or None for the connection's")
        self.delta_conn_id = delta_conn_id
        self._spark_conn_id = spark_conn_id
        self._deploy_mode = deploy_mode
        self._storage_conn_id = storage_conn_id
        self._settings: DeltaConnectionSettings | None = None
        self._spark_conn_named = spark_conn_id is not None
        self._submit_hook: _DmlSubmitHook | None = None
        self.spark_applications: list[SparkApplication] = []
        """The Spark applications this hook's jobs registered, in order (a job that ran only in
        its driver process registers none)."""

    # ------------------------------------------------------------------ connection
    @property
    def settings(self) -> DeltaConnectionSettings:
        """The connection's settings with this hook's overrides applied (read once)."""
        if self._settings is None:
            try:
                extra = self.get_connection(self.delta_conn_id).extra_dejson
            except AirflowNotFoundException:
                if self.delta_conn_id != DEFAULT_CONN_ID:
                    raise _missing_connection("delta_conn_id", self.delta_conn_id, "delta") from None
                extra = {}
            settings = DeltaConnectionSettings.from_extra(self.delta_conn_id, extra)
            # A Spark connection named (in the extra or by the caller) must exist: the
            # apache-spark hook would fall back to `--master yarn` without a word.
            self._spark_conn_named = self._spark_conn_id is not None or bool(extra.get("spark_conn_id"))
            if self._spark_conn_id is not None:
                settings = replace(settings, spark_conn_id=self._spark_conn_id)
            if self._deploy_mode is not None:
                settings = replace(settings, deploy_mode=self._deploy_mode)
            if self._storage_conn_id is not None:
                settings = replace(settings, storage_conn_id=self._storage_conn_id)
            if settings.storage_conn_id is not None:
                mapped = self.storage_options_of(settings.storage_conn_id)
                settings = replace(settings, storage_options={**mapped, **settings.storage_options})
            self._settings = settings
        return self._settings

    def storage_options_of(self, conn_id: str) -> dict[str, str]:
        """Storage options (delta-rs keys) for the Airflow connection ``conn_id``.

        Read from the connection's fields and extra only, so the amazon, microsoft-azure
        and google providers need not be installed; see ``docs/storage.md`` for what each
        type's fields and extras map to.
        """
        try:
            conn = self.get_connection(conn_id)
        except AirflowNotFoundException:
            raise _missing_connection("storage_conn_id", conn_id, "aws, wasb, adls or google_cloud_platform") from None
        if conn.conn_type not in STORAGE_CONN_TYPES:
            raise InvalidArgumentError(
                f"connection {conn_id!r} conn_type", conn.conn_type,
                f"a storage connection is of type {', '.join(STORAGE_CONN_TYPES)} (the types mapped to storage "
                "options); name one in storage_conn_id, or put the options in the delta connection's storage_options",
            )
        return storage_options_from_airflow_connection(
            conn.conn_type, login=conn.login, password=conn.password, host=conn.host, extra=conn.extra_dejson
        )

    def maintenance_history_uri(self) -> str | None:
        """Where maintenance runs are recorded: the connection's ``maintenance_history_uri``
        extra, else Airflow's ``[delta] maintenance_history_uri`` option; None: nowhere."""
        from airflow.configuration import conf

        configured = conf.get("delta", "maintenance_history_uri", fallback=None)
        return self.settings.maintenance_history_uri or configured or None

    def get_conn(self) -> DeltaConnectionSettings:
        return self.settings

    def table(self, uri: str) -> DeltaTable:
        """The engine table at ``uri``, opened with the connection's storage options.

        A relative path is refused (:func:`check_table_uri`).
        """
        from airflow_delta.engine import DeltaTable

        return DeltaTable(check_table_uri("table", uri), self.settings.storage_options or None)

    # ------------------------------------------------------------------ Test button
    def test_connection(self) -> tuple[bool, str]:
        """What the connection form's Test button and ``airflow connections test`` report.

        In order, stopping at the first failure: the connection's fields are valid; the
        Spark connection it names exists; ``spark-submit --version`` runs (the one the
        jobs run, with the worker's SPARK_HOME) and its PySpark is one release; the
        storage options (and the storage connection's credentials) can list
        ``test_location`` when the connection gives one. ``(ok, message)``; the message
        says what passed, or what failed and what to fix.
        """
        try:
            settings = self.settings
        except (DeltaError, AirflowException) as error:
            return False, f"The delta connection {self.delta_conn_id!r} is invalid: {error}"
        try:
            spark = self.get_connection(settings.spark_conn_id)
        except AirflowNotFoundException:
            return False, (
                f"The Spark connection {settings.spark_conn_id!r} (spark_conn_id) does not exist: create it "
                "(conn_type spark, host local[2], spark://HOST or yarn) or name an existing one"
            )
        passed = [f"Spark connection {settings.spark_conn_id!r} ({spark.conn_type}, {spark.host or 'yarn'})"]
        ok, message = self._test_spark_submit(settings.spark_conn_id)
        if not ok:
            return False, message
        passed.append(message)
        if settings.test_location is None:
            passed.append("storage not checked (set test_location to a table or folder URI to list it)")
        else:
            ok, message = self._test_listing(settings.test_location, settings.storage_options)
            if not ok:
                return False, message
            passed.append(message)
        return True, "; ".join(passed)

    def _test_spark_submit(self, spark_conn_id: str) -> tuple[bool, str]:
        """Run ``spark-submit --version`` as the jobs run it: (ok, what ran or why it did not)."""
        try:
            # The apache-spark hook (and requests) are imported only when a job or this test goes to Spark.
            from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

            binary = str(SparkSubmitHook(conn_id=spark_conn_id)._connection["spark_binary"])
        except (AirflowException, RuntimeError, ValueError) as error:
            return False, f"The Spark connection {spark_conn_id!r} is unusable: {error}"
        env = dict(os.environ)
        env["PATH"] = _path_with_spark_submit(env.get("PATH", ""))
        spark_home = worker_spark_home(env)
        if spark_home is not None:
            env["SPARK_HOME"] = spark_home
            try:
                check_spark_home(spark_home)
            except DeltaError as error:
                return False, str(error)
        executable = shutil.which(binary, path=env["PATH"])
        if executable is None:
            return False, f"{binary} is not on the worker's PATH (nor next to its Python): install pyspark or Spark"
        try:
            ran = subprocess.run(
                [executable, "--version"], env=env, capture_output=True, text=True, timeout=180, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return False, f"{executable} --version did not run: {error}"
        output = ran.stdout + ran.stderr
        version = re.search(r"version (\d+\.\d+\.\d+\S*)", output)
        if ran.returncode != 0 or version is None:
            tail = " | ".join(output.strip().splitlines()[-5:])
            return False, f"{executable} --version failed (exit status {ran.returncode}): {tail}"
        return True, f"{binary} {version.group(1)} ran"

    @staticmethod
    def _test_listing(location: str, storage_options: Mapping[str, str]) -> tuple[bool, str]:
        """List ``location`` with the storage options: (ok, how many entries, or why it failed)."""
        from airflow_delta.engine import TableLocation

        try:
            resolved = TableLocation.from_uri(location, storage_options or None)
            folders: list[str] = []
            files = resolved.io.list_dir(resolved.root, not_files=folders)
        except DeltaError as error:
            return False, f"Listing {location} with the storage options failed: {error}"
        except OSError as error:  # a local folder that cannot be read
            return False, f"Listing {location} failed: {error}"
        count = len(files) + len(folders)
        if count == 0:
            return True, f"listed {location}: nothing there yet (an empty or new location)"
        return True, f"listed {count} entr{'y' if count == 1 else 'ies'} under {location}"

    # ------------------------------------------------------------------ the log
    def find_commit(
        self, table: DeltaTable, app_id: str, *, snapshot: Snapshot | None = None, operation: str = "UNKNOWN"
    ) -> JobResult | None:
        """The result of the commit that ``app_id`` made, read from the log; None if it made none.

        The snapshot's ``txn`` actions say whether the appId committed (without reading any
        commit). If it did, the commits are read newest first, in growing windows, until
        the one tagged with the appId; the oldest commit the log retains ends the search.
        A commit older than that (its JSON cleaned up) still counts as made: the result
        then has ``version`` None, ``operation`` as given and empty metrics, and a warning
        says why.
        """
        snapshot = table.snapshot() if snapshot is None else snapshot
        if app_id not in snapshot.transactions:
            return None
        window = _FIRST_HISTORY_WINDOW
        while True:
            history = table.history(limit=window)
            for info in history:
                tags = info.get("tags") or {}
                if tags.get(TAG_APP_ID) == app_id:
                    return JobResult.from_commit_info(int(info["version"]), info)
            if len(history) < window:
                break
            window *= 4
        self.log.warning(
            "appId %s committed to %s, but its commit is older than the retained log; its metrics are gone",
            app_id,
            table.table_uri,
        )
        return JobResult(version=None, read_version=snapshot.version, operation=operation, metrics={}, attempts=1)

    # ------------------------------------------------------------------ Spark
    def spark_submit_hook(
        self, spec: Spec, *, conf: Mapping[str, str] | None = None, small_job: bool = False
    ) -> _DmlSubmitHook:
        """The ``SparkSubmitHook`` that runs ``spec`` (its application arguments are set by :meth:`submit`).

        Refuses cluster deploy mode on a standalone master (``spark://``) before anything
        runs: Spark refuses Python applications in cluster mode there. ``small_job``
        (the caller planned a few small files, or none) runs the driver JVM with
        :data:`SMALL_JOB_DRIVER_JAVA_OPTIONS`, and with :data:`SMALL_JOB_CONF` (no web UI)
        under the connection's and the caller's conf. A client-mode driver JVM also starts
        from the worker's class archive of Spark's classes; when there is none yet, a
        successful job starts its writer in the background (:mod:`airflow_delta.hooks.driver_jvm`). Neither JVM option is added when the
        conf sets ``spark.driver.extraJavaOptions`` itself.
        """
        settings = self.settings
        # The Spark connection must exist, named or the default: the apache-spark hook would
        # fall back to `--master yarn` without a word and fail late on HADOOP_CONF_DIR.
        try:
            self.get_connection(settings.spark_conn_id)
        except AirflowNotFoundException:
            if self._spark_conn_named:
                raise _missing_connection("spark_conn_id", settings.spark_conn_id, "spark") from None
            raise _missing_default_spark_connection(self.delta_conn_id, settings.spark_conn_id) from None
        merged = {**(SMALL_JOB_CONF if small_job else {}), **settings.spark_conf, **dict(conf or {})}
        # Executors (and a client-mode driver) run the worker's interpreter unless told
        # otherwise: the system python3 may lack pyarrow and pyroaring.
        merged.setdefault("spark.pyspark.python", sys.executable)
        merged.setdefault("spark.pyspark.driver.python", merged["spark.pyspark.python"])
        # Imported here, not with this module: a task that runs in the worker never pays for the
        # apache-spark provider's hook and `requests` (a fraction of a second of every task's start).
        from airflow_delta.hooks.dml_submit import _DmlSubmitHook

        hook = _DmlSubmitHook(
            conf=merged,
            conn_id=settings.spark_conn_id,
            py_files=str(engine_py_files()),
            name=f"airflow-delta {spec.OPERATION} {spec.identity.dag_id}.{spec.identity.task_id}",
            deploy_mode=settings.deploy_mode,
            log_level=settings.spark_log_level,
        )
        if hook.master.startswith("spark://") and hook.deploy_mode == "cluster":
            raise InvalidArgumentError(
                "deploy_mode",
                "cluster",
                f"client on the standalone master {hook.master}: Spark refuses cluster deploy mode for "
                "Python applications on standalone clusters, so airflow-delta runs the driver in client mode "
                "there; set deploy_mode to client (or leave it empty) in the delta or Spark connection",
            )
        hook.set_driver_java_options([SMALL_JOB_DRIVER_JAVA_OPTIONS] if small_job else [], worker_driver_class_archive())
        return hook

    def submit(
        self,
        spec: Spec,
        *,
        conf: Mapping[str, str] | None = None,
        application: str | Path | None = None,
        small_job: bool = False,
    ) -> JobResult | None:
        """Run ``spec`` on Spark and wait for it; the result the job printed, if the driver's output is visible.

        Callers take the result from the log (:meth:`find_commit`); the printed one only
        covers a job that committed nothing. In client mode the spec goes in a file in the
        driver's own working directory (removed afterwards); in cluster mode, where the
        driver cannot see the worker's files, as JSON on the command line. A job that
        reports a Delta error raises that engine error class; any other failure raises
        :class:`DeltaSparkJobError`. Either way the driver log's tail goes into the task log.
        ``small_job``: see :meth:`spark_submit_hook`.
        """
        hook = self.spark_submit_hook(spec, conf=conf, small_job=small_job)
        self._submit_hook = hook
        driver_dir = Path(tempfile.mkdtemp(prefix="airflow-delta-driver-"))
        try:
            if hook.deploy_mode == "cluster":
                hook.set_application_args(["--spec", spec.to_json()])
            else:
                spec_file = driver_dir / "spec.json"
                spec_file.write_text(spec.to_json(), encoding="utf-8")
                hook.set_application_args(["--spec-file", str(spec_file)])
            try:
                try:
                    hook.submit(application=str(application or self.DML_APPLICATION), cwd=str(driver_dir))
                finally:
                    self._record_application(hook)
            except AirflowException as exc:
                tail = "\n".join(hook.output_tail)
                self.log.error(
                    "The Spark job failed; the last %d lines of its driver log:\n%s", len(hook.output_tail), tail
                )
                if hook.error_line is not None:
                    raise error_from_line(hook.error_line) from exc
                raise DeltaSparkJobError(f"the Spark job for {spec.OPERATION} failed: {exc}") from exc
        finally:
            shutil.rmtree(driver_dir, ignore_errors=True)
        if hook.application is None and hook.deploy_mode == "client":
            self.log.info(
                "The %s job registered no Spark application on %s: the engine did all of its work in the "
                "driver process that spark-submit started (the log decided it, or its few rows were found "
                "in the driver), so no Spark UI, cluster application or history entry exists for it",
                spec.OPERATION.upper(), hook.master,
            )
        if hook.result_line is None:
            return None
        payload = hook.result_line.split(RESULT_MARKER, 1)[1].strip()
        try:
            return JobResult.from_json(json.dumps(_first_json_document(payload)))
        except (ValueError, DeltaError) as exc:
            # The printed result is a convenience: callers read the commit from the log.
            self.log.warning("The job's result line could not be read (%s); the result comes from the log", exc)
            return None

    def _record_application(self, hook: _DmlSubmitHook) -> None:
        """Keep the application the job registered: from its own line (client mode), or the
        YARN application id spark-submit printed (cluster mode, where the driver's output is not seen)."""
        application = hook.application
        yarn_id = getattr(hook, "_yarn_application_id", None)
        if application is None and isinstance(yarn_id, str) and yarn_id:
            application = SparkApplication(yarn_id, None, hook.master)
        if application is not None:
            self.spark_applications.append(application)

    def spark_application_url(self) -> str | None:
        """Where the last Spark application of this hook's jobs is seen (see :meth:`SparkApplication.url`), or None."""
        if not self.spark_applications:
            return None
        return self.spark_applications[-1].url(self.settings.spark_history_url)

    def on_kill(self) -> None:
        """Kill the running Spark application, in every deploy mode."""
        if self._submit_hook is not None:
            self._submit_hook.on_kill()
