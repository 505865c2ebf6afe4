"""What is on the screen, as assistive technology reads it: the AT-SPI tree of the desktop's
native windows (GTK apps, XFCE's panel and dialogs, Chromium's interface and pages: the session
turns Chromium's accessibility on with ACCESSIBILITY_ENABLED=1),
with element refs that later steps act on.

The client speaks AT-SPI's D-Bus API through `dbus-fast` on the session's accessibility bus,
whose address the bus launcher publishes on the root window (`AT_SPI_BUS`). Every peer it talks
to is checked to belong to the desktop user (the bus itself, the registry, each application),
so a ref can only ever reach what the desktop user's own programs expose.

A ref (`a_12`) names one accessible object (its application's bus name and object path) for as
long as this server runs; a ref whose object is gone fails at once with "read the tree again".

Errors: `AccessibilityError` (a `DesktopError`: the bus, an app or an element did not answer or
refused) and its subclass `StaleRef`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import stat
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dbus_fast import Message, MessageType, Variant
from dbus_fast.aio import MessageBus
from dbus_fast.errors import DBusError

from capabilities.contract import current_cancellation

from .desktop_display import DesktopError

CALL_TIMEOUT_S = 5.0
TREE_TIMEOUT_S = 30.0
MAX_IN_FLIGHT = 48
MAX_REFS = 200_000
VALUE_CHARS = 200
PAGE_WAKE_S = 3.0  # how long a browser's first read waits for its pages to show
MAX_WAKE_ELEMENTS = 3000
NAME_CHARS = 1000  # a page may name an element with megabytes: names and descriptions are cut here

REGISTRY = "org.a11y.atspi.Registry"
ROOT_PATH = "/org/a11y/atspi/accessible/root"
NULL_PATH = "/org/a11y/atspi/null"
ACCESSIBLE = "org.a11y.atspi.Accessible"
APPLICATION = "org.a11y.atspi.Application"
COMPONENT = "org.a11y.atspi.Component"
ACTION = "org.a11y.atspi.Action"
TEXT = "org.a11y.atspi.Text"
EDITABLE_TEXT = "org.a11y.atspi.EditableText"
VALUE = "org.a11y.atspi.Value"
SELECTION = "org.a11y.atspi.Selection"
PROPERTIES = "org.freedesktop.DBus.Properties"
SCREEN_COORDS = 0

#: AtspiStateType, in bit order.
STATE_NAMES = (
    "invalid", "active", "armed", "busy", "checked", "collapsed", "defunct", "editable", "enabled",
    "expandable", "expanded", "focusable", "focused", "has-tooltip", "horizontal", "iconified",
    "modal", "multi-line", "multiselectable", "opaque", "pressed", "resizable", "selectable",
    "selected", "sensitive", "showing", "single-line", "stale", "transient", "vertical", "visible",
    "manages-descendants", "indeterminate", "required", "truncated", "animated", "invalid-entry",
    "supports-autocompletion", "selectable-text", "is-default", "visited", "checkable", "has-popup",
    "read-only",
)
#: The states worth a reader's attention, printed in the tree; the rest are implied or noise.
SHOWN_STATES = ("focused", "checked", "indeterminate", "selected", "expanded", "pressed",
                "editable", "modal", "active", "read-only", "required", "invalid-entry")
#: Roles that only group others: printed only when they carry a name.
STRUCTURAL_ROLES = frozenset({
    "filler", "panel", "unknown", "section", "redundant object", "viewport", "layered pane",
    "glass pane", "root pane", "invalid", "scroll pane", "split pane", "internal frame",
    "tool bar", "page tab list", "grouping", "form", "document web", "embedded", "status bar",
    "statusbar", "image map", "autocomplete", "canvas", "article", "block quote", "paragraph",
    "static",
})
#: Roles a person acts on: what `screen.marks` numbers and `find {interactive}` keeps.
INTERACTIVE_ROLES = frozenset({
    "push button", "toggle button", "check box", "radio button", "menu", "menu item",
    "check menu item", "radio menu item", "combo box", "text", "entry", "password text",
    "spin button", "slider", "page tab", "link", "list item", "table cell", "tree item",
    "icon", "scroll bar", "push button menu", "editbar", "terminal", "tear off menu item",
    "toggle", "switch",
})

REF_RE = re.compile(r"^a_[0-9]+$")
ACTION_NAMES = {
    "press": ("click", "press", "activate", "jump", "open"),
    "toggle": ("toggle", "click", "press", "activate"),
    "expand": ("expand or contract", "expand", "open", "click", "press", "activate"),
    "select": ("select", "activate", "click"),
}


class AccessibilityError(DesktopError):
    """The accessibility bus, an application or an element did not do what a step asked."""


class StaleRef(AccessibilityError):
    """The ref names an element that is no longer there."""

    kind = "not_found"


@dataclass(frozen=True)
class Box:
    """A rectangle in screen pixels."""

    x: int
    y: int
    width: int
    height: int

    @property
    def center(self) -> tuple[int, int]:
        return self.x + self.width // 2, self.y + self.height // 2

    def to_json(self) -> dict:
        return {"x": self.x, "y": self.y, "width": self.width, "height": self.height}

    def touches(self, other: "Box") -> bool:
        """Whether the two rectangles share a pixel."""
        return (other.x < self.x + self.width and self.x < other.x + other.width
                and other.y < self.y + self.height and self.y < other.y + other.height)


@dataclass
class Element:
    """One accessible object as read: its ref and what a person would see of it."""

    ref: str
    role: str
    name: str
    states: frozenset[str]
    box: Box | None
    interfaces: frozenset[str]
    value: str | None = None
    description: str = ""
    depth: int = 0
    children: list["Element"] = field(default_factory=list)
    app: str = ""

    @property
    def interactive(self) -> bool:
        return (self.role in INTERACTIVE_ROLES or ACTION in self.interfaces
                or "focusable" in self.states or "editable" in self.states)

    def line(self, indent: int) -> str:
        """One line of the tree: `- role "name" [a_N] (x,y WxH) value="..." {states}`."""
        text = "  " * indent + "- " + self.role
        if self.name:
            text += f' "{_clip(self.name, 100)}"'
        text += f" [{self.ref}]"
        if self.box is not None:
            b = self.box
            text += f" ({b.x},{b.y} {b.width}x{b.height})"
        if self.value:
            text += f' value="{_clip(self.value, 80)}"'
        shown = [s for s in SHOWN_STATES if s in self.states]
        if "sensitive" not in self.states and "enabled" not in self.states:
            shown.append("disabled")
        if shown:
            text += " {" + ", ".join(shown) + "}"
        return text

    def to_json(self) -> dict:
        out: dict[str, Any] = {"ref": self.ref, "role": self.role, "name": self.name,
                               "states": sorted(self.states & set(SHOWN_STATES))}
        if self.box is not None:
            out["box"] = self.box.to_json()
        if self.value is not None:
            out["value"] = _clip(self.value, VALUE_CHARS)
        if self.app:
            out["app"] = self.app
        return out


def _squeeze(value: Any) -> str:
    """A name or description as read: whitespace runs made one space, at most NAME_CHARS."""
    return " ".join(str(value)[: NAME_CHARS * 4].split())[:NAME_CHARS]


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split()).replace('"', "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _states(bits: list[int]) -> frozenset[str]:
    value = (bits[0] if bits else 0) | ((bits[1] if len(bits) > 1 else 0) << 32)
    return frozenset(name for i, name in enumerate(STATE_NAMES) if value & (1 << i))


class RefTable:
    """Refs `a_N` for accessible objects, stable for the life of the table."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], str] = {}
        self._by_ref: dict[str, tuple[str, str]] = {}
        self._generation = 0

    def ref(self, bus_name: str, path: str) -> str:
        key = (bus_name, path)
        found = self._by_key.get(key)
        if found is None:
            if len(self._by_key) >= MAX_REFS:  # a runaway app cannot grow this without bound
                self._by_key.clear()
                self._by_ref.clear()
            self._generation += 1
            found = f"a_{self._generation}"
            self._by_key[key] = found
            self._by_ref[found] = key
        return found

    def lookup(self, ref: str) -> tuple[str, str]:
        key = self._by_ref.get(ref)
        if key is None:
            raise StaleRef(f"{ref} is not a ref this desktop gave out (or it was forgotten); read "
                           f"the screen again with accessibility.tree or accessibility.find")
        return key


@dataclass(frozen=True)
class Scope:
    """Which part of the desktop a read covers: the active window (default), a window named by
    its X id or by words of its title, or the whole desktop."""

    window: int | str | None = None
    desktop: bool = False


@dataclass(frozen=True)
class WindowHint:
    """An X window as `getWindows` reports it, to pick its accessible frame."""

    id: int
    title: str
    x: int
    y: int
    width: int
    height: int
    pid: int | None = None


def bus_address_ok(address: str, run_dir: str | None, uid: int) -> str:
    """The socket path of `address` if it is a unix socket of the desktop user in the session's
    runtime folder (AT_SPI_BUS is a root-window property any X client may set)."""
    match = re.match(r"^unix:path=([^,]+)", address or "")
    if match is None:
        raise AccessibilityError(
            f"the accessibility bus address {address!r} is not a unix socket path; restart the "
            f"session (`codedesk desktop down` and `up`)")
    path = os.path.realpath(match.group(1))
    if run_dir and not path.startswith(os.path.realpath(run_dir) + os.sep):
        raise AccessibilityError(
            f"the accessibility bus {path} is outside the session's runtime folder {run_dir}; "
            f"refusing it")
    try:
        st = os.stat(path)
    except OSError as exc:
        raise AccessibilityError(f"the accessibility bus socket {path} is gone: {exc}") from exc
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != uid:
        raise AccessibilityError(f"{path} is not the desktop user's accessibility bus socket")
    return path


class AccessibilityBus:
    """A connection to the session's AT-SPI bus, used from plain threads.

    The D-Bus client is asyncio-based; it runs on its own event loop in a daemon thread, and
    each public method waits for its coroutine there, so callers stay synchronous.
    """

    def __init__(self, address: str, desktop_uid: int) -> None:
        self.address = address
        self.desktop_uid = desktop_uid
        self.refs = RefTable()
        self._owners: dict[str, bool] = {}
        self._pages_awake: set[str] = set()  # applications (bus names) already read once
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="atspi", daemon=True)
        self._thread.start()
        self._bus: MessageBus | None = None
        self._gate: asyncio.Semaphore | None = None
        try:
            self._run(self._connect(), CALL_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    # -- plumbing -------------------------------------------------------------------------

    def _run(self, coro: Awaitable, timeout: float) -> Any:
        """Run `coro` on the bus's loop and wait for it; a cancel of the running call cancels it
        there (CallCancelled here), so a long read does not outlive its call."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        cancellation = current_cancellation()
        try:
            with cancellation.on_cancel(future.cancel):
                return future.result(timeout)
        except concurrent.futures.CancelledError:
            cancellation.check()
            raise
        except TimeoutError as exc:
            future.cancel()
            raise AccessibilityError(
                f"the accessibility bus did not answer within {timeout:.0f} s (an application "
                f"may be busy); narrow the read (window, depth, maxElements) or try again") from exc

    async def _connect(self) -> None:
        try:
            self._bus = await MessageBus(bus_address=self.address).connect()
        except (OSError, EOFError, DBusError, Exception) as exc:
            raise AccessibilityError(f"cannot connect to the accessibility bus: {exc}") from exc
        self._gate = asyncio.Semaphore(MAX_IN_FLIGHT)
        if not await self._owned_by_desktop_user(REGISTRY):
            raise AccessibilityError(
                "the accessibility registry on this bus does not belong to the desktop user; "
                "refusing it")

    def close(self) -> None:
        if self._bus is not None:
            bus = self._bus
            self._bus = None
            try:
                asyncio.run_coroutine_threadsafe(self._disconnect(bus), self._loop).result(2)
            except Exception:
                pass
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2)
        if not self._loop.is_running():
            self._loop.close()

    @staticmethod
    async def _disconnect(bus: MessageBus) -> None:
        bus.disconnect()
        try:
            await asyncio.wait_for(bus.wait_for_disconnect(), 1)
        except Exception:
            pass

    @property
    def connected(self) -> bool:
        return self._bus is not None and self._bus.connected

    async def _owned_by_desktop_user(self, name: str) -> bool:
        if name in self._owners:
            return self._owners[name]
        reply = await self._raw_call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                     "org.freedesktop.DBus", "GetConnectionUnixUser", "s", [name])
        ok = reply.message_type == MessageType.METHOD_RETURN and reply.body[0] == self.desktop_uid
        self._owners[name] = ok
        return ok

    async def _raw_call(self, dest: str, path: str, iface: str, member: str,
                        signature: str = "", body: list | None = None) -> Message:
        assert self._bus is not None and self._gate is not None
        async with self._gate, asyncio.timeout(CALL_TIMEOUT_S):  # a timer, not a task per call
            return await self._bus.call(Message(
                destination=dest, path=path, interface=iface, member=member,
                signature=signature, body=body or []))

    async def call(self, dest: str, path: str, iface: str, member: str,
                   signature: str = "", body: list | None = None) -> list:
        """One method call to an application; its reply's body. Refuses peers that are not
        the desktop user's."""
        if self._bus is None or not self._bus.connected:
            raise AccessibilityError("the accessibility bus connection closed; call again")
        if not await self._owned_by_desktop_user(dest):
            raise StaleRef(f"the application {dest} is gone (or is not the desktop user's)")
        try:
            reply = await self._raw_call(dest, path, iface, member, signature, body)
        except asyncio.TimeoutError as exc:
            raise AccessibilityError(
                f"{dest} did not answer {member} within {CALL_TIMEOUT_S:.0f} s") from exc
        if reply.message_type == MessageType.ERROR:
            error = reply.error_name or ""
            if error.endswith(("ServiceUnknown", "UnknownObject", "NameHasNoOwner",
                               "NoReply", "Disconnected")):
                raise StaleRef(f"{error}: {reply.body[0] if reply.body else ''}")
            raise AccessibilityError(f"{member} failed: {error}: {reply.body[0] if reply.body else ''}")
        return reply.body

    # -- reading --------------------------------------------------------------------------

    async def _read(self, dest: str, path: str, depth: int, with_children: bool = True) -> Element:
        """One element's facts (several calls sent at once)."""
        props, role, state, ifaces, kids = await asyncio.gather(
            self.call(dest, path, PROPERTIES, "GetAll", "s", [ACCESSIBLE]),
            self.call(dest, path, ACCESSIBLE, "GetRoleName"),
            self.call(dest, path, ACCESSIBLE, "GetState"),
            self.call(dest, path, ACCESSIBLE, "GetInterfaces"),
            self.call(dest, path, ACCESSIBLE, "GetChildren") if with_children else _nothing(),
        )
        values = props[0]
        states = _states(state[0])
        interfaces = frozenset(ifaces[0])
        element = Element(
            ref=self.refs.ref(dest, path), role=role[0],
            name=_squeeze(_prop(values, "Name", "")),
            description=_squeeze(_prop(values, "Description", "")),
            states=states, box=None, interfaces=interfaces, depth=depth)
        extras = []
        if COMPONENT in interfaces:
            extras.append(self._box(dest, path, element))
        if TEXT in interfaces and ("editable" in states or element.role in ("entry", "text", "password text", "label")):
            extras.append(self._text_value(dest, path, element))
        elif VALUE in interfaces:
            extras.append(self._numeric_value(dest, path, element))
        if extras:
            await asyncio.gather(*extras)
        element._kids = [tuple(k) for k in kids[0]] if with_children else []  # type: ignore[attr-defined]
        return element

    async def _box(self, dest: str, path: str, element: Element) -> None:
        try:
            x, y, w, h = (await self.call(dest, path, COMPONENT, "GetExtents", "u", [SCREEN_COORDS]))[0]
        except AccessibilityError:
            return
        if w > 0 and h > 0 and x > -10_000 and y > -10_000:
            element.box = Box(x, y, w, h)

    async def _text_value(self, dest: str, path: str, element: Element) -> None:
        if element.role == "password text":
            element.value = "•••"
            return
        try:
            text = (await self.call(dest, path, TEXT, "GetText", "ii", [0, VALUE_CHARS + 1]))[0]
        except AccessibilityError:
            return
        element.value = text

    async def _numeric_value(self, dest: str, path: str, element: Element) -> None:
        try:
            value = (await self.call(dest, path, PROPERTIES, "Get", "ss", [VALUE, "CurrentValue"]))[0]
        except AccessibilityError:
            return
        element.value = f"{value.value:g}" if isinstance(value, Variant) else str(value)

    async def _applications(self) -> list[tuple[str, str]]:
        kids = await self.call(REGISTRY, ROOT_PATH, ACCESSIBLE, "GetChildren")
        return [tuple(k) for k in kids[0]]

    async def _top_levels(self) -> list[Element]:
        """Every application's showing top-level windows (frames, dialogs, menus)."""
        apps = await self._applications()

        async def of_app(dest: str, path: str) -> list[Element]:
            try:
                app = await self._read(dest, path, 0)
                windows = await asyncio.gather(*(self._read(d, p, 0) for d, p in app._kids),
                                               return_exceptions=True)
            except AccessibilityError:
                return []  # it quit while we looked, or is not the desktop user's
            found = []
            for window in windows:
                if isinstance(window, Element) and "showing" in window.states and _on_screen(window):
                    window.app = app.name
                    found.append(window)
            return found

        results = await asyncio.gather(*(of_app(d, p) for d, p in apps))
        return [w for windows in results for w in windows]

    async def _walk(self, root: Element, depth: int | None, budget: "_Budget",
                    keep_hidden: bool, prune: Callable[[Element], bool] | None = None) -> None:
        """Read `root`'s subtree breadth-first, a level at a time, into `.children`; the
        children of an element `prune` answers True for are left unread."""
        level = [root]
        current = 0
        while level and (depth is None or current < depth):
            pairs = [(parent, kid) for parent in level for kid in parent._kids]
            if not pairs:
                break
            if budget.exhausted:
                budget.truncated = True
                break
            read = await asyncio.gather(*(self._read(d, p, current + 1) for _, (d, p) in pairs),
                                        return_exceptions=True)
            nxt = []
            for (parent, _), element in zip(pairs, read):
                if not isinstance(element, Element):
                    continue  # it went away while we read
                # Some views (Thunar's icons) leave `showing` off items that are on the screen.
                if not keep_hidden and "showing" not in element.states and not _on_screen(element):
                    continue
                element.app = root.app
                parent.children.append(element)
                budget.count += 1
                if prune is None or not prune(element):
                    nxt.append(element)
            level = nxt
            current += 1

    async def _wake_pages(self, window: Element) -> None:
        """Chromium builds its pages' accessibility only once something reads its windows: the
        first read finds no page at all. So the first read of a Chromium application's window
        (once per browser process) walks it, and walks again until a page shows, up to
        PAGE_WAKE_S."""
        dest, path = self.refs.lookup(window.ref)
        if dest in self._pages_awake:
            return
        self._pages_awake.add(dest)
        try:
            toolkit = (await self.call(dest, ROOT_PATH, PROPERTIES, "Get", "ss",
                                       [APPLICATION, "ToolkitName"]))[0]
            if (toolkit.value if isinstance(toolkit, Variant) else toolkit) != "Chromium":
                return
            deadline = asyncio.get_running_loop().time() + PAGE_WAKE_S
            while True:
                probe = await self._read(dest, path, 0)
                await self._walk(probe, None, _Budget(limit=MAX_WAKE_ELEMENTS), False)
                if any(e.role == "document web" and e.children for e in walk([probe])):
                    return
                if asyncio.get_running_loop().time() >= deadline:
                    return  # no page in this window, or a slow one: read what is there
                await asyncio.sleep(0.2)
        except AccessibilityError:
            return  # gone, or not a browser: the read itself will say

    # -- public ---------------------------------------------------------------------------

    def windows(self) -> list[Element]:
        """The showing top-level windows of every application."""
        return self._run(self._top_levels(), TREE_TIMEOUT_S)

    def tree(self, roots: list[Element], depth: int | None, max_elements: int,
             keep_hidden: bool = False, prune: Callable[[Element], bool] | None = None) -> bool:
        """Read the subtrees of `roots` in place (not below an element `prune` answers True
        for); True when capped by `max_elements`."""
        budget = _Budget(limit=max_elements)

        async def walk_all() -> None:
            await asyncio.gather(*(self._wake_pages(r) for r in roots))
            await asyncio.gather(*(self._walk(r, depth, budget, keep_hidden, prune) for r in roots))

        self._run(walk_all(), TREE_TIMEOUT_S)
        return budget.truncated

    def element(self, ref: str) -> Element:
        """The element a ref names, read now (its box and states as they are)."""
        dest, path = self.refs.lookup(ref)

        async def read() -> Element:
            try:
                element = await self._read(dest, path, 0, with_children=False)
            except StaleRef as exc:
                raise _stale(ref) from exc
            if "defunct" in element.states:
                raise _stale(ref)
            return element

        return self._run(read(), CALL_TIMEOUT_S * 2)

    def act(self, ref: str, action: str, value: Any = None) -> dict:
        """Do `action` to the element without the pointer; returns what was done."""
        element = self.element(ref)
        dest, path = self.refs.lookup(ref)
        return self._run(self._act(dest, path, element, action, value), CALL_TIMEOUT_S * 2)

    async def _act(self, dest: str, path: str, element: Element, action: str, value: Any) -> dict:
        if "sensitive" not in element.states and "enabled" not in element.states:
            raise AccessibilityError(f"{element.ref} ({element.role} {element.name!r}) is disabled")
        if action == "focus":
            if COMPONENT not in element.interfaces:
                raise AccessibilityError(f"{element.ref} ({element.role}) cannot take the focus")
            done = (await self.call(dest, path, COMPONENT, "GrabFocus"))[0]
            if not done:
                raise AccessibilityError(f"{element.ref} ({element.role} {element.name!r}) refused "
                                         f"the focus; click it instead (mouse.click {{ref}})")
            return {"ref": element.ref, "action": action}
        if action == "setValue":
            return await self._set_value(dest, path, element, value)
        if action == "select" and element.role in ("list item", "table cell", "tree item", "page tab",
                                                    "icon", "menu item"):
            if await self._select_in_parent(dest, path, element):
                return {"ref": element.ref, "action": action}
        names = ACTION_NAMES[action]
        index = await self._action_index(dest, path, element, names)
        done = (await self.call(dest, path, ACTION, "DoAction", "i", [index]))[0]
        if not done:
            raise AccessibilityError(f"{element.ref} refused {action}")
        return {"ref": element.ref, "action": action}

    async def _action_index(self, dest: str, path: str, element: Element, names: tuple[str, ...]) -> int:
        if ACTION not in element.interfaces:
            raise AccessibilityError(
                f"{element.ref} ({element.role} {element.name!r}) has no actions; click it "
                f"(mouse.click {{ref}}) or focus it and use the keyboard")
        actions = (await self.call(dest, path, ACTION, "GetActions"))[0]
        available = [str(a[0]).lower() for a in actions]  # localized names, where the toolkit gives them
        for index, name in enumerate(available):
            if not name:  # Chromium leaves them empty: ask for the name itself
                available[index] = str((await self.call(dest, path, ACTION, "GetName", "i", [index]))[0]).lower()
        for wanted in names:
            if wanted in available:
                return available.index(wanted)
        raise AccessibilityError(
            f"{element.ref} ({element.role} {element.name!r}) offers {available or 'no actions'}, "
            f"none of which does this; use mouse.click {{ref}} instead")

    async def _select_in_parent(self, dest: str, path: str, element: Element) -> bool:
        parent = (await self.call(dest, path, PROPERTIES, "Get", "ss", [ACCESSIBLE, "Parent"]))[0]
        parent_dest, parent_path = parent.value if isinstance(parent, Variant) else parent
        ifaces = (await self.call(parent_dest, parent_path, ACCESSIBLE, "GetInterfaces"))[0]
        if SELECTION not in ifaces:
            return False
        index = (await self.call(dest, path, ACCESSIBLE, "GetIndexInParent"))[0]
        return bool((await self.call(parent_dest, parent_path, SELECTION, "SelectChild", "i", [index]))[0])

    async def _set_value(self, dest: str, path: str, element: Element, value: Any) -> dict:
        if EDITABLE_TEXT in element.interfaces and "editable" in element.states:
            if not isinstance(value, str):
                raise AccessibilityError(f"{element.ref} is a text field: give value as a string")
            done = (await self.call(dest, path, EDITABLE_TEXT, "SetTextContents", "s", [value]))[0]
            if not done:
                raise AccessibilityError(f"{element.ref} refused the text (is it read-only?)")
            return {"ref": element.ref, "action": "setValue", "value": value}
        if VALUE in element.interfaces:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise AccessibilityError(f"{element.ref} ({element.role}) takes a number")
            await self.call(dest, path, PROPERTIES, "Set", "ssv",
                            [VALUE, "CurrentValue", Variant("d", float(value))])
            return {"ref": element.ref, "action": "setValue", "value": value}
        if "checkable" in element.states or element.role in ("check box", "toggle button", "radio button",
                                                              "check menu item", "radio menu item", "switch"):
            if not isinstance(value, bool):
                raise AccessibilityError(f"{element.ref} ({element.role}) is checked or not: give true or false")
            if ("checked" in element.states) != value:
                index = await self._action_index(dest, path, element, ACTION_NAMES["toggle"])
                await self.call(dest, path, ACTION, "DoAction", "i", [index])
            return {"ref": element.ref, "action": "setValue", "value": value}
        raise AccessibilityError(
            f"{element.ref} ({element.role} {element.name!r}) holds no value to set; focus it and "
            f"type (keyboard.type {{ref, text}}) or click it")


@dataclass
class _Budget:
    limit: int
    count: int = 0
    truncated: bool = False

    @property
    def exhausted(self) -> bool:
        return self.count >= self.limit


def _on_screen(element: Element) -> bool:
    box = element.box
    return box is not None and box.x + box.width > 0 and box.y + box.height > 0


async def _nothing() -> list:
    return [[]]


def _prop(values: dict, name: str, default: Any) -> Any:
    found = values.get(name)
    return found.value if isinstance(found, Variant) else (found if found is not None else default)


def _stale(ref: str) -> StaleRef:
    return StaleRef(f"{ref} is no longer on the screen (its window closed or changed); read the "
                    f"screen again with accessibility.tree or accessibility.find and use the new ref")


# -- reading a scope as text ----------------------------------------------------------------

def pick_windows(windows: list[Element], scope: Scope, active_hint: WindowHint | None,
                 hints: list[WindowHint]) -> list[Element]:
    """The top-level accessible windows a scope covers. X windows (ids, titles, geometry)
    are matched to accessible frames by title and position."""
    if scope.desktop:
        return windows
    if scope.window is None:
        if active_hint is not None:
            matched = _match(windows, active_hint)
            if matched:
                return matched
        active = [w for w in windows if "active" in w.states]
        if active:
            return active[:1]
        raise AccessibilityError(
            "no window is active, or the active window exposes no accessibility tree (Chromium's "
            "file chooser has none); name a window (getWindows) or pass desktop: true")
    if isinstance(scope.window, int):
        hint = next((h for h in hints if h.id == scope.window), None)
        if hint is None:
            raise AccessibilityError(f"no window with id {scope.window}; list them with getWindows")
        matched = _match(windows, hint)
        if not matched:
            raise AccessibilityError(
                f"window {scope.window} ({hint.title!r}) exposes no accessibility tree; read it "
                f"with screen.grab, or use browser_execute for a page")
        return matched
    words = scope.window.lower()
    matched = [w for w in windows if words in w.name.lower()]
    if not matched:
        titles = ", ".join(repr(w.name) for w in windows if w.name) or "none"
        raise AccessibilityError(f"no accessible window's title contains {scope.window!r}; "
                                 f"windows: {titles}")
    return matched


def _match(windows: list[Element], hint: WindowHint) -> list[Element]:
    # Titles compared as words: a toolkit may trim what the window manager shows ("Terminal - ").
    title = " ".join(hint.title.split())
    by_title = [w for w in windows if w.name and " ".join(w.name.split()) == title]
    if len(by_title) == 1:
        return by_title

    def distance(w: Element) -> int:
        if w.box is None:
            return 1 << 30
        return abs(w.box.x - hint.x) + abs(w.box.y - hint.y) + abs(w.box.width - hint.width) \
            + abs(w.box.height - hint.height)

    candidates = by_title or windows
    best = min(candidates, key=distance, default=None)
    # The accessible frame may include the window manager's decorations around the X client
    # area (a title bar and borders: some tens of pixels).
    if best is None or distance(best) > 128:
        return by_title[:1]
    return [best]


def flatten(roots: Iterable[Element], roles: frozenset[str] | None = None) -> list[tuple[int, Element]]:
    """(indent, element) in reading order; structural wrappers without a name are skipped
    (their children take their place), and with `roles` only those roles are listed."""
    out: list[tuple[int, Element]] = []

    def visit(element: Element, indent: int) -> None:
        bare = not element.name and not element.value and element.depth > 0
        listed = (element.role in roles) if roles else not (
            bare and (element.role in STRUCTURAL_ROLES or element.box is None))
        if listed:
            out.append((indent, element))
        for child in element.children:
            visit(child, indent + 1 if listed else indent)

    for root in roots:
        visit(root, 0)
    return out


def render(roots: list[Element], roles: frozenset[str] | None, max_lines: int) -> tuple[str, int, bool]:
    """The tree as text lines; (text, lines, truncated)."""
    rows = flatten(roots, roles)
    truncated = len(rows) > max_lines
    rows = rows[:max_lines]
    return "\n".join(element.line(indent) for indent, element in rows), len(rows), truncated


def matches(element: Element, name: str | None, role: str | None, text: str | None,
            states: Iterable[str] = ()) -> bool:
    """Whether an element fits a find: name and text are case-insensitive substrings (text looks
    at name, value and description), role an exact role name; every state must be present."""
    if role is not None and element.role != role.lower():
        return False
    if name is not None and name.lower() not in element.name.lower():
        return False
    if text is not None:
        haystack = " ".join((element.name, element.value or "", element.description)).lower()
        if text.lower() not in haystack:
            return False
    return all(s in element.states for s in states)


def walk(roots: Iterable[Element]) -> Iterable[Element]:
    for root in roots:
        yield root
        yield from walk(root.children)


def open_bus(session: Any, root_address: str | None) -> AccessibilityBus:
    """Connect to the session's accessibility bus, whose address the bus launcher put on the
    root window (`root_address`, the AT_SPI_BUS property), after checking it is the desktop
    user's socket in the session's runtime folder."""
    if not root_address:
        raise AccessibilityError(
            "the desktop has no accessibility bus (no AT_SPI_BUS on the root window); the session "
            "predates accessibility support: restart it (`codedesk desktop down` and `up`)")
    run_dir = session.env.get("XDG_RUNTIME_DIR")
    path = bus_address_ok(root_address, run_dir, session.uid)
    return AccessibilityBus(f"unix:path={path}", session.uid)
