"""How soon a capability server is free again after a run that timed out in the middle of a call.

For each waiting step of desktop_execute (and a documents conversion), a run_js with
timeout_seconds=1 starts the step and times out in it; as soon as the run has answered, a next
run_js calls the same server (screen.width, or read_pdf). Its time is printed beside the same run
made with nothing cancelled before it (the baseline, interleaved round by round); the difference
is the time from the run's timeout to the server being free again (goal: at most 100 ms).

Starts its own desktop session (or uses --data DIR's) and `codedesk serve` over stdio. A small
window that repaints itself keeps the screen changing, so captureAfter waits out its 3 s.

    .venv/bin/python benchmarks/bench_cancellation.py [--quick] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path

import anyio
import pymupdf
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from capabilities.session import read_session  # noqa: E402

CODEDESK = str(Path(sys.executable).with_name("codedesk"))
LONG_MS = 20_000

# step name -> the desktop_execute arguments of a call that waits far past the run's timeout
DESKTOP_WAITS: dict[str, dict] = {
    "sleep": {"operations": [{"type": "sleep", "params": {"ms": LONG_MS}}]},
    "screen.waitStable": {"operations": [{"type": "screen.waitStable", "params": {"ms": LONG_MS, "timeout": 30_000}}]},
    "window.waitFor": {"operations": [{"type": "window.waitFor",
                                       "params": {"title": "no window has this title", "timeout": LONG_MS}}]},
    "accessibility.waitFor": {"operations": [{"type": "accessibility.waitFor",
                                              "params": {"name": "no element has this name", "timeout": LONG_MS}}]},
    "mouse.move (20 px/s)": {"operations": [{"type": "mouse.setPosition", "params": {"x": 10, "y": 10}},
                                            {"type": "mouse.move", "params": {"x": 410, "y": 10}}],
                             "config": {"mouseSpeed": 20}},
    "mouse.drag (20 px/s)": {"operations": [{"type": "mouse.setPosition", "params": {"x": 20, "y": 300}},
                                            {"type": "mouse.drag", "params": {"to": {"x": 420, "y": 300}}}],
                             "config": {"mouseSpeed": 20}},
    "captureAfter (screen never still)": {"operations": [{"type": "mouse.getPosition", "captureAfter": True}]},
}
NEXT_DESKTOP = "await tools.browser.desktop_execute({operations: [{type: \"screen.width\"}]});"


@contextmanager
def flicker(info):
    """A small override-redirect window on top of everything, repainted 30 times a second."""
    from Xlib import X, display as xdisplay

    if info.env.get("XAUTHORITY"):
        os.environ["XAUTHORITY"] = info.env["XAUTHORITY"]
    x = xdisplay.Display(info.display)
    screen = x.screen()
    window = screen.root.create_window(1100, 600, 120, 120, 0, screen.root_depth, X.InputOutput,
                                       X.CopyFromParent, override_redirect=True,
                                       background_pixel=screen.white_pixel)
    window.map()
    gcs = [window.create_gc(foreground=screen.black_pixel), window.create_gc(foreground=screen.white_pixel)]
    stop = threading.Event()

    def paint() -> None:
        n = 0
        while not stop.wait(1 / 30):
            window.fill_rectangle(gcs[n % 2], 0, 0, 120, 120)
            x.flush()
            n += 1

    painter = threading.Thread(target=paint, daemon=True)
    painter.start()
    try:
        yield
    finally:
        stop.set()
        painter.join()
        window.destroy()
        x.close()


async def run_js(session: ClientSession, code: str, timeout: float) -> tuple[float, object]:
    began = time.perf_counter()
    result = await session.call_tool("run_js", {"code": code, "timeout_seconds": timeout},
                                     read_timeout_seconds=timeout + 60)
    return (time.perf_counter() - began) * 1000, result


def text(result) -> str:
    return next((block.text for block in result.content if block.type == "text"), "")


async def measure(session: ClientSession, timing_out: str, following: str, rounds: int) -> tuple[float, float]:
    """Median ms of `following` right after a run of `timing_out` timed out, and of `following`
    alone (the baseline), interleaved."""
    after, alone = [], []
    for _ in range(rounds):
        _, timed_out = await run_js(session, timing_out, 1)
        if not timed_out.is_error or "timeout_seconds=1" not in text(timed_out):
            raise RuntimeError(f"the run did not time out in its call: {text(timed_out)[:300]}")
        ms, result = await run_js(session, following, 30)
        if result.is_error:
            raise RuntimeError(f"the next call failed: {text(result)[:300]}")
        after.append(ms)
        ms, result = await run_js(session, following, 30)
        alone.append(ms)
    return statistics.median(after), statistics.median(alone)


def report(name: str, after: float, alone: float) -> None:
    free = max(0.0, after - alone)
    verdict = "ok" if free <= 100 else "over the 100 ms goal"
    print(f"  {name:<42}{free:6.0f} ms   next call {after:7.0f} ms   baseline {alone:7.0f} ms   "
          f"ratio {after / alone:5.2f}   {verdict}")


def big_csv(path: Path, rows: int = 60_000) -> None:
    with path.open("w", encoding="utf-8") as out:
        for row in range(rows):
            out.write(f"{row},name {row},{row * 3.5},lorem ipsum dolor sit amet,{row % 7},{'x' * 20}\n")
    path.chmod(0o644)


async def bench(data: Path, rounds: int) -> None:
    env = {**os.environ, "CODEDESK_DATA": str(data)}
    env.pop("CODEDESK_CONFIG", None)
    info = read_session(data)
    scratch = Path(tempfile.mkdtemp(prefix="bench-cancel-", dir=data))
    scratch.chmod(0o755)
    try:
        source = scratch / "big.csv"
        big_csv(source)
        small = scratch / "small.pdf"
        doc = pymupdf.open()
        doc.new_page().insert_text((72, 72), "one page")
        doc.save(small)
        doc.close()
        small.chmod(0o644)
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(
                stdio_client(StdioServerParameters(command=CODEDESK, args=["serve"], env=env)))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            for warm in (NEXT_DESKTOP, f"await tools.documents.read_pdf({{path: {json.dumps(str(small))}}});"):
                _, result = await run_js(session, warm, 60)  # servers started and connected
                if result.is_error:
                    raise RuntimeError(text(result)[:300])

            print(f"load average: {os.getloadavg()[0]:.1f} (2 cores; noisy when others run)")
            print(f"From a run's timeout (timeout_seconds=1, in the step) to its server free again: the next"
                  f" call's time minus the baseline's\n(medians of {rounds}; goal <= 100 ms)")
            with flicker(info):
                for name, args in DESKTOP_WAITS.items():
                    timing_out = f"await tools.browser.desktop_execute({json.dumps(args)});"
                    report(name, *await measure(session, timing_out, NEXT_DESKTOP, rounds))
            converting = f"await tools.documents.convert_document({{path: {json.dumps(str(source))}, to: \"pdf\"}});"
            reading = f"await tools.documents.read_pdf({{path: {json.dumps(str(small))}}});"
            report("documents convert_document (LibreOffice)", *await measure(session, converting, reading, rounds))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one round of each step (a smoke run)")
    parser.add_argument("--data", type=Path, help="data dir of a running session (default: start one)")
    args = parser.parse_args()
    rounds = 1 if args.quick else 5
    if args.data is not None:
        anyio.run(bench, args.data, rounds)
        return
    data = Path(tempfile.mkdtemp(prefix="bench-cancellation-", dir="/tmp"))
    data.chmod(0o755)  # the desktop user must reach it
    try:
        subprocess.run([sys.executable, "-m", "runtime.desktop", "up", "--data", str(data)], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL)
        anyio.run(bench, data, rounds)
    finally:
        subprocess.run([sys.executable, "-m", "runtime.desktop", "down", "--data", str(data)], cwd=REPO, check=False,
                       stdout=subprocess.DEVNULL)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
