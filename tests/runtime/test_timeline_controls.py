"""The timeline says who had the controls: "person" while someone held the screen from the
viewer (the input lease), else "agent"."""

from __future__ import annotations

import sys
import time

import pytest

from capabilities import input_lease
from capabilities.session_server.store import TimelineReader
from runtime.config import StdioServer
from runtime.server import Runtime
from tests.fixtures.runtime import TEST_SERVER

pytestmark = pytest.mark.anyio

TEST = StdioServer(command=sys.executable, args=(str(TEST_SERVER),))


async def test_calls_made_while_a_person_holds_the_screen_say_so(tmp_path, monkeypatch) -> None:
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("CODEDESK_DATA", str(data))
    monkeypatch.delenv("CODEDESK_TIMELINE", raising=False)
    code = '(await mcp.callTool("test", "echo", {text: "x"})).content[0].text'
    async with Runtime({"test": TEST}, listing_cache=tmp_path / "t.json") as runtime:
        assert (await runtime.run("js", {"code": code})).content[0].text == "x"  # no lease file: the agent
        input_lease.write(data, input_lease.Lease("person", time.time(), 15.0, 3))
        assert (await runtime.run("js", {"code": code})).content[0].text == "x"
        input_lease.write(data, input_lease.Lease("agent", time.time(), 15.0, 3))
        assert (await runtime.run("js", {"code": code})).content[0].text == "x"
        runtime.timeline.flush()
        calls = [e for e in TimelineReader(runtime.timeline.folder).entries(limit=100) if e["kind"] == "call"]
    assert [c["controls"] for c in calls] == ["agent", "person", "agent"]
