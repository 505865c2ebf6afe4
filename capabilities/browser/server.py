"""The `browser` capability server: `browser_execute` (pages of the desktop's Chromium) and
`desktop_execute` (mouse, keyboard, screen, windows and clipboard of the display).

Each tool family module (`page_tool`, `desktop_tool`) exports its `TOOL`; `REGISTRY` (the
contract's `ToolRegistry`) lists them, validates every call's input with the tool's own model,
runs it, and answers by the one result contract (`capabilities.contract`). The lifespan owns
the server's state (`BrowserState`: the tabs and the desktop controller), starts Playwright's
driver in the background so the first call does not wait for it, and closes the state at
shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from mcp.server.lowlevel import Server

from capabilities.contract import ToolRegistry
from capabilities.stdio import run_server

from . import desktop_tool, page_tool
from .state import BrowserState

log = logging.getLogger("codedesk.browser")

SERVER_NAME = "browser"
REGISTRY: ToolRegistry[BrowserState] = ToolRegistry(SERVER_NAME, [page_tool.TOOL, desktop_tool.TOOL])


@asynccontextmanager
async def browser_lifespan(_: Server) -> AsyncIterator[BrowserState]:
    state = BrowserState()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_warm_up, state)
            yield state
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await state.aclose()


async def _warm_up(state: BrowserState) -> None:
    # Playwright's driver takes about a second to start. A warm-up is an optimisation: if it
    # fails, the first call does the work and reports.
    try:
        await state.tabs.start_driver()
    except Exception as exc:
        log.warning("starting Playwright's driver ahead of the first call failed: %r", exc)


def build_server() -> Server:
    """The browser MCP server (serve it with `main`, or over any transport)."""
    return Server(
        SERVER_NAME,
        instructions=(
            "Drive the desktop's Chromium (browser_execute: batches of steps in named tabs) and the "
            "desktop's mouse, keyboard, screen, windows and clipboard (desktop_execute). Every tool "
            "returns structured content described by its output schema, and the text the spec "
            "prescribes."
        ),
        lifespan=browser_lifespan,
        on_list_tools=REGISTRY.on_list_tools,
        on_call_tool=REGISTRY.on_call_tool,
    )


def main() -> None:
    """Serve on stdio until the client closes stdin, then exit at once."""
    run_server(build_server())
