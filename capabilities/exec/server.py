"""The `exec` capability server: `exec`, `stream_logs`, `search_logs` and `kill`.

Programs run on the desktop as its user (see `process_table`); their logs live under
`<data>/exec/` (see `log_store`). Every answer follows the one result contract
(`capabilities.contract`): the result as structured content, and the same object as the JSON
text the spec prescribes, so a script reads it with `JSON.parse(result.content[0].text)`; a
refused call is an `isError` result `{error: {kind, message, field?}}` whose message names the
field and what to do. Without a usable log store (no desktop session) the server still starts
and answers every call with what to do.

Beyond the spec's fields, stream_logs answers `more` (the chunk was cut at its size limit),
and stream_logs and search_logs answer `log_cut_at` and a `hint` when the command's log reached
the per-command cap (see `confinement.Limits`); the status strings are the spec's.
"""

from __future__ import annotations

import inspect
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from pydantic import BaseModel, ValidationError

from capabilities.session import data_dir

from capabilities.contract import ToolError, ToolRegistry, ToolSpec, success
from capabilities import wire
from capabilities.stdio import exit_now, guard, stdio_transport

from .errors import ExecError, StoreUnavailable
from .log_store import SEARCH_SECONDS, CommandRecord, LogStore, pattern_too_slow
from .process_table import ProcessTable
from .requests import (
    ExecRequest,
    ExecResult,
    KillRequest,
    KillResult,
    SearchLogsRequest,
    SearchLogsResult,
    StreamLogsRequest,
    StreamLogsResult,
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
    if final and (left := table.still_running(request.id)):
        result["still_running"] = left
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


def _answer(model: type[BaseModel], run: Callable[[ProcessTable, Any], Awaitable[dict[str, Any]]]):
    """A tool body as the contract runs it: the store must be usable; the answer is the JSON the
    spec prescribes as text, and the same object as structured content; errors by kind."""

    async def answer(table: ProcessTable | None, request: Any) -> types.CallToolResult:
        try:
            if table is None:
                raise StoreUnavailable(_store_problem)
            payload = model.model_validate(await run(table, request)).model_dump(mode="json")
        except ExecError as exc:
            raise exc.to_tool_error() from exc
        return success(payload)  # the text is the same object as JSON, alone

    return answer


def _spec(name: str, request: type[BaseModel], result: type[BaseModel],
          run: Callable[[ProcessTable, Any], Awaitable[dict[str, Any]]], **annotations: Any) -> ToolSpec:
    return ToolSpec(name=name, description=inspect.cleandoc(request.__doc__ or ""), args=request,
                    output=result, run=_answer(result, run), annotations=annotations,
                    invalid=lambda exc, _raw: ToolError("invalid_arguments", refusal(name, request, exc),
                                                        field=_first_field(exc)))


def _first_field(exc: ValidationError) -> str | None:
    for error in exc.errors():
        if error["loc"]:
            return ".".join(str(part) for part in error["loc"])
    return None


REGISTRY: ToolRegistry[ProcessTable | None] = ToolRegistry(SERVER_NAME, [
    _spec("exec", ExecRequest, ExecResult, exec_tool, openWorldHint=True),
    _spec("stream_logs", StreamLogsRequest, StreamLogsResult, stream_logs_tool, readOnlyHint=True),
    _spec("search_logs", SearchLogsRequest, SearchLogsResult, search_logs_tool, readOnlyHint=True),
    _spec("kill", KillRequest, KillResult, kill_tool, destructiveHint=True),
])
TOOLS = REGISTRY.specs

_store_problem = "the exec log store is not ready"


# -- the MCP wiring --------------------------------------------------------------------------


def build_server(on_ready: Callable[[ProcessTable], None] | None = None) -> Server[ProcessTable | None]:
    """The exec MCP server; its lifespan owns the process table (and stops it on exit).

    `on_ready(table)` is called once the table has recovered the store, for a host that must
    stop it from outside the MCP session (on a signal).
    """

    @asynccontextmanager
    async def lifespan(_: Server[ProcessTable | None]) -> AsyncIterator[ProcessTable | None]:
        global _store_problem
        folder = data_dir() / "exec"
        async with anyio.create_task_group() as tasks:
            try:
                table = ProcessTable(LogStore(folder), tasks)
                await table.recover()
            except OSError as exc:
                # No session prepared this folder for us (or it is not ours): serve anyway, and
                # answer every call with what to do, instead of dying at start.
                _store_problem = (f"the exec log store {folder} cannot be used ({exc.strerror or exc}); "
                                  f"start the desktop session with `codedesk desktop up` (it prepares "
                                  f"{folder} for the desktop user), or set CODEDESK_DATA to its data directory")
                table = None
            if table is not None and on_ready is not None:
                on_ready(table)
            try:
                yield table
            finally:
                if table is not None:
                    with anyio.CancelScope(shield=True):
                        await table.stop_all()
                tasks.cancel_scope.cancel()

    return Server(SERVER_NAME, lifespan=lifespan, on_list_tools=REGISTRY.on_list_tools, on_call_tool=REGISTRY.on_call_tool)


async def serve_stdio() -> None:
    """Serve on stdin/stdout until stdin closes or a stop signal arrives, then end the
    running commands (recorded as `failed:interrupted`)."""
    tables: list[ProcessTable] = []
    server = guard(build_server(on_ready=tables.append))
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
                async for _ in signals:
                    # The stdin reader may sit in a thread that cancellation cannot stop (the
                    # SDK's transport, on a terminal), so end the commands here and leave
                    # without waiting for it.
                    with anyio.CancelScope(shield=True):
                        for table in tables:
                            await table.stop_all()
                    exit_now()

        tg.start_soon(stop_on_signal)
        async with stdio_transport() as (read_stream, write_stream):
            await server.run(read_stream, wire.SendableStream(write_stream), server.create_initialization_options())
        tg.cancel_scope.cancel()


def main() -> None:
    anyio.run(serve_stdio)
    exit_now()
