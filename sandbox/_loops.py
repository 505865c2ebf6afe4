"""Threads that run guest code, one run at a time each, and are retired when a run overruns.

A JavaScript run's guest steps (evaluate, run jobs, deliver completions) that take longer than
the caller's event loop lends them (a few milliseconds, `sandbox.js`) execute on a `RunThread`:
a script that computes for seconds without awaiting holds that thread only, and the server's
loop keeps answering other clients and runs.

A run whose step does not return by its deadline is abandoned: its thread is `retire`d, so no
later run is ever queued behind it, and when the step finally returns (the guest is told to
stop at its next interrupt poll; a long loop inside one C builtin may take longer) the thread
runs the run's clean-up, which closes its VM on the thread that used it, and exits.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = object()


class RunThread:
    """A thread that runs submitted functions in order."""

    def __init__(self, name: str) -> None:
        self.busy = False  # taken by a run
        self.retired = False
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            fn, args, waiting = job
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the waiting caller
                if waiting is not None:
                    _answer(waiting, None, exc)
            else:
                if waiting is not None:
                    _answer(waiting, result, None)

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` after what is queued, with no one waiting for it."""
        self._jobs.put((fn, args, None))

    async def call(self, fn: Callable[..., Any], *args: Any, timeout: float) -> Any:
        """Await `fn(*args)` run on this thread; TimeoutError after `timeout` seconds (the
        call goes on: `retire` the thread then). Cancelling the await leaves it running too.

        The answer comes back as one callback on the loop into a future of its own (no
        `concurrent.futures.Future`, `wrap_future`, `shield` and `wait_for` chained: a run makes
        one such call per step, a tool call's answer another)."""
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        self._jobs.put((fn, args, (loop, answer)))
        expiry = loop.call_later(max(0.0, timeout), _expire, answer)
        try:
            return await answer
        finally:
            expiry.cancel()

    def stop(self, cleanup: Callable[[], Any] | None = None) -> None:
        """Run `cleanup` once the work in hand is done, then end the thread."""
        if cleanup is not None:
            self.post(cleanup)
        self._jobs.put(_STOP)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def yield_cpu(self) -> None:
        """Give this thread the lowest CPU priority (Linux: a thread's own nice value): a guest
        it can no longer stop then takes only time the live runs leave."""
        native_id = self._thread.native_id
        try:
            if native_id is not None:
                os.setpriority(os.PRIO_PROCESS, native_id, 19)
        except (AttributeError, OSError):  # not Linux, or not allowed: it keeps its priority
            pass


def _answer(waiting: tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]], result: Any,
            error: BaseException | None) -> None:
    """From a run thread: settle a `RunThread.call`'s future on its loop (unless it stopped waiting)."""
    loop, answer = waiting
    try:
        loop.call_soon_threadsafe(_settle, answer, result, error)
    except RuntimeError:  # the loop is closed: nobody waits any more
        pass


def _settle(answer: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if answer.done():  # timed out, or the caller was cancelled
        return
    if error is not None:
        if isinstance(error, StopIteration):  # which a future refuses to hold
            error = RuntimeError(f"StopIteration raised on a run thread: {error!r}")
        answer.set_exception(error)
    else:
        answer.set_result(result)


def _expire(answer: asyncio.Future[Any]) -> None:
    if not answer.done():
        answer.set_exception(TimeoutError())


class RunThreads:
    """Threads for runs, made as runs need them: a run takes an idle thread, or a new one.

    Up to `max_threads` exist at once; past that, runs share the threads (each still ends by its
    own deadline, since an overrunning thread is retired and replaced).
    """

    def __init__(self, max_threads: int, name: str) -> None:
        self._max = max_threads
        self._name = name
        self._idle: list[RunThread] = []
        self._all: list[RunThread] = []
        self._made = 0
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self) -> RunThread:
        with self._lock:
            if self._idle:
                chosen = self._idle.pop()
            elif len(self._all) < self._max or not self._all:
                self._made += 1
                chosen = RunThread(f"{self._name}-{self._made}")
                self._all.append(chosen)
            else:  # all busy and at the cap: share the one made longest ago
                chosen = self._all[0]
            chosen.busy = True
            return chosen

    def release(self, thread: RunThread) -> None:
        with self._lock:
            thread.busy = False
            if not thread.retired and not self._closed and thread not in self._idle:
                self._idle.append(thread)

    def retire(self, thread: RunThread, cleanup: Callable[[], Any]) -> None:
        """Never hand `thread` to a run again; when its work in hand ends, run `cleanup` there
        and end the thread."""
        with self._lock:
            thread.retired = True
            if thread in self._idle:
                self._idle.remove(thread)
            if thread in self._all:
                self._all.remove(thread)
        thread.yield_cpu()  # a guest still running there must not slow the runs that follow
        thread.stop(cleanup)

    def close(self) -> None:
        """End every thread once its work in hand is done (a thread stuck in a run is left
        to end by itself)."""
        with self._lock:
            self._closed = True
            threads, self._all, self._idle = self._all, [], []
        for t in threads:
            t.stop()
        for t in threads:
            t.join(timeout=5)
