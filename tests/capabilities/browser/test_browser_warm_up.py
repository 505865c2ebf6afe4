"""The browser server starts Playwright's driver when it starts, not on the first call."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil


def test_playwright_driver_starts_with_the_server(browser_desktop):
    """The first browser_execute should not wait ~1 s for Playwright's driver to start."""
    server = subprocess.Popen([sys.executable, "-m", "capabilities.browser"], env=browser_desktop.env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        drivers = []
        while not drivers and time.monotonic() < deadline:
            drivers = [p for p in psutil.Process(server.pid).children(recursive=True)
                       if "run-driver" in " ".join(p.cmdline())]
            time.sleep(0.1)
        assert drivers, "no Playwright driver started with the server"
        assert server.poll() is None
    finally:
        server.stdin.close()  # end of input: the server shuts down
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stdout.close()
