"""Names of checkpoint files in ``_delta_log``, as the protocol spells them."""

from __future__ import annotations

from airflow_delta.engine.checkpoint.file_names import (
    SIDECAR_DIR_NAME,
    checkpoint_file_name,
    multipart_checkpoint_file_name,
    sidecar_file_name,
    v2_checkpoint_file_name,
)

UUID = "80a083e8-7026-4e79-81be-64bd76c43a11"


def test_classic_and_multi_part_names_are_zero_padded() -> None:
    assert checkpoint_file_name(10) == "00000000000000000010.checkpoint.parquet"
    assert multipart_checkpoint_file_name(10, 1, 3) == "00000000000000000010.checkpoint.0000000001.0000000003.parquet"


def test_v2_and_sidecar_names_carry_their_unique_part() -> None:
    assert v2_checkpoint_file_name(2, UUID, "json") == f"00000000000000000002.checkpoint.{UUID}.json"
    assert v2_checkpoint_file_name(2, UUID, "parquet") == f"00000000000000000002.checkpoint.{UUID}.parquet"
    assert sidecar_file_name(2, 1, 2, UUID) == f"00000000000000000002.checkpoint.0000000001.0000000002.{UUID}.parquet"
    assert SIDECAR_DIR_NAME == "_sidecars"
