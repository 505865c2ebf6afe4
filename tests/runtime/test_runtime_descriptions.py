"""The run_js / run_py descriptions: they teach the guest API, the limits, the desktop, and every
built-in tool's typed declaration; servers added by config get one line per tool."""

from __future__ import annotations

from runtime.descriptions import SPEC_EXEC_EXAMPLE, run_js_description, run_py_description

ECHO = {"name": "echo", "description": "Return the text.\n\nMore detail.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string", "description": "What to echo"}},
                        "required": ["text"]},
        "outputSchema": {"type": "object", "anyOf": [
            {"type": "object", "properties": {"echoed": {"type": "string"}}, "required": ["echoed"]},
            {"type": "object", "properties": {"error": {"type": "object"}}, "required": ["error"]}]}}
TOOLS = {"test": [ECHO]}


def test_js_description_teaches_the_guest_api_limits_and_the_desktop() -> None:
    """The model learns the typed functions, the raw call, the helpers, the limits and where things are."""
    text = run_js_description(["test"], TOOLS)
    for needle in ("await tools.<server>.<tool>(args)", "ToolError", "tools.exec.run(", "mcp.callTool(server, tool, args)",
                   "mcp.describe(server, tool?)", "artifact(x)", "console.log", "setTimeout", "no fetch",
                   "timeout_seconds", "heap_memory_max_mb", "default 60", "max 600", "1 to 1024",
                   "1280x800", "/data/chrome/Downloads", "Between runs persist", "browser_execute for"):
        assert needle in text, needle


def test_the_specs_exec_example_is_in_the_description_word_for_word() -> None:
    """The spec's polling loop is the model's first example; it must be exactly the spec's."""
    assert SPEC_EXEC_EXAMPLE in run_js_description([], {})
    assert 'JSON.parse((await mcp.callTool("exec", tool, args)).content[0].text)' in SPEC_EXEC_EXAMPLE


def test_builtin_servers_are_declared_in_full_with_result_types() -> None:
    """A built-in server's tools appear as typed functions: arguments, field docs and result type."""
    text = run_js_description(["test"], TOOLS, builtin={"test"})
    assert "declare namespace tools.test {" in text
    assert "function echo(args: {text: string}): Promise<{echoed: string} & WithImages>;" in text
    assert "What to echo" not in text  # field docs: mcp.describe, so both descriptions fit the budget
    assert "More detail." not in text  # the rest of a description restates the declaration


def test_config_servers_get_one_line_per_tool_and_a_pointer_to_describe() -> None:
    """Third-party servers may be large: one line each, the full text one describe() away."""
    text = run_js_description(["test"], TOOLS)
    assert '// test (full declarations: await mcp.describe("test"))' in text
    assert "//   echo({text: string})  -- Return the text." in text
    assert "declare namespace tools.test" not in text


def test_unknown_servers_point_to_describe() -> None:
    """A server whose tools are not known yet is named with the call that lists it."""
    text = run_js_description(["browser", "test"], TOOLS)
    assert '// browser: its tools are listed by await mcp.describe("browser")' in text


def test_py_description_uses_python_spelling() -> None:
    """run_py's description speaks Python: call_tool, call_tools, list_tools, Python stubs."""
    text = run_py_description(["test", "exec"], TOOLS, builtin={"test"})
    for needle in ("mcp.call_tool(server, tool, args)", "mcp.call_tools([(server, tool, args), ...])",
                   "tools.<server>.<tool>(**args)", "ToolError", "tools.exec.run(bin=",
                   "mcp.list_tools(server=None)", "memory_max_mb", "class tools:", "class test:",
                   "def echo(*, text) -> dict: ...", 'mcp.describe("exec")'):
        assert needle in text, needle


def test_builtin_servers_beyond_the_spec_are_named_with_their_tools() -> None:
    """files and the like are one line each (their declarations one describe away): in full they
    would take tools/list past its budget."""
    text = run_js_description(["test"], TOOLS, brief={"test"})
    assert '// test: echo (declarations: await mcp.describe("test"))' in text
    assert "declare namespace tools.test" not in text
    assert 'mcp.describe("test")' in run_py_description(["test"], TOOLS, brief={"test"})
