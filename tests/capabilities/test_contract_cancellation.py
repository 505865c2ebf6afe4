"""A call the client cancels stops its work, through the one tie in `capabilities/contract.py`:
a server built on the contract's registry gets it without code of its own. Real MCP server and
client over in-memory streams; real threads and processes."""

from __future__ import annotations

import subprocess
import threading
import time

import anyio
import pytest
from mcp import Client, ClientSession
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams
from pydantic import BaseModel, ConfigDict

from capabilities.contract import ToolRegistry, ToolSpec, current_cancellation, success


class Seconds(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float


class Seen:
    """What the tools' work did, read by the tests from outside the server."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.stopped_at = 0.0
        self.process: subprocess.Popen | None = None

    def stop(self) -> None:
        self.stopped_at = time.monotonic()
        self.stopped.set()


def _sleep_in_thread(seen: Seen, seconds: float) -> None:
    try:
        current_cancellation().sleep(seconds)
    finally:
        seen.stop()


def _child_in_thread(seen: Seen, seconds: float) -> None:
    process = subprocess.Popen(["sleep", str(seconds)])
    seen.process = process
    try:
        with current_cancellation().on_cancel(process.kill):
            process.wait()
        current_cancellation().check()
    finally:
        seen.stop()


def _tool(name: str, body) -> ToolSpec[Seen]:
    async def run(seen: Seen, args: Seconds):
        await anyio.to_thread.run_sync(body, seen, args.seconds)  # no abandon: the call waits for it
        return success({"done": True}, "done")

    return ToolSpec(name=name, description=name, args=Seconds, output={"type": "object"}, run=run)


REGISTRY = ToolRegistry("demo", [_tool("sleep", _sleep_in_thread), _tool("child", _child_in_thread)])


def _server(seen: Seen) -> Server[Seen]:
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(_: Server[Seen]):
        yield seen

    return Server("demo", lifespan=lifespan, on_list_tools=REGISTRY.on_list_tools,
                  on_call_tool=REGISTRY.on_call_tool)


async def _cancel_after(seen: Seen, tool: str, seconds: float) -> float:
    """Call `tool` for 30 s, give up on it after `seconds` (the SDK then sends
    notifications/cancelled); return when the cancel went out."""
    async with Client(_server(seen), mode="legacy") as client:
        with anyio.move_on_after(seconds):
            await client.call_tool(tool, {"seconds": 30})
        cancelled_at = time.monotonic()
        # The server is free for the next call once the work stopped.
        await anyio.to_thread.run_sync(seen.stopped.wait, 10)
        return cancelled_at


@pytest.mark.parametrize("tool", ["sleep", "child"])
def test_a_cancelled_call_stops_its_blocking_work(tool: str) -> None:
    """A worker thread's wait and a child process end when the client cancels the call, not
    when the work would have ended: the server is free again for everyone."""
    seen = Seen()
    cancelled_at = anyio.run(_cancel_after, seen, tool, 0.5)
    assert seen.stopped.is_set()
    assert seen.stopped_at - cancelled_at < 1.0
    if tool == "child":
        assert seen.process is not None and seen.process.poll() is not None  # killed, reaped


async def _close_during(seen: Seen, tool: str, seconds: float) -> float:
    """Call `tool` for 30 s and close the connection under it after `seconds` (no cancel is
    sent: the client just goes away); return when it closed."""
    server = _server(seen)
    async with create_client_server_memory_streams() as ((client_read, client_write), (server_read, server_write)):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(server.run, server_read, server_write, server.create_initialization_options())
            async with ClientSession(client_read, client_write) as session:
                await session.initialize()

                async def call() -> None:
                    try:
                        await session.call_tool(tool, {"seconds": 30})
                    except MCPError:
                        pass  # the connection closed under it, as expected

                tasks.start_soon(call)
                await anyio.sleep(seconds)
                closed_at = time.monotonic()
                await client_write.aclose()
                await anyio.to_thread.run_sync(seen.stopped.wait, 10)
            return closed_at


@pytest.mark.parametrize("tool", ["sleep", "child"])
def test_a_call_whose_connection_closes_stops_its_blocking_work(tool: str) -> None:
    """A client that goes away without cancelling (it crashed, its pipe closed) leaves no work
    running in the server: the server would otherwise wait for it before it can exit."""
    seen = Seen()
    closed_at = anyio.run(_close_during, seen, tool, 0.5)
    assert seen.stopped.is_set()
    assert seen.stopped_at - closed_at < 1.0
    if tool == "child":
        assert seen.process is not None and seen.process.poll() is not None


def test_outside_a_call_work_is_never_cancelled() -> None:
    """Code run outside a call (benchmarks, direct use) gets a cancellation that never fires."""
    cancellation = current_cancellation()
    assert not cancellation.cancelled
    cancellation.sleep(0.01)
    cancellation.check()
