"""The bridge against the real test MCP server over stdio (and the runtime itself over HTTP)."""

from __future__ import annotations

import json
import sys
import time

import anyio
import pytest

from runtime.bridge import Bridge, BridgeError
from runtime.config import HttpServer, StdioServer
from tests.fixtures.runtime import TEST_SERVER, runtime_env, start_runtime

pytestmark = pytest.mark.anyio

TEST = StdioServer(command=sys.executable, args=(str(TEST_SERVER),))


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def bridge():
    """One bridge to the test server shared by the module's tests (spawning is the slow part)."""
    async with Bridge({"test": TEST, "other": TEST}) as shared:
        yield shared


def text(result: dict) -> str:
    return result["content"][0]["text"]


async def test_servers_start_lazily_on_first_call() -> None:
    """Configured servers cost nothing until a script uses them (cold start budget)."""
    async with Bridge({"test": TEST}) as bridge:
        assert bridge.running() == []
        assert bridge.known_tools() == {}
        await bridge.call_tool("test", "echo", {"text": "hi"})
        assert bridge.running() == ["test"]
        assert [t.name for t in bridge.known_tools()["test"]][:2] == ["echo", "delay"]


async def test_servers_started_in_background_are_ready_for_the_first_call() -> None:
    """`serve --start-servers` (make up) starts servers ahead; a broken one does not stop the rest."""
    async with Bridge({"test": TEST, "broken": StdioServer(command="/nonexistent")}) as bridge:
        bridge.start_in_background()
        with anyio.fail_after(60):
            while bridge.running() != ["test"]:
                await anyio.sleep(0.05)
        assert bridge.known_tools()["test"]  # listed without any call
        with pytest.raises(BridgeError, match="could not start"):
            await bridge.call_tool("broken", "anything", {})


async def test_call_returns_camelcase_result_dict(bridge: Bridge) -> None:
    """Scripts get the CallToolResult as a plain camelCase object, structuredContent included."""
    result = await bridge.call_tool("test", "echo", {"text": "hello"})
    assert result == {
    "content": [{"type": "text", "text": "hello"}],
    "isError": False,
    "structuredContent": {"text": "hello"},
    }


async def test_capability_is_error_result_is_returned_not_raised(bridge: Bridge) -> None:
    """A tool's own failure is data the script can inspect, not an exception."""
    result = await bridge.call_tool("test", "error", {"message": "nope"})
    assert result["isError"] is True
    assert text(result) == "nope"


async def test_unknown_server_lists_available() -> None:
    """A wrong server name tells the script which servers exist."""
    async with Bridge({"test": TEST, "other": TEST}) as bridge:
        with pytest.raises(BridgeError, match=r"unknown server 'nope'; available servers: other, test"):
            await bridge.call_tool("nope", "echo", {})
        assert bridge.running() == []  # nothing was started to find that out


async def test_unknown_tool_lists_the_servers_tools(bridge: Bridge) -> None:
    """A wrong tool name tells the script which tools that server has."""
    with pytest.raises(BridgeError, match=r"server 'test' has no tool 'ech'; its tools: echo, delay"):
        await bridge.call_tool("test", "ech", {})


async def test_arguments_must_be_an_object(bridge: Bridge) -> None:
    """Passing a non-object as arguments gets a clear error before anything is sent."""
    with pytest.raises(BridgeError, match=r"arguments for test.echo must be an object .* got list"):
        await bridge.call_tool("test", "echo", ["hi"])


def unavailable(result: dict) -> str:
    """The message of an `unavailable` answer (the capabilities' error shape)."""
    assert result["isError"] is True, result
    error = result["structuredContent"]["error"]
    assert error["kind"] == "unavailable", error
    assert result["content"][0]["text"] == f"Error: {error['message']}"
    return error["message"]


async def test_results_of_megabytes_arrive_whole_among_small_ones(bridge: Bridge) -> None:
    """A result of 6 MB (hundreds of reads of the server's pipe) arrives byte for byte while small
    results keep arriving beside it."""
    big = "".join(f"{i:07d}\n" for i in range(750_000))  # newlines, escaped on the wire
    small: list[str] = []

    async def chatter() -> None:
        for i in range(20):
            small.append(text(await bridge.call_tool("test", "echo", {"text": f"small {i}"})))

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            tg.start_soon(chatter)
            result = await bridge.call_tool("test", "echo", {"text": big})
    assert text(result) == big and result["structuredContent"] == {"text": big}
    assert small == [f"small {i}" for i in range(20)]


def test_lines_split_out_of_chunks_whatever_their_cut() -> None:
    """Lines whole whatever the chunks: several in one, one across many, an empty one, and the
    unfinished end kept for the next chunk."""
    from runtime.launch import LineSplitter

    data = b"first\n" + b"x" * 100_000 + b"\n\nlast\nunfinished"
    for size in (1, 7, 4096, 65536, len(data)):
        lines = LineSplitter()
        got = [line for start in range(0, len(data), size) for line in lines.feed(data[start:start + size])]
        assert got == [b"first", b"x" * 100_000, b"", b"last"], size
        assert lines.feed(b" now\n") == [b"unfinished now"]


def test_a_line_past_the_limit_is_refused_not_kept_growing() -> None:
    """A server writing without end (a hostile one: it runs as the desktop user) cannot make the
    runtime hold more than one message's limit of it."""
    from runtime.launch import LineSplitter, LineTooLong

    lines = LineSplitter(max_bytes=100)
    assert lines.feed(b"x" * 60 + b"\n" + b"y" * 90) == [b"x" * 60]  # a whole line may be long
    with pytest.raises(LineTooLong, match="more than 100 bytes"):
        lines.feed(b"y" * 20)


async def test_a_closed_bridge_leaves_no_server_process() -> None:
    """Closing the bridge ends its servers: each is asked to exit (its stdin closed), else its
    process group is stopped."""
    import psutil

    async with Bridge({"test": TEST}) as own:
        pid = int(text(await own.call_tool("test", "pid", {})))
        assert psutil.pid_exists(pid)
    with anyio.fail_after(30):
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            await anyio.sleep(0.05)


async def test_crashed_server_restarts_on_next_call(bridge: Bridge) -> None:
    """A crash fails only the call in flight, as `unavailable`; the next call goes to a fresh
    server and works."""
    first_pid = text(await bridge.call_tool("test", "pid", {}))
    message = unavailable(await bridge.call_tool("test", "crash", {}))
    assert "server 'test' stopped during the call to 'crash'" in message
    assert "may have taken effect" in message and "the next call goes to the new one" in message
    second_pid = text(await bridge.call_tool("test", "pid", {}))
    assert second_pid != first_pid
    assert text(await bridge.call_tool("test", "echo", {"text": "back"})) == "back"


async def test_crash_fails_every_call_in_flight_then_recovers(bridge: Bridge) -> None:
    """Calls in flight when the server dies all get the clear error, none hangs."""
    await bridge.call_tool("test", "pid", {})
    errors: list[str] = []

    async def slow() -> None:
        errors.append(unavailable(await bridge.call_tool("test", "delay", {"seconds": 30})))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(slow)
            await anyio.sleep(0.3)
            unavailable(await bridge.call_tool("test", "crash", {}))
    assert len(errors) == 3 and all("stopped during the call" in e for e in errors)
    assert text(await bridge.call_tool("test", "echo", {"text": "ok"})) == "ok"


async def test_calls_run_concurrently(bridge: Bridge) -> None:
    """Calls issued together overlap on the one session instead of queueing."""
    await bridge.call_tool("test", "pid", {})
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(bridge.call_tool, "test", "delay", {"seconds": 1, "tag": str(i)})
    assert time.monotonic() - started < 4  # serially this would take 8 s


async def test_cancelled_call_sends_mcp_cancellation(bridge: Bridge) -> None:
    """Cancelling the awaiting task sends notifications/cancelled, so the server stops the work."""
    await bridge.call_tool("test", "pid", {})  # started, so the deadline below covers only the call
    with anyio.move_on_after(0.5):
        await bridge.call_tool("test", "delay", {"seconds": 30, "tag": "abandoned"})
    with anyio.fail_after(10):
        while True:  # the notification races the next request; give it a moment
            cancelled = json.loads(text(await bridge.call_tool("test", "cancelled", {})))
            if "abandoned" in cancelled:
                break
            await anyio.sleep(0.05)
    assert cancelled.count("abandoned") == 1


async def test_server_that_cannot_start_gets_a_clear_error() -> None:
    """A broken config entry fails the call with the cause and the command, not a hang."""
    broken = StdioServer(command="/nonexistent/capability")
    async with Bridge({"broken": broken}) as bridge:
        with pytest.raises(BridgeError, match=r"capability server 'broken' could not start: .*command /nonexistent/capability"):
            await bridge.call_tool("broken", "x", {})


async def test_list_tools_of_one_server_and_all() -> None:
    """listTools gives names, descriptions and input schemas, per server or for all."""
    async with Bridge({"test": TEST, "broken": StdioServer(command="/nonexistent")}) as bridge:
        one = await bridge.list_tools("test")
        assert list(one) == ["test"]
        echo = one["test"][0]
        assert echo["name"] == "echo" and echo["description"] == "Return the text."
        assert echo["inputSchema"]["required"] == ["text"]
        every = await bridge.list_tools()
        assert list(every) == ["test", "broken"] and every["broken"] == []
        with pytest.raises(BridgeError, match="unknown server"):
            await bridge.list_tools("nope")


async def test_tools_changed_callback_when_a_server_starts() -> None:
    """Descriptions are regenerated when a server's tools become known."""
    changes: list[int] = []
    async with Bridge({"test": TEST}, on_tools_changed=lambda: changes.append(1)) as bridge:
        await bridge.call_tool("test", "echo", {"text": "x"})
        assert changes == [1]
        await bridge.call_tool("test", "echo", {"text": "y"})
        assert changes == [1]


async def test_http_capability_server_with_headers(tmp_path) -> None:
    """A `{url, headers}` entry reaches a streamable HTTP server, sending the configured headers."""
    with start_runtime(runtime_env(tmp_path), transport="http") as remote:
        good = HttpServer(url=remote.url, headers={"Authorization": f"Bearer {remote.token}"})
        async with Bridge({"remote": good}) as bridge:
            result = await bridge.call_tool("remote", "run_js", {"code": "6 * 7"})
        assert text(result) == "42"
        bad = HttpServer(url=remote.url, headers={"Authorization": "Bearer wrong"})
        async with Bridge({"remote": bad}) as bridge:
            with pytest.raises(BridgeError, match="could not start"):
                await bridge.call_tool("remote", "run_js", {"code": "1"})
