"""The `memory` capability server: one registry of the memory and skills tools, served over MCP.

The lifespan opens the store (`<data>/memory/memory.db`) and watches the skill folders: when a
skill is added, removed or edited, `skills_list`'s description (which names the installed
skills) changes and every connected client is sent `tools/list_changed`, so the runtime's
run_js description follows within a second or two.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server

from capabilities.contract import ToolRegistry
from capabilities.session import data_dir
from capabilities.stdio import run_server

from . import memory_tools, skill_tools
from .errors import StoreUnavailable
from .skills import installed, signature, skill_roots
from .store import MemoryStore
from .tooling import MemoryState

log = logging.getLogger("codedesk.memory")

SERVER_NAME = "memory"
WATCH_INTERVAL_S = 1.0
REGISTRY: ToolRegistry[MemoryState] = ToolRegistry(
    SERVER_NAME, [spec for family in (memory_tools, skill_tools) for spec in family.TOOLS])


def open_state(folder: Path | None = None, roots: list[Path] | None = None) -> MemoryState:
    """The server's state: the store in `folder` (default `<data>/memory`), the skill roots."""
    folder = folder if folder is not None else data_dir() / "memory"
    roots = roots if roots is not None else skill_roots()
    try:
        return MemoryState(store=MemoryStore(folder), roots=roots)
    except StoreUnavailable as exc:
        return MemoryState(store=None, roots=roots, store_problem=exc.message)


async def call_tool(state: MemoryState, name: str, arguments: dict | None) -> types.CallToolResult:
    """Validate, run and answer one tool call (also used directly by in-process tests)."""
    return await REGISTRY.call(state, name, arguments)


def list_tools(state: MemoryState) -> list[types.Tool]:
    """The tools, `skills_list` described with the skills installed now."""
    description = skill_tools.listing_description(installed(state.roots))
    return [tool.model_copy(update={"description": description}) if tool.name == "skills_list" else tool
            for tool in REGISTRY.list_tools()]


async def _on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    state: MemoryState = ctx.lifespan_context
    if ctx.session not in state.sessions:
        state.sessions.append(ctx.session)
    return types.ListToolsResult(tools=await anyio.to_thread.run_sync(list_tools, state))


async def watch_skills(state: MemoryState, interval: float = WATCH_INTERVAL_S) -> None:
    """Tell the clients when the installed skills change (polling: the folders may be anywhere)."""
    seen = await anyio.to_thread.run_sync(signature, state.roots)
    while True:
        await anyio.sleep(interval)
        now = await anyio.to_thread.run_sync(signature, state.roots)
        if now == seen:
            continue
        seen = now
        for session in list(state.sessions):
            try:
                await session.send_tool_list_changed()
            except Exception:  # that client went away
                state.sessions.remove(session)


@asynccontextmanager
async def memory_lifespan(_: Server) -> AsyncIterator[MemoryState]:
    state = await anyio.to_thread.run_sync(open_state)
    if state.store is None:
        log.warning("%s", state.store_problem)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch_skills, state)
            try:
                yield state
            finally:
                tasks.cancel_scope.cancel()
    finally:
        state.close()


def build_server() -> Server:
    """The memory MCP server (serve it with `main`, or over any transport)."""
    return Server(
        SERVER_NAME,
        instructions=(
            "Keep what a script learned for later runs of the session (full-text recall, on the session's disk), "
            "and read the session's skills (folders with a SKILL.md)."
        ),
        lifespan=memory_lifespan,
        on_list_tools=_on_list_tools,
        on_call_tool=REGISTRY.on_call_tool,
    )


def main() -> None:
    """Serve on stdio until the client closes stdin, then exit at once."""
    run_server(build_server(), NotificationOptions(tools_changed=True))
