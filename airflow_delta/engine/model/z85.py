"""Delta's Z85: the base-85 text of inline deletion vectors and of the UUIDs in ``u`` DV paths.

Z85 (ZeroMQ RFC 32) turns every 4 bytes into 5 printable characters. Delta's variant pads input
that is not 4-byte aligned with zero bytes and does not record the padding: whoever decodes the
text must know the original length (``sizeInBytes`` for inline DVs, 16 for UUIDs).
:func:`encode_uuid` / :func:`decode_uuid` give the 20-character form of a UUID that ``u``
descriptors end their ``pathOrInlineDv`` with.
"""

from __future__ import annotations

import uuid

import numpy as np

from airflow_delta.engine.errors import InvalidZ85Error

__all__ = [
    "ENCODED_UUID_LENGTH",
    "decode_uuid",
    "encode_uuid",
    "z85_decode",
    "z85_encode",
]

ENCODED_UUID_LENGTH = 20

_Z85_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_ENCODE = np.frombuffer(_Z85_ALPHABET, dtype=np.uint8)
_Z85_DECODE = np.full(256, 255, dtype=np.uint8)
_Z85_DECODE[_Z85_ENCODE] = np.arange(85, dtype=np.uint8)
_Z85_POWERS = np.array([85**4, 85**3, 85**2, 85, 1], dtype=np.uint64)


def z85_encode(data: bytes) -> str:
    """Z85 of ``data`` as Delta writes it: input that is not 4-byte aligned is padded with zero bytes.

    The padding is not recorded in the text; whoever decodes it must know the original
    length (``sizeInBytes`` for inline DVs, 16 for UUIDs).
    """
    padding = (-len(data)) % 4
    words = np.frombuffer(bytes(data) + b"\0" * padding, dtype=">u4").astype(np.uint64)
    digits = (words[:, None] // _Z85_POWERS) % 85
    return _Z85_ENCODE[digits].tobytes().decode("ascii")


def z85_decode(text: str, size: int | None = None) -> bytes:
    """Bytes of Z85 ``text``; with ``size``, the zero padding of unaligned data is dropped.

    Raises :class:`InvalidZ85Error` for a length that is not a multiple of 5, characters outside
    the Z85 alphabet, a 5-character group above 2**32 - 1, or a ``size`` the text cannot hold.
    """
    if len(text) % 5:
        raise InvalidZ85Error(f"Z85 text must be a multiple of 5 characters long, got {len(text)}: {text!r}")
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError as exc:
        raise InvalidZ85Error(f"Z85 text contains a non-ASCII character at position {exc.start}: {text!r}") from exc
    codes = _Z85_DECODE[np.frombuffer(raw, dtype=np.uint8)]
    bad = np.flatnonzero(codes == 255)
    if bad.size:
        pos = int(bad[0])
        raise InvalidZ85Error(f"{text[pos]!r} at position {pos} is not a Z85 character: {text!r}")
    words = codes.reshape(-1, 5).astype(np.uint64) @ _Z85_POWERS
    overflow = np.flatnonzero(words > 0xFFFFFFFF)
    if overflow.size:
        pos = int(overflow[0]) * 5
        raise InvalidZ85Error(f"Z85 group {text[pos:pos + 5]!r} at position {pos} exceeds 32 bits: {text!r}")
    out = words.astype(">u4").tobytes()
    if size is None:
        return out
    if not len(out) - 3 <= size <= len(out):
        raise InvalidZ85Error(f"Z85 text of {len(text)} characters holds {len(out)} bytes, not {size}: {text!r}")
    return out[:size]


def encode_uuid(value: uuid.UUID) -> str:
    """The 20-character Z85 form of a UUID (its 16 bytes, most significant first) used in ``u`` DVs."""
    return z85_encode(value.bytes)


def decode_uuid(text: str) -> uuid.UUID:
    """Inverse of :func:`encode_uuid`."""
    if len(text) != ENCODED_UUID_LENGTH:
        raise InvalidZ85Error(f"an encoded UUID has {ENCODED_UUID_LENGTH} characters, got {len(text)}: {text!r}")
    return uuid.UUID(bytes=z85_decode(text))
