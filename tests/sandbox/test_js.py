"""run_js's engine: the guest API, isolation, errors placed in the user's code, and limits."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import time

import pytest

from sandbox import JsEngine, JsLimits, LimitsError

from .conftest import PNG_1PX, ToolHost, cut_off, left_to_the_collector, odd_results, vm_made_ahead

pytestmark = pytest.mark.anyio


async def run(engine: JsEngine, tools: ToolHost, code: str, **limits):
    return await engine.run(code, **tools.kwargs(), limits=JsLimits(**limits))


# ---- values and the guest API ----


async def test_last_expression_value_is_returned(js_engine, tools):
    """The script's answer is the value of its last expression, as JSON data."""
    result = await run(js_engine, tools, "const xs = [1, 2, 3];\n({sum: xs.reduce((a, b) => a + b), xs})")
    assert result.status == "ok"
    assert result.value == {"sum": 6, "xs": [1, 2, 3]}


async def test_top_level_await(js_engine, tools):
    """Scripts await at top level without wrapping themselves in a function."""
    result = await run(js_engine, tools, "const v = await Promise.resolve(41);\nv + 1")
    assert result.value == 42


async def test_call_tool_returns_plain_call_tool_result(js_engine, tools):
    """`JSON.parse((await mcp.callTool(...)).content[0].text)` works as documented."""
    result = await run(
        js_engine, tools,
        'const r = await mcp.callTool("t", "echo", {a: 1, b: [true, null]});\n'
        "JSON.parse(r.content[0].text)",
    )
    assert result.value == {"a": 1, "b": [True, None]}
    assert tools.calls == [("t", "echo", {"a": 1, "b": [True, None]})]
    assert result.tool_calls == 1


async def test_tool_is_error_result_is_returned_not_thrown(js_engine, tools):
    """A capability's own failure is data the script can inspect, not an exception."""
    result = await run(js_engine, tools, 'const r = await mcp.callTool("t", "error", {});\n[r.isError, r.content[0].text]')
    assert result.status == "ok"
    assert result.value == [True, "it failed"]


async def test_bridge_failure_throws_catchable_error_with_message(js_engine, tools):
    """A failure of the bridge itself reaches the script as an Error carrying the reason."""
    result = await run(
        js_engine, tools,
        'try { await mcp.callTool("nope", "x", {}) } catch (e) { [e instanceof Error, e.message] }',
    )
    assert result.value == [True, "unknown server 'nope'; connected servers: t"]


async def test_uncaught_bridge_failure_is_a_bridge_error_at_the_call_line(js_engine, tools):
    """An uncaught bridge failure is classified and placed at the user's call."""
    result = await run(js_engine, tools, 'const a = 1;\n\n  await mcp.callTool("nope", "x", {});')
    assert result.status == "error"
    assert result.error.kind == "bridge"
    assert "unknown server 'nope'" in result.error.message
    assert result.error.line == 3


async def test_promise_all_runs_calls_concurrently(js_engine, tools):
    """100 calls in Promise.all are all in flight at once on the host."""
    started = time.monotonic()
    result = await run(
        js_engine, tools,
        "const rs = await Promise.all(Array.from({length: 100}, (_, i) =>"
        ' mcp.callTool("t", "delay", {seconds: 0.3})));\nrs.length',
    )
    assert result.value == 100
    assert tools.max_in_flight == 100
    assert time.monotonic() - started < 10  # far less than 100 x 0.3 s in series
    assert result.tool_calls == 100


async def test_list_tools_all_servers_and_one(js_engine, tools):
    """mcp.listTools() lists every server's tools with their schemas; a name narrows it."""
    result = await run(
        js_engine, tools,
        "const all = await mcp.listTools();\nconst one = await mcp.listTools('t');\n"
        "[Object.keys(all), one.t.map(t => t.name), one.t[0].inputSchema]",
    )
    assert result.value == [["t"], ["echo", "delay", "image", "error", "hang"], {"type": "object"}]


async def test_console_levels_are_captured_in_order(js_engine, tools):
    """console.log/info/warn/error/debug come back in order, each with its level."""
    seen: list[tuple[str, str]] = []
    result = await js_engine.run(
        'console.log("a", 1, {x: [1]});\nconsole.info("b");\nawait mcp.callTool("t", "echo", {});\n'
        'console.warn("c");\nconsole.error(new Error("d").message);\nconsole.debug(null, undefined);',
        **tools.kwargs(),
        on_console=lambda level, text: seen.append((level, text)),
    )
    expected = [("log", 'a 1 {"x":[1]}'), ("info", "b"), ("warn", "c"), ("error", "d"),
                ("debug", "null undefined")]
    assert [tuple(line) for line in result.console] == expected
    assert seen == expected


async def test_on_console_streams_lines_while_the_run_goes(js_engine, tools):
    """Console lines reach the listener as produced, before the run's later tool calls end."""
    seen_when_call_started: list[list[str]] = []
    seen: list[str] = []

    async def call_tool(server, tool, args):
        seen_when_call_started.append(list(seen))
        return {"content": []}

    await js_engine.run(
        'console.log("before");\nawait mcp.callTool("t", "x", {});',
        call_tool=call_tool, list_tools=tools.list_tools,
        on_console=lambda level, text: seen.append(text),
    )
    assert seen_when_call_started == [["before"]]


async def test_a_first_step_that_computes_long_is_run_once_as_the_script_sees_it(js_engine, tools):
    """A first step longer than the caller's loop lends it (a few epoch ticks) is started again on
    its thread: its console lines, artifacts and value are those of one run, and a line is
    streamed once."""
    seen: list[str] = []
    await vm_made_ahead(js_engine)
    result = await js_engine.run(
        'console.log("start");\nartifact("note");\nconst t = Date.now();\nwhile (Date.now() - t < 300) {}\n'
        'console.log("end");\n[typeof globalThis.mark, (globalThis.mark = 1)]',
        **tools.kwargs(),
        on_console=lambda level, text: seen.append(text),
    )
    assert result.status == "ok", result.error
    assert result.value == ["undefined", 1]
    assert [line.text for line in result.console] == ["start", "end"]
    assert seen == ["start", "end"]
    assert [block["text"] for block in result.artifacts] == ["note"]


async def test_a_later_step_that_computes_long_pauses_on_the_loop_and_goes_on_on_its_thread(
        js_engine, tools, thread_hops):
    """Steps after the first (a result delivered, the script on to its next await) are tried on
    the caller's loop as well; one that computes past a few epoch ticks pauses where it is and
    its thread takes it up from there: the script's work is done once, in order. The run's
    later steps then go to its thread at once."""
    seen: list[str] = []
    await vm_made_ahead(js_engine)
    result = await js_engine.run(
        'console.log("a");\nconst r = await mcp.callTool("t", "echo", {n: 1});\nconsole.log("b");\n'
        "let x = 0; const t = Date.now(); while (Date.now() - t < 300) x++;\n"
        'console.log("c");\nconst r2 = await mcp.callTool("t", "echo", {n: 2});\n'
        "[JSON.parse(r.content[0].text).n, JSON.parse(r2.content[0].text).n, x > 0]",
        **tools.kwargs(),
        on_console=lambda level, text: seen.append(text),
    )
    assert result.status == "ok", result.error
    assert result.value == [1, 2, True]
    assert [line.text for line in result.console] == ["a", "b", "c"]
    assert seen == ["a", "b", "c"]
    assert tools.calls == [("t", "echo", {"n": 1}), ("t", "echo", {"n": 2})]
    assert thread_hops == ["_go_on", "now"]  # the step that computed, then the last one


async def test_short_steps_after_calls_make_no_thread_hop(js_engine, tools, thread_hops):
    """A run whose steps are short (calls awaited one after another) runs them all on the
    caller's loop: none goes to a thread and back (two wake-ups, about half of what a tool call
    cost in the engine)."""
    await vm_made_ahead(js_engine)
    result = await js_engine.run(
        'let n = 0; for (let i = 0; i < 5; i++) n += JSON.parse((await mcp.callTool("t", "echo", {i})).content[0].text).i;\nn',
        **tools.kwargs(),
    )
    assert result.value == 10
    assert thread_hops == []


async def test_steps_of_a_run_the_machine_preempts_stay_on_the_loop(js_engine, tools, thread_hops):
    """What sends a run's later steps to its thread is a step that computed long, counted in the
    loop thread's CPU time: steps preempted by other processes on the machine's cores took long
    without computing, and the run's next steps stay on the loop. (Counted in wall time, a run
    on a busy machine went to its thread within its first few steps.)"""
    await vm_made_ahead(js_engine)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 2))]
    gc.disable()  # a collection of this test process's heap during a step is CPU the step spends
    try:
        result = await js_engine.run(
            'let n = 0; for (let i = 0; i < 200; i++) n += JSON.parse((await mcp.callTool("t", "echo", {i})).content[0].text).i;\nn',
            **tools.kwargs(),
        )
    finally:
        gc.enable()
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert result.value == sum(range(200))
    # a step may still have computed past 2 ms now and then (a cold cache); not most of them
    assert thread_hops.count("now") < 100, thread_hops


async def test_artifact_attaches_image_blocks_and_text(js_engine, tools):
    """artifact() takes a screenshot's image block as is, a built image block, or text."""
    result = await run(
        js_engine, tools,
        'const shot = await mcp.callTool("t", "image", {});\nartifact(shot.content[1]);\n'
        f'artifact({{type: "image", data: "{PNG_1PX}", mimeType: "image/png"}});\n'
        'artifact("a note");\n"done"',
    )
    assert result.artifacts == [
        {"type": "image", "data": PNG_1PX, "mimeType": "image/png"},
        {"type": "image", "data": PNG_1PX, "mimeType": "image/png"},
        {"type": "text", "text": "a note"},
    ]


async def test_artifact_refuses_what_is_not_a_block(js_engine, tools):
    """A malformed artifact is refused with a message saying what is accepted."""
    result = await run(js_engine, tools, 'try { artifact({type: "image", data: "%%%"}) } catch (e) { e.message }')
    assert "image needs" in result.value
    assert result.artifacts == []


async def test_set_timeout_and_clear_timeout(js_engine, tools):
    """setTimeout fires after its delay; a cleared one never fires."""
    result = await run(
        js_engine, tools,
        "const order = [];\nconst t = setTimeout(() => order.push('cleared'), 10);\nclearTimeout(t);\n"
        "setTimeout(() => order.push('late'), 60);\nsetTimeout(() => order.push('early'), 10);\n"
        "await new Promise(r => setTimeout(r, 150));\norder",
    )
    assert result.value == ["early", "late"]


async def test_set_interval_and_clear_interval(js_engine, tools):
    """setInterval repeats until clearInterval."""
    result = await run(
        js_engine, tools,
        "let n = 0;\nawait new Promise(done => { const i = setInterval(() => { if (++n === 3) "
        "{ clearInterval(i); done(); } }, 5); });\nn",
    )
    assert result.value == 3


async def test_run_waits_for_pending_timers_and_calls(js_engine, tools):
    """Work a script starts without awaiting still finishes before the result, as in Node."""
    result = await run(
        js_engine, tools,
        "setTimeout(() => console.log('timer'), 20);\n"
        "mcp.callTool('t', 'echo', {}).then(() => console.log('call'));\n'top'",
    )
    assert result.value == "top"
    assert sorted(line.text for line in result.console) == ["call", "timer"]


async def test_json_textencoder_atob_btoa_work(js_engine, tools):
    """The everyday globals the contract promises are present and correct."""
    result = await run(
        js_engine, tools,
        "const bytes = new TextEncoder().encode('héllo €😀');\n"
        "[Array.from(bytes.slice(0, 3)), new TextDecoder().decode(bytes), btoa('hi'), atob('aGk='),"
        " JSON.stringify({a: 1})]",
    )
    assert result.value == [[104, 195, 169], "héllo €😀", "aGk=", "hi", '{"a":1}']


async def test_no_fetch_or_require_in_sandbox(js_engine, tools):
    """Nothing but mcp.callTool reaches out: no fetch, require, process, std/os, sockets."""
    result = await run(
        js_engine, tools,
        "const names = ['fetch', 'require', 'process', 'Deno', 'Bun', 'std', 'os', "
        "'XMLHttpRequest', 'WebSocket', 'importScripts'];\n"
        "const present = names.filter(n => typeof globalThis[n] !== 'undefined');\n"
        "let imported;\ntry { await import('os'); imported = true } catch (e) { imported = false }\n"
        "[present, imported]",
    )
    assert result.value == [[], False]


async def test_host_functions_are_not_reachable_from_the_script(js_engine, tools):
    """The raw host hooks behind the API are hidden from user code."""
    result = await run(
        js_engine, tools, "Object.getOwnPropertyNames(globalThis).filter(n => n.startsWith('__host'))"
    )
    assert result.value == []


async def test_non_serialisable_value_is_described(js_engine, tools):
    """A function or a cyclic object as the last value is described, not a crash."""
    fn = await run(js_engine, tools, "(function named() {})")
    cyclic = await run(js_engine, tools, "const o = {a: 1}; o.self = o; o")
    big = await run(js_engine, tools, "10n ** 30n")
    assert fn.status == "ok" and fn.value == "[Function: named]"
    assert cyclic.value == {"a": 1, "self": "[Circular]"}
    assert big.value == "1000000000000000000000000000000n"


async def test_undefined_value_is_none(js_engine, tools):
    """A script ending in a statement returns no value."""
    result = await run(js_engine, tools, "let x = 1;")
    assert result.status == "ok" and result.value is None


async def test_a_result_reaches_the_script_whatever_it_holds(js_engine, tools):
    """What a tool answers reaches the script as JavaScript reads JSON: NaN and the infinities
    (which JSON has not) as null, as JSON.stringify writes them; a lone surrogate as U+FFFD;
    text of any script and megabytes of it unchanged. A value JSON cannot hold fails that call
    alone, as a BridgeError."""
    result = await js_engine.run(
        "const r = await mcp.callTool('t', 'odd', {});"
        "let failed; try { await mcp.callTool('t', 'unjson', {}) } catch (e) { failed = e.name }"
        "[r.nan, r.inf, r.lone, r.text, r.big.length, r.big === 'y'.repeat(3e6), failed]",
        call_tool=odd_results, list_tools=tools.list_tools)
    assert result.status == "ok", result.error
    assert result.value == [None, None, "a\ufffdb", "é€😀", 3_000_000, True, "BridgeError"]


async def test_a_call_sends_its_args_as_they_were_when_it_was_made(js_engine, tools):
    """The host reads a call's args as they were when the script called, whatever the script
    changes after (the args, String.prototype.slice, Object.prototype.toJSON); args whose toJSON
    gives nothing are refused with a TypeError."""
    result = await run(js_engine, tools, """
        const a = {n: 1, s: "x".repeat(1e6), nested: {ok: true}};
        const p = mcp.callTool("t", "echo", a);
        a.n = 2; a.nested.ok = false;
        String.prototype.slice = () => "}";
        Object.prototype.toJSON = function () { return {forged: true}; };
        await p;
        let refused;
        try { await mcp.callTool("t", "echo", {toJSON() {}}); } catch (e) { refused = `${e.name}: ${e.message}`; }
        refused""")
    assert result.status == "ok", result.error
    assert result.value == "TypeError: mcp.callTool: args must be JSON-serialisable (their toJSON gave nothing)"
    assert [args for _, _, args in tools.calls] == [{"n": 1, "s": "x" * 1_000_000, "nested": {"ok": True}}]


async def test_a_runs_vm_is_freed_as_it_is_closed_not_left_to_the_garbage_collector(js_engine, tools):
    """A VM's objects make no reference cycle, whatever its run did: each is freed as its VM is
    closed. (A cycle through the host's dispatcher left some 80 objects a run to the collector,
    and a process serving runs back to back spent about 4% of its CPU collecting them.)"""
    scripts = ["", "console.log('x'); 1", "throw new Error('no')", "await new Promise(r => setTimeout(r, 1)); 2",
               'await mcp.callTool("t", "echo", {text: "x"})', "await mcp.listTools()", "syntax error(("]
    with left_to_the_collector("sandbox", "quickjs_rs", "wasmtime") as left:
        for code in scripts * 2:
            await run(js_engine, tools, code)
        deadline = time.monotonic() + 10
        while js_engine._ended and time.monotonic() < deadline:  # their VMs closed, between runs
            await asyncio.sleep(0.01)
        assert not js_engine._ended
    assert not left, sorted({type(o).__qualname__ for o in left})


# ---- isolation ----


async def test_each_run_gets_a_fresh_context(js_engine, tools):
    """Globals set by one run are gone in the next."""
    await run(js_engine, tools, "globalThis.leak = 1; var leak2 = 2; Array.prototype.evil = 3;")
    result = await run(js_engine, tools, "[typeof leak, typeof leak2, [].evil]")
    assert result.value == ["undefined", "undefined", None]


async def test_concurrent_runs_do_not_interfere(js_engine, tools):
    """Runs overlapping on one event loop keep their own console, values and calls."""
    codes = [
        f'console.log("run {i}");\nawait mcp.callTool("t", "delay", {{seconds: 0.05}});\n{i}'
        for i in range(5)
    ]
    results = await asyncio.gather(*(run(js_engine, tools, c) for c in codes))
    assert [r.value for r in results] == list(range(5))
    assert [[line.text for line in r.console] for r in results] == [[f"run {i}"] for i in range(5)]


# ---- errors in the user's own code ----


async def test_syntax_error_reports_user_line_and_column(js_engine, tools):
    """A syntax error names its line in the script as written."""
    result = await run(js_engine, tools, "const a = 1;\nconst b = 2;\nlet c = (;")
    assert result.status == "error"
    assert result.error.kind == "syntax"
    assert result.error.line == 3
    assert result.error.column is not None
    assert "SyntaxError" in result.error.message


async def test_thrown_error_reports_user_line_and_column(js_engine, tools):
    """An uncaught throw names the line and column of the throw, with its stack."""
    result = await run(
        js_engine, tools,
        "function inner() {\n  throw new TypeError('bad input');\n}\nawait null;\ninner();",
    )
    assert result.error.kind == "thrown"
    assert result.error.message == "TypeError: bad input"
    # QuickJS places a `new X(...)` throw at the constructor's name
    assert (result.error.line, result.error.column) == (2, 13)
    assert "inner" in result.error.traceback
    assert "<input>" not in result.error.traceback


async def test_console_output_before_a_failure_is_kept(js_engine, tools):
    """What the script printed before failing comes back with the error."""
    result = await run(js_engine, tools, "console.log('step 1');\nnull.x;")
    assert result.status == "error"
    assert [line.text for line in result.console] == ["step 1"]
    assert result.error.line == 2


async def test_uncaught_error_in_timer_fails_the_run(js_engine, tools):
    """An exception thrown in a timer callback is not lost."""
    result = await run(js_engine, tools, "setTimeout(() => {\n  throw new Error('in timer');\n}, 1);\n'x'")
    assert result.status == "error"
    assert result.error.message == "Error: in timer"
    assert result.error.line == 2


async def test_promise_that_never_settles_is_an_error(js_engine, tools):
    """Awaiting a promise nothing can settle ends at once with a clear error, not a hang."""
    result = await run(js_engine, tools, "await new Promise(() => {});")
    assert result.status == "error"
    assert "never settle" in result.error.message


# ---- limits ----


async def test_timeout_stops_a_busy_loop(js_engine, tools):
    """A script that never yields is stopped at its timeout."""
    started = time.monotonic()
    result = await run(js_engine, tools, "while (true) {}", timeout_seconds=0.5)
    assert result.error.kind == "timeout"
    assert "timeout_seconds=0.5" in result.error.message
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("before", ["await 1;", "await mcp.callTool('t', 'echo', {text: 'x'});",
                                    "await new Promise(r => setTimeout(r, 10));"])
async def test_timeout_stops_a_busy_loop_after_an_await(js_engine, tools, before):
    """A loop that starts after the script has awaited is stopped by the timeout too, and the
    error says so (not that the script awaits a promise that never settles)."""
    result = await run(js_engine, tools, f"{before}\nwhile (true) {{}}", timeout_seconds=0.5)
    assert result.error.kind == "timeout", result.error
    assert "timeout_seconds=0.5" in result.error.message


async def test_a_busy_script_holds_up_neither_the_loop_nor_other_runs(js_engine, tools):
    """A script computing without awaiting runs on its own thread: meanwhile the caller's event
    loop turns, and another run, tool call included, starts and ends."""
    busy = asyncio.create_task(run(js_engine, tools, "while (true) {}", timeout_seconds=5))
    await asyncio.sleep(0.3)  # the loop turns while the busy run computes
    assert not busy.done()
    quick = await run(js_engine, tools, "(await mcp.callTool('t', 'echo', {n: 1})).content[0].text")
    assert quick.value == '{"n": 1}'
    assert not busy.done(), "the quick run should end while the busy one still computes"
    assert (await busy).error.kind == "timeout"


async def test_timeout_cancels_inflight_tool_calls(js_engine, tools):
    """When a run times out, the calls it still awaits are cancelled before run() returns."""
    result = await run(
        js_engine, tools,
        "console.log('started');\nawait Promise.all([mcp.callTool('t', 'hang', {tag: 'a'}),"
        " mcp.callTool('t', 'hang', {tag: 'b'})]);",
        timeout_seconds=1,
    )
    assert result.error.kind == "timeout"
    assert sorted(tools.started) == ["a", "b"]
    assert sorted(tools.cancelled) == ["a", "b"]
    assert tools.finished == []
    assert [line.text for line in result.console] == ["started"]


async def test_timeout_counts_wall_time_spent_waiting(js_engine, tools):
    """Time spent awaiting timers counts against the timeout, not only JS execution."""
    result = await run(js_engine, tools, "await new Promise(r => setTimeout(r, 5000));", timeout_seconds=0.3)
    assert result.error.kind == "timeout"


async def test_heap_limit_error_leaves_engine_usable(js_engine, tools):
    """Exhausting the JS heap ends that run with a memory error; the next run works."""
    result = await run(
        js_engine, tools, "const a = [];\nwhile (true) a.push({i: a.length, s: 'item ' + a.length});",
        heap_memory_max_mb=8,
    )
    assert result.error.kind == "memory"
    assert "heap_memory_max_mb=8" in result.error.message
    again = await run(js_engine, tools, "1 + 1")
    assert again.value == 2


async def test_output_cap_truncates_with_marker(js_engine, tools):
    """Console output past max_output_bytes is cut, and a marker says how much."""
    result = await run(
        js_engine, tools, "for (let i = 0; i < 1000; i++) console.log('line ' + i);\n'end'",
        max_output_bytes=100,
    )
    assert result.status == "ok" and result.value == "end"
    texts = [line.text for line in result.console]
    assert texts[0] == "line 0"
    assert sum(len(t) + 1 for t in texts[:-1]) <= 100
    assert "output truncated" in texts[-1] and "max_output_bytes=100" in texts[-1]
    cut = int(texts[-1].split(": ")[1].split(" ")[0])
    total = sum(len(f"line {i}") + 1 for i in range(1000))
    assert cut == total - sum(len(t) + 1 for t in texts[:-1])


async def test_returned_value_over_output_limit_is_an_output_error(js_engine, tools):
    """A value too large to return is refused with advice, not silently cut."""
    result = await run(js_engine, tools, "'x'.repeat(5000)", max_output_bytes=1000)
    assert result.error.kind == "output"
    assert "max_output_bytes=1000" in result.error.message


async def test_artifact_count_limit(js_engine, tools):
    """Attaching more than max_artifacts is refused; the ones before it are kept."""
    result = await run(js_engine, tools, "for (let i = 0; i < 5; i++) artifact('note ' + i);", max_artifacts=3)
    assert result.error.kind == "output"
    assert "max_artifacts" in result.error.message
    assert [a["text"] for a in result.artifacts] == ["note 0", "note 1", "note 2"]


async def test_artifact_bytes_limit(js_engine, tools):
    """Artifacts whose total size passes max_artifact_bytes are refused."""
    result = await run(
        js_engine, tools,
        "artifact('a'.repeat(600));\ntry { artifact('b'.repeat(600)) } catch (e) { e.message }",
        max_artifact_bytes=1000,
    )
    assert "max_artifact_bytes=1000" in result.value
    assert len(result.artifacts) == 1


async def test_tool_call_budget(js_engine, tools):
    """Calls past max_tool_calls fail without reaching the host."""
    result = await run(
        js_engine, tools,
        "for (let i = 0; i < 5; i++) {\n  await mcp.callTool('t', 'echo', {i});\n}",
        max_tool_calls=3,
    )
    assert result.error.kind == "call_budget"
    assert result.error.line == 2
    assert len(tools.calls) == 3
    assert result.tool_calls == 3


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("timeout_seconds", 601, "between 0.001 and 600.0"),
        ("timeout_seconds", 0, "between 0.001 and 600.0"),
        ("heap_memory_max_mb", 2048, "between 1 and 1024"),
        ("heap_memory_max_mb", 1.5, "whole number"),
        ("max_tool_calls", -1, "between 0 and 100000"),
        ("max_output_bytes", "big", "whole number"),
    ],
)
async def test_limits_validation_names_field_and_range(field, value, words):
    """Out-of-range or mistyped limits are refused with the field and its range."""
    with pytest.raises(LimitsError) as raised:
        JsLimits(**{field: value})
    assert field in str(raised.value) and words in str(raised.value)


async def test_caller_cancellation_cancels_inflight_tool_calls(js_engine, tools):
    """When the caller gives up on a run (MCP cancellation), its calls are cancelled too."""
    task = asyncio.ensure_future(run(js_engine, tools, "await mcp.callTool('t', 'hang', {tag: 'c'});"))
    while not tools.started:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tools.cancelled == ["c"]
    again = await run(js_engine, tools, "'still usable'")
    assert again.value == "still usable"


@pytest.mark.parametrize("how", ["timeout", "caller"])
async def test_a_call_cut_off_is_cancelled_once_and_may_finish_cancelling(js_engine, tools, how):
    """A call in flight when its run ends is cancelled once: a second cancel would cut short its
    cancelling (notifications/cancelled to its server), and the work would go on there."""
    code = "await mcp.callTool('t', 'hang', {tag: 'once', tidy_seconds: 0.3});"
    await cut_off(lambda **limits: run(js_engine, tools, code, **limits), tools, how, timeout_seconds=1)
    assert tools.cancelled == ["once"]
    assert tools.tidied == ["once"]


async def test_engine_made_in_a_worker_thread_runs_on_the_event_loop(tools):
    """The runtime makes engines off its event loop; their contexts work on the loop."""
    engine = await asyncio.to_thread(JsEngine)
    try:
        result = await run(engine, tools, "(await mcp.callTool('t', 'echo', {n: 1})).content[0].text")
        assert result.value == '{"n": 1}'
    finally:
        engine.close()


async def test_typescript_types_are_accepted(js_engine, tools):
    """A script written in TypeScript runs with its types removed."""
    result = await run(
        js_engine, tools,
        "type Echo = {a: number};\nconst r = await mcp.callTool('t', 'echo', {a: 2} as Echo);\n"
        "function twice(x: number): number {\n  return x * 2;\n}\ntwice(JSON.parse(r.content[0].text).a as number)",
    )
    assert result.status == "ok", result.error
    assert result.value == 4


async def test_syntax_error_that_is_not_typescript_either_keeps_the_js_position(js_engine, tools):
    """Broken code reports the JavaScript parser's own position."""
    result = await run(js_engine, tools, "let a = 1;\nlet b = (;")
    assert result.error.kind == "syntax" and result.error.line == 2
    assert "TypeScript" not in result.error.message


async def test_script_replacing_json_does_not_break_the_api(js_engine, tools):
    """The API keeps working when a script replaces the globals it was built on."""
    result = await run(
        js_engine, tools,
        "JSON.stringify = () => 'garbage';\nJSON.parse = () => null;\n"
        "const r = await mcp.callTool('t', 'echo', {x: 1});\nconsole.log('ok');\nr.content[0].text",
    )
    assert result.status == "ok", result.error
    assert result.value == '{"x": 1}'
    assert [line.text for line in result.console] == ["ok"]


async def test_runaway_recursion_is_an_error_and_leaves_engine_usable(js_engine, tools):
    """Recursion that exhausts the VM's stack ends that run with a clear error, nothing more."""
    result = await run(js_engine, tools, "console.log('before');\nfunction f() { return f() + 1 }\nf()")
    assert result.status == "error"
    assert "Maximum call stack size exceeded" in result.error.message
    assert [line.text for line in result.console] == ["before"]
    again = await run(js_engine, tools, "'still usable'")
    assert again.value == "still usable"



async def test_each_call_knows_the_script_line_it_comes_from(js_engine, tools, line_recorder):
    """The host reads the line of the user's script that made each call (`CALL_LINE`), through
    the typed tools, in parallel calls and inside functions: what an approval shows a person."""
    from sandbox import CALL_LINE

    result = await js_engine.run(
        'await mcp.callTool("t", "x", {n: "a"});\n'
        "async function f() {\n"
        '  return mcp.callTool("t", "x", {n: "b"});\n'
        "}\n"
        'await Promise.all([f(), tools.t.x({n: "c"})]);',
        call_tool=line_recorder.call_tool, list_tools=tools.list_tools,
    )
    assert result.status == "ok", result.error
    assert sorted(line_recorder.lines) == [("a", 1), ("b", 3), ("c", 5)]
    assert CALL_LINE.get() is None  # set in the call's own task only
