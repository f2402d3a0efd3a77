"""``remove`` actions built from Arrow file actions (``FILE_ACTIONS_SCHEMA`` rows)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.model.actions import DeletionVectorDescriptor, Metadata, RemoveFile
from airflow_delta.engine.model.arrow_numpy import (
    bool_array,
    combined,
    int64_array,
    int64_to_numpy,
    mask_to_numpy,
    offsets_to_numpy,
    string_array,
    string_scalar,
)
from airflow_delta.engine.model.json_text import json_text
from airflow_delta.engine.model.properties import TableProperties
from airflow_delta.engine.storage.paths import check_log_paths, decode_log_path


def removes_from_file_actions(
    files: pa.Table, deletion_timestamp: int, *, data_change: bool = True, partition_columns: Sequence[str] | None = None
) -> list[RemoveFile]:
    """``remove`` actions for ``FILE_ACTIONS_SCHEMA`` rows, carrying what Delta puts in extended file metadata
    (``partition_columns``: partition values trimmed to exactly those keys, :func:`only_partition_columns`)."""
    # Column by column: only the columns a remove carries become Python objects (not the
    # whole row), and columns with no value at all (DVs, tags) are not converted.
    num_rows = files.num_rows

    def values(name: str) -> list[Any]:
        if name not in files.column_names or files.column(name).null_count == num_rows:
            return [None] * num_rows
        return files.column(name).to_pylist()

    partitions = values("partition_values")
    if partition_columns is not None:
        columns = list(partition_columns)
        # Once per distinct partition (the files of a commit share a few), not per file; the
        # removes of one partition share one dict, which nothing changes (actions are immutable).
        trimmed: dict[tuple[tuple[str, str | None], ...], dict[str, str | None]] = {}
        for i, pv in enumerate(partitions):
            key = tuple(pv) if pv is not None else ()
            found = trimmed.get(key)
            if found is None:
                found = trimmed[key] = only_partition_columns(pv, columns)
            partitions[i] = found
    else:
        partitions = [dict(pv) if pv is not None else {} for pv in partitions]
    return [
        RemoveFile(
            path=path,
            deletion_timestamp=deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=pv,
            size=size,
            stats=stats,
            tags=dict(tags) if tags else None,
            deletion_vector=DeletionVectorDescriptor.from_json(dv) if dv and dv.get("storageType") else None,
            base_row_id=base_row_id,
            default_row_commit_version=commit_version,
        )
        for path, pv, size, stats, tags, dv, base_row_id, commit_version in zip(
            files.column("path").to_pylist(),
            partitions,
            values("size"),
            values("stats"),
            values("tags"),
            values("deletion_vector"),
            values("base_row_id"),
            values("default_row_commit_version"),
            strict=True,
        )
    ]


def staged_removes(files: pa.Table, metadata: Metadata, deletion_timestamp: int, *, data_change: bool) -> list[RemoveFile]:
    """The ``remove`` actions a transaction stages for ``files``: partition values trimmed to the table's columns."""
    return removes_from_file_actions(
        files, deletion_timestamp, data_change=data_change, partition_columns=physical_partition_columns(metadata)
    )


def physical_partition_columns(metadata: Metadata) -> list[str]:
    """The table's partition columns by the names file actions use: physical names under column mapping."""
    mode = TableProperties.from_configuration(metadata.configuration).column_mapping_mode
    if mode == "none" or not metadata.partition_columns:
        return list(metadata.partition_columns)
    physical: dict[str, str] = {}
    for f in metadata.schema_json.get("fields", []):
        name = f.get("name")
        physical[name] = (f.get("metadata") or {}).get("delta.columnMapping.physicalName", name)
    return [physical.get(c, c) for c in metadata.partition_columns]


def only_partition_columns(values: Mapping[str, str | None] | None, columns: Sequence[str]) -> dict[str, str | None]:
    """A file's ``partitionValues`` with exactly the table's (physical) partition columns as keys.

    The Arrow form of file actions may carry extra keys with null values (one map type
    for all files of a log); the actions we write must not.
    """
    given = dict(values) if values else {}
    return {c: given.get(c) for c in columns}


def remove_json_line(remove: RemoveFile, partitions_seen: dict[int, str] | None = None) -> str:
    """The log line of ``remove``: exactly ``json_text({"remove": remove.to_json()})``, put together from
    its encoded fields instead of going through a dict and the generic encoder (a commit of a
    compaction writes 10,000 of them; about a third of the time).

    The fields are written in ``to_json``'s order, strings with the encoder's own escaping (non-ASCII
    kept as itself). A remove with tags, a deletion vector or a field of an unexpected type takes the
    generic path. ``partitions_seen``: the JSON of partition-value mappings already written, by the
    mapping's ``id``, for one serialisation whose removes are all alive (staged removes of one
    partition share their mapping, so each is encoded once).
    """
    if remove.tags or remove.deletion_vector is not None or not _plain_fields(remove):
        return json_text({"remove": remove.to_json()})
    parts = ['{"remove":{"path":', encode_basestring(remove.path), ',"dataChange":', _BOOLEAN[remove.data_change]]
    if remove.deletion_timestamp is not None:
        parts += [',"deletionTimestamp":', int.__repr__(remove.deletion_timestamp)]
    if remove.extended_file_metadata is not None:
        parts += [',"extendedFileMetadata":', _BOOLEAN[remove.extended_file_metadata]]
    if remove.partition_values is not None:
        values = remove.partition_values
        text = partitions_seen.get(id(values)) if partitions_seen is not None else None
        if text is None:
            text = json_text(dict(values))
            if partitions_seen is not None:
                partitions_seen[id(values)] = text
        parts += [',"partitionValues":', text]
    if remove.size is not None:
        parts += [',"size":', int.__repr__(remove.size)]
    if remove.stats is not None:
        parts += [',"stats":', encode_basestring(remove.stats)]
    if remove.base_row_id is not None:
        parts += [',"baseRowId":', int.__repr__(remove.base_row_id)]
    if remove.default_row_commit_version is not None:
        parts += [',"defaultRowCommitVersion":', int.__repr__(remove.default_row_commit_version)]
    parts.append("}}")
    return "".join(parts)


_BOOLEAN = {True: "true", False: "false"}


def _plain_fields(remove: RemoveFile) -> bool:
    """Whether every field of ``remove`` has the type the line builder writes (str, exact bool, exact int)."""
    return (
        type(remove.path) is str
        and type(remove.data_change) is bool
        and (remove.deletion_timestamp is None or type(remove.deletion_timestamp) is int)
        and (remove.extended_file_metadata is None or type(remove.extended_file_metadata) is bool)
        and (remove.size is None or type(remove.size) is int)
        and (remove.stats is None or type(remove.stats) is str)
        and (remove.base_row_id is None or type(remove.base_row_id) is int)
        and (remove.default_row_commit_version is None or type(remove.default_row_commit_version) is int)
    )


@dataclass(frozen=True, slots=True)
class RemoveBatch:
    """The ``remove`` actions a transaction stages for rows of Arrow file actions, kept as columns.

    What :func:`staged_removes` would give as objects, without building 10,000 of them for an
    OPTIMIZE: the log lines (``blob``: the lines joined by ``\\n``, each exactly
    :func:`remove_json_line` of the remove), what a commit checks for duplicates and
    conflicts (decoded paths, DV ids), and what the post-commit hook reads
    (:meth:`json_objects`, built only when asked for). Rows a remove carries tags or a
    deletion vector for are built as :class:`RemoveFile` objects (``generic``, by row).
    """

    files: pa.Table
    deletion_timestamp: int
    data_change: bool
    partition_columns: tuple[str, ...]
    paths: list[str]  # log paths, as staged
    decoded: list[str]  # the paths percent-decoded: with the DV id (if any), what names the file
    dv_ids: Mapping[int, str]  # the DV unique id by row, for the rows that have a DV
    blob: pa.Buffer
    generic: Mapping[int, RemoveFile]

    def __len__(self) -> int:
        return len(self.paths)

    def remove_sizes(self) -> np.ndarray | None:
        """Every remove's ``size`` as int64, or None when one has none (``RemoveColumns``)."""
        if "size" not in self.files.column_names or self.files.column("size").null_count:
            return None
        sizes = combined(self.files.column("size"))
        return int64_to_numpy(sizes if sizes.type == pa.int64() else pc.cast(sizes, pa.int64()))

    def remove_deletion_vectors(self) -> list[Mapping[str, Any]]:
        """The ``deletionVector`` JSON of the removes that carry one, in row order (``RemoveColumns``)."""
        return [r.deletion_vector.to_json() for r in self.generic.values() if r.deletion_vector is not None]

    def json_objects(self) -> list[dict[str, Any]]:
        """``{"remove": remove.to_json()}`` of every row, in order (equal to what the objects give)."""
        files = self.files
        num_rows = len(self.paths)

        def values(name: str) -> list[Any]:
            if name not in files.column_names or files.column(name).null_count == num_rows:
                return [None] * num_rows
            return files.column(name).to_pylist()

        columns = self.partition_columns
        partition_values = _partition_lookups(files, columns)
        per_column = [column.to_pylist() for column in partition_values]
        partitions = [dict(zip(columns, row, strict=True)) for row in zip(*per_column, strict=True)] if columns else [
            {} for _ in range(num_rows)
        ]
        head = {"dataChange": self.data_change, "deletionTimestamp": self.deletion_timestamp, "extendedFileMetadata": True}
        out: list[dict[str, Any]] = []
        generic = self.generic
        for i, (path, pv, size, stats, base_row_id, commit_version) in enumerate(zip(
            self.paths, partitions, values("size"), values("stats"), values("base_row_id"),
            values("default_row_commit_version"), strict=True,
        )):
            found = generic.get(i)
            if found is not None:
                out.append({"remove": found.to_json()})
                continue
            action: dict[str, Any] = {"path": path, **head, "partitionValues": pv}
            if size is not None:
                action["size"] = size
            if stats is not None:
                action["stats"] = stats
            if base_row_id is not None:
                action["baseRowId"] = base_row_id
            if commit_version is not None:
                action["defaultRowCommitVersion"] = commit_version
            out.append({"remove": action})
        return out


def stage_remove_batch(
    files: pa.Table, metadata: Metadata, deletion_timestamp: int, *, data_change: bool, table_root: str, where: str
) -> RemoveBatch | None:
    """:func:`staged_removes` of ``files`` as a :class:`RemoveBatch`, their paths checked as
    :func:`~airflow_delta.engine.storage.paths.check_log_paths` checks them (``where`` names the
    actions in its errors); None when a column has a type or value the column-wise
    encoding does not handle (a null path, a non-integer size...): stage objects then.

    The lines are built column by column: strings escaped with Arrow's string kernels (a
    value holding a control character, which JSON writes as an escape, is encoded by
    ``encode_basestring`` instead), numbers cast to decimal text, partition values looked
    up per column. Rows with tags or a deletion vector take :func:`remove_json_line`.
    """
    columns = tuple(physical_partition_columns(metadata))
    if not _plain_columns(files) or not _fits_one_string_array(files, columns):
        return None
    num_rows = files.num_rows
    path_column = combined(files.column("path"))
    paths: list[str] = path_column.to_pylist()
    # The objects of rows with tags or a DV first, as staged_removes builds every object before
    # the path checks (a malformed DV is reported as before).
    generic_rows = np.flatnonzero(_generic_rows(files))
    generic: dict[int, RemoveFile] = {}
    if generic_rows.size:
        for i, remove in zip(generic_rows.tolist(), removes_from_file_actions(
            files.take(int64_array(generic_rows)), deletion_timestamp, data_change=data_change, partition_columns=columns
        ), strict=True):
            generic[i] = remove
    # The reader's rule: the cheap superset test of check_log_paths, here on the whole column;
    # only the paths it flags are checked one by one (all of them pass or raise there).
    flagged = np.flatnonzero(mask_to_numpy(pc.match_substring_regex(path_column, _PATHS_TO_CHECK)))
    if flagged.size:
        check_log_paths(table_root, [paths[i] for i in flagged], where)

    decoded = list(paths)
    if (_utf8_bytes(path_column) == 0x25).any():  # a '%' escape somewhere: decode those paths
        for i in np.flatnonzero(mask_to_numpy(pc.match_substring(path_column, "%"))).tolist():
            decoded[i] = decode_log_path(paths[i])
    dv_ids = {i: remove.dv_unique_id for i, remove in generic.items() if remove.dv_unique_id is not None}

    head = (
        f'","dataChange":{_BOOLEAN[data_change]},"deletionTimestamp":{int(deletion_timestamp)}'
        ',"extendedFileMetadata":true,"partitionValues":'
    )
    # One join of all the pieces (each line ends in a newline, so the buffer is the joined lines);
    # only a field with some nulls is joined on its own first.
    parts: list[Any] = [
        _text('{"remove":{"path":"'), _escaped(path_column), _text(head), _partition_json(files, columns)
    ]
    for name, key, is_string in _OPTIONAL_FIELDS:
        if name not in files.column_names or files.column(name).null_count == num_rows:
            continue
        column = combined(files.column(name))
        pieces = [_text(key + '"'), _escaped(column), _QUOTE] if is_string else [_text(key), pc.cast(column, pa.string())]
        if column.null_count:
            parts.append(pc.fill_null(pc.binary_join_element_wise(*pieces, _EMPTY), _EMPTY))
        else:
            parts += pieces
    parts.append(_text("}}\n"))
    lines = pc.binary_join_element_wise(*_merged(parts), _EMPTY)
    if generic:
        replacements = string_array([remove_json_line(generic[i]) + "\n" for i in generic_rows.tolist()])
        lines = pc.replace_with_mask(lines, _mask(generic_rows, num_rows), replacements)
    return RemoveBatch(
        files=files,
        deletion_timestamp=int(deletion_timestamp),
        data_change=data_change,
        partition_columns=columns,
        paths=paths,
        decoded=decoded,
        dv_ids=dv_ids,
        blob=_joined(lines),
        generic=generic,
    )


# The optional fields of a remove after its partition values, in ``RemoveFile.to_json``'s
# order (tags and DVs take the object path): column, JSON key, whether a string.
_OPTIONAL_FIELDS = (
    ("size", ',"size":', False),
    ("stats", ',"stats":', True),
    ("base_row_id", ',"baseRowId":', False),
    ("default_row_commit_version", ',"defaultRowCommitVersion":', False),
)
# check_log_paths' cheap test, on the whole column (RE2 syntax): a path matching none of these
# is its own storage path below the root.
_PATHS_TO_CHECK = r"^$|^[/.]|/$|/\.|:|//|[\\\x00-\x1f\x7f%?#]"


def _plain_columns(files: pa.Table) -> bool:
    """Whether every column a remove carries has the Arrow type the column-wise encoding handles."""
    names = files.column_names
    path = files.column("path")
    if not pa.types.is_string(path.type) or path.null_count:
        return False
    for name in ("size", "base_row_id", "default_row_commit_version"):
        if name in names and not pa.types.is_integer(files.column(name).type):
            return False
    if "stats" in names and not pa.types.is_string(files.column("stats").type):
        return False
    for name in ("partition_values", "tags"):
        if name in names and not _is_string_map(files.column(name).type):
            return False
    if "deletion_vector" in names:
        dv_type = files.column("deletion_vector").type
        if not pa.types.is_struct(dv_type) or dv_type.get_field_index("storageType") < 0:
            return False
    return True


# What the lines of one batch may hold (Arrow strings have 32-bit offsets): per row, the fixed
# text of a remove (its keys, flags and numbers: under 300 bytes) besides its strings.
_MAX_BATCH_TEXT = 2**31 - 1
_FIXED_TEXT_PER_ROW = 512
_ESCAPED_GROWTH = 6  # a control character becomes a six-character \u escape


def _fits_one_string_array(files: pa.Table, partition_columns: Sequence[str]) -> bool:
    """Whether the lines of ``files`` surely fit one Arrow string array (else: objects, as before)."""
    per_row = _FIXED_TEXT_PER_ROW + sum(len(encode_basestring(c).encode()) + 8 for c in partition_columns)
    strings = 0
    for name in ("path", "stats"):
        if name in files.column_names:
            strings += sum(
                int(np.diff(offsets_to_numpy(chunk)[[0, -1]])[0]) for chunk in files.column(name).chunks if len(chunk)
            )
    if "partition_values" in files.column_names:
        strings += files.column("partition_values").nbytes
    return files.num_rows * per_row + _ESCAPED_GROWTH * strings <= _MAX_BATCH_TEXT


def _is_string_map(arrow_type: pa.DataType) -> bool:
    return (
        pa.types.is_map(arrow_type)
        and pa.types.is_string(arrow_type.key_type)
        and pa.types.is_string(arrow_type.item_type)
    )


# Literal text as Arrow scalars: a Python str passed to a compute function would make pyarrow
# import pandas (~0.3 s; see model/arrow_numpy.py).
_EMPTY = string_scalar("")
_NULL_TEXT = string_scalar("null")
_QUOTE = string_scalar('"')


def _text(value: str) -> pa.StringScalar:
    return string_scalar(value)


def _mask(rows: np.ndarray, num_rows: int) -> pa.BooleanArray:
    mask = np.zeros(num_rows, dtype=bool)
    mask[rows] = True
    return bool_array(mask)


def _generic_rows(files: pa.Table) -> np.ndarray:
    """Rows whose remove carries tags or a deletion vector (as :func:`removes_from_file_actions` decides)."""
    out = np.zeros(files.num_rows, dtype=bool)
    if "tags" in files.column_names and files.column("tags").null_count < files.num_rows:
        tags = combined(files.column("tags"))
        out |= (np.diff(offsets_to_numpy(tags)) > 0) & mask_to_numpy(tags.is_valid())
    if "deletion_vector" in files.column_names and files.column("deletion_vector").null_count < files.num_rows:
        dv = combined(files.column("deletion_vector"))
        storage_type = pc.struct_field(dv, "storageType")
        out |= mask_to_numpy(pc.and_(pc.is_valid(dv), pc.not_equal(pc.coalesce(storage_type, _EMPTY), _EMPTY)))
    return out


def _escaped(values: pa.Array) -> pa.Array:
    """Each string as the inside of a JSON string literal, exactly as ``encode_basestring`` writes
    it (between its quotes); nulls stay null.

    Only ``"`` and ``\\`` need escaping in a value without control characters (non-ASCII is
    kept as itself); the few values holding one are encoded one by one. Which characters
    occur is first asked of the bytes of all the values at once.
    """
    data = _utf8_bytes(values)
    escaped = values
    if (data == 0x5C).any():
        escaped = pc.replace_substring(escaped, "\\", "\\\\")
    if (data == 0x22).any():
        escaped = pc.replace_substring(escaped, '"', '\\"')
    if (data < 0x20).any():
        special = np.flatnonzero(mask_to_numpy(pc.match_substring_regex(values, r"[\x00-\x1f]")))
        replacements = string_array([encode_basestring(values[int(i)].as_py())[1:-1] for i in special])
        escaped = pc.replace_with_mask(escaped, _mask(special, len(values)), replacements)
    return escaped


def _utf8_bytes(values: pa.Array) -> np.ndarray:
    """The bytes of all the values of a string array, as one numpy view."""
    offsets = offsets_to_numpy(values)
    data = values.buffers()[2]
    if data is None or offsets[-1] == offsets[0]:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(data, dtype=np.uint8)[offsets[0] : offsets[-1]]


def _merged(parts: list[Any]) -> list[Any]:
    """``parts`` with neighbouring literal scalars joined into one (fewer pieces to join per row)."""
    out: list[Any] = []
    for part in parts:
        if isinstance(part, pa.StringScalar) and out and isinstance(out[-1], pa.StringScalar):
            out[-1] = _text(out[-1].as_py() + part.as_py())
        else:
            out.append(part)
    return out


def _partition_lookups(files: pa.Table, columns: Sequence[str]) -> list[pa.Array]:
    """Each partition column's value per row (null when the file has none): ``only_partition_columns``."""
    if "partition_values" not in files.column_names or files.column("partition_values").null_count == files.num_rows:
        return [pa.nulls(files.num_rows, pa.string()) for _ in columns]
    values = combined(files.column("partition_values"))
    # The last entry of a key wins, as in the dict a mapping becomes.
    return [pc.map_lookup(values, string_scalar(column), "last") for column in columns]


def _partition_json(files: pa.Table, columns: Sequence[str]) -> pa.Array | pa.StringScalar:
    """The ``partitionValues`` JSON object of every row (keys in the table's order, as ``json_text`` writes a dict)."""
    if not columns:
        return _text("{}")
    parts: list[Any] = [_text("{")]
    for n, (column, values) in enumerate(zip(columns, _partition_lookups(files, columns), strict=True)):
        parts.append(_text(("," if n else "") + encode_basestring(column) + ":"))
        quoted = pc.binary_join_element_wise(_QUOTE, _escaped(values), _QUOTE, _EMPTY)
        parts.append(pc.fill_null(quoted, _NULL_TEXT) if values.null_count else quoted)
    parts.append(_text("}"))
    return pc.binary_join_element_wise(*_merged(parts), _EMPTY)


def _joined(lines: pa.Array) -> pa.Buffer:
    """The text of ``lines`` (each ending in a newline) as UTF-8 without the last newline: a slice of
    the array's buffer (no object per line, no copy; ``bytes.join`` takes it as it takes bytes)."""
    if not len(lines):
        return pa.py_buffer(b"")
    offsets = offsets_to_numpy(lines)
    start, end = int(offsets[0]), int(offsets[-1])
    return lines.buffers()[2].slice(start, end - 1 - start)


__all__ = [
    "RemoveBatch",
    "only_partition_columns",
    "physical_partition_columns",
    "remove_json_line",
    "removes_from_file_actions",
    "stage_remove_batch",
    "staged_removes",
]
