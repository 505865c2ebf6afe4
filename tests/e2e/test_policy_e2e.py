"""End to end: the operator's policy in a real `codedesk serve`, and a call it asks about put to
the client's user through MCP elicitation (the SDK's client answering elicitation/create)."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest

from tests.fixtures.runtime import runtime_env, start_runtime, write_test_server_config

ECHO = 'const r = await mcp.callTool("test", "echo", {text: %r}); r.isError ? JSON.stringify(r.structuredContent.error) : r.content[0].text'


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_call_the_policy_asks_about_is_put_to_the_clients_user(tmp_path, transport: str) -> None:
    asked: list[str] = []

    async def user(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept" if '"yes, go"' in params.message else "decline")

    config = write_test_server_config(tmp_path / "servers.json", policy={"rules": {"test.echo": "ask"}})
    with start_runtime(runtime_env(tmp_path), config=config, transport=transport, elicitation=user) as rt:
        assert rt.run_js(ECHO % "yes, go").text == "yes, go"
        declined = rt.run_js(ECHO % "no")
        assert '"kind":"denied"' in declined.text and "declined by the person asked" in declined.text
        assert rt.run_js('(await mcp.callTool("test", "pid", {})).isError').text == "false"  # not asked
    assert len(asked) == 2
    assert "test.echo" in asked[0] and "rule 'test.echo': ask" in asked[0]


def test_without_a_way_to_ask_the_call_is_refused_and_the_model_was_told(tmp_path) -> None:
    config = write_test_server_config(tmp_path / "servers.json",
                                      policy={"rules": {"test.echo": "ask", "test.crash": "deny"}})
    with start_runtime(runtime_env(tmp_path), config=config) as rt:
        refused = rt.run_js(ECHO % "hello")
        assert '"kind":"denied"' in refused.text and "does not support elicitation" in refused.text
        crash = rt.run_js('JSON.stringify((await mcp.callTool("test", "crash", {})).structuredContent.error)')
        assert '"kind":"denied"' in crash.text
        assert rt.run_js('(await mcp.callTool("test", "echo", {text: "x"})).isError').text == "true"
        tools = rt.portal_call(rt.session.list_tools).tools
        description = next(t.description for t in tools if t.name == "run_js")
        assert "- refused: test.crash" in description and "test.echo" in description
