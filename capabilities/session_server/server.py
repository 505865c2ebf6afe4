"""The `session` capability server: the session's timeline, read and replayed.

The runtime serves it in its own process (the timeline is the runtime's, out of the desktop
user's reach), with its replayer; `python -m capabilities.session_server` serves it on stdio
for whoever may read the timeline's folder (replay then answers `unavailable`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.lowlevel import Server

from capabilities.contract import ToolRegistry
from capabilities.stdio import run_server

from . import tools
from .tools import Replayer, SessionState

SERVER_NAME = "session"
REGISTRY: ToolRegistry[SessionState] = ToolRegistry(SERVER_NAME, tools.TOOLS)


def build_server(replayer: Replayer | None = None, state: SessionState | None = None) -> Server[Any]:
    """The session MCP server; `replayer` is the runtime's, when it serves it in-process."""

    @asynccontextmanager
    async def lifespan(_: Server[Any]) -> AsyncIterator[SessionState]:
        current = state if state is not None else SessionState(replayer=replayer)
        try:
            yield current
        finally:
            current.close()

    return Server(
        SERVER_NAME,
        instructions="The session's timeline: what every run did, call by call; export it; replay a run.",
        lifespan=lifespan,
        on_list_tools=REGISTRY.on_list_tools,
        on_call_tool=REGISTRY.on_call_tool,
    )


def main() -> None:
    """Serve on stdio until the client closes stdin, then exit at once."""
    run_server(build_server())
