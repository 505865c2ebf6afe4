"""The stdio transport every server of the project serves on (`capabilities.stdio.stdio_transport`):
one JSON-RPC message a line over the client's pipes, read and written by the event loop, with
what a handler or a child writes to fd 1 kept off the wire; on a terminal or a file, the SDK's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.fixtures.stdio import INITIALIZE

ROOT = Path(__file__).resolve().parents[2]

NOISY_SERVER = f"""
import os, subprocess, sys, threading
sys.path.insert(0, {str(ROOT)!r})
import mcp_types as types
from mcp.server.lowlevel import Server
from capabilities.stdio import run_server

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="noisy", input_schema={{"type": "object"}})])

async def call_tool(ctx, params):
    args = params.arguments or {{}}
    print("stray print", flush=True)
    os.write(1, b"stray write\\n")
    # a child that reads its stdin to the end: on the wire it would eat the next requests
    subprocess.run(["sh", "-c", "echo stray child; cat"], timeout=10)
    text = f"threads {{threading.active_count()}} got {{len(args.get('data', ''))}} " + "x" * args.get("size", 0)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

run_server(Server("noisy", version="1", on_list_tools=list_tools, on_call_tool=call_tool))
"""

def test_what_handlers_and_children_write_misses_the_wire(tmp_path: Path) -> None:
    """A handler's print and raw write to fd 1 and a child's output go to stderr, a child reading
    its stdin reads nothing of the wire, and messages of megabytes pass both ways, call after call;
    the server's only thread is its own (no worker thread reads or writes the pipes)."""
    script = tmp_path / "noisy.py"
    script.write_text(NOISY_SERVER)
    errlog = tmp_path / "stderr.txt"

    async def main() -> list[str]:
        texts = []
        with errlog.open("w") as err:
            params = StdioServerParameters(command=sys.executable, args=[str(script)])
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                for size in (3, 3_000_000, 5):
                    with anyio.fail_after(30):
                        out = await session.call_tool("noisy", {"data": "y" * size, "size": size})
                    assert not out.is_error, out
                    texts.append(out.content[0].text)
        return texts

    texts = anyio.run(main)
    assert [text[:22] for text in texts] == ["threads 1 got 3 xxx", "threads 1 got 3000000 ", "threads 1 got 5 xxxxx"]
    assert len(texts[1]) == len("threads 1 got 3000000 ") + 3_000_000
    stray = errlog.read_text()
    assert stray.count("stray print") == 3 and stray.count("stray write") == 3 and stray.count("stray child") == 3


def _requests(*messages: dict) -> bytes:
    notified = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    return b"".join(json.dumps(message).encode() + b"\n" for message in (INITIALIZE, notified, *messages))


DELAY = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "delay", "arguments": {"seconds": 1}}}
LIST = {"jsonrpc": "2.0", "id": "3", "method": "tools/list"}


def _answered(replies: dict) -> None:
    assert replies[1]["result"]["serverInfo"]["name"] == "codedesk-test"
    assert replies[2]["result"]["content"][0]["text"], replies[2]
    assert "echo" in [tool["name"] for tool in replies["3"]["result"]["tools"]]


def test_requests_sent_before_the_end_of_input_are_answered() -> None:
    """A client that writes its requests and closes its end at once gets every answer, the slow
    one included, before the server stops."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "mcp_test_server.py")],
                          input=_requests(DELAY, LIST), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    _answered({reply["id"]: reply for reply in map(json.loads, done.stdout.splitlines())})


def test_a_request_cancelled_before_the_end_of_input_is_not_waited_for() -> None:
    """A cancelled request is never answered: the server does not wait for it at the end of input."""
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "2"}}
    long_delay = {**DELAY, "params": {"name": "delay", "arguments": {"seconds": 600}}}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "mcp_test_server.py")],
                          input=_requests(long_delay, LIST, cancel), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    replies = {reply["id"]: reply for reply in map(json.loads, done.stdout.splitlines())}
    assert 2 not in replies and "echo" in [tool["name"] for tool in replies["3"]["result"]["tools"]]


def test_on_files_rather_than_pipes_the_sdk_transport_serves(tmp_path: Path) -> None:
    """Requests read from a file and answers written to one (the SDK's transport serves): every
    request is answered before the server stops at the end of the file."""
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(_requests(DELAY, LIST))
    answers = tmp_path / "answers.jsonl"
    with requests.open("rb") as stdin, answers.open("wb") as stdout:
        done = subprocess.run([sys.executable, str(ROOT / "tests" / "mcp_test_server.py")], stdin=stdin,
                              stdout=stdout, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    _answered({reply["id"]: reply for reply in map(json.loads, answers.read_text().splitlines())})
