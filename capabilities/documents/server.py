"""The `documents` capability server: one registry of the tool families, served over MCP.

Each family module (`pdf`, `ocr`, `office`, `images`, `render`, `convert`, `overview`) exports
`TOOLS`; `REGISTRY` (the contract's `ToolRegistry`) lists them, validates every call's input
with the tool's own model, runs it, and answers by the one result contract
(`capabilities.contract`). The lifespan owns the server's state, the `Workspace` with the one
LibreOffice converter, and closes it at shutdown.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import mcp_types as types
import pymupdf
from mcp.server.lowlevel import Server

from capabilities.contract import ToolRegistry
from capabilities.stdio import run_server

from . import convert, images, ocr, office, overview, pdf, render
from .libreoffice import OfficeConverter
from .tooling import Workspace

log = logging.getLogger("codedesk.documents")

SERVER_NAME = "documents"
REGISTRY: ToolRegistry[Workspace] = ToolRegistry(
    SERVER_NAME,
    [spec for family in (pdf, ocr, office, images, render, convert, overview) for spec in family.TOOLS],
)


async def call_tool(workspace: Workspace, name: str, arguments: dict | None) -> types.CallToolResult:
    """Validate, run and answer one tool call (also used directly by in-process tests)."""
    return await REGISTRY.call(workspace, name, arguments)


@asynccontextmanager
async def workspace_lifespan(_: Server) -> AsyncIterator[Workspace]:
    office_converter = OfficeConverter()

    def stop(signum: int, _frame: object) -> None:
        # LibreOffice runs in its own process group, out of reach of the signal that stops
        # us: stop it (and remove the scratch folder) before leaving.
        office_converter.close()
        os._exit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop) if threading.current_thread() is threading.main_thread() else None
    try:
        yield Workspace(office=office_converter)
    finally:
        office_converter.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def build_server() -> Server:
    """The documents MCP server (serve it with `main`, or over any transport)."""
    return Server(
        SERVER_NAME,
        instructions=(
            "Read, render and convert PDFs, Office files and images on the desktop, locally. "
            "Paths must be inside the document roots (the desktop user's home and the session's "
            "data directory by default). Every tool returns structured content described by its "
            "output schema, and a one-line summary."
        ),
        lifespan=workspace_lifespan,
        on_list_tools=REGISTRY.on_list_tools,
        on_call_tool=REGISTRY.on_call_tool,
    )


def main() -> None:
    """Serve on stdio until the client closes stdin, then exit at once."""
    # stdout carries the protocol. pymupdf writes its messages there by default, and prints
    # advice to install pymupdf_layout on the first table search: send the one to stderr, turn
    # the other off.
    pymupdf.set_messages(stream=sys.stderr)
    pymupdf.set_log(stream=sys.stderr)
    pymupdf.no_recommend_layout()
    run_server(build_server())
