from __future__ import annotations

import posixpath

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import DeltaError, InvalidPathError, PathOutsideTableError
from airflow_delta.engine.read.snapshot import relative_paths
from airflow_delta.engine.storage.paths import (
    check_log_paths,
    decode_log_path,
    encode_log_path,
    relative_to_table,
    resolve_in_table,
)

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


# ------------------------------------------------ hostile paths: one rule, staged or read

# (path, error) pairs: every way a path in an action can be wrong.
HOSTILE_PATHS: list[tuple[str, type[DeltaError]]] = [
    ("", InvalidPathError),  # empty
    ("part\x00.parquet", InvalidPathError),  # NUL
    ("part%00.parquet", InvalidPathError),  # NUL behind an escape
    ("fi\tle:///data/table/x.parquet", InvalidPathError),  # URI parsers drop tabs and newlines
    ("p=a\n/x.parquet", InvalidPathError),
    ("a\\b.parquet", InvalidPathError),  # raw backslash
    ("..\\..\\x.parquet", InvalidPathError),  # a Windows escape
    ("part%zz.parquet", InvalidPathError),  # malformed escape
    ("part%.parquet", InvalidPathError),  # lone %
    ("part%4", InvalidPathError),  # truncated escape
    ("part%C3%28.parquet", InvalidPathError),  # escapes that are not UTF-8
    ("dir/", InvalidPathError),  # a directory
    (".", InvalidPathError),  # the root itself
    ("a/..", InvalidPathError),  # the root itself, after normalising
    ("file:///data/table", InvalidPathError),
    ("file:///data/table/x.parquet?x=1", InvalidPathError),  # a query names no file
    ("file:///data/table/x.parquet#../../etc", InvalidPathError),
    ("../x", PathOutsideTableError),
    ("../../x", PathOutsideTableError),
    ("a/../../x", PathOutsideTableError),
    ("%2E%2E/x", PathOutsideTableError),
    ("a/%2E%2E%2F%2E%2E/x", PathOutsideTableError),
    ("%2Fetc%2Fpasswd", PathOutsideTableError),
    ("/etc/passwd", PathOutsideTableError),
    ("/data/table-other/x.parquet", PathOutsideTableError),
    ("/data/table/../table-other/x.parquet", PathOutsideTableError),
    ("file:///etc/passwd", PathOutsideTableError),
    ("file:/etc/passwd", PathOutsideTableError),
    ("file://otherhost/data/table/x.parquet", PathOutsideTableError),
    ("s3://bucket/data/table/x.parquet", PathOutsideTableError),
    ("ab:cd.parquet", PathOutsideTableError),  # a raw colon before any '/' makes a URI scheme
]


@pytest.mark.parametrize(("log_path", "error"), HOSTILE_PATHS)
def test_hostile_paths_are_refused_by_every_entry_point(log_path: str, error: type[DeltaError]) -> None:
    with pytest.raises(error):
        resolve_in_table(ROOT, log_path)
    # the vectorised check that staging uses, alone and among good paths
    with pytest.raises(error):
        check_log_paths(ROOT, ["ok.parquet", log_path, "p=a/ok.parquet"], "a staged add action")
    # the reader's files() path
    with pytest.raises(error):
        relative_paths(ROOT, pa.array(["ok.parquet", log_path]))


def test_refusals_say_what_and_where() -> None:
    with pytest.raises(InvalidPathError, match=r"'part%zz.parquet' in a staged add action: a '%' that does not start"):
        check_log_paths(ROOT, ["part%zz.parquet"], "a staged add action")
    with pytest.raises(PathOutsideTableError, match=r"'../x'.*outside the table root '/data/table' \(a staged remove"):
        check_log_paths(ROOT, ["../x"], "a staged remove action")
    with pytest.raises(InvalidPathError, match="must be a string, not int"):
        check_log_paths(ROOT, [7], "a staged add action")  # type: ignore[list-item]


def test_good_paths_pass_every_entry_point() -> None:
    good = ["part-0.parquet", "p=a b/x.parquet", "p=a%20b/x.parquet", "ts=10%3A00/x.parquet", "a/./b.parquet",
            "a/../b.parquet", "file:///data/table/x.parquet", "/data/table/y.parquet", "%5C.parquet", "a?b#c.parquet",
            " file:/etc/passwd"]  # no scheme (a space first): the file "etc/passwd" below " file:"
    check_log_paths(ROOT, good, "a staged add action")
    assert relative_paths(ROOT, pa.array(good)).to_pylist()[:4] == [
        "part-0.parquet", "p=a b/x.parquet", "p=a b/x.parquet", "ts=10:00/x.parquet"]


# Pieces a hostile tester would combine: separators, dots, escapes (good and bad), schemes.
_PIECES = st.sampled_from([
    "a", "b=1", "x.parquet", "/", "//", ".", "..", "%", "%2", "%2E", "%2e%2E", "%2F", "%00", "%C3", "%C3%A9", "%5C",
    "\\", "\x00", "\t", "\n", "%0A", ":", "?", "#", "file:", "file://", "file:///", "s3://", "/data/table", "/data/table-x", "~", " ", "é",
])


@settings(max_examples=600)
@given(st.lists(_PIECES, max_size=8).map("".join))
def test_one_rule_for_staging_and_reading(log_path: str) -> None:
    """Whatever the path: the full rule refuses it with a typed error, or it names a file strictly
    below the root; the vectorised staging check and the reader's ``files()`` agree with it."""
    try:
        resolved: str | None = resolve_in_table(ROOT, log_path)
    except (InvalidPathError, PathOutsideTableError) as exc:
        resolved, error = None, type(exc)
    if resolved is not None:
        assert resolved.startswith(ROOT + "/") and "\x00" not in resolved
        assert posixpath.normpath(resolved) == resolved
        # The same storage path as the full rule (the reader opens what this returns).
        assert check_log_paths(ROOT, [log_path], "a staged add action") == [resolved]
        relative = relative_paths(ROOT, pa.array([log_path])).to_pylist()[0]
        assert posixpath.normpath(posixpath.join(ROOT, relative)) == resolved
    else:
        with pytest.raises(error):
            check_log_paths(ROOT, [log_path], "a staged add action")
        with pytest.raises(error):
            relative_paths(ROOT, pa.array([log_path]))
