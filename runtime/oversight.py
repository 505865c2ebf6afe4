"""The runtime's end of the oversight relay (`runtime/desktop/oversight.py`): the people at the
session's control viewers see each run and call as it happens, answer the approvals the
operator's policy asks for, and their own input at the viewer goes on the timeline.

`Oversight.connect_forever` keeps one connection to the session's relay (none without a desktop
session: everything here is then a no-op, and an ask answers None). Events are shown, not
kept: they are redacted like the timeline's and cut short, sent without waiting, and dropped
while no relay is connected or the relay falls behind, so watching never slows a run.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from capabilities.session import data_dir
from capabilities.session_server.redaction import Redactor, session_secrets

from sandbox.result import CALL_LINE

from .desktop.oversight import runtime_socket

logger = logging.getLogger(__name__)

RECONNECT_SECONDS = 2.0
VETO_ENV = "CODEDESK_VETO_SECONDS"
"""How long a desktop_execute batch with pointer targets waits, marked on the viewers, before it
runs, while somebody watches: a person's input at a viewer in that window cancels it (default 0:
no window; at most 10)."""
PREVIEW_CHARS = 300
ARGUMENTS_CHARS = 4000
_QUEUE = 256
CallTool = Callable[[str, str, Any], Awaitable[dict[str, Any]]]
_TIMED_OUT = object()


class Oversight:
    """Publishes runs and calls to the viewers, and asks them to approve calls."""

    def __init__(self, known_secrets: Iterable[str | None] = (), path: Path | None = None,
                 on_input: Callable[[int, float, float], None] | None = None) -> None:
        self.path = path if path is not None else runtime_socket(data_dir())
        self.on_input = on_input  # a person's input at a viewer: (count, since, until)
        self._redactor = Redactor(session_secrets(extra=known_secrets))
        self._send: Any = None  # the connection's outbox while connected
        self._answers: dict[str, Any] = {}  # request id -> [event, the relay's reply]
        self.connected = False
        self.viewers = 0  # control viewers watching, as the relay last said
        self.veto_seconds = _veto_seconds()

    # -- the connection -----------------------------------------------------------------------

    async def connect_forever(self) -> None:
        """Stay connected to the relay while the runtime lives (a task of the runtime's)."""
        while True:
            try:
                stream = await anyio.connect_unix(str(self.path))
            except OSError:
                await anyio.sleep(RECONNECT_SECONDS)
                continue
            logger.info("oversight: connected to the session's viewers (%s)", self.path)
            send, outbox = anyio.create_memory_object_stream[bytes](_QUEUE)
            try:
                self._send, self.connected = send, True
                async with stream, send, outbox, anyio.create_task_group() as tasks:
                    tasks.start_soon(self._write, stream, outbox)
                    await self._read(stream)
                    tasks.cancel_scope.cancel()
            except (OSError, anyio.BrokenResourceError, anyio.EndOfStream, anyio.IncompleteRead):
                pass
            except Exception:  # whatever the relay sends, the runtime goes on (and reconnects)
                logger.exception("oversight: the connection to the session's relay failed")
            finally:
                self._send, self.connected, self.viewers = None, False, 0
                for waiting in self._answers.values():
                    waiting[0].set()  # unanswered: the ask goes elsewhere
            await anyio.sleep(RECONNECT_SECONDS)

    async def _write(self, stream: Any, outbox: Any) -> None:
        async for line in outbox:
            await stream.send(line)

    async def _read(self, stream: Any) -> None:
        lines = BufferedByteReceiveStream(stream)
        while True:
            try:
                message = json.loads(await lines.receive_until(b"\n", 16 << 20))
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            kind = message.get("t")
            if kind in ("answer", "unwatched", "video") and message.get("id") in self._answers:
                waiting = self._answers[message["id"]]
                waiting[1] = message
                waiting[0].set()
            elif kind == "viewers" and isinstance(message.get("count"), int):
                self.viewers = message["count"]
            elif kind == "input" and self.on_input is not None:
                try:
                    self.on_input(int(message["inputs"]), float(message["since"]), float(message["until"]))
                except (KeyError, TypeError, ValueError):
                    pass

    def _post(self, message: dict[str, Any]) -> bool:
        if self._send is None:
            return False
        try:
            self._send.send_nowait(json.dumps(message, ensure_ascii=False).encode() + b"\n")
            return True
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False

    # -- what the viewers see -----------------------------------------------------------------

    def run_started(self, run: str, language: str, code: str) -> None:
        if self.connected:
            self._post({"t": "event", "e": {"kind": "run_start", "time": time.time(), "run": run,
                                            "language": language,
                                            "script": _cut(self._redactor.script(code[:4 * PREVIEW_CHARS]))}})

    def call_sent(self, run: str, seq: int, server: str, tool: str, args: Any) -> None:
        if self.connected:
            self._post({"t": "event", "e": {"kind": "call", "time": time.time(), "run": run, "seq": seq,
                                            "server": server, "tool": tool, "step": step_summary(tool, args),
                                            "targets": targets(tool, args), "line": CALL_LINE.get()}})

    def call_answered(self, run: str, seq: int, server: str, tool: str, result: dict[str, Any] | None,
                      error: str | None, ms: float) -> None:
        if self.connected:
            kind = error or (_error_kind(result) if result is not None and result.get("isError") else None)
            self._post({"t": "event", "e": {"kind": "result", "time": time.time(), "run": run, "seq": seq,
                                            "server": server, "tool": tool, "ok": kind is None, "error": kind,
                                            "ms": round(ms)}})

    def run_ended(self, run: str, ok: bool, calls: int) -> None:
        if self.connected:
            self._post({"t": "event", "e": {"kind": "run_end", "time": time.time(), "run": run,
                                            "outcome": "ok" if ok else "error", "calls": calls}})

    def watch(self, run: str, language: str, code: str, call: CallTool) -> Watched:
        """One run as the viewers see it: its start now, each call of `call_tool`, its `end`."""
        self.run_started(run, language, code)
        return Watched(self, run, call)

    # -- approvals ----------------------------------------------------------------------------

    async def ask(self, request: dict[str, Any], timeout: float) -> str | None:
        """A person's answer at a control viewer ("accept", "decline"; "timeout"), or None when no
        one is watching there."""
        if not self.connected:
            return None
        shown = {**request, "arguments": self._shown_arguments(request.get("arguments"))}
        reply = await self._exchange({"t": "ask", "request": shown}, timeout, withdraw=True)
        if reply is _TIMED_OUT:
            return "timeout"
        return reply.get("answer") if reply is not None and reply.get("t") == "answer" else None

    async def video(self, action: str, segment_seconds: int | None = None) -> dict[str, Any]:
        """The session's screen recorder (`runtime/desktop/video.py`): start, stop, or its status.
        Raises VideoUnavailable with the reason."""
        if not self.connected:
            raise VideoUnavailable("no desktop session is reachable here (the screen is recorded by the session "
                                   "that `codedesk desktop up` starts)")
        message: dict[str, Any] = {"t": "video", "action": action}
        if segment_seconds is not None:
            message["segmentSeconds"] = segment_seconds
        reply = await self._exchange(message, 30)
        if not isinstance(reply, dict):
            raise VideoUnavailable("the session's relay did not answer (busy, gone or stopping); try again")
        if "error" in reply:
            raise VideoUnavailable(str(reply["error"]), str(reply.get("kind") or "unavailable"))
        return reply["state"]

    async def _exchange(self, message: dict[str, Any], timeout: float, *, withdraw: bool = False) -> Any:
        """Send `message` under a fresh id and wait for the relay's reply to it: the reply, None when
        it could not be sent or the connection went, `_TIMED_OUT` after `timeout`. With `withdraw`,
        the relay is told when the wait ends unanswered (timed out or cancelled)."""
        request_id = secrets.token_hex(8)
        waiting: list[Any] = [anyio.Event(), None]
        self._answers[request_id] = waiting
        try:
            if not self._post({**message, "id": request_id}):
                return None
            with anyio.move_on_after(timeout):
                await waiting[0].wait()
                return waiting[1]
            if withdraw:
                self._post({"t": "withdraw", "id": request_id})
            return _TIMED_OUT
        except BaseException:
            if withdraw:
                self._post({"t": "withdraw", "id": request_id})  # cancelled: the viewers stop showing it
            raise
        finally:
            del self._answers[request_id]

    def _shown_arguments(self, args: Any) -> str:
        text = json.dumps(self._redactor.value(args), ensure_ascii=False, indent=1)
        return text if len(text) <= ARGUMENTS_CHARS else text[:ARGUMENTS_CHARS] + "\n… (cut)"


class VideoUnavailable(RuntimeError):
    """The screen recorder cannot do what was asked; the message says why, `kind` is the error
    kind (the recorder's, `runtime.desktop.video.VideoError`)."""

    def __init__(self, message: str, kind: str = "unavailable") -> None:
        super().__init__(message)
        self.kind = kind


class Watched:
    def __init__(self, oversight: Oversight, run: str, call: CallTool) -> None:
        self._oversight = oversight
        self._run = run
        self._call = call
        self.calls = 0

    async def call_tool(self, server: str, tool: str, args: Any) -> dict[str, Any]:
        self.calls += 1
        seq = self.calls
        oversight = self._oversight
        oversight.call_sent(self._run, seq, server, tool, args)
        started = time.perf_counter()
        if oversight.veto_seconds and oversight.viewers and targets(tool, args):
            vetoed = await _veto_window(oversight.veto_seconds)
            if vetoed is not None:
                oversight.call_answered(self._run, seq, server, tool, vetoed, None, _ms(started))
                return vetoed
        try:
            result = await self._call(server, tool, args)
        except BaseException as exc:
            self._oversight.call_answered(self._run, seq, server, tool, None,
                                          "bridge" if isinstance(exc, Exception) else "cancelled", _ms(started))
            raise
        self._oversight.call_answered(self._run, seq, server, tool, result, None, _ms(started))
        return result

    def end(self, ok: bool) -> None:
        self._oversight.run_ended(self._run, ok, self.calls)


async def _veto_window(seconds: float) -> dict[str, Any] | None:
    """Wait while the viewers show the batch's targets; a failed result when a person used the
    screen meanwhile (their input takes the lease, `capabilities/input_lease.py`), else None."""
    from capabilities import input_lease

    from .policy import refused

    opened = time.time()
    await anyio.sleep(seconds)
    lease = input_lease.read(data_dir())
    if lease.person_holds() and lease.last_input >= opened:
        return refused("human_has_control", f"a person used the screen at the viewer within the "
                       f"{seconds:g} s veto window before this step, which cancels it; no step ran",
                       "wait for them to hand the screen back, then call again")
    return None


def _veto_seconds() -> float:
    try:
        seconds = float(os.environ.get(VETO_ENV, "0"))
    except ValueError:
        return 0.0
    return min(max(seconds, 0.0), 10.0)


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def step_summary(tool: str, args: Any) -> str:
    """A call in a few words: a batch's operation types, a program and its arguments."""
    if not isinstance(args, dict):
        return ""
    ops = args.get("operations")
    if isinstance(ops, list):
        names = [str(op.get("type")) for op in ops if isinstance(op, dict)]
        return _cut(", ".join(names))
    if tool == "exec" and isinstance(args.get("bin"), str):
        rest = args.get("args") if isinstance(args.get("args"), list) else []
        return _cut(" ".join([args["bin"], *(str(a) for a in rest)]))
    return _cut(", ".join(f"{k}" for k in args))


def targets(tool: str, args: Any) -> list[dict[str, Any]]:
    """The screen points a desktop_execute batch will act on ({x, y, type}), in order: what the
    viewer marks as the agent's pointer before the steps run."""
    if tool != "desktop_execute" or not isinstance(args, dict) or not isinstance(args.get("operations"), list):
        return []
    points = []
    for op in args["operations"][:20]:
        params = op.get("params") if isinstance(op, dict) else None
        if isinstance(params, dict) and isinstance(op.get("type"), str) and op["type"].startswith("mouse."):
            x, y = params.get("x"), params.get("y")
            if isinstance(x, int | float) and isinstance(y, int | float) and not isinstance(x, bool):
                points.append({"x": x, "y": y, "type": op["type"]})
    return points


def _error_kind(result: dict[str, Any]) -> str:
    structured = result.get("structuredContent")
    error = structured.get("error") if isinstance(structured, dict) else None
    return str(error.get("kind")) if isinstance(error, dict) and error.get("kind") else "error"


def _cut(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"
