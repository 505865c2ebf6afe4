"""desktop_execute on native windows: reading accessibility trees, screen.marks, waiting for a
still screen, and what a tree weighs against a screenshot of the same window.

Runs against the desktop session (`$CODEDESK_DATA` or the default data dir) when one is up;
otherwise starts its own (`codedesk desktop up` in a temporary data dir) and stops it after.
Everything goes through the real browser server over stdio, as a script's calls do.

Prints medians, each beside a baseline measured in the same run: a screenshot of the same
window (window.capture) for the tree reads and the marks, the quiet period itself for
screen.waitStable.
- accessibility.tree of a full Chromium window (its interface and a page of 200 form rows: the
  session turns Chromium's accessibility on) and of Thunar;
- screen.marks end to end, on the page (browser) and on Thunar (accessibility);
- accessibility.find on the whole desktop while Chromium shows that page (pages' contents are
  left to a read naming their window);
- screen.waitStable {ms: 200} on a still screen: time beyond the 200 ms;
- bytes: the tree's text against the PNG of the same window.

    .venv/bin/python benchmarks/bench_desktop_native.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import anyio  # noqa: E402

from capabilities.browser.desktop_windows import CAPTURE_SETTLE_S  # noqa: E402
from capabilities.session import SessionNotFound, read_session  # noqa: E402

CODEDESK = str(Path(sys.executable).with_name("codedesk"))
QUIET_MS = 200


def page_html(rows: int = 200) -> str:
    """A long form: labelled fields, buttons and links, as a busy web app shows."""
    body = "".join(
        f"<tr><td><label for=f{i}>Field {i}</label></td><td><input id=f{i} value='value {i}'></td>"
        f"<td><button>Save {i}</button></td><td><a href='#r{i}'>Row {i}</a></td></tr>" for i in range(rows))
    return f"<title>bench native</title><h1>Bench</h1><table>{body}</table>"


@contextmanager
def session_up():
    """The running session, or one of our own for the length of the run."""
    try:
        info = read_session()
        if subprocess.run([CODEDESK, "desktop", "status"], capture_output=True, timeout=30).returncode == 0:
            yield info
            return
    except SessionNotFound:
        pass
    with tempfile.TemporaryDirectory(prefix="bench-native-") as data:
        subprocess.run([CODEDESK, "desktop", "up", "--data", data], check=True, capture_output=True, timeout=180)
        os.environ["CODEDESK_DATA"] = data
        try:
            yield read_session(Path(data))
        finally:
            subprocess.run([CODEDESK, "desktop", "down", "--data", data], capture_output=True, timeout=60)


def bench(info, runs: int) -> tuple[dict[str, float], dict[str, int]]:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    figures: dict[str, float] = {}
    sizes: dict[str, int] = {}

    async def main() -> None:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "capabilities.browser"], cwd=str(REPO),
            env={**os.environ, "CODEDESK_DATA": str(info.data_dir)})
        with open(os.devnull, "w") as devnull:
            async with stdio_client(params, errlog=devnull) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()

                    async def call(tool: str, args: dict) -> dict:
                        result = await client.call_tool(tool, args)
                        assert not result.is_error, result.content[0].text[:1000]
                        return result

                    async def desk(*steps: dict) -> dict:
                        return json.loads((await call("desktop_execute", {"operations": list(steps)})).content[0].text)

                    async def timed(name: str, *steps: dict) -> dict:
                        body = await desk(*steps)  # warm-up
                        times = []
                        for _ in range(runs):
                            began = time.perf_counter()
                            body = await desk(*steps)
                            times.append((time.perf_counter() - began) * 1000)
                        figures[name] = statistics.median(times)
                        return body

                    # A full Chromium window showing a busy page.
                    await call("browser_execute", {"tab": "bench-native", "operations": [
                        {"type": "setContent", "params": {"html": page_html()}}]})
                    chromium = (await desk({"type": "window.waitFor", "params": {"title": "bench native"}},
                                           ))["results"][0]["result"]
                    await desk({"type": "window.focus", "params": {"id": chromium["id"]}},
                               {"type": "screen.waitStable", "params": {"ms": 300}})
                    shot = await timed("chromium: window.capture (baseline)",
                                       {"type": "window.capture", "params": {"id": chromium["id"]}})
                    png = await call("desktop_execute", {"operations": [
                        {"type": "window.capture", "params": {"id": chromium["id"]}}]})
                    sizes["chromium window PNG"] = len(_png_bytes(png))
                    tree = await timed("chromium: accessibility.tree",
                                       {"type": "accessibility.tree",
                                        "params": {"window": chromium["id"], "maxElements": 5000}})
                    sizes["chromium tree text"] = len(tree["results"][0]["result"]["tree"].encode())
                    sizes["chromium tree lines"] = tree["results"][0]["result"]["elements"]
                    marks = await timed("chromium: screen.marks (both)",
                                        {"type": "screen.marks", "params": {"window": chromium["id"]}})
                    sizes["chromium marks"] = len(marks["results"][0]["result"]["marks"])
                    await timed("chromium: accessibility.find, whole desktop",
                                {"type": "accessibility.find", "params": {"name": "Reload"}})
                    del shot

                    # Thunar on a folder of many files.
                    launched = await desk({"type": "apps.launch", "params": {"id": "thunar",
                                                                            "args": ["/usr/share/applications"]}})
                    thunar = launched["results"][0]["result"]
                    try:
                        await desk({"type": "window.focus", "params": {"id": thunar["id"]}},
                                   {"type": "screen.waitStable", "params": {"ms": 500, "timeout": 15000}})
                        await timed("thunar: window.capture (baseline)",
                                    {"type": "window.capture", "params": {"id": thunar["id"]}})
                        png = await call("desktop_execute", {"operations": [
                            {"type": "window.capture", "params": {"id": thunar["id"]}}]})
                        sizes["thunar window PNG"] = len(_png_bytes(png))
                        tree = await timed("thunar: accessibility.tree",
                                           {"type": "accessibility.tree",
                                            "params": {"window": thunar["id"], "maxElements": 5000}})
                        sizes["thunar tree text"] = len(tree["results"][0]["result"]["tree"].encode())
                        sizes["thunar tree lines"] = tree["results"][0]["result"]["elements"]
                        marks = await timed("thunar: screen.marks (accessibility)",
                                            {"type": "screen.marks",
                                             "params": {"window": thunar["id"], "source": "accessibility"}})
                        sizes["thunar marks"] = len(marks["results"][0]["result"]["marks"])
                    finally:
                        await desk({"type": "window.close", "params": {"id": thunar["id"]}})

                    await timed("screen.waitStable {ms: 200}, still screen",
                                {"type": "screen.waitStable", "params": {"ms": QUIET_MS}})
                    await timed("mouse.getPosition (call overhead)", {"type": "mouse.getPosition"})
                    await timed("screen.grab (whole screen)", {"type": "screen.grab"})
                    await call("browser_execute", {"tab": "bench-native", "close": True,
                                                   "operations": [{"type": "url"}]})

    anyio.run(main)
    return figures, sizes


def _png_bytes(result) -> bytes:
    import base64

    return base64.b64decode(next(c.data for c in result.content if c.type == "image"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few runs, for a smoke test")
    runs = 3 if parser.parse_args().quick else 15
    with session_up() as info:
        figures, sizes = bench(info, runs)
    print(f"desktop_execute on native windows, medians of {runs} runs (ms)")
    for app in ("chromium", "thunar"):
        base = figures[f"{app}: window.capture (baseline)"]
        for name, value in figures.items():
            if name.startswith(app + ":"):
                print(f"  {name:45s} {value:8.1f}   {value / base:5.2f}x the capture")
    wait = figures["screen.waitStable {ms: 200}, still screen"]
    overhead = figures["mouse.getPosition (call overhead)"]
    print(f"  {'screen.waitStable {ms: 200}, still screen':45s} {wait:8.1f}   "
          f"{wait - QUIET_MS:.1f} beyond the quiet period ({wait - QUIET_MS - overhead:.1f} beyond it and "
          f"a bare call's {overhead:.1f})")
    print(f"  {'screen.grab (whole screen)':45s} {figures['screen.grab (whole screen)']:8.1f}   "
          f"(window.capture waits {CAPTURE_SETTLE_S * 1000:.0f} ms for the window to repaint off-screen)")
    print("bytes")
    for app in ("chromium", "thunar"):
        tree, png = sizes[f"{app} tree text"], sizes[f"{app} window PNG"]
        print(f"  {app}: tree {tree:,} B ({sizes[f'{app} tree lines']} lines, {sizes[f'{app} marks']} marks) "
              f"vs window PNG {png:,} B: {tree / png:.2f}x")


if __name__ == "__main__":
    main()
