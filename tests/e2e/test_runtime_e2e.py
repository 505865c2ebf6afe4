"""End to end: the real `codedesk serve`, over stdio and over streamable HTTP, driven by the SDK's
client, against the real test MCP server (tests/mcp_test_server.py) configured as `test`."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.fixtures.runtime import RuntimeClient, runtime_env, start_runtime, write_test_server_config


@pytest.fixture(scope="module", params=["stdio", "http"])
def rt(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeClient]:
    """A runtime with the test server, one per transport, shared by this module's tests."""
    data = tmp_path_factory.mktemp(f"e2e-{request.param}")
    config = write_test_server_config(data / "servers.json")
    with start_runtime(runtime_env(data), config=config, transport=request.param) as client:
        yield client


def tag() -> str:
    return uuid.uuid4().hex[:8]


def ensure_test_server(rt: RuntimeClient) -> None:
    """Start the test server if an earlier test crashed it: a timed run must spend its time in
    the call it means to time out, not in the server's start."""
    out = rt.run_js('(await mcp.callTool("test", "echo", {text: "up"})).content[0].text')
    assert out.text == "up", out.text


def cancelled_tags(rt: RuntimeClient, wanted: str) -> list[str]:
    """The test server's cancelled delays, waiting briefly for a cancellation still on its way."""
    deadline = time.monotonic() + 10
    while True:
        out = rt.run_js('(await mcp.callTool("test", "cancelled", {})).content[0].text')
        tags = json.loads(out.text)
        if wanted in tags or time.monotonic() > deadline:
            return tags
        time.sleep(0.1)


# -- run_js ---------------------------------------------------------------------------------------


def test_console_then_value_as_one_text_block(rt: RuntimeClient) -> None:
    """The agent gets the printed lines, then the last expression's value, in one text block."""
    out = rt.run_js('console.log("hello"); const r = await mcp.callTool("test", "echo", {text: "yo"}); ({echo: r.content[0].text})')
    assert not out.is_error
    assert [block.type for block in out.content] == ["text"]
    assert out.text == 'hello\n{"echo": "yo"}'


def test_console_lines_stream_as_log_notifications(rt: RuntimeClient) -> None:
    """Console output is also sent as MCP log notifications while the run goes."""
    out = rt.run_js('console.log("one"); console.warn("two"); console.error("three"); 0')
    assert out.logs == [("info", "one"), ("warning", "two"), ("error", "three")]


def test_parallel_tool_calls_overlap(rt: RuntimeClient) -> None:
    """Promise.all over tool calls runs them concurrently through the runtime."""
    started = time.monotonic()
    out = rt.run_js(
        'const rs = await Promise.all(Array.from({length: 10}, (_, i) =>'
        ' mcp.callTool("test", "delay", {seconds: 1, tag: String(i)})));'
        ' rs.map(r => r.content[0].text).join(",")'
    )
    assert out.text == ",".join(f"slept {i}" for i in range(10))
    assert time.monotonic() - started < 6  # serially at least 10 s


def test_capability_error_result_is_returned_to_the_script(rt: RuntimeClient) -> None:
    """A tool's isError result is data in the script, not a failed run."""
    out = rt.run_js('const r = await mcp.callTool("test", "error", {message: "bad input"}); [r.isError, r.content[0].text]')
    assert not out.is_error and out.text == '[true, "bad input"]'


def test_crash_mid_run_fails_the_call_and_the_next_call_recovers(rt: RuntimeClient) -> None:
    """A capability crash answers that call `unavailable`; a later call in the same run goes to
    the restarted server."""
    out = rt.run_js(
        'const before = (await mcp.callTool("test", "pid", {})).content[0].text;\n'
        'const crashed = await mcp.callTool("test", "crash", {});\n'
        'const after = (await mcp.callTool("test", "pid", {})).content[0].text;\n'
        '({isError: crashed.isError, error: crashed.structuredContent.error, restarted: before !== after})'
    )
    assert not out.is_error, out.text
    value = json.loads(out.text)
    assert value["isError"] is True and value["error"]["kind"] == "unavailable"
    assert "server 'test' stopped during the call to 'crash'" in value["error"]["message"]
    assert value["restarted"] is True


def test_crashed_server_restarts_on_next_call(rt: RuntimeClient) -> None:
    """A crash is a capability error of that call; the next run's call works."""
    out = rt.run_js('(await mcp.callTool("test", "crash", {})).content[0].text')
    assert not out.is_error, out.text
    assert "stopped during the call to 'crash'" in out.text and "may have taken effect" in out.text
    assert rt.run_js('(await mcp.callTool("test", "echo", {text: "alive"})).content[0].text').text == "alive"


def test_timeout_cancels_inflight_tool_calls(rt: RuntimeClient) -> None:
    """When a run times out, its pending capability calls are cancelled on the server (MCP cancellation)."""
    name = tag()
    ensure_test_server(rt)
    out = rt.run_js(f'await mcp.callTool("test", "delay", {{seconds: 30, tag: "{name}"}})', timeout_seconds=1)
    assert out.is_error and "timeout" in out.text
    assert name in cancelled_tags(rt, name)


def test_artifacts_arrive_as_image_blocks(rt: RuntimeClient) -> None:
    """artifact() of a tool's image block reaches the agent as an image block after the text."""
    out = rt.run_js('const r = await mcp.callTool("test", "image", {}); artifact(r.content[1]); "attached"')
    assert [block.type for block in out.content] == ["text", "image"]
    assert out.text == "attached"
    assert out.images[0].mime_type == "image/png" and out.images[0].data.startswith("iVBORw0KGgo")


def test_images_not_attached_stay_in_the_script(rt: RuntimeClient) -> None:
    """A screenshot the script merely handles does not reach the agent."""
    out = rt.run_js('const r = await mcp.callTool("test", "image", {}); r.content.length')
    assert out.text == "2" and out.images == []


def test_thrown_error_names_the_user_code_line(rt: RuntimeClient) -> None:
    """A thrown error is an error result naming the line in the agent's own script."""
    out = rt.run_js('console.log("before");\nconst x = 1;\nthrow new Error("boom");')
    assert out.is_error
    assert out.text.startswith("before\nError: thrown error at line 3")
    assert "boom" in out.text


def test_syntax_error_names_the_line(rt: RuntimeClient) -> None:
    """A syntax error is reported with its line, and nothing runs."""
    out = rt.run_js('const a = 1;\nconst b = ;\n')
    assert out.is_error and "syntax error at line 2" in out.text


def test_unknown_server_lists_available(rt: RuntimeClient) -> None:
    """Calling a server that does not exist throws an error listing the configured servers."""
    out = rt.run_js('await mcp.callTool("nope", "x", {})')
    assert out.is_error
    assert "unknown server 'nope'; available servers: browser, documents, exec, files, memory, session, test, web" in out.text


def test_unknown_tool_lists_the_servers_tools(rt: RuntimeClient) -> None:
    """Calling a tool a server lacks lists that server's tools."""
    out = rt.run_js('try { await mcp.callTool("test", "nope", {}) } catch (e) { e.message }')
    assert "server 'test' has no tool 'nope'; its tools: echo, delay" in out.text


def test_list_tools_gives_schemas(rt: RuntimeClient) -> None:
    """mcp.listTools(server) returns the tools with their input schemas."""
    out = rt.run_js('const t = await mcp.listTools("test"); t.test.find(x => x.name === "echo").inputSchema.required')
    assert out.text == '["text"]'


def test_heap_limit_error_leaves_runtime_usable(rt: RuntimeClient) -> None:
    """Exhausting the JS heap is a memory error result; the next run works."""
    out = rt.run_js("const a = [];\nfor (let i = 0; i < 1e7; i++) a.push({i});", heap_memory_max_mb=8, timeout_seconds=60)
    assert out.is_error and "memory error" in out.text and "heap_memory_max_mb=8" in out.text
    assert rt.run_js("1 + 1").text == "2"


def test_bad_arguments_name_the_field_and_range(rt: RuntimeClient) -> None:
    """Malformed run_js arguments come back as an error result naming the field and its range."""
    out = rt.call("run_js", {"code": "1", "timeout_seconds": 9999, "heap": 1})
    assert out.is_error
    assert "'timeout_seconds' must be a number from 0.001 to 600.0" in out.text
    assert "unknown field 'heap'" in out.text
    assert rt.call("run_py", {}).text.endswith("'code' is required (the script to run, a string)")


def test_unknown_runtime_tool_is_an_error_result(rt: RuntimeClient) -> None:
    """A client calling a tool the runtime lacks is told which tools exist."""
    out = rt.call("run_ts", {"code": "1"})
    assert out.is_error and "run_js and run_py" in out.text


@pytest.mark.parametrize("waits", ["await new Promise(r => setTimeout(r, 2500));",
                                   "const end = Date.now() + 2500; while (Date.now() < end) {}"],
                         ids=["awaiting", "computing"])
def test_progress_notifications_when_requested(rt: RuntimeClient, waits: str) -> None:
    """A long run sends progress notifications when the client passes a progress token, also
    while the script computes without awaiting (it runs off the server's event loop)."""
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async def go():  # noqa: ANN202
        return await rt.session.call_tool(
            "run_js", {"code": f"{waits} 1", "timeout_seconds": 30},
            progress_callback=on_progress,
        )

    result = rt.portal_call(go)
    assert not result.is_error
    assert len(seen) >= 2 and seen == sorted(seen)


def test_descriptions_list_tools_once_a_server_started(rt: RuntimeClient) -> None:
    """After a server starts, run_js/run_py describe its tools and the client is told the list changed;
    the built-in servers are declared in full from the first listing on, never "not started"."""
    rt.run_js('await mcp.callTool("test", "pid", {})')
    tools = {tool.name: tool for tool in rt.list_tools()}
    assert set(tools) == {"run_js", "run_py"}
    assert "echo({text: string})  -- Return the text." in tools["run_js"].description
    assert "echo(text: str)  -- Return the text." in tools["run_py"].description
    assert "declare namespace tools.exec {" in tools["run_js"].description
    assert "function stream_logs(args: {" in tools["run_js"].description
    assert "class exec:" in tools["run_py"].description
    assert "notifications/tools/list_changed" in rt.notifications


# -- run_py ---------------------------------------------------------------------------------------


def test_run_py_blocking_call_tool(rt: RuntimeClient) -> None:
    """In Python, mcp.call_tool blocks and returns the result dict."""
    out = rt.run_py('r = mcp.call_tool("test", "echo", {"text": "py"})\nprint("got", r["content"][0]["text"])\nr["isError"]')
    assert not out.is_error, out.text
    assert out.text == "got py\nfalse"


def test_run_py_output_streams_as_log_notifications(rt: RuntimeClient) -> None:
    """print and sys.stderr lines reach the client as log notifications too."""
    out = rt.run_py('import sys\nprint("out")\nprint("err", file=sys.stderr)\nNone')
    assert out.text == "out\n[error] err"
    assert out.logs == [("info", "out"), ("error", "err")]


def test_run_py_call_tools_runs_concurrently(rt: RuntimeClient) -> None:
    """mcp.call_tools runs its calls concurrently on the host."""
    started = time.monotonic()
    out = rt.run_py('rs = mcp.call_tools([("test", "delay", {"seconds": 1, "tag": str(i)}) for i in range(6)])\n'
                    '[r["content"][0]["text"] for r in rs]')
    assert json.loads(out.text) == [f"slept {i}" for i in range(6)]
    assert time.monotonic() - started < 5


def test_run_py_error_names_the_user_code_line(rt: RuntimeClient) -> None:
    """A Python exception is an error result naming its line in the script."""
    out = rt.run_py('print("before")\nx = 1\nraise ValueError("bad value")')
    assert out.is_error
    assert out.text.startswith("before\nError: thrown error at line 3") and "ValueError: bad value" in out.text


def test_run_py_artifact_arrives_as_image_block(rt: RuntimeClient) -> None:
    """artifact() in Python attaches an image block just like in JavaScript."""
    out = rt.run_py('r = mcp.call_tool("test", "image", {})\nartifact(r["content"][1])\n"ok"')
    assert [block.type for block in out.content] == ["text", "image"]


def test_run_py_timeout_cancels_inflight_tool_calls(rt: RuntimeClient) -> None:
    """A timed-out Python run cancels its pending capability call too."""
    name = tag()
    ensure_test_server(rt)
    # The engine loaded first (a fresh runtime's first run_py loads CPython's module, seconds on
    # a loaded machine), and 3 s, not 1: the call must reach the server before the timeout for
    # there to be anything in flight to cancel.
    assert not rt.run_py("1").is_error
    out = rt.run_py(f'mcp.call_tool("test", "delay", {{"seconds": 30, "tag": "{name}"}})', timeout_seconds=3)
    assert out.is_error and "timeout" in out.text
    assert name in cancelled_tags(rt, name)


def test_run_py_crash_then_recovery(rt: RuntimeClient) -> None:
    """A crash answers `unavailable` in Python too; the next call goes to the restarted server."""
    out = rt.run_py(
        'crashed = mcp.call_tool("test", "crash", {})\nprint(crashed["structuredContent"]["error"]["kind"])\n'
        'mcp.call_tool("test", "echo", {"text": "again"})["content"][0]["text"]'
    )
    assert not out.is_error, out.text
    assert "unavailable" in out.text and out.text.endswith("again")


# -- HTTP only ------------------------------------------------------------------------------------


@pytest.mark.parametrize("rt", ["http"], indirect=True)
def test_http_requires_bearer_token(rt: RuntimeClient) -> None:
    """Over HTTP, requests without the right bearer token get 401; with it they reach MCP."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with httpx.Client(timeout=30) as http:
        assert http.post(rt.url, json=initialize, headers=headers).status_code == 401
        wrong = http.post(rt.url, json=initialize, headers={**headers, "Authorization": "Bearer wrong"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"].startswith("Bearer")
        assert "Authorization: Bearer" in wrong.json()["error_description"]
        right = http.post(rt.url, json=initialize, headers={**headers, "Authorization": f"Bearer {rt.token}"})
        assert right.status_code == 200


def test_runs_spinning_in_loops_do_not_hold_up_a_console_heavy_run_past_its_deadline(rt: RuntimeClient) -> None:
    """Five runs spinning until their 8 s timeouts, and a sixth logging 16,000 lines behind an
    endless microtask chain with a 1.5 s timeout: the sixth answers with its timeout in time.
    (When QuickJS's interrupt poll was Python, each spinner took the GIL thousands of times a
    second, and the sixth answered 2.5 s late or more.)"""
    from concurrent.futures import ThreadPoolExecutor

    code = ("(function spin() { Promise.resolve().then(spin) })();\n"
            "for (let i = 0; i < 16000; i++) console.log(i, {i}, [i]);")
    with ThreadPoolExecutor(5) as pool:
        spinners = [pool.submit(rt.run_js, "for (;;) {}", timeout_seconds=8) for _ in range(5)]
        time.sleep(0.5)
        started = time.monotonic()
        out = rt.run_js(code, timeout_seconds=1.5)
        took = time.monotonic() - started
        assert out.is_error and "timeout error" in out.text
        # the contract the generated scripts hold every run to: its timeout plus 1.5 s
        assert took <= 1.5 + 1.5, f"answered after {took:.1f} s"
        assert not any(s.done() for s in spinners)
        assert all("timeout error" in s.result().text for s in spinners)
