"""The bridge: one MCP client session per capability server, used by scripts' `mcp.callTool`.

Servers start lazily, on the first call or listing that needs them. A call that fails because
its server's connection broke (the process crashed or exited) gets a `BridgeError` saying so,
and the next call starts the server afresh. Calls run concurrently over the one session.
A capability's own `isError` result is returned as data, never raised.

Errors: every failure of the bridge itself is a `BridgeError`, whose message is written for
the script's author (what failed, what exists, what to do next); the lower-layer exception
stays as `__cause__`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from .config import HttpServer, ServerConfig, StdioServer
from .launch import server_account, server_command, server_environment, spawned_stdio_client

logger = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 60.0
"""How long a capability server may take from spawn to an answered `tools/list`."""

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


class _Link:
    """One live client session to one server process (or HTTP endpoint).

    Its task owns the transport and the session (anyio context managers must be left in the
    task that entered them); callers use `session` once `ready` is set. A link is never
    revived: after it breaks, the owning `_Slot` makes a new one.
    """

    def __init__(self, name: str, config: ServerConfig, on_list_changed: Callable[[], None]) -> None:
        self.name = name
        self.config = config
        self.session: ClientSession | None = None
        self.tools: list[types.Tool] = []
        self.error: BaseException | None = None
        self.ready = anyio.Event()
        self.broken = False
        self._stop = anyio.Event()
        self._on_list_changed = on_list_changed

    def close(self) -> None:
        """Ask the link's task to shut the session and the server down."""
        self.broken = True
        self._stop.set()

    async def run(self) -> None:
        """Connect, initialize, list tools, then hold the session until `close()`."""
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(read, write, message_handler=self._on_message))
                # Only plain awaits inside the deadline: a cancel scope must not wrap entered task groups.
                with anyio.fail_after(START_TIMEOUT_SECONDS):
                    await session.initialize()
                    self.tools = await _list_all_tools(session)
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

    def _transport(self) -> Any:
        if isinstance(self.config, StdioServer):
            # As the desktop user when we are root, with an environment of its own (launch.py).
            account = server_account()
            command, args, cwd = server_command(self.config, account, self.name)
            if account.launcher is not None:
                # A runtime that is not root: the session supervisor starts it (launch.py).
                return spawned_stdio_client(account.launcher, command, args,
                                            server_environment(account, self.config.env), cwd)
            params = StdioServerParameters(
                command=command, args=args, cwd=cwd,
                env=server_environment(account, self.config.env),
            )
            return stdio_client(params, errlog=sys.stderr)
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

    def __init__(self, servers: Mapping[str, ServerConfig], on_tools_changed: Callable[[], None] | None = None) -> None:
        self.servers = dict(servers)
        self._links: dict[str, _Link] = {}
        self._start_locks = {name: anyio.Lock() for name in self.servers}
        self._known_tools: dict[str, list[types.Tool]] = {}
        self._on_tools_changed = on_tools_changed or (lambda: None)
        self._task_group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Bridge:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._task_group is not None
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
        link = await self._link(server)
        if tool not in {t.name for t in link.tools}:
            raise BridgeError(
                f"server {server!r} has no tool {tool!r}; its tools: {', '.join(t.name for t in link.tools) or '(none)'}"
            )
        session = link.session
        if session is None:
            raise BridgeError(f"server {server!r} is not connected; call again to restart it")
        try:
            result = await session.call_tool(tool, args)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                link.close()
                raise BridgeError(
                    f"server {server!r} stopped during the call to {tool!r} ({exc.message}); "
                    "it will be restarted on the next call"
                ) from exc
            raise BridgeError(f"{server}.{tool} failed: {exc.message} (MCP error {exc.code})") from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            link.close()
            raise BridgeError(
                f"server {server!r} connection failed during {tool!r}: {exc!r}; it will be restarted on the next call"
            ) from exc
        return result_to_dict(result)

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
                listing[name] = []
                return
            listing[name] = [tool_to_dict(t) for t in link.tools]

        async with anyio.create_task_group() as tg:
            for name in self.servers:
                tg.start_soon(one, name)
        return {name: listing[name] for name in self.servers}

    async def _link(self, server: str) -> _Link:
        link = self._links.get(server)
        if link is not None and not link.broken and link.session is not None:
            return link
        async with self._start_locks[server]:
            link = self._links.get(server)
            if link is None or link.broken:
                if link is not None:
                    link.close()
                link = _Link(server, self.servers[server], lambda: self._absorb(server))
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
        tools = list(link.tools)
        if self._known_tools.get(server) != tools:
            self._known_tools[server] = tools
            self._on_tools_changed()

    def _server_names(self) -> str:
        return ", ".join(sorted(self.servers)) or "(none configured)"


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
