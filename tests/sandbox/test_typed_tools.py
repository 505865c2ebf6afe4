"""The typed guest API over mcp.callTool: `tools.<server>.<tool>(args)`, `ToolError`,
`tools.exec.run` and `mcp.describe`, in both engines (the runtime supplies the declarations)."""

from __future__ import annotations

import pytest

from tests.sandbox.conftest import PNG_1PX

pytestmark = pytest.mark.anyio


class TypedHost:
    """A pretend `exec` (a command that prints two chunks) and `t` (structured, failing, raw)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict]] = []

    async def call_tool(self, server: str, tool: str, args: dict) -> dict:
        self.calls.append((server, tool, args))
        if (server, tool) == ("exec", "exec"):
            return {"content": [{"type": "text", "text": '{"id": "c1", "status": "started"}'}],
                    "structuredContent": {"id": "c1", "status": "started"}}
        if (server, tool) == ("exec", "stream_logs"):
            done = args["offset"] >= 6
            chunk = "" if done else "hello\n"
            return {"content": [{"type": "text", "text": "..."}],
                    "structuredContent": {"logs": chunk, "next_offset": 6,
                                          "status": "completed:0" if done else "running"}}
        if tool == "shot":
            return {"content": [{"type": "text", "text": "a screenshot"},
                                {"type": "image", "data": PNG_1PX, "mimeType": "image/png"}],
                    "structuredContent": {"shot": {"image_index": 0, "width": 1, "height": 1}}}
        if tool == "refuse":
            return {"content": [{"type": "text", "text": "Error: outside the roots"}], "isError": True,
                    "structuredContent": {"error": {"kind": "refused", "message": "outside the roots",
                                                    "field": "path", "hint": "use a path under ~"}}}
        if tool == "raw":
            return {"content": [{"type": "text", "text": '{"answer": 42}'}]}
        raise LookupError(f"unknown tool {server}.{tool}")

    async def list_tools(self, server: str | None) -> dict:
        return {"t": [{"name": "shot", "description": "", "inputSchema": {},
                       "declaration": "function shot(args?: {}): Promise<{shot: {image_index: number}}>;"},
                      {"name": "raw", "description": "", "inputSchema": {}, "declaration": "function raw(): any;"}]}

    def kwargs(self) -> dict:
        return {"call_tool": self.call_tool, "list_tools": self.list_tools}


CASES = {
    "structured": {
        "js": 'const r = await tools.t.shot({}); [r.shot.image_index, r.images.length, r.images[0].type]',
        "py": 'r = tools.t.shot()\n[r["shot"]["image_index"], len(r["images"]), r["images"][0]["type"]]',
        "value": [0, 1, "image"]},
    "error": {
        "js": 'try { await tools.t.refuse({path: "/etc"}); "no" } catch (e) '
              '{ [e instanceof ToolError, e.kind, e.field, e.hint, e.result.isError] }',
        "py": 'try:\n    tools.t.refuse(path="/etc")\n    r = "no"\nexcept ToolError as e:\n'
              '    r = [isinstance(e, ToolError), e.kind, e.field, e.hint, e.result["isError"]]\nr',
        "value": [True, "refused", "path", "use a path under ~", True]},
    "raw_json": {
        "js": '(await tools.t.raw({})).answer', "py": 'tools.t.raw()["answer"]', "value": 42},
    "exec_run": {
        "js": 'await tools.exec.run({bin: "echo", args: ["hello"], timeout: 5})',
        "py": 'tools.exec.run(bin="echo", args=["hello"], timeout=5)',
        "value": {"id": "c1", "status": "completed:0", "logs": "hello\n"}},
    "describe": {
        "js": 'await mcp.describe("t", "shot")', "py": 'mcp.describe("t", "shot")',
        "value": "function shot(args?: {}): Promise<{shot: {image_index: number}}>;"},
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("language", ["js", "py"])
async def test_typed_calls(case, language, js_engine, py_engine):
    """A typed call returns the structured result (images alongside), throws ToolError with the
    server's error object, and the helpers do what a script would otherwise write by hand."""
    host = TypedHost()
    engine = js_engine if language == "js" else py_engine
    result = await engine.run(CASES[case][language], **host.kwargs())
    assert result.ok, result.error
    assert result.value == CASES[case]["value"]


@pytest.mark.parametrize("language", ["js", "py"])
async def test_exec_run_sends_exactly_the_spec_fields(language, js_engine, py_engine):
    """tools.exec.run must pass only exec's own fields, so exec's unknown-field refusal never trips."""
    host = TypedHost()
    engine = js_engine if language == "js" else py_engine
    code = CASES["exec_run"][language]
    assert (await engine.run(code, **host.kwargs())).ok
    assert host.calls[0] == ("exec", "exec", {"bin": "echo", "args": ["hello"], "timeout": 5})
    assert all(call[1] == "stream_logs" and set(call[2]) == {"id", "offset"} for call in host.calls[1:])


@pytest.mark.parametrize("language", ["js", "py"])
async def test_describe_an_unknown_tool_names_the_tools_there_are(language, js_engine, py_engine):
    """A typo in describe() must be answered with the tools to choose from."""
    engine = js_engine if language == "js" else py_engine
    result = await engine.run('await mcp.describe("t", "shoot")' if language == "js" else 'mcp.describe("t", "shoot")',
                              **TypedHost().kwargs())
    assert not result.ok
    assert "no tool" in result.error.message and "shot, raw" in result.error.message
