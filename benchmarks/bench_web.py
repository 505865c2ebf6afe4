"""Benchmark web.fetch against the same work done directly: httpx alone plus the converter alone.

- `fetch` of a 1 MB local HTML page (headings, links, tables) through the real server over
  stdio, beside httpx GETting the same page plus html-to-markdown converting it, in this process
  (the baseline has no MCP, no egress check, no paging).
- The same `fetch` run in-process without MCP, to show what the server adds.

Medians of several runs, the runs of a pair interleaved, because this machine is noisy.

Usage: .venv/bin/python benchmarks/bench_web.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import httpx
from html_to_markdown import ConversionOptions, convert
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from capabilities.web.server import call_tool, new_state  # noqa: E402


def build_page(path: Path, size: int = 1 << 20) -> None:
    """An article-like HTML page of about `size` bytes."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>Benchmark page</title></head><body>"]
    n = 0
    while sum(map(len, parts)) < size:
        parts.append(f"<h2>Section {n}</h2><p>Paragraph {n} with a <a href='/page/{n}'>link</a> and <b>bold</b> "
                     "words that read like a report on quarterly figures across regions.</p>"
                     f"<table><tr><th>Region</th><th>Sales</th></tr><tr><td>North {n}</td><td>{n * 7}</td></tr>"
                     f"<tr><td>South {n}</td><td>{n * 3}</td></tr></table>")
        n += 1
    parts.append("</body></html>")
    path.write_text("".join(parts))


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def report(name: str, ours: list[float], base: list[float], base_name: str) -> None:
    a, b = statistics.median(ours), statistics.median(base)
    print(f"{name:<34} {a * 1000:9.1f} ms   {base_name:<34} {b * 1000:9.1f} ms   ratio {a / b:5.2f}x")


async def main(quick: bool) -> None:
    runs = 3 if quick else 11
    with tempfile.TemporaryDirectory() as folder:
        build_page(Path(folder) / "page.html")
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=folder))
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{httpd.server_address[1]}/page.html"
        size = os.path.getsize(Path(folder) / "page.html")
        try:
            async with httpx.AsyncClient() as client:

                async def direct() -> float:
                    started = time.perf_counter()
                    response = await client.get(url)
                    convert(response.text, ConversionOptions(extract_metadata=True, base_url=url))
                    return time.perf_counter() - started

                state = new_state()
                env = {**os.environ, "CODEDESK_DATA": folder}
                params = StdioServerParameters(command=sys.executable, args=["-m", "capabilities.web"], env=env,
                                               cwd=str(REPO))
                async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    await session.call_tool("fetch", {"url": url})  # warm: the pool, the converter
                    await direct()
                    served, inproc, base = [], [], []
                    for _ in range(runs):
                        started = time.perf_counter()
                        result = await session.call_tool("fetch", {"url": url, "maxChars": 20_000})
                        served.append(time.perf_counter() - started)
                        assert not result.is_error, result.content[0].text
                        started = time.perf_counter()
                        await call_tool(state, "fetch", {"url": url, "maxChars": 20_000})
                        inproc.append(time.perf_counter() - started)
                        base.append(await direct())
                await state.aclose()
        finally:
            httpd.shutdown()
            httpd.server_close()
    print(f"web.fetch of a {size / 1e6:.2f} MB page to markdown; medians of {runs} runs")
    report("web.fetch over stdio", served, base, "httpx + html-to-markdown")
    report("web.fetch in-process (no MCP)", inproc, base, "httpx + html-to-markdown")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (CI's smoke mode)")
    anyio.run(main, parser.parse_args().quick)
