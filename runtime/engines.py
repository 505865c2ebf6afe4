"""The process's sandbox engines, each created once, in a background thread.

`codedesk serve` answers `initialize` before it makes any: the JS engine is begun when the
client first lists the tools or runs a script, and the first run waits for whatever is left.
Begun at the process's start instead, to overlap with the MCP SDK's imports, it slowed the
start down: both are Python work under one GIL, and each file an import read handed the GIL
to the engine's thread, which the importing thread then waited to get back. Paired four times
(benchmarks/bench_runtime.py's measure), `initialize` was answered 55-100 ms later than a bare
server's (as soon now), and the first run_js result came 1.12-1.19x as late as the bare
server's first echo (1.08-1.09x then, 12 alternated pairs twice; as much when the client
lists the tools first). Begun as the server starts serving, or at `initialize`, it was later
too (1.15-1.17x against 1.10x, 8 alternated pairs): until the engine sets its shorter switch
interval, each read or write of the loop handed the GIL to the engine's thread for 5 ms, and
nothing idles between `initialize` and the first request but the client's turnaround.
The engine's making is trimmed instead (`_create`, `sandbox._jsmodule`): 1.095x -> 1.063x
(paired, 24 alternated starts).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import threading
from concurrent.futures import Future
from typing import Any


_engines: dict[str, Future[Any]] = {}
_lock = threading.Lock()

MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter


def bound_malloc_arenas() -> None:
    """Let glibc's malloc keep at most `MALLOC_ARENAS` heaps. By default each thread that
    allocates while another does gets a heap of its own, up to eight per core, and the runs'
    many threads leave each one fragmented: over 2,400 generated scripts the runtime grew from
    130 MB to 480 MB, against 230 MB with two. Call before the process starts threads; an
    operator's `MALLOC_ARENA_MAX` is left as set."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    try:
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, MALLOC_ARENAS)
    except (OSError, AttributeError):  # not glibc: its allocator has its own rules
        pass


def _create(language: str) -> Any:
    import sandbox

    if language != "js":
        return sandbox.PyEngine()  # without its cache it compiles for a minute: collected meanwhile
    # As the process's start (runtime.cli, runtime.server.heap_settled): its imports make some
    # 16,000 objects that live as long as the process, made without collections (collected as
    # they piled up, they took 1.5-2 ms of a cold start's first run), then out of the
    # collector's sight, so no later collection walks them. What other tasks hold at that
    # moment is frozen with them: a request or two, once.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return sandbox.JsEngine()
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


def prepare(language: str) -> Future[Any]:
    """Start creating the engine for `language` ("js" or "py") unless already started."""
    with _lock:
        future = _engines.get(language)
        if future is None:
            future = _engines[language] = Future()

            def work() -> None:
                try:
                    future.set_result(_create(language))
                except BaseException as exc:  # handed to whoever awaits the engine
                    future.set_exception(exc)

            threading.Thread(target=work, name=f"codedesk-{language}-engine", daemon=True).start()
        return future


async def engine(language: str) -> Any:
    """The engine for `language`, waiting for its creation without blocking the event loop (nor
    taking a worker thread: the creating thread's result is handed to the loop). A caller that is
    cancelled stops waiting; the creation goes on for the next."""
    future = prepare(language)
    if future.done():
        return future.result()
    return await asyncio.shield(asyncio.wrap_future(future))
