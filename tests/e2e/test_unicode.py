"""End to end: text that is not valid Unicode (a lone UTF-16 surrogate, which any JavaScript
string or web page may hold) never breaks a transport. It reaches the agent as U+FFFD, over
stdio and HTTP, and the next call works; a result that still cannot be serialized fails its one
call as an internal error and the server goes on serving."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.runtime import CODEDESK, RuntimeClient, runtime_env, start_runtime, write_test_server_config

REPLACEMENT = "\ufffd"


@pytest.fixture(scope="module", params=["stdio", "http"])
def rt(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeClient]:
    """A runtime with the test server, one per transport, shared by this module's tests."""
    data = tmp_path_factory.mktemp(f"unicode-{request.param}")
    raw = {"command": sys.executable, "args": [str(Path(__file__).parents[1] / "raw_escapes_server.py")]}
    config = write_test_server_config(data / "servers.json", extra={"raw": raw})
    with start_runtime(runtime_env(data), config=config, transport=request.param) as client:
        yield client


def assert_answers(rt: RuntimeClient) -> None:
    after = rt.run_js("1 + 1")
    assert (after.is_error, after.text) == (False, "2")


@pytest.mark.parametrize(("code", "expected"), [
    ("String.fromCharCode(0xD800)", REPLACEMENT),
    ('console.log("\\uDC00")', REPLACEMENT),
    ('"a\\uD83D" + "b\\uDE00c"', f"a{REPLACEMENT}b{REPLACEMENT}c"),
    ('"\\uD83D\\uDE00 ok"', "\U0001F600 ok"),
    ('({["k\\uDBFF"]: ["\\uDFFF"]})', json.dumps({f"k{REPLACEMENT}": [REPLACEMENT]}, ensure_ascii=False)),
    ('artifact("x\\uD800"); "done"', "done"),
    ('await mcp.callTool("test", "echo", {text: "e\\uD800"}).then((r) => r.content[0].text)', f"e{REPLACEMENT}"),
    ('await Promise.reject(new Error("m\\uD800"))', f"Error: m{REPLACEMENT}"),
    ('throw new Error("s\\uD800")', f"Error: s{REPLACEMENT}"),
    ('throw "t\\uDC00"', f"t{REPLACEMENT}"),
], ids=["value", "console", "halves", "pair", "keys", "artifact", "tool-args", "error", "sync-throw", "sync-throw-string"])
def test_a_lone_surrogate_reaches_the_agent_as_a_replacement_character(rt: RuntimeClient, code, expected):
    """run_js text holding a lone surrogate answers with U+FFFD in its place, and the next call works."""
    out = rt.run_js(code)
    assert expected in out.text, out.text
    assert "\\ud" not in out.text.lower()
    for block in out.content:
        if block.type == "text":
            block.text.encode("utf-8")  # every block is valid Unicode
    assert_answers(rt)


def test_console_lines_stream_as_valid_unicode(rt: RuntimeClient) -> None:
    """The live log notification of a console line holding a lone surrogate carries U+FFFD."""
    out = rt.run_js('console.log("live \\uDC00"); 1')
    assert not out.is_error and f"live {REPLACEMENT}" in out.text
    assert any(f"live {REPLACEMENT}" in str(data) for _, data in out.logs), out.logs
    assert_answers(rt)


def test_run_py_answers_a_lone_surrogate_with_a_replacement_character(rt: RuntimeClient) -> None:
    """run_py's value and printed lines holding a lone surrogate come back as U+FFFD too."""
    out = rt.run_py("print('p\\ud800')\n'v\\udc00'")
    assert not out.is_error, out.text
    assert out.text.splitlines() == [f"p{REPLACEMENT}", f"v{REPLACEMENT}"]
    assert_answers(rt)


def test_an_unsendable_result_fails_its_call_alone(rt: RuntimeClient) -> None:
    """A capability result that cannot be serialized (the test server builds one on purpose) is
    an internal error for that call; the server is not restarted and the next call works."""
    before = rt.run_js('(await mcp.callTool("test", "pid", {})).content[0].text').text
    out = rt.run_js('JSON.stringify(await mcp.callTool("test", "unsendable", {}))')
    assert not out.is_error, out.text
    result = json.loads(out.text)
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["kind"] == "internal"
    message = result["structuredContent"]["error"]["message"]
    assert "could not be sent" in message and "surrogates not allowed" in message, message
    assert rt.run_js('(await mcp.callTool("test", "pid", {})).content[0].text').text == before
    assert rt.run_js('(await mcp.callTool("test", "echo", {text: "next"})).content[0].text').text == "next"
    assert_answers(rt)


def test_a_servers_escaped_lone_surrogates_reach_the_agent(rt: RuntimeClient) -> None:
    """A server writing JSON by hand may escape a lone surrogate ("\\ud800", valid JSON that the
    SDK's parser refuses, so its answer was dropped and the call waited out its timeout): the
    answer arrives, each lone surrogate as U+FFFD."""
    out = rt.run_js('JSON.stringify(await mcp.callTool("raw", "lone", {}))', timeout_seconds=20)
    assert not out.is_error, out.text
    result = json.loads(out.text)
    assert result["content"][0]["text"] == f"x{REPLACEMENT}y"
    assert result["structuredContent"] == {f"k{REPLACEMENT}": f"x{REPLACEMENT}y"}
    assert_answers(rt)


def test_a_request_escaping_a_lone_surrogate_is_answered(tmp_path: Path) -> None:
    """A client whose JSON escapes a lone surrogate in run_js's code (Python's json.dumps does)
    gets its answer over stdio, with U+FFFD in place of the surrogate."""
    with subprocess.Popen([CODEDESK, "serve"], env=runtime_env(tmp_path), stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as process:
        def send(message: dict) -> None:
            process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
            process.stdin.flush()

        def answer(request_id: int) -> dict:
            deadline = time.monotonic() + 60
            while select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                line = process.stdout.readline()
                assert line, f"the runtime closed its stdout before answering request {request_id}"
                if json.loads(line).get("id") == request_id:
                    return json.loads(line)
            raise AssertionError(f"no answer to request {request_id} in 60 s")

        try:
            send({"id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
            assert "result" in answer(1)
            send({"method": "notifications/initialized"})
            send({"id": 2, "method": "tools/call", "params": {"name": "run_js", "arguments": {"code": '"s\ud800"'}}})
            result = answer(2)["result"]
            assert result["isError"] is False, result
            assert result["content"][0]["text"] == f"s{REPLACEMENT}"
        finally:
            process.kill()


PAGE_SETUP = """
const page = async (operations) => (await mcp.callTool("browser", "browser_execute",
  {tab: "unicode", operations})).structuredContent;
await page([{type: "navigate", params: {url: %s}},
            {type: "evaluate", params: {script: "document.body.append(String.fromCharCode(0xDC01)); document.title = 'T' + String.fromCharCode(0xD800) + 'itle'"}}]);
"""


def test_page_text_holding_a_lone_surrogate_reaches_the_agent(desktop_runtime, pages_server) -> None:
    """getText and evaluate of a page whose text holds a lone surrogate answer with U+FFFD, in
    time, and the browser server goes on serving."""
    setup = PAGE_SETUP % json.dumps(pages_server.url("index.html"))
    out = desktop_runtime.run_js(setup + """
const text = await page([{type: "getText"}]);
const value = await page([{type: "evaluate", params: {script: "'e' + String.fromCharCode(0xD800)"}}]);
JSON.stringify({text: JSON.stringify(text).includes("\\uFFFD"), value: value.results[0].result});
""", timeout_seconds=30)
    assert not out.is_error, out.text
    seen = json.loads(out.text.splitlines()[-1])
    assert seen == {"text": True, "value": f"e{REPLACEMENT}"}, seen
    again = desktop_runtime.run_js(
        '(await mcp.callTool("browser", "browser_execute", {tab: "unicode", close: true, '
        'operations: [{type: "evaluate", params: {script: "1 + 1"}}]})).isError')
    assert again.text == "false", again.text


def test_a_window_title_and_the_clipboard_holding_a_lone_surrogate_reach_the_agent(desktop_runtime, pages_server) -> None:
    """A window titled by a page with a lone surrogate, and clipboard text holding one, are read
    back with U+FFFD, and the desktop server goes on serving."""
    setup = PAGE_SETUP % json.dumps(pages_server.url("index.html"))
    out = desktop_runtime.run_js(setup + """
const desk = async (operations) => (await mcp.callTool("browser", "desktop_execute", {operations})).structuredContent;
let windows;  // Chromium retitles its window a moment after the page's title changes
for (let i = 0; i < 100; i++) {
  windows = await desk([{type: "getWindows"}]);
  if (/T.itle/.test(JSON.stringify(windows))) break;
  await new Promise((ok) => setTimeout(ok, 100));
}
const clip = await desk([{type: "clipboard.setContent", params: {text: "c" + String.fromCharCode(0xDBFF)}},
                         {type: "clipboard.getContent"}]);
JSON.stringify({titles: JSON.stringify(windows).match(/T.itle/g), clip: clip.results[1].result});
""", timeout_seconds=60)
    assert not out.is_error, out.text
    seen = json.loads(out.text.splitlines()[-1])
    assert f"T{REPLACEMENT}itle" in (seen["titles"] or []), seen
    assert REPLACEMENT in json.dumps(seen["clip"], ensure_ascii=False), seen
    assert desktop_runtime.run_js("1 + 1").text == "2"
