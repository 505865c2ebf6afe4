"""The stdio entry point every capability server shares: run it, and end quietly when the
client goes away.

A server's client (the runtime) closing the pipes is the normal end of a server's life, not a
crash: the write that finds the pipe closed must not print a traceback into the runtime's log,
and the process must exit at once with status 0.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import anyio


def serve(main: Callable[[], None]) -> None:
    """Call the server's blocking stdio `main`; a closed pipe ends the process quietly."""
    try:
        main()
    except BaseException as exc:  # noqa: BLE001 - re-raised unless it is the client leaving
        if not _client_gone(exc):
            raise
        # Nothing more may reach the closed pipe, not even the interpreter's final flush.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)


def _client_gone(exc: BaseException) -> bool:
    """Whether `exc` (or every leaf of an exception group) says the client's pipe closed."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_client_gone(inner) for inner in exc.exceptions)
    return isinstance(exc, (BrokenPipeError, ConnectionResetError, anyio.BrokenResourceError,
                            anyio.ClosedResourceError, KeyboardInterrupt))
