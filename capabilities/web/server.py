"""The `web` capability server: one registry of the tool families, served over MCP.

`page_tools` (fetch, fetch_rendered, fetch_image) and `search` export `TOOLS`; `REGISTRY`
validates every call's input with the tool's own model, runs it and answers by the one result
contract. The lifespan owns the server's state (`WebState`: the HTTP connection pool, the
connection to the session's Chromium, the search provider) and closes it at shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import mcp_types as types
from mcp.server.lowlevel import Server

from capabilities.contract import ToolRegistry
from capabilities.stdio import run_server

from . import page_tools, search
from .fetcher import PageFetcher
from .rendered import Renderer
from .search import SearchConfig
from .tooling import WebState

SERVER_NAME = "web"
REGISTRY: ToolRegistry[WebState] = ToolRegistry(
    SERVER_NAME, [spec for family in (page_tools, search) for spec in family.TOOLS])


def new_state() -> WebState:
    """The server's state, with the search provider of `$CODEDESK_WEB_SEARCH`."""
    return WebState(fetcher=PageFetcher(), renderer=Renderer(), search=SearchConfig.from_environment())


async def call_tool(state: WebState, name: str, arguments: dict | None) -> types.CallToolResult:
    """Validate, run and answer one tool call (also used directly by in-process tests)."""
    return await REGISTRY.call(state, name, arguments)


@asynccontextmanager
async def web_lifespan(_: Server) -> AsyncIterator[WebState]:
    state = new_state()
    try:
        yield state
    finally:
        await state.aclose()


def build_server() -> Server:
    """The web MCP server (serve it with `main`, or over any transport)."""
    return Server(
        SERVER_NAME,
        instructions=(
            "Fetch web pages as markdown, text or HTML (plain HTTP, or rendered by the session's Chromium in a "
            "throwaway context), fetch images, and search through the operator's provider. The session's "
            "egress policy applies to every request and redirect."
        ),
        lifespan=web_lifespan,
        on_list_tools=REGISTRY.on_list_tools,
        on_call_tool=REGISTRY.on_call_tool,
    )


def main() -> None:
    """Serve on stdio until the client closes stdin, then exit at once."""
    run_server(build_server())
