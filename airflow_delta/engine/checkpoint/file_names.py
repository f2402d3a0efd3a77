"""Names of the files a checkpoint writes in ``_delta_log`` (protocol, "Checkpoints")."""

from __future__ import annotations

SIDECAR_DIR_NAME = "_sidecars"


def checkpoint_file_name(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


def multipart_checkpoint_file_name(version: int, part: int, num_parts: int) -> str:
    """Part ``part`` (1-based) of ``num_parts``."""
    return f"{version:020d}.checkpoint.{part:010d}.{num_parts:010d}.parquet"


def v2_checkpoint_file_name(version: int, unique: str, file_format: str) -> str:
    return f"{version:020d}.checkpoint.{unique}.{file_format}"


def sidecar_file_name(version: int, part: int, num_parts: int, unique: str) -> str:
    # Any unique name is valid; Spark's convention makes the checkpoint version visible.
    return f"{version:020d}.checkpoint.{part:010d}.{num_parts:010d}.{unique}.parquet"

