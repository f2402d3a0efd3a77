"""Independent tasks (an OPTIMIZE's bins) run in this process and in processes forked beside it.

Why processes: rewriting thousands of small files is mostly pyarrow calls that hold the GIL
for part of each file, so two threads of one process use about 1.3 cores of two. A process
forked *after* the imports and the snapshot shares them copy-on-write, so its first task
starts at once; a spawned one would import numpy and pyarrow first (about 0.3 s).

How: the parent writes every task number into a pipe up front and closes it; each lane (the
parent's own, and one per child) takes the next number with a 4-byte read, which a pipe serves
whole to one reader, so the lanes balance themselves. A child reports over its own pipe, in
order: each file it is *about to* create (so the parent can remove it whatever happens to the
child), its log records, each task's result, or its error. A thread per child drains that pipe
while the parent works, so a child never waits on a full pipe.

Safety, and when it is used (:func:`lanes_possible`): Linux only, and local storage only (an
object-store client's I/O runtime does not survive ``fork()``). Other threads of the process
(an Airflow task's supervisor channel, say) are not copied into a child, so a child touches
nothing of theirs: it uses only the snapshot, pyarrow (whose thread pools and allocators
re-initialise after ``fork()``), modules imported before the fork (the caller imports any its
task would import lazily, so no import lock another thread held can block the child), and
logging, whose locks Python re-initialises in the child and whose records the child forwards
to the parent instead of writing to the parent's handlers (an Airflow task's log channel).
A child dies with its parent (``PR_SET_PDEATHSIG``), takes the default action on SIGTERM and
SIGINT, and always leaves with ``os._exit`` (never through the parent's stack, ``atexit`` or
buffered output). If any lane fails, or a child ends without its results (killed, out of memory), the
other children are killed, every file any lane recorded is removed, and the error is raised:
the child's own error class where it is an engine error, else :class:`RewriteProcessError`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import logging
import os
import pickle
import signal
import struct
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

from airflow_delta.engine.errors import DeltaError, RewriteProcessError, error_from_report
from airflow_delta.engine.storage.fileio import FileIO, LocalFileIO
from airflow_delta.engine.storage.written_files import WrittenFiles

__all__ = ["lanes_possible", "run_in_lanes"]

log = logging.getLogger(__name__)

_TOKEN = struct.Struct("<i")
_LENGTH = struct.Struct("<Q")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# Tokens in the pipe at most: 4 KiB, one page, the least a pipe holds (a user over
# pipe-user-pages-soft gets one-page pipes). More tasks than that go several to a token.
_MAX_TOKENS = 1024

# A child's wait status when another part of the process reaped it first.
_REAPED_ELSEWHERE = -1
# Message kinds, child to parent.
_WRITTEN, _LOG, _TOOK, _DONE, _FAILED = "written", "log", "took", "done", "failed"

LaneTask = Callable[[int, WrittenFiles], Any]
"""Runs task ``i``, recording every file it creates in the given ``WrittenFiles`` before
creating it; returns a picklable result."""


def lanes_possible(io: FileIO) -> bool:
    """Whether tasks on ``io`` may run in forked processes here (see the module docstring)."""
    return sys.platform == "linux" and type(io) is LocalFileIO


def run_in_lanes(count: int, task: LaneTask, io: FileIO, written: WrittenFiles, *, lanes: int) -> list[Any]:
    """Run tasks ``0..count-1`` in this process and ``lanes - 1`` forked children; their results in order.

    Every file a task records goes into ``written`` once all tasks succeed. If any fails, the
    files of all of them are removed and the error is raised. The caller checks
    :func:`lanes_possible` first.
    """
    children = min(lanes, count) - 1
    per_token = -(-count // _MAX_TOKENS)  # consecutive tasks a token stands for
    tokens_read, tokens_write = os.pipe2(os.O_CLOEXEC)
    try:
        _fill(tokens_write, -(-count // per_token))
    finally:
        os.close(tokens_write)
    ours = WrittenFiles(io)
    results: dict[int, Any] = {}
    started: list[_Child] = []
    try:
        with _tokens_closed_after(tokens_read):
            for _ in range(children):
                started.append(_Child.fork(tokens_read, per_token, count, task, io))
            for child in started:
                child.drain_in_background(results)
            # The parent's lane, until the tokens run out or a child reports a failure.
            while not any(c.failed.is_set() for c in started):
                token = _next_token(tokens_read)
                if token is None:
                    break
                for i in _tasks_of(token, per_token, count):
                    results[i] = task(i, ours)
        for child in started:
            if child.failed.is_set():
                child.raise_failure()  # at once: the other children are killed below
        for child in started:
            child.wait()
        for child in started:
            child.raise_failure()
        missing = [i for i in range(count) if i not in results]
        if missing:  # every child exited cleanly, yet a task has no result: never expected
            raise RewriteProcessError(f"tasks {missing[:10]} finished in no process")
    except BaseException:
        for child in started:
            child.kill()
        for child in started:
            child.wait()
            child.written.remove_all()
        ours.remove_all()
        raise
    for files in [ours, *(c.written for c in started)]:
        for path in files.paths:
            written.record(path)  # the caller's now: removed if its commit fails
    return [results[i] for i in range(count)]


# ------------------------------------------------------------------ the token pipe


def _fill(fd: int, count: int) -> None:
    """Write the tokens ``0..count-1`` (at most ``_MAX_TOKENS``: 4 KiB, which every pipe holds) at once."""
    os.write(fd, struct.pack(f"<{count}i", *range(count)))


def _next_token(fd: int) -> int | None:
    data = os.read(fd, _TOKEN.size)
    return _TOKEN.unpack(data)[0] if data else None


def _tasks_of(token: int, per_token: int, count: int) -> range:
    return range(token * per_token, min((token + 1) * per_token, count))


@contextlib.contextmanager
def _tokens_closed_after(fd: int) -> Any:
    try:
        yield
    finally:
        os.close(fd)


# ------------------------------------------------------------------ the parent's side of a child


class _Child:
    """A forked lane, seen from the parent: its pid, its report pipe and what it reported."""

    def __init__(self, pid: int, reports: int, io: FileIO) -> None:
        self.pid = pid
        self.reports = reports
        self.written = WrittenFiles(io)  # what the child said it was about to create
        self.failed = threading.Event()
        self.error: BaseException | None = None
        self.status: int | None = None
        self._drain: threading.Thread | None = None
        self._running: int | None = None  # the task it took last, until its result came
        self._torn = False  # its last report was cut short

    @classmethod
    def fork(cls, tokens: int, per_token: int, count: int, task: LaneTask, io: FileIO) -> _Child:
        reports_read, reports_write = os.pipe2(os.O_CLOEXEC)
        parent = os.getpid()
        # Objects that exist now are frozen out of the child's garbage collections, which
        # would otherwise touch (and so copy) every page of the parent's heap.
        gc.freeze()
        try:
            with warnings.catch_warnings():
                # Python 3.12+ warns of fork() beside other threads; see the module docstring for why it is safe here.
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except BaseException:
            gc.unfreeze()
            os.close(reports_read)
            os.close(reports_write)
            raise
        if pid == 0:  # the child: never returns
            os.close(reports_read)
            _child_main(parent, tokens, per_token, count, reports_write, task, io)
        gc.unfreeze()
        os.close(reports_write)
        return cls(pid, reports_read, io)

    def drain_in_background(self, results: dict[int, Any]) -> None:
        self._drain = threading.Thread(
            target=self._read_reports, args=(results,), name=f"delta-lane-{self.pid}", daemon=True
        )
        self._drain.start()

    def _read_reports(self, results: dict[int, Any]) -> None:
        try:
            with os.fdopen(self.reports, "rb") as reports:
                while (message := _receive(reports)) is not None:
                    kind = message[0]
                    if kind == _WRITTEN:
                        self.written.record(message[1])
                    elif kind == _LOG:
                        _log_forwarded(message[1])
                    elif kind == _TOOK:
                        self._running = message[1]
                    elif kind == _DONE:
                        results[message[1]] = message[2]
                        self._running = None
                    elif kind == _FAILED:
                        self.error = _rebuilt_error(message[1])
                        self.failed.set()
        except (EOFError, pickle.UnpicklingError):  # a torn report: the child died mid-message
            self._torn = True
            self.failed.set()  # its wait status says why (raise_failure)

    def kill(self) -> None:
        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> None:
        if self.status is None:
            try:
                _, self.status = os.waitpid(self.pid, 0)
            except ChildProcessError:  # reaped by someone else's SIGCHLD handler: its reports decide
                self.status = _REAPED_ELSEWHERE
        if self._drain is not None:
            self._drain.join()  # the pipe ends when the child has exited: all its reports are read
            self._drain = None
        elif self.reports >= 0:
            with contextlib.suppress(OSError):
                os.close(self.reports)
        self.reports = -1

    def raise_failure(self) -> None:
        if self.error is not None:
            raise self.error
        if self.status not in (0, _REAPED_ELSEWHERE) or self._running is not None or self._torn:
            if self.status is None or self.status == _REAPED_ELSEWHERE:
                how = "ended"
            elif os.WIFSIGNALED(self.status):
                how = f"was killed by signal {os.WTERMSIG(self.status)}"
            else:
                how = f"exited with status {os.waitstatus_to_exitcode(self.status)}"
            raise RewriteProcessError(
                f"the rewrite process {self.pid} {how} before it finished its work"
                + (f" (task {self._running})" if self._running is not None else "")
                + "; if the out-of-memory killer ended it, lower max_file_size so that a bin fits in memory"
            )


def _receive(stream: Any) -> tuple[Any, ...] | None:
    header = stream.read(_LENGTH.size)
    if not header:
        return None
    if len(header) < _LENGTH.size:
        raise EOFError("a report's header was cut short")
    (size,) = _LENGTH.unpack(header)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError("a report was cut short")
    return pickle.loads(body)


def _rebuilt_error(report: tuple[str, str, str, bytes | None]) -> BaseException:
    kind, name, message, pickled = report
    if kind == "delta":
        return error_from_report(name, message)
    if pickled is not None:
        with contextlib.suppress(Exception):
            return pickle.loads(pickled)
    return RewriteProcessError(f"{name}: {message}")


def _log_forwarded(record: dict[str, Any]) -> None:
    logger = logging.getLogger(record["name"])
    if logger.isEnabledFor(record["levelno"]):
        logger.handle(logging.makeLogRecord(record))


# ------------------------------------------------------------------ the child


class _Reports:
    """The child's end of its report pipe: one length-prefixed pickle a message."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, *message: Any) -> None:
        body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_LENGTH.pack(len(body)) + body)
        while view:
            view = view[os.write(self.fd, view) :]


class _ReportedWrittenFiles(WrittenFiles):
    """A child's record of the files it creates: each is reported to the parent before it exists."""

    def __init__(self, io: FileIO, reports: _Reports) -> None:
        super().__init__(io)
        self._reports = reports

    def record(self, path: str) -> None:
        self._reports.send(_WRITTEN, path)
        super().record(path)


class _ForwardingHandler(logging.Handler):
    def __init__(self, reports: _Reports) -> None:
        super().__init__(logging.DEBUG)
        self._reports = reports

    def emit(self, record: logging.LogRecord) -> None:
        fields = dict(record.__dict__)
        fields.update(msg=record.getMessage(), args=None, exc_info=None, exc_text=self._exc_text(record))
        fields.pop("stack_info", None)
        with contextlib.suppress(Exception):
            self._reports.send(_LOG, {k: v for k, v in fields.items() if _picklable(v)})

    def _exc_text(self, record: logging.LogRecord) -> str | None:
        if record.exc_info:
            return logging.Formatter().formatException(record.exc_info)
        return record.exc_text


def _picklable(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _child_main(
    parent: int, tokens: int, per_token: int, count: int, reports_fd: int, task: LaneTask, io: FileIO
) -> None:
    """A forked lane: take task numbers until none are left, report, and ``os._exit``."""
    code = 1
    try:
        _die_with(parent)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        reports = _Reports(reports_fd)
        _forward_logging(reports)
        written = _ReportedWrittenFiles(io, reports)
        try:
            while (token := _next_token(tokens)) is not None:
                for i in _tasks_of(token, per_token, count):
                    reports.send(_TOOK, i)
                    reports.send(_DONE, i, task(i, written))
            code = 0
        except BaseException as exc:
            written.remove_all()  # the parent removes them too; whoever comes first
            reports.send(_FAILED, _error_report(exc))
    finally:
        os._exit(code)


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when the parent dies (Linux), and leave if it already has."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno() or errno.EINVAL))
    if os.getppid() != parent:
        os._exit(1)


def _forward_logging(reports: _Reports) -> None:
    """Send every log record to the parent: the parent's handlers may be sockets or files
    the child must not write to (an Airflow task's log channel)."""
    for logger in [logging.root, *logging.Logger.manager.loggerDict.values()]:
        if isinstance(logger, logging.Logger):
            logger.handlers = []
            logger.propagate = True
    logging.root.handlers = [_ForwardingHandler(reports)]


def _error_report(exc: BaseException) -> tuple[str, str, str, bytes | None]:
    """An error as the parent can rebuild it: by class name for engine errors, else pickled when that round-trips."""
    if isinstance(exc, DeltaError):
        return ("delta", type(exc).__name__, str(exc), None)
    pickled: bytes | None = None
    with contextlib.suppress(Exception):
        candidate = pickle.dumps(exc)
        pickle.loads(candidate)
        pickled = candidate
    return ("other", type(exc).__name__, str(exc), pickled)
