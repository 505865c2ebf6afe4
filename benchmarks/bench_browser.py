"""Benchmark browser_execute against the same steps written directly with Playwright.

- 50 steps (evaluate / click / type, mixed) on a local page in one browser_execute call through
  the real server over stdio, beside the same 50 Playwright calls made by this process (its own
  Playwright connection) on the same page. Also the tool's in-process cost (`page_tool.execute` with a
  `TabRegistry` in this process, no MCP, and the contract's result built from its report). Medians of several runs, runs interleaved.
- The first call after session start: from `codedesk desktop up` returning to the first
  browser_execute result of a freshly spawned server (spawn, initialize, connect, open the window).

- readPage (interactive) size in bytes beside a full-page screenshot's PNG size, for three
  local pages of different sizes, and the time of readPage on a 5,000-element page.

The session: `--data DIR` of a running session, else a fresh one started with `codedesk desktop up`
in a temporary directory (and stopped at the end).

Usage: .venv/bin/python benchmarks/bench_browser.py [--quick] [--data DIR]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from playwright.async_api import async_playwright

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from capabilities.browser.page_ops import CLICK_TIMEOUT_MS, BrowserRequest  # noqa: E402
from capabilities.browser.page_result import build_result  # noqa: E402
from capabilities.browser.page_tool import execute  # noqa: E402
from capabilities.browser.tabs import TabRegistry  # noqa: E402
from capabilities.session import read_session  # noqa: E402

CODEDESK = str(Path(sys.executable).with_name("codedesk"))
PAGE = """<title>{title}</title>
<input id="name" autocomplete="off">
<button id="count" onclick="this.textContent = String(Number(this.textContent) + 1)">0</button>"""
STEPS = 50


def operations() -> list[dict]:
    ops = []
    for i in range(STEPS):
        match i % 3:
            case 0:
                ops.append({"type": "evaluate", "params": {"script": "document.querySelector('#count').textContent"}})
            case 1:
                ops.append({"type": "click", "params": {"selector": "#count"}})
            case 2:
                ops.append({"type": "type", "params": {"selector": "#name", "text": "ab"}})
    return ops


async def direct(page, ops: list[dict]) -> None:
    """The same steps as browser_execute runs them, written directly against Playwright."""
    for op in ops:
        p = op["params"]
        match op["type"]:
            case "evaluate":
                await page.evaluate(p["script"])
            case "click":
                await page.click(p["selector"], timeout=CLICK_TIMEOUT_MS)
            case "type":
                await page.click(p["selector"], timeout=CLICK_TIMEOUT_MS)
                await page.keyboard.type(p["text"], delay=0)


def server_params(env: dict) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "capabilities.browser"], env=env, cwd=str(REPO))


async def first_call(env: dict) -> tuple[float, float]:
    """(spawn to initialized, spawn to the first browser_execute result) in seconds."""
    start = time.perf_counter()
    async with stdio_client(server_params(env)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        initialized = time.perf_counter() - start
        result = await session.call_tool(
            "browser_execute", {"operations": [{"type": "url", "params": {}}], "tab": "bench-first"}
        )
        assert not result.is_error, result.content[0].text
        return initialized, time.perf_counter() - start


async def bench(data: Path, quick: bool, up_seconds: float | None) -> None:
    runs = 3 if quick else 10
    env = {**os.environ, "CODEDESK_DATA": str(data)}
    info = read_session(data)

    initialized, first = await first_call(env)
    print(f"first call after session start: {first * 1000:.0f} ms from server spawn "
          f"({initialized * 1000:.0f} ms to initialized)"
          + (f"; session up took {up_seconds:.1f} s, so nothing-to-first-result {up_seconds + first:.1f} s"
             if up_seconds is not None else ""))

    ops = operations()
    tool_args = {"operations": ops, "tab": "bench"}
    title = f"bench-{os.getpid()}"
    setup = {"operations": [{"type": "setContent", "params": {"html": PAGE.format(title=title)}}], "tab": "bench"}
    request = BrowserRequest.model_validate(tool_args)
    tool_ms, inproc_ms, direct_ms = [], [], []
    # All three act on the one page of the tab "bench", so no run pays for switching tabs: the
    # in-process registry finds the tab through the session's tabs.json, the direct baseline
    # by the page's title.
    registry = TabRegistry(load_session=lambda: info)
    async with stdio_client(server_params(env)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("browser_execute", setup)
        assert not result.is_error, result.content[0].text[:500]
        async with async_playwright() as pw:
            browser = await pw.chromium.connect_over_cdp(info.devtools_url)
            titles = [await p.title() for p in browser.contexts[0].pages]
            page = browser.contexts[0].pages[titles.index(title)]
            await direct(page, ops)  # warm
            await session.call_tool("browser_execute", tool_args)
            await execute(registry, request)
            for _ in range(runs):
                t = time.perf_counter()
                await direct(page, ops)
                direct_ms.append((time.perf_counter() - t) * 1000)

                t = time.perf_counter()
                result = await session.call_tool("browser_execute", tool_args)
                tool_ms.append((time.perf_counter() - t) * 1000)
                assert not result.is_error, result.content[0].text[:500]

                t = time.perf_counter()
                report = await execute(registry, request)
                built = build_result(report)
                inproc_ms.append((time.perf_counter() - t) * 1000)
                assert not built.is_error, report.summary()
            await session.call_tool("browser_execute", {**setup, "close": True})
        base = statistics.median(direct_ms)
        print(f"{STEPS} steps, median of {runs} runs:")
        print(f"  Playwright directly (baseline)       {base:8.1f} ms")
        tool = statistics.median(tool_ms)
        print(f"  browser_execute over MCP stdio       {tool:8.1f} ms   ratio {tool / base:.3f}  (target <= 1.10)")
        inproc = statistics.median(inproc_ms)
        print(f"  browser_execute in-process execute() {inproc:8.1f} ms   ratio {inproc / base:.3f}")
        await reading(session, runs)
    await registry.aclose()


def _page(sections: int) -> str:
    parts = "".join(
        f"<section><h2>Part {i}</h2><p>Some text about part {i}.</p><label>Field {i} <input name=f{i}></label>"
        f"<a href='#p{i}'>Link {i}</a><button>Action {i}</button></section>"
        for i in range(sections)
    )
    return f"<title>page of {sections}</title><main>{parts}</main>"


async def reading(session: ClientSession, runs: int) -> None:
    """readPage (interactive) bytes vs a full-page screenshot, and readPage time on 5,000 elements."""

    async def call(ops: list[dict]) -> tuple[dict, list]:
        result = await session.call_tool("browser_execute", {"operations": ops, "tab": "bench-read"})
        assert not result.is_error, result.content[0].text[:500]
        body = json.loads(result.content[0].text.split("\n", 1)[1])
        return body, [c for c in result.content if c.type == "image"]

    print("readPage (interactive) vs full-page screenshot:")
    for sections in (5, 50, 300):
        body, images = await call([{"type": "setContent", "params": {"html": _page(sections)}},
                                   {"type": "readPage"}, {"type": "screenshot", "params": {"fullPage": True}}])
        tree = json.dumps(body["results"][1]["result"]).encode()
        png = len(base64.b64decode(images[0].data))
        print(f"  {sections * 7:5d} elements: readPage {len(tree):7d} B   screenshot {png:9d} B   "
              f"({png / len(tree):.0f}x)")
    big = [{"type": "setContent", "params": {"html": _page(715)}}]  # 715 sections x 7 = 5,005 elements
    await call(big)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        body, _ = await call([{"type": "readPage"}])
        times.append((time.perf_counter() - start) * 1000)
    result = body["results"][0]["result"]
    print(f"  readPage of 5,005 elements: median {statistics.median(times):.0f} ms "
          f"(listed {result['elements']}, truncated {result['truncated']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke run)")
    parser.add_argument("--data", type=Path, help="data dir of a running session (default: start one)")
    args = parser.parse_args()
    if args.data is not None:
        anyio.run(bench, args.data, args.quick, None)
        return
    data = Path(tempfile.mkdtemp(prefix="bench-browser-"))
    data.chmod(0o755)  # the desktop user must reach it
    start = time.perf_counter()
    subprocess.run([CODEDESK, "desktop", "up", "--data", str(data)], check=True, stdout=subprocess.DEVNULL)
    up_seconds = time.perf_counter() - start
    try:
        anyio.run(bench, data, args.quick, up_seconds)
    finally:
        subprocess.run([CODEDESK, "desktop", "down", "--data", str(data)], check=False, stdout=subprocess.DEVNULL)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
