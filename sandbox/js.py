"""run_js: JavaScript in QuickJS-ng compiled to wasm (quickjs-rs), one fresh VM per run.

Each run gets its own wasm instance, used once and closed, so nothing leaks between runs. The
guest API lives in `prelude.js`. A run is driven in steps from the caller's event loop:

    worker thread: evaluate the script, run its microtasks, `step()`   -> requests, console
    caller's loop: start the tool calls and timers (`ToolBridge`), wait for completions
    worker thread: `deliver(completions)`, run microtasks, `step()`    -> ... until done

so the tool calls live on the caller's loop (where the MCP sessions are), and JavaScript that
computes without awaiting holds only its worker thread (`sandbox._loops`). Each step is tried
on the caller's loop itself, for a few epoch ticks at most: most end in a millisecond. A first
step that does not is dropped, VM and all, and run afresh on the worker thread
(`_JsRun._first_step_here`); a later one pauses where it is and goes on there (`_JsRun._step`).

Time: `timeout_seconds` bounds the whole run, the description of its final value included.
Inside the guest the VM's interrupt stops any JavaScript (a loop, a getter, a toJSON, a Proxy
trap) at the deadline; outside it the caller stops waiting at the deadline plus `GRACE_SECONDS`
whatever the guest does, retires the worker thread and the VM (never used again), cancels the
run's calls and answers. Memory: QuickJS's heap limit and a cap on the VM's whole linear memory
(`sandbox._wasmcall`). Output: values are turned into JSON in the guest, cut at
`max_output_bytes` and at 100 levels of nesting.

A script that is not valid JavaScript but is valid TypeScript runs with its types removed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

import quickjs_rs

from sandbox import _jsimage, _jsmodule
from sandbox._host import ArtifactBox, ConsoleCapture, RunLimitErrors, ToolBridge
from sandbox._loops import RunThread, RunThreads
from sandbox._wasmcall import (OFF_THE_LOOP, WELL_FORMED_SOURCE, FULFILLED, GUEST_FAILURES, REJECTED, GuestVm,
                               Interrupted, JSError, Steps, Trap)
from sandbox.result import CallTool, JsLimits, ListTools, OnConsole, RunError, RunResult, well_formed

logger = logging.getLogger(__name__)

GRACE_SECONDS = 0.5
"""How long past its deadline a run's answer may wait for a guest that does not stop."""

_PRELUDE = files("sandbox").joinpath("prelude.js").read_text(encoding="utf-8")
# Compiled through `new Function`, so the prelude's frames read <input> and the user's
# eval_script: how a stack is placed in the user's own code.
_BOOT = f"new Function({json.dumps(_PRELUDE)})()"
_BOOT_SECONDS = 5.0
_BOOT_SOURCE = _BOOT + WELL_FORMED_SOURCE  # what a booted VM holds: the image's key

# A frame of the user's code: "at f (eval_script:3:11)" at run time, "at eval_script:2:1"
# for a syntax error, which has no function around it.
_USER_FRAME = re.compile(r"eval_script:(\d+):(\d+)")
_COMPILE_FRAME = re.compile(r"^\s*at eval_script:(\d+):(\d+)\s*$", re.M)

_KIND_BY_NAME = {
    "BridgeError": "bridge",
    "CallBudgetError": "call_budget",
    "ArtifactLimitError": "output",
}

_POOL_SIZE = 3  # ready VMs kept for the default heap limit
_DEFAULT_HEAP_MB = JsLimits().heap_memory_max_mb
_SWITCH_INTERVAL_SECONDS = 0.0005  # see JsEngine.__init__
_MAX_RUN_THREADS = 64  # runs computing at once before they share threads
_FLUSH_SECONDS = 0.25  # after a timeout, for the guest to hand over its last console lines
_OVERDUE_SECONDS = 0.05  # how long the maker's work waits for the runs to pause
_ENDED_MAX = 16  # and how many ended runs' VMs (each holds one of the process's slots for VMs)
_CLOSE_HERE_BYTES = 16 << 20  # a VM this big is closed on the maker's thread, not the loop
_IDLE_TURNS = 100  # turns of the loop the maker's work waits at most for it to have nothing ready
_HERE_TICKS = 2
"""Epoch ticks (10-20 ms) a run's step may take on the caller's loop (see
`_JsRun._first_step_here`, `_JsRun._step`)."""
_SLOW_STEP_SECONDS = 0.002  # a later step this long on the loop sends the run's next ones to its thread
# (the loop thread's CPU time: a step other processes preempted did not compute long, and sending
# a run of 900 calls to its thread for it made each of its calls 2 thread hops dearer)
_HERE_MIN_TIMEOUT_SECONDS = 0.1  # a run this short starts on its thread
_HERE_MAX_CODE_CHARS = 64 << 10  # and so does a longer script (compiling it takes a while, and
# turning TypeScript into JavaScript runs in a store the epoch does not stop)


class JsEngine:
    """Runs untrusted JavaScript. Create one per process; `run` is safe to call concurrently.

    A few VMs for the default heap limit are made ahead, and the VMs of the runs that ended are
    closed, on the caller's loop between runs (`_tend`); at start (the first as the engine is
    made), and for what the loop should not do, on a thread of lower priority (`_on_thread`).
    """

    def __init__(self, *, pool_size: int = _POOL_SIZE) -> None:
        self._pool_size = pool_size
        self._pool: list[_Vm] = []
        self._lock = threading.Lock()
        self._closed = False
        self._running = 0  # runs in progress
        self._ended: list[_JsRun] = []  # runs whose VM is to be closed
        self._tending: asyncio.AbstractEventLoop | None = None  # the loop `_tend` is due on
        self._since = 0.0  # since when the maker's work waits (0: none waits)
        self._on_thread_soon = False  # `_on_thread` is due
        self._stopping = threading.Event()
        self._maker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="js-vm-maker")
        self._threads = RunThreads(_MAX_RUN_THREADS, "js-run")
        _jsmodule.load()  # the compiled guest, from the disk cache (else 0.7 s of compiling)
        # and its pre-initialized image, here rather than first on the VM maker's thread, whose low
        # priority made a cold start's first run wait for it behind the imports of the process
        self._has_image = image_ready()
        # A guest computing in a loop calls its interrupt poll (Python, under the GIL) thousands
        # of times a second from its run thread; at Python's default 5 ms switch interval the
        # event loop and the other runs' threads then wait for the GIL in a convoy, and every
        # run of the process answers late (seen: +2.5 s past their timeouts). A shorter interval
        # hands the GIL over sooner.
        sys.setswitchinterval(min(sys.getswitchinterval(), _SWITCH_INTERVAL_SECONDS))
        if self._has_image and pool_size > 0:
            # the first here, so that the process's first run finds it ready: left to the maker's
            # thread, it was not, and that run made its own on a new run thread while the maker
            # made another (3-6 ms in the engine, against 1.4 ms now)
            self._make_ahead()
        # The others a little later: a client runs its first script as soon as the engine is
        # made, and that run raced the maker's thread for the GIL
        self._to_thread(_OVERDUE_SECONDS)

    def close(self) -> None:
        """Release the VMs made ahead and end the run threads (a run still going is abandoned:
        close the engine once its runs are done)."""
        self._closed = True
        self._stopping.set()
        self._maker.shutdown(wait=True)
        self._threads.close()
        with self._lock:
            pool, self._pool = self._pool, []
            ended, self._ended = self._ended, []
        for vm in pool:
            vm.close()
        for run in ended:
            run.close_vm()

    def __enter__(self) -> JsEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _on_thread(self, delay: float) -> None:
        """On the maker's thread, `delay` seconds on: fill the pool and close the VMs of ended
        runs. At start; for VMs that boot (no image); and, `_OVERDUE_SECONDS` after a run ended,
        for what the caller's loop did not do by then (its loop ended, or never had a turn)."""
        try:
            self._stopping.wait(delay)
            # lowered after the wait: lowered first, the thread still held the GIL on its way to
            # the wait, and on a busy machine the engine's own thread, which had just started
            # it, waited 3 ms for it (a cold start's engine)
            _yield_to_runs()
            while not self._closed:
                with self._lock:  # one at a time: a run short of a slot closes the others (`_new_vm`)
                    run = self._ended.pop() if self._ended else None
                    full = len(self._pool) >= self._pool_size
                    if full and run is None:  # done; a run ending from now on calls `_to_thread`
                        self._on_thread_soon = False
                        return
                if run is not None:
                    run.close_vm()
                elif not self._make_ahead():
                    return
        finally:
            with self._lock:
                self._on_thread_soon = False

    def _to_thread(self, delay: float) -> None:
        with self._lock:
            if self._on_thread_soon or self._closed:
                return
            self._on_thread_soon = True
        try:
            self._maker.submit(self._on_thread, delay)
        except RuntimeError:  # closed meanwhile
            pass

    def _make_ahead(self) -> bool:
        """Make a VM for the pool here; False, and why logged, when it cannot be made (runs then
        make their own)."""
        try:
            self._add(self._new_vm(_DEFAULT_HEAP_MB))
        except GUEST_FAILURES as exc:
            logger.warning("could not make a JS VM ahead: %s", exc)
            return False
        return True

    def _new_vm(self, heap_mb: int) -> _Vm:
        """A VM. When the process's slots for VMs are all taken (`_jsmodule.MAX_VMS`), the VMs
        of ended runs, which wait to be closed between runs, are closed here first."""
        try:
            return _Vm(heap_mb)
        except _jsmodule.TooManyVms:
            with self._lock:
                ended, self._ended = self._ended, []
            if not ended:
                raise
        for run in ended:
            run.close_vm()
        return _Vm(heap_mb)

    def _add(self, vm: _Vm) -> None:
        """A VM made for the pool, put in it (or closed, the engine closed meanwhile)."""
        vm.guest.make_ready()
        with self._lock:
            if not self._closed:
                self._pool.append(vm)
                return
        vm.close()

    def _after_run(self) -> None:
        """On the caller's loop, as a run ends: the maker's work is done on this loop, between
        runs (`_tend`); what it did not do `_OVERDUE_SECONDS` on, on the maker's thread."""
        loop = asyncio.get_running_loop()
        self._since = self._since or time.monotonic()
        self._to_thread(_OVERDUE_SECONDS)
        if self._tending is not loop:
            self._tending = loop
            loop.call_soon(self._when_idle, loop, _IDLE_TURNS)

    def _when_idle(self, loop: asyncio.AbstractEventLoop, turns: int) -> None:
        """`_tend` once the loop has nothing else ready to run (or `turns` turns on): the run's
        answer has then been written, and the maker's work is done while the client reads it.
        Waiting a fixed 0.5 ms instead, a client that sent its next request sooner found it
        started while the maker waited for runs to pause (`_tend`): back to back, the work fell
        to the maker's thread 50 ms on, racing the runs for the GIL (empty runs through MCP
        answered 1.4-1.8x later). asyncio's ready queue is private: a loop without one tends at
        once."""
        if turns > 0 and getattr(loop, "_ready", None):
            loop.call_soon(self._when_idle, loop, turns - 1)
        else:
            self._tend()

    def _tend(self) -> None:
        """On the loop: one piece of the maker's work (make a VM for an empty pool; else close
        one ended run's VM, or make one), then the next after what is ready to run. It waits
        while a run goes (the ending run calls `_after_run` again), but an empty pool gets its
        VM at once and a backlog waits at most `_OVERDUE_SECONDS` (or until `_ENDED_MAX` VMs).

        Here rather than on a thread: a VM is made and closed in some 30 calls into wasmtime,
        each of which lets go of the GIL; from another thread, each took the GIL back from the
        loop, which waited for it. Here, runs back to back answer 12-15% sooner (median; 25% on
        the mean; sandbox/README.md)."""
        loop = asyncio.get_running_loop()
        if self._tending is not loop:
            return  # another loop's, which took over
        self._tending = None
        if self._closed:
            return
        with self._lock:
            empty = not self._pool and self._pool_size > 0
            if (self._running and not empty and len(self._ended) < _ENDED_MAX
                    and time.monotonic() - self._since < _OVERDUE_SECONDS):
                return
            run = self._ended.pop() if self._ended and not empty else None
            fill = run is None and len(self._pool) < self._pool_size
        if run is not None:
            self._close_ended(run)
        elif fill and self._has_image:
            if not self._make_ahead():
                self._since = 0.0
                return
        else:  # done (and booting a VM takes milliseconds: left to the thread)
            self._since = 0.0
            return
        self._tending = loop
        loop.call_soon(self._tend)

    def _close_ended(self, run: _JsRun) -> None:
        """Close an ended run's VM here, on the caller's loop, or a big one on the maker's thread
        (unmapping it would hold the loop)."""
        if run.vm is not None and run.vm.guest.memory_bytes() > _CLOSE_HERE_BYTES:
            try:
                self._maker.submit(run.close_vm)
                return
            except RuntimeError:  # the engine closed meanwhile
                pass
        run.close_vm()

    def _take(self, limits: JsLimits) -> _Vm | None:
        """A VM made ahead for these limits, or None (the run makes its own)."""
        if limits.heap_memory_max_mb != _DEFAULT_HEAP_MB:
            return None
        with self._lock:
            return self._pool.pop() if self._pool else None

    async def run(
        self,
        code: str,
        *,
        call_tool: CallTool,
        list_tools: ListTools,
        limits: JsLimits = JsLimits(),
        on_console: OnConsole | None = None,
    ) -> RunResult:
        """Run `code` (a script body; top-level await allowed) in a fresh VM.

        Answers within `limits.timeout_seconds` plus `GRACE_SECONDS`, whatever the script does.
        Never raises for what the script does: the outcome, error kind and place included, is
        in the `RunResult`. Raises `TypeError` for a `code` that is not a string or `limits`
        that are not `JsLimits`, and `asyncio.CancelledError` when the caller is cancelled
        (after cancelling the run's own calls).
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a string, not {type(code).__name__}")
        if not isinstance(limits, JsLimits):
            raise TypeError(f"limits must be JsLimits, not {type(limits).__name__}")
        if self._closed:
            raise RuntimeError("the JS engine is closed")
        # A lone surrogate cannot cross into the engine (its source is UTF-8); as U+FFFD it can.
        code = well_formed(code)
        run = _JsRun(code, limits, on_console, ToolBridge(call_tool, list_tools, limits.max_tool_calls),
                     self._new_vm)
        thread = self._threads.acquire()
        vm = self._take(limits)
        with self._lock:
            self._running += 1
        try:
            return await run.drive(thread, vm)
        finally:
            with self._lock:
                self._running -= 1
                if not run.abandoned:  # no thread uses its VM now: `_tend` (or the maker's thread) closes it
                    self._ended.append(run)
                # past `_ENDED_MAX`, the oldest is closed now: runs that never give the loop a turn
                # (back to back, each answered in its first step) left the closing to the maker's
                # thread alone, which fell behind them (38 waiting, with runs 0.7 ms apart)
                oldest = self._ended.pop(0) if len(self._ended) > _ENDED_MAX else None
            if oldest is not None:
                self._close_ended(oldest)
            if run.abandoned:
                # The guest has not returned: its thread closes the VM when it does, then ends.
                self._threads.retire(thread, run.close_vm)
            else:
                self._threads.release(thread)
            self._after_run()

def _yield_to_runs() -> None:
    """Lower this thread's CPU priority: on a busy machine, making the next VM waits for the
    runs in progress."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
        pass


class _Vm:
    """A fresh VM with the guest API installed, waiting for its one run."""

    def __init__(self, heap_mb: int, *, boot: bool = False) -> None:
        """A VM from the pre-initialized image when there is one for this heap limit, else (or
        with `boot`) booted here: the guest API evaluated in a fresh instance."""
        self.run: _JsRun | None = None
        self.dead = False  # trapped or aborted: no more calls into it
        image = None if boot or heap_mb != _DEFAULT_HEAP_MB else _jsimage.image(_boot_for_image, _BOOT_SOURCE)
        self.from_image = image is not None
        self.guest = GuestVm(heap_mb << 20, self._host, image)
        self.step_fn = self.deliver_fn = None
        try:
            if image is not None:
                self.step_fn = self.guest.adopt(image.handles["step"])
                self.deliver_fn = self.guest.adopt(image.handles["deliver"])
                return
            self.guest.deadline = time.monotonic() + _BOOT_SECONDS
            api = self.guest.eval(_BOOT, top_level_await=False)
            try:
                self.step_fn = api.get("step")
                self.deliver_fn = api.get("deliver")
            finally:
                api.dispose()
            self.guest.deadline = math.inf
        except BaseException:
            self.close()
            raise

    def _host(self, op: Any = None, a: Any = None, b: Any = None, *_: Any) -> Any:
        if op == "seed":
            return ",".join(str(secrets.randbits(32)) for _ in range(4))
        run = self.run
        if run is None or run.abandoned:
            return ""
        if op == "console":
            for level, text in json.loads(a):
                run.console.add(str(level), str(text))
            return "full" if run.console.truncated else ""
        if op == "limits":
            return run.limits.max_output_bytes
        if op == "count":
            return len(str(a).encode("utf-8", "replace"))
        if op == "artifact":
            return run.artifacts.add(json.loads(a)) or ""
        if op == "uncaught":
            if run.uncaught is None:
                err = json.loads(a)
                run.uncaught = _error_from_js(str(err.get("name")), str(err.get("message")), str(err.get("stack") or ""))
        return ""

    def close(self) -> None:
        self.run = None
        self.guest.close()  # its handles go with its store


def image_ready() -> bool:
    """Load (or build and cache) the pre-initialized image VMs of the default heap start from;
    False when it cannot be made, and VMs boot the plain way."""
    return _jsimage.image(_boot_for_image, _BOOT_SOURCE) is not None


def _boot_for_image() -> tuple[GuestVm, dict[str, int]]:
    """A VM booted the plain way, and the handles its image keeps."""
    vm = _Vm(_DEFAULT_HEAP_MB, boot=True)
    assert vm.step_fn is not None and vm.deliver_fn is not None
    # what every step passes: its kinds (0 to 3), a 0, the default output limit
    calls = vm.guest.prepare_calls((0, 1, 2, 3, JsLimits().max_output_bytes))
    return vm.guest, {"step": vm.step_fn._require_live(), "deliver": vm.deliver_fn._require_live(),
                      "well_formed": vm.guest.well_formed_handle, **calls}


@dataclass
class _Step:
    """What one step on the worker thread hands back to the caller's loop."""

    done: bool = False
    ops: list = field(default_factory=list)
    outstanding: int = 0
    value: Any = None
    error: RunError | None = None


class _JsRun:
    """One run: its limits, console, artifacts and tool bridge, and the driving of its VM."""

    def __init__(self, code: str, limits: JsLimits, on_console: OnConsole | None, bridge: ToolBridge,
                 new_vm: Callable[[int], _Vm]) -> None:
        self.code = code
        self._new_vm = new_vm  # makes its VM if none was made ahead
        self.limits = limits
        self.errors = RunLimitErrors(limits, bridge.in_flight)
        self.bridge = bridge
        self.abandoned = False
        self.deadline = 0.0
        self.vm: _Vm | None = None
        self._on_console = on_console
        self._here = False  # the first step is being tried on the caller's loop
        self._slicing = False  # a later step is (`_step`)
        self._slow = False  # a later step took long there: the next ones go to the thread
        self._begin()

    def _begin(self) -> None:
        """What the guest's first step fills in, empty."""
        self.console = ConsoleCapture(self.limits.max_output_bytes, self._on_console)
        self.artifacts = ArtifactBox(self.limits.max_artifacts, self.limits.max_artifact_bytes)
        self.uncaught: RunError | None = None
        self._top: Any = None  # the script's value, or the promise of its {value} envelope
        self._is_promise = False
        self._envelope: Any = None

    # -- on the caller's loop --

    async def drive(self, thread: RunThread, vm: _Vm | None) -> RunResult:
        self.deadline = time.monotonic() + self.limits.timeout_seconds
        self.vm = vm
        error: RunError | None = None
        value: Any = None
        try:
            step = self._first_step_here(thread)
            if step is None:
                step = await self._on(thread, self._start)
            while not step.done:
                for op in step.ops:
                    self._submit(op)
                if step.outstanding == 0:
                    step = _Step(done=True, error=RunError(
                        kind="thrown",
                        message="the script awaits a promise that can never settle (no tool call "
                        "or timer is pending to settle it)"))
                    break
                left = self.deadline - time.monotonic()
                try:
                    events = await asyncio.wait_for(self.bridge.next_events(), timeout=max(0.0, left))
                except TimeoutError:
                    step = await self._on(thread, self._timed_out)
                    break
                step = await self._step(thread, self._continue_steps(events))
            value, error = step.value, step.error
        except _Overrun:
            error = self.errors.timeout()
        except asyncio.CancelledError:
            self._abandon()
            raise
        finally:
            await self.bridge.close()
        return self._result(value, error)

    def _first_step_here(self, thread: RunThread) -> _Step | None:
        """The first step, tried on the caller's loop; None when it must run on the run's thread.

        Most first steps take a millisecond (a script that returns, or awaits its first calls),
        and on the loop they save the two thread hops a step costs. A first step leaves nothing
        outside its VM but what the host keeps for it (console, artifacts, an uncaught error:
        none of it sent yet, the calls it asks for not started), so one that computes longer is
        stopped wherever it is by the store's epoch, `_HERE_TICKS` ticks on (the loop waits
        10-20 ms at most, whatever the guest does, even inside one C builtin), its VM and all it
        made are dropped, and the run starts afresh on its thread, as if this had not been."""
        vm = self.vm
        if (vm is None or not _jsmodule.EPOCHS or self.limits.timeout_seconds < _HERE_MIN_TIMEOUT_SECONDS
                or len(self.code) > _HERE_MAX_CODE_CHARS):
            return None  # a VM to make (milliseconds), no epoch to stop the guest, a short run, a long script
        self._here = True
        self.console.hold()
        try:
            step = self._start()
        except _CutShort:
            self.vm = None
            thread.post(vm.close)  # off the loop, and before the run's first step there
            self._begin()
            return None
        finally:
            self._here = False
        if not vm.dead:
            vm.guest.trap_within(None)  # the epoch backstop of the run's deadline, from now on
        self.console.release()
        return step

    async def _step(self, thread: RunThread, steps: Steps) -> _Step:
        """A step after the first, tried on the caller's loop a call into the guest at a time.

        Most such steps take a fraction of a millisecond (a result delivered, the script on to
        its next call), and on the loop they save the two thread hops a step costs (about half
        of what a tool call adds in the engine). A call that computes on past the store's
        epoch deadline, `_HERE_TICKS` ticks on, pauses there (`GuestVm.start`), and the run's
        thread takes the step up from where it paused: the loop waits 10-20 ms at most, whatever
        the guest does, and the guest loses nothing. The calls between (making and reading
        strings) run no script code; reading a thrown value may (a getter), and is left to the
        thread. A run that computed on the loop longer than `_SLOW_STEP_SECONDS` (of CPU) in one
        step makes its later steps on its thread: the loop serves every client and run, and a script
        that computes between its awaits would take it in slices."""
        vm = self.vm
        assert vm is not None
        guest = vm.guest
        if (vm.dead or self._slow or not _jsmodule.EPOCHS
                or self.limits.timeout_seconds < _HERE_MIN_TIMEOUT_SECONDS):
            return await self._on(thread, guest.now, steps)
        guest.pause_within(_HERE_TICKS)
        self._slicing = True
        started = time.thread_time()
        try:
            request = next(steps)
            while True:
                if request is OFF_THE_LOOP:
                    self._slicing = False
                    guest.trap_within(None)
                    return await self._on(thread, guest.now, steps)
                paused = guest.start(request)
                if not paused.poll(slicing=True):  # past its ticks: computed long, or kept waiting
                    self._slicing = False
                    self._slow = time.thread_time() - started > _SLOW_STEP_SECONDS
                    return await self._on(thread, self._go_on, steps, paused)
                try:
                    answer = guest.ended(paused)
                except GUEST_FAILURES as exc:
                    request = steps.throw(exc)
                else:
                    request = steps.send(answer)
        except StopIteration as end:
            if not vm.dead:
                guest.trap_within(None)
            return end.value
        finally:
            if self._slicing:  # the step ended here
                self._slicing = False
                self._slow = time.thread_time() - started > _SLOW_STEP_SECONDS

    def _go_on(self, steps: Steps, paused: Any) -> _Step:
        """On the run's thread: the rest of a step that paused on the loop."""
        vm = self.vm
        assert vm is not None
        guest = vm.guest
        guest.go_on_until_backstop()
        while not paused.poll(slicing=False):
            pass
        try:
            answer = guest.ended(paused)
        except GUEST_FAILURES as exc:
            return guest.now(steps, error=exc)
        guest.trap_within(None)
        return guest.now(steps, answer)

    async def _on(self, thread: RunThread, fn: Any, *args: Any) -> _Step:
        """Run a step on the worker thread; give up on it at the deadline plus the grace."""
        left = self.deadline + GRACE_SECONDS - time.monotonic()
        try:
            return await thread.call(fn, *args, timeout=left)
        except TimeoutError:
            self._abandon()
            raise _Overrun from None

    def _abandon(self) -> None:
        self.abandoned = True
        if self.vm is not None:
            self.vm.guest.abort()

    def _submit(self, op: Any) -> None:
        if not isinstance(op, dict):
            return
        kind, rid = op.get("op"), op.get("id")
        if kind == "call":
            self.bridge.call(rid, op.get("server"), op.get("tool"), op.get("args"), line=op.get("line"))
        elif kind == "list":
            self.bridge.list(rid, op.get("server"))
        elif kind == "timer":
            self.bridge.timer(rid, op.get("ms"))
        elif kind == "clear":
            self.bridge.clear(rid)

    def _result(self, value: Any, error: RunError | None) -> RunResult:
        if error is None and self.uncaught is not None:
            error = self.uncaught
        notes = []
        if self.bridge.budget_hit and (error is None or error.kind != "call_budget"):
            notes.append(self.errors.call_budget_note(self.bridge.refused_calls))
        return RunResult(
            status="ok" if error is None else "error",
            console=self.console.lines(notes),
            value=value if error is None else None,
            artifacts=list(self.artifacts.blocks),
            error=error,
            tool_calls=self.bridge.tool_calls,
        )

    # -- on the worker thread --

    def _start(self) -> _Step:
        if self.vm is None:
            try:
                self.vm = self._new_vm(self.limits.heap_memory_max_mb)
            except GUEST_FAILURES as exc:
                return _Step(done=True, error=RunError(kind="internal", message=f"could not make a JS VM: {exc}"))
        vm = self.vm
        vm.run = self
        self._guest_deadline(self.deadline)
        try:
            try:
                self._evaluate(self.code)
            except JSError as exc:
                stripped = _strip_typescript(self.code) if _is_compile_error(exc) else None
                if stripped is None:
                    raise
                # Not JavaScript but TypeScript: nothing has run yet, so the VM is clean.
                try:
                    self._evaluate(stripped)
                except JSError as ts_exc:
                    return self._failed(ts_exc, typescript=True)
            return self._settle()
        except GUEST_FAILURES as exc:
            return self._failed(exc)

    def _continue_steps(self, events: str) -> Steps:
        vm = self.vm
        assert vm is not None
        try:
            yield from vm.guest.call_steps(vm.deliver_fn, events)
            return (yield from self._settle_steps())
        except GUEST_FAILURES as exc:
            return self._failed(exc)

    def _timed_out(self) -> _Step:
        self._flush_console()
        return _Step(done=True, error=self.errors.timeout())

    def _evaluate(self, code: str) -> None:
        vm = self.vm
        assert vm is not None
        self._is_promise = _needs_async(code)
        self._top = vm.guest.eval(code, top_level_await=self._is_promise)

    def _settle(self) -> _Step:
        assert self.vm is not None
        return self.vm.guest.now(self._settle_steps())

    def _settle_steps(self) -> Steps:
        """Run the microtasks, then ask the guest for its requests, lines and, when nothing is
        left, its value."""
        vm = self.vm
        assert vm is not None
        guest = vm.guest
        yield from guest.jobs_steps()
        if time.monotonic() >= self.deadline:
            return self._timed_out()
        kind, value = 1, self._top
        if self._is_promise:
            if self._envelope is not None:
                kind, value = 2, self._envelope
            else:
                state = guest.promise_state(self._top)
                if state == FULFILLED:
                    self._envelope = guest.promise_result(self._top)
                    kind, value = 2, self._envelope
                elif state == REJECTED:
                    kind, value = 3, guest.promise_result(self._top)
                else:
                    kind, value = 0, 0
        try:
            text = yield from guest.call_for_text_steps(vm.step_fn, kind, value, self.limits.max_output_bytes)
        finally:
            if kind == 3:
                guest.dispose(value)
        return self._read_step(json.loads(text))

    def _read_step(self, out: Any) -> _Step:
        if not isinstance(out, dict):
            # JSON.stringify of the step's own object answered something else: the script gave
            # every object a toJSON (Object.prototype.toJSON), which the prelude cannot refuse
            return _Step(done=True, error=RunError(
                kind="thrown", message="the run's outcome could not be read: the script changed "
                "what JSON.stringify relies on (such as Object.prototype.toJSON); leave it as it is"))
        for level, text in out.get("console", ()):
            self.console.add(str(level), str(text))
        cut_bytes, cut_lines = out.get("cut", (0, 0))
        self.console.add_cut(int(cut_bytes), int(cut_lines))
        if not out.get("done"):
            return _Step(ops=list(out.get("ops", ())), outstanding=int(out.get("outstanding", 0)))
        if "error" in out:
            err = out["error"]
            return _Step(done=True, error=self._classify(
                str(err.get("name")), str(err.get("message")), str(err.get("stack") or "")))
        if out.get("tooLarge"):
            return _Step(done=True, error=self.errors.output_value())
        return _Step(done=True, value=out.get("value"))

    def _classify(self, name: str, message: str, stack: str) -> RunError:
        vm = self.vm
        if time.monotonic() >= self.deadline:  # interrupted, or failed while reading what was thrown
            return self.errors.timeout()
        if name == "InternalError" and ("out of memory" in message or "string too long" in message):
            return self.errors.memory()
        if vm is not None and message == "null" and vm.guest.near_memory_cap():
            return self.errors.memory()
        return _error_from_js(name, message, stack)

    def _failed(self, exc: BaseException, *, typescript: bool = False) -> _Step:
        """The step's outcome after a call into the guest raised."""
        vm = self.vm
        assert vm is not None
        if isinstance(exc, Interrupted) and (self._here or self._slicing):
            vm.dead = True  # cut short on the caller's loop: no call into it there any more
            if self._here:
                raise _CutShort
        if isinstance(exc, JSError):
            name, message, stack = (list(exc.args) + ["", "", ""])[:3]
            error = self._classify(str(name), str(message), str(stack or ""))
            if typescript:
                error = _note_typescript(error)
        elif time.monotonic() >= self.deadline:
            error = self.errors.timeout()
        elif vm.guest.near_memory_cap():
            error = self.errors.memory()
        elif isinstance(exc, Trap) and "call stack exhausted" in str(exc):
            error = RunError(kind="thrown", message="RangeError: Maximum call stack size exceeded (recursion "
                             "too deep; use a loop or an explicit stack)")
        else:
            error = RunError(kind="internal", message=f"the JS VM failed: {type(exc).__name__}: {exc}")
        # After a trap QuickJS's own state may be half-updated; the wasm sandbox still holds,
        # so one short call for the console lines is safe (it may fail or trap in turn).
        self._flush_console()
        if not isinstance(exc, JSError):
            vm.dead = True
        return _Step(done=True, error=error)

    def _flush_console(self) -> None:
        """Take the console lines the guest still holds, allowing it a moment past a deadline."""
        vm = self.vm
        if vm is None or vm.dead or self.abandoned:
            return
        self._guest_deadline(time.monotonic() + _FLUSH_SECONDS)
        try:
            out = json.loads(vm.guest.call_for_text(vm.step_fn, 0, 0, self.limits.max_output_bytes))
            if not isinstance(out, dict):
                return  # the script broke JSON.stringify (see _read_step): nothing to take
            for level, text in out.get("console", ()):
                self.console.add(str(level), str(text))
            self.console.add_cut(*(int(n) for n in out.get("cut", (0, 0))))
        except (*GUEST_FAILURES, ValueError, TypeError):
            pass  # keep what already arrived
        finally:
            self._guest_deadline(self.deadline)

    def _guest_deadline(self, when: float) -> None:
        """When the guest must stop; on the caller's loop, its epoch also traps it `_HERE_TICKS`
        ticks on."""
        vm = self.vm
        assert vm is not None
        vm.guest.deadline = when
        if self._here:
            vm.guest.trap_within(_HERE_TICKS)

    def close_vm(self) -> None:
        """Free the VM, once no thread uses it (after the run, or after an abandoned run's guest
        returned)."""
        vm, self.vm = self.vm, None
        if vm is None:
            return
        self._envelope = self._top = None  # freed with the VM's store
        vm.close()


class _Overrun(Exception):
    """The guest did not return by the run's deadline plus the grace."""


class _CutShort(Exception):
    """A first step tried on the caller's loop ran past its ticks and was stopped."""


def _needs_async(code: str) -> bool:
    return "await" in code


def _is_compile_error(exc: JSError) -> bool:
    name, _message, stack = (list(exc.args) + ["", "", ""])[:3]
    return name == "SyntaxError" and _COMPILE_FRAME.search(str(stack or "")) is not None


def _strip_typescript(code: str) -> str | None:
    """The script with TypeScript's types removed, or None when it is not TypeScript either."""
    flags = quickjs_rs.SourceTransform.STRIP_TYPESCRIPT | quickjs_rs.SourceTransform.SOURCE_TS
    try:
        stripped = quickjs_rs.transform_source("script.ts", code, flags=flags)
    except Exception:  # the transformer's parse error: keep the JavaScript syntax error
        return None
    return stripped if stripped.strip() and stripped != code else None


def _note_typescript(error: RunError) -> RunError:
    if error.line is None:
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
