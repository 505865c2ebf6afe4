"""The bridge: one MCP client session per capability server, used by scripts' `mcp.callTool`.

A server may also be served in this process (`local`, over memory streams): the runtime's own
`session` server. Servers start lazily, on the first call or listing that needs them. Calls run concurrently
over the one session. A capability's own `isError` result is returned as data, never raised.

Servers come back by themselves. The bridge notices at once when a server's connection ends
(its process died) and starts it again in the background, after a pause that grows with each
death in a row (`RESTART_BACKOFF_SECONDS`), so the next call finds the new one. A call sent to a
server that had already died is sent again to the new one (it never ran); a call in flight
when its server died answers an `unavailable` error saying the action may have happened. A
server that died `CRASH_LOOP_DEATHS` times in a row (no call answered in between) within
`CRASH_LOOP_WINDOW_SECONDS` is crash-looping:
it is left stopped, and calls answer `unavailable` with the last lines of its stderr and what
to do, until `CRASH_LOOP_PAUSE_SECONDS` have passed (then one call tries it again).

Errors: every failure of the bridge itself is a `BridgeError`, whose message is written for
the script's author (what failed, what exists, what to do next); the lower-layer exception
stays as `__cause__`.
"""

from __future__ import annotations

import logging
import os
import select
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from capabilities import wire

from .config import HttpServer, ServerConfig, StdioServer

logger = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 60.0
"""How long a capability server may take from spawn to an answered `tools/list`."""
RESTART_BACKOFF_SECONDS = (0.0, 0.5, 1.0, 2.0, 4.0)
"""The pause before restarting a server that died, by how many times it died in a row."""
CRASH_LOOP_DEATHS = 5
CRASH_LOOP_WINDOW_SECONDS = 60.0
CRASH_LOOP_PAUSE_SECONDS = 30.0
STDERR_LINES = 20
"""How many of a server's last stderr lines an `unavailable` error shows."""

ToolListing = dict[str, list[dict[str, Any]]]
"""`{server: [{name, description, inputSchema}, ...]}`, the shape scripts see from listTools."""


class BridgeError(Exception):
    """A call could not reach its capability; the message is what the script's author reads."""


def result_to_dict(result: types.CallToolResult) -> dict[str, Any]:
    """A CallToolResult as the plain camelCase object scripts receive."""
    out: dict[str, Any] = {
        "content": [block.model_dump(by_alias=True, mode="json", exclude_none=True) for block in result.content],
        "isError": bool(result.is_error),
    }
    if result.structured_content is not None:
        out["structuredContent"] = result.structured_content
    return out


def tool_to_dict(tool: types.Tool) -> dict[str, Any]:
    """A tool's name, description, input and output schemas, as scripts and descriptions see them."""
    out: dict[str, Any] = {"name": tool.name, "description": tool.description or "", "inputSchema": tool.input_schema}
    if tool.output_schema is not None:
        out["outputSchema"] = tool.output_schema
    return out


class _Health:
    """What the bridge remembers of one server across its processes: when it died, and the
    last lines it wrote to stderr."""

    def __init__(self) -> None:
        self.deaths: deque[float] = deque(maxlen=CRASH_LOOP_DEATHS)
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._partial = ""

    def died(self) -> None:
        self.deaths.append(time.monotonic())

    def answered(self) -> None:
        """A call got its answer: the deaths before it were not a loop."""
        self.deaths.clear()

    def in_a_row(self) -> int:
        """Deaths since the last answered call, within the crash-loop window."""
        now = time.monotonic()
        return sum(1 for t in self.deaths if now - t < CRASH_LOOP_WINDOW_SECONDS)

    def crash_looping(self) -> bool:
        if self.in_a_row() < CRASH_LOOP_DEATHS:
            return False
        return time.monotonic() - self.deaths[-1] < CRASH_LOOP_PAUSE_SECONDS

    def heard(self, text: str) -> None:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()[-2000:]
        self.stderr.extend(line[-2000:] for line in lines if line.strip())

    def tail(self) -> str:
        lines = [*self.stderr, *([self._partial] if self._partial.strip() else [])]
        return "\n".join(lines[-STDERR_LINES:]) or "(it wrote nothing to stderr)"


class _EndWatch:
    """A transport's read stream that says when it ends (the server's process is gone)."""

    def __init__(self, stream: Any, on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> "_EndWatch":
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> "_EndWatch":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._stream.aclose()

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __getattr__(self, name: str) -> Any:  # last_context and the rest of the stream's surface
        return getattr(self._stream, name)


class _Link:
    """One live client session to one server process (or HTTP endpoint).

    Its task owns the transport and the session (anyio context managers must be left in the
    task that entered them); callers use `session` once `ready` is set. A link is never
    revived: after it breaks, the bridge makes a new one. `died` is set when the server went
    away by itself (not by `close()`).
    """

    def __init__(self, name: str, config: ServerConfig, health: _Health,
                 on_list_changed: Callable[[], None], on_died: Callable[[], None],
                 local: LocalServer | None = None) -> None:
        self.name = name
        self.config = config
        self.local = local
        self.health = health
        self.session: ClientSession | None = None
        self.tools: list[types.Tool] = []
        self.error: BaseException | None = None
        self.ready = anyio.Event()
        self.broken = False
        self.died = False
        self._stop = anyio.Event()
        self._pidfd: int | None = None
        self._on_list_changed = on_list_changed
        self._on_died = on_died

    def close(self) -> None:
        """Ask the link's task to shut the session and the server down."""
        self.broken = True
        self._stop.set()

    def ended(self) -> None:
        """The server went away by itself (its stream ended, or its process did)."""
        if not self._stop.is_set():
            # Only a server that served dies; one that never answered failed to start.
            self.died = self.ready.is_set()
            self.broken = True
            self._stop.set()

    async def run(self) -> None:
        """Connect, initialize, list tools, then hold the session until `close()` or the
        server's end."""
        try:
            async with AsyncExitStack() as stack:
                tg = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(tg.cancel_scope.cancel)  # the stderr reader, once all else is shut
                spawned = isinstance(self.config, StdioServer) and self.local is None
                errlog = self._stderr(tg) if spawned else sys.stderr
                before = _children()
                try:
                    read, write = await stack.enter_async_context(self._transport(errlog))
                finally:
                    if errlog is not sys.stderr:
                        errlog.close()  # the server has its copy
                read = _EndWatch(wire.ReadableStream(read), self.ended)
                session = await stack.enter_async_context(ClientSession(read, write, message_handler=self._on_message))
                # Only plain awaits inside the deadline: a cancel scope must not wrap entered task groups.
                with anyio.fail_after(START_TIMEOUT_SECONDS):
                    await session.initialize()
                    self.tools = await _list_all_tools(session)
                self._watch_process(_children() - before, stack)
                self.session = session
                self.ready.set()
                await self._stop.wait()
        except Exception as exc:  # a start failure or a teardown error: never let it reach the task group
            if not self.ready.is_set():
                self.error = exc
            else:
                logger.debug("capability server %r link ended: %r", self.name, exc)
        finally:
            self.broken = True
            self.session = None
            self.ready.set()
        if self.died or self.error is not None:  # a death, or a start that failed: both count
            self._on_died()

    def _watch_process(self, new_children: set[int], stack: AsyncExitStack) -> None:
        """Hold a pidfd on the server's process (our new child running its command), so a call can tell a
        server that was already dead when it was sent (the call never ran) from one that died
        during it."""
        if not isinstance(self.config, StdioServer) or self.local is not None:
            return
        import psutil  # here, not on the way to a cold start's first answer

        tail = [*self.config.args] or [self.config.command]
        ours = []
        for pid in new_children:  # others may have started meanwhile: ours runs our command
            try:
                if psutil.Process(pid).cmdline()[-len(tail):] == tail:
                    ours.append(pid)
            except psutil.Error:
                continue
        if len(ours) != 1:
            return  # a server the spawn service started (not our child), or one we cannot tell
        try:
            self._pidfd = os.pidfd_open(ours[0])
        except OSError:
            return
        stack.callback(os.close, self._pidfd)

    def process_ended(self) -> bool:
        """Whether the server's process is known to have ended (False when not known)."""
        if self._pidfd is None:
            return False
        try:
            return bool(select.select([self._pidfd], [], [], 0)[0])
        except (OSError, ValueError):
            return False

    def _stderr(self, tg: anyio.abc.TaskGroup) -> Any:
        """A pipe for the server's stderr: what it writes goes on to ours, and its last lines
        are kept for the error that reports its crashes."""
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(read_fd, False)

        async def relay() -> None:
            try:
                while True:
                    await anyio.wait_readable(read_fd)
                    try:
                        data = os.read(read_fd, 65536)
                    except BlockingIOError:
                        continue
                    if not data:
                        return
                    text = data.decode(errors="replace")
                    self.health.heard(text)
                    try:
                        sys.stderr.write(text)
                        sys.stderr.flush()
                    except (OSError, ValueError):
                        pass
            finally:
                os.close(read_fd)

        tg.start_soon(relay)
        return os.fdopen(write_fd, "w")

    def _transport(self, errlog: Any) -> Any:
        if self.local is not None:
            return in_process(self.local)
        if isinstance(self.config, StdioServer):
            # here, not at the top: a cold start's first run_js starts no server
            from .launch import (child_stdio_client, server_account, server_command, server_environment,
                                 spawned_stdio_client)

            # As the desktop user when we are root, with an environment of its own (launch.py).
            account = server_account()
            command, args, cwd = server_command(self.config, account, self.name)
            if account.launcher is not None:
                # A runtime that is not root: the session supervisor starts it (launch.py).
                return spawned_stdio_client(account.launcher, command, args,
                                            server_environment(account, self.config.env), cwd, errlog)
            return child_stdio_client(command, args, server_environment(account, self.config.env), cwd, errlog)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert isinstance(self.config, HttpServer)
        client = httpx2.AsyncClient(headers=dict(self.config.headers), timeout=httpx2.Timeout(30.0, read=300.0))
        return _owning(client, streamable_http_client(self.config.url, http_client=client))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self.session is not None:
            try:
                self.tools = await _list_all_tools(self.session)
            except Exception as exc:  # the server went away while re-listing; the next call restarts it
                logger.debug("re-listing tools of %r failed: %r", self.name, exc)
                return
            self._on_list_changed()


LocalServer = Callable[[], Any]
"""Makes an MCP server (the SDK's low-level `Server`) that the bridge serves in this process."""


@asynccontextmanager
async def in_process(make_server: LocalServer) -> Any:
    """A transport to a server run in this process, over memory streams: for the runtime's own
    `session` server, which reads what only the runtime may read."""
    from mcp.shared.memory import create_client_server_memory_streams

    server = make_server()
    async with create_client_server_memory_streams() as (client_streams, (read, write)):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.run, read, write, server.create_initialization_options())
            try:
                yield client_streams
            finally:
                tg.cancel_scope.cancel()


def _children() -> set[int]:
    """Our direct children now (a stdio server is one of them)."""
    import psutil

    try:
        return {child.pid for child in psutil.Process().children()}
    except psutil.Error:
        return set()


class _owning:
    """Enter an httpx2 client around a transport so the client closes with it."""

    def __init__(self, client: Any, transport: Any) -> None:
        self._client = client
        self._transport = transport

    async def __aenter__(self) -> Any:
        await self._client.__aenter__()
        try:
            return await self._transport.__aenter__()
        except BaseException:
            await self._client.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            return await self._transport.__aexit__(*exc_info)
        finally:
            await self._client.__aexit__(None, None, None)


async def _list_all_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


class Bridge:
    """Client sessions to the configured capability servers, started on first use.

    Use as an async context manager: leaving it stops every server it started.
    `on_tools_changed` is called (synchronously) whenever the known tool listing changes:
    a server started, restarted with different tools, or announced `tools/list_changed`.
    """

    def __init__(self, servers: Mapping[str, ServerConfig], on_tools_changed: Callable[[], None] | None = None,
                 local: Mapping[str, LocalServer] | None = None) -> None:
        self.servers = dict(servers)
        self._local = dict(local or {})
        self._links: dict[str, _Link] = {}
        self._start_locks = {name: anyio.Lock() for name in self.servers}
        self._known_tools: dict[str, list[types.Tool]] = {}
        self._on_tools_changed = on_tools_changed or (lambda: None)
        # Moves on whenever a listing may have changed (a server started, restarted, re-listed
        # or failed to start): what is derived from a listing is valid while it stays put.
        self.generation = 0
        self._task_group: anyio.abc.TaskGroup | None = None
        self._health = {name: _Health() for name in self.servers}
        self._closing = anyio.Event()

    async def __aenter__(self) -> Bridge:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._task_group is not None
        self._closing.set()  # no more restarts
        for link in self._links.values():
            link.close()
        # Shut servers down even when the caller is being cancelled: no orphan processes.
        task_group, self._task_group = self._task_group, None
        task_group.cancel_scope.shield = True
        await task_group.__aexit__(None, None, None)

    def start_in_background(self) -> None:
        """Start every configured server now without waiting, so the first call finds it
        ready. A server that fails to start here is tried again, as usual, on first use."""
        assert self._task_group is not None, "use the Bridge as an async context manager"
        for name in self.servers:
            self._task_group.start_soon(self._start_quietly, name, name=f"start {name}")

    async def _start_quietly(self, name: str) -> None:
        try:
            await self._link(name)
        except BridgeError as exc:
            logger.warning("%s", exc)

    def known_tools(self) -> dict[str, list[types.Tool]]:
        """Tools of the servers started so far (by server name), without starting any."""
        return {name: list(tools) for name, tools in self._known_tools.items()}

    def running(self) -> list[str]:
        """Names of the servers whose session is live now."""
        return [name for name, link in self._links.items() if not link.broken and link.session is not None]

    async def call_tool(self, server: str, tool: str, args: Any) -> dict[str, Any]:
        """Call `tool` on `server`; return its CallToolResult as a camelCase dict.

        Raises BridgeError for an unknown server or tool, non-object arguments, a server that
        cannot start, or a connection that broke during the call (the next call restarts it).
        """
        if not isinstance(server, str) or server not in self.servers:
            raise BridgeError(f"unknown server {server!r}; available servers: {self._server_names()}")
        if not isinstance(tool, str) or not tool:
            raise BridgeError(f"the tool name must be a non-empty string, got {tool!r}")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise BridgeError(
                f"arguments for {server}.{tool} must be an object (a dict in Python), got {type(args).__name__}"
            )
        if self._health[server].crash_looping():
            return _unavailable(self._crash_loop_message(server))
        for attempt in (1, 2):
            link = await self._link(server)
            if tool not in {t.name for t in link.tools}:
                raise BridgeError(
                    f"server {server!r} has no tool {tool!r}; its tools: {', '.join(t.name for t in link.tools) or '(none)'}"
                )
            session = link.session
            if session is None or link.broken or link.process_ended():
                if attempt == 1:
                    link.ended()
                    continue  # it died before the call was sent: the call goes to its successor
                raise BridgeError(f"server {server!r} is not connected; call again to restart it")
            try:
                result = await session.call_tool(tool, args)
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    link.ended()
                    return _unavailable(
                        f"server {server!r} stopped during the call to {tool!r} (its process ended); the "
                        f"call may have taken effect before it stopped: check before repeating it. The "
                        f"server is being restarted; the next call goes to the new one",
                        hint=f"its last stderr lines:\n{self._health[server].tail()}")
                raise BridgeError(f"{server}.{tool} failed: {exc.message} (MCP error {exc.code})") from exc
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                link.close()
                raise BridgeError(
                    f"server {server!r} connection failed during {tool!r}: {exc!r}; it will be restarted on the next call"
                ) from exc
            self._health[server].answered()
            return result_to_dict(result)
        raise AssertionError("unreachable")

    def _crash_loop_message(self, server: str) -> str:
        health = self._health[server]
        wait = max(0.0, CRASH_LOOP_PAUSE_SECONDS - (time.monotonic() - health.deaths[-1]))
        return (f"server {server!r} is crash-looping: it died {health.in_a_row()} times in the last "
                f"{CRASH_LOOP_WINDOW_SECONDS:.0f} s and is left stopped; the next call in {wait:.0f} s "
                f"tries it again. Its last stderr lines:\n{health.tail()}\n"
                f"If it keeps dying, check its entry in the mcpServers config "
                f"({_describe_config(self.servers[server])}) and the runtime's log")

    def _died(self, server: str, link: _Link) -> None:
        """A server's process ended by itself, or failed to start: start its successor in the
        background."""
        health = self._health[server]
        health.died()
        logger.warning("capability server %r died (%d in a row)", server, health.in_a_row())
        current = self._links.get(server)
        if self._task_group is None or self._closing.is_set() or (current not in (None, link) and not current.broken):
            return  # the bridge is closing, or a successor is already there
        if health.crash_looping():
            logger.error("capability server %r is crash-looping; left stopped. Its last stderr lines:\n%s",
                         server, health.tail())
            return
        pause = RESTART_BACKOFF_SECONDS[min(health.in_a_row(), len(RESTART_BACKOFF_SECONDS)) - 1]
        self._task_group.start_soon(self._restart, server, pause, name=f"restart {server}")

    async def _restart(self, server: str, pause: float) -> None:
        with anyio.move_on_after(pause):
            await self._closing.wait()
        if not self._closing.is_set():
            await self._start_quietly(server)

    async def list_tools(self, server: str | None = None) -> ToolListing:
        """`{server: [tool dicts]}` for one server, or for every configured server.

        Listing every server starts those not yet running; a server that cannot start is
        listed with no tools and a logged warning rather than failing the whole listing.
        """
        if server is not None:
            if not isinstance(server, str) or server not in self.servers:
                raise BridgeError(f"unknown server {server!r}; available servers: {self._server_names()}")
            link = await self._link(server)
            return {server: [tool_to_dict(t) for t in link.tools]}
        listing: ToolListing = {}

        async def one(name: str) -> None:
            try:
                link = await self._link(name)
            except BridgeError as exc:
                logger.warning("%s", exc)
                self.generation += 1
                listing[name] = []
                return
            listing[name] = [tool_to_dict(t) for t in link.tools]

        async with anyio.create_task_group() as tg:
            for name in self.servers:
                tg.start_soon(one, name)
        return {name: listing[name] for name in self.servers}

    def serving(self, server: str | None = None) -> bool:
        """Whether `server` (or every configured server) has a live session right now."""
        names = [server] if server is not None else self.servers
        return all((link := self._links.get(name)) is not None and not link.broken and link.session is not None
                   for name in names)

    async def _link(self, server: str) -> _Link:
        link = self._links.get(server)
        if link is not None and not link.broken and link.session is not None:
            return link
        async with self._start_locks[server]:
            link = self._links.get(server)
            if link is None or link.broken:
                if link is not None:
                    link.close()
                link = _Link(server, self.servers[server], self._health[server],
                             lambda: self._absorb(server), lambda: self._died(server, link),
                             self._local.get(server))
                self._links[server] = link
                assert self._task_group is not None, "use the Bridge as an async context manager"
                self._task_group.start_soon(link.run, name=f"capability server {server}")
            await link.ready.wait()
            if link.error is not None or link.session is None:
                error = link.error
                del self._links[server]
                raise BridgeError(
                    f"capability server {server!r} could not start: {_describe(error)}; "
                    f"check its entry in the mcpServers config ({_describe_config(self.servers[server])})"
                ) from error
            self._absorb(server)
            return link

    def _absorb(self, server: str) -> None:
        link = self._links.get(server)
        if link is None:
            return
        self.generation += 1
        tools = list(link.tools)
        if self._known_tools.get(server) != tools:
            self._known_tools[server] = tools
            self._on_tools_changed()

    def _server_names(self) -> str:
        return ", ".join(sorted(self.servers)) or "(none configured)"


def _unavailable(message: str, hint: str | None = None) -> dict[str, Any]:
    """A call's answer when its server cannot serve it: the capabilities' error shape."""
    error: dict[str, Any] = {"kind": "unavailable", "message": message}
    if hint:
        error["hint"] = hint
    return {"content": [{"type": "text", "text": f"Error: {message}"}], "isError": True,
            "structuredContent": {"error": error}}


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "the connection closed during start-up"
    if isinstance(error, TimeoutError):
        return f"no answer within {START_TIMEOUT_SECONDS:.0f} s"
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in error.exceptions)
    if isinstance(error, MCPError):
        return f"{error.message} (the server process probably exited; see its stderr)"
    return f"{type(error).__name__}: {error}"


def _describe_config(config: ServerConfig) -> str:
    if isinstance(config, StdioServer):
        return "command " + " ".join([config.command, *config.args])
    return f"url {config.url}"


CallTool = Callable[[str, str, dict[str, Any]], Awaitable[dict[str, Any]]]
