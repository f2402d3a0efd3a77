"""Z85: Delta's variant (zero padding, UUIDs), checked against Python's ``base64.b85encode``.

``base64.b85encode`` does the same base-85 arithmetic with another alphabet, so it is an
independent oracle for our Z85.
"""

from __future__ import annotations

import base64
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import (
    CorruptDeletionVectorError,
    InvalidZ85Error,
)
from airflow_delta.engine.model.actions import DeletionVectorDescriptor
from airflow_delta.engine.model.deletion_vector_files import (
    dv_absolute_path,
    dv_relative_path,
    split_uuid_path,
)
from airflow_delta.engine.model.z85 import decode_uuid, encode_uuid, z85_decode, z85_encode

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_B85_TO_Z85 = str.maketrans(_B85, _Z85)


def reference_z85(data: bytes) -> str:
    """Z85 via the stdlib's base-85 (big-endian groups, another alphabet), padded like Delta pads."""
    padded = data + b"\0" * (-len(data) % 4)
    return base64.b85encode(padded).decode("ascii").translate(_B85_TO_Z85)


# ----------------------------------------------------------------------- Z85


def test_z85_matches_the_zeromq_spec_vector() -> None:
    raw = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(raw) == "HelloWorld"
    assert z85_decode("HelloWorld") == raw


def test_uuid_with_random_prefix_from_the_protocol_example() -> None:
    prefix, file_id = split_uuid_path("ab^-aqEH.-t@S}K{vb[*k^")
    assert prefix == "ab"
    assert file_id == uuid.UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61")
    assert encode_uuid(file_id) == "^-aqEH.-t@S}K{vb[*k^"
    dv = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 40, 6, 4)
    assert dv_relative_path(dv) == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert dv_absolute_path("/data/mytable", dv) == "/data/mytable/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"


@FAST
@given(st.binary(max_size=200))
def test_z85_round_trips_any_bytes_and_agrees_with_base85(data: bytes) -> None:
    text = z85_encode(data)
    assert text == reference_z85(data)
    assert len(text) == -(-len(data) // 4) * 5
    assert z85_decode(text, len(data)) == data
    if len(data) % 4 == 0:
        assert z85_decode(text) == data


@FAST
@given(st.uuids())
def test_uuid_encoding_round_trips(value: uuid.UUID) -> None:
    text = encode_uuid(value)
    assert len(text) == 20
    assert decode_uuid(text) == value
    prefix = "Xy9"
    assert split_uuid_path(prefix + text) == (prefix, value)


@pytest.mark.parametrize(
    ("text", "size", "message"),
    [
        ("Hello", 5, "holds 4 bytes, not 5"),
        ("HelloWorl", None, "multiple of 5"),
        ("Hell\"", None, "not a Z85 character"),
        ("Hellé", None, "non-ASCII"),
        ("#####", None, "exceeds 32 bits"),
        ("HelloWorld", 4, "holds 8 bytes, not 4"),
    ],
)
def test_z85_rejects_invalid_text(text: str, size: int | None, message: str) -> None:
    with pytest.raises(InvalidZ85Error, match=message):
        z85_decode(text, size)


def test_decode_uuid_needs_twenty_characters() -> None:
    with pytest.raises(InvalidZ85Error, match="20 characters"):
        decode_uuid("HelloWorld")
    with pytest.raises(CorruptDeletionVectorError, match="at least 20"):
        split_uuid_path("short")
