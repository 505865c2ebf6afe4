"""The stdio entry point every capability server shares: serve it, end quietly when the client
goes away, and leave at once.

A server's client (the runtime) closing the pipes is the normal end of a server's life, not a
crash: the write that finds the pipe closed must not print a traceback into the runtime's log,
and the process must exit at once with status 0. Once the server's lifespan has cleaned up,
tearing down the interpreter (the SDK's model graph, pymupdf, Playwright) only costs time the
client spends waiting for the exit, so it is skipped.

A result that cannot be sent fails its call alone, as an `internal` error (`capabilities.wire`):
no single result ends a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import stat
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

from capabilities import wire
from capabilities.contract import ToolError, failure


def run_server(server: Any, notification_options: Any = None) -> NoReturn:
    """Serve the low-level MCP `server` on stdin/stdout until the client leaves, then exit 0.
    `notification_options` (the SDK's `NotificationOptions`) declares the notifications it sends,
    such as `tools/list_changed`."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    guard(server)

    async def serve_stdio() -> None:
        async with stdio_transport() as (read_stream, write_stream):
            await server.run(wire.ReadableStream(read_stream), wire.SendableStream(write_stream),
                             server.create_initialization_options(notification_options))

    serve(lambda: anyio.run(serve_stdio))
    exit_now()


@contextlib.asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[Any, Any]]:
    """The process's stdin and stdout as an MCP transport: the read and write streams a server's
    `run` takes, one JSON-RPC message a line, as the SDK's `stdio_server`. While it serves, fd 0
    reads the null device and fd 1 writes to stderr, so what a child or a stray print writes
    misses the wire; both are restored after. At the end of input, the requests already read are
    answered before the read stream ends (`_InFlight`).

    When both are pipes or sockets (a client's pipes, always), the event loop reads and writes
    them itself. The SDK's reads each line and writes and flushes each message in a worker
    thread, three thread round trips a request. On a terminal or a file, the SDK's serves."""
    in_flight = _InFlight()
    if not (_is_pipe(0) and _is_pipe(1)):
        async with stdio_server() as (read, write), _draining(read, write, in_flight) as streams:
            yield streams
        return
    loop = asyncio.get_running_loop()
    wire_in = _claim(0, os.open(os.devnull, os.O_RDONLY))
    wire_out = _claim(1, _stderr_or_null())
    reader = asyncio.StreamReader(limit=wire.MAX_MESSAGE_BYTES)
    # the transports close their own copies (the reader's at end of input)
    read_pipe, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                os.fdopen(_copy(wire_in), "rb", buffering=0))
    write_pipe, flow = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                     os.fdopen(_copy(wire_out), "wb", buffering=0))
    writer = asyncio.StreamWriter(write_pipe, flow, None, loop)
    read_send, read_receive = create_context_streams[SessionMessage | Exception](0)
    write_send, write_receive = create_context_streams[SessionMessage](0)

    async def read_lines() -> None:
        async with read_send:
            while line := await reader.readline():
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line.decode("utf-8", "replace"),
                                                                         by_name=False)
                except Exception as exc:  # the server answers a message it cannot parse
                    await read_send.send(exc)
                    continue
                in_flight.read(message)
                await read_send.send(SessionMessage(message))
            await in_flight.answered()

    async def write_messages() -> None:
        async with write_receive:
            async for item in write_receive:
                in_flight.wrote(item.message)
                writer.write(item.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
                await writer.drain()

    try:
        async with _pumping(read_lines, write_messages, read_receive, write_send) as streams:
            yield streams
    finally:
        read_pipe.close()
        write_pipe.close()
        for fd, wire_fd in ((0, wire_in), (1, wire_out)):
            os.set_blocking(wire_fd, True)  # as it was: the transports made it non-blocking
            os.dup2(wire_fd, fd)
            os.close(wire_fd)


class _InFlight:
    """The client's requests the server has not answered yet. A client may send its requests and
    close its end at once (`serve < requests.jsonl`, a pipe): the SDK's server stops at the end of
    input and cancels what it is handling, so the input is held open until those are answered.
    Not a request the client cancelled (never answered), nor once the server waits on the client
    itself (an elicitation), which can no longer answer."""

    def __init__(self) -> None:
        self.client: set[Any] = set()
        self.server: set[Any] = set()  # the server's own requests awaiting the client's answer
        self._changed = anyio.Event()

    def read(self, message: Any) -> None:
        if isinstance(message, types.JSONRPCRequest):
            self.client.add(coerce_request_id(message.id))
        elif isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
            self._settle(self.server, message.id)
        elif message.method == "notifications/cancelled":
            self._settle(self.client, cancelled_request_id_from_params(message.params))

    def wrote(self, message: Any) -> None:
        if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
            self._settle(self.client, message.id)
        elif isinstance(message, types.JSONRPCRequest):
            self.server.add(coerce_request_id(message.id))
            self._changed.set()

    def _settle(self, ids: set[Any], request_id: Any) -> None:
        request_id = None if request_id is None else coerce_request_id(request_id)
        if request_id in ids:
            ids.discard(request_id)
            self._changed.set()

    async def answered(self) -> None:
        """Once the input has ended: wait until every request read is answered."""
        while self.client and not self.server:
            await self._changed.wait()
            self._changed = anyio.Event()


@contextlib.asynccontextmanager
async def _draining(read: Any, write: Any, in_flight: _InFlight) -> AsyncIterator[tuple[Any, Any]]:
    """A transport's streams relayed through `in_flight`, for the SDK's stdio transport."""
    read_send, read_receive = create_context_streams[SessionMessage | Exception](0)
    write_send, write_receive = create_context_streams[SessionMessage](0)

    async def relay_in() -> None:
        async with read_send:
            async for item in read:
                if isinstance(item, SessionMessage):
                    in_flight.read(item.message)
                await read_send.send(item)
            await in_flight.answered()

    async def relay_out() -> None:
        async with write, write_receive:
            async for item in write_receive:
                in_flight.wrote(item.message)
                await write.send(item)

    async with _pumping(relay_in, relay_out, read_receive, write_send) as streams:
        yield streams


@contextlib.asynccontextmanager
async def _pumping(read: Callable[[], Any], write: Callable[[], Any], read_receive: Any,
                   write_send: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A transport's reading and writing tasks running while its streams are in use; at the end
    the reading stops and the writing sends what is queued, then ends."""
    async with anyio.create_task_group() as writing:
        writing.start_soon(write)
        async with anyio.create_task_group() as reading:
            reading.start_soon(read)
            try:
                yield read_receive, write_send
            finally:
                reading.cancel_scope.cancel()
        write_send.close()


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _stderr_or_null() -> int:
    """Where fd 1 writes while serving: stderr, or the null device when there is none."""
    try:
        return os.dup(2)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)


def _claim(fd: int, diversion: int) -> int:
    """A private descriptor for what `fd` is, with `fd` pointed at `diversion` meanwhile."""
    private = _copy(fd)
    os.dup2(diversion, fd)
    os.close(diversion)
    return private


def _copy(fd: int) -> int:
    """A duplicate of `fd`, close-on-exec, above the standard three."""
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def guard(server: Any) -> Any:
    """`server` with the last line of defence of its transport: a result that cannot be sent
    becomes the contract's `internal` failure for that call alone (`capabilities.wire`)."""
    return wire.install(server, lambda message: failure(ToolError(
        "internal", message, hint="report this error; other calls are not affected")))


def serve(main: Callable[[], None]) -> None:
    """Call a server's blocking stdio `main`; a closed pipe ends the process quietly."""
    try:
        main()
    except BaseException as exc:  # noqa: BLE001 - re-raised unless it is the client leaving
        if not _client_gone(exc):
            raise
        # Nothing more may reach the closed pipe, not even the interpreter's final flush.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)


def exit_now() -> NoReturn:
    """Leave at once, status 0, once everything is stopped and recorded (see the docstring)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _client_gone(exc: BaseException) -> bool:
    """Whether `exc` (or every leaf of an exception group) says the client's pipe closed."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_client_gone(inner) for inner in exc.exceptions)
    return isinstance(exc, (BrokenPipeError, ConnectionResetError, anyio.BrokenResourceError,
                            anyio.ClosedResourceError, KeyboardInterrupt))
