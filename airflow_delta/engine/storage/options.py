"""Object-store URIs and storage options, in the keys delta-rs accepts.

A table on an object store is named by a URI (``s3://bucket/path``, ``s3a://...``,
``az://container/path``, ``abfss://container@account.dfs.core.windows.net/path``,
``gs://bucket/path``) and configured by a flat mapping of string options. The keys are
those of the object_store crate that delta-rs and obstore share (``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT_URL``, ``AZURE_STORAGE_ACCOUNT_NAME``, ``GOOGLE_SERVICE_ACCOUNT``, ...), upper
or lower case, with the aliases object_store accepts (``aws_access_key_id``,
``access_key_id``), so a configuration that works with delta-rs works here unchanged.

This module is pure: it parses and maps values and touches no store. Airflow
connections are mapped here too (:func:`storage_options_from_airflow_connection`, from
plain values the hook reads off a connection), so the hook and the engine agree on one
set of keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.engine.storage.uri_schemes import OBJECT_STORE_SCHEMES, StoreKind, is_object_store_uri

STORE_NAMES: dict[StoreKind, str] = {"s3": "S3", "azure": "Azure Blob Storage", "gcs": "Google Cloud Storage"}

# Options of our own (not object_store's): how hard the FileIO retries transient errors.
# ``max_retries`` and ``retry_timeout`` are the names delta-rs reads for the same settings.
RETRY_OPTION_KEYS = ("max_retries", "retry_timeout")
DEFAULT_MAX_RETRIES = 6
DEFAULT_RETRY_TIMEOUT = timedelta(seconds=60)

# delta-rs options that ask for a commit protocol we do not implement: refused by name
# rather than silently ignored, since the user relies on them for safe commits.
_UNSUPPORTED_KEYS = {
    "aws_s3_locking_provider": "a DynamoDB lock: this engine commits with S3's conditional writes "
    "(If-None-Match: *), which every S3 region supports; remove the option",
    "dynamo_lock_table_name": "a DynamoDB lock table: this engine commits with S3's conditional writes; remove the option",
    "delta_dynamo_table_name": "a DynamoDB lock table: this engine commits with S3's conditional writes; remove the option",
}

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


@dataclass(frozen=True, slots=True)
class ObjectStoreURI:
    """A parsed object-store URI: the store, its bucket (or container), the key prefix and
    the Azure account a ``abfss://container@account.dfs.core.windows.net`` URI names."""

    kind: StoreKind
    bucket: str
    prefix: str
    account: str | None = None

    @property
    def root(self) -> str:
        """The table root in the FileIO's path form: ``bucket/prefix`` (no scheme, no trailing slash)."""
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket


def parse_object_store_uri(uri: str) -> ObjectStoreURI:
    """Split ``uri`` into store, bucket and prefix; :class:`InvalidArgumentError` when it names no bucket."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    kind = OBJECT_STORE_SCHEMES.get(scheme)
    if kind is None:
        raise InvalidArgumentError(
            "table_uri", uri, f"use one of the schemes {', '.join(sorted(OBJECT_STORE_SCHEMES))}:// for an object store"
        )
    if parts.query or parts.fragment:
        raise InvalidArgumentError("table_uri", uri, "an object-store URI has no query or fragment: remove '?...'/'#...'")
    netloc = parts.netloc
    account = None
    if "@" in netloc:  # abfss://container@account.dfs.core.windows.net/path (Hadoop's form)
        netloc, host = netloc.split("@", 1)
        account = host.split(".", 1)[0] or None
        if kind != "azure":
            raise InvalidArgumentError("table_uri", uri, "only Azure URIs name an account after '@'; put credentials in storage_options")
    elif kind == "azure" and "." in netloc:  # az://account.blob.core.windows.net/container/path
        account = netloc.split(".", 1)[0]
        container, _, rest = parts.path.lstrip("/").partition("/")
        netloc, parts = container, parts._replace(path="/" + rest)
    prefix = parts.path.strip("/")
    if not netloc:
        raise InvalidArgumentError("table_uri", uri, f"name the bucket or container: {scheme}://<bucket>/<path>")
    if "//" in prefix or any(segment in (".", "..") for segment in prefix.split("/") if prefix):
        raise InvalidArgumentError("table_uri", uri, "a table path has no empty, '.' or '..' segments")
    return ObjectStoreURI(kind, netloc, prefix, account)


def normalize_storage_options(kind: StoreKind, storage_options: Mapping[str, Any] | None) -> dict[str, str]:
    """The options as object_store config keys (lower case, values as strings), for ``kind``.

    Keys of other stores are dropped (a DAG may pass one mapping for tables on several
    stores, as delta-rs allows); our retry settings are kept under their own names;
    delta-rs's DynamoDB locking options are refused (:class:`InvalidArgumentError`), since
    dropping them would change how a user believes commits are made safe.
    """
    if storage_options is None:
        return {}
    if not isinstance(storage_options, Mapping):
        raise InvalidArgumentError("storage_options", storage_options, "pass a mapping of option names to values, or None")
    options: dict[str, str] = {}
    for key, value in storage_options.items():
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError("storage_options", storage_options, "option names are non-empty strings")
        name = key.lower()
        if name in _UNSUPPORTED_KEYS:
            raise InvalidArgumentError(f"storage_options[{key!r}]", value, f"this option configures {_UNSUPPORTED_KEYS[name]}")
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            text = str(value)
        else:
            raise InvalidArgumentError(f"storage_options[{key!r}]", value, "option values are strings, numbers or booleans")
        if name in RETRY_OPTION_KEYS or _belongs_to(kind, name):
            options[name] = text
    return options


_STORE_PREFIXES: dict[StoreKind, tuple[str, ...]] = {"s3": ("aws_",), "azure": ("azure_",), "gcs": ("google_", "gcs_")}


def _belongs_to(kind: StoreKind, name: str) -> bool:
    """Whether an option key is for ``kind``: its own prefix, or no store's prefix at all.

    Unprefixed keys are object_store's aliases (``access_key_id``, ``account_name``,
    ``endpoint``, ``allow_http``, ``timeout``...): the store's own parser says which it knows.
    """
    return not any(name.startswith(prefixes) for other, prefixes in _STORE_PREFIXES.items() if other != kind)


def retry_settings(options: Mapping[str, str]) -> tuple[int, timedelta]:
    """``(max_retries, retry_timeout)`` from the options, with the defaults; bad values refused by name."""
    max_retries = DEFAULT_MAX_RETRIES
    timeout = DEFAULT_RETRY_TIMEOUT
    if "max_retries" in options:
        text = options["max_retries"]
        if not text.isdigit():
            raise InvalidArgumentError("storage_options['max_retries']", text, "pass a whole number of retries (0 or more)")
        max_retries = int(text)
    if "retry_timeout" in options:
        text = options["retry_timeout"]
        match = _DURATION.match(text)
        if match is None:
            raise InvalidArgumentError(
                "storage_options['retry_timeout']", text, "pass a duration such as '60s', '500ms', '2m' or seconds as a number"
            )
        timeout = timedelta(seconds=float(match.group(1)) * _DURATION_UNIT_SECONDS[match.group(2)])
    return max_retries, timeout


# ------------------------------------------------------------------ Airflow connections


def storage_options_from_airflow_connection(
    conn_type: str,
    *,
    login: str | None = None,
    password: str | None = None,
    host: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Storage options (delta-rs keys) for an Airflow connection, given as plain values.

    ``conn_type`` is the connection's type: ``aws``, ``wasb``, ``adls`` or
    ``google_cloud_platform``; ``extra`` its parsed extra JSON. Only what the connection
    states is mapped, so that anything unset falls back to the store's own defaults (the
    instance role, environment variables). An unknown type or a malformed extra is an
    :class:`InvalidArgumentError` naming the field.
    """
    extra = dict(extra or {})
    if conn_type == "aws":
        return _aws_options(login, password, extra)
    if conn_type in ("wasb", "adls"):
        return _azure_options(conn_type, login, password, host, extra)
    if conn_type in ("google_cloud_platform", "gcp"):
        return _gcp_options(extra)
    raise InvalidArgumentError(
        "conn_type", conn_type, "use an 'aws', 'wasb', 'adls' or 'google_cloud_platform' connection for a table on object storage"
    )


def _put(options: dict[str, str], key: str, value: Any) -> None:
    if value is not None and value != "":
        options[key] = str(value).lower() if isinstance(value, bool) else str(value)


def _aws_options(login: str | None, password: str | None, extra: dict[str, Any]) -> dict[str, str]:
    options: dict[str, str] = {}
    _put(options, "AWS_ACCESS_KEY_ID", login or extra.get("aws_access_key_id"))
    _put(options, "AWS_SECRET_ACCESS_KEY", password or extra.get("aws_secret_access_key"))
    _put(options, "AWS_SESSION_TOKEN", extra.get("aws_session_token"))
    _put(options, "AWS_REGION", extra.get("region_name") or extra.get("region"))
    service_config = extra.get("service_config") or {}
    s3_config = service_config.get("s3", {}) if isinstance(service_config, Mapping) else {}
    endpoint = (s3_config.get("endpoint_url") if isinstance(s3_config, Mapping) else None) or extra.get("endpoint_url")
    if endpoint:
        options["AWS_ENDPOINT_URL"] = str(endpoint)
        if str(endpoint).lower().startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    config_kwargs = extra.get("config_kwargs") or {}
    if isinstance(config_kwargs, Mapping) and (config_kwargs.get("s3") or {}).get("addressing_style") == "virtual":
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "true"
    return options


def _azure_options(
    conn_type: str, login: str | None, password: str | None, host: str | None, extra: dict[str, Any]
) -> dict[str, str]:
    options: dict[str, str] = {}
    connection_string = extra.get("connection_string")
    if connection_string:
        fields = dict(
            part.split("=", 1) for part in str(connection_string).split(";") if "=" in part
        )
        _put(options, "AZURE_STORAGE_ACCOUNT_NAME", fields.get("AccountName"))
        _put(options, "AZURE_STORAGE_ACCOUNT_KEY", fields.get("AccountKey"))
        _put(options, "AZURE_STORAGE_SAS_TOKEN", fields.get("SharedAccessSignature"))
        if fields.get("BlobEndpoint"):
            options["AZURE_ENDPOINT"] = fields["BlobEndpoint"].rstrip("/")
            if fields["BlobEndpoint"].lower().startswith("http://"):
                options["AZURE_ALLOW_HTTP"] = "true"
        return options
    tenant = extra.get("tenant_id") or extra.get("tenantId")
    if tenant:  # a service principal: login is the client id, password its secret
        _put(options, "AZURE_CLIENT_ID", login)
        _put(options, "AZURE_CLIENT_SECRET", password)
        _put(options, "AZURE_TENANT_ID", tenant)
        account = extra.get("account_name") or (host if conn_type == "adls" else None)
        _put(options, "AZURE_STORAGE_ACCOUNT_NAME", _account_from_host(account))
    else:
        _put(options, "AZURE_STORAGE_ACCOUNT_NAME", login or _account_from_host(host))
        _put(options, "AZURE_STORAGE_ACCOUNT_KEY", password or extra.get("shared_access_key"))
    _put(options, "AZURE_STORAGE_SAS_TOKEN", extra.get("sas_token"))
    return options


def _account_from_host(host: str | None) -> str | None:
    """``https://acct.blob.core.windows.net`` or ``acct.dfs.core.windows.net`` -> ``acct``."""
    if not host:
        return None
    name = host.split("://", 1)[-1]
    return name.split(".", 1)[0] or None


def _gcp_options(extra: dict[str, Any]) -> dict[str, str]:
    options: dict[str, str] = {}

    def field(name: str) -> Any:  # the provider stores extras with or without its old prefix
        return extra.get(name) or extra.get(f"extra__google_cloud_platform__{name}")

    key_path = field("key_path")
    keyfile_dict = field("keyfile_dict")
    if key_path:
        options["GOOGLE_SERVICE_ACCOUNT"] = str(key_path)
    elif keyfile_dict:
        if isinstance(keyfile_dict, Mapping):
            keyfile_dict = json.dumps(dict(keyfile_dict))
        try:
            json.loads(keyfile_dict)
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                "extra['keyfile_dict']", "<hidden>", "pass the service-account key JSON (the file's content)"
            ) from None
        options["GOOGLE_SERVICE_ACCOUNT_KEY"] = str(keyfile_dict)
    return options


__all__ = [
    "OBJECT_STORE_SCHEMES",
    "ObjectStoreURI",
    "StoreKind",
    "is_object_store_uri",
    "normalize_storage_options",
    "parse_object_store_uri",
    "retry_settings",
    "storage_options_from_airflow_connection",
]
