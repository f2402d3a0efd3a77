"""The parts of checkpoint writing; the entry points are in :mod:`airflow_delta.engine.checkpoint.writer`.

* :mod:`.schema`: the checkpoint's parquet schema and its ``checkpointSchema`` JSON form
* :mod:`.file_names`: classic, multi-part, V2 and sidecar file names
* :mod:`.rows`: checkpoint rows from a snapshot's file-action tables and non-file actions
* :mod:`.parsed_columns`: ``stats_parsed`` and ``partitionValues_parsed`` (physical names)
* :mod:`.spark_hash`: Spark's Murmur3 ``hash()``, which assigns file actions to parts
* :mod:`.output`: atomic parquet output and what a write produced
* :mod:`.classic`: classic (single-file) and multi-part checkpoints
* :mod:`.v2`: V2 checkpoints with sidecars
* :mod:`.last_checkpoint`: reading and writing ``_last_checkpoint``, with its JSON checksum
* :mod:`.maintenance`: the writer features log maintenance allows, and which tombstones are live
"""
