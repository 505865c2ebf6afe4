"""The desktop session against the acceptance list: panel, launchers, xdg-open, DevTools on
loopback, viewer with and without its secret, the screen following the viewer, users."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest

from runtime.desktop import procs
from tests.desktop.conftest import (
    chromium_windows, devtools_json, proc_uids, screen_size, wait_until, windows, x_run,
)

pytestmark = pytest.mark.desktop


def run_as_desktop_user(info, *argv: str) -> subprocess.Popen:
    """Start a program as the session's desktop user with the session's env, like a launcher."""
    kwargs = {"user": info.uid, "group": info.gid, "extra_groups": []} if info.uid != 0 else {}
    return subprocess.Popen(list(argv), env=info.env, cwd=info.home, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, **kwargs)


def panel_plugins(info) -> dict[str, str]:
    """xfconf's view of the panel: property path -> value, read as the desktop user."""
    out = subprocess.run(
        ["xfconf-query", "-c", "xfce4-panel", "-l", "-v"], env=info.env, capture_output=True,
        text=True, timeout=20, user=info.uid, group=info.gid, extra_groups=[],
    ).stdout
    props = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        props[key] = value.strip()
    return props


def test_panel_along_the_bottom_with_menu_launchers_and_window_buttons(desktop_session):
    """The person watching needs a panel: menu, the five launchers and the open windows."""
    info = desktop_session.info
    props = panel_plugins(info)
    kinds = {v for k, v in props.items() if k.startswith("/plugins/plugin-") and k.count("/") == 2}
    assert {"applicationsmenu", "launcher", "tasklist"} <= kinds
    launcher_dir = info.home / ".config" / "xfce4" / "panel"
    launchers = sorted(p.name for p in launcher_dir.glob("launcher-*/*.desktop"))
    assert launchers == sorted([
        "codedesk-browser.desktop", "xfce4-terminal.desktop", "thunar.desktop",
        "org.xfce.mousepad.desktop", "org.xfce.ristretto.desktop",
    ])
    panel = [w for w in windows(info) if w["class"].startswith("xfce4-panel")]
    assert panel, "no panel window on the display"
    width, height = screen_size(info)
    bar = max(panel, key=lambda w: w["width"])
    assert bar["width"] == width and bar["y"] + bar["height"] == height


def test_browser_launcher_runs_the_session_wrapper(desktop_session):
    """The panel's browser launcher must open Chromium in the session's profile, not a new one."""
    info = desktop_session.info
    entry = (info.home / ".config/xfce4/panel/launcher-3/codedesk-browser.desktop").read_text()
    wrapper = Path(info.extra["browser_wrapper"])
    assert f"Exec={wrapper} %U" in entry
    script = wrapper.read_text()
    assert f"--user-data-dir={info.chrome_profile}" in script
    assert f"--remote-debugging-port={info.devtools_url.rsplit(':', 1)[1]}" in script


def test_browser_launcher_opens_a_window_of_the_session_chromium(desktop_session):
    """The panel's browser opens a window of the same Chromium the agent drives (DevTools)."""
    info = desktop_session.info
    entry = info.home / ".config/xfce4/panel/launcher-3/codedesk-browser.desktop"
    before_targets = {t["id"] for t in devtools_json(info) if t["type"] == "page"}
    before_windows = {w["id"] for w in chromium_windows(info)}
    subprocess.run(["gio", "launch", str(entry)], env=info.env, timeout=30, check=True,
                   user=info.uid, group=info.gid, extra_groups=[], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    new = wait_until(lambda: [t for t in devtools_json(info)
                              if t["type"] == "page" and t["id"] not in before_targets],
                     timeout=30, what="a new page in the session's DevTools")
    wait_until(lambda: [w for w in chromium_windows(info) if w["id"] not in before_windows],
               what="a new Chromium window")
    for target in new:
        with urllib.request.urlopen(f"{info.devtools_url}/json/close/{target['id']}", timeout=5):
            pass


def test_terminal_launcher_opens_a_window_owned_by_the_desktop_user(desktop_session):
    """Programs started from the desktop run as the unprivileged user, never as root."""
    info = desktop_session.info
    entry = info.home / ".config/xfce4/panel/launcher-4/xfce4-terminal.desktop"
    before = {w["id"] for w in windows(info)}
    launcher = subprocess.run(
        ["gio", "launch", str(entry)], env=info.env, timeout=20,
        user=info.uid, group=info.gid, extra_groups=[], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    assert launcher.returncode == 0
    new = wait_until(lambda: [w for w in windows(info) if w["id"] not in before
                              and "terminal" in w["class"].lower()], what="a terminal window")
    try:
        pid = new[0]["pid"]
        assert pid > 0
        assert set(proc_uids(pid)) == {info.uid}
    finally:
        for w in new:
            x_run(info, "wmctrl", "-i", "-c", w["id"])
        wait_until(lambda: not any(w["id"] == new[0]["id"] for w in windows(info)),
                   what="the terminal window to close")


def test_xdg_open_of_a_link_opens_it_in_the_session_chromium(desktop_session, pages_server):
    """A link opened from any program must land in the same Chromium the agent drives."""
    info = desktop_session.info
    url = pages_server.url(f"/echo?xdg={uuid.uuid4().hex[:8]}")
    proc = run_as_desktop_user(info, "xdg-open", url)
    assert proc.wait(30) == 0

    def target():
        return [t for t in devtools_json(info) if t["type"] == "page" and t["url"] == url]

    found = wait_until(target, timeout=30, what=f"{url} in the session's DevTools targets")
    with urllib.request.urlopen(f"{info.devtools_url}/json/close/{found[0]['id']}", timeout=5):
        pass


def test_devtools_answers_on_loopback_and_no_other_address(desktop_session):
    """DevTools has no authentication: it must never be reachable from outside the machine."""
    info = desktop_session.info
    port = int(info.devtools_url.rsplit(":", 1)[1])
    assert info.devtools_url.startswith("http://127.0.0.1:")
    assert "Browser" in devtools_json(info, "/json/version")
    listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                               text=True).stdout.split("\n")
    addrs = {line.split()[3].rsplit(":", 1)[0] for line in listening if line.strip()}
    assert addrs == {"127.0.0.1"}
    others = [a for a in _local_addresses() if not a.startswith("127.")]
    for addr in others:
        with socket.socket() as s:
            s.settimeout(2)
            assert s.connect_ex((addr, port)) != 0, f"DevTools answered on {addr}"


def _local_addresses() -> list[str]:
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines()]


def test_a_new_browser_window_opens_maximised(desktop_session, playwright):
    """The spec says Chromium's window opens maximised; a small window hides the page."""
    info = desktop_session.info
    browser = playwright.chromium.connect_over_cdp(info.devtools_url)
    before = {w["id"] for w in chromium_windows(info)}
    # A window of its own: other tests may have left one open, where a plain new page
    # would become a tab.
    cdp = browser.new_browser_cdp_session()
    target = cdp.send("Target.createTarget", {"url": "about:blank", "newWindow": True})
    try:
        new = wait_until(lambda: [w for w in chromium_windows(info) if w["id"] not in before],
                         what="a Chromium window")
        state = wait_until(lambda: "MAXIMIZED_HORZ" in (s := x_run(
            info, "xprop", "-id", new[0]["id"], "_NET_WM_STATE")) and s, what="maximised state")
        assert "_NET_WM_STATE_MAXIMIZED_VERT" in state
    finally:
        cdp.send("Target.closeTarget", {"targetId": target["targetId"]})
        browser.close()


def test_viewer_with_the_secret_connects_and_draws_the_desktop(desktop_session, viewer_browser):
    """People watch through the viewer: with the secret it must show the real screen."""
    from PIL import Image

    page = viewer_browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(desktop_session.info.viewer_url)
        page.wait_for_function("window.codedesk && window.codedesk.state === 'connected'",
                               timeout=20000)
        canvas = page.locator("#screen canvas")

        def drawn():
            img = Image.open(io.BytesIO(canvas.screenshot())).convert("RGB")
            colors = img.getcolors(1 << 24)
            return len(colors) > 10 and img  # a blank canvas has one colour

        img = wait_until(drawn, timeout=15, what="the desktop drawn on the viewer's canvas")
        assert img.size[0] > 300 and img.size[1] > 200
    finally:
        page.close()


@pytest.mark.parametrize("token", [None, "wrong-secret"])
def test_viewer_without_the_secret_is_refused(desktop_session, viewer_browser, token):
    """Nothing may reach the screen without the session's secret."""
    base = desktop_session.info.viewer_url.split("?")[0]
    page = viewer_browser.new_page()
    try:
        page.goto(base if token is None else f"{base}?token={token}")
        page.wait_for_function("window.codedesk && window.codedesk.state !== 'connecting'",
                               timeout=20000)
        assert page.evaluate("window.codedesk.state") == "refused"
        assert page.evaluate("window.codedesk.screen") is None
    finally:
        page.close()


def test_screen_follows_the_viewer_window_and_clamps(desktop_session, viewer_browser):
    """The X screen must take the viewer's size within 320x200..2560x1600, viewer connected."""
    info = desktop_session.info
    page = viewer_browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(info.viewer_url)
        page.wait_for_function("window.codedesk && window.codedesk.state === 'connected'",
                               timeout=20000)
        for asked, expected in [((1000, 700), (1000, 700)), ((200, 100), (320, 200)),
                                ((4000, 3000), (2560, 1600))]:
            page.set_viewport_size({"width": asked[0], "height": asked[1]})
            wait_until(lambda: screen_size(info) == expected, timeout=10,
                       what=f"screen {expected} after viewer {asked}")
            # the viewer's canvas follows the new framebuffer, and it is still connected
            page.wait_for_function(
                f"(c => c && c.width === {expected[0]} && c.height === {expected[1]})"
                "(document.querySelector('#screen canvas'))", timeout=10000)
            assert page.evaluate("window.codedesk.state") == "connected"
    finally:
        page.set_viewport_size({"width": 1280, "height": 800})
        wait_until(lambda: screen_size(info) == (1280, 800), what="screen back to 1280x800")
        page.close()


def test_no_desktop_process_runs_as_root(desktop_session):
    """Every desktop process runs as the unprivileged desktop user (spec: never root)."""
    info = desktop_session.info
    pids = procs.marked_pids(info.extra["session_id"]) + procs.chromium_pids(info.chrome_profile)
    status = json.loads(desktop_session.desktop_cli("status").stdout)
    part_pids = {p["pid"] for p in status["parts"].values() if p["running"]}
    assert part_pids and part_pids <= set(pids)
    assert info.uid != 0
    for pid in pids:
        try:
            uids = proc_uids(pid)
        except FileNotFoundError:
            continue  # exited meanwhile
        assert 0 not in uids, f"pid {pid} ({Path(f'/proc/{pid}/comm').read_text().strip()}) runs as root"


def test_the_viewer_runs_as_its_own_user_out_of_the_desktop_users_reach(desktop_session):
    """x11vnc and websockify hold the viewer's secret: not the desktop user, not root (when root)."""
    status = json.loads(desktop_session.desktop_cli("status").stdout)
    desktop_uid = desktop_session.info.uid
    for name in ("x11vnc", "websockify"):
        uids = proc_uids(status["parts"][name]["pid"])
        assert 0 not in uids, f"{name} runs as root"
        if os.geteuid() == 0:
            assert desktop_uid not in uids, f"{name} runs as the desktop user"
    socket_dir = Path(status["vnc_socket"]).parent
    assert socket_dir.stat().st_mode & 0o077 == 0, "x11vnc's socket folder is private to the viewer"


def test_status_reports_each_part_pid_ports_and_screen(desktop_session):
    """`status` is how people and scripts see what runs where."""
    status = json.loads(desktop_session.desktop_cli("status").stdout)
    assert status["running"] is True
    assert status["display"] == desktop_session.info.display
    assert set(status["parts"]) == {"xvfb", "dbus", "xfsettingsd", "xfwm4", "xfce4-panel",
                                    "xfdesktop", "chromium", "x11vnc", "websockify"}
    for name, part in status["parts"].items():
        if name != "chromium":
            assert part["running"] and part["pid"] > 0, name
    assert {"devtools", "viewer"} <= set(status["ports"])
    assert "vnc" not in status["ports"], "x11vnc listens on no TCP port, only on its private socket"
    assert status["vnc_socket"].endswith("/vnc.sock")
    assert status["screen"] == dict(zip(("width", "height"), screen_size(desktop_session.info)))


def test_second_up_reports_the_running_session_instead_of_starting_another(desktop_session):
    """`up` is idempotent: a second one must not start a second desktop on the same data."""
    before = json.loads(desktop_session.desktop_cli("status").stdout)
    result = desktop_session.desktop_cli("up", "--json")
    facts = json.loads(result.stdout)
    assert facts["already_running"] is True
    assert facts["display"] == desktop_session.info.display
    after = json.loads(desktop_session.desktop_cli("status").stdout)
    assert after["supervisor_pid"] == before["supervisor_pid"]
    assert after["parts"]["xvfb"]["pid"] == before["parts"]["xvfb"]["pid"]


def test_downloads_go_to_the_profile_downloads_dir(desktop_session):
    """Files the browser downloads must land on the session's disk where documents looks."""
    prefs = json.loads((desktop_session.info.chrome_profile / "Default" / "Preferences").read_text())
    assert prefs["download"]["default_directory"] == str(desktop_session.info.downloads_dir)
    assert desktop_session.info.downloads_dir.is_dir()


def test_resize_channel_refuses_garbage_and_keeps_serving(desktop_session):
    """A bad resize request is answered with what to send, and the channel keeps working."""
    info = desktop_session.info
    port = info.extra["resize_port"]
    assert port == json.loads(desktop_session.desktop_cli("status").stdout)["ports"]["resize"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s, s.makefile("rwb") as f:
        f.write(b"big please\n")
        f.flush()
        assert f.readline().startswith(b"error: send WIDTHxHEIGHT")
        f.write(b"640x480\n")
        f.flush()
        assert f.readline() == b"640x480\n"
        assert screen_size(info) == (640, 480)
        f.write(b"1280x800\n")
        f.flush()
        assert f.readline() == b"1280x800\n"
