"""run_py against hostile scripts: every run answers within its timeout plus a second, with the
right error kind, and the next run starts clean."""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field

import pytest

from sandbox import PyEngine, PyLimits

from .conftest import ToolHost

pytestmark = pytest.mark.anyio

# Every hostile script first leaves a global and a module attribute behind; the run after it
# must see neither.
MARK = "import json as _j\nleak = 1\n_j.leaked = 1\n"
CHECK = "import json\n['leak' in globals(), getattr(json, 'leaked', None), 1 + 1]"
CLEAN = [False, None, 2]
AFTER = 5  # the timeout of that trivial run


@dataclass(frozen=True)
class Case:
    code: str
    kind: str | None  # the error kind, or None for an ok run
    timeout: float = 2.0
    repeat: int = 1  # a script that could crash the process runs many times
    memory_max_mb: int = 256
    says: tuple[str, ...] = ()  # text the error message (or the value) must hold
    extra: dict = field(default_factory=dict)  # more limits


CASES = {
    # time
    "busy loop": Case("while True:\n    pass", "timeout", timeout=1),
    "huge int power": Case("x = 10 ** 10 ** 8", "timeout", timeout=1),
    "regex backtracking": Case("import re\nre.match('(a+)+$', 'a' * 40 + 'b')", "timeout",
                               timeout=1),
    "sleep forever": Case("import time\ntime.sleep(3600)", "timeout", timeout=1),
    "generator finalizer loops": Case(
        "def g():\n    try:\n        yield 1\n    finally:\n        while True:\n            pass\n"
        "x = g()\nnext(x)\ndel x", "timeout", timeout=1),
    "__del__ loops when dropped": Case(
        "class A:\n    def __del__(self):\n        while True:\n            pass\na = A()\ndel a",
        "timeout", timeout=1),
    # the final value's conversion is inside the deadline
    "value __repr__ loops": Case(
        "class A:\n    def __repr__(self):\n        while True:\n            pass\nA()", "timeout",
        timeout=1),
    "value dict subclass items() loops": Case(
        "class D(dict):\n    def items(self):\n        while True:\n            pass\n"
        "D(a=1)", "timeout", timeout=1),
    "value __del__ loops after conversion": Case(
        "class A:\n    def __del__(self):\n        while True:\n            pass\n"
        "    def __repr__(self):\n        return 'A()'\nA()", "timeout", timeout=1),
    "exception __str__ loops": Case(
        "class E(Exception):\n    def __str__(self):\n        while True:\n            pass\n"
        "raise E()", "timeout", timeout=1),
    # finalizers and exit handlers never run at teardown, so they cannot overrun
    "__del__ loops at teardown": Case(
        "class A:\n    def __del__(self):\n        while True:\n            pass\nkept = A()\n'done'",
        None, says=("done",)),
    "atexit handler loops": Case(
        "import atexit\n\ndef spin():\n    while True:\n        pass\natexit.register(spin)\n"
        "'done'", None, says=("done",)),
    # recursion and the C stack
    "deep recursion": Case("def f(n):\n    return f(n + 1)\nf(0)", "thrown",
                           says=("RecursionError",)),
    "recursion limit raised": Case(
        "import sys\nsys.setrecursionlimit(10 ** 9)\ndef f(n):\n    return f(n + 1)\nf(0)",
        "thrown", says=("RecursionError",), repeat=20, timeout=5),
    "deeply nested parse": Case("eval('(' * 100000 + ')' * 100000)", "thrown",
                                says=("too complex",)),
    "deep json in the script": Case(
        "import json\nx = []\nfor _ in range(100000):\n    x = [x]\njson.dumps(x)", "thrown",
        says=("RecursionError",)),
    # memory
    "string of 16 GiB": Case("'x' * (1 << 34)", "thrown", says=("OverflowError",)),
    "string of 1 GiB": Case("s = 'x' * (1 << 30)", "memory", says=("memory_max_mb=256",)),
    "bytearray growth": Case("b = bytearray()\nwhile True:\n    b += b'x' * (1 << 20)", "memory",
                             repeat=20, timeout=10),
    "numpy allocations": Case(
        "import numpy as np\nxs = []\nwhile True:\n    xs.append(np.ones(1 << 22))", "memory",
        repeat=20, timeout=10),
    "numpy one huge array": Case("import numpy as np\nnp.zeros((1 << 14, 1 << 13))", "memory"),
    "endless generator into a list": Case("import itertools\nlist(itertools.count())",
                                          "memory", timeout=20),
    "memory held while failing": Case(
        "xs = []\ntry:\n    while True:\n        xs.append(bytearray(1 << 16))\n"
        "except MemoryError:\n    raise ValueError('y' * 10 ** 6)", "memory", repeat=20,
        timeout=10),
    "memory error swallowed": Case(
        "try:\n    x = bytearray(10 ** 9)\nexcept MemoryError:\n    pass\n'went on'", None,
        says=("went on",)),
    # ways out of the interpreter
    "sys.exit with a code": Case("import sys\nsys.exit(2)", "thrown", says=("SystemExit: 2",)),
    "sys.exit with an object": Case(
        "import sys\nclass C:\n    def __eq__(self, other):\n        while True:\n"
        "            pass\nsys.exit(C())", "thrown", says=("SystemExit",)),
    "exit()": Case("exit(3)", "thrown", says=("SystemExit: 3",)),
    "os._exit": Case("import os\nos._exit(3)", "thrown", says=("os._exit(3)",), repeat=20),
    "KeyboardInterrupt raised": Case("raise KeyboardInterrupt", "thrown",
                                     says=("KeyboardInterrupt",)),
    "BaseException subclasses caught": Case(
        "class Out(BaseException):\n    pass\nseen = []\n"
        "for e in (KeyboardInterrupt, SystemExit, GeneratorExit, Out):\n"
        "    try:\n        raise e()\n    except BaseException as x:\n"
        "        seen.append(type(x).__name__)\nseen", None, says=("Out",)),
    "BaseException subclass uncaught": Case(
        "class Out(BaseException):\n    pass\nraise Out('bye')", "thrown", says=("Out: bye",)),
    "threads": Case("import threading\nthreading.Thread(target=print).start()", "thrown"),
    "signals": Case(
        "import signal\nsignal.signal(signal.SIGINT, lambda *a: None)\n"
        "signal.raise_signal(signal.SIGINT)\n'survived'", None, says=("survived",)),
    "stdout closed": Case("import os\nos.close(1)\n'x'", "thrown", says=("file descriptor 1",),
                          repeat=20),
    "stdout written past the limit": Case("import os\nos.write(1, b'x' * (5 << 20))\n'x'",
                                          "output", says=("max_output_bytes",)),
    # the guest API
    "mcp.call_tool replaced": Case("mcp.call_tool = None\nmcp.call_tool('t', 'echo', {})",
                                   "thrown", says=("TypeError",)),
    "builtins, print and json replaced": Case(
        "import builtins, json\nbuiltins.len = None\nbuiltins.isinstance = None\n"
        "builtins.print = None\njson.dumps = None\njson.loads = None\n[1, 'two']", None,
        says=("two",)),
    "sys.stdout replaced": Case(
        "import sys\nsys.stdout = object()\nprint('x')", "thrown", says=("AttributeError",)),
    "guest API internals broken": Case(
        "import sys\napi = sys.modules['__codedesk__']\napi._console = None\napi._frame = None\n"
        "api._encode_compact = None\nprint('x')", "thrown"),
    "malformed frames to the host tool": Case(
        "import json\nfrom host import tools as door\nout = []\n"
        "for frame in ['', 'null', '[1]', '{\"op\": \"call\"}', '\\x00' * 10,\n"
        "              '{\"op\":\"part\",\"data\":\"!!\"}', '{\"op\":\"parts\"}',\n"
        "              '{\"op\":\"call\",\"server\":\"t\",\"tool\":\"echo\",\"args\":' + '[' * 60 + ']' * 60 + '}',\n"
        "              '{\"console\": [[1, 2, 3]], \"op\": \"console\"}',\n"
        "              '{\"op\":\"calls\",\"calls\":[[1,2,3]]}', 'x' * (2 << 20)]:\n"
        "    try:\n        out.append(door.codedesk(frame)[:40])\n"
        "    except Exception as e:\n        out.append(type(e).__name__)\nout", None),
    "call flood then a busy loop": Case(
        "for i in range(1100):\n    try:\n        mcp.call_tool('nope', 'x', {})\n"
        "    except Exception:\n        pass\nwhile True:\n    pass", "timeout", timeout=3),
    "call budget swallowed": Case(
        "for i in range(5):\n    try:\n        mcp.call_tool('t', 'echo', {})\n"
        "    except Exception:\n        pass\n'done'", None, says=("done",),
        extra={"max_tool_calls": 2}),
    "huge tool arguments": Case(
        "r = mcp.call_tool('t', 'echo', {'a': 'x' * (10 << 20)})\nlen(r['content'][0]['text'])",
        None, says=("10485769",), memory_max_mb=1024, timeout=20),
    "tool arguments over the cap": Case(
        "mcp.call_tool('t', 'echo', {'a': 'x' * (65 << 20)})", "bridge", memory_max_mb=1024,
        says=("64 MiB",), timeout=20),
    # output: too large, too deep, cyclic
    "100 printed lines of 1 MiB": Case("for i in range(100):\n    print('x' * (1 << 20))\n'end'",
                                       None, says=("end",), timeout=20),
    "endless line without a newline": Case("while True:\n    print('x' * 1000, end='')",
                                           "timeout", timeout=1),
    "value too large": Case("'x' * (50 << 20)", "output", says=("max_output_bytes",)),
    "value nested 100000 deep": Case("x = []\nfor _ in range(100000):\n    x = [x]\nx", "output"),
    "value nested 500 deep": Case("x = []\nfor _ in range(500):\n    x = [x]\nx", "output",
                                  says=("100 levels",)),
    "cyclic value": Case("x = []\nx.append(x)\nx", None, says=("[[...]]",)),
    "exception message of 50 MiB": Case("raise ValueError('x' * (50 << 20))", "thrown",
                                        says=("characters cut",)),
    "lone surrogates": Case("print('\\ud800')\n'\\udc00'", None),
}


async def run(engine, tools: ToolHost, code: str, **limits):
    return await engine.run(code, **tools.kwargs(), limits=PyLimits(**limits))


async def timed(coro):
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await coro
    return result, loop.time() - started


def check(case: Case, result, elapsed: float) -> None:
    assert elapsed < case.timeout + 1, f"answered after {elapsed:.2f} s"
    if case.kind is None:
        assert result.status == "ok", result.error
        shown = json.dumps(result.value)
    else:
        assert result.error is not None and result.error.kind == case.kind, result.error
        shown = result.error.message
    for text in case.says:
        assert text in shown, shown[:500]


@pytest.mark.parametrize("name", list(CASES))
async def test_hostile_script_answers_in_time_and_leaves_nothing(py_engine, tools, name):
    """Whatever a script does, its run answers by its timeout + 1 s with the right error kind,
    and the next run sees nothing it left."""
    case = CASES[name]
    limits = {"timeout_seconds": case.timeout, "memory_max_mb": case.memory_max_mb,
              **case.extra}
    for _ in range(case.repeat):
        result, elapsed = await timed(run(py_engine, tools, MARK + case.code, **limits))
        check(case, result, elapsed)
        after, elapsed = await timed(run(py_engine, tools, CHECK, timeout_seconds=AFTER))
        assert after.value == CLEAN, after.error
        assert elapsed < AFTER + 1


async def test_printing_past_the_frame_limit_is_an_output_cut(py_engine, tools):
    """100 lines of 1 MiB are cut at max_output_bytes with a marker, not a bridge error."""
    result = await run(py_engine, tools, "for i in range(100):\n    print('x' * (1 << 20))\n'end'")
    assert result.status == "ok" and result.value == "end"
    assert len(result.console[0].text) == (1 << 20) - 1
    assert "output truncated" in result.console[-1].text
    assert "99 more lines" in result.console[-1].text


async def test_large_tool_arguments_arrive_whole(py_engine, tools):
    """Arguments past the host tool's 1 MiB frame reach the capability unchanged."""
    result = await run(py_engine, tools,
                       "mcp.call_tool('t', 'echo', {'a': 'é\"\\x01' * (1 << 19)})\n'sent'",
                       memory_max_mb=1024)
    assert result.value == "sent"
    assert tools.calls == [("t", "echo", {"a": 'é"\x01' * (1 << 19)})]


async def test_malformed_frames_reach_no_tool(py_engine, tools):
    """Garbage sent straight to the host tool is refused and never becomes a tool call."""
    code = MARK.replace("leak = 1\n", "") + CASES["malformed frames to the host tool"].code
    result = await run(py_engine, tools, code)
    assert result.status == "ok"
    assert tools.calls == []
    assert all("malformed" in item or "Tool" in item or item.startswith('{"ok"')
               for item in result.value), result.value


async def test_eight_hostile_runs_do_not_delay_a_ninth(py_engine, tools):
    """Runs that compute until their timeout hold only their own threads: a trivial run started
    among eight of them answers within a second."""
    hostile = [asyncio.ensure_future(timed(run(py_engine, tools, "while True:\n    pass",
                                               timeout_seconds=4)))
               for _ in range(8)]
    await asyncio.sleep(1)
    result, elapsed = await timed(run(py_engine, tools, "'quick'"))
    assert result.value == "quick"
    assert elapsed < 1
    for result, elapsed in await asyncio.gather(*hostile):
        assert result.error.kind == "timeout"
        assert elapsed < 5


async def test_overrunning_turn_that_does_not_stop_is_abandoned_in_time(py_engine, tools):
    """A run whose turn answers nothing answers by its timeout + 1 s all the same, with
    several such runs at once."""
    results = await asyncio.gather(*(timed(run(py_engine, tools, CASES["busy loop"].code,
                                               timeout_seconds=1)) for _ in range(4)))
    for result, elapsed in results:
        assert result.error.kind == "timeout" and elapsed < 2


@pytest.mark.parametrize("name", ["busy loop", "recursion limit raised", "os._exit",
                                  "value __repr__ loops"])
async def test_session_run_that_ends_the_interpreter_says_so(py_engine, tools, name):
    """In a session, a run that overruns or ends the interpreter fails in time with an error
    saying the session's state is gone; the next run works, in a fresh interpreter."""
    case = CASES[name]
    async with py_engine.session(memory_max_mb=case.memory_max_mb) as session:
        first = await session.run("kept = 41", **tools.kwargs())
        assert first.status == "ok"
        result, elapsed = await timed(session.run(
            MARK + case.code, **tools.kwargs(), limits=PyLimits(timeout_seconds=case.timeout)))
        check(case, result, elapsed)
        assert "ended the session's interpreter" in result.error.message
        after = await session.run(CHECK.replace("'leak'", "'kept'"), **tools.kwargs())
        assert after.value == CLEAN


@pytest.mark.parametrize("name", ["memory error swallowed", "deep recursion", "sys.exit with a code",
                                  "value too large", "call budget swallowed"])
async def test_session_survives_errors_that_leave_the_interpreter_sound(py_engine, tools, name):
    """A run that fails without harming the interpreter keeps the session's names."""
    case = CASES[name]
    async with py_engine.session() as session:
        await session.run("kept = 41", **tools.kwargs())
        result, elapsed = await timed(session.run(
            case.code, **tools.kwargs(),
            limits=PyLimits(timeout_seconds=case.timeout, **case.extra)))
        check(case, result, elapsed)
        after = await session.run("kept + 1", **tools.kwargs())
        assert after.value == 42


async def test_swallowed_call_budget_error_is_said_in_the_result(py_engine, tools):
    """A script that catches CallBudgetError and goes on still ends with a note saying how many
    calls were refused (as run_js does), and no more calls reach the host than the budget."""
    result = await run(
        py_engine, tools,
        "for i in range(10):\n    try:\n        mcp.call_tool('t', 'echo', {'i': i})\n"
        "    except Exception as e:\n        print(type(e).__name__)\n'done'",
        max_tool_calls=3)
    assert result.status == "ok" and result.value == "done"
    *printed, note = [(line.level, line.text) for line in result.console]
    assert printed == [("log", "CallBudgetError")] * 7
    assert note[0] == "warn"
    assert "call budget spent: 7 tool call(s) were refused" in note[1]
    assert "max_tool_calls" in note[1]
    assert len(tools.calls) == 3 and result.tool_calls == 3


async def test_fresh_engine_outlives_hostile_runs():
    """An engine of its own runs trivial scripts after every kind of trap, and closes."""
    tools = ToolHost()
    with PyEngine(pool_size=1) as engine:
        for name in ("recursion limit raised", "os._exit", "stdout closed", "busy loop"):
            case = CASES[name]
            result = await run(engine, tools, case.code, timeout_seconds=case.timeout)
            assert result.error.kind == case.kind
        assert (await run(engine, tools, "6 * 7")).value == 42


async def test_a_script_replacing_getframe_neither_breaks_its_calls_nor_names_a_false_line(
        py_engine, tools, line_recorder):
    """The call's line is read with the frame function taken when the API was installed: a script
    replacing sys._getframe changes nothing of its calls."""
    result = await py_engine.run(
        "import sys\nsys._getframe = lambda *a: 1 / 0\nmcp.call_tool('t', 'x', {'n': 'a'})['content'][0]['text']",
        call_tool=line_recorder.call_tool, list_tools=tools.list_tools)
    assert (result.status, result.value) == ("ok", "ok"), result.error
    assert line_recorder.lines == [("a", 3)]

