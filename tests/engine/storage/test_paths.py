from __future__ import annotations

import pytest

from airflow_delta.engine.errors import PathOutsideTableError
from airflow_delta.engine.storage.paths import decode_log_path, encode_log_path, relative_to_table, resolve_in_table

ROOT = "/data/table"


@pytest.mark.parametrize(
    ("log_path", "expected"),
    [
        ("part-0.parquet", "/data/table/part-0.parquet"),
        ("dt=2024-01-01/part-0.parquet", "/data/table/dt=2024-01-01/part-0.parquet"),
        ("a%20b/c%3Ad.parquet", "/data/table/a b/c:d.parquet"),
        ("file:///data/table/x.parquet", "/data/table/x.parquet"),
        ("/data/table/sub/../y.parquet", "/data/table/y.parquet"),
        ("ab%3Acd.parquet", "/data/table/ab:cd.parquet"),  # an encoded colon is part of a name
        ("ts=10%3A00/part-0.parquet", "/data/table/ts=10:00/part-0.parquet"),
        ("file:/data/table/x.parquet", "/data/table/x.parquet"),  # Hadoop's single-slash form
    ],
)
def test_resolve_inside_root(log_path: str, expected: str) -> None:
    assert resolve_in_table(ROOT, log_path) == expected


@pytest.mark.parametrize(
    "log_path",
    [
        "../other/part-0.parquet",
        "%2E%2E/other/part-0.parquet",  # encoded escape is decoded first, then refused
        "/data/table-other/part-0.parquet",  # shares the prefix but is a sibling directory
        "file:///etc/passwd",
        "s3://another-bucket/data/table/x.parquet",
        "a/../../x.parquet",
    ],
)
def test_resolve_refuses_escapes(log_path: str) -> None:
    with pytest.raises(PathOutsideTableError, match="outside the table root"):
        resolve_in_table(ROOT, log_path)


def test_encode_decode_round_trip() -> None:
    raw = "country=Côte d'Ivoire/part 0%.parquet"
    assert decode_log_path(encode_log_path(raw)) == raw
    assert "=" in encode_log_path(raw) and " " not in encode_log_path(raw)


def test_relative_to_table() -> None:
    assert relative_to_table(ROOT, "/data/table/a/b.parquet") == "a/b.parquet"
    with pytest.raises(PathOutsideTableError):
        relative_to_table(ROOT, "/data/tablex/b.parquet")
