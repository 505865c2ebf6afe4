"""The operator's policy (runtime/policy.py): rules, budgets, asking, and what the model is told."""

from __future__ import annotations

import json
import sys

import pytest

from capabilities.session_server.store import TimelineReader
from runtime.config import ConfigError, StdioServer, load_policy
from runtime.policy import Policy, PolicyError
from runtime.server import Runtime
from tests.fixtures.runtime import TEST_SERVER

pytestmark = pytest.mark.anyio

TEST = StdioServer(command=sys.executable, args=(str(TEST_SERVER),))
RULES = {
    "exec": "ask",
    "exec.stream_logs": "allow",
    "exec.exec.curl": "deny",
    "browser.browser_execute.evaluate": "deny",
    "browser.desktop_execute.keyboard.type": "ask",
}


def _policy(**entry: object) -> Policy:
    return Policy.parse({"policy": entry})


def test_the_most_specific_rule_decides_each_part_and_the_strictest_part_the_call() -> None:
    policy = _policy(rules=RULES)
    assert policy.decide("exec", "exec", {"bin": "/usr/bin/curl", "args": []}) == ("deny", "exec.exec.curl")
    assert policy.decide("exec", "exec", {"bin": "ls"}) == ("ask", "exec")
    assert policy.decide("exec", "stream_logs", {"id": "x"}) == ("allow", "exec.stream_logs")
    batch = {"operations": [{"type": "goto", "url": "http://x"}, {"type": "evaluate", "expression": "1"}]}
    assert policy.decide("browser", "browser_execute", batch) == ("deny", "browser.browser_execute.evaluate")
    assert policy.decide("browser", "desktop_execute", {"operations": [{"type": "keyboard.type", "params": {"text": "a"}}]}) == (
        "ask", "browser.desktop_execute.keyboard.type")
    assert policy.decide("browser", "browser_execute", {"operations": [{"type": "goto"}]}) == ("allow", "default")
    assert _policy(default="deny", rules={"documents": "allow"}).decide("files", "read", {}) == ("deny", "default")


def test_a_malformed_policy_is_refused_naming_the_field(tmp_path) -> None:
    with pytest.raises(PolicyError, match=r"policy.rules.exec: Input should be 'allow', 'ask' or 'deny'"):
        _policy(rules={"exec": "maybe"})
    with pytest.raises(PolicyError, match=r"policy.rulez is not a policy field; its fields: default, rules"):
        _policy(rulez={})
    with pytest.raises(PolicyError, match=r"policy.budgets.exec must be 0 or more"):
        _policy(budgets={"exec": -1})
    with pytest.raises(PolicyError, match=r"'exec\.\.x' is not server, server.tool or server.tool.operation"):
        _policy(rules={"exec..x": "deny"})
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"mcpServers": {}, "policy": {"default": "never"}}))
    with pytest.raises(ConfigError, match=rf"{config}: policy.default"):
        load_policy(config)
    config.write_text(json.dumps({"mcpServers": {}}))
    assert load_policy(config).permissive


async def test_a_denied_call_is_a_failed_result_and_never_reaches_its_server(tmp_path) -> None:
    policy = _policy(rules={"test.crash": "deny"})
    async with Runtime({"test": TEST}, listing_cache=tmp_path / "t.json", policy=policy) as runtime:
        result = await runtime.run("js", {"code": """
            const pid = (await mcp.callTool("test", "pid", {})).content[0].text;
            const crash = await mcp.callTool("test", "crash", {});
            const after = (await mcp.callTool("test", "pid", {})).content[0].text;
            ({same: pid === after, isError: crash.isError, error: crash.structuredContent.error})"""})
        value = json.loads(result.content[0].text)
        assert value["same"] is True  # the server was never told to crash
        assert value["isError"] is True
        assert value["error"]["kind"] == "denied"
        assert "rule 'test.crash': deny" in value["error"]["message"]


async def test_a_budget_counts_each_servers_calls_per_run(tmp_path) -> None:
    policy = _policy(budgets={"test": 2})
    code = """const out = [];
        for (let i = 0; i < 3; i++) out.push((await mcp.callTool("test", "echo", {text: String(i)})).isError);
        out"""
    async with Runtime({"test": TEST}, listing_cache=tmp_path / "t.json", policy=policy) as runtime:
        for _ in range(2):  # a fresh budget for each run
            result = await runtime.run("js", {"code": code})
            assert json.loads(result.content[0].text) == [False, False, True]
        spent = await runtime.run("js", {"code": """
            for (const text of ["a", "b"]) await mcp.callTool("test", "echo", {text});
            (await mcp.callTool("test", "echo", {text: "c"})).structuredContent.error.message"""})
        assert "allows 2 calls to test per run" in spent.content[0].text


async def test_ask_waits_for_the_answer_and_runs_exactly_what_was_shown(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CODEDESK_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("CODEDESK_TIMELINE", raising=False)
    policy = _policy(rules={"test.echo": "ask"})
    questions: list[str] = []
    answers = iter(["accept", "decline", "timeout"])

    async def ask(request) -> str:
        questions.append(request.question())
        return next(answers)

    code = """const r = await mcp.callTool("test", "echo", {text: "rm -rf ~"});
        r.isError ? r.structuredContent.error.kind : r.content[0].text"""
    async with Runtime({"test": TEST}, listing_cache=tmp_path / "t.json", policy=policy) as runtime:
        assert (await runtime.run("js", {"code": code}, ask=ask)).content[0].text == "rm -rf ~"
        assert (await runtime.run("js", {"code": code}, ask=ask)).content[0].text == "denied"
        assert (await runtime.run("js", {"code": code}, ask=ask)).content[0].text == "approval_timeout"
        # nobody to ask: refused, saying why
        refused = await runtime.run("js", {"code": 'JSON.stringify((await mcp.callTool("test", "echo", {text: "a"})).structuredContent)'})
        assert "nobody can be asked here" in refused.content[0].text
        assert '"kind": "denied"' in refused.content[0].text or '"kind":"denied"' in refused.content[0].text
        # a call the policy allows is not asked about
        assert (await runtime.run("js", {"code": '(await mcp.callTool("test", "pid", {})).isError'}, ask=ask)
                ).content[0].text == "false"
        runtime.timeline.flush()
        entries = TimelineReader(runtime.timeline.folder).entries(limit=1000)
    approvals = [e for e in entries if e["kind"] == "approval"]
    assert [e["detail"]["answer"] for e in approvals] == ["accept", "decline", "timeout", "unasked"]
    assert [e["controls"] for e in approvals] == ["person", "person", "agent", "agent"]
    assert all(e["seq"] == 1 and e["detail"]["rule"] == "test.echo" for e in approvals)
    assert len(questions) == 3
    assert all("test.echo" in q and '"text": "rm -rf ~"' in q and "rule 'test.echo'" in q for q in questions)
    # the person is told where in the script the call comes from, and so is the timeline
    assert all("asks from line 1 of its script" in q for q in questions)
    assert {e["detail"]["line"] for e in entries if e["kind"] == "call" and e["tool"] == "echo"} == {1}


async def test_the_descriptions_tell_the_model_what_the_policy_refuses_or_asks(tmp_path) -> None:
    policy = _policy(rules=RULES, budgets={"exec": 20})
    async with Runtime({"test": TEST}, listing_cache=tmp_path / "t.json", policy=policy) as runtime:
        for tool in runtime.tools():
            assert "- refused: browser.browser_execute.evaluate, exec.exec.curl" in tool.description
            assert "- wait for a person's approval" in tool.description and "exec" in tool.description
            assert "- calls per run at most: exec 20" in tool.description
    async with Runtime({"test": TEST}, listing_cache=tmp_path / "t.json") as runtime:
        assert all("operator's policy" not in tool.description for tool in runtime.tools())
