"""Which table URIs name an object store: the schemes, and the check every table opening makes.

Apart from :mod:`.options` (which re-exports these) so that opening a local table tells a
path from an object-store URI without loading the URI parser and the storage options.
"""

from __future__ import annotations

from typing import Literal

StoreKind = Literal["s3", "azure", "gcs"]

# URI scheme -> store. ``s3a`` is how Spark (Hadoop's S3A) users write S3 URIs; ``abfs``/``abfss``
# are Hadoop's ADLS Gen2 schemes, ``az``/``azure``/``adl`` those delta-rs accepts for Azure Blob.
OBJECT_STORE_SCHEMES: dict[str, StoreKind] = {
    "s3": "s3",
    "s3a": "s3",
    "az": "azure",
    "azure": "azure",
    "adl": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "gs": "gcs",
    "gcs": "gcs",
}


def is_object_store_uri(uri: str) -> bool:
    return "://" in uri and uri.split("://", 1)[0].lower() in OBJECT_STORE_SCHEMES


__all__ = ["OBJECT_STORE_SCHEMES", "StoreKind", "is_object_store_uri"]
