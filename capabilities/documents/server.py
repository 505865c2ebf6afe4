"""The `documents` capability server: one registry of the tool families, served over MCP.

Each family module (`pdf`, `ocr`, `render`, `office`, `images`, `convert`, `overview`) exports
`TOOLS`; this module lists them, validates every call's arguments with the tool's own model
(the same model that produced the schema the client sees), runs the tool in a worker thread,
and turns the outcome into a result with `results`.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from . import convert, images, ocr, office, overview, pdf, render
from .convert import OfficeConverter
from .errors import DocumentError
from .results import failure, success
from .tooling import ToolSpec, Workspace

log = logging.getLogger("codedesk.documents")

SERVER_NAME = "documents"
TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for family in (pdf, ocr, office, images, render, convert, overview)
    for spec in family.TOOLS
}


def describe_validation_error(spec: ToolSpec, exc: ValidationError) -> str:
    """One line per problem, naming the field; unknown fields are listed with the known ones."""
    known = ", ".join(spec.args.model_fields)
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown field {where!r} (the fields of {spec.name} are: {known})")
        elif error["type"] == "missing":
            problems.append(f"missing required field {where!r}")
        else:
            problems.append(f"{where}: {error['msg']}")
    return f"invalid arguments for {spec.name}: " + "; ".join(problems) + ". Nothing was done."


async def call_tool(workspace: Workspace, name: str, arguments: dict | None) -> types.CallToolResult:
    """Validate, run and package one tool call (also used directly by in-process tests)."""
    spec = TOOLS.get(name)
    if spec is None:
        return failure(f"unknown tool {name!r}; the documents tools are: {', '.join(TOOLS)}")
    try:
        args = spec.args.model_validate(arguments or {})
    except ValidationError as exc:
        return failure(describe_validation_error(spec, exc))
    try:
        output = await anyio.to_thread.run_sync(spec.run, workspace, args)
    except DocumentError as exc:
        return failure(str(exc))
    except Exception as exc:  # a bug or an unforeseen library failure: say which, keep serving
        log.exception("%s failed", name)
        return failure(f"{name} failed unexpectedly ({type(exc).__name__}: {exc}); check the file and arguments")
    return success(output)


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


async def _list_tools(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(name=spec.name, description=spec.description, input_schema=spec.input_schema())
            for spec in TOOLS.values()
        ]
    )


async def _call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
    return await call_tool(ctx.lifespan_context, params.name, params.arguments)


def build_server() -> Server:
    """The documents MCP server (serve it with `main`, or over any transport)."""
    return Server(
        SERVER_NAME,
        instructions=(
            "Read, render and convert PDFs, Office files and images on the desktop, locally. "
            "Paths must be inside the document roots (the desktop user's home and the session's "
            "data directory by default)."
        ),
        lifespan=workspace_lifespan,
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
    )


async def serve_stdio() -> None:
    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    """Serve on stdio until the client closes stdin, then exit at once."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    anyio.run(serve_stdio)
    # The lifespan has cleaned up by now. Tearing down the interpreter (pymupdf, the SDK,
    # pydantic) takes seconds of garbage collection, longer than clients wait before killing
    # the process, so skip it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
