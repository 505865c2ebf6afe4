"""Remembered tool listings: descriptions show every server's tools without starting servers."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import anyio
import pytest

from runtime.config import StdioServer
from runtime.server import Runtime
from tests.fixtures.runtime import TEST_SERVER

pytestmark = pytest.mark.anyio

TEST = StdioServer(command=sys.executable, args=(str(TEST_SERVER),))


async def test_listing_is_remembered_for_the_next_process(tmp_path) -> None:
    """Once a server ran, a later runtime describes its tools without starting it."""
    cache = tmp_path / "tools.json"
    async with Runtime({"test": TEST}, listing_cache=cache) as first:
        assert '// test: its tools are listed by await mcp.describe("test")' in first.tools()[0].description
        await first.bridge.call_tool("test", "pid", {})
        assert "echo({text: string})" in first.tools()[0].description
    assert cache.exists()
    async with Runtime({"test": TEST}, listing_cache=cache) as second:
        assert "echo({text: string})  -- Return the text." in second.tools()[0].description
        assert "echo(text: str)" in second.tools()[1].description
        assert second.bridge.running() == []


async def test_changed_config_ignores_the_remembered_listing(tmp_path) -> None:
    """A server whose command changed may have other tools: its old listing is not shown."""
    cache = tmp_path / "tools.json"
    async with Runtime({"test": TEST}, listing_cache=cache) as first:
        await first.bridge.call_tool("test", "pid", {})
    changed = StdioServer(command=sys.executable, args=(str(TEST_SERVER), "--other"))
    async with Runtime({"test": changed}, listing_cache=cache) as second:
        assert '// test: its tools are listed by await mcp.describe("test")' in second.tools()[0].description


async def test_unreadable_cache_is_ignored(tmp_path) -> None:
    """A corrupt cache file never stops the runtime from serving."""
    cache = tmp_path / "tools.json"
    cache.write_text("{not json")
    async with Runtime({"test": TEST}, listing_cache=cache) as runtime:
        assert '// test: its tools are listed by await mcp.describe("test")' in runtime.tools()[0].description
        result = await runtime.run("js", {"code": '(await mcp.callTool("test", "echo", {text: "ok"})).content[0].text'})
        assert result.content[0].text == "ok"
    assert '"echo"' in cache.read_text()


async def test_a_remembered_builtin_listing_answers_the_first_tools_list_at_once(tmp_path) -> None:
    """A restarted runtime (a container's `docker start`) must not hold its first tools/list
    until every built-in server has started: the remembered listing answers, servers start after."""
    from runtime.config import builtin_servers

    cache = tmp_path / "tools.json"
    async with Runtime(builtin_servers(), listing_cache=cache) as first:
        tools = await first.listed_tools()
        assert "declare namespace tools.exec {" in tools[0].description  # listed, servers started
    async with Runtime(builtin_servers(), listing_cache=cache) as second:
        tools = await second.listed_tools()
        assert "declare namespace tools.exec {" in tools[0].description
        assert "declare namespace tools.documents {" in tools[0].description
        assert second.bridge.running() == []  # answered before any server was up


async def test_a_remembered_listing_starts_no_server(tmp_path) -> None:
    """A runtime that remembers the built-in servers' tools starts none of them to check: six
    servers starting at once took seconds of both cores from the first runs of a cold start.
    They start when a script first calls them."""
    from runtime.config import builtin_servers

    cache = tmp_path / "tools.json"
    async with Runtime(builtin_servers(), listing_cache=cache) as first:
        await first.listed_tools()
    async with Runtime(builtin_servers(), listing_cache=cache) as second:
        await second.listed_tools()
        await anyio.sleep(8)  # long enough for every server to have started and listed
        assert second.bridge.running() == []
        result = await second.run("js", {"code": 'await mcp.callTool("session", "timeline_query", {limit: 1}); 1'})
        assert not result.is_error, result.content[0].text
        assert second.bridge.running() == ["session"]


def test_a_remembered_listing_counts_for_this_version_of_codedesk_only(tmp_path, monkeypatch) -> None:
    """An upgrade may change what the same command serves: its listings are made afresh."""
    from runtime import listing_cache, version

    cache = tmp_path / "tools.json"
    servers = {"test": TEST}
    listing_cache.save(cache, servers, {"test": [{"name": "echo"}]})
    assert listing_cache.load(cache, servers) == {"test": [{"name": "echo"}]}
    monkeypatch.setattr(listing_cache, "version", lambda: version() + ".next")
    assert listing_cache.load(cache, servers) == {}


def test_a_runtime_that_may_not_write_the_data_directory_remembers_in_its_own_cache(tmp_path, monkeypatch) -> None:
    """The container's runtime is not root and does not own /data: it must still remember, in a
    folder of its own (run here as the unprivileged desktop user, over a root-owned data dir)."""
    import pwd
    import subprocess
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root, to run the runtime's code as another user over root's data dir")
    data = Path(tempfile.mkdtemp(prefix="codedesk-cache-test-", dir="/tmp"))
    data.chmod(0o755)
    try:
        probe = "from runtime import listing_cache; print(listing_cache.default_path())"
        user = pwd.getpwnam("desktop")
        done = subprocess.run(
            ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
             sys.executable, "-c", probe],
            env={"CODEDESK_DATA": str(data), "XDG_CACHE_HOME": "/tmp/codedesk-cache-test-home",
                 "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60, cwd="/")
        assert done.returncode == 0, done.stderr
        path = Path(done.stdout.strip())
        assert path.parent == Path("/tmp/codedesk-cache-test-home/codedesk") and path.name.startswith("tools-")
    finally:
        data.rmdir()
    from runtime import listing_cache  # and root, who may write there, keeps it in the data dir

    monkeypatch.setenv("CODEDESK_DATA", str(tmp_path))
    assert listing_cache.default_path() == tmp_path / "runtime" / "tools.json"


async def test_a_scripts_listing_is_made_once_while_the_servers_stay_up(tmp_path) -> None:
    """listTools in a loop must not make the shared event loop render every declaration again:
    the same answer serves until a server restarts, which brings a fresh one (and the server)."""
    async with Runtime({"test": TEST}, listing_cache=tmp_path / "tools.json") as runtime:
        first = await runtime.list_for_guest("js", "test")  # starts the server
        again = await runtime.list_for_guest("js", "test")
        assert await runtime.list_for_guest("js", "test") is again
        assert first["test"] == again["test"] and "declaration" in again["test"][0]
        pid = (await runtime.bridge.call_tool("test", "pid", {}))["content"][0]["text"]
        assert (await runtime.bridge.call_tool("test", "crash", {}))["isError"]
        for _ in range(100):  # the link notices the exit
            if not runtime.bridge.serving("test"):
                break
            await anyio.sleep(0.05)
        after = await runtime.list_for_guest("js", "test")
        assert after is not again and after["test"] == again["test"]
        assert runtime.bridge.serving("test")  # listing started the server again
        assert (await runtime.bridge.call_tool("test", "pid", {}))["content"][0]["text"] != pid
        stub = (await runtime.list_for_guest("py", "test"))["test"][0]["declaration"]
        assert "def echo(*, text: str) -> Any:" in stub
        compile(stub, "<the declaration mcp.describe gives run_py>", "exec")  # valid Python


async def test_listings_asked_for_at_once_are_made_once(tmp_path, monkeypatch) -> None:
    """A script's 160 listTools at once wait for one listing instead of each making its own (and
    the sandbox serializing each): that held the shared event loop for 1.7 s, and every run of
    the process answered late. A listing whose run was cancelled is made by the next who asks."""
    async with Runtime({"test": TEST}, listing_cache=tmp_path / "tools.json") as runtime:
        made = 0
        real = runtime.bridge.list_tools

        async def counted(server=None):
            nonlocal made
            made += 1
            await anyio.sleep(0.05)  # long enough for every caller to arrive while it is made
            return await real(server)

        monkeypatch.setattr(runtime.bridge, "list_tools", counted)
        answers = await asyncio.gather(*(runtime.list_for_guest("js") for _ in range(160)))
        assert made == 1 and all(answer is answers[0] for answer in answers)
        runtime._guest_listings.clear()  # as when a server restarts
        first = asyncio.ensure_future(runtime.list_for_guest("js"))
        await anyio.sleep(0.01)
        waiting = asyncio.ensure_future(runtime.list_for_guest("js"))
        await anyio.sleep(0.01)
        first.cancel()  # its run ended: the one waiting makes the listing itself
        assert "test" in await waiting and made == 3
