"""The timeline's writer in a process of its own: the runtime hands it each event over a pipe.

Redacting an event, serializing it, saving its screenshots and committing it is Python work
that holds the GIL. Done by a thread of the runtime, it took the GIL from the event loop that
runs every script: 100 calls in a row ran 1.10-1.20x slower with the timeline on. Here the
runtime's share of an event is one `marshal.dumps` and one write to a pipe; the child runs
`TimelineWriter` and does the rest without touching the runtime's GIL.

The pipe is also what makes a SIGKILL of the runtime lose nothing it recorded: what was
written to it is read and committed by the child, which ends when the pipe closes.

Frames on the child's stdin: a 4-byte little-endian length, then a `marshal` payload (data
only: loading it runs no code), a tuple whose first item says what it is:

    ("open", folder, secrets)   first and once: the timeline's folder and the known secrets
                                (never in argv or the environment: `ps` shows those)
    ("event", *Event fields)    one event, as `Event` lists its fields
    ("flush", token)            commit what came before, then write `token` and a newline on
                                stdout

The child ignores SIGINT and SIGTERM: it ends when the runtime closes the pipe (or dies), after
writing everything it was sent.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import marshal
import operator
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .redaction import SECRET_ENV
from .store import Event, TimelineUnavailable, TimelineWriter, open_folder

log = logging.getLogger("codedesk.timeline")

_FIELDS = tuple(field.name for field in dataclasses.fields(Event))
_values = operator.attrgetter(*_FIELDS)
_LENGTH = struct.Struct("<I")
PIPE_BYTES = 1 << 20
"""The pipe's buffer, so a screenshot-sized event is written without waiting for the child."""
_F_SETPIPE_SZ = 1031
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


COMMIT_INTERVAL = 0.05
"""The child wakes and commits at most this often: waking for each event cost 0.25 ms of CPU,
the runtime's cores' time. What waits meanwhile is in the pipe, not lost with the runtime."""
FLUSH_SIGNAL = signal.SIGUSR1
"""Sent by the runtime after a flush frame or when the pipe is full: the child reads and commits at
once. A run's end does not wake it: in runs back to back, a commit for each cost the child 0.5 ms
of CPU a run against 0.15 ms in its own rhythm, and the record is on disk within
`COMMIT_INTERVAL` all the same (readers that need it at once, such as `timeline_query`, flush)."""
NICENESS = 10
"""The writer is background work: the runtime and its servers come first for the CPU."""
_NICE = [path, "-n", str(NICENESS)] if (path := shutil.which("nice")) else []
"""The child starts at that priority, its own start-up included: begun at the runtime's, it took
CPU from the runtime's own start (a cold start's first answer came about 7% later with the
timeline on than off; started this way, 4%)."""
STUCK_SECONDS = 10
"""A writer that reads nothing for this long with its pipe full is stopped and replaced."""
UNRECORDABLE = "[not recordable: neither marshal nor JSON could write it]"
RESTARTS = 3
"""Children started again after one died, at most; past them the timeline is no longer written."""


class WriterProcess:
    """The runtime's handle on the writer child: `record` (cheap, from any thread, never
    raising), `flush`, `close`. A child that died is started again at the next event (the
    events it had not written are lost, and logged)."""

    def __init__(self, folder: Path, secrets: list[str]) -> None:
        self.folder = folder
        os.close(open_folder(folder, create=True))  # refused here, as the runtime starts, not in the child
        self._secrets = list(secrets)
        self._lock = threading.Lock()  # one frame at a time on the pipe
        self._flush_lock = threading.Lock()  # one reader of the answers; never held while writing
        self._child: subprocess.Popen[bytes] | None = None
        self._restarts = 0
        self._flushes = 0
        self._start()

    def _start(self) -> None:
        env = {key: value for key, value in os.environ.items() if not SECRET_ENV.match(key)}  # it needs none
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (_PACKAGE_ROOT, os.environ.get("PYTHONPATH"))))
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {FLUSH_SIGNAL})  # inherited: a flush sent
        try:  # before the child is ready waits for it instead of killing it
            child = subprocess.Popen([*_NICE, sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0, env=env, close_fds=True)
        finally:
            if FLUSH_SIGNAL not in blocked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {FLUSH_SIGNAL})
        assert child.stdin is not None
        os.set_blocking(child.stdin.fileno(), False)
        try:
            import fcntl
            fcntl.fcntl(child.stdin.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # the default buffer: only a large event waits for the child to read it
        self._child = child
        self._write(child, _frame(("open", str(self.folder), self._secrets)))

    @property
    def pid(self) -> int | None:
        child = self._child
        return None if child is None else child.pid

    def record(self, event: Event) -> None:
        """Hand `event` to the child."""
        self._send(_frame(("event", *_values(event))))

    def _send(self, frame: bytes) -> subprocess.Popen[bytes] | None:
        """Write `frame` to the child (started again if it died); the child written to, or None."""
        with self._lock:
            while (child := self._child) is not None:
                try:
                    self._write(child, frame)
                    return child
                except OSError:
                    status = _discard(child)
                    if self._restarts >= RESTARTS:
                        log.error("the timeline writer stopped again (exit status %s): the timeline is no longer "
                                  "written", status)
                        self._child = None
                        return None
                    self._restarts += 1
                    log.error("the timeline writer stopped (exit status %s): events it had not written are lost; "
                              "starting it again", status)
                    try:
                        self._start()
                    except OSError as exc:
                        log.error("the timeline writer cannot start again (%s): the timeline is no longer written",
                                  exc)
                        self._child = None
            return None

    def wake(self) -> None:
        """Have the child commit what it was handed now rather than at its next wake-up."""
        child = self._child
        if child is not None:
            try:
                os.kill(child.pid, FLUSH_SIGNAL)
            except OSError:
                pass  # it died: the next event starts another

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until every event handed over so far is committed (at most `timeout` seconds)."""
        with self._flush_lock:
            self._flushes += 1
            token = b"flushed %d\n" % self._flushes
            child = self._send(_frame(("flush", token)))
            if child is None or child.stdout is None:
                return
            self.wake()
            deadline = time.monotonic() + timeout
            line = b""
            while line != token and (left := deadline - time.monotonic()) > 0:
                if not select.select([child.stdout], [], [], left)[0]:
                    break
                line = child.stdout.readline()
                if not line:
                    break

    def close(self) -> None:
        """Close the pipe: the child writes what it was sent and ends."""
        with self._lock:
            child, self._child = self._child, None
        if child is None:
            return
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.close()
        except OSError:
            pass
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            log.error("the timeline writer did not finish within 30 s; stopping it")
            child.kill()
            child.wait()
        child.stdout.close()

    @staticmethod
    def _write(child: subprocess.Popen[bytes] | None, frame: bytes) -> None:
        if child is None or child.stdin is None:
            raise BrokenPipeError("no timeline writer")
        fd = child.stdin.fileno()
        view = memoryview(frame)
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:  # the pipe is full (screenshots): the child reads it now, not at its next wake
                os.kill(child.pid, FLUSH_SIGNAL)
                if not select.select([], [fd], [], STUCK_SECONDS)[1]:
                    raise BrokenPipeError(f"the timeline writer read nothing for {STUCK_SECONDS} s") from None


def _discard(child: subprocess.Popen[bytes]) -> int:
    """Stop a writer that cannot be written to; its exit status."""
    child.kill()
    status = child.wait()
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass  # a broken pipe's unwritten buffer
    return status


def _frame(message: tuple[Any, ...]) -> bytes:
    try:
        payload = marshal.dumps(message)
    except ValueError:  # an object marshal does not know (or nested past its depth): as JSON shows it
        try:
            payload = marshal.dumps(json.loads(json.dumps(message, default=repr)))
        except (ValueError, TypeError, RecursionError):
            payload = marshal.dumps(tuple(item if isinstance(item, str | int | float | None) else UNRECORDABLE
                                          for item in message))
    return _LENGTH.pack(len(payload)) + payload


def _messages(buffer: bytearray) -> Iterator[tuple[Any, ...]]:
    """The whole frames at the start of `buffer`, taken out of it."""
    at = 0
    while len(buffer) - at >= _LENGTH.size:
        size = _LENGTH.unpack_from(buffer, at)[0]
        if len(buffer) - at - _LENGTH.size < size:
            break
        with memoryview(buffer) as view:  # released before the buffer is cut below
            message = marshal.loads(view[at + _LENGTH.size:at + _LENGTH.size + size])
        yield message
        at += _LENGTH.size + size
    del buffer[:at]


def main() -> None:
    """The child: write what the runtime sends until it closes the pipe. One thread, woken at
    most once a `COMMIT_INTERVAL` (sooner when the runtime sends SIGUSR1: a flush, a full pipe):
    when something comes after a quiet spell it is committed at once, in a busy one with what
    else came until the interval is over. A wake-up for each event cost the child more than the
    event's own work (its caches cold)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the runtime, which closes the pipe
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a group stopped together: what was sent is written first
    signal.pthread_sigmask(signal.SIG_BLOCK, {FLUSH_SIGNAL})  # (blocked from the start) taken by sigtimedwait
    if os.getpriority(os.PRIO_PROCESS, 0) < NICENESS:  # (started through `nice`, it is there already)
        os.setpriority(os.PRIO_PROCESS, 0, NICENESS)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    source, answers = sys.stdin.fileno(), sys.stdout.fileno()
    os.set_blocking(source, False)
    writer: TimelineWriter | None = None
    buffer = bytearray()
    ended = False
    woken = 0.0
    try:
        while not ended:
            select.select([source], [], [])
            if (wait := woken + COMMIT_INTERVAL - time.monotonic()) > 0:
                signal.sigtimedwait({FLUSH_SIGNAL}, wait)
            woken = time.monotonic()
            while True:
                try:
                    data = os.read(source, PIPE_BYTES)
                except BlockingIOError:
                    break
                if not data:
                    ended = True
                    break
                buffer += data
            pending: list[Event] = []
            flushes: list[bytes] = []
            for message in _messages(buffer):
                if message[0] == "event":
                    pending.append(Event(*message[1:]))
                elif message[0] == "flush":
                    flushes.append(message[1])
                elif message[0] == "open" and writer is None:
                    writer = _open(message[1], message[2])
            if writer is not None and pending:
                writer.write(pending)
            for token in flushes:
                os.write(answers, token)
    finally:
        if writer is not None:
            writer.close()


def _open(folder: str, secrets: list[str]) -> TimelineWriter | None:
    from .redaction import Redactor

    try:
        return TimelineWriter(Path(folder), Redactor(secrets))
    except TimelineUnavailable as exc:  # read on, so the runtime is not told to start another
        log.error("the timeline is not recorded: %s", exc)
        return None


if __name__ == "__main__":
    main()
