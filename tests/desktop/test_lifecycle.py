"""The session's lifecycle on a private session: nothing opens at start, crashed parts come
back, `down` leaves nothing behind, `down` + `up` keeps the browser profile, bad input."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.desktop import procs
from tests.desktop.conftest import chromium_windows, screen_size, wait_until, windows
from tests.fixtures.session import REPO, make_data_dir, run_desktop_cli

pytestmark = pytest.mark.desktop


def status_of(session) -> dict:
    return json.loads(session.desktop_cli("status", check=False).stdout)


def test_no_chromium_window_after_up_but_devtools_is_ready(private_session):
    """The session starts with an empty desktop and the browser ready in the background."""
    info = private_session.info
    assert chromium_windows(info) == []
    assert status_of(private_session)["parts"]["chromium"]["running"]
    from tests.desktop.conftest import devtools_json
    assert "webSocketDebuggerUrl" in devtools_json(info, "/json/version")


def test_screen_starts_at_1280x800(private_session):
    """The spec's starting size; scripts aim at pixels."""
    assert screen_size(private_session.info) == (1280, 800)


def test_another_session_picks_its_own_display_and_ports(private_session, desktop_session):
    """Busy displays and ports are detected: a second session never collides with the first."""
    a, b = desktop_session.info, private_session.info
    assert a.display != b.display
    assert a.devtools_url != b.devtools_url
    assert a.viewer_url.split("/viewer")[0] != b.viewer_url.split("/viewer")[0]


def test_view_only_session_runs_its_vnc_server_view_only(private_session):
    """`up --view-only` lets people watch without touching the mouse and keyboard."""
    assert private_session.info.extra["view_only"] is True
    pid = status_of(private_session)["parts"]["x11vnc"]["pid"]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"-viewonly" in argv


def _kill_part_and_wait(session, name: str) -> tuple[int, int]:
    old = status_of(session)["parts"][name]["pid"]
    os.kill(old, signal.SIGKILL)

    def restarted():
        part = status_of(session)["parts"][name]
        return part["running"] and part["pid"] != old and part["pid"]

    new = wait_until(restarted, timeout=20, what=f"{name} restarted")
    return old, new


def test_killed_x11vnc_is_restarted_and_the_viewer_reconnects(private_session, viewer_browser):
    """The viewer must come back on its own after its VNC server dies."""
    page = viewer_browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(private_session.info.viewer_url)
        page.wait_for_function("window.codedesk.state === 'connected'", timeout=20000)
        _kill_part_and_wait(private_session, "x11vnc")
        path = status_of(private_session)["vnc_socket"]

        def greets():
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(2)
                s.connect(path)
                return s.recv(12).startswith(b"RFB ")

        wait_until(lambda: _try(greets), what="x11vnc answering again")
        page.wait_for_function(
            "window.codedesk.connects >= 2 && window.codedesk.state === 'connected'", timeout=20000)
    finally:
        page.close()


def _try(fn):
    try:
        return fn()
    except OSError:
        return False


def test_killed_xvfb_is_restarted_with_the_desktop(private_session):
    """A crashed X server brings back the display, same number, with its panel."""
    info = private_session.info
    _kill_part_and_wait(private_session, "xvfb")
    wait_until(lambda: _try(lambda: screen_size(info)) == (1280, 800), timeout=20,
               what="the display answering at 1280x800")
    wait_until(lambda: any(w["class"].startswith("xfce4-panel") for w in windows(info)),
               timeout=20, what="the panel back on the restarted display")
    # The parts come back one after another: the viewer's may still be starting.
    parts = ("xfwm4", "xfce4-panel", "x11vnc")
    wait_until(lambda: all(status_of(private_session)["parts"][name]["running"] for name in parts),
               timeout=20, what="the window manager, the panel and the viewer's VNC server running")


def test_up_after_the_supervisor_was_killed_replaces_what_it_left(private_session):
    """A killed supervisor must not leave a second desktop fighting over the profile."""
    old = status_of(private_session)
    old_xvfb = old["parts"]["xvfb"]["pid"]
    os.kill(old["supervisor_pid"], signal.SIGKILL)
    wait_until(lambda: not procs.pid_alive(old["supervisor_pid"]), what="the supervisor gone")
    private_session.desktop_cli("up")
    info = private_session.reload()
    new = status_of(private_session)
    assert new["running"] and new["supervisor_pid"] != old["supervisor_pid"]
    assert not procs.pid_alive(old_xvfb)
    assert len(procs.chromium_pids(info.chrome_profile, main_only=True)) == 1
    assert _devtools_up(info)


def test_down_then_up_keeps_a_cookie_and_leaves_no_x_lock(private_session, pages_server, playwright):
    """Sleep and resume: the Chromium profile (cookies) survives `down` + `up`."""
    info = private_session.info
    restarted = None
    if not _try(lambda: _devtools_up(info)):
        # the Xvfb test above took Chromium down with the display; start it as a capability would
        restarted = subprocess.Popen(
            info.chromium_command, env=info.env, user=info.uid, group=info.gid, extra_groups=[],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_until(lambda: _try(lambda: _devtools_up(info)), timeout=30, what="Chromium restarted")
    url = pages_server.url("/echo?cookie")
    browser = playwright.chromium.connect_over_cdp(info.devtools_url)
    browser.contexts[0].add_cookies([{"name": "codedesk_sleep", "value": "kept", "url": url,
                                      "expires": 4102444800}])
    browser.close()

    display = int(info.display[1:])
    private_session.desktop_cli("down")
    if restarted is not None:
        assert restarted.wait(10) is not None  # `down` stopped the Chromium it did not start
    assert not Path(f"/tmp/.X{display}-lock").exists()
    assert not Path(f"/tmp/.X11-unix/X{display}").exists()
    assert procs.marked_pids(info.extra["session_id"]) == []
    assert procs.chromium_pids(info.chrome_profile) == []
    assert status_of(private_session)["running"] is False

    private_session.desktop_cli("up")
    info = private_session.reload()
    browser = playwright.chromium.connect_over_cdp(info.devtools_url)
    cookies = browser.contexts[0].cookies([url])
    browser.close()
    assert {"name": "codedesk_sleep", "value": "kept"} in [
        {"name": c["name"], "value": c["value"]} for c in cookies]


def _devtools_up(info) -> bool:
    from tests.desktop.conftest import devtools_json
    return "Browser" in devtools_json(info, "/json/version")


def test_up_on_a_machine_missing_packages_names_them_and_how_to_install(tmp_path):
    """Bad setup is answered with what is missing and the command that installs it."""
    empty = tmp_path / "bin"
    empty.mkdir()
    data = make_data_dir()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "runtime.desktop", "up", "--data", str(data)],
            cwd=REPO, capture_output=True, text=True, timeout=60,
            env={**os.environ, "PATH": str(empty)},
        )
        assert result.returncode == 1
        assert "xvfb" in result.stderr and "chromium" in result.stderr
        assert "make install" in result.stderr and "install-system.sh" in result.stderr
        assert not (data / "session.json").exists()
    finally:
        subprocess.run(["rm", "-rf", str(data)])


def test_busy_viewer_port_is_refused_with_a_clear_error():
    """An explicitly requested port that is taken is reported, not silently replaced."""
    data = make_data_dir()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        try:
            result = run_desktop_cli("up", "--data", str(data), "--viewer-host", "127.0.0.1",
                                     "--viewer-port", str(port), check=False)
            assert result.returncode == 1
            assert f"viewer port {port}" in result.stderr and "busy" in result.stderr
            assert not (data / "session.json").exists()
        finally:
            run_desktop_cli("down", "--data", str(data), check=False)
            subprocess.run(["rm", "-rf", str(data)])


def test_data_dir_the_desktop_user_cannot_reach_is_refused():
    """Root's 0700 dirs are unreachable for the desktop user; say so instead of half-starting."""
    if os.geteuid() != 0:
        pytest.skip("only root switches to the desktop user")
    import tempfile
    closed = Path(tempfile.mkdtemp(prefix="codedesk-test-closed-"))  # 0700, root's
    try:
        result = run_desktop_cli("up", "--data", str(closed / "data"), check=False)
        assert result.returncode == 1
        assert "cannot reach the data directory" in result.stderr
    finally:
        run_desktop_cli("down", "--data", str(closed / "data"), check=False)
        subprocess.run(["rm", "-rf", str(closed)])
