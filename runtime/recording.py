"""The runtime's side of the timeline: each run and each capability call it makes, recorded
as it happens (`capabilities.session_server.store` defines the record and writes it).

`Timeline.open` starts the writer (unless `$CODEDESK_TIMELINE=off`); `Timeline.start_run`
gives a `RunRecorder` whose `call_tool` wraps the bridge's: the call is recorded when it is
sent and its answer when it comes back (or its failure, or its cancellation), each as its own
event, so a runtime killed mid-call leaves the call on the timeline with no answer. What is
recorded is handed to the writer's process as it is (`capabilities/session_server/writer_process.py`):
redacting, saving screenshots and writing happen there, off the event loop and its GIL; on the
loop a call costs two `marshal.dumps` and two writes to a pipe.
"""

from __future__ import annotations

import contextvars
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import mcp_types as types

from capabilities import input_lease
from capabilities.session import data_dir
from capabilities.session_server.redaction import Redactor, session_secrets
from capabilities.session_server.store import Event, TimelineUnavailable, recording_enabled, timeline_dir
from capabilities.session_server.writer_process import WriterProcess

from sandbox.result import CALL_LINE

from .bridge import BridgeError

logger = logging.getLogger(__name__)

CallTool = Callable[[str, str, Any], Awaitable[dict[str, Any]]]
CONTROLS = "agent"


class _Controls:
    """Who had the controls: "person" while someone holds the screen from the viewer (the input
    lease, `capabilities/input_lease.py`), else "agent". The lease file is read again only when
    it changed (one stat an event)."""

    def __init__(self) -> None:
        self._data = data_dir()
        self._lease_file = os.fspath(self._data / input_lease.FILE_NAME)
        self._stamp: tuple[int, int] | None = None
        self._lease = input_lease.Lease()

    def now(self) -> str:
        try:
            stat = os.stat(self._lease_file)
        except OSError:
            return CONTROLS
        if (stat.st_mtime_ns, stat.st_ino) != self._stamp:
            self._stamp = (stat.st_mtime_ns, stat.st_ino)
            self._lease = input_lease.read(self._data)
        return "person" if self._lease.person_holds() else CONTROLS
_SEQ: contextvars.ContextVar[int] = contextvars.ContextVar("codedesk_call_seq", default=0)
"""Who has the controls while a script runs; the input lease will say "person" when one does."""


def new_run_id() -> str:
    """A run's id: sortable by time, unique in the session."""
    global _second
    now = int(time.time())
    if now != _second[0]:  # the time formatted once a second, not for every run
        _second = (now, time.strftime("%Y%m%d-%H%M%S-", time.gmtime(now)))
    return _second[1] + secrets.token_hex(3)


_second: tuple[int, str] = (0, "")


class Timeline:
    """The session's timeline as the runtime writes it."""

    def __init__(self, writer: WriterProcess, secrets: list[str]) -> None:
        self.writer = writer
        self.folder = writer.folder
        self.controls = _Controls()
        self.redactor = Redactor(secrets)
        """The session's known secrets, for what the runtime shows of a recorded call (replay)."""

    @classmethod
    def open(cls, known_secrets: Iterable[str | None] = ()) -> Timeline | None:
        """The timeline of the session's data directory, or None when recording is off or the
        folder cannot be used (logged: runs go on unrecorded)."""
        if not recording_enabled():
            return None
        try:
            secrets = session_secrets(extra=known_secrets)
            return cls(WriterProcess(timeline_dir(), secrets), secrets)
        except (TimelineUnavailable, OSError) as exc:
            logger.warning("the timeline is not recorded: %s", exc)
            return None

    def start_run(self, language: str, code: str, call_tool: CallTool, *, limits: dict[str, Any] | None = None,
                  replay_of: str | None = None, mode: str | None = None, run: str | None = None) -> RunRecorder:
        run = run or new_run_id()
        detail: dict[str, Any] = {"language": language, "script": code, "limits": limits or {}}
        if replay_of is not None:
            detail.update(replay_of=replay_of, mode=mode)
        self.writer.record(Event(time.time(), run, 0, "run_start", controls=CONTROLS, detail=detail))
        return RunRecorder(self.writer, run, call_tool, self.controls)

    def person_input(self, count: int, since: float, until: float) -> None:
        """A person's pointer and key input at a control viewer (coalesced, about a second each):
        an event of the session, in no run."""
        self.writer.record(Event(until, "", 0, "input", controls="person",
                                 detail={"inputs": count, "since": since, "until": until}))

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class RunRecorder:
    """One run's recording: `call_tool` records each call and its answer; `end` the outcome."""

    def __init__(self, writer: WriterProcess, run: str, call_tool: CallTool, controls: _Controls) -> None:
        self.run = run
        self._controls = controls
        self._writer = writer
        self._call = call_tool
        self.calls = 0

    async def call_tool(self, server: str, tool: str, args: Any) -> dict[str, Any]:
        self.calls += 1
        seq = self.calls
        _SEQ.set(seq)  # each call runs in its own task: what it awaits knows its number
        record = self._writer.record
        line = CALL_LINE.get()
        record(Event(time.time(), self.run, seq, "call", server, tool, arguments=args, controls=self._controls.now(),
                     detail={"line": line} if line is not None else None))
        started = time.perf_counter()
        try:
            result = await self._call(server, tool, args)
        except BridgeError as exc:
            record(Event(time.time(), self.run, seq, "result", server, tool, error_kind="bridge",
                         error_message=str(exc), duration_ms=_ms(started), controls=CONTROLS))
            raise
        except BaseException:
            record(Event(time.time(), self.run, seq, "result", server, tool, error_kind="cancelled",
                         error_message="the call was cancelled before it answered (the run ended, timed out or "
                                       "was cancelled)", duration_ms=_ms(started), controls=CONTROLS))
            raise
        record(Event(time.time(), self.run, seq, "result", server, tool, result=result, duration_ms=_ms(started),
                     controls=self._controls.now()))
        return result

    def approval(self, server: str, tool: str, rule: str, answer: str) -> None:
        """A person was asked to approve the call in flight (`runtime/policy.py`): their answer
        (accept, decline, cancel; timeout; unasked when nobody could be asked)."""
        self._writer.record(Event(time.time(), self.run, _SEQ.get(), "approval", server, tool,
                                  controls="person" if answer in ("accept", "decline", "cancel") else CONTROLS,
                                  detail={"rule": rule, "answer": answer}))

    def end(self, result: types.CallToolResult) -> None:
        text = next((block.text for block in result.content if isinstance(block, types.TextContent)), "")
        detail: dict[str, Any] = {"outcome": "error" if result.is_error else "ok", "calls": self.calls,
                                  "summary": text[:2000]}
        self._writer.record(Event(time.time(), self.run, 0, "run_end", controls=CONTROLS, detail=detail,
                                  error_kind="run" if result.is_error else None,
                                  error_message=text[:2000] if result.is_error else None))


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
