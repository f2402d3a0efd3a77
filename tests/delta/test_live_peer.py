"""Delta Lake as a live peer under concurrency (issue 17, item 5).

Delta Lake on Spark and our engine commit to the same tables, and each side must decide a
conflict as Delta's ``ConflictChecker`` does (delta-io/delta v4.4.0,
``spark/src/main/scala/org/apache/spark/sql/delta/ConflictChecker.scala``):

- ``checkForAddedFilesThatShouldHaveBeenReadByCurrentTxn`` (ConcurrentAppendException): the
  winner's added files that count at the loser's isolation level (WriteSerializable: not
  those of a commit with ``isBlindAppend=true``; Serializable: all; SnapshotIsolation, which
  a ``dataChange=false`` rewrite such as OPTIMIZE runs at: none) in a partition the loser
  read. A DELETE, MERGE or OPTIMIZE writes ``isBlindAppend=false``, so even OPTIMIZE's
  ``dataChange=false`` adds count.
- ``checkForDeletedFilesAgainstCurrentTxnReadFiles`` (ConcurrentDeleteReadException): the
  winner removed a file the loser read. Checked after the appends.
- A blind append reads nothing and removes nothing: it never conflicts on files.

The tables carry ``delta.dataSkippingNumIndexedCols=0`` (no column statistics): Delta
matches added files on partition values only, and we also prune on statistics
(docs/concurrency.md, "Where we differ from Delta, on purpose"); without statistics both
decide on partitions, so the verdicts must be equal. They also set
``delta.isolationLevel=WriteSerializable``: open-source Delta refuses to set that level
itself, but runs it when the table says so (its commits then record it).

1. **We lose to Delta** (``test_our_verdicts_against_delta_winners``): each of our
   operations (append, DELETE, UPDATE, MERGE, OPTIMIZE, all in partition ``a``) reads
   version 2, Delta's append, DELETE, MERGE or OPTIMIZE (in ``a`` or in ``b``) commits
   version 3, then ours commits. Delta's winning commits are made once per (operation,
   partition) on a copy of the table and copied into each case's table between our read
   and our commit: on a local disk that is what a concurrent commit is. Our verdict must be
   the rule's; a retry must succeed; the rows must be the serial order's.
2. **Delta loses to us** (``test_delta_verdicts_against_our_winners``): Delta's MERGE is held
   between taking its snapshot and committing (its source filter, ``oracle_hold``, drops a
   flag file the test waits for and then waits for the test's go file) while one of our
   operations commits. Delta's verdict must be the
   same rule's, hence equal to ours for the same pair; a retry must succeed.
3. **Both at once** (``test_delta_and_our_writers_at_the_same_time``): rounds in which a
   Delta writer thread and our writer thread commit to one table at the same time, each
   retrying its conflicts; every commit in the log is one operation that reported success,
   and replaying those operations in version order on a keyed model gives the rows that
   Delta and our engine read.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import (
    CommitOptions,
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentModificationError,
    DeltaTable,
    OptimizeOptions,
)
from airflow_delta.engine.operations.append import append
from airflow_delta.spark.merge_worker import run_merge_in_worker
from airflow_delta.spark.specs import (
    ExecutionOptions,
    MergeClause,
    MergeSource,
    MergeSpec,
    TableRef,
    TaskIdentity,
    UpdateSpec,
)
from airflow_delta.spark.update_worker import run_update_in_worker
from tests.delta_lake import DeltaLakeError, DeltaLakeSession, table_ref

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("p", pa.string())])
PROPERTIES = {
    "delta.dataSkippingNumIndexedCols": "0",
    "delta.enableDeletionVectors": "false",
    "delta.isolationLevel": "WriteSerializable",
}
# Partition a holds ids 1-6, b ids 11-16, each in two files of three (two appends):
# an OPTIMIZE of either partition has something to compact.
BASE = {"a": 0, "b": 10}
SETUP_VERSION = 2

# Delta's concurrent-modification exceptions (io.delta.exceptions), by class name.
DELTA_CONFLICTS = frozenset(
    {
        "ConcurrentAppendException",
        "ConcurrentDeleteReadException",
        "ConcurrentDeleteDeleteException",
        "ConcurrentTransactionException",
        "ConcurrentWriteException",
        "MetadataChangedException",
        "ProtocolChangedException",
    }
)

Model = dict[int, tuple[int, str]]  # id -> (v, p)
_runs = iter(range(1_000_000))


def _initial_model() -> Model:
    return {base + i: ((base + i) * 10, p) for p, base in BASE.items() for i in range(1, 7)}


def _make_template(path: Path) -> None:
    table = DeltaTable.create(str(path), SCHEMA, partition_by=["p"], properties=PROPERTIES)
    for first in (1, 4):
        rows = [
            {"id": base + i, "v": (base + i) * 10, "p": p} for p, base in BASE.items() for i in range(first, first + 3)
        ]
        table.append(pa.Table.from_pylist(rows, SCHEMA))
    assert table.version() == SETUP_VERSION


def _rows(path: Path) -> Model:
    table = DeltaTable(str(path)).snapshot().to_arrow()
    model: Model = {}
    for row in table.to_pylist():
        assert row["id"] not in model, f"id {row['id']} twice"
        model[row["id"]] = (row["v"], row["p"])
    return model


def _delta_rows(delta_lake: DeltaLakeSession, path: Path) -> Model:
    model: Model = {}
    for row in delta_lake.read(str(path)).to_pylist():
        assert row["id"] not in model, f"id {row['id']} twice (Delta's read)"
        model[row["id"]] = (row["v"], row["p"])
    return model


def _identity() -> TaskIdentity:
    return TaskIdentity("live_peer", "op", f"run-{next(_runs)}")


ONE_ATTEMPT = ExecutionOptions(max_attempts=1, backoff_initial_seconds=0.0)


# --------------------------------------------------------------------------- operations
# Each operation is its SQL text (for Delta) or engine call (ours) with its effect on the
# keyed model, so a history can be replayed.


@dataclass(frozen=True)
class DeltaOp:
    name: str
    sql: Callable[[str], str]  # table reference -> statement
    effect: Callable[[Model], None]


def _delete_ids(*ids: int) -> Callable[[Model], None]:
    def effect(model: Model) -> None:
        for key in ids:
            model.pop(key, None)

    return effect


def _upsert(rows: list[tuple[int, int, str]], *, only_existing: bool = False) -> Callable[[Model], None]:
    def effect(model: Model) -> None:
        for key, value, part in rows:
            if key in model or not only_existing:
                model[key] = (value, part)

    return effect


def _no_change(model: Model) -> None:
    return None


def _values(rows: list[tuple[int, int, str]]) -> str:
    return ", ".join(f"({key}, {value}, '{part}')" for key, value, part in rows)


def _delta_merge_sql(rows: list[tuple[int, int, str]], part: str, source_filter: str = "") -> Callable[[str], str]:
    where = f" WHERE {source_filter}" if source_filter else ""
    return lambda ref: (
        f"MERGE INTO {ref} t USING (SELECT * FROM VALUES {_values(rows)} AS src(id, v, p){where}) s "
        f"ON t.id = s.id AND t.p = '{part}' "
        "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    )


def delta_winner(kind: str, part: str) -> DeltaOp:
    """Delta's operation of ``kind`` in partition ``part`` (the winner of the first matrix)."""
    base = BASE[part]
    if kind == "append":
        rows = [(base + 40, 400, part)]
        return DeltaOp(kind, lambda ref: f"INSERT INTO {ref} VALUES {_values(rows)}", _upsert(rows))
    if kind == "delete":
        return DeltaOp(
            kind, lambda ref: f"DELETE FROM {ref} WHERE p = '{part}' AND id = {base + 1}", _delete_ids(base + 1)
        )
    if kind == "merge":
        rows = [(base + 2, 99, part), (base + 50, 99, part)]
        return DeltaOp(kind, _delta_merge_sql(rows, part), _upsert(rows))
    assert kind == "optimize"
    return DeltaOp(kind, lambda ref: f"OPTIMIZE {ref} WHERE p = '{part}'", _no_change)


def _merge_spec(path: Path, rows: list[tuple[int, int, str]], part: str, options: ExecutionOptions) -> MergeSpec:
    source = path.parent / f"source-{uuid.uuid4().hex}.parquet"
    pq.write_table(pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA), source)
    return MergeSpec(
        target=TableRef(str(path)),
        source=MergeSource(parquet=str(source)),
        on=f"t.id = s.id AND t.p = '{part}'",
        clauses=(MergeClause("matched_update", star=True), MergeClause("not_matched_insert", star=True)),
        identity=_identity(),
        source_alias="s",
        target_alias="t",
        options=options,
    )


@dataclass(frozen=True)
class OurOp:
    """One of our operations: ``run(path, between)`` runs it once, calling ``between()``
    after its read and before its commit (None: no pause); returns the committed version."""

    name: str
    run: Callable[[Path, Callable[[], None] | None, str | None], int | None]
    effect: Callable[[Model], None]


def our_op(kind: str, part: str, ids: tuple[int, ...]) -> OurOp:
    """Our ``kind`` in ``part``; ``ids`` are the keys it touches (new ones for append/MERGE inserts)."""
    if kind == "append":
        rows = [(key, key * 10, part) for key in ids]

        def run_append(path: Path, between: Callable[[], None] | None, level: str | None) -> int | None:
            table = DeltaTable(str(path))
            snapshot = table.snapshot()
            if between is not None:
                between()
            data = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA)
            with table.transaction(CommitOptions(isolation_level=level), snapshot=snapshot) as txn:
                return append(txn, data).version

        return OurOp(kind, run_append, _upsert(rows))
    if kind == "delete":
        predicate = f"p = '{part}' AND id IN ({', '.join(map(str, ids))})"

        def run_delete(path: Path, between: Callable[[], None] | None, level: str | None) -> int | None:
            table = DeltaTable(str(path))
            snapshot = table.snapshot()
            if between is not None:
                between()
            return table.delete(predicate, snapshot=snapshot, commit=CommitOptions(isolation_level=level)).version

        return OurOp(kind, run_delete, _delete_ids(*ids))
    if kind == "update":
        (key,) = ids
        predicate = f"p = '{part}' AND id = {key}"

        def run_update(path: Path, between: Callable[[], None] | None, level: str | None) -> int | None:
            assert level is None, "the worker's UPDATE commits at the table's level"
            spec = UpdateSpec(TableRef(str(path)), {"v": "7"}, predicate, _identity(), ONE_ATTEMPT)
            return run_update_in_worker(spec, before_commit=_once(between)).version

        return OurOp(kind, run_update, _upsert([(key, 7, part)], only_existing=True))
    if kind == "merge":
        updated, inserted = ids
        rows = [(updated, 77, part), (inserted, 77, part)]

        def run_merge(path: Path, between: Callable[[], None] | None, level: str | None) -> int | None:
            assert level is None, "the worker's MERGE commits at the table's level"
            spec = _merge_spec(path, rows, part, ONE_ATTEMPT)
            return run_merge_in_worker(spec, before_commit=_once(between)).version

        return OurOp(kind, run_merge, _upsert(rows))
    assert kind == "optimize"

    def run_optimize(path: Path, between: Callable[[], None] | None, level: str | None) -> int | None:
        table = DeltaTable(str(path))
        snapshot = table.snapshot()
        if between is not None:
            between()
        versions = table.optimize(OptimizeOptions(where=f"p = '{part}'"), snapshot=snapshot).versions
        assert len(versions) <= 1, "one batch on these tables"
        return versions[0] if versions else None

    return OurOp(kind, run_optimize, _no_change)


def _once(between: Callable[[], None] | None) -> Callable[[int], None] | None:
    if between is None:
        return None

    def before_commit(attempt: int) -> None:
        if attempt == 1:
            between()

    return before_commit


OUR_KINDS = ("append", "delete", "update", "merge", "optimize")
DELTA_KINDS = ("append", "delete", "merge", "optimize")
# The keys our operations in partition a touch in the first matrix (disjoint from Delta's).
OUR_IDS = {"append": (65,), "delete": (3,), "update": (5,), "merge": (4, 70), "optimize": ()}


def expected_conflict(loser: str, winner: str, same_partition: bool, level: str = "WriteSerializable") -> type | None:
    """What Delta's ConflictChecker (v4.4.0) raises for ``loser`` that read partition a when
    ``winner`` committed first; None: the loser commits.

    - a blind append (our append, Delta's INSERT) reads nothing and removes nothing: no
      file check can match (checkForAddedFiles... finds no read predicate,
      checkForDeletedFiles... no read or removed file);
    - the winner worked in the other partition: its adds match no read predicate of
      partition a, its removes are files the loser did not read;
    - OPTIMIZE commits at SnapshotIsolation (canDowngradeToSnapshotIsolation: only
      dataChange=false file actions), so no added file counts; the winner's DELETE, MERGE
      or OPTIMIZE removed files of partition a that it read: ConcurrentDeleteRead;
    - DELETE, UPDATE, MERGE: a winner's blind append counts only at Serializable
      (``case WriteSerializable if !metadataChanged => changedDataAddedFiles``); a
      DELETE, MERGE or OPTIMIZE writes isBlindAppend=false, so its adds in partition a
      count: ConcurrentAppend (checked before the deleted files).
    """
    if loser == "append" or not same_partition:
        return None
    if loser == "optimize":
        return None if winner == "append" else ConcurrentDeleteReadException
    if winner == "append" and level == "WriteSerializable":
        return None
    return ConcurrentAppendException


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("live-peer") / "template"
    _make_template(path)
    return path


@pytest.fixture(scope="module")
def delta_winners(delta_lake: DeltaLakeSession, template: Path) -> dict[tuple[str, str], Path]:
    """Delta's winning commit (version 3) for each (operation, partition), each on its copy of the template."""
    winners: dict[tuple[str, str], Path] = {}
    for kind in DELTA_KINDS:
        for part in BASE:
            path = template.parent / f"delta-{kind}-{part}"
            shutil.copytree(template, path)
            delta_lake.sql(delta_winner(kind, part).sql(table_ref(path)))
            assert DeltaTable(str(path)).version() == SETUP_VERSION + 1, (kind, part)
            winners[(kind, part)] = path
    return winners


def _land(winner: Path, target: Path) -> None:
    """Make the winner's commit appear in ``target``: its new data files, then its log entry."""
    new_files = [p for p in winner.rglob("*") if p.is_file() and not (target / p.relative_to(winner)).exists()]
    # The commit file last: a reader that sees the version finds its data.
    for path in sorted(new_files, key=lambda p: p.suffix == ".json"):
        destination = target / path.relative_to(winner)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)


# --------------------------------------------------------------------------- 1. we lose


MATRIX = [(ours, theirs, same) for ours in OUR_KINDS for theirs in DELTA_KINDS for same in (True, False)]


def _attempt(op: OurOp, path: Path, between: Callable[[], None] | None, level: str | None) -> type | None:
    try:
        op.run(path, between, level)
    except ConcurrentModificationError as conflict:
        assert conflict.winning_version == SETUP_VERSION + 1, conflict
        assert conflict.retryable
        return type(conflict)
    return None


@pytest.mark.slow  # eight Delta statements build the winners
def test_our_verdicts_against_delta_winners(template: Path, delta_winners: dict[tuple[str, str], Path]) -> None:
    """Every (our operation, Delta's operation, same/other partition) at WriteSerializable, and
    the pairs where Serializable differs (a blind-append winner): our verdict is Delta's rule."""
    cases = [(ours, theirs, same, None) for ours, theirs, same in MATRIX]
    cases += [("delete", "append", True, "Serializable"), ("append", "append", True, "Serializable")]
    disagreements = []
    for index, (ours, theirs, same, level) in enumerate(cases):
        path = template.parent / f"case-{index}"
        shutil.copytree(template, path)
        winner_path = delta_winners[(theirs, "a" if same else "b")]
        op = our_op(ours, "a", OUR_IDS[ours])
        verdict = _attempt(op, path, lambda w=winner_path, t=path: _land(w, t), level)
        expected = expected_conflict(ours, theirs, same, level or "WriteSerializable")
        if verdict is not expected:
            disagreements.append((ours, theirs, "same" if same else "other", level, verdict, expected))
            continue
        if verdict is not None:
            # Planning again on the snapshot that includes Delta's commit succeeds.
            assert _attempt(op, path, None, level) is None
        model = _initial_model()
        delta_winner(theirs, "a" if same else "b").effect(model)
        op.effect(model)
        assert _rows(path) == model, (ours, theirs, same, level)
        shutil.rmtree(path)
    assert disagreements == [], "(ours, Delta's, partition, level, our verdict, Delta's rule)"


# --------------------------------------------------------------------------- 2. Delta loses


def _held(flag_dir: Path, tag: str) -> str:
    """A source filter that holds the statement, once, between taking its snapshot (MERGE
    reads its source inside the transaction) and committing: it drops ``<tag>.held`` in
    ``flag_dir`` and waits for ``<tag>.go`` (oracle_hold, tests/delta_lake_server.py)."""
    return f"oracle_hold('{flag_dir}', '{tag}')"


DELTA_LOSER_ROWS = [(2, 88, "a"), (80, 88, "a")]
# Keys our winners touch, per partition (the loser, Delta's MERGE, touches 2 and 80 in a).
OUR_WINNER_IDS = {"append": (90,), "delete": (3,), "merge": (5, 85), "optimize": ()}


@pytest.mark.slow
def test_delta_verdicts_against_our_winners(delta_lake: DeltaLakeSession, template: Path) -> None:
    """Delta's MERGE in partition a loses to each of our append, DELETE, MERGE and OPTIMIZE
    (in a or in b): Delta raises what the rule says, which is what we raise for our MERGE
    against Delta's same operation (the first test); a retry commits."""
    flag_dir = template.parent / "flags"
    flag_dir.mkdir(exist_ok=True)
    pool = ThreadPoolExecutor(1)
    disagreements = []
    try:
        for index, (theirs, same) in enumerate(
            (k, s) for k in ("append", "delete", "merge", "optimize") for s in (True, False)
        ):
            part = "a" if same else "b"
            path = template.parent / f"reverse-{index}"
            shutil.copytree(template, path)
            winner = our_op(theirs, part, tuple(BASE[part] + i for i in OUR_WINNER_IDS[theirs]))
            tag = uuid.uuid4().hex
            statement = _delta_merge_sql(DELTA_LOSER_ROWS, "a", _held(flag_dir, tag))(table_ref(path))
            held = pool.submit(delta_lake.sql, statement)
            try:
                _wait_for(lambda t=tag: (flag_dir / f"{t}.held").exists(), held)
                winner.run(path, None, None)
            finally:  # Delta's statement carries on (and commits or conflicts) once ours committed
                (flag_dir / f"{tag}.go").touch()
            try:
                held.result()
                verdict = None
            except DeltaLakeError as error:
                assert error.exception_class in DELTA_CONFLICTS, error
                verdict = error.exception_class
            history = DeltaTable(str(path)).history()
            if verdict is None:
                # It really ran beside ours: it read version 2 and landed after our commit.
                assert history[0]["readVersion"] == SETUP_VERSION, history[0]
                assert history[0]["version"] == SETUP_VERSION + 2
                assert history[0]["isolationLevel"] == "WriteSerializable"
            expected = expected_conflict("merge", theirs, same)
            if verdict != (expected.__name__ if expected else None):
                disagreements.append((theirs, part, verdict, expected))
                continue
            if verdict is not None:
                delta_lake.sql(_delta_merge_sql(DELTA_LOSER_ROWS, "a")(table_ref(path)))
            model = _initial_model()
            winner.effect(model)
            _upsert(DELTA_LOSER_ROWS)(model)
            assert _rows(path) == model, (theirs, part)
            shutil.rmtree(path)
    finally:
        pool.shutdown()
    assert disagreements == [], "(our winner, partition, Delta's verdict, the rule's)"


def _wait_for(condition: Callable[[], bool], statement: Any, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if statement.done():
            statement.result()  # raises Delta's error, if any
            raise AssertionError("Delta's statement finished without reaching its hold point")
        assert time.monotonic() < deadline, "Delta's statement did not reach its hold point"
        time.sleep(0.005)


# --------------------------------------------------------------------------- 3. both at once


# Rounds: Delta's statement and ours start together. Keys are chosen so that no row a
# blind append adds is one another operation's predicate selects (at WriteSerializable a
# blind append may land between another transaction's read and commit without a
# conflict, which a version-order replay would not model), while DML of both sides meets
# on the same keys (4) and partitions, so the version order matters.
DELTA_ROUNDS = [
    DeltaOp(
        "append",
        lambda ref: f"INSERT INTO {ref} VALUES (100, 1000, 'a'), (101, 1010, 'b')",
        _upsert([(100, 1000, "a"), (101, 1010, "b")]),
    ),
    DeltaOp("delete", lambda ref: f"DELETE FROM {ref} WHERE p = 'a' AND id = 2", _delete_ids(2)),
    DeltaOp(
        "merge", _delta_merge_sql([(4, 444, "a"), (102, 1020, "a")], "a"), _upsert([(4, 444, "a"), (102, 1020, "a")])
    ),
    DeltaOp("optimize", lambda ref: f"OPTIMIZE {ref}", _no_change),
]
OUR_ROUNDS = [
    [our_op("delete", "a", (1,)), our_op("update", "b", (12,))],
    [our_op("update", "a", (4,)), our_op("append", "b", (200,))],
    [our_op("merge", "a", (4, 203)), our_op("delete", "b", (13,))],
    [our_op("optimize", "b", ()), our_op("update", "a", (5,)), our_op("optimize", "a", ())],
]
MAX_TRIES = 6


@pytest.mark.slow
def test_delta_and_our_writers_at_the_same_time(delta_lake: DeltaLakeSession, template: Path) -> None:
    path = template.parent / "both"
    shutil.copytree(template, path)
    ref = table_ref(path)
    committed: dict[int, tuple[str, Callable[[Model], None]]] = {}
    delta_done: list[tuple[str, Callable[[Model], None]]] = []
    delta_errors: list[DeltaLakeError] = []
    our_errors: list[ConcurrentModificationError] = []

    def delta_writer(op: DeltaOp, tag: str, start: threading.Barrier) -> None:
        start.wait()
        for _ in range(MAX_TRIES):
            try:
                delta_lake.sql(f"SET spark.databricks.delta.commitInfo.userMetadata = {tag}")
                delta_lake.sql(op.sql(ref))
            except DeltaLakeError as error:
                delta_errors.append(error)
                if error.exception_class not in DELTA_CONFLICTS:
                    raise
                continue
            delta_done.append((tag, op.effect))
            return
        raise AssertionError(f"Delta's {op.name} conflicted {MAX_TRIES} times")

    def our_writer(ops: list[OurOp], start: threading.Barrier) -> None:
        start.wait()
        for op in ops:
            for _ in range(MAX_TRIES):
                try:
                    version = op.run(path, None, None)
                except ConcurrentModificationError as error:
                    our_errors.append(error)
                    continue
                if version is not None:
                    assert version not in committed
                    committed[version] = (f"ours {op.name}", op.effect)
                break
            else:
                raise AssertionError(f"our {op.name} conflicted {MAX_TRIES} times")

    try:
        for round_number, (delta_op, our_ops) in enumerate(zip(DELTA_ROUNDS, OUR_ROUNDS, strict=True)):
            start = threading.Barrier(2)
            with ThreadPoolExecutor(2) as pool:
                futures = [
                    pool.submit(delta_writer, delta_op, f"peer17-round-{round_number}", start),
                    pool.submit(our_writer, our_ops, start),
                ]
                for future in futures:
                    future.result()
    finally:
        delta_lake.sql("RESET spark.databricks.delta.commitInfo.userMetadata")

    # Every commit after the set-up is exactly one operation that reported success.
    effects_by_tag = dict(delta_done)
    for entry in DeltaTable(str(path)).history():
        version = entry["version"]
        if version <= SETUP_VERSION:
            continue
        tag = entry.get("userMetadata")
        if tag is not None:
            assert entry["engineInfo"].startswith("Apache-Spark"), entry
            assert version not in committed, f"version {version} claimed twice"
            committed[version] = (f"Delta {tag}", effects_by_tag.pop(tag))
        else:
            assert version in committed, f"version {version} ({entry['operation']}) is no operation's commit"
    # Delta's OPTIMIZE commits nothing when there is nothing to compact; every other
    # successful Delta statement has its commit.
    assert [tag for tag in effects_by_tag if not tag.endswith("-3")] == []
    assert sorted(committed) == list(range(SETUP_VERSION + 1, DeltaTable(str(path)).version() + 1))

    model = _initial_model()
    for version in sorted(committed):
        committed[version][1](model)
    assert _rows(path) == model
    assert _delta_rows(delta_lake, path) == model

    for error in delta_errors:
        assert error.exception_class in DELTA_CONFLICTS, error
    for conflict in our_errors:
        assert conflict.retryable and conflict.winning_version > SETUP_VERSION, conflict
    print(
        f"commits {len(committed)}; Delta's conflicts: {[e.exception_class for e in delta_errors]}; "
        f"ours: {[type(e).__name__ for e in our_errors]}"
    )
