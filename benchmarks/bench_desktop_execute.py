"""desktop_execute speed: screen.grab to PNG, a 100-step input batch, overhead over direct calls.

Runs against the desktop session (`$CODEDESK_DATA` or the default data dir) when one is up;
otherwise starts its own Xvfb 1280x800 showing a document-like picture (screens are text and
flat colour; a blank screen would flatter the PNG encoder).

Prints medians, each beside a baseline measured in the same run:
- screen.grab of 1280x800 to PNG: the raw mss grab, Pillow's PNG encoder (compress_level=1)
  on the same pixels, our grab+encode, and a whole desktop_execute [screen.grab] over stdio
  next to a bare desktop_execute [mouse.getPosition] call.
- a 100-step mouse/keyboard batch with zero delays, in process and over stdio, against the
  same pynput calls (and raw XTEST calls) made directly.

    .venv/bin/python benchmarks/bench_desktop_execute.py [--quick]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import anyio  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402

from capabilities.session import SessionInfo, SessionNotFound, read_session, write_session  # noqa: E402

WIDTH, HEIGHT = 1280, 800


def median_ms(fn, runs: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def document_picture() -> Image.Image:
    """Something like a desktop: a title bar, a panel, blocks of text, a few coloured boxes."""
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, WIDTH, 40), fill="#dfe6f3")
    draw.rectangle((0, HEIGHT - 32, WIDTH, HEIGHT), fill="#2b2b2b")
    words = "the quick brown fox jumps over the lazy dog 0123456789 desktop execute".split()
    for row, y in enumerate(range(60, HEIGHT - 60, 18)):
        line = " ".join(words[(row + i) % len(words)] for i in range(14))
        draw.text((20 + (row % 3) * 4, y), line, fill="#202020")
    for i, colour in enumerate(("#ff8000", "#3070c0", "#40a040", "#c03030")):
        draw.rectangle((900, 80 + i * 150, 1220, 200 + i * 150), fill=colour)
    return image


@contextmanager
def own_display():
    """Xvfb on a free display showing `document_picture()`, and a session.json for it."""
    read_fd, write_fd = os.pipe()
    xvfb = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{WIDTH}x{HEIGHT}x24",
         "-nolisten", "tcp", "-noreset"],
        pass_fds=[write_fd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        display = ":" + f.readline().strip()
    try:
        from Xlib import X, display as xdisplay

        x = xdisplay.Display(display)
        root = x.screen().root
        gc = root.create_gc()
        picture = document_picture()
        raw = picture.tobytes("raw", "BGRX")
        strip = 32  # rows per PutImage request: its length must fit 16 bits of 4-byte units
        for top in range(0, HEIGHT, strip):
            rows = min(strip, HEIGHT - top)
            root.put_image(gc, 0, top, WIDTH, rows, X.ZPixmap, 24, 0,
                           raw[top * WIDTH * 4:(top + rows) * WIDTH * 4])
        x.sync()
        with tempfile.TemporaryDirectory(prefix="bench-desktop-") as data:
            write_session(SessionInfo(
                data_dir=Path(data), display=display, env={"DISPLAY": display},
                devtools_url="", chromium_command=[], user="root", uid=0, gid=0, home=Path.home()))
            os.environ["CODEDESK_DATA"] = data
            try:
                yield read_session()
            finally:
                x.close()
    finally:
        xvfb.terminate()
        xvfb.wait()


def batch_steps() -> list[dict]:
    """100 steps: 50 pointer moves and 25 Shift press/release pairs (harmless anywhere)."""
    steps: list[dict] = []
    for i in range(25):
        steps.append({"type": "mouse.setPosition", "params": {"x": 100 + i * 10, "y": 200}})
        steps.append({"type": "keyboard.pressKey", "params": {"keys": ["LeftShift"]}})
        steps.append({"type": "mouse.setPosition", "params": {"x": 100 + i * 10, "y": 300}})
        steps.append({"type": "keyboard.releaseKey", "params": {"keys": ["LeftShift"]}})
    return steps


ZERO_DELAYS = {"keyboardDelayMs": 0, "mouseDelayMs": 0}


def bench_in_process(session: SessionInfo, runs: int) -> dict[str, float]:
    import mss

    from capabilities.browser.desktop_display import DisplayConnection
    from capabilities.browser.desktop_ops import DesktopRequest
    from capabilities.browser.desktop_tool import DesktopController

    figures: dict[str, float] = {}
    with mss.MSS(display=session.display) as screen:
        region = {"left": 0, "top": 0, "width": WIDTH, "height": HEIGHT}
        figures["raw mss grab"] = median_ms(lambda: screen.grab(region), runs)
        shot = screen.grab(region)

        def pillow_png() -> bytes:
            picture = Image.frombuffer("RGB", (WIDTH, HEIGHT), shot.raw, "raw", "BGRX", 0, 1)
            out = io.BytesIO()
            picture.save(out, "PNG", compress_level=1)
            return out.getvalue()

        figures["mss grab + Pillow PNG (compress_level=1)"] = (
            figures["raw mss grab"] + median_ms(pillow_png, runs))

    connection = DisplayConnection(session)
    try:
        grab_times = []
        for _ in range(runs):
            began = time.perf_counter()
            connection.grab(0, 0, WIDTH, HEIGHT)
            grab_times.append((time.perf_counter() - began) * 1000)
        figures["our grab to PNG (p50)"] = statistics.median(grab_times)
        figures["png bytes (KB)"] = len(connection.grab(0, 0, WIDTH, HEIGHT).png) / 1024
    finally:
        connection.close()

    controller = DesktopController()
    try:
        steps = batch_steps()

        def batch():  # validated each time, as the server does
            return controller.execute_sync(DesktopRequest.model_validate({"operations": steps, "config": ZERO_DELAYS}))

        result = batch()
        assert not result.is_error, result.content[0].text
        # Interleaved, so the machine's load weighs on each the same.
        figures.update(interleaved({
            "100-step batch, in process": batch,
            "100 steps, raw XTEST direct": lambda: raw_xtest_batch(session),
            "100 steps, pynput direct": pynput_batch(session),
        }, max(5, runs // 2)))
    finally:
        controller.close()
    return figures


def interleaved(variants: dict, rounds: int) -> dict[str, float]:
    """Median ms of each variant, run in turn round after round."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(rounds + 1):
        for name, fn in variants.items():
            began = time.perf_counter()
            fn()
            if round_:  # the first round warms up
                times[name].append((time.perf_counter() - began) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


_XTEST = {}


def raw_xtest_batch(session: SessionInfo) -> None:
    """The batch as bare python-xlib XTEST calls, each flushed like ours."""
    from Xlib import X, display as xdisplay
    from Xlib.ext import xtest

    if "x" not in _XTEST:
        _XTEST["x"] = xdisplay.Display(session.display)
        _XTEST["shift"] = _XTEST["x"].keysym_to_keycode(0xFFE1)
    x, shift = _XTEST["x"], _XTEST["shift"]
    for i in range(25):
        xtest.fake_input(x, X.MotionNotify, x=100 + i * 10, y=200)
        x.sync()
        xtest.fake_input(x, X.KeyPress, shift)
        x.sync()
        xtest.fake_input(x, X.MotionNotify, x=100 + i * 10, y=300)
        x.sync()
        xtest.fake_input(x, X.KeyRelease, shift)
        x.sync()


def pynput_batch(session: SessionInfo):
    os.environ["DISPLAY"] = session.display  # pynput reads it at import
    from pynput import keyboard, mouse

    pointer, keys = mouse.Controller(), keyboard.Controller()

    def run() -> None:
        for i in range(25):
            pointer.position = (100 + i * 10, 200)
            keys.press(keyboard.Key.shift)
            pointer.position = (100 + i * 10, 300)
            keys.release(keyboard.Key.shift)

    return run


def bench_over_stdio(session: SessionInfo, runs: int) -> dict[str, float]:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    figures: dict[str, float] = {}

    async def main() -> None:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "capabilities.browser"], cwd=str(REPO),
            env={**os.environ, "CODEDESK_DATA": str(session.data_dir)})
        with open(os.devnull, "w") as devnull:
            async with stdio_client(params, errlog=devnull) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()

                    async def timed(operations: list[dict], n: int) -> float:
                        args = {"operations": operations, "config": ZERO_DELAYS}
                        for _ in range(2):
                            await client.call_tool("desktop_execute", args)
                        times = []
                        for _ in range(n):
                            began = time.perf_counter()
                            result = await client.call_tool("desktop_execute", args)
                            times.append((time.perf_counter() - began) * 1000)
                            assert not result.is_error, result.content[0].text
                        return statistics.median(times)

                    figures["desktop_execute [mouse.getPosition] over stdio"] = await timed(
                        [{"type": "mouse.getPosition"}], runs)
                    figures["desktop_execute [screen.grab] over stdio"] = await timed(
                        [{"type": "screen.grab"}], runs)
                    figures["desktop_execute 100-step batch over stdio"] = await timed(
                        batch_steps(), max(3, runs // 4))

    anyio.run(main)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few runs, for a smoke test")
    args = parser.parse_args()
    runs = 5 if args.quick else 40

    with ExitStack() as stack:
        try:
            session = read_session()
            where = f"the desktop session on {session.display}"
        except SessionNotFound:
            session = stack.enter_context(own_display())
            where = f"an own Xvfb on {session.display}"
        global WIDTH, HEIGHT
        from capabilities.browser.desktop_display import DisplayConnection

        probe = DisplayConnection(session)
        WIDTH, HEIGHT = probe.screen_size()
        probe.close()
        print(f"desktop_execute benchmark on {where}, screen {WIDTH}x{HEIGHT}, {runs} runs")

        figures = bench_in_process(session, runs)
        figures.update(bench_over_stdio(session, runs))

    for name, value in figures.items():
        print(f"  {name:52s} {value:8.2f}" + ("" if "KB" in name else " ms"))
    raw_png = figures["mss grab + Pillow PNG (compress_level=1)"]
    ours = figures["our grab to PNG (p50)"]
    print(f"  screen.grab to PNG: ours {ours:.2f} ms (target <= 20), "
          f"{raw_png / ours:.1f}x faster than mss + Pillow")
    direct = figures["100 steps, pynput direct"]
    print(f"  100-step batch: in process {figures['100-step batch, in process'] / direct:.2f}x "
          f"pynput direct; over stdio {figures['desktop_execute 100-step batch over stdio'] / direct:.2f}x "
          f"(raw XTEST direct {figures['100 steps, raw XTEST direct'] / direct:.2f}x)")
    bare = figures["desktop_execute [mouse.getPosition] over stdio"]
    grab = figures["desktop_execute [screen.grab] over stdio"]
    print(f"  screen.grab over stdio adds {grab - bare:.2f} ms to a bare call ({bare:.2f} ms)")


if __name__ == "__main__":
    main()
