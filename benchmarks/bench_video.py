"""Screen video's cost: the CPU share of the recorder (ffmpeg, x11grab, H.264 ultrafast, 10 frames a
second) at 1280x800, on a still screen and on one that changes all the time, and the bytes a
minute it writes.

Runs on its own Xvfb 1280x800 showing a document-like picture (`bench_desktop_execute`'s); the
"moving" case repaints a band of it every frame, from this process, which is measured apart. The
baseline beside it is one core (a share of 1.0 = one core busy).

    .venv/bin/python benchmarks/bench_video.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_desktop_execute import HEIGHT, WIDTH, own_display  # noqa: E402

from runtime.desktop.layout import DesktopUser  # noqa: E402
from runtime.desktop.video import VideoRecorder, segments  # noqa: E402


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def record(display: str, seconds: float, moving: bool) -> tuple[float, float]:
    """(CPU share of ffmpeg, bytes written a minute) over `seconds` of recording."""
    from Xlib import X, display as xdisplay

    me = DesktopUser("self", os.geteuid(), os.getegid(), switch=False)
    with tempfile.TemporaryDirectory(prefix="bench-video-") as folder:
        recorder = VideoRecorder(Path(folder), display, me, {"DISPLAY": display, "PATH": "/usr/bin:/bin"},
                                 Path(folder) / "ffmpeg.log", lambda: (WIDTH, HEIGHT))
        stop = threading.Event()

        def paint() -> None:  # a band of changing colour, ten times a second
            x = xdisplay.Display(display)
            root = x.screen().root
            gc = root.create_gc()
            shade = 0
            while not stop.is_set():
                shade = (shade + 37) % 0xFFFFFF
                gc.change(foreground=shade)
                root.fill_rectangle(gc, 0, (shade % 600), WIDTH, 200)
                x.sync()
                time.sleep(0.1)
            x.close()

        painter = threading.Thread(target=paint) if moving else None
        recorder.start("operator", segment_seconds=600)
        if painter:
            painter.start()
        time.sleep(1.0)  # past ffmpeg's own start
        proc = recorder._proc
        assert proc is not None and proc.poll() is None, (Path(folder) / "ffmpeg.log").read_text()
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
        stop.set()
        if painter:
            painter.join()
        recorder.stop("operator")
        written = sum(size for _, size, _ in segments(Path(folder)))
        return (cpu1 - cpu0) / (t1 - t0), written / (t1 - t0 + 1.0) * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 s of recording each instead of 30 s")
    args = parser.parse_args()
    seconds = 5.0 if args.quick else 30.0
    with own_display() as session:
        for moving in (False, True):
            share, per_minute = record(session.display, seconds, moving)
            print(f"screen video {WIDTH}x{HEIGHT}, {'changing' if moving else 'still'} screen, {seconds:g} s: "
                  f"ffmpeg CPU {share:.3f} of one core (baseline 1.000), {per_minute / 1048576:.2f} MiB a minute")


if __name__ == "__main__":
    main()
