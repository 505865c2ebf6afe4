"""The `desktop_execute` steps that read and handle native windows: the accessibility tree
(`accessibility.*`), windows (`window.*`), applications (`apps.*`), waiting for the screen
(`screen.waitStable`), and what every step may add (`captureAfter`, `changed`).

`NativeDesktop` holds the connections these need (the window manager client, the AT-SPI bus, the
damage watch), each opened on first use for the current session and reopened when it changes.
`perform` runs one of these steps; `desktop_tool` dispatches to it. Every wait here waits on the
call's cancellation (`current_cancellation`), so a cancelled call stops in it at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from capabilities.contract import current_cancellation

from ..session import SessionInfo
from . import desktop_accessibility as access
from .desktop_display import DesktopError
from .desktop_ops import (ActResult, AppResult, ElementResult, FindResult, StableResult, TreeResult,
                          WindowStateResult)
from .desktop_waits import ScreenWatch, WaitTimeout
from .desktop_windows import WindowGone, WindowInfo, WindowManager, launch_app, list_apps

#: Steps whose result says whether the screen changed.
INPUT_STEPS = ("mouse.", "keyboard.")
POLL_S = 0.1
CAPTURE_QUIET_MS = 300
CAPTURE_TIMEOUT_MS = 3000


class NativeDesktop:
    """Connections for the native steps, for one session at a time."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._wm: WindowManager | None = None
        self._bus: access.AccessibilityBus | None = None
        self._watch: ScreenWatch | None = None
        self.session: SessionInfo | None = None
        self.marks: dict[int, Any] = {}  # the last screen.marks, by number (desktop_marks.Mark)

    def use(self, session: SessionInfo) -> None:
        key = (session.display, session.env.get("XAUTHORITY"), session.env.get("XDG_RUNTIME_DIR"))
        if key != self._key:
            self.close()
            self._key = key
        self.session = session

    def close(self) -> None:
        for part in (self._bus, self._watch, self._wm):
            if part is not None:
                try:
                    part.close()
                except Exception:
                    pass
        self._wm = self._bus = self._watch = None
        self.marks = {}  # their refs belonged to the bus just closed

    @property
    def wm(self) -> WindowManager:
        if self._wm is None:
            self._wm = WindowManager(self.session)
        return self._wm

    @property
    def watch(self) -> ScreenWatch:
        if self._watch is None:
            self._watch = ScreenWatch(self.session)
        return self._watch

    @property
    def bus(self) -> access.AccessibilityBus:
        if self._bus is not None and not self._bus.connected:
            self._bus.close()
            self._bus = None
        if self._bus is None:
            self._bus = access.open_bus(self.session, self.wm.root_text("AT_SPI_BUS"))
        return self._bus

    # -- reading the accessibility tree ---------------------------------------------------

    def _hints(self) -> tuple[access.WindowHint | None, list[access.WindowHint]]:
        def hint(w: WindowInfo) -> access.WindowHint:
            return access.WindowHint(w.id, w.title, w.x, w.y, w.width, w.height, w.pid)

        active = self.wm.active()
        return (None if active is None else hint(active)), [hint(w) for w in self.wm.windows()]

    def read(self, scope: access.Scope, depth: int | None, limit: int, hidden: bool,
             prune: Callable[[access.Element], bool] | None = None) -> tuple[list, bool]:
        """The accessible windows `scope` covers, their subtrees read; a read of the whole
        desktop leaves web pages' contents unread (`_web_page`), unless `prune` says otherwise."""
        if prune is None and scope.desktop:
            prune = _web_page
        active, hints = self._hints()
        roots = access.pick_windows(self.bus.windows(), scope, active, hints)
        truncated = self.bus.tree(roots, depth, limit, hidden, prune)
        return roots, truncated

    def element_center(self, ref: str) -> tuple[int, int]:
        element = self.bus.element(ref)
        if element.box is None:
            raise access.AccessibilityError(
                f"{ref} ({element.role} {element.name!r}) has no place on the screen (hidden or "
                f"scrolled away); use accessibility.act {{ref, action}} or bring it into view")
        return element.box.center


def _scope(p: Any) -> access.Scope:
    return access.Scope(window=p.window, desktop=p.desktop)


def _element(e: access.Element) -> ElementResult:
    return ElementResult(**e.to_json())


def _window(w: WindowInfo) -> WindowStateResult:
    return WindowStateResult(**w.to_json())


def _find_window(native: NativeDesktop, p: Any) -> WindowInfo:
    return native.wm.find(id=p.id, title=p.title)


def _settled_window(native: NativeDesktop, window_id: int, check, timeout: float = 3.0) -> WindowInfo:
    """The window once the window manager has done what was asked (or as it is at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        info = native.wm.info(window_id)
        if info is None:
            raise WindowGone(f"window {window_id} closed")
        if check(info) or time.monotonic() > deadline:
            return info
        current_cancellation().sleep(0.03)


def _web_page(element: access.Element) -> bool:
    """A web page's document: thousands of elements on a busy page (a second to read), which
    browser_execute reads better; a read naming the browser's window still walks it."""
    return element.role == "document web"


def _wait_element(native: NativeDesktop, p: Any) -> ElementResult:
    deadline = time.monotonic() + p.timeout / 1000
    scope = access.Scope(window=p.window, desktop=p.window is None)
    while True:
        try:
            roots, _ = native.read(scope, None, 5000, False)
            for element in access.walk(roots):
                if access.matches(element, p.name, p.role, None, [p.state] if p.state else []):
                    return _element(element)
        except access.StaleRef:
            pass  # a window closed while it was read: read again
        if time.monotonic() >= deadline:
            what = " ".join(x for x in (p.role, repr(p.name) if p.name else None,
                                        f"({p.state})" if p.state else None) if x)
            page = "" if p.window is not None else " (a web page's elements: name its window)"
            raise WaitTimeout(f"no element {what} appeared within {p.timeout} ms; read the screen "
                              f"(accessibility.tree) to see what is there{page}")
        current_cancellation().sleep(POLL_S)


def _wait_window(native: NativeDesktop, p: Any) -> WindowStateResult | None:
    deadline = time.monotonic() + p.timeout / 1000

    def current() -> WindowInfo | None:
        try:
            return native.wm.find(title=p.title, wm_class=p.class_)
        except WindowGone:
            return None

    while True:
        window = current()
        if p.state == "closed" and window is None:
            return None
        if window is not None:
            active = native.wm.active()
            if (p.state == "open" or (p.state == "active" and active is not None and active.id == window.id)
                    or (p.state in ("maximized", "minimized") and p.state in window.states)):
                return _window(window)
        if time.monotonic() >= deadline:
            what = f"title {p.title!r}" if p.title is not None else f"class {p.class_!r}"
            raise WaitTimeout(f"no window with {what} was {p.state} within {p.timeout} ms; list "
                              f"them with getWindows")
        current_cancellation().sleep(POLL_S / 2)


def perform(native: NativeDesktop, step: Any, image) -> Any:
    """Do one native step; `image(grab)` attaches a PNG and returns its ImageResult."""
    p = step.params
    match step.type:
        case "accessibility.tree":
            roles = frozenset(r.lower() for r in p.roles) if p.roles else None
            roots, truncated = native.read(_scope(p), p.depth, p.maxElements * 4, p.hidden)
            text, lines, cut = access.render(roots, roles, p.maxElements)
            return TreeResult(tree=text, elements=lines, truncated=truncated or cut,
                              windows=[r.name for r in roots])
        case "accessibility.find":
            roots, _ = native.read(_scope(p), p.depth, 5000, p.hidden)
            found = [e for e in access.walk(roots) if access.matches(e, p.name, p.role, p.text)]
            return FindResult(matches=len(found), elements=[_element(e) for e in found[: p.maxElements]])
        case "accessibility.act":
            done = native.bus.act(p.ref, p.action, p.value)
            return ActResult(**done)
        case "accessibility.waitFor":
            return _wait_element(native, p)
        case "window.focus":
            window = _find_window(native, p)
            native.wm.focus(window)
            return _window(_settled_window(
                native, window.id, lambda w: (native.wm.active() or w).id == window.id))
        case "window.move":
            window = _find_window(native, p)
            native.wm.move_resize(window, p.x, p.y, None, None)
            return _window(_settled_window(native, window.id, lambda w: (w.x, w.y) != (window.x, window.y)))
        case "window.resize":
            window = _find_window(native, p)
            native.wm.move_resize(window, None, None, p.width, p.height)
            return _window(_settled_window(native, window.id, lambda w: (w.width, w.height) == (p.width, p.height)))
        case "window.minimize":
            window = _find_window(native, p)
            native.wm.minimize(window)
            return _window(_settled_window(native, window.id, lambda w: "minimized" in w.states))
        case "window.maximize":
            window = _find_window(native, p)
            native.wm.set_maximized(window, True)
            return _window(_settled_window(native, window.id, lambda w: "maximized" in w.states))
        case "window.close":
            native.wm.close_window(_find_window(native, p))
            return None
        case "window.capture":
            return image(native.wm.capture(_find_window(native, p)))
        case "window.waitFor":
            return _wait_window(native, p)
        case "apps.list":
            return [AppResult(**app.to_json()) for app in list_apps(native.session)]
        case "apps.launch":
            return _window(launch_app(native.session, native.wm, p.id, p.args, p.timeout / 1000))
        case "screen.waitStable":
            region = None if p.region is None else access.Box(p.region.left, p.region.top, p.region.width,
                                                              p.region.height)
            return StableResult(**native.watch.wait_stable(p.ms, p.timeout, region))
    raise AssertionError(f"operation {step.type} has no implementation")


def handles(step_type: str) -> bool:
    return step_type.startswith(("accessibility.", "window.", "apps.")) or step_type == "screen.waitStable"


def before_step(native: NativeDesktop, step: Any) -> None:
    """Mark the screen before an input step, so its result can say whether it changed."""
    if step.type.startswith(INPUT_STEPS):
        try:
            native.watch.mark()
        except DesktopError:
            pass


def after_step(native: NativeDesktop, step: Any, entry: dict, grab_screen, image) -> None:
    """Add `changed` (input steps) and `capture` (captureAfter) to a step's result entry."""
    if step.type.startswith(INPUT_STEPS):
        try:
            entry["changed"] = native.watch.changed()
        except DesktopError:
            pass
    if getattr(step, "captureAfter", False):
        try:
            native.watch.wait_stable(CAPTURE_QUIET_MS, CAPTURE_TIMEOUT_MS)
            if entry.get("changed") is False and native.watch.changed_while_waiting:
                entry["changed"] = True  # it drew after the step was handled (a menu on a busy machine)
        except WaitTimeout:  # still changing: the capture shows the moment the wait gave up
            if "changed" in entry:
                entry["changed"] = True
        entry["capture"] = image(grab_screen())
