"""The descriptions of run_js and run_py: the guest API, the limits, and the connected servers'
tools with compact signatures (TypeScript-like for run_js, Python-like for run_py).

They are regenerated whenever the known tool listing changes; servers not started yet are
named with a pointer to `listTools`, so describing never starts a server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sandbox.result import (
    HEAP_MEMORY_MAX_MB_RANGE,
    MAX_ARTIFACT_BYTES_RANGE,
    MAX_ARTIFACTS_RANGE,
    MAX_OUTPUT_BYTES_RANGE,
    MAX_TOOL_CALLS_RANGE,
    MEMORY_MAX_MB_RANGE,
    TIMEOUT_SECONDS_RANGE,
)

from . import signatures

ToolsByServer = Mapping[str, Sequence[Mapping[str, Any]]]
"""`{server: [{name, description, inputSchema}]}` of the servers whose tools are known."""


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def _limits_text(memory_field: str, memory_range: tuple[int, int, int], memory_what: str) -> str:
    t_low, t_default, t_high = TIMEOUT_SECONDS_RANGE
    m_low, m_default, m_high = memory_range
    return (
        f"Limits: timeout_seconds = wall time of the whole run (default {t_default:g}, max {t_high:g}); "
        f"when it hits, in-flight tool calls are cancelled. {memory_field} = {memory_what} in MiB "
        f"(default {m_default}, {m_low} to {m_high}). Console output is kept up to "
        f"{_mib(MAX_OUTPUT_BYTES_RANGE[1])} (the rest is cut with a marker); at most "
        f"{MAX_ARTIFACTS_RANGE[1]} artifacts totalling {_mib(MAX_ARTIFACT_BYTES_RANGE[1])}; at most "
        f"{MAX_TOOL_CALLS_RANGE[1]} tool calls per run. Every failure (syntax, thrown, timeout, memory, "
        "output, call budget, bridge) comes back as an error result naming the kind and the line in your code."
    )


def _first_line(text: str | None) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= 160 else line[:159] + "…"


def _servers_text(servers: Sequence[str], tools: ToolsByServer, render: Any, list_call: str) -> str:
    if not servers:
        return "No capability servers are configured."
    lines = ["Servers and their tools (argument object's type shown):"]
    for server in servers:
        known = tools.get(server)
        if known is None:
            lines.append(f"- {server}: not started yet; {list_call.format(server=server)} lists its tools.")
            continue
        lines.append(f"- {server}:")
        for tool in known:
            summary = _first_line(tool.get("description"))
            lines.append(f"    {render(tool['name'], tool.get('inputSchema'))}" + (f"  // {summary}" if summary else ""))
    return "\n".join(lines)


def run_js_description(servers: Sequence[str], tools: ToolsByServer) -> str:
    """The description of run_js for these configured servers and known tools."""
    return "\n\n".join(
        [
            "Run a JavaScript script (QuickJS, ES2023, in a WebAssembly sandbox) that acts through MCP "
            "capability servers. One script can do many steps, loop, branch and call tools in parallel "
            "(Promise.all), then return only what matters. The result is the console output, then the "
            "value of the last expression (strings as they are, other values as JSON); images attached "
            "with artifact() follow as image blocks.",
            "Guest API:\n"
            "- await mcp.callTool(server, tool, args) -> {content: [{type: \"text\", text} | {type: \"image\", data, mimeType}], "
            "isError, structuredContent?}; e.g. JSON.parse((await mcp.callTool(\"exec\", \"exec\", {...})).content[0].text). "
            "A tool's own failure is returned with isError: true; a bridge failure (unknown server or tool, "
            "server down, args not an object) throws an Error.\n"
            "- await mcp.listTools(server?) -> {server: [{name, description, inputSchema}]}\n"
            "- console.log / info / warn / error / debug\n"
            "- artifact(x): attach an image block (e.g. result.content[1] of a screenshot), "
            "{type: \"image\", data, mimeType}, or text to the result; only artifacts reach you as images.\n"
            "- setTimeout / clearTimeout / setInterval / clearInterval, top-level await, JSON, TextEncoder, atob / btoa.\n"
            "Nothing else reaches out: no fetch, require, filesystem, network, environment or process.",
            _limits_text("heap_memory_max_mb", HEAP_MEMORY_MAX_MB_RANGE, "the JavaScript heap"),
            _servers_text(servers, tools, signatures.typescript, 'await mcp.listTools("{server}")'),
        ]
    )


def run_py_description(servers: Sequence[str], tools: ToolsByServer) -> str:
    """The description of run_py for these configured servers and known tools."""
    return "\n\n".join(
        [
            "Run a Python script (CPython in a WebAssembly sandbox, with numpy, pandas and scipy) that "
            "acts through MCP capability servers. The result is what the script prints, then the value "
            "of its last expression (strings as they are, other values as JSON); images attached with "
            "artifact() follow as image blocks.",
            "Guest API:\n"
            "- mcp.call_tool(server, tool, args: dict) -> dict {\"content\": [...], \"isError\": bool, "
            "\"structuredContent\"?: ...} (blocks until the tool answers); e.g. "
            "json.loads(mcp.call_tool(\"exec\", \"exec\", {...})[\"content\"][0][\"text\"]). "
            "A tool's own failure is returned with isError True; a bridge failure raises an exception.\n"
            "- mcp.call_tools([(server, tool, args), ...]) -> list of results; the calls run concurrently.\n"
            "- mcp.list_tools(server=None) -> {server: [{name, description, inputSchema}]}\n"
            "- print(...) and sys.stderr for output; artifact(x) attaches an image block or "
            "{\"type\": \"image\", \"data\", \"mimeType\"} or text to the result.\n"
            "Nothing else reaches out: no network, no host filesystem, no subprocesses.",
            _limits_text("memory_max_mb", MEMORY_MAX_MB_RANGE, "the interpreter's memory"),
            _servers_text(servers, tools, signatures.python, 'mcp.list_tools("{server}")'),
        ]
    )
