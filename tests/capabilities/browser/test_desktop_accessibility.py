"""The AT-SPI client and the window manager client on the real desktop session: native GTK apps
(Mousepad, Thunar, a GTK dialog) read, found and acted on through their accessibility trees,
and the refusals that keep a script within the desktop user's reach.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest


from capabilities.browser import desktop_accessibility as A
from capabilities.browser.desktop_windows import WindowManager, WindowGone, app_argv, list_apps, spawn_app

pytestmark = [pytest.mark.desktop, pytest.mark.usefixtures("no_session_restore_prompt")]


@pytest.fixture(scope="module")
def bus(browser_desktop, wm):
    client = A.open_bus(browser_desktop.info, wm.root_text("AT_SPI_BUS"))
    yield client
    client.close()


def launch(info, wm: WindowManager, argv: list[str], title: str, timeout: float = 30):
    """Start a program as the desktop user and wait for its window (by title words)."""
    before = {(w.id, w.pid) for w in wm.windows()}  # X reuses a closed window's id
    spawn_app(info, argv)

    def new_window():
        for window in wm.windows():
            if (window.id, window.pid) not in before and title.lower() in window.title.lower():
                return window
        return None

    return wm.wait(new_window, timeout, f"a window titled {title!r}")


def read(bus: A.AccessibilityBus, wm: WindowManager, scope: A.Scope, hidden: bool = False):
    hints = [A.WindowHint(w.id, w.title, w.x, w.y, w.width, w.height, w.pid) for w in wm.windows()]
    active = wm.active()
    active_hint = None if active is None else A.WindowHint(
        active.id, active.title, active.x, active.y, active.width, active.height, active.pid)
    roots = A.pick_windows(bus.windows(), scope, active_hint, hints)
    bus.tree(roots, None, 3000, hidden)
    return roots


def find(roots, *, name=None, role=None, timeout=None):
    found = [e for e in A.walk(roots) if A.matches(e, name, role, None)]
    assert found, f"no {role} {name!r} in:\n{A.render(roots, None, 400)[0]}"
    return found[0]


def eventually(fn, timeout: float = 10.0):
    """fn()'s first truthy value, retried until the timeout (GTK applies changes in its loop)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def owned_file(info, name: str, text: str = "") -> Path:
    path = Path(info.home) / name
    path.write_text(text)
    os.chown(path, info.uid, info.gid)
    return path


def close_quietly(wm: WindowManager, window) -> None:
    try:
        wm.close_window(wm.find(id=window.id))
    except WindowGone:
        pass


def test_mousepad_text_typed_and_saved_through_its_tree(browser_desktop, wm, bus):
    """A native editor is driven by its accessibility tree alone: text set, File > Save by name."""
    info = browser_desktop.info
    path = owned_file(info, f"note-{uuid.uuid4().hex[:6]}.txt")
    window = launch(info, wm, ["mousepad", "--disable-server", str(path)], path.name)
    try:
        roots = read(bus, wm, A.Scope(window=window.id))
        text = find(roots, role="text")
        assert "editable" in text.states
        bus.act(text.ref, "setValue", "typed through AT-SPI\n")
        bus.act(find(roots, role="menu", name="File").ref, "expand")
        menu = eventually(lambda: [e for e in A.walk(read(bus, wm, A.Scope(window=window.id)))
                                   if e.role == "menu item" and e.name == "Save" and e.box])
        assert menu, "the File menu did not open"
        bus.act(menu[0].ref, "press")
        assert eventually(lambda: path.read_text() == "typed through AT-SPI\n"), path.read_text()
    finally:
        close_quietly(wm, window)


def test_thunar_file_found_by_name_with_a_box_on_screen(browser_desktop, wm, bus):
    """A file manager's files are elements with names and boxes a click can aim at."""
    info = browser_desktop.info
    folder = Path(info.home) / f"files-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    os.chown(folder, info.uid, info.gid)
    for name in ("alpha.txt", "bravo.txt"):
        owned_file(info, f"{folder.name}/{name}")
    window = launch(info, wm, ["thunar", str(folder)], folder.name)
    try:
        def bravo():
            try:
                roots = read(bus, wm, A.Scope(window=window.id))
            except A.AccessibilityError:  # a busy machine: the window is up before its tree
                return []
            return [e for e in A.walk(roots) if e.name == "bravo.txt" and e.box]

        found = eventually(bravo)
        if not found:  # the icon view exposes no items on some versions: the details view does
            roots = read(bus, wm, A.Scope(window=window.id), hidden=True)
            bus.act(find(roots, name="Details View").ref if any(
                e.name.startswith("Details View") for e in A.walk(roots)) else
                find(roots, name="List View").ref, "press")
            found = eventually(bravo)
        assert found, "bravo.txt not found by name"
        box = found[0].box
        assert window.x <= box.center[0] <= window.x + window.width
        assert window.y <= box.center[1] <= window.y + window.height
    finally:
        close_quietly(wm, window)


def test_gtk_dialog_checkbox_toggled_by_ref(browser_desktop, wm, bus):
    """A dialog's check box flips by ref, and its state says so."""
    info = browser_desktop.info
    path = owned_file(info, f"dialog-{uuid.uuid4().hex[:6]}.txt", "x")
    window = launch(info, wm, ["mousepad", "--disable-server", str(path)], path.name)
    try:
        roots = read(bus, wm, A.Scope(window=window.id), hidden=True)
        bus.act(find(roots, role="menu item", name="Find and Replace").ref, "press")
        dialog = eventually(lambda: [w for w in wm.windows() if "Replace" in w.title])
        assert dialog, "the Find and Replace dialog did not open"
        roots = read(bus, wm, A.Scope(window=dialog[0].id))
        box = find(roots, role="check box", name="Match case")
        before = "checked" in box.states
        bus.act(box.ref, "toggle")
        assert eventually(lambda: ("checked" in bus.element(box.ref).states) != before)
        bus.act(box.ref, "setValue", before)
        assert eventually(lambda: ("checked" in bus.element(box.ref).states) == before)
        close_quietly(wm, dialog[0])
    finally:
        close_quietly(wm, window)


def test_ref_of_a_closed_window_fails_at_once_with_read_again(browser_desktop, wm, bus):
    """A ref outliving its window says so at once, instead of acting on something else."""
    info = browser_desktop.info
    path = owned_file(info, f"gone-{uuid.uuid4().hex[:6]}.txt")
    window = launch(info, wm, ["mousepad", "--disable-server", str(path)], path.name)
    roots = read(bus, wm, A.Scope(window=window.id))
    ref = find(roots, role="text").ref
    wm.close_window(wm.find(id=window.id))
    wm.wait(lambda: True if window.id not in {w.id for w in wm.windows()} else None, 15, "the close")
    with pytest.raises(A.StaleRef, match="read the screen again"):
        eventually(lambda: bus.act(ref, "setValue", "x") and False, timeout=5)


def test_unknown_ref_is_refused_by_name(bus):
    """A made-up ref is refused with a message naming it."""
    with pytest.raises(A.StaleRef, match="a_999999999"):
        bus.element("a_999999999")


def test_bus_address_outside_the_session_is_refused(browser_desktop, tmp_path):
    """AT_SPI_BUS is writable by any X client: an address outside the session's runtime folder
    (e.g. the system bus) is never connected to."""
    info = browser_desktop.info
    with pytest.raises(A.AccessibilityError, match="outside the session"):
        A.open_bus(info, "unix:path=/run/dbus/system_bus_socket")
    with pytest.raises(A.AccessibilityError, match="not a unix socket"):
        A.open_bus(info, "tcp:host=127.0.0.1,port=1")
    with pytest.raises(A.AccessibilityError, match="no accessibility bus"):
        A.open_bus(info, None)
    link = Path(info.env["XDG_RUNTIME_DIR"]) / f"link-{uuid.uuid4().hex[:6]}"
    link.symlink_to("/run/dbus/system_bus_socket")
    try:
        with pytest.raises(A.AccessibilityError, match="outside the session"):
            A.open_bus(info, f"unix:path={link}")
    finally:
        link.unlink()


def test_apps_listed_from_desktop_entries_and_exec_lines_split_without_a_shell(browser_desktop):
    """Installed apps come from .desktop files; their Exec line becomes an argv, never a shell line."""
    apps = {app.id: app for app in list_apps(browser_desktop.info)}
    assert "org.xfce.mousepad" in apps or "mousepad" in apps, sorted(apps)
    app = apps.get("org.xfce.mousepad") or apps["mousepad"]
    argv = app_argv(app, ["/tmp/a b; rm -rf ~"])
    assert argv[0] == "mousepad" and argv[-1] == "/tmp/a b; rm -rf ~"
