"""run_js against hostile scripts: every limit holds whatever the script does.

Each case runs with a short timeout and must answer within that timeout plus one second with
the right error kind; a trivial run right after must answer at once and see nothing the hostile
run left behind. Cases that once crashed the process inside wasmtime run 20 times, each time
in a fresh engine in a subprocess, so a crash fails the test instead of killing pytest.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox import JsEngine, JsLimits

from .conftest import vm_made_ahead

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
LEAK = "globalThis.leaked = 'hostile';\n"

# (id, code, limits, expected kind). A kind of None means the run must end `ok`.
CASES: list[tuple[str, str, dict, str | None]] = [
    # loops where the runtime calls back into guest code
    ("tojson-loop", "({toJSON() { for (;;) {} }})", {"timeout_seconds": 1}, "timeout"),
    ("tojson-slow-5s", "({toJSON() { const t = Date.now(); while (Date.now() - t < 5000) {} return 1 }})",
     {"timeout_seconds": 1}, "timeout"),
    ("nested-tojson-loop", "({a: [1, {b: {toJSON() { for (;;) {} }}}]})", {"timeout_seconds": 1}, "timeout"),
    ("getter-loop", "({get x() { for (;;) {} }})", {"timeout_seconds": 1}, "timeout"),
    ("array-getter-loop", "const a = [1, 2]; Object.defineProperty(a, 1, {get() { for (;;) {} }}); a",
     {"timeout_seconds": 1}, "timeout"),
    ("proxy-get-loop", "new Proxy({a: 1}, {get() { for (;;) {} }})", {"timeout_seconds": 1}, "timeout"),
    ("proxy-ownkeys-loop", "new Proxy({a: 1}, {ownKeys() { for (;;) {} }})", {"timeout_seconds": 1}, "timeout"),
    ("proxy-descriptor-loop", "new Proxy({a: 1}, {getOwnPropertyDescriptor() { for (;;) {} }})",
     {"timeout_seconds": 1}, "timeout"),
    ("proxy-isarray-revoked", "const r = Proxy.revocable([], {}); r.revoke(); [r.proxy]", {"timeout_seconds": 1},
     None),
    ("thenable-loop", "await {then() { for (;;) {} }}", {"timeout_seconds": 1}, "timeout"),
    ("thenable-last-value-is-not-called", "({then(resolve) { for (;;) {} }})", {"timeout_seconds": 1}, None),
    ("await-thenable-chain", "let n = 0; const t = {then(r) { n++; r(n < 1e9 ? t : 0) }}; await t",
     {"timeout_seconds": 1}, "timeout"),
    ("console-tojson-loop", "console.log({toJSON() { for (;;) {} }})", {"timeout_seconds": 1}, "timeout"),
    ("console-getter-loop", "console.log({get x() { for (;;) {} }})", {"timeout_seconds": 1}, "timeout"),
    ("console-tostring-loop", "console.log(String({toString() { for (;;) {} }}))", {"timeout_seconds": 1}, "timeout"),
    ("console-valueof-loop", "console.log(1 + {valueOf() { for (;;) {} }})", {"timeout_seconds": 1}, "timeout"),
    ("console-toprimitive-loop", "console.log(`${{[Symbol.toPrimitive]() { for (;;) {} }}}`)",
     {"timeout_seconds": 1}, "timeout"),
    ("artifact-tojson-loop", "artifact({toJSON() { for (;;) {} }})", {"timeout_seconds": 1}, "timeout"),
    ("calltool-args-getter-loop", "await mcp.callTool('t', 'echo', {get x() { for (;;) {} }})",
     {"timeout_seconds": 1}, "timeout"),
    ("error-name-getter-loop", "throw {get name() { for (;;) {} }, message: 'm'}", {"timeout_seconds": 1}, "timeout"),
    ("thrown-error-getter-loop", "const e = new Error('x'); Object.defineProperty(e, 'message', {get() { for (;;) {} }}); throw e",
     {"timeout_seconds": 1}, "timeout"),
    ("timer-callback-loop", "setTimeout(() => { for (;;) {} }, 0); 1", {"timeout_seconds": 1}, "timeout"),
    ("microtask-loop", "Promise.resolve().then(() => { for (;;) {} }); 1", {"timeout_seconds": 1}, "timeout"),
    ("endless-microtasks", "function f() { Promise.resolve().then(f) } f(); 1", {"timeout_seconds": 1}, "timeout"),
    ("busy-loop-after-await", "await null; for (;;) {}", {"timeout_seconds": 1}, "timeout"),
    ("catch-loop-after-hang", "try { await mcp.callTool('t', 'hang', {}) } finally { for (;;) {} }",
     {"timeout_seconds": 1}, "timeout"),
    # memory
    ("string-bomb", "let a = []; while (true) a.push('x'.repeat(1 << 20))",
     {"heap_memory_max_mb": 16, "timeout_seconds": 20}, "memory"),
    ("rope-bomb", "let s = 'x'; while (true) s = s + s", {"heap_memory_max_mb": 16, "timeout_seconds": 20}, "memory"),
    ("concat-bomb", "let a = []; for (let i = 0; ; i++) a.push('item ' + i + 'x'.repeat(100))",
     {"heap_memory_max_mb": 16, "timeout_seconds": 20}, "memory"),
    ("array-of-arrays", "let a = []; while (true) a.push([a.length, [a.length]])",
     {"heap_memory_max_mb": 16, "timeout_seconds": 20}, "memory"),
    ("map-growth", "const m = new Map(); for (let i = 0; ; i++) m.set(i, 'v' + i)",
     {"heap_memory_max_mb": 16, "timeout_seconds": 20}, "memory"),
    ("set-growth", "const s = new Set(); for (let i = 0; ; i++) s.add('k' + i)",
     {"heap_memory_max_mb": 16, "timeout_seconds": 20}, "memory"),
    ("typed-array-bomb", "let a = []; while (true) a.push(new Uint8Array(1 << 20))",
     {"heap_memory_max_mb": 16, "timeout_seconds": 20}, "memory"),
    ("huge-typed-array", "new Float64Array(2 ** 27).length", {"heap_memory_max_mb": 16, "timeout_seconds": 20},
     "memory"),
    ("arraybuffer-bomb", "let a = []; while (true) a.push(new ArrayBuffer(4 << 20))",
     {"heap_memory_max_mb": 16, "timeout_seconds": 20}, "memory"),
    ("string-bomb-after-await", "await null; let a = []; while (true) a.push('y'.repeat(1 << 20))",
     {"heap_memory_max_mb": 16, "timeout_seconds": 20}, "memory"),
    # recursion and regular expressions
    ("deep-recursion", "function f() { return f() + 1 } f()", {"timeout_seconds": 5}, "thrown"),
    ("regex-backtracking", "/^(a+)+$/.test('a'.repeat(40) + 'b')", {"timeout_seconds": 1}, "timeout"),
    # timers and microtasks
    ("interval-flood", "for (let i = 0; i < 10000; i++) setInterval(() => {}, 0); await new Promise(() => setTimeout(() => {}, 1e7))",
     {"timeout_seconds": 1}, "timeout"),
    ("timer-storm", "function go() { setTimeout(go, 0); setTimeout(go, 0) } go(); 1", {"timeout_seconds": 1}, "timeout"),
    # output
    ("console-flood-short", "for (;;) console.log('abc')", {"timeout_seconds": 1}, "timeout"),
    ("console-megabyte-lines", "for (let i = 0; i < 100; i++) console.log('x'.repeat(1 << 20)); 'done'",
     {"timeout_seconds": 10}, None),
    ("huge-return-string", "'x'.repeat(8 << 20)", {"timeout_seconds": 5}, "output"),
    ("sparse-array-return", "const a = []; a.length = 2 ** 32 - 1; a", {"timeout_seconds": 5}, "output"),
    ("deep-return-value", "let d = {}; for (let i = 0; i < 1e5; i++) d = {d}; d", {"timeout_seconds": 5}, None),
    ("cyclic-return-value", "const o = {a: [1]}; o.self = o; o.a.push(o); o", {"timeout_seconds": 5}, None),
    ("wide-return-object", "const o = {}; for (let i = 0; i < 3e5; i++) o['k' + i] = i; o", {"timeout_seconds": 5},
     "output"),
    ("console-huge-object", "const o = []; for (let i = 0; i < 3e5; i++) o.push({i}); console.log(o); 1",
     {"timeout_seconds": 5}, None),
    # tool calls
    ("huge-tool-args", "await mcp.callTool('t', 'echo', {x: 'x'.repeat(40 << 20)})",
     {"heap_memory_max_mb": 16, "timeout_seconds": 5}, "memory"),
    ("call-budget-then-busy-loop",
     "for (let i = 0; i < 1100; i++) { try { await mcp.callTool('nope', 'x', {i}) } catch (e) {} }\nfor (;;) {}",
     {"timeout_seconds": 2}, "timeout"),
    ("call-budget-then-hang",
     "for (let i = 0; i < 1100; i++) { try { await mcp.callTool('nope', 'x', {i}) } catch (e) {} }\n"
     "await new Promise(r => setTimeout(r, 1e7))", {"timeout_seconds": 2}, "timeout"),
    ("never-settles", "await new Promise(() => {})", {"timeout_seconds": 5}, "thrown"),
]


@pytest.mark.parametrize(("code", "limits", "kind"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_hostile_script_answers_in_time_with_its_error_kind(js_engine, tools, code, limits, kind):
    """A hostile script ends within its timeout plus one second with the right kind, and the
    next run answers at once in a clean VM."""
    started = time.monotonic()
    result = await js_engine.run(LEAK + code, **tools.kwargs(), limits=JsLimits(**limits))
    took = time.monotonic() - started
    assert took <= limits.get("timeout_seconds", 60) + 1, f"answered after {took:.1f} s"
    if kind is None:
        assert result.status == "ok", result.error
    else:
        assert result.status == "error" and result.error.kind == kind, result.error or result.value
    started = time.monotonic()
    after = await js_engine.run("[typeof leaked, 1 + 1]", **tools.kwargs())
    assert time.monotonic() - started <= 1.0
    assert after.status == "ok" and after.value == ["undefined", 2]


HIJACKS = [
    "Object.prototype.toJSON = function () { return 'hijacked' };",
    "Array.prototype.toJSON = function () { return 7 };",
    "Object.defineProperty(Object.prototype, 'id', {get() { return 1 }, configurable: true});",
    "Object.defineProperty(Object.prototype, 'op', {get() { throw new Error('op') }, configurable: true});",
]


@pytest.mark.parametrize("hijack", HIJACKS, ids=["object-tojson", "array-tojson", "id-accessor", "op-getter"])
async def test_prototype_hijacks_do_not_garble_what_the_host_reads(js_engine, tools, hijack):
    """What the guest hands the host (calls, timers, console lines, errors, the outcome) is built
    without prototypes: a script's Object.prototype.toJSON once turned the outcome's envelope into
    "hijacked" and the run into an `internal` error; a setter-less `id` accessor made every call
    throw."""
    code = hijack + """
        console.log("line", [1]);
        await new Promise((resolve) => setTimeout(resolve, 5));
        clearTimeout(setTimeout(() => 0, 1000));
        let echoed;  // the script's own toJSON shapes its arguments (here: not an object), nothing else
        try { echoed = (await mcp.callTool("t", "echo", {text: "a"})).content[0].text } catch (e) { echoed = e.message }
        [echoed, 2]"""
    result = await js_engine.run(code, **tools.kwargs(), limits=JsLimits(timeout_seconds=5))
    assert result.status == "ok", result.error
    assert [line.text.split(" ")[0] for line in result.console] == ["line"]  # shown as the script's toJSON says
    if "toJSON" not in hijack:  # (with it, the value itself is what the script's toJSON says)
        assert result.value == ['{"text": "a"}', 2]
    thrown = await js_engine.run(hijack + "\nthrow new TypeError('boom')", **tools.kwargs())
    assert thrown.status == "error" and thrown.error.kind == "thrown" and "boom" in thrown.error.message


@pytest.mark.parametrize("shaping", [
    "RegExp.prototype.exec = () => { throw new Error('trap') };",
    "Error.prepareStackTrace = () => ({toString() { throw new Error('trap') }});",
    "Error.prepareStackTrace = () => 'at x (eval_script:99999999999:1)';",
    "Error.stackTraceLimit = 0;",
], ids=["exec", "stack-object", "stack-forged", "no-stack"])
async def test_a_script_shaping_its_stacks_neither_breaks_its_calls_nor_names_an_impossible_line(
        js_engine, tools, line_recorder, shaping):
    """The call's line comes from the guest's stack, which a script can shape: its calls still work,
    and the host is handed a line in range or none (it is shown to people, never decided on)."""
    result = await js_engine.run(shaping + '\n(await mcp.callTool("t", "echo", {})).content[0].text',
                                 call_tool=line_recorder.call_tool, list_tools=tools.list_tools)
    assert (result.status, result.value) == ("ok", "ok"), result.error
    assert [line for _, line in line_recorder.lines] in ([None], [2])


async def test_deep_value_is_cut_with_a_marker(js_engine, tools):
    """A value nested deeper than JSON can sensibly carry comes back cut, and says so."""
    result = await js_engine.run("let d = 0; for (let i = 0; i < 1e5; i++) d = [d]; d", **tools.kwargs())
    assert result.status == "ok"
    depth, node = 0, result.value
    while isinstance(node, list):
        node, depth = node[0], depth + 1
    assert depth <= 100 and "nested deeper than" in node


async def test_long_but_finite_for_await_completes(js_engine, tools):
    """A for-await over 100,000 items is finite work: it completes, not 'never settles'."""
    result = await js_engine.run(
        "async function* g() { for (let i = 0; i < 100000; i++) yield i }\n"
        "let n = 0; for await (const x of g()) n += 1; n", **tools.kwargs(), limits=JsLimits(timeout_seconds=30))
    assert result.status == "ok", result.error
    assert result.value == 100000


async def test_a_million_microtasks_complete(js_engine, tools):
    """A chain of a million awaits is long but finite: it completes."""
    result = await js_engine.run("let n = 0; for (let i = 0; i < 1e6; i++) { await null; n++ } n",
                                 **tools.kwargs(), limits=JsLimits(timeout_seconds=30))
    assert result.status == "ok", result.error
    assert result.value == 1_000_000


async def test_runs_back_to_back_leave_no_pile_of_alarms_for_the_interrupts_thread(js_engine, tools):
    """Each run's VM gets an alarm at its deadline, and is closed long before it: those alarms are
    dropped, not kept until they come due. A process with runs back to back kept a timeout's
    worth of them, and its alarm thread then woke for each (8% of a core, in Python)."""
    from sandbox import _jsinterrupt

    for _ in range(300):
        result = await js_engine.run("", **tools.kwargs(), limits=JsLimits(timeout_seconds=30))
        assert result.status == "ok", result.error
    assert len(_jsinterrupt._alarms) <= 2 * _jsinterrupt._STALE_MAX + 16


async def test_swallowed_call_budget_error_is_reported(js_engine, tools):
    """A script that catches CallBudgetError still tells the model the budget ran out."""
    result = await js_engine.run(
        "for (let i = 0; i < 5; i++) { try { await mcp.callTool('t', 'echo', {i}) } catch (e) {} }\n'ok'",
        **tools.kwargs(), limits=JsLimits(max_tool_calls=3))
    assert result.status == "ok" and result.value == "ok"
    assert result.tool_calls == 3
    assert "call budget spent: 2 tool call(s) were refused" in result.console[-1].text
    assert "max_tool_calls" in result.console[-1].text


async def test_console_flood_keeps_its_head_and_counts_the_rest(js_engine, tools):
    """Megabyte lines past the output limit are counted, not kept, and the run still ends ok."""
    result = await js_engine.run(
        "for (let i = 0; i < 20; i++) console.log('x'.repeat(1 << 20)); 'done'",
        **tools.kwargs(), limits=JsLimits(timeout_seconds=10, max_output_bytes=1000))
    assert result.status == "ok" and result.value == "done"
    assert len(result.console[0].text) == 999
    assert "output truncated" in result.console[-1].text


async def test_hostile_runs_at_once_do_not_delay_a_trivial_one(js_engine, tools):
    """Eight runs stuck in loops, getters and toJSON at once leave a ninth, trivial run
    answering within a second."""
    hostile = ["for (;;) {}", "({toJSON() { for (;;) {} }})", "({get x() { for (;;) {} }})",
               "new Proxy({}, {ownKeys() { for (;;) {} }})", "await null; for (;;) {}",
               "console.log({toJSON() { for (;;) {} }})", "/^(a+)+$/.test('a'.repeat(40) + 'b')",
               "setTimeout(() => { for (;;) {} }, 0)"]
    runs = [asyncio.create_task(js_engine.run(code, **tools.kwargs(), limits=JsLimits(timeout_seconds=3)))
            for code in hostile]
    await asyncio.sleep(0.5)
    started = time.monotonic()
    trivial = await js_engine.run("1 + 1", **tools.kwargs())
    assert time.monotonic() - started <= 1.0
    assert trivial.value == 2
    results = await asyncio.gather(*runs)
    assert [r.error.kind for r in results] == ["timeout"] * 8


async def test_a_guest_stuck_past_the_grace_is_abandoned_and_its_vm_never_reused(tools):
    """When the guest does not stop (one C builtin looping), the run still answers by its
    deadline plus the grace, and the engine's next runs get fresh threads and VMs."""
    with JsEngine(pool_size=1) as engine:
        started = time.monotonic()
        # join() of a huge sparse array loops inside one builtin, which polls no interrupt.
        result = await engine.run("const a = []; a.length = 2 ** 26; a.join('').length", **tools.kwargs(),
                                  limits=JsLimits(timeout_seconds=0.5))
        assert time.monotonic() - started <= 1.5
        assert result.error.kind == "timeout"
        for _ in range(3):
            again = await engine.run("[typeof a, 2 + 2]", **tools.kwargs())
            assert again.value == ["undefined", 4]


_OUTSIDE_THE_MEMORY = """
from sandbox import js
from sandbox._wasmcall import EngineError, _write

assert js.image_ready()
vm = js._Vm(js._DEFAULT_HEAP_MB)
inst = vm.guest._ctx._inst
size = vm.guest.memory_bytes()
last = inst.read(size - 4, 4)
assert len(last) == 4 and inst.read(size, 0) == b""
refused = 0
for ptr, length in ((size - 3, 4), (size, 1), (-1, 1), (0, -1), (1 << 40, 1)):
    try:
        inst.read(ptr, length)
    except EngineError as exc:
        refused += "out-of-range" in str(exc)
for ptr, length in ((size - 3, 4), (size, 1), (-1, 1), (1 << 40, 1)):
    try:
        _write(inst, b"\\xff" * length, ptr)
    except EngineError as exc:
        refused += "out-of-range" in str(exc)
print("refused", refused, "unchanged" if inst.read(size - 4, 4) == last else "changed")
vm.close()
"""


def test_reads_and_writes_outside_a_vms_memory_are_refused():
    """Where the guest says a string is (its pointer and length, read back from the guest) is
    checked against its memory's size before the host reads or writes there: a place past the
    end, or negative, is refused, and nothing is read or written (in a subprocess: without the
    check, such a read crashes the process)."""
    done = subprocess.run([sys.executable, "-c", _OUTSIDE_THE_MEMORY], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, textwrap.shorten(done.stderr, 3000)
    assert done.stdout.strip() == "refused 9 unchanged"


_AFTER_THE_TICKER_PARKED = """
import asyncio, threading, time
from sandbox import JsEngine, JsLimits

def wakeups() -> int:
    ticker = next(t for t in threading.enumerate() if t.name == "wasm-epoch")
    with open(f"/proc/self/task/{ticker.native_id}/status") as status:
        return int(next(line for line in status if line.startswith("voluntary_ctxt_switches")).split()[1])

async def call_tool(server, tool, args):
    return {"content": []}

async def list_tools(server):
    return {}

async def main():
    with JsEngine() as engine:
        print((await engine.run("1 + 1", call_tool=call_tool, list_tools=list_tools)).value)
        give_up = time.monotonic() + 10
        while True:
            before = wakeups()
            await asyncio.sleep(0.5)
            woke = wakeups() - before
            if woke <= 1 or time.monotonic() > give_up:
                break
        print("woke", woke)
        longest_pause = 0.0

        async def beat():
            nonlocal longest_pause
            while True:
                before = time.monotonic()
                await asyncio.sleep(0.01)
                longest_pause = max(longest_pause, time.monotonic() - before)

        beating = asyncio.create_task(beat())
        await asyncio.sleep(0.05)
        started = time.monotonic()
        # join() of a huge sparse array loops inside one builtin for some 10 s
        result = await engine.run("const a = []; a.length = 2 ** 28; a.join('').length", call_tool=call_tool,
                                  list_tools=list_tools, limits=JsLimits(timeout_seconds=1))
        took = time.monotonic() - started
        await asyncio.sleep(0.05)  # the beat sees the end of a pause the run may have ended in
        beating.cancel()
        print(result.error.kind, "held the loop" if longest_pause > 0.5 else "briefly",
              "in time" if took < 4 else f"after {took:.1f} s")

asyncio.run(main())
"""


def test_an_idle_epoch_ticker_sleeps_and_a_builtin_loop_still_is_stopped():
    """Once no VM has an epoch deadline, the epoch's ticker stops waking up (an idle process
    costs no CPU); a run that then loops inside one C builtin, which polls no interrupt, is still
    stopped by the epoch: on the caller's loop within its ticks, then past the deadline on its
    thread. Without the ticker, it would hold the loop until the builtin returned."""
    done = subprocess.run([sys.executable, "-c", _AFTER_THE_TICKER_PARKED], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == 0, textwrap.shorten(done.stderr, 3000)
    value, parked, stopped = done.stdout.splitlines()
    assert value == "2"
    assert parked in ("woke 0", "woke 1"), parked  # ticking, it wakes 50 times in half a second
    assert stopped == "timeout briefly in time", stopped


_AFTER_A_CALL = 'await mcp.callTool("t", "echo", {});\n'


@pytest.mark.parametrize("code", ["for (;;) {}", "const a = []; a.length = 2 ** 26; a.join('').length",
                                  _AFTER_A_CALL + "for (;;) {}",
                                  _AFTER_A_CALL + "const a = []; a.length = 2 ** 26; a.join('').length",
                                  _AFTER_A_CALL + "throw {get name() { for (;;) {} }}"],
                         ids=["js-loop", "builtin-loop", "js-loop-after-a-call", "builtin-loop-after-a-call",
                              "hostile-getter-after-a-call"])
async def test_a_hostile_step_holds_the_callers_loop_only_briefly(js_engine, tools, code):
    """A run's steps are tried on the caller's event loop; one that does not end (a loop in
    JavaScript, or inside one C builtin, which polls no interrupt) is stopped there within a few
    epoch ticks (the first step, to start again on its thread) or paused there (a later one, to
    go on on its thread): the loop keeps turning while the run times out."""
    longest_pause = 0.0

    async def beat() -> None:
        nonlocal longest_pause
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            longest_pause = max(longest_pause, time.monotonic() - before)

    await vm_made_ahead(js_engine)
    beating = asyncio.create_task(beat())
    await asyncio.sleep(0.05)
    try:
        result = await js_engine.run(code, **tools.kwargs(), limits=JsLimits(timeout_seconds=2))
        await asyncio.sleep(0.05)  # the beat sees the end of a pause the run may have ended in
    finally:
        beating.cancel()
    assert result.error.kind == "timeout"
    assert longest_pause < 0.5  # held for the whole run, it would be 2 s and more


async def test_a_script_computing_between_its_awaits_takes_the_loop_for_one_step_only(
        js_engine, tools, thread_hops):
    """Steps after the first are tried on the caller's loop; a script that computes a few
    milliseconds after each of many awaits (under the pause, 2 epoch ticks) would take the loop
    in slices, from every client and run. Once one step computed there longer than 2 ms, its
    later steps go to its thread."""
    await vm_made_ahead(js_engine)
    result = await js_engine.run(
        "for (let i = 0; i < 20; i++) {\n  await new Promise((r) => setTimeout(r, 0));\n"
        "  const t = Date.now(); while (Date.now() - t < 6) {}\n}\n'done'",
        **tools.kwargs(), limits=JsLimits(timeout_seconds=10))
    assert result.value == "done", result.error
    assert len(thread_hops) >= 19  # the first slow step on the loop, every later one on the thread


async def test_a_run_cancelled_while_its_paused_step_goes_on_leaves_the_engine_sound(js_engine, tools):
    """A step that paused on the loop goes on on the run's thread; cancelling the run then stops
    the guest there (the VM is closed once the paused call returned), and the next runs work."""
    await vm_made_ahead(js_engine)
    task = asyncio.create_task(js_engine.run('await mcp.callTool("t", "echo", {});\nfor (;;) {}',
                                             **tools.kwargs(), limits=JsLimits(timeout_seconds=30)))
    await asyncio.sleep(0.3)  # past the pause: the loop is on its thread now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(3):
        again = await js_engine.run("[typeof globalThis.x, 2 + 2]", **tools.kwargs())
        assert again.value == ["undefined", 4]


# ---- crashes: fresh engines in subprocesses, 20 times each ----

_CRASH_CASES = """
import asyncio, os, sys
from sandbox import JsEngine, JsLimits

async def call_tool(server, tool, args):
    if tool == "hang":
        await asyncio.sleep(3600)
    await asyncio.sleep(0)
    raise LookupError(f"unknown server {server!r}")

async def list_tools(server):
    return {}

FLOOD = "for (let i = 0; i < 1100; i++) { try { await mcp.callTool('nope', 'x', {i}) } catch (e) {} }\\n"
TAILS = ["for (;;) {}", "await mcp.callTool('t', 'hang', {})", "await new Promise(r => setTimeout(r, 1e7))",
         "try { await new Promise(r => setTimeout(r, 1e7)) } finally { for (;;) {} }"]

async def main():
    kw = {"call_tool": call_tool, "list_tools": list_tools}
    engine = JsEngine()
    limits = JsLimits(timeout_seconds=0.7)
    runs = [engine.run(FLOOD + tail, **kw, limits=limits) for tail in TAILS]
    runs += [engine.run("({toJSON() { for (;;) {} }})", **kw, limits=limits) for _ in range(2)]
    # a step paused on the loop, going on on its thread when its run is cancelled
    paused = asyncio.ensure_future(engine.run("try { await mcp.callTool('t', 'x', {}) } catch (e) {}\\nfor (;;) {}",
                                              **kw, limits=JsLimits(timeout_seconds=30)))
    results = await asyncio.gather(*runs)
    paused.cancel()
    try:
        await paused
    except asyncio.CancelledError:
        pass
    kinds = sorted({r.error.kind for r in results})
    after = await engine.run("1 + 1", **kw)
    engine.close()
    print(kinds, after.value)

asyncio.run(main())
"""


def _crash_round(_: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", _CRASH_CASES], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)


def test_call_budget_floods_and_timeouts_never_crash_the_process():
    """Call-budget floods ending in timeouts, with other runs timing out beside them and one
    cancelled while a step it paused on the loop goes on on its thread, ran 20 times in fresh
    engines: no segfault or abort inside wasmtime, every run answered."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        rounds = list(pool.map(_crash_round, range(20)))
    for done in rounds:
        assert done.returncode == 0, textwrap.shorten(done.stderr, 3000)
        assert done.stdout.strip() == "['call_budget', 'timeout'] 2" or done.stdout.strip() == "['timeout'] 2", done.stdout



async def test_console_flood_streams_a_bounded_number_of_lines_live(js_engine, tools):
    """Each streamed line becomes a client notification: a flood streams a bounded head and a
    notice, while the result keeps every line within max_output_bytes."""
    from sandbox._host import STREAM_LINES

    seen: list[str] = []
    result = await js_engine.run("for (let i = 0; i < 5000; i++) console.log('line ' + i); 'end'",
                                 **tools.kwargs(), on_console=lambda level, text: seen.append(text))
    assert result.value == "end" and len(result.console) == 5000
    assert len(seen) == STREAM_LINES + 1
    assert seen[0] == "line 0" and "not streamed live" in seen[-1]


async def test_many_large_completions_reach_the_guest_a_step_at_a_time(js_engine):
    """160 listings of half a megabyte asked for at once were handed over as one 77 MB string,
    which the guest could not take ("call status=2"): at most 8 MiB go in one step now."""
    listing = {"t": [{"name": f"tool{i}", "description": "d" * 5000, "inputSchema": {"type": "object"}}
                     for i in range(95)]}

    async def list_tools(server):
        return listing

    async def no_calls(*args):
        raise AssertionError("no calls here")

    result = await js_engine.run("let n = 0, done; const all = new Promise((r) => { done = r; }); "
                                 "for (let i = 0; i < 160; i++) mcp.listTools().then((l) => { "
                                 "if (l.t.length === 95 && ++n === 160) done(n); }); await all",
                                 call_tool=no_calls, list_tools=list_tools, limits=JsLimits(timeout_seconds=20))
    assert (result.status, result.value) == ("ok", 160), result.error
