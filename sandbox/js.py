"""run_js: JavaScript in QuickJS-ng compiled to wasm (quickjs-rs), one fresh VM per run.

Each run gets its own wasm instance (quickjs-rs compiles the module once per process and
instantiates it per context), so nothing leaks between runs and runs may overlap on one event
loop. The guest API lives in `prelude.js`; host functions behind it start tool calls and timers
as tasks (`ToolBridge`) and hand completions back in batches, one guest wake-up per turn of the
event loop, which is what makes `Promise.all` over many calls cheap.

Timing: a script's run ends when its top level has settled and no call or timer it started is
left, as in Node; `timeout_seconds` bounds the whole, and when it passes, every call still in
flight is cancelled before `run` returns. A run executes on a thread of its own with its own
event loop (`sandbox._loops`), and its tool calls hop back to the caller's loop: a stretch of
JavaScript that never awaits holds only its own thread, never the server's loop.

A script that is not valid JavaScript but is valid TypeScript runs with its types removed.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files
from typing import Any

import quickjs_rs
import wasmtime
from quickjs_rs import UNDEFINED

from sandbox import _jsmodule, _wasmcall
from sandbox._host import ArtifactBox, ConsoleCapture, ToolBridge
from sandbox._loops import RunLoops, on_loop
from sandbox.result import CallTool, JsLimits, ListTools, OnConsole, RunError, RunResult

_wasmcall.install()  # about 20 µs less per guest call, which a run makes dozens of

_PRELUDE = files("sandbox").joinpath("prelude.js").read_text(encoding="utf-8")
# Compiled through `new Function`, so the prelude's frames read <input> and the user's
# eval_script: how a stack is placed in the user's own code.
_BOOT = f"new Function({json.dumps(_PRELUDE)})()"
_DRAIN = 'await globalThis[Symbol.for("codedesk.drain")]()'

# A frame of the user's code: "at f (eval_script:3:11)" at run time, "at eval_script:2:1"
# for a syntax error, which has no function around it.
_USER_FRAME = re.compile(r"eval_script:(\d+):(\d+)")
_COMPILE_FRAME = re.compile(r"^\s*at eval_script:(\d+):(\d+)\s*$", re.M)

_KIND_BY_NAME = {
    "BridgeError": "bridge",
    "CallBudgetError": "call_budget",
    "ArtifactLimitError": "output",
}


_POOL_SIZE = 3  # ready contexts kept for the default limits
_DEFAULT_HEAP_MB = JsLimits().heap_memory_max_mb
_REFILL_PAUSE = 0.02  # seconds; see _refill
_RUN_THREADS = 8  # runs that may compute at once without slowing each other


class JsEngine:
    """Runs untrusted JavaScript. Create one per process; `run` is safe to call concurrently.

    A context is used by one run only. A few contexts for the default limits are made ahead on
    a worker thread (wasm runs there without the GIL), so neither a run nor the event loop
    pays the ~5 ms of making one, even when runs come back to back.
    """

    def __init__(self, *, pool_size: int = _POOL_SIZE) -> None:
        self._pool_size = pool_size
        self._pool: list[_Vm] = []
        self._lock = threading.Lock()
        self._closed = False
        self._maker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="js-vm-maker")
        self._loops = RunLoops(_RUN_THREADS, "js-run")
        _jsmodule.load()  # the compiled guest, from the disk cache (else 0.7 s of compiling)
        self._refill()

    def close(self) -> None:
        """Release the contexts made ahead and stop the run threads (runs still going on them
        are abandoned: close the engine once its runs are done)."""
        self._closed = True
        self._maker.shutdown(wait=True)
        self._loops.close()
        with self._lock:
            pool, self._pool = self._pool, []
        for vm in pool:
            vm.close()

    def __enter__(self) -> JsEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _refill(self) -> None:
        _yield_to_runs()
        with self._lock:
            ready = len(self._pool)
        if ready >= self._pool_size:
            return
        if ready:
            # Started at a run's end, making a VM would compete with sending that run's result;
            # while the pool is not empty, let the result go out first.
            time.sleep(_REFILL_PAUSE)
        while not self._closed:
            with self._lock:
                if len(self._pool) >= self._pool_size:
                    return
            vm = _Vm(JsLimits())
            with self._lock:
                self._pool.append(vm)

    def _take(self, limits: JsLimits) -> _Vm:
        # A made-ahead VM has the default heap limit; its own timeout (used by plain-script
        # evaluation) is the default one, so a run with another timeout evaluates as async,
        # which takes the timeout per call.
        vm = None
        if limits.heap_memory_max_mb == _DEFAULT_HEAP_MB:
            with self._lock:
                vm = self._pool.pop() if self._pool else None
        return vm if vm is not None else _Vm(limits)

    def retire(self, vm: _Vm) -> None:
        """Close a used VM, and make the next, off the event loop and after the run: making
        one while a run goes would take CPU from it."""
        if self._closed:
            vm.close()
        else:
            self._maker.submit(vm.close)
            # One maker thread runs these in turn; a refill finding the pool full returns.
            self._maker.submit(self._refill)

    async def run(
        self,
        code: str,
        *,
        call_tool: CallTool,
        list_tools: ListTools,
        limits: JsLimits = JsLimits(),
        on_console: OnConsole | None = None,
    ) -> RunResult:
        """Run `code` (a script body; top-level await allowed) in a fresh context.

        Never raises for what the script does: the outcome, error kind and place included, is
        in the `RunResult`. Raises `TypeError` for a `code` that is not a string or `limits`
        that are not `JsLimits`, and `asyncio.CancelledError` when the caller is cancelled
        (after cancelling the run's own calls).
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a string, not {type(code).__name__}")
        if not isinstance(limits, JsLimits):
            raise TypeError(f"limits must be JsLimits, not {type(limits).__name__}")
        caller = asyncio.get_running_loop()
        thread = self._loops.acquire()
        try:
            return await on_loop(thread.loop, self._run_here, code, caller, call_tool, list_tools, limits, on_console)
        finally:
            self._loops.release(thread)

    async def _run_here(
        self,
        code: str,
        caller: asyncio.AbstractEventLoop,
        call_tool: CallTool,
        list_tools: ListTools,
        limits: JsLimits,
        on_console: OnConsole | None,
    ) -> RunResult:
        # On a run thread's loop; the tool calls go back to the caller's.
        async def call_there(server: str, tool: str, args: Any) -> Any:
            return await on_loop(caller, call_tool, server, tool, args)

        async def list_there(server: str | None) -> Any:
            return await on_loop(caller, list_tools, server)

        run = _JsRun(code, call_there, list_there, limits, on_console)
        vm = self._take(limits)
        try:
            return await run.execute(vm)
        finally:
            self.retire(vm)


def _yield_to_runs() -> None:
    """Lower this thread's CPU priority: on a busy machine, making the next context waits
    for the runs in progress (about 10% off back-to-back runs on two cores)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
        pass


class _Vm:
    """A fresh context with the guest API installed, waiting for its one run."""

    def __init__(self, limits: JsLimits) -> None:
        self.run: _JsRun | None = None
        self.timeout_seconds = limits.timeout_seconds
        self.rt = quickjs_rs.Runtime(memory_limit=limits.heap_memory_max_mb << 20)
        try:
            self.ctx = self.rt.new_context(timeout=limits.timeout_seconds)
            self.ctx.register("__host", self._host, is_async=False)
            self.ctx.register("__host_next", self._next, is_async=True)
            with self.ctx.eval_handle(_BOOT) as api:
                self.settle = api.get("settle")
                self.finish = api.get("finish")
        except BaseException:
            self.rt.close()
            raise

    def _host(self, op: str, a: Any = None, b: Any = None, c: Any = None) -> Any:
        run = self.run
        if run is None:
            return ""
        if op == "submit":
            run.submit(a)
        elif op == "mark":
            run.touched = True
        elif op == "console":
            for level, text in json.loads(a):
                run.console.add(str(level), str(text))
            return "full" if run.console.truncated else ""
        elif op == "cut":
            run.console.add_cut(int(a), int(b))
        elif op == "artifact":
            return run.artifacts.add(json.loads(a)) or ""
        elif op == "uncaught":
            run.uncaught_error(str(a), str(b), str(c or ""))
        return ""

    async def _next(self, payload: str = "") -> str:
        run = self.run
        assert run is not None
        if payload:
            sent = json.loads(payload)
            for level, text in sent.get("console", ()):
                run.console.add(str(level), str(text))
            run.submit_ops(sent.get("ops", ()))
        return await run.bridge.next_events()

    def flush_console(self) -> None:
        """Send the console lines the guest still holds (also after a failure)."""
        try:
            self.finish.call().dispose()
        except (quickjs_rs.QuickJSError, wasmtime.Trap, wasmtime.WasmtimeError):
            pass  # a VM that cannot run any more: keep what already arrived

    def close(self) -> None:
        try:
            self.settle.dispose()
            self.finish.dispose()
            self.ctx.close()
        except (quickjs_rs.QuickJSError, wasmtime.Trap, wasmtime.WasmtimeError):
            pass  # a trapped VM: dropping it is all that is left
        finally:
            self.rt.close()


class _JsRun:
    """The state of one run: its console, artifacts and tool bridge."""

    def __init__(
        self,
        code: str,
        call_tool: CallTool,
        list_tools: ListTools,
        limits: JsLimits,
        on_console: OnConsole | None,
    ) -> None:
        self.code = code
        self.limits = limits
        self.console = ConsoleCapture(limits.max_output_bytes, on_console)
        self.artifacts = ArtifactBox(limits.max_artifacts, limits.max_artifact_bytes)
        self.bridge = ToolBridge(call_tool, list_tools, limits.max_tool_calls)
        self.uncaught: RunError | None = None
        self.touched = False  # the script used calls, timers or the console

    def submit(self, ops_json: str) -> None:
        self.submit_ops(json.loads(ops_json))

    def submit_ops(self, ops: list) -> None:
        for op in ops:
            kind, rid = op.get("op"), op.get("id")
            if kind == "call":
                self.bridge.call(rid, op.get("server"), op.get("tool"), op.get("args"))
            elif kind == "list":
                self.bridge.list(rid, op.get("server"))
            elif kind == "timer":
                self.bridge.timer(rid, op.get("ms"))
            elif kind == "clear":
                self.bridge.clear(rid)

    def uncaught_error(self, name: str, message: str, stack: str) -> None:
        if self.uncaught is None:
            self.uncaught = _error_from_js(name, message, stack)

    async def execute(self, vm: _Vm) -> RunResult:
        limits = self.limits
        vm.run = self
        try:
            value, error = await self._evaluate(vm, self.code)
            if error is not None and error.kind == "syntax" and not self.touched:
                # Not JavaScript: perhaps TypeScript. Nothing has run yet, so the VM is clean.
                stripped = _strip_typescript(self.code)
                if stripped is not None:
                    value, ts_error = await self._evaluate(vm, stripped)
                    error = _note_typescript(ts_error)
            if error is not None and self.touched:
                vm.flush_console()
        finally:
            vm.run = None
            await self.bridge.close()
        if error is None and self.uncaught is not None:
            error = self.uncaught
        if error is None and value is not None:
            size = len(json.dumps(value, ensure_ascii=False).encode())
            if size > limits.max_output_bytes:
                value, error = None, RunError(
                    kind="output",
                    message=f"the returned value is {size} bytes, over max_output_bytes="
                    f"{limits.max_output_bytes}; return a smaller value (a summary, a count, "
                    f"the first items)",
                )
        return RunResult(
            status="ok" if error is None else "error",
            console=self.console.lines(),
            value=value if error is None else None,
            artifacts=list(self.artifacts.blocks),
            error=error,
            tool_calls=self.bridge.tool_calls,
        )

    async def _evaluate(self, vm: _Vm, code: str) -> tuple[Any, RunError | None]:
        limits, ctx = self.limits, vm.ctx
        started = time.monotonic()
        guard = asyncio.timeout(limits.timeout_seconds)
        try:
            async with guard:
                if _needs_async(code) or limits.timeout_seconds != vm.timeout_seconds:
                    handle = await ctx.eval_handle_async(code, timeout=limits.timeout_seconds)
                else:
                    # A script without `await` runs as a plain script: the same value and
                    # errors, at a fraction of the cost of driving a promise.
                    handle = ctx.eval_handle(code)
                with handle:
                    text = self._settle(vm, handle)
                    if text is None:
                        # Calls or timers are pending. Only eval_async may run the guest's
                        # jobs, which may start more of them: drain, then describe.
                        left = max(0.001, limits.timeout_seconds - (time.monotonic() - started))
                        with await ctx.eval_handle_async(_DRAIN, timeout=left):
                            pass
                        text = self._settle(vm, handle)
                    if text is None:
                        raise quickjs_rs.QuickJSError("the event loop did not drain")
        except TimeoutError:  # builtins.TimeoutError, from asyncio.timeout: wall time is up
            return None, _timeout_error(limits)
        except quickjs_rs.TimeoutError:
            return None, _timeout_error(limits)
        except quickjs_rs.MemoryLimitError as exc:
            return None, _memory_error(exc, limits)
        except quickjs_rs.DeadlockError:
            if time.monotonic() - started >= limits.timeout_seconds:
                # The timeout interrupted a job mid-run (a loop after an await), which leaves
                # the top-level promise pending: that is the timeout, not a deadlock.
                return None, _timeout_error(limits)
            return None, RunError(
                kind="thrown",
                message="the script awaits a promise that can never settle (no tool call or "
                "timer is pending to settle it)",
            )
        except quickjs_rs.JSError as exc:
            return None, _error_from_js(exc.name, exc.message, exc.stack or "")
        except quickjs_rs.QuickJSError as exc:
            return None, RunError(kind="internal", message=f"{type(exc).__name__}: {exc}")
        except wasmtime.Trap as exc:
            # Deep recursion exhausts the wasm stack before QuickJS's own check can throw.
            if "call stack exhausted" in str(exc):
                return None, RunError(
                    kind="thrown",
                    message="RangeError: Maximum call stack size exceeded (recursion too deep; "
                    "use a loop or an explicit stack)",
                )
            return None, RunError(kind="internal", message=f"the JS VM trapped: {exc}")
        if guard.expired():  # the script caught the cancellation and carried on
            return None, _timeout_error(limits)
        return json.loads(text).get("value"), None

    def _settle(self, vm: _Vm, handle: quickjs_rs.Handle) -> str | None:
        """The value as JSON once nothing is pending, else None. A plain value with nothing
        else to collect is read directly, without a call into the guest."""
        if not self.touched:
            kind = handle.type_of
            if kind in ("string", "boolean", "null", "undefined") or kind == "number":
                value = handle.to_python()
                if value is UNDEFINED:
                    return "{}"
                if not (isinstance(value, float) and not math.isfinite(value)):
                    return json.dumps({"value": value})
        with vm.settle.call(handle) as settled:
            text = settled.to_python()
        return text or None


def _needs_async(code: str) -> bool:
    return "await" in code


def _strip_typescript(code: str) -> str | None:
    """The script with TypeScript's types removed, or None when it is not TypeScript either."""
    flags = quickjs_rs.SourceTransform.STRIP_TYPESCRIPT | quickjs_rs.SourceTransform.SOURCE_TS
    try:
        stripped = quickjs_rs.transform_source("script.ts", code, flags=flags)
    except Exception:  # the transformer's parse error: keep the JavaScript syntax error
        return None
    return stripped if stripped.strip() and stripped != code else None


def _note_typescript(error: RunError | None) -> RunError | None:
    if error is None or error.line is None:
        return error
    return RunError(
        kind=error.kind,
        message=f"{error.message} (the script ran as TypeScript with its types removed; line "
        f"{error.line} is in that stripped code, which drops comments and blank lines)",
        line=error.line,
        column=error.column,
        traceback=error.traceback,
    )


def _error_from_js(name: str, message: str, stack: str) -> RunError:
    """Classify a JS error and place it in the user's code."""
    compile_frame = _COMPILE_FRAME.search(stack) if name == "SyntaxError" else None
    frame = compile_frame or _USER_FRAME.search(stack)
    line, column = (int(frame.group(1)), int(frame.group(2))) if frame else (None, None)
    if compile_frame is not None:
        kind = "syntax"
    elif name == "InternalError" and "out of memory" in message:
        kind = "memory"
    else:
        kind = _KIND_BY_NAME.get(name, "thrown")
    user_stack = "\n".join(ln for ln in stack.splitlines() if "<input>" not in ln)
    if not message and name == "Error":
        message = "a value that is not an Error was thrown (throw new Error(...) to say why)"
    return RunError(
        kind=kind,  # type: ignore[arg-type]
        message=f"{name}: {message}" if name and kind != "syntax" else f"SyntaxError: {message}",
        line=line,
        column=column,
        traceback=user_stack or None,
    )


def _timeout_error(limits: JsLimits) -> RunError:
    return RunError(
        kind="timeout",
        message=f"the run took longer than timeout_seconds={limits.timeout_seconds:g}; calls "
        f"still in flight were cancelled. Do less per run, or raise timeout_seconds (at most "
        f"600)",
    )


def _memory_error(exc: Exception, limits: JsLimits) -> RunError:
    return RunError(
        kind="memory",
        message=f"the JS heap passed heap_memory_max_mb={limits.heap_memory_max_mb} ({exc}); "
        f"keep less in memory, or raise heap_memory_max_mb (at most 1024)",
    )
