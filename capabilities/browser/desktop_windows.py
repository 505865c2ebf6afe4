"""Windows as a person handles them: list, focus, move, resize, minimize, maximize, close (by
asking the window manager through EWMH, as a taskbar does), a window's own pixels even when it
is covered (XComposite), the installed applications (`.desktop` entries) and launching one.

One `WindowManager` per display, its own X connection, used from one thread at a time. Errors
are `WindowError` (a `DesktopError`), the Xlib error kept as `__cause__`; a window that closed
while a step used it is a `WindowGone`.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from Xlib import X, Xatom, error as xerror
from Xlib.ext import composite
from Xlib.protocol import event as xevent

from capabilities.contract import current_cancellation

from ..session import SessionInfo
from .desktop_display import DesktopError, Grab, XClient
from .desktop_env import desktop_env

WAIT_POLL_S = 0.05
CAPTURE_SETTLE_S = 0.15
MAX_APP_ARGS = 32
APP_DIRS = ("/usr/local/share/applications", "/usr/share/applications")


class WindowError(DesktopError):
    """A window step could not be done; the message says why and what to do."""


class WindowGone(WindowError):
    """The window closed (or never was)."""

    kind = "not_found"


@dataclass(frozen=True, kw_only=True)
class WindowInfo:
    """A top-level client window as the window manager knows it."""

    id: int
    title: str
    wm_class: str
    pid: int | None
    x: int
    y: int
    width: int
    height: int
    states: tuple[str, ...]  # "maximized", "minimized", "fullscreen", "above", "modal", ...

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title, "class": self.wm_class, "pid": self.pid,
                "x": self.x, "y": self.y, "width": self.width, "height": self.height,
                "states": list(self.states)}


_STATE_NAMES = {
    "_NET_WM_STATE_MAXIMIZED_VERT": "maximized_vert", "_NET_WM_STATE_MAXIMIZED_HORZ": "maximized_horz",
    "_NET_WM_STATE_HIDDEN": "minimized", "_NET_WM_STATE_FULLSCREEN": "fullscreen",
    "_NET_WM_STATE_ABOVE": "above", "_NET_WM_STATE_MODAL": "modal", "_NET_WM_STATE_SHADED": "shaded",
    "_NET_WM_STATE_DEMANDS_ATTENTION": "attention",
}


class WindowManager(XClient):
    """The session's windows through its window manager (xfwm4), on a connection of its own."""

    def __init__(self, session: SessionInfo) -> None:
        super().__init__(session, WindowError)
        self.has_composite = self._x.has_extension("Composite")

    def close(self) -> None:
        try:
            self._x.close()
        except Exception:
            pass

    # -- reading --------------------------------------------------------------------------

    def root_text(self, name: str) -> str | None:
        """A text property of the root window (e.g. AT_SPI_BUS)."""
        return self._call(self._text, self._root, name)

    def windows(self) -> list[WindowInfo]:
        """Client windows, oldest first (EWMH client list), including minimized ones."""
        ids = self._root_ids("_NET_CLIENT_LIST") or []
        return [w for w in (self.info(i) for i in ids) if w is not None]

    def active(self) -> WindowInfo | None:
        ids = self._root_ids("_NET_ACTIVE_WINDOW")
        return self.info(ids[0]) if ids and ids[0] else None

    def info(self, window_id: int) -> WindowInfo | None:
        """One client window's facts; None when it is gone."""
        window = self._x.create_resource_object("window", window_id)
        try:
            geometry = window.get_geometry()
            origin = self._root.translate_coords(window, 0, 0)
            title = self._title(window)
            wm_class = window.get_wm_class()
            pid = window.get_full_property(self._atom("_NET_WM_PID"), Xatom.CARDINAL)
            state = window.get_full_property(self._atom("_NET_WM_STATE"), Xatom.ATOM)
        except (xerror.XError, xerror.ConnectionClosedError) as exc:
            if isinstance(exc, xerror.ConnectionClosedError):
                raise WindowError(f"the display {self.session.display} closed") from exc
            return None
        names = []
        for atom in (state.value if state else []):
            try:
                name = self._x.get_atom_name(atom)
            except xerror.XError:
                continue
            if name in _STATE_NAMES:
                names.append(_STATE_NAMES[name])
        if "maximized_vert" in names and "maximized_horz" in names:
            names = ["maximized"] + [n for n in names if not n.startswith("maximized_")]
        return WindowInfo(id=window_id, title=title, wm_class=wm_class[1] if wm_class else "",
                          pid=int(pid.value[0]) if pid else None, x=origin.x, y=origin.y,
                          width=geometry.width, height=geometry.height, states=tuple(names))

    def find(self, *, id: int | None = None, title: str | None = None,
             wm_class: str | None = None) -> WindowInfo:
        """The window with this id, or the newest whose title (or class) contains the words."""
        if id is not None:
            if id not in (self._root_ids("_NET_CLIENT_LIST") or []):
                raise WindowGone(f"no window with id {id} (it closed?); list them with getWindows")
            found = self.info(id)
            if found is None:
                raise WindowGone(f"window {id} closed")
            return found
        windows = self.windows()
        for window in reversed(windows):
            if title is not None and title.lower() in window.title.lower():
                return window
            if wm_class is not None and wm_class.lower() == window.wm_class.lower():
                return window
        listed = "; ".join(f"{w.id} {w.title!r} ({w.wm_class})" for w in windows) or "none"
        what = f"title containing {title!r}" if title is not None else f"class {wm_class!r}"
        raise WindowGone(f"no window with a {what}; windows: {listed}")

    # -- acting (EWMH requests to the window manager) -------------------------------------

    def focus(self, window: WindowInfo) -> None:
        if "minimized" in window.states:
            self._map(window)
        self._client_message(window.id, "_NET_ACTIVE_WINDOW", [2, X.CurrentTime, 0])

    def move_resize(self, window: WindowInfo, x: int | None, y: int | None,
                    width: int | None, height: int | None) -> None:
        if "maximized" in window.states or "fullscreen" in window.states:
            self.set_maximized(window, False)
        # flags: gravity NorthWest (1) and which of x, y, width, height are given; source 2.
        flags = 1 | (2 << 12)
        for bit, value in zip((8, 9, 10, 11), (x, y, width, height)):
            if value is not None:
                flags |= 1 << bit
        self._client_message(window.id, "_NET_MOVERESIZE_WINDOW",
                             [flags, x or 0, y or 0, width or 0, height or 0])

    def minimize(self, window: WindowInfo) -> None:
        # ICCCM's iconify request (what XIconifyWindow sends): WM_CHANGE_STATE IconicState.
        self._client_message(window.id, "WM_CHANGE_STATE", [3, 0, 0, 0, 0])

    def set_maximized(self, window: WindowInfo, on: bool) -> None:
        if "minimized" in window.states:
            self._map(window)
        self._client_message(window.id, "_NET_WM_STATE",
                             [1 if on else 0, self._atom("_NET_WM_STATE_MAXIMIZED_VERT"),
                              self._atom("_NET_WM_STATE_MAXIMIZED_HORZ"), 2, 0])

    def close_window(self, window: WindowInfo) -> None:
        self._client_message(window.id, "_NET_CLOSE_WINDOW", [X.CurrentTime, 2, 0, 0, 0])

    def _map(self, window: WindowInfo) -> None:
        target = self._x.create_resource_object("window", window.id)
        self._call(target.map)
        self._call(self._x.sync)

    def _client_message(self, window_id: int, message: str, data: list[int]) -> None:
        target = self._x.create_resource_object("window", window_id)
        data = (list(data) + [0] * 5)[:5]
        ev = xevent.ClientMessage(window=target, client_type=self._atom(message), data=(32, data))
        mask = X.SubstructureRedirectMask | X.SubstructureNotifyMask
        self._call(self._root.send_event, ev, event_mask=mask)
        self._call(self._x.sync)

    def wait(self, predicate, timeout: float, what: str):
        """Poll the window list until `predicate()` gives a value (not None), or fail."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value is not None:
                return value
            if time.monotonic() >= deadline:
                raise WindowError(f"timed out after {timeout:g} s waiting for {what}")
            current_cancellation().sleep(WAIT_POLL_S)

    # -- a window's own pixels ------------------------------------------------------------

    def capture(self, window: WindowInfo) -> Grab:
        """The window's pixels (its client area), even where other windows cover it: it is
        redirected off-screen (XComposite) for the moment, repaints there, and is read from
        its pixmap."""
        if not self.has_composite:
            raise WindowError("the display has no Composite extension; grab the screen instead")
        if "minimized" in window.states:
            raise WindowError(f"window {window.id} ({window.title!r}) is minimized: it has no "
                              f"pixels; window.focus it first")
        target = self._x.create_resource_object("window", window.id)
        at = time.time()
        try:
            root = self._root.get_geometry()
            composite.redirect_window(target, composite.RedirectAutomatic)
            self._x.sync()
            try:
                # The redirected window is exposed again: give it the moment to repaint.
                time.sleep(CAPTURE_SETTLE_S)
                pixmap = composite.name_window_pixmap(target)
                try:
                    geometry = target.get_geometry()
                    image = pixmap.get_image(0, 0, geometry.width, geometry.height, X.ZPixmap, 0xFFFFFFFF)
                finally:
                    pixmap.free()
            finally:
                composite.unredirect_window(target, composite.RedirectAutomatic)
                self._x.sync()
        except xerror.BadWindow as exc:
            raise WindowGone(f"window {window.id} closed while it was captured") from exc
        except (xerror.XError, xerror.ConnectionClosedError) as exc:
            raise WindowError(f"cannot capture window {window.id}: {exc}") from exc
        width, height = geometry.width, geometry.height
        data = image.data if isinstance(image.data, (bytes, bytearray)) else bytes(image.data)
        if image.depth not in (24, 32) or len(data) < width * height * 4:
            raise WindowError(f"window {window.id} has an unusual pixel format (depth {image.depth})")
        return Grab(raw=bytearray(data[: width * height * 4]), width=width, height=height,
                    left=window.x, top=window.y, at=at, screen=(root.width, root.height))

    # -- plumbing -------------------------------------------------------------------------

    def _call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (xerror.XError, xerror.ConnectionClosedError, OSError) as exc:
            raise WindowError(f"the display {self.session.display} refused a request: {exc}") from exc


# -- applications ---------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class App:
    """An installed application: its desktop-file id, name and command line."""

    id: str
    name: str
    exec: str
    comment: str = ""

    def to_json(self) -> dict:
        return {"id": self.id, "name": self.name, "comment": self.comment}


def _app_dirs(session: SessionInfo) -> list[Path]:
    home = Path(session.home) / ".local/share/applications"
    return [home, *(Path(d) for d in APP_DIRS)]


def list_apps(session: SessionInfo) -> list[App]:
    """The `.desktop` applications a menu would show (Type=Application, not hidden), by id;
    the desktop user's own entries take precedence, as in a menu."""
    found: dict[str, App] = {}
    for folder in _app_dirs(session):
        try:
            files = sorted(folder.glob("*.desktop"))
        except OSError:
            continue
        for path in files:
            app_id = path.stem
            if app_id in found:
                continue
            app = _read_entry(path, app_id)
            if app is not None:
                found[app_id] = app
    return sorted(found.values(), key=lambda a: a.name.lower())


def _read_entry(path: Path, app_id: str) -> App | None:
    try:
        if path.stat().st_size > 256 * 1024:
            return None
        text = path.read_text(errors="replace")
    except OSError:
        return None
    section: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            current = line
            continue
        if current == "[Desktop Entry]" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            section.setdefault(key.strip(), value.strip())
    if section.get("Type") != "Application" or not section.get("Exec"):
        return None
    if section.get("NoDisplay") == "true" or section.get("Hidden") == "true":
        return None
    return App(id=app_id, name=section.get("Name", app_id), exec=section["Exec"],
               comment=section.get("Comment", ""))


def app_argv(app: App, args: list[str]) -> list[str]:
    """The app's Exec line as an argv (no shell), field codes replaced by `args` (%f/%u take
    the first, %F/%U all) and dropped otherwise; extra args go last when it has no field code."""
    try:
        parts = shlex.split(app.exec)
    except ValueError as exc:
        raise WindowError(f"the Exec line of {app.id} cannot be read: {exc}") from exc
    argv: list[str] = []
    used = False
    for part in parts:
        if part in ("%f", "%u"):
            argv += args[:1]
            used = True
        elif part in ("%F", "%U"):
            argv += args
            used = True
        elif part in ("%i", "%c", "%k", "%d", "%D", "%n", "%N", "%v", "%m"):
            continue
        else:
            argv.append(part.replace("%%", "%"))
    if not used:
        argv += args
    if not argv:
        raise WindowError(f"{app.id} has an empty command line")
    return argv


def spawn_app(session: SessionInfo, argv: list[str]) -> None:
    """Start a program on the desktop as the desktop user, detached in its own session (setsid
    forks it off, so nothing is left for this server to reap), with the session's environment
    (never this server's)."""
    as_desktop_user: dict = {}
    if os.geteuid() == 0 and session.uid != 0:
        as_desktop_user = {"user": session.uid, "group": session.gid, "extra_groups": []}
    try:
        done = subprocess.run(["setsid", "--fork", *argv], env={**desktop_env(session)},
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, cwd=session.home, timeout=10,
                              **as_desktop_user)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WindowError(f"cannot start {argv[0]}: {exc}") from exc
    if done.returncode != 0:
        raise WindowError(f"cannot start {argv[0]} (exit status {done.returncode}); is it installed?")


def launch_app(session: SessionInfo, manager: WindowManager, app_id: str, args: list[str],
               timeout: float) -> WindowInfo:
    """Start an installed app by its id (from `list_apps`) and return its new window once the
    window manager has mapped it."""
    apps = {app.id: app for app in list_apps(session)}
    app = apps.get(app_id)
    if app is None:
        close = [a for a in apps if app_id.lower() in a.lower()][:10]
        raise WindowError(f"no installed app with id {app_id!r}"
                          + (f"; did you mean {', '.join(close)}?" if close else "; list them with apps.list"))
    before = {(w.id, w.pid) for w in manager.windows()}  # X reuses the ids of closed windows
    spawn_app(session, app_argv(app, args))

    def new_window() -> WindowInfo | None:
        fresh = [w for w in manager.windows() if (w.id, w.pid) not in before]
        return fresh[-1] if fresh else None

    try:
        return manager.wait(new_window, timeout, f"a window of {app_id}")
    except WindowError as exc:
        raise WindowError(f"{app_id} was started but showed no new window within {timeout:g} s "
                          f"(it may still be starting, or it reused a window: see getWindows)") from exc
