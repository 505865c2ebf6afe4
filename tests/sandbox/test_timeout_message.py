"""What a timed-out run tells the model about the tool calls it cancelled, in both engines."""

from __future__ import annotations

import pytest

from sandbox import JsLimits, PyLimits

from .conftest import ToolHost

pytestmark = pytest.mark.anyio

TWO_CALLS = {
    "js": "await Promise.all([mcp.callTool('t', 'delay', {seconds: 30}), mcp.callTool('t', 'delay', {seconds: 30})]);",
    "py": "mcp.call_tools([('t', 'delay', {'seconds': 30}), ('t', 'delay', {'seconds': 30})])",
}
NO_CALL = {"js": "while (true) {}", "py": "while True: pass"}


async def _run(language: str, js_engine, py_engine, tools: ToolHost, code: str):
    if language == "js":
        return await js_engine.run(code, **tools.kwargs(), limits=JsLimits(timeout_seconds=1))
    return await py_engine.run(code, **tools.kwargs(), limits=PyLimits(timeout_seconds=1))


@pytest.mark.parametrize("language", ["js", "py"])
async def test_a_timeout_names_the_calls_it_cancelled_and_what_stays_done(language, js_engine, py_engine, tools):
    """The model must know which calls were cut short and that their effects so far remain,
    or it retries blindly (a second click, a second file)."""
    result = await _run(language, js_engine, py_engine, tools, TWO_CALLS[language])
    assert result.error is not None and result.error.kind == "timeout"
    message = result.error.message
    assert "the 2 tool calls still running (t.delay x2) were cancelled" in message
    assert "not undone" in message and "timeout_seconds=1" in message


@pytest.mark.parametrize("language", ["js", "py"])
async def test_a_timeout_with_no_call_running_says_so(language, js_engine, py_engine, tools):
    """A run stopped in its own code cancelled nothing: the message must not claim it did."""
    result = await _run(language, js_engine, py_engine, tools, NO_CALL[language])
    assert result.error is not None and result.error.kind == "timeout"
    assert "no tool call was running then" in result.error.message
    assert "cancelled" not in result.error.message
