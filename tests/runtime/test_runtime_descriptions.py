"""The run_js / run_py descriptions: they teach the guest API, the limits, and the servers' tools."""

from __future__ import annotations

from runtime.descriptions import run_js_description, run_py_description

TOOLS = {"test": [{"name": "echo", "description": "Return the text.\nMore detail.",
                   "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]}


def test_js_description_teaches_the_guest_api_and_limits() -> None:
    """The model learns mcp.callTool, listTools, console, artifact and the limits from the description."""
    text = run_js_description(["test"], TOOLS)
    for needle in ("await mcp.callTool(server, tool, args)", "mcp.listTools(server?)", "artifact(x)",
                   "console.log", "setTimeout", "no fetch", "timeout_seconds", "heap_memory_max_mb",
                   "default 60", "max 600", "1 to 1024"):
        assert needle in text, needle


def test_known_tools_are_listed_with_typescript_signatures() -> None:
    """Each started server's tools appear with their signature and the first line of their description."""
    text = run_js_description(["test"], TOOLS)
    assert "- test:\n    echo({text: string})  // Return the text." in text
    assert "More detail." not in text


def test_unstarted_servers_point_to_list_tools() -> None:
    """Describing never starts a server; the model is told how to list its tools."""
    text = run_js_description(["browser", "test"], TOOLS)
    assert '- browser: not started yet; await mcp.listTools("browser") lists its tools.' in text


def test_py_description_uses_python_spelling() -> None:
    """run_py's description speaks Python: call_tool, call_tools, list_tools, Python-like signatures."""
    text = run_py_description(["test", "exec"], TOOLS)
    for needle in ("mcp.call_tool(server, tool, args: dict)", "mcp.call_tools([(server, tool, args), ...])",
                   "mcp.list_tools(server=None)", "memory_max_mb", "echo(text: str)",
                   '- exec: not started yet; mcp.list_tools("exec") lists its tools.'):
        assert needle in text, needle
