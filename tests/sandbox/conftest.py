"""Sandbox fixtures: one engine of each kind for the whole session, and a small in-process
tool host (the `call_tool` / `list_tools` callables the runtime hands a run)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import gc
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sandbox import JsEngine, PyEngine
from sandbox._loops import RunThread

# A 1x1 transparent PNG.
PNG_1PX = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    # quickjs-rs drives its promises with asyncio.
    return "asyncio"


@pytest.fixture(scope="session")
def js_engine() -> Iterator[JsEngine]:
    with JsEngine() as engine:
        yield engine


async def vm_made_ahead(engine: JsEngine) -> None:
    """Wait until the engine holds a VM made ahead: the next run takes it and tries its first step
    on the caller's loop (a run that must make its own VM starts on its thread)."""
    deadline = time.monotonic() + 10
    while not engine._pool and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert engine._pool, "no VM was made ahead within 10 s"


@contextlib.contextmanager
def left_to_the_collector(*modules: str) -> Iterator[list[object]]:
    """The objects of `modules`' types that the block leaves in reference cycles (what only the
    garbage collector would free), in the list yielded, filled in as the block ends. ctypes'
    arrays and array types are left out: the libraries make some per call."""
    found: list[object] = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(o for o in gc.garbage
                     if type(o).__module__.startswith(modules) and not isinstance(o, type | ctypes.Array))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.fixture
def thread_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions the JS runs of this test hand to a run thread (`RunThread.call`:
    a step, or the rest of one), in order."""
    hops: list[str] = []
    call = RunThread.call

    async def counted(thread: RunThread, fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(fn, "__name__", "?"))
        return await call(thread, fn, *args, **kwargs)

    monkeypatch.setattr(RunThread, "call", counted)
    return hops


@pytest.fixture(scope="session")
def py_engine() -> Iterator[PyEngine]:
    with PyEngine() as engine:
        yield engine


@dataclass
class ToolHost:
    """Tools of a pretend capability server `t`: echo, delay, image, big (a text of `bytes`
    bytes), error (an isError result),
    hang (sleeps until cancelled, and records the cancellation; with `tidy_seconds`, it then
    tidies up that long, as an MCP client sends notifications/cancelled, and records that it
    finished: a second cancel cuts the tidying short). Any other server fails as the bridge
    would."""

    calls: list[tuple[str, str, dict]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    started: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    tidied: list[str] = field(default_factory=list)

    async def call_tool(self, server: str, tool: str, args: dict) -> dict:
        self.calls.append((server, tool, args))
        if server != "t":
            raise LookupError(f"unknown server {server!r}; connected servers: t")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if tool == "echo":
                await asyncio.sleep(0)
                return {"content": [{"type": "text", "text": json.dumps(args)}]}
            if tool == "delay":
                await asyncio.sleep(args.get("seconds", 0.1))
                return {"content": [{"type": "text", "text": "done"}]}
            if tool == "image":
                return {"content": [{"type": "text", "text": "{}"},
                                    {"type": "image", "data": PNG_1PX, "mimeType": "image/png"}]}
            if tool == "big":
                return {"content": [{"type": "text", "text": "x" * args["bytes"]}]}
            if tool == "error":
                return {"content": [{"type": "text", "text": "it failed"}], "isError": True}
            if tool == "hang":
                self.started.append(args.get("tag", ""))
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    self.cancelled.append(args.get("tag", ""))
                    if "tidy_seconds" in args:
                        await asyncio.sleep(args["tidy_seconds"])
                        self.tidied.append(args.get("tag", ""))
                    raise
                self.finished.append(args.get("tag", ""))
                return {"content": []}
            raise LookupError(f"unknown tool t.{tool}; tools: echo, delay, image, error, hang")
        finally:
            self.in_flight -= 1

    async def list_tools(self, server: str | None) -> dict:
        tools = [{"name": name, "description": f"{name} tool",
                  "inputSchema": {"type": "object"}}
                 for name in ("echo", "delay", "image", "error", "hang")]
        if server not in (None, "t"):
            raise LookupError(f"unknown server {server!r}; connected servers: t")
        return {"t": tools}

    def kwargs(self) -> dict[str, Any]:
        return {"call_tool": self.call_tool, "list_tools": self.list_tools}


ODD_ANSWER = {"content": [], "nan": float("nan"), "inf": float("-inf"), "lone": "a\ud800b",
              "text": "é€😀", "big": "y" * 3_000_000}


async def odd_results(server: str, tool: str, args: dict) -> dict:
    """A `call_tool` whose tool `odd` answers what JSON has not (NaN, an infinity), a lone
    surrogate, text of several scripts and 3 MB of it (`ODD_ANSWER`); any other tool answers a
    value JSON cannot hold."""
    return ODD_ANSWER if tool == "odd" else {"content": [], "what": object()}


@pytest.fixture
def tools() -> ToolHost:
    return ToolHost()


class LineRecorder:
    """A `call_tool` that keeps, for each call, its `n` argument and the script line the sandbox
    gave it (`CALL_LINE`), and answers "ok"."""

    def __init__(self) -> None:
        self.lines: list[tuple[str | None, int | None]] = []

    async def call_tool(self, server: str, tool: str, args: dict) -> dict:
        from sandbox import CALL_LINE

        self.lines.append((args.get("n"), CALL_LINE.get()))
        return {"content": [{"type": "text", "text": "ok"}], "structuredContent": {}}


@pytest.fixture
def line_recorder() -> LineRecorder:
    return LineRecorder()


async def cut_off(start: Callable[..., Awaitable[Any]], tools: ToolHost, how: str, timeout_seconds: float) -> None:
    """End a run whose call hangs, `how`: at its timeout (`start(timeout_seconds=...)`), or by
    its caller giving up (`start()`, cancelled once the call started); then wait for the call to
    be done cancelling (the caller's cancel leaves it to finish unwaited-for)."""
    if how == "timeout":
        result = await start(timeout_seconds=timeout_seconds)
        assert result.error.kind == "timeout"
        return
    task = asyncio.ensure_future(start())
    while not tools.started:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if tools.tidied:
            break
        await asyncio.sleep(0.01)
