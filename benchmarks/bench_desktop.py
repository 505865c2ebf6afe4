"""Desktop session benchmarks: medians of several runs, each beside a baseline from this run.

- start: `codedesk desktop up` from nothing to the first successful DevTools
  `Target.createTarget`; baseline: a bare Xvfb plus a bare Chromium (same flags, no desktop)
  to its first `Target.createTarget`. Budget: <= 3 s.
- memory: PSS of every process of the idle session with one tab open; baseline: the same
  bare Xvfb + Chromium with one tab. Budget: <= 500 MB.
- resize: the viewer's resize request (the session's resize service, as websockify forwards
  it) to the X screen having the new size; baseline: one X round trip (get_geometry).

Usage: python benchmarks/bench_desktop.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from capabilities.session import read_session  # noqa: E402
from runtime.desktop import procs  # noqa: E402
from runtime.desktop.layout import DesktopUser, free_port  # noqa: E402
from runtime.desktop.supervisor import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.desktop", *args], cwd=REPO,
                          capture_output=True, text=True, check=True, timeout=120)


def new_data_dir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="codedesk-bench-", dir="/tmp"))
    d.chmod(0o755)
    return d


def first_create_target(devtools_url: str, deadline: float) -> None:
    while True:
        try:
            conn = procs.CdpConnection(devtools_url, timeout=2)
            try:
                target = conn.send("Target.createTarget", {"url": "about:blank"})["targetId"]
                conn.send("Target.closeTarget", {"targetId": target})
                return
            finally:
                conn.close()
        except (OSError, ValueError, RuntimeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def pss_kb(pids) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def session_pids(data: Path) -> list[int]:
    state = json.loads((data / "desktop-state.json").read_text())
    return sorted(set(procs.marked_pids(state["session_id"]))
                  | set(procs.chromium_pids(data / "chrome")))


def bench_session(runs: int) -> tuple[list[float], int, list[float], list[float]]:
    starts, resizes, round_trips = [], [], []
    memory = 0
    data = new_data_dir()
    try:
        for i in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "runtime.desktop", "up", "--data", str(data)],
                           cwd=REPO, capture_output=True, check=True, timeout=120)
            info = read_session(data)
            first_create_target(info.devtools_url, time.monotonic() + 30)
            starts.append(time.perf_counter() - t0)
            if i == 0:
                memory, resizes, round_trips = measure_idle_and_resize(data, info, runs)
            cli("down", "--data", str(data))
    finally:
        subprocess.run([sys.executable, "-m", "runtime.desktop", "down", "--data", str(data)],
                       cwd=REPO, capture_output=True, timeout=120)
        shutil.rmtree(data, ignore_errors=True)
    return starts, memory, resizes, round_trips


def measure_idle_and_resize(data: Path, info, runs: int):
    conn = procs.CdpConnection(info.devtools_url)
    conn.send("Target.createTarget", {"url": "about:blank"})  # the budget counts one tab open
    conn.close()
    time.sleep(3)  # let start-up work settle
    memory = pss_kb(session_pids(data))

    from Xlib import display as xdisplay
    os.environ["XAUTHORITY"] = info.env["XAUTHORITY"]
    d = xdisplay.Display(info.display)
    root = d.screen().root
    port = json.loads((data / "desktop-state.json").read_text())["ports"]["resize"]
    resizes, round_trips = [], []
    sizes = [(1000, 700), (1600, 1000), (800, 600), (1280, 800)] * max(1, runs)
    with socket.create_connection(("127.0.0.1", port)) as s:
        f = s.makefile("rwb")
        for w, h in sizes:
            t = time.perf_counter()
            f.write(f"{w}x{h}\n".encode())
            f.flush()
            f.readline()
            while (root.get_geometry().width, root.get_geometry().height) != (w, h):
                time.sleep(0.001)
            resizes.append(time.perf_counter() - t)
            t = time.perf_counter()
            root.get_geometry()
            round_trips.append(time.perf_counter() - t)
    d.close()
    return memory, resizes, round_trips


def bench_bare(runs: int) -> tuple[list[float], int]:
    """Xvfb + Chromium with the session's flags and nothing else, started by hand."""
    user = DesktopUser.resolve()
    times, memory = [], 0
    for i in range(runs):
        prof = new_data_dir()
        if user.switch:
            os.chown(prof, user.uid, user.gid)
        r, w = os.pipe()
        t0 = time.perf_counter()
        xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1280x800x24",
                                 "-nolisten", "tcp"], pass_fds=(w,), stderr=subprocess.DEVNULL,
                                **user.popen_kwargs())
        os.close(w)
        display = b""
        while not display.endswith(b"\n"):
            display += os.read(r, 16)
        os.close(r)
        port = free_port()
        env = {"DISPLAY": f":{display.decode().strip()}", "HOME": str(prof), "PATH": "/usr/bin:/bin"}
        chrome = subprocess.Popen([CHROMIUM, f"--user-data-dir={prof}", f"--remote-debugging-port={port}",
                                   *CHROMIUM_FLAGS, "--no-startup-window"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True, **user.popen_kwargs())
        try:
            first_create_target(f"http://127.0.0.1:{port}", time.monotonic() + 30)
            times.append(time.perf_counter() - t0)
            if i == 0:
                conn = procs.CdpConnection(f"http://127.0.0.1:{port}")
                conn.send("Target.createTarget", {"url": "about:blank"})
                conn.close()
                time.sleep(3)
                memory = pss_kb([xvfb.pid, *procs.chromium_pids(prof)])
        finally:
            procs.cdp_browser_close(f"http://127.0.0.1:{port}")
            procs.terminate(chrome, 5)
            procs.terminate(xvfb, 3)
            for pid in procs.chromium_pids(prof):
                os.kill(pid, 9)
            shutil.rmtree(prof, ignore_errors=True)
    return times, memory


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one run each (smoke)")
    args = ap.parse_args()
    runs = 1 if args.quick else 3

    bare_times, bare_mem = bench_bare(runs)
    starts, memory, resizes, round_trips = bench_session(runs)

    def ms(xs):
        return statistics.median(xs) * 1000

    print(f"load average: {os.getloadavg()[0]:.1f} (2 cores; figures are noisy when others run)")
    print(f"start: up -> first Target.createTarget  median {ms(starts):7.0f} ms"
          f"   baseline bare Xvfb+Chromium {ms(bare_times):6.0f} ms   ratio {ms(starts)/ms(bare_times):.2f}"
          f"   budget 3000 ms")
    print(f"memory: idle session, one tab, PSS     {memory/1024:7.0f} MB"
          f"   baseline bare Xvfb+Chromium {bare_mem/1024:6.0f} MB   ratio {memory/max(bare_mem,1):.2f}"
          f"   budget 500 MB")
    print(f"resize: request -> new screen size     median {ms(resizes):7.1f} ms"
          f"   baseline X round trip {ms(round_trips):6.2f} ms   (n={len(resizes)})")


if __name__ == "__main__":
    main()
