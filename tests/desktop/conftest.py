"""Helpers for the desktop session's tests: X queries through the session's env, waiting,
a Playwright instance for viewer and DevTools checks, and a private session for tests that
stop or break parts (the shared `desktop_session` must stay usable for the other areas)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from capabilities import input_lease
from capabilities.session import SessionInfo, read_session
from tests.fixtures.session import DesktopSession, make_data_dir, run_desktop_cli

CHROMIUM_TEST_FLAGS = [
    "--no-first-run", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--disable-quic", "--no-sandbox",
]


def wait_until(predicate, timeout: float = 15.0, interval: float = 0.1, what: str = "condition"):
    """Poll `predicate` until it returns a truthy value; fail the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def x_run(info: SessionInfo, *argv: str) -> str:
    """Run an X client against the session's display (as root, with the session's env)."""
    return subprocess.run(list(argv), env=info.env, capture_output=True, text=True, timeout=20).stdout


def screen_size(info: SessionInfo) -> tuple[int, int]:
    out = x_run(info, "xdpyinfo")
    dims = out.split("dimensions:")[1].split()[0]
    w, h = dims.split("x")
    return int(w), int(h)


def windows(info: SessionInfo) -> list[dict]:
    """Managed windows (EWMH client list): id, pid, class, x, y, width, height, title."""
    import os

    from Xlib import X, display as xdisplay, error as xerror

    os.environ["XAUTHORITY"] = info.env["XAUTHORITY"]
    d = xdisplay.Display(info.display)
    try:
        root = d.screen().root
        atom = d.intern_atom
        clients = root.get_full_property(atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
        found = []
        for wid in (clients.value if clients else []):
            win = d.create_resource_object("window", wid)
            try:
                pid = win.get_full_property(atom("_NET_WM_PID"), X.AnyPropertyType)
                name = win.get_full_property(atom("_NET_WM_NAME"), atom("UTF8_STRING"))
                geom = win.get_geometry()
                pos = win.translate_coords(root, 0, 0)
                found.append({
                    "id": hex(wid), "pid": int(pid.value[0]) if pid else 0,
                    "class": ".".join(win.get_wm_class() or ()),
                    "x": -pos.x, "y": -pos.y, "width": geom.width, "height": geom.height,
                    "title": name.value.decode() if name else "",
                })
            except xerror.XError:
                continue  # closed while we looked
        return found
    finally:
        d.close()


def chromium_windows(info: SessionInfo) -> list[dict]:
    return [w for w in windows(info) if w["class"].endswith(".Chromium")]


def devtools_json(info: SessionInfo, path: str = "/json/list"):
    with urllib.request.urlopen(info.devtools_url + path, timeout=5) as resp:
        return json.load(resp)


def proc_uids(pid: int) -> list[int]:
    """Real, effective, saved and filesystem uids of a process (from /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return [int(v) for v in line.split()[1:]]
    raise AssertionError(f"no Uid line for pid {pid}")


@pytest.fixture(scope="module")
def playwright():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def viewer_browser(playwright):
    """A real headless Chromium, not the session's own, to load the viewer page in."""
    browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                         args=CHROMIUM_TEST_FLAGS)
    yield browser
    browser.close()


@pytest.fixture(scope="module")
def private_session():
    """A session of this module's own, for tests that kill parts or stop and restart it.

    Started view-only, so the option is exercised too."""
    data = make_data_dir("codedesk-test-private-")
    try:
        result = run_desktop_cli("up", "--data", str(data), "--view-only", check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        yield DesktopSession(data_dir=data, info=read_session(data),
                             env={"CODEDESK_DATA": str(data)})
    finally:
        run_desktop_cli("down", "--data", str(data), check=False)
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def control_viewer(desktop_session, viewer_browser):
    """The session's viewer page in a real Chromium, connected; the screen handed back after."""
    page = viewer_browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(desktop_session.info.viewer_url)
    page.wait_for_function("window.codedesk && window.codedesk.state === 'connected'", timeout=20000)
    try:
        yield page
    finally:
        # the shared session's other tests use the screen: hand it back whatever happened here
        if page.evaluate("window.codedesk.lease") == "person" and page.locator("#handback").is_visible():
            page.click("#handback")
        page.close()
        wait_until(lambda: not input_lease.read(desktop_session.data_dir).person_holds(),
                   timeout=30, what="the input lease back with the agent")
