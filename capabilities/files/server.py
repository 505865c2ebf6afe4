"""The `files` capability server: one registry of the tool families, served over MCP.

Each family module (`reading`, `writing`, `moving`, `searching`) exports `TOOLS`; `REGISTRY`
(the contract's `ToolRegistry`) lists them, validates every call's whole input with the tool's
own model, runs it, and answers by the one result contract (`capabilities.contract`).

The server acts as the desktop user: started as root, it drops to that user before serving
(`account.drop_to_desktop_user`); if there is no such user it still serves, answering every
call with what to do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import mcp_types as types
from mcp.server.lowlevel import Server

from capabilities.contract import ToolRegistry
from capabilities.stdio import run_server

from . import moving, reading, searching, writing
from .account import Account, drop_to_desktop_user
from .errors import FilesError
from .tooling import FilesState

SERVER_NAME = "files"
REGISTRY: ToolRegistry[FilesState] = ToolRegistry(
    SERVER_NAME, [spec for family in (reading, writing, searching, moving) for spec in family.TOOLS])


async def call_tool(state: FilesState, name: str, arguments: dict | None) -> types.CallToolResult:
    """Validate, run and answer one tool call (also used directly by in-process tests)."""
    return await REGISTRY.call(state, name, arguments)


def state_for(account: Account | None = None) -> FilesState:
    """The state of a server acting as `account`, or as the desktop user (dropping to it when
    root)."""
    if account is not None:
        return FilesState(account)
    try:
        return FilesState(drop_to_desktop_user())
    except FilesError as exc:
        return FilesState(None, exc)


def build_server(state: FilesState | None = None) -> Server:
    """The files MCP server (serve it with `main`, or over any transport)."""

    @asynccontextmanager
    async def lifespan(_: Server) -> AsyncIterator[FilesState]:
        yield state if state is not None else state_for()

    return Server(
        SERVER_NAME,
        instructions=("The desktop user's files: read, write, edit, patch, list, glob, search (ripgrep), "
                      "move, copy, delete to the trash and restore, stat. Paths are absolute, '~/...' or "
                      "relative to the home; the desktop user's permissions are the only boundary."),
        lifespan=lifespan,
        on_list_tools=REGISTRY.on_list_tools,
        on_call_tool=REGISTRY.on_call_tool,
    )


def main() -> None:
    """Serve on stdio until the client closes stdin, then exit at once."""
    run_server(build_server(state_for()))
