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

import logging
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import anyio
from mcp.server.stdio import stdio_server

from capabilities import wire
from capabilities.contract import ToolError, failure


def run_server(server: Any, notification_options: Any = None) -> NoReturn:
    """Serve the low-level MCP `server` on stdin/stdout until the client leaves, then exit 0.
    `notification_options` (the SDK's `NotificationOptions`) declares the notifications it sends,
    such as `tools/list_changed`."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    guard(server)

    async def serve_stdio() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(wire.ReadableStream(read_stream), wire.SendableStream(write_stream),
                             server.create_initialization_options(notification_options))

    serve(lambda: anyio.run(serve_stdio))
    exit_now()


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
