"""The `browser` capability server: `browser_execute` (pages of the desktop's Chromium) and
`desktop_execute` (mouse, keyboard, screen, windows and clipboard of the display).

Each tool family lives in its own module, which exposes `register(server)`; this module
only combines them. A family may return a warm-up coroutine from `register`: it runs in the
background when the server starts, so the first call does not pay for it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
from mcp.server.mcpserver import MCPServer

from . import desktop_tool, page_tool

log = logging.getLogger(__name__)

WarmUp = Callable[[], Awaitable[None]]


def build_server() -> MCPServer:
    warm_ups: list[WarmUp] = []
    server = MCPServer("browser", lifespan=_warming(warm_ups))
    for family in (page_tool, desktop_tool):
        warm_up = family.register(server)
        if warm_up is not None:
            warm_ups.append(warm_up)
    return server


def _warming(warm_ups: list[WarmUp]):
    @asynccontextmanager
    async def lifespan(server: MCPServer) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            for warm_up in warm_ups:
                tg.start_soon(_quietly, warm_up)
            yield
            tg.cancel_scope.cancel()

    return lifespan


async def _quietly(warm_up: WarmUp) -> None:
    # A warm-up is an optimisation: if it fails, the first call does the work and reports.
    try:
        await warm_up()
    except Exception as exc:
        log.warning("warm-up %s failed: %r", getattr(warm_up, "__qualname__", warm_up), exc)
