"""A small real MCP server for the runtime's tests and benchmarks (stdio).

Tools:
- `echo({text})` returns the text back as one text block (and `{text}` as structuredContent).
- `delay({seconds, tag?})` sleeps, then returns "slept <tag>"; a delay cancelled by the client
  (MCP `notifications/cancelled`) is remembered by tag.
- `cancelled({})` returns the JSON list of tags whose delays were cancelled, in order.
- `image({})` returns a text block and a small PNG image block.
- `error({message})` returns an `isError` result carrying the message.
- `crash({})` exits the process at once, without answering.
- `pid({})` returns this process's pid (to tell a restarted server from the old one).
- `unsendable({})` returns a result no transport can serialize (a lone surrogate in its text,
  built past the contract's `well_formed`), to test the transports' last line of defence.

It serves through the capability servers' own stdio entry (`capabilities.stdio.run_server`), so
that entry's guards are what the tests meet.

Run: `python tests/mcp_test_server.py` (or `python -m tests.mcp_test_server`); with
`--sdk-stdio` it serves on the SDK's own stdio transport instead (the benchmarks' plain SDK
server).
"""

from __future__ import annotations

import base64
import json
import os
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour PNG, built by hand so the server needs nothing but the SDK."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b"")


PNG_BASE64 = base64.b64encode(_png(4, 3, (200, 30, 30))).decode()

TOOLS = [
    types.Tool(
        name="echo",
        description="Return the text.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string", "description": "what to echo"}},
            "required": ["text"],
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="delay",
        description="Sleep, then answer.",
        input_schema={
            "type": "object",
            "properties": {"seconds": {"type": "number"}, "tag": {"type": "string"}},
            "required": ["seconds"],
            "additionalProperties": False,
        },
    ),
    types.Tool(name="cancelled", description="Tags of cancelled delays.", input_schema={"type": "object"}),
    types.Tool(name="image", description="A small PNG.", input_schema={"type": "object"}),
    types.Tool(
        name="error",
        description="An isError result.",
        input_schema={"type": "object", "properties": {"message": {"type": "string"}}},
    ),
    types.Tool(name="crash", description="Exit at once.", input_schema={"type": "object"}),
    types.Tool(name="pid", description="This process id.", input_schema={"type": "object"}),
    types.Tool(name="unsendable", description="A result that cannot be serialized.", input_schema={"type": "object"}),
]


def build_server() -> Server[Any]:
    """The test server with its tools; state (cancelled tags) lives in the closure."""
    cancelled_tags: list[str] = []

    def text(value: str) -> types.TextContent:
        return types.TextContent(type="text", text=value)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        match params.name:
            case "echo":
                return types.CallToolResult(content=[text(str(args.get("text", "")))], structured_content={"text": args.get("text")})
            case "delay":
                tag = str(args.get("tag", ""))
                try:
                    await anyio.sleep(float(args["seconds"]))
                except anyio.get_cancelled_exc_class():
                    cancelled_tags.append(tag)
                    raise
                return types.CallToolResult(content=[text(f"slept {tag}")])
            case "cancelled":
                return types.CallToolResult(content=[text(json.dumps(cancelled_tags))])
            case "image":
                return types.CallToolResult(
                    content=[text("a 4x3 red PNG"), types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")]
                )
            case "error":
                return types.CallToolResult(content=[text(str(args.get("message", "failed")))], is_error=True)
            case "crash":
                os._exit(3)
            case "pid":
                return types.CallToolResult(content=[text(str(os.getpid()))])
            case "unsendable":
                return types.CallToolResult(content=[text("a lone surrogate: \ud800")])
        return types.CallToolResult(content=[text(f"unknown tool {params.name!r}")], is_error=True)

    return Server("codedesk-test", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


def serve_on_the_sdks_stdio() -> None:
    """Serve on the SDK's own stdio transport, without the project's: a plain SDK server, the
    benchmarks' reference."""
    from mcp.server.stdio import stdio_server

    server = build_server()

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    if "--sdk-stdio" in sys.argv[1:]:
        serve_on_the_sdks_stdio()
        sys.exit(0)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: find capabilities
    from capabilities.stdio import run_server

    run_server(build_server())
