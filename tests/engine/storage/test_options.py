"""Object-store URIs, storage options in delta-rs's keys, and Airflow connections mapped to them (pure, no store)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_delta.engine import InvalidArgumentError, storage_options_from_airflow_connection
from airflow_delta.engine.storage.options import (
    DEFAULT_MAX_RETRIES,
    is_object_store_uri,
    normalize_storage_options,
    parse_object_store_uri,
    retry_settings,
)


@pytest.mark.parametrize(
    ("uri", "kind", "bucket", "prefix", "account"),
    [
        ("s3://bucket/path/to/table", "s3", "bucket", "path/to/table", None),
        ("s3a://bucket/table/", "s3", "bucket", "table", None),
        ("S3://bucket", "s3", "bucket", "", None),
        ("az://container/t", "azure", "container", "t", None),
        ("azure://container/a/b", "azure", "container", "a/b", None),
        ("abfss://container@myaccount.dfs.core.windows.net/dir/t", "azure", "container", "dir/t", "myaccount"),
        ("abfs://container@myaccount.dfs.core.windows.net/t", "azure", "container", "t", "myaccount"),
        ("az://myaccount.blob.core.windows.net/container/t", "azure", "container", "t", "myaccount"),
        ("gs://bucket/t", "gcs", "bucket", "t", None),
    ],
)
def test_uris_name_store_bucket_prefix_and_account(uri: str, kind: str, bucket: str, prefix: str, account: str | None) -> None:
    assert is_object_store_uri(uri)
    parsed = parse_object_store_uri(uri)
    assert (parsed.kind, parsed.bucket, parsed.prefix, parsed.account) == (kind, bucket, prefix, account)
    assert parsed.root == (f"{bucket}/{prefix}" if prefix else bucket)


@pytest.mark.parametrize("uri", ["/local/path", "file:///tmp/t", "hdfs://nn/t", "relative/t"])
def test_other_uris_are_not_object_stores(uri: str) -> None:
    assert not is_object_store_uri(uri)


@pytest.mark.parametrize(
    ("uri", "fix"),
    [
        ("s3:///table", "name the bucket"),
        ("s3://bucket/a/../b", "'.' or '..'"),
        ("s3://bucket/a//b", "no empty"),
        ("s3://bucket/t?versionId=1", "no query"),
        ("s3://user@bucket/t", "only Azure URIs"),
    ],
)
def test_malformed_uris_are_refused_saying_what_to_fix(uri: str, fix: str) -> None:
    with pytest.raises(InvalidArgumentError, match="table_uri") as caught:
        parse_object_store_uri(uri)
    assert fix in str(caught.value)


_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_=", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)


@given(
    scheme=st.sampled_from(["s3", "s3a", "az", "gs", "gcs"]),
    bucket=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=3, max_size=20),
    segments=st.lists(_SEGMENT, max_size=4),
    trailing_slash=st.booleans(),
)
def test_root_is_the_bucket_and_path_of_any_well_formed_uri(
    scheme: str, bucket: str, segments: list[str], trailing_slash: bool
) -> None:
    path = "/".join(segments)
    uri = f"{scheme}://{bucket}/{path}" + ("/" if trailing_slash and path else "")
    parsed = parse_object_store_uri(uri)
    assert parsed.root == f"{bucket}/{path}".rstrip("/")
    assert parsed.bucket == bucket and parsed.prefix == path


def test_options_take_delta_rs_keys_in_either_case_and_drop_other_stores() -> None:
    options = {
        "AWS_ACCESS_KEY_ID": "id",
        "aws_secret_access_key": "secret",
        "AWS_ALLOW_HTTP": True,
        "timeout": 30,
        "AZURE_STORAGE_ACCOUNT_NAME": "acct",  # another store's key: one mapping may serve several tables
        "GOOGLE_SERVICE_ACCOUNT": "/key.json",
        "AWS_SESSION_TOKEN": None,  # unset
        "max_retries": 3,
    }
    assert normalize_storage_options("s3", options) == {
        "aws_access_key_id": "id", "aws_secret_access_key": "secret", "aws_allow_http": "true", "timeout": "30",
        "max_retries": "3",
    }
    assert normalize_storage_options("azure", options) == {
        "timeout": "30", "azure_storage_account_name": "acct", "max_retries": "3"
    }
    assert normalize_storage_options("gcs", options) == {
        "timeout": "30", "google_service_account": "/key.json", "max_retries": "3"
    }
    assert normalize_storage_options("s3", None) == {}


@pytest.mark.parametrize("key", ["AWS_S3_LOCKING_PROVIDER", "DELTA_DYNAMO_TABLE_NAME"])
def test_dynamodb_locking_options_are_refused_not_ignored(key: str) -> None:
    with pytest.raises(InvalidArgumentError, match="conditional writes") as caught:
        normalize_storage_options("s3", {key: "dynamodb"})
    assert caught.value.argument == f"storage_options[{key!r}]"


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"AWS_REGION": ["us-east-1"]}, "storage_options['AWS_REGION']"),
        ({"": "x"}, "storage_options"),
        ("AWS_REGION=x", "storage_options"),
    ],
)
def test_malformed_options_are_refused_by_name(options: object, argument: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        normalize_storage_options("s3", options)  # type: ignore[arg-type]
    assert caught.value.argument == argument


def test_retry_settings_parse_counts_and_durations() -> None:
    assert retry_settings({})[0] == DEFAULT_MAX_RETRIES
    assert retry_settings({"max_retries": "2", "retry_timeout": "500ms"}) == (2, timedelta(seconds=0.5))
    assert retry_settings({"retry_timeout": "2m"})[1].total_seconds() == 120
    assert retry_settings({"retry_timeout": "15"})[1].total_seconds() == 15
    with pytest.raises(InvalidArgumentError, match="max_retries"):
        retry_settings({"max_retries": "-1"})
    with pytest.raises(InvalidArgumentError, match="retry_timeout"):
        retry_settings({"retry_timeout": "soon"})


# ------------------------------------------------------------------ Airflow connections


def test_an_aws_connection_maps_to_delta_rs_keys() -> None:
    extra = {"region_name": "eu-west-1", "aws_session_token": "tok",
             "service_config": {"s3": {"endpoint_url": "http://127.0.0.1:9000"}}}
    assert storage_options_from_airflow_connection("aws", login="AKIA", password="secret", extra=extra) == {
        "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "tok",
        "AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
    }
    # Nothing stated: nothing mapped, so the store falls back to the instance role and environment.
    assert storage_options_from_airflow_connection("aws") == {}
    assert storage_options_from_airflow_connection("aws", extra={"endpoint_url": "https://minio.example"}) == {
        "AWS_ENDPOINT_URL": "https://minio.example"
    }


def test_wasb_and_adls_connections_map_to_delta_rs_keys() -> None:
    assert storage_options_from_airflow_connection("wasb", login="acct", password="key==", extra={"sas_token": "sv=x"}) == {
        "AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "key==", "AZURE_STORAGE_SAS_TOKEN": "sv=x",
    }
    connection_string = ("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=abc==;"
                         "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;")
    assert storage_options_from_airflow_connection("wasb", extra={"connection_string": connection_string}) == {
        "AZURE_STORAGE_ACCOUNT_NAME": "devstoreaccount1", "AZURE_STORAGE_ACCOUNT_KEY": "abc==",
        "AZURE_ENDPOINT": "http://127.0.0.1:10000/devstoreaccount1", "AZURE_ALLOW_HTTP": "true",
    }
    assert storage_options_from_airflow_connection(
        "adls", login="client-id", password="client-secret", host="myaccount.dfs.core.windows.net",
        extra={"tenant_id": "tenant"},
    ) == {
        "AZURE_CLIENT_ID": "client-id", "AZURE_CLIENT_SECRET": "client-secret", "AZURE_TENANT_ID": "tenant",
        "AZURE_STORAGE_ACCOUNT_NAME": "myaccount",
    }


def test_a_google_connection_maps_its_key_file_or_key_json() -> None:
    assert storage_options_from_airflow_connection("google_cloud_platform", extra={"key_path": "/keys/sa.json"}) == {
        "GOOGLE_SERVICE_ACCOUNT": "/keys/sa.json"
    }
    key = {"type": "service_account", "client_email": "x@y"}
    mapped = storage_options_from_airflow_connection(
        "google_cloud_platform", extra={"extra__google_cloud_platform__keyfile_dict": key}
    )
    assert json.loads(mapped["GOOGLE_SERVICE_ACCOUNT_KEY"]) == key
    with pytest.raises(InvalidArgumentError, match="keyfile_dict"):
        storage_options_from_airflow_connection("google_cloud_platform", extra={"keyfile_dict": "{not json"})


def test_other_connection_types_are_refused_naming_the_ones_that_work() -> None:
    with pytest.raises(InvalidArgumentError, match="'aws', 'wasb', 'adls' or 'google_cloud_platform'"):
        storage_options_from_airflow_connection("postgres")
