"""The last line of defence of every MCP transport the project owns (each capability server's
stdio, the runtime's stdio and streamable HTTP): a message that cannot be sent fails alone.

The SDK turns a message into JSON in its transport's writer, after the handler has returned. A
result it cannot serialize (a lone surrogate in a string, which UTF-8 cannot carry) raises
there: over stdio the writer dies and the process with it, over HTTP that request ends in a
transport error. So:

- `SendableResults`, a server middleware (the SDK's `Server.middleware`, which sees every
  request of every transport), serializes each result once before the transport does; one that
  fails becomes, for that request alone, an `internal` error naming the cause: a tools/call
  result with `isError` made by the server's own `tool_failure`, a JSON-RPC internal error for
  any other method. The server goes on serving.
- `SendableStream` wraps a stdio write stream: a notification or a request to the client that
  cannot be serialized is dropped with a log line instead of ending the connection (responses
  are already checked by the middleware).
- `ReadableStream` wraps a read stream, the other way: JSON may escape a lone surrogate
  (`"\\ud800"`, what Python's `json.dumps` writes for one), and pydantic's parser refuses the
  whole message, which the SDK then drops: a request or answer that never arrives. Such a
  message is parsed again with each lone surrogate as U+FFFD (`parse_message`).

Text is made valid Unicode long before this (the sandbox's and the contract's `well_formed`);
this only catches what a bug lets through.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any

import anyio
import mcp_types as types
import pydantic_core
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from capabilities.contract import well_formed

log = logging.getLogger("codedesk.wire")

INTERNAL_ERROR = -32603  # JSON-RPC's "Internal error"

ToolFailure = Callable[[str], types.CallToolResult]
"""The server's own failed tools/call result for a message (its error contract)."""


MAX_MESSAGE_BYTES = 1 << 30
"""The longest JSON-RPC message read from a pipe, client or server side (the SDK's read any length)."""


def unsendable(value: Any) -> str | None:
    """Why `value` cannot be sent as JSON, or None when it can."""
    try:
        pydantic_core.to_json(value)
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError, RecursionError) as exc:
        # the cause names the character as an escape; keep it that way, whatever it holds
        return str(exc).encode("ascii", "backslashreplace").decode("ascii")
    return None


class SendableResults:
    """Server middleware: a result that cannot be serialized fails its request alone (see the
    module docstring). Install with `install(server, tool_failure)`."""

    def __init__(self, tool_failure: ToolFailure) -> None:
        self._tool_failure = tool_failure

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        result = await call_next(ctx)
        if ctx.request_id is None:  # a notification: nothing is answered
            return result
        cause = unsendable(result)
        if cause is None:
            return result
        method = ctx.method
        log.error("the result of %s (request %r) could not be sent: %s", method, ctx.request_id, cause)
        message = (f"internal error: the result of {method} could not be sent ({cause}); this call "
                   "failed alone and the server goes on serving")
        if method != "tools/call":
            raise MCPError(code=INTERNAL_ERROR, message=message)
        failed = self._tool_failure(message).model_dump(by_alias=True, mode="json", exclude_none=True)
        # keep what the SDK put around the result (its `_meta` stamp), where it can be sent
        envelope = {key: value for key, value in (result if isinstance(result, dict) else {}).items()
                    if key not in ("content", "structuredContent", "isError") and unsendable(value) is None}
        return {**envelope, **failed}


def install(server: Any, tool_failure: ToolFailure) -> Any:
    """Add `SendableResults` to `server` (innermost, after the SDK's own middleware); returns it."""
    server.middleware.append(SendableResults(tool_failure))
    return server


class SendableStream:
    """A stdio write stream that drops, with a log line, a notification or request it could not
    serialize, rather than let the transport's writer die on it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if not isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            try:
                message.model_dump_json(by_alias=True, exclude_unset=True)
            except (pydantic_core.PydanticSerializationError, ValueError, TypeError) as exc:
                cause = str(exc).encode("ascii", "backslashreplace").decode("ascii")
                log.error("a %s could not be sent and was dropped: %s", type(message).__name__, cause)
                return
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()

    async def __aenter__(self) -> SendableStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)

    def __getattr__(self, name: str) -> Any:  # anything else the SDK reads off its stream
        return getattr(self._inner, name)


def parse_message(line: str | bytes) -> types.JSONRPCMessage:
    """One JSON-RPC message as the SDK's transports parse it, except that a lone surrogate
    escape becomes U+FFFD rather than fail the message. Raises ValueError for what is not
    JSON-RPC."""
    try:
        return types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as exc:
        repaired = _with_surrogates_replaced(exc)
        if repaired is None:
            raise
        return repaired


def _with_surrogates_replaced(exc: ValidationError) -> types.JSONRPCMessage | None:
    """The message `exc` refused as invalid JSON, when Python's own parser (which takes lone
    surrogate escapes) reads it; each lone surrogate is then U+FFFD."""
    errors = exc.errors()
    if len(errors) != 1 or errors[0]["type"] != "json_invalid" or not isinstance(errors[0]["input"], str | bytes):
        return None
    try:
        data = json.loads(errors[0]["input"])
    except ValueError:
        return None
    try:
        return types.jsonrpc_message_adapter.validate_python(well_formed(data), by_name=False)
    except ValidationError:
        return None


class ReadableStream:
    """A transport's read stream whose messages refused for a lone surrogate escape are parsed
    again (`parse_message`) instead of being dropped; everything else passes as it came."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def receive(self) -> SessionMessage | Exception:
        item = await self._inner.receive()
        if isinstance(item, ValidationError):
            repaired = _with_surrogates_replaced(item)
            if repaired is not None:
                return SessionMessage(repaired)
        return item

    def __aiter__(self) -> ReadableStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()

    async def __aenter__(self) -> ReadableStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
