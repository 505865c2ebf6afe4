"""Turning a sandbox `RunResult` into the CallToolResult the agent sees: exactly one place.

One text block first (console output, then the returned value or the error), then each
artifact as its own block (images as image blocks). `isError` is set for every failed run.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from sandbox.result import well_formed

CONSOLE_PREFIX = {"log": "", "info": "", "debug": "[debug] ", "warn": "[warn] ", "error": "[error] "}


def render_value(value: Any) -> str:
    """The last expression's value as text: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def run_text(result: Any) -> str:
    """The one text block of a run: console lines, then the value or the error line."""
    lines = [f"{CONSOLE_PREFIX.get(level, '')}{text}" for level, text in result.console]
    if result.status == "ok":
        if result.value is not None:
            lines.append(render_value(result.value))
    else:
        error = result.error
        if error is None:
            lines.append("Error: the run failed without a reason (a bug in the sandbox)")
        else:
            lines.append(f"Error: {error.describe()}")
            # A one-frame stack only repeats the line named above; a longer one shows the path.
            stack = (error.traceback or "").strip("\n")
            if len(stack.splitlines()) > 1 and stack.strip() not in error.message:
                lines.append(stack)
    return "\n".join(lines) if lines else "(no output)"


def artifact_block(artifact: dict[str, Any]) -> types.ContentBlock:
    """One artifact content dict as an MCP content block (image, or text for anything else)."""
    if artifact.get("type") == "image":
        return types.ImageContent(type="image", data=artifact["data"], mime_type=artifact.get("mimeType", "image/png"))
    if artifact.get("type") == "text":
        return types.TextContent(type="text", text=str(artifact.get("text", "")))
    return types.TextContent(type="text", text=json.dumps(artifact, ensure_ascii=False))


def to_call_tool_result(result: Any) -> types.CallToolResult:
    """The agent-facing result of one run."""
    content: list[types.ContentBlock] = [types.TextContent(type="text", text=run_text(result))]
    content.extend(artifact_block(a) for a in result.artifacts)
    return types.CallToolResult(content=content, is_error=result.status != "ok")


def error_result(message: str) -> types.CallToolResult:
    """An error result that never reached the sandbox (bad arguments, an internal failure)."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=well_formed(message))], is_error=True)


def describe_block(block: types.ContentBlock) -> str:
    """A content block for a terminal: text as is, an image as a one-line summary."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        size = len(block.data) * 3 // 4
        return f"[image artifact: {block.mime_type}, about {size} bytes]"
    return f"[{block.type} block]"
