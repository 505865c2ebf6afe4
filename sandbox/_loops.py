"""Event loops on threads of their own, and awaiting work across loops.

A JavaScript run executes on one of `RunLoops`' threads, not on the caller's event loop, so a
script that computes for seconds without awaiting holds its own thread only: the server's loop
keeps answering other clients and other runs. The run's tool calls go back to the caller's
loop, where the MCP sessions live, through `on_loop`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def on_loop(target: asyncio.AbstractEventLoop, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Await `fn(*args)` run as a task on `target`, another thread's loop.

    Its result or exception comes back here. Cancelling the awaiting task cancels that task
    too, and waits until it has wound down there (its own cleanup, such as an MCP
    cancellation, done) before the cancellation goes on here.
    """
    here = asyncio.get_running_loop()
    outcome: asyncio.Future[T] = here.create_future()
    started: list[asyncio.Task[T]] = []

    def deliver(task: asyncio.Task[T]) -> None:
        if outcome.done():
            return
        if task.cancelled():
            outcome.cancel()
        elif (exc := task.exception()) is not None:
            outcome.set_exception(exc)
        else:
            outcome.set_result(task.result())

    def start() -> None:
        task = target.create_task(fn(*args))  # type: ignore[arg-type]
        started.append(task)
        task.add_done_callback(lambda t: here.call_soon_threadsafe(deliver, t))

    target.call_soon_threadsafe(start)
    try:
        return await asyncio.shield(outcome)
    except asyncio.CancelledError:
        # `start` was queued on `target` before this, so the task exists when this runs.
        target.call_soon_threadsafe(lambda: started[0].cancel())
        try:
            await outcome
        except BaseException:  # its outcome is moot: this task is being cancelled
            pass
        raise


class _LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.active = 0
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class RunLoops:
    """Up to `max_threads` threads with an event loop each, started as runs need them.

    A run takes a thread no other run is using when there is one, so a run that computes
    without awaiting slows no other run until `max_threads` of them do at once.
    """

    def __init__(self, max_threads: int, name: str) -> None:
        self._max = max_threads
        self._name = name
        self._threads: list[_LoopThread] = []
        self._lock = threading.Lock()

    def acquire(self) -> _LoopThread:
        with self._lock:
            idle = [t for t in self._threads if t.active == 0]
            if idle:
                chosen = idle[0]
            elif len(self._threads) < self._max:
                chosen = _LoopThread(f"{self._name}-{len(self._threads) + 1}")
                self._threads.append(chosen)
            else:
                chosen = min(self._threads, key=lambda t: t.active)
            chosen.active += 1
            return chosen

    def release(self, thread: _LoopThread) -> None:
        with self._lock:
            thread.active -= 1

    def close(self) -> None:
        """Stop every loop. Runs still going on them are abandoned."""
        with self._lock:
            threads, self._threads = self._threads, []
        for t in threads:
            t.stop()
