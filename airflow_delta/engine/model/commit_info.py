"""The ``commitInfo`` action of our commits: its fields, encoded as Delta writes them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from airflow_delta import __version__
from airflow_delta.engine.model.json_text import json_text

ENGINE_INFO = f"airflow-delta/{__version__}"
# The commitInfo tag Delta puts on a commit whose only metadata change is identity
# high-water marks (DeltaSourceUtils.IDENTITY_COMMITINFO_TAG). Here rather than with the
# identity columns (column_defaults) because conflict checking reads it on every commit.
IDENTITY_COMMIT_TAG = "delta.identity.schemaUpdate"


def encode_operation_parameters(parameters: Mapping[str, Any] | None) -> dict[str, str | bool | int | float | None]:
    """``operationParameters`` as Delta writes them.

    Delta serialises each value as the raw JSON of what the operation passed: strings stay
    strings, ``None`` is null, booleans and numbers stay JSON scalars (OPTIMIZE's
    ``"auto":true``). Lists and maps become JSON *text* (``"partitionBy":"[\"day\"]"``), as
    Delta's operations pre-encode them, because Spark reads the values back as strings and
    accepts scalars but not arrays or objects. Non-finite floats, which JSON cannot hold,
    become their text too.
    """
    out: dict[str, str | bool | int | float | None] = {}
    for key, value in (parameters or {}).items():
        json_scalar = isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value))
        if value is None or json_scalar:
            out[str(key)] = value
        else:
            out[str(key)] = json_text(value, default=str)
    return out


def encode_operation_metrics(metrics: Mapping[str, Any] | None) -> dict[str, str]:
    """``operationMetrics`` as Delta writes them: every value a string (``"3"``, ``"true"``)."""
    out: dict[str, str] = {}
    for key, value in (metrics or {}).items():
        if isinstance(value, bool):
            out[str(key)] = "true" if value else "false"
        else:
            out[str(key)] = str(value)
    return out



def build_commit_info(
    operation: str,
    operation_parameters: Mapping[str, Any] | None,
    operation_metrics: Mapping[str, Any] | None,
    *,
    timestamp: int,
    in_commit_timestamp: int | None,
    read_version: int,
    isolation_level: str,
    is_blind_append: bool,
    user_metadata: str | None,
    tags: Mapping[str, str] | None,
    engine_info: str,
    txn_id: str,
) -> dict[str, Any]:
    """The ``commitInfo`` object of one commit attempt, fields in the order Delta writes them.

    ``read_version`` is left out for a commit that creates the table (``-1``).
    """
    info: dict[str, Any] = {}
    if in_commit_timestamp is not None:
        info["inCommitTimestamp"] = in_commit_timestamp  # must be the first field read by ICT-aware readers
    info["timestamp"] = timestamp
    info["operation"] = operation
    info["operationParameters"] = encode_operation_parameters(operation_parameters)
    if read_version >= 0:
        info["readVersion"] = read_version
    info["isolationLevel"] = isolation_level
    info["isBlindAppend"] = is_blind_append
    info["operationMetrics"] = encode_operation_metrics(operation_metrics)
    if user_metadata is not None:
        info["userMetadata"] = user_metadata
    if tags:
        info["tags"] = dict(tags)
    info["engineInfo"] = engine_info
    info["txnId"] = txn_id
    return info


__all__ = ["ENGINE_INFO", "IDENTITY_COMMIT_TAG", "build_commit_info", "encode_operation_metrics", "encode_operation_parameters"]
