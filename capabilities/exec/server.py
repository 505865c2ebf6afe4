"""The `exec` capability server: `exec`, `stream_logs`, `search_logs` and `kill`.

Programs run on the desktop as its user (see `process_table`); their logs live under
`<data>/exec/` (see `log_store`). Every result is one text block holding JSON, so a script
reads it with `JSON.parse(result.content[0].text)`; a refused call is an `isError` result
whose JSON has an `error` message naming the field and what to do.

Beyond the spec's fields, stream_logs answers `more` (the chunk was cut at its size limit),
and stream_logs and search_logs answer `log_cut_at` and a `hint` when the command's log reached
the per-command cap (see `confinement.Limits`); the status strings are the spec's.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from pydantic import BaseModel, ValidationError

from capabilities.session import data_dir

from .errors import ExecError
from .log_store import SEARCH_SECONDS, CommandRecord, LogStore, pattern_too_slow
from .process_table import ProcessTable
from .requests import (
    ExecRequest,
    KillRequest,
    SearchLogsRequest,
    StreamLogsRequest,
    input_schema,
    refusal,
)

SERVER_NAME = "exec"


# -- the tools -------------------------------------------------------------------------------


async def exec_tool(table: ProcessTable, request: ExecRequest) -> dict[str, Any]:
    record = table.launch(request)
    # The command's fate (including failed:not found) is read with stream_logs.
    return {"id": record.id, "status": "started"}


def _log_cap(table: ProcessTable, record: CommandRecord) -> int:
    """The byte the log ends at for good: where it was cut, else this server's cap."""
    return record.log_cut_at if record.log_cut_at is not None else table.limits.log_max_bytes


def _cut_note(record: CommandRecord) -> dict[str, Any]:
    if record.log_cut_at is None:
        return {}
    return {
        "log_cut_at": record.log_cut_at,
        "hint": f"the log was cut at {record.log_cut_at} bytes, the cap per command; the program's "
        "later output was dropped (write big output to a file instead)",
    }


async def stream_logs_tool(table: ProcessTable, request: StreamLogsRequest) -> dict[str, Any]:
    # Status first: once it is final every byte is on disk, so this read sees the whole end.
    record, final = await table.status(request.id)
    chunk = table.store.read(request.id, request.offset, final, _log_cap(table, record))
    result = {"logs": chunk.text, "next_offset": chunk.next_offset, "status": record.status, "more": chunk.more}
    return {**result, **_cut_note(record)}


async def search_logs_tool(table: ProcessTable, request: SearchLogsRequest) -> dict[str, Any]:
    record, _ = await table.status(request.id)  # refuses unknown ids, settles orphans
    # The engine's own timeout stops the search thread, but only checks the clock now and then
    # (later still on a loaded machine): the answer does not wait for it past the cap.
    try:
        with anyio.fail_after(SEARCH_SECONDS + 0.5):
            matches, truncated = await anyio.to_thread.run_sync(
                table.store.search, request.id, request.pattern, _log_cap(table, record),
                abandon_on_cancel=True, limiter=table.search_limiter,
            )
    except TimeoutError:
        raise pattern_too_slow(request.pattern) from None
    result: dict[str, Any] = {
        "matches": [{"line": m.line, "offset": m.offset} for m in matches],
        "truncated": truncated,
        **_cut_note(record),
    }
    if truncated:
        result["hint"] = f"only the first {len(matches)} matches are listed; use a narrower pattern"
    return result


async def kill_tool(table: ProcessTable, request: KillRequest) -> dict[str, Any]:
    record = await table.kill(request.id)
    return {"id": record.id, "status": record.status}


@dataclass(frozen=True)
class ToolSpec:
    model: type[BaseModel]
    run: Callable[[ProcessTable, Any], Awaitable[dict[str, Any]]]


TOOLS: dict[str, ToolSpec] = {
    "exec": ToolSpec(ExecRequest, exec_tool),
    "stream_logs": ToolSpec(StreamLogsRequest, stream_logs_tool),
    "search_logs": ToolSpec(SearchLogsRequest, search_logs_tool),
    "kill": ToolSpec(KillRequest, kill_tool),
}


# -- the MCP wiring --------------------------------------------------------------------------


def _result(payload: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    """The one place results are built: a JSON text block; `is_error` for refusals."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
        is_error=error,
    )


async def _list_tools(
    ctx: ServerRequestContext[ProcessTable], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(name=name, description=inspect.cleandoc(spec.model.__doc__ or ""), input_schema=input_schema(spec.model))
            for name, spec in TOOLS.items()
        ]
    )


async def _call_tool(
    ctx: ServerRequestContext[ProcessTable], params: types.CallToolRequestParams
) -> types.CallToolResult:
    spec = TOOLS.get(params.name)
    if spec is None:
        return _result({"error": f"no tool {params.name!r}; the exec server has {', '.join(TOOLS)}"}, error=True)
    try:
        request = spec.model.model_validate(params.arguments or {})
    except ValidationError as exc:
        return _result({"error": refusal(params.name, spec.model, exc)}, error=True)
    try:
        return _result(await spec.run(ctx.lifespan_context, request))
    except ExecError as exc:
        return _result({"error": str(exc)}, error=True)


def build_server(on_ready: Callable[[ProcessTable], None] | None = None) -> Server[ProcessTable]:
    """The exec MCP server; its lifespan owns the process table (and stops it on exit).

    `on_ready(table)` is called once the table has recovered the store, for a host that must
    stop it from outside the MCP session (on a signal).
    """

    @asynccontextmanager
    async def lifespan(_: Server[ProcessTable]) -> AsyncIterator[ProcessTable]:
        store = LogStore(data_dir() / "exec")
        async with anyio.create_task_group() as tasks:
            table = ProcessTable(store, tasks)
            await table.recover()
            if on_ready is not None:
                on_ready(table)
            try:
                yield table
            finally:
                with anyio.CancelScope(shield=True):
                    await table.stop_all()
                tasks.cancel_scope.cancel()

    return Server(SERVER_NAME, lifespan=lifespan, on_list_tools=_list_tools, on_call_tool=_call_tool)


async def serve_stdio() -> None:
    """Serve on stdin/stdout until stdin closes or a stop signal arrives, then end the
    running commands (recorded as `failed:interrupted`)."""
    tables: list[ProcessTable] = []
    server = build_server(on_ready=tables.append)
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
                async for _ in signals:
                    # The stdin reader sits in a thread that cancellation cannot stop, so
                    # end the commands here and leave without waiting for it.
                    with anyio.CancelScope(shield=True):
                        for table in tables:
                            await table.stop_all()
                    _exit_now()

        tg.start_soon(stop_on_signal)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        tg.cancel_scope.cancel()


def _exit_now() -> None:
    # Everything is stopped and recorded by now. Skip the interpreter's teardown of the SDK's
    # large model graph (most of a second here): clients wait for our exit before moving on.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main() -> None:
    anyio.run(serve_stdio)
    _exit_now()
